"""What every door of :mod:`colbench_gym.integrations` needs: environments made per rollout from one ``env_id`` and
keyword set, and the test that tells an infrastructure failure (the grader's, the browser's) from the agent's.

    factory = EnvFactory("ColBench-Backend-v0", {"tasks": "train"})   # privileged=False unless asked for
    env = factory.make()                                               # the task list is resolved once, then shared
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any


def _env_class(env_id: str) -> type:
    import gymnasium as gym
    from gymnasium.envs.registration import load_env_creator

    import colbench_gym  # noqa: F401  (registers the ids)

    entry = gym.spec(env_id).entry_point
    return load_env_creator(entry) if isinstance(entry, str) else entry


def _env_kind(env_id: str) -> str:
    kind = getattr(_env_class(env_id), "kind", None)
    if kind not in ("backend", "frontend"):
        raise ValueError(f"{env_id!r} is not a ColBench dialogue environment (ColBench-Backend-v0 / -Frontend-v0)")
    return kind


def is_infra_error(info: Mapping[str, Any]) -> bool:
    """A failure of the grader or the browser, never the agent's (trainers drop such episodes)."""
    grader = info.get("grader")
    return bool(info.get("infra_error")) or bool(isinstance(grader, Mapping) and grader.get("infra_error"))


class EnvFactory:
    """Makes environments for one ``env_id`` and keyword set; the task list is resolved once and shared."""

    def __init__(self, env_id: str, make_kwargs: Mapping[str, Any]):
        self.env_id = env_id
        self.kind = _env_kind(env_id)
        self.make_kwargs = dict(make_kwargs)
        self.make_kwargs.setdefault("privileged", False)
        self._tasks: list[Any] | None = None
        self._lock = threading.Lock()

    def make(self) -> Any:
        import gymnasium as gym

        import colbench_gym  # noqa: F401

        with self._lock:
            kwargs = dict(self.make_kwargs)
            if self._tasks is not None:
                kwargs["tasks"] = self._tasks
            env = gym.make(self.env_id, **kwargs)
            if self._tasks is None:
                self._tasks = list(env.unwrapped.tasks)
        return env

    @property
    def tasks(self) -> list[Any]:
        if self._tasks is None:
            self.make().close()
        assert self._tasks is not None
        return self._tasks
