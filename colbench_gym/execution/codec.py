"""Grader side of the result channel: frame parsing and decoding of tagged values.

The sandboxed child encodes each return value into JSON with type tags (see
``_sandbox_server._make_encoder``). Here the grader turns those bytes back into plain objects made
by this process only -- ``int``, ``float``, ``str``, ``list``, ``tuple``, ``dict``, ``set`` ...,
the standard-library values whose equality is not their ``repr``'s (``Decimal``, ``Fraction``,
``Counter``, ``OrderedDict``, ``range``, ``datetime``/``date``/``time``/``timedelta``/``timezone``)
-- and :class:`OpaqueValue` for anything else. Equality is then computed on trusted objects, as
Python computes it in one process (``Decimal('1.50') == 1.5``, two aware datetimes at one instant,
``Counter(a=0) == Counter()``): a candidate's ``__eq__`` never runs in the grader. Every malformed input raises
:class:`ProtocolError`; the caller records it as a failed test, never a pass.

A child can write any frame it likes (the harness's writer is reachable from the answer), so
decoding is bounded by the frame's size: nesting depth is capped, a set or dict whose items
were crafted to share one hash value -- which would make building it quadratic, minutes of the
grader's time for one frame -- is rejected (:data:`MAX_ITEMS_PER_HASH`), and so are Decimals,
Fractions and ranges past the bounds below (the encoder sends larger ones as opaque values), so
that building and comparing them stays cheap.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import fractions
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


@dataclass(frozen=True, eq=False)
class OpaqueValue:
    """A value that is not plain data, carried as its type name and ``repr``.

    Two opaque values are equal when both match; an opaque value never equals plain data. A value
    whose type compares by identity and whose ``repr`` shows an address (a bare ``object()``, a
    function, an instance of a class without ``__eq__``) has ``identity=True``: it equals nothing
    but itself, as in-process -- two children forked from one server may well print the same
    address for two different objects.
    """

    type_name: str
    text: str
    identity: bool = False

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if type(other) is not OpaqueValue or self.identity or other.identity:
            return False
        return self.type_name == other.type_name and self.text == other.text

    def __hash__(self) -> int:
        return object.__hash__(self) if self.identity else hash((self.type_name, self.text))

    def __repr__(self) -> str:
        return self.text


class _Decimal(decimal.Decimal):
    """A decoded ``Decimal``: Python's equality, without its one slow case.

    ``Decimal == int`` converts the int to a Decimal, which takes time quadratic in its length
    (10 s for a 3-million-bit int). A decoded Decimal is below ``10**(MAX_DECIMAL_EXPONENT + 1)``
    in magnitude, so an int longer than that cannot equal it: answered without converting.
    """

    __slots__ = ()
    __hash__ = decimal.Decimal.__hash__

    def __eq__(self, other: object) -> bool:
        if type(other) is int and other.bit_length() > _DECIMAL_INT_BITS:
            return False
        return super().__eq__(other)

    def __ne__(self, other: object) -> bool:
        if type(other) is int and other.bit_length() > _DECIMAL_INT_BITS:
            return True
        return super().__ne__(other)


class FrameReader:
    """Incremental parser of ``MAGIC + nonce + length + body`` frames from one child."""

    def __init__(self, nonce: bytes, max_frame_bytes: int) -> None:
        self._head = MAGIC + nonce
        self._max = max_frame_bytes
        self._buffer = bytearray()
        self._need = 0  # bytes the buffered, incomplete frame still needs before it can be parsed

    def feed(self, data: bytes) -> list[Any]:
        """Add bytes; return the JSON bodies of all complete frames (ProtocolError if malformed)."""
        bodies, error = self.read(data)
        if error is not None:
            raise ProtocolError(error)
        return bodies

    def read(self, data: bytes) -> tuple[list[Any], str | None]:
        """Add bytes; return the bodies of the complete frames before the first malformed one, and
        what is wrong with that one (None if nothing is). Nothing is read after an error."""
        if self._buffer:
            self._buffer += data
            if len(self._buffer) < self._need:
                return [], None
            data = bytes(self._buffer)
            self._buffer.clear()
        bodies: list[Any] = []
        head, head_length, maximum = self._head, len(self._head), self._max
        position, size = 0, len(data)
        while size - position >= _PREFIX_LEN:
            if not data.startswith(head, position):
                return bodies, "bad frame header"
            (length,) = _HEADER.unpack_from(data, position + head_length)
            if length > maximum:
                return bodies, f"frame of {length} bytes exceeds the limit"
            end = position + _PREFIX_LEN + length
            if end > size:
                break
            try:
                bodies.append(_loads(data[position + _PREFIX_LEN : end]))
            except (ValueError, RecursionError) as err:
                return bodies, f"frame body is not valid JSON: {err}"
            position = end
        if position < size:
            self._buffer += data[position:]
            self._need = _PREFIX_LEN if size - position < _PREFIX_LEN else _PREFIX_LEN + _HEADER.unpack_from(
                data, position + head_length
            )[0]
        return bodies, None

    @property
    def pending(self) -> int:
        return len(self._buffer)


_SCAN_ONCE = json.JSONDecoder().scan_once


def _loads(body: bytes) -> Any:
    """``json.loads(body)``, faster for what an honest child writes (compact ASCII JSON): the C
    scanner straight away. Anything else goes through ``json.loads`` itself, so every body decodes
    exactly as it would there (or fails as it would)."""
    try:
        text = body.decode("ascii")
        value, end = _SCAN_ONCE(text, 0)
    except (UnicodeDecodeError, StopIteration):
        return json.loads(body)
    if end != len(text):
        return json.loads(body)
    return value


_SCALARS = (str, int, float, bool, type(None))
# Bounds of rebuilt standard-library values (the encoder in _sandbox_server.py sends anything
# larger as an opaque value): what comparing or building them costs stays small.
MAX_DECIMAL_DIGITS = 10_000  # length of str(Decimal)
MAX_DECIMAL_EXPONENT = 10_000  # |Decimal.adjusted()|
_DECIMAL_INT_BITS = int((MAX_DECIMAL_EXPONENT + 2) * 3.33) + 64  # bits of 10**(MAX_DECIMAL_EXPONENT + 2), and then some
MAX_EXACT_BITS = 1 << 16  # numerator + denominator of a Fraction; start + stop + step of a range


def _int_field(value: Any) -> int:
    if type(value) is not int:
        raise ProtocolError(f"expected an int field, got {type(value).__name__}")
    return value


def _decode_pairs(items: list[Any], depth: int, max_depth: int) -> tuple[list[Any], list[Any]]:
    if len(items) % 2:
        raise ProtocolError("mapping with an odd number of items")
    decoded = [decode_value(item, depth, max_depth) for item in items]
    keys = decoded[0::2]
    _check_hash_spread(keys)
    return keys, decoded[1::2]


def _decode_timezone(node: Any, depth: int, max_depth: int) -> datetime.tzinfo | None:
    """``None`` or ``["TZ", ["TD", days, seconds, microseconds], name or None]``."""
    if node is None:
        return None
    if type(node) is not list or len(node) != 3 or node[0] != "TZ" or not (node[2] is None or type(node[2]) is str):
        raise ProtocolError("malformed time zone")
    offset = decode_value(node[1], depth + 1, max_depth)
    if type(offset) is not datetime.timedelta:
        raise ProtocolError("malformed time zone offset")
    zone = datetime.timezone(offset)
    if node[2] is not None and node[2] != zone.tzname(None):
        zone = datetime.timezone(offset, node[2])
    return zone


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
            return dict(zip(*_decode_pairs(items, next_depth, max_depth)))
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
        if tag in ("o", "i") and len(items) == 2 and all(type(part) is str for part in items):
            return OpaqueValue(items[0], items[1], identity=tag == "i")
        if tag == "D" and len(items) == 1 and type(items[0]) is str and len(items[0]) <= MAX_DECIMAL_DIGITS:
            number = _Decimal(items[0])
            if abs(number.adjusted()) > MAX_DECIMAL_EXPONENT:
                raise ProtocolError("Decimal exponent out of bounds")
            return number
        if tag == "Q" and len(items) == 2:
            numerator, denominator = (_int_field(decode_value(item, next_depth, max_depth)) for item in items)
            if denominator <= 0 or numerator.bit_length() + denominator.bit_length() > MAX_EXACT_BITS:
                raise ProtocolError("Fraction out of bounds")
            return fractions.Fraction(numerator, denominator)
        if tag == "r" and len(items) == 3:
            fields = [_int_field(decode_value(item, next_depth, max_depth)) for item in items]
            if sum(field.bit_length() for field in fields) > MAX_EXACT_BITS:
                raise ProtocolError("range out of bounds")
            return range(*fields)
        if tag == "C":
            return collections.Counter(dict(zip(*_decode_pairs(items, next_depth, max_depth))))
        if tag == "O":
            return collections.OrderedDict(zip(*_decode_pairs(items, next_depth, max_depth)))
        if tag == "TD" and len(items) == 3:
            days, seconds, microseconds = (_int_field(item) for item in items)
            return datetime.timedelta(days=days, seconds=seconds, microseconds=microseconds)
        if tag == "DA" and len(items) == 3:
            return datetime.date(*(_int_field(item) for item in items))
        if tag == "DT" and len(items) == 9:
            *fields, fold = (_int_field(item) for item in items[:8])
            zone = _decode_timezone(items[8], next_depth, max_depth)
            return datetime.datetime(*fields, tzinfo=zone, fold=fold)
        if tag == "TM" and len(items) == 6:
            *fields, fold = (_int_field(item) for item in items[:5])
            return datetime.time(*fields, tzinfo=_decode_timezone(items[5], next_depth, max_depth), fold=fold)
        if tag == "TZ":
            return _decode_timezone(node, depth, max_depth)
    except ProtocolError:
        raise
    except TypeError as err:  # an unhashable item inside a set or a dict key
        raise ProtocolError(f"invalid encoded container: {err}") from None
    except (ValueError, OverflowError, ArithmeticError) as err:  # decimal.InvalidOperation is an ArithmeticError
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
    """ColBench's comparison (``==``), on values decoded by :func:`decode_value` only; a
    comparison that raises (a signalling NaN Decimal, say) is not equal."""
    try:
        return bool(reference == candidate)
    except Exception:  # noqa: BLE001
        return False


def short_repr(value: Any, limit: int = 120) -> str:
    """A bounded ``repr`` of a decoded value, for test details."""
    try:
        text = repr(value)
    except Exception:  # noqa: BLE001 (an int past the digit limit, a nesting past the recursion limit)
        text = f"<{type(value).__name__}>"
    return text if len(text) <= limit else text[: limit - 3] + "..."
