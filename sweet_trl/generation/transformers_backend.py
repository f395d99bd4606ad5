"""Local Hugging Face model as a policy: batched, left-padded, chat-templated, seeded per sample.

    from sweet_trl.generation import SamplingParams, TransformersBackend
    backend = TransformersBackend("embedded")           # SmolLM2-135M-Instruct, bundled; or any path / Hub name
    [[reply]] = backend.generate([[{"role": "user", "content": "Hi!"}]], sampling=SamplingParams(max_new_tokens=32))
    reply.text, reply.token_ids, reply.logprobs, reply.prompt_text

Sampling is done by a logits processor that draws each row with its own ``torch.Generator``
seeded from the caller's per-history seed, so a sample does not depend on which other prompts
share its batch (up to floating-point differences from padding). Log-probabilities are those of
the sampled tokens under ``log_softmax`` of the raw logits (no temperature, top-p or top-k).
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any, NamedTuple

from colbench_gym._optional import require
from sweet_trl.generation.base import (
    Generation,
    History,
    SamplingParams,
    cut_at_stop,
    prepare_request,
)
from sweet_trl.transformers_compat import with_cache

EMBEDDED_ALIASES = ("embedded", "smollm2", "smollm2-135m-instruct")


def render_prompt(tokenizer: Any, history: History, chat_template: str | None = None) -> str:
    """The exact prompt string: the chat template applied, ending with the assistant's turn header."""
    messages = [{"role": m["role"], "content": m["content"]} for m in history]
    if chat_template is None and not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"the tokenizer {getattr(tokenizer, 'name_or_path', '')!r} has no chat template; "
            "pass chat_template= (a Jinja string) to the backend"
        )
    return tokenizer.apply_chat_template(messages, chat_template=chat_template, tokenize=False,
                                         add_generation_prompt=True)


def fit_prompt(tokenizer: Any, history: History, max_tokens: int | None = None,
               chat_template: str | None = None) -> tuple[str, list[int], int]:
    """Render and tokenize ``history``; above ``max_tokens``, drop the oldest exchanges until it fits.

    The system message(s), the first user message (the task) and the latest message always stay;
    agent/human exchanges in between go oldest first, two messages at a time so that roles keep
    alternating. Returns ``(prompt_text, prompt_ids, messages_dropped)``; the prompt may still be
    longer than ``max_tokens`` when nothing more can be dropped (the caller decides).
    """
    text = render_prompt(tokenizer, history, chat_template)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if max_tokens is None or len(ids) <= max_tokens:
        return text, ids, 0
    first_user = next((i for i, m in enumerate(history) if m["role"] != "system"), len(history) - 1)
    head, tail = list(history[: first_user + 1]), list(history[first_user + 1:])
    dropped = 0
    while len(ids) > max_tokens and len(tail) >= 3:
        tail = tail[2:]
        dropped += 2
        text = render_prompt(tokenizer, head + tail, chat_template)
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return text, ids, dropped


def eos_token_ids(tokenizer: Any, model: Any = None) -> set[int]:
    """Every id that ends a turn: the tokenizer's EOS and the model's generation-config EOS ids."""
    ids: set[int] = set()
    if tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    config_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if isinstance(config_eos, int):
        ids.add(config_eos)
    elif isinstance(config_eos, (list, tuple)):
        ids.update(int(i) for i in config_eos)
    if not ids:
        raise ValueError("the tokenizer has no eos_token and the model's generation_config names none")
    return ids


def _make_row_sampler(generators: list[Any], sampling: SamplingParams):
    """A logits processor that samples each row with its own generator and records the logprobs.

    It returns scores that are -inf everywhere but at the chosen token, so ``generate`` running in
    greedy mode takes exactly that token; the real sampling distribution is applied here.
    """
    torch = require("torch", "llm")
    from transformers import LogitsProcessor

    class RowSampler(LogitsProcessor):
        def __init__(self) -> None:
            self.step_logprobs: list[Any] = []  # one [batch] tensor per generated token

        def __call__(self, input_ids, scores):
            logprobs = torch.log_softmax(scores.float(), dim=-1)
            if sampling.greedy:
                chosen = scores.argmax(dim=-1)
            else:
                logits = scores.float() / sampling.temperature
                if sampling.top_k and sampling.top_k < logits.shape[-1]:
                    kth = torch.topk(logits, sampling.top_k, dim=-1).values[..., -1:]
                    logits = logits.masked_fill(logits < kth, float("-inf"))
                if sampling.top_p < 1.0:
                    sorted_logits, order = torch.sort(logits, descending=True, dim=-1)
                    sorted_probs = torch.softmax(sorted_logits, dim=-1)
                    # drop a token when the mass before it already reaches top_p (the top token always stays)
                    drop_sorted = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= sampling.top_p
                    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
                    logits = logits.masked_fill(drop, float("-inf"))
                # Inverse-CDF sampling, one uniform draw per row from that row's generator: as exact as
                # torch.multinomial, and vectorised over the batch. u lies in (0, 1], so a token of zero
                # probability (a flat step of the CDF) is never picked.
                cdf = torch.softmax(logits, dim=-1).cumsum(dim=-1)
                uniform = torch.stack([1.0 - torch.rand((), generator=g, device=cdf.device) for g in generators])
                chosen = torch.searchsorted(cdf, (uniform[:, None] * cdf[:, -1:]).contiguous())
                chosen = chosen.squeeze(-1).clamp_(max=cdf.shape[-1] - 1)
            self.step_logprobs.append(logprobs.gather(-1, chosen[:, None]).squeeze(-1))
            forced = torch.full_like(scores, float("-inf"))
            return forced.scatter(-1, chosen[:, None], 0.0)

    return RowSampler()


class _Row(NamedTuple):
    """One sample to generate: which history and sample, its prompt, its seed."""

    history: int
    sample: int
    text: str
    ids: list[int]
    seed: int | None
    dropped: int


# A cached prefix shorter than this is not worth a lookup's copy: the forward over it is as cheap.
_MIN_REUSED_TOKENS = 16


class _PrefixCache:
    """Keys and values of recent sequences (a prompt and the tokens generated after it), so that the next
    prompt of the same dialogue -- the same tokens plus a reply and a new message -- is prefilled only from
    where it differs. Least recently used first out, within a memory budget and a number of entries (a
    lookup compares the prompt with every entry)."""

    def __init__(self, max_bytes: int, max_entries: int = 256) -> None:
        self.max_bytes, self.max_entries = max_bytes, max_entries
        self.entries: OrderedDict[tuple[int, ...], list[tuple[Any, Any]]] = OrderedDict()
        self.bytes = 0
        self.reused_tokens = 0  # prompt tokens whose prefill the cache saved, for reports and tests

    def longest_prefix(self, ids: Sequence[int]) -> tuple[int, list[tuple[Any, Any]] | None]:
        """``(n, layers)``: the cached entry sharing the longest prefix with ``ids``, and its length."""
        best, best_length = None, 0
        for key in self.entries:
            length = _common_prefix_length(key, ids)
            if length > best_length:
                best, best_length = key, length
        if best is None or best_length < _MIN_REUSED_TOKENS:
            return 0, None
        self.entries.move_to_end(best)
        return best_length, self.entries[best]

    def add(self, ids: Sequence[int], layers: list[tuple[Any, Any]]) -> None:
        key = tuple(ids)
        size = _nbytes(layers)
        if size > self.max_bytes or key in self.entries:
            return
        self.entries[key] = layers
        self.bytes += size
        while self.bytes > self.max_bytes or len(self.entries) > self.max_entries:
            _, evicted = self.entries.popitem(last=False)
            self.bytes -= _nbytes(evicted)


def _nbytes(layers: list[tuple[Any, Any]]) -> int:
    return sum(keys.nbytes + values.nbytes for keys, values in layers)


def _common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


class TransformersBackend:
    """A local ``transformers`` causal LM behind the :class:`GenerationBackend` interface.

    Args:
        model: a loaded ``PreTrainedModel``, a local path or Hub name, or ``"embedded"`` for the
            bundled SmolLM2-135M-Instruct (see :func:`sweet_trl.generation.embedded_model_path`).
        tokenizer: a loaded tokenizer or a path/name; defaults to ``model``'s.
        gguf_file: load the weights from this GGUF file inside ``model`` (a folder or Hub repo).
            Dequantizing GGUF takes seconds to minutes; for repeated use convert once with
            :func:`sweet_trl.generation.embedded.convert_gguf`.
        device: ``"cpu"``, ``"cuda"``, ...; default: CUDA when available.
        dtype: torch dtype or its name; default: bfloat16 on CUDA, float32 on CPU.
        max_batch_size: rows (prompts x samples) per forward batch.
        chat_template: Jinja template overriding the tokenizer's.
        name: recorded as the ``policy`` of trajectories; default: the model's name or path.
        cache_implementation: ``"auto"`` (default) uses a preallocated static KV cache on CPU, where
            it saves the per-token concatenation that dominates batched decoding of small models, and
            the dynamic cache elsewhere; or any value ``GenerationConfig.cache_implementation`` takes
            (``None`` for the dynamic cache). A model that cannot use the static cache falls back to the
            dynamic one. ``generate`` never compiles the model on its own here. With the static cache
            on CPU, each prompt of a batch is prefilled on its own (unpadded, causal attention) and
            only decoding runs batched (the same samples as a padded batch prefill, up to float rounding).
        max_prompt_tokens: longer prompts lose their oldest agent/human exchanges (see
            :func:`fit_prompt`); ``Generation.prompt_messages_dropped`` says how many messages went.
        prefix_cache_mb: with rows prefilled on their own (the CPU default above), keep up to this many
            MiB of keys and values of recent sequences (prompts and what was generated after them): a
            prompt that continues a cached sequence -- the next turn of the same dialogue, another episode
            of the same task -- is prefilled only from where it differs (about 11,000 tokens of SmolLM2-135M
            in float32 fit in the default 512 MiB). 0 turns it off. The cache empties itself when the model's
            weights change in place (an optimizer step on the shared model); after any other change to what
            the model computes (switching adapters), call :meth:`clear_prefix_cache`.
    """

    def __init__(self, model: Any = "embedded", tokenizer: Any = None, *, gguf_file: str | None = None,
                 device: str | None = None, dtype: Any = None, max_batch_size: int = 32,
                 chat_template: str | None = None, name: str | None = None, trust_remote_code: bool = False,
                 cache_implementation: str | None = "auto", max_prompt_tokens: int | None = None,
                 prefix_cache_mb: int = 512):
        torch = require("torch", "llm")
        transformers = require("transformers", "llm")
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if isinstance(dtype, str):
            dtype = getattr(torch, dtype)
        if dtype is None:
            dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32

        if isinstance(model, (str, os.PathLike)):
            source = os.fspath(model)
            if source.lower() in EMBEDDED_ALIASES and gguf_file is None:
                from sweet_trl.generation.embedded import embedded_model_path

                source = embedded_model_path()
                name = name or "SmolLM2-135M-Instruct"
            load_kwargs: dict[str, Any] = {"trust_remote_code": trust_remote_code}
            if gguf_file is not None:
                load_kwargs["gguf_file"] = gguf_file
            if tokenizer is None:
                tokenizer = transformers.AutoTokenizer.from_pretrained(source, **load_kwargs)
            model = transformers.AutoModelForCausalLM.from_pretrained(source, dtype=dtype, **load_kwargs)
            name = name or source
        elif tokenizer is None:
            raise ValueError("pass the tokenizer along with a loaded model")
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = transformers.AutoTokenizer.from_pretrained(os.fspath(tokenizer),
                                                                   trust_remote_code=trust_remote_code)
        self.model = model.to(device).eval()
        self.tokenizer = tokenizer
        self.device = torch.device(device)
        self.max_batch_size = max_batch_size
        self.chat_template = chat_template
        self.name = name or getattr(model, "name_or_path", None) or type(model).__name__
        self.eos_ids = eos_token_ids(tokenizer, model)
        pad = tokenizer.pad_token_id
        self.pad_id = int(pad) if pad is not None else min(self.eos_ids)
        self.max_positions = getattr(model.config, "max_position_embeddings", None)
        self.max_prompt_tokens = max_prompt_tokens
        if cache_implementation == "auto":
            cache_implementation = "static" if self.device.type == "cpu" else None
        self.cache_implementation = cache_implementation
        # CPU only: there a padded batch prefill costs more than its rows alone (see _prefill_rows); on a
        # GPU the one batched forward is the faster.
        self.prefill_rows_alone = self.device.type == "cpu"
        self.prefix_cache = _PrefixCache(prefix_cache_mb << 20) if prefix_cache_mb > 0 else None
        self._cached_weights_version = self._weights_version()

    # -- public -------------------------------------------------------------------------------
    def clear_prefix_cache(self) -> None:
        """Forget every cached prefix (their keys and values belong to the model as it was)."""
        if self.prefix_cache is not None:
            self.prefix_cache = _PrefixCache(self.prefix_cache.max_bytes, self.prefix_cache.max_entries)

    def render(self, history: History) -> str:
        return render_prompt(self.tokenizer, history, self.chat_template)

    def generate(self, histories: Sequence[History], n: int = 1, sampling: SamplingParams | None = None,
                 seeds: Sequence[int | None] | None = None) -> list[list[Generation]]:
        """Sample ``n`` replies per history; see :mod:`sweet_trl.generation.base` for the contract."""
        sampling, seed_table = prepare_request(histories, n, sampling, seeds)
        if self.prefix_cache is not None and self._weights_version() != self._cached_weights_version:
            self.clear_prefix_cache()  # trained since: the cached keys and values are stale
            self._cached_weights_version = self._weights_version()
        results: list[list[Generation | None]] = [[None] * n for _ in histories]

        rows: list[_Row] = []
        for i, history in enumerate(histories):
            try:
                text, ids, dropped = fit_prompt(self.tokenizer, history, self.max_prompt_tokens, self.chat_template)
            except Exception as err:  # noqa: BLE001 (a template error on one history must not fail the batch)
                message = f"chat template failed: {type(err).__name__}: {err}"
                results[i] = [Generation.failed(message) for _ in range(n)]
                continue
            error = None
            if self.max_positions is not None and len(ids) >= self.max_positions:
                error = f"prompt has {len(ids)} tokens; the model's context is {self.max_positions}"
            elif self.max_prompt_tokens is not None and len(ids) > self.max_prompt_tokens:
                error = f"prompt has {len(ids)} tokens after dropping old turns; max_prompt_tokens is " \
                        f"{self.max_prompt_tokens}"
            if error is not None:
                results[i] = [Generation.failed(error, text, ids) for _ in range(n)]
                continue
            rows.extend(_Row(i, j, text, ids, seed_table[i][j], dropped) for j in range(n))

        # Similar lengths together: less padding per batch.
        rows.sort(key=lambda row: len(row.ids))
        for start in range(0, len(rows), self.max_batch_size):
            chunk = rows[start:start + self.max_batch_size]
            for row, generation in zip(chunk, self._generate_chunk(chunk, sampling)):
                results[row.history][row.sample] = generation
        return [list(samples) for samples in results]  # type: ignore[arg-type]

    # -- internals ------------------------------------------------------------------------------
    def _generate_chunk(self, chunk: list[_Row], sampling: SamplingParams) -> list[Generation]:
        torch = require("torch", "llm")
        from transformers import GenerationConfig, LogitsProcessorList

        width = max(len(row.ids) for row in chunk)
        input_ids = torch.full((len(chunk), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros((len(chunk), width), dtype=torch.long)
        for b, row in enumerate(chunk):
            input_ids[b, width - len(row.ids):] = torch.tensor(row.ids, dtype=torch.long)
            attention_mask[b, width - len(row.ids):] = 1
        max_new = sampling.max_new_tokens
        if self.max_positions is not None:
            max_new = max(1, min(max_new, self.max_positions - width))

        row_seeds = [int(row.seed) if row.seed is not None else int(torch.randint(2**31 - 1, ()).item())
                     for row in chunk]
        generators = [torch.Generator(device=self.device) for _ in chunk]
        for generator, seed in zip(generators, row_seeds):
            generator.manual_seed(seed)
        sampler = _make_row_sampler(generators, sampling)

        def run(cache_implementation: str | None):
            with torch.inference_mode():
                cache = None
                if cache_implementation == "static" and self.prefill_rows_alone and (
                        len(chunk) > 1 or self.prefix_cache is not None):
                    try:
                        cache = self._prefill_rows(chunk, width, width + max_new)
                    except (ValueError, TypeError, NotImplementedError, AttributeError, RuntimeError):
                        # only a speed-up, which this model does not take: the padded batch prefill does the job
                        self.prefill_rows_alone = False
                config = GenerationConfig(
                    do_sample=False, num_beams=1, max_new_tokens=max_new, min_new_tokens=0,
                    eos_token_id=sorted(self.eos_ids), pad_token_id=self.pad_id,
                    repetition_penalty=1.0, no_repeat_ngram_size=0, return_dict_in_generate=True,
                    stop_strings=list(sampling.stop) or None,
                    cache_implementation=None if cache is not None else cache_implementation,
                    disable_compile=True,
                )
                output = self.model.generate(
                    input_ids=input_ids.to(self.device), attention_mask=attention_mask.to(self.device),
                    generation_config=config, logits_processor=LogitsProcessorList([sampler]),
                    tokenizer=self.tokenizer if sampling.stop else None, **with_cache(self.model, cache),
                )
                if cache is not None and self.prefix_cache is not None:
                    self._keep_prefixes(chunk, width, cache, output.sequences[:, width:].tolist())
                return output

        try:
            try:
                output = run(self.cache_implementation)
            except (ValueError, NotImplementedError, TypeError):
                if self.cache_implementation != "static":
                    raise
                # This architecture does not support a static cache: use the dynamic one from now on,
                # starting the chunk over with freshly seeded generators.
                self.cache_implementation = None
                sampler.step_logprobs.clear()
                for generator, seed in zip(generators, row_seeds):
                    generator.manual_seed(seed)
                output = run(None)
        except Exception as err:  # noqa: BLE001 (e.g. out of memory: every row of this chunk records it)
            message = f"generate failed: {type(err).__name__}: {err}"
            return [Generation.failed(message, row.text, list(row.ids)) for row in chunk]

        new_tokens = output.sequences[:, width:].tolist()
        step_logprobs = torch.stack(sampler.step_logprobs, dim=1).tolist() if sampler.step_logprobs else []
        generations = []
        for b, row in enumerate(chunk):
            tokens = new_tokens[b]
            logprobs = step_logprobs[b][: len(tokens)] if step_logprobs else []
            generation = self._finish_row(tokens, logprobs, row.text, list(row.ids), sampling)
            generation.prompt_messages_dropped = row.dropped
            generations.append(generation)
        return generations

    def _prefill_rows(self, chunk: list[_Row], width: int, max_cache_len: int) -> Any:
        """A static cache holding every row's prompt but its last token, each row prefilled on its own.

        A padded batch prefill on CPU costs far more than the rows alone: the padding mask rules out
        the causal attention kernel, so every row pays for the full ``width x width`` score matrix of
        the longest prompt. Prefilled alone, a row is an unpadded causal forward, and its keys and
        values land exactly where the left-padded batch would have put them (positions count from
        the row's first real token, as ``generate`` derives them from the attention mask). The last
        prompt token is left to ``generate``, which needs one uncached token to start from. Rows with
        the same prompt (samples of one history) share one prefill, and a prompt that continues a
        sequence in :attr:`prefix_cache` is prefilled only from where it differs.
        Returns ``None`` (plain batched prefill) when the model's cache has layers other than full
        attention or a prompt is a single token.
        """
        from transformers import StaticCache
        from transformers.cache_utils import StaticLayer

        if min(len(row.ids) for row in chunk) < 2:
            return None
        cache = StaticCache(config=self.model.config, max_cache_len=max_cache_len)
        if not all(type(layer) is StaticLayer for layer in cache.layers):  # sliding windows etc.
            return None
        prefilled: dict[tuple[int, ...], Any] = {}  # the n samples of one prompt share its prefill
        for b, row in enumerate(chunk):
            head_ids = row.ids[:-1]
            row_cache = prefilled.get(tuple(head_ids))
            if row_cache is None:
                row_cache = prefilled[tuple(head_ids)] = self._prefill_one(head_ids)
            start = width - len(row.ids)
            for layer, row_layer in zip(cache.layers, row_cache.layers):
                if not layer.is_initialized:  # allocates [batch, heads, max_cache_len, head_dim] of zeros
                    _, heads, _, key_dim = row_layer.keys.shape
                    layer.lazy_initialization(row_layer.keys.new_empty((len(chunk), heads, 1, key_dim)),
                                              row_layer.values.new_empty((len(chunk), heads, 1,
                                                                          row_layer.values.shape[-1])))
                layer.keys[b, :, start:width - 1] = row_layer.keys[0]
                layer.values[b, :, start:width - 1] = row_layer.values[0]
        for layer in cache.layers:
            layer.cumulative_length.fill_(width - 1)
        return cache

    def _prefill_one(self, head_ids: list[int]) -> Any:
        """A dynamic cache holding ``head_ids``, continued from the longest cached prefix if there is one."""
        torch = require("torch", "llm")
        from transformers import DynamicCache

        row_cache = DynamicCache(config=self.model.config)
        reused, layers = self.prefix_cache.longest_prefix(head_ids) if self.prefix_cache else (0, None)
        if layers is not None:
            for index, (keys, values) in enumerate(layers):
                row_cache.update(keys[:, :, :reused], values[:, :, :reused], index)
            self.prefix_cache.reused_tokens += reused
        if reused < len(head_ids):
            head = torch.tensor([head_ids[reused:]], dtype=torch.long, device=self.device)
            self.model(input_ids=head, use_cache=True, logits_to_keep=1, **with_cache(self.model, row_cache))
        return row_cache

    def _weights_version(self) -> int:
        """Changes whenever a parameter is modified in place (PyTorch counts in-place writes per tensor)."""
        return sum(parameter._version for parameter in self.model.parameters())

    def _keep_prefixes(self, chunk: list[_Row], width: int, cache: Any, new_tokens: list[list[int]]) -> None:
        """Copy each row's keys and values out of the batch's static cache into the prefix cache.

        Valid for a row: its prompt, then the generated tokens that were fed back -- all but the last
        sampled, and nothing after the row's end of sequence (the batch keeps feeding it padding).
        """
        for b, row in enumerate(chunk):
            tokens = new_tokens[b]
            fed = max(0, len(tokens) - 1)
            for k, token in enumerate(tokens[:fed]):
                if token in self.eos_ids:
                    fed = k + 1
                    break
            start, end = width - len(row.ids), width + fed
            layers = [(layer.keys[b: b + 1, :, start:end].clone(), layer.values[b: b + 1, :, start:end].clone())
                      for layer in cache.layers]
            self.prefix_cache.add(list(row.ids) + tokens[:fed], layers)

    def _finish_row(self, tokens: list[int], logprobs: list[float], prompt_text: str, prompt_ids: list[int],
                    sampling: SamplingParams) -> Generation:
        finish = "length"
        end = len(tokens)
        for k, token in enumerate(tokens):
            if token in self.eos_ids:
                end, finish = k + 1, "stop"
                break
        text_tokens = tokens[: end - 1] if finish == "stop" else tokens[:end]
        text = self.tokenizer.decode(text_tokens, skip_special_tokens=True)
        if sampling.stop:
            cut, found = cut_at_stop(text, sampling.stop)
            if found:
                end = self._stop_token_end(text_tokens, sampling.stop)
                text, finish = cut, "stop"
        return Generation(text=text, token_ids=tokens[:end], logprobs=logprobs[:end] if sampling.logprobs else None,
                          prompt_text=prompt_text, prompt_token_ids=prompt_ids, finish_reason=finish)

    def _stop_token_end(self, tokens: list[int], stop: Sequence[str]) -> int:
        """Smallest k such that the first k tokens already contain a stop string (binary search)."""
        def contains(k: int) -> bool:
            return cut_at_stop(self.tokenizer.decode(tokens[:k], skip_special_tokens=True), stop)[1]

        low, high = 1, len(tokens)
        while low < high:
            mid = (low + high) // 2
            if contains(mid):
                high = mid
            else:
                low = mid + 1
        return low
