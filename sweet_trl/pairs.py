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

Trajectories are read as :func:`sweet_trl.trajectories.read_trajectories` reads them: the latest record of an
episode wins (an episode re-run by the collector's ``retry_errors``), a partial last line is skipped, and original
ColBench rows get their ids. Episodes whose policy backend, environment, grader or renderer failed
(:func:`infra_drop_reason`) say nothing about the agent and are dropped.
"""

from __future__ import annotations

import itertools
import logging
import math
import os
import random
from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sweet_trl.tokenization import conversation_messages
from sweet_trl.trajectories import dedupe_latest, has_infra_error, is_infra_failure, read_trajectories, task_id_of

logger = logging.getLogger(__name__)

PairRule = Literal["best_vs_rest", "all_pairs"]
PAIR_RULE_PRESETS: dict[str, dict[str, Any]] = {
    "backend": {"rule": "best_vs_rest", "require_success": True, "min_reward_gap": 0.0},
    "frontend": {"rule": "all_pairs", "require_success": False, "min_reward_gap": 0.1},
}


@dataclass
class PairStats:
    """What :func:`build_critic_pairs` kept and dropped (``dropped`` counts trajectories by reason)."""

    trajectories: int = 0
    tasks: int = 0
    tasks_with_pairs: int = 0
    pairs: int = 0
    dropped: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        dropped = ", ".join(f"{k}={v}" for k, v in sorted(self.dropped.items())) or "none"
        return (f"{self.pairs} pairs from {self.tasks_with_pairs}/{self.tasks} tasks and {self.trajectories} "
                f"trajectories; dropped trajectories: {dropped}")


def load_trajectories(source: Any) -> list[dict[str, Any]]:
    """Trajectory records, normalized by :func:`sweet_trl.trajectories.read_trajectories`, from a JSONL file, a
    JSON list file, a folder of JSONL files, a ``datasets.save_to_disk`` folder, a ``datasets.Dataset`` or an
    iterable of dicts.

    One record per ``episode_id`` (the one written last, so a re-graded episode replaces its failed grading); a
    partial last line of a file (an interrupted writer) is skipped; original ColBench rows get ``task_id``,
    ``episode_id`` (``<task_id>/<repeat index>``) and ``success`` (``reward >= 1``).
    """
    if not isinstance(source, (str, os.PathLike)) and not hasattr(source, "to_list"):
        source = list(source)
        for index, record in enumerate(source):
            if not isinstance(record, Mapping):
                raise TypeError(f"trajectory {index} is a {type(record).__name__}, expected a dict")
    records = read_trajectories(source, dedupe=False)
    latest = dedupe_latest(records)
    if len(latest) < len(records):
        logger.info("trajectories: %d earlier records of re-run episodes replaced by their latest",
                    len(records) - len(latest))
    return latest


def trajectory_task_id(record: Mapping[str, Any]) -> str:
    """The task a trajectory belongs to: ``task_id``, else ``task["task_id"]``, else the id the environments derive
    from the task's content (:func:`sweet_trl.trajectories.task_id_of`, as :func:`load_trajectories` fills it)."""
    task = record.get("task") or {}
    task_id = record.get("task_id") or task.get("task_id")
    if task_id:
        return str(task_id)
    if not any(str(task.get(k) or "").strip() for k in ("problem_description", "ground_truth")):
        raise ValueError("trajectory has neither a task_id nor a task with problem_description/ground_truth")
    return task_id_of(task)


def trajectory_privileged(record: Mapping[str, Any], key: str = "ground_truth") -> str | None:
    """The training-time information ``c`` of a trajectory: ``task[key]`` (the ground truth by default)."""
    value = (record.get("task") or {}).get(key)
    return value if isinstance(value, str) and value.strip() else None


def trajectory_reward(record: Mapping[str, Any]) -> float | None:
    reward = record.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)) or not math.isfinite(reward):
        return None
    return float(reward)


def trajectory_succeeded(record: Mapping[str, Any], success_reward: float = 1.0) -> bool:
    """``success`` when the record has it (ours), else ``reward >= success_reward`` (original ColBench rollouts).

    :func:`sweet_trl.trajectories.read_trajectories` gives original ColBench rows (``source_format == "colbench"``)
    a ``success`` of ``reward >= 1``; for them a ``success_reward`` other than 1 decides from the reward instead.
    """
    derived = record.get("source_format") == "colbench" and success_reward != 1.0
    if isinstance(record.get("success"), bool) and not derived:
        return record["success"]
    reward = trajectory_reward(record)
    return reward is not None and reward >= success_reward


def dialogue_drop_reason(record: Mapping[str, Any]) -> str | None:
    """``"malformed_dialogue"`` or ``"no_agent_turn"`` when a record's dialogue cannot be trained on, else ``None``."""
    try:
        messages = conversation_messages(record.get("dialogue_history") or [])
    except ValueError:
        return "malformed_dialogue"
    if not any(m["role"] == "assistant" for m in messages):
        return "no_agent_turn"
    return None


def infra_drop_reason(record: Mapping[str, Any]) -> str | None:
    """Why a trajectory says nothing about the agent, exactly when :func:`sweet_trl.trajectories.has_infra_error`
    holds: ``"infra_failure"`` (the policy backend or the environment stopped the episode),
    ``"grader_infra_error"`` (the backend grader failed) or ``"render_infra_error"`` (the frontend renderer
    failed); else ``None``."""
    if not has_infra_error(record):
        return None
    if is_infra_failure(record):
        return "infra_failure"
    if record.get("infra_error") is True:
        return "render_infra_error"
    return "grader_infra_error"


def _drop_reason(record: Mapping[str, Any], privileged_key: str) -> str | None:
    reason = infra_drop_reason(record)
    if reason is not None:
        return reason
    if trajectory_reward(record) is None:
        return "no_reward"
    if trajectory_privileged(record, privileged_key) is None:
        return "no_privileged"
    return dialogue_drop_reason(record)


def _episode_id(record: Mapping[str, Any], task_id: str, index: int) -> str:
    return str(record.get("episode_id") or f"{task_id}#{index}")


def make_pair(chosen: Mapping[str, Any], rejected: Mapping[str, Any], privileged_key: str = "ground_truth",
              chosen_index: int = 0, rejected_index: int = 1) -> dict[str, Any]:
    """One pair row; raises ``ValueError`` for a pair across two tasks or with a non-higher chosen reward."""
    chosen_task, rejected_task = trajectory_task_id(chosen), trajectory_task_id(rejected)
    if chosen_task != rejected_task:
        raise ValueError(f"a critic pair must come from one task, got {chosen_task!r} and {rejected_task!r}")
    privileged = trajectory_privileged(chosen, privileged_key)
    if privileged != trajectory_privileged(rejected, privileged_key):
        raise ValueError(f"task {chosen_task!r}: the two trajectories carry different task[{privileged_key!r}]")
    chosen_reward, rejected_reward = trajectory_reward(chosen), trajectory_reward(rejected)
    if chosen_reward is None or rejected_reward is None or not chosen_reward > rejected_reward:
        raise ValueError(f"task {chosen_task!r}: chosen reward {chosen_reward} must exceed rejected {rejected_reward}")
    return {
        "task_id": chosen_task,
        "privileged": privileged,
        "chosen": conversation_messages(chosen["dialogue_history"]),
        "rejected": conversation_messages(rejected["dialogue_history"]),
        "chosen_reward": chosen_reward,
        "rejected_reward": rejected_reward,
        "chosen_task_id": chosen_task,
        "rejected_task_id": rejected_task,
        "chosen_episode_id": _episode_id(chosen, chosen_task, chosen_index),
        "rejected_episode_id": _episode_id(rejected, rejected_task, rejected_index),
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

    Trajectories whose episode, grader or renderer failed (:func:`infra_drop_reason`), without a reward, without
    ``c``, without any agent turn or with a malformed dialogue are dropped and counted in ``stats.dropped`` by
    reason (and logged). Two trajectories that share a task id but not ``c`` raise
    ``ValueError``: pairing them would compare different tasks.
    """
    if rule not in ("best_vs_rest", "all_pairs"):
        raise ValueError(f"unknown pair rule {rule!r}; expected 'best_vs_rest' or 'all_pairs'")
    records = load_trajectories(trajectories)
    stats = PairStats(trajectories=len(records))
    by_task: dict[str, list[tuple[int, Mapping[str, Any]]]] = defaultdict(list)
    for index, record in enumerate(records):
        reason = _drop_reason(record, privileged_key)
        if reason is not None:
            stats.dropped[reason] += 1
            continue
        by_task[trajectory_task_id(record)].append((index, record))
    stats.tasks = len(by_task)
    rng = random.Random(seed)
    pairs: list[dict[str, Any]] = []
    for task_id, group in by_task.items():
        privileged = {trajectory_privileged(r, privileged_key) for _, r in group}
        if len(privileged) > 1:
            raise ValueError(f"task id {task_id!r} is shared by trajectories with different task[{privileged_key!r}]")
        group = sorted(group, key=lambda item: -trajectory_reward(item[1]))  # stable: ties keep rollout order
        candidates = []
        if rule == "best_vs_rest":
            best_index, best = group[0]
            if not require_success or trajectory_succeeded(best, success_reward):
                candidates = [((best_index, best), other) for other in group[1:]]
        else:
            candidates = list(itertools.combinations(group, 2))
        task_pairs = [
            make_pair(hi, lo, privileged_key, hi_index, lo_index)
            for (hi_index, hi), (lo_index, lo) in candidates
            if trajectory_reward(hi) - trajectory_reward(lo) >= min_reward_gap
            and trajectory_reward(hi) > trajectory_reward(lo)
        ]
        if max_pairs_per_task is not None and len(task_pairs) > max_pairs_per_task:
            task_pairs = rng.sample(task_pairs, max_pairs_per_task)
        stats.tasks_with_pairs += bool(task_pairs)
        pairs.extend(task_pairs)
    stats.pairs = len(pairs)
    if stats.dropped:
        logger.warning("critic pairs: dropped %s", dict(stats.dropped))
    logger.info("critic pairs: %s", stats.summary())
    return pairs, stats


def critic_pair_dataset(trajectories: Any, preset: str | None = None, **kwargs: Any):
    """:func:`build_critic_pairs` as a ``datasets.Dataset`` (``preset``: ``"backend"`` or ``"frontend"``)."""
    from colbench_gym._optional import require

    datasets = require("datasets", "hub")
    if preset is not None:
        if preset not in PAIR_RULE_PRESETS:
            raise ValueError(f"unknown pair preset {preset!r}; expected one of {sorted(PAIR_RULE_PRESETS)}")
        kwargs = {**PAIR_RULE_PRESETS[preset], **kwargs}
    pairs, stats = build_critic_pairs(trajectories, **kwargs)
    if not pairs:
        raise ValueError(f"no critic pair could be built: {stats.summary()}")
    return datasets.Dataset.from_list(pairs)
