"""One record type from disk to every trainer: a stored trajectory followed to a critic pair, a turn state and an
RFT example, and written back unchanged."""

from __future__ import annotations

import pytest

from sweet_trl.pairs import PAIR_RULE_PRESETS, build_critic_pairs
from sweet_trl.trajectories import Trajectory, TrajectoryWriter, read_trajectories, task_id_of
from sweet_trl.turn_pairs import TurnPairsConfig, env_instructions, turn_states_from_records

BACKEND = "ColBench-Backend-v0"
GROUND_TRUTH = "def convert(celsius):\n    return celsius * 9 / 5 + 32"
TASK = {"task_id": "backend-temp", "problem_description": "Write convert(celsius) returning °F.",
        "ground_truth": GROUND_TRUTH, "test_cases": {"convert(0)": "32.0", "convert(100)": "212.0"}}


def stored_record(seed: int, reward: float | None, answer: str, outcome: str = "answered") -> dict:
    """A record as the collector writes it: the original ColBench fields first, then ours."""
    agent = [{"role": "assistant", "content": "Should the result be a float?", "input": "<prompt 0>",
              "output": "Should the result be a float?", "prompt_token_ids": [1, 5, 9],
              "output_token_ids": [11, 12], "logprobs": [-0.25, -1.5]},
             {"role": "assistant", "content": f"I WANT TO ANSWER:\n{answer}", "input": "<prompt 1>",
              "output": f"I WANT TO ANSWER:\n{answer}", "prompt_token_ids": [1, 5, 9, 13],
              "output_token_ids": [14, 15, 16], "logprobs": [-0.5, -0.125, -2.0]}]
    return {
        "task": dict(TASK),
        "dialogue_history": [{"role": "user", "content": TASK["problem_description"]}, agent[0],
                             {"role": "user", "content": "Yes, a float in °F."}, agent[1]],
        "answer": answer, "reward": reward,
        "episode_id": f"backend-temp/{seed}", "env_id": BACKEND, "task_id": "backend-temp", "seed": seed,
        "success": reward == 1.0, "outcome": outcome, "turns": 2,
        "tests": [{"test": "convert(0)", "passed": reward == 1.0}], "grader": {"infra_error": False},
        "simulator_errors": [], "policy_errors": [], "policy_retries": [], "env_errors": [],
        "generated_tokens": 5, "timing": {"seconds": 0.0625}, "policy": "tiny",
    }


@pytest.fixture
def stored(tmp_path):
    """A collector's JSONL file: a success, a partial answer and an episode the environment could not finish."""
    path = tmp_path / "trajectories.jsonl"
    with TrajectoryWriter(path) as writer:
        writer.write(stored_record(0, 1.0, GROUND_TRUTH))
        writer.write(stored_record(1, 0.5, "def convert(c):\n    return c * 2 + 30"))
        writer.write(stored_record(2, None, "", outcome="env_error"))
    return path


def test_a_record_reads_back_through_one_type_and_round_trips_to_identical_json(stored):
    lines = stored.read_text(encoding="utf-8").splitlines()
    trajectories = [Trajectory(record) for record in read_trajectories(stored)]
    assert [t.to_json() for t in trajectories] == lines
    success, partial, failed = trajectories
    assert (success.task_id, success.env_id, success.episode_id) == ("backend-temp", BACKEND, "backend-temp/0")
    assert (success.reward, success.succeeded(), partial.reward, partial.succeeded()) == (1.0, True, 0.5, False)
    assert success.privileged() == GROUND_TRUTH and success.privileged("test_cases") is None
    assert [m["content"] for m in success.agent_messages] == ["Should the result be a float?",
                                                              f"I WANT TO ANSWER:\n{GROUND_TRUTH}"]
    assert success.messages[1] == {"role": "assistant", "content": "Should the result be a float?"}
    assert success.dialogue[1]["output_token_ids"] == [11, 12]  # the stored dialogue, token ids and all
    assert success.drop_reason() is None and partial.drop_reason() is None
    assert (failed.reward, failed.is_infra_failure, failed.drop_reason()) == (None, True, "infra_failure")
    assert Trajectory(success).record is success.record


def test_the_record_reaches_a_critic_pair(stored):
    record = Trajectory(read_trajectories(stored)[0])
    pairs, stats = build_critic_pairs(stored, **PAIR_RULE_PRESETS["backend"])
    (pair,) = pairs
    assert stats.dropped == {"infra_failure": 1}
    assert pair["chosen_episode_id"] == record.episode_id and pair["rejected_episode_id"] == "backend-temp/1"
    assert pair["task_id"] == pair["chosen_task_id"] == record.task_id
    assert pair["privileged"] == record.privileged() and pair["chosen_reward"] == record.reward == 1.0
    assert pair["chosen"] == record.messages


def test_the_record_reaches_turn_states(stored):
    record = Trajectory(read_trajectories(stored)[0])
    states, stats = turn_states_from_records(read_trajectories(stored), TurnPairsConfig(state_fraction=1.0))
    assert stats.dropped == {"trajectory_infra_failure": 1}
    ours = [s for s in states if s["episode_id"] == record.episode_id]
    assert [s["state_id"] for s in ours] == ["backend-temp/0/turn0", "backend-temp/0/turn1"]
    for state, message in zip(ours, record.agent_messages):
        assert (state["task_id"], state["env_id"]) == (record.task_id, record.env_id)
        assert state["privileged"] == GROUND_TRUTH and state["trajectory_reward"] == 1.0
        assert state["original"] == message["content"]
        assert state["prompt"][0] == {"role": "system", "content": env_instructions(BACKEND)}
        assert state["prompt"][-1]["role"] == "user"
        assert GROUND_TRUTH not in str(state["prompt"])  # the policy's prompt never holds c


def test_the_record_reaches_an_rft_example(stored):
    pytest.importorskip("torch")
    pytest.importorskip("trl")
    from helpers_tiny_models import tiny_tokenizer

    from sweet_trl.baselines.rejection_finetuning import RejectionFinetuneConfig, rft_dataset

    record = Trajectory(read_trajectories(stored)[0])
    tokenizer = tiny_tokenizer()
    config = RejectionFinetuneConfig(output_dir="unused", use_cpu=True, bf16=False, report_to="none")
    (example,) = rft_dataset(stored, tokenizer, config).to_list()
    assert (example["episode_id"], example["task_id"], example["reward"]) == (record.episode_id, record.task_id,
                                                                              record.reward)
    trained = tokenizer.decode([t for t, m in zip(example["input_ids"], example["assistant_masks"]) if m])
    assert trained == "".join(m["content"] + "<|eot|>" for m in record.agent_messages)


def test_original_colbench_rows_answer_the_same_questions():
    row = {"task": {k: v for k, v in TASK.items() if k != "task_id"}, "reward": 0.75,
           "dialogue_history": [{"role": "user", "content": "Write convert."},
                                {"role": "assistant", "content": "I WANT TO ANSWER:\ndef convert(c): return c"}]}
    trajectory = Trajectory(row)
    assert trajectory.task_id == task_id_of(row["task"]) and trajectory.env_id == BACKEND
    assert trajectory.episode_id is None and trajectory.episode_key(3) == f"{trajectory.task_id}#3"
    assert not trajectory.succeeded() and trajectory.succeeded(success_reward=0.7)
    (normalized,) = read_trajectories([row])
    assert Trajectory(normalized).task_id == trajectory.task_id
    assert Trajectory(normalized).episode_id == f"{trajectory.task_id}/0"


def test_why_a_record_is_left_out():
    base = stored_record(0, 1.0, GROUND_TRUTH)
    cases = [
        ({"grader": {"infra_error": True}}, "grader_infra_error"),
        ({"infra_error": True}, "render_infra_error"),
        ({"reward": float("nan")}, "no_reward"),
        ({"reward": True}, "no_reward"),
        ({"task": {**TASK, "ground_truth": "  "}}, "no_privileged"),
        ({"dialogue_history": base["dialogue_history"][:1]}, "no_agent_turn"),
        ({"dialogue_history": [{"role": "tool", "content": "x"}]}, "malformed_dialogue"),
    ]
    for change, reason in cases:
        assert Trajectory({**base, **change}).drop_reason() == reason
    assert Trajectory({**base, "reward": None}).drop_reason(needs_reward=False) is None
