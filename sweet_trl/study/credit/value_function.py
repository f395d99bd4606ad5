"""The value-function baseline of the paper's comparison: a scalar head regressed on returns, without ``c``.

The policy's base model with a one-output regression head (``AutoModelForSequenceClassification``, LoRA on every
linear layer, the head trained in full) reads the dialogue up to and including one agent message, the way the
policy sees it (its chat template, the environment's instructions, no privileged information), and predicts the
episode's return (fraction of hidden tests passed) by mean squared error. Training examples: every agent turn of
the collection's trajectories, labelled with its episode's reward. A candidate's score is the predicted return
after it, so ranking candidates by it is ranking by an estimated Q-value.

    model_dir = train_value_function(records, base_model, out_dir, ValueFunctionSettings())
    scorer = ValueFunctionScorer(model_dir)
    scorer.scores(prompt_messages, candidates)        # one predicted return per candidate
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

SETTINGS_FILE = "value_function_settings.json"


@dataclass(frozen=True)
class ValueFunctionSettings:
    """Training settings (all part of the cache key).

    Attributes:
        learning_rate, epochs, batch_size, lora_r: the regression's optimisation (LoRA alpha is twice the rank).
        max_length: longest tokenised input; longer dialogues keep their end (the agent message being valued).
        bf16: train and score in bfloat16 (where the CPU or GPU computes it natively).
        seed: initialisation and data order.
    """

    learning_rate: float = 2e-4
    epochs: float = 2.0
    batch_size: int = 8
    lora_r: int = 16
    max_length: int = 1024
    bf16: bool = False
    seed: int = 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def turn_examples(records: Sequence[Mapping[str, Any]], env_id: str, max_turns: int) -> list[dict[str, Any]]:
    """``{"messages", "label"}`` for every agent turn of every scored trajectory: the policy's view of the dialogue
    through that turn, and the episode's reward."""
    from sweet_trl.trajectories import Trajectory
    from sweet_trl.turn_pairs import policy_conversation

    out = []
    for record in records:
        trajectory = Trajectory(record)
        if trajectory.reward is None or trajectory.has_infra_error:
            continue
        conversation = policy_conversation(record, env_id, max_turns)
        for end, message in enumerate(conversation):
            if message["role"] == "assistant":
                out.append({"messages": conversation[:end + 1], "label": float(trajectory.reward)})
    return out


def _encode(tokenizer: Any, messages: Sequence[Mapping[str, str]], max_length: int) -> list[int]:
    ids = tokenizer.apply_chat_template(list(messages), tokenize=True)
    ids = list(ids["input_ids"] if isinstance(ids, Mapping) else ids)
    return ids[-max_length:]  # the end holds the message being valued


def train_value_function(records: Sequence[Mapping[str, Any]], base_model: str, out_dir: Any,
                         settings: ValueFunctionSettings, *, env_id: str, max_turns: int) -> Path:
    """Fit the head (or reuse ``out_dir/model`` trained under the same settings and data) and return its folder."""
    import torch
    import transformers
    from peft import LoraConfig, get_peft_model

    out_dir = Path(out_dir)
    examples = turn_examples(records, env_id, max_turns)
    if not examples:
        raise ValueError("no scored trajectory to regress returns on")
    key = {**settings.to_dict(), "base_model": str(base_model), "examples": len(examples),
           "label_sum": round(sum(e["label"] for e in examples), 6)}
    model_dir = out_dir / "model"
    if (model_dir / SETTINGS_FILE).exists() and json.loads((model_dir / SETTINGS_FILE).read_text()) == key:
        return model_dir

    transformers.set_seed(settings.seed)
    dtype = torch.bfloat16 if settings.bf16 else torch.float32
    tokenizer = transformers.AutoTokenizer.from_pretrained(base_model)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = transformers.AutoModelForSequenceClassification.from_pretrained(
        base_model, num_labels=1, problem_type="regression", dtype=dtype)
    model.config.pad_token_id = tokenizer.pad_token_id
    model = get_peft_model(model, LoraConfig(task_type="SEQ_CLS", r=settings.lora_r, lora_alpha=2 * settings.lora_r,
                                             target_modules="all-linear"))

    class Examples(torch.utils.data.Dataset):
        def __len__(self) -> int:
            return len(examples)

        def __getitem__(self, index: int) -> dict[str, Any]:
            example = examples[index]
            return {"input_ids": _encode(tokenizer, example["messages"], settings.max_length),
                    "labels": example["label"]}

    args = transformers.TrainingArguments(
        output_dir=str(out_dir / "checkpoints"), learning_rate=settings.learning_rate,
        num_train_epochs=settings.epochs, per_device_train_batch_size=settings.batch_size, bf16=settings.bf16,
        logging_steps=10, save_strategy="no", report_to=[], seed=settings.seed, remove_unused_columns=False,
        use_cpu=not torch.cuda.is_available())
    trainer = transformers.Trainer(model=model, args=args, train_dataset=Examples(),
                                   data_collator=transformers.DataCollatorWithPadding(tokenizer))
    trainer.train()
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    (model_dir / SETTINGS_FILE).write_text(json.dumps(key), encoding="utf-8")
    return model_dir


class ValueFunctionScorer:
    """A trained head as a ranker: the predicted return after each candidate."""

    def __init__(self, model_dir: Any, batch_size: int = 16, bf16: bool = False):
        import torch
        import transformers
        from peft import AutoPeftModelForSequenceClassification

        dtype = torch.bfloat16 if bf16 else torch.float32
        self.tokenizer = transformers.AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoPeftModelForSequenceClassification.from_pretrained(str(model_dir), num_labels=1,
                                                                           dtype=dtype).eval()
        self.model.config.pad_token_id = self.tokenizer.pad_token_id
        self.batch_size = batch_size
        self.max_length = json.loads((Path(model_dir) / SETTINGS_FILE).read_text())["max_length"]

    def scores(self, prompt: Sequence[Mapping[str, str]], candidates: Sequence[str]) -> list[float]:
        import torch

        encoded = [_encode(self.tokenizer, [*prompt, {"role": "assistant", "content": c}], self.max_length)
                   for c in candidates]
        out: list[float] = []
        for start in range(0, len(encoded), self.batch_size):
            batch = self.tokenizer.pad({"input_ids": encoded[start:start + self.batch_size]}, return_tensors="pt")
            with torch.no_grad():
                logits = self.model(**batch).logits
            out.extend(float(x) if math.isfinite(float(x)) else math.nan for x in logits[:, 0].float())
        return out
