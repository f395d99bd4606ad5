"""Every interval of the study resamples tasks, not turns: turns of one task are not independent draws.

The data below repeat each task's value on eight turns (perfectly correlated within a task). An interval that
resampled turns would count 80 draws and come out about sqrt(8) times narrower than one over the 10 tasks; the
interval over tasks is exactly the bootstrap of the 10 task means.
"""

from __future__ import annotations

import pytest

from sweet_trl.study.answer_turns import headroom, paired_with
from sweet_trl.study.critic_eval import best_of_n_selection
from sweet_trl.study.stats import bootstrap_by_task, bootstrap_mean, paired_by_task

TASKS = [f"proc-test-seen-t{i}-0000000{i}" for i in range(10)]
TURNS_PER_TASK = 8


def _width(interval: dict | object) -> float:
    d = interval if isinstance(interval, dict) else interval.to_dict()
    return d["high"] - d["low"]


def _answer_rows(solved_tasks: set[str]) -> list[dict]:
    """Eight answer turns per task; each turn has 4 candidates, all passing on a solved task, none elsewhere."""
    return [{"state_id": f"{task}/{seed}/turn1", "task_id": task,
             "candidate_rewards": [1.0] * 4 if task in solved_tasks else [0.2, 0.0, 0.1, 0.0]}
            for task in TASKS for seed in range(TURNS_PER_TASK)]


def test_bootstrap_by_task_averages_a_task_first_and_counts_tasks():
    observations = [(task, float(i % 2)) for i, task in enumerate(TASKS) for _ in range(TURNS_PER_TASK)]
    by_task = bootstrap_by_task(observations, samples=4000)
    by_turn = bootstrap_mean([v for _, v in observations], samples=4000)
    assert by_task.tasks == len(TASKS) and by_turn.tasks == len(observations)
    assert by_task.to_dict() == bootstrap_mean([float(i % 2) for i in range(len(TASKS))], samples=4000).to_dict()
    assert _width(by_task) > 2 * _width(by_turn)


def test_answer_turn_intervals_and_their_paired_differences_resample_tasks():
    rows = _answer_rows(set(TASKS[:5]))
    result = headroom(rows, samples=4000)
    assert (result["turns"], result["tasks"]) == (80, 10)
    pass1 = result["by_k"][0]["pass_at_k"]
    assert pass1["tasks"] == 10 and pass1["mean"] == pytest.approx(0.5)
    # the 10 task means are five 1s and five 0s: the interval is that bootstrap, not the 80 turns'
    assert _width(pass1) == pytest.approx(_width(bootstrap_mean([1.0] * 5 + [0.0] * 5, samples=4000)))
    assert _width(pass1) > 2 * _width(bootstrap_mean([1.0] * 40 + [0.0] * 40, samples=4000))

    baseline = headroom(_answer_rows(set(TASKS[:2])), samples=4000)
    diff = paired_with(result, baseline, samples=4000)[0]
    assert diff["turns"] == 80 and diff["pass_at_k"]["tasks"] == 10
    assert diff["pass_at_k"]["mean"] == pytest.approx(0.3)
    assert _width(diff["pass_at_k"]) == pytest.approx(_width(bootstrap_mean([0.0] * 7 + [1.0] * 3, samples=4000)))


def test_paired_differences_read_the_task_from_the_turn_when_rows_lack_it():
    rows = [{k: v for k, v in r.items() if k != "task_id"} for r in _answer_rows(set(TASKS[:5]))]
    result, baseline = headroom(rows, samples=1000), headroom(_answer_rows(set()), samples=1000)
    assert result["tasks"] == 10
    assert paired_with(result, baseline, samples=1000)[0]["pass_at_k"]["tasks"] == 10


def test_best_of_n_selection_resamples_tasks_for_every_ranker():
    rows = [{"state_id": f"{task}/{seed}/turn1", "task_id": task, "candidate_rewards": [1.0, 0.0, 0.0]}
            for task in TASKS for seed in range(TURNS_PER_TASK)]
    right_on_half = {task: i < 5 for i, task in enumerate(TASKS)}

    def ranker(row):  # right on every turn of half the tasks, wrong on every turn of the rest
        return [1.0, 0.0, 0.5] if right_on_half[row["task_id"]] else [0.0, 1.0, 0.5]

    result = best_of_n_selection(rows, {"critic_privileged": ranker, "critic_no_privileged": lambda r: [0, 1, 2]})
    top1 = result["rankers"]["critic_privileged"]["top1"]
    assert result["rankers"]["critic_privileged"]["tasks_scored"] == 10 and top1["tasks"] == 10
    assert _width(top1) == pytest.approx(_width(bootstrap_mean([1.0] * 5 + [0.0] * 5)))
    paired = result["paired"]["critic_privileged - critic_no_privileged"]
    assert paired["tasks"] == 10 and paired["top1"]["tasks"] == 10 and paired["top1"]["mean"] == pytest.approx(0.5)


def test_paired_by_task_refuses_observations_without_a_task_or_in_common():
    with pytest.raises(ValueError, match="in common"):
        paired_by_task({"a": 1.0}, {"b": 1.0}, {"a": "t", "b": "t"})
    with pytest.raises(ValueError, match="no task for 1 observations"):
        paired_by_task({"a": 1.0}, {"a": 0.0}, {})
