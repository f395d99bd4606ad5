"""`python -m colbench_gym.openenv` serves whole episodes to OpenEnv's own client over loopback."""

from __future__ import annotations

import json
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("openenv")
pytest.importorskip("uvicorn")

from helpers_openenv_server import BUDGET_S, MAX_TURNS, SERVER_ARGS, http, shared_server

from colbench_gym.envs.dialogue import ANSWER_MARKER, MAX_ACTION_CHARS, cut_note
from colbench_gym.tasks import resolve_tasks

SESSIONS = 8


def _get(url: str):
    status, body = http("GET", url)
    assert status == 200, body
    return body


def _post(url: str, body: dict):
    status, answer = http("POST", url, body)
    assert status == 200, answer
    return answer


@pytest.fixture(scope="module")
def server():
    return shared_server(*SERVER_ARGS)  # the same server as test_openenv_http.py's


@pytest.fixture(scope="module")
def tasks():
    return resolve_tasks("train", "backend")


def _client(url):
    from openenv.core.generic_client import GenericEnvClient

    return GenericEnvClient(base_url=url, message_timeout_s=120).sync()


def _play(url, index, answer_right, tasks, barrier):
    """One whole episode in its own session: reset, a question, an answer (all sessions open at once)."""
    observations = []
    with _client(url) as env:
        result = env.reset(task_index=index)
        observations.append((result.observation, result.reward, result.done))
        barrier.wait(timeout=120)
        task = tasks[index]
        assert result.observation["task_id"] == task.task_id and not result.done
        result = env.step({"message": "What should happen with unusual inputs?"})
        observations.append((result.observation, result.reward, result.done))
        answer = task.ground_truth if answer_right else "def nothing():\n    return None"
        result = env.step({"message": f"{ANSWER_MARKER}\n{answer}"})
        observations.append((result.observation, result.reward, result.done))
        state = env.state()
    return task, answer, observations, state


def _without(text: str, answer: str) -> str:
    return text.replace(answer, "")


def test_eight_concurrent_sessions_play_whole_episodes_without_privileged_fields(server, tasks):
    barrier = threading.Barrier(SESSIONS)
    with ThreadPoolExecutor(SESSIONS) as pool:
        runs = list(pool.map(lambda i: _play(server, i, i % 2 == 0, tasks, barrier), range(SESSIONS)))
    assert len({task.task_id for task, *_ in runs}) == SESSIONS
    for i, (task, answer, observations, state) in enumerate(runs):
        (first, r0, d0), (second, r1, d1), (last, r2, d2) = observations
        assert r0 is None and not d0 and first["reply"] == task.problem_description and first["turn"] == 0
        assert r1 == 0.0 and not d1 and second["reply"] and second["turn"] == 1
        assert d2 and last["outcome"] == "answered" and last["turn"] == 2
        if i % 2 == 0:
            assert r2 == 1.0 and last["success"] and last["score"] == 1.0
        else:
            assert r2 == 0.0 and not last["success"]
        assert last["info"]["grader"]["infra_error"] is False
        assert state["task_id"] == task.task_id and state["step_count"] == 2 and state["done"]
        for observation, _, _ in observations:
            assert observation["privileged"] is None and observation["tests"] is None
            assert "privileged" not in observation["info"] and "tests" not in observation["info"]
            # the reference, the hidden information and the unit tests never leave the server (the agent's own
            # answer, a copy of the reference in the even sessions, is echoed back and removed before looking)
            seen = _without(json.dumps(observation, ensure_ascii=False), json.dumps(answer)[1:-1])
            private = task.privileged
            for secret in (private["ground_truth"], private["hidden_information"], *private["test_cases"].values()):
                assert json.dumps(secret)[1:-1] not in seen


def _gym_env():
    """The gym environment the shared server plays, made here as a gym caller would (no training-time info)."""
    import gymnasium as gym

    return gym.make("ColBench-Backend-v0", tasks="train", max_turns=MAX_TURNS, answer_budget_s=BUDGET_S,
                    privileged=False)


def test_client_observations_carry_the_gym_observation_the_cut_notes_and_the_info_keys(server, tasks):
    """Over OpenEnv, an episode with a cut question and a cut final answer shows what gym shows: the same text
    (instructions first; the final answer's cut note, which no human reply carries, at the end), the same messages,
    and info with the same keys as gym's, less the per-test details."""
    task = tasks[6]
    limit = MAX_ACTION_CHARS
    question = "What should happen with unusual inputs?\n" + "x" * (limit + 5_000)
    # the reference with a comment line long enough to be cut: what is kept still grades as the reference
    answer = f"{ANSWER_MARKER}\n{task.ground_truth}\n" + "#" * (limit + 8_000)

    gym_env = _gym_env()
    try:
        gym_steps = [gym_env.reset(options={"task_id": task.task_id})]
        for message in (question, answer):
            text, _, _, _, info = gym_env.step(message)
            gym_steps.append((text, info))
        instructions = gym_env.unwrapped.instructions
    finally:
        gym_env.close()
    with _client(server) as env:
        results = [env.reset(task_id=task.task_id)] + [env.step({"message": m}) for m in (question, answer)]

    answer_info = gym_steps[-1][1]
    first, second, last = (result.observation for result in results)
    assert first["text"].startswith(f"Instructions: {instructions}\n\nHuman: {task.problem_description}")
    assert second["reply"].startswith(cut_note(len(question), limit))
    assert results[-1].done and results[-1].reward == 1.0
    assert last["text"].endswith("\n\n" + cut_note(len(answer), limit))
    assert last["info"]["action_truncated_from"] == len(answer) and last["info"]["action_truncated_to"] == limit

    timed = {"scoring_seconds", "grader"}  # how long grading took differs between the two runs
    for observation, (gym_text, gym_info) in zip((first, second, last), gym_steps):
        assert observation["text"] == gym_text
        assert observation["messages"] == gym_info["messages"]
        assert set(observation["info"]) == set(gym_info) - {"messages", "tests"}
        assert {k: v for k, v in observation["info"].items() if k not in timed} == \
            json.loads(json.dumps({k: v for k, v in gym_info.items() if k not in timed | {"messages", "tests"}}))
    assert last["info"]["grader"]["status_counts"] == answer_info["grader"]["status_counts"]


def test_malformed_actions_are_refused_and_the_session_goes_on(server, tasks):
    with _client(server) as env:
        env.reset(task_id=tasks[5].task_id)
        for bad in ({"msg": "hello"}, {"message": 5}, {"message": "hi", "extra": 1}, {}):
            with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                env.step(bad)
        with pytest.raises(RuntimeError, match="unknown reset arguments"):
            env.reset(task_id=tasks[5].task_id, temperature=2)
        with pytest.raises(RuntimeError, match="allow-privileged"):
            env.reset(task_id=tasks[5].task_id, privileged=True)
        with pytest.raises(RuntimeError, match="unknown task_id"):
            env.reset(task_id="no-such-task")
        result = env.reset(split="train", index=5)  # OpenEnv's Task API way of choosing
        assert result.observation["task_id"] == tasks[5].task_id
        result = env.step({"message": "Which inputs matter?"})
        assert not result.done and result.observation["turn"] == 1
        env.step({"message": "Anything else?"})
        result = env.step({"message": "And the rest?"})
        assert result.done and result.reward == 0.0 and result.observation["outcome"] == "no_answer"
        with pytest.raises(RuntimeError, match="reset first"):
            env.step({"message": "one more"})


def test_http_routes_schema_and_task_api(server, tasks):
    schema = _get(f"{server}/schema")
    assert schema["action"]["required"] == ["message"]
    assert "privileged" in schema["observation"]["properties"]
    name = "colbench-backend-v0"
    assert _get(f"{server}/{name}/splits") == [{"name": "train", "type": "train"}]
    assert _post(f"{server}/{name}/num_tasks", {"split": "train"})["num_tasks"] == len(tasks)
    spec = _post(f"{server}/{name}/task", {"split": "train", "index": 3})["task"]
    assert spec == {"id": tasks[3].task_id, "index": 3, "problem_description": tasks[3].problem_description}
    reset = _post(f"{server}/reset", {"task_index": 3})  # stateless HTTP: a fresh environment per request
    assert reset["observation"]["task_id"] == tasks[3].task_id and reset["observation"]["privileged"] is None


def test_privileged_information_only_when_the_server_allows_it(tasks):
    from colbench_gym.openenv.server import ServerConfig, environment_class

    cls = environment_class()
    closed = cls(ServerConfig(make_kwargs={"tasks": "train", "max_turns": 2}))
    with pytest.raises(PermissionError, match="allow-privileged"):
        closed.reset(task_index=0, privileged=True)
    assert closed.reset(task_index=0).privileged is None
    assert closed.env.unwrapped.include_privileged is False  # the env itself leaves it out of info

    opened = cls(ServerConfig(make_kwargs={"tasks": "train", "max_turns": 2}, allow_privileged=True))
    # still only on request: this env's info has the training-time keys, the public info never does
    assert opened.env.unwrapped.include_privileged is True
    unasked = opened.reset(task_index=0)
    assert unasked.privileged is None and "privileged" not in unasked.info
    unasked = opened.step(opened_action(f"{ANSWER_MARKER}\n{tasks[0].ground_truth}"))
    assert unasked.done and unasked.tests is None and not {"privileged", "tests"} & set(unasked.info)
    observation = opened.reset(task_index=0, privileged=True)
    assert observation.privileged["ground_truth"] == tasks[0].ground_truth
    observation = opened.step(opened_action(f"{ANSWER_MARKER}\n{tasks[0].ground_truth}"))
    assert observation.done and observation.reward == 1.0 and observation.tests
    assert not {"privileged", "tests"} & set(observation.info)  # in their own fields, not twice


def opened_action(message):
    from colbench_gym.openenv.server import build_models

    return build_models()[0](message=message)


def test_missing_openenv_names_the_extra(monkeypatch):
    from colbench_gym._optional import MissingExtraError
    from colbench_gym.openenv import server

    monkeypatch.setitem(sys.modules, "openenv", None)
    with pytest.raises(MissingExtraError, match=r"colbench-gym\[openenv\]"):
        server.create_colbench_app("ColBench-Backend-v0")


@pytest.mark.browser
def test_frontend_environment_behind_openenv():
    from colbench_gym.openenv.server import ServerConfig, build_models, environment_class

    Action = build_models()[0]
    env = environment_class()(ServerConfig(env_id="ColBench-Frontend-v0",
                                           make_kwargs={"tasks": "train", "max_turns": 2, "similarity": "ssim"}))
    target = env.env.unwrapped.tasks[0].ground_truth
    observation = env.reset(task_index=0)
    assert observation.privileged is None and target not in observation.model_dump_json()
    observation = env.step(Action(message="OUTPUT: <html><body><h1>Draft</h1></body></html>"))
    assert not observation.done and observation.reply and observation.info["render"]["status"] == "ok"
    observation = env.step(Action(message=f"{ANSWER_MARKER} <html><body><h1>Final</h1></body></html>"))
    assert observation.done and 0.0 < observation.reward < 1.0
    assert observation.info["similarity_metric"] == "ssim" and target not in observation.model_dump_json()
