"""A small OpenAI-compatible chat server on loopback, driven by the test that starts it.

    with FakeOpenAIServer(responder=lambda body: "Hello") as server:
        client_url = server.base_url                     # http://127.0.0.1:<port>/v1
        server.fail_next("500", "hang", "malformed")      # the next three requests fail that way
        server.failure_rate = 0.3                         # then 30% of requests fail (seeded)

It serves ``POST /v1/chat/completions`` and ``GET /v1/models`` with the standard library's
``ThreadingHTTPServer`` in a daemon thread. Replies come from ``responder(body) -> str | dict``
(default: echo the last user message). A dict is used as the whole choice ``message`` unless it
has ``"choices"``, then it is the whole response. With ``logprobs: true`` in the request, every
whitespace-separated piece of the reply becomes a token with a made-up log-probability.

Failure kinds: ``"500"`` (HTTP 500 with an error body), ``"429"`` (with ``Retry-After: 0``), ``"400"``
(a client error, which must not be retried),
``"hang"`` (no answer for ``hang_seconds``), ``"malformed"`` (200 with a broken JSON body),
``"empty"`` (200 with ``"choices": []``), ``"drop"`` (connection closed without an answer).
Every request is logged in ``server.log`` as ``{"body", "outcome", "time"}``.
"""

from __future__ import annotations

import json
import random
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

FAILURE_KINDS = ("500", "429", "400", "hang", "malformed", "empty", "drop")


def echo_responder(body: dict[str, Any]) -> str:
    for message in reversed(body.get("messages", [])):
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            return f"echo: {content}"
    return "echo: (nothing)"


class FakeOpenAIServer:
    def __init__(self, responder: Callable[[dict[str, Any]], Any] = echo_responder, failure_rate: float = 0.0,
                 failure_kinds: tuple[str, ...] = ("500", "hang", "malformed"), hang_seconds: float = 5.0,
                 seed: int = 0, should_fail: Callable[[dict[str, Any]], bool] | None = None):
        for kind in failure_kinds:
            if kind not in FAILURE_KINDS:
                raise ValueError(f"unknown failure kind {kind!r}; choose from {FAILURE_KINDS}")
        self.responder = responder
        self.failure_rate = failure_rate
        self.failure_kinds = failure_kinds
        self.hang_seconds = hang_seconds
        self.should_fail = should_fail  # optional filter: only requests it accepts may fail at random
        self.log: list[dict[str, Any]] = []
        self._scripted: list[str] = []
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- control -----------------------------------------------------------------------------------
    def fail_next(self, *kinds: str) -> None:
        """The next ``len(kinds)`` requests fail in these ways, in order."""
        for kind in kinds:
            if kind not in FAILURE_KINDS:
                raise ValueError(f"unknown failure kind {kind!r}")
        with self._lock:
            self._scripted.extend(kinds)

    @property
    def base_url(self) -> str:
        assert self._httpd is not None, "server not started"
        host, port = self._httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def outcomes(self) -> list[str]:
        with self._lock:
            return [entry["outcome"] for entry in self.log]

    def failures(self) -> list[dict[str, Any]]:
        with self._lock:
            return [entry for entry in self.log if entry["outcome"] != "ok"]

    def start(self) -> FakeOpenAIServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw)
                except json.JSONDecodeError:
                    self._send(400, {"error": {"message": "request body is not JSON"}})
                    return
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                kind = server._choose_failure(body)
                server._record(body, kind or "ok")
                if kind is None:
                    try:
                        response = server._response(body)
                    except Exception as err:  # noqa: BLE001 (a responder bug shows up as a 500 in the test)
                        self._send(500, {"error": {"message": f"responder failed: {err}"}})
                        return
                    self._send(200, response)
                elif kind == "500":
                    self._send(500, {"error": {"message": "injected internal error", "type": "server_error"}})
                elif kind == "429":
                    self._send(429, {"error": {"message": "injected rate limit"}}, {"Retry-After": "0"})
                elif kind == "400":
                    self._send(400, {"error": {"message": "injected bad request", "type": "invalid_request_error"}})
                elif kind == "hang":
                    server._stopping.wait(server.hang_seconds)
                    self.close_connection = True
                elif kind == "malformed":
                    self._send_raw(200, b'{"id": "x", "choices": [{"message": {"content": "trunc')
                elif kind == "empty":
                    self._send(200, {"id": "x", "object": "chat.completion", "choices": []})
                elif kind == "drop":
                    self.close_connection = True
                    self.connection.shutdown(socket.SHUT_RDWR)

            def _send(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None) -> None:
                self._send_raw(status, json.dumps(payload).encode("utf-8"), headers)

            def _send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    for key, value in (headers or {}).items():
                        self.send_header(key, value)
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- internals ----------------------------------------------------------------------------------
    def _choose_failure(self, body: dict[str, Any]) -> str | None:
        with self._lock:
            if self._scripted:
                return self._scripted.pop(0)
            if self.failure_rate <= 0 or (self.should_fail is not None and not self.should_fail(body)):
                return None
            if self._rng.random() < self.failure_rate:
                return self._rng.choice(self.failure_kinds)
            return None

    def _record(self, body: dict[str, Any], outcome: str) -> None:
        with self._lock:
            self.log.append({"body": body, "outcome": outcome, "time": time.time()})

    def _response(self, body: dict[str, Any]) -> dict[str, Any]:
        n = int(body.get("n") or 1)
        choices = []
        for index in range(n):
            reply = self.responder({**body, "_choice_index": index})
            if isinstance(reply, dict) and "choices" in reply:
                return reply
            message = reply if isinstance(reply, dict) else {"role": "assistant", "content": str(reply)}
            choice: dict[str, Any] = {"index": index, "message": message, "finish_reason": "stop"}
            if body.get("logprobs") and isinstance(message.get("content"), str):
                pieces = message["content"].split(" ")
                choice["logprobs"] = {"content": [
                    {"token": piece if i == 0 else " " + piece, "logprob": -0.1 * (i + 1), "top_logprobs": []}
                    for i, piece in enumerate(pieces)
                ]}
            choices.append(choice)
        return {"id": "chatcmpl-fake", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "fake-model"), "choices": choices,
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}
