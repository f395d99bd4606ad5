"""The ColBench environments as an OpenEnv server: ``python -m colbench_gym.openenv`` (``[openenv]`` extra).

Any OpenEnv client drives it (``openenv.core.GenericEnvClient``, TRL, verifiers' ``openenv`` taskset, SkyRL,
Unsloth)::

    python -m colbench_gym.openenv --env ColBench-Backend-v0 --tasks train --port 8000

    from openenv.core.generic_client import GenericEnvClient
    with GenericEnvClient(base_url="http://localhost:8000").sync() as env:
        result = env.reset(task_id="b-001-shipping-cost")          # or task_index=3, or split="train", index=3
        result = env.step({"message": "Should heavier parcels cost more?"})
        result.observation["reply"]                                  # the simulated human's answer
        result = env.step({"message": "I WANT TO ANSWER:\\ndef shipping_cost(weight_kg, destination): ..."})
        result.reward, result.done, result.observation["success"]

Each WebSocket session (``/ws``) owns one environment, so one server plays many episodes at once (``--max-sessions``;
the grader's sandbox pool and the browser pool are shared by the sessions of the process). The plain HTTP routes
``/reset`` and ``/step`` are stateless in OpenEnv (a fresh environment per request): use them to look, the
WebSocket client to play. Over plain HTTP, ``POST /reset`` shows a task's first observation; ``POST /step`` always
answers 409 with why (there is no episode in a fresh environment) and what to use instead.

Bad requests are answered with a 4xx status and the reason in the body (``{"detail": "..."}``), over HTTP as over
the WebSocket (there as an error message): 422 for arguments the server cannot use (an unknown field, a value of the
wrong type, an unknown ``task_id``, a ``task_index`` out of range, another split), 403 for ``privileged=True`` on a
server started without ``--allow-privileged``, 409 for a step with no episode to step.

The action is ``{"message": str}``, the agent's next message (ColBench's protocol: ``I WANT TO ANSWER:`` ends the
episode). An observation carries what the gym environment's step gives (:func:`public_view`): ``text`` is the gym
observation itself (the instructions, the dialogue, and after a final answer that was cut, the note saying so),
``messages`` is ``info["messages"]`` (the instructions as the system message first), ``info`` is the env's ``info``
less its training-time part (every other key, e.g. ``action_truncated_from``/``action_truncated_to``, grader status
counts, render status, similarity); besides, the human's latest ``reply``, ``turn``, ``max_turns``, and on the last
step ``outcome``, ``score`` and ``success``. Training-time information (the reference solution, the hidden
information, the unit tests, the target page, per-test details) stays on the server, unless the server is started
with ``--allow-privileged`` and the episode is reset with ``privileged=True`` (for training-time critics such as
SWEET-RL's); then the observations carry it in ``privileged`` and ``tests``.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from colbench_gym._optional import require

EXTRA = "openenv"

# The env's info keys that hold training-time information (the reference, hidden information and unit tests; the
# per-test details, which show expected outputs): kept out of the public info, sent only to privileged sessions.
# Every other key is public, so a key the env adds reaches clients as it reaches gym callers; one that holds
# training-time information must be named here.
PRIVILEGED_INFO = ("privileged", "tests")
# The env's info keys the observation carries as fields of their own instead of in its ``info``.
INFO_AS_FIELDS = ("messages",)


class RequestError(Exception):
    """A request the server refuses because of what the client sent; ``status_code`` is its HTTP status."""

    status_code = 400

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class InvalidRequestError(RequestError, ValueError):
    """Reset or Task API arguments the server cannot use (unknown, of the wrong type, out of range)."""

    status_code = 422


class PrivilegedRefusedError(RequestError, PermissionError):
    """``privileged=True`` on a server started without ``--allow-privileged``."""

    status_code = 403


class NoEpisodeError(RequestError, RuntimeError):
    """A step with no episode to step: never reset (always so over plain HTTP), or already over."""

    status_code = 409


HTTP_STEP_IS_STATELESS = (
    "no episode to step: this environment was never reset. Over plain HTTP this is always so: OpenEnv's POST /step "
    "runs each request on a fresh environment (stateless), so the episode a POST /reset started is gone by the next "
    "request, and a ColBench episode is a dialogue that needs its past turns. Play over the WebSocket session "
    "instead (/ws; in Python: GenericEnvClient(base_url=...).sync(), then reset() and step() on it), which keeps one "
    "environment per connection. Over the WebSocket, send reset before step.")
EPISODE_OVER = "the episode is over: reset first to start another"


def _openenv():
    require("openenv", EXTRA)
    from openenv.core.env_server import interfaces, types

    return interfaces, types


@dataclass
class ServerConfig:
    """What every session's environment is made from (shared, read-only after start-up)."""

    env_id: str = "ColBench-Backend-v0"
    make_kwargs: dict[str, Any] = field(default_factory=dict)
    split: str = "train"
    allow_privileged: bool = False
    tasks: list[Any] | None = None

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def make_env(self) -> Any:
        import gymnasium as gym

        import colbench_gym  # noqa: F401  (registers the ids)

        with self._lock:
            kwargs = dict(self.make_kwargs)
            if self.tasks is not None:
                kwargs["tasks"] = self.tasks
            env = gym.make(self.env_id, privileged=self.allow_privileged, **kwargs)
            if self.tasks is None:
                self.tasks = list(env.unwrapped.tasks)
        return env


def _jsonable(value: Any) -> Any:
    """Info values as JSON: tuples to lists, numpy scalars to Python numbers, bytes dropped."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items() if not isinstance(v, (bytes, bytearray))}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "shape", None) == ():
        return value.item()
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def public_view(observation: str, info: Mapping[str, Any], max_turns: int) -> dict[str, Any]:
    """What an agent is shown of one gym ``reset`` or ``step``, as observation fields: the gym observation as
    ``text``, ``info["messages"]`` as ``messages``, and the rest of ``info`` less its training-time part.

    Built from what the env returned rather than from its messages, so that everything the gym observation and
    info carry (the instructions, a cut final answer's note, which no human reply follows to carry, every new
    info key) reaches OpenEnv clients as it reaches gym callers.
    """
    return dict(
        text=observation,
        messages=[{"role": m["role"], "content": m["content"]} for m in info["messages"]],
        task_id=info["task_id"], turn=int(info["turn"]), max_turns=max_turns,
        info={k: _jsonable(v) for k, v in info.items() if k not in PRIVILEGED_INFO and k not in INFO_AS_FIELDS},
    )


def build_models():
    """The pydantic Action / Observation / State classes (built on first use: OpenEnv is an optional extra)."""
    global ColBenchAction, ColBenchObservation, ColBenchState
    if "ColBenchAction" in globals():
        return ColBenchAction, ColBenchObservation, ColBenchState
    from pydantic import Field

    _, types = _openenv()

    class ColBenchAction(types.Action):
        """The agent's next message; one containing ``I WANT TO ANSWER:`` is the final answer."""

        message: str = Field(..., description="The agent's next message to the human. 'I WANT TO ANSWER:' "
                                              "followed by the code (backend) or page (frontend) ends the episode.")

    class ColBenchObservation(types.Observation):
        """The dialogue after the last action, and on the last step its score."""

        text: str = Field("", description="The gym observation: the instructions ('Instructions: ...'), then the "
                                          "dialogue so far ('Human: ...' / 'Agent: ...' blocks), and after a final "
                                          "answer that was cut, the note saying so")
        reply: str = Field("", description="The human's latest message (the request after a reset)")
        messages: list[dict[str, str]] = Field(default_factory=list,
                                               description="The dialogue as chat messages, system instructions first")
        task_id: str = ""
        turn: int = 0
        max_turns: int = 0
        outcome: str | None = Field(None, description="'answered' or 'no_answer' once the episode is over")
        score: float | None = None
        success: bool | None = None
        info: dict[str, Any] = Field(default_factory=dict,
                                     description="The env's info less its training-time part (and less messages, "
                                                 "which is the field above)")
        privileged: dict[str, Any] | None = Field(
            None, description="Training-time information; only with --allow-privileged and reset(privileged=True)")
        tests: list[dict[str, Any]] | None = Field(None, description="Per-test results; privileged like the above")

    class ColBenchState(types.State):
        env_id: str = ""
        task_id: str | None = None
        turn: int = 0
        max_turns: int = 0
        done: bool = True

    return ColBenchAction, ColBenchObservation, ColBenchState


def environment_class():
    """The OpenEnv ``Environment`` subclass (built on first use, like :func:`build_models`)."""
    global ColBenchEnvironment
    if "ColBenchEnvironment" in globals():
        return ColBenchEnvironment
    interfaces, types = _openenv()
    Action, Observation, State = build_models()

    class ColBenchEnvironment(interfaces.Environment):
        """One ColBench gym environment per session, behind OpenEnv's reset / step / state."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self, config: ServerConfig):
            super().__init__()
            self.config = config
            self.env = config.make_env()
            self._episode_id: str | None = None
            self._steps = 0
            self._privileged = False
            self._done = True
            self._started = False

        # -- OpenEnv API ----------------------------------------------------------------------------------
        def reset(self, seed: int | None = None, episode_id: str | None = None, task_id: str | None = None,
                  task_index: int | None = None, split: str | None = None, index: int | None = None,
                  privileged: bool = False, **kwargs: Any) -> Observation:
            if kwargs:
                raise InvalidRequestError(
                    f"unknown reset arguments {sorted(kwargs)}; ColBench takes seed, episode_id, task_id, task_index, "
                    "split/index and privileged")
            _check_type("seed", seed, int, "a non-negative int")
            if seed is not None and seed < 0:
                raise InvalidRequestError(f"seed must be a non-negative int, got {seed}")
            _check_type("episode_id", episode_id, str, "a str")
            _check_type("split", split, str, "a str")
            _check_type("privileged", privileged, bool, "true or false")
            _check_type("task_id", task_id, str, "a str (a task's id)")
            _check_type("task_index", task_index, int, "an int")
            _check_type("index", index, int, "an int")
            if privileged and not self.config.allow_privileged:
                raise PrivilegedRefusedError("this server keeps training-time information to itself; start it "
                                             "with --allow-privileged to serve it")
            if split is not None and split != self.config.split:
                raise InvalidRequestError(f"this server serves the split {self.config.split!r}, not {split!r}")
            chosen = {name: value for name, value in (("task_id", task_id), ("task_index", task_index),
                                                      ("index", index)) if value is not None}
            if len(chosen) > 1:
                raise InvalidRequestError(f"give one of task_id, task_index and index, not {sorted(chosen)}")
            options: dict[str, Any] = {}
            if task_id is not None:
                options["task_id"] = task_id
            elif chosen:
                options["task_index"] = next(iter(chosen.values()))  # the env checks its range
            try:
                observation, info = self.env.reset(seed=seed, options=options)
            except (TypeError, ValueError, LookupError) as err:
                # The env checks the options before it changes anything (an unknown task_id, an index out of
                # range): the client's mistake, in the env's words, plus where an HTTP client finds the tasks.
                message = str(err.args[0]) if isinstance(err, KeyError) and err.args else str(err)
                if isinstance(err, LookupError):
                    message += (f" (this server's tasks: POST /{self.config.env_id.lower()}/tasks "
                                f"{{\"split\": \"{self.config.split}\"}})")
                raise InvalidRequestError(message) from err
            self._episode_id, self._steps = episode_id, 0
            self._privileged, self._done, self._started = bool(privileged), False, True
            return self._observation(observation, info, reward=None, done=False,
                                     reply=info["messages"][-1]["content"])

        def step(self, action: Action, timeout_s: float | None = None, **kwargs: Any) -> Observation:
            if not self._started:
                raise NoEpisodeError(HTTP_STEP_IS_STATELESS)
            if self._done:
                raise NoEpisodeError(EPISODE_OVER)
            observation, reward, terminated, truncated, info = self.env.step(action.message)
            self._steps += 1
            done = bool(terminated or truncated)
            self._done = done
            reply = "" if done else info["messages"][-1]["content"]
            return self._observation(observation, info, reward=float(reward), done=done, reply=reply)

        @property
        def state(self) -> State:
            unwrapped = self.env.unwrapped
            task = unwrapped.task
            return State(episode_id=self._episode_id, step_count=self._steps, env_id=self.config.env_id,
                         task_id=task.task_id if task is not None else None, turn=unwrapped.turn,
                         max_turns=unwrapped.max_turns, done=self._done)

        def get_metadata(self) -> Any:
            return types.EnvironmentMetadata(
                name=self.config.env_id, version="0.1.0", author="colbench-gym",
                description=f"ColBench {self.config.env_id} (SWEET-RL, arXiv 2503.15478): a multi-turn dialogue "
                            "with a simulated human, scored by hidden unit tests (backend) or visual similarity "
                            f"(frontend); {len(self.config.tasks or [])} tasks of split {self.config.split!r}.")

        def close(self) -> None:
            self.env.close()

        # -- OpenEnv Task API (discovery only) ----------------------------------------------------------------
        def list_splits(self) -> list[str]:
            return [self.config.split]

        def num_tasks(self, split: str) -> int:
            return len(self._tasks(split))

        def list_tasks(self, split: str) -> list[dict[str, Any]]:
            return [self._spec(i, task) for i, task in enumerate(self._tasks(split))]

        def get_task(self, split: str, index: int) -> dict[str, Any]:
            tasks = self._tasks(split)
            if isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < len(tasks):
                raise InvalidRequestError(f"task index {index!r} is out of range: split {split!r} has "
                                          f"{len(tasks)} tasks (index 0 to {len(tasks) - 1})")
            return self._spec(index, tasks[index])

        def get_task_range(self, split: str, start: int | None = None, stop: int | None = None) -> list[Any]:
            tasks = self._tasks(split)
            first = 0 if start is None else start
            return [self._spec(first + i, task) for i, task in enumerate(tasks[start:stop])]

        # -- internals ------------------------------------------------------------------------------------
        def _tasks(self, split: str) -> list[Any]:
            if split != self.config.split:
                raise InvalidRequestError(f"unknown split {split!r}; this server serves {self.config.split!r}")
            return list(self.env.unwrapped.tasks)

        @staticmethod
        def _spec(index: int, task: Any) -> dict[str, Any]:
            return {"id": task.task_id, "index": index, "problem_description": task.problem_description}

        def _observation(self, observation: str, info: Mapping[str, Any], reward: float | None, done: bool,
                         reply: str) -> Observation:
            fields: dict[str, Any] = dict(done=done, reward=reward, reply=reply,
                                          **public_view(observation, info, self.env.unwrapped.max_turns))
            if done:
                fields.update(outcome=info.get("outcome"), score=float(info.get("score", reward or 0.0)),
                              success=bool(info.get("success", False)))
            if self._privileged:
                fields["privileged"] = _jsonable(info.get("privileged"))
                if "tests" in info:
                    fields["tests"] = _jsonable(info["tests"])
            return Observation(**fields)

    return ColBenchEnvironment


def _check_type(name: str, value: Any, kind: type, described: str) -> None:
    """A JSON value of the wrong type is the client's mistake (``true`` is not an int, ``"3"`` not an index)."""
    if value is None:
        return
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise InvalidRequestError(f"{name} must be {described}, got {type(value).__name__} {value!r}")


def _refusal(request: Any, error: RequestError) -> Any:
    """The HTTP answer to a refused request: its status and the reason, in FastAPI's error shape."""
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=error.status_code, content={"detail": str(error)})


def create_colbench_app(env_id: str = "ColBench-Backend-v0", *, max_sessions: int = 64, split: str = "train",
                        allow_privileged: bool = False, **make_kwargs: Any):
    """The FastAPI app (OpenEnv's ``create_app``): ``/ws``, ``/reset``, ``/step``, ``/state``, ``/schema``, ...

    Args:
        env_id: ``"ColBench-Backend-v0"`` or ``"ColBench-Frontend-v0"``.
        max_sessions: concurrent WebSocket sessions (one environment each).
        split: the name the Task API and ``reset(split=...)`` use for the served tasks.
        allow_privileged: let ``reset(privileged=True)`` put training-time information in observations.
        **make_kwargs: passed to ``gym.make`` (``tasks``, ``max_turns``, ``simulator``, ``similarity``, ...).
    """
    require("openenv", EXTRA)
    from openenv.core.env_server.http_server import create_app

    Action, Observation, State = build_models()
    cls = environment_class()
    make_kwargs.setdefault("tasks", split)
    config = ServerConfig(env_id=env_id, make_kwargs=make_kwargs, split=split, allow_privileged=allow_privileged)
    if env_id.startswith("ColBench-Frontend") and isinstance(make_kwargs.get("similarity", "clip"), str):
        from colbench_gym.rewards import make_similarity  # one metric (a CLIP model) for every session

        config.make_kwargs["similarity"] = make_similarity(make_kwargs.get("similarity", "clip"),
                                                           **(make_kwargs.pop("similarity_kwargs", None) or {}))
    config.make_env().close()  # resolve the tasks (and fail now, not in the first session)
    app = create_app(functools.partial(cls, config), Action, Observation, env_name=env_id.lower(),
                     max_concurrent_envs=max_sessions, state_cls=State)
    # OpenEnv turns any exception of an HTTP route into a bare 500 (the message only in the log); the client's
    # mistakes get their status and message instead. (The WebSocket route sends every message already.)
    app.add_exception_handler(RequestError, _refusal)
    return app
