"""The models a stage generates with or trains from: resolved by name, loaded, wrapped as generation backends
(answer forcing, progress), sampled from, and freed before the next one is loaded."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from sweet_trl.pipeline.errors import StageError
from sweet_trl.pipeline.runner import StageContext
from sweet_trl.pipeline_config import ConfigError, GenerationArguments, RunArguments


def resolve_model(name: str) -> str:
    """A model path or Hub id; ``"embedded"`` becomes the cached safetensors folder of SmolLM2-135M-Instruct."""
    from sweet_trl.generation.transformers_backend import EMBEDDED_ALIASES

    if name.lower() in EMBEDDED_ALIASES:
        from sweet_trl.generation import embedded_model_path

        return str(embedded_model_path())
    looks_local = name.startswith(("/", ".", "~")) or name.count("/") > 1  # a Hub id is "org/name"
    if looks_local and not Path(name).expanduser().exists():
        raise StageError(f"no model at {name}: a local path that does not exist (a Hub id looks like 'org/name')")
    return name


def load_causal_lm(path: str, dtype: str = "auto", base: str | None = None) -> tuple[Any, Any]:
    """A model and its tokenizer from a folder or Hub id; a LoRA adapter folder is merged into its base: ``base``
    when given, else the one its ``adapter_config.json`` names (``"embedded"`` and local paths resolved either way).
    An adapter folder saved without a tokenizer uses its base's."""
    import torch
    import transformers

    torch_dtype = "auto" if dtype == "auto" else getattr(torch, dtype)
    if not torch.cuda.is_available() and torch_dtype == "auto":
        torch_dtype = torch.float32  # half precision is slow on CPU
    if not (Path(path) / "adapter_config.json").exists():
        model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
        return model, transformers.AutoTokenizer.from_pretrained(path)
    import peft

    base_path = resolve_model(base or adapter_base(path))
    model = transformers.AutoModelForCausalLM.from_pretrained(base_path, dtype=torch_dtype)
    has_tokenizer = (Path(path) / "tokenizer_config.json").exists()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path if has_tokenizer else base_path)
    if len(tokenizer) > model.get_input_embeddings().weight.shape[0]:
        model.resize_token_embeddings(len(tokenizer))  # tokens added in training (as AutoPeftModel does)
    return peft.PeftModel.from_pretrained(model, path).merge_and_unload(), tokenizer


def adapter_base(path: str) -> str:
    """The base model an adapter folder names (``base_model_name_or_path`` of its ``adapter_config.json``)."""
    import json

    config = json.loads((Path(path) / "adapter_config.json").read_text(encoding="utf-8"))
    name = config.get("base_model_name_or_path")
    if not name:
        raise StageError(f"the adapter {path} does not name its base model (no base_model_name_or_path in its "
                         "adapter_config.json): give it with --policy_base")
    return name


def make_backend(gen: GenerationArguments, model: str, name: str, workdir: Path | None = None,
                 run: RunArguments | None = None, base: str | None = None) -> Any:
    """The generation backend of a policy: a local model (an adapter merged into ``base``, or the base it names),
    vLLM, or a server."""
    if gen.backend == "openai":
        from sweet_trl.generation import OpenAIBackend

        if gen.force_answer_on_last_turn:
            raise ConfigError("force_answer_on_last_turn needs a local backend (transformers or vllm): a served "
                              "policy answers when it chooses; add --force_answer_on_last_turn false")
        if base is not None:
            raise ConfigError("policy_base needs a local backend (transformers or vllm): the server merges nothing")
        base_url = gen.policy_base_url or os.environ.get("OPENAI_BASE_URL")
        if not base_url:
            raise StageError("backend 'openai' needs policy_base_url or OPENAI_BASE_URL")
        return OpenAIBackend(base_url, model=model, concurrency=gen.generation_batch_size, name=name)
    path = resolve_model(model)
    if gen.backend == "vllm":
        from sweet_trl.generation import VLLMBackend

        if (Path(path) / "adapter_config.json").exists():
            merged = (workdir or Path(path)) / "merged_for_vllm"
            if not (merged / "config.json").exists():
                model_obj, tokenizer = load_causal_lm(path, base=base)
                model_obj.save_pretrained(merged)
                tokenizer.save_pretrained(merged)
            path = str(merged)
        backend = VLLMBackend(path, name=name, dtype=gen.dtype, gpu_memory_utilization=gen.gpu_memory_utilization,
                              max_prompt_tokens=gen.max_prompt_tokens)
    else:
        from sweet_trl.generation import TransformersBackend

        model_obj, tokenizer = load_causal_lm(path, gen.dtype, base=base)
        backend = TransformersBackend(model_obj, tokenizer, max_batch_size=max(gen.generation_batch_size, 1),
                                      name=name, max_prompt_tokens=gen.max_prompt_tokens,
                                      prefix_cache_mb=gen.prefix_cache_mb)
    if gen.force_answer_on_last_turn:
        run = run or RunArguments()
        return AnswerForcing(backend, run.max_turns, "python" if run.kind == "backend" else "html")
    return backend


class AnswerForcing:
    """At the last allowed turn of an episode, the policy's reply starts with the answer marker.

    The marker and an opened code block are appended to the prompt after the assistant header (through the
    backend's chat template, so the model continues from them) and put back in front of the generated text.
    The answer ends where its code block closes: generation stops at the closing fence (the prose a small
    model writes after its code is never graded and would cost as many tokens again), and the fence is put
    back. Last turns and other turns go to the backend as two calls, since only the last ones stop there.
    """

    FENCE = "```"

    def __init__(self, backend: Any, max_turns: int, language: str):
        from colbench_gym.envs.dialogue import ANSWER_MARKER

        self.backend, self.max_turns = backend, max_turns
        self.name = backend.name
        self.prefix = f"{ANSWER_MARKER}\n{self.FENCE}{language}\n"
        template = backend.chat_template or backend.tokenizer.chat_template
        turns = "(messages | selectattr('role', 'equalto', 'assistant') | list | length)"
        backend.chat_template = (template + "{% if add_generation_prompt and " + turns + f" >= {max_turns - 1} %}}"
                                 + self.prefix + "{% endif %}")

    def is_last_turn(self, history: Sequence[dict[str, Any]]) -> bool:
        return sum(m["role"] == "assistant" for m in history) >= self.max_turns - 1

    def generate(self, histories, n=1, sampling=None, seeds=None):
        from sweet_trl.generation import SamplingParams

        sampling = sampling or SamplingParams()
        last = [self.is_last_turn(h) for h in histories]
        outputs: list[Any] = [None] * len(histories)
        for is_last in (False, True):
            indices = [i for i, flag in enumerate(last) if flag == is_last]
            if not indices:
                continue
            group_sampling = dataclasses.replace(sampling, stop=[*sampling.stop, self.FENCE]) if is_last else sampling
            results = self.backend.generate([histories[i] for i in indices], n=n, sampling=group_sampling,
                                            seeds=None if seeds is None else [seeds[i] for i in indices])
            for i, samples in zip(indices, results):
                outputs[i] = samples
                if is_last:
                    for generation in samples:
                        if generation.ok:
                            generation.text = f"{self.prefix}{generation.text.rstrip()}\n{self.FENCE}"
        return outputs


def release() -> None:
    """Free the memory of models the caller has just dropped, before the next one is loaded."""
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def sampling_params(gen: GenerationArguments, temperature: float | None = None) -> Any:
    from sweet_trl.generation import SamplingParams

    return SamplingParams(temperature=gen.temperature if temperature is None else temperature, top_p=gen.top_p,
                          max_new_tokens=gen.max_new_tokens)


class ProgressBackend:
    """Wraps a backend to log progress of long generation loops (candidates per turn state)."""

    def __init__(self, backend: Any, ctx: StageContext, total: int, unit: str):
        self.backend, self.ctx, self.total, self.unit = backend, ctx, total, unit
        self.name = getattr(backend, "name", type(backend).__name__)
        self.done = 0

    def generate(self, histories, n=1, sampling=None, seeds=None):
        out = self.backend.generate(histories, n=n, sampling=sampling, seeds=seeds)
        self.done += len(histories)
        self.ctx.log(f"{self.done}/{self.total} {self.unit} x {n} samples")
        return out
