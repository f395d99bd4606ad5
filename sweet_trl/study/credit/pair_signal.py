"""Where a critic's training pairs differ before the answer: what the human told each side.

The Bradley-Terry loss sees only which of two trajectories of a task did better; which turn made the difference is
the critic's to find. A question turn can earn credit from a pair only where the two trajectories' questions differ,
and it deserves it only where they drew different replies. Each pair falls in one class:

- ``same_questions``: the agent's turns before its last are the same messages on both sides. Their advantages
  cancel in the score difference: the pair says nothing about question turns.
- ``same_told``: the questions differ but the human told both sides the same (the same sentences, "I don't know."
  left out). The answer decided; the loss still moves each side's question credit with its outcome, which at
  question turns is noise.
- ``chosen_told_more`` / ``rejected_told_more``: one side was told everything the other was and more. Question
  credit the pair can teach, in the right direction or against it.
- ``told_different``: each side was told something the other was not (with a model-written human, nearly every
  pair: its wording varies).

The counts describe the data the critic learns question credit from; ``sweet-rl credit`` adds them to its scaling
and variant tables (``pairs_by_what_the_human_told``)::

    python -c "from sweet_trl.study.credit.pair_signal import pair_signal_of_file as f; \\
               print(f('runs/credit/critic_pairs/pairs.jsonl'))"
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from colbench_gym.simulators.base import DONT_KNOW

CLASSES = ("same_questions", "same_told", "chosen_told_more", "rejected_told_more", "told_different")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _messages(side: Any) -> list[Mapping[str, str]]:
    if isinstance(side, Mapping):
        side = side.get("dialogue_history", [])
    return [m for m in side if isinstance(m, Mapping)]


def told(dialogue: Sequence[Mapping[str, str]]) -> frozenset[str]:
    """The sentences the human said after the task's opening message, "I don't know." left out."""
    replies = [m for m in dialogue if m.get("role") == "user"][1:]
    return frozenset(sentence for m in replies if m.get("content", "").strip() != DONT_KNOW
                     for sentence in _SENTENCE_END.split(m.get("content", "").strip()) if sentence)


def questions(dialogue: Sequence[Mapping[str, str]]) -> tuple[str, ...]:
    """The agent's messages before its last (the answer, in an episode that ended with one)."""
    return tuple(m.get("content", "") for m in dialogue if m.get("role") == "assistant")[:-1]


def classify(pair: Mapping[str, Any]) -> str:
    """One of :data:`CLASSES` for a critic pair row (``chosen`` and ``rejected`` message lists)."""
    chosen, rejected = _messages(pair["chosen"]), _messages(pair["rejected"])
    if questions(chosen) == questions(rejected):
        return "same_questions"
    told_chosen, told_rejected = told(chosen), told(rejected)
    if told_chosen == told_rejected:
        return "same_told"
    if told_rejected < told_chosen:
        return "chosen_told_more"
    if told_chosen < told_rejected:
        return "rejected_told_more"
    return "told_different"


def pair_signal(pairs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of :data:`CLASSES` over the pairs, and each class's share."""
    counts = dict.fromkeys(CLASSES, 0)
    for pair in pairs:
        counts[classify(pair)] += 1
    total = sum(counts.values())
    return {"pairs": total, "counts": counts,
            "fractions": {name: (count / total if total else None) for name, count in counts.items()}}


def pair_signal_of_file(path: str | Path) -> dict[str, Any]:
    """:func:`pair_signal` of a ``pairs.jsonl`` file (``sweet-rl critic-pairs``' output)."""
    with open(path, encoding="utf-8") as handle:
        return pair_signal(json.loads(line) for line in handle if line.strip())
