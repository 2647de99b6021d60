"""Items other than text, checked into their canonical bytes (DESIGN.md "Items and
similarity families"): a bit string (`bits`: N/4 hexadecimal digits, or in msgpack a
bin of N/8 bytes, most significant bit first either way) or a vector (`vector`: a
JSON or msgpack array of D numbers, or in msgpack a bin of D little-endian float32).
Each function returns the item's bytes or the reason and message it is refused with,
never raises: a bad item is a dead letter or an error record, not a crash."""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

from streamdedup.config import Fields
from streamdedup.models import (
    BAD_ITEM_LENGTH,
    BAD_ITEM_TYPE,
    BAD_ITEM_VALUE,
    ITEM_NOT_FINITE,
    MIXED_SET,
    ZERO_VECTOR,
)

Refusal = tuple[str, str]  # (reason code, message)
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def bits_item(value: Any, fields: Fields, name: str) -> bytes | Refusal:
    """A bit string of `fields.bits` bits."""
    width = fields.bits // 8
    if isinstance(value, bytes):
        if len(value) != width:
            why = f"field {name!r} holds {len(value)} bytes; {fields.bits} bits are {width}"
            return BAD_ITEM_LENGTH, why
        return value
    if not isinstance(value, str):
        what = f"{json_kind(value)}, not a string of hexadecimal digits"
        return BAD_ITEM_TYPE, f"field {name!r} is {what}"
    if len(value) != 2 * width:
        return BAD_ITEM_LENGTH, (
            f"field {name!r} holds {len(value)} hexadecimal digits; {fields.bits} bits are "
            f"{2 * width}"
        )
    try:
        bits = bytes.fromhex(value)
    except ValueError:
        bits = b""
    if len(bits) != width:  # (`fromhex` also skips spaces: not digits either)
        return BAD_ITEM_VALUE, f"field {name!r} is not hexadecimal: {value[:80]!r}"
    return bits


def vector_item(value: Any, fields: Fields, name: str) -> bytes | Refusal:
    """A vector of `fields.dim` finite numbers, as D little-endian float32 (not all
    zero if `fields.nonzero`: a zero vector has no direction, no cosine)."""
    dim = fields.dim
    if isinstance(value, bytes):
        if len(value) != 4 * dim:
            return BAD_ITEM_LENGTH, (
                f"field {name!r} holds {len(value)} bytes; {dim} float32 values are {4 * dim}"
            )
        row = np.frombuffer(value, dtype="<f4")
    elif isinstance(value, list):
        if len(value) != dim:
            return BAD_ITEM_LENGTH, f"field {name!r} holds {len(value)} numbers, not {dim}"
        if not _NUMBERS.issuperset(map(type, value)):  # (bool, None, str: not numbers)
            wrong = next(x for x in value if type(x) not in _NUMBERS)
            return BAD_ITEM_VALUE, f"field {name!r} holds {json_kind(wrong)}, not only numbers"
        try:
            wide = np.asarray(value, dtype=np.float64)
        except OverflowError:  # (an integer beyond a double)
            wide = np.full(1, np.inf)
        if not (np.abs(wide) <= _FLOAT32_MAX).all():  # (False for NaN too)
            return ITEM_NOT_FINITE, (
                f"field {name!r} holds a value that is not a finite float32 number "
                "(NaN, infinite, or beyond 3.4e38)"
            )
        row = wide.astype("<f4")
    else:
        return BAD_ITEM_TYPE, f"field {name!r} is {json_kind(value)}, not an array of {dim} numbers"
    if not np.isfinite(row).all():
        return ITEM_NOT_FINITE, f"field {name!r} holds a value that is NaN or infinite"
    if fields.nonzero and not row.any():
        return ZERO_VECTOR, f"field {name!r} is all zeros: it has no direction, no cosine"
    return row.tobytes()


def set_item(value: Any, fields: Fields, name: str) -> bytes | Refusal:
    """A set of strings or of integers (not both), as the msgpack array of its
    distinct elements' canonical bytes, sorted: a tag (b"s" a string's UTF-8, b"i" an
    integer's decimal digits, so "1" and 1 differ) and the value.  Equal sets, in any
    order and with any repeats, have equal bytes."""
    if not isinstance(value, list):
        return BAD_ITEM_TYPE, f"field {name!r} is {json_kind(value)}, not an array (a set)"
    kinds = set(map(type, value))
    if not kinds <= _ELEMENTS:
        wrong = next(x for x in value if type(x) not in _ELEMENTS)
        what = f"{json_kind(wrong)}, not only strings or integers"
        return BAD_ITEM_VALUE, f"field {name!r} holds {what}"
    if len(kinds) > 1:
        return MIXED_SET, (
            f"field {name!r} mixes strings and integers: a set holds one kind "
            '(send "1" or 1, not both)'
        )
    if str in kinds:
        tagged = {b"s" + x.encode("utf-8", "surrogatepass") for x in value}
    else:
        tagged = {b"i" + str(x).encode() for x in value}
    out: bytes = msgpack.packb(sorted(tagged))
    return out


_ELEMENTS = frozenset({str, int})
_NUMBERS = frozenset({int, float})


_KINDS: dict[type, str] = {
    type(None): "null",
    bool: "a boolean",
    int: "an integer",
    float: "a number with a fraction or exponent",
    str: "a string",
    list: "an array",
    tuple: "an array",
    dict: "an object",
    bytes: "binary data",
}


def json_kind(value: Any) -> str:
    """`value`'s kind as JSON (and msgpack) name it, with its article: "null",
    "an integer", "an array", ... (a type of neither: "a <Python type>")."""
    kind = _KINDS.get(type(value))
    if kind is not None:
        return kind
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"
