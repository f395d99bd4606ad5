"""The study: bootstrap intervals, best-of-N selection, and the whole study on a tiny model.

Run: pytest tests/test_study.py -q

The end-to-end study uses a two-layer Llama built in the test on procedural tasks; its answering turns are
scripted (the reference or a wrong guess, by the turn's seed) so that rewards differ within a task. Everything else
is real: every method's stages, the no-privileged critic, a second round from the merged round-1 policy, the
critics judged on graded candidates, the JSON and the report.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import random

import pytest
from helpers_tiny_models import save_tiny_model

from sweet_trl.study.critic_eval import best_of_n_selection, pair_order_by_gap, score_turns, stored_rankers
from sweet_trl.study.stats import bootstrap_mean, paired_difference

# The module's fixture runs a whole two-round study of every method: 2 minutes on one 2-core machine, up to 8 on a
# CI machine four times slower. The suite's 600-s timeout is there to stop hangs, not this.
pytestmark = pytest.mark.timeout(1800)

# ---------------------------------------------------------------------------------------------------------------
# Statistics


def test_bootstrap_interval_covers_the_mean_and_narrows_with_more_tasks():
    rng = random.Random(0)
    few = [float(rng.random() < 0.3) for _ in range(20)]
    many = few * 10
    a, b = bootstrap_mean(few, samples=4000), bootstrap_mean(many, samples=4000)
    assert a.low <= a.mean <= a.high and a.mean == pytest.approx(sum(few) / 20)
    assert (b.high - b.low) < 0.5 * (a.high - a.low)  # ten times the tasks: about a third of the width
    assert bootstrap_mean([0.5] * 8, samples=200).to_dict() == {"mean": 0.5, "low": 0.5, "high": 0.5, "tasks": 8,
                                                               "level": 0.95}
    # the interval of a Bernoulli mean is close to the normal approximation
    p, n = 0.3, 400
    values = [1.0] * int(p * n) + [0.0] * int((1 - p) * n)
    interval = bootstrap_mean(values, samples=4000)
    half = 1.96 * math.sqrt(p * (1 - p) / n)
    assert interval.low == pytest.approx(p - half, abs=0.01) and interval.high == pytest.approx(p + half, abs=0.01)


def test_paired_difference_removes_shared_task_difficulty():
    rng = random.Random(1)
    difficulty = {f"t{i}": rng.random() for i in range(40)}
    ours = {t: min(1.0, d + 0.1) for t, d in difficulty.items()}
    theirs = dict(difficulty)
    paired = paired_difference(ours, theirs, samples=2000)
    assert paired.excludes_zero() and paired.low > 0.05
    unpaired_width = (bootstrap_mean(list(ours.values()), samples=2000).high
                      - bootstrap_mean(list(ours.values()), samples=2000).low)
    assert paired.high - paired.low < 0.5 * unpaired_width
    with pytest.raises(ValueError, match="same tasks"):
        paired_difference({"a": 1.0}, {"b": 1.0})


def test_statistics_refuse_bad_input():
    with pytest.raises(ValueError, match="no task"):
        bootstrap_mean([])
    with pytest.raises(ValueError, match="finite"):
        bootstrap_mean([0.1, float("nan")])
    with pytest.raises(ValueError, match="samples"):
        bootstrap_mean([0.1], samples=10)


# ---------------------------------------------------------------------------------------------------------------
# Best-of-N selection


def _row(rewards):
    return {"candidates": [f"c{i}" for i in range(len(rewards))], "candidate_rewards": list(rewards)}


def test_best_of_n_selection_scores_first_choices_against_chance_and_oracle():
    rows = [_row([0.0, 1.0, 0.5, 0.0]), _row([0.2, 0.2, 0.9, 0.1]), _row([0.3, 0.3, 0.3, 0.3]), _row([1.0, 0.0])]
    perfect = lambda row: list(row["candidate_rewards"])
    inverse = lambda row: [-r for r in row["candidate_rewards"]]
    blind = lambda row: [0.0] * len(row["candidates"])
    result = best_of_n_selection(rows, {"perfect": perfect, "inverse": inverse, "blind": blind}, seed=0)
    assert result["turns"] == 4 and result["turns_with_reward_spread"] == 3  # equal rewards tell nothing
    rankers = result["rankers"]
    assert rankers["perfect"]["top1"]["mean"] == 1.0 and rankers["inverse"]["top1"]["mean"] == 0.0
    chance = (1 / 4 + 1 / 4 + 1 / 2) / 3
    assert rankers["random"]["top1"]["mean"] == pytest.approx(chance)
    assert rankers["blind"]["top1"]["mean"] == pytest.approx(chance)
    assert rankers["oracle"]["selected_reward"]["mean"] == pytest.approx((1.0 + 0.9 + 1.0) / 3)
    assert rankers["perfect"]["selected_reward"]["mean"] == rankers["oracle"]["selected_reward"]["mean"]
    # success: only a pick that passes every test; the equal-reward turn below 1 counts for no ranker
    assert result["turns_with_a_success"] == 2
    assert rankers["perfect"]["selected_success"]["mean"] == pytest.approx(2 / 3)
    assert rankers["inverse"]["selected_success"]["mean"] == 0.0
    assert rankers["random"]["selected_success"]["mean"] == pytest.approx((1 / 4 + 0 + 1 / 2) / 3)
    assert rankers["blind"]["selected_success"]["mean"] == rankers["random"]["selected_success"]["mean"]
    # a ranker that cannot score a candidate (nan) picks among those it scored
    partial = lambda row: [math.nan] + list(row["candidate_rewards"][1:])
    assert best_of_n_selection(rows[:1], {"p": partial})["rankers"]["p"]["top1"]["mean"] == 1.0
    assert "paired" not in result  # only the two trained critics are compared turn by turn


def test_the_critics_with_and_without_c_are_compared_turn_by_turn():
    rows = [_row([0.0, 1.0, 0.5]), _row([0.2, 0.9, 0.1]), _row([0.4, 0.0, 0.0]), _row([0.3, 0.3, 0.3])]
    perfect = lambda row: list(row["candidate_rewards"])
    first = lambda row: [1.0] + [0.0] * (len(row["candidates"]) - 1)  # always the first candidate
    result = best_of_n_selection(rows, {"critic_privileged": perfect, "critic_no_privileged": first}, seed=0)
    paired = result["paired"]["critic_privileged - critic_no_privileged"]
    assert paired["turns"] == 3  # the turn whose candidates are all equal tells nothing
    # picks a best one on every turn against the first candidate's 0, 0 and 1
    assert paired["top1"]["mean"] == pytest.approx((1 + 1 + 0) / 3)
    assert paired["selected_reward"]["mean"] == pytest.approx(((1.0 - 0.0) + (0.9 - 0.2) + 0.0) / 3)
    assert paired["selected_success"]["mean"] == pytest.approx(1 / 3)
    assert paired["top1"]["low"] <= paired["top1"]["mean"] <= paired["top1"]["high"]


def test_stored_scores_judge_as_the_critics_did_and_turns_of_a_task_count_once():
    rows = [{**_row([0.0, 1.0, 0.5]), "task_id": "a"}, {**_row([0.2, 0.9, 0.1]), "task_id": "a"},
            {**_row([0.4, 0.0, 0.0]), "task_id": "b"}, {**_row([0.3, 0.3, 0.3]), "task_id": "b"}]
    perfect = lambda row: list(row["candidate_rewards"])
    first = lambda row: [1.0] + [0.0] * (len(row["candidate_rewards"]) - 1)
    rankers = {"critic_privileged": perfect, "critic_no_privileged": first}
    scored = score_turns(rows, rankers)
    assert [bool(row["scores"]) for row in scored] == [True, True, True, False]  # equal rewards are not scored
    assert set(stored_rankers(scored)) == set(rankers)
    direct, stored = best_of_n_selection(rows, rankers), best_of_n_selection(scored, stored_rankers(scored))
    assert stored == direct
    paired = stored["paired"]["critic_privileged - critic_no_privileged"]
    # task a: +1 on both turns; task b: 0 -- the mean is over tasks, not over the 3 turns
    assert (paired["turns"], paired["tasks"]) == (3, 2) and paired["top1"]["mean"] == pytest.approx(0.5)


def test_pool_critic_judgements_script_pools_runs_by_task(tiny_study, tmp_path, capsys):
    pool = _script("pool_critic_judgements")
    run = tiny_study["run"]
    one = json.loads((run / "critic_eval" / "selection.json").read_text())
    assert pool.main([str(run), str(run), "--json", str(tmp_path / "pooled.json")]) == 0
    pooled = json.loads((tmp_path / "pooled.json").read_text())
    # the same turns twice: twice the turns, the same tasks and the same rates
    assert pooled["turns"] == 2 * one["turns"] and pooled["turns_with_reward_spread"] == 2 * one["turns_with_reward_spread"]
    for name, entry in one["rankers"].items():
        assert pooled["rankers"][name]["top1"]["mean"] == pytest.approx(entry["top1"]["mean"])
    label = "critic_privileged - critic_no_privileged"
    assert pooled["paired"][label]["tasks"] == one["paired"][label]["tasks"]
    assert pooled["paired"][label]["top1"]["mean"] == pytest.approx(one["paired"][label]["top1"]["mean"])
    assert "picks a best candidate" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="scores.jsonl not found"):
        pool.main([str(tmp_path)])


def test_critic_uses_c_takes_another_task_of_the_same_template():
    script = _script("critic_uses_c")
    rows = [{"task_id": "proc-test-seen-late_fee-aaaa", "privileged": "rate 3"},
            {"task_id": "proc-test-seen-late_fee-bbbb", "privileged": "rate 5"},
            {"task_id": "proc-test-seen-late_fee-aaaa", "privileged": "rate 3"},  # a second turn of a task
            {"task_id": "proc-test-unseen-seat_label-cccc", "privileged": "Row"},  # alone in its template
            {"task_id": "custom-1", "privileged": "x"}]  # not a procedural task
    assert script.other_references(rows) == ["rate 5", "rate 3", "rate 5", None, None]
    # the split's other tasks fill in where the judged turns have no second task of a template
    pool = {"proc-test-unseen-seat_label-dddd": "Seat", "proc-test-seen-late_fee-cccc": "rate 7"}
    assert script.other_references(rows, pool) == ["rate 5", "rate 7", "rate 5", "Seat", None]
    assert script.template_of("proc-test-seen-age_group-62eb49ba") == "age_group"
    scored = [{"scores": {script.TRUE_C: [0.1, 0.9, 0.2], script.OTHER_C: [0.0, 0.5, 0.4]}},
              {"scores": {script.TRUE_C: [0.3, 0.1], script.OTHER_C: [0.1, 0.3]}}]
    assert script.same_pick(scored) == 0.5


def test_critic_uses_c_script_scores_the_turns_again_with_another_reference(tiny_study, tmp_path, capsys):
    script = _script("critic_uses_c")
    run, copy = tiny_study["run"], tmp_path / "run"
    (copy / "critic_eval").mkdir(parents=True)
    (copy / "train_critic").symlink_to(run / "train_critic")
    (copy / "critic_eval" / "scores.jsonl").write_text((run / "critic_eval" / "scores.jsonl").read_text())
    # the tiny study's test tasks are of five templates; call them tasks of one, so each has another reference
    header, *lines = (run / "critic_eval" / "graded.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    for row in rows:
        row["task_id"] = "proc-test-seen-late_fee-" + hashlib.sha256(row["privileged"].encode()).hexdigest()[:8]
    (copy / "critic_eval" / "graded.jsonl").write_text("\n".join([header, *map(json.dumps, rows)]) + "\n")
    assert script.main([str(copy), "--json", str(tmp_path / "out.json")]) == 0
    result = json.loads((tmp_path / "out.json").read_text())
    stored = json.loads((run / "critic_eval" / "selection.json").read_text())["rankers"]["critic_privileged"]
    # the turns' own c gives back the study's judgement; the other c is a real second scoring of the same turns
    assert result["rankers"]["critic_privileged"]["top1"] == stored["top1"]
    assert result["rankers"]["critic_privileged_other_c"]["turns_scored"] == stored["turns_scored"]
    paired = result["paired"]["critic_privileged - critic_privileged_other_c"]
    assert paired["turns"] == stored["turns_scored"] and -1.0 <= paired["top1"]["mean"] <= 1.0
    assert 0.0 <= result["same_pick"] <= 1.0 and len(result["per_turn"]) == stored["turns_scored"]
    assert "critic_privileged_other_c" in capsys.readouterr().out


def test_pair_order_by_gap_counts_only_pairs_the_gap_keeps_and_whose_rewards_differ():
    rows = [{"ranking_scores": [0.9, 0.5, 0.0], "candidate_rewards": [1.0, 0.0, 0.5]},
            {"ranking_scores": [0.2, 0.1, math.nan], "candidate_rewards": [0.0, 1.0, 1.0]},
            {"ranking_scores": [0.3, 0.0], "candidate_rewards": [0.4, 0.4]}]
    no_gap, mid, wide = pair_order_by_gap(rows, [0.0, 0.45, 1.0])
    # row 1: (0.9 > 0.5, 1.0 > 0.0) right, (0.9 > 0.0, 1.0 > 0.5) right, (0.5 > 0.0, 0.0 < 0.5) wrong;
    # row 2: (0.2 > 0.1, 0.0 < 1.0) wrong, the unscored candidate takes no part; row 3: equal rewards tell nothing
    assert (no_gap["pairs"], no_gap["ordered_right"]) == (4, 0.5)
    assert (mid["pairs"], mid["ordered_right"]) == (2, 0.5)  # gaps 0.9 and 0.5 are kept, 0.4 and 0.1 are not
    assert wide == {"gap": 1.0, "pairs": 0, "ordered_right": None}


# ---------------------------------------------------------------------------------------------------------------
# The whole study on a tiny model


class ScriptedAnswers:
    """The tiny model's turns, except single answering turns: the task's reference or a wrong guess, by seed; the
    policy named "sweet" answers right more often (so that comparisons between policies have something to find).
    Candidates sampled together (``n`` > 1) hold one right and one wrong answer first, so that every answer state has
    candidates of different value whatever the seeds draw (four alike by seed: 1 in 8 per state)."""

    def __init__(self, inner, tasks):
        self.inner, self.name, self.tasks = inner, inner.name, tasks

    def generate(self, histories, n=1, sampling=None, seeds=None):
        from sweet_trl.generation.base import Generation

        out = self.inner.generate(histories, n=n, sampling=sampling, seeds=seeds)
        for i, history in enumerate(histories):
            task = self.tasks.get(next(m["content"] for m in history if m["role"] == "user"))
            if task is None or sum(m["role"] == "assistant" for m in history) < 1:
                continue
            for j in range(n):
                if n > 1 and j < 2:  # a state's candidates hold a right and a wrong answer whatever the seeds give
                    good = j == 0
                else:
                    good = random.Random(f"{seeds[i] if seeds else i}-{j}").random() < (0.9 if self.name == "sweet" else 0.5)
                name = task.ground_truth.split("(")[0].removeprefix("def ")
                code = task.ground_truth if good else f"def {name}(*args):\n    return 0\n"
                out[i][j] = Generation(text="I WANT TO ANSWER:\n```python\n" + code + "```", token_ids=[1],
                                       logprobs=[-1.0])
        return out


def tiny_run_config(root, model) -> dict:
    """A run of the tiny model on ``root``'s train.jsonl and test.jsonl: two turns, LoRA, two steps a stage."""
    return {
        "run_dir": str(root / "run"), "policy_model": model, "train_tasks": str(root / "train.jsonl"),
        "eval_tasks": str(root / "test.jsonl"), "max_turns": 2,
        "max_new_tokens": 8, "generation_batch_size": 8, "num_workers": 2,
        "bf16": False, "use_peft": True, "lora_r": 4, "lora_alpha": 8, "lora_target_modules": ["q_proj", "v_proj"],
        "gradient_checkpointing": False, "logging_steps": 1, "report_to": [], "max_length": 1024,
        "per_device_train_batch_size": 2, "gradient_accumulation_steps": 1, "max_steps": 2, "learning_rate": 1e-3,
        "save_strategy": "no",
        "collect": {"episodes_per_task": 4},
        "critic_pairs": {"pair_rule": "all_pairs", "require_success": False},
    }


@pytest.fixture(scope="module")
def tiny_study(tmp_path_factory):
    pytest.importorskip("trl")
    import torch
    import yaml

    from colbench_gym.tasks import resolve_tasks
    from colbench_gym.tasks.procedural import generate_tasks
    from sweet_trl import pipeline
    from sweet_trl.study import run_study

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("study")
    model = save_tiny_model(root / "tiny-llama")
    # Tasks of one template share their request, so the scripted answers need templates apart in train and test.
    files = {"train": generate_tasks(3, "train", templates=["greet", "order_code", "make_slug"]),
             "test": generate_tasks(5, "test", templates=["late_fee", "overtime_pay", "is_adult", "seat_label",
                                                          "sale_price"])}
    for split, rows in files.items():
        (root / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasks = {t.problem_description: t for split in files for t in resolve_tasks(str(root / f"{split}.jsonl"))}
    assert len(tasks) == 8
    real = pipeline.models.make_backend
    patch = pytest.MonkeyPatch()
    patch.setattr(pipeline.models, "make_backend", lambda *a, **k: ScriptedAnswers(real(*a, **k), tasks))
    config = {
        **tiny_run_config(root, model),
        "sample_candidates": {"num_candidates": 4, "state_fraction": 0.5, "max_states": 4},
        "policy_pairs": {"pairs_per_turn": 2},
        "rank": {"report_trajectories": 2},
        "baseline_rft": {"min_reward": 0.5},
        "baseline_mtdpo": {"pair_rule": "all_pairs", "require_success": False},
        "evaluate": {"eval_episodes_per_task": 4, "eval_temperature": 1.0},
        "train_policy_best": {"turns": [1]},
        "study": {"rounds": 2, "best_of_n_states": 3, "best_of_n_rounds": 2, "critic_eval_states": 3, "critic_eval_candidates": 4, "bootstrap_samples": 500,
                  "answer_turn_states": 3, "answer_turn_candidates": 4,
                  "results_path": str(root / "results" / "study.json")},
    }
    path = root / "study.yaml"
    path.write_text(yaml.safe_dump(config))
    first, second = io.StringIO(), io.StringIO()
    results = run_study(path, stream=first)
    again = run_study(path, stream=second)
    patch.undo()
    return {"root": root, "run": root / "run", "results": results, "again": again, "first": first.getvalue(),
            "second": second.getvalue()}


def test_study_trains_every_method_and_evaluates_them_on_the_same_tasks(tiny_study):
    from datasets import load_from_disk

    results, run = tiny_study["results"], tiny_study["run"]
    assert set(results["policies"]) == {"zero_shot", "sweet", "sweet_best", "rft", "mtdpo", "sweet_no_privileged",
                                        "sweet_round2", "sweet_best_round2"}
    task_sets = set()
    for name, entry in results["policies"].items():
        assert entry["tasks"] == 5 and entry["episodes"] == 20, name
        assert entry["success_ci"][0] <= entry["success_rate"] <= entry["success_ci"][1]
        assert entry["tests_passed_ci"][0] <= entry["tests_passed"] <= entry["tests_passed_ci"][1]
        assert set(entry["parts"]) == {"seen", "unseen"}
        assert entry["parts"]["seen"]["tasks"] + entry["parts"]["unseen"]["tasks"] == 5
        rows = _per_task(run, results, name)
        task_sets.add(frozenset(r["task_id"] for r in rows))
        # each entry is computed from its own evaluation's episodes (the ablation's and round 2's are in sub-folders)
        episodes = {r["task_id"]: r for r in rows}
        assert sum(r["episodes"] for r in episodes.values()) == entry["episodes"], name
        folder = {"sweet_no_privileged": "no_privileged", "sweet_round2": "round2", "sweet_best": "best_of_n",
                  "sweet_best_round2": "best_of_n_round2"}
        evaluated = json.loads((run / folder.get(name, ".") / "evaluate"
                                / {"sweet_no_privileged": "sweet", "sweet_round2": "sweet",
                                   "sweet_best_round2": "sweet_best"}.get(name, name)
                                / "per_task.json")
                               .read_text())
        assert rows == evaluated, name
    assert len(task_sets) == 1  # paired: the same tasks for every policy
    folders = {s["stage"]: s["dir"] for s in results["stages"]}
    assert folders["evaluate/sweet_no_privileged"] == "no_privileged/evaluate/sweet"
    assert folders["evaluate/sweet_round2"] == "round2/evaluate/sweet" and folders["evaluate/sweet"] == "evaluate/sweet"
    comparisons = results["comparisons"]
    assert {"sweet - zero_shot", "sweet - sweet_no_privileged", "sweet_round2 - sweet (round 1)",
            "sweet_best - zero_shot", "sweet_best - sweet", "sweet_best - rft"} <= set(comparisons)
    # best-of-N fine-tuning: SWEET-RL's collection and critic (links), candidates of its own at the answer turn
    variant = run / "best_of_n"
    assert all((variant / name).is_symlink() for name in ("collect", "critic_pairs", "train_critic"))
    assert not (variant / "sample_candidates").is_symlink()
    sampled = json.loads((variant / "sample_candidates" / "_COMPLETE.json").read_text())
    assert {"state_fraction": 1.0, "max_states": 3, "state_turns": [1]}.items() <= sampled["config"][2].items()
    best = json.loads((variant / "train_policy_best" / "_COMPLETE.json").read_text())
    assert best["inputs"] == {"rank": json.loads((variant / "rank" / "_COMPLETE.json").read_text())["fingerprint"]}
    assert 0 < best["counts"]["turn_states"] <= 3 and folders["evaluate/sweet_best"] == "best_of_n/evaluate/sweet_best"
    # round 2 of best-of-N: the same turn states and critic, candidates from the merged round-1 policy, which it
    # fine-tunes further
    round2 = run / "best_of_n_round2"
    assert all((round2 / name).resolve() == (run / name).resolve() for name in ("collect", "critic_pairs",
                                                                                 "train_critic"))
    merged = (variant / "train_policy_best" / "merged").resolve()
    resampled = json.loads((round2 / "sample_candidates" / "_COMPLETE.json").read_text())
    assert resampled["config"][0]["policy_model"] == str(merged)
    assert {"state_fraction": 1.0, "max_states": 3, "state_turns": [1]}.items() <= resampled["config"][2].items()
    states = lambda folder: sorted(load_from_disk(str(folder / "sample_candidates" / "candidates"))["state_id"])
    assert states(round2) == states(variant)
    adapter = json.loads((round2 / "train_policy_best" / "model" / "adapter_config.json").read_text())
    assert adapter["base_model_name_or_path"] == str(merged)
    assert folders["evaluate/sweet_best_round2"] == "best_of_n_round2/evaluate/sweet_best"
    assert {"sweet_best_round2 - zero_shot", "sweet_best_round2 - sweet_best (round 1)"} <= set(comparisons)
    assert {f"sweet_best_round2 - {other}" for other in ("sweet", "rft", "mtdpo", "sweet_no_privileged")} <= set(
        comparisons)  # the last round against every other method
    assert any(label.startswith("sweet - best baseline") for label in comparisons)
    diff = comparisons["sweet - zero_shot"]["success"]
    expected = results["policies"]["sweet"]["success_rate"] - results["policies"]["zero_shot"]["success_rate"]
    assert diff["difference"] == pytest.approx(expected) and diff["ci"][0] <= diff["difference"] <= diff["ci"][1]


def _per_task(run, results, name):
    stage = next(s for s in results["stages"] if s["stage"] == f"evaluate/{name}")
    return json.loads((run / stage["dir"] / "per_task.json").read_text())


def test_the_ablation_shares_collection_and_trains_its_critic_without_c(tiny_study):
    run = tiny_study["run"]
    for name in ("collect", "critic_pairs", "sample_candidates"):
        assert (run / "no_privileged" / name).is_symlink()
    with_c = json.loads((run / "train_critic" / "model" / "sweet_critic.json").read_text())
    without_c = json.loads((run / "no_privileged" / "train_critic" / "model" / "sweet_critic.json").read_text())
    assert json.dumps(with_c).count('"use_privileged": true') and json.dumps(without_c).count('"use_privileged": false')
    # round 2 collected with the merged round-1 policy
    marker = json.loads((run / "round2" / "collect" / "_COMPLETE.json").read_text())
    assert marker["config"][0]["policy_model"] == str((run / "train_policy" / "merged").resolve())
    assert marker["info"]["policy"] == marker["config"][0]["policy_model"]  # what `status` and `show` name it by
    assert (run / "train_policy" / "merged" / "config.json").exists()


def test_study_writes_json_report_and_critic_judgement_and_resumes(tiny_study):
    results, run, root = tiny_study["results"], tiny_study["run"], tiny_study["root"]
    on_disk = json.loads((root / "results" / "study.json").read_text())
    # written by the second call, which only recomputed the statistics of the same stages
    assert on_disk == json.loads((run / "study.json").read_text()) == json.loads(json.dumps(tiny_study["again"]))
    assert {k: v for k, v in on_disk.items() if k != "wall_seconds"} == json.loads(json.dumps(
        {k: v for k, v in results.items() if k != "wall_seconds"}))
    assert on_disk["seeds"]["round1/collect"]["collect_seed"] == 0
    assert on_disk["versions"].get("torch") and on_disk["stage_seconds_total"] > 0
    assert all(s["seconds"] >= 0 for s in on_disk["stages"])
    selection = results["critic_selection"]
    assert selection["turns"] == 3 and (run / "critic_eval" / "graded.jsonl").exists()
    rewards = [json.loads(line)["candidate_rewards"] for line in
               (run / "critic_eval" / "graded.jsonl").read_text().splitlines()[1:]]
    assert all(0.0 <= r <= 1.0 for row in rewards for r in row) and any(1.0 in row for row in rewards)
    assert set(selection["rankers"]) >= {"critic_privileged", "critic_no_privileged", "random", "oracle"}
    assert selection["turns_with_a_success"] == sum(1.0 in row for row in rewards)
    # every critic's scores are kept for the turns whose rewards differ, so judging again scores nothing
    scored = [json.loads(line) for line in (run / "critic_eval" / "scores.jsonl").read_text().splitlines()[1:]]
    assert [row["candidate_rewards"] for row in scored] == rewards
    for row in scored:
        spread = max(row["candidate_rewards"]) > min(row["candidate_rewards"])
        assert (set(row["scores"]) == {"critic_privileged", "critic_no_privileged", "untrained_critic"}) == spread
        assert all(len(s) == len(row["candidate_rewards"]) for s in row["scores"].values())
    assert "[critic_eval] skipped: scored" in tiny_study["second"]
    report = (run / "report.html").read_text()
    assert "<section id='study'>" in report and "sweet_no_privileged" in report and "<svg" in report
    assert "its pick succeeds %" in report and f"Any candidate succeeds on {selection['turns_with_a_success']} of 3" in report
    assert "Paired differences" in tiny_study["first"]
    # study.json after every method, the report (seconds of figures) once, when the study is done
    assert tiny_study["first"].count("[report] ") == 1 and tiny_study["second"].count("[report] ") == 1
    assert tiny_study["first"].count("Paired differences") > 1
    # a second call reruns nothing and gives the same numbers
    assert tiny_study["second"].count("skipped") >= 20 and "running" not in tiny_study["second"].replace(
        "running again", "")


def test_study_report_prints_the_table_the_study_printed_and_names_the_reader_of_other_files(tiny_study, capsys,
                                                                                              tmp_path):
    from sweet_trl.cli import main
    from sweet_trl.study.results import format_table

    path, run = tiny_study["root"] / "results" / "study.json", tiny_study["run"]
    assert main(["study-report", str(path), str(run)]) == 0  # a results file, or the run folder that holds one
    text = capsys.readouterr().out
    table = format_table(json.loads(path.read_text()))
    assert text == f"### {path}\n\n{table}\n\n### {run / 'study.json'}\n\n{table}\n"
    assert table in tiny_study["second"]  # what the study printed when it wrote the file
    fair = tmp_path / "fair.json"
    fair.write_text(json.dumps({"protocol": {}, "arms": {}}))
    assert main(["study-report", str(fair)]) == 2
    assert "is not a `sweet-rl study` JSON (no policies or study settings): it is read by `sweet-rl fair-report`" \
        in capsys.readouterr().err
    assert main(["credit-report", str(path)]) == 2
    assert "it is read by `sweet-rl study-report`" in capsys.readouterr().err
    assert main(["study-report", str(tmp_path)]) == 2
    assert "holds no study.json" in capsys.readouterr().err


def _script(name):
    """A module of scripts/, loaded from its file (scripts/ is not a package)."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "scripts" / f"{name}.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    return script


def test_pair_accuracy_script_grades_the_runs_answer_turns(tiny_study, tmp_path):
    from sweet_trl.trainer_utils import load_rows

    script = _script("pair_accuracy")
    out = tmp_path / "pairs.json"
    assert script.main([str(tiny_study["run"]), "--gaps", "0", "0.5", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    ranked = load_rows(tiny_study["run"] / "rank" / "ranked").to_list()
    assert result["answer_turns"] == sum(int(r["turn"]) == 1 for r in ranked) > 0  # max_turns 2: turn 1 answers
    loose, strict = result["by_gap"]
    assert loose["pairs"] >= strict["pairs"]
    means = result["mean_reward"]
    assert 0.0 <= means["random"] <= means["best"] <= 1.0 and means["critic_pick"] <= means["best"]
    solved = result["success"]
    assert 0.0 <= solved["random"] <= solved["best"] <= 1.0 and solved["critic_pick"] <= solved["best"]
    # every answer-turn pair of the policy is counted once (the tiny critic's pairs may hold none: its scores are
    # not stable enough across runs to pass the score gap at the answer turn every time)
    answer_pairs = [p for p in load_rows(tiny_study["run"] / "policy_pairs" / "pairs").to_list() if int(p["turn"]) == 1]
    assert sum(result["training_pairs"].values()) == len(answer_pairs)


def test_pair_accuracy_grades_the_training_pairs_by_the_tests():
    script = _script("pair_accuracy")
    answers = ["I WANT TO ANSWER:\n```python\ndef fee(days):\n    return days * 3\n```",
               "I WANT TO ANSWER:\n```python\ndef fee(days):\n    return days\n```",
               "I WANT TO ANSWER:\n```python\ndef fee(days):\n    return 0\n```"]
    graded = [{"state_id": "t/0/turn1", "candidates": answers, "candidate_rewards": [1.0, 0.0, 0.0]}]
    pair = lambda chosen, rejected, state="t/0/turn1": {
        "state_id": state, "chosen": [{"role": "assistant", "content": answers[chosen]}],
        "rejected": [{"role": "assistant", "content": answers[rejected]}]}
    counts = script.training_pair_orders(graded, [pair(0, 1), pair(0, 2), pair(1, 2), pair(2, 0), pair(0, 1, "u")])
    assert counts == {"chosen_passes_more": 2, "as_many": 1, "chosen_passes_fewer": 1, "ungraded": 1}


def test_pair_accuracy_says_how_well_the_picks_score_tells_the_picks_that_succeed():
    script = _script("pair_accuracy")
    state = lambda scores, rewards: {"ranking_scores": scores, "candidate_rewards": rewards}
    graded = [state([0.9, 0.1], [1.0, 0.0]),           # pick 0.9: succeeds
              state([0.2, 0.7], [1.0, 0.5]),           # pick 0.7: fails (half the tests)
              state([0.5, float("nan")], [1.0, 1.0]),  # pick 0.5: succeeds
              state([-0.3, -1.0], [0.0, 1.0])]         # pick -0.3: fails
    across = script.picks_by_score(graded, fractions=(1.0, 0.5, 0.25))
    assert across["auc_success"] == pytest.approx(0.75)  # of 4 (succeeds, fails) pairs, 3 ordered right
    assert [(e["states"], e["success"], e["tests_passed"]) for e in across["by_top_fraction"]] == [
        (4, 0.5, pytest.approx(0.625)), (2, 0.5, pytest.approx(0.75)), (1, 1.0, 1.0)]
    assert script.picks_by_score([state([0.1, 0.2], [0.0, 0.0])])["auc_success"] is None  # no pick succeeds


def test_pair_accuracy_says_which_side_each_order_takes_toward_the_first_code():
    script = _script("pair_accuracy")
    first = "```python\ndef fee(days):\n    return days\n```"
    row = {"prompt": [{"role": "user", "content": "Write fee."}, {"role": "assistant", "content": first},
                      {"role": "user", "content": "The result is days times 3."}],
           "candidates": ["I WANT TO ANSWER:\n" + first,                                   # the first guess again
                          "I WANT TO ANSWER:\n```python\ndef fee(days):\n    return days * 3\n```",
                          "I WANT TO ANSWER:\n```python\nimport math\nprint('fee')\n```"],
           "ranking_scores": [0.5, 0.2, -0.1], "candidate_rewards": [0.1, 1.0, 0.0]}
    toward = script.closeness_orders([row])
    # closeness: copy > edit > unrelated; the scores follow it in all 3 pairs, the rewards in 2 (not copy vs edit)
    assert toward["score_pairs"] == toward["reward_pairs"] == 3
    assert toward["higher_score_is_closer"] == 1.0 and toward["higher_reward_is_closer"] == pytest.approx(2 / 3)


def test_answer_pick_sft_keeps_the_named_answer_per_turn():
    script = _script("answer_pick_sft")
    prompt = [{"role": "user", "content": "Write fee."}]
    rows = [{"state_id": "a/0/turn1", "task_id": "a", "prompt": prompt, "candidates": ["x", "y", "z"],
             "ranking_scores": [0.1, 0.9, 0.5], "candidate_rewards": [1.0, 0.0, 1.0]},
            {"state_id": "b/0/turn1", "task_id": "b", "prompt": json.dumps(prompt), "candidates": ["p", "q"],
             "ranking_scores": [0.3, 0.2], "candidate_rewards": [0.5, float("nan")]}]
    answer = lambda picked: [e["completion"][0]["content"] for e in picked]
    assert answer(script.pick_answers(rows, "critic")) == ["y", "p"]
    # oracle: among the answers that pass every test, the critic's favourite; a turn without one is left out
    oracle = script.pick_answers(rows, "oracle")
    assert answer(oracle) == ["z"] and oracle[0]["prompt"] == prompt
    randoms = script.pick_answers(rows, "random", seed=3)
    assert [e["state_id"] for e in randoms] == ["a/0/turn1", "b/0/turn1"]
    assert answer(randoms)[0] in "xyz" and answer(randoms)[1] in "pq" and randoms[1]["prompt"] == prompt
    with pytest.raises(ValueError, match="pick must be one of"):
        script.pick_answers(rows, "best")


def test_compare_evaluations_script_agrees_with_the_study(tiny_study, tmp_path):
    script = _script("compare_evaluations")
    run, results = tiny_study["run"], tiny_study["results"]
    out = tmp_path / "compare.json"
    zero_shot, sweet = run / "evaluate" / "zero_shot", run / "evaluate" / "sweet"
    assert script.main([str(zero_shot), str(sweet), "--samples", "500", "--json", str(out)]) == 0
    compared = json.loads(out.read_text())["policies"]
    study_diff = results["comparisons"]["sweet - zero_shot"]
    ours = compared[str(sweet)]
    for metric in ("success", "tests_passed"):
        scale = 100.0 if metric == "success" else 1.0  # the study keeps success as a fraction
        assert ours[f"{metric}_minus_baseline"][0] == pytest.approx(study_diff[metric]["difference"] * scale)
    assert ours["tests_passed"][0] == pytest.approx(results["policies"]["sweet"]["tests_passed"])
    assert f"{metric}_minus_baseline" not in compared[str(zero_shot)]
    # the scripted answers are never the first message's code: every episode is counted, none as a repeat
    repeats = ours["repeats"]
    assert repeats["episodes"] == results["policies"]["sweet"]["episodes"] and repeats["repeat_rate"] == 0.0
    with pytest.raises(SystemExit, match="evaluation folder"):
        script.main([str(run / "collect")])


def test_compare_evaluations_counts_disclosed_numbers_and_whether_the_answer_uses_them(tmp_path):
    script = _script("compare_evaluations")
    task = {"problem_description": "Write fee(days); the first 1 day is free.",
            "ground_truth": "def fee(days):\n    return max(0, days - 1) * 3.5 + 20\n"}

    def episode(human: str, answer: str, reward: float) -> dict:
        return {"task": task, "answer": answer, "reward": reward,
                "dialogue_history": [{"role": "user", "content": task["problem_description"]},
                                     {"role": "assistant", "content": "What does a day cost?"},
                                     {"role": "user", "content": human}]}

    records = [episode("Each day is 3.5 dollars.", "def fee(days):\n    return days * 3.5", 0.6),       # told, used
               episode("It is 3.5 a day plus 20.", "def fee(days):\n    return days * 2", 0.0),       # told, not used
               episode("Days after the 1st cost more.", "def fee(days):\n    return days * 3.5", 0.2),  # only 1: too common
               episode("I don't know.", "def fee(days):\n    return 35", 0.0)]                    # 35 is not 3.5
    (tmp_path / "trajectories.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    told = script.disclosures(tmp_path)
    assert told["episodes"] == 4 and told["disclosed_rate"] == pytest.approx(50.0)
    assert told["answer_uses_it_rate"] == pytest.approx(50.0)
    assert told["tests_passed_when_used"] == pytest.approx(60.0) and told["tests_passed_when_not_used"] == 0.0
    assert script.disclosures(tmp_path / "missing") is None


def test_pass_at_k_estimators_agree_with_every_draw_enumerated():
    import itertools

    from sweet_trl.study.answer_turns import expected_best_of_k, pass_at_k

    rng = random.Random(0)
    for _ in range(20):
        rewards = [rng.choice([0.0, 0.3, 0.7, 1.0]) for _ in range(rng.randint(1, 7))]
        for k in range(1, len(rewards) + 1):
            draws = list(itertools.combinations(rewards, k))
            solved = sum(any(r >= 1.0 for r in draw) for draw in draws) / len(draws)
            assert pass_at_k(sum(r >= 1.0 for r in rewards), len(rewards), k) == pytest.approx(solved)
            assert expected_best_of_k(rewards, k) == pytest.approx(sum(map(max, draws)) / len(draws))
    with pytest.raises(ValueError, match="k <= samples"):
        pass_at_k(1, 4, 5)
    with pytest.raises(ValueError, match="k <="):
        expected_best_of_k([0.5], 0)


def test_answer_pass_at_k_script_samples_and_grades_the_runs_answer_turns(tiny_study, tmp_path, monkeypatch):
    from colbench_gym.tasks import resolve_tasks
    from sweet_trl import pipeline
    from sweet_trl.trainer_utils import load_rows

    script = _script("answer_pass_at_k")
    root, run = tiny_study["root"], tiny_study["run"]
    tasks = {t.problem_description: t for split in ("train", "test")
             for t in resolve_tasks(str(root / f"{split}.jsonl"))}
    real = pipeline.models.make_backend
    monkeypatch.setattr(pipeline.models, "make_backend", lambda *a, **k: ScriptedAnswers(real(*a, **k), tasks))
    out = tmp_path / "pass.json"
    argv = ["--config", str(root / "study.yaml"), "--run_dir", str(run), "--states", "3", "--candidates", "4",
            "--temperatures", "1.0", "--json", str(out)]
    assert script.main(argv) == 0
    entry = json.loads(out.read_text())["by_temperature"]["1.0"]
    assert entry["turns"] == 3 and entry["candidates"] == 4 and [row["k"] for row in entry["by_k"]] == [1, 2, 4]
    # the scripted answers are the task's reference (every test passes) or a wrong guess, `def f(*args): return 0`
    (folder,) = (run / "pass_at_k").iterdir()
    rows = load_rows(folder / "candidates").to_list()
    solved = [sum("(*args)" not in text for text in row["candidates"]) for row in rows]
    pass_1, _, pass_4 = (row["pass_at_k"]["mean"] for row in entry["by_k"])
    assert pass_1 == pytest.approx(sum(solved) / (4 * len(rows)))
    assert pass_4 == pytest.approx(sum(s > 0 for s in solved) / len(rows))
    best = [row["best_tests_passed"]["mean"] for row in entry["by_k"]]
    assert best == sorted(best) and best[-1] >= pass_4
    # a second call samples nothing again: the same candidates, the same numbers
    assert script.main(argv) == 0
    assert json.loads(out.read_text())["by_temperature"]["1.0"] == entry
    # paired by turn with a result on the same turns: here itself, so every difference is 0
    again = tmp_path / "again.json"
    assert script.main(argv[:-1] + [str(again), "--baseline", str(out)]) == 0
    differences = json.loads(again.read_text())["by_temperature"]["1.0"]["minus_baseline"]
    assert [row["k"] for row in differences] == [1, 2, 4]
    assert all(row[metric][bound] == 0.0 for row in differences for metric in ("pass_at_k", "best_tests_passed")
               for bound in ("mean", "low", "high"))


def test_study_compares_every_policys_answers_on_the_same_held_out_turns(tiny_study):
    from sweet_trl.trainer_utils import load_rows

    results, run = tiny_study["results"], tiny_study["run"]
    answer_turns = results["answer_turns"]
    assert set(answer_turns["policies"]) == set(results["policies"])
    solved_by_policy = {}
    for name, entry in answer_turns["policies"].items():
        assert entry["turns"] == 3 and entry["candidates"] == 4 and [r["k"] for r in entry["by_k"]] == [1, 2, 4]
        rows = load_rows(run / "answer_turns" / name / "candidates").to_list()
        graded = [json.loads(line) for line in (run / "answer_turns" / name / "graded.jsonl").read_text().splitlines()]
        assert graded[0]["settings"]["policy"] == name and len(graded) == 4
        # the scripted answers are the task's reference (every test passes) or `def f(*args): return 0`
        solved = {row["state_id"]: sum("(*args)" not in text for text in row["candidates"]) for row in rows}
        solved_by_policy[name] = solved
        task_of = {row["state_id"]: row["task_id"] for row in rows}
        # the mean over tasks of each task's mean over its turns
        assert entry["by_k"][0]["pass_at_k"]["mean"] == pytest.approx(mean_by_task(solved, task_of, lambda s: s / 4))
        assert entry["by_k"][-1]["pass_at_k"]["mean"] == pytest.approx(mean_by_task(solved, task_of, lambda s: s > 0))
    # the same turns for every policy: the zero-shot evaluation's, chosen once
    assert len({frozenset(solved) for solved in solved_by_policy.values()}) == 1
    assert (run / "answer_turns" / "sweet_round2" / "settings.json").exists()
    comparisons = answer_turns["comparisons"]
    assert {"sweet - zero_shot", "rft - zero_shot", "sweet - rft", "sweet - sweet_no_privileged",
            "sweet_round2 - zero_shot", "sweet_best_round2 - rft", "sweet_best_round2 - mtdpo",
            "sweet_best_round2 - sweet_no_privileged"} <= set(comparisons)
    difference = comparisons["sweet - zero_shot"][0]["pass_at_k"]
    ours, theirs = answer_turns["policies"]["sweet"]["by_k"][0], answer_turns["policies"]["zero_shot"]["by_k"][0]
    assert difference["mean"] == pytest.approx(ours["pass_at_k"]["mean"] - theirs["pass_at_k"]["mean"])
    assert difference["mean"] > 0  # the scripted "sweet" answers right 90% of the time, the others 50%
    tasks = answer_turns["policies"]["zero_shot"]["tasks"]
    assert f"Answer turns (3 held-out turns of {tasks} tasks x 4 answers" in tiny_study["first"]
    assert "intervals over tasks" in tiny_study["first"]
    assert "The answer turn alone" in (run / "report.html").read_text()
    assert answer_turns["failed"] == {}
    # the second study call sampled nothing again
    assert tiny_study["again"]["answer_turns"] == json.loads(json.dumps(answer_turns))


def test_a_policy_whose_answers_cannot_be_sampled_is_recorded_and_the_others_compared(tiny_study, monkeypatch):
    from sweet_trl.study import answer_turns
    from sweet_trl.study.runner import Study

    run = tiny_study["run"]
    study = Study(tiny_study["root"] / "study.yaml", stream=io.StringIO())
    for name in ("zero_shot", "sweet", "rft"):
        study.markers[f"evaluate/{name}"] = json.loads((run / "evaluate" / name / "_COMPLETE.json").read_text())
    real = answer_turns._graded_answers

    def graded(folder, settings, *args):
        if settings["policy"] == "rft":
            raise OSError(f"no model at {settings['model']}")
        return real(folder, settings, *args)  # read back: the study sampled these already

    monkeypatch.setattr(answer_turns, "_graded_answers", graded)
    result = answer_turns.answer_turn_comparison(study)
    assert set(result["policies"]) == {"zero_shot", "sweet"} and "OSError: no model at" in result["failed"]["rft"]
    assert str(run / "baseline_rft" / "model") in result["failed"]["rft"]
    assert set(result["comparisons"]) == {"sweet - zero_shot"}
    assert result["policies"]["sweet"] == tiny_study["results"]["answer_turns"]["policies"]["sweet"]


def test_study_refuses_bad_configurations(tmp_path):
    pytest.importorskip("trl")
    import yaml

    from sweet_trl.pipeline_config import ConfigError
    from sweet_trl.study import Study

    def study(section):
        path = tmp_path / "s.yaml"
        path.write_text(yaml.safe_dump({"run_dir": str(tmp_path / "run"), "study": section}))
        return Study(path)

    with pytest.raises(ConfigError, match="unknown study methods"):
        study({"methods": ["sweet", "ppo"]})
    with pytest.raises(ConfigError, match="rounds must be an int >= 1"):
        study({"rounds": 0})
    with pytest.raises(ConfigError, match="add 'sweet'"):
        study({"rounds": 2, "methods": ["rft"]})
    with pytest.raises(ConfigError, match="best_of_n_rounds must be an int >= 1"):
        study({"best_of_n_rounds": 0})
    with pytest.raises(ConfigError, match="set best_of_n_states"):
        study({"best_of_n_rounds": 2})
    with pytest.raises(ConfigError, match="add 'sweet_best'"):
        study({"best_of_n_rounds": 2, "best_of_n_states": 8, "methods": ["sweet"]})
    with pytest.raises(ConfigError, match="must be a mapping"):
        study(["sweet"])


def test_a_method_that_cannot_run_is_recorded_and_the_others_go_on(tmp_path, monkeypatch):
    """RFT with no episode above its reward bar fails its stage; the study records it and evaluates the rest."""
    pytest.importorskip("trl")
    import yaml

    from sweet_trl.pipeline import StageError
    from sweet_trl.study import Study
    from sweet_trl.study import results as study_results

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"run_dir": str(tmp_path / "run"),
                                    "study": {"rounds": 2, "critic_eval_states": 0}}))
    study = Study(path, stream=io.StringIO())
    calls = []

    def stage(name, run_dir, *extra, key=None):
        calls.append(key or name)
        if name == "baseline_rft":
            raise StageError("no trajectory with reward >= 0.5 to imitate")
        return {}

    monkeypatch.setattr(study, "stage", stage)
    monkeypatch.setattr(study, "next_round", lambda previous, index: calls.append(f"round{index}"))
    seen = {}
    monkeypatch.setattr(study_results, "study_results",
                        lambda s, c, wall_seconds: seen.update(failed=dict(s.failed), writes=seen.get("writes", 0) + 1)
                        or {})
    monkeypatch.setattr(study_results, "write_results", lambda s, r, report: None)
    study.run()
    assert seen["failed"] == {"rft": "no trajectory with reward >= 0.5 to imitate"}
    assert "evaluate/rft" not in calls and "evaluate/mtdpo" in calls and "evaluate/sweet_no_privileged" in calls
    assert calls[-1] == "round2"
    assert seen["writes"] >= 4  # study.json after every method that ran, and at the end


@pytest.mark.parametrize("methods, best_of_n_states, samples", [
    (["sweet_best"], 8, ["best_of_n/sample_candidates"]),
    (["sweet_best"], None, ["round1/sample_candidates"]),
    (["rft", "mtdpo"], None, []),
    (["sweet_no_privileged"], None, ["round1/sample_candidates"]),
])
def test_the_study_samples_sweet_rls_turn_states_only_for_a_method_that_ranks_them(tmp_path, monkeypatch, methods,
                                                                                   best_of_n_states, samples):
    pytest.importorskip("trl")
    import yaml

    from sweet_trl.study import Study

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({"run_dir": str(tmp_path / "run"), "study": {
        "methods": methods, "best_of_n_states": best_of_n_states, "critic_eval_states": 0}}))
    study = Study(path, stream=io.StringIO())
    calls = []
    monkeypatch.setattr(study, "stage", lambda name, run_dir, *extra, key=None: calls.append(key or name) or {})
    monkeypatch.setattr(study, "write", lambda final=False: {})
    study.run()
    assert [c for c in calls if c.endswith("sample_candidates")] == samples, calls


def test_compare_evaluations_pools_seeds_by_task(tmp_path):
    script = _script("compare_evaluations")

    def evaluation(name: str, success: dict[str, float], tests: dict[str, float]) -> str:
        folder = tmp_path / name
        folder.mkdir()
        rows = [{"task_id": t, "success_rate": success[t], "mean_reward": tests[t]} for t in success]
        (folder / "per_task.json").write_text(json.dumps(rows))
        return str(folder)

    # seed 0: ours ahead on task a by 0.5; seed 1: ahead on b by 0.25 and behind on a by 0.25
    pairs = [evaluation("ours0", {"a": 0.5, "b": 0.0}, {"a": 0.6, "b": 0.2}),
             evaluation("theirs0", {"a": 0.0, "b": 0.0}, {"a": 0.4, "b": 0.2}),
             evaluation("ours1", {"a": 0.0, "b": 0.25}, {"a": 0.4, "b": 0.3}),
             evaluation("theirs1", {"a": 0.25, "b": 0.0}, {"a": 0.4, "b": 0.2})]
    out = tmp_path / "pooled.json"
    assert script.main(["--pooled", *pairs, "--samples", "200", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    # per task over the seeds: a (50 - 25) / 2 = 12.5, b (0 + 25) / 2 = 12.5 points of success
    assert result["tasks"] == 2 and result["success"][0] == pytest.approx(12.5)
    assert result["tests_passed"][0] == pytest.approx(((20 + 0) / 2 + (0 + 10) / 2) / 2)
    assert result["success"][1] <= result["success"][0] <= result["success"][2]
    with pytest.raises(SystemExit, match="pairs of folders"):
        script.main(["--pooled", *pairs[:3]])
    other = evaluation("other", {"a": 0.0, "c": 0.0}, {"a": 0.0, "c": 0.0})
    with pytest.raises(SystemExit, match="same tasks"):
        script.main(["--pooled", *pairs[:2], other, pairs[3]])


def test_credit_scores_every_critic_against_monte_carlo_returns_and_resumes(tiny_study, tmp_path):
    """``sweet-rl credit`` on the finished tiny study: the ground truth at held-out question and answer turns, every
    ranker at both kinds of turn with intervals, the paired differences, the scaling table (the run's own critic
    as 1x and the same run named again), and a second call that reads everything back."""
    from colbench_gym.tasks import resolve_tasks
    from sweet_trl import pipeline
    from sweet_trl.pipeline_config import ConfigError
    from sweet_trl.study.credit.command import run_credit

    root = tiny_study["root"]
    tasks = {t.problem_description: t for split in ("train", "test")
             for t in resolve_tasks(str(root / f"{split}.jsonl"))}
    real, calls = pipeline.models.make_backend, []

    def make_backend(*args, **kwargs):
        calls.append(args)
        return ScriptedAnswers(real(*args, **kwargs), tasks)

    options = ["--credit.states_per_kind", "3", "--credit.num_candidates", "3", "--credit.continuations", "2",
               "--credit.value_function_epochs", "1", "--credit.bootstrap_samples", "200",
               "--credit.scaling", f"same={root / 'run'}", "--credit.variants", f"no_c={root / 'run' / 'no_privileged'}",
               "--credit.results_path", str(tmp_path / "credit.json")]
    from sweet_trl.study.credit.command import Credit

    told, expect = [], Credit.expect

    def told_status(self, total, unit, path):  # what `sweet-rl status` reads while the continuations are played
        expect(self, total, unit, path)
        told.append(json.loads((self.folder / "_EXPECTED.json").read_text()))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline.models, "make_backend", make_backend)
        patch.setattr(Credit, "expect", told_status)
        result = run_credit(root / "study.yaml", options, stream=io.StringIO())
        sampled = len(calls)
        again = run_credit(root / "study.yaml", options, stream=io.StringIO())
        # the states from a trajectories file of one's own (here the same episodes), in a folder of their own
        episodes = root / "run" / "evaluate" / "zero_shot" / "trajectories.jsonl"
        own = run_credit(root / "study.yaml", ["--credit.held_out", str(episodes), "--credit.output_name", "mine",
                                               *options[:-2]], stream=io.StringIO())
        # an older command line (the variant left out) stops before any work, the file as it was
        written = (tmp_path / "credit.json").read_text()
        with pytest.raises(ConfigError, match="variants: no_c"):
            run_credit(root / "study.yaml", [o for o in options if "no_privileged" not in o and o != "--credit.variants"],
                       stream=io.StringIO())
        assert (tmp_path / "credit.json").read_text() == written
    assert sampled == 1 and len(calls) == 2  # one policy for candidates and continuations; none the second time
    assert (root / "run" / "mine" / "critic_credit.json").exists() and own["settings"]["held_out"] == str(episodes)
    assert own["ground_truth"] == result["ground_truth"]  # the same states, replayed from the episodes' own tasks
    assert again == {**result, "seconds": again["seconds"]}
    # read back, every part keeps the seconds of the run that made it
    assert again["seconds"] == result["seconds"] and result["seconds"]["ground truth"] > 0  # measured, not a read-back's zero
    assert json.loads((tmp_path / "credit.json").read_text())["rankers"].keys() == result["rankers"].keys()
    truth = result["ground_truth"]
    assert truth["question_turns"]["states"] == 3 and truth["answer_turns"]["states"] == 3
    assert truth["answer_turns"]["exact_values"] == truth["answer_turns"]["candidates"]  # the grader's, exactly
    assert truth["question_turns"]["continuations"] > 0
    from sweet_trl.losses import RANKING_MODES as RANKINGS

    variants = [f"trained_with_c:{r}" for r in RANKINGS if r != "critic_minus_policy_logprob"]  # the run ranks so
    assert result["settings"]["run_ranking"] == "critic_minus_policy_logprob"  # what the bare rows rank by
    from sweet_trl.study.credit.report import markdown_tables

    assert "a critic's row without `:<ranking>` ranks by the run's `critic_minus_policy_logprob`" in markdown_tables(
        result)
    for name in ("trained_with_c", *variants, "untrained_with_c", "trained_without_c", "value_function",
                 "policy_likelihood", "random"):
        for kind in ("question_turns", "answer_turns"):
            figures = result["rankers"][name][kind]
            assert set(figures) == {"states", "spearman", "top1", "pick_value"}, (name, kind)
            for metric in ("spearman", "top1", "pick_value"):
                if figures[metric] is not None:
                    assert figures[metric]["low"] <= figures[metric]["mean"] <= figures[metric]["high"]
    assert {"trained_with_c - untrained_with_c", "trained_with_c - trained_without_c"} <= set(result["paired"])
    labels = [row["label"] for row in result["scaling"]]
    assert labels == ["1x", "same"] and result["scaling"][0]["trajectories"] == 12
    # the same critic named twice scores the same
    assert result["scaling"][1]["answer_turns"] == result["scaling"][0]["answer_turns"]
    # where each critic's pairs differ before the answer: every pair of the run's critic_pairs stage in one class
    signal = result["scaling"][0]["pairs_by_what_the_human_told"]
    pairs_marker = json.loads((root / "run" / "critic_pairs" / "_COMPLETE.json").read_text())
    assert signal["pairs"] == sum(signal["counts"].values()) == pairs_marker["counts"]["pairs"] > 0
    # a variant: the critic without c named as one, its differing setting read from its marker, scored as the
    # ranker of that name under the run's ranking, and paired with the run's own critic
    (variant,) = result["variants"]
    assert variant["label"] == "no_c" and variant["settings"] == {"use_privileged": False}
    run_ranking = variant["rankings"]["run_ranking"]
    for kind in ("question_turns", "answer_turns"):
        assert run_ranking[kind] == result["rankers"]["trained_without_c"][kind]
        against_run = run_ranking["paired_with_run_critic"][kind]
        run_against = result["paired"]["trained_with_c - trained_without_c"][kind]
        for metric in ("spearman", "top1", "pick_value"):
            if against_run[metric] is not None:
                assert against_run[metric]["mean"] == pytest.approx(-run_against[metric]["mean"])
    assert set(variant["rankings"]) == {"run_ranking", "critic_advantage"}
    # `sweet-rl status` lists the measurement as a stage: done, with what training adds first
    from sweet_trl.pipeline.status import run_status

    [measured] = [s for s in run_status(root / "run") if s.path == "credit"]
    top1 = result["paired"]["trained_with_c - untrained_with_c"]["question_turns"]["top1"]
    assert measured.state == "done" and not measured.missing and measured.minutes == pytest.approx(
        sum(again["seconds"].values()) / 60)
    assert measured.summary.startswith(f"question_top1_trained_minus_untrained={top1['mean']:.3f}")
    assert told[0] == {"total": truth["question_turns"]["continuations"], "unit": "continuations",
                       "file": "ground_truth/continuations.jsonl"}
    assert not (root / "run" / "credit" / "_RUNNING.json").exists()


def test_credit_prepare_runs_the_missing_stages_then_measures_and_a_second_call_runs_none(tmp_path):
    """``--credit.prepare``: from an empty run folder, one command trains the critic, the critic without c and a
    variant critic on the run's pairs, plays the zero-shot policy on the held-out tasks, and measures; without it a
    missing stage is an error that names the option; a second call finds every stage complete and samples nothing."""
    import torch
    import yaml

    from colbench_gym.tasks import resolve_tasks
    from colbench_gym.tasks.procedural import generate_tasks
    from sweet_trl import pipeline
    from sweet_trl.pipeline import StageError
    from sweet_trl.study.credit.command import run_credit

    torch.set_num_threads(1)
    files = {"train": generate_tasks(3, "train", templates=["greet", "order_code", "make_slug"]),
             "validation": generate_tasks(3, "validation", templates=["bag_too_heavy", "initials", "cooking_time"])}
    for split, rows in files.items():
        (tmp_path / f"{split}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    tasks = {t.problem_description: t for split in files for t in resolve_tasks(str(tmp_path / f"{split}.jsonl"))}
    config = tiny_run_config(tmp_path, save_tiny_model(tmp_path / "tiny-llama"))
    (tmp_path / "run.yaml").write_text(yaml.safe_dump({
        **config, "eval_tasks": str(tmp_path / "train.jsonl"), "evaluate": {"eval_episodes_per_task": 2},
        "warm_start": {"warm_start_tasks": 4, "max_steps": 1, "learning_rate": 1e-3}}))
    options = ["--credit.states_per_kind", "2", "--credit.num_candidates", "2", "--credit.continuations", "1",
               "--credit.value_function", "false", "--credit.bootstrap_samples", "100",
               "--credit.held_out_tasks", str(tmp_path / "validation.jsonl"),
               "--credit.train_variants", "beta1=--beta 1.0"]
    real, calls = pipeline.models.make_backend, []

    def make_backend(*args, **kwargs):
        calls.append(args)
        return ScriptedAnswers(real(*args, **kwargs), tasks)

    run = tmp_path / "run"
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline.models, "make_backend", make_backend)
        with pytest.raises(StageError, match=r"--credit.prepare true"):
            run_credit(tmp_path / "run.yaml", options, stream=io.StringIO())
        # another run's critic, named but not trained: said before anything is prepared or sampled
        with pytest.raises(StageError, match=f"--credit.scaling 2x={tmp_path / 'other'}: .* is not a finished critic"):
            run_credit(tmp_path / "run.yaml", [*options, "--credit.prepare", "true",
                                               "--credit.scaling", f"2x={tmp_path / 'other'}"], stream=io.StringIO())
        assert calls == [] and not (run / "collect").exists()
        result = run_credit(tmp_path / "run.yaml", [*options, "--credit.prepare", "true"], stream=io.StringIO())
        made = len(calls)
        markers = {path.parent.relative_to(run).as_posix(): path.stat().st_mtime_ns
                   for path in run.rglob("_COMPLETE.json")}
        again = run_credit(tmp_path / "run.yaml", [*options, "--credit.prepare", "true"], stream=io.StringIO())
    assert {"warm_start", "collect", "critic_pairs", "train_critic", "no_privileged/train_critic",
            "variant_beta1/train_critic", "credit/held_out/evaluate/zero_shot"} <= set(markers)
    # every stage started from the warm-started policy, as the study's own would
    warm = str(run / "warm_start" / "merged")
    for stage in ("collect", "credit/held_out/evaluate/zero_shot"):
        assert json.loads((run / stage / "_COMPLETE.json").read_text())["config"][0]["policy_model"] == warm, stage
    assert made > 0 and len(calls) == made  # the second call ran no stage and sampled nothing
    # the measurement's own marker (`sweet-rl status` lists it) is rewritten by each call, as its JSON is
    assert {path.parent.relative_to(run).as_posix(): path.stat().st_mtime_ns
            for path in run.rglob("_COMPLETE.json") if path.parent != run / "credit"} == {
        stage: when for stage, when in markers.items() if stage != "credit"}
    from sweet_trl.pipeline.status import run_status

    # and the stages it prepared in its folder are listed under it
    listed = {s.path: s for s in run_status(run)}
    assert listed["credit"].state == listed["credit/held_out/evaluate/zero_shot"].state == "done"
    assert listed["credit"].stale is None
    critic = json.loads((run / "train_critic" / "_COMPLETE.json").read_text())  # the critic made again since
    (run / "train_critic" / "_COMPLETE.json").write_text(json.dumps({**critic, "run_id": "another run"}))
    assert {s.path: s.stale for s in run_status(run)}["credit"] == "train_critic changed since"
    assert again == {**result, "seconds": again["seconds"]}
    # the states are the validation tasks' episodes, not the run's eval_tasks'
    held_out = {json.loads(line)["task_id"] for line in
                (run / "credit" / "held_out" / "evaluate" / "zero_shot" / "trajectories.jsonl").read_text().splitlines()}
    assert held_out and held_out <= {t["task_id"] for t in files["validation"]}
    assert result["settings"]["held_out"] == f"the zero-shot policy on {tmp_path / 'validation.jsonl'}"
    # what wrote the file: the command line as given, and the code's commit where git knows it
    assert result["provenance"]["command"].startswith(f"sweet-rl credit --config {tmp_path / 'run.yaml'} ")
    assert result["provenance"]["command"].endswith("--credit.train_variants 'beta1=--beta 1.0' --credit.prepare true")
    assert result["provenance"]["git_commit"] is None or len(result["provenance"]["git_commit"]) == 40
    assert "trained_without_c" in result["rankers"] and "trained_with_c - trained_without_c" in result["paired"]
    (variant,) = result["variants"]
    assert variant["label"] == "beta1" and variant["settings"] == {"beta": 1.0}
    assert variant["run_dir"] == str(run / "variant_beta1") and (run / "variant_beta1" / "collect").is_symlink()


def test_rank_selectors_pick_by_the_tests_at_random_or_with_the_untrained_critic(tiny_study):
    """``rank --selector``: the controls of the critic's picks run through the real stage on the tiny study's
    candidates. ``true_reward`` puts a candidate that passes the most tests first wherever every candidate answers;
    ``random`` needs no critic and picks the same again; ``untrained_critic`` ranks with the critic's base model."""
    from sweet_trl import precision
    from sweet_trl.critic import SweetCritic
    from sweet_trl.selectors import answers_only, grade_candidates, random_scorer
    from sweet_trl.study.runner import Study
    from sweet_trl.trainer_utils import load_rows

    run = tiny_study["run"]
    study = Study(tiny_study["root"] / "study.yaml", stream=io.StringIO())
    ranked, markers, moved = {}, {}, []
    with pytest.MonkeyPatch.context() as patch:  # the stage puts the critic on the accelerator (here: "cpu")
        patch.setattr(precision, "accelerator_device", lambda: "cpu")
        patch.setattr(SweetCritic, "to", lambda self, device: moved.append(device) or self)
        for selector in ("random", "true_reward", "untrained_critic"):
            folder = run / f"selector_{selector}"
            study.link_shared(folder, ("collect", "critic_pairs", "train_critic", "sample_candidates"))
            markers[selector] = study.stage("rank", folder, "--selector", selector)
            assert markers[selector]["info"]["selector"] == selector
            ranked[selector] = load_rows(run / markers[selector]["dir"] / "ranked").to_list()
    assert moved == ["cpu"]  # the untrained critic's; random and true_reward load none
    assert "train_critic" not in markers["random"]["inputs"] and "train_critic" in markers["untrained_critic"]["inputs"]

    tasks = {t.task_id: t for t in resolve_train_tasks(tiny_study["root"])}
    answer_rows = [r for r in ranked["true_reward"] if answers_only(r["candidates"])]
    graded = grade_candidates(answer_rows, tasks)
    spread = [r for r in graded if max(r["candidate_rewards"]) > min(r["candidate_rewards"])]
    assert answer_rows and len(spread) == len(graded), [(r["state_id"], r["candidate_rewards"]) for r in graded]
    for row in graded:
        top = max(range(len(row["candidates"])), key=lambda i: row["ranking_scores"][i])
        assert row["candidate_rewards"][top] == max(row["candidate_rewards"]), row["state_id"]

    again = random_scorer(0)
    for row in ranked["random"]:
        dialogue = [m for m in row["prompt"] if m["role"] != "system"]
        assert row["ranking_scores"] == [s for s, _ in again(dialogue, row["candidates"], row["privileged"])]

    trained = {r["state_id"]: r["ranking_scores"] for r in load_rows(run / "rank" / "ranked").to_list()}
    untrained = {r["state_id"]: r["ranking_scores"] for r in ranked["untrained_critic"]}
    assert trained.keys() == untrained.keys() and trained != untrained
    base = SweetCritic.from_pretrained(run / "train_critic" / "model").untrained()
    assert not base.is_peft and base.model is base.ref_model


def mean_by_task(values, task_of, transform):
    by_task = {}
    for key, value in values.items():
        by_task.setdefault(task_of[key], []).append(float(transform(value)))
    return sum(sum(v) / len(v) for v in by_task.values()) / len(by_task)


def resolve_train_tasks(root):
    from colbench_gym.tasks import resolve_tasks

    return resolve_tasks(str(root / "train.jsonl"))
