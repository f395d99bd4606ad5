"""How well a ranker's scores of one state's candidates agree with their Monte Carlo values.

Candidates of one state that are the same message are one action: they are merged first (their Monte Carlo values
pooled, weighted by continuations played; their scores averaged, equal for any ranker that reads only the message; a
random pick still picks a message as often as it was sampled). Without that, copies of one question whose
continuations happened to differ would count as a spread of values that no ranker can order, and put every ranker at
chance on that state. Then, per state, only over distinct candidates with a value (and, per ranker, a finite score),
and only at states whose values differ (elsewhere every order is right and no ranker can be told from another):

* ``spearman``: rank correlation of scores and values (average ranks for ties; 0 when the ranker scores every
  candidate the same: it says nothing);
* ``top1``: its first choice is a candidate of the best value (ties at the top of the scores are split evenly, so a
  ranker that cannot tell gets chance credit);
* ``pick_value``: the value of its first choice (the same split).

Each figure is averaged per task, then over tasks with a bootstrap interval that resamples tasks
(:mod:`sweet_trl.study.stats`); two rankers are compared paired, on the states both scored.

    >>> state_metrics([0.0, 1.0, 0.5], [0.1, 0.9, 0.2])["top1"]
    1.0
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from sweet_trl.study.stats import bootstrap_by_task, paired_by_task

METRICS = ("spearman", "top1", "pick_value")


def average_ranks(values: Sequence[float]) -> np.ndarray:
    """Ranks 1..n, ties sharing their mean rank."""
    values = np.asarray(values, dtype=float)
    order = np.argsort(values, kind="mergesort")
    ranks = np.empty(len(values))
    sorted_values = values[order]
    start = 0
    while start < len(values):
        end = start
        while end + 1 < len(values) and sorted_values[end + 1] == sorted_values[start]:
            end += 1
        ranks[order[start:end + 1]] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def spearman(scores: Sequence[float], values: Sequence[float]) -> float:
    """Spearman's rank correlation; 0 when either side is constant (no order to agree with)."""
    a, b = average_ranks(scores), average_ranks(values)
    a, b = a - a.mean(), b - b.mean()
    denominator = math.sqrt(float((a * a).sum() * (b * b).sum()))
    return float((a * b).sum() / denominator) if denominator > 0 else 0.0


def state_metrics(values: Sequence[float], scores: Sequence[float]) -> dict[str, float] | None:
    """The three figures of one ranker at one state, or None when fewer than two candidates have both a value and
    a finite score, or their values are all equal."""
    pairs = [(float(s), float(v)) for s, v in zip(scores, values) if math.isfinite(s) and math.isfinite(v)]
    if len(pairs) < 2 or max(v for _, v in pairs) == min(v for _, v in pairs):
        return None
    best = max(v for _, v in pairs)
    top = max(s for s, _ in pairs)
    picked = [v for s, v in pairs if s == top]
    return {"spearman": spearman([s for s, _ in pairs], [v for _, v in pairs]),
            "top1": sum(v == best for v in picked) / len(picked),
            "pick_value": sum(picked) / len(picked)}


def chance_metrics(values: Sequence[float], copies: Sequence[int] | None = None) -> dict[str, float] | None:
    """What a uniformly random pick among the sampled candidates scores in expectation (Spearman 0): a distinct
    candidate sampled ``copies`` times is picked that much more often, as a random best-of-N selector picks it."""
    copies = [1] * len(values) if copies is None else copies
    finite = [(float(v), n) for v, n in zip(values, copies) if math.isfinite(v)]
    if len(finite) < 2 or max(v for v, _ in finite) == min(v for v, _ in finite):
        return None
    best, total = max(v for v, _ in finite), sum(n for _, n in finite)
    return {"spearman": 0.0, "top1": sum(n for v, n in finite if v == best) / total,
            "pick_value": sum(v * n for v, n in finite) / total}


def _copies_of(candidates: Sequence[str]) -> dict[str, list[int]]:
    """Each distinct candidate's positions, in order of first appearance."""
    groups: dict[str, list[int]] = {}
    for index, candidate in enumerate(candidates):
        groups.setdefault(candidate, []).append(index)
    return groups


def merge_identical(candidates: Sequence[str], values: Sequence[float], weights: Sequence[float] | None = None,
                    scores: Sequence[float] | None = None) -> tuple[list[float], list[float] | None]:
    """One value (and score) per distinct candidate, in order of first appearance: the values of a message's copies
    averaged with ``weights`` (continuations played; 1 each by default) over the finite ones (NaN if none is), its
    scores averaged over the finite ones (NaN if none is).

        >>> merge_identical(["a", "b", "a"], [1.0, 0.0, 0.0], [3, 1, 1], [2.0, 1.0, 2.0])
        ([0.75, 0.0], [2.0, 1.0])
    """
    weights = [1.0] * len(values) if weights is None else weights
    groups = _copies_of(candidates)

    def mean(numbers: Sequence[tuple[float, float]]) -> float:
        finite = [(x, w) for x, w in numbers if math.isfinite(x) and w > 0]
        total = sum(w for _, w in finite)
        return sum(x * w for x, w in finite) / total if total else math.nan

    merged_values = [mean([(float(values[i]), float(weights[i])) for i in group]) for group in groups.values()]
    merged_scores = None if scores is None else [mean([(float(scores[i]), 1.0) for i in group])
                                                 for group in groups.values()]
    return merged_values, merged_scores


def distinct_values(row: Mapping[str, Any], ranker: str | None = None) -> tuple[list[float], list[float] | None]:
    """A ground-truth row's values (and ``ranker``'s scores) per distinct candidate (:func:`merge_identical`); a row
    without ``candidates`` is taken as it is."""
    scores = row["scores"][ranker] if ranker is not None else None
    if "candidates" not in row:
        return list(row["values"]), None if scores is None else list(scores)
    return merge_identical(row["candidates"], row["values"], row.get("samples"), scores)


def copies(row: Mapping[str, Any]) -> list[int]:
    """How many times each distinct candidate of a row was sampled (the order of :func:`distinct_values`)."""
    if "candidates" not in row:
        return [1] * len(row["values"])
    return [len(group) for group in _copies_of(row["candidates"]).values()]


def per_state(rows: Sequence[Mapping[str, Any]], ranker: str) -> dict[str, dict[str, float]]:
    """``state_id -> figures`` of ``ranker`` (a name in each row's ``scores``; ``"random"``: chance), over each
    state's distinct candidates."""
    out = {}
    for row in rows:
        if ranker == "random":
            figures = chance_metrics(distinct_values(row)[0], copies(row))
        elif ranker in row.get("scores", {}):
            figures = state_metrics(*distinct_values(row, ranker))
        else:
            figures = None
        if figures is not None:
            out[row["state_id"]] = figures
    return out


def summarise(rows: Sequence[Mapping[str, Any]], ranker: str, seed: int = 0, samples: int = 10_000
              ) -> dict[str, Any]:
    """Per metric ``{"mean", "low", "high", "tasks"}`` over ``rows`` (one kind of turn), and ``states``."""
    task_of = {row["state_id"]: str(row["task_id"]) for row in rows}
    figures = per_state(rows, ranker)
    out: dict[str, Any] = {"states": len(figures)}
    for metric in METRICS:
        observations = [(task_of[state], f[metric]) for state, f in figures.items()]
        out[metric] = _interval(bootstrap_by_task(observations, samples=samples, seed=seed)) if observations else None
    return out


def paired(rows: Sequence[Mapping[str, Any]], ours: str, theirs: str, seed: int = 0, samples: int = 10_000
           ) -> dict[str, Any]:
    """``ours - theirs`` per metric on the states both scored, paired by task."""
    task_of = {row["state_id"]: str(row["task_id"]) for row in rows}
    a, b = per_state(rows, ours), per_state(rows, theirs)
    shared = sorted(set(a) & set(b))
    out: dict[str, Any] = {"states": len(shared)}
    for metric in METRICS:
        if not shared:
            out[metric] = None
            continue
        interval = paired_by_task({s: a[s][metric] for s in shared}, {s: b[s][metric] for s in shared},
                                  {s: task_of[s] for s in shared}, samples=samples, seed=seed)
        out[metric] = _interval(interval)
    return out


def split_half(row: Mapping[str, Any]) -> tuple[list[float], list[float], list[int]] | None:
    """The row's distinct candidates valued twice from disjoint continuations (``returns``: the even-numbered ones
    and the odd-numbered ones; a candidate graded exactly has that value in both): ``(values from the odd half,
    scores from the even half, copies)``; ``None`` without ``returns`` or when a candidate has fewer than two."""
    if "returns" not in row:
        return None
    groups = _copies_of(row["candidates"]) if "candidates" in row else {i: [i] for i in range(len(row["values"]))}
    halves: list[tuple[float, float]] = []
    for group in groups.values():
        played = [float(r) for i in group for r in row["returns"][i] if math.isfinite(float(r))]
        exact = all(row.get("exact", [False] * len(row["values"]))[i] for i in group)
        if exact and played:
            halves.append((played[0], played[0]))
        elif len(played) >= 2:
            even, odd = played[0::2], played[1::2]
            halves.append((sum(even) / len(even), sum(odd) / len(odd)))
        else:
            return None
    return [odd for _, odd in halves], [even for even, _ in halves], [len(g) for g in groups.values()]


def noise_ceiling(rows: Sequence[Mapping[str, Any]], seed: int = 0, samples: int = 10_000) -> dict[str, Any]:
    """What the Monte Carlo values themselves can tell, as a reference for every ranker: a ranker that knows half of
    each candidate's continuations (:func:`split_half`), scored against the other half, beside a random pick scored
    against that same half. It needs no model; its top-1 is low where the best candidate is a matter of the
    continuations' luck (a few continuations, close values), and no ranker can be expected to agree with such a
    best much more often than it does (its figures use half the continuations, so they understate a little what a
    ranker that knew the values could reach against all of them)."""
    task_of = {row["state_id"]: str(row["task_id"]) for row in rows}
    knows, chance = {}, {}
    for row in rows:
        halves = split_half(row)
        if halves is None:
            continue
        values, scores, counts = halves
        figures, guess = state_metrics(values, scores), chance_metrics(values, counts)
        if figures is not None and guess is not None:
            knows[row["state_id"]], chance[row["state_id"]] = figures, guess
    out: dict[str, Any] = {"states": len(knows)}
    for name, figures in (("split_half", knows), ("random", chance)):
        out[name] = {metric: _interval(bootstrap_by_task([(task_of[s], f[metric]) for s, f in figures.items()],
                                                         samples=samples, seed=seed)) if figures else None
                     for metric in METRICS}
    return out


def reply_share(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """How much of the question values' spread is which reply the question drew: over the states whose distinct
    candidates' values differ, the share of their spread (sum of squares about each state's mean) that lies between
    the groups of candidates the human answered alike (``first_replies``: a candidate's most frequent reply). 1 when
    the reply alone orders the values, 0 when every question drew the same reply. It describes a human whose reply
    is a function of the question (the offline simulators); a model-written human words each reply its own way, so
    every candidate is a group of its own and the share is 1. ``None`` without ``first_replies`` or spread."""
    between = within = 0.0
    states = 0
    for row in rows:
        if "first_replies" not in row:
            return None
        groups = _copies_of(row["candidates"]) if "candidates" in row else {i: [i] for i in range(len(row["values"]))}
        values = distinct_values(row)[0]
        replies = []
        for group in groups.values():
            said = [reply for i in group for reply in row["first_replies"][i] if reply is not None]
            replies.append(max(set(said), key=said.count) if said else None)
        pairs = [(value, reply) for value, reply in zip(values, replies) if math.isfinite(value)]
        if len(pairs) < 2 or max(v for v, _ in pairs) == min(v for v, _ in pairs):
            continue
        states += 1
        mean = sum(v for v, _ in pairs) / len(pairs)
        by_reply: dict[Any, list[float]] = {}
        for value, reply in pairs:
            by_reply.setdefault(reply, []).append(value)
        for group_values in by_reply.values():
            group_mean = sum(group_values) / len(group_values)
            between += len(group_values) * (group_mean - mean) ** 2
            within += sum((v - group_mean) ** 2 for v in group_values)
    if not states:
        return None
    return {"states": states, "share": between / (between + within)}


def _interval(interval: Any) -> dict[str, Any]:
    return {"mean": interval.mean, "low": interval.low, "high": interval.high, "tasks": interval.tasks}
