"""A simulated human played by any OpenAI-compatible chat endpoint (vLLM, TGI, llama.cpp, OpenAI).

Standard library only (``urllib``), so the environments keep their light dependencies::

    from colbench_gym.simulators.openai_compat import OpenAISimulator
    human = OpenAISimulator("http://localhost:8000/v1", model="meta-llama/Llama-3.1-70B-Instruct")
    env = gym.make("ColBench-Backend-v0", simulator=human)

    # start a server for it, e.g.:  vllm serve meta-llama/Llama-3.1-70B-Instruct --port 8000
    # frontend (needs a vision model):  vllm serve Qwen/Qwen2-VL-72B-Instruct --port 8001

The human sees the request, the hidden information and the dialogue. For backend tasks it answers
in at most two sentences, says it does not know what the hidden information does not settle, and
its reply is cut to 400 characters. For frontend tasks it is shown the agent's render and the target
render (PNG ``image_url`` parts with base64 data URLs), describes the differences, and is cut to
1000 characters. Decoding is greedy (temperature 0).

Failures are data: timeouts, connection errors, 429/5xx answers and malformed JSON are retried with
exponential backoff (``Retry-After`` honoured); when every attempt fails, ``reply`` returns a
:class:`SimulatorReply` whose ``error`` says why. It never raises for a failed call.

:class:`ChatClient` is the HTTP part alone, shared with ``sweet_trl``'s ``OpenAIBackend``.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import random
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from colbench_gym.simulators.base import DONT_KNOW, SimulatorReply, SimulatorRequest
from colbench_gym.tasks.schema import FrontendTask

BACKEND_REPLY_CHARS = 400
FRONTEND_REPLY_CHARS = 1000
RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
# What the human says when every attempt failed; the failure itself is in ``SimulatorReply.error``.
FAILED_REPLY = DONT_KNOW


class EndpointError(Exception):
    """One failed attempt; ``retryable`` says whether another attempt may succeed."""

    def __init__(self, message: str, retryable: bool, retry_after: float | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.retry_after = retry_after


@dataclass
class ChatResult:
    """The outcome of one logical call: the decoded JSON (``None`` on failure) and the attempts it took."""

    data: dict[str, Any] | None
    error: str | None = None
    attempts: int = 0
    retries: list[str] = field(default_factory=list)  # errors of the attempts that were retried
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.error is None


def chat_completions_url(base_url: str) -> str:
    """``http://host:8000`` -> ``http://host:8000/v1/chat/completions``; a ``/v1`` base keeps its path."""
    url = base_url.strip().rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise ValueError(f"base_url must be an http(s) URL such as http://localhost:8000/v1, got {base_url!r}")
    if parsed.path in ("", "/"):
        url += "/v1"
    return url + "/chat/completions"


class ChatClient:
    """POST chat-completion requests with timeouts, retries and exponential backoff (stdlib only).

    Args:
        base_url: the server's OpenAI base URL (``http://localhost:8000/v1``).
        api_key: sent as a bearer token; default ``$OPENAI_API_KEY`` (local servers ignore it).
        timeout: seconds allowed for connecting and for each read of the socket.
        max_retries: further attempts after the first failed one (0: no retry).
        backoff: first retry delay in seconds, doubled each time (with jitter), at most ``max_backoff``.
    """

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 60.0, max_retries: int = 3,
                 backoff: float = 0.5, max_backoff: float = 20.0, headers: dict[str, str] | None = None,
                 seed: int | None = None):
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0, got {timeout}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        self.url = chat_completions_url(base_url)
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.headers = dict(headers or {})
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()

    def complete(self, payload: dict[str, Any]) -> ChatResult:
        """Send one request, retrying transient failures; never raises for a failed call."""
        started = time.monotonic()
        retries: list[str] = []
        for attempt in range(self.max_retries + 1):
            try:
                data = self._post(payload)
                return ChatResult(data, None, attempt + 1, retries, time.monotonic() - started)
            except EndpointError as err:
                if not err.retryable or attempt == self.max_retries:
                    return ChatResult(None, str(err), attempt + 1, retries, time.monotonic() - started)
                retries.append(str(err))
                time.sleep(self._delay(attempt, err.retry_after))
            except Exception as err:  # noqa: BLE001 (e.g. a payload json cannot encode: a bug of the caller, recorded)
                return ChatResult(None, f"request failed: {type(err).__name__}: {err}", attempt + 1, retries,
                                  time.monotonic() - started)
        raise AssertionError("unreachable")  # pragma: no cover

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(self.max_backoff, max(0.0, retry_after))
        with self._rng_lock:
            jitter = 0.5 + 0.5 * self._rng.random()
        return min(self.max_backoff, self.backoff * (2 ** attempt)) * jitter

    def _post(self, payload: dict[str, Any]) -> dict[str, Any]:
        body = json.dumps(payload).encode("utf-8")
        headers = {"Content-Type": "application/json", "Accept": "application/json", **self.headers}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        request = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as err:
            detail = _read_error_body(err)
            retry_after = _parse_retry_after(err.headers.get("Retry-After") if err.headers else None)
            raise EndpointError(f"HTTP {err.code} from {self.url}: {detail}", err.code in RETRYABLE_STATUS,
                                retry_after) from None
        except TimeoutError as err:
            raise EndpointError(f"timed out after {self.timeout:g} s ({self.url})", True) from err
        except urllib.error.URLError as err:
            if isinstance(err.reason, (TimeoutError, socket.timeout)):
                raise EndpointError(f"timed out after {self.timeout:g} s ({self.url})", True) from err
            raise EndpointError(f"cannot reach {self.url}: {err.reason}", True) from err
        except (ConnectionError, OSError, http.client.HTTPException) as err:  # reset, closed, bad status line
            raise EndpointError(f"connection error with {self.url}: {type(err).__name__}: {err}", True) from err
        try:
            data = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise EndpointError(f"malformed JSON from {self.url}: {err}; body starts {raw[:80]!r}", True) from err
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list) or not data["choices"]:
            raise EndpointError(f"response from {self.url} has no choices: {str(data)[:160]}", True)
        return data


def _read_error_body(err: urllib.error.HTTPError) -> str:
    try:
        text = err.read().decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 (the body is only for the message)
        return err.reason if isinstance(err.reason, str) else ""
    try:
        parsed = json.loads(text)
        if isinstance(parsed, dict) and isinstance(parsed.get("error"), dict):
            return str(parsed["error"].get("message", text))[:300]
    except json.JSONDecodeError:
        pass
    return text[:300]


def _parse_retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return float(value)
    except ValueError:
        return None  # an HTTP date; the exponential backoff applies instead


def message_text(choice: dict[str, Any]) -> str | None:
    """The text of a chat choice (``message.content`` as a string or as a list of text parts)."""
    message = choice.get("message") or {}
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else None


def png_data_url(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


# -- prompts ---------------------------------------------------------------------------------------

BACKEND_SYSTEM = """\
You are playing a person who has asked an AI agent to write a Python function. You know exactly \
what you want: the reference implementation below is the function you have in mind. The agent \
cannot see it; it only sees your messages.

How to reply to the agent:
- Write at most two short sentences, in plain everyday language, as that person.
- Only state facts that the reference implementation supports. If it does not settle what the \
agent asks, say that you don't know.
- Never copy, quote or paraphrase the code line by line, and never write code yourself.
- Do not mention that you have a reference implementation, and do not ask the agent questions."""

FRONTEND_SYSTEM = """\
You are playing a person who has asked an AI agent to build a web page. You know exactly what you \
want: the target page is shown to you as an image. The agent cannot see it; it only sees your \
messages.

How to reply to the agent:
- If the agent shows you a page, compare it with the target and name the most important \
differences concretely: layout, colours, fonts, text, images, spacing, sections.
- If it shows no page, describe the key features of the target page it should build.
- Answer only what the target supports; say that you don't know otherwise.
- Be brief, speak as that person, and never write HTML or CSS."""


def _transcript(messages: Sequence[dict[str, Any]]) -> str:
    names = {"user": "You", "assistant": "Agent"}
    return "\n\n".join(f"{names.get(m['role'], m['role'])}: {m['content']}" for m in messages
                       if m.get("role") != "system")


class OpenAISimulator:
    """The ColBench human simulator on an OpenAI-compatible endpoint (see the module docstring).

    Args:
        base_url: e.g. ``http://localhost:8000/v1``.
        model: the model name the server expects.
        max_chars: reply cap; default 400 for backend tasks and 1000 for frontend tasks.
        max_tokens: generation cap sent to the server; default 256 (backend) / 512 (frontend).
        temperature: 0 (greedy), as in ColBench.
        timeout, max_retries, backoff, api_key: see :class:`ChatClient`.
        extra_body: extra top-level request fields (e.g. vLLM's ``{"top_k": 1}``).
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout: float = 120.0,
                 max_retries: int = 3, backoff: float = 1.0, max_backoff: float = 20.0,
                 max_chars: int | None = None, max_tokens: int | None = None, temperature: float = 0.0,
                 extra_body: dict[str, Any] | None = None):
        self.client = ChatClient(base_url, api_key=api_key, timeout=timeout, max_retries=max_retries,
                                 backoff=backoff, max_backoff=max_backoff)
        self.model = model
        self.max_chars = max_chars
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.extra_body = dict(extra_body or {})

    # -- protocol ---------------------------------------------------------------------------------
    def reply(self, request: SimulatorRequest) -> SimulatorReply:
        frontend = self.is_frontend(request)
        limit = self.max_chars or (FRONTEND_REPLY_CHARS if frontend else BACKEND_REPLY_CHARS)
        try:
            payload = self.build_payload(request)
        except Exception as err:  # noqa: BLE001 (a malformed request is recorded, like any failure)
            return SimulatorReply(FAILED_REPLY, error=f"cannot build the request: {type(err).__name__}: {err}")
        result = self.client.complete(payload)
        usage: dict[str, Any] = {"attempts": result.attempts, "retries": result.retries,
                                 "seconds": round(result.seconds, 3), "model": self.model}
        if not result.ok:
            return SimulatorReply(FAILED_REPLY, error=result.error, usage=usage)
        assert result.data is not None
        if isinstance(result.data.get("usage"), dict):
            usage.update({k: v for k, v in result.data["usage"].items() if isinstance(v, (int, float))})
        text = message_text(result.data["choices"][0])
        if text is None or not text.strip():
            return SimulatorReply(FAILED_REPLY, error="the server returned an empty reply", usage=usage)
        text = text.strip()
        if len(text) > limit:
            usage["truncated_from"] = len(text)
            text = text[:limit]
        return SimulatorReply(text, usage=usage)

    # -- request building (public so that it can be inspected and tested) -------------------------
    @staticmethod
    def is_frontend(request: SimulatorRequest) -> bool:
        return isinstance(request.task, FrontendTask) or request.target_render is not None

    def build_payload(self, request: SimulatorRequest) -> dict[str, Any]:
        frontend = self.is_frontend(request)
        messages = self.frontend_messages(request) if frontend else self.backend_messages(request)
        payload: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens or (512 if frontend else 256),
            "n": 1,
        }
        payload.update(self.extra_body)
        return payload

    def backend_messages(self, request: SimulatorRequest) -> list[dict[str, Any]]:
        task = request.task
        hidden = getattr(task, "hidden_information", None) or task.ground_truth
        prompt = (
            f"Your request to the agent:\n{task.problem_description}\n\n"
            f"The reference implementation you have in mind (hidden from the agent):\n{hidden}\n\n"
            f"The conversation so far:\n{_transcript(request.messages[:-1]) or '(none)'}\n\n"
            f"The agent's latest message:\n{request.last_agent_message}\n\n"
            "Your reply to the agent (at most two sentences):"
        )
        return [{"role": "system", "content": BACKEND_SYSTEM}, {"role": "user", "content": prompt}]

    def frontend_messages(self, request: SimulatorRequest) -> list[dict[str, Any]]:
        task = request.task
        parts: list[dict[str, Any]] = [{
            "type": "text",
            "text": (f"Your request to the agent:\n{task.problem_description}\n\n"
                     f"The conversation so far:\n{_transcript(request.messages[:-1]) or '(none)'}\n\n"
                     f"The agent's latest message:\n{request.last_agent_message}"),
        }]
        if request.agent_render:
            parts += [{"type": "text", "text": "The page the agent is showing you:"},
                      {"type": "image_url", "image_url": {"url": png_data_url(request.agent_render)}}]
        else:
            parts.append({"type": "text", "text": "The agent is not showing you any page in this message."})
        if request.target_render:
            parts += [{"type": "text", "text": "The page you want (hidden from the agent):"},
                      {"type": "image_url", "image_url": {"url": png_data_url(request.target_render)}}]
        else:  # the target could not be rendered: fall back to its source, which the human may read
            parts.append({"type": "text",
                          "text": f"The HTML of the page you want (hidden from the agent):\n{task.ground_truth}"})
        parts.append({"type": "text", "text": "Your reply to the agent:"})
        return [{"role": "system", "content": FRONTEND_SYSTEM}, {"role": "user", "content": parts}]


# The name used in the project's design notes.
OpenAICompatSimulator = OpenAISimulator
