"""Grader side of the result channel: frame parsing and decoding of tagged values.

The sandboxed child encodes each return value into JSON with type tags (see
``_sandbox_server._make_encoder``). Here the grader turns those bytes back into plain built-in
objects made by this process only -- ``int``, ``float``, ``str``, ``list``, ``tuple``, ``dict``,
``set`` ... -- and :class:`OpaqueValue` for anything else. Equality is then computed on trusted
objects: a candidate's ``__eq__`` never runs in the grader. Every malformed input raises
:class:`ProtocolError`; the caller records it as a failed test, never a pass.

A child can write any frame it likes (the harness's writer is reachable from the answer), so
decoding is bounded by the frame's size: nesting depth is capped, and a set or dict whose items
were crafted to share one hash value -- which would make building it quadratic, minutes of the
grader's time for one frame -- is rejected (:data:`MAX_ITEMS_PER_HASH`).
"""

from __future__ import annotations

import json
import operator
import struct
from dataclasses import dataclass
from typing import Any

MAGIC = b"CBF1"
_HEADER = struct.Struct("<I")
_PREFIX_LEN = len(MAGIC) + 16 + _HEADER.size


class ProtocolError(ValueError):
    """Bytes on the result channel do not follow the protocol."""


@dataclass(frozen=True)
class OpaqueValue:
    """A value that is not plain data, carried as its type name and ``repr``.

    Two opaque values are equal when both match; an opaque value never equals plain data. For C
    types (``datetime``, ``Decimal``, ``range``) ``repr`` is exact; for classes without ``__eq__``
    the default ``repr`` holds an address, so two instances never compare equal -- as in-process.
    """

    type_name: str
    text: str

    def __repr__(self) -> str:
        return self.text


class FrameReader:
    """Incremental parser of ``MAGIC + nonce + length + body`` frames from one child."""

    def __init__(self, nonce: bytes, max_frame_bytes: int) -> None:
        self._head = MAGIC + nonce
        self._max = max_frame_bytes
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[Any]:
        """Add bytes; return the JSON bodies of all complete frames (ProtocolError if malformed)."""
        self._buffer += data
        bodies = []
        buffer = self._buffer
        while len(buffer) >= _PREFIX_LEN:
            if buffer[: len(self._head)] != self._head:
                raise ProtocolError("bad frame header")
            (length,) = _HEADER.unpack_from(buffer, len(self._head))
            if length > self._max:
                raise ProtocolError(f"frame of {length} bytes exceeds the limit")
            end = _PREFIX_LEN + length
            if len(buffer) < end:
                break
            try:
                bodies.append(json.loads(bytes(buffer[_PREFIX_LEN:end])))
            except (ValueError, RecursionError) as err:
                raise ProtocolError(f"frame body is not valid JSON: {err}") from None
            del buffer[:end]
        return bodies

    @property
    def pending(self) -> int:
        return len(self._buffer)


_SCALARS = (str, int, float, bool, type(None))


def decode_value(node: Any, depth: int = 0, max_depth: int = 200) -> Any:
    """Rebuild a plain Python value from its tagged JSON form."""
    kind = type(node)
    if kind in _SCALARS:
        return node
    if kind is not list or not node or type(node[0]) is not str:
        raise ProtocolError(f"unexpected encoded node of type {kind.__name__}")
    if depth > max_depth:
        raise ProtocolError("encoded value nested too deeply")
    tag = node[0]
    items = node[1:]
    next_depth = depth + 1
    try:
        if tag == "l":
            return [decode_value(item, next_depth, max_depth) for item in items]
        if tag == "t":
            return tuple(decode_value(item, next_depth, max_depth) for item in items)
        if tag == "d":
            if len(items) % 2:
                raise ProtocolError("dict with an odd number of items")
            decoded = [decode_value(item, next_depth, max_depth) for item in items]
            keys = decoded[0::2]
            _check_hash_spread(keys)
            return dict(zip(keys, decoded[1::2]))
        if tag == "s" or tag == "f":
            decoded = [decode_value(item, next_depth, max_depth) for item in items]
            _check_hash_spread(decoded)
            return set(decoded) if tag == "s" else frozenset(decoded)
        if tag == "I" and len(items) == 1 and type(items[0]) is str:
            return int(items[0], 16)
        if tag == "c" and len(items) == 2 and all(type(part) in (int, float) for part in items):
            return complex(items[0], items[1])
        if tag == "b" and len(items) == 1 and type(items[0]) is str:
            return bytes.fromhex(items[0])
        if tag == "B" and len(items) == 1 and type(items[0]) is str:
            return bytearray.fromhex(items[0])
        if tag == "o" and len(items) == 2 and all(type(part) is str for part in items):
            return OpaqueValue(items[0], items[1])
    except ProtocolError:
        raise
    except TypeError as err:  # an unhashable item inside a set or a dict key
        raise ProtocolError(f"invalid encoded container: {err}") from None
    except (ValueError, OverflowError) as err:
        raise ProtocolError(f"invalid encoded scalar: {err}") from None
    raise ProtocolError(f"unknown tag {tag!r}")


# Most distinct items of one set (or keys of one dict) that may share a hash value. Building a set
# compares a new item with every item already there that has its hash, so n items crafted to
# share one (``k * (2**61 - 1)`` for ints; tuples of those) cost n**2 / 2 comparisons: minutes for
# a frame the child is allowed to send. Honest values essentially never have more than two.
MAX_ITEMS_PER_HASH = 8


def _check_hash_spread(items: list[Any]) -> None:
    """ProtocolError unless every hash value is shared by at most :data:`MAX_ITEMS_PER_HASH`
    distinct items, so that building the set or dict takes linear time.

    Hash values are attacker-chosen too, so they are sorted, never put in a set or dict of their
    own (their own hashes could collide); in C, unless some value is crowded.
    """
    limit = MAX_ITEMS_PER_HASH
    if len(items) <= limit:
        return
    hashes = list(map(hash, items))  # TypeError for an unhashable item: reported by the caller
    ordered = sorted(hashes)
    if not any(map(operator.eq, ordered, ordered[limit:])):
        return
    # Some hash value has more than `limit` items. Equal items may share it (an encoding never
    # repeats an item, but two opaque values can have one repr): count the distinct items of each
    # crowded hash, stopping past the limit, so that no group costs more than limit**2 comparisons.
    order = sorted(range(len(items)), key=hashes.__getitem__)
    start = 0
    for end in range(1, len(order) + 1):
        if end < len(order) and hashes[order[end]] == hashes[order[start]]:
            continue
        if end - start > limit:
            distinct: list[Any] = []
            for index in order[start:end]:
                item = items[index]
                if not any(item == other for other in distinct):
                    distinct.append(item)
                    if len(distinct) > limit:
                        raise ProtocolError(f"more than {limit} distinct items of one set or dict share a hash value")
        start = end


def values_equal(reference: Any, candidate: Any) -> bool:
    """ColBench's comparison (``==``), on values decoded by :func:`decode_value` only."""
    try:
        return bool(reference == candidate)
    except (RecursionError, TypeError, ValueError):
        return False


def short_repr(value: Any, limit: int = 120) -> str:
    """A bounded ``repr`` of a decoded value, for test details."""
    try:
        text = repr(value)
    except (RecursionError, ValueError):
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
