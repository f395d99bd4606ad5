"""Rejection fine-tuning (RFT): supervised fine-tuning on the agent turns of the successful trajectories only.

The baseline of the SWEET-RL paper that keeps what worked and imitates it. Each kept trajectory is one training
conversation (the environment's system instructions, then the dialogue); the loss covers the agent's messages and
their end-of-turn tokens, never the instructions or the human's replies. The turn masks come from
:func:`sweet_trl.tokenization.tokenize_conversation`, so any chat template works, with or without
``{% generation %}`` tags.

    from trl import ModelConfig
    from sweet_trl.baselines import RejectionFinetuneConfig, train_rejection_finetune
    train_rejection_finetune(RejectionFinetuneConfig(output_dir="runs/rft"), "runs/rollouts.jsonl",
                             model_config=ModelConfig(model_name_or_path="meta-llama/Llama-3.1-8B-Instruct"))
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from colbench_gym._optional import require
from sweet_trl.precision import apply_default_precision
from sweet_trl.tokenization import ChatTemplateError, tokenize_conversation
from sweet_trl.trajectories import Trajectory, read_trajectories
from sweet_trl.transformers_compat import checkpointing_by_current_name

logger = logging.getLogger(__name__)
_trl = require("trl", "train")


@dataclass
class RejectionFinetuneConfig(_trl.SFTConfig):
    r"""
    Configuration of the rejection fine-tuning baseline: TRL's [`~trl.SFTConfig`] plus which trajectories to keep.

    Parameters:
        min_reward (`float` or `None`, *optional*, defaults to `None`):
            Keep trajectories whose reward is at least this. `None` keeps the successful ones: the record's
            `success` flag, or `reward >= success_reward` for records without one (original ColBench rollouts).
            Frontend rewards are similarities, so set a threshold there (e.g. `0.8`).
        success_reward (`float`, *optional*, defaults to `1.0`):
            Reward that counts as success for records without a `success` flag.
        env_id (`str` or `None`, *optional*, defaults to `None`):
            Environment whose system instructions start each conversation; `None` reads each record's `env_id`.
        max_turns (`int`, *optional*, defaults to `10`):
            Turn limit written in the system instructions.
        include_end_of_turn (`bool`, *optional*, defaults to `True`):
            Train on the end-of-turn token after each agent message too, so the policy learns to stop.
        max_length (`int` or `None`, *optional*, defaults to `16384`):
            Longest conversation in tokens; longer ones are cut at the end (whole dialogues are long).
        learning_rate (`float`, *optional*, defaults to `2e-7`):
            As for the other policy trainers of the paper's recipe; use about `1e-5` with LoRA.

    Every other field is [`~trl.SFTConfig`]'s; LoRA/QLoRA go through `peft_config`/`quantization_config` as for
    any TRL trainer (see :func:`train_rejection_finetune`).
    """

    min_reward: float | None = field(default=None, metadata={"help": "Keep trajectories with reward >= this."})
    success_reward: float = field(default=1.0, metadata={"help": "Reward meaning success without a flag."})
    env_id: str | None = field(default=None, metadata={"help": "Environment of the system instructions."})
    max_turns: int = field(default=10, metadata={"help": "Turn limit in the system instructions."})
    include_end_of_turn: bool = field(default=True, metadata={"help": "Train on each agent turn's end token."})
    max_length: int | None = field(default=16384, metadata={"help": "Longest conversation in tokens."})
    learning_rate: float = field(default=2e-7, metadata={"help": "AdamW learning rate."})

    def __post_init__(self):
        apply_default_precision(self)
        checkpointing_by_current_name(self)
        if self.assistant_only_loss:
            raise ValueError("assistant_only_loss is not used here: the agent-turn masks are built by "
                             "sweet_trl.tokenization for any chat template; leave it False")
        super().__post_init__()


def keep_for_rft(record: dict[str, Any] | Trajectory, config: RejectionFinetuneConfig) -> bool:
    """Whether a trajectory is one rejection fine-tuning imitates."""
    trajectory = Trajectory(record)
    if config.min_reward is not None:
        return trajectory.reward is not None and trajectory.reward >= config.min_reward
    return trajectory.succeeded(config.success_reward)


def rft_dataset(trajectories: Any, tokenizer: Any, config: RejectionFinetuneConfig):
    """The kept trajectories, tokenised: ``input_ids`` and ``assistant_masks`` (1 on agent-turn tokens).

    ``SFTTrainer`` turns ``assistant_masks`` into labels, so the loss is on agent turns only. Trajectories whose
    episode or grader failed (infrastructure, not the agent), without an agent turn, or that the chat template
    cannot split into turns are left out and counted in the log.
    """
    from sweet_trl.turn_pairs import policy_conversation

    datasets = require("datasets", "hub")
    records = read_trajectories(trajectories)
    dropped: Counter = Counter()
    rows = []
    for index, trajectory in enumerate(map(Trajectory, records)):
        if trajectory.infra_drop_reason:
            dropped[trajectory.infra_drop_reason] += 1
            continue
        if not keep_for_rft(trajectory, config):
            dropped["not_successful"] += 1
            continue
        try:
            messages = policy_conversation(trajectory, config.env_id, config.max_turns)
            if not any(m["role"] == "assistant" for m in messages):
                dropped["no_agent_turn"] += 1
                continue
            conversation = tokenize_conversation(tokenizer, messages,
                                                 include_end_of_turn=config.include_end_of_turn)
        except (ValueError, ChatTemplateError) as err:
            dropped["malformed_dialogue"] += 1
            logger.warning("rft: trajectory %d left out: %s", index, err)
            continue
        rows.append({
            "input_ids": conversation.input_ids,
            "assistant_masks": [int(t > 0) for t in conversation.turn_ids],
            "task_id": trajectory.task_id,
            "episode_id": trajectory.episode_key(index),
            "reward": trajectory.reward,
        })
    logger.info("rft: %d of %d trajectories kept; left out: %s", len(rows), len(records), dict(dropped))
    if not rows:
        raise ValueError(f"no trajectory to imitate among {len(records)} (left out: {dict(dropped)}); "
                         "lower min_reward or collect more episodes")
    return datasets.Dataset.from_list(rows)


def train_rejection_finetune(
    config: RejectionFinetuneConfig,
    trajectories: Any,
    model_config: Any = None,
    model: Any = None,
    tokenizer: Any = None,
    eval_trajectories: Any = None,
) -> str:
    """Fine-tune the policy on the successful trajectories; save it and its tokenizer to ``config.output_dir``.

    ``trajectories``: anything :func:`sweet_trl.trajectories.read_trajectories` reads (JSONL file or folder,
    ``datasets`` folder or Dataset, list, original ColBench rollouts). ``model_config``: a ``trl.ModelConfig``
    (model name, LoRA with ``use_peft``, QLoRA with ``load_in_4bit``), or pass ``model`` and ``tokenizer``.
    Returns ``config.output_dir``.
    """
    from sweet_trl.trainer_utils import fit_and_save, trainer_inputs

    model, tokenizer, peft_config, quantization_config = trainer_inputs(config, model_config, model, tokenizer)
    train_dataset = rft_dataset(trajectories, tokenizer, config)
    eval_dataset = rft_dataset(eval_trajectories, tokenizer, config) if eval_trajectories is not None else None
    trainer = _trl.SFTTrainer(
        model, args=config, train_dataset=train_dataset, eval_dataset=eval_dataset, processing_class=tokenizer,
        peft_config=peft_config, quantization_config=quantization_config,
    )
    return fit_and_save(trainer, config, tokenizer)
