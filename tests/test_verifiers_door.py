"""ColBench as a verifiers environment, run by verifiers' own evaluation code (what ``vf-eval`` runs).

The policy is a scripted model behind a local OpenAI-compatible server (tests/fake_openai_server.py); verifiers'
interception server sits between it and the ColBench episode, as in ``vf-eval`` and prime-rl. Everything on the
ColBench side is real: the offline simulated human and the sandboxed grader.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shlex
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

vf = pytest.importorskip("verifiers.v1", reason="verifiers is not installed: pip install 'colbench-gym[verifiers]'")

from fake_openai_server import FakeOpenAIServer
from verifiers.v1.cli.eval.runner import run_eval
from verifiers.v1.configs.cli.eval import EvalConfig

from colbench_gym.envs.dialogue import ANSWER_MARKER
from colbench_gym.integrations.verifiers import (
    REWARD_NAME,
    TASKSET_ID,
    V1_EVAL_ENTRY_POINT,
    load_environment,
)
from colbench_gym.tasks import resolve_tasks

TASK_ID = "b-001-shipping-cost"
QUESTION = "Should heavier parcels cost more, and by how much?"
WRONG_ANSWER = "def shipping_cost(weight_kg, destination):\n    return 5.0"
API_KEY_VAR = "COLBENCH_VERIFIERS_TEST_KEY"
REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def task():
    return next(t for t in resolve_tasks("train", "backend") if t.task_id == TASK_ID)


@pytest.fixture
def task_file(tmp_path, task):
    path = tmp_path / "one_task.jsonl"
    row = {"task_id": task.task_id, "problem_description": task.problem_description, "ground_truth": task.ground_truth,
           "hidden_information": task.hidden_information, "test_cases": task.test_cases}
    path.write_text(json.dumps(row) + "\n")
    return str(path)


def _script(*replies):
    """A policy that says ``replies[k]`` on its k-th turn (the k-th request of a dialogue), and the last one after."""
    def respond(body):
        turn = sum(1 for message in body["messages"] if message["role"] == "assistant")
        return replies[min(turn, len(replies) - 1)]
    return respond


def _evaluate(tmp_path, monkeypatch, responder, agent=None, sampling=None, **taskset):
    """One ``vf-eval`` run in this process (verifiers' ``run_eval``); returns its episodes and the model's requests."""
    monkeypatch.setenv(API_KEY_VAR, "not-a-secret")
    env = {"taskset": {"id": TASKSET_ID, **taskset}, **({"agent": agent} if agent else {})}
    with FakeOpenAIServer(responder) as server:
        options = dict(env=env, model="scripted-policy",
                       client={"base_url": server.base_url, "api_key_var": API_KEY_VAR},
                       num_rollouts=1, push=False, rich=None, output_dir=str(tmp_path / "outputs"),
                       sampling=sampling or {})
        if "serve" in EvalConfig.model_fields:  # verifiers 0.3 serves from worker processes by default
            options["serve"] = None
        episodes = asyncio.run(run_eval(EvalConfig(**options)))
        requests = [entry["body"] for entry in server.log]
    return episodes, requests


def _only_trace(episodes):
    assert len(episodes) == 1
    episode = episodes[0]
    assert episode.ok, episode.errors
    assert len(episode.traces) == 1
    return episode.traces[0]


def _answer(code):
    return f"{ANSWER_MARKER}\n```python\n{code}\n```"


def test_one_question_then_the_right_function_scores_1_and_the_human_reply_is_in_the_dialogue(
        tmp_path, monkeypatch, task, task_file):
    episodes, requests = _evaluate(tmp_path, monkeypatch, _script(QUESTION, _answer(task.ground_truth.strip())),
                                   sampling={"temperature": 0.0, "max_tokens": 512}, tasks=task_file)
    trace = _only_trace(episodes)

    assert trace.reward == 1.0
    assert trace.rewards[REWARD_NAME].score == 1.0
    assert trace.metrics == {"success": 1.0, "answered": 1.0, "human_turns": 1.0}
    assert trace.info["colbench"]["outcome"] == "answered"
    assert trace.info["colbench"]["status_counts"] == {"passed": len(task.test_cases)}

    # The completion: question, the simulated human's reply, the answer; the reply is what the model saw next.
    roles = [message.role for message in trace.messages]
    assert roles == ["system", "user", "assistant", "user", "assistant"]
    assert trace.messages[1].content == task.problem_description
    assert trace.messages[2].content == QUESTION
    reply = trace.messages[3].content
    assert "20" in reply and "10" in reply  # the offline human states the hidden rule: over 20 kg costs 10 more
    assert len(requests) == 2
    assert requests[1]["messages"][-1] == {"role": "user", "content": reply}
    assert all(r["model"] == "scripted-policy" and r["temperature"] == 0.0 and r["max_tokens"] == 512
               for r in requests)  # the run's sampling settings reach the model on every turn
    assert trace.messages[4].content.startswith(ANSWER_MARKER)


def test_a_wrong_function_scores_what_the_grader_gives_it_and_nothing_privileged_leaks(
        tmp_path, monkeypatch, task, task_file):
    import gymnasium as gym

    episodes, requests = _evaluate(tmp_path, monkeypatch, _script(QUESTION, _answer(WRONG_ANSWER)), tasks=task_file)
    trace = _only_trace(episodes)

    env = gym.make("ColBench-Backend-v0", tasks=task_file, privileged=False)
    env.reset(options={"task_id": TASK_ID})
    _, expected, *_ = env.step(_answer(WRONG_ANSWER))
    env.close()
    assert expected < 1.0
    assert trace.reward == pytest.approx(expected)
    assert trace.metrics["success"] == 0.0
    assert trace.metrics["answered"] == 1.0

    # Privileged information reaches neither the model (any request) nor the record (trace, traces.jsonl).
    secrets = [task.ground_truth.strip(), task.hidden_information.strip(), *task.test_cases.values()]
    public = task.problem_description + WRONG_ANSWER  # the signature line is in both
    secrets += [line.strip() for line in task.ground_truth.splitlines()
                if len(line.strip()) > 25 and line.strip() not in public]
    assert len(secrets) > 5
    prompts = json.dumps(requests)
    record = trace.model_dump_json() + "".join(p.read_text() for p in (tmp_path / "outputs").rglob("*.jsonl"))
    assert TASK_ID in prompts or TASK_ID in record
    for secret in secrets:
        assert secret not in prompts
        assert secret not in record


def test_no_answer_within_max_turns_scores_0(tmp_path, monkeypatch, task_file):
    episodes, requests = _evaluate(tmp_path, monkeypatch, _script(QUESTION), tasks=task_file, max_turns=3)
    trace = _only_trace(episodes)

    assert trace.reward == 0.0
    assert trace.metrics == {"success": 0.0, "answered": 0.0, "human_turns": 2.0}
    assert trace.info["colbench"]["outcome"] == "no_answer"
    assert len(requests) == 3  # the third message reached the limit: no human reply, no fourth request


def test_the_model_endpoint_failing_fails_the_episode_with_its_message(tmp_path, monkeypatch, task_file):
    def refuse(body):
        return {"choices": "not a list"}  # a malformed upstream response

    episodes, _ = _evaluate(tmp_path, monkeypatch, refuse, tasks=task_file)
    assert len(episodes) == 1
    assert not episodes[0].ok
    errors = [error.message for error in episodes[0].errors] + [
        error.message for trace in episodes[0].traces for error in trace.errors]
    assert any("chat completion failed" in message or "malformed" in message for message in errors), errors


def test_the_agents_own_turn_limit_ends_the_dialogue_as_a_dialogue_without_answer(tmp_path, monkeypatch, task_file):
    episodes, requests = _evaluate(tmp_path, monkeypatch, _script(QUESTION), agent={"max_turns": 2}, tasks=task_file)
    trace = _only_trace(episodes)

    assert len(requests) == 2
    assert trace.reward == 0.0
    assert trace.info["colbench"]["outcome"] == "stopped"
    assert trace.metrics["answered"] == 0.0


def test_a_grader_failure_fails_the_episode_instead_of_scoring_0(tmp_path, monkeypatch, task, task_file):
    from colbench_gym.envs.backend import BackendEnv

    def broken_grader(self, answer):
        return 0.0, {"success": False, "tests": [],
                     "grader": {"status_counts": {"infra_error": 10}, "infra_error": True}}

    monkeypatch.setattr(BackendEnv, "score_answer", broken_grader)
    episodes, _ = _evaluate(tmp_path, monkeypatch, _script(_answer(task.ground_truth.strip())), tasks=task_file)
    assert len(episodes) == 1
    assert not episodes[0].ok
    messages = [error.message for error in episodes[0].errors]
    assert any("the grader or the browser failed on task 'b-001-shipping-cost' (not the policy's failure)" in m
               for m in messages), messages


def test_load_environment_lists_the_tasks_with_only_the_request_and_the_instructions(task):
    env = load_environment(tasks="train", max_turns=4)
    assert isinstance(env, vf.Env)
    rows = {t.data.task_id: t for t in env.taskset}
    assert len(rows) == len(resolve_tasks("train", "backend"))
    row = rows[TASK_ID]
    assert row.data.prompt == task.problem_description
    assert "at most 4 turns" in row.data.system_prompt and ANSWER_MARKER in row.data.system_prompt
    assert task.ground_truth.strip() not in row.data.model_dump_json()


def test_load_environment_refuses_bad_settings_with_clear_messages():
    with pytest.raises(ValueError, match="simulator_base_url and simulator_model go together"):
        load_environment(simulator_base_url="http://127.0.0.1:1/v1")
    with pytest.raises(FileNotFoundError, match="'no-such-split' is neither a built-in split"):
        load_environment(tasks="no-such-split")  # at construction, not in every rollout
    with pytest.raises(ValueError, match="taskset.env_id"):
        load_environment(env_id="CartPole-v1")


def _v1_eval_command():
    """verifiers' own eval CLI: ``vf-eval`` in 0.4, ``eval`` in 0.3 (whose ``vf-eval`` is the legacy API's)."""
    names = [ep.name for ep in entry_points(group="console_scripts") if ep.value == V1_EVAL_ENTRY_POINT]
    if not names:
        pytest.skip("this verifiers release has no v1 eval command")
    return str(Path(sys.executable).parent / names[0])


@pytest.mark.slow
def test_the_eval_command_runs_colbench_by_its_plugin_id(tmp_path, task, task_file):
    command = _v1_eval_command()
    with FakeOpenAIServer(_script(QUESTION, _answer(task.ground_truth.strip()))) as server:
        args = [command, "colbench_verifiers", "--env.taskset.tasks", task_file, "-n", "1", "-r", "1",
                "-m", "scripted-policy", "--client.base-url", server.base_url, "--client.api-key-var", API_KEY_VAR,
                "--no-push", "--no-rich", "-o", str(tmp_path / "outputs")]
        if "serve" in EvalConfig.model_fields:
            args.append("--no-serve")
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **{API_KEY_VAR: "not-a-secret"})
        result = subprocess.run(args, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    traces = [json.loads(line) for path in (tmp_path / "outputs").rglob("traces.jsonl")
              for line in path.read_text().splitlines() if line.strip()]
    assert len(traces) == 1
    text = json.dumps(traces[0])
    assert '"colbench_score"' in text and '"success": 1.0' in text
    assert task.ground_truth.strip().splitlines()[1].strip() not in json.dumps(traces[0].get("task", {}))


@pytest.mark.slow
def test_the_env_server_path_scores_as_in_process(tmp_path, monkeypatch, task, task_file):
    """verifiers 0.3 evaluates through env-server worker processes by default (the path prime-rl trains through)."""
    if "serve" not in EvalConfig.model_fields:
        pytest.skip("this verifiers release runs vf-eval in-process only")
    monkeypatch.setenv(API_KEY_VAR, "not-a-secret")
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    with FakeOpenAIServer(_script(QUESTION, _answer(task.ground_truth.strip()))) as server:
        config = EvalConfig(env={"taskset": {"id": TASKSET_ID, "tasks": task_file}}, model="scripted-policy",
                            client={"base_url": server.base_url, "api_key_var": API_KEY_VAR}, num_rollouts=1,
                            push=False, rich=None, output_dir=str(tmp_path / "outputs"))
        episodes = asyncio.run(run_eval(config))
    trace = _only_trace(episodes)
    assert trace.reward == 1.0
    assert trace.metrics["human_turns"] == 1.0


# -- the entry points as the README gives them, and verifiers 0.3's legacy ones -----------------------------------------

def _readme_verifiers_blocks(language):
    """The code blocks of the README's "verifiers and prime-rl" paragraphs, in order."""
    text = (REPO_ROOT / "README.md").read_text()
    start = text.index("**verifiers and prime-rl**")
    section = text[start:text.index("prime-rl loads the same environment config", start)]
    return re.findall(rf"```{language}\n(.*?)```", section, flags=re.DOTALL)


def _readme_shell_commands():
    """The README's shell commands there, each as its argument list (continuation lines joined, comments dropped)."""
    commands = []
    for block in _readme_verifiers_blocks("bash"):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                commands.append(shlex.split(line))
    return commands


def _readme_eval_command():
    """The README's command for the installed verifiers' v1 eval script (``eval`` in 0.3, ``vf-eval`` in 0.4)."""
    program = Path(_v1_eval_command()).name
    matching = [command for command in _readme_shell_commands() if Path(command[0]).name == program]
    assert len(matching) == 1, f"the README gives no single `{program}` command: {_readme_shell_commands()}"
    return matching[0]


def _with_values(command, values):
    """``command`` with the value after each flag of ``values`` replaced; every one of those flags must be there."""
    command = list(command)
    for flag, value in values.items():
        assert flag in command, f"the README's command has no {flag}: {shlex.join(command)}"
        command[command.index(flag) + 1] = value
    return command


def _policy_that_asks_then_answers_with(reference):
    return _script(QUESTION, _answer(reference.strip()))


def test_the_readme_eval_command_for_the_installed_verifiers_runs_an_episode(tmp_path, task, task_file):
    """The README's command for the installed release, run as written: only the values change (one task, one
    rollout, the scripted model and its server) and an output folder is added to read the traces from."""
    program = Path(_v1_eval_command()).name
    readme_command = _readme_eval_command()
    assert program != "eval" or "/" in readme_command[0], "a bare `eval` runs the shell's builtin, not verifiers'"
    assert readme_command[1] == TASKSET_ID

    with FakeOpenAIServer(_policy_that_asks_then_answers_with(task.ground_truth)) as server:
        command = _with_values(readme_command, {
            "--env.taskset.tasks": task_file, "-n": "1", "-r": "1", "-m": "scripted-policy",
            "--client.base-url": server.base_url, "--client.api-key-var": API_KEY_VAR})
        command[0] = str(Path(sys.executable).parent / program)  # this interpreter's scripts, wherever they live
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **{API_KEY_VAR: "not-a-secret"})
        result = subprocess.run([*command, "-o", str(tmp_path / "outputs")], env=env, capture_output=True, text=True,
                                timeout=300, check=False)
        requests = [entry["body"] for entry in server.log]
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    episodes = [json.loads(line) for path in (tmp_path / "outputs").rglob("traces.jsonl")
                for line in path.read_text().splitlines() if line.strip()]
    assert len(episodes) == 1 and episodes[0]["ok"], episodes
    [trace] = episodes[0]["traces"]
    assert trace["info"]["colbench"]["task_id"] == TASK_ID
    assert trace["info"]["colbench"]["outcome"] == "answered"
    assert trace["info"]["colbench"]["score"] == 1.0
    assert trace["metrics"] == {"success": 1.0, "answered": 1.0, "human_turns": 1.0}
    assert len(requests) == 2 and all(r["model"] == "scripted-policy" for r in requests)


def _legacy_loader():
    """verifiers 0.3's top-level ``verifiers.load_environment``: the legacy (v0) API's loader (0.4 has none)."""
    import verifiers

    if "load_environment" not in dir(verifiers):
        pytest.skip("this verifiers release has no legacy API")
    return verifiers.load_environment


def _assert_names_the_calls_that_run_colbench(message):
    """The message names the installed v1 eval script (by its path) with the README's flags, and the Python loader."""
    assert "verifiers v1 environment" in message and "legacy (v0) API" in message, message
    named = re.search(r"Evaluate with `([^`]*)`", message)
    assert named, message
    command = shlex.split(named.group(1))
    assert command[:2] == [_v1_eval_command(), TASKSET_ID], command  # the script the README test runs
    flags = {arg for arg in command if arg.startswith("-")}
    assert flags <= {arg for arg in _readme_eval_command() if arg.startswith("-")}, command
    assert "`colbench_gym.integrations.verifiers.load_environment(tasks=\"train\")`" in message, message


def test_verifiers_top_level_loader_stops_with_a_message_naming_the_calls_that_run_colbench(task_file):
    legacy_load = _legacy_loader()
    with pytest.raises(RuntimeError, match=f"Failed to load environment '{TASKSET_ID}'") as failure:
        legacy_load(TASKSET_ID, tasks=task_file)
    _assert_names_the_calls_that_run_colbench(str(failure.value))


def test_the_legacy_vf_eval_stops_with_a_message_naming_the_v1_eval_command(tmp_path, task, task_file):
    """verifiers 0.3's ``vf-eval`` is the legacy CLI; with its own flags it loads ColBench through the legacy loader."""
    _legacy_loader()
    with FakeOpenAIServer(_policy_that_asks_then_answers_with(task.ground_truth)) as server:
        command = [str(Path(sys.executable).parent / "vf-eval"), TASKSET_ID, "-a", json.dumps({"tasks": task_file}),
                   "-n", "1", "-r", "1", "-m", "scripted-policy", "-b", server.base_url, "-k", API_KEY_VAR,
                   "-o", str(tmp_path / "outputs")]
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT), **{API_KEY_VAR: "not-a-secret"})
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
        requests = list(server.log)
    assert result.returncode != 0
    assert not requests  # it stops before any episode
    message = next((line for line in result.stderr.splitlines()
                    if line.startswith("RuntimeError: Failed to load environment")), result.stderr[-3000:])
    _assert_names_the_calls_that_run_colbench(message)


@pytest.mark.browser
def test_the_frontend_scores_the_final_page_by_similarity(tmp_path, monkeypatch):
    target = resolve_tasks("train", "frontend")[0]
    path = tmp_path / "one_page.jsonl"
    path.write_text(json.dumps({"problem_description": target.problem_description,
                                "ground_truth": target.ground_truth}) + "\n")
    page = "<html><body class='bg-blue-500'><h1>Hello</h1></body></html>"
    policy = _script(f"Here is a draft: {page}", f"{ANSWER_MARKER} {page}")
    episodes, requests = _evaluate(tmp_path, monkeypatch, policy, env_id="ColBench-Frontend-v0", tasks=str(path),
                                   similarity="ssim")
    trace = _only_trace(episodes)
    assert trace.info["colbench"]["render_status"] == "ok"
    assert trace.info["colbench"]["similarity_metric"] == "ssim"
    assert 0.0 < trace.reward < 1.0
    assert trace.reward == trace.info["colbench"]["score"]
    reply = trace.messages[3].content
    assert reply.startswith("The main differences from the page I want")
    assert requests[1]["messages"][-1]["content"] == reply
    assert target.ground_truth not in json.dumps(requests)
