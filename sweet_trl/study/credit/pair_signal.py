"""Where a critic's training pairs differ before the answer: what the human told each side.

The Bradley-Terry loss sees only which of two trajectories of a task did better; which turn made the difference is
the critic's to find. A question turn can earn credit from a pair only where the two trajectories' questions differ,
and it deserves it only where they drew different replies. :func:`sweet_trl.pairs.difference_before_answer` puts
each pair in one class (the same questions, the same told, the chosen or the rejected side told more, told
different things); this module counts them. ``sweet-rl credit`` adds the counts to its scaling and variant tables
(``pairs_by_what_the_human_told``)::

    python -c "from sweet_trl.study.credit.pair_signal import pair_signal_of_file as f; \\
               print(f('runs/credit/critic_pairs/pairs.jsonl'))"
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from sweet_trl.pairs import DIFFERENCES, difference_before_answer


def pair_signal(pairs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Counts of :data:`~sweet_trl.pairs.DIFFERENCES` over the pairs, and each class's share."""
    counts = dict.fromkeys(DIFFERENCES, 0)
    for pair in pairs:
        counts[difference_before_answer(pair)] += 1
    total = sum(counts.values())
    return {"pairs": total, "counts": counts,
            "fractions": {name: (count / total if total else None) for name, count in counts.items()}}


def pair_signal_of_file(path: str | Path) -> dict[str, Any]:
    """:func:`pair_signal` of a ``pairs.jsonl`` file (``sweet-rl critic-pairs``' output)."""
    with open(path, encoding="utf-8") as handle:
        return pair_signal(json.loads(line) for line in handle if line.strip())
