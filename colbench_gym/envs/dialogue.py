"""The dialogue loop shared by the ColBench environments.

An episode is a conversation between the agent (the policy) and a simulated human who knows
hidden details of the task. Each ``step`` takes one agent message. A message containing
``I WANT TO ANSWER:`` ends the episode and is scored; otherwise the human replies. After
``max_turns`` agent messages without an answer the episode is truncated with reward 0.
Subclasses say how an answer is extracted and scored, and what the human is shown.

The observation is the whole dialogue as text, starting with the instructions, so that an agent
that reads nothing but ``obs`` learns how to answer. Messages over the environment's limit are cut
(and the agent is told, at the head of the human's next reply) or, with ``long_actions="raise"``,
refused with :class:`ActionTooLongError` before anything changes.
"""

from __future__ import annotations

import difflib
import numbers
import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import gymnasium as gym

from colbench_gym.envs.spaces import UnicodeText
from colbench_gym.simulators.base import Simulator, SimulatorReply, SimulatorRequest
from colbench_gym.tasks import Task, resolve_tasks

ANSWER_MARKER = "I WANT TO ANSWER:"
# Longest agent message taken whole (a 1 MB answer is not code); subclasses may allow more.
MAX_ACTION_CHARS = 32_000
MAX_OBSERVATION_CHARS = 1_000_000
# What the environment does with a message over its limit: cut it (and say so), or refuse it.
LONG_ACTIONS = ("truncate", "raise")
RESET_OPTIONS = ("task_id", "task_index")
# What the human says when the simulator failed; the failure itself is recorded in info.
SIMULATOR_FALLBACK = "Sorry, I can't answer that right now."
_ROLE_NAMES = {"system": "Instructions", "user": "Human", "assistant": "Agent"}


def render_dialogue(messages: Sequence[dict[str, str]], *, instructions: bool = False) -> str:
    """The dialogue as text, one ``"Human: ..."`` / ``"Agent: ..."`` block per message; the system
    instructions come first as an ``"Instructions: ..."`` block with ``instructions=True``, else are left out."""
    return "\n\n".join(f"{_ROLE_NAMES.get(m['role'], m['role'])}: {m['content']}" for m in messages
                       if instructions or m["role"] != "system")


def cut_note(length: int, limit: int) -> str:
    """What the agent is told when its message of ``length`` characters was cut to ``limit``."""
    return (f"[Your message was cut: it had {length:,} characters, over the limit of {limit:,}; only its first "
            f"{limit:,} were kept, the last {length - limit:,} were dropped.]")


def _cut_note(notes: dict[str, Any]) -> str | None:
    if "action_truncated_from" not in notes:
        return None
    return cut_note(notes["action_truncated_from"], notes["action_truncated_to"])


class ActionTooLongError(ValueError):
    """An action over the environment's limit with ``long_actions="raise"``; the episode is as it was before."""


class UnknownTaskError(KeyError):
    """A ``task_id`` the environment does not have (a ``KeyError`` that prints its message plainly)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class DialogueEnv(gym.Env[str, str]):
    """Base class of the ColBench environments (see the subclasses' docstrings for the spec)."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi", "human"], "render_fps": 1}
    kind: ClassVar[str]
    instructions_template: ClassVar[str]
    max_action_chars: int = MAX_ACTION_CHARS

    def __init__(
        self,
        tasks: Any = "train",
        simulator: Simulator | None = None,
        max_turns: int = 10,
        privileged: bool = True,
        render_mode: str | None = None,
        long_actions: str = "truncate",
    ):
        if isinstance(max_turns, bool) or not isinstance(max_turns, numbers.Integral) or max_turns < 1:
            raise ValueError(f"max_turns must be an int >= 1, got {max_turns!r}")
        if not isinstance(long_actions, str) or long_actions not in LONG_ACTIONS:
            raise ValueError(f"long_actions must be one of {LONG_ACTIONS} (what to do with a message over the "
                             f"environment's limit: cut it and tell the agent, or raise), got {long_actions!r}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be one of {self.metadata['render_modes']}, got {render_mode!r}")
        self.tasks: list[Task] = resolve_tasks(tasks, self.kind)
        self._task_index = {task.task_id: i for i, task in enumerate(self.tasks)}
        self.simulator = simulator if simulator is not None else self.default_simulator()
        self.max_turns = int(max_turns)
        self.include_privileged = privileged
        self.render_mode = render_mode
        self.long_actions = long_actions
        self.instructions = self.instructions_template.format(max_turns=max_turns, marker=ANSWER_MARKER)
        self.observation_space = UnicodeText(MAX_OBSERVATION_CHARS)
        self.action_space = UnicodeText(self.max_action_chars)
        self.task: Task | None = None
        self.messages: list[dict[str, str]] = []
        self.turn = 0
        self._done = True
        self._observation_truncated = False
        self._final_note: str | None = None  # said after the dialogue when no human reply can carry it
        self._step_truncated_from: int | None = None  # the current step's action length, when it was cut

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
        chosen = self._chosen_task(options)  # bad options raise before anything changes
        super().reset(seed=seed)
        index = chosen if chosen is not None else int(self.np_random.integers(len(self.tasks)))
        self.task = self.tasks[index]
        self.messages = [
            {"role": "system", "content": self.instructions},
            {"role": "user", "content": self.task.problem_description},
        ]
        self.turn = 0
        self._done = False
        self._final_note = None
        observation = self._observation()
        return observation, self._info(simulator_error=None)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._done or self.task is None:
            raise RuntimeError("step() called on a finished episode: call reset() first")
        text, notes = self._clean_action(action)
        self._step_truncated_from = notes.get("action_truncated_from")
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
        note = _cut_note(notes)
        # The note heads the human's reply so that every door shows it to the agent (the observation, the
        # chat messages, TRL's and OpenEnv's replies); the agent's own message stays as it was kept.
        self.messages.append({"role": "user", "content": f"{note}\n\n{reply.text}" if note else reply.text})
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
    def _chosen_task(self, options: Any) -> int | None:
        """The task index ``options`` asks for (None: draw one); a clear error for anything else."""
        if options is None:
            return None
        count = len(self.tasks)
        allowed = (f"reset() takes options={{'task_id': str}} (one of this environment's {count} task ids) or "
                   f"options={{'task_index': int}} (0 to {count - 1}), or no options for a random task")
        if not isinstance(options, Mapping):
            raise TypeError(f"options must be a dict, got {type(options).__name__}: {allowed}")
        unknown = [key for key in options if key not in RESET_OPTIONS]
        if unknown:
            raise ValueError(f"unknown reset option{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(repr(k) for k in unknown)}: {allowed}")
        if len(options) > 1:
            raise ValueError(f"options give both task_id and task_index: give one. {allowed}")
        if "task_id" in options:
            task_id = options["task_id"]
            if not isinstance(task_id, str):
                raise TypeError(f"task_id must be a str, got {type(task_id).__name__} {task_id!r}: {allowed}")
            if task_id not in self._task_index:
                close = difflib.get_close_matches(task_id, list(self._task_index), n=3)
                hint = f"; did you mean {', '.join(map(repr, close))}?" if close else \
                    f" (the first are {', '.join(repr(t.task_id) for t in self.tasks[:3])})"
                raise UnknownTaskError(f"unknown task_id {task_id!r}: this environment has {count} tasks{hint} "
                                       "(all: [t.task_id for t in env.unwrapped.tasks])")
            return self._task_index[task_id]
        if "task_index" in options:
            index = options["task_index"]
            if isinstance(index, bool) or not isinstance(index, numbers.Integral):
                raise TypeError(f"task_index must be an int, got {type(index).__name__} {index!r}: {allowed}")
            if not 0 <= index < count:
                raise IndexError(f"task_index {int(index)} is out of range: this environment has {count} tasks "
                                 f"(task_index 0 to {count - 1})")
            return int(index)
        return None

    def _clean_action(self, action: Any) -> tuple[str, dict[str, Any]]:
        notes: dict[str, Any] = {}
        if isinstance(action, bytes):
            action = action.decode("utf-8", errors="replace")
            notes["action_decoded"] = True
        if not isinstance(action, str):
            raise TypeError(f"the action must be a str (the agent's message), got {type(action).__name__}")
        limit = self.max_action_chars
        if len(action) > limit:
            if self.long_actions == "raise":
                raise ActionTooLongError(
                    f"the action has {len(action):,} characters, over this environment's limit of {limit:,} "
                    "(long_actions='raise'); nothing was done, the episode is as it was: send a shorter message, "
                    "or make the environment with long_actions='truncate' to have long messages cut")
            notes.update(action_truncated_from=len(action), action_truncated_to=limit)
            action = action[:limit]
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
        self._final_note = _cut_note(notes)  # no human reply follows to carry it
        observation = self._observation()
        info = self._info(simulator_error=None, **notes, **extra)
        info.update(answer=answer, outcome=outcome, score=float(reward),
                    scoring_seconds=time.perf_counter() - started)
        info.setdefault("success", False)
        return observation, float(reward), terminated, not terminated, info

    def _observation(self) -> str:
        """The instructions and the dialogue as text (and, at the end, a note no reply could carry); over
        ``MAX_OBSERVATION_CHARS``, the instructions, the task's request and the latest messages."""
        text = render_dialogue(self.messages, instructions=True)
        if self._final_note:
            text += f"\n\n{self._final_note}"
        self._observation_truncated = len(text) > MAX_OBSERVATION_CHARS
        if not self._observation_truncated:
            return text
        head = render_dialogue(self.messages[:2], instructions=True)[: MAX_OBSERVATION_CHARS // 2] + "\n\n[...]\n\n"
        return head + text[len(text) - (MAX_OBSERVATION_CHARS - len(head)):]

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
