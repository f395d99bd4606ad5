"""The one place that bridges transformers releases whose key-value cache argument has another name.

transformers 5.2x renamed ``past_key_values`` to ``cache`` (in model calls, ``generate`` and outputs) and warns on
the old name until its removal in 5.40; the releases this project supports from 4.45 on know only the old name.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any


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
