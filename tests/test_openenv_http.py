"""The OpenEnv server over plain HTTP, as a raw client (urllib) sees it, against a real server process.

Every bad request is answered with a 4xx status and the reason in the body (never a bare 500), ``POST /step`` says
why it cannot step and what to use, and ``--help`` shows the defaults.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

pytest.importorskip("openenv")
pytest.importorskip("uvicorn")

from conftest import REPO_ROOT
from helpers_openenv_server import BUDGET_S, SERVER_ARGS, http, shared_server

from colbench_gym.envs.dialogue import ANSWER_MARKER
from colbench_gym.tasks import resolve_tasks

NAME = "colbench-backend-v0"
# What grading a looping answer may take beyond its budget (measured: about 0.02 s): messages, the sandbox's fork,
# two cores shared with the rest of the suite; under the default budget (2 s), so that a lost flag fails.
BUDGET_SLACK_S = 0.75


@pytest.fixture(scope="module")
def server():
    return shared_server(*SERVER_ARGS)  # the same server as test_openenv_server.py's


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
    # the budget's default is read from the code, in seconds
    assert re.search(r"--answer-budget-s ANSWER_BUDGET_S backend: [^()]*\(wall and CPU\)[^()]*"
                     r"\(default: [^()]*\b\d+(\.\d+)? s\)", text), text


@pytest.mark.parametrize(("args", "message"), [
    (["--answer-budget-s", "0"], "argument --answer-budget-s: must be a positive number of seconds (inf: no budget), "
                                 "got 0"),
    (["--answer-budget-s", "soon"], "argument --answer-budget-s: not a number of seconds: 'soon'"),
    (["--answer-budget-s", "nan"], "must be a positive number of seconds (inf: no budget), got nan"),
    (["--env", "ColBench-Frontend-v0", "--answer-budget-s", "2"], "--answer-budget-s is for ColBench-Backend-v0"),
])
def test_cli_refuses_a_budget_it_cannot_use(args, message, capsys):
    from colbench_gym.openenv import main

    with pytest.raises(SystemExit) as exit_info:  # refused before anything starts
        main(args)
    assert exit_info.value.code == 2 and message in capsys.readouterr().err


def test_a_looping_answer_costs_at_most_the_budget_set_on_the_command_line(server, tasks):
    from openenv.core.generic_client import GenericEnvClient

    task = tasks[0]
    signature = task.ground_truth.split(":", 1)[0]  # "def name(args)"
    looping = f"{ANSWER_MARKER}\n{signature}:\n    while True:\n        pass"
    with GenericEnvClient(base_url=server, message_timeout_s=120).sync() as env:
        env.reset(task_id=task.task_id)  # the references are cached by a first, right answer
        assert env.step({"message": f"{ANSWER_MARKER}\n{task.ground_truth}"}).reward == 1.0
        env.reset(task_id=task.task_id)
        started = time.perf_counter()
        result = env.step({"message": looping})
        elapsed = time.perf_counter() - started
    grader = result.observation["info"]["grader"]
    assert result.done and result.reward == 0.0
    assert grader["budget_s"] == BUDGET_S and grader["out_of_budget"]
    assert grader["status_counts"] == {"timeout": len(task.test_cases)} and grader["tests_cut"] >= 1
    assert BUDGET_S * 0.9 <= grader["spent_s"] <= BUDGET_S + 0.5
    assert elapsed <= BUDGET_S + BUDGET_SLACK_S, f"a looping answer took {elapsed:.2f} s for a {BUDGET_S} s budget"
