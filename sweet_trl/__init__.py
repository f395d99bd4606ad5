"""SWEET-RL trainers for multi-turn collaborative agents (arXiv 2503.15478), built on TRL.

Submodules load their heavy dependencies (torch, transformers, trl) only when imported; the names below resolve
lazily, so ``import sweet_trl`` stays cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "SweetCriticConfig": "sweet_trl.critic_config",
    "SweetCriticTrainer": "sweet_trl.critic_trainer",
    "SweetCritic": "sweet_trl.critic",
    "TurnPreferenceConfig": "sweet_trl.policy_config",
    "TurnPreferenceTrainer": "sweet_trl.policy_trainer",
    "TurnPairsConfig": "sweet_trl.turn_pairs",
    "select_turn_states": "sweet_trl.turn_pairs",
    "sample_candidates": "sweet_trl.turn_pairs",
    "rank_candidates": "sweet_trl.turn_pairs",
    "build_turn_pairs": "sweet_trl.turn_pairs",
    "build_critic_pairs": "sweet_trl.pairs",
    "critic_pair_dataset": "sweet_trl.pairs",
    "load_trajectories": "sweet_trl.trajectories",
    "tokenize_conversation": "sweet_trl.tokenization",
    "CriticInputFormat": "sweet_trl.tokenization",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'sweet_trl' has no attribute {name!r}")
