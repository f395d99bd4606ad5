"""What a user hands the environments, through ``gym.make``: over-long messages, reset options, and an agent that
reads nothing but ``obs``."""

from __future__ import annotations

import re

import gymnasium as gym
import numpy as np
import pytest

import colbench_gym  # noqa: F401  (registers the ids)
from colbench_gym.envs import ActionTooLongError, UnknownTaskError
from colbench_gym.simulators import ScriptedSimulator

REFERENCE = "def shipping_cost(kg):\n    if kg <= 2:\n        return 5.0\n    return round(5.0 + (kg - 2) * 1.5, 2)"
ROWS = [
    {"task_id": "shipping", "ground_truth": REFERENCE, "hidden_information": REFERENCE,
     "problem_description": "I need the shipping cost of a parcel. The signature of the function is: "
                            "def shipping_cost(kg)",
     "test_cases": {"test1": "shipping_cost(1)", "test2": "shipping_cost(2)", "test3": "shipping_cost(3)",
                    "test4": "shipping_cost(10)"}},
    {"task_id": "doubling", "ground_truth": "def double(x):\n    return 2 * x",
     "hidden_information": "def double(x):\n    return 2 * x",
     "problem_description": "Double a number. The signature of the function is: def double(x)",
     "test_cases": {"test1": "double(1)", "test2": "double(-3)"}},
]
PADDING = "# " + "padding " * 5_000 + "\n"  # 40,003 characters of comment before the function


def make(**kwargs):
    kwargs.setdefault("tasks", ROWS)
    kwargs.setdefault("simulator", ScriptedSimulator(["The base price is 5.", "Then 1.5 per extra kg."]))
    return gym.make("ColBench-Backend-v0", **kwargs)


# -- long messages ------------------------------------------------------------------------------------------------

def test_a_long_question_is_cut_and_the_human_reply_says_so():
    env = make()
    env.reset(options={"task_id": "shipping"})
    question = "What is the base price? " + "z" * 40_000
    obs, reward, terminated, truncated, info = env.step(question)
    assert (reward, terminated, truncated) == (0.0, False, False)
    assert info["action_truncated_from"] == 40_024 and info["action_truncated_to"] == 32_000
    note = ("[Your message was cut: it had 40,024 characters, over the limit of 32,000; only its first 32,000 "
            "were kept, the last 8,024 were dropped.]")
    assert info["messages"][-1] == {"role": "user", "content": note + "\n\nThe base price is 5."}
    assert info["messages"][-2] == {"role": "assistant", "content": question[:32_000]}
    assert obs.endswith(f"Agent: {question[:32_000]}\n\nHuman: {note}\n\nThe base price is 5.")
    # the next reply is the human's own again
    obs, _, _, _, info = env.step("And above 2 kg?")
    assert obs.endswith("Agent: And above 2 kg?\n\nHuman: Then 1.5 per extra kg.")
    assert "action_truncated_from" not in info


def test_a_long_answer_is_graded_as_cut_and_the_last_observation_says_so():
    env = make()
    env.reset(options={"task_id": "shipping"})
    obs, reward, terminated, _, info = env.step("I WANT TO ANSWER:\n" + PADDING + REFERENCE)
    # the function came after the cut: the tests call a name that was never defined
    assert terminated and reward == 0.0 and info["action_truncated_from"] == 18 + len(PADDING) + len(REFERENCE)
    assert {t["status"] for t in info["tests"]} == {"error"} and "NameError" in info["tests"][0]["detail"]
    assert obs.endswith("[Your message was cut: it had 40,120 characters, over the limit of 32,000; only its first "
                        "32,000 were kept, the last 8,120 were dropped.]")
    # the same answer with its function first: what was kept is graded, and passes
    env.reset(options={"task_id": "shipping"})
    _, reward, terminated, _, info = env.step("I WANT TO ANSWER:\n" + REFERENCE + "\n" + PADDING)
    assert terminated and reward == 1.0 and info["action_truncated_from"] == 40_121


def test_long_actions_raise_refuses_and_leaves_the_episode_as_it_was():
    env = make(long_actions="raise")
    env.reset(options={"task_id": "shipping"})
    _, _, _, _, before = env.step("What is the base price?")
    message = ("the action has 40,120 characters, over this environment's limit of 32,000 (long_actions='raise'); "
               "nothing was done, the episode is as it was: send a shorter message, or make the environment with "
               "long_actions='truncate' to have long messages cut")
    with pytest.raises(ActionTooLongError) as raised:
        env.step("I WANT TO ANSWER:\n" + PADDING + REFERENCE)
    assert str(raised.value) == message and isinstance(raised.value, ValueError)
    with pytest.raises(ActionTooLongError, match="the action has 32,001 characters"):
        env.step(b"x" * 32_001)  # bytes are measured once decoded
    assert env.unwrapped.turn == 1 and env.unwrapped.messages == before["messages"]
    obs, reward, terminated, _, info = env.step("I WANT TO ANSWER:\n" + REFERENCE)
    assert terminated and reward == 1.0 and info["turn"] == 2 and "[Your message was cut" not in obs
    # exactly the limit is taken whole, in either mode
    env.reset(options={"task_id": "shipping"})
    _, _, _, _, info = env.step("q" * 32_000)
    assert "action_truncated_from" not in info and info["messages"][-2]["content"] == "q" * 32_000


def test_long_actions_takes_only_its_two_modes():
    with pytest.raises(ValueError, match=r"long_actions must be one of \('truncate', 'raise'\).*got 'cut'"):
        make(long_actions="cut")
    assert make().unwrapped.long_actions == "truncate"
    assert make().action_space.max_length == make().unwrapped.max_action_chars == 32_000


# -- reset options ------------------------------------------------------------------------------------------------

ALLOWED = (r"reset\(\) takes options=\{'task_id': str\} \(one of this environment's 2 task ids\) or "
           r"options=\{'task_index': int\} \(0 to 1\), or no options for a random task")


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        (["task_id", "shipping"], TypeError, "options must be a dict, got list: " + ALLOWED),
        ("shipping", TypeError, "options must be a dict, got str: " + ALLOWED),
        ({"task": "shipping"}, ValueError, "unknown reset option 'task': " + ALLOWED),
        ({"task_id": "shipping", "seed": 1, "split": "x"}, ValueError, "unknown reset options 'seed', 'split': "),
        ({"task_id": "shipping", "task_index": 0}, ValueError, "options give both task_id and task_index: give one"),
        ({"task_index": "1"}, TypeError, "task_index must be an int, got str '1': " + ALLOWED),
        ({"task_index": 1.0}, TypeError, "task_index must be an int, got float 1.0"),
        ({"task_index": True}, TypeError, "task_index must be an int, got bool True"),
        ({"task_index": 2}, IndexError,
         r"task_index 2 is out of range: this environment has 2 tasks \(task_index 0 to 1\)"),
        ({"task_index": -1}, IndexError, "task_index -1 is out of range"),
        ({"task_id": 3}, TypeError, "task_id must be a str, got int 3: " + ALLOWED),
        ({"task_id": None}, TypeError, "task_id must be a str, got NoneType None"),
        ({"task_id": "shiping"}, UnknownTaskError,
         r"^unknown task_id 'shiping': this environment has 2 tasks; did you mean 'shipping'\? "
         r"\(all: \[t.task_id for t in env.unwrapped.tasks\]\)$"),
        ({"task_id": "zzz"}, KeyError, r"^unknown task_id 'zzz': this environment has 2 tasks "
                                       r"\(the first are 'shipping', 'doubling'\)"),
    ],
)
def test_bad_reset_options_are_clear_errors(options, error, message):
    env = make()
    env.reset(options={"task_id": "doubling"})
    _, _, _, _, before = env.step("What is the base price?")
    with pytest.raises(error, match=message):
        env.reset(options=options)
    # the episode under way goes on as it was
    assert env.unwrapped.task.task_id == "doubling" and env.unwrapped.messages == before["messages"]
    _, reward, terminated, _, info = env.step("I WANT TO ANSWER: def double(x):\n    return 2 * x")
    assert terminated and reward == 1.0 and info["turn"] == 2


def test_good_reset_options():
    env = make()
    assert env.reset(options={"task_index": 1})[1]["task_id"] == "doubling"
    assert env.reset(options={"task_index": np.int64(0)})[1]["task_id"] == "shipping"
    assert env.reset(options={"task_id": "doubling"})[1]["task_id"] == "doubling"
    drawn = {env.reset(seed=seed, options={})[1]["task_id"] for seed in range(12)}  # {} and None: a random task
    assert drawn == {"shipping", "doubling"}
    assert env.reset(seed=3)[1]["task_id"] == env.reset(seed=3, options=None)[1]["task_id"]


def test_frontend_reset_options_are_checked_before_the_page_is_forgotten():
    from colbench_gym.rendering import AssetsMissingError, RendererUnavailable, shared_renderer

    try:
        renderer = shared_renderer()
    except (AssetsMissingError, RendererUnavailable, ImportError) as err:
        pytest.skip(f"renderer not set up: {err}")
    env = gym.make("ColBench-Frontend-v0", tasks="test", similarity="ssim", renderer=renderer)
    count = len(env.unwrapped.tasks)
    env.reset(options={"task_index": 0})
    env.unwrapped._last_page = ("<html></html>", None)  # as if a page had been shown (no browser needed)
    with pytest.raises(IndexError, match=f"task_index {count} is out of range: this environment has {count} tasks"):
        env.reset(options={"task_index": count})
    with pytest.raises(ValueError, match="unknown reset option 'task'"):
        env.reset(options={"task": 0})
    assert env.unwrapped._last_page == ("<html></html>", None)
    obs, _ = env.reset(options={"task_index": count - 1})
    assert env.unwrapped._last_page is None and obs.startswith("Instructions: You are a frontend designer")


# -- an agent that reads only obs ---------------------------------------------------------------------------------

def obs_only_model(obs: str) -> str:
    """A stand-in for an LLM: asks once, then answers in the form the observation's instructions give."""
    how = re.search(r'write "([^"]+)" followed by the complete Python function', obs)
    assert how, "the observation does not say how to answer"
    if "\n\nAgent: " not in obs:
        return "What does a parcel of 2 kg or less cost, and what is added per kg above?"
    return f"{how.group(1)}\n{REFERENCE}"


def test_an_agent_that_reads_only_obs_learns_how_to_answer():
    env = make(privileged=False)
    obs, info = env.reset(seed=0, options={"task_id": "shipping"})
    assert obs.startswith("Instructions: You are a software engineer working with a human who wants a Python "
                          "function.") and "for at most 10 turns in total" in obs
    assert obs.endswith("\n\nHuman: " + ROWS[0]["problem_description"]) and REFERENCE not in obs
    done, turns = False, 0
    while not done:  # the README's loop
        obs, reward, terminated, truncated, info = env.step(obs_only_model(obs))
        done, turns = terminated or truncated, turns + 1
    assert (turns, reward, info["outcome"], info["success"]) == (2, 1.0, "answered", True)
    # obs is the chat of info["messages"] as text, instructions first
    assert obs == "\n\n".join(f"{ {'system': 'Instructions', 'user': 'Human', 'assistant': 'Agent'}[m['role']] }: "
                              f"{m['content']}" for m in info["messages"])


def test_the_instructions_stay_at_the_head_of_a_long_observation(monkeypatch):
    from colbench_gym.envs import dialogue

    monkeypatch.setattr(dialogue, "MAX_OBSERVATION_CHARS", 3_000)
    env = make(simulator=ScriptedSimulator(["noted"]), render_mode="ansi")
    obs, _ = env.reset(options={"task_id": "shipping"})
    instructions = env.unwrapped.instructions
    for turn in range(6):
        obs, _, _, _, info = env.step(f"message {turn} " + "z" * 600)
    assert info["observation_truncated"] and len(obs) <= 3_000
    assert obs.startswith(f"Instructions: {instructions}\n\nHuman: {ROWS[0]['problem_description']}\n\n[...]\n\n")
    assert obs.endswith("Human: noted") and "message 5 " in obs and "message 0 " not in obs
    assert env.render().startswith("Human: " + ROWS[0]["problem_description"])  # render(): the dialogue alone
