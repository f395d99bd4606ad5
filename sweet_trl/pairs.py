"""Critic training pairs from rollouts: two trajectories of the same task with different rewards.

Two recipes from the paper's released code (``PAIR_RULE_PRESETS``):

- backend: the best trajectory of a task, only when it succeeded (passed every test), against every trajectory of
  that task with a lower reward: ``rule="best_vs_rest", require_success=True, min_reward_gap=0.0``;
- frontend: every pair of trajectories of a task whose similarity differs by at least 0.1:
  ``rule="all_pairs", require_success=False, min_reward_gap=0.1``.

A pair row (one per line of the critic's training set)::

    {"task_id": str, "privileged": c (task["ground_truth"]),
     "chosen": [{"role", "content"}, ...], "rejected": [...],            # dialogue histories, agent = "assistant"
     "chosen_reward": float, "rejected_reward": float,
     "chosen_task_id": str, "rejected_task_id": str, "chosen_episode_id": str, "rejected_episode_id": str}

Usage::

    pairs, stats = build_critic_pairs(load_trajectories("runs/rollouts.jsonl"), **PAIR_RULE_PRESETS["backend"])
    dataset = critic_pair_dataset("runs/rollouts.jsonl", preset="backend")      # a datasets.Dataset

Where a pair's two trajectories differ before the answer (:func:`difference_before_answer`): the same questions
(their advantages cancel in the critic's score difference), different questions the human answered alike (the answer
decided), one side told strictly more, or each told something the other was not.
``build_critic_pairs(..., told_differs_only=True)`` keeps only the pairs whose sides were told different things: a
diagnostic of question credit (it reads the simulator's replies, which the paper's critic never sees), not a recipe.

Trajectories are read as :func:`sweet_trl.trajectories.load_trajectories` reads them: the latest record of an
episode wins (an episode re-run by the collector's ``retry_errors``), a partial last line is skipped, and original
ColBench rows get their ids. Each is read through :class:`sweet_trl.trajectories.Trajectory`; episodes whose policy
backend, environment, grader or renderer failed (:attr:`~sweet_trl.trajectories.Trajectory.infra_drop_reason`)
say nothing about the agent and are dropped.
"""

from __future__ import annotations

import itertools
import logging
import random
import re
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from colbench_gym.simulators.base import DONT_KNOW
from sweet_trl.trajectories import Trajectory, load_trajectories

logger = logging.getLogger(__name__)

PairRule = Literal["best_vs_rest", "all_pairs"]
PAIR_RULE_PRESETS: dict[str, dict[str, Any]] = {
    "backend": {"rule": "best_vs_rest", "require_success": True, "min_reward_gap": 0.0},
    "frontend": {"rule": "all_pairs", "require_success": False, "min_reward_gap": 0.1},
}


# What to do about each reason a trajectory is dropped (Trajectory.drop_reason), for the error that finds no pair.
DROP_REASON_ADVICE: dict[str, str] = {
    "no_privileged": "the records lack the privileged text c (task[{privileged_key!r}], the reference solution or "
                     "target page): record episodes from an environment made with privileged=True (the default), "
                     "or name the task field that holds c with privileged_key",
    "no_reward": "the records have no finite reward: record whole episodes (to the answer or the last turn)",
    "no_agent_turn": "the dialogues hold no agent message",
    "malformed_dialogue": "the dialogues are not lists of {{role: user|assistant|system, content: str}} messages",
    "infra_failure": "the policy backend or the environment stopped these episodes: play them again "
                     "(sweet-rl collect with retry_errors)",
    "grader_infra_error": "the grader itself failed on these answers (not the agent's fault): grade them again",
    "render_infra_error": "the renderer itself failed on these pages (not the agent's fault): render them again",
}

# Why a task yields no pair (PairStats.tasks_without_pairs), in the order the pair rules test them.
NO_PAIR_CAUSES = ("single_trajectory", "equal_rewards", "no_success", "reward_gap_below_min")


@dataclass
class PairStats:
    """What :func:`build_critic_pairs` kept and dropped: ``dropped`` counts trajectories by reason
    (:meth:`~sweet_trl.trajectories.Trajectory.drop_reason`), ``tasks_without_pairs`` counts the tasks that kept
    trajectories but gave no pair by cause (:data:`NO_PAIR_CAUSES`: one trajectory only, all rewards equal, no
    successful best trajectory when the rule requires one, rewards closer than ``min_reward_gap``)."""

    trajectories: int = 0
    tasks: int = 0
    tasks_with_pairs: int = 0
    pairs: int = 0
    dropped: Counter = field(default_factory=Counter)
    tasks_without_pairs: Counter = field(default_factory=Counter)
    min_reward_gap: float = 0.0
    privileged_key: str = "ground_truth"
    told_alike: int | None = None  # with told_differs_only: the pairs left out, their sides told the same

    def summary(self) -> str:
        dropped = ", ".join(f"{k}={v}" for k, v in sorted(self.dropped.items())) or "none"
        alike = "" if self.told_alike is None else f"; {self.told_alike} pairs told alike left out"
        return (f"{self.pairs} pairs from {self.tasks_with_pairs}/{self.tasks} tasks and {self.trajectories} "
                f"trajectories; dropped trajectories: {dropped}{alike}")

    def why_no_pairs(self) -> str:
        """Why no pair was built, and what to do: every cause that applies, the most common first."""
        if self.trajectories == 0:
            return "the input holds no trajectory record"
        causes = []
        for reason, count in self.dropped.most_common():
            advice = DROP_REASON_ADVICE.get(reason, "").format(privileged_key=self.privileged_key)
            causes.append(f"{count} of {self.trajectories} trajectories dropped as {reason}: {advice}")
        explained = {
            "single_trajectory": "{n} of {tasks} tasks have a single usable trajectory: a pair needs two episodes of "
                                 "one task, so play every task several times (collect's episodes_per_task >= 2, or "
                                 "reset(options={{'task_id': ...}}) again)",
            "equal_rewards": "{n} of {tasks} tasks have trajectories whose rewards are all equal: a pair needs "
                             "different rewards, so sample more varied episodes (a higher temperature, more "
                             "episodes per task)",
            "no_success": "in {n} of {tasks} tasks the best trajectory did not succeed, and this rule "
                          "(best_vs_rest with require_success=True, the backend preset) pairs only a successful "
                          "one: pass require_success=False (sweet-rl: --require_success false)",
            "reward_gap_below_min": f"in {{n}} of {{tasks}} tasks the rewards differ by less than min_reward_gap="
                                    f"{self.min_reward_gap:g}: lower min_reward_gap",
        }
        for cause in NO_PAIR_CAUSES:
            if self.tasks_without_pairs.get(cause):
                causes.append(explained[cause].format(n=self.tasks_without_pairs[cause], tasks=self.tasks))
        return "; ".join(causes) or "no cause recorded"


def make_pair(chosen: Mapping[str, Any] | Trajectory, rejected: Mapping[str, Any] | Trajectory,
              privileged_key: str = "ground_truth", chosen_index: int = 0, rejected_index: int = 1
              ) -> dict[str, Any]:
    """One pair row; raises ``ValueError`` for a pair across two tasks or with a non-higher chosen reward."""
    chosen, rejected = Trajectory(chosen), Trajectory(rejected)
    chosen_task, rejected_task = chosen.task_id, rejected.task_id
    if chosen_task != rejected_task:
        raise ValueError(f"a critic pair must come from one task, got {chosen_task!r} and {rejected_task!r}")
    privileged = chosen.privileged(privileged_key)
    if privileged != rejected.privileged(privileged_key):
        raise ValueError(f"task {chosen_task!r}: the two trajectories carry different task[{privileged_key!r}]")
    chosen_reward, rejected_reward = chosen.reward, rejected.reward
    if chosen_reward is None or rejected_reward is None or not chosen_reward > rejected_reward:
        raise ValueError(f"task {chosen_task!r}: chosen reward {chosen_reward} must exceed rejected {rejected_reward}")
    return {
        "task_id": chosen_task,
        "privileged": privileged,
        "chosen": chosen.messages,
        "rejected": rejected.messages,
        "chosen_reward": chosen_reward,
        "rejected_reward": rejected_reward,
        "chosen_task_id": chosen_task,
        "rejected_task_id": rejected_task,
        "chosen_episode_id": chosen.episode_key(chosen_index),
        "rejected_episode_id": rejected.episode_key(rejected_index),
    }


def build_critic_pairs(
    trajectories: Any,
    *,
    rule: PairRule = "best_vs_rest",
    require_success: bool = True,
    min_reward_gap: float = 0.0,
    success_reward: float = 1.0,
    max_pairs_per_task: int | None = None,
    privileged_key: str = "ground_truth",
    seed: int = 0,
    told_differs_only: bool = False,
) -> tuple[list[dict[str, Any]], PairStats]:
    """Pair trajectories of the same task with different rewards (see the module docstring for the recipes).

    Args:
        trajectories: anything :func:`load_trajectories` reads.
        rule: ``"best_vs_rest"`` (the task's best trajectory against each lower one) or ``"all_pairs"``.
        require_success: with ``best_vs_rest``, pair a task only when its best trajectory succeeded.
        min_reward_gap: smallest reward difference of a pair; rewards must differ in any case.
        success_reward: reward that counts as success for records without a ``success`` field.
        max_pairs_per_task: keep at most this many pairs per task (a seeded random subset).
        privileged_key: the task field that holds ``c``.
        told_differs_only: keep only the pairs whose sides the human told different things before the answer
            (:data:`TOLD_DIFFERS`), counted out in ``stats.told_alike``; a diagnostic, see the module docstring.

    Trajectories whose episode, grader or renderer failed, without a reward, without ``c``, without any agent turn
    or with a malformed dialogue (:meth:`~sweet_trl.trajectories.Trajectory.drop_reason`) are dropped and counted
    in ``stats.dropped`` by reason (and logged). Two trajectories that share a task id but not ``c`` raise
    ``ValueError``: pairing them would compare different tasks.
    """
    if rule not in ("best_vs_rest", "all_pairs"):
        raise ValueError(f"unknown pair rule {rule!r}; expected 'best_vs_rest' or 'all_pairs'")
    trajectories = [Trajectory(record) for record in load_trajectories(trajectories)]
    stats = PairStats(trajectories=len(trajectories), min_reward_gap=min_reward_gap, privileged_key=privileged_key)
    by_task: dict[str, list[tuple[int, Trajectory]]] = defaultdict(list)
    for index, trajectory in enumerate(trajectories):
        reason = trajectory.drop_reason(privileged_key)
        if reason is not None:
            stats.dropped[reason] += 1
            continue
        by_task[trajectory.task_id].append((index, trajectory))
    stats.tasks = len(by_task)
    rng = random.Random(seed)
    pairs: list[dict[str, Any]] = []
    for task_id, group in by_task.items():
        privileged = {t.privileged(privileged_key) for _, t in group}
        if len(privileged) > 1:
            raise ValueError(f"task id {task_id!r} is shared by trajectories with different task[{privileged_key!r}]")
        group = sorted(group, key=lambda item: -item[1].reward)  # stable: ties keep rollout order
        candidates = []
        if rule == "best_vs_rest":
            best_index, best = group[0]
            if not require_success or best.succeeded(success_reward):
                candidates = [((best_index, best), other) for other in group[1:]]
        else:
            candidates = list(itertools.combinations(group, 2))
        task_pairs = [
            make_pair(hi, lo, privileged_key, hi_index, lo_index)
            for (hi_index, hi), (lo_index, lo) in candidates
            if hi.reward - lo.reward >= min_reward_gap and hi.reward > lo.reward
        ]
        if told_differs_only:
            kept = [pair for pair in task_pairs if difference_before_answer(pair) in TOLD_DIFFERS]
            stats.told_alike = (stats.told_alike or 0) + len(task_pairs) - len(kept)
            task_pairs = kept
        if not task_pairs:
            stats.tasks_without_pairs[_no_pair_cause(group, rule, require_success, success_reward)] += 1
        if max_pairs_per_task is not None and len(task_pairs) > max_pairs_per_task:
            task_pairs = rng.sample(task_pairs, max_pairs_per_task)
        stats.tasks_with_pairs += bool(task_pairs)
        pairs.extend(task_pairs)
    stats.pairs = len(pairs)
    if stats.dropped:
        logger.warning("critic pairs: dropped %s", dict(stats.dropped))
    logger.info("critic pairs: %s", stats.summary())
    return pairs, stats


DIFFERENCES = ("same_questions", "same_told", "chosen_told_more", "rejected_told_more", "told_different")
TOLD_DIFFERS = ("chosen_told_more", "rejected_told_more", "told_different")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _messages(side: Any) -> list[Mapping[str, str]]:
    if isinstance(side, Mapping):
        side = side.get("dialogue_history", [])
    return [m for m in side if isinstance(m, Mapping)]


def told(dialogue: Sequence[Mapping[str, str]]) -> frozenset[str]:
    """The sentences the human said after the task's opening message, "I don't know." left out."""
    replies = [str(m.get("content") or "").strip() for m in dialogue if m.get("role") == "user"][1:]
    return frozenset(sentence for reply in replies if reply != DONT_KNOW
                     for sentence in _SENTENCE_END.split(reply) if sentence)


def agent_questions(dialogue: Sequence[Mapping[str, str]]) -> tuple[str, ...]:
    """The agent's messages before its last (the answer, in an episode that ended with one)."""
    return tuple(str(m.get("content") or "") for m in dialogue if m.get("role") == "assistant")[:-1]


def difference_before_answer(pair: Mapping[str, Any]) -> str:
    """Where a pair row's sides (``chosen``, ``rejected``: message lists or trajectory records) differ before the
    answer, one of :data:`DIFFERENCES`:

    - ``same_questions``: the agent's turns before its last are the same messages on both sides; their advantages
      cancel in the critic's score difference, so the pair says nothing about question turns;
    - ``same_told``: the questions differ but the human told both sides the same sentences ("I don't know." left
      out): the answer decided, and the Bradley-Terry loss still moves each side's question credit with its outcome;
    - ``chosen_told_more`` / ``rejected_told_more``: one side was told everything the other was and more;
    - ``told_different``: each side was told something the other was not (a model-written human's wording varies,
      so nearly every pair of such a human lands here).
    """
    chosen, rejected = _messages(pair["chosen"]), _messages(pair["rejected"])
    if agent_questions(chosen) == agent_questions(rejected):
        return "same_questions"
    told_chosen, told_rejected = told(chosen), told(rejected)
    if told_chosen == told_rejected:
        return "same_told"
    if told_rejected < told_chosen:
        return "chosen_told_more"
    if told_chosen < told_rejected:
        return "rejected_told_more"
    return "told_different"


def _no_pair_cause(group: list[tuple[int, Trajectory]], rule: str, require_success: bool, success_reward: float
                   ) -> str:
    """Why a task's trajectories (sorted best first) gave no pair: the first of :data:`NO_PAIR_CAUSES` that holds."""
    if len(group) == 1:
        return "single_trajectory"
    if group[0][1].reward == group[-1][1].reward:
        return "equal_rewards"
    if rule == "best_vs_rest" and require_success and not group[0][1].succeeded(success_reward):
        return "no_success"
    return "reward_gap_below_min"


def critic_pair_dataset(trajectories: Any, preset: str | None = None, config: Any = None, **kwargs: Any):
    """:func:`build_critic_pairs` as a ``datasets.Dataset``. The rule comes from ``preset`` (``"backend"`` or
    ``"frontend"``), else from ``config`` (a :class:`~sweet_trl.critic_config.SweetCriticConfig`: its ``pair_rule``,
    ``require_success``, ``min_reward_gap`` and ``max_pairs_per_task``); keyword arguments override either."""
    from colbench_gym._optional import require

    datasets = require("datasets", "hub")
    if config is not None and preset is None:
        kwargs = {"rule": config.pair_rule, "require_success": config.require_success,
                  "min_reward_gap": config.min_reward_gap, "max_pairs_per_task": config.max_pairs_per_task, **kwargs}
    if preset is not None:
        if preset not in PAIR_RULE_PRESETS:
            raise ValueError(f"unknown pair preset {preset!r}; expected one of {sorted(PAIR_RULE_PRESETS)}")
        kwargs = {**PAIR_RULE_PRESETS[preset], **kwargs}
    pairs, stats = build_critic_pairs(trajectories, **kwargs)
    if not pairs:
        raise ValueError(f"no critic pair could be built: {stats.why_no_pairs()} ({stats.summary()})")
    return datasets.Dataset.from_list(pairs)
