"""What every trainer here shares: reading rows, TRL's model and LoRA/QLoRA inputs, the DPO reference, fit-and-save.

The critic (:mod:`sweet_trl.critic_trainer`), the turn-level policy trainer (:mod:`sweet_trl.policy_trainer`),
best-of-N fine-tuning and the baselines (:mod:`sweet_trl.baselines`) build their TRL trainers from these::

    from sweet_trl.trainer_utils import as_dataset, fit_and_save, trainer_inputs
    model, tokenizer, peft_config, _ = trainer_inputs(config, model_config)   # a trl.ModelConfig, or model=...
    trainer = MyTrainer(model=model, args=config, train_dataset=as_dataset("runs/x/pairs.jsonl"), ...)
    fit_and_save(trainer, config, tokenizer)
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, NamedTuple

from colbench_gym._optional import require


def require_rows(dataset: Any, what: str) -> None:
    """Raise ``ValueError`` when ``dataset`` (a ``Dataset``, an ``IterableDataset`` or a list) holds no row: TRL's
    trainers would otherwise fail with a bare ``StopIteration`` or a sampler error."""
    empty = len(dataset) == 0 if hasattr(dataset, "__len__") else next(iter(dataset), None) is None
    if empty:
        raise ValueError(f"no {what}: the dataset is empty")


def default_reference(model: Any, ref_model: Any, args: Any, peft_config: Any) -> Any:
    """The reference policy DPO compares against when none is given.

    TRL reloads the reference from the model's name, which fails for a model built in memory; a frozen copy is
    the same thing. With LoRA (or precomputed reference log-probs) no copy is needed: TRL disables the adapter.
    """
    if ref_model is not None or isinstance(model, str) or peft_config is not None or args.precompute_ref_log_probs:
        return ref_model
    if hasattr(model, "peft_config") or getattr(model, "is_loaded_in_4bit", False) or getattr(
            model, "is_loaded_in_8bit", False):
        return None
    reference = copy.deepcopy(model)
    reference.requires_grad_(False)
    return reference.eval()


def load_rows(path: str | Path) -> Any:
    """A ``datasets.Dataset`` from a ``save_to_disk`` folder, a JSON/JSONL file or a Parquet file."""
    datasets = require("datasets", "hub")
    path = Path(path)
    if path.is_dir():
        loaded = datasets.load_from_disk(str(path))
        if isinstance(loaded, datasets.DatasetDict):
            if "train" not in loaded:
                raise ValueError(f"{path} holds splits {list(loaded)}; pass the folder of one split")
            loaded = loaded["train"]
        return loaded
    if not path.exists():
        raise FileNotFoundError(f"no dataset at {path}")
    if path.suffix in (".json", ".jsonl"):
        return datasets.Dataset.from_json(str(path))
    if path.suffix == ".parquet":
        return datasets.Dataset.from_parquet(str(path))
    raise ValueError(f"cannot read {path}: expected a `datasets` folder, .jsonl, .json or .parquet")


def as_dataset(source: Any) -> Any:
    """A ``datasets.Dataset`` from a path (see :func:`load_rows`), a list of row dicts, or a Dataset as is."""
    if source is None:
        return None
    if isinstance(source, (str, Path)):
        return load_rows(source)
    if isinstance(source, (list, tuple)):
        return require("datasets", "hub").Dataset.from_list([dict(row) for row in source])
    return source


def model_init_kwargs(model_config: Any, args: Any) -> dict[str, Any]:
    """``model_init_kwargs`` for a TRL trainer from a ``trl.ModelConfig``, merged under the trainer's own ones.

    Mirrors TRL's example scripts; with ``load_in_4bit``/``load_in_8bit`` the whole model is placed on this
    process's device, as bitsandbytes needs (one GPU per process under DDP).
    """
    kwargs: dict[str, Any] = {
        "revision": model_config.model_revision,
        "attn_implementation": model_config.attn_implementation,
        "dtype": model_config.dtype,
    }
    if model_config.load_in_4bit or model_config.load_in_8bit:
        from accelerate import PartialState

        kwargs["device_map"] = {"": str(PartialState().device)}
    kwargs = {key: value for key, value in kwargs.items() if value is not None}
    kwargs.update(args.model_init_kwargs or {})
    return kwargs


def peft_and_quantization(model_config: Any) -> tuple[Any, Any]:
    """``(peft_config, quantization_config)`` from a ``trl.ModelConfig``: LoRA with ``use_peft``, QLoRA with
    ``use_peft`` and ``load_in_4bit``."""
    trl = require("trl", "train")
    return trl.get_peft_config(model_config), trl.get_quantization_config(model_config)


class TrainerInputs(NamedTuple):
    model: Any  # a loaded model, or its name or path (TRL loads it with ``config.model_init_kwargs``)
    tokenizer: Any
    peft_config: Any  # None: full fine-tuning
    quantization_config: Any  # None: no 4-bit loading


def trainer_inputs(config: Any, model_config: Any = None, model: Any = None, tokenizer: Any = None) -> TrainerInputs:
    """``(model, tokenizer, peft_config, quantization_config)`` for a TRL trainer, as every ``train_*`` helper
    takes them: a loaded ``model``, or the name in ``model_config`` (whose loading options then go into
    ``config.model_init_kwargs``); the tokenizer of that model unless given; LoRA/QLoRA from ``model_config``."""
    transformers = require("transformers", "llm")
    peft_config = quantization_config = None
    if model_config is not None:
        peft_config, quantization_config = peft_and_quantization(model_config)
    if model is None:
        if model_config is None or not model_config.model_name_or_path:
            raise ValueError("pass a model, or a ModelConfig with model_name_or_path")
        model = model_config.model_name_or_path
        config.model_init_kwargs = model_init_kwargs(model_config, config)
    if tokenizer is None:
        source = model if isinstance(model, str) else model.config._name_or_path
        revision = getattr(model_config, "model_revision", None) if isinstance(model, str) else None
        tokenizer = transformers.AutoTokenizer.from_pretrained(source, revision=revision)
    return TrainerInputs(model, tokenizer, peft_config, quantization_config)


def fit_and_save(trainer: Any, config: Any, tokenizer: Any) -> str:
    """Train (resuming from ``config.resume_from_checkpoint``), save the model or adapter and the tokenizer to
    ``config.output_dir``; return that folder."""
    trainer.train(resume_from_checkpoint=config.resume_from_checkpoint)
    trainer.save_model(config.output_dir)
    tokenizer.save_pretrained(config.output_dir)
    return str(Path(config.output_dir))
