"""SWEET-RL policy training: DPO on critic-ranked turn-level pairs, plus an NLL term on the chosen turn.

The pairs come from :mod:`sweet_trl.turn_pairs` (one agent message chosen over another for the same dialogue
history, ranked by the critic that saw the privileged information). The policy never sees that information:
its prompt is the system instructions and the dialogue so far.

Train from the command line's building blocks::

    from trl import ModelConfig
    from sweet_trl.policy_config import TurnPreferenceConfig
    from sweet_trl.policy_trainer import train_turn_preference

    output_dir = train_turn_preference(
        TurnPreferenceConfig(output_dir="runs/policy"),
        train_pairs="runs/turn_pairs",                      # a saved `datasets` folder or a JSONL file
        model_config=ModelConfig(model_name_or_path="meta-llama/Llama-3.1-8B-Instruct",
                                 use_peft=True, lora_r=16, load_in_4bit=True),   # QLoRA; drop both for full FT
    )
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from colbench_gym._optional import require
from sweet_trl.model_cards import SWEET_PAPER
from sweet_trl.policy_config import TurnPreferenceConfig
from sweet_trl.shared_prompt import SharedPromptLoss
from sweet_trl.trainer_utils import as_dataset, default_reference, fit_and_save, require_rows, trainer_inputs

DPOTrainer = require("trl", "train").DPOTrainer

logger = logging.getLogger(__name__)


def check_turn_pairs(dataset: Any, name: str = "train") -> None:
    """Raise ``ValueError`` unless ``dataset`` holds turn-level pairs in TRL's conversational preference format.

    Each row needs ``prompt`` (chat messages ending with a user message: the history the policy saw),
    ``chosen`` and ``rejected`` (each exactly one assistant message). An empty dataset is an error too.
    """
    require_rows(dataset, f"{name} turn pairs")
    columns = set(getattr(dataset, "column_names", None) or next(iter(dataset)).keys())
    missing = {"prompt", "chosen", "rejected"} - columns
    if missing:
        raise ValueError(f"the {name} turn pairs lack the column(s) {sorted(missing)}; found {sorted(columns)}")
    rows = dataset if hasattr(dataset, "__len__") else [next(iter(dataset))]
    for index, row in enumerate(rows):
        prompt, chosen, rejected = row["prompt"], row["chosen"], row["rejected"]
        if not isinstance(prompt, list) or not prompt or prompt[-1].get("role") != "user":
            raise ValueError(f"{name} pair {index}: 'prompt' must be chat messages ending with a user message")
        for key, message in (("chosen", chosen), ("rejected", rejected)):
            if not isinstance(message, list) or len(message) != 1 or message[0].get("role") != "assistant":
                raise ValueError(f"{name} pair {index}: {key!r} must be exactly one assistant message")


class TurnPreferenceTrainer(SharedPromptLoss, DPOTrainer):
    """TRL's ``DPOTrainer`` for SWEET-RL turn-level pairs, with the chosen-turn NLL term of the released recipe.

    The loss is DPO's sigmoid loss plus ``args.nll_coef`` times the NLL of the chosen messages (TRL's ``"sft"``
    loss type, set up by :class:`~sweet_trl.policy_config.TurnPreferenceConfig`). Everything else is TRL's:
    ``peft_config`` for LoRA, ``quantization_config`` (with the model given by name) for QLoRA, a frozen copy of
    the initial policy (or the disabled adapter) as the reference. The datasets (a ``Dataset``, a list of rows or
    a path) are checked up front, so that an empty dataset, or a malformed pair (named by its row number), fails
    with a ``ValueError`` instead of deep inside TRL.

    A pair whose prompt alone fills ``args.max_length`` tokens has no message token left to train on (with the
    default ``truncation_mode="keep_start"``): TRL drops it; it is logged and counted in ``self.data_report``,
    e.g. ``{"train": {"pairs": 120, "kept": 117, "dropped": {"prompt_too_long": 3}, "truncated": 5}}``, where
    ``truncated`` counts the kept pairs whose prompt + chosen or prompt + rejected is cut at ``max_length``.
    A dataset left without any pair is a ``ValueError``. Streaming datasets are not counted.
    """

    _tag_names = ["trl", "dpo", "sweet-rl"]
    _name = "SWEET-RL turn-level preference"
    _paper = SWEET_PAPER

    def __init__(self, model: Any, ref_model: Any = None, args: TurnPreferenceConfig | None = None,
                 data_collator: Any = None, train_dataset: Any = None, eval_dataset: Any = None, **kwargs: Any):
        if args is None:
            name = model if isinstance(model, str) else model.config._name_or_path
            args = TurnPreferenceConfig(output_dir=f"{Path(str(name)).name}-SWEET")
        if not isinstance(args, TurnPreferenceConfig):
            raise TypeError(f"args must be a TurnPreferenceConfig, got {type(args).__name__}")
        if train_dataset is None:
            raise ValueError("train_dataset is required")
        self.data_report: dict[str, dict[str, Any]] = {}
        train_dataset = as_dataset(train_dataset)
        check_turn_pairs(train_dataset, "train")
        if isinstance(eval_dataset, (list, tuple, str, Path)):
            eval_dataset = as_dataset(eval_dataset)
        if eval_dataset is not None:
            splits = eval_dataset.items() if isinstance(eval_dataset, dict) else [("eval", eval_dataset)]
            for split, dataset in splits:
                check_turn_pairs(dataset, split)
        ref_model = default_reference(model, ref_model, args, kwargs.get("peft_config"))
        super().__init__(model, ref_model=ref_model, args=args, data_collator=data_collator,
                         train_dataset=train_dataset, eval_dataset=eval_dataset, **kwargs)

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        # TRL tokenises, then silently filters out the pairs whose prompt fills max_length: count them here.
        require_rows(dataset, f"{dataset_name} turn pairs")
        prepared = super()._prepare_dataset(dataset, processing_class, args, dataset_name)
        if not hasattr(prepared, "__len__"):
            logger.warning("%s: streaming dataset, pairs whose prompt fills max_length=%s are dropped without being "
                           "counted", dataset_name, args.max_length)
            return prepared
        total, kept = len(dataset), len(prepared)
        report = {"pairs": total, "kept": kept, "dropped": {"prompt_too_long": total - kept} if total > kept else {},
                  "truncated": count_truncated_pairs(prepared, args.max_length)}
        self.data_report[dataset_name] = report
        if total > kept:
            logger.warning("%s: dropped %d of %d turn pairs whose prompt alone fills max_length=%s tokens",
                           dataset_name, total - kept, total, args.max_length)
        if report["truncated"]:
            logger.warning("%s: %d turn pairs are longer than max_length=%s tokens and are cut (truncation_mode=%r)",
                           dataset_name, report["truncated"], args.max_length, args.truncation_mode)
        if kept == 0:
            raise ValueError(
                f"no usable turn pair in the {dataset_name} dataset: the prompt alone fills max_length="
                f"{args.max_length} tokens in every pair ({report}); raise max_length"
            )
        return prepared


def count_truncated_pairs(dataset: Any, max_length: int | None) -> int:
    """Pairs of a tokenised dataset (TRL's ``prompt_ids``, ``chosen_ids``, ``rejected_ids``) whose prompt + chosen
    or prompt + rejected exceeds ``max_length`` tokens; read in Arrow batches, never as Python lists."""
    if max_length is None:
        return 0
    import pyarrow.compute as pc

    count = 0
    columns = dataset.select_columns(["prompt_ids", "chosen_ids", "rejected_ids"]).with_format("arrow")
    for batch in columns.iter(batch_size=4096):
        longest = pc.max_element_wise(pc.list_value_length(batch["chosen_ids"]),
                                      pc.list_value_length(batch["rejected_ids"]))
        lengths = pc.add(pc.list_value_length(batch["prompt_ids"]), longest)
        count += pc.sum(pc.greater(lengths, max_length)).as_py() or 0
    return count


def train_turn_preference(
    config: TurnPreferenceConfig,
    train_pairs: str | Path | Any,
    model_config: Any = None,
    eval_pairs: str | Path | Any | None = None,
    model: Any = None,
    tokenizer: Any = None,
) -> str:
    """Train the policy on turn-level pairs; save it (or its adapter) and the tokenizer to ``config.output_dir``.

    ``train_pairs``/``eval_pairs``: a path (see :func:`load_rows`), a ``datasets.Dataset`` or a list of rows.
    ``model_config``: a ``trl.ModelConfig`` naming the policy and its LoRA/QLoRA settings. Or pass ``model`` (a
    loaded model; LoRA still comes from ``model_config`` when given) and ``tokenizer`` directly.
    Returns ``config.output_dir``.
    """
    train_dataset, eval_dataset = as_dataset(train_pairs), as_dataset(eval_pairs)
    model, tokenizer, peft_config, quantization_config = trainer_inputs(config, model_config, model, tokenizer)
    trainer = TurnPreferenceTrainer(
        model, args=config, train_dataset=train_dataset, eval_dataset=eval_dataset, processing_class=tokenizer,
        peft_config=peft_config, quantization_config=quantization_config,
    )
    return fit_and_save(trainer, config, tokenizer)


def preference_margins(model: Any, tokenizer: Any, pairs: Sequence[dict[str, Any]] | Any,
                       batch_size: int = 8) -> list[float]:
    """``log π(chosen | prompt) - log π(rejected | prompt)`` (summed over the message tokens) for each pair.

    Tokenised as the DPO trainer does (the chat template of prompt + message, the message's tokens being those
    after the longest common prefix with the prompt's generation prompt), so it measures what training moves.
    """
    torch = require("torch", "train")
    margins: list[float] = []
    rows = list(pairs)
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(rows), batch_size):
            batch = rows[start:start + batch_size]
            sequences = [_prompt_and_message_ids(tokenizer, row["prompt"], row[key])
                         for key in ("chosen", "rejected") for row in batch]
            logps = _message_logprobs(model, tokenizer, sequences, torch)
            count = len(batch)
            margins += [float(c - r) for c, r in zip(logps[:count], logps[count:])]
    finally:
        model.train(was_training)
    return margins


def message_logprobs(model: Any, tokenizer: Any, pairs: Sequence[dict[str, Any]] | Any, side: str = "chosen",
                     batch_size: int = 8) -> list[float]:
    """``log π(pair[side] | prompt)`` (summed over the message tokens) for each pair, tokenised as
    :func:`preference_margins` does: what moves one side of the pairs, where the margin shows only their difference
    (DPO lowers the rejected turns it trains on; fine-tuning on the chosen ones alone does not)."""
    torch = require("torch", "train")
    rows = list(pairs)
    was_training = model.training
    model.eval()
    try:
        return [logp for start in range(0, len(rows), batch_size)
                for logp in _message_logprobs(model, tokenizer, [_prompt_and_message_ids(tokenizer, row["prompt"],
                                                                                         row[side])
                                                                 for row in rows[start:start + batch_size]], torch)]
    finally:
        model.train(was_training)


def _prompt_and_message_ids(tokenizer: Any, prompt: list[dict], message: list[dict]) -> tuple[list[int], int]:
    from trl.data_utils import common_prefix_length

    prompt_ids = tokenizer.apply_chat_template(prompt, tokenize=True, add_generation_prompt=True, return_dict=True)
    full_ids = tokenizer.apply_chat_template(prompt + message, tokenize=True, return_dict=True)
    prompt_ids, full_ids = list(prompt_ids["input_ids"]), list(full_ids["input_ids"])
    return full_ids, common_prefix_length(prompt_ids, full_ids)


def _message_logprobs(model: Any, tokenizer: Any, sequences: list[tuple[list[int], int]], torch: Any) -> list[float]:
    device = next(model.parameters()).device
    length = max(len(ids) for ids, _ in sequences)
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    input_ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    attention = torch.zeros_like(input_ids)
    message_mask = torch.zeros_like(input_ids, dtype=torch.bool)
    for i, (ids, prompt_length) in enumerate(sequences):
        input_ids[i, :len(ids)] = torch.tensor(ids)
        attention[i, :len(ids)] = 1
        message_mask[i, prompt_length:len(ids)] = True
    input_ids, attention, message_mask = input_ids.to(device), attention.to(device), message_mask.to(device)
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=attention).logits[:, :-1].float()
    token_logps = torch.log_softmax(logits, dim=-1).gather(-1, input_ids[:, 1:, None]).squeeze(-1)
    return (token_logps * message_mask[:, 1:]).sum(dim=1).tolist()
