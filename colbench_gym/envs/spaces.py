"""A Gymnasium text space for free-form dialogue."""

from __future__ import annotations

import string
from typing import Any

from gymnasium.error import CustomSpaceError
from gymnasium.spaces import Text
from gymnasium.vector.utils import create_shared_memory

# What ``sample()`` draws from. Membership is not limited to it: model output is arbitrary Unicode.
SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n\t" + "éüß€→✓中文"


class UnicodeText(Text):
    """Any ``str`` up to ``max_length`` characters (Gymnasium's ``Text`` only admits its charset)."""

    def __init__(self, max_length: int, *, min_length: int = 0, seed: Any = None):
        super().__init__(max_length=max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"


# AsyncVectorEnv passes observations through shared memory by default, reading it once as live views:
# possible for arrays, not for Python strings (Gymnasium's own ``Text`` returns the first strings forever).
# Refusing makes AsyncVectorEnv say to pass ``shared_memory=False``, with which text works.
@create_shared_memory.register(UnicodeText)
def _no_shared_memory(space: UnicodeText, n: int = 1, ctx: Any = None) -> Any:
    raise CustomSpaceError(f"{space!r} cannot live in shared memory: use AsyncVectorEnv(..., shared_memory=False), "
                           'or gym.make_vec(..., vector_kwargs={"shared_memory": False})')
