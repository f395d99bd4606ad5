"""Any OpenAI-compatible chat endpoint as a policy: ``vllm serve``, TGI, llama.cpp server, OpenAI.

    vllm serve meta-llama/Llama-3.1-8B-Instruct --port 8000          # or any compatible server

    from sweet_trl.generation import OpenAIBackend, SamplingParams
    backend = OpenAIBackend("http://localhost:8000/v1", model="meta-llama/Llama-3.1-8B-Instruct",
                            concurrency=32)
    replies = backend.generate(histories, n=4, sampling=SamplingParams(temperature=1.0), seeds=[...])

Requests run concurrently on a thread pool (standard library HTTP, no client package needed),
with per-attempt timeouts and retries with exponential backoff
(:class:`colbench_gym.simulators.openai_compat.ChatClient`). A call that still fails becomes a
:class:`Generation` with ``error`` set; the batch always completes.

Log-probabilities are requested (``logprobs: true``) and kept when the server returns them. The
server applies its own chat template, so ``prompt_text`` is ``None``. Token ids are known only
from vLLM: with ``vllm_token_ids=True`` the backend asks for ``return_token_ids`` (vLLM >= 0.10.2:
``prompt_token_ids`` and per-choice ``token_ids``) and also understands ``token_id:<id>`` tokens
(``return_tokens_as_token_ids``).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from colbench_gym.simulators.openai_compat import ChatClient, ChatResult, message_text
from sweet_trl.generation.base import (
    Generation,
    History,
    SamplingParams,
    cut_at_stop,
    derive_seed,
    prepare_request,
)


class OpenAIBackend:
    """Chat completions over HTTP behind the :class:`GenerationBackend` interface.

    Args:
        base_url: ``http://host:port/v1`` (a bare ``http://host:port`` gets ``/v1``).
        model: model name sent with each request.
        concurrency: requests in flight at once.
        n_mode: ``"param"`` sends ``n`` in one request; ``"separate"`` sends ``n`` requests with
            ``n=1`` and derived seeds (for servers without ``n``, such as TGI).
        vllm_token_ids: ask vLLM for token ids (``return_token_ids`` / ``return_tokens_as_token_ids``).
        extra_body: extra top-level request fields.
        timeout, max_retries, backoff, max_backoff, api_key: see ``ChatClient``.
    """

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, concurrency: int = 16,
                 timeout: float = 120.0, max_retries: int = 3, backoff: float = 0.5, max_backoff: float = 20.0,
                 n_mode: str = "param", vllm_token_ids: bool = False, extra_body: dict[str, Any] | None = None,
                 name: str | None = None):
        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if n_mode not in ("param", "separate"):
            raise ValueError(f"n_mode must be 'param' or 'separate', got {n_mode!r}")
        self.client = ChatClient(base_url, api_key=api_key, timeout=timeout, max_retries=max_retries,
                                 backoff=backoff, max_backoff=max_backoff)
        self.model = model
        self.concurrency = concurrency
        self.n_mode = n_mode
        self.vllm_token_ids = vllm_token_ids
        self.extra_body = dict(extra_body or {})
        self.name = name or model

    def payload(self, history: History, n: int, sampling: SamplingParams, seed: int | None) -> dict[str, Any]:
        """The request body for one history (public for inspection and tests)."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": [{"role": m["role"], "content": m["content"]} for m in history],
            "n": n,
            "temperature": sampling.temperature,
            "top_p": sampling.top_p,
            "max_tokens": sampling.max_new_tokens,
        }
        if sampling.top_k:
            body["top_k"] = sampling.top_k  # an extension (vLLM, TGI); OpenAI itself has no top_k
        if sampling.stop:
            body["stop"] = list(sampling.stop)
        if seed is not None:
            body["seed"] = seed
        if sampling.logprobs:
            body["logprobs"] = True
        if self.vllm_token_ids:
            body["return_token_ids"] = True
            body["return_tokens_as_token_ids"] = True
        body.update(self.extra_body)
        return body

    def generate(self, histories: Sequence[History], n: int = 1, sampling: SamplingParams | None = None,
                 seeds: Sequence[int | None] | None = None) -> list[list[Generation]]:
        """Sample ``n`` replies per history; failures become ``Generation.error``, never exceptions."""
        sampling, seed_table = prepare_request(histories, n, sampling, seeds)
        # One job per request: (history index, first sample index, samples in this request, seed).
        jobs: list[tuple[int, int, int, int | None]] = []
        for i in range(len(histories)):
            if self.n_mode == "param":
                jobs.append((i, 0, n, seed_table[i][0]))
            else:
                jobs.extend((i, j, 1, seed_table[i][j]) for j in range(n))

        def run(job: tuple[int, int, int, int | None]) -> list[Generation]:
            i, _, count, seed = job
            try:
                result = self.client.complete(self.payload(histories[i], count, sampling, seed))
            except Exception as err:  # noqa: BLE001 (e.g. an unserialisable message: recorded, never raised)
                result = ChatResult(None, f"request failed: {type(err).__name__}: {err}", attempts=1)
            return [_apply_stop(generation, sampling.stop) for generation in self.parse(result, count)]

        results: list[list[Generation | None]] = [[None] * n for _ in histories]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, max(1, len(jobs)))) as pool:
            for (i, first, _, _), generations in zip(jobs, pool.map(run, jobs)):
                for offset, generation in enumerate(generations):
                    results[i][first + offset] = generation
        return [list(samples) for samples in results]  # type: ignore[arg-type]

    # -- response parsing --------------------------------------------------------------------------
    def parse(self, result: ChatResult, count: int) -> list[Generation]:
        """``count`` generations from one response (errors when the call failed or choices are missing)."""
        if not result.ok or result.data is None:
            return [Generation.failed(result.error or "request failed", attempts=result.attempts,
                                      retries=result.retries) for _ in range(count)]
        data = result.data
        prompt_ids = data.get("prompt_token_ids")
        prompt_ids = [int(t) for t in prompt_ids] if isinstance(prompt_ids, list) else None
        choices = sorted(data["choices"], key=lambda c: c.get("index", 0) if isinstance(c, dict) else 0)
        generations = []
        for k in range(count):
            if k >= len(choices) or not isinstance(choices[k], dict):
                generations.append(Generation.failed(f"the server returned {len(choices)} of {count} choices",
                                                     prompt_token_ids=prompt_ids, attempts=result.attempts,
                                                     retries=result.retries))
                continue
            generations.append(self._parse_choice(choices[k], prompt_ids, result))
        return generations

    @staticmethod
    def _parse_choice(choice: dict[str, Any], prompt_ids: list[int] | None, result: ChatResult) -> Generation:
        text = message_text(choice)
        if text is None:
            return Generation.failed("the choice has no text content", prompt_token_ids=prompt_ids,
                                     attempts=result.attempts, retries=result.retries)
        logprobs: list[float] | None = None
        token_ids: list[int] = []
        content = (choice.get("logprobs") or {}).get("content") if isinstance(choice.get("logprobs"), dict) else None
        if isinstance(content, list):
            logprobs = [float(entry.get("logprob", float("nan"))) for entry in content if isinstance(entry, dict)]
            parsed = [_token_id(entry.get("token")) for entry in content if isinstance(entry, dict)]
            if parsed and all(t is not None for t in parsed):
                token_ids = [int(t) for t in parsed]  # type: ignore[arg-type]
        if isinstance(choice.get("token_ids"), list):
            token_ids = [int(t) for t in choice["token_ids"]]
        finish = choice.get("finish_reason") or "stop"
        return Generation(text=text, token_ids=token_ids, logprobs=logprobs, prompt_text=None,
                          prompt_token_ids=prompt_ids, finish_reason=str(finish), attempts=result.attempts,
                          retries=list(result.retries))


def _apply_stop(generation: Generation, stop: Sequence[str]) -> Generation:
    """Cut the text before the first stop string, as the OpenAI API does. Some servers stop *after* it and return
    it (``transformers serve`` 5.x passes ``stop`` to ``generate``'s ``stop_strings``, which keep the match); a
    server that already cut leaves nothing to find. Token ids and log-probs are left as the server sent them."""
    if not stop or not generation.ok:
        return generation
    text, found = cut_at_stop(generation.text, stop)
    if found:
        generation.text, generation.finish_reason = text, "stop"
    return generation


def _token_id(token: Any) -> int | None:
    """vLLM's ``return_tokens_as_token_ids`` spells tokens ``token_id:<id>``."""
    if isinstance(token, str) and token.startswith("token_id:"):
        try:
            return int(token.split(":", 1)[1])
        except ValueError:
            return None
    return None


__all__ = ["OpenAIBackend", "derive_seed"]
