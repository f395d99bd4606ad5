"""SWEET-RL's asymmetric turn-level critic, trained with TRL's ``DPOTrainer`` machinery (arXiv 2503.15478).

Train a critic on pairs built from rollouts with the pipeline CLI::

    sweet-rl critic-pairs --config run.yaml
    sweet-rl train-critic --config run.yaml [--push_to_hub]

or in Python::

    from sweet_trl.critic_config import SweetCriticConfig
    from sweet_trl.critic_trainer import SweetCriticTrainer
    from sweet_trl.pairs import critic_pair_dataset

    pairs = critic_pair_dataset("runs/rollouts.jsonl", preset="backend")
    trainer = SweetCriticTrainer("meta-llama/Llama-3.1-8B-Instruct", args=SweetCriticConfig("runs/critic"),
                                 train_dataset=pairs)
    trainer.train()
    trainer.save_model()             # weights, tokenizer, sweet_critic.json (how to read c), README.md

What differs from DPO: a row holds two whole trajectories of one task (``chosen``, ``rejected``: message lists)
and the privileged text ``privileged`` the critic reads first; every agent turn of both is scored (simulator
tokens never are), and the loss compares trajectory scores built from per-turn advantages (``sweet_trl.losses``).
The reference model, PEFT (reference = adapters disabled, one model in memory), QLoRA, precomputed reference
log-probs, fused LM head and metric logging are DPOTrainer's own.
"""

from __future__ import annotations

import copy
import json
import logging
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate.utils import is_peft_model
from datasets import Dataset, IterableDataset
from transformers import AutoTokenizer, PreTrainedModel
from transformers.data.data_collator import DataCollatorMixin
from trl import DPOTrainer
from trl.trainer.utils import get_config_model_id, pad, use_adapter

from sweet_trl import losses
from sweet_trl.critic import CRITIC_METADATA_FILE, forward_turn_logps
from sweet_trl.critic_config import SweetCriticConfig
from sweet_trl.model_cards import SWEET_PAPER, SWEET_PAPER_ID, sweet_model_card
from sweet_trl.shared_prompt import SharedPromptLoss
from sweet_trl.tokenization import CriticInputFormat, conversation_messages, tokenize_critic_input
from sweet_trl.trainer_utils import require_rows
from sweet_trl.transformers_compat import checkpointing_disabled

logger = logging.getLogger(__name__)

TOKENIZED_COLUMNS = ("chosen_input_ids", "chosen_turn_ids", "rejected_input_ids", "rejected_turn_ids")


@dataclass
class DataCollatorForTrajectoryPairs(DataCollatorMixin):
    """Pads tokenised pairs into one batch: rows ``[chosen_0..chosen_B, rejected_0..rejected_B]``.

    Returns ``input_ids``, ``attention_mask`` and ``turn_ids`` (``[2B, L]``, right-padded, ``turn_ids`` 0 on
    padding), plus ``ref_chosen_logps`` / ``ref_rejected_logps`` (``[B, T]`` per-turn reference sums, ``T`` the
    batch's most turns) when the reference log-probs were precomputed.
    """

    pad_token_id: int
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"

    def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
        sequences = [e["chosen_input_ids"] for e in examples] + [e["rejected_input_ids"] for e in examples]
        turns = [e["chosen_turn_ids"] for e in examples] + [e["rejected_turn_ids"] for e in examples]
        kwargs = {"padding_side": "right", "pad_to_multiple_of": self.pad_to_multiple_of}
        batch = {
            "input_ids": pad([torch.tensor(s) for s in sequences], padding_value=self.pad_token_id, **kwargs),
            "attention_mask": pad([torch.ones(len(s), dtype=torch.long) for s in sequences], padding_value=0, **kwargs),
            "turn_ids": pad([torch.tensor(t) for t in turns], padding_value=0, **kwargs),
        }
        if "ref_chosen_logps" in examples[0]:
            num_turns = int(batch["turn_ids"].max())
            for side in ("chosen", "rejected"):
                batch[f"ref_{side}_logps"] = torch.tensor([e[f"ref_{side}_logps"][:num_turns] for e in examples])
        return batch


def _dialogue(value: Any, side: str) -> list[dict[str, str]]:
    if isinstance(value, Mapping) and "dialogue_history" in value:
        value = value["dialogue_history"]
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise ValueError(f"'{side}' must be a list of chat messages (a trajectory's dialogue history), "
                         f"got {type(value).__name__}")
    return conversation_messages(value)


def check_pair_row(row: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` for a pair that would give a silently wrong loss (two tasks, or rewards not ordered)."""
    chosen_task, rejected_task = row.get("chosen_task_id"), row.get("rejected_task_id")
    if chosen_task is not None and rejected_task is not None and chosen_task != rejected_task:
        raise ValueError(f"critic pair mixes two tasks ({chosen_task!r} and {rejected_task!r}): both trajectories "
                         "must come from the task whose privileged information the critic reads")
    chosen_reward, rejected_reward = row.get("chosen_reward"), row.get("rejected_reward")
    if chosen_reward is not None and rejected_reward is not None and not chosen_reward > rejected_reward:
        raise ValueError(f"critic pair of task {row.get('task_id')!r}: chosen reward {chosen_reward} does not exceed "
                         f"rejected reward {rejected_reward}")


def tokenize_pair(row: Mapping[str, Any], tokenizer: Any, fmt: CriticInputFormat) -> dict[str, Any]:
    """Tokenise one pair row; ``drop_reason`` is ``""`` or why the pair cannot be used (e.g. ``"chosen:too_long"``)."""
    check_pair_row(row)
    output: dict[str, Any] = {"drop_reason": "", "privileged_truncated": False}
    privileged = row.get("privileged")
    if fmt.use_privileged and not (isinstance(privileged, str) and privileged.strip()):
        output["drop_reason"] = "no_privileged"
    for side in ("chosen", "rejected"):
        if output["drop_reason"] == "no_privileged":
            output.update({f"{side}_input_ids": [], f"{side}_turn_ids": [], f"{side}_num_turns": 0})
            continue
        result = tokenize_critic_input(tokenizer, _dialogue(row[side], side), privileged, fmt)
        conversation = result.conversation
        output[f"{side}_input_ids"] = conversation.input_ids if conversation else []
        output[f"{side}_turn_ids"] = conversation.turn_ids if conversation else []
        output[f"{side}_num_turns"] = conversation.num_turns if conversation else 0
        output["privileged_truncated"] |= result.privileged_truncated
        if result.drop_reason and not output["drop_reason"]:
            output["drop_reason"] = f"{side}:{result.drop_reason}"
    return output


class SweetCriticTrainer(SharedPromptLoss, DPOTrainer):
    """Trainer for the asymmetric turn-level critic of SWEET-RL.

    Args:
        model: model id or path, ``PreTrainedModel`` or ``PeftModel`` (initialised from the policy's base model).
        ref_model: the frozen reference; by default the initial model (a copy of ``model``, the base model with
            adapters disabled under PEFT, or nothing in memory with ``precompute_ref_log_probs``).
        args: a :class:`~sweet_trl.critic_config.SweetCriticConfig`.
        train_dataset, eval_dataset: pair rows ``{"privileged", "chosen", "rejected", ...}``, see ``sweet_trl.pairs``.
            Rows that cannot be used (too long, no agent turn) are dropped and counted in ``self.data_report``;
            rows mixing two tasks or with a chosen reward not above the rejected one raise ``ValueError``, and so
            does a dataset that is empty or left without a usable pair.
        processing_class: the tokenizer (with the chat template); loaded from ``model`` when omitted.
        quantization_config: ``BitsAndBytesConfig`` for QLoRA, with ``model`` given as an id or path.
        peft_config: e.g. ``peft.LoraConfig``; the reference is then the base model with adapters disabled.
        turn_advantage_l2: coefficient of ``losses.turn_advantage_penalty`` (the mean squared per-turn advantage)
            added to the loss; 0 (the default, the paper's loss) leaves it out. The loss constrains only each
            trajectory's sum of turn advantages, so without it credit can settle on turns that merely follow the
            decisive one, and turns that take no part in a pair drift (see ``tests/test_learning_critic.py``).
            Defaults to ``args.turn_advantage_l2`` (``SweetCriticConfig``).

    Logged metrics (``eval_`` prefix in evaluation): ``pair_accuracy``, ``margin`` (beta x score difference),
    ``scores/chosen`` and ``scores/rejected`` are means over the pairs of each logging window (or of the whole
    evaluation set); ``advantages/{chosen,rejected}`` (mean turn advantage), ``advantages/{min,max,std}`` and
    ``turns/{chosen,rejected}`` (agent turns per trajectory) are averaged over its steps; ``num_tokens``.
    """

    _tag_names = ["trl", "sweet-rl", "critic"]
    _name = "SWEET-RL critic"
    _paper = SWEET_PAPER

    def __init__(
        self,
        model: str | PreTrainedModel,
        ref_model: PreTrainedModel | None = None,
        args: SweetCriticConfig | None = None,
        data_collator: Any = None,
        train_dataset: Dataset | IterableDataset | None = None,
        eval_dataset: Dataset | IterableDataset | dict[str, Dataset] | None = None,
        processing_class: Any = None,
        callbacks: list | None = None,
        optimizers: tuple = (None, None),
        quantization_config: Any = None,
        peft_config: Any = None,
        turn_advantage_l2: float | None = None,
    ):
        if args is None:
            name = model if isinstance(model, str) else get_config_model_id(model.config)
            args = SweetCriticConfig(f"{Path(name or 'model').name}-SWEET-critic")
        if not isinstance(args, SweetCriticConfig):
            raise TypeError(f"args must be a SweetCriticConfig, got {type(args).__name__}")
        if train_dataset is None:
            raise ValueError("train_dataset is required: critic pairs from sweet_trl.pairs.critic_pair_dataset")
        require_rows(train_dataset, "train critic pairs")  # DPOTrainer reads a first row before anything else
        if turn_advantage_l2 is None:
            turn_advantage_l2 = getattr(args, "turn_advantage_l2", 0.0)
        if not turn_advantage_l2 >= 0:
            raise ValueError(f"turn_advantage_l2 must be >= 0, got {turn_advantage_l2}")
        self.turn_advantage_l2 = float(turn_advantage_l2)
        self.critic_format = args.critic_input_format()
        self.data_report: dict[str, dict[str, Any]] = {}
        if processing_class is None:
            source = model if isinstance(model, str) else get_config_model_id(model.config)
            processing_class = AutoTokenizer.from_pretrained(source, trust_remote_code=args.trust_remote_code)
        if processing_class.pad_token is None:
            processing_class.pad_token = processing_class.eos_token
        if data_collator is None:
            data_collator = DataCollatorForTrajectoryPairs(
                pad_token_id=processing_class.pad_token_id, pad_to_multiple_of=args.pad_to_multiple_of
            )
        # The reference is the initial critic. A model passed as an object may differ from the checkpoint at its
        # path (or have none), so it is copied now rather than reloaded from disk as DPOTrainer would.
        if (ref_model is None and isinstance(model, PreTrainedModel) and not is_peft_model(model)
                and peft_config is None and not args.precompute_ref_log_probs):
            ref_model = copy.deepcopy(model).eval().requires_grad_(False)
        self._reference_model_id = model if isinstance(model, str) else get_config_model_id(model.config) or None
        super().__init__(
            model=model, ref_model=ref_model, args=args, data_collator=data_collator, train_dataset=train_dataset,
            eval_dataset=eval_dataset, processing_class=processing_class, callbacks=callbacks,
            optimizers=optimizers, quantization_config=quantization_config, peft_config=peft_config,
        )

    # ------------------------------------------------------------------------------------------------ data
    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        require_rows(dataset, f"{dataset_name} critic pairs")
        columns = dataset.column_names or list(next(iter(dataset)).keys())
        if all(c in columns for c in TOKENIZED_COLUMNS):
            return dataset  # already prepared (DPOTrainer.evaluate calls this again)
        needed = {"chosen", "rejected"} | ({"privileged"} if self.critic_format.use_privileged else set())
        if missing := needed - set(columns):
            raise ValueError(f"{dataset_name} dataset lacks column(s) {sorted(missing)}; critic pairs need "
                             "'privileged', 'chosen' and 'rejected' (see sweet_trl.pairs.build_critic_pairs)")
        tokenizer = getattr(processing_class, "tokenizer", processing_class)
        map_kwargs: dict[str, Any] = {"fn_kwargs": {"tokenizer": tokenizer, "fmt": self.critic_format}}
        if isinstance(dataset, Dataset):
            map_kwargs.update(num_proc=args.dataset_num_proc, desc=f"Tokenizing {dataset_name} critic pairs")
        dataset = dataset.map(tokenize_pair, **map_kwargs)
        if not isinstance(dataset, Dataset):
            logger.warning("%s: streaming dataset, unusable pairs are dropped without being counted", dataset_name)
            return dataset.filter(lambda row: row["drop_reason"] == "")
        reasons = Counter(dataset["drop_reason"])
        kept = reasons.pop("", 0)
        report = {"pairs": len(dataset), "kept": kept, "dropped": dict(reasons),
                  "privileged_truncated": sum(dataset["privileged_truncated"])}
        self.data_report[dataset_name] = report
        if reasons:
            logger.warning("%s: dropped %d of %d critic pairs: %s", dataset_name, sum(reasons.values()),
                           len(dataset), dict(reasons))
        if report["privileged_truncated"]:
            logger.warning("%s: privileged information truncated in %d pairs to fit max_length=%s", dataset_name,
                           report["privileged_truncated"], args.max_length)
        if kept == 0:
            raise ValueError(f"no usable critic pair in the {dataset_name} dataset: {report}")
        filter_kwargs = {"num_proc": args.dataset_num_proc, "desc": f"Dropping unusable {dataset_name} pairs"}
        return dataset.filter(lambda reason: reason == "", input_columns="drop_reason", **filter_kwargs)

    def _set_signature_columns_if_needed(self):
        if self._signature_columns is None:
            self._signature_columns = [*TOKENIZED_COLUMNS, "ref_chosen_logps", "ref_rejected_logps"]

    def _precompute_ref_logps(self, dataset, name, batch_size):
        # Reference sums are stored per turn, padded to the dataset's most turns (one fixed width per column)
        self._ref_turn_width = max(max(dataset["chosen_num_turns"]), max(dataset["rejected_num_turns"]))
        return super()._precompute_ref_logps(dataset, name, batch_size)

    # ------------------------------------------------------------------------------------------------ loss
    def _reference_turn_logps(self, model, inputs, num_turns):
        """Per-turn reference log-prob sums; ``model`` is the trained model (the reference itself before training)."""
        args = (inputs["input_ids"], inputs["attention_mask"], inputs["turn_ids"], num_turns)
        unwrapped = self.accelerator.unwrap_model(self.model)
        with torch.no_grad(), checkpointing_disabled(self.model, self.args.gradient_checkpointing_kwargs):
            if self.ref_model is not None:
                return forward_turn_logps(self.ref_model, *args)[0]
            if is_peft_model(unwrapped):  # the base model with adapters disabled (or a "ref" copy of the adapter)
                with use_adapter(unwrapped, adapter_name="ref" if "ref" in unwrapped.peft_config else None):
                    return forward_turn_logps(model, *args)[0]
            return forward_turn_logps(model, *args)[0]  # precomputing, before any update

    def compute_ref_log_probs(self, model, inputs):
        """Per-turn reference log-prob sums for ``precompute_ref_log_probs``: ``[B, width]`` chosen and rejected."""
        with self.accelerator.autocast():
            ref = self._reference_turn_logps(model, inputs, self._ref_turn_width)
        return ref.float().chunk(2, dim=0)

    def _compute_loss(self, model, inputs, return_outputs):
        mode = "train" if self.model.training else "eval"
        turn_ids = inputs["turn_ids"]
        num_turns = int(turn_ids.max())
        turn_logps, _ = forward_turn_logps(model, inputs["input_ids"], inputs["attention_mask"], turn_ids, num_turns)
        if self.precompute_ref_logps:
            ref_turn_logps = torch.cat([inputs["ref_chosen_logps"], inputs["ref_rejected_logps"]]).to(turn_logps)
            if ref_turn_logps.size(1) != num_turns:
                raise ValueError(f"precomputed reference log-probs cover {ref_turn_logps.size(1)} turns, the batch "
                                 f"has {num_turns}: the dataset changed after they were computed")
        else:
            ref_turn_logps = self._reference_turn_logps(model, inputs, num_turns)
        counts = losses.count_by_turn(turn_ids[:, 1:], num_turns)
        scores = losses.trajectory_scores(turn_logps, ref_turn_logps, counts, self.args.score_normalization)
        chosen_scores, rejected_scores = scores.chunk(2)
        loss, metrics = losses.preference_loss(chosen_scores, rejected_scores, self.beta)
        if self.turn_advantage_l2:
            penalty = losses.turn_advantage_penalty(losses.turn_advantages(turn_logps, ref_turn_logps, counts), counts)
            loss = loss + self.turn_advantage_l2 * penalty
            self._metrics[mode]["turn_advantage_penalty"].append(self.accelerator.gather(penalty.detach()).mean().item())
        advantages = losses.turn_advantages(turn_logps.detach(), ref_turn_logps, counts)
        self._log_critic_metrics(mode, metrics, advantages, counts, inputs)
        return (loss, None) if return_outputs else loss

    def _log_critic_metrics(self, mode, metrics, advantages, counts, inputs):
        gather = self.accelerator.gather_for_metrics
        # One entry per pair, not one mean per batch: DPOTrainer.log averages the entries, and a short last batch
        # must weigh by its pairs (held-out accuracy is then the fraction of held-out pairs ranked right).
        for key, value in metrics.items():
            self._metrics[mode][key].extend(gather(value).float().tolist())
        # Ranks hold different numbers of turns, so only fixed-size statistics are gathered
        has_turn = counts > 0
        chosen_has, rejected_has = has_turn.chunk(2)
        chosen_adv, rejected_adv = (advantages * has_turn).chunk(2)
        stats = torch.stack([
            chosen_adv.sum(), chosen_has.sum(), rejected_adv.sum(), rejected_has.sum(),
            (advantages * has_turn).pow(2).sum(),
        ]).float()[None]
        extremes = torch.stack([advantages[has_turn].max(), -advantages[has_turn].min()]).float()[None]
        # plain all-gather: gather_for_metrics would trim these per-rank rows as if they were samples
        chosen_sum, chosen_n, rejected_sum, rejected_n, square_sum = self.accelerator.gather(stats).sum(0).tolist()
        top, neg_bottom = self.accelerator.gather(extremes).max(0).values.tolist()
        n = chosen_n + rejected_n
        mean = (chosen_sum + rejected_sum) / n
        self._metrics[mode]["advantages/chosen"].append(chosen_sum / chosen_n)
        self._metrics[mode]["advantages/rejected"].append(rejected_sum / rejected_n)
        self._metrics[mode]["advantages/min"].append(-neg_bottom)
        self._metrics[mode]["advantages/max"].append(top)
        self._metrics[mode]["advantages/std"].append(max(square_sum / n - mean**2, 0.0) ** 0.5)
        self._metrics[mode]["turns/chosen"].append(gather(chosen_has.sum(1).float()).mean().item())
        self._metrics[mode]["turns/rejected"].append(gather(rejected_has.sum(1).float()).mean().item())
        if mode == "train":
            self._total_train_tokens += gather(inputs["attention_mask"].sum()).sum().item() // self._tp_size
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]

    def prediction_step(self, model, inputs, prediction_loss_only, ignore_keys=None):
        inputs = self._prepare_inputs(inputs)
        with torch.no_grad(), self.compute_loss_context_manager():
            loss = self.compute_loss(model, inputs)
        return loss.detach(), None, None

    # ------------------------------------------------------------------------------------------------ saving
    def critic_metadata(self) -> dict[str, Any]:
        """What ``SweetCritic.from_pretrained`` needs besides the weights (written as ``sweet_critic.json``)."""
        return {
            "method": "SWEET-RL critic",
            "paper": f"arXiv:{SWEET_PAPER_ID}",
            "input_format": self.critic_format.to_dict(),
            "score_normalization": self.args.score_normalization,
            "beta": self.beta,
            "turn_advantage_l2": self.turn_advantage_l2,
            "peft": is_peft_model(self.accelerator.unwrap_model(self.model)),
            # a full fine-tune needs its initial model as reference; a PEFT adapter records its own base model
            "reference_model": self._reference_model_id,
        }

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        super().save_model(output_dir, _internal_call)
        output_dir = output_dir or self.args.output_dir
        if self.args.should_save:
            os.makedirs(output_dir, exist_ok=True)
            with open(os.path.join(output_dir, CRITIC_METADATA_FILE), "w", encoding="utf-8") as handle:
                json.dump(self.critic_metadata(), handle, indent=2)
            if not _internal_call:
                self.create_model_card(output_dir=output_dir)

    def create_model_card(self, model_name: str | None = None, dataset_name: str | None = None,
                          tags: str | list[str] | None = None, output_dir: str | None = None, **_: Any):
        """Write ``README.md``: the SWEET-RL critic card (method, usage, settings, last eval metrics, citation)."""
        if not self.is_world_process_zero():
            return
        base_model = self._reference_model_id
        if base_model and os.path.isdir(base_model):
            base_model = None  # a local path is no Hub id
        eval_metrics = {}
        for entry in self.state.log_history:
            eval_metrics.update({k: v for k, v in entry.items() if k.startswith("eval_")})
        settings = {
            "beta": self.beta, "score_normalization": self.args.score_normalization,
            "turn_advantage_l2": self.turn_advantage_l2,
            "learning_rate": self.args.learning_rate, "num_train_epochs": self.args.num_train_epochs,
            "global_batch_size": self.args.per_device_train_batch_size * self.args.gradient_accumulation_steps
            * self.args.world_size,
            "max_length": self.args.max_length, "use_privileged": self.critic_format.use_privileged,
            "privileged_placement": self.critic_format.privileged_placement,
            "peft": is_peft_model(self.accelerator.unwrap_model(self.model)),
        }
        if isinstance(tags, str):
            tags = [tags]
        card = sweet_model_card(
            role="critic",
            model_name=model_name or Path(self.args.hub_model_id or self.args.output_dir).name,
            base_model=base_model,
            hub_model_id=self.hub_model_id,
            dataset_name=dataset_name,
            tags=[*self._tag_names, *(tags or [])],
            hyperparameters=settings,
            metrics=eval_metrics or None,
        )
        card.save(os.path.join(output_dir or self.args.output_dir, "README.md"))
