"""The one interface every policy (and LLM-judge) backend implements.

A backend turns chat histories into sampled replies::

    backend.generate(histories, n=1, sampling=SamplingParams(temperature=1.0, max_new_tokens=256),
                     seeds=[7, 8]) -> list[list[Generation]]   # outer: one per history, inner: n samples

``histories`` are lists of chat messages (``{"role": "system"|"user"|"assistant", "content": str}``),
exactly ``info["messages"]`` from a ColBench environment. A failed call never raises for the batch:
the affected :class:`Generation` has ``error`` set and empty text.

Log-probabilities, in every backend, are those of the *sampled* tokens under the model's own
distribution: ``log_softmax`` of the raw logits, before temperature, top-p or top-k. That is what
vLLM returns by default (``logprobs_mode="raw_logprobs"``) and what a trainer recomputes, so the
numbers are comparable across backends and with the training forward pass.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

Message = dict[str, Any]
History = list[Message]


@dataclass
class SamplingParams:
    """How to sample; the subset of options every backend supports the same way.

    Attributes:
        temperature: 0 means greedy decoding.
        top_p: nucleus sampling mass (1.0 disables it).
        top_k: keep the k most likely tokens (0 disables it).
        max_new_tokens: cap on generated tokens per sample.
        stop: strings that end a sample; the text is cut before the first one (as vLLM and OpenAI do),
            ``token_ids`` keep the tokens up to the one that completed it.
        seed: base seed, used when ``generate`` gets no per-history ``seeds``.
        logprobs: ask for per-token log-probabilities (free in the local backends).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 512
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    logprobs: bool = True

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 disables it), got {self.top_k}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if isinstance(self.stop, str):
            self.stop = [self.stop]
        self.stop = [s for s in self.stop if s]

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass
class Generation:
    """One sampled reply, with what a trainer needs to reuse it.

    Attributes:
        text: the reply (stop string and end-of-turn token excluded).
        token_ids: generated token ids, including the end-of-turn token when the model emitted one.
        logprobs: log-probability of each token in ``token_ids`` (see the module docstring).
        prompt_text: the exact prompt string given to the model (chat template applied); ``None``
            when a remote server applied its own template and did not return it.
        prompt_token_ids: the prompt's token ids, when known.
        finish_reason: ``"stop"`` (end of turn or a stop string), ``"length"`` (``max_new_tokens``)
            or ``"error"``.
        error: why the call failed (``None`` on success); failures are data, not exceptions.
        attempts: how many calls it took (remote backends retry; each retried failure is in ``retries``).
        retries: the errors of the failed attempts that a later attempt recovered from.
        prompt_messages_dropped: old dialogue messages left out to fit ``max_prompt_tokens``.
    """

    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    prompt_text: str | None = None
    prompt_token_ids: list[int] | None = None
    finish_reason: str = "stop"
    error: str | None = None
    attempts: int = 1
    retries: list[str] = field(default_factory=list)
    prompt_messages_dropped: int = 0

    @property
    def mean_logprob(self) -> float | None:
        if not self.logprobs:
            return None
        return math.fsum(self.logprobs) / len(self.logprobs)

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @classmethod
    def failed(cls, error: str, prompt_text: str | None = None, prompt_token_ids: list[int] | None = None,
               attempts: int = 1, retries: list[str] | None = None) -> Generation:
        return cls(text="", token_ids=[], logprobs=None, prompt_text=prompt_text, prompt_token_ids=prompt_token_ids,
                   finish_reason="error", error=error, attempts=attempts, retries=list(retries or []))

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["mean_logprob"] = self.mean_logprob
        return out


@runtime_checkable
class GenerationBackend(Protocol):
    """Anything with ``name`` and ``generate(histories, n, sampling, seeds=None)``."""

    name: str

    def generate(self, histories: Sequence[History], n: int = 1, sampling: SamplingParams | None = None,
                 seeds: Sequence[int | None] | None = None) -> list[list[Generation]]: ...


def derive_seed(*parts: Any) -> int:
    """A stable 31-bit seed from any printable parts (same parts -> same seed, in every process)."""
    digest = hashlib.sha256("\x1f".join(map(str, parts)).encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def sample_seeds(n_histories: int, n: int, sampling: SamplingParams,
                 seeds: Sequence[int | None] | None) -> list[list[int | None]]:
    """Seed of sample ``j`` of history ``i``: from ``seeds[i]`` if given, else from ``sampling.seed`` and ``i``.

    Per-history seeds make a sample independent of which other histories share its batch, so a
    collector gets the same episodes whatever its batch size or order. ``None`` means unseeded.
    """
    if seeds is not None and len(seeds) != n_histories:
        raise ValueError(f"got {len(seeds)} seeds for {n_histories} histories")
    table: list[list[int | None]] = []
    for i in range(n_histories):
        base = seeds[i] if seeds is not None else (None if sampling.seed is None else derive_seed(sampling.seed, i))
        table.append([None if base is None else (base if j == 0 else derive_seed(base, j)) for j in range(n)])
    return table


def validate_histories(histories: Sequence[History]) -> None:
    """Raise ``ValueError`` for malformed input (a programming error, not a generation failure)."""
    if isinstance(histories, (str, bytes)) or not isinstance(histories, Sequence):
        raise TypeError("histories must be a list of chat histories (lists of {'role', 'content'} dicts)")
    for i, history in enumerate(histories):
        if not isinstance(history, Sequence) or isinstance(history, (str, bytes)) or not history:
            raise ValueError(f"history {i} must be a non-empty list of chat messages")
        for message in history:
            if not isinstance(message, dict) or "role" not in message or "content" not in message:
                raise ValueError(f"history {i} has a message without 'role'/'content': {message!r:.120}")


def prepare_request(histories: Sequence[History], n: int, sampling: SamplingParams | None,
                    seeds: Sequence[int | None] | None) -> tuple[SamplingParams, list[list[int | None]]]:
    """What every backend's ``generate`` starts with: check the input, then the sampling parameters and seed table."""
    validate_histories(histories)
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    sampling = sampling or SamplingParams()
    return sampling, sample_seeds(len(histories), n, sampling, seeds)


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` before the earliest stop string; returns (text, whether one was found)."""
    positions = [pos for pos in (text.find(s) for s in stop) if pos >= 0]
    if not positions:
        return text, False
    return text[: min(positions)], True
