"""The HTTP doors against a real OpenAI-compatible server: ``transformers serve`` with the embedded SmolLM2.

The simulated human (``OpenAISimulator``) and the policy (``OpenAIBackend``) both talk to one real server process on
loopback, through whole episodes, by hand and through the rollout collector. The fake server in
``fake_openai_server.py`` stays for fault injection; this one checks that the real thing speaks the same protocol.

What ``transformers serve`` (5.x) does differently from vLLM / OpenAI, and how the clients cope:
* ``n`` is ignored (one choice per request): the policy uses ``n_mode="separate"``.
* ``stop`` is passed to ``generate``'s ``stop_strings``, which keep the matched string: ``OpenAIBackend`` cuts it.
* ``temperature > 0`` samples only if the model's generation config says ``do_sample``; no ``logprobs``.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def _serving_dependencies():
    for name in ("fastapi", "uvicorn", "openai"):  # transformers serve's own ("transformers[serving]")
        pytest.importorskip(name)

MAX_TOKENS = 40


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    _serving_dependencies()
    from sweet_trl.generation import EmbeddedModelMissing, embedded_model_path

    try:
        model = embedded_model_path()
    except EmbeddedModelMissing as err:
        pytest.skip(str(err))
    command = shutil.which("transformers", path=str(Path(sys.executable).parent)) or shutil.which("transformers")
    if command is None:
        pytest.skip("the transformers CLI is not installed")
    port = _free_port()
    log = tmp_path_factory.mktemp("serve") / "server.log"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    with open(log, "w") as out:
        process = subprocess.Popen([command, "serve", model, "--host", "127.0.0.1", "--port", str(port),
                                    "--device", "cpu", "--dtype", "float32", "--log-level", "warning"],
                                   env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            if process.poll() is not None:
                pytest.fail(f"transformers serve exited: {log.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                    if response.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"transformers serve did not start in 300 s: {log.read_text()[-3000:]}")
            time.sleep(1)
        with urllib.request.urlopen(f"{url}/v1/models", timeout=30) as response:
            assert model in [m["id"] for m in json.loads(response.read())["data"]]
        yield {"url": f"{url}/v1", "model": model}
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def _clients(served):
    from colbench_gym.simulators import OpenAISimulator
    from sweet_trl.generation import OpenAIBackend

    human = OpenAISimulator(served["url"], model=served["model"], max_tokens=MAX_TOKENS, timeout=600, max_retries=1)
    policy = OpenAIBackend(served["url"], model=served["model"], n_mode="separate", concurrency=2, timeout=600,
                           max_retries=1, name="SmolLM2-135M-Instruct@transformers-serve")
    return human, policy


def test_stop_string_returned_by_the_server_is_cut():
    """What transformers serve does (the stop string kept at the end) is undone by the client (fake server)."""
    from fake_openai_server import FakeOpenAIServer

    from sweet_trl.generation import OpenAIBackend, SamplingParams

    with FakeOpenAIServer(responder=lambda body: "Hello there, welcome!") as server:
        backend = OpenAIBackend(server.base_url, model="fake-model", max_retries=0)
        [[cut]] = backend.generate([[{"role": "user", "content": "hi"}]], sampling=SamplingParams(stop=[","]))
        [[kept]] = backend.generate([[{"role": "user", "content": "hi"}]], sampling=SamplingParams(stop=["?"]))
    assert cut.text == "Hello there" and cut.finish_reason == "stop"
    assert kept.text == "Hello there, welcome!"


@pytest.mark.slow
def test_whole_episodes_with_a_real_server_as_human_and_policy(served):
    import gymnasium as gym

    import colbench_gym  # noqa: F401
    from sweet_trl.generation import SamplingParams

    human, policy = _clients(served)
    sampling = SamplingParams(temperature=0.0, max_new_tokens=MAX_TOKENS, logprobs=False)
    for index in (0, 1):
        env = gym.make("ColBench-Backend-v0", tasks="train", simulator=human, max_turns=2)
        _, info = env.reset(options={"task_index": index})
        done, turns = False, 0
        while not done:
            [[generation]] = policy.generate([info["messages"]], sampling=sampling)
            assert generation.ok, generation.error
            assert generation.text.strip() and generation.finish_reason in ("stop", "length")
            _, reward, terminated, truncated, info = env.step(generation.text)
            done, turns = terminated or truncated, turns + 1
            assert info["simulator_error"] is None
            if not done:
                reply = info["messages"][-1]["content"]
                assert reply.strip() and len(reply) <= 400  # a real model's words, capped as ColBench does
        assert turns <= 2 and 0.0 <= reward <= 1.0
        assert info["outcome"] in ("answered", "no_answer")


@pytest.mark.slow
def test_stop_strings_and_the_collector_against_a_real_server(served):
    from sweet_trl.generation import SamplingParams
    from sweet_trl.rollouts import collect

    human, policy = _clients(served)
    history = [{"role": "user", "content": "Describe a sunny day at the beach."}]
    [[free]] = policy.generate([history], sampling=SamplingParams(temperature=0.0, max_new_tokens=24))
    assert free.ok, free.error
    words = free.text.split()
    assert len(words) > 3
    stop = f" {words[2]}"
    [[stopped]] = policy.generate([history], sampling=SamplingParams(temperature=0.0, max_new_tokens=24, stop=[stop]))
    assert stopped.ok and stopped.text == free.text[: free.text.find(stop)] and stopped.finish_reason == "stop"

    result = collect(policy, env_id="ColBench-Backend-v0", tasks="train", episodes=[("b-001-shipping-cost", 0),
                                                                                  ("b-002-library-late-fee", 0)],
                     num_envs=2, simulator=human, env_kwargs={"max_turns": 2}, progress=False, fsync=False,
                     sampling=SamplingParams(temperature=0.0, max_new_tokens=MAX_TOKENS, logprobs=False))
    assert result.stats.episodes == 2
    for record in result.records:
        assert record["outcome"] in ("answered", "no_answer"), record.get("error")
        assert not record.get("simulator_errors") and not record["policy_errors"]
        assert record["policy"] == "SmolLM2-135M-Instruct@transformers-serve"
