"""A real ``python -m colbench_gym.openenv`` server process on a free loopback port, and a raw HTTP client for it.

Usage::

    from helpers_openenv_server import running_server, http
    with running_server("--max-turns", "3") as url:
        status, body = http("POST", f"{url}/reset", {"task_index": 0})

``shared_server(...)`` starts one server per set of arguments for the whole test run (stopped at exit): a start
costs several seconds of CPU (OpenEnv imports Gradio), so the test modules that can share one do.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import REPO_ROOT


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def http(method: str, url: str, body: Any = None, raw: bytes | None = None, timeout: float = 60) -> tuple[int, Any]:
    """One request with urllib: the status and the JSON body (the text if it is not JSON), errors included."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    request = urllib.request.Request(url, data=data, method=method, headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read().decode()
    try:
        return status, json.loads(text)
    except json.JSONDecodeError:
        return status, text


@contextlib.contextmanager
def running_server(*cli_args: str, start_timeout_s: float = 180) -> Iterator[str]:
    """Start the server with these CLI arguments, wait until /health answers, yield its URL, stop it."""
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen([sys.executable, "-m", "colbench_gym.openenv", *cli_args, "--host", "127.0.0.1",
                                "--port", str(port)],
                               cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + start_timeout_s
    try:
        while True:
            if process.poll() is not None:
                pytest.fail(f"the server exited: {process.stdout.read()[-3000:]}")
            try:
                if http("GET", f"{url}/health", timeout=10) == (200, {"status": "healthy"}):
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"the server did not start within {start_timeout_s:g} s")
            time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


_SHARED: dict[tuple[str, ...], str] = {}
_SHARED_STOP = contextlib.ExitStack()
atexit.register(_SHARED_STOP.close)


def shared_server(*cli_args: str) -> str:
    """The URL of a server started with these arguments, started on first use and kept for the test run."""
    if cli_args not in _SHARED:
        _SHARED[cli_args] = _SHARED_STOP.enter_context(running_server(*cli_args))
    return _SHARED[cli_args]


MAX_TURNS = 3
BUDGET_S = 1.0
# The server test_openenv_server.py and test_openenv_http.py share.
SERVER_ARGS = ("--env", "ColBench-Backend-v0", "--tasks", "train", "--max-turns", str(MAX_TURNS), "--max-sessions",
               "16", "--answer-budget-s", str(BUDGET_S))
