"""The OpenEnv server over plain HTTP, as a raw client (urllib) sees it, against a real server process.

Every bad request is answered with a 4xx status and the reason in the body (never a bare 500), ``POST /step`` says
why it cannot step and what to use, and ``--help`` shows the defaults.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

pytest.importorskip("openenv")
pytest.importorskip("uvicorn")

from conftest import REPO_ROOT
from helpers_openenv_server import http, running_server

from colbench_gym.envs.dialogue import ANSWER_MARKER
from colbench_gym.tasks import resolve_tasks

NAME = "colbench-backend-v0"


@pytest.fixture(scope="module")
def server():
    with running_server("--env", "ColBench-Backend-v0", "--tasks", "train", "--max-turns", "3") as url:
        yield url


@pytest.fixture(scope="module")
def tasks():
    return resolve_tasks("train", "backend")


def _reason(body) -> str:
    assert isinstance(body, dict) and "detail" in body, f"no reason in the body: {body!r}"
    return body["detail"] if isinstance(body["detail"], str) else repr(body["detail"])


def test_bad_resets_are_answered_with_a_4xx_and_the_reason(server, tasks):
    count = len(tasks)
    cases = [
        ({"task_id": "no-such-task"}, 422, ["unknown task_id 'no-such-task'", f"POST /{NAME}/tasks"]),
        ({"task_id": tasks[2].task_id[:-1]}, 422, [f"did you mean '{tasks[2].task_id}'"]),
        ({"task_id": 5}, 422, ["task_id must be a str", "int 5"]),
        ({"temperature": 2}, 422, ["unknown reset arguments ['temperature']", "task_index"]),
        ({"privileged": True}, 403, ["--allow-privileged"]),
        ({"privileged": "no"}, 422, ["privileged must be true or false, got str 'no'"]),
        ({"task_index": count}, 422, [f"task_index {count} is out of range", f"{count} tasks"]),
        ({"task_index": -1}, 422, ["task_index -1 is out of range"]),
        ({"task_index": "3"}, 422, ["task_index must be an int, got str '3'"]),
        ({"task_index": True}, 422, ["task_index must be an int, got bool True"]),
        ({"split": "test", "index": 0}, 422, ["serves the split 'train', not 'test'"]),
        ({"task_id": tasks[0].task_id, "task_index": 1}, 422, ["give one of task_id, task_index and index"]),
        ({"seed": -1}, 422, ["seed"]),  # OpenEnv's own request model refuses it
    ]
    for body, status, fragments in cases:
        got_status, got_body = http("POST", f"{server}/reset", body)
        assert got_status == status, (body, got_status, got_body)
        reason = _reason(got_body)
        for fragment in fragments:
            assert fragment in reason, (body, reason)
    status, body = http("POST", f"{server}/reset", raw=b"{not json")
    assert status == 422 and "json" in _reason(body).lower()

    # the server still serves good requests after all of them
    status, body = http("POST", f"{server}/reset", {"task_index": 4})
    assert status == 200 and body["observation"]["task_id"] == tasks[4].task_id and body["done"] is False


def test_http_step_says_why_it_cannot_step_and_what_to_use(server, tasks):
    status, body = http("POST", f"{server}/reset", {"task_id": tasks[1].task_id})
    assert status == 200 and body["observation"]["reply"] == tasks[1].problem_description

    for message in ("What should happen for an empty input?", f"{ANSWER_MARKER}\n{tasks[1].ground_truth}"):
        status, body = http("POST", f"{server}/step", {"action": {"message": message}})
        assert status == 409, body
        reason = _reason(body)
        assert "stateless" in reason and "fresh environment" in reason
        assert "/ws" in reason and "GenericEnvClient" in reason
        assert tasks[1].ground_truth not in reason

    # a malformed action is still OpenEnv's 422 with the field that is wrong
    status, body = http("POST", f"{server}/step", {"action": {"msg": "hello"}})
    assert status == 422 and "message" in _reason(body)
    status, body = http("POST", f"{server}/step", {"message": "hello"})
    assert status == 422 and "action" in _reason(body)


def test_task_api_errors_are_4xx_with_the_reason(server, tasks):
    status, body = http("POST", f"{server}/{NAME}/num_tasks", {"split": "test"})
    assert status == 422 and _reason(body) == "unknown split 'test'; this server serves 'train'"
    status, body = http("POST", f"{server}/{NAME}/task", {"split": "train", "index": len(tasks)})
    assert status == 422
    assert f"task index {len(tasks)} is out of range" in _reason(body) and f"{len(tasks)} tasks" in _reason(body)
    status, body = http("POST", f"{server}/{NAME}/task", {"split": "train", "index": 0})
    assert status == 200 and body["task"]["id"] == tasks[0].task_id


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "colbench_gym.openenv", *args], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=120, check=False)


def test_help_shows_the_defaults():
    result = _cli("--help")
    assert result.returncode == 0, result.stderr
    text = " ".join(result.stdout.split())  # argparse wraps lines wherever the terminal width puts them
    for default in ("(default: ColBench-Backend-v0)", "(default: 127.0.0.1)", "(default: 8000)", "(default: train)",
                    "(default: 10)", "(default: 64)", "(default: warning)", "(default: off)", "(default: clip)",
                    "(default: the offline one)", "(default: --tasks, or the file's stem)"):
        assert default in text, default
    assert "--answer-budget-s" in text and "(default: the environment's own" in text


def test_cli_refuses_a_budget_it_cannot_use():
    result = _cli("--answer-budget-s", "0")
    assert result.returncode == 2 and "must be a positive, finite number of seconds, got 0" in result.stderr
    result = _cli("--answer-budget-s", "soon")
    assert result.returncode == 2 and "not a number of seconds: 'soon'" in result.stderr
    result = _cli("--env", "ColBench-Frontend-v0", "--answer-budget-s", "2")
    assert result.returncode == 2 and "--answer-budget-s is for ColBench-Backend-v0" in result.stderr
