"""ColBench-Backend-v0: registration, the dialogue loop, privileged info, and hostile actions."""

import json

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import colbench_gym
from colbench_gym.simulators import ScriptedSimulator
from colbench_gym.tasks import TaskFormatError

ROW = {
    "task_id": "shipping",
    "problem_description": "I need the shipping cost of a parcel. The signature of the function is: def shipping_cost(kg)",
    "ground_truth": "def shipping_cost(kg):\n    if kg <= 2:\n        return 5.0\n    return round(5.0 + (kg - 2) * 1.5, 2)",
    "hidden_information": "def shipping_cost(kg):\n    if kg <= 2:\n        return 5.0\n    return round(5.0 + (kg - 2) * 1.5, 2)",
    "test_cases": {"test1": "shipping_cost(1)", "test2": "shipping_cost(2)", "test3": "shipping_cost(3)",
                   "test4": "shipping_cost(10)"},
}
WRONG = "def shipping_cost(kg):\n    return 5.0 if kg <= 2 else 5.0 + (kg - 2) * 2"


def make(**kwargs):
    kwargs.setdefault("tasks", [ROW])
    kwargs.setdefault("simulator", ScriptedSimulator(["The base price is 5.", "Then 1.5 per extra kg."]))
    return gym.make("ColBench-Backend-v0", **kwargs)


def test_three_ways_to_make():
    assert gym.make("ColBench-Backend-v0").unwrapped.kind == "backend"
    assert gym.make("colbench_gym:ColBench-Backend-v0").unwrapped.kind == "backend"
    gym.register_envs(colbench_gym)
    assert "ColBench-Backend-v0" in gym.registry


# Frontend: SSIM because no CLIP weights can be downloaded in tests (the default metric is CLIP).
CHECK_ENV_KWARGS = {"ColBench-Frontend-v0": {"similarity": "ssim"}}


@pytest.mark.parametrize("env_id", sorted(colbench_gym.ENV_IDS))
def test_check_env_passes_on_every_registered_id(env_id):
    env = gym.make(env_id, **CHECK_ENV_KWARGS.get(env_id, {}))
    check_env(env.unwrapped)
    env.close()


def test_episode_with_questions_then_correct_answer():
    env = make()
    obs, info = env.reset(seed=0)
    instructions = info["messages"][0]["content"]
    assert info["messages"][0]["role"] == "system" and "I WANT TO ANSWER:" in instructions
    # the observation alone says how to answer: the instructions, then the request
    assert obs == f"Instructions: {instructions}\n\nHuman: I need the shipping cost of a parcel. " \
                  "The signature of the function is: def shipping_cost(kg)"
    assert "def shipping_cost(kg):\n    if" not in obs  # the reference stays out of the observation
    assert info["privileged"]["ground_truth"] == ROW["ground_truth"]

    obs, reward, terminated, truncated, info = env.step("What is the base price?")
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert obs.endswith("Human: The base price is 5.") and info["turn"] == 1

    answer = "I WANT TO ANSWER:\n```python\n" + ROW["ground_truth"] + "\n```"
    obs, reward, terminated, truncated, info = env.step(answer)
    assert terminated and not truncated
    assert reward == 1.0 and info["success"] and info["outcome"] == "answered"
    assert [t["status"] for t in info["tests"]] == ["passed"] * 4
    with pytest.raises(RuntimeError):
        env.step("more?")


def test_partial_credit_is_fraction_of_tests():
    env = make()
    env.reset(seed=0)
    _, reward, terminated, _, info = env.step("I WANT TO ANSWER: " + WRONG)
    assert terminated and reward == pytest.approx(0.5) and not info["success"]


def test_truncation_after_max_turns_scores_zero():
    env = make(max_turns=3)
    env.reset(seed=0)
    for turn in range(1, 4):
        _, reward, terminated, truncated, info = env.step(f"question {turn}?")
    assert truncated and not terminated and reward == 0.0
    assert info["outcome"] == "no_answer" and info["turn"] == 3
    # The last step has the same test fields as a graded answer, whatever ended the episode.
    assert info["tests"] == [] and info["grader"] == {"status": "no_answer", "status_counts": {}, "infra_error": False}
    env.reset(seed=0)
    *_, info = env.step("I WANT TO ANSWER: ```python\n```")
    assert info["tests"] == [] and info["grader"]["status"] == "empty_answer"
    assert set(info["grader"]) == {"status", "status_counts", "infra_error"}


def test_a_refused_answer_leaves_the_episode_as_it_was():
    from colbench_gym.execution import CodeExecutionDisabled

    env = make(allow_code_execution=False)
    env.reset(seed=0)
    _, _, _, _, before = env.step("What is the base price?")
    with pytest.raises(CodeExecutionDisabled):
        env.step("I WANT TO ANSWER: " + WRONG)
    assert env.unwrapped.turn == 1 and env.unwrapped.messages == before["messages"]
    _, _, terminated, _, info = env.step("And above 2 kg?")  # the episode goes on from where it was
    assert not terminated and info["turn"] == 2 and [m["role"] for m in info["messages"]].count("assistant") == 2


@pytest.mark.parametrize("max_turns", [0, 2.5, "3", True])
def test_max_turns_must_be_a_positive_int(max_turns):
    with pytest.raises(ValueError, match="max_turns"):
        make(max_turns=max_turns)


def test_numpy_int_max_turns_and_render_modes():
    import numpy as np

    env = make(max_turns=np.int64(2))
    assert env.unwrapped.max_turns == 2 and "at most 2 turns" in env.unwrapped.instructions
    env.reset(seed=0)
    assert env.render() is None  # no render_mode: Gymnasium's envs render nothing
    text_env = make(render_mode="ansi")
    text_env.reset(seed=0)
    assert text_env.render().startswith("Human: I need the shipping cost")


def test_long_dialogues_keep_the_request_in_the_observation(monkeypatch):
    from colbench_gym.envs import dialogue

    monkeypatch.setattr(dialogue, "MAX_OBSERVATION_CHARS", 2_000)
    env = make(max_turns=10, simulator=ScriptedSimulator(["noted"]))
    obs, info = env.reset(seed=0)
    assert "observation_truncated" not in info
    for turn in range(5):
        obs, _, _, _, info = env.step(f"message {turn} " + "z" * 600)
    assert len(obs) <= 2_000 and info["observation_truncated"]
    head = f"Instructions: {env.unwrapped.instructions}\n\nHuman: {ROW['problem_description']}\n\n[...]\n\n"
    assert obs.startswith(head)
    assert obs.endswith("Human: noted") and "message 4 " in obs and "message 0 " not in obs


def test_privileged_switch_off_for_evaluation():
    env = make(privileged=False)
    _, info = env.reset(seed=0)
    assert "privileged" not in info


def test_reset_is_reproducible_and_selects_tasks():
    env = gym.make("ColBench-Backend-v0", tasks="all")
    first = [env.reset(seed=s)[1]["task_id"] for s in range(5)]
    again = [env.reset(seed=s)[1]["task_id"] for s in range(5)]
    assert first == again and len(set(first)) > 1
    target = env.unwrapped.tasks[3].task_id
    assert env.reset(options={"task_id": target})[1]["task_id"] == target
    with pytest.raises(KeyError, match="unknown task_id 'no-such-task'"):
        env.reset(options={"task_id": "no-such-task"})


@pytest.mark.parametrize(
    "action",
    ["", "   \n\t ", "x" * 1_000_000, b"\xff\xfe bad bytes".decode("utf-8", errors="replace"), "I WANT TO ANSWER:",
     "I WANT TO ANSWER:   ", "I WANT TO ANSWER: ```python\n```", "I WANT TO ANSWER: " + "y" * 1_000_000],
)
def test_bad_actions_never_crash(action):
    env = make()
    env.reset(seed=0)
    obs, reward, terminated, _truncated, info = env.step(action)
    assert isinstance(obs, str) and 0.0 <= reward <= 1.0
    if terminated:
        assert reward == 0.0 and not info["success"]
    if len(action) > 32_000:
        assert info["action_truncated_from"] == len(action) and info["action_truncated_to"] == 32_000
        assert f"it had {len(action):,} characters, over the limit of 32,000" in obs


def test_raw_bytes_action_is_decoded():
    env = make()
    env.reset(seed=0)
    _, _, _, _, info = env.step(b"\xff what is the base price?")
    assert info["action_decoded"] and "\ufffd" in info["messages"][2]["content"]


@pytest.mark.parametrize("text", [None, 42, "   "])
def test_a_simulator_reply_that_is_not_text_is_recorded(text):
    from colbench_gym.simulators.base import SimulatorReply

    class Odd:
        def reply(self, request):
            return SimulatorReply(text)

    env = make(simulator=Odd())
    env.reset(seed=0)
    obs, _, terminated, _, info = env.step("What is the base price?")
    assert not terminated and info["simulator_error"] and obs.splitlines()[-1].startswith("Human: ")


def test_async_vector_env_needs_no_shared_memory():
    with pytest.raises(ValueError, match="shared_memory"):
        gym.make_vec("ColBench-Backend-v0", num_envs=2, vectorization_mode="async")
    kwargs = {"tasks": [ROW], "simulator": ScriptedSimulator(["The base price is 5 😀."])}
    async_env = gym.make_vec("ColBench-Backend-v0", num_envs=2, vectorization_mode="async",
                             vector_kwargs={"shared_memory": False}, **kwargs)
    sync_env = gym.make_vec("ColBench-Backend-v0", num_envs=2, vectorization_mode="sync", **kwargs)
    try:
        assert async_env.reset(seed=[1, 2])[0] == sync_env.reset(seed=[1, 2])[0]
        actions = ["Price? \u00e9\u4e2d", "I WANT TO ANSWER: " + ROW["ground_truth"]]
        got, want = async_env.step(actions), sync_env.step(actions)
        assert got[0] == want[0] and "Human: The base price is 5 😀." in got[0][0]
        assert list(got[1]) == list(want[1]) == [0.0, 1.0]
    finally:
        async_env.close()
        sync_env.close()


def test_failing_simulator_is_recorded_not_raised():
    class Broken:
        def reply(self, request):
            raise ConnectionError("endpoint down")

    env = make(simulator=Broken())
    env.reset(seed=0)
    obs, _reward, terminated, _truncated, info = env.step("What is the base price?")
    assert not terminated and "endpoint down" in info["simulator_error"]
    assert obs.splitlines()[-1].startswith("Human: ")


@pytest.mark.parametrize(
    "row, message",
    [({"problem_description": "x", "ground_truth": "def f(): pass"}, "test_cases"),
     ({"ground_truth": "def f(): pass", "test_cases": {"test1": "f()"}}, "problem_description"),
     ({**ROW, "test_cases": {"test1": "f(("}}, "not a Python expression"),
     ({**ROW, "test_cases": {}}, "test_cases")],
)
def test_bad_task_rows_give_clear_errors(row, message):
    with pytest.raises(TaskFormatError, match=message):
        gym.make("ColBench-Backend-v0", tasks=[row])


def test_tasks_from_jsonl_path(tmp_path):
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(ROW) + "\n\n" + json.dumps({**ROW, "task_id": "two"}) + "\n")
    env = gym.make("ColBench-Backend-v0", tasks=str(path))
    assert [t.task_id for t in env.unwrapped.tasks] == ["shipping", "two"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(ROW) + "\n{not json\n")
    with pytest.raises(TaskFormatError, match="bad.jsonl:2"):
        gym.make("ColBench-Backend-v0", tasks=str(bad))
