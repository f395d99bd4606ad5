"""Evaluation: the paper's metrics over a task split, per-task rows, saved files, win rate, resumed runs."""

from __future__ import annotations

import json

import pytest

from colbench_gym.tasks import load_builtin
from sweet_trl.evaluation import evaluate, evaluate_records, summarize
from sweet_trl.generation import Generation, SamplingParams
from sweet_trl.trajectories import task_id_of

TEST_TASKS = load_builtin("test")


class OracleBackend:
    """Answers with the reference solution for the tasks in ``solves``, with a wrong function otherwise."""

    name = "oracle"

    def __init__(self, solves: set[str], fail_task: str | None = None):
        self.by_problem = {t.problem_description: t for t in TEST_TASKS}
        self.solves, self.fail_task = solves, fail_task
        self.histories = 0

    def generate(self, histories, n=1, sampling=None, seeds=None):
        out = []
        for history in histories:
            self.histories += 1
            task = self.by_problem[history[1]["content"]]
            if task.task_id == self.fail_task:
                out.append([Generation.failed("server unavailable")])
                continue
            code = task.ground_truth if task.task_id in self.solves else "def nothing():\n    return None"
            out.append([Generation("I WANT TO ANSWER: " + code, token_ids=[1, 2])])
        return out


def test_backend_metrics_per_task_rows_and_files(tmp_path, capsys):
    solved = {t.task_id for t in TEST_TASKS[::3]}
    backend = OracleBackend(solved)
    result = evaluate(backend, tasks="test", output_dir=tmp_path, num_envs=6, progress=False)
    metrics = result.metrics
    assert metrics["episodes"] == metrics["tasks"] == len(TEST_TASKS)
    assert metrics["success_rate"] == pytest.approx(len(solved) / len(TEST_TASKS))
    rewards = [r["reward"] for r in result.records]
    assert metrics["tests_passed"] == pytest.approx(100 * sum(rewards) / len(rewards))
    assert metrics["tests_passed"] >= 100 * len(solved) / len(TEST_TASKS) - 1e-9
    assert metrics["answered_rate"] == 1.0 and metrics["mean_turns"] == 1.0 and metrics["policy"] == "oracle"
    rows = {row["task_id"]: row for row in result.rows}
    assert set(rows) == {t.task_id for t in TEST_TASKS}
    for task_id in solved:
        assert rows[task_id]["mean_reward"] == 1.0 and rows[task_id]["success_rate"] == 1.0
    assert all(rows[t.task_id]["success_rate"] == 0.0 for t in TEST_TASKS if t.task_id not in solved)

    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    assert json.loads((tmp_path / "per_task.json").read_text()) == result.rows
    assert len((tmp_path / "trajectories.jsonl").read_text().splitlines()) == len(TEST_TASKS)
    printed = capsys.readouterr().out
    assert "% tests passed" in printed and "success rate" in printed
    assert all(t.task_id in printed for t in TEST_TASKS)
    assert (tmp_path / "summary.txt").read_text().strip() == printed.strip()

    again = evaluate(backend, tasks="test", output_dir=tmp_path, progress=False, verbose=False)
    assert backend.histories == len(TEST_TASKS)  # nothing was generated twice
    assert {k: v for k, v in again.metrics.items() if k != "seconds"} == {
        k: v for k, v in metrics.items() if k != "seconds"}


def test_infrastructure_failures_count_as_zero_and_are_replayed(tmp_path):
    everything = {t.task_id for t in TEST_TASKS}
    broken = TEST_TASKS[0].task_id
    first = evaluate(OracleBackend(everything, fail_task=broken), tasks="test", output_dir=tmp_path,
                     progress=False, verbose=False)
    assert first.metrics["infra_errors"] == 1
    assert first.metrics["success_rate"] == pytest.approx((len(TEST_TASKS) - 1) / len(TEST_TASKS))
    assert "WARNING: 1 episode(s) hit infrastructure errors" in first.table()
    healed = OracleBackend(everything)
    second = evaluate(healed, tasks="test", output_dir=tmp_path, progress=False, verbose=False)
    assert healed.histories == 1  # only the failed episode was replayed
    assert second.metrics["infra_errors"] == 0 and second.metrics["success_rate"] == 1.0
    assert second.metrics["tests_passed"] == 100.0


def named(backend: OracleBackend, name: str) -> OracleBackend:
    backend.name = name
    return backend


def test_output_dir_of_another_evaluation_is_refused_not_reused(tmp_path):
    rows = [t.to_row() for t in TEST_TASKS[:3]]
    everything = {t.task_id for t in TEST_TASKS}
    common = {"tasks": rows, "output_dir": tmp_path, "progress": False, "verbose": False}
    first = evaluate(OracleBackend(set()), **common)
    assert first.metrics["tests_passed"] < 100.0
    settings = json.loads((tmp_path / "settings.json").read_text())
    assert settings["policy"] == "oracle" and settings["sampling"]["temperature"] == 0.0
    assert settings["env_kwargs"] == {"privileged": False}
    on_disk = {name: (tmp_path / name).read_text() for name in ("trajectories.jsonl", "metrics.json", "settings.json")}

    other = named(OracleBackend(everything), "other")
    with pytest.raises(ValueError, match=r"policy: 'oracle' on disk, 'other' now.*another output_dir.*overwrite=True"):
        evaluate(other, **common)
    with pytest.raises(ValueError, match=r"sampling: .*'temperature': 0\.0.* on disk, .*'temperature': 0\.7.* now"):
        evaluate(OracleBackend(everything), sampling=SamplingParams(temperature=0.7), **common)
    with pytest.raises(ValueError, match=r"env_kwargs: .*max_turns"):
        evaluate(OracleBackend(everything), env_kwargs={"max_turns": 2}, **common)
    assert other.histories == 0
    assert {name: (tmp_path / name).read_text() for name in on_disk} == on_disk  # nothing was touched

    # A run without settings.json (written before it existed, or by collect()): its records name the policy.
    (tmp_path / "settings.json").unlink()
    with pytest.raises(ValueError, match=r"policy: records of 'oracle' on disk, 'other' now"):
        evaluate(other, **common)

    # The same evaluation, interrupted in the middle of writing its last episode, is completed.
    trajectories = tmp_path / "trajectories.jsonl"
    data = trajectories.read_bytes()
    trajectories.write_bytes(data[: data.rstrip(b"\n").rfind(b"\n") + 40])
    same = OracleBackend(set())
    resumed = evaluate(same, **common)
    assert same.histories == 1 and resumed.metrics["episodes"] == 3
    assert resumed.metrics["tests_passed"] == first.metrics["tests_passed"]

    replaced = evaluate(other, overwrite=True, **common)
    assert other.histories == 3 and replaced.metrics["policy"] == "other"
    assert replaced.metrics["tests_passed"] == 100.0 and {r["policy"] for r in replaced.records} == {"other"}
    assert len(trajectories.read_text().splitlines()) == 3
    assert json.loads((tmp_path / "metrics.json").read_text())["policy"] == "other"
    assert json.loads((tmp_path / "settings.json").read_text())["policy"] == "other"


def frontend_record(task_id: str, seed: int, similarity: float | None, outcome: str = "answered",
                    metric: str | None = "clip", env_id: str = "ColBench-Frontend-v0") -> dict:
    record = {"task": {"task_id": task_id, "problem_description": "p", "ground_truth": "<html></html>"},
              "dialogue_history": [], "answer": "<html></html>", "reward": similarity, "similarity": similarity,
              "similarity_metric": metric, "episode_id": f"{task_id}/{seed}", "task_id": task_id, "seed": seed,
              "env_id": env_id, "success": False, "outcome": outcome, "turns": 3, "simulator_errors": []}
    if metric is None:
        del record["similarity_metric"]
    return record


def test_frontend_similarity_and_win_rate_with_half_ties(tmp_path):
    ours = [frontend_record("a", 0, 0.9), frontend_record("a", 1, 0.7), frontend_record("b", 0, 0.5),
            frontend_record("c", 0, 0.6), frontend_record("d", 0, None, outcome="policy_error")]
    reference = [frontend_record("a", 0, 0.7), frontend_record("b", 0, 0.6), frontend_record("c", 0, 0.6),
                 frontend_record("d", 0, 0.1), frontend_record("e", 0, 0.9)]
    path = tmp_path / "reference.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in reference))
    result = evaluate_records(ours, reference=path)
    m = result.metrics
    assert m["kind"] == "frontend" and m["similarity_metric"] == "clip"
    assert m["mean_similarity"] == pytest.approx((0.9 + 0.7 + 0.5 + 0.6 + 0.0) / 5)
    # a: 0.8 vs 0.7 win, b: loss, c: tie, d: 0 vs 0.1 loss  ->  (1 + 0.5) / 4
    assert m["win_rate"] == pytest.approx(1.5 / 4)
    assert (m["wins"], m["ties"], m["losses"], m["reference_tasks"]) == (1, 1, 2, 4)
    assert m["infra_errors"] == 1
    rows = {row["task_id"]: row for row in result.rows}
    assert rows["a"]["mean_similarity"] == pytest.approx(0.8) and rows["a"]["win"] == 1.0
    assert rows["c"]["win"] == 0.5 and rows["c"]["reference"] == 0.6
    table = result.table()
    assert "win rate vs reference: 37.5%" in table and "tie" in table and "mean clip similarity" in table
    assert summarize(ours, reference=path) == m
    same = evaluate_records(ours, reference={"a": 0.7, "b": 0.6, "c": 0.6, "d": 0.1})
    assert same.metrics["win_rate"] == m["win_rate"]
    assert evaluate_records(ours, reference=result).metrics["win_rate"] == 0.5  # against itself: all ties


def test_win_rate_refuses_another_metric_or_environment(tmp_path):
    ours = [frontend_record("a", 0, 0.8), frontend_record("b", 0, 0.4)]
    ssim = [frontend_record("a", 0, 0.3, metric="ssim"), frontend_record("b", 0, 0.9, metric="ssim")]
    with pytest.raises(ValueError, match="reference run is scored with ssim similarity but these records with clip"):
        evaluate_records(ours, reference=ssim)
    path = tmp_path / "ssim.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ssim))
    with pytest.raises(ValueError, match="same similarity metric"):
        evaluate_records(ours, reference=path)
    backend_run = [{**frontend_record("a", 0, 0.5, metric=None, env_id="ColBench-Backend-v0"), "similarity": None}]
    with pytest.raises(ValueError, match=r"played in \['ColBench-Backend-v0'\].*same environment"):
        evaluate_records(ours, reference=backend_run)
    with pytest.raises(ValueError, match="same environment"):
        evaluate_records([{**r, "env_id": "ColBench-Backend-v0"} for r in ssim], reference=ours)
    with pytest.raises(ValueError, match=r"mix similarity metrics \['clip', 'ssim'\]"):
        evaluate_records(ours + [frontend_record("c", 0, 0.5, metric="ssim")])

    # References that do not name their metric (the original ColBench runs) are still compared.
    unnamed = [frontend_record("a", 0, 0.6, metric=None), frontend_record("b", 0, 0.6, metric=None)]
    assert evaluate_records(ours, reference=unnamed).metrics["win_rate"] == 0.5
    original_row = {"task": {"problem_description": "p", "ground_truth": "<html></html>"},
                    "dialogue_history": [{"role": "user", "content": "a page"}], "reward": 0.5}
    task_id = task_id_of(original_row["task"])  # the id the frontend environment gives that task row
    result = evaluate_records([frontend_record(task_id, 0, 0.7)], reference=[original_row])
    assert result.metrics["win_rate"] == 1.0 and result.rows[0]["reference"] == 0.5


def test_evaluate_records_rejects_nothing():
    with pytest.raises(ValueError, match="no trajectory records"):
        evaluate_records([])


def test_tiny_transformers_policy_end_to_end(tmp_path):
    torch = pytest.importorskip("torch")
    from helpers_tiny_models import tiny_causal_lm, tiny_tokenizer

    from sweet_trl.generation import TransformersBackend

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        tokenizer = tiny_tokenizer()
        backend = TransformersBackend(tiny_causal_lm(tokenizer), tokenizer, name="tiny")
        tasks = [t.to_row() for t in TEST_TASKS[:3]]
        result = evaluate(backend, tasks=tasks, episodes_per_task=2, output_dir=tmp_path, progress=False,
                          verbose=False, sampling=SamplingParams(max_new_tokens=4), env_kwargs={"max_turns": 2})
    finally:
        torch.set_num_threads(previous)
    assert result.metrics["episodes"] == 6 and result.metrics["tasks"] == 3
    assert [row["episodes"] for row in result.rows] == [2, 2, 2]
    assert {r["seed"] for r in result.records} == {1000, 1001}
    assert 0.0 <= result.metrics["tests_passed"] <= 100.0
    assert all("privileged" not in json.dumps(r) for r in result.records)


def test_episode_pass_at_k_is_the_chance_one_of_k_episodes_of_a_task_succeeds():
    from sweet_trl.evaluation import pass_at_k

    def episode(task, success):
        return {"task_id": task, "episode_id": f"{task}-{success}-{id(object())}", "env_id": "ColBench-Backend-v0",
                "dialogue_history": [], "reward": 1.0 if success else 0.2, "success": success,
                "outcome": "answered", "turns": 2, "simulator_errors": []}

    # task a: 1 success of 4 episodes; task b: none of 4; task c: 3 of 4
    records = ([episode("a", True)] + [episode("a", False)] * 3 + [episode("b", False)] * 4
               + [episode("c", True)] * 3 + [episode("c", False)])
    metrics = evaluate_records(records).metrics
    assert {k for k in metrics if k.startswith("pass@")} == {"pass@1", "pass@2", "pass@4"}  # up to 4 episodes
    assert metrics["pass@1"] == pytest.approx(metrics["success_rate"]) == pytest.approx(4 / 12)
    assert metrics["pass@2"] == pytest.approx((0.5 + 0.0 + 1.0) / 3)  # a: 1 - C(3,2)/C(4,2); c: every pair has one
    assert metrics["pass@4"] == pytest.approx(2 / 3)
    assert pass_at_k(1, 4, 2) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="need 0 < k <= samples"):
        pass_at_k(1, 4, 5)


def test_told_facts_metrics_say_whether_multi_fact_episodes_fail_at_asking_or_at_answering():
    """Played through ``gym.make``: the outline and every fact asked for, then the reference (success); the same
    questions, then a wrong function (all told, failed); one detail asked, then the reference; nothing asked."""
    import gymnasium as gym

    from colbench_gym.tasks.procedural_multi import GENERAL_QUESTION, TRAIN_TEMPLATES, load_procedural_multi

    row = next(r for r in load_procedural_multi("validation") if "-seen-" in r["task_id"])
    template = next(t for t in TRAIN_TEMPLATES if t.name == row["template"])
    every_detail = template.outline.detail_question([d.pool for d in template.details])
    first_detail = f"What is {template.outline.names[template.details[0].pool]}?"
    wrong = "def nothing():\n    return None"
    plays = [([GENERAL_QUESTION, every_detail], row["ground_truth"]), ([GENERAL_QUESTION, every_detail], wrong),
             ([first_detail], row["ground_truth"]), ([], wrong)]
    env = gym.make("ColBench-Backend-v0", tasks="procedural_multi:validation", max_turns=5)
    records = []
    for index, (questions, answer) in enumerate(plays):
        env.reset(options={"task_id": row["task_id"]})
        for question in questions:
            env.step(question)
        _, reward, _, _, info = env.step(f"I WANT TO ANSWER:\n{answer}")
        records.append({"task_id": row["task_id"], "episode_id": str(index), "env_id": "ColBench-Backend-v0",
                        "task": row, "dialogue_history": info["messages"], "reward": reward,
                        "success": info["success"], "outcome": "answered", "turns": info["turn"]})
    env.close()
    metrics = evaluate_records(records).metrics
    facts = len(row["hidden_facts"])
    assert metrics["outline_told"] == 0.5 and metrics["all_facts_told"] == 0.5
    assert metrics["facts_told"] == pytest.approx((1 + 1 + 1 / facts + 0) / 4)
    assert metrics["success_when_all_told"] == 0.5 and metrics["success_rate"] == 0.5
    assert "facts_told" not in evaluate_records(records[:0] + [{**r, "task": {}} for r in records]).metrics
