"""The one place that bridges transformers releases whose names changed.

transformers 5.2x renamed ``past_key_values`` to ``cache`` (in model calls, ``generate`` and outputs) and warns on
the old name until its removal in 5.40; the releases this project supports from 4.45 on know only the old name.
It also renamed gradient checkpointing to activation checkpointing (the ``TrainingArguments`` fields and the model
methods) and warns on every use of the old names, which TRL's configs set and its helpers call.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator
from typing import Any

_CHECKPOINTING_FIELDS = (("gradient_checkpointing", "activation_checkpointing"),
                         ("gradient_checkpointing_kwargs", "activation_checkpointing_kwargs"))


@functools.cache
def _cache_argument_of(model_class: type) -> str:
    # deprecate_kwarg keeps the wrapped signature, so the new name shows here on the releases that have it.
    parameters = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def cache_argument(model: Any) -> str:
    """The keyword under which ``model`` (a transformers model, or a PEFT model around one) takes its cache."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _cache_argument_of(type(base))


def with_cache(model: Any, cache: Any) -> dict[str, Any]:
    """``{name: cache}`` for ``model(**...)`` or ``model.generate(**...)`` (empty when there is no cache)."""
    return {} if cache is None else {cache_argument(model): cache}


def returned_cache(model: Any, output: Any) -> Any:
    """The cache a forward pass of ``model`` returned (``use_cache=True``)."""
    return output[cache_argument(model)]


def checkpointing_by_current_name(args: Any) -> None:
    """Before ``TrainingArguments.__post_init__``: a ``gradient_checkpointing*`` value (TRL's configs default it to
    True; a YAML file may set it) moves to ``activation_checkpointing*`` where the release has that field, so that
    transformers reads it without a deprecation warning. Older releases keep the old field as it is."""
    for old, new in _CHECKPOINTING_FIELDS:
        if hasattr(args, new) and getattr(args, new) is None and getattr(args, old, None) is not None:
            setattr(args, new, getattr(args, old))
            setattr(args, old, None)  # transformers sets it back to the new field's value


@contextlib.contextmanager
def checkpointing_disabled(model: Any, checkpointing_kwargs: dict | None = None) -> Iterator[None]:
    """``trl.models.utils.disable_gradient_checkpointing`` under the names the release has: checkpointing off for
    the block (a no-grad reference pass), then on again as it was."""
    current = hasattr(model, "activation_checkpointing_disable")
    enabled = model.is_activation_checkpointing if current else model.is_gradient_checkpointing
    if enabled:
        (model.activation_checkpointing_disable if current else model.gradient_checkpointing_disable)()
    try:
        yield
    finally:
        if enabled:
            (model.activation_checkpointing_enable if current else model.gradient_checkpointing_enable)(
                checkpointing_kwargs)
