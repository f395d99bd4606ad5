"""An in-process ``vllm.LLM`` as a policy (GPU; ``pip install 'colbench-gym[vllm]'``).

    from sweet_trl.generation import SamplingParams, VLLMBackend
    backend = VLLMBackend("meta-llama/Llama-3.1-8B-Instruct", gpu_memory_utilization=0.85)
    replies = backend.generate(histories, n=8, sampling=SamplingParams(temperature=1.0), seeds=seeds)

The chat template is applied here, with the model's tokenizer, and vLLM gets token ids
(``{"prompt_token_ids": [...]}``), so ``prompt_text``/``prompt_token_ids`` are exactly what the
model saw, rendered the same way as in :class:`TransformersBackend`. Each history gets its own
``vllm.SamplingParams`` with its own seed, so the samples do not depend on batch composition.
Log-probabilities use ``logprobs=0`` (only the sampled token's), computed by vLLM from the raw
model distribution (its default ``logprobs_mode``), like the other backends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from colbench_gym._optional import require
from sweet_trl.generation.base import (
    Generation,
    History,
    SamplingParams,
    prepare_request,
)
from sweet_trl.generation.transformers_backend import EMBEDDED_ALIASES, fit_prompt


class VLLMBackend:
    """``vllm.LLM`` behind the :class:`GenerationBackend` interface.

    Args:
        model: a model path or Hub name, ``"embedded"`` (the bundled SmolLM2-135M-Instruct), or an existing
            ``vllm.LLM`` instance.
        tokenizer: a ``transformers`` tokenizer for the chat template; default: the engine's.
        chat_template: Jinja template overriding the tokenizer's.
        name: recorded as the trajectories' ``policy``.
        max_prompt_tokens: drop the oldest agent/human exchanges of longer prompts (see ``fit_prompt``).
        **llm_kwargs: passed to ``vllm.LLM`` (``dtype``, ``gpu_memory_utilization``,
            ``tensor_parallel_size``, ``max_model_len``, ``load_format="dummy"`` for benchmarks, ...).
    """

    def __init__(self, model: Any, tokenizer: Any = None, *, chat_template: str | None = None,
                 name: str | None = None, use_tqdm: bool = False, max_prompt_tokens: int | None = None,
                 **llm_kwargs: Any):
        if isinstance(model, str):
            vllm = require("vllm", "vllm")
            source = model
            if model.lower() in EMBEDDED_ALIASES:
                from sweet_trl.generation.embedded import embedded_model_path

                source, name = embedded_model_path(), name or "SmolLM2-135M-Instruct"
            self.llm = vllm.LLM(model=source, **llm_kwargs)
            name = name or model
        else:
            self.llm = model
        self.tokenizer = tokenizer if tokenizer is not None else self.llm.get_tokenizer()
        self.chat_template = chat_template
        self.name = name or "vllm"
        self.use_tqdm = use_tqdm
        self.max_prompt_tokens = max_prompt_tokens

    def vllm_sampling_params(self, n: int, sampling: SamplingParams, seed: int | None) -> Any:
        vllm = require("vllm", "vllm")
        return vllm.SamplingParams(
            n=n,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k if sampling.top_k else -1,
            max_tokens=sampling.max_new_tokens,
            stop=list(sampling.stop) or None,
            seed=seed,
            logprobs=0 if sampling.logprobs else None,
        )

    def generate(self, histories: Sequence[History], n: int = 1, sampling: SamplingParams | None = None,
                 seeds: Sequence[int | None] | None = None) -> list[list[Generation]]:
        """Sample ``n`` replies per history in one ``LLM.generate`` call."""
        sampling, seed_table = prepare_request(histories, n, sampling, seeds)
        results: list[list[Generation] | None] = [None] * len(histories)
        prompts, params, owners, texts, drops = [], [], [], [], []
        for i, history in enumerate(histories):
            try:
                text, ids, dropped = fit_prompt(self.tokenizer, history, self.max_prompt_tokens, self.chat_template)
            except Exception as err:  # noqa: BLE001
                message = f"chat template failed: {type(err).__name__}: {err}"
                results[i] = [Generation.failed(message) for _ in range(n)]
                continue
            if self.max_prompt_tokens is not None and len(ids) > self.max_prompt_tokens:
                error = f"prompt has {len(ids)} tokens after dropping old turns; max_prompt_tokens is " \
                        f"{self.max_prompt_tokens}"
                results[i] = [Generation.failed(error, text, list(ids)) for _ in range(n)]
                continue
            drops.append(dropped)
            prompts.append({"prompt_token_ids": list(ids)})
            params.append(self.vllm_sampling_params(n, sampling, seed_table[i][0]))
            owners.append(i)
            texts.append(text)
        if prompts:
            try:
                outputs = self.llm.generate(prompts, sampling_params=params, use_tqdm=self.use_tqdm)
            except Exception as err:  # noqa: BLE001 (the engine refused the batch (e.g. a prompt beyond max_model_len))
                outputs = None
                message = f"vllm generate failed: {type(err).__name__}: {err}"
                for i, text, prompt in zip(owners, texts, prompts):
                    results[i] = [Generation.failed(message, text, prompt["prompt_token_ids"]) for _ in range(n)]
            if outputs is not None:
                for i, text, output, dropped in zip(owners, texts, outputs, drops):
                    results[i] = request_output_to_generations(output, n, prompt_text=text)
                    for generation in results[i]:
                        generation.prompt_messages_dropped = dropped
        return [list(samples) for samples in results]  # type: ignore[arg-type]


def request_output_to_generations(output: Any, n: int, prompt_text: str | None = None) -> list[Generation]:
    """Convert one ``vllm.RequestOutput`` into ``n`` :class:`Generation` objects.

    Uses only the public fields: ``prompt``, ``prompt_token_ids``, ``outputs[k].index``, ``.text``,
    ``.token_ids``, ``.logprobs`` (a list, per token, of ``{token_id: Logprob(logprob=...)}``)
    and ``.finish_reason``. Missing samples become failed generations.
    """
    prompt_ids = [int(t) for t in (getattr(output, "prompt_token_ids", None) or [])] or None
    prompt_text = prompt_text if prompt_text is not None else getattr(output, "prompt", None)
    completions = sorted(getattr(output, "outputs", None) or [], key=lambda c: getattr(c, "index", 0))
    generations = []
    for k in range(n):
        if k >= len(completions):
            generations.append(Generation.failed(f"vllm returned {len(completions)} of {n} samples",
                                                 prompt_text, prompt_ids))
            continue
        completion = completions[k]
        token_ids = [int(t) for t in completion.token_ids]
        logprobs = None
        if completion.logprobs is not None:
            logprobs = []
            for token, step in zip(token_ids, completion.logprobs):
                entry = step.get(token) if step else None
                value = getattr(entry, "logprob", entry)
                logprobs.append(float(value) if value is not None else float("nan"))
        finish = completion.finish_reason or "stop"
        generations.append(Generation(text=completion.text, token_ids=token_ids, logprobs=logprobs,
                                      prompt_text=prompt_text, prompt_token_ids=prompt_ids,
                                      finish_reason=str(finish)))
    return generations
