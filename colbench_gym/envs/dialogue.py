"""The dialogue loop shared by the ColBench environments.

An episode is a conversation between the agent (the policy) and a simulated human who knows
hidden details of the task. Each ``step`` takes one agent message. A message containing
``I WANT TO ANSWER:`` ends the episode and is scored; otherwise the human replies. After
``max_turns`` agent messages without an answer the episode is truncated with reward 0.
Subclasses say how an answer is extracted and scored, and what the human is shown.
"""

from __future__ import annotations

import numbers
import time
from collections.abc import Sequence
from typing import Any, ClassVar

import gymnasium as gym

from colbench_gym.envs.spaces import UnicodeText
from colbench_gym.simulators.base import Simulator, SimulatorReply, SimulatorRequest
from colbench_gym.tasks import Task, resolve_tasks

ANSWER_MARKER = "I WANT TO ANSWER:"
# Longest agent message kept; longer actions are cut and flagged in info (a 1 MB answer is not code).
MAX_ACTION_CHARS = 32_000
MAX_OBSERVATION_CHARS = 1_000_000
# What the human says when the simulator failed; the failure itself is recorded in info.
SIMULATOR_FALLBACK = "Sorry, I can't answer that right now."


def render_dialogue(messages: Sequence[dict[str, str]]) -> str:
    """The observation text: the dialogue without the system instructions, one block per message."""
    names = {"user": "Human", "assistant": "Agent"}
    return "\n\n".join(
        f"{names.get(m['role'], m['role'])}: {m['content']}" for m in messages if m["role"] != "system"
    )


class DialogueEnv(gym.Env[str, str]):
    """Base class of the ColBench environments (see the subclasses' docstrings for the spec)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 1}
    kind: ClassVar[str]
    instructions_template: ClassVar[str]

    def __init__(
        self,
        tasks: Any = "train",
        simulator: Simulator | None = None,
        max_turns: int = 10,
        privileged: bool = True,
        render_mode: str | None = None,
    ):
        if isinstance(max_turns, bool) or not isinstance(max_turns, numbers.Integral) or max_turns < 1:
            raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.tasks: list[Task] = resolve_tasks(tasks, self.kind)
        self._task_index = {task.task_id: i for i, task in enumerate(self.tasks)}
        self.simulator = simulator if simulator is not None else self.default_simulator()
        self.max_turns = int(max_turns)
        self.include_privileged = privileged
        self.render_mode = render_mode
        self.instructions = self.instructions_template.format(max_turns=max_turns, marker=ANSWER_MARKER)
        self.observation_space = UnicodeText(MAX_OBSERVATION_CHARS)
        self.action_space = UnicodeText(MAX_ACTION_CHARS)
        self.task: Task | None = None
        self.messages: list[dict[str, str]] = []
        self.turn = 0
        self._done = True
        self._observation_truncated = False

    # -- hooks for subclasses -------------------------------------------------------------
    def default_simulator(self) -> Simulator:
        raise NotImplementedError

    def on_agent_message(self, text: str) -> dict[str, Any]:
        """Called on every non-final agent message; returns extra info (frontend renders here)."""
        return {}

    def simulator_request(self) -> SimulatorRequest:
        assert self.task is not None
        return SimulatorRequest(task=self.task, messages=list(self.messages[1:]))

    def score_answer(self, answer: str) -> tuple[float, dict[str, Any]]:
        """Score the final answer; returns (reward, info fields). Must not raise for bad answers."""
        raise NotImplementedError

    def score_without_answer(self) -> tuple[float, dict[str, Any]]:
        """Reward when the turns ran out without ``I WANT TO ANSWER:``."""
        return 0.0, {}

    def extract_answer(self, text: str) -> str:
        return text.split(ANSWER_MARKER, 1)[1].strip()

    # -- Gymnasium API -------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        super().reset(seed=seed)
        options = options or {}
        if "task_id" in options:
            if options["task_id"] not in self._task_index:
                raise KeyError(f"unknown task_id {options['task_id']!r}")
            index = self._task_index[options["task_id"]]
        elif "task_index" in options:
            index = int(options["task_index"]) % len(self.tasks)
        else:
            index = int(self.np_random.integers(len(self.tasks)))
        self.task = self.tasks[index]
        self.messages = [
            {"role": "system", "content": self.instructions},
            {"role": "user", "content": self.task.problem_description},
        ]
        self.turn = 0
        self._done = False
        observation = self._observation()
        return observation, self._info(simulator_error=None)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done or self.task is None:
            raise RuntimeError("step() called on a finished episode: call reset() first")
        text, notes = self._clean_action(action)
        self.turn += 1
        self.messages.append({"role": "assistant", "content": text})
        try:
            return self._advance(text, notes)
        except BaseException:
            # A scorer that refuses (code execution disabled) or breaks leaves the episode as it was
            # before this action, so that the caller can reset it or try again.
            self.messages.pop()
            self.turn -= 1
            raise

    def _advance(self, text: str, notes: dict[str, Any]) -> tuple[str, float, bool, bool, dict[str, Any]]:
        started = time.perf_counter()
        if ANSWER_MARKER in text:
            answer = self.extract_answer(text)
            reward, extra = self.score_answer(answer)
            return self._finish(reward, terminated=True, answer=answer, outcome="answered", notes=notes,
                                extra=extra, started=started)

        extra = self.on_agent_message(text)
        if self.turn >= self.max_turns:
            reward, more = self.score_without_answer()
            return self._finish(reward, terminated=False, answer=None, outcome="no_answer", notes=notes,
                                extra={**extra, **more}, started=started)

        reply = self._ask_simulator()
        self.messages.append({"role": "user", "content": reply.text})
        observation = self._observation()
        return observation, 0.0, False, False, self._info(simulator_error=reply.error, **notes, **extra)

    def render(self) -> str | None:
        """``"ansi"``: the dialogue as text; ``"human"``: printed; no ``render_mode``: nothing (Gymnasium's rule)."""
        if self.render_mode is None:
            return None
        text = render_dialogue(self.messages)
        if self.render_mode == "human":
            print(text)
            return None
        return text

    # -- internals -----------------------------------------------------------------------------
    def _clean_action(self, action: Any) -> tuple[str, dict[str, Any]]:
        notes: dict[str, Any] = {}
        if isinstance(action, bytes):
            action = action.decode("utf-8", errors="replace")
            notes["action_decoded"] = True
        if not isinstance(action, str):
            raise TypeError(f"the action must be a str (the agent's message), got {type(action).__name__}")
        if len(action) > MAX_ACTION_CHARS:
            notes["action_truncated_from"] = len(action)
            action = action[:MAX_ACTION_CHARS]
        return action, notes

    def _ask_simulator(self) -> SimulatorReply:
        try:
            reply = self.simulator.reply(self.simulator_request())
        except Exception as err:  # noqa: BLE001 (a simulator bug must not kill a batch of episodes)
            return SimulatorReply(SIMULATOR_FALLBACK, error=f"{type(err).__name__}: {err}")
        if not isinstance(reply, SimulatorReply):
            return SimulatorReply(SIMULATOR_FALLBACK, error=f"simulator returned {type(reply).__name__}")
        if not isinstance(reply.text, str):
            return SimulatorReply(SIMULATOR_FALLBACK, error=f"simulator replied with a {type(reply.text).__name__}")
        if not reply.text.strip():
            return SimulatorReply(SIMULATOR_FALLBACK, error=reply.error or "simulator returned an empty reply")
        return reply

    def _finish(self, reward: float, *, terminated: bool, answer: str | None, outcome: str,
                notes: dict[str, Any], extra: dict[str, Any], started: float):
        self._done = True
        observation = self._observation()
        info = self._info(simulator_error=None, **notes, **extra)
        info.update(answer=answer, outcome=outcome, score=float(reward),
                    scoring_seconds=time.perf_counter() - started)
        info.setdefault("success", False)
        return observation, float(reward), terminated, not terminated, info

    def _observation(self) -> str:
        """The dialogue as text; over ``MAX_OBSERVATION_CHARS``, the task's request and the latest messages."""
        text = render_dialogue(self.messages)
        self._observation_truncated = len(text) > MAX_OBSERVATION_CHARS
        if not self._observation_truncated:
            return text
        request = render_dialogue(self.messages[1:2])[: MAX_OBSERVATION_CHARS // 2] + "\n\n[...]\n\n"
        return request + text[len(text) - (MAX_OBSERVATION_CHARS - len(request)):]

    def _info(self, simulator_error: str | None, **extra: Any) -> dict[str, Any]:
        assert self.task is not None
        info: dict[str, Any] = {
            "task_id": self.task.task_id,
            "turn": self.turn,
            "messages": [dict(m) for m in self.messages],
            "simulator_error": simulator_error,
        }
        if self._observation_truncated:  # set by the observation of this step, always computed first
            info["observation_truncated"] = True
        if self.include_privileged:
            info["privileged"] = self.task.privileged
        info.update(extra)
        return info
