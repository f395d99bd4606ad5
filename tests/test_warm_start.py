"""The warm start: its template pool (disjoint from train and test), the expert dialogues, and the pipeline stage
that trains on them first and that every later stage starts from (tiny model, seconds).

Run: pytest tests/test_warm_start.py -q
"""

from __future__ import annotations

import hashlib
import io
import json
from typing import Any

import pytest
from helpers_tiny_models import save_tiny_model

from colbench_gym.tasks.procedural import (
    TRAIN_TEMPLATES,
    UNSEEN_TEMPLATES,
    VALIDATION_UNSEEN_TEMPLATES,
    WARM_START_TEMPLATES,
    check_warm_start_pool,
    load_procedural,
    warm_start_tasks,
)
from sweet_trl import cli, pipeline
from sweet_trl.pipeline.errors import StageError

POOL = warm_start_tasks(sum(len(t.values_for("train", whole_pools=True)) for t in WARM_START_TEMPLATES))
BY_TEMPLATE = {t.name: t for t in WARM_START_TEMPLATES}


def _digest(rows: list[dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest()


def test_the_train_and_test_tasks_stay_byte_identical():
    """Runs, results and RESULTS.md figures name these tasks by id: adding the warm-start pool changed none."""
    assert _digest(load_procedural("train")) == "372fe1ec655c81f23900a6e46193429a07288b2b608d0ae0d86b3bad12592076"
    assert _digest(load_procedural("test")) == "f33562e7ea5048de688bc189af049f74a4a4928e168e63f88763f8f95e0cf27e"


def test_the_pool_shares_no_template_function_or_request_with_train_and_test():
    held = TRAIN_TEMPLATES + UNSEEN_TEMPLATES
    function = lambda t: t.code.split("(", 1)[0]
    assert len(WARM_START_TEMPLATES) >= 20
    assert not {t.name for t in WARM_START_TEMPLATES} & {t.name for t in held}
    assert not {function(t) for t in WARM_START_TEMPLATES} & {function(t) for t in held}
    assert not {t.request for t in WARM_START_TEMPLATES} & {t.request for t in held}
    rows = load_procedural("warm_start")
    assert len(rows) == 400 and all(r["task_id"].startswith("proc-warm-start-") for r in rows)
    assert {r["template"] for r in rows} == set(BY_TEMPLATE)
    assert not {r["ground_truth"] for r in rows} & {r["ground_truth"] for r in load_procedural("train")
                                                    + load_procedural("test")}


def test_an_overlapping_pool_or_a_train_template_is_refused_by_name():
    import dataclasses

    with pytest.raises(ValueError, match=r"overlaps the train, validation or test templates: late_fee \(function of "
                                         r"late_fee\), "
                                         r"late_fee \(name of late_fee\), late_fee \(request of late_fee\)"):
        check_warm_start_pool([TRAIN_TEMPLATES[0]])
    renamed = dataclasses.replace(TRAIN_TEMPLATES[0], name="overdue_fee", request="Another request.", question="?")
    with pytest.raises(ValueError, match=r"templates: overdue_fee \(function of late_fee\); warm-start dialogues"):
        check_warm_start_pool([*WARM_START_TEMPLATES, renamed])
    with pytest.raises(ValueError, match=r"\['is_adult'\] are train, validation or test templates"):
        warm_start_tasks(10, templates=["taxi_fare", "is_adult"])
    # the validation split's own unseen templates are held out from the warm start as the test's are
    with pytest.raises(ValueError, match=r"overlaps the train, validation or test templates: initials \(function of "
                                         r"initials\), initials \(name of initials\), initials \(request of "):
        check_warm_start_pool([dataclasses.replace(VALIDATION_UNSEEN_TEMPLATES[2], question="?")])
    with pytest.raises(ValueError, match=r"\['initials'\] are train, validation or test templates"):
        warm_start_tasks(10, templates=["taxi_fare", "initials"])
    with pytest.raises(ValueError, match="unknown warm-start templates"):
        warm_start_tasks(10, templates=["taxi_fares"])
    with pytest.raises(ValueError, match="make only 4 distinct"):
        warm_start_tasks(5, templates=["to_fahrenheit"])


def _run(source: str, call: str) -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(source, "<reference>", "exec"), namespace)  # noqa: S102 - our own generated references
    return eval(compile(call, "<test>", "eval"), namespace)


def _values_of(row: dict[str, Any]) -> dict[str, Any]:
    template = BY_TEMPLATE[row["template"]]
    for values in template.values_for("train", whole_pools=True):
        if template.code.format(**values).strip() + "\n" == row["ground_truth"]:
            return values
    raise AssertionError(f"{row['task_id']}: no values of its template make it")


@pytest.mark.parametrize("name", sorted(BY_TEMPLATE))
def test_every_hidden_value_of_the_pool_is_decisive(name):
    """As for the train and test templates: a guess of any hidden value instead of asking fails a test."""
    template = BY_TEMPLATE[name]
    for row in [r for r in POOL if r["template"] == name][::3]:
        values = _values_of(row)
        expected = [_run(row["ground_truth"], call) for call in row["test_cases"].values()]
        assert all(value is not None for value in expected)
        for key, pool in template.pools.items():
            for other in dict.fromkeys(pool):
                if other == values[key]:
                    continue
                guess = template.code.format(**{**values, key: other})
                got = [_run(guess, call) for call in row["test_cases"].values()]
                assert got != expected, f"{row['task_id']}: guessing {key}={other!r} passes every test"


def test_the_expert_question_gets_every_hidden_value_from_the_offline_human():
    """The expert names the detail it asks for, and the offline human's reply states it: every hidden number or
    text of the task is in the reply (a generic question gets "Days late is a number.")."""
    from sweet_trl.warm_start import dialogue_summary, expert_dialogues

    rows = [next(r for r in POOL if r["template"] == name and len(POOL)) for name in BY_TEMPLATE]
    rows += [r for r in POOL[::23] if r not in rows]
    records = expert_dialogues(rows, max_turns=2)
    assert dialogue_summary(records) == {"episodes": len(rows), "successes": len(rows), "success_rate": 1.0,
                                         "dont_know_replies": 0}
    for row, record in zip(rows, records):
        question, reply, answer = (m["content"] for m in record["dialogue_history"][1:])
        assert question == BY_TEMPLATE[row["template"]].question
        assert answer.startswith("I WANT TO ANSWER:\n```python\ndef ") and "#" not in answer
        for key, value in _values_of(row).items():
            if key in ("op", "case") or not str(value).strip():
                continue  # said in words ("at least", "in title case"); an empty prefix is nothing to say
            assert str(value).strip() in reply, f"{row['task_id']}: {key}={value!r} not in {reply!r}"
    one_turn = expert_dialogues(rows[:2], max_turns=1)
    assert [r["turns"] for r in one_turn] == [1, 1] and all(r["success"] for r in one_turn)


def test_a_registered_task_familys_own_pool_is_a_warm_start(monkeypatch):
    """``warm_start_family`` names any task family: one registered in-process brings its warm-start templates, and
    the expert plays them as it plays the shipped pool's (every episode succeeds)."""
    import dataclasses

    from colbench_gym.tasks import procedural
    from sweet_trl.pipeline_config import WarmStartArguments
    from sweet_trl.warm_start import dialogue_summary, expert_dialogues

    monkeypatch.setattr(procedural, "_REGISTERED", {})  # registrations live in the process: none leaks out

    class MineTemplate(procedural.Template):
        id_prefix = "mine"

    def mine(templates, rename=False):
        return tuple(MineTemplate(**{**{f.name: getattr(t, f.name) for f in dataclasses.fields(t)},
                                     **({"name": f"mine_{t.name}"} if rename else {})}) for t in templates)

    family = procedural.TaskFamily("mine", mine(TRAIN_TEMPLATES[:4]), mine(UNSEEN_TEMPLATES[:2]),
                                   mine(VALIDATION_UNSEEN_TEMPLATES[:2]), mine(WARM_START_TEMPLATES[:2], rename=True),
                                   id_prefix="mine")
    with pytest.raises(ValueError, match=r"warm_start_family must be one of \['procedural', .*got 'mine'"):
        WarmStartArguments(warm_start_family="mine")
    procedural.register_task_family(family)
    assert WarmStartArguments(warm_start_family="mine").warm_start_family == "mine"
    rows = procedural.task_families()["mine"][0].warm_start_tasks(4)
    assert {r["template"] for r in rows} == {f"mine_{t.name}" for t in WARM_START_TEMPLATES[:2]}
    records = expert_dialogues(rows, max_turns=2)
    assert dialogue_summary(records)["successes"] == 4


def test_expert_dialogues_refuse_a_task_outside_the_pool():
    from sweet_trl.warm_start import expert_dialogues

    with pytest.raises(ValueError, match="not from the warm-start pool"):
        expert_dialogues(load_procedural("test")[:1])


# -- the stage ----------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory):
    import torch
    import yaml

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("warm_start")
    config = {
        "run_dir": str(root / "run"), "policy_model": save_tiny_model(root / "tiny-llama"),
        "train_tasks": "procedural:train", "eval_tasks": "procedural:test", "max_train_tasks": 2,
        "max_eval_tasks": 2, "max_turns": 2, "max_new_tokens": 8, "generation_batch_size": 4, "num_workers": 2,
        "bf16": False, "use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj"],
        "gradient_checkpointing": False, "logging_steps": 1, "report_to": [], "max_length": 1024,
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "save_strategy": "no",
        "collect": {"episodes_per_task": 1},
        "warm_start": {"warm_start_tasks": 6, "max_steps": 2, "learning_rate": 1e-3},
    }
    path = root / "run.yaml"
    path.write_text(yaml.safe_dump(config))
    return {"root": root, "run": root / "run", "path": path, "config": config}


def _write(tiny_config, name: str, **changes: Any):
    import yaml

    config = json.loads(json.dumps(tiny_config["config"]))
    for key, value in changes.items():
        section, _, option = key.rpartition(".")
        (config.setdefault(section, {}) if section else config)[option] = value
    path = tiny_config["root"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_a_stage_alone_needs_the_warm_start_first(tiny_config, capsys):
    assert cli.main(["collect", "--config", str(tiny_config["path"])]) == 1
    error = capsys.readouterr().err
    assert "starts from a warm start" in error and "run `sweet-rl warm-start` with the same --config first" in error
    assert not (tiny_config["run"] / "collect").exists()


def test_the_pipeline_runs_the_warm_start_first_and_starts_every_stage_from_it(tiny_config, capsys):
    first = io.StringIO()
    markers = pipeline.run_pipeline(tiny_config["path"], ["--pipeline.stages", "collect"], stream=first)
    assert list(markers) == ["warm_start", "collect"]
    warm = markers["warm_start"]
    assert warm["counts"] == {"steps": 2, "dialogues": 6, "expert_episodes": 6, "expert_successes": 6}
    assert warm["metrics"]["expert_success_rate"] == 1.0 and warm["metrics"]["train_loss"] > 0
    assert warm["outputs"]["policy"] == "merged" and warm["outputs"]["model"] == "model"
    folder = tiny_config["run"] / "warm_start"
    assert (folder / "model" / "adapter_config.json").exists() and (folder / "merged" / "config.json").exists()
    dialogues = [json.loads(line) for line in (folder / "dialogues.jsonl").read_text().splitlines()]
    assert [d["task_id"] for d in dialogues] == [r["task_id"] for r in warm_start_tasks(6)]
    assert warm["info"]["base_model"] == tiny_config["config"]["policy_model"]
    # collect played the warm-started policy, and its fingerprint covers it
    started_from = str(folder / "merged")
    assert markers["collect"]["config"][0]["policy_model"] == started_from
    trajectories = (tiny_config["run"] / "collect" / "trajectories.jsonl").read_text().splitlines()
    assert {json.loads(line)["policy"] for line in trajectories} == {started_from}
    assert first.getvalue().index("[warm_start] running") < first.getvalue().index("[collect] running")

    # a second run skips both; a stage run alone now starts from the warm start too (and skips: same fingerprint)
    again = io.StringIO()
    pipeline.run_pipeline(tiny_config["path"], ["--pipeline.stages", "collect"], stream=again)
    assert "[warm_start] skipped" in again.getvalue() and "[collect] skipped" in again.getvalue()
    assert cli.main(["collect", "--config", str(tiny_config["path"])]) == 0
    assert "[collect] skipped" in capsys.readouterr().out
    # a training stage's own options on its command line are not the warm start's (they would refuse it)
    from sweet_trl.pipeline.commands import _warm_started_policy

    stage_options = ["--learning_rate", "5e-4", "--max_steps", "9", "--num_train_epochs", "3"]
    assert _warm_started_policy(tiny_config["config"], stage_options) == ["--policy_model", started_from]
    with pytest.raises(StageError, match="which is not complete in"):  # the run's own options still count
        _warm_started_policy(tiny_config["config"], ["--run_dir", str(tiny_config["root"] / "elsewhere")])

    # the run's report shows the stage and its training curve
    from sweet_trl.report import build_report

    html = build_report(str(tiny_config["run"]), None).read_text()
    assert "Warm start (SFT on scripted expert dialogues)" in html and "warm_start" in html

    # another warm start (more steps) is trained again, and the stages after it run again
    changed = _write(tiny_config, "more_steps", **{"warm_start.max_steps": 3})
    third = io.StringIO()
    markers = pipeline.run_pipeline(changed, ["--pipeline.stages", "collect"], stream=third)
    assert markers["warm_start"]["counts"]["steps"] == 3
    assert "[warm_start] running again" in third.getvalue() and "[collect] running again" in third.getvalue()


def test_the_multi_fact_warm_start_asks_for_the_outline_then_the_details_and_every_expert_episode_succeeds(
        tiny_config):
    from colbench_gym.tasks import procedural_multi

    path = _write(tiny_config, "multi", run_dir=str(tiny_config["root"] / "multi"), max_turns=5,
                  train_tasks="procedural_multi:train", eval_tasks="procedural_multi:test",
                  **{"warm_start.warm_start_family": "procedural_multi"})
    markers = pipeline.run_pipeline(path, ["--pipeline.stages", "warm_start"], stream=io.StringIO())
    warm = markers["warm_start"]
    assert warm["counts"]["dialogues"] == 6 and warm["counts"]["expert_successes"] == 6
    dialogues = [json.loads(line) for line in
                 (tiny_config["root"] / "multi" / "warm_start" / "dialogues.jsonl").read_text().splitlines()]
    assert [d["task_id"] for d in dialogues] == [r["task_id"] for r in procedural_multi.warm_start_tasks(6)]
    for dialogue in dialogues:  # the general question (the outline), one naming every detail (the facts), the answer
        history = dialogue["dialogue_history"]
        asked = [m["content"] for m in history if m["role"] == "assistant"][:-1]
        replies = [m["content"] for m in history[1:] if m["role"] == "user"]
        task = dialogue["task"]
        assert asked[0] == procedural_multi.GENERAL_QUESTION and len(asked) == 2, dialogue["task_id"]
        assert replies == [task["outline"], " ".join(f["fact"] for f in task["hidden_facts"])]
    varied = _write(tiny_config, "multi_varied", run_dir=str(tiny_config["root"] / "multi_varied"), max_turns=5,
                    train_tasks="procedural_multi:train", eval_tasks="procedural_multi:test",
                    **{"warm_start.warm_start_family": "procedural_multi", "warm_start.expert_forms": "varied"})
    markers = pipeline.run_pipeline(varied, ["--pipeline.stages", "warm_start"], stream=io.StringIO())
    assert markers["warm_start"]["counts"]["expert_successes"] == 6
    dialogues = [json.loads(line) for line in
                 (tiny_config["root"] / "multi_varied" / "warm_start" / "dialogues.jsonl").read_text().splitlines()]
    forms = [tuple(m["content"] for m in d["dialogue_history"] if m["role"] == "assistant")[:-1] for d in dialogues]
    assert all(f[0] == procedural_multi.GENERAL_QUESTION for f in forms) and len({len(f) for f in forms}) > 1
    with pytest.raises(ValueError, match="warm_start_family must be one of"):
        pipeline.run_pipeline(_write(tiny_config, "bad_family", **{"warm_start.warm_start_family": "nope"}),
                              ["--pipeline.stages", "warm_start"], stream=io.StringIO())
    with pytest.raises(ValueError, match="expert_forms must be one of"):
        pipeline.run_pipeline(_write(tiny_config, "bad_forms", **{"warm_start.expert_forms": "all"}),
                              ["--pipeline.stages", "warm_start"], stream=io.StringIO())


def test_a_warm_start_made_with_the_precision_options_starts_the_stages_given_them(tiny_config, capsys):
    """`sweet-rl <command> ... $(python -m sweet_trl.precision)` on every command: the warm start trained with
    `--bf16 true --dtype bfloat16` starts an evaluation given the same options, and one given none."""
    path = _write(tiny_config, "precision", run_dir=str(tiny_config["root"] / "precision"))
    assert cli.main(["warm-start", "--config", str(path), "--bf16", "true", "--dtype", "bfloat16"]) == 0
    capsys.readouterr()
    for precision in (["--bf16", "true", "--dtype", "bfloat16"], []):
        assert cli.main(["evaluate", "--config", str(path), "--policy", "zero_shot", *precision]) == 0, precision
        out = capsys.readouterr().out
        assert "[evaluate/zero_shot]" in out
        if precision:  # the first time it runs: reading a test split is said, as a figure to report
            assert ("[evaluate/zero_shot] reads the test tasks (procedural:test): a figure to report, not to choose "
                    "settings on") in out
    changed = _write(tiny_config, "precision_changed", run_dir=str(tiny_config["root"] / "precision"),
                     **{"warm_start.max_steps": 3})  # another warm start's settings: still refused
    assert cli.main(["evaluate", "--config", str(changed), "--policy", "zero_shot", "--bf16", "true"]) == 1
    assert "was made with other settings" in capsys.readouterr().err


def test_a_warm_start_without_data_is_a_clear_error(tiny_config, capsys):
    no_tasks = _write(tiny_config, "no_tasks", **{"warm_start.warm_start_tasks": 0})
    assert cli.main(["warm-start", "--config", str(no_tasks)]) == 2
    assert "warm_start_tasks must be >= 1 (the warm start needs dialogues to imitate)" in capsys.readouterr().err

    leaky = _write(tiny_config, "leaky", run_dir=str(tiny_config["root"] / "leaky"),
                   **{"warm_start.warm_start_templates": ["taxi_fare", "late_fee"]})
    assert cli.main(["warm-start", "--config", str(leaky)]) == 1
    assert "['late_fee'] are train, validation or test templates" in capsys.readouterr().err

    missing = _write(tiny_config, "missing", run_dir=str(tiny_config["root"] / "missing"),
                     **{"warm_start.demonstrations": str(tiny_config["root"] / "nowhere.jsonl")})
    assert cli.main(["warm-start", "--config", str(missing)]) == 1
    assert "no demonstrations at" in capsys.readouterr().err

    failed = tiny_config["root"] / "failed.jsonl"
    failed.write_text(json.dumps({"task": load_procedural("warm_start")[0], "reward": 0.0, "success": False,
                                  "dialogue_history": [{"role": "user", "content": "hi"},
                                                       {"role": "assistant", "content": "I WANT TO ANSWER: x"}]})
                      + "\n")
    unusable = _write(tiny_config, "unusable", run_dir=str(tiny_config["root"] / "unusable"),
                      **{"warm_start.demonstrations": str(failed)})
    assert cli.main(["warm-start", "--config", str(unusable)]) == 1
    assert "no trajectory to imitate among 1" in capsys.readouterr().err


def test_the_shipped_warm_start_config_parses_and_starts_from_its_warm_start():
    from sweet_trl.configs import config_path

    config = pipeline.load_yaml(config_path("warm_start_cpu"))
    pipeline._check_keys(config, everything=True)
    run, model_config, sft, options = pipeline._parse(pipeline.STAGES["warm_start"], config, [])
    assert run.policy_model == "embedded" and run.max_turns == 2 and model_config.use_peft
    assert options.warm_start_tasks == 400 and options.demonstrations is None and sft.learning_rate > 1e-5
    assert not sft.bf16 and sft.max_turns == run.max_turns  # the dialogues' instructions say the run's turn limit


# -- a trained warm start kept as an adapter (warm_start.adapter) -------------------------------------------------

def test_an_exported_warm_start_gives_the_same_policy_without_training(tiny_config, capsys):
    import torch
    from safetensors.torch import load_file

    from sweet_trl.warm_start import export_adapter

    assert cli.main(["warm-start", "--config", str(tiny_config["path"])]) == 0  # trained here, or already done
    trained = tiny_config["run"] / "warm_start"
    exported = tiny_config["root"] / "exported"
    provenance = export_adapter(trained, exported, base_model_id="someone/tiny", dtype="float32")
    assert provenance["base_model"] == tiny_config["config"]["policy_model"]
    assert provenance["counts"]["steps"] == json.loads((trained / "_COMPLETE.json").read_text())["counts"]["steps"]
    assert json.loads((exported / "adapter_config.json").read_text())["base_model_name_or_path"] == "someone/tiny"

    other_run = tiny_config["root"] / "from_adapter"
    path = _write(tiny_config, "from_adapter", run_dir=str(other_run), **{"warm_start.adapter": str(exported)})
    assert cli.main(["warm-start", "--config", str(path)]) == 0
    marker = json.loads((other_run / "warm_start" / "_COMPLETE.json").read_text())
    assert marker["info"]["trained"] is False and not (other_run / "warm_start" / "dialogues.jsonl").exists()
    assert marker["counts"]["steps"] == provenance["counts"]["steps"]
    # the merged policy is the trained run's, weight for weight
    ours = load_file(str(other_run / "warm_start" / "merged" / "model.safetensors"))
    theirs = load_file(str(trained / "merged" / "model.safetensors"))
    assert ours.keys() == theirs.keys()
    assert all(torch.equal(ours[k], theirs[k]) for k in ours)
    # its training curve comes along for the report
    assert marker["outputs"]["log_history"] == "log_history.json"
    from sweet_trl.report import build_report

    assert "Warm start (SFT on scripted expert dialogues)" in build_report(str(other_run), None).read_text()
    # and the stages after it start from it
    markers = pipeline.run_pipeline(path, ["--pipeline.stages", "collect"], stream=io.StringIO())
    assert markers["collect"]["config"][0]["policy_model"] == str(other_run / "warm_start" / "merged")
    # the adapter's training options are not its identity: another learning rate changes nothing here...
    same = io.StringIO()
    tuned = _write(tiny_config, "from_adapter_tuned", run_dir=str(other_run),
                   **{"warm_start.adapter": str(exported), "warm_start.learning_rate": 5e-4})
    pipeline.run_pipeline(tuned, ["--pipeline.stages", "collect"], stream=same)
    assert "[warm_start] skipped" in same.getvalue() and "[collect] skipped" in same.getvalue()
    # ...its weights are: other weights under the same folder name start the run again
    export_adapter(trained, exported, dtype="bfloat16")
    changed = io.StringIO()
    pipeline.run_pipeline(path, ["--pipeline.stages", "collect"], stream=changed)
    assert "[warm_start] running again" in changed.getvalue() and "[collect] running again" in changed.getvalue()
    capsys.readouterr()

    # an adapter trained on another base, a damaged one, and none at all: each a clear error, nothing written
    foreign = tiny_config["root"] / "foreign"
    export_adapter(trained, foreign)
    meta = json.loads((foreign / "warm_start.json").read_text())
    (foreign / "warm_start.json").write_text(json.dumps({**meta, "base_model": "embedded"}))
    damaged = tiny_config["root"] / "damaged"
    export_adapter(trained, damaged)
    weights = bytearray((damaged / "adapter_model.safetensors").read_bytes())
    weights[-1] ^= 0xFF  # one byte of the last weight
    (damaged / "adapter_model.safetensors").write_bytes(bytes(weights))
    for name, adapter, message in (
            ("foreign", foreign, "was trained on policy_model 'embedded'"),
            ("damaged", damaged, "does not match the digest in its warm_start.json"),
            ("absent", tiny_config["root"] / "no_such_adapter",
             "no warm-start adapter at '" + str(tiny_config["root"] / "no_such_adapter") + "' (shipped: "
             "smollm2-135m-procedural). Train one with `sweet-rl warm-start")):
        run_dir = tiny_config["root"] / f"bad_{name}"
        bad = _write(tiny_config, f"bad_{name}", run_dir=str(run_dir), **{"warm_start.adapter": str(adapter)})
        assert cli.main(["warm-start", "--config", str(bad)]) == 1
        assert message in capsys.readouterr().err
        assert not (run_dir / "warm_start" / "_COMPLETE.json").exists()

    both = _write(tiny_config, "both", **{"warm_start.adapter": str(exported), "warm_start.demonstrations": "x.jsonl"})
    assert cli.main(["warm-start", "--config", str(both)]) == 2
    assert "warm_start.adapter and warm_start.demonstrations exclude each other" in capsys.readouterr().err
    empty = _write(tiny_config, "empty", **{"warm_start.adapter": " "})
    assert cli.main(["warm-start", "--config", str(empty)]) == 2
    assert "warm_start.adapter is empty" in capsys.readouterr().err


def test_an_adapter_names_its_base_by_any_alias_or_hub_id():
    from sweet_trl.warm_start import same_base

    shipped = {"base_model": "embedded", "base_model_id": "HuggingFaceTB/SmolLM2-135M-Instruct"}
    assert all(same_base(shipped, name) for name in ("embedded", "SmolLM2", "smollm2-135m-instruct",
                                                     "HuggingFaceTB/SmolLM2-135M-Instruct"))
    assert not same_base(shipped, "meta-llama/Llama-3.1-8B-Instruct")
    assert not same_base({"base_model": "/models/a"}, "/models/b")


def test_the_shipped_adapter_is_warm_start_cpus_and_intact():
    from sweet_trl.configs import config_path
    from sweet_trl.warm_start import file_digest, read_provenance, resolve_adapter, shipped_adapters

    assert shipped_adapters() == ["smollm2-135m-procedural"]
    adapter = resolve_adapter("smollm2-135m-procedural")
    provenance = read_provenance(adapter)
    assert file_digest(adapter / "adapter_model.safetensors") == provenance["sha256"]
    # the weights as trained: merged, they are the calibrated run's policy bit for bit
    assert provenance["dtype"] == "float32" and provenance["sha256"] == provenance["source_sha256"]
    config = pipeline.load_yaml(config_path("warm_start_cpu"))
    run, model_config, sft, options = pipeline._parse(pipeline.STAGES["warm_start"], config, [])
    assert provenance["base_model"] == run.policy_model and provenance["max_turns"] == run.max_turns
    assert provenance["warm_start"]["warm_start_tasks"] == options.warm_start_tasks
    assert provenance["warm_start"]["warm_start_seed"] == options.warm_start_seed
    assert provenance["warm_start"]["warm_start_templates"] is None and provenance["warm_start"]["demonstrations"] is None
    assert provenance["lora"]["lora_r"] == model_config.lora_r
    assert provenance["training"]["learning_rate"] == sft.learning_rate
    assert provenance["training"]["num_train_epochs"] == sft.num_train_epochs
    adapter_config = json.loads((adapter / "adapter_config.json").read_text())
    assert adapter_config["r"] == model_config.lora_r and adapter_config["lora_alpha"] == model_config.lora_alpha
    # the demo starts from it
    demo = pipeline.load_yaml(config_path("demo_cpu"))
    _, _, _, demo_options = pipeline._parse(pipeline.STAGES["warm_start"], demo, [])
    assert resolve_adapter(demo_options.adapter) == adapter and demo["policy_model"] == provenance["base_model"]
