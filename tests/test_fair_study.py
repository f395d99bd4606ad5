"""The fair study on a tiny model: every arm at equal compute, validation every round, the test tasks read once."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from helpers_tiny_models import save_tiny_model
from test_study import ScriptedAnswers, tiny_run_config

# The module's fixture runs the fair study's arms for two rounds (75 s on one 2-core machine; CI machines run up to
# four times slower): more room than the suite's 600-s timeout, which is there to stop hangs.
pytestmark = pytest.mark.timeout(1200)

ARMS = ["sweet_best", "sweet_true", "rft", "best_random", "best_untrained"]


@pytest.fixture(scope="module")
def tiny_fair(tmp_path_factory):
    pytest.importorskip("trl")
    import torch
    import yaml

    from colbench_gym.tasks import resolve_tasks
    from colbench_gym.tasks.procedural import generate_tasks
    from sweet_trl import pipeline
    from sweet_trl.study.fair import run_fair_study

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("fair")
    model = save_tiny_model(root / "tiny-llama")
    files = {"train": generate_tasks(3, "train", templates=["greet", "order_code", "make_slug"]),
             "validation": generate_tasks(3, "validation", templates=["bag_too_heavy", "electricity_cost", "initials"]),
             "test": generate_tasks(4, "test", templates=["late_fee", "overtime_pay", "seat_label", "sale_price"])}
    for split, rows in files.items():
        (root / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasks = {t.problem_description: t for split in files for t in resolve_tasks(str(root / f"{split}.jsonl"))}
    real = pipeline.models.make_backend
    patch = pytest.MonkeyPatch()
    patch.setattr(pipeline.models, "make_backend", lambda *a, **k: ScriptedAnswers(real(*a, **k), tasks))
    config = {
        **tiny_run_config(root, model),
        "sample_candidates": {"num_candidates": 3},
        "baseline_rft": {"min_reward": 0.5},
        "evaluate": {"eval_episodes_per_task": 2, "eval_temperature": 1.0},
        "fair": {"arms": ARMS, "rounds": 2, "gradient_steps": 3, "candidate_states": 4,
                 "validation_tasks": str(root / "validation.jsonl"), "bootstrap_samples": 300,
                 "results_path": str(root / "results" / "fair_study.json")},
    }
    path = root / "fair.yaml"
    path.write_text(yaml.safe_dump(config))
    first, second = io.StringIO(), io.StringIO()
    results = run_fair_study(path, stream=first)
    again = run_fair_study(path, stream=second)
    yield {"root": root, "run": root / "run", "path": path, "results": results, "again": again,
           "second": second.getvalue()}
    patch.undo()


def test_every_arm_spends_the_same_rounds_episodes_and_gradient_steps(tiny_fair):
    results, run = tiny_fair["results"], tiny_fair["run"]
    arms = results["arms"]
    assert set(arms) == set(ARMS) and not results["failed"]
    assert results["compute"]["rounds"] == 2 and "rounds" not in results["compute"]["unequal"]
    for name, spent in arms.items():
        assert spent["rounds"] == 2 and spent["gradient_steps"] == 2 * 3, name
        assert spent["episodes"] == 2 * 3 * 4, name  # 3 tasks x 4 episodes, each round from the arm's own policy
        assert spent["stage_seconds"]["collect"] > 0
    sampled = {name: arms[name]["candidates_sampled"] for name in ARMS}
    assert sampled["rft"] == 0 and len({sampled[n] for n in ARMS if n != "rft"}) == 1 and sampled["sweet_best"] > 0
    # round 1 is shared (the same start), round 2 is each arm's own
    for name in ARMS:
        assert (run / "fair" / name / "round1" / "collect").is_symlink()
        assert not (run / "fair" / name / "round2" / "collect").is_symlink()
    for name in ("sweet_best", "best_random", "best_untrained"):
        assert (run / "fair" / name / "round1" / "sample_candidates").is_symlink()
        assert not (run / "fair" / name / "round2" / "sample_candidates").is_symlink()
        marker = json.loads((run / "fair" / name / "round2" / "rank" / "_COMPLETE.json").read_text())
        assert marker["info"]["selector"] == {"sweet_best": "critic", "best_random": "random",
                                              "best_untrained": "untrained_critic"}[name]
    # round 2 trains from round 1's policy: its stages name the merged round-1 model
    marker = json.loads((run / "fair" / "rft" / "round2" / "baseline_rft" / "_COMPLETE.json").read_text())
    assert marker["config"][0]["policy_model"] == str((run / "fair" / "rft" / "round1" / "baseline_rft" / "merged")
                                                      .resolve())


def test_each_round_is_read_on_validation_and_each_arm_reads_the_test_tasks_once(tiny_fair):
    results, run = tiny_fair["results"], tiny_fair["run"]
    protocol = results["protocol"]
    assert protocol["test_reads"] == {name: 1 for name in ["start", *ARMS]}
    assert not any(protocol["forced_reads"].values())
    for name in ARMS:
        rounds = protocol["validation_by_round"][name]
        assert [r["round"] for r in rounds] == [1, 2] and all(r["tasks"] == 3 for r in rounds)
        record = protocol["validation"][name]
        assert record["tasks"].endswith("validation.jsonl") and record["settings"]["round"] == 2
        assert set(record["figures"]) == {"round1", "round2"}
    ledger = json.loads((run / "protocol" / "test_reads.json").read_text())
    assert {read["arm"] for read in ledger["reads"]} == {"start", *ARMS}
    assert all(read["test_tasks"].endswith("test.jsonl") and read["git_commit"] for read in ledger["reads"])
    assert protocol["read_commits"] == {read["arm"]: read["git_commit"] for read in ledger["reads"]}
    for name in ["start", *ARMS]:
        entry = results["test"][name]
        assert entry["tasks"] == 4 and entry["episodes"] == 8 and set(entry["parts"]) == {"seen", "unseen"}


def test_sweet_rl_is_compared_with_every_baseline_and_control_on_test_split_by_template(tiny_fair):
    comparisons = tiny_fair["results"]["comparisons"]
    for other in ("rft", "best_random", "best_untrained", "start"):
        entry = comparisons[f"sweet_best - {other}"]
        assert entry["success"]["ci"][0] <= entry["success"]["difference"] <= entry["success"]["ci"][1]
        assert entry["success"]["tasks"] == 4 and entry["seen"]["tasks"] + entry["unseen"]["tasks"] == 4
    assert {"rft - start", "best_random - start"} <= set(comparisons)
    saved = json.loads((tiny_fair["root"] / "results" / "fair_study.json").read_text())
    assert saved["comparisons"].keys() == comparisons.keys()
    # the JSON says whether the study's aim is reached, from the comparison it rests on
    unseen = comparisons["sweet_best - rft"]["unseen"]
    assert saved["aim"]["variants"]["sweet_best"]["difference"] == unseen["difference"]
    assert saved["aim"]["met"] == (unseen["difference"] >= 0.05 and unseen["ci"][0] > 0)


def test_fair_report_prints_every_arm_round_and_comparison_as_markdown(tiny_fair, capsys):
    from sweet_trl.cli import main

    path = tiny_fair["root"] / "results" / "fair_study.json"
    assert main(["fair-report", str(path)]) == 0
    text = capsys.readouterr().out
    results = tiny_fair["results"]
    validation_table = text.split("| validation success")[1].split("\n\n")[0]
    rows = {line.split("|")[1].strip(): line for line in validation_table.splitlines() if line.startswith("| ")}
    for arm, entries in results["protocol"]["validation_by_round"].items():
        assert all(f"| {entry['success_rate'] * 100:.1f} [" in rows[arm] for entry in entries), rows[arm]
    assert "| round 0 | round 1 | round 2 |" in text  # the start's round and every arm's two
    for name, entry in results["comparisons"].items():
        assert f"| {name} | {entry['success']['difference'] * 100:+.1f} [" in text
    for arm, spent in results["arms"].items():
        assert f"| {arm} | {spent['rounds']} | {spent['episodes']} | {spent['candidates_sampled']} |" in text
    commit = results["settings"]["git_commit"]
    assert "rft 1," in text and "(at " not in text  # every read made by the code that wrote the file
    verdict = results["aim"]["variants"]["sweet_best"]  # one file says its seed's aim, as --pooled does per seed
    assert f"\n- seed 0: sweet_best - rft {verdict['difference'] * 100:+.1f} [" in text
    # read back by later code: the file's commit is the reader's, each read keeps its own and the tables say so
    later = tiny_fair["root"] / "read_back.json"
    later.write_text(json.dumps({**results, "settings": {**results["settings"], "git_commit": "0" * 40}}))
    assert main(["fair-report", str(later)]) == 0
    assert f"rft 1 (at {commit[:7]})," in capsys.readouterr().out
    not_a_study = tiny_fair["root"] / "not_a_study.json"
    not_a_study.write_text("{}")
    assert main(["fair-report", str(not_a_study)]) == 2
    assert "not a fair study's JSON" in capsys.readouterr().err


def test_fair_report_pools_seeds_task_by_task_and_refuses_what_cannot_be_pooled(tiny_fair, capsys):
    import copy

    from sweet_trl.cli import main
    from sweet_trl.study.fair.across_runs import pooled_comparisons

    results = json.loads((tiny_fair["root"] / "results" / "fair_study.json").read_text())
    per_task = results["test_per_task"]
    assert set(per_task) == set(results["test"]) and all(len(rows) == 4 for rows in per_task.values())
    other = copy.deepcopy(results)  # a second seed on which sweet_best succeeds on every task
    other["settings"]["seed"] = 1
    for row in other["test_per_task"]["sweet_best"]:
        row["success_rate"] = 1.0
    pooled = pooled_comparisons({"a": results, "b": other}, samples=200)
    ours = {r["task_id"]: (r["success_rate"] + 1.0) / 2 for r in per_task["sweet_best"]}
    theirs = {r["task_id"]: r["success_rate"] for r in per_task["rft"]}
    expected = sum(ours[t] - theirs[t] for t in ours) / len(ours)
    assert pooled["seeds"] == [0, 1]
    assert pooled["comparisons"]["sweet_best - rft"]["success"]["difference"] == pytest.approx(expected)
    paths = []
    for name, data in (("seed0.json", results), ("seed1.json", other)):
        paths.append(str(tiny_fair["root"] / name))
        Path(paths[-1]).write_text(json.dumps(data))
    assert main(["fair-report", *paths, "--pooled"]) == 0
    pooled_text = capsys.readouterr().out.split("### pooled")[1]
    assert "Validation not pooled: " not in pooled_text  # both files keep their validation rows
    assert f"| sweet_best - rft | {expected * 100:+.1f} [" in pooled_text
    assert "\n- seed 0: sweet_best - rft " in pooled_text and "\n- seed 1: sweet_best - rft " in pooled_text
    assert "\n- on every seed: **" in pooled_text

    # files of one seed are parts of one run: joined, they compare as the run's own JSON does
    def part(arms):
        return {**results, "test_per_task": {a: per_task[a] for a in arms},
                "arms": {a: results["arms"][a] for a in arms if a != "start"}}

    joined = pooled_comparisons({"core": part(["start", "sweet_best", "rft"]),
                                 "later": part(["start", "best_random", "best_untrained", "sweet_true"])}, samples=300)
    assert joined["seeds"] == [0] and joined["comparisons"].keys() == results["comparisons"].keys()
    for name, entry in joined["comparisons"].items():
        assert entry["success"] == results["comparisons"][name]["success"], name
    # ... and written as one file: every arm, the comparisons of them all, each read's commit, the aim
    core, later = tiny_fair["root"] / "core.json", tiny_fair["root"] / "later.json"
    core.write_text(json.dumps(part(["start", "sweet_best", "rft"])))
    later.write_text(json.dumps({**part(["start", "best_random", "best_untrained", "sweet_true"]),
                                 "settings": {**results["settings"], "git_commit": "f" * 40}}))
    out = tiny_fair["root"] / "joined" / "seed0.json"
    assert main(["fair-report", str(core), str(later), "--join", str(out)]) == 0
    assert f"### joined into {out}" in capsys.readouterr().out
    whole = json.loads(out.read_text())
    assert whole["arms"] == results["arms"] and whole["test_per_task"] == per_task and whole["test"] == results["test"]
    assert whole["comparisons"].keys() == results["comparisons"].keys() and whole["aim"] == results["aim"]
    for name, entry in whole["comparisons"].items():
        assert entry["success"]["difference"] == results["comparisons"][name]["success"]["difference"], name
    assert whole["protocol"]["test_reads"] == results["protocol"]["test_reads"]
    assert [(f["file"], f["git_commit"]) for f in whole["settings"]["joined_from"]] == [
        (str(core), results["settings"]["git_commit"]), (str(later), "f" * 40)]
    assert whole["settings"]["arms"] == list(whole["arms"]) and "git_commit" not in whole["settings"]
    assert main(["fair-report", str(out)]) == 0 and "| sweet_best - best_random |" in capsys.readouterr().out
    assert main(["fair-report", *paths, "--join", str(out)]) == 2  # two seeds: pooled, never joined
    assert "a joined file holds one seed's run; these files are of seeds [0, 1]" in capsys.readouterr().err
    conflicting = part(["start", "best_random"])
    conflicting["test_per_task"]["start"] = [{**row, "success_rate": 1.0} for row in per_task["start"]]
    with pytest.raises(ValueError, match="files of one seed must be parts of one run"):
        pooled_comparisons({"core": part(["start", "sweet_best"]), "other run": conflicting})
    unequal = copy.deepcopy(other)
    unequal["arms"]["rft"]["rounds"] += 1
    with pytest.raises(ValueError, match="rounds"):  # arms of one study compared at equal rounds
        pooled_comparisons({"a": results, "b": unequal})
    unequal = copy.deepcopy(other)
    unequal["arms"]["rft"]["gradient_steps"] += 1  # rft of seed 1 trained longer than rft of seed 0
    with pytest.raises(ValueError, match="arm rft spent different compute on different seeds"):
        pooled_comparisons({"a": results, "b": unequal})
    older = {k: v for k, v in other.items() if k != "test_per_task"}
    with pytest.raises(ValueError, match="no per-task figures"):
        pooled_comparisons({"a": results, "b": older})
    # a file written before per-task figures were kept takes them from its run's ledger
    from sweet_trl.study.fair.results import test_rows_from_ledger

    assert test_rows_from_ledger(tiny_fair["run"]) == per_task
    Path(paths[0]).write_text(json.dumps({k: v for k, v in results.items() if k != "test_per_task"}))
    gone = str(tiny_fair["root"] / "moved_away")  # a run folder deleted since: said, not a traceback
    assert main(["fair-report", *paths, "--pooled", "--runs", gone, str(tiny_fair["run"])]) == 2
    assert f"--runs: {gone} (the run of {paths[0]}) does not exist" in capsys.readouterr().err
    assert main(["fair-report", paths[1], "--runs", gone]) == 0  # a file that holds every row needs no run folder
    capsys.readouterr()
    elsewhere = tiny_fair["root"] / "another_run"  # a folder whose ledger never read these arms
    elsewhere.mkdir(exist_ok=True)
    assert main(["fair-report", paths[0], "--runs", str(elsewhere)]) == 2
    assert f"the test-read ledger of {elsewhere} records no read of " in capsys.readouterr().err
    unpooled = {k: v for k, v in other.items() if k != "validation_per_task"}
    Path(paths[1]).write_text(json.dumps(unpooled))
    assert main(["fair-report", str(core), paths[1], "--pooled"]) == 0
    assert f"Validation not pooled: {paths[1]} keeps no per-task validation rows" in capsys.readouterr().out
    Path(paths[1]).write_text(json.dumps(other))
    assert main(["fair-report", *paths, "--pooled", "--runs", str(tiny_fair["run"]), str(tiny_fair["run"])]) == 0
    text = capsys.readouterr().out
    assert f"| sweet_best - rft | {expected * 100:+.1f} [" in text.split("### pooled")[1]
    # with the runs, each arm's last validation round compared as on test (the start at round 0)
    from sweet_trl.study.fair.results import validation_comparisons, validation_rows

    assert results["settings"]["run_dir"] == str(tiny_fair["run"])  # where the evaluations it names are
    validation = validation_rows(results, tiny_fair["run"])
    last = {arm: max(e["round"] for e in entries)
            for arm, entries in results["protocol"]["validation_by_round"].items()}
    assert last["start"] == 0 and all(last[arm] == 2 for arm in ARMS)
    for arm, rows in validation.items():
        entry = next(e for e in results["protocol"]["validation_by_round"][arm] if e["round"] == last[arm])
        assert sum(r["success_rate"] for r in rows) / len(rows) == pytest.approx(entry["success_rate"])
    on_validation = validation_comparisons(validation, samples=200)
    assert set(on_validation) == set(results["comparisons"])
    block = text.split("### pooled")[0].split("on validation (each arm's last round)")[1]
    for name, entry in on_validation.items():
        assert f"| {name} | {entry['success']['difference'] * 100:+.1f} [" in block
    # the study's own file keeps the same rows: it pairs arms on validation without its run folder
    assert results["validation_per_task"] == validation
    assert main(["fair-report", str(paths[1])]) == 0
    assert "on validation (each arm's last round)" in capsys.readouterr().out


def test_a_plan_says_where_each_arm_would_run_and_touches_nothing(tiny_fair):
    from sweet_trl.study.fair import run_fair_study

    def snapshot():
        return {p: p.stat().st_mtime_ns for p in tiny_fair["root"].rglob("*") if p.is_file()}

    before = snapshot()
    out = io.StringIO()
    assert run_fair_study(tiny_fair["path"], ["--fair.plan", "true"], stream=out) == {
        "plan": {arm: "complete" for arm in ["start", *ARMS]}}
    assert "every stage is complete" in out.getvalue()
    assert (f"[plan] the test tasks read once per arm at the end, recorded in {tiny_fair['run'] / 'protocol'}; "
            f"results written to {tiny_fair['run'] / 'fair' / 'fair_study.json'}") in out.getvalue()
    out = io.StringIO()
    plan = run_fair_study(tiny_fair["path"], ["--fair.plan", "true", "--fair.gradient_steps", "4"], stream=out)["plan"]
    # every arm's first training stage would run again; the start's stages are complete
    assert plan["start"] == "complete"
    assert all("round1" in plan[arm] and "would run" in plan[arm] for arm in ARMS), plan
    assert snapshot() == before  # nothing run, cleared or written, the ledger untouched
    # a variant not run yet: how much is done (round 1's shared collection and candidates) and about how long the
    # rest takes, timed by this run's finished stages; the links its walk made are gone again
    out = io.StringIO()
    run_fair_study(tiny_fair["path"], ["--fair.plan", "true", "--fair.arms", "sweet_best", "--fair.variants",
                                       "sweet_best@planned=--train_policy_best.learning_rate 0.5"], stream=out)
    assert "[plan] sweet_best: 11 of 11 stages done\n" in out.getvalue()  # 2 rounds x 4 stages, 2 validations, test
    assert re.search(r"\[plan\] sweet_best@planned: 2 of 11 stages done; about \d+ min left", out.getvalue())
    assert not (tiny_fair["run"] / "fair" / "sweet_best@planned").exists() and snapshot() == before
    # an arm whose update never ran here: its other stages are timed, and the time left is only a lower bound
    out = io.StringIO()
    run_fair_study(tiny_fair["path"], ["--fair.plan", "true", "--fair.arms", "mtdpo"], stream=out)
    assert re.search(r"\[plan\] mtdpo: 1 of 7 stages done; at least \d+ min left \(.*\); "
                     r"baseline_mtdpo never finished here: not timed", out.getvalue()), out.getvalue()
    assert snapshot() == before


def test_a_finished_fair_study_runs_nothing_again_and_reads_the_test_tasks_no_more(tiny_fair):
    again, results = tiny_fair["again"], tiny_fair["results"]
    assert "running" not in tiny_fair["second"].replace("running again", "")
    assert again["protocol"]["test_reads"] == results["protocol"]["test_reads"]
    assert again["comparisons"] == results["comparisons"] and again["arms"].keys() == results["arms"].keys()


def test_a_second_test_read_is_refused_unless_forced_and_then_recorded(tiny_fair):
    from sweet_trl.study.fair import run_fair_study
    from sweet_trl.study.protocol import ProtocolError

    ledger = tiny_fair["run"] / "protocol" / "test_reads.json"
    before = ledger.read_text()
    other_seed = ["--evaluate.eval_seed", "77", "--fair.arms", "rft",  # a new test evaluation of the same arm
                  "--fair.results_path", str(tiny_fair["root"] / "results" / "rft_again.json")]
    def snapshot():
        return {p: p.stat().st_mtime_ns for p in tiny_fair["root"].rglob("*") if p.is_file()}

    files = snapshot()
    with pytest.raises(ProtocolError, match="already read the test tasks"):
        run_fair_study(tiny_fair["path"], other_seed, stream=io.StringIO())
    assert ledger.read_text() == before  # refused before evaluating: nothing recorded
    # nor trained: a changed update that would end in a second read is refused before any stage, results untouched
    retrained = ["--fair.arms", "rft", "--fair.gradient_steps", "4",
                 "--fair.results_path", str(tiny_fair["root"] / "results" / "rft_again.json")]
    with pytest.raises(ProtocolError, match=r"^rft already read the test tasks .* \(rft: baseline_rft in .* would run"
                                            r".*max_steps: 3 -> 4\): a second read, refused before any stage runs"):
        run_fair_study(tiny_fair["path"], retrained, stream=io.StringIO())
    assert snapshot() == files and not (tiny_fair["root"] / "results" / "rft_again.json").exists()
    # an arm added to a study whose start has read the test: round 1's new shared stages (a critic without c) do not
    # change the start's read, so nothing is refused
    from sweet_trl.study.fair.runner import FairStudy

    study = FairStudy(tiny_fair["path"], ["--fair.arms", "best_no_c", "--fair.results_path",
                                          str(tiny_fair["root"] / "results" / "no_c.json")], stream=io.StringIO())
    study.refuse_second_reads(study.args.arm_list())
    assert snapshot() == files
    forced = run_fair_study(tiny_fair["path"], [*other_seed, "--fair.force_test_read", "true"], stream=io.StringIO())
    assert forced["protocol"]["test_reads"]["rft"] == 2 and forced["protocol"]["forced_reads"]["rft"] == 1


def test_a_finished_study_from_a_warm_start_runs_again_without_making_the_warm_start_again(tiny_fair, tmp_path):
    """The up-front check of second reads walks the start as the run then does: the walk leaves the options it
    gathered (the warm start's policy as every later stage's base) behind it, or the run reads the warm start with
    its own output as its base, and makes it again."""
    import yaml

    from sweet_trl.study.fair import run_fair_study

    config = yaml.safe_load(tiny_fair["path"].read_text())
    config.update(run_dir=str(tmp_path / "run"), warm_start={"warm_start_tasks": 4, "max_steps": 1})
    config["fair"].update(arms=["rft"], rounds=1, results_path=None)
    path = tmp_path / "fair.yaml"
    path.write_text(yaml.safe_dump(config))
    first = io.StringIO()
    run_fair_study(path, stream=first)
    assert "[warm_start] running" in first.getvalue()
    made = (tmp_path / "run" / "warm_start" / "_COMPLETE.json").read_text()
    second = io.StringIO()
    again = run_fair_study(path, stream=second)  # the ledger holds the start's and rft's reads: walked first
    assert "running" not in second.getvalue() and "[warm_start] skipped" in second.getvalue()
    assert (tmp_path / "run" / "warm_start" / "_COMPLETE.json").read_text() == made
    assert again["protocol"]["test_reads"] == {"start": 1, "rft": 1}


def test_a_results_file_holding_what_the_run_would_not_write_again_is_refused_before_any_stage(tiny_fair, tmp_path):
    from dataclasses import replace

    from sweet_trl.study.fair import run_fair_study
    from sweet_trl.study.fair.config import FairStudyArguments
    from sweet_trl.study.fair.results import check_results_path
    from sweet_trl.study.protocol import ProtocolError

    path = tiny_fair["root"] / "results" / "fair_study.json"
    before = path.read_text()
    with pytest.raises(ProtocolError, match=r"holds arms this run does not run \(best_random, best_untrained, "):
        run_fair_study(tiny_fair["path"], ["--fair.arms", "rft"], stream=io.StringIO())
    with pytest.raises(ProtocolError, match=r"holds test reads and this run reads validation only"):
        run_fair_study(tiny_fair["path"], ["--fair.read_test", "false"], stream=io.StringIO())
    with pytest.raises(ProtocolError, match=f"holds the figures of the run in {tiny_fair['run']}, not of "):
        run_fair_study(tiny_fair["path"], ["--run_dir", str(tmp_path / "another_run")], stream=io.StringIO())
    assert path.read_text() == before and not (tmp_path / "another_run").exists()  # refused before anything ran
    args = FairStudyArguments(arms=["rft"], results_path=str(path))
    check_results_path(replace(args, overwrite_results=True), tiny_fair["run"])  # asked for: allowed
    check_results_path(replace(args, plan=True), tiny_fair["run"])  # a plan writes nothing
    check_results_path(replace(args, results_path=str(tmp_path / "new.json")), tiny_fair["run"])  # a new file
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(ProtocolError, match="it is not a fair study's JSON"):
        check_results_path(replace(args, results_path=str(tmp_path / "other.json")), tiny_fair["run"])


def test_the_fair_study_refuses_bad_configurations(tiny_fair):
    from sweet_trl.pipeline_config import ConfigError
    from sweet_trl.study.fair import run_fair_study

    for options, message in ((["--fair.arms", "sweet_best", "nope"], "unknown arms"),
                             (["--fair.rounds", "0"], "rounds must be"),
                             (["--fair.validation_tasks", str(tiny_fair["root"] / "test.jsonl")], "test tasks")):
        with pytest.raises(ConfigError, match=message):
            run_fair_study(tiny_fair["path"], options, stream=io.StringIO())


def test_validation_tasks_of_another_family_than_the_test_tasks_are_refused(tmp_path):
    from sweet_trl.pipeline_config import ConfigError
    from sweet_trl.study.fair.runner import check_same_family

    with pytest.raises(ConfigError, match=r"another task family .* Pass --fair.validation_tasks procedural_multi:valid"):
        check_same_family("procedural:validation", "procedural_multi:test", "backend")
    check_same_family("procedural_multi:validation", "procedural_multi:test", "backend")
    check_same_family("procedural:validation", "procedural_wide:test", "backend")  # the same tasks by their ids
    check_same_family(str(tmp_path / "validation.jsonl"), "procedural:test", "backend")  # a file: as given


def test_the_aim_is_met_by_the_best_variant_on_unseen_templates_with_its_interval_above_zero():
    from sweet_trl.study.fair.results import aim_verdict, comparison_names, validation_success
    from sweet_trl.study.fair.tables import aim_lines

    def versus_rft(difference, low, high):
        return {"unseen": {"difference": difference, "ci": [low, high], "tasks": 32}}

    comparisons = {"sweet - rft": versus_rft(0.031, -0.047, 0.109), "sweet_best - rft": versus_rft(0.06, 0.01, 0.11),
                   "sweet_best - start": versus_rft(0.5, 0.4, 0.6)}
    verdict = aim_verdict(comparisons)
    assert verdict["met"] and verdict["variants"]["sweet_best"]["met"] and not verdict["variants"]["sweet"]["met"]
    assert not aim_verdict({"sweet_best - rft": versus_rft(0.06, -0.01, 0.11)})["met"]  # interval reaches 0
    assert not aim_verdict({"sweet_best - rft": versus_rft(0.04, 0.01, 0.07)})["met"]  # above 0, short of 5 points
    assert aim_verdict({"sweet_best - start": versus_rft(0.5, 0.4, 0.6)}) is None  # no RFT to compare with
    text = aim_lines({0: verdict, 1: aim_verdict({"sweet_best - rft": versus_rft(0.04, 0.01, 0.07)})})
    assert ("- seed 0: sweet - rft +3.1 [-4.7, +10.9]; sweet_best - rft +6.0 [+1.0, +11.0] (met); no validation "
            "figures to choose by: met if any variant is: **met**") in text
    assert "- seed 1: sweet_best - rft +4.0 [+1.0, +7.0]: **not met**" in text
    assert text.endswith("- on every seed: **not met**")
    # with validation figures the verdict is the variant validation puts first, not the best on test
    chosen = aim_verdict(comparisons, {"sweet": 0.31, "sweet_best": 0.28, "rft": 0.40})
    assert chosen["chosen"] == "sweet" and not chosen["met"] and chosen["variants"]["sweet_best"]["met"]
    assert "chosen on validation: sweet (31.0%): **not met**" in aim_lines({0: chosen})
    only = aim_verdict(comparisons, {"sweet_best": 0.28})  # the one with figures; the other is named
    assert only["chosen"] == "sweet_best" and only["unranked"] == ["sweet"]
    assert "(sweet: no validation figures, not chosen)" in aim_lines({0: only})
    tie = aim_verdict(comparisons, {"sweet": 0.3, "sweet_best": 0.3})  # tied: met only if both are
    assert tie["chosen"] is None and tie["tied"] == ["sweet", "sweet_best"] and not tie["met"]
    assert "tied on validation: sweet and sweet_best (30.0%), met if every one is: **not met**" in aim_lines({0: tie})
    # the round an arm would read the test at: its last, or its best under best_on_validation
    rounds = {"sweet": [{"round": 1, "success_rate": 0.4}, {"round": 2, "success_rate": 0.2}]}
    by_round = {"protocol": {"validation_by_round": rounds}}
    assert validation_success(by_round) == {"sweet": 0.2}
    assert validation_success({**by_round, "settings": {"test_round": "best_on_validation"}}) == {"sweet": 0.4}
    # an arm variant of a SWEET-RL arm (sweet@nll1) is one of its variants
    assert aim_verdict({"sweet@nll1 - rft": versus_rft(0.06, 0.01, 0.11)})["variants"]["sweet@nll1"]["met"]
    assert aim_verdict({"sweet_true - rft": versus_rft(0.06, 0.01, 0.11)}) is None  # a control, not a variant
    # so a SWEET-RL arm's variant is compared with the baselines as well as with its arm; another arm's, with its own
    names = comparison_names(["start", "sweet", "rft", "sweet@nll1", "rft@x"])
    assert {("sweet@nll1", "sweet"), ("sweet@nll1", "rft"), ("rft@x", "rft"), ("sweet@nll1", "start")} <= set(names)
    assert not {pair for pair in names if pair[0] == "rft@x" and pair[1] not in ("rft", "start")}


def test_fair_report_draws_the_comparisons_of_each_seed_and_the_pool(tiny_fair, capsys):
    import copy

    from sweet_trl.cli import main

    results = json.loads((tiny_fair["root"] / "results" / "fair_study.json").read_text())
    other = copy.deepcopy(results)
    other["settings"]["seed"] = 1
    paths = []
    for name, data in (("fig_seed0.json", results), ("fig_seed1.json", other)):
        paths.append(str(tiny_fair["root"] / name))
        Path(paths[-1]).write_text(json.dumps(data))
    out = tiny_fair["root"] / "figures" / "fair.svg"
    assert main(["fair-report", *paths, "--pooled", "--figure", str(out)]) == 0
    assert f"Figure: {out}" in capsys.readouterr().out
    svg = out.read_text()
    for text in ("all test tasks", "seen templates", "unseen templates", "seed 0", "seed 1", "seeds 0, 1 pooled",
                 "aim: SWEET-RL - rft at least +5 on unseen, interval above 0", *results["comparisons"]):
        assert text in svg, text
    part = tiny_fair["root"] / "fig_seed0_later.json"  # a second file of seed 0's run: a series of its own
    part.write_text(json.dumps(results))
    assert main(["fair-report", paths[0], str(part), "--pooled", "--figure", str(out)]) == 0
    svg = out.read_text()
    assert all(f">{text}<" in svg for text in ("fig_seed0", "fig_seed0_later", "seed 0, files joined"))
    assert "seed 1" not in svg and "pooled" not in svg
    run = tiny_fair["root"] / "fig_run_copy" / "fair"  # two run folders of one seed: each named by its path
    run.mkdir(parents=True, exist_ok=True)
    (run / "fair_study.json").write_text(json.dumps(results))
    assert main(["fair-report", str(tiny_fair["run"]), str(run.parent), "--figure", str(out)]) == 0
    svg = out.read_text()
    assert f">{tiny_fair['run'] / 'fair' / 'fair_study.json'}<" in svg and f">{run / 'fair_study.json'}<" in svg
    assert main(["fair-report", paths[0], "--figure", str(out.with_suffix(".txt"))]) == 2
    assert "give a file ending in .svg, .png, .pdf" in capsys.readouterr().err
    validation_only = tiny_fair["root"] / "fig_validation.json"
    validation_only.write_text(json.dumps({**results, "comparisons": {}, "test": {}, "test_per_task": {}}))
    assert main(["fair-report", str(validation_only), "--figure", str(out)]) == 2
    assert "no comparisons on test" in capsys.readouterr().err


def test_fair_report_versus_compares_the_same_arms_of_two_runs_task_by_task(tiny_fair, capsys):
    """Two runs that differ in one thing (the train templates, say), read on the same test tasks: each shared arm,
    the second run's against the first's, paired by task; other tasks or other compute are refused."""
    import copy

    from sweet_trl.cli import main
    from sweet_trl.study.fair.across_runs import versus_comparisons

    base = json.loads(json.dumps(tiny_fair["results"]))  # the fixture's study (later tests rerun parts of it)
    other = copy.deepcopy(base)
    for row in other["test_per_task"]["rft"]:
        row["success_rate"] = 1.0  # the changed run's RFT succeeds everywhere
    del other["test_per_task"]["best_random"]  # an arm the second run did not run
    versus = versus_comparisons(base, other, samples=200)
    assert "best_random" not in versus and versus["start"]["success"]["difference"] == 0.0
    rows = base["test_per_task"]["rft"]
    expected = sum(1.0 - r["success_rate"] for r in rows) / len(rows)
    assert versus["rft"]["success"]["difference"] == pytest.approx(expected)
    paths = [tiny_fair["root"] / "first.json", tiny_fair["root"] / "wide.json"]
    for path, data in zip(paths, (base, other)):
        path.write_text(json.dumps(data))
    assert main(["fair-report", *map(str, paths), "--versus"]) == 0
    text = capsys.readouterr().out
    assert f"| rft: wide - first | {expected * 100:+.1f} [" in text.split("### versus")[1]
    moved = copy.deepcopy(other)
    moved["test_per_task"]["rft"] = moved["test_per_task"]["rft"][1:]
    with pytest.raises(ValueError, match="read other test tasks"):
        versus_comparisons(base, moved)
    spent = copy.deepcopy(other)
    spent["arms"]["rft"]["gradient_steps"] += 1
    with pytest.raises(ValueError, match="spent other compute"):
        versus_comparisons(base, spent)
    assert "on validation (each arm's last round), " in text.split("### versus")[1]  # both files keep those too
    assert main(["fair-report", str(paths[0]), "--versus"]) == 2  # two files, not one
    assert "the run changed from, then the changed run" in capsys.readouterr().err
    validation_only = copy.deepcopy(base)
    del validation_only["test_per_task"]  # two runs that chose settings: compared on validation only
    paths[0].write_text(json.dumps(validation_only))
    assert main(["fair-report", *map(str, paths), "--versus"]) == 0
    versus_text = capsys.readouterr().out.split("### versus")[1]
    assert "on validation (each arm's last round), " in versus_text and "on test, " not in versus_text
    del validation_only["validation_per_task"]  # a file written before per-task figures were kept: said
    paths[0].write_text(json.dumps(validation_only))
    assert main(["fair-report", *map(str, paths), "--versus"]) == 2
    assert "do not both hold per-task test or validation figures" in capsys.readouterr().err
    # a run folder stands for the JSON it holds
    assert main(["fair-report", str(tiny_fair["run"])]) == 0
    assert f"### {tiny_fair['run'] / 'fair' / 'fair_study.json'}" in capsys.readouterr().out
    empty = tiny_fair["root"] / "not_a_run"
    empty.mkdir(exist_ok=True)
    assert main(["fair-report", str(empty)]) == 2
    assert "holds no fair_study.json" in capsys.readouterr().err


def test_an_arm_variant_runs_beside_its_arm_at_the_same_compute_and_is_compared_with_it(tiny_fair, tmp_path):
    """``--fair.variants "sweet_best@lr=--train_policy_best.learning_rate 0.01"``: the arm again with one stage's
    options changed, in its own folders, sharing round 1's collection (and candidates, unless it changes how they are
    sampled), read on validation and compared with the arm it varies; the arm itself is read back, not rerun."""
    from sweet_trl.pipeline_config import ConfigError
    from sweet_trl.study.fair import run_fair_study
    from sweet_trl.study.fair.results import validation_comparisons

    run, fair = tiny_fair["run"], tiny_fair["run"] / "fair"
    base = {p: p.stat().st_mtime_ns for p in (fair / "sweet_best").rglob("_COMPLETE.json")}
    ledger = (run / "protocol" / "test_reads.json").read_text()
    variants = ["sweet_best@lr=--train_policy_best.learning_rate 0.01",
                "sweet_best@two=--sample_candidates.num_candidates 2"]
    with pytest.raises(ConfigError, match="unknown arguments"):  # misspelt: refused before any stage
        run_fair_study(tiny_fair["path"], ["--fair.variants", "sweet_best@x=--train_policy_best.learnin_rate 1"],
                       stream=io.StringIO())
    assert not (fair / "sweet_best@x").exists()
    results = run_fair_study(tiny_fair["path"], ["--fair.arms", "sweet_best", "--fair.variants", *variants,
                                                 "--fair.read_test", "false",
                                                 "--fair.results_path", str(tmp_path / "variants.json")],
                             stream=io.StringIO())
    assert {p: p.stat().st_mtime_ns for p in (fair / "sweet_best").rglob("_COMPLETE.json")} == base
    assert [results["arms"][arm]["rounds"] for arm in ("sweet_best", "sweet_best@lr", "sweet_best@two")] == [2, 2, 2]
    assert results["arms"]["sweet_best@lr"] == {**results["arms"]["sweet_best"],
                                                "stage_seconds": results["arms"]["sweet_best@lr"]["stage_seconds"]}
    assert results["arms"]["sweet_best@two"]["candidates_sampled"] < results["arms"]["sweet_best"]["candidates_sampled"]
    trained = json.loads((fair / "sweet_best@lr" / "round1" / "train_policy_best" / "_COMPLETE.json").read_text())
    options = {k: v for part in trained["config"] for k, v in part.items()}
    assert options["learning_rate"] == 0.01 and options["max_steps"] == 3  # its own option, the study's budget
    assert (fair / "sweet_best@lr" / "round1" / "collect").is_symlink()  # round 1's collection, shared
    assert (fair / "sweet_best@lr" / "round1" / "sample_candidates").is_symlink()
    own = fair / "sweet_best@two" / "round1" / "sample_candidates"  # its candidates are sampled its own way
    assert not own.is_symlink() and json.loads((own / "_COMPLETE.json").read_text())["counts"]["candidates"] == 2 * 4
    assert (run / "protocol" / "test_reads.json").read_text() == ledger  # validation only: no test read
    on_validation = validation_comparisons(results["validation_per_task"], samples=200)
    assert {"sweet_best@lr - sweet_best", "sweet_best@two - sweet_best", "sweet_best@lr - start"} <= set(on_validation)
    assert results["settings"]["variants"] == variants
