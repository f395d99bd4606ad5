"""Episodes that start from a recorded turn state: the environment plays the recorded agent messages itself.

A Monte Carlo value of a candidate message needs the episode continued from the state it was sampled at, with the
same simulated human and grader as any episode. :class:`ReplayTurnState` wraps an environment so that
``reset(seed=k)`` resets to the task of script ``k``, steps its agent messages (the human answers them as it did when
they were recorded), and hands the episode on at the next agent turn. The batched collector
(:func:`sweet_trl.rollouts.collect`) then plays the policy from there, with its batching, resume and failure handling,
and annotates only the messages the policy wrote (``info["replayed_turns"]``)::

    scripts = [ReplayScript(task_id, episode_seed, [question, candidate], expected_replies=[reply])]
    env = ReplayTurnState(gym.make("ColBench-Backend-v0", tasks=tasks, max_turns=2), scripts)
    obs, info = env.reset(seed=0, options={"task_id": task_id})   # the dialogue after `candidate`
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym


@dataclass(frozen=True)
class ReplayScript:
    """What one replayed episode starts from.

    Attributes:
        task_id: the task the state belongs to.
        episode_seed: the seed the recorded episode was reset with (a simulator that samples answers the same).
        agent_messages: the agent messages to play, in order.
        expected_replies: the human replies the recording holds after each played message but the last (a
            reply that differs marks the episode ``replay_mismatch``: its state is not the recorded one).
    """

    task_id: str
    episode_seed: int | None
    agent_messages: Sequence[str]
    expected_replies: Sequence[str] = field(default_factory=tuple)


class ReplayTurnState(gym.Wrapper):
    """``reset(seed=k)`` plays script ``k`` and returns the observation after it; ``info`` (of the reset and of
    every step) carries ``replayed_turns`` and ``replay_mismatch``. A script that ends the episode is an error: a
    state to continue from must leave a turn to play."""

    def __init__(self, env: gym.Env, scripts: Sequence[ReplayScript]):
        super().__init__(env)
        self.scripts = list(scripts)
        self._replay_info: dict[str, Any] = {}

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[Any, dict[str, Any]]:
        if seed is None or not 0 <= seed < len(self.scripts):
            raise ValueError(f"reset(seed=k) names the script to replay: 0 <= k < {len(self.scripts)}, got {seed!r}")
        script = self.scripts[seed]
        if options and options.get("task_id", script.task_id) != script.task_id:
            raise ValueError(f"script {seed} replays task {script.task_id!r}, not {options['task_id']!r}")
        observation, info = self.env.reset(seed=script.episode_seed, options={"task_id": script.task_id})
        for played, message in enumerate(script.agent_messages):
            observation, _, terminated, truncated, info = self.env.step(message)
            if terminated or truncated:
                raise ValueError(f"script {seed} ends its episode at agent message {played} "
                                 f"(of {len(script.agent_messages)}): nothing is left to continue")
        replies = [m["content"] for m in info["messages"] if m["role"] == "user"][1:]  # [0]: the task statement
        mismatch = list(replies[:len(script.expected_replies)]) != list(script.expected_replies)
        self._replay_info = {"replayed_turns": len(script.agent_messages), "replay_mismatch": mismatch}
        return observation, {**info, **self._replay_info}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        observation, reward, terminated, truncated, info = self.env.step(action)
        return observation, reward, terminated, truncated, {**info, **self._replay_info}
