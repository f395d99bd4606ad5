"""Intervals for the study: percentile bootstrap over tasks, for one policy and for a paired difference.

Episodes (or answer turns, or critic picks) of one task are not independent draws (a task is easy or hard for
every episode), so the resampling unit is always the task: a score on a task is the mean over its observations,
and a resample draws tasks with replacement. Two policies measured on the same tasks are compared *paired*: the
difference is taken per task, then resampled, which removes the task-difficulty variance the two share. Every
interval of the study and its scripts comes from :func:`bootstrap_mean` through one of the functions below, and its
``tasks`` is the number of tasks resampled.

    >>> bootstrap_mean([0.0, 0.5, 1.0, 1.0], samples=2000, seed=0).low <= 0.625
    True
    >>> bootstrap_by_task([("a", 1.0), ("a", 1.0), ("b", 0.0)], samples=2000).tasks
    2
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np

DEFAULT_SAMPLES = 10_000
DEFAULT_LEVEL = 0.95


@dataclass(frozen=True)
class Interval:
    """A point estimate (the mean over tasks) and its percentile-bootstrap interval."""

    mean: float
    low: float
    high: float
    tasks: int
    level: float = DEFAULT_LEVEL

    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, float]:
        return asdict(self)

    def format(self, scale: float = 100.0, digits: int = 1) -> str:
        """``34.4 [28.1, 40.6]`` (in points when ``scale`` is 100)."""
        return f"{self.mean * scale:.{digits}f} [{self.low * scale:.{digits}f}, {self.high * scale:.{digits}f}]"


def _check(values: Sequence[float], samples: int, level: float) -> list[float]:
    values = [float(v) for v in values]
    if not values:
        raise ValueError("no task to bootstrap over")
    if any(not math.isfinite(v) for v in values):
        raise ValueError("per-task values must be finite numbers")
    if not isinstance(samples, int) or samples < 100:
        raise ValueError(f"samples must be an int >= 100, got {samples!r}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    return values


def bootstrap_mean(values: Sequence[float], samples: int = DEFAULT_SAMPLES, level: float = DEFAULT_LEVEL,
                   seed: int = 0) -> Interval:
    """Mean of per-task values with a percentile bootstrap interval (tasks resampled with replacement)."""
    values = _check(values, samples, level)
    data = np.asarray(values)
    draws = np.random.default_rng(seed).integers(0, len(data), size=(samples, len(data)))
    means = data[draws].mean(axis=1)
    tail = (1 - level) / 2
    low, high = np.quantile(means, [tail, 1 - tail])
    return Interval(mean=float(data.mean()), low=float(low), high=float(high), tasks=len(data), level=level)


def paired_difference(ours: Mapping[str, float], theirs: Mapping[str, float], samples: int = DEFAULT_SAMPLES,
                      level: float = DEFAULT_LEVEL, seed: int = 0) -> Interval:
    """``ours - theirs`` over the tasks both were evaluated on, per task, then bootstrapped.

    Both mappings are task id -> per-task score; they must cover the same tasks (a paired comparison on
    different task sets would compare the tasks, not the policies).
    """
    if set(ours) != set(theirs):
        missing = sorted(set(ours) ^ set(theirs))[:5]
        raise ValueError(f"paired difference needs the same tasks on both sides; differing: {missing}")
    tasks = sorted(ours)
    return bootstrap_mean([ours[t] - theirs[t] for t in tasks], samples=samples, level=level, seed=seed)


def task_means(observations: Iterable[tuple[str, float]]) -> dict[str, float]:
    """``{task: mean}`` of ``(task, value)`` observations (episodes, answer turns, picks of one task)."""
    grouped: dict[str, list[float]] = {}
    for task, value in observations:
        grouped.setdefault(str(task), []).append(float(value))
    return {task: sum(values) / len(values) for task, values in grouped.items()}


def bootstrap_by_task(observations: Iterable[tuple[str, float]], samples: int = DEFAULT_SAMPLES,
                      level: float = DEFAULT_LEVEL, seed: int = 0) -> Interval:
    """The mean over tasks of ``(task, value)`` observations, averaged per task first, with tasks resampled: the
    observations of a task stay together (a cluster bootstrap), so correlated turns of one task do not narrow the
    interval."""
    return bootstrap_mean(list(task_means(observations).values()), samples=samples, level=level, seed=seed)


def paired_by_task(ours: Mapping[str, float], theirs: Mapping[str, float], task_of: Mapping[str, str],
                   samples: int = DEFAULT_SAMPLES, level: float = DEFAULT_LEVEL, seed: int = 0) -> Interval:
    """``ours - theirs`` over the observations both measured (keys: turn or episode ids, ``task_of`` maps each to
    its task), averaged per task, then tasks resampled."""
    shared = sorted(set(ours) & set(theirs))
    if not shared:
        raise ValueError("a paired difference needs observations in common; none are")
    missing = [key for key in shared if key not in task_of]
    if missing:
        raise ValueError(f"no task for {len(missing)} observations, e.g. {missing[:3]}")
    return bootstrap_by_task([(task_of[key], ours[key] - theirs[key]) for key in shared], samples=samples,
                             level=level, seed=seed)


def per_task_means(rows: Sequence[Mapping[str, object]], key: str) -> dict[str, float]:
    """``{task_id: row[key]}`` from an evaluation's ``per_task.json`` rows (each row already averages its
    episodes)."""
    out: dict[str, float] = {}
    for row in rows:
        value = row.get(key)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ValueError(f"per-task row {row.get('task_id')!r} has no numeric {key!r}")
        out[str(row["task_id"])] = float(value)
    return out
