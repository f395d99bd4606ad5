"""Held-out data for the learning tests: disjoint pools, and a check that nothing held out was trained on.

A learning claim ("the critic ranks held-out pairs", "the policy prefers the critic's choice on held-out states")
shows generalisation only if the held-out rows were never trained on. Training and held-out records are drawn
from disjoint pools of everything that varies apart from the hidden unit itself:

- the task's opening request (``descriptions``),
- the filler questions and final answers of the agent (``fillers``, ``answers``),
- the function name in the ground truth, so the privileged text ``c`` of a held-out task is never a training one.

The units (``DETAILS``), the decisive question's wording and the one message a failure of kind ``"assume"`` says
instead (``ASSUMPTION``) are shared: they are what the task is about, as the code a unit names would be in
ColBench, and a behaviour a held-out test asks a trainer to avoid must be one it could have learned to avoid. :func:`assert_held_out` checks this on the rows a test actually uses
(trajectory records, critic pairs, turn pairs, multi-turn DPO pairs) and fails the test otherwise.

    train, held_out = split_trajectories(64, 32, seed=3, failure="wrong_detail")
    assert_held_out(train, held_out)
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from helpers_tiny_models import (
    ANSWERS,
    ASSUMPTION,
    DETAILS,
    FILLERS,
    collaborative_trajectories,
    decisive_question,
    synthetic_corpus,
)

HUMAN_REPLY = "Okay, noted."
# The agent messages training and held-out rows may share: the decisive questions (one per unit) and ASSUMPTION
SHARED_AGENT_TEXTS = frozenset({decisive_question(d) for d in DETAILS} | {ASSUMPTION})

TRAIN_POOL = {
    "descriptions": ("Write a unit converter.", "Write a function that converts a measurement."),
    "fillers": FILLERS,
    "answers": ANSWERS,
    "names": ("convert", "to_unit", "change_unit", "transform"),
}
HELD_OUT_POOL = {
    "descriptions": ("I need a converter for my lab data.", "Please write a small conversion helper."),
    "fillers": (
        "Should the output be printed?",
        "Can I use the standard library only?",
        "Do you need type hints?",
        "Should empty input return None?",
        "Is a single function enough?",
        "Should I add a docstring?",
    ),
    "answers": (
        "I WANT TO ANSWER: def solve(value):\n    return float(convert(value))",
        "I WANT TO ANSWER: def solve(value):\n    result = convert(value)\n    return result",
        "I WANT TO ANSWER: def solve(values):\n    return tuple(convert(v) for v in values)",
    ),
    "names": ("rescale", "measure", "unit_value", "adapt"),
}


def learning_corpus() -> list[str]:
    """``synthetic_corpus()`` plus both pools, so held-out text is tokenised as compactly as training text."""
    lines = list(synthetic_corpus())
    for pool in (TRAIN_POOL, HELD_OUT_POOL):
        lines += list(pool["descriptions"] + pool["fillers"] + pool["answers"]) * 4
        lines += [f"def {name}(value):\n    # the result is in {d}\n    return to_{d}(value)"
                  for name in pool["names"] for d in DETAILS] * 2
    return lines


def learning_tokenizer():
    from helpers_tiny_models import tiny_tokenizer

    return tiny_tokenizer(learning_corpus())


def split_trajectories(num_train_tasks: int, num_heldout_tasks: int, seed: int = 0, **kind: Any
                       ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Training and held-out trajectory records from disjoint pools (see the module docstring), checked."""
    train = collaborative_trajectories(num_train_tasks, seed=seed, task_prefix=f"train{seed}", **TRAIN_POOL, **kind)
    held_out = collaborative_trajectories(num_heldout_tasks, seed=seed + 1000, task_prefix=f"heldout{seed}",
                                          **HELD_OUT_POOL, **kind)
    assert_held_out(train, held_out)
    return train, held_out


# ---------------------------------------------------------------------------------------------------------------
# The check

def _messages(value: Any) -> tuple[tuple[str, str], ...]:
    if isinstance(value, Mapping) and "dialogue_history" in value:
        value = value["dialogue_history"]
    return tuple((m["role"], m["content"]) for m in value)


def _views(row: Mapping[str, Any]) -> tuple[set, set, set]:
    """(whole rows, dialogues or prompts, privileged texts) of one row, as hashable keys that ignore ids."""
    rows, contexts, privileged = set(), set(), set()
    if "dialogue_history" in row:  # a trajectory record
        dialogue = _messages(row)
        rows.add(dialogue)
        contexts.add(dialogue)
        contexts.update(dialogue[:i] for i in range(1, len(dialogue), 2))  # every turn state (ends on the human)
        privileged.add((row.get("task") or {}).get("ground_truth"))
    elif "prompt" in row:  # a turn pair: a dialogue state and two messages
        prompt = _messages(row["prompt"])
        rows.add((prompt, _messages(row["chosen"]), _messages(row["rejected"])))
        contexts.add(tuple(m for m in prompt if m[0] != "system"))
    else:  # a critic pair or a multi-turn DPO pair: two whole dialogues
        chosen, rejected = (tuple(m for m in _messages(row[k]) if m[0] != "system") for k in ("chosen", "rejected"))
        rows.add((row.get("privileged"), chosen, rejected))
        contexts.update((chosen, rejected))
        privileged.add(row.get("privileged"))
    privileged.discard(None)
    return rows, contexts, privileged


def agent_texts(rows: Iterable[Mapping[str, Any]]) -> set[str]:
    """Every agent message of the rows (questions, answers, candidates)."""
    texts = set()
    for row in rows:
        for key in ("dialogue_history", "prompt", "chosen", "rejected"):
            if key in row:
                texts.update(m["content"] for m in (row[key]["dialogue_history"] if isinstance(row[key], Mapping)
                                                    else row[key]) if m["role"] == "assistant")
    return texts


def assert_held_out(train: Sequence[Mapping[str, Any]], held_out: Sequence[Mapping[str, Any]],
                    shared_agent_texts: Iterable[str] | None = None) -> None:
    """Fail unless ``held_out`` shares no row, no dialogue (or turn state), no privileged text and no agent
    message outside ``shared_agent_texts`` with ``train``.

    Rows may be trajectory records, critic pairs, turn pairs or multi-turn DPO pairs (two lists of different
    kinds may be compared: a critic's training records against the turn pairs built for a policy). A turn state
    counts as seen when a training dialogue passes through it. ``shared_agent_texts`` defaults to
    :data:`SHARED_AGENT_TEXTS`, which both sides must share for the task to be learnable at all.
    """
    train, held_out = list(train), list(held_out)
    assert train and held_out, "an empty side proves nothing"
    seen = [set(), set(), set()]
    for row in train:
        for known, new in zip(seen, _views(row)):
            known.update(new)
    for index, row in enumerate(held_out):
        rows, contexts, privileged = _views(row)
        assert not rows & seen[0], f"held-out row {index} is a training row"
        assert not contexts & seen[1], f"held-out row {index} shares a dialogue or turn state with training"
        assert not privileged & seen[2], f"held-out row {index} has a training task's privileged text: {privileged}"
    allowed = set(shared_agent_texts if shared_agent_texts is not None else SHARED_AGENT_TEXTS)
    common = (agent_texts(train) & agent_texts(held_out)) - allowed
    assert not common, f"agent messages both trained on and held out: {sorted(common)[:5]}"


def decisive_turn_pairs(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Turn pairs at each task's decisive turn state, as the policy sees it (system instructions, no ``c``): the
    successful trajectory's message chosen over the failed one's at the same turn.

    Needs ``shared_context=True`` records (a task's trajectories share the history before the decisive turn)."""
    from sweet_trl.turn_pairs import policy_conversation

    by_task: dict[str, dict[bool, Mapping[str, Any]]] = {}
    for record in records:
        by_task.setdefault(record["task_id"], {})[bool(record["success"])] = record
    pairs = []
    for task_id, sides in by_task.items():
        if set(sides) != {True, False}:
            continue
        won, lost = (policy_conversation(sides[k]) for k in (True, False))
        cut = 2 + 2 * sides[True]["decisive_turn"]  # system, request, then (agent, human) per earlier turn
        assert won[:cut] == lost[:cut], f"{task_id}: the trajectories differ before the decisive turn"
        pairs.append({"prompt": won[:cut], "chosen": [won[cut]], "rejected": [lost[cut]], "task_id": task_id})
    return pairs


# ---------------------------------------------------------------------------------------------------------------
# Summaries for multi-seed assertions

def spread(values: Sequence[float]) -> str:
    """``median (min-max)`` of per-seed values, for assertion messages."""
    return f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f}) over {len(values)} seeds"
