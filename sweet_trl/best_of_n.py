"""Best-of-N fine-tuning: the policy imitates the critic's top candidate at each ranked turn state.

SWEET-RL's second update, beside the paper's turn-level DPO. Both read the ``rank`` stage: N candidate turns per
turn state, each scored by the asymmetric critic. DPO pushes the upper half up and the lower half down; this keeps
only the critic's first choice per state and fine-tunes the policy on it (TRL's ``SFTTrainer``, loss on the
chosen turn only, never on the dialogue before it). Nothing is pushed down, so a critic that is right about the
best candidate but noisy about the rest still teaches the right thing. On the small-model study it is the update
that raises episode success from the warm start (RESULTS.md, "the critic's picks, distilled without DPO").

    from trl import ModelConfig
    from sweet_trl.best_of_n import BestOfNFinetuneConfig, train_best_of_n
    train_best_of_n(BestOfNFinetuneConfig(output_dir="runs/best", turns=[1]), "runs/sweet/rank/ranked",
                    model_config=ModelConfig(model_name_or_path="meta-llama/Llama-3.1-8B-Instruct"))

From the command line, after ``rank``: ``sweet-rl train-policy-best --config study_cpu``, then
``sweet-rl evaluate --config study_cpu --policy sweet_best``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from colbench_gym._optional import require
from sweet_trl.precision import apply_default_precision
from sweet_trl.transformers_compat import checkpointing_by_current_name
from sweet_trl.turn_pairs import StageStats, _read_rows, ranked_state

logger = logging.getLogger(__name__)
_trl = require("trl", "train")


@dataclass
class BestOfNFinetuneConfig(_trl.SFTConfig):
    r"""
    Configuration of best-of-N fine-tuning: TRL's [`~trl.SFTConfig`] plus which turn states to learn from.

    Each training example is ``{"prompt": history, "completion": [the critic's top candidate]}``, the history
    being the policy's own prompt at that turn (system instructions and dialogue, never the privileged
    information). ``SFTTrainer`` computes the loss on the completion only.

    Parameters:
        turns (`list[int]` or `None`, *optional*, defaults to `None`):
            Agent turns (0 = the first message) whose states are learned from; `None`: every ranked state. With
            two turns and a forced answer, `[1]` is the answer turn.
        min_candidates (`int`, *optional*, defaults to `2`):
            States with fewer scored candidates are left out: the best of one is no choice.
        top_fraction (`float`, *optional*, defaults to `1.0`):
            Learn from this fraction of the states only: those whose chosen candidate the critic scores highest
            (`1.0`: every state). The critic's score of its own pick tells, across states, which picks are right:
            on the small study's train answer turns (seed 0) it separates picks that pass every test from the
            others with an AUC of 0.87, and the top half of the states holds picks that succeed 58% of the time
            against 31% for all of them. Yet fine-tuning on that half was level with every state there
            (RESULTS.md, "best-of-N fine-tuning on the half of the states"): the states where no candidate
            succeeds limit the gain.
        min_score (`float` or `None`, *optional*, defaults to `None`):
            Leave out the states whose pick scores below this. Meant for a selector whose scores mean the same at
            every state: with the true-reward selector (`rank --selector true_reward`, a candidate's fraction of
            hidden tests passed) `1.0` keeps only the answer turns where some candidate passes every test, so the
            policy never imitates a failing answer (where none of 8 succeeds, on 61-66% of the small study's answer
            turns, the best of them still fails). A critic's scores are relative to their state: use `top_fraction`
            there. `None`: every state.
        max_length (`int` or `None`, *optional*, defaults to `16384`):
            Longest prompt + turn in tokens (late turns of a ten-turn dialogue are long).
        learning_rate (`float`, *optional*, defaults to `2e-7`):
            As for the other policy trainers of the paper's recipe; use about `1e-4` with LoRA.

    Every other field is [`~trl.SFTConfig`]'s; LoRA/QLoRA go through `peft_config`/`quantization_config` as for
    any TRL trainer (see :func:`train_best_of_n`).
    """

    turns: list[int] | None = field(default=None, metadata={"help": "Agent turns to learn from (None: all)."})
    min_candidates: int = field(default=2, metadata={"help": "Leave out states with fewer scored candidates."})
    top_fraction: float = field(default=1.0, metadata={
        "help": "Learn from this fraction of the states, those whose pick the critic scores highest (1: all)."})
    min_score: float | None = field(default=None, metadata={
        "help": "Leave out states whose pick scores below this (true-reward selector: 1.0 = a passing answer)."})
    max_length: int | None = field(default=16384, metadata={"help": "Longest prompt + turn in tokens."})
    learning_rate: float = field(default=2e-7, metadata={"help": "AdamW learning rate."})

    def __post_init__(self):
        apply_default_precision(self)
        checkpointing_by_current_name(self)
        if self.turns is not None and (not self.turns or any(int(t) != t or t < 0 for t in self.turns)):
            raise ValueError(f"turns must be None or a non-empty list of agent turn indices >= 0, got {self.turns}")
        if self.min_candidates < 2:
            raise ValueError(f"min_candidates must be >= 2, got {self.min_candidates}")
        if not 0 < self.top_fraction <= 1:
            raise ValueError(f"top_fraction must be in (0, 1], got {self.top_fraction}")
        if self.min_score is not None and not math.isfinite(self.min_score):
            raise ValueError(f"min_score must be a finite number or None, got {self.min_score}")
        if self.completion_only_loss is False:
            raise ValueError("completion_only_loss=False would train on the dialogue too; leave it unset")
        super().__post_init__()


def best_candidate(scores: Iterable[float | None]) -> int | None:
    """Index of the highest finite score (the first of equal ones); ``None`` when no score is finite."""
    best = None
    for index, score in enumerate(scores):
        if score is not None and math.isfinite(score) and (best is None or score > best[1]):
            best = (index, score)
    return None if best is None else best[0]


def best_turns_from_ranked(rows: Iterable[Mapping[str, Any]], config: BestOfNFinetuneConfig
                           ) -> tuple[list[dict[str, Any]], StageStats]:
    """One prompt-completion example per ranked turn state: its candidate with the critic's highest score (none
    where that score is below ``config.min_score``); with ``config.top_fraction`` below 1, only the states whose pick
    scores highest (in the rows' order)."""
    rows = list(rows)
    stats = StageStats(rows_in=len(rows))
    examples = []
    for row in rows:
        state = ranked_state(row, config.turns, stats)
        if state is None:
            continue
        texts, scores = state
        if sum(1 for s in scores if s is not None and math.isfinite(s)) < config.min_candidates:
            stats.dropped["state_unranked_or_too_few_candidates"] += 1
            continue
        index = best_candidate(scores)
        if config.min_score is not None and scores[index] < config.min_score:
            stats.dropped["state_pick_below_min_score"] += 1
            continue
        others = [s for i, s in enumerate(scores) if i != index and s is not None and math.isfinite(s)]
        examples.append({
            "prompt": [dict(m) for m in row["prompt"]],
            "completion": [{"role": "assistant", "content": texts[index]}],
            "state_id": row["state_id"],
            "task_id": row["task_id"],
            "turn": row["turn"],
            "score": scores[index],
            "margin": scores[index] - max(others),  # how clearly the critic preferred it
        })
    if config.top_fraction < 1 and examples:
        keep = max(1, math.ceil(config.top_fraction * len(examples)))
        kept = sorted(range(len(examples)), key=lambda i: examples[i]["score"], reverse=True)[:keep]
        logger.info("best-of-N: the %d of %d states whose pick scores %.3f or more", keep, len(examples),
                    examples[kept[-1]]["score"])
        stats.dropped["state_pick_below_top_fraction"] += len(examples) - keep
        examples = [examples[i] for i in sorted(kept)]
    stats.rows_out = len(examples)
    return examples, stats


def best_of_n_dataset(ranked: Any, config: BestOfNFinetuneConfig):
    """The examples of :func:`best_turns_from_ranked` as a ``datasets.Dataset`` (``ranked``: the rank stage's
    folder, a Dataset or a list of rows). Raises ``ValueError`` when no state is left, saying why."""
    datasets = require("datasets", "hub")
    examples, stats = best_turns_from_ranked(_read_rows(ranked), config)
    logger.info("best-of-N: %s", stats.summary())
    if not examples:
        raise ValueError(f"no turn state to learn from: {stats.why_nothing()} ({stats.summary()})")
    return datasets.Dataset.from_list(examples)


def train_best_of_n(config: BestOfNFinetuneConfig, ranked: Any, model_config: Any = None, model: Any = None,
                    tokenizer: Any = None) -> str:
    """Fine-tune the policy on the critic's top candidates; save it and its tokenizer to ``config.output_dir``.

    ``model_config``: a ``trl.ModelConfig`` (model name, LoRA with ``use_peft``, QLoRA with ``load_in_4bit``),
    or pass ``model`` and ``tokenizer``. Returns ``config.output_dir``.
    """
    from sweet_trl.trainer_utils import fit_and_save, trainer_inputs

    model, tokenizer, peft_config, quantization_config = trainer_inputs(config, model_config, model, tokenizer)
    dataset = best_of_n_dataset(ranked, config)
    trainer = _trl.SFTTrainer(model, args=config, train_dataset=dataset, processing_class=tokenizer,
                              peft_config=peft_config, quantization_config=quantization_config)
    return fit_and_save(trainer, config, tokenizer)
