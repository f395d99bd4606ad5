"""SWEET-RL maths as small pure torch functions (arXiv 2503.15478).

Shapes: ``B`` sequences, ``L`` positions, ``T`` agent turns. ``turn_ids[b, i] = k >= 1`` marks position ``i`` as a
token of the ``k``-th agent turn of sequence ``b``; ``0`` marks everything else (privileged prefix, human turns,
template tokens, padding). Per-token log-probabilities are aligned with the tokens they score.

The critic's advantage of agent turn ``t`` is the mean, over the turn's action tokens, of

    log pi_critic(token | o_t, earlier tokens, c) - log pi_ref(token | o_t, earlier tokens, c)

and the critic is trained with the Bradley-Terry loss ``-log sigmoid(beta * (score(chosen) - score(rejected)))``,
where a trajectory's score sums the advantages of its agent turns (``"per_turn_sum"``, the paper), or averages
the log-ratio over all its agent tokens at once (``"trajectory_mean"``, the released implementation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

ScoreNormalization = Literal["per_turn_sum", "trajectory_mean"]
SCORE_NORMALIZATIONS = ("per_turn_sum", "trajectory_mean")


@dataclass(frozen=True)
class RankingRule:
    """How a candidate turn is ranked: the critic's mean token log-prob of it, given ``c``, minus a baseline's."""

    baseline: Literal["reference", "policy"]  # the critic's frozen reference model, or the policy that sampled it
    baseline_sees_c: bool  # whether the baseline reads ``c`` in front of the dialogue (the policy never does)


RANKING_RULES: dict[str, RankingRule] = {
    # the released code: what the critic likes more than the policy already does
    "critic_minus_policy_logprob": RankingRule("policy", baseline_sees_c=False),
    # the paper's wording: the critic's advantage over its reference, both given c
    "critic_advantage": RankingRule("reference", baseline_sees_c=True),
    # the released code's quantity with the initial model standing for the policy, on exactly the tokens the critic
    # scores; before any training it is the candidate's pointwise mutual information with c
    "critic_minus_reference_without_c": RankingRule("reference", baseline_sees_c=False),
}
RANKING_MODES = tuple(RANKING_RULES)


def ranking_rule(mode: str) -> RankingRule:
    """The rule named ``mode`` (a ``ValueError`` naming the known ones otherwise)."""
    if mode not in RANKING_RULES:
        raise ValueError(f"unknown ranking {mode!r}; expected one of {tuple(RANKING_RULES)}")
    return RANKING_RULES[mode]


def token_logps(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """Log-probability of each token given the ones before it: ``[B, L, V]`` logits -> ``[B, L]`` (first is 0).

    The first token has no prediction, so its entry is 0 and it must never be scored (``turn_ids == 0``).
    """
    logps = torch.gather(logits[:, :-1].float().log_softmax(-1), 2, input_ids[:, 1:, None]).squeeze(2)
    return F.pad(logps, (1, 0))


def sum_by_turn(values: torch.Tensor, turn_ids: torch.Tensor, num_turns: int) -> torch.Tensor:
    """Sum ``values [B, L]`` over the positions of each agent turn: ``[B, T]`` (0 for positions with id 0)."""
    out = values.new_zeros(values.size(0), num_turns + 1)
    return out.scatter_add(1, turn_ids.long(), values)[:, 1:]


def count_by_turn(turn_ids: torch.Tensor, num_turns: int) -> torch.Tensor:
    """Number of tokens of each agent turn: ``[B, T]`` (0 for turns a sequence does not have)."""
    return sum_by_turn(torch.ones_like(turn_ids, dtype=torch.float32), turn_ids, num_turns)


def turn_advantages(turn_logps: torch.Tensor, ref_turn_logps: torch.Tensor, turn_counts: torch.Tensor) -> torch.Tensor:
    """Per-turn mean log-ratio ``[B, T]`` from per-turn log-prob sums; 0 where a turn has no token."""
    return (turn_logps - ref_turn_logps) / turn_counts.clamp(min=1)


def trajectory_scores(
    turn_logps: torch.Tensor,
    ref_turn_logps: torch.Tensor,
    turn_counts: torch.Tensor,
    normalization: ScoreNormalization = "per_turn_sum",
) -> torch.Tensor:
    """Score ``[B]`` of each trajectory from its per-turn log-prob sums ``[B, T]``.

    ``"per_turn_sum"``: the sum over turns of each turn's mean log-ratio (every turn weighs the same).
    ``"trajectory_mean"``: the log-ratio averaged over all agent tokens (long turns weigh more).
    """
    if normalization == "per_turn_sum":
        return turn_advantages(turn_logps, ref_turn_logps, turn_counts).sum(dim=1)
    if normalization == "trajectory_mean":
        return (turn_logps - ref_turn_logps).sum(dim=1) / turn_counts.sum(dim=1).clamp(min=1)
    raise ValueError(f"unknown score normalization {normalization!r}; expected one of {SCORE_NORMALIZATIONS}")


def preference_loss(
    chosen_scores: torch.Tensor, rejected_scores: torch.Tensor, beta: float = 0.1
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Bradley-Terry loss ``mean(-log sigmoid(beta * (chosen - rejected)))`` and per-pair metrics (detached)."""
    margins = beta * (chosen_scores - rejected_scores)
    loss = -F.logsigmoid(margins).mean()
    metrics = {
        "pair_accuracy": (margins > 0).float().detach(),
        "margin": margins.detach(),
        "scores/chosen": chosen_scores.detach(),
        "scores/rejected": rejected_scores.detach(),
    }
    return loss, metrics


def turn_advantage_penalty(advantages: torch.Tensor, turn_counts: torch.Tensor) -> torch.Tensor:
    """Mean squared per-turn advantage ``[B, T] -> []`` over the turns that have tokens.

    The Bradley-Terry loss constrains only the sum of a trajectory's turn advantages, and only where the chosen
    and rejected trajectories differ: a turn whose advantage does not help rank the pair (an action taken before
    the trajectories part, or one repeated after) is free to drift, and part of the margin may be carried by turns
    that merely follow the decisive one. Adding ``coef * penalty`` to the loss keeps the pair ranking as the loss's
    only use of an advantage and pulls every turn that does not earn its advantage back to 0 (the reference).
    """
    present = (turn_counts > 0).to(advantages.dtype)
    return (advantages.pow(2) * present).sum() / present.sum().clamp(min=1)


def mean_logps(turn_logps: torch.Tensor, turn_counts: torch.Tensor) -> torch.Tensor:
    """Mean token log-probability of each turn ``[B, T]`` from per-turn sums (0 where a turn has no token)."""
    return turn_logps / turn_counts.clamp(min=1)


def candidate_ranking_scores(
    critic_mean_logps: torch.Tensor,
    ref_mean_logps: torch.Tensor | None = None,
    policy_mean_logps: torch.Tensor | None = None,
    mode: str = "critic_advantage",
) -> torch.Tensor:
    """Score used to rank candidate actions of one turn (higher is better): the critic's mean log-prob minus the
    baseline :data:`RANKING_RULES` names for ``mode``.

    ``"critic_advantage"``: the critic's advantage, critic minus reference mean log-prob (the paper).
    ``"critic_minus_policy_logprob"``: critic mean log-prob minus the policy's own mean log-prob of the candidate,
    which favours actions the critic likes more than the policy already does (the released code).
    ``"critic_minus_reference_without_c"``: critic mean log-prob given ``c`` minus the frozen reference's given the
    dialogue alone (``ref_mean_logps`` must then be computed without ``c``, on the same tokens).
    """
    rule = ranking_rule(mode)
    baseline = policy_mean_logps if rule.baseline == "policy" else ref_mean_logps
    if baseline is None:
        raise ValueError(f"mode={mode!r} needs {'policy' if rule.baseline == 'policy' else 'ref'}_mean_logps")
    return critic_mean_logps - baseline
