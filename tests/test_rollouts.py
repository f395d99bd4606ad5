"""The batched collector and the trajectory files: records, resume after SIGKILL, failures, formats."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

import gymnasium as gym
from fake_openai_server import FakeOpenAIServer
from helpers_tiny_models import save_tiny_model, tiny_causal_lm, tiny_tokenizer

import colbench_gym  # noqa: F401
from colbench_gym.simulators.base import ScriptedSimulator
from colbench_gym.simulators.openai_compat import OpenAISimulator
from colbench_gym.tasks import load_builtin
from colbench_gym.tasks.schema import BackendTask
from sweet_trl.generation import (
    Generation,
    OpenAIBackend,
    SamplingParams,
    TransformersBackend,
)
from sweet_trl.rollouts import EpisodeSpec, collect, plan_episodes, turn_seed
from sweet_trl.trajectories import (
    TrajectoryWriter,
    from_dataset,
    has_infra_error,
    is_infra_failure,
    load_dataset_dir,
    read_trajectories,
    repair_jsonl,
    save_dataset,
    to_dataset,
)

REPO = Path(__file__).resolve().parents[1]
TRAIN_IDS = [task.task_id for task in load_builtin("train")]
FAST = SamplingParams(max_new_tokens=4)


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Two threads on a shared two-core machine are slower than one for these tiny models."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(scope="module")
def tiny_backend():
    tokenizer = tiny_tokenizer()
    return TransformersBackend(tiny_causal_lm(tokenizer), tokenizer, name="tiny-llama")


def plan(n_tasks: int, per_task: int) -> list[EpisodeSpec]:
    return plan_episodes(TRAIN_IDS[:n_tasks], per_task, seed=0)


class ScriptedBackend:
    """A policy that asks ``questions`` then answers with ``answer``; fails where ``fail(history, seed)`` says."""

    name = "scripted"

    def __init__(self, questions: int = 1, answer: str = "I WANT TO ANSWER: def f(x):\n    return x",
                 fail=None):
        self.questions, self.answer, self.fail = questions, answer, fail
        self.calls = []

    def generate(self, histories, n=1, sampling=None, seeds=None):
        self.calls.append(len(histories))
        out = []
        for history, seed in zip(histories, seeds):
            turn = sum(m["role"] == "assistant" for m in history)
            if self.fail and self.fail(history, seed):
                out.append([Generation.failed("injected policy failure", attempts=2, retries=["first try failed"])])
                continue
            text = f"Question {turn + 1}?" if turn < self.questions else self.answer
            out.append([Generation(text, token_ids=[1, 2, 3], logprobs=[-1.0, -1.0, -1.0], prompt_text="p")])
        return out


# -- records -------------------------------------------------------------------------------------

def test_records_follow_the_schema(tiny_backend, tmp_path):
    output = tmp_path / "rollouts.jsonl"
    result = collect(tiny_backend, tasks="train", episodes=plan(3, 2), output=output, num_envs=4, sampling=FAST,
                     env_kwargs={"max_turns": 2}, progress=False)
    records = result.records
    assert [r["episode_id"] for r in records] == [s.episode_id for s in plan(3, 2)]
    on_file = read_trajectories(output)  # in the order the episodes finished
    assert sorted(on_file, key=lambda r: r["episode_id"]) == sorted(records, key=lambda r: r["episode_id"])
    tokenizer = tiny_backend.tokenizer
    instructions = gym.make("ColBench-Backend-v0", max_turns=2).unwrapped.instructions
    for record in records:
        assert set(record) >= {"task", "dialogue_history", "answer", "reward", "episode_id", "env_id", "task_id",
                               "seed", "success", "outcome", "simulator_errors", "timing", "policy"}
        assert record["env_id"] == "ColBench-Backend-v0" and record["policy"] == "tiny-llama"
        assert record["task"]["task_id"] == record["task_id"] and "ground_truth" in record["task"]
        assert record["episode_id"] == f"{record['task_id']}/{record['seed']}"
        dialogue = record["dialogue_history"]
        assert dialogue[0] == {"role": "user", "content": record["task"]["problem_description"]}
        assert [m["role"] for m in dialogue] == ["user", "assistant"] * (len(dialogue) // 2) + ["user"] * (len(dialogue) % 2)
        agent = [m for m in dialogue if m["role"] == "assistant"]
        assert len(agent) == record["turns"] <= 2
        for k, message in enumerate(agent):
            history = [{"role": "system", "content": instructions}] + [
                {"role": m["role"], "content": m["content"]} for m in dialogue[: dialogue.index(message)]]
            assert message["input"] == tokenizer.apply_chat_template(history, tokenize=False, add_generation_prompt=True)
            assert message["output"] == message["content"]
            assert len(message["output_token_ids"]) == len(message["logprobs"]) <= 4
            assert message["prompt_token_ids"] == tokenizer(message["input"], add_special_tokens=False)["input_ids"]
        if record["outcome"] == "no_answer":
            assert record["reward"] == 0.0 and record["turns"] == 2 and record["answer"] is None
    assert result.stats.episodes == 6 and result.stats.turns == sum(r["turns"] for r in records)
    assert result.stats.generated_tokens == sum(r["generated_tokens"] for r in records)


def test_scripted_answers_are_graded(tmp_path):
    tasks = load_builtin("train")[:2]
    backend = ScriptedBackend(questions=1, answer="I WANT TO ANSWER: " + tasks[0].ground_truth)
    result = collect(backend, tasks=tasks, episodes=[(tasks[0].task_id, 0), (tasks[1].task_id, 0)], num_envs=2,
                     simulator=ScriptedSimulator("Use the metric system."), progress=False)
    right, wrong = result.records
    assert right["outcome"] == "answered" and right["reward"] == 1.0 and right["success"] is True
    assert right["dialogue_history"][2] == {"role": "user", "content": "Use the metric system."}
    assert wrong["reward"] < 1.0 and wrong["success"] is False
    assert right["tests"] and right["grader"]["infra_error"] is False
    assert backend.calls == [2, 2]  # both episodes' turns went out together


def test_same_dialogues_whatever_the_number_of_envs(tiny_backend):
    episodes = plan(4, 2)
    kwargs = dict(tasks="train", episodes=episodes, sampling=SamplingParams(max_new_tokens=5),
                  env_kwargs={"max_turns": 2}, progress=False)
    one = collect(tiny_backend, num_envs=1, **kwargs).records
    four = collect(tiny_backend, num_envs=4, **kwargs).records
    for a, b in zip(one, four, strict=True):
        assert a["episode_id"] == b["episode_id"]
        assert [m["content"] for m in a["dialogue_history"]] == [m["content"] for m in b["dialogue_history"]]
        agent_a = [m for m in a["dialogue_history"] if m["role"] == "assistant"]
        agent_b = [m for m in b["dialogue_history"] if m["role"] == "assistant"]
        assert [m["output_token_ids"] for m in agent_a] == [m["output_token_ids"] for m in agent_b]
        for x, y in zip(agent_a, agent_b):  # padding changes the float sums a little, not the samples
            assert x["logprobs"] == pytest.approx(y["logprobs"], abs=1e-4)
    assert turn_seed(episodes[0], 0) != turn_seed(episodes[0], 1) != turn_seed(episodes[1], 1)


def test_plan_validation(tiny_backend):
    with pytest.raises(KeyError, match="not in the environments"):
        collect(tiny_backend, tasks="train", episodes=[("no-such-task", 0)], progress=False)
    with pytest.raises(ValueError, match="twice"):
        collect(tiny_backend, tasks="train", episodes=[(TRAIN_IDS[0], 1), (TRAIN_IDS[0], 1)], progress=False)
    assert [s.episode_id for s in plan_episodes(["a", "b"], 2, seed=5)] == ["a/5", "b/5", "a/6", "b/6"]


# -- files, resume, crash safety -----------------------------------------------------------------

def test_resume_skips_finished_episodes_and_refuses_to_clobber(tmp_path):
    output = tmp_path / "r.jsonl"
    backend = ScriptedBackend(questions=0)
    first = collect(backend, tasks="train", episodes=plan(3, 1), output=output, progress=False)
    assert first.stats.episodes == 3
    with pytest.raises(FileExistsError, match="resume=True"):
        collect(backend, tasks="train", episodes=plan(3, 1), output=output, progress=False)
    again = collect(backend, tasks="train", episodes=plan(3, 2), output=output, resume=True, progress=False)
    assert again.stats.skipped == 3 and again.stats.episodes == 3
    assert len(output.read_text().splitlines()) == 6 and len({r["episode_id"] for r in again.records}) == 6
    fresh = collect(backend, tasks="train", episodes=plan(1, 1), output=output, overwrite=True, progress=False)
    assert len(output.read_text().splitlines()) == 1 and len(fresh.records) == 1


def test_a_second_writer_is_refused(tmp_path):
    output = tmp_path / "r.jsonl"
    with TrajectoryWriter(output), pytest.raises(RuntimeError, match="another collector"):
        TrajectoryWriter(output, resume=True)


def test_partial_last_line_is_repaired_before_appending(tmp_path):
    output = tmp_path / "r.jsonl"
    good = {"episode_id": "t/0", "task_id": "t", "task": {}, "dialogue_history": [], "reward": 1.0}
    output.write_text(json.dumps(good) + "\n" + '{"episode_id": "t/1", "task_id": "t", "dialo')
    assert [r["episode_id"] for r in read_trajectories(output)] == ["t/0"]  # reading skips the torn line
    with TrajectoryWriter(output, resume=True) as writer:
        assert [r["episode_id"] for r in writer.existing] == ["t/0"]
        writer.write({**good, "episode_id": "t/2"})
    assert [json.loads(line)["episode_id"] for line in output.read_text().splitlines()] == ["t/0", "t/2"]
    output.write_text(json.dumps(good))  # a complete last record without its newline is kept
    assert repair_jsonl(output) == 0 and output.read_text().endswith("}\n")
    output.write_text("not json\n" + json.dumps(good) + "\n")
    with pytest.raises(ValueError, match=":1: not valid JSON"):
        read_trajectories(output)


KILL_SCRIPT = textwrap.dedent("""
    import sys, time
    from sweet_trl.generation import SamplingParams, TransformersBackend
    from sweet_trl.rollouts import collect, plan_episodes
    from colbench_gym.tasks import load_builtin

    class SlowBackend(TransformersBackend):
        def generate(self, *args, **kwargs):
            time.sleep(float(sys.argv[3]))   # a slow policy, so that the kill lands mid-run
            return super().generate(*args, **kwargs)

    ids = [t.task_id for t in load_builtin("train")][:8]
    backend = SlowBackend(sys.argv[1], device="cpu", name="tiny")
    result = collect(backend, tasks="train", episodes=plan_episodes(ids, 4), output=sys.argv[2],
                     resume=True, num_envs=6, sampling=SamplingParams(max_new_tokens=4),
                     env_kwargs={"max_turns": 3}, progress=False)
    print("DONE", result.stats.skipped, result.stats.episodes, flush=True)
""")


def test_sigkill_mid_run_then_resume_gives_exactly_32_episodes(tmp_path):
    model_dir = save_tiny_model(tmp_path / "model")
    script = tmp_path / "collect.py"
    script.write_text(KILL_SCRIPT)
    output = tmp_path / "rollouts.jsonl"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    process = subprocess.Popen([sys.executable, str(script), model_dir, str(output), "0.1"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    lines = 0
    while time.monotonic() < deadline and process.poll() is None:
        lines = output.read_bytes().count(b"\n") if output.exists() else 0
        if lines >= 4:
            break
        time.sleep(0.02)
    assert process.poll() is None, f"the collector ended before the kill: {process.communicate()}"
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    before = output.read_bytes()
    done_before = len(read_trajectories(output))
    assert 4 <= done_before < 32

    # Resume in this process (same code path as the script, without a second interpreter start-up).
    backend = TransformersBackend(model_dir, device="cpu", name="tiny")
    ids = [t.task_id for t in load_builtin("train")][:8]
    finished = collect(backend, tasks="train", episodes=plan_episodes(ids, 4), output=output, resume=True,
                       num_envs=6, sampling=SamplingParams(max_new_tokens=4), env_kwargs={"max_turns": 3},
                       progress=False)
    assert (finished.stats.skipped, finished.stats.episodes) == (done_before, 32 - done_before)
    assert len(finished.records) == 32
    records = read_trajectories(output, dedupe=False)
    ids = [r["episode_id"] for r in records]
    assert len(ids) == len(set(ids)) == 32
    assert all(r["outcome"] in ("answered", "no_answer") and r["reward"] is not None for r in records)
    assert all(r["turns"] >= 1 and r["dialogue_history"][-1]["role"] in ("user", "assistant") for r in records)
    complete_prefix = before[: before.rfind(b"\n") + 1]
    assert output.read_bytes().startswith(complete_prefix)  # nothing written before the kill was lost


# -- failures ------------------------------------------------------------------------------------

def test_policy_errors_end_the_episode_and_can_be_retried(tmp_path):
    output = tmp_path / "r.jsonl"
    target = TRAIN_IDS[1]
    bad_task = next(t for t in load_builtin("train") if t.task_id == target)
    flaky = ScriptedBackend(questions=1, fail=lambda history, seed: history[1]["content"] == bad_task.problem_description)
    first = collect(flaky, tasks="train", episodes=plan(3, 1), output=output, progress=False)
    failed = next(r for r in first.records if r["task_id"] == target)
    assert failed["outcome"] == "policy_error" and failed["reward"] is None and is_infra_failure(failed)
    assert failed["policy_errors"] == [{"source": "policy", "turn": 1, "error": "injected policy failure",
                                        "attempts": 2}]
    assert failed["policy_retries"] == [{"turn": 1, "errors": ["first try failed"]}]
    assert first.stats.policy_errors == 1
    healthy = ScriptedBackend(questions=1)
    plain = collect(healthy, tasks="train", episodes=plan(3, 1), output=output, resume=True, progress=False)
    assert plain.stats.episodes == 0  # without retry_errors the failure stays
    retried = collect(healthy, tasks="train", episodes=plan(3, 1), output=output, resume=True, retry_errors=True,
                      progress=False)
    assert retried.stats.episodes == 1
    assert len(output.read_text().splitlines()) == 4  # appended, never rewritten
    latest = {r["episode_id"]: r for r in read_trajectories(output)}
    assert len(latest) == 3 and latest[f"{target}/0"]["outcome"] == "answered"


class ExplodingEnv(gym.Wrapper):
    def step(self, action):
        if self.unwrapped.task.task_id == TRAIN_IDS[0]:
            raise RuntimeError("renderer crashed")
        return self.env.step(action)


def test_environment_exceptions_are_recorded_not_raised():
    make = lambda: ExplodingEnv(gym.make("ColBench-Backend-v0", tasks="train", max_turns=2))
    result = collect(ScriptedBackend(questions=1), make_env=make, episodes=plan(2, 1), num_envs=2, progress=False)
    broken, fine = result.records
    assert broken["outcome"] == "env_error" and broken["reward"] is None
    assert "RuntimeError: renderer crashed" in broken["env_errors"][0]["error"]
    assert broken["dialogue_history"][-1] == {"role": "assistant", "content": "Question 1?", "input": "p",
                                              "output": "Question 1?", "output_token_ids": [1, 2, 3],
                                              "logprobs": [-1.0, -1.0, -1.0]}
    assert fine["outcome"] == "answered"


def test_thirty_percent_endpoint_failures_are_all_recorded(tmp_path):
    """Policy and human on one flaky OpenAI-compatible server: the run completes, every failure is on its episode."""

    def responder(body):
        if body["model"] == "human":
            return "Use kilograms and euros."
        turns = sum(m["role"] == "assistant" for m in body["messages"])
        return "Which currency?" if turns < 2 else "I WANT TO ANSWER: def f(x):\n    return x"

    with FakeOpenAIServer(responder=responder, failure_rate=0.3, failure_kinds=("500", "malformed", "hang"),
                          hang_seconds=4.0, seed=1) as server:
        policy = OpenAIBackend(server.base_url, model="policy", max_retries=0, timeout=1.5, concurrency=12)
        human = OpenAISimulator(server.base_url, model="human", max_retries=0, timeout=1.5)
        result = collect(policy, tasks="train", episodes=plan(12, 1), simulator=human, num_envs=12,
                         output=tmp_path / "r.jsonl", progress=False)
        failures = server.failures()
        log_size = len(server.log)
    records = result.records
    assert len(records) == 12 and len({r["episode_id"] for r in records}) == 12
    assert 0.15 < len(failures) / log_size < 0.45
    policy_failures = [f for f in failures if f["body"]["model"] == "policy"]
    human_failures = [f for f in failures if f["body"]["model"] == "human"]
    assert policy_failures and human_failures
    recorded_policy = [e for r in records for e in r["policy_errors"]]
    recorded_human = [e for r in records for e in r["simulator_errors"]]
    assert len(recorded_policy) == len(policy_failures)
    assert len(recorded_human) == len(human_failures)
    expected = {"500": "HTTP 500", "malformed": "malformed JSON", "hang": "timed out"}
    assert sorted(next(k for k, v in expected.items() if v in e["error"]) for e in recorded_policy) == sorted(
        f["outcome"] for f in policy_failures)
    for record in records:
        if record["policy_errors"]:
            assert record["outcome"] == "policy_error" and record["reward"] is None
        else:
            assert record["outcome"] == "answered" and isinstance(record["reward"], float)
    assert result.stats.policy_errors == len(policy_failures)
    assert result.stats.simulator_errors == len(human_failures)
    assert {r["episode_id"]: r for r in read_trajectories(tmp_path / "r.jsonl")} == {r["episode_id"]: r for r in records}


# -- formats -------------------------------------------------------------------------------------

def test_dataset_round_trip(tmp_path, tiny_backend):
    records = collect(tiny_backend, tasks="train", episodes=plan(2, 1), sampling=FAST, env_kwargs={"max_turns": 2},
                      progress=False).records
    records[0]["dialogue_history"][1]["note"] = {"custom": [1, 2]}  # unknown fields survive too
    dataset = to_dataset(records)
    assert {"episode_id", "reward", "dialogue_history", "task_json", "extra_json"} <= set(dataset.column_names)
    assert from_dataset(dataset) == records
    save_dataset(records, tmp_path / "ds")
    assert load_dataset_dir(tmp_path / "ds") == records
    assert read_trajectories(tmp_path / "ds") == records


def test_original_colbench_rollouts_are_readable(tmp_path, colbench_data):
    rows = [json.loads(line) for line in (colbench_data / "backend_dev.jsonl").open()][:2]
    original = []
    for repeat in range(2):
        for row in rows:
            original.append({
                "task": row,
                "dialogue_history": [
                    {"role": "user", "content": row["problem_description"]},
                    {"role": "assistant", "content": "What is the input?", "input": "<prompt>", "output": "raw"},
                    {"role": "user", "content": "A list."},
                    {"role": "assistant", "content": "I WANT TO ANSWER: " + row["ground_truth"],
                     "input": "<prompt 2>", "output": "raw 2"}],
                "answer": row["ground_truth"],
                "reward": 1.0 if repeat == 0 else 0.3,
            })
    path = tmp_path / "original.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in original))
    records = read_trajectories(path)
    env_ids = [BackendTask.from_row(row).task_id for row in rows]
    assert [r["task_id"] for r in records] == env_ids * 2
    assert [r["seed"] for r in records] == [0, 0, 1, 1]
    assert [r["episode_id"] for r in records] == [f"{t}/{s}" for s in (0, 1) for t in env_ids]
    assert [r["success"] for r in records] == [True, True, False, False]
    assert all(r["outcome"] == "answered" and r["turns"] == 2 and r["env_id"] == "ColBench-Backend-v0"
               for r in records)
    assert records[0]["dialogue_history"] == original[0]["dialogue_history"]
    as_list = tmp_path / "original.json"
    as_list.write_text(json.dumps(original))
    assert read_trajectories(as_list) == records
    assert from_dataset(to_dataset(records)) == records


def test_grader_infrastructure_errors_are_replayed_too(tmp_path):
    output = tmp_path / "r.jsonl"
    backend = ScriptedBackend(questions=0)
    first = collect(backend, tasks="train", episodes=plan(2, 1), output=output, progress=False)
    flagged = dict(first.records[0], grader={"status_counts": {}, "infra_error": True})
    output.write_text("".join(json.dumps(r) + "\n" for r in (flagged, first.records[1])))
    assert has_infra_error(flagged) and not is_infra_failure(flagged) and not has_infra_error(first.records[1])
    again = collect(backend, tasks="train", episodes=plan(2, 1), output=output, resume=True, retry_errors=True,
                    progress=False)
    assert again.stats.episodes == 1 and again.records[0]["grader"]["infra_error"] is False


@pytest.mark.slow
@pytest.mark.browser
def test_frontend_episodes_send_both_renders_to_the_vision_human(tmp_path):
    pytest.importorskip("playwright")
    page = "<html><body class='bg-blue-500'><h1 class='text-4xl'>Hello</h1></body></html>"

    class Designer:
        name = "designer"

        def generate(self, histories, n=1, sampling=None, seeds=None):
            turns = [sum(m["role"] == "assistant" for m in h) for h in histories]
            return [[Generation(("OUTPUT: " if t == 0 else "I WANT TO ANSWER: ") + page, token_ids=[1])]
                    for t in turns]

    seen = []

    def human(body):
        parts = body["messages"][1]["content"]
        seen.append([p["image_url"]["url"][:22] for p in parts if p["type"] == "image_url"])
        return "Make the header larger and add a footer."

    frontend_ids = [t.task_id for t in load_builtin("train", kind="frontend")][:2]
    with FakeOpenAIServer(responder=human) as server:
        result = collect(Designer(), env_id="ColBench-Frontend-v0", tasks="train",
                         episodes=[(task_id, 0) for task_id in frontend_ids],
                         simulator=OpenAISimulator(server.base_url, model="vision-human"), num_envs=2,
                         env_kwargs={"similarity": "ssim"}, output=tmp_path / "r.jsonl", progress=False)
    assert seen == [["data:image/png;base64,"] * 2] * 2  # the agent's page and the target, each turn
    for record in result.records:
        assert record["dialogue_history"][2]["content"] == "Make the header larger and add a footer."
        assert record["outcome"] == "answered" and 0.0 <= record["similarity"] <= 1.0
        assert record["similarity_metric"] == "ssim" and record["env_id"] == "ColBench-Frontend-v0"


def test_environments_made_by_the_caller():
    envs = [gym.make("ColBench-Backend-v0", tasks="train", max_turns=2) for _ in range(2)]
    backend = ScriptedBackend(questions=1)
    result = collect(backend, envs=envs, episodes=plan(3, 1), num_envs=8, progress=False)
    assert max(backend.calls) == 2  # no more episodes at once than environments given
    assert [r["episode_id"] for r in result.records] == [s.episode_id for s in plan(3, 1)]
    assert all(r["env_id"] == "ColBench-Backend-v0" and r["outcome"] == "answered" for r in result.records)


class SlowEnv(gym.Wrapper):
    """Steps of one task take ``delay`` seconds (a slow grader or renderer)."""

    def __init__(self, env, slow_task: str, delay: float):
        super().__init__(env)
        self.slow_task, self.delay = slow_task, delay

    def step(self, action):
        if self.unwrapped.task.task_id == self.slow_task:
            time.sleep(self.delay)
        return self.env.step(action)


@pytest.mark.parametrize("max_step_wait", [None, 0.05])
def test_a_slow_environment_holds_back_only_its_own_episode(max_step_wait):
    make = lambda: SlowEnv(gym.make("ColBench-Backend-v0", tasks="train", max_turns=4),
                           slow_task=TRAIN_IDS[0], delay=0.6)
    backend = ScriptedBackend(questions=10)  # never answers: four turns, no grading
    result = collect(backend, make_env=make, episodes=plan(2, 1), num_envs=2, max_step_wait=max_step_wait,
                     progress=False)
    slow, fast = result.records
    assert slow["turns"] == fast["turns"] == 4
    assert [m["content"] for m in fast["dialogue_history"]][1::2] == [f"Question {k}?" for k in range(1, 5)]
    if max_step_wait is None:  # lockstep: every round waits for the slow step
        assert backend.calls == [2, 2, 2, 2] and fast["timing"]["seconds"] >= 1.8
    else:  # the fast episode runs ahead in its own rounds
        assert fast["timing"]["seconds"] < 1.0 and len(backend.calls) > 4 and slow["timing"]["seconds"] >= 1.8


def test_a_record_with_a_lone_surrogate_is_written_and_read_back(tmp_path):
    # Text a page script wrote can hold a lone surrogate; the record is kept, escaped, not lost with the batch.
    output = tmp_path / "rollouts.jsonl"
    record = {"episode_id": "t/0", "task_id": "t", "dialogue_history": [{"role": "user", "content": "odd \ud800"}]}
    with TrajectoryWriter(output) as writer:
        writer.write(record)
        writer.write({**record, "episode_id": "t/1", "dialogue_history": [{"role": "user", "content": "plain é"}]})
    lines = output.read_bytes().decode("utf-8").splitlines()
    assert [json.loads(line)["dialogue_history"][0]["content"] for line in lines] == ["odd \ud800", "plain é"]
