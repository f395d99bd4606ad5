"""Turn-level preference data for SWEET-RL's policy: turn states -> candidates -> critic ranking -> pairs.

Four stages, each reading and writing a ``datasets`` folder so that any of them can be re-run or fed from
elsewhere (the command line has one subcommand per stage)::

    from sweet_trl.turn_pairs import (TurnPairsConfig, select_turn_states, sample_candidates,
                                      rank_candidates, build_turn_pairs)
    config = TurnPairsConfig()                                    # the released recipe, see its docstring
    select_turn_states("runs/rollouts.jsonl", config, output_dir="runs/turn_states")
    sample_candidates("runs/turn_states", backend, config, output_dir="runs/candidates")   # a generation backend
    rank_candidates("runs/candidates", critic, config, output_dir="runs/ranked")           # a trained critic
    build_turn_pairs("runs/ranked", config, output_dir="runs/turn_pairs")                  # -> TurnPreferenceTrainer

1. **Turn states.** A seeded ``state_fraction`` of the trajectories; every agent turn of each (or those of
   ``state_turns``) becomes a state:
   the policy's prompt at that turn (system instructions + dialogue so far, *never* the privileged information)
   and, kept apart for the critic only, the privileged information ``c`` (the task's ground truth).
2. **Candidates.** ``num_candidates`` next messages sampled from the policy for each state, with the policy's
   mean token log-probability of each (computed without ``c``: the policy never sees it).
3. **Ranking.** The critic scores every candidate given ``c``. The ranking score is the critic's mean
   log-probability minus a baseline's: the policy's (``"critic_minus_policy_logprob"``, the released
   implementation), its frozen reference's given ``c`` (``"critic_advantage"``, the paper's wording) or the
   reference's without ``c`` (``"critic_minus_reference_without_c"``); the rules are
   :data:`sweet_trl.losses.RANKING_RULES`, one line each.
4. **Pairs.** Candidates sorted by score; ``pairs_per_turn`` seeded draws of one candidate from the upper half
   against one from the lower half, in TRL's conversational preference format::

       {"prompt": [system, user, assistant, ..., user], "chosen": [{"role": "assistant", "content": ...}],
        "rejected": [{"role": "assistant", "content": ...}], "state_id": ..., "chosen_score": ..., ...}

Failures are data: a candidate whose generation failed is left out and its error kept on the row
(``generation_errors``); a state with fewer than two usable candidates gives no pair and is counted. Sampling and
ranking append finished batches to ``<output_dir>.partial.jsonl`` and resume from it after an interruption; the
file's first line records what produced the rows (the stage's settings and the backend's or critic's name), and a
call that differs discards them with a warning instead of mixing them in.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import shutil
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from colbench_gym._optional import require
from sweet_trl.tokenization import conversation_messages
from sweet_trl.trajectories import Trajectory, read_trajectories, repair_jsonl

logger = logging.getLogger(__name__)


@dataclass
class TurnPairsConfig:
    r"""
    How turn-level preference pairs are built (defaults: the released SWEET-RL recipe).

    Parameters:
        > Turn states

        state_fraction (`float`, *optional*, defaults to `0.1`):
            Fraction of the trajectories whose agent turns become turn states, drawn with `seed`.
        max_states (`int` or `None`, *optional*, defaults to `None`):
            Keep at most this many turn states (a seeded subset), after `state_fraction` and `state_turns`.
        state_turns (`list[int]` or `None`, *optional*, defaults to `None`):
            Agent turns (0 = the first message) that become turn states; `None`: every turn, as in the paper.
            `[1]` with a two-turn budget samples only the answer turns, half the cost when only those are trained
            (`turns` below).
        env_id (`str` or `None`, *optional*, defaults to `None`):
            Environment whose system instructions start each prompt. `None` reads each record's `env_id`, or
            guesses it for original ColBench records (backend when the task has `test_cases`, else frontend).
        max_turns (`int`, *optional*, defaults to `10`):
            The episode turn limit written in the system instructions (as in the environment that collected them).
        privileged_key (`str`, *optional*, defaults to `"ground_truth"`):
            Task field holding the privileged information `c` given to the critic.

        > Candidates

        num_candidates (`int`, *optional*, defaults to `16`):
            Next messages sampled from the policy per turn state.
        temperature (`float`, *optional*, defaults to `1.0`), top_p (`float`, *optional*, defaults to `1.0`):
            Sampling of the candidates.
        max_new_tokens (`int`, *optional*, defaults to `1024`):
            Longest candidate, in tokens.
        generation_batch_size (`int`, *optional*, defaults to `8`):
            Turn states sent to the backend per call (each gets `num_candidates` samples); also the unit of
            progress saved for resuming.

        > Ranking

        ranking (`str`, *optional*, defaults to `"critic_minus_policy_logprob"`):
            `"critic_minus_policy_logprob"`: the critic's mean token log-probability of the candidate (given `c`)
            minus the policy's (without `c`), as in the released code. `"critic_advantage"`: the critic's
            advantage, its mean log-probability minus its frozen reference's (both given `c`), as in the paper.
            The policy's mean is the backend's, over every generated token (end-of-turn token included); the
            critic's is over the message's content tokens, as in the released code. These two means cover
            different tokens when the answer is forced (the forced "I WANT TO ANSWER:" opening is in the critic's
            but not in the policy's), which biases the ranking toward long candidates. `"critic_minus_reference_without_c"`:
            the critic's mean given `c` minus its frozen reference's given the dialogue alone, on the same tokens
            (the released quantity with the initial model as the policy; untrained, it ranks by how much more
            likely `c` makes a candidate).
        scoring_batch_size (`int`, *optional*, defaults to `4`):
            Turn states ranked per saved unit of progress.

        > Pairs

        pairs_per_turn (`int`, *optional*, defaults to `4`):
            Pairs drawn per turn state, each an upper-half candidate (chosen) against a lower-half one
            (rejected), distinct pairs without replacement. Fewer when the halves allow fewer.
        min_score_gap (`float`, *optional*, defaults to `0.0`):
            Keep a pair only when the chosen score exceeds the rejected one by more than this. Pairs of equal
            texts are never kept.
        turns (`list[int]` or `None`, *optional*, defaults to `None`):
            Agent turns (0 = the first message) whose states give pairs; `None`: every turn, as in the paper. The
            other turns' states are still sampled and ranked, so a ranked run can be paired again without them.

        seed (`int`, *optional*, defaults to `0`):
            Seed of the state selection, the candidate sampling and the pair draws. Each state's draws depend on
            the seed and the state's id only, so they do not change with the batch size or the row order.
    """

    state_fraction: float = 0.1
    max_states: int | None = None
    state_turns: list[int] | None = None
    env_id: str | None = None
    max_turns: int = 10
    privileged_key: str = "ground_truth"
    num_candidates: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 1024
    generation_batch_size: int = 8
    ranking: str = "critic_minus_policy_logprob"
    scoring_batch_size: int = 4
    pairs_per_turn: int = 4
    min_score_gap: float = 0.0
    turns: list[int] | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.state_fraction <= 1:
            raise ValueError(f"state_fraction must be in (0, 1], got {self.state_fraction}")
        if self.max_states is not None and self.max_states < 1:
            raise ValueError(f"max_states must be >= 1 or None, got {self.max_states}")
        if self.num_candidates < 2:
            raise ValueError(f"num_candidates must be >= 2 to form pairs, got {self.num_candidates}")
        from sweet_trl.losses import ranking_rule

        ranking_rule(self.ranking)
        if self.pairs_per_turn < 1:
            raise ValueError(f"pairs_per_turn must be >= 1, got {self.pairs_per_turn}")
        if self.generation_batch_size < 1 or self.scoring_batch_size < 1:
            raise ValueError("generation_batch_size and scoring_batch_size must be >= 1")
        if self.min_score_gap < 0:
            raise ValueError(f"min_score_gap must be >= 0, got {self.min_score_gap}")
        for name in ("state_turns", "turns"):
            turns = getattr(self, name)
            if turns is not None and (not turns or any(int(t) != t or t < 0 for t in turns)):
                raise ValueError(f"{name} must be None or a non-empty list of agent turn indices >= 0, got {turns}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class StageStats:
    """What a stage kept and why it left things out (``dropped`` counts by reason)."""

    rows_in: int = 0
    rows_out: int = 0
    dropped: Counter = field(default_factory=Counter)

    def summary(self) -> str:
        dropped = ", ".join(f"{k}={v}" for k, v in sorted(self.dropped.items())) or "none"
        return f"{self.rows_out} rows from {self.rows_in}; left out: {dropped}"

    def why_nothing(self, privileged_key: str = "ground_truth") -> str:
        """Why no row is left, and what to do: every reason counted, the most common first."""
        from sweet_trl.pairs import DROP_REASON_ADVICE

        if self.rows_in == 0:
            return "the input holds no row"
        causes = []
        for reason, count in self.dropped.most_common():
            advice = _STATE_ADVICE.get(reason) or DROP_REASON_ADVICE.get(reason.removeprefix("trajectory_"), "")
            causes.append(f"{count} left out as {reason}: {advice.format(privileged_key=privileged_key)}")
        return "; ".join(causes) or "no cause recorded"


# What to do about the reasons a turn state or its pairs are left out (trajectories': sweet_trl.pairs).
_STATE_ADVICE = {
    "state_not_after_user_message": "an agent turn right after another agent turn is no state to sample from",
    "state_turn_not_trained": "turns= excludes the agent turn of every state: widen turns",
    "state_ranking_failed": "the critic could not score these states (each row's ranking_error says why)",
    "state_fewer_than_two_candidates": "fewer than two candidates: sample more (num_candidates), see the rows' "
                                       "generation_errors",
    "state_unranked_or_too_few_candidates": "fewer than two candidates, or no critic scores: sample more "
                                            "(num_candidates), then rank them",
    "state_pick_below_top_fraction": "the critic scores these states' picks below the kept top_fraction: raise "
                                     "top_fraction to learn from more of them",
    "state_pick_below_min_score": "no candidate of these states scores min_score (with the true reward: none passes "
                                  "every test): lower min_score, or sample more candidates",
    "state_no_distinct_pair": "no two candidates of the upper and lower half differ in text and by more than "
                              "min_score_gap in score: lower min_score_gap, or sample more varied candidates "
                              "(a higher temperature)",
}


# -------------------------------------------------------------------------------------------------------------------
# Stage 1: turn states

def env_instructions(env_id: str, max_turns: int = 10) -> str:
    """The system instructions of a ColBench environment, as its ``env.unwrapped.instructions`` would read."""
    import importlib

    import colbench_gym  # noqa: F401  (registers the ids)
    from colbench_gym import ENV_IDS
    from colbench_gym.envs.dialogue import ANSWER_MARKER

    if env_id not in ENV_IDS:
        raise ValueError(f"unknown env_id {env_id!r}; expected one of {sorted(ENV_IDS)}")
    module_name, class_name = ENV_IDS[env_id].split(":")
    env_class = getattr(importlib.import_module(module_name), class_name)
    return env_class.instructions_template.format(max_turns=max_turns, marker=ANSWER_MARKER)


def policy_prompt(dialogue: Sequence[Mapping[str, Any]], agent_index: int, instructions: str) -> list[dict[str, str]]:
    """What the policy saw before its ``agent_index``-th message: system instructions and the dialogue so far."""
    messages = conversation_messages(dialogue)
    positions = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    history = messages[: positions[agent_index]]
    if history and history[0]["role"] == "system":  # the record already carries the instructions
        return history
    return [{"role": "system", "content": instructions}, *history]


def policy_conversation(record: Mapping[str, Any] | Trajectory, env_id: str | None = None, max_turns: int = 10
                        ) -> list[dict[str, str]]:
    """A whole trajectory as the policy's chat: the system instructions of ``env_id`` (default: the environment
    that played it), then the dialogue."""
    trajectory = Trajectory(record)
    dialogue = trajectory.messages
    if dialogue and dialogue[0]["role"] == "system":
        return dialogue
    return [{"role": "system", "content": env_instructions(env_id or trajectory.env_id, max_turns)}, *dialogue]


def _state_drop_reason(trajectory: Trajectory, privileged_key: str) -> str | None:
    """:meth:`Trajectory.drop_reason` without the need for a reward (turn states are ranked by the critic), with
    ``"no_privileged"`` before any other reason."""
    if trajectory.privileged(privileged_key) is None:
        return "no_privileged"
    return trajectory.drop_reason(privileged_key, needs_reward=False)


def turn_states_from_records(records: Iterable[Mapping[str, Any]], config: TurnPairsConfig
                             ) -> tuple[list[dict[str, Any]], StageStats]:
    """Select a seeded fraction of the trajectories and make every agent turn of each a turn state."""
    trajectories = [Trajectory(record) for record in records]
    stats = StageStats(rows_in=len(trajectories))
    usable = []
    for index, trajectory in enumerate(trajectories):
        reason = _state_drop_reason(trajectory, config.privileged_key)
        if reason is None:
            usable.append((index, trajectory))
        else:
            stats.dropped[f"trajectory_{reason}"] += 1
    count = min(len(usable), max(1, round(config.state_fraction * len(usable)))) if usable else 0
    chosen = sorted(random.Random(config.seed).sample(range(len(usable)), count))
    if len(usable) > count:
        stats.dropped["trajectory_not_selected"] += len(usable) - count
    instructions_cache: dict[str, str] = {}
    states = []
    for position in chosen:
        index, trajectory = usable[position]
        env_id = config.env_id or trajectory.env_id
        if env_id not in instructions_cache:
            instructions_cache[env_id] = env_instructions(env_id, config.max_turns)
        task_id = trajectory.task_id
        episode_id = trajectory.episode_key(index)
        dialogue = trajectory.messages
        agent_messages = [m for m in dialogue if m["role"] == "assistant"]
        for turn, message in enumerate(agent_messages):
            if config.state_turns is not None and turn not in config.state_turns:
                stats.dropped["state_turn_not_selected"] += 1
                continue
            prompt = policy_prompt(dialogue, turn, instructions_cache[env_id])
            if prompt[-1]["role"] != "user":
                stats.dropped["state_not_after_user_message"] += 1
                continue
            states.append({
                "state_id": f"{episode_id}/turn{turn}",
                "episode_id": episode_id,
                "task_id": task_id,
                "env_id": env_id,
                "turn": turn,
                "prompt": prompt,
                "privileged": trajectory.privileged(config.privileged_key),
                "original": message["content"],
                "trajectory_reward": trajectory.reward,
            })
    if config.max_states is not None and len(states) > config.max_states:
        stats.dropped["state_over_max_states"] += len(states) - config.max_states
        keep = sorted(random.Random(config.seed + 1).sample(range(len(states)), config.max_states))
        states = [states[i] for i in keep]
    stats.rows_out = len(states)
    return states, stats


def select_turn_states(trajectories: Any, config: TurnPairsConfig | None = None,
                       output_dir: str | Path | None = None):
    """Stage 1. ``trajectories``: anything :func:`sweet_trl.trajectories.read_trajectories` reads (JSONL file or
    folder, ``datasets`` folder or Dataset, list of records, original ColBench rollouts). Returns the turn states
    as a ``datasets.Dataset`` (saved to ``output_dir``)."""
    config = config or TurnPairsConfig()
    states, stats = turn_states_from_records(_read_records(trajectories), config)
    logger.info("turn states: %s", stats.summary())
    if not states:
        raise ValueError(f"no turn state could be made: {stats.why_nothing(config.privileged_key)} "
                         f"({stats.summary()})")
    return _finish(states, output_dir, stats)


# -------------------------------------------------------------------------------------------------------------------
# Stage 2: candidates

def sample_candidates(states: Any, backend: Any, config: TurnPairsConfig | None = None,
                      output_dir: str | Path | None = None):
    """Stage 2. Sample ``config.num_candidates`` next messages per turn state from ``backend`` (any
    :class:`sweet_trl.generation.GenerationBackend`), each with the policy's mean token log-probability.

    Adds ``candidates`` (texts), ``policy_mean_logprobs``, ``candidate_num_tokens`` and ``generation_errors``.
    Failed or empty samples are left out of ``candidates`` and their errors kept. An interrupted call resumes from
    ``<output_dir>.partial.jsonl`` only with the same backend ``name``, ``num_candidates``, ``temperature``,
    ``top_p``, ``max_new_tokens`` and ``seed``.
    """
    from sweet_trl.generation.base import SamplingParams, derive_seed

    config = config or TurnPairsConfig()
    sampling = SamplingParams(temperature=config.temperature, top_p=config.top_p,
                              max_new_tokens=config.max_new_tokens, logprobs=True)

    def sample(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seeds = [derive_seed(config.seed, "candidates", row["state_id"]) for row in batch]
        outputs = backend.generate([row["prompt"] for row in batch], n=config.num_candidates, sampling=sampling,
                                   seeds=seeds)
        if len(outputs) != len(batch):
            raise RuntimeError(f"the backend returned {len(outputs)} results for {len(batch)} prompts")
        rows = []
        for row, generations in zip(batch, outputs):
            texts, logprobs, lengths, errors = [], [], [], []
            for generation in generations:
                if generation.error is not None:
                    errors.append(generation.error)
                elif not generation.text.strip():
                    errors.append("empty candidate")
                else:
                    texts.append(generation.text)
                    logprobs.append(generation.mean_logprob)
                    lengths.append(generation.num_tokens)
            rows.append({**row, "candidates": texts, "policy_mean_logprobs": logprobs,
                         "candidate_num_tokens": lengths, "generation_errors": errors})
        return rows

    work = {"stage": "sample_candidates", "backend": _work_name(backend), "num_candidates": config.num_candidates,
            "temperature": config.temperature, "top_p": config.top_p, "max_new_tokens": config.max_new_tokens,
            "seed": config.seed}
    rows, stats = _resumable_map(_read_rows(states), sample, config.generation_batch_size, output_dir,
                                 "state_id", work)
    for row in rows:
        if row["generation_errors"]:
            stats.dropped["candidate_failed"] += len(row["generation_errors"])
    logger.info("candidates: %s", stats.summary())
    return _finish(rows, output_dir, stats)


# -------------------------------------------------------------------------------------------------------------------
# Stage 3: ranking

class CandidateScorer(Protocol):
    """What ranking needs from a critic: mean token log-probabilities of candidate next messages given ``c``.

    Called with the dialogue so far (the policy's system instructions left out: the critic is trained on dialogue
    histories, with ``c`` in front), the candidate texts and ``c``. Returns one
    ``(critic_mean_logprob, reference_mean_logprob)`` per candidate; ``nan`` marks a candidate it could not score,
    and the reference value may be ``None`` when only ``"critic_minus_policy_logprob"`` ranking is used.
    A :class:`sweet_trl.critic.SweetCritic` is adapted to this by :func:`as_candidate_scorer`.
    """

    def __call__(self, dialogue: list[dict[str, str]], candidates: list[str], privileged: str
                 ) -> Sequence[tuple[float, float | None]]: ...


def as_candidate_scorer(critic: Any, ranking: str = "critic_minus_policy_logprob") -> CandidateScorer:
    """A :class:`CandidateScorer` from a :class:`~sweet_trl.critic.SweetCritic` (or any object with its
    ``score_candidates(history, candidates, privileged, return_details=True)``; the scorer's ``name`` is the
    critic's, see :func:`rank_candidates`), or a scorer itself. With ``ranking="critic_minus_reference_without_c"``
    the reference value is the reference's mean log-prob without ``c``."""
    if hasattr(critic, "score_candidates"):
        from sweet_trl.losses import ranking_rule

        rule = ranking_rule(ranking)
        without_c = {"reference_without_privileged": True} if rule.baseline == "reference" and not (
            rule.baseline_sees_c) else {}

        def scorer(dialogue: list[dict[str, str]], candidates: list[str], privileged: str):
            details = critic.score_candidates(dialogue, candidates, privileged, return_details=True, **without_c)
            return list(zip(details.critic_mean_logps, details.ref_mean_logps))
        scorer.name = _work_name(critic)  # what a resumed ranking checks it is ranking with
        return scorer
    if callable(critic):
        return critic
    raise TypeError(f"expected a SweetCritic or a scorer callable, got {type(critic).__name__}")


def ranking_scores(critic_mean_logprobs: Sequence[float], policy_mean_logprobs: Sequence[float | None] | None,
                   reference_mean_logprobs: Sequence[float | None] | None, ranking: str) -> list[float]:
    """The ranking score of each candidate of one state (higher is better); see :class:`TurnPairsConfig`."""
    torch = require("torch", "train")
    from sweet_trl import losses

    baseline = losses.ranking_rule(ranking).baseline
    needed = policy_mean_logprobs if baseline == "policy" else reference_mean_logprobs
    if needed is None or len(needed) != len(critic_mean_logprobs) or any(v is None for v in needed):
        raise ValueError(f"ranking={ranking!r} needs the {baseline} mean log-probability of every candidate")

    def tensor(values: Sequence[float | None] | None):  # the rule reads the baseline it names, checked above
        if values is None or any(v is None for v in values):
            return None
        return torch.tensor([float(v) for v in values], dtype=torch.float64)

    scores = losses.candidate_ranking_scores(tensor(critic_mean_logprobs), ref_mean_logps=tensor(
        reference_mean_logprobs), policy_mean_logps=tensor(policy_mean_logprobs), mode=ranking)
    return [float(s) for s in scores]


def rank_candidates(candidates: Any, critic: Any, config: TurnPairsConfig | None = None,
                    output_dir: str | Path | None = None, critic_name: str | None = None):
    """Stage 3. Score every candidate with the critic (given the state's ``privileged``) and rank.

    ``critic``: a :class:`sweet_trl.critic.SweetCritic`, or a :class:`CandidateScorer` callable
    ``(dialogue, candidates, privileged) -> [(critic_mean_logprob, reference_mean_logprob), ...]``. Adds
    ``critic_mean_logprobs``, ``reference_mean_logprobs``, ``advantages`` (critic minus reference; ``None``
    without a reference), ``ranking`` (its name) and ``ranking_scores``. A state whose scoring fails keeps its error in
    ``ranking_error`` and gives no pair.

    An interrupted call resumes from ``<output_dir>.partial.jsonl`` only with the same ``ranking`` and critic:
    ``critic_name``, else the critic's ``name``, its model's ``name_or_path``, or a function's qualified name.
    Name the critic (``critic_name``, or a ``name`` attribute on a scorer function) when a scorer function wraps
    it, or another critic behind the same function would resume from this one's scores.
    """
    config = config or TurnPairsConfig()
    scorer = as_candidate_scorer(critic, config.ranking)

    def score(batch: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows = []
        for row in batch:
            out = {**row, "critic_mean_logprobs": [], "reference_mean_logprobs": [], "advantages": [],
                   "ranking": config.ranking, "ranking_scores": [], "ranking_error": None}
            if len(row["candidates"]) >= 2:
                try:
                    dialogue = [m for m in row["prompt"] if m["role"] != "system"]
                    results = list(scorer(dialogue, list(row["candidates"]), row["privileged"]))
                    if len(results) != len(row["candidates"]):
                        raise ValueError(f"scorer returned {len(results)} scores for {len(row['candidates'])} "
                                         "candidates")
                    critic = [float(c) for c, _ in results]
                    reference = [None if r is None else float(r) for _, r in results]
                    out["critic_mean_logprobs"], out["reference_mean_logprobs"] = critic, reference
                    out["advantages"] = [None if r is None else c - r for c, r in zip(critic, reference)]
                    unscored = sum(not math.isfinite(c) for c in critic)
                    if unscored:
                        logger.warning("ranking %s: the critic could not score %d of %d candidates",
                                       row["state_id"], unscored, len(critic))
                    out["ranking_scores"] = ranking_scores(critic, row["policy_mean_logprobs"], reference,
                                                           config.ranking)
                except Exception as err:  # noqa: BLE001 (one state's failure must not lose the batch)
                    out["ranking_error"] = f"{type(err).__name__}: {err}"
                    logger.warning("ranking %s failed: %s", row["state_id"], out["ranking_error"])
            rows.append(out)
        return rows

    work = {"stage": "rank_candidates", "critic": critic_name or _work_name(critic), "ranking": config.ranking}
    rows, stats = _resumable_map(_read_rows(candidates), score, config.scoring_batch_size, output_dir, "state_id",
                                 work)
    for row in rows:
        if row["ranking_error"]:
            stats.dropped["state_ranking_failed"] += 1
        elif len(row["candidates"]) < 2:
            stats.dropped["state_fewer_than_two_candidates"] += 1
    logger.info("ranking: %s", stats.summary())
    return _finish(rows, output_dir, stats)


# -------------------------------------------------------------------------------------------------------------------
# Stage 4: pairs

def draw_pairs(scores: Sequence[float], texts: Sequence[str], pairs_per_turn: int, rng: random.Random,
               min_score_gap: float = 0.0) -> list[tuple[int, int]]:
    """``(chosen, rejected)`` candidate indices: upper half against lower half, drawn without replacement.

    Candidates are sorted by score (ties keep their order); with an odd count the middle one is in neither half.
    Candidates without a finite score (the critic could not score them) take no part. Pairs whose texts are
    equal or whose score gap is not above ``min_score_gap`` are never drawn.
    """
    if len(scores) != len(texts):
        raise ValueError(f"{len(scores)} scores for {len(texts)} candidates")
    scored = [i for i, score in enumerate(scores) if score is not None and math.isfinite(score)]
    order = sorted(scored, key=lambda i: -scores[i])
    half = len(order) // 2
    upper, lower = order[:half], order[len(order) - half:]
    allowed = [(hi, lo) for hi in upper for lo in lower
               if texts[hi] != texts[lo] and scores[hi] - scores[lo] > min_score_gap]
    if len(allowed) <= pairs_per_turn:
        return allowed
    return rng.sample(allowed, pairs_per_turn)


def ranked_state(row: Mapping[str, Any], turns: Sequence[int] | None, stats: StageStats
                 ) -> tuple[list[str], list[float]] | None:
    """A ranked turn state's candidates and their scores, or ``None`` (the reason counted in ``stats``) when its
    turn is not trained, its ranking failed, or it has fewer than two candidates or no score for each."""
    if turns is not None and int(row["turn"]) not in turns:
        stats.dropped["state_turn_not_trained"] += 1
        return None
    if row.get("ranking_error"):
        stats.dropped["state_ranking_failed"] += 1
        return None
    texts, scores = list(row["candidates"]), list(row.get("ranking_scores") or [])
    if len(texts) < 2 or len(scores) != len(texts):
        stats.dropped["state_unranked_or_too_few_candidates"] += 1
        return None
    return texts, scores


def turn_pairs_from_ranked(rows: Iterable[Mapping[str, Any]], config: TurnPairsConfig
                           ) -> tuple[list[dict[str, Any]], StageStats]:
    """Pairs from ranked turn states (see :func:`draw_pairs`), with their provenance."""
    from sweet_trl.generation.base import derive_seed

    rows = list(rows)
    stats = StageStats(rows_in=len(rows))
    pairs = []
    for row in rows:
        state = ranked_state(row, config.turns, stats)
        if state is None:
            continue
        texts, scores = state
        rng = random.Random(derive_seed(config.seed, "pairs", row["state_id"]))
        drawn = draw_pairs(scores, texts, config.pairs_per_turn, rng, config.min_score_gap)
        if not drawn:
            stats.dropped["state_no_distinct_pair"] += 1
        for chosen, rejected in drawn:
            pairs.append({
                "prompt": [dict(m) for m in row["prompt"]],
                "chosen": [{"role": "assistant", "content": texts[chosen]}],
                "rejected": [{"role": "assistant", "content": texts[rejected]}],
                "state_id": row["state_id"],
                "task_id": row["task_id"],
                "turn": row["turn"],
                "chosen_score": scores[chosen],
                "rejected_score": scores[rejected],
                # what ordered the pair is the rank stage's choice (rows ranked before it was recorded: the config's)
                "ranking": row.get("ranking") or config.ranking,
            })
    stats.rows_out = len(pairs)
    return pairs, stats


def build_turn_pairs(ranked: Any, config: TurnPairsConfig | None = None, output_dir: str | Path | None = None):
    """Stage 4. Turn-level preference pairs for :class:`sweet_trl.policy_trainer.TurnPreferenceTrainer`."""
    config = config or TurnPairsConfig()
    pairs, stats = turn_pairs_from_ranked(_read_rows(ranked), config)
    logger.info("turn pairs: %s", stats.summary())
    if not pairs:
        raise ValueError(f"no turn-level pair could be built: {stats.why_nothing()} ({stats.summary()})")
    return _finish(pairs, output_dir, stats)


# -------------------------------------------------------------------------------------------------------------------
# Reading, writing, resuming

def _read_records(source: Any) -> list[dict[str, Any]]:
    return read_trajectories(source)


def _read_rows(source: Any) -> list[dict[str, Any]]:
    """Rows of a previous stage: a ``datasets`` folder or file (see ``trainer_utils.load_rows``), a Dataset or
    a list of dicts."""
    if isinstance(source, (str, Path)):
        from sweet_trl.trainer_utils import load_rows

        return load_rows(source).to_list()
    if hasattr(source, "to_list"):
        return source.to_list()
    return [dict(row) for row in source]


def _partial_path(output_dir: str | Path) -> Path:
    output_dir = Path(output_dir)
    return output_dir.with_name(output_dir.name + ".partial.jsonl")


def _work_name(obj: Any) -> str:
    """What names a backend or critic in a resume header: its ``name``, else its model's ``name_or_path``, else
    (a scorer function) its qualified name, else its type."""
    name = getattr(obj, "name", None)
    if isinstance(name, str) and name:
        return name
    path = getattr(getattr(obj, "model", None), "name_or_path", None)
    if isinstance(path, str) and path:
        return path
    if callable(obj) and hasattr(obj, "__qualname__"):
        return f"{obj.__module__}.{obj.__qualname__}"
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


_PARTIAL_FORMAT = 1


def _input_digest(row: Mapping[str, Any]) -> str:
    text = json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _json_object(line: str) -> dict[str, Any] | None:
    try:
        value = json.loads(line)
    except json.JSONDecodeError:  # a line cut short by an interruption: its batch is redone
        return None
    return value if isinstance(value, dict) else None


def _read_partial(partial: Path, work: dict[str, Any]) -> dict[str, tuple[str, dict[str, Any]]]:
    """``key -> (input digest, row)`` saved by an earlier call of the same ``work``; another work's file is removed."""
    repair_jsonl(partial)
    lines = partial.read_text(encoding="utf-8").splitlines()
    header = _json_object(lines[0]) if lines else None
    if header is None or header.get("format") != _PARTIAL_FORMAT or header.get("resume_of") != work:
        found = header.get("resume_of") if header is not None else None
        if isinstance(found, dict):
            differences = ", ".join(f"{k}: {found.get(k)!r} -> {work.get(k)!r}"
                                    for k in sorted(set(found) | set(work)) if found.get(k) != work.get(k))
            why = f"it was written by another call ({differences or 'another file format'})"
        else:
            why = "it does not say which call wrote it"
        logger.warning("discarding %s (%d saved rows): %s", partial, max(len(lines) - 1, 0), why)
        partial.unlink()
        return {}
    saved = {}
    for line in lines[1:]:
        entry = _json_object(line)
        if entry is not None and isinstance(entry.get("row"), dict) and isinstance(entry.get("key"), str):
            saved[entry["key"]] = (str(entry.get("input")), entry["row"])
    return saved


def _resumable_map(rows: list[dict[str, Any]], fn: Callable[[list[dict]], list[dict]], batch_size: int,
                   output_dir: str | Path | None, key: str, work: Mapping[str, Any]
                   ) -> tuple[list[dict[str, Any]], StageStats]:
    """Apply ``fn`` batch by batch; with ``output_dir``, append each finished batch to a partial JSONL file and
    skip the rows it already holds, so an interrupted stage resumes where it stopped.

    ``work`` says what produces the rows (the stage, the settings that change its results, the backend or critic
    name); it is the file's first line. A partial file written for other work, or without that line, is
    discarded with a warning, and a saved row is reused only when its input row is unchanged (each saved row
    keeps a digest of its input): resuming never mixes rows of two different calls.
    """
    stats = StageStats(rows_in=len(rows))
    keys = [str(row[key]) for row in rows]
    if len(set(keys)) != len(keys):
        raise ValueError(f"the input has duplicate {key!r} values; each row must be unique")
    work = json.loads(json.dumps(dict(work)))  # compared with what a header reads back as
    digests = {k: _input_digest(row) for k, row in zip(keys, rows)}
    done: dict[str, dict[str, Any]] = {}
    partial = _partial_path(output_dir) if output_dir is not None else None
    if partial is not None and partial.exists():
        saved = _read_partial(partial, work)
        done = {k: row for k, (digest, row) in saved.items() if digests.get(k) == digest}
        changed = sum(1 for k, (digest, _) in saved.items() if k in digests and digests[k] != digest)
        if changed:
            logger.warning("%s: %d saved rows were made from other input rows; redoing them", partial, changed)
        if saved:
            logger.info("resuming from %s: %d of %d rows done", partial, len(done), len(rows))
    todo = [(k, row) for k, row in zip(keys, rows) if k not in done]
    for start in range(0, len(todo), batch_size):
        batch = todo[start:start + batch_size]
        results = fn([row for _, row in batch])
        if len(results) != len(batch):
            raise RuntimeError(f"a batch of {len(batch)} rows gave {len(results)} results")
        for (k, _), result in zip(batch, results):
            done[k] = result
        if partial is not None:
            partial.parent.mkdir(parents=True, exist_ok=True)
            new_file = not partial.exists()
            with partial.open("a", encoding="utf-8") as handle:
                if new_file:
                    handle.write(json.dumps({"format": _PARTIAL_FORMAT, "resume_of": work}) + "\n")
                for (k, _), result in zip(batch, results):
                    line = {"key": k, "input": digests[k], "row": result}
                    handle.write(json.dumps(line, ensure_ascii=False) + "\n")
    out = [done[k] for k in keys]
    stats.rows_out = len(out)
    return out, stats


def _finish(rows: list[dict[str, Any]], output_dir: str | Path | None, stats: StageStats):
    """The rows as a ``datasets.Dataset``; with ``output_dir``, saved there (replacing an earlier result of a
    stage, never an unrelated folder) with ``stage_stats.json`` beside the data."""
    datasets = require("datasets", "hub")
    dataset = datasets.Dataset.from_list(rows)
    if output_dir is None:
        return dataset
    output_dir = Path(output_dir)
    if output_dir.exists() and any(output_dir.iterdir()) and not (output_dir / "dataset_info.json").exists():
        raise FileExistsError(f"{output_dir} exists and is not a saved dataset; refusing to overwrite it")
    staging = output_dir.with_name(output_dir.name + ".saving")
    if staging.exists():
        shutil.rmtree(staging)
    dataset.save_to_disk(str(staging))
    (staging / "stage_stats.json").write_text(json.dumps(
        {"rows_in": stats.rows_in, "rows_out": stats.rows_out, "dropped": dict(stats.dropped)}, indent=2))
    if output_dir.exists():
        shutil.rmtree(output_dir)
    staging.rename(output_dir)
    partial = _partial_path(output_dir)
    if partial.exists():
        partial.unlink()
    # Reopen from disk so the returned dataset is backed by the saved files, not the staging folder.
    return datasets.load_from_disk(str(output_dir))
