"""Configuration of the SWEET-RL turn-level preference trainer (:class:`TurnPreferenceTrainer`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from colbench_gym._optional import require
from sweet_trl.precision import apply_default_precision
from sweet_trl.transformers_compat import checkpointing_by_current_name

DPOConfig = require("trl", "train").DPOConfig


@dataclass
class TurnPreferenceConfig(DPOConfig):
    r"""
    Configuration of [`TurnPreferenceTrainer`]: DPO on turn-level pairs plus an NLL term on the chosen turn.

    The policy is trained on pairs ``{"prompt": history, "chosen": [one agent message], "rejected": [one agent
    message]}`` built by :mod:`sweet_trl.turn_pairs`; the history holds the system instructions and the dialogue so
    far, never the privileged information that the critic saw. The loss per pair is

        -log σ(β [(log π(y⁺|x) - log π_ref(y⁺|x)) - (log π(y⁻|x) - log π_ref(y⁻|x))]) + nll_coef · NLL(y⁺|x)

    where the NLL is the mean negative token log-likelihood of the chosen messages in the batch (TRL's ``"sft"``
    loss type). Every field of [`~trl.DPOConfig`] and [`~transformers.TrainingArguments`] is accepted as well;
    the defaults below follow the released SWEET-RL recipe.

    Parameters:
        nll_coef (`float`, *optional*, defaults to `0.01`):
            Weight of the negative log-likelihood of the chosen message, added to the DPO loss as TRL's ``"sft"``
            loss type. ``0`` gives plain DPO. If ``loss_type`` already lists ``"sft"``, its weight must equal
            ``nll_coef`` (this is what a saved and reloaded configuration looks like).
        beta (`float`, *optional*, defaults to `0.1`):
            DPO temperature: larger values keep the policy closer to the reference policy.
        learning_rate (`float`, *optional*, defaults to `2e-7`):
            AdamW learning rate for full fine-tuning. With LoRA (``ModelConfig(use_peft=True)``) use a larger one,
            around ``1e-5``.
        max_length (`int` or `None`, *optional*, defaults to `16384`):
            Longest prompt + message, in tokens. Late turns of a ten-turn dialogue are long, and TRL drops a pair
            whose prompt alone fills ``max_length``, so the limit is far above DPO's default of 1024.
        num_train_epochs (`float`, *optional*, defaults to `1`):
            Passes over the turn-level pairs.
        per_device_train_batch_size (`int`, *optional*, defaults to `1`), gradient_accumulation_steps (`int`,
        *optional*, defaults to `8`):
            Pairs per device per step and steps per update: 8 pairs per update on one device.
        share_prompt (`bool`, *optional*, defaults to `True`):
            Run each pair's prompt through the model once and continue both messages from its key-value cache
            (:mod:`sweet_trl.shared_prompt`), instead of twice as TRL does. Same loss and gradients to float
            rounding; turn pairs are mostly prompt, so a step computes about 40% fewer tokens (x1.28 per pass on CPU,
            benchmarks/dpo_step.py). With gradient checkpointing (which drops the cache) it runs TRL's pass.

    LoRA and QLoRA are configured the usual TRL way, outside this class: a ``peft.LoraConfig`` passed to the
    trainer as ``peft_config`` (e.g. from ``trl.get_peft_config(ModelConfig(use_peft=True, ...))``) and, for QLoRA,
    a ``transformers.BitsAndBytesConfig(load_in_4bit=True)`` passed as ``quantization_config`` with the model given
    by name, or placed in ``model_init_kwargs``. :func:`sweet_trl.policy_trainer.train_turn_preference` does both
    from a ``trl.ModelConfig``. An unset ``bf16`` means bf16 where a bf16 accelerator is present and float32
    elsewhere (TRL would turn it on everywhere).

    Example::

        config = TurnPreferenceConfig(output_dir="runs/policy", nll_coef=0.01, beta=0.1)
    """

    nll_coef: float = field(
        default=0.01,
        metadata={"help": "Weight of the NLL of the chosen message added to the DPO loss (TRL's 'sft' loss type)."},
    )
    beta: float = field(
        default=0.1,
        metadata={"help": "DPO temperature: larger values keep the policy closer to the reference policy."},
    )
    learning_rate: float = field(default=2e-7, metadata={"help": "AdamW learning rate."})
    max_length: int | None = field(
        default=16384,
        metadata={"help": "Longest prompt + message in tokens; pairs whose prompt alone is longer are dropped."},
    )
    num_train_epochs: float = field(default=1.0, metadata={"help": "Passes over the turn-level pairs."})
    per_device_train_batch_size: int = field(default=1, metadata={"help": "Pairs per device per step."})
    gradient_accumulation_steps: int = field(default=8, metadata={"help": "Steps accumulated per update."})
    share_prompt: bool = field(
        default=True,
        metadata={"help": "Run each pair's prompt once and continue both messages from its cache (same loss)."},
    )

    def __post_init__(self):
        apply_default_precision(self)
        checkpointing_by_current_name(self)
        self.loss_type, self.loss_weights = with_nll_term(self.loss_type, self.loss_weights, self.nll_coef)
        super().__post_init__()


def with_nll_term(loss_type: str | list[str], loss_weights: list[float] | None, nll_coef: float
                  ) -> tuple[list[str], list[float] | None]:
    """TRL's ``loss_type`` and ``loss_weights`` with the chosen side's NLL (``"sft"``) at weight ``nll_coef``;
    unchanged when ``nll_coef`` is 0 and ``"sft"`` is not listed. A listed ``"sft"`` (a saved and reloaded
    configuration) must carry that same weight."""
    if nll_coef < 0:
        raise ValueError(f"nll_coef must be >= 0, got {nll_coef}")
    loss_type = [loss_type] if isinstance(loss_type, str) else list(loss_type)
    weights = list(loss_weights) if loss_weights is not None else None
    if weights is not None and len(weights) != len(loss_type):
        raise ValueError(f"loss_weights {weights} must have one weight per loss_type {loss_type}")
    if "sft" in loss_type:
        index = loss_type.index("sft")
        if weights is None:
            weights = [1.0] * len(loss_type)
            weights[index] = nll_coef
        elif abs(weights[index] - nll_coef) > 1e-12:
            raise ValueError(f"loss_type lists 'sft' with weight {weights[index]} but nll_coef is {nll_coef}: "
                             "set the NLL weight with nll_coef only")
    elif nll_coef > 0:
        loss_type.append("sft")
        weights = (weights or [1.0] * (len(loss_type) - 1)) + [nll_coef]
    return loss_type, weights
