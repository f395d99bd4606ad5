"""Win rate of one run against a reference run, per task (the ColBench frontend headline metric).

A run is a mapping ``task_id -> final similarity``, a list of episode records (trajectory records,
or anything with ``task_id`` and ``similarity`` or ``reward``), or a path to a JSONL file of them.
Several episodes of one task are averaged first; every score must be a finite number (a NaN, an
infinity, a bool or a string raises ``ValueError`` naming the task, never a silent tie). Tasks are
compared only where both runs have them (the others are counted in ``missing``). A task is a win
when the run's similarity exceeds the reference's by more than ``tie_tolerance`` (finite, ``>= 0``),
a loss when it is lower by more than that, else a tie; **ties count half**: ``win_rate = (wins + ties / 2) / tasks``.

    >>> win_rate({"a": 0.9, "b": 0.5, "c": 0.7}, {"a": 0.8, "b": 0.6, "c": 0.7}).win_rate
    0.5
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Run = Mapping[str, float] | Iterable[Mapping[str, Any]] | str | os.PathLike


@dataclass(frozen=True)
class WinRate:
    win_rate: float
    wins: int
    ties: int
    losses: int
    tasks: int
    missing_in_run: int = 0
    missing_in_reference: int = 0
    per_task: dict[str, float] = field(default_factory=dict, repr=False)
    """1 for a win, 0.5 for a tie, 0 for a loss."""


def _finite_score(value: Any, task_id: Any, where: str) -> float:
    """``value`` as a float when it is a finite real number (not a bool, not a string), else ``ValueError``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
        raise ValueError(f"task {task_id!r}: {where} must be a finite number, got {value!r}")
    return float(value)


def _score_of(record: Mapping[str, Any], task_id: str) -> float:
    """The first of ``similarity``, ``reward``, ``score`` that is present and not None (it must be valid)."""
    for key in ("similarity", "reward", "score"):
        if record.get(key) is not None:
            return _finite_score(record[key], task_id, repr(key))
    raise ValueError(f"record for task {task_id!r} has no numeric 'similarity' or 'reward'")


def _task_id_of(record: Mapping[str, Any]) -> str:
    if record.get("task_id") is not None:
        return str(record["task_id"])
    task = record.get("task")
    if isinstance(task, Mapping) and task.get("task_id") is not None:
        return str(task["task_id"])
    raise ValueError("record has no 'task_id' (nor task.task_id)")


def _read_jsonl(path: str | os.PathLike) -> list[Any]:
    records = []
    with Path(path).open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise ValueError(f"{path} line {number} is not JSON: {err}") from err
    return records


def per_task_scores(run: Run) -> dict[str, float]:
    """Mean final similarity per task.

    Every score must be a finite real number (``bool`` and strings are refused): a ``ValueError``
    names the task otherwise, so a NaN never turns into a silent tie.
    """
    if isinstance(run, (str, os.PathLike)):
        run = _read_jsonl(run)
    if isinstance(run, Mapping):
        scores: dict[str, float] = {}
        keys: dict[str, Any] = {}
        for task_id, value in run.items():
            if str(task_id) in keys:
                raise ValueError(f"task ids {keys[str(task_id)]!r} and {task_id!r} are the same task {str(task_id)!r}")
            keys[str(task_id)] = task_id
            scores[str(task_id)] = _finite_score(value, task_id, "the score")
        return scores
    totals: dict[str, list[float]] = defaultdict(list)
    for record in run:
        if not isinstance(record, Mapping):
            raise TypeError(f"a run is a mapping task_id -> score, a list of episode records (mappings) or a JSONL "
                            f"path; got a record of type {type(record).__name__}")
        task_id = _task_id_of(record)
        totals[task_id].append(_score_of(record, task_id))
    return {task_id: sum(values) / len(values) for task_id, values in totals.items()}


def win_rate(run: Run, reference_run: Run, tie_tolerance: float = 1e-6) -> WinRate:
    """Fraction of shared tasks where ``run`` beats ``reference_run`` (ties count half).

    ``tie_tolerance`` must be finite and ``>= 0``; scores must be finite numbers (see :func:`per_task_scores`).
    """
    if isinstance(tie_tolerance, bool) or not isinstance(tie_tolerance, numbers.Real) \
            or not math.isfinite(tie_tolerance) or tie_tolerance < 0:
        raise ValueError(f"tie_tolerance must be a finite number >= 0, got {tie_tolerance!r}")
    ours, theirs = per_task_scores(run), per_task_scores(reference_run)
    shared = sorted(set(ours) & set(theirs))
    if not shared:
        raise ValueError("the two runs have no task in common")
    outcome: dict[str, float] = {}
    for task_id in shared:
        difference = ours[task_id] - theirs[task_id]
        outcome[task_id] = 1.0 if difference > tie_tolerance else 0.0 if difference < -tie_tolerance else 0.5
    wins = sum(value == 1.0 for value in outcome.values())
    ties = sum(value == 0.5 for value in outcome.values())
    return WinRate(
        win_rate=sum(outcome.values()) / len(shared), wins=wins, ties=ties, losses=len(shared) - wins - ties,
        tasks=len(shared), missing_in_run=len(set(theirs) - set(ours)),
        missing_in_reference=len(set(ours) - set(theirs)), per_task=outcome,
    )
