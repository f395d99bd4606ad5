"""Best-of-N selectors besides the trained critic: the controls a critic's picks are held to.

The ``rank`` stage scores every candidate of a turn state and best-of-N fine-tuning imitates the top one, turn-level
DPO pairs the upper half with the lower. Which candidate comes first is the selector's choice::

    sweet-rl rank --config study_cpu --run_dir runs/x --selector critic            # the trained critic (SWEET-RL)
    sweet-rl rank --config study_cpu --run_dir runs/x --selector untrained_critic  # its base model, given c
    sweet-rl rank --config study_cpu --run_dir runs/x --selector random
    sweet-rl rank --config study_cpu --run_dir runs/x --selector true_reward       # the hidden tests, where they speak

A gain of best-of-N fine-tuning with the trained critic means something only above what the same update reaches
with a random pick (the update alone), the untrained critic's pick (what ``c`` tells before training) and, where the
tests grade a candidate, the true reward's pick (the ceiling of any critic).

Each selector is a scorer of :func:`sweet_trl.turn_pairs.rank_candidates`, ``(dialogue, candidates, privileged) ->
[(score, 0.0), ...]``, ranked with ``ranking="critic_advantage"`` so that the ranking score is the selector's score
itself (the ``critic_mean_logprobs`` column then holds it, the reference column 0).
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

SELECTORS = ("critic", "untrained_critic", "random", "true_reward")
SELECTOR_RANKING = "critic_advantage"  # score minus a reference of 0: the selector's score unchanged

Scorer = Callable[[list[dict[str, str]], list[str], str], list[tuple[float, float]]]


def state_key(dialogue: Sequence[Mapping[str, str]], candidates: Sequence[str]) -> str:
    """What identifies a turn state's candidates from what a scorer is given."""
    return json.dumps([[dict(m) for m in dialogue], list(candidates)], sort_keys=True)


def random_scorer(seed: int = 0) -> Scorer:
    """Uniform scores, the same for the same state and candidates in every run with this seed (a resumed ranking
    picks what the first attempt picked)."""
    from sweet_trl.generation.base import derive_seed

    def score(dialogue: list[dict[str, str]], candidates: list[str], privileged: str) -> list[tuple[float, float]]:
        rng = random.Random(derive_seed(seed, "random_selector", state_key(dialogue, candidates)))
        return [(rng.random(), 0.0) for _ in candidates]

    score.name = f"random_selector:{seed}"  # what a resumed ranking checks it is ranking with
    return score


def grade_candidates(rows: Sequence[Mapping[str, Any]], tasks: Mapping[str, Any], grader: Any = None
                     ) -> list[dict[str, Any]]:
    """Add ``candidate_rewards`` (fraction of hidden tests passed) to each row, graded like the environment does
    (code extracted from the message, the sandboxed grader against the task's reference)."""
    from colbench_gym.execution import default_grader, extract_code

    grader = grader or default_grader()
    jobs, where = [], []
    for i, row in enumerate(rows):
        task = tasks[row["task_id"]]
        for j, text in enumerate(row["candidates"]):
            code = extract_code(text)
            if code.strip():
                jobs.append((code, task.ground_truth, task.test_cases))
                where.append((i, j))
    results = grader.grade_many(jobs) if jobs else []
    out = [{**row, "candidate_rewards": [0.0] * len(row["candidates"])} for row in rows]
    for (i, j), result in zip(where, results):
        out[i]["candidate_rewards"][j] = math.nan if result.infra_error else float(result.score)
    return out


def answers_only(candidates: Iterable[str]) -> bool:
    """Whether every candidate ends the episode with an answer (the tests grade each)."""
    from colbench_gym.envs.dialogue import ANSWER_MARKER

    return all(ANSWER_MARKER in text for text in candidates)


def true_reward_scorer(rows: Sequence[Mapping[str, Any]], tasks: Mapping[str, Any], seed: int = 0,
                       grader: Any = None) -> Scorer:
    """The tests' verdict where they give one: at a state whose every candidate answers, each candidate's fraction
    of hidden tests passed (graded here, once, for all such states); at a state where some candidate asks instead, no
    test speaks and the pick is random (``seed``). A candidate the grader could not run scores lowest."""
    answer_rows = [row for row in rows if row["candidates"] and answers_only(row["candidates"])]
    graded = grade_candidates(answer_rows, tasks, grader) if answer_rows else []
    rewards = {state_key([m for m in row["prompt"] if m["role"] != "system"], row["candidates"]):
               [-1.0 if math.isnan(r) else r for r in row["candidate_rewards"]] for row in graded}
    fallback = random_scorer(seed)

    def score(dialogue: list[dict[str, str]], candidates: list[str], privileged: str) -> list[tuple[float, float]]:
        known = rewards.get(state_key(dialogue, candidates))
        if known is None:
            return fallback(dialogue, candidates, privileged)
        return [(reward, 0.0) for reward in known]

    score.name = f"true_reward_selector:{seed}"
    return score
