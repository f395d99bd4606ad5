"""Answer turns (the final agent turn of an episode that answered) are what the calibration and the study sample
again: a policy that never answers has none, and says so instead of failing later on an empty sample.

Run: pytest tests/test_answer_turn_states.py -q
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import gymnasium as gym
import pytest

import colbench_gym  # noqa: F401 (registers the environments)
from colbench_gym.tasks.procedural import load_procedural
from colbench_gym.wrappers import RecordTrajectories
from sweet_trl.study.critic_eval import NoAnswerTurns, answer_turn_states

REPO = Path(__file__).resolve().parents[1]
ROWS = load_procedural("test")[:3]


def _record(path: Path, answer_on: set[int]) -> None:
    """One episode per task row: two questions (the turns run out), or a question then an answer."""
    env = RecordTrajectories(gym.make("ColBench-Backend-v0", tasks=ROWS, max_turns=2), path)
    for index, row in enumerate(ROWS):
        env.reset(seed=index, options={"task_id": row["task_id"]})
        env.step("What exactly should the function return?")
        last = f"I WANT TO ANSWER:\n```python\n{row['ground_truth']}\n```" if index in answer_on else "Anything else?"
        env.step(last)
    env.close()


def test_only_episodes_that_answered_give_answer_turns(tmp_path):
    path = tmp_path / "trajectories.jsonl"
    _record(path, answer_on={1})
    states = answer_turn_states(path, max_turns=2, env_id="ColBench-Backend-v0")
    assert [s["task_id"] for s in states] == [ROWS[1]["task_id"]]
    assert states[0]["turn"] == 1 and states[0]["original"].startswith("I WANT TO ANSWER:")


def test_a_policy_that_never_answers_is_a_clear_error(tmp_path, capsys):
    path = tmp_path / "trajectories.jsonl"
    _record(path, answer_on=set())
    with pytest.raises(NoAnswerTurns, match=r"no answer turn in .*: none of its 3 usable episodes ended with an answer"):
        answer_turn_states(path, max_turns=2, env_id="ColBench-Backend-v0")

    # the calibration script says so and stops before it loads a model
    run_dir = tmp_path / "run"
    (run_dir / "evaluate" / "zero_shot").mkdir(parents=True)
    path.rename(run_dir / "evaluate" / "zero_shot" / "trajectories.jsonl")
    spec = importlib.util.spec_from_file_location("answer_pass_at_k", REPO / "scripts" / "answer_pass_at_k.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    with pytest.raises(SystemExit, match="error: no answer turn in .*Evaluate with force_answer_on_last_turn"):
        script.main(["--config", str(REPO / "sweet_trl" / "configs" / "warm_start_cpu.yaml"),
                     "--run_dir", str(run_dir), "--policy_model", str(tmp_path / "no_model_needed")])


def test_the_calibration_starts_from_the_runs_warm_start(tmp_path):
    """Without --policy_model the script samples the policy the run's zero-shot evaluation played: the warm-started
    one when the configuration has a warm_start: section (which must then be complete)."""
    spec = importlib.util.spec_from_file_location("answer_pass_at_k", REPO / "scripts" / "answer_pass_at_k.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.starting_policy({}, tmp_path, "embedded") == "embedded"
    with pytest.raises(SystemExit, match="starts from a warm start, which is not complete in"):
        script.starting_policy({"warm_start": {}}, tmp_path, "embedded")
    (tmp_path / "warm_start").mkdir()
    (tmp_path / "warm_start" / "_COMPLETE.json").write_text(
        '{"stage": "warm_start", "dir": "warm_start", "outputs": {"policy": "merged"}}')
    assert script.starting_policy({"warm_start": {}}, tmp_path, "embedded") == str(tmp_path / "warm_start" / "merged")
