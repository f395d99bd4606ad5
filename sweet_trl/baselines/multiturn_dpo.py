"""Multi-turn DPO: trajectory-level preferences, the log-probability summed over every agent turn of a dialogue.

The baseline of the SWEET-RL paper that skips the critic: two trajectories of one task with different rewards
(paired by the same rules as the critic's data, :mod:`sweet_trl.pairs`) are compared by DPO, where a
trajectory's log-probability is the sum over all the agent's tokens in the whole dialogue:

    log π(τ) = Σ_t Σ_{i ∈ agent turn t} log π(a_t,i | dialogue before it)

The human's replies and the system instructions are context, never scored, and the policy never sees the
privileged information. Pair rows look like::

    {"chosen": [system, user, assistant, user, ..., assistant], "rejected": [...],     # whole conversations
     "task_id": ..., "chosen_reward": ..., "rejected_reward": ...}

Usage::

    from trl import ModelConfig
    from sweet_trl.baselines import MultiTurnDPOConfig, train_multiturn_dpo
    train_multiturn_dpo(MultiTurnDPOConfig(output_dir="runs/mtdpo", pair_preset="backend"), "runs/rollouts.jsonl",
                        model_config=ModelConfig(model_name_or_path="meta-llama/Llama-3.1-8B-Instruct"))
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from colbench_gym._optional import require
from sweet_trl.policy_config import with_nll_term
from sweet_trl.precision import apply_default_precision
from sweet_trl.tokenization import ChatTemplateError, tokenize_conversation
from sweet_trl.transformers_compat import checkpointing_by_current_name

logger = logging.getLogger(__name__)
_trl = require("trl", "train")
_MODEL_COLUMNS = ("chosen_input_ids", "chosen_mask", "rejected_input_ids", "rejected_mask")


@dataclass
class MultiTurnDPOConfig(_trl.DPOConfig):
    r"""
    Configuration of the multi-turn DPO baseline: TRL's [`~trl.DPOConfig`] plus how trajectory pairs are made.

    Parameters:
        > Pairs (the rules of :func:`sweet_trl.pairs.build_critic_pairs`)

        pair_preset (`str` or `None`, *optional*, defaults to `None`):
            `"backend"` or `"frontend"`: the released recipe of that benchmark, which fills the three fields
            below that are left unset. The pipeline uses its environment's recipe when this is `None`.
        pair_rule (`str` or `None`, *optional*, defaults to `None`):
            `"best_vs_rest"`: a task's best trajectory against each worse one. `"all_pairs"`: every two
            trajectories of a task whose rewards differ by at least `min_reward_gap`. Unset and no preset:
            `"best_vs_rest"`.
        require_success (`bool` or `None`, *optional*, defaults to `None`):
            With `"best_vs_rest"`, pair a task only when its best trajectory succeeded. Unset and no preset: `True`.
        min_reward_gap (`float` or `None`, *optional*, defaults to `None`):
            Smallest reward difference of a pair. Unset and no preset: `0.0`.
        max_pairs_per_task (`int` or `None`, *optional*, defaults to `None`):
            At most this many pairs per task (a seeded subset).
        env_id (`str` or `None`, *optional*, defaults to `None`), max_turns (`int`, *optional*, defaults to `10`):
            Environment (and turn limit) whose system instructions start each conversation; `None` reads each
            record's `env_id`.

        > Loss

        include_end_of_turn (`bool`, *optional*, defaults to `True`):
            Count the end-of-turn token after each agent message as one of its tokens.
        beta (`float`, *optional*, defaults to `0.1`), learning_rate (`float`, *optional*, defaults to `2e-7`):
            As for SWEET-RL's policy (use about `1e-5` with LoRA).
        nll_coef (`float`, *optional*, defaults to `0.0`):
            Weight of the NLL of the chosen dialogue's agent turns, added to the DPO loss as TRL's ``"sft"`` loss
            type (as ``TurnPreferenceConfig.nll_coef`` does for SWEET-RL's turns). ``0``: plain DPO, the paper's
            baseline; set it to the policy's value to compare the two methods with the same regulariser.
        max_length (`int` or `None`, *optional*, defaults to `16384`):
            Longest conversation in tokens. A pair with a longer side is left out rather than cut, since a cut
            dialogue would compare different numbers of turns.

    Only the `"sigmoid"` loss type (with `"sft"` through `nll_coef`) is meaningful here; LoRA/QLoRA go through
    `peft_config`/`quantization_config` as for any TRL trainer.
    """

    pair_preset: str | None = field(default=None, metadata={"help": "'backend' or 'frontend' pair recipe."})
    pair_rule: str | None = field(default=None, metadata={"help": "'best_vs_rest' (default) or 'all_pairs'."})
    require_success: bool | None = field(
        default=None, metadata={"help": "Pair a task only if its best one succeeded (default: true)."})
    min_reward_gap: float | None = field(
        default=None, metadata={"help": "Smallest reward difference of a pair (default: 0)."})
    max_pairs_per_task: int | None = field(default=None, metadata={"help": "At most this many pairs per task."})
    env_id: str | None = field(default=None, metadata={"help": "Environment of the system instructions."})
    max_turns: int = field(default=10, metadata={"help": "Turn limit in the system instructions."})
    include_end_of_turn: bool = field(default=True, metadata={"help": "Score each agent turn's end token."})
    learning_rate: float = field(default=2e-7, metadata={"help": "AdamW learning rate."})
    max_length: int | None = field(default=16384, metadata={"help": "Longest conversation in tokens."})
    nll_coef: float = field(
        default=0.0, metadata={"help": "Weight of the chosen dialogue's NLL added to the DPO loss (TRL's 'sft')."})

    def __post_init__(self):
        apply_default_precision(self)
        checkpointing_by_current_name(self)
        if self.pair_rule not in (None, "best_vs_rest", "all_pairs"):
            raise ValueError(f"pair_rule must be 'best_vs_rest' or 'all_pairs', got {self.pair_rule!r}")
        if self.pair_preset is not None:
            self.apply_pair_preset(self.pair_preset)
        self.loss_type, self.loss_weights = with_nll_term(self.loss_type, self.loss_weights, self.nll_coef)
        super().__post_init__()
        if [t for t in self.loss_type if t != "sft"] != ["sigmoid"] or self.ld_alpha is not None or self.use_weighting:
            raise ValueError("multi-turn DPO sums log-probabilities over whole dialogues; only loss_type='sigmoid' "
                             "(with 'sft' through nll_coef) without ld_alpha or use_weighting is supported")

    def apply_pair_preset(self, preset: str) -> None:
        """Fill the pair fields left unset from a released recipe (``"backend"``/``"frontend"``); set ones stay."""
        from sweet_trl.pairs import PAIR_RULE_PRESETS

        if preset not in PAIR_RULE_PRESETS:
            raise ValueError(f"pair_preset must be one of {sorted(PAIR_RULE_PRESETS)}, got {preset!r}")
        recipe = PAIR_RULE_PRESETS[preset]
        self.pair_preset = preset
        self.pair_rule = recipe["rule"] if self.pair_rule is None else self.pair_rule
        self.require_success = recipe["require_success"] if self.require_success is None else self.require_success
        self.min_reward_gap = recipe["min_reward_gap"] if self.min_reward_gap is None else self.min_reward_gap

    def pair_rule_settings(self) -> dict[str, Any]:
        """The arguments of :func:`sweet_trl.pairs.build_critic_pairs`, unset fields at their defaults."""
        return {"rule": self.pair_rule or "best_vs_rest",
                "require_success": True if self.require_success is None else self.require_success,
                "min_reward_gap": 0.0 if self.min_reward_gap is None else self.min_reward_gap}


def multiturn_dpo_pairs(trajectories: Any, config: MultiTurnDPOConfig):
    """Trajectory pairs (a ``datasets.Dataset``) as whole policy conversations, without the privileged info."""
    from sweet_trl.pairs import build_critic_pairs
    from sweet_trl.trajectories import Trajectory, read_trajectories
    from sweet_trl.turn_pairs import env_instructions

    datasets = require("datasets", "hub")
    kept = [t for t in map(Trajectory, read_trajectories(trajectories)) if not t.infra_drop_reason]
    pairs, stats = build_critic_pairs([t.record for t in kept], **config.pair_rule_settings(),
                                      max_pairs_per_task=config.max_pairs_per_task, seed=config.seed)
    if not pairs:
        raise ValueError(f"no trajectory pair for multi-turn DPO: {stats.why_no_pairs()} ({stats.summary()})")
    env_by_task = {}
    for trajectory in kept:
        env_by_task.setdefault(trajectory.task_id, config.env_id or trajectory.env_id)
    rows = []
    for pair in pairs:
        system = {"role": "system", "content": env_instructions(env_by_task[pair["task_id"]], config.max_turns)}
        rows.append({
            "chosen": _with_system(system, pair["chosen"]),
            "rejected": _with_system(system, pair["rejected"]),
            "task_id": pair["task_id"],
            "chosen_reward": pair["chosen_reward"],
            "rejected_reward": pair["rejected_reward"],
            "chosen_episode_id": pair["chosen_episode_id"],
            "rejected_episode_id": pair["rejected_episode_id"],
        })
    logger.info("multi-turn DPO pairs: %s", stats.summary())
    return datasets.Dataset.from_list(rows)


def _with_system(system: dict[str, str], dialogue: list[dict[str, str]]) -> list[dict[str, str]]:
    return dialogue if dialogue and dialogue[0]["role"] == "system" else [system, *dialogue]


def tokenize_multiturn_pair(example: dict[str, Any], tokenizer: Any, include_end_of_turn: bool = True
                            ) -> dict[str, list[int]]:
    """Token ids of both conversations and masks that are 1 exactly on their agent-turn tokens."""
    out = {}
    for side in ("chosen", "rejected"):
        conversation = tokenize_conversation(tokenizer, example[side], include_end_of_turn=include_end_of_turn)
        out[f"{side}_input_ids"] = conversation.input_ids
        out[f"{side}_mask"] = [int(t > 0) for t in conversation.turn_ids]
    return out


@dataclass
class DataCollatorForMultiTurnPreference:
    """Pads whole conversations: ``input_ids`` (chosen rows, then rejected rows), ``attention_mask`` and
    ``completion_mask`` (the agent-turn tokens, which is what ``DPOTrainer`` sums log-probabilities over)."""

    pad_token_id: int

    def __call__(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        torch = require("torch", "train")
        from trl.trainer.utils import pad

        ids = [example[f"{side}_input_ids"] for side in ("chosen", "rejected") for example in examples]
        masks = [example[f"{side}_mask"] for side in ("chosen", "rejected") for example in examples]
        output = {
            "input_ids": pad([torch.tensor(x) for x in ids], padding_value=self.pad_token_id, padding_side="right"),
            "attention_mask": pad([torch.ones(len(x), dtype=torch.long) for x in ids], padding_value=0,
                                  padding_side="right"),
            "completion_mask": pad([torch.tensor(m, dtype=torch.long) for m in masks], padding_value=0,
                                   padding_side="right"),
        }
        for key in ("ref_chosen_logps", "ref_rejected_logps"):
            if key in examples[0]:
                output[key] = torch.tensor([example[key] for example in examples])
        return output


class MultiTurnDPOTrainer(_trl.DPOTrainer):
    """TRL's ``DPOTrainer`` on whole conversations: a sequence's log-probability sums over all its agent turns.

    Takes pairs of conversations (``chosen``/``rejected`` message lists, see :func:`multiturn_dpo_pairs`). The
    only change to DPO is what counts as the completion: every agent-turn token of the dialogue (from
    :func:`sweet_trl.tokenization.tokenize_conversation`) instead of one final message. Pairs longer than
    ``max_length`` on either side are left out (logged).
    """

    _tag_names = ["trl", "dpo", "multi-turn-dpo", "sweet-rl-baseline"]
    _name = "Multi-turn DPO"

    def __init__(self, model: Any, ref_model: Any = None, args: MultiTurnDPOConfig | None = None,
                 data_collator: Any = None, train_dataset: Any = None, eval_dataset: Any = None,
                 processing_class: Any = None, **kwargs: Any):
        from sweet_trl.trainer_utils import as_dataset, default_reference

        if args is None:
            args = MultiTurnDPOConfig(output_dir="multiturn-dpo")
        if not isinstance(args, MultiTurnDPOConfig):
            raise TypeError(f"args must be a MultiTurnDPOConfig, got {type(args).__name__}")
        if processing_class is None:
            raise ValueError("pass the tokenizer as processing_class")
        if data_collator is None:
            tokenizer = getattr(processing_class, "tokenizer", processing_class)
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            data_collator = DataCollatorForMultiTurnPreference(pad_token_id=tokenizer.pad_token_id)
        ref_model = default_reference(model, ref_model, args, kwargs.get("peft_config"))
        train_dataset = as_dataset(train_dataset)
        if isinstance(eval_dataset, (list, tuple)):
            eval_dataset = as_dataset(eval_dataset)
        super().__init__(model, ref_model=ref_model, args=args, train_dataset=train_dataset,
                         eval_dataset=eval_dataset, processing_class=processing_class, data_collator=data_collator,
                         **kwargs)

    def _prepare_dataset(self, dataset: Any, processing_class: Any, args: MultiTurnDPOConfig, dataset_name: str):
        columns = set(dataset.column_names or [])
        if set(_MODEL_COLUMNS) <= columns:
            return dataset
        missing = {"chosen", "rejected"} - columns
        if missing:
            raise ValueError(f"the {dataset_name} pairs lack the column(s) {sorted(missing)}")
        tokenizer = getattr(processing_class, "tokenizer", processing_class)

        def tokenize(example: dict[str, Any]) -> dict[str, Any]:
            try:
                return {**tokenize_multiturn_pair(example, tokenizer, args.include_end_of_turn), "_error": ""}
            except (ValueError, ChatTemplateError) as err:
                return {**{c: [] for c in _MODEL_COLUMNS}, "_error": str(err)}

        dataset = dataset.map(tokenize, num_proc=args.dataset_num_proc, desc=f"Tokenizing {dataset_name} pairs")

        def usable(example: dict[str, Any]) -> bool:
            if example["_error"]:
                return False
            if not any(example["chosen_mask"]) or not any(example["rejected_mask"]):
                return False
            longest = max(len(example["chosen_input_ids"]), len(example["rejected_input_ids"]))
            return args.max_length is None or longest <= args.max_length

        before = len(dataset)
        dataset = dataset.filter(usable, num_proc=args.dataset_num_proc).remove_columns("_error")
        if len(dataset) < before:
            logger.warning("multi-turn DPO: %d of %d %s pairs left out (unsplittable into turns, no agent token, or "
                           "longer than max_length=%s)", before - len(dataset), before, dataset_name, args.max_length)
        if len(dataset) == 0:
            raise ValueError(f"no usable {dataset_name} pair for multi-turn DPO")
        return dataset

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = [*_MODEL_COLUMNS, "ref_chosen_logps", "ref_rejected_logps"]


def train_multiturn_dpo(
    config: MultiTurnDPOConfig,
    trajectories: Any = None,
    model_config: Any = None,
    model: Any = None,
    tokenizer: Any = None,
    pairs: Any = None,
) -> str:
    """Train the multi-turn DPO baseline; save the policy and its tokenizer to ``config.output_dir``.

    Give ``trajectories`` (pairs are built with ``config``'s rules) or prebuilt ``pairs`` (a path or a Dataset of
    :func:`multiturn_dpo_pairs` rows). ``model_config``: a ``trl.ModelConfig`` (LoRA with ``use_peft``, QLoRA with
    ``load_in_4bit``), or pass ``model`` and ``tokenizer``. Returns ``config.output_dir``.
    """
    from sweet_trl.trainer_utils import as_dataset, fit_and_save, trainer_inputs

    if pairs is None:
        if trajectories is None:
            raise ValueError("pass trajectories or pairs")
        pairs = multiturn_dpo_pairs(trajectories, config)
    else:
        pairs = as_dataset(pairs)
    model, tokenizer, peft_config, quantization_config = trainer_inputs(config, model_config, model, tokenizer)
    trainer = MultiTurnDPOTrainer(model, args=config, train_dataset=pairs, processing_class=tokenizer,
                                  peft_config=peft_config, quantization_config=quantization_config)
    return fit_and_save(trainer, config, tokenizer)
