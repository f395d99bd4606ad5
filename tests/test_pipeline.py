"""The pipeline's stages: completion markers, skipping and re-running, and the whole pipeline on a tiny model.

The end-to-end run uses a two-layer Llama built in the test. A random model never writes a correct function, so
its answering turns are scripted (half the episodes submit the task's reference, half a plausible wrong answer):
rewards then differ within each task, which is what critic pairs need. Everything else is the real pipeline:
rollouts in the real environment with the offline simulator and grader, critic and policy training with LoRA,
candidate sampling from the tiny model, critic ranking, evaluation, the report.
"""

from __future__ import annotations

import io
import json
import random
from datetime import datetime, timezone
from pathlib import Path

import pytest
from builtin_wrong_answers import WRONG_ANSWERS
from helpers_tiny_models import save_tiny_model

pytest.importorskip("trl")

from sweet_trl import pipeline
from sweet_trl.pipeline import MARKER, Stage, StageError, StageResult, run_stage
from sweet_trl.pipeline.runner import StageContext
from sweet_trl.pipeline_config import RunArguments

STAGE_ORDER = ["collect", "critic_pairs", "train_critic", "sample_candidates", "rank", "policy_pairs",
               "train_policy", "evaluate/zero_shot", "evaluate/sweet"]


# ---------------------------------------------------------------------------------------------------------------
# The stage runner, with toy stages (fast)

def _toy_stages(calls: list[str]):
    from dataclasses import dataclass

    @dataclass
    class ToyArgs:
        value: int = 1

    def make(name, inputs=()):
        def run(ctx, args):
            calls.append(name)
            upstream = sum(json.loads(ctx.input_path(i, "data").read_text()) for i in inputs)
            (ctx.dir / "data.json").write_text(json.dumps(args.value + upstream))
            return StageResult(counts={"items": args.value}, outputs={"data": "data.json"})

        return Stage(name, name, lambda: (ToyArgs,), run, inputs=lambda *a: list(inputs))

    return ToyArgs, make("first"), make("second", inputs=("first",))


def test_stage_runs_once_then_skips_and_reruns_when_its_config_or_input_changes(tmp_path):
    calls: list[str] = []
    ToyArgs, first, second = _toy_stages(calls)
    run = RunArguments(run_dir=str(tmp_path))
    out = io.StringIO()

    marker = run_stage(first, (run, ToyArgs(2)), stream=out)
    assert marker["counts"] == {"items": 2} and (tmp_path / "first" / MARKER).exists()
    on_disk = json.loads((tmp_path / "first" / MARKER).read_text())
    assert list(on_disk) == list(marker)  # key order kept (a stage lists its main product first)
    run_stage(second, (run, ToyArgs(1)), stream=out)
    assert json.loads((tmp_path / "second" / "data.json").read_text()) == 3
    assert calls == ["first", "second"]

    out = io.StringIO()
    run_stage(first, (run, ToyArgs(2)), stream=out)
    run_stage(second, (run, ToyArgs(1)), stream=out)
    assert calls == ["first", "second"]
    assert out.getvalue().count("skipped") == 2

    # A new configuration upstream re-runs it, and the changed input re-runs the stage below.
    out = io.StringIO()
    run_stage(first, (run, ToyArgs(5)), stream=out)
    run_stage(second, (run, ToyArgs(1)), stream=out)
    assert calls == ["first", "second", "first", "second"]
    assert "running again" in out.getvalue()
    assert json.loads((tmp_path / "second" / "data.json").read_text()) == 6

    # --force runs a complete stage again.
    run_stage(first, (RunArguments(run_dir=str(tmp_path), force=True), ToyArgs(5)), stream=io.StringIO())
    assert calls[-1] == "first" and len(calls) == 5


def test_a_stage_run_again_says_which_setting_or_input_changed(tmp_path):
    from sweet_trl.pipeline.runner import WouldRun, plan_only

    calls: list[str] = []
    ToyArgs, first, second = _toy_stages(calls)

    def run(stage, value, **run_options):
        out = io.StringIO()
        run_stage(stage, (RunArguments(run_dir=str(tmp_path), **run_options), ToyArgs(value)), stream=out)
        return out.getvalue()

    run(first, 2), run(second, 1)
    made = json.loads((tmp_path / "first" / MARKER).read_text())["fingerprint"]
    with plan_only(), pytest.raises(WouldRun, match="differ from the ones it was made with: value: 2 -> 5"):
        run(first, 5)
    assert "[first] running again: value: 2 -> 5\n" in run(first, 5)
    redone = json.loads((tmp_path / "first" / MARKER).read_text())["fingerprint"]
    assert f"[second] running again: input first changed ({made} -> {redone})\n" in run(second, 1)
    run(first, 5, force=True)  # the same settings, made again: the stage after it names it
    assert "[second] running again: input first ran again\n" in run(second, 1)
    assert "[second] running again: value: 1 -> 3\n" in run(second, 3)
    assert "[second] running again: --force\n" in run(second, 3, force=True)
    assert calls == ["first", "second", "first", "second", "first", "second", "second", "second"]


def test_a_stage_linked_from_another_run_is_read_back_and_never_cleared_with_other_settings(tmp_path):
    calls: list[str] = []
    ToyArgs, first, second = _toy_stages(calls)
    made_here, linking = tmp_path / "made_here", tmp_path / "linking"
    run_stage(first, (RunArguments(run_dir=str(made_here)), ToyArgs(2)), stream=io.StringIO())
    linking.mkdir()
    (linking / "first").symlink_to(made_here / "first", target_is_directory=True)
    out = io.StringIO()
    run_stage(first, (RunArguments(run_dir=str(linking)), ToyArgs(2)), stream=out)  # the same settings: read back
    run_stage(second, (RunArguments(run_dir=str(linking)), ToyArgs(1)), stream=out)
    assert calls == ["first", "second"] and "skipped" in out.getvalue()
    before = (made_here / "first" / MARKER).read_text()
    for run, args in ((RunArguments(run_dir=str(linking)), ToyArgs(7)),
                      (RunArguments(run_dir=str(linking), force=True), ToyArgs(2))):
        with pytest.raises(StageError, match="links to .*made_here/first.* it is not touched"):
            run_stage(first, (run, args), stream=io.StringIO())
    assert (made_here / "first" / MARKER).read_text() == before and calls == ["first", "second"]
    # a run whose own folder is a link (runs/ on another disk) is not a shared stage
    (tmp_path / "elsewhere").symlink_to(made_here, target_is_directory=True)
    run_stage(first, (RunArguments(run_dir=str(tmp_path / "elsewhere")), ToyArgs(3)), stream=io.StringIO())
    assert calls[-1] == "first" and json.loads((made_here / "first" / "data.json").read_text()) == 3


def test_an_option_added_later_keeps_finished_runs_valid_at_its_neutral_value(tmp_path, monkeypatch):
    from dataclasses import dataclass

    from sweet_trl.pipeline import fingerprint

    @dataclass
    class Before:
        pairs_per_turn: int = 4

    @dataclass
    class After:
        pairs_per_turn: int = 4
        turns: list[int] | None = None

    @dataclass
    class Other:  # the same option name in another options class is fingerprinted at every value
        pairs_per_turn: int = 4
        turns: list[int] | None = None

    monkeypatch.setitem(pipeline.runner.NEUTRAL_WHEN_ADDED, "After", {"turns": None})
    stage = Stage("pairs", "pairs", lambda: (Before,), lambda ctx, args: StageResult())
    run = RunArguments(run_dir=str(tmp_path))
    assert fingerprint(stage, (run, After()), {}) == fingerprint(stage, (run, Before()), {})
    assert fingerprint(stage, (run, After(turns=[1])), {}) != fingerprint(stage, (run, Before()), {})
    assert fingerprint(stage, (run, Other()), {}) != fingerprint(stage, (run, Before()), {})


def test_fingerprint_covers_the_run_fields_read_the_files_named_and_the_upstream_runs(tmp_path):
    import os
    from dataclasses import dataclass

    @dataclass
    class FileArgs:
        source: str = ""

    calls: list[str] = []

    def read(ctx, args):
        calls.append(ctx.stage)
        (ctx.dir / "data.json").write_text(json.dumps([ctx.run.max_turns, Path(args.source).read_text()]))
        return StageResult(outputs={"data": "data.json"})

    def after(ctx, args):
        calls.append(ctx.stage)
        (ctx.dir / "data.json").write_text(ctx.input_path("reader", "data").read_text())
        return StageResult(outputs={"data": "data.json"})

    reader = Stage("reader", "reader", lambda: (FileArgs,), read, run_fields=("max_turns",))
    downstream = Stage("after", "after", lambda: (FileArgs,), after, inputs=lambda *a: ["reader"])
    source = tmp_path / "rows.txt"
    source.write_text("a")
    args = (FileArgs(str(source)),)

    def run(**run_fields):
        out = io.StringIO()
        run_stage(reader, (RunArguments(run_dir=str(tmp_path / "run"), **run_fields), *args), stream=out)
        return out.getvalue()

    assert "running" in run() and calls == ["reader"]
    # A run field the stage does not read changes nothing (and deletes nothing).
    assert "skipped" in run(eval_tasks="elsewhere.jsonl", max_eval_tasks=5, simulator_base_url="http://x")
    assert "running again" in run(max_turns=4) and calls == ["reader", "reader"]
    # The file an option names is part of the fingerprint by its size and time, not only its name.
    source.write_text("a longer version")
    os.utime(source, ns=(source.stat().st_atime_ns, source.stat().st_mtime_ns + 10**9))
    assert f"running again: {source} was rewritten since it ran" in run(max_turns=4) and len(calls) == 3
    # The stage after it runs again when the upstream stage was re-run, even with --force and the same options.
    run_stage(downstream, (RunArguments(run_dir=str(tmp_path / "run")), FileArgs()), stream=io.StringIO())
    run(max_turns=4, force=True)
    out = io.StringIO()
    run_stage(downstream, (RunArguments(run_dir=str(tmp_path / "run")), FileArgs()), stream=out)
    assert "running again" in out.getvalue() and calls[-2:] == ["reader", "after"]

    # Reading a run field the stage did not declare is a bug in the stage: it says so.
    def sneaky(ctx, args):
        return StageResult(counts={"turns": ctx.run.max_turns})

    with pytest.raises(AttributeError, match="run_fields"):
        run_stage(Stage("sneaky", "sneaky", lambda: (FileArgs,), sneaky),
                  (RunArguments(run_dir=str(tmp_path / "run")), FileArgs()), stream=io.StringIO())


def test_a_stage_finished_under_an_earlier_form_of_its_fingerprint_is_read_back_not_cleared(tmp_path, monkeypatch):
    from dataclasses import dataclass

    from sweet_trl.pipeline import runner
    from sweet_trl.pipeline.runner import EarlierForm

    @dataclass
    class PickArgs:
        selector: str = "critic"

    calls: list[str] = []

    def pick(ctx, args):
        calls.append(args.selector)
        (ctx.dir / "picked.json").write_text("[]")
        return StageResult(outputs={"picked": "picked.json"})

    def run(stage, run_dir, selector="critic"):
        out = io.StringIO()
        run_stage(stage, (RunArguments(run_dir=str(tmp_path / run_dir), train_tasks="procedural:train"),
                          PickArgs(selector)), stream=out)
        return out.getvalue()

    # made when the stage read the train tasks and hashed its selector as given
    then = Stage("pick", "pick", lambda: (PickArgs,), pick, run_fields=("max_turns", "train_tasks"))
    run(then, "a"), run(then, "b")
    # since: the train tasks no longer read, the selector's default left out of the hash (added as neutral)
    monkeypatch.setitem(runner.NEUTRAL_WHEN_ADDED, "PickArgs", {"selector": "critic"})
    changed = Stage("pick", "pick", lambda: (PickArgs,), pick, run_fields=("max_turns",))
    now = Stage("pick", "pick", lambda: (PickArgs,), pick, run_fields=("max_turns",),
                earlier_forms=(EarlierForm(run_fields=("max_turns", "train_tasks"), neutral_left_out=False),))
    assert "skipped" in run(now, "a") and calls == ["critic", "critic"]
    assert (tmp_path / "a" / "pick" / "picked.json").exists()
    assert "running again" in run(now, "a", "random") and calls[-1] == "random"  # what it computes changed
    assert "running again" in run(changed, "b")  # without the earlier form the finished stage would be redone


def test_in_plan_mode_a_stage_that_would_run_says_so_and_touches_nothing(tmp_path):
    from sweet_trl.pipeline.runner import WouldRun, plan_only

    calls: list[str] = []
    ToyArgs, first, _ = _toy_stages(calls)
    run_args = RunArguments(run_dir=str(tmp_path))
    with plan_only(), pytest.raises(WouldRun, match="first .*would run: it is not complete"):
        run_stage(first, (run_args, ToyArgs(1)), stream=io.StringIO())
    assert not (tmp_path / "first").exists() and calls == []
    run_stage(first, (run_args, ToyArgs(1)), stream=io.StringIO())
    made = {p: p.stat().st_mtime_ns for p in (tmp_path / "first").iterdir()}
    out = io.StringIO()
    with plan_only():
        run_stage(first, (run_args, ToyArgs(1)), stream=out)  # complete: read back as always
        with pytest.raises(WouldRun, match="settings or inputs differ"):
            run_stage(first, (run_args, ToyArgs(2)), stream=io.StringIO())
    assert "skipped" in out.getvalue() and len(calls) == 1
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "first").iterdir()} == made  # not cleared


def test_an_integer_in_the_config_for_a_float_option_is_that_float_and_finished_stages_stand(tmp_path):
    from dataclasses import dataclass

    from sweet_trl.pipeline_config import parse_stage_args

    @dataclass
    class RateArgs:
        rate: float = 1.0
        steps: int = 1

    calls: list[str] = []

    def record(ctx, args):
        calls.append(f"{args.rate!r}")
        return StageResult(counts={"steps": args.steps})

    stage = Stage("toy", "toy", lambda: (RateArgs,), record)

    def parse(section, cli=()):
        return parse_stage_args((RunArguments, RateArgs), "toy", {"run_dir": str(tmp_path), "toy": section}, cli,
                                sections=["toy"])

    def run(args):
        out = io.StringIO()
        run_stage(stage, args, stream=out)
        return out.getvalue()

    from_file = parse({"rate": 3, "steps": 2})
    assert from_file[1].rate == 3.0 and isinstance(from_file[1].rate, float) and from_file[1].steps == 2
    # A stage finished before the conversion hashed the integer as written: it is not redone.
    assert "running" in run((from_file[0], RateArgs(rate=3, steps=2))) and calls == ["3"]
    assert "skipped" in run(from_file) and calls == ["3"]
    assert "running again" in run(parse({"rate": 3.5, "steps": 2})) and calls == ["3", "3.5"]
    assert "running again" in run(parse({"rate": 3, "steps": 2})) and calls[-1] == "3.0"
    # The file's 3 and the command line's 3 are one setting.
    assert "skipped" in run(parse({"rate": 1, "steps": 2}, ["--rate", "3"]))
    assert "skipped" in run(parse({}, ["--rate", "3", "--steps", "2"])) and len(calls) == 3


def test_stage_without_its_input_says_which_command_to_run(tmp_path):
    _, _, second = _toy_stages([])
    ToyArgs = second.arg_types()[0]
    with pytest.raises(StageError, match="run `sweet-rl first`"):
        run_stage(second, (RunArguments(run_dir=str(tmp_path)), ToyArgs()), stream=io.StringIO())
    assert not (tmp_path / "second" / MARKER).exists()


def test_a_linked_stage_folder_that_must_run_again_is_left_to_the_user(tmp_path):
    _, first, _ = _toy_stages([])
    ToyArgs = first.arg_types()[0]
    shared = tmp_path / "study"
    run_stage(first, (RunArguments(run_dir=str(shared)), ToyArgs(1)), stream=io.StringIO())
    variant = tmp_path / "variant"
    variant.mkdir()
    (variant / "first").symlink_to(shared / "first")
    out = io.StringIO()
    run_stage(first, (RunArguments(run_dir=str(variant)), ToyArgs(1)), stream=out)  # same options: reused
    assert "skipped" in out.getvalue()
    with pytest.raises(StageError, match="links to .*remove the link"):
        run_stage(first, (RunArguments(run_dir=str(variant)), ToyArgs(2)), stream=io.StringIO())
    assert json.loads((shared / "first" / "data.json").read_text()) == 1  # the other run's stage is intact
    assert (shared / "first" / MARKER).exists()


def test_interrupted_stage_leaves_no_marker_and_resumes_with_its_files(tmp_path):
    from dataclasses import dataclass

    @dataclass
    class Args:
        fail: bool = False

    seen: list[list[str]] = []

    def run(ctx, args):
        seen.append(sorted(p.name for p in ctx.dir.iterdir()))
        (ctx.dir / "partial.jsonl").write_text("{}\n")
        if args.fail:
            raise KeyboardInterrupt
        return StageResult(outputs={"partial": "partial.jsonl"})

    stage = Stage("work", "work", lambda: (Args,), run)
    run_args = RunArguments(run_dir=str(tmp_path))
    with pytest.raises(KeyboardInterrupt):
        run_stage(stage, (run_args, Args(fail=True)), stream=io.StringIO())
    assert not (tmp_path / "work" / MARKER).exists()
    # Same configuration: the partial output is kept for the stage to resume from.
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        run_stage(stage, (run_args, Args(fail=True)), stream=out)
    assert "resuming" in out.getvalue() and "partial.jsonl" in seen[-1]
    # Another configuration: the interrupted run's files are cleared first.
    out = io.StringIO()
    run_stage(stage, (run_args, Args(fail=False)), stream=out)
    assert "clearing" in out.getvalue() and "partial.jsonl" not in seen[-1]
    assert (tmp_path / "work" / MARKER).exists() and not (tmp_path / "work" / "_RUNNING.json").exists()


def test_status_tells_done_running_interrupted_and_linked_stages_apart(tmp_path, capsys):
    import os
    import subprocess
    import sys
    from dataclasses import dataclass

    from sweet_trl.cli import main
    from sweet_trl.pipeline.status import run_status

    @dataclass
    class Args:
        fail: bool = False

    during: list[dict] = []

    def run(ctx, args):
        during.append(json.loads((ctx.dir / "_RUNNING.json").read_text()))
        if args.fail:
            raise KeyboardInterrupt
        return StageResult(counts={"episodes": 7})

    run_dir = tmp_path / "run"
    run_stage(Stage("collect", "collect", lambda: (Args,), run), (RunArguments(run_dir=str(run_dir)), Args()),
              stream=io.StringIO())
    with pytest.raises(KeyboardInterrupt):
        run_stage(Stage("rank", "rank", lambda: (Args,), run), (RunArguments(run_dir=str(run_dir)), Args(True)),
                  stream=io.StringIO())
    assert during[0]["pid"] == during[1]["pid"] == os.getpid() and during[0]["host"]  # it names its process
    # the interrupted stage's process is gone: another process's, which has ended, stands in for it
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          check=True, capture_output=True, text=True)
    marker = json.loads((run_dir / "rank" / "_RUNNING.json").read_text())
    (run_dir / "rank" / "_RUNNING.json").write_text(json.dumps({**marker, "pid": int(gone.stdout)}))
    (run_dir / "evaluate" / "zero_shot").mkdir(parents=True)  # a stage running now, in this very process
    (run_dir / "evaluate" / "zero_shot" / "_RUNNING.json").write_text(json.dumps(marker))
    (run_dir / "evaluate" / "zero_shot" / "trajectories.jsonl").write_text("{}\n{}\n{}\n")  # three episodes so far
    (run_dir / "collect" / "model").mkdir()  # a stage's own folders are not listed, nor looked into
    (run_dir / "collect" / "model" / MARKER).write_text(json.dumps({"dir": "collect/model", "seconds": 1}))
    other = tmp_path / "other"
    other.mkdir()
    (other / "collect").symlink_to(run_dir / "collect")
    (other / "notes").mkdir()  # a folder of no stage is not listed

    stages = {s.path: s for s in run_status(run_dir)}
    assert {path: s.state for path, s in stages.items()} == {"collect": "done", "rank": "interrupted",
                                                             "evaluate/zero_shot": "running"}
    assert stages["evaluate/zero_shot"].summary.endswith("; 3 lines in trajectories.jsonl")
    linked = run_status(other)
    assert [(s.path, s.state, s.linked_to) for s in linked] == [("collect", "done", str(run_dir / "collect"))]
    assert main(["status", str(run_dir), "--running"]) == 0
    text = capsys.readouterr().out
    assert "interrupted" in text and "running" in text and "episodes=7" not in text
    assert text.splitlines()[-1].startswith("1 stages done here")  # the count covers the stages not listed
    assert main(["status", str(other)]) == 0
    assert "done, linked" in capsys.readouterr().out
    assert main(["status", str(other), "--running"]) == 0  # nothing active: said, and still counted
    assert capsys.readouterr().out.splitlines() == [f"{other}: no stage running, interrupted, failed or unknown",
                                                    "0 stages done here in 0.0 min"]
    assert main(["status", str(tmp_path / "absent")]) == 2


def test_status_shows_a_stage_whose_input_was_made_again_since_as_stale(tmp_path, capsys):
    from sweet_trl.cli import main
    from sweet_trl.pipeline.status import run_status

    calls: list[str] = []
    ToyArgs, first, second = _toy_stages(calls)

    def copy_second(ctx, args):
        (ctx.dir / "data.json").write_text(ctx.input_path("second", "data").read_text())
        return StageResult(counts={"items": args.value}, outputs={"data": "data.json"})

    third = Stage("third", "third", lambda: (ToyArgs,), copy_second, inputs=lambda *a: ["second"])
    run = RunArguments(run_dir=str(tmp_path / "run"))
    for stage in (first, second, third):
        run_stage(stage, (run, ToyArgs(1)), stream=io.StringIO())
    assert {s.path: s.stale for s in run_status(tmp_path)} == {"run/first": None, "run/second": None,
                                                               "run/third": None}

    run_stage(first, (run, ToyArgs(2)), stream=io.StringIO())  # another setting: the stages after it are stale
    stages = {s.path: s for s in run_status(tmp_path / "run")}
    assert {path: s.stale for path, s in stages.items()} == {
        "first": None, "second": "first changed since", "third": "first changed since, via second"}
    assert main(["status", str(tmp_path / "run")]) == 0
    text = capsys.readouterr().out
    assert "done, stale" in text and "(first changed since) items=1" in text and "3 stages done here" in text
    assert text.rstrip().endswith(", 2 stale")

    run_stage(second, (run, ToyArgs(1)), stream=io.StringIO())
    assert [s.stale for s in run_status(tmp_path / "run")] == [None, None, "second changed since"]
    run_stage(third, (run, ToyArgs(1)), stream=io.StringIO())
    # made again with --force and the same settings (the same fingerprint): still another run of it
    run_stage(second, (RunArguments(run_dir=str(tmp_path / "run"), force=True), ToyArgs(1)), stream=io.StringIO())
    assert [s.stale for s in run_status(tmp_path / "run")] == [None, None, "second changed since"]
    (tmp_path / "run" / "second" / MARKER).unlink()  # cleared, running again
    assert run_status(tmp_path / "run")[-1].stale == "second not complete"

    # a stage linked into another run (a study round reading the start's critic) has its inputs where it lives
    run_stage(second, (run, ToyArgs(1)), stream=io.StringIO())
    (tmp_path / "round2").mkdir()
    (tmp_path / "round2" / "second").symlink_to("../run/second", target_is_directory=True)
    run_stage(third, (RunArguments(run_dir=str(tmp_path / "round2")), ToyArgs(1)), stream=io.StringIO())
    assert {s.path: s.stale for s in run_status(tmp_path / "round2")} == {"second": None, "third": None}
    assert [s.stale for s in run_status(tmp_path / "round2" / "third")] == [None]  # the stage alone, too

    # a marker whose output is gone (deleted; a marker copied or joined without its file): done in name only
    (tmp_path / "run" / "third" / "data.json").unlink()
    [third_status] = [s for s in run_status(tmp_path / "run") if s.path == "third"]
    assert third_status.missing == ("data.json",)
    assert main(["status", str(tmp_path / "run")]) == 0
    text = capsys.readouterr().out
    assert "done, stale, output missing" in text and "(no data.json) (second changed since) items=1" in text
    assert text.rstrip().endswith(", 1 with output missing")


def test_a_stage_that_raises_is_recorded_as_failed_until_a_later_run_succeeds(tmp_path, capsys):
    from dataclasses import dataclass

    from sweet_trl.cli import main
    from sweet_trl.pipeline.runner import FAILED
    from sweet_trl.pipeline.status import run_status

    @dataclass
    class Args:
        x: int = 0

    outcomes = ["error", "interrupt", "error", "done"]  # each attempt's, with the same settings

    def run(ctx, args):
        (ctx.dir / "partial.jsonl").write_text("{}\n{}\n")
        outcome = outcomes.pop(0)
        if outcome == "error":
            raise ValueError("the reward model is unreachable\nsecond line of the message")
        if outcome == "interrupt":
            raise KeyboardInterrupt
        return StageResult(counts={"rows": 2})

    stage, run_args = Stage("rank", "rank", lambda: (Args,), run), RunArguments(run_dir=str(tmp_path))
    with pytest.raises(ValueError, match="unreachable"):  # raised as before
        run_stage(stage, (run_args, Args()), stream=io.StringIO())
    record = json.loads((tmp_path / "rank" / FAILED).read_text())
    assert record["error"] == "ValueError: the reward model is unreachable" and record["failed_at"]
    assert (tmp_path / "rank" / "_RUNNING.json").exists()  # what it wrote is resumed from once the cause is fixed
    [status] = run_status(tmp_path)
    assert status.state == "failed"
    assert status.summary.startswith("ValueError: the reward model is unreachable; at ")
    assert main(["status", str(tmp_path), "--running"]) == 0
    text = capsys.readouterr().out
    assert "failed" in text and "ValueError: the reward model is unreachable" in text and ", 1 failed" in text

    out = io.StringIO()  # the same settings again: it resumes, and says from what
    with pytest.raises(KeyboardInterrupt):  # an interrupt is no failure: the record is the last attempt's
        run_stage(stage, (run_args, Args()), stream=out)
    assert "resuming a run that failed (ValueError: the reward model is unreachable, at " in out.getvalue()
    # no longer "failed" (it reads as running: the process that was interrupted is this test's, alive)
    assert not (tmp_path / "rank" / FAILED).exists() and run_status(tmp_path)[0].state == "running"
    with pytest.raises(ValueError):
        run_stage(stage, (run_args, Args()), stream=io.StringIO())
    assert run_status(tmp_path)[0].state == "failed"
    run_stage(stage, (run_args, Args()), stream=io.StringIO())  # a later success clears the record
    assert not (tmp_path / "rank" / FAILED).exists() and run_status(tmp_path)[0].state == "done"
    assert outcomes == []


def test_status_lines_lead_with_key_figures_and_tell_how_far_a_running_stage_got(tmp_path):
    import os
    import socket

    from sweet_trl.pipeline.status import format_status, run_status

    def folder(path, files):
        for name, data in files.items():
            (tmp_path / path / name).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / path / name).write_text(data if isinstance(data, str) else json.dumps(data))

    counts = {"episodes": 160, "tasks": 80, "infra_errors": 0, "simulator_errors": 2, "generated_tokens": 7387}
    metrics = {"tests_passed": 40.6, "success_rate": 0.269, "mean_reward": 0.414, "answered_rate": 1.0,
               "mean_turns": 1.99, "pass@1": 0.269, "pass@2": 0.32, "pass@4": 0.375}
    folder("evaluate/merged", {MARKER: {"dir": "evaluate/merged", "seconds": 60, "counts": counts, "metrics": metrics}})
    folder("sample_candidates", {MARKER: {"dir": "sample_candidates", "seconds": 60, "counts": {"turn_states": 64}}})
    # an evaluation folder is named by a hash of its policy: the line names the policy by its last folders
    folder("evaluate/merged-7d8c8a", {MARKER: {"dir": "evaluate/merged-7d8c8a", "seconds": 60, "counts": counts,
                                               "info": {"policy": "/r/fair/sweet_best/round2/train_policy_best/merged"}}})
    folder("evaluate/zero_shot", {MARKER: {"dir": "evaluate/zero_shot", "seconds": 60, "counts": counts,
                                           "info": {"policy": "zero_shot"}}})
    running = {"started_at": "2026-01-01T00:00:00+00:00", "pid": os.getpid(), "host": socket.gethostname()}
    header = json.dumps({"format": 1, "resume_of": {}})  # the resumable file's first line: no row
    folder("rank", {"_RUNNING.json": {**running, "stage": "rank", "dir": "rank"},
                    "ranked.partial.jsonl": header + "\n" + "{}\n" * 32, "trajectory_advantages.jsonl": "{}\n"})
    folder("collect", {"_RUNNING.json": {**running, "stage": "collect", "dir": "collect"},
                       "trajectories.jsonl": "{}\n" * 96})
    # what the stages say they have to do, as they say it
    StageContext("rank", tmp_path / "rank", None, {}).expect(64, "turn states", "ranked.partial.jsonl", header_lines=1)
    StageContext("collect", tmp_path / "collect", None, {}).expect(160, "episodes", "trajectories.jsonl")
    # an evaluation that retried 5 episodes whose infrastructure failed: a line each more, never past the total
    folder("evaluate/retried", {"_RUNNING.json": running, "trajectories.jsonl": "{}\n" * 165})
    StageContext("evaluate", tmp_path / "evaluate/retried", None, {}).expect(160, "episodes", "trajectories.jsonl")
    logged = [{"loss": 0.69, "pair_accuracy": 0.5, "step": 10}, {"loss": 0.61, "pair_accuracy": 0.85, "step": 20}]
    folder("train_critic", {"_RUNNING.json": {**running, "stage": "train_critic", "dir": "train_critic"},
                            "model/checkpoint-10/trainer_state.json": {"global_step": 10, "max_steps": 30},
                            "model/checkpoint-20/trainer_state.json": {"global_step": 20, "max_steps": 30,
                                                                       "log_history": logged}})
    # resumed from step 10 at 12:00; step 20's checkpoint written at 12:01:40: 10 s a step, 10 steps to go
    StageContext("train_critic", tmp_path / "train_critic", None, {}).training_from(10)
    began = json.loads((tmp_path / "train_critic" / "_EXPECTED.json").read_text())
    assert began["from_step"] == 10 and began["unit"] == "steps"
    began["at"] = "2026-01-01T12:00:00+00:00"
    (tmp_path / "train_critic" / "_EXPECTED.json").write_text(json.dumps(began))
    saved = datetime(2026, 1, 1, 12, 1, 40, tzinfo=timezone.utc).timestamp()
    os.utime(tmp_path / "train_critic/model/checkpoint-20/trainer_state.json", (saved, saved))
    folder("train_policy", {"_RUNNING.json": running,  # no log yet, no start said: the step alone
                            "model/checkpoint-5/trainer_state.json": {"global_step": 5, "max_steps": 40}})

    stages = {s.path: s for s in run_status(tmp_path, now=datetime(2026, 1, 1, 12, 1, 50, tzinfo=timezone.utc))}
    evaluation = stages["evaluate/merged"].summary
    # the figures that tell most first, then a non-zero error count, then the stage's own order
    assert evaluation == ("success_rate=0.269, mean_reward=0.414, pass@1=0.269, episodes=160, simulator_errors=2, "
                          "tasks=80 (+7 more)")  # whole figures, as many as fit in 110 characters
    assert stages["rank"].summary.endswith("; 32/64 turn states in ranked.partial.jsonl; "
                                           "1 lines in trajectory_advantages.jsonl")
    assert stages["train_critic"].summary.endswith(
        "; step 20/30 at its last checkpoint (loss 0.610, pair_accuracy 0.850); 10.0 s a step since step 10, "
        "about 2 min left")  # 100 s of steps to go, 10 s of them gone since the checkpoint
    assert stages["train_policy"].summary.endswith("; step 5/40 at its last checkpoint")
    assert stages["evaluate/merged-7d8c8a"].summary.startswith("policy sweet_best/round2/train_policy_best: episodes=")
    assert stages["evaluate/zero_shot"].summary.startswith("policy zero_shot: episodes=160")
    assert stages["collect"].summary.endswith("; 96/160 episodes in trajectories.jsonl")
    assert stages["evaluate/retried"].summary.endswith("; 160/160 episodes in trajectories.jsonl")
    assert len(format_status(list(stages.values()), tmp_path).splitlines()) == 1 + 9 + 1  # one line per stage


def test_stage_claiming_an_output_it_did_not_write_fails(tmp_path):
    from dataclasses import dataclass

    @dataclass
    class Args:
        x: int = 0

    stage = Stage("liar", "liar", lambda: (Args,), lambda ctx, a: StageResult(outputs={"data": "missing.jsonl"}))
    with pytest.raises(StageError, match="did not write"):
        run_stage(stage, (RunArguments(run_dir=str(tmp_path)), Args()), stream=io.StringIO())
    assert not (tmp_path / "liar" / MARKER).exists()


# ---------------------------------------------------------------------------------------------------------------
# The whole pipeline on a tiny model

class ScriptedAnswers:
    """The tiny model's turns, except that from the second agent turn on an episode answers: with the task's
    reference or with a known wrong answer, chosen by the turn's seed (so the same episode always answers alike)."""

    def __init__(self, inner, tasks):
        self.inner, self.name, self.tasks = inner, inner.name, tasks

    def generate(self, histories, n=1, sampling=None, seeds=None):
        from sweet_trl.generation.base import Generation

        out = self.inner.generate(histories, n=n, sampling=sampling, seeds=seeds)
        for i, history in enumerate(histories):
            task = self.tasks.get(next(m["content"] for m in history if m["role"] == "user"))
            agent_turns = sum(m["role"] == "assistant" for m in history)
            if task is None or n > 1 or agent_turns < 1:
                continue  # candidates (n > 1) and first turns are the model's own text
            good = random.Random(seeds[i] if seeds else i).random() < 0.5
            code = task.ground_truth if good else WRONG_ANSWERS[task.task_id].code
            out[i][0] = Generation(text="I WANT TO ANSWER:\n" + code, token_ids=[1], logprobs=[-1.0])
        return out


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    import torch
    import yaml

    from colbench_gym.tasks import load_builtin

    torch.set_num_threads(1)  # a tiny model gains nothing from threads, and other tests share the cores
    root = tmp_path_factory.mktemp("pipeline")
    model = save_tiny_model(root / "tiny-llama")
    tasks = {t.problem_description: t for t in load_builtin("all")}
    real = pipeline.make_backend
    patch = pytest.MonkeyPatch()
    patch.setattr(pipeline.models, "make_backend", lambda *a, **k: ScriptedAnswers(real(*a, **k), tasks))
    config = {
        "run_dir": str(root / "run"), "policy_model": model, "max_train_tasks": 3, "max_eval_tasks": 2,
        "max_turns": 3, "max_new_tokens": 8, "generation_batch_size": 8, "num_workers": 2,
        # trainers (shared by the critic and the policy)
        "bf16": False, "use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj"],
        "gradient_checkpointing": False, "logging_steps": 1, "report_to": [], "max_length": 1024,
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "max_steps": 2, "learning_rate": 1e-3,
        "save_strategy": "no",
        "collect": {"episodes_per_task": 4},
        "sample_candidates": {"num_candidates": 4, "state_fraction": 0.5, "max_states": 4},
        "policy_pairs": {"pairs_per_turn": 2},
        "rank": {"report_trajectories": 4},
    }
    path = root / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    first, second = io.StringIO(), io.StringIO()
    markers = pipeline.run_pipeline(path, stream=first)
    again = pipeline.run_pipeline(path, stream=second)
    patch.undo()
    return {"root": root, "run": root / "run", "config": path, "markers": markers, "again": again,
            "first": first.getvalue(), "second": second.getvalue(), "tasks": tasks}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _rows(path: Path) -> list[dict]:
    from sweet_trl.trainer_utils import load_rows

    return load_rows(path).to_list()


def test_pipeline_runs_every_stage_and_writes_its_artefacts(tiny_run):
    run, markers = tiny_run["run"], tiny_run["markers"]
    assert list(markers) == STAGE_ORDER
    for name in STAGE_ORDER:
        marker = json.loads((run / name / MARKER).read_text())
        assert marker["fingerprint"] and marker["seconds"] > 0
        for rel in marker["outputs"].values():
            assert (run / name / rel).exists()

    trajectories = _jsonl(run / "collect" / "trajectories.jsonl")
    assert len(trajectories) == 3 * 4 == markers["collect"]["counts"]["episodes"]
    assert {r["episode_id"] for r in trajectories} == {f"{r['task_id']}/{r['seed']}" for r in trajectories}
    for record in trajectories:
        assert record["dialogue_history"][0]["role"] == "user" and record["reward"] is not None
        assert record["outcome"] == "answered" and 0 <= record["reward"] <= 1
    assert {r["reward"] for r in trajectories if r["success"]} == {1.0}
    assert any(not r["success"] for r in trajectories)

    pairs = _jsonl(run / "critic_pairs" / "pairs.jsonl")
    assert len(pairs) == markers["critic_pairs"]["counts"]["pairs"] > 0
    for pair in pairs:
        assert pair["chosen_reward"] > pair["rejected_reward"]
        assert pair["privileged"] == tiny_run["tasks"][pair["chosen"][0]["content"]].ground_truth

    critic_dir = run / "train_critic" / "model"
    assert (critic_dir / "adapter_config.json").exists() and (critic_dir / "sweet_critic.json").exists()
    assert markers["train_critic"]["counts"]["steps"] == 2
    history = json.loads((run / "train_critic" / "log_history.json").read_text())
    assert [row["step"] for row in history if "loss" in row] == [1, 2]

    candidates = _rows(run / "sample_candidates" / "candidates")
    assert len(candidates) == markers["sample_candidates"]["counts"]["turn_states"] == 4
    for row in candidates:
        assert row["prompt"][0]["role"] == "system" and row["prompt"][-1]["role"] == "user"
        assert 0 < len(row["candidates"]) <= 4
        # the policy's prompt never holds the privileged information the critic reads
        assert all(row["privileged"] not in m["content"] for m in row["prompt"])

    ranked = _rows(run / "rank" / "ranked")
    for row in ranked:
        assert len(row["ranking_scores"]) == len(row["candidates"]) and row["ranking_error"] is None
    scored = _jsonl(run / "rank" / "trajectory_advantages.jsonl")
    assert len(scored) == 4
    for row in scored:
        agent_messages = [m["content"] for m in row["dialogue_history"] if m["role"] == "assistant"]
        assert len(row["advantages"]) == len(agent_messages)
        for advantage, message in zip(row["advantages"], agent_messages):
            # only an empty agent message, with no token to average over, may have no advantage (null)
            assert isinstance(advantage, float) or (advantage is None and not message.strip())

    turn_pairs = _rows(run / "policy_pairs" / "pairs")
    assert len(turn_pairs) == markers["policy_pairs"]["counts"]["pairs"] > 0
    for pair in turn_pairs:
        assert pair["chosen_score"] > pair["rejected_score"]
        assert pair["chosen"][0]["role"] == pair["rejected"][0]["role"] == "assistant"

    assert (run / "train_policy" / "model" / "adapter_config.json").exists()
    assert markers["train_policy"]["counts"]["steps"] == 2

    for policy in ("zero_shot", "sweet"):
        evaluation = markers[f"evaluate/{policy}"]
        assert evaluation["counts"]["episodes"] == 2
        assert set(evaluation["metrics"]) >= {"success_rate", "mean_reward"}
        episodes = _jsonl(run / "evaluate" / policy / "trajectories.jsonl")
        assert {e["task_id"] for e in episodes} <= {t.task_id for t in tiny_run["tasks"].values()}
    sweet_records = _jsonl(run / "evaluate" / "sweet" / "trajectories.jsonl")
    assert all(r["policy"] == "sweet" for r in sweet_records)

    assert "Evaluation on the test tasks" in tiny_run["first"]
    assert "zero_shot" in tiny_run["first"] and "sweet" in tiny_run["first"]
    html = (run / "report.html").read_text()
    assert "Credit assignment by the critic" in html and "data-advantage" in html


def test_second_pipeline_run_skips_every_stage(tiny_run):
    second = tiny_run["second"]
    for name in STAGE_ORDER:
        assert f"[{name}] skipped" in second, name
    assert "[collect] running" not in second
    assert tiny_run["again"] == tiny_run["markers"]  # same markers: nothing was rewritten


def test_changed_stage_option_reruns_that_stage_and_those_after_it(tiny_run, monkeypatch):
    out = io.StringIO()
    pipeline.run_pipeline(tiny_run["config"], ["--pipeline.stages", "collect", "rank", "policy_pairs",
                                               "--policy_pairs.pairs_per_turn", "1"], stream=out)
    text = out.getvalue()
    assert "[collect] skipped" in text and "[rank] skipped" in text
    assert "[policy_pairs] running again: pairs_per_turn: 2 -> 1" in text
    marker = json.loads((tiny_run["run"] / "policy_pairs" / MARKER).read_text())
    assert marker["counts"]["pairs"] <= marker["counts"]["turn_states"]
    # train_policy now sees a changed input: its fingerprint no longer matches, so it would run again.
    stage = pipeline.STAGES["train_policy"]
    args = pipeline._parse(stage, pipeline.load_yaml(tiny_run["config"]), [])
    inputs = {"policy_pairs": marker}
    old = json.loads((tiny_run["run"] / "train_policy" / MARKER).read_text())
    assert pipeline.fingerprint(stage, args, inputs) != old["fingerprint"]


def test_interrupted_training_resumes_from_its_last_checkpoint(tiny_run, tmp_path, monkeypatch):
    """A training stage stopped after a checkpoint goes on from it: the steps already taken are not trained again."""
    import shutil

    from transformers.trainer_callback import CallbackHandler

    shutil.copytree(tiny_run["run"] / "policy_pairs", tmp_path / "run" / "policy_pairs")
    config = pipeline.load_yaml(tiny_run["config"]) | {"run_dir": str(tmp_path / "run")}
    options = ["--max_steps", "4", "--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "1"]
    args = pipeline._parse(pipeline.STAGES["train_policy"], config, options)
    saved_at: list[int] = []
    real_on_save = CallbackHandler.on_save

    class Stopped(Exception):
        """The job killed after its second checkpoint."""

    def stop_after_second_save(self, args, state, control):
        saved_at.append(state.global_step)
        control = real_on_save(self, args, state, control)
        if state.global_step == 2:
            raise Stopped
        return control

    monkeypatch.setattr(CallbackHandler, "on_save", stop_after_second_save)
    with pytest.raises(Stopped):
        run_stage(pipeline.STAGES["train_policy"], args, stream=io.StringIO())
    stage_dir = tmp_path / "run" / "train_policy"
    assert not (stage_dir / MARKER).exists()
    assert [p.name for p in (stage_dir / "model").glob("checkpoint-*")] == ["checkpoint-2"]  # save_total_limit 1
    assert json.loads((stage_dir / "_EXPECTED.json").read_text())["from_step"] == 0  # status's rate starts here

    out = io.StringIO()  # a new process: the options parsed again
    args = pipeline._parse(pipeline.STAGES["train_policy"], config, options)
    marker = run_stage(pipeline.STAGES["train_policy"], args, stream=out)
    assert "resuming training from" in out.getvalue() and "checkpoint-2" in out.getvalue()
    assert json.loads((stage_dir / "_EXPECTED.json").read_text())["from_step"] == 2  # the steps since the resume
    assert saved_at == [1, 2, 3, 4]  # the second run saved at steps 3 and 4 only: steps 1 and 2 were not redone
    assert marker["counts"]["steps"] == 4
    history = json.loads((stage_dir / "log_history.json").read_text())
    assert [row["step"] for row in history if "loss" in row] == [1, 2, 3, 4]  # the first run's logs are kept
    assert (stage_dir / "model" / "adapter_model.safetensors").exists()
    assert not list((stage_dir / "model").glob("checkpoint-*"))  # the finished model replaces its checkpoints


def test_baselines_train_and_are_evaluated_like_the_sweet_policy(tiny_run):
    real = pipeline.make_backend
    patch = pytest.MonkeyPatch()
    patch.setattr(pipeline.models, "make_backend", lambda *a, **k: ScriptedAnswers(real(*a, **k), tiny_run["tasks"]))
    out = io.StringIO()
    try:
        markers = pipeline.run_pipeline(tiny_run["config"], [
            "--pipeline.stages", "evaluate", "--pipeline.evaluate_policies", "zero_shot",
            "--pipeline.baselines", "rft", "mtdpo"], stream=out)
    finally:
        patch.undo()
    assert list(markers) == ["baseline_rft", "baseline_mtdpo", "evaluate/zero_shot", "evaluate/rft",
                             "evaluate/mtdpo"]
    assert "[evaluate/zero_shot] skipped" in out.getvalue()
    successes = sum(r["success"] for r in _jsonl(tiny_run["run"] / "collect" / "trajectories.jsonl"))
    assert markers["baseline_rft"]["counts"] == {"steps": 2, "trajectories": successes}
    assert markers["baseline_mtdpo"]["counts"]["pairs"] == tiny_run["markers"]["critic_pairs"]["counts"]["pairs"]
    for name in ("baseline_rft", "baseline_mtdpo"):
        assert (tiny_run["run"] / name / "model" / "adapter_config.json").exists()
        assert json.loads((tiny_run["run"] / name / "log_history.json").read_text())
    for policy in ("rft", "mtdpo"):
        assert markers[f"evaluate/{policy}"]["info"]["model"] == str(tiny_run["run"] / f"baseline_{policy}" / "model")
    text = out.getvalue()
    assert "Evaluation on the test tasks" in text and "\nrft " in text and "\nmtdpo " in text


def test_best_of_n_fine_tuning_learns_the_critics_top_candidate_of_each_ranked_state(tiny_run):
    """``train_policy_best`` reads the rank stage (not the pairs) and imitates, per turn state, the candidate with
    the critic's highest score; ``evaluate --policy sweet_best`` scores it like any policy of the run."""
    import math

    real = pipeline.make_backend
    patch = pytest.MonkeyPatch()
    patch.setattr(pipeline.models, "make_backend", lambda *a, **k: ScriptedAnswers(real(*a, **k), tiny_run["tasks"]))
    try:
        markers = pipeline.run_pipeline(tiny_run["config"], [
            "--pipeline.stages", "train_policy_best", "evaluate", "--pipeline.evaluate_policies", "sweet_best"],
            stream=io.StringIO())
    finally:
        patch.undo()
    run = tiny_run["run"]
    assert list(markers) == ["train_policy_best", "evaluate/sweet_best"]
    marker = markers["train_policy_best"]
    assert marker["inputs"].keys() == {"rank"}
    ranked = _rows(run / "rank" / "ranked")
    scored = [r for r in ranked if sum(s is not None and math.isfinite(s) for s in r["ranking_scores"]) >= 2]
    assert marker["counts"] == {"steps": 2, "turn_states": len(scored)} and scored
    top = {r["state_id"]: r["candidates"][max(range(len(r["candidates"])), key=lambda i: r["ranking_scores"][i])]
           for r in scored}
    assert marker["metrics"]["mean_score_margin"] >= 0
    assert (run / "train_policy_best" / "model" / "adapter_config.json").exists()
    evaluation = markers["evaluate/sweet_best"]
    assert evaluation["info"]["model"] == str(run / "train_policy_best" / "model")
    assert evaluation["counts"]["episodes"] == markers["evaluate/sweet_best"]["counts"]["episodes"] > 0
    from sweet_trl.best_of_n import BestOfNFinetuneConfig, best_turns_from_ranked

    examples, _ = best_turns_from_ranked(ranked, BestOfNFinetuneConfig(output_dir=str(run / "unused")))
    assert {e["state_id"]: e["completion"][0]["content"] for e in examples} == top


def test_hub_export_of_datasets_and_models_offline(tiny_run, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    run, markers, config = tiny_run["run"], tiny_run["markers"], pipeline.load_yaml(tiny_run["config"])
    config["hub_prefix"] = "someone/sweet-tiny"

    args = pipeline._parse(pipeline.STAGES["collect"], config, [])
    folder, repo_id, repo_type = pipeline.export_stage(run / "collect", markers["collect"], *args)
    assert (repo_id, repo_type) == ("someone/sweet-tiny-rollouts", "dataset")
    rows = _jsonl(folder / "data" / "train.jsonl")
    assert len(rows) == markers["collect"]["counts"]["episodes"]
    card = (folder / "README.md").read_text()
    assert card.startswith("---\n") and "ColBench-Backend-v0" in card and f"{len(rows)} rows" in card
    assert "2503.15478" in card and "load_dataset(\"someone/sweet-tiny-rollouts\"" in card

    args = pipeline._parse(pipeline.STAGES["train_critic"], config, [])
    folder, repo_id, repo_type = pipeline.export_stage(run / "train_critic", markers["train_critic"], *args)
    assert (repo_id, repo_type) == ("someone/sweet-tiny-critic", "model")
    assert (folder / "adapter_config.json").exists() and (folder / "sweet_critic.json").exists()
    assert not list(folder.glob("optimizer*")) and not (folder / "training_args.bin").exists()
    card = (folder / "README.md").read_text()
    assert "SWEET-RL" in card and "critic" in card and "someone/sweet-tiny-critic-pairs" in card
    assert "pair_accuracy" in card and "LoRA adapter" in card
    # The tiny base is a local folder, so the export still names it; a Hub base replaces the local path in both
    # the adapter's config and the critic's reference, so that the upload loads elsewhere.
    local = json.loads((folder / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert Path(local).is_dir()
    from sweet_trl import hub

    moved = hub.export_model(run / "train_critic" / "model", tiny_run["root"] / "export", "card", base_model="org/base")
    assert json.loads((moved / "adapter_config.json").read_text())["base_model_name_or_path"] == "org/base"
    assert json.loads((moved / "sweet_critic.json").read_text())["reference_model"] == "org/base"

    args = pipeline._parse(pipeline.STAGES["train_policy"], config, ["--push_merged"])
    folder, repo_id, _ = pipeline.export_stage(run / "train_policy", markers["train_policy"], *args)
    assert repo_id == "someone/sweet-tiny-policy"
    assert (folder / "config.json").exists() and not (folder / "adapter_config.json").exists()  # merged
    assert "turn-level" in (folder / "README.md").read_text()

    # Pushing needs the Hub: the error keeps the stage complete and says where the export is.
    out = io.StringIO()
    args = pipeline._parse(pipeline.STAGES["critic_pairs"], config, ["--push_to_hub"])
    with pytest.raises(StageError, match="export is complete in .*critic_pairs/hub"):
        run_stage(pipeline.STAGES["critic_pairs"], args, stream=out)
    assert "[critic_pairs] skipped" in out.getvalue()
    assert (run / "critic_pairs" / "hub" / "README.md").exists()


def test_push_without_a_hub_prefix_is_a_clear_error(tiny_run):
    args = pipeline._parse(pipeline.STAGES["collect"], pipeline.load_yaml(tiny_run["config"]), [])
    with pytest.raises(ValueError, match="hub_prefix"):
        pipeline.export_stage(tiny_run["run"] / "collect", tiny_run["markers"]["collect"], *args)
    # Asked for on the command line, it fails before the stage does any work.
    config = pipeline.load_yaml(tiny_run["config"])
    config["run_dir"] = str(tiny_run["root"] / "other-run")
    out = io.StringIO()
    with pytest.raises(pipeline.ConfigError, match="hub_prefix"):
        run_stage(pipeline.STAGES["collect"], pipeline._parse(pipeline.STAGES["collect"], config, ["--push_to_hub"]),
                  stream=out)
    assert "running" not in out.getvalue() and not (tiny_run["root"] / "other-run").exists()


@pytest.mark.parametrize("name", ["/nonexistent/model", "./runs/none", "runs/sweet/train_policy/model"])
def test_a_missing_local_model_is_named_before_loading(name):
    with pytest.raises(StageError, match="no model at"):
        pipeline.resolve_model(name)
    assert pipeline.resolve_model("org/some-model") == "org/some-model"  # a Hub id is left to the Hub


def test_answer_forcing_starts_the_last_turn_with_the_marker():
    from helpers_tiny_models import tiny_causal_lm, tiny_tokenizer

    from sweet_trl.generation import SamplingParams, TransformersBackend
    from sweet_trl.pipeline import AnswerForcing

    tokenizer = tiny_tokenizer()
    backend = AnswerForcing(TransformersBackend(tiny_causal_lm(tokenizer), tokenizer, name="tiny"), max_turns=2,
                            language="python")
    first = [{"role": "system", "content": "Help."}, {"role": "user", "content": "Write a unit converter."}]
    last = first + [{"role": "assistant", "content": "Which unit?"}, {"role": "user", "content": "Kelvin."}]
    outputs = backend.generate([first, last], n=2, sampling=SamplingParams(max_new_tokens=4), seeds=[1, 2])
    prefix = "I WANT TO ANSWER:\n```python\n"
    assert all(not g.text.startswith(prefix) and not g.prompt_text.endswith(prefix) for g in outputs[0])
    for generation in outputs[1]:
        assert generation.text.startswith(prefix) and generation.prompt_text.endswith("<|assistant|>\n" + prefix)
        assert generation.text.endswith("\n```")  # the code block is closed
        assert 0 < len(generation.token_ids) <= 4  # the prefix is prompt, not generated tokens
    assert backend.name == "tiny"


def test_answer_forcing_stops_the_answer_at_its_closing_fence():
    """The forced answer ends where its code block closes; other turns keep their own stop strings."""
    from sweet_trl.generation import Generation, SamplingParams
    from sweet_trl.pipeline import AnswerForcing

    class Recorder:
        name, chat_template = "recorder", "{{ messages }}"
        tokenizer = None

        def __init__(self):
            self.calls = []

        def generate(self, histories, n=1, sampling=None, seeds=None):
            self.calls.append((len(histories), list(sampling.stop), seeds))
            text = "def f(x):\n    return x * 2" if "```" in sampling.stop else "Which unit?"
            return [[Generation(text=text) for _ in range(n)] for _ in histories]

    recorder = Recorder()
    backend = AnswerForcing(recorder, max_turns=2, language="python")
    first = [{"role": "user", "content": "Write f."}]
    last = first + [{"role": "assistant", "content": "What does it do?"}, {"role": "user", "content": "Doubles."}]
    outputs = backend.generate([last, first, last], sampling=SamplingParams(stop=["END"]), seeds=[7, 8, 9])
    assert recorder.calls == [(1, ["END"], [8]), (2, ["END", "```"], [7, 9])]
    assert outputs[1][0].text == "Which unit?"
    assert outputs[0][0].text == outputs[2][0].text == "I WANT TO ANSWER:\n```python\ndef f(x):\n    return x * 2\n```"


def test_final_training_metrics_average_the_last_quarter_of_steps():
    from sweet_trl.pipeline import final_metrics

    history = [{"loss": 1.0 - 0.1 * s, "pair_accuracy": float(s % 2), "step": s, "epoch": s / 8} for s in range(1, 9)]
    history.append({"train_runtime": 12.5, "train_loss": 0.55, "step": 8, "epoch": 1.0})
    metrics = final_metrics(history)
    assert metrics["pair_accuracy"] == 0.5  # steps 7 and 8
    assert metrics["loss"] == pytest.approx((0.3 + 0.2) / 2)
    assert metrics["train_loss"] == 0.55 and metrics["train_runtime"] == 12.5
    assert "epoch" not in metrics and "step" not in metrics
    assert final_metrics([]) == {}


def test_a_stage_run_twice_with_the_same_options_skips_the_second_time(tiny_run, tmp_path):
    """The options a stage is given are its caller's: a trainer that fills in its configuration while training must
    not change what the caller passes next, or the same call would find another fingerprint and train again."""
    import shutil

    shutil.copytree(tiny_run["run"] / "policy_pairs", tmp_path / "run" / "policy_pairs")
    config = pipeline.load_yaml(tiny_run["config"]) | {"run_dir": str(tmp_path / "run")}
    args = pipeline._parse(pipeline.STAGES["train_policy"], config, ["--max_steps", "1"])
    first = run_stage(pipeline.STAGES["train_policy"], args, stream=io.StringIO())
    out = io.StringIO()
    second = run_stage(pipeline.STAGES["train_policy"], args, stream=out)
    assert "[train_policy] skipped" in out.getvalue(), out.getvalue()
    assert second["run_id"] == first["run_id"]
