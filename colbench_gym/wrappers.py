"""Gymnasium wrappers for the ColBench environments.

:class:`RecordTrajectories` writes every episode an agent plays (your own loop, any policy) as one trajectory record
in the format the SWEET-RL trainers read, so that the file feeds ``sweet-rl critic-pairs --trajectories FILE``,
``sweet_trl.pairs.critic_pair_dataset(FILE)`` and every other reader of ``sweet_trl.trajectories`` directly::

    import gymnasium as gym
    import colbench_gym
    from colbench_gym.wrappers import RecordTrajectories

    env = RecordTrajectories(gym.make("ColBench-Backend-v0", tasks="train"), "runs/mine.jsonl", policy="my-agent")
    for seed in range(8):
        obs, info = env.reset(seed=seed)
        done = False
        while not done:
            obs, reward, terminated, truncated, info = env.step(my_agent(obs))
            done = terminated or truncated
    env.close()

This module needs neither torch nor ``sweet_trl``: it writes plain JSON records.
"""

from __future__ import annotations

import json
import logging
import math
import numbers
import os
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import gymnasium as gym

logger = logging.getLogger(__name__)

# The environment ids the trainers know (their instructions are rebuilt from the id), by environment kind.
_ENV_ID_BY_KIND = {"backend": "ColBench-Backend-v0", "frontend": "ColBench-Frontend-v0"}
# Fields of the last ``info`` that are bookkeeping, not results worth a record field (as the collector skips them).
_INFO_SKIP = frozenset({"messages", "privileged", "task_id", "turn", "simulator_error", "score"})
_NO_PRIVILEGED = (
    "RecordTrajectories needs the privileged information in info['privileged'] (the reference solution or target "
    "page, the text c that the SWEET-RL critic reads): make the environment with privileged=True (the default); "
    "privileged=False is for evaluation, and its episodes cannot train a critic"
)


class RecordTrajectories(gym.Wrapper):
    """Record every finished episode of a ColBench environment as one trajectory record in a JSON Lines file.

    Wrap the environment, play it as usual (any agent, any loop), and every episode that ends (terminated: the
    agent answered; truncated: the turns ran out) is appended to ``path`` as one line, written whole, flushed and
    fsynced, so a killed process leaves at most a partial last line, which every reader of ``sweet_trl`` skips and
    ``append=True`` removes. Observations, rewards and infos pass through unchanged.

    A record, the format of :mod:`sweet_trl.trajectories` (what the collector writes)::

        {"task": {"task_id", "problem_description", "ground_truth", ...},  # + the rest of info["privileged"]
         "dialogue_history": [{"role": "user", "content": request}, {"role": "assistant", "content": msg}, ...],
         "answer": str | None,          # the text after "I WANT TO ANSWER:", None when the turns ran out
         "reward": float,               # the last step's reward
         "episode_id": "<task_id>/<recording>-<n>", "env_id": "ColBench-Backend-v0", "task_id": str,
         "seed": int | None,            # the seed given to reset(), None when none was given
         "success": bool, "outcome": "answered" | "no_answer", "turns": int,    # turns: agent messages
         "tests": [...], "grader": {...},                                    # backend: the last info's results
         "similarity": float, "similarity_metric": str, "render_status": ...,   # frontend
         "simulator_errors": [{"turn", "error"}], "policy": str, "timing": {"seconds": float}}

    ``task`` holds what the critic needs: ``ground_truth`` (the privileged text ``c``), the hidden information and,
    for backend tasks, the test cases, all taken from ``info["privileged"]``; the request is the dialogue's first
    message. The environment must therefore be made with ``privileged=True`` (the default): with
    ``privileged=False`` the wrapper refuses at construction, or at ``reset`` for an environment it cannot inspect.
    Every other field of the last step's ``info`` (``tests``, ``grader``, ``similarity``, ``action_truncated_from``,
    ...) is copied into the record, made JSON-safe.

    Episode ids are unique across files: ``<recording>`` is drawn at random for each wrapper and ``n`` counts its
    episodes, so two episodes of one task with the same seed (two policies, say) are both kept, and files of several
    recorders (one per process or per vector sub-environment: a file has one writer) can be read together as a
    folder. An episode that is reset or closed before it ends has no reward and is not written; ``abandoned``
    counts those, with a warning.

    Args:
        env: a ColBench environment (``gym.make("ColBench-Backend-v0")`` or ``"ColBench-Frontend-v0"``), possibly
            wrapped.
        path: the JSON Lines file (its folder is created).
        policy: a name for the agent, stored in every record's ``policy`` field.
        append: add to an existing file (after removing a partial last line); without it, and without
            ``overwrite``, a non-empty file is an error, so that nothing recorded earlier is lost.
        overwrite: start the file over.
        fsync: fsync every record (the crash-safety guarantee; turn off only for throwaway runs).

    Attributes: ``path``, ``recorded`` (episodes written by this wrapper), ``abandoned``, ``recording_id``.
    """

    def __init__(self, env: gym.Env, path: str | os.PathLike, *, policy: str = "recorded", append: bool = False,
                 overwrite: bool = False, fsync: bool = True):
        super().__init__(env)
        if append and overwrite:
            raise ValueError("pass append=True or overwrite=True, not both")
        if not isinstance(policy, str) or not policy:
            raise ValueError(f"policy must be a non-empty name, got {policy!r}")
        if getattr(env.unwrapped, "include_privileged", True) is False:
            raise ValueError(_NO_PRIVILEGED)
        self.path = Path(path)
        self.policy = policy
        self.fsync = fsync
        self.recording_id = uuid.uuid4().hex[:8]
        self.recorded = 0
        self.abandoned = 0
        self._episode: dict[str, Any] | None = None
        self._handle = _open_for_records(self.path, append=append, overwrite=overwrite)

    # -- Gymnasium API ----------------------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        observation, info = self.env.reset(seed=seed, options=options)
        self._abandon()
        privileged = info.get("privileged")
        if not isinstance(privileged, Mapping) or not _text(privileged.get("ground_truth")):
            raise ValueError(_NO_PRIVILEGED)
        messages = _dialogue(info)
        request = next((m["content"] for m in messages if m["role"] == "user"), None)
        if not isinstance(info.get("task_id"), str) or request is None:
            raise ValueError("RecordTrajectories needs info['task_id'] and the request in info['messages'] at reset; "
                             f"this environment's info has {sorted(info)}")
        self._episode = {
            "task": {"task_id": info["task_id"], "problem_description": request, **privileged},
            "task_id": info["task_id"],
            "seed": int(seed) if isinstance(seed, numbers.Integral) and not isinstance(seed, bool) else None,
            "started": time.perf_counter(),
            "simulator_errors": [],
        }
        return observation, info

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        # An exception from the environment (a refused answer, a step after the end) leaves the episode as it was.
        observation, reward, terminated, truncated, info = self.env.step(action)
        episode = self._episode
        if episode is not None:
            if info.get("simulator_error"):
                episode["simulator_errors"].append({"turn": info.get("turn"), "error": str(info["simulator_error"])})
            if terminated or truncated:
                self._write(self._record(episode, reward, terminated, info))
                self._episode = None
        return observation, reward, terminated, truncated, info

    def close(self) -> None:
        self._abandon()
        if not self._handle.closed:
            self._handle.close()
        super().close()

    # -- internals ----------------------------------------------------------------------------------------------

    def _abandon(self) -> None:
        if self._episode is not None:
            self.abandoned += 1
            logger.warning("%s: an episode of task %s was left before its end (reset or close) and is not recorded",
                           self.path, self._episode["task_id"])
            self._episode = None

    def _env_id(self, task: Mapping[str, Any]) -> str:
        """The registered id the trainers know: the spec's, else the environment's kind, else the task's shape."""
        spec_id = getattr(getattr(self.env, "spec", None), "id", None)
        if spec_id in _ENV_ID_BY_KIND.values():
            return spec_id
        kind = getattr(self.env.unwrapped, "kind", None)
        if kind in _ENV_ID_BY_KIND:
            return _ENV_ID_BY_KIND[kind]
        return _ENV_ID_BY_KIND["backend" if "test_cases" in task else "frontend"]

    def _record(self, episode: dict[str, Any], reward: Any, terminated: bool, info: Mapping[str, Any]
                ) -> dict[str, Any]:
        dialogue = _dialogue(info)
        record: dict[str, Any] = {
            "task": episode["task"],
            "dialogue_history": dialogue,
            "answer": info.get("answer"),
            "reward": _number(reward),
            "episode_id": f"{episode['task_id']}/{self.recording_id}-{self.recorded}",
            "env_id": self._env_id(episode["task"]),
            "task_id": episode["task_id"],
            "seed": episode["seed"],
            "success": info.get("success") is True,
            "outcome": info.get("outcome") or ("answered" if terminated else "no_answer"),
            "turns": sum(m["role"] == "assistant" for m in dialogue),
        }
        for key, value in info.items():
            if key not in _INFO_SKIP and key not in record:
                record[key] = value
        record["simulator_errors"] = episode["simulator_errors"]
        record["policy"] = self.policy
        record["timing"] = {"seconds": round(time.perf_counter() - episode["started"], 4)}
        return json_safe(record)

    def _write(self, record: Mapping[str, Any]) -> None:
        try:
            data = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (not Unicode) in some text: kept as a JSON escape
            data = (json.dumps(record) + "\n").encode("ascii")
        # One write of the whole line, then flush + fsync: a crash leaves whole records and at most one partial one.
        self._handle.write(data)
        self._handle.flush()
        if self.fsync:
            os.fsync(self._handle.fileno())
        self.recorded += 1


def _dialogue(info: Mapping[str, Any]) -> list[dict[str, str]]:
    """The dialogue of ``info["messages"]`` without the system instructions (the trainers add them back)."""
    messages = info.get("messages")
    if not isinstance(messages, list):
        raise ValueError("RecordTrajectories needs the dialogue in info['messages'], as the ColBench environments "
                         "give it")
    return [{"role": str(m["role"]), "content": m["content"]} for m in messages if m.get("role") != "system"]


def _text(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        try:  # numpy scalars
            value = float(value)
        except (TypeError, ValueError):
            return None
    value = float(value)
    return value if math.isfinite(value) else None


def json_safe(value: Any) -> Any:
    """A JSON-serialisable copy: numpy scalars become numbers, bytes are summarised, NaN/inf become None."""
    if isinstance(value, Mapping):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bytes, bytearray)):
        return f"<{len(value)} bytes>"
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        try:
            return json_safe(value.item())
        except (TypeError, ValueError):
            pass
    if hasattr(value, "tolist"):
        return json_safe(value.tolist())
    return str(value)


def _open_for_records(path: Path, *, append: bool, overwrite: bool):
    """The file opened for appending whole lines, locked against a second writer, checked or repaired first."""
    path.parent.mkdir(parents=True, exist_ok=True)
    has_data = path.exists() and path.stat().st_size > 0
    if has_data and not append and not overwrite:
        raise FileExistsError(f"{path} already holds trajectories: pass append=True to add episodes to it or "
                              "overwrite=True to start over")
    handle = path.open("ab")
    try:
        _lock(handle, path)
        if overwrite:
            handle.truncate(0)
        elif has_data:
            _cut_partial_last_line(handle, path)
    except BaseException:
        handle.close()
        raise
    return handle


def _lock(handle: Any, path: Path) -> None:
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX: no protection against two writers
        return
    try:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise RuntimeError(f"{path} is being written by another recorder or collector: give each its own file "
                           "(a folder of *.jsonl files reads as one set of trajectories)") from None


def _cut_partial_last_line(handle: Any, path: Path) -> None:
    """Remove an unfinished last record left by a killed writer (a whole record missing only its newline is kept)."""
    with path.open("rb") as reader:
        size = reader.seek(0, os.SEEK_END)
        reader.seek(size - 1)
        if reader.read(1) == b"\n":
            return
        keep, position, block = 0, size, 1 << 16
        while position > 0:  # back to the last newline, a block at a time: the file may be large
            start = max(0, position - block)
            reader.seek(start)
            index = reader.read(position - start).rfind(b"\n")
            if index >= 0:
                keep = start + index + 1
                break
            position = start
        reader.seek(keep)
        tail = reader.read()
    try:
        json.loads(tail.decode("utf-8"))
        handle.write(b"\n")
        handle.flush()
    except (json.JSONDecodeError, UnicodeDecodeError):
        handle.truncate(keep)
        logger.warning("%s: removed a partial last record (%d bytes)", path, size - keep)


__all__ = ["RecordTrajectories"]
