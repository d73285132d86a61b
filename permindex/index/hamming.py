"""Hamming distance between 64-bit fingerprints: popcount of the XOR, in bits.

The distance of two Python ints (:func:`hamming`), and the checks and conversions of
fingerprints (one int, an array or an iterable of them, the text form of every output). The
near-duplicate criterion (distance <= k, k = 3 for 64-bit fingerprints of web pages) is from
Manku, Jain & Das Sarma 2007, "Detecting Near-Duplicates for Web Crawling", sections 2 and 3.
"""

from __future__ import annotations

import json
from collections.abc import Iterable

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError

__all__ = [
    "FINGERPRINT_BITS",
    "MAX_FINGERPRINT",
    "as_fingerprint_array",
    "hamming",
    "parse_fingerprint",
    "validate_fingerprint",
]

FINGERPRINT_BITS = 64
MAX_FINGERPRINT = (1 << FINGERPRINT_BITS) - 1

_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
#: How a fingerprint is written, for the messages that refuse one.
FINGERPRINT_RULE = (
    "a fingerprint string is hex, exactly 16 hex digits or 0x and 1 to 16 of them "
    "(e.g. 000000000000007b or 0x7b); a JSON number is its value"
)


def validate_fingerprint(value: object, *, name: str = "fingerprint") -> int:
    """Return ``value`` as a Python int in [0, 2^64).

    Accepts ``int`` and numpy integer scalars. Raises ``TypeError`` for ``bool``, ``float``,
    ``str`` and any other type, and :class:`~permindex.errors.InvalidArgumentError` (a
    ``ValueError``) for a negative value or one of 2^64 or more; the message names the value.
    Nothing is ever masked or wrapped around.

    >>> from permindex import validate_fingerprint
    >>> validate_fingerprint(0xFFFF)
    65535
    """
    if isinstance(value, bool) or isinstance(value, np.bool_):
        raise TypeError(f"{name} must be an integer in [0, 2**64), not bool {value!r}")
    if isinstance(value, int):
        number = value if type(value) is int else int.__index__(value)  # a subclass: its value
    elif isinstance(value, np.integer):
        number = int(value)
    else:
        raise TypeError(
            f"{name} must be an integer in [0, 2**64), not {type(value).__name__} {value!r}"
        )
    if number < 0 or number > MAX_FINGERPRINT:
        raise InvalidArgumentError(
            f"{name} {number} is outside [0, 2**64): a fingerprint is an unsigned 64-bit integer",
            value=number,
        )
    return number


def parse_fingerprint(value: object) -> int:
    """A fingerprint as an input writes it: the one rule of the command line (``query
    --fingerprint``), JSONL (``"fingerprint"``) and every later input format.

    - a string is hex: exactly 16 hex digits (either case), or ``0x``/``0X`` and 1 to 16 hex
      digits; never decimal, no sign, no spaces;
    - an integer (Python ``int`` or numpy integer, not ``bool``: a JSON number, an integer
      column) is its value, in [0, 2^64).

    O(len(value)).

    Raises:
        InvalidArgumentError: anything else (another string, a negative or too large integer,
            a float, ``None``, a bool, a list...); the message names the value and states the rule.

    >>> from permindex import parse_fingerprint
    >>> parse_fingerprint("0x0b"), parse_fingerprint("000000000000ffff"), parse_fingerprint(7)
    (11, 65535, 7)
    """
    if isinstance(value, str):
        prefixed = value[:2] in ("0x", "0X")
        digits = value[2:] if prefixed else value
        is_hex = digits != "" and all(c in _HEX_DIGITS for c in digits)
        if is_hex and (len(digits) == 16 or (prefixed and len(digits) < 16)):
            return int(digits, 16)
        if is_hex and len(digits) > 16:
            problem = f"has {len(digits)} hex digits, more than 64 bits"
        elif is_hex:
            problem = f"has {len(digits)} digits, not 16, and no 0x"
            if digits.isdigit() and int(digits) <= MAX_FINGERPRINT:
                problem += f" (if it is decimal, write {int(digits):#x})"
        else:
            problem = "is not hex"
        raise InvalidArgumentError(
            f"fingerprint {value!r} {problem}: {FINGERPRINT_RULE}", value=value
        )
    if isinstance(value, int | np.integer) and not isinstance(value, bool | np.bool_):
        number = int(value)
        if 0 <= number <= MAX_FINGERPRINT:
            return number
        raise InvalidArgumentError(
            f"fingerprint {number} is outside [0, 2**64): a fingerprint is an unsigned 64-bit "
            "integer",
            value=number,
        )
    try:
        shown = json.dumps(value)
    except (TypeError, ValueError):
        shown = repr(value)
    raise InvalidArgumentError(
        f"fingerprint {shown} is not an integer or a hex string: {FINGERPRINT_RULE}", value=value
    )


def hamming(a: object, b: object) -> int:
    """Hamming distance of two fingerprints, in bits (0..64): ``popcount(a ^ b)``.

    Both are checked with :func:`validate_fingerprint`: ``TypeError``
    for a bool, float, str or other non-integer, :class:`~permindex.errors.InvalidArgumentError`
    for a value outside [0, 2^64).

    >>> from permindex import hamming
    >>> hamming(0b1011, 0b1000)
    2
    """
    x = validate_fingerprint(a, name="a")
    y = validate_fingerprint(b, name="b")
    return (x ^ y).bit_count()


def as_fingerprint_array(values: object, *, name: str = "fingerprints") -> NDArray[np.uint64]:
    """``values`` as a new contiguous (n,) uint64 array, every element checked.

    Accepts a 1-d numpy array of an unsigned or signed integer dtype (signed: only when no
    element is negative; nothing is wrapped) or of object dtype holding ints, and any other
    iterable of ints (numpy integer scalars allowed).

    Raises:
        TypeError: ``values`` is a str/bytes, not iterable, a bool/float/str array, or holds a
            non-integer element (bool, float, str, ...).
        InvalidArgumentError: an element is negative or >= 2^64 (the message names its
            position), or the array is not 1-dimensional.
    """
    if isinstance(values, np.ndarray):
        if values.ndim != 1:
            raise InvalidArgumentError(
                f"{name} must be a 1-dimensional array, got shape {values.shape}",
                value=values.shape,
            )
        kind = values.dtype.kind
        if kind == "u":
            return np.array(values, dtype=np.uint64, copy=True)
        if kind == "i":
            negative = np.flatnonzero(values < 0)
            if negative.size:
                i = int(negative[0])
                raise InvalidArgumentError(
                    f"{name}[{i}] = {int(values[i])} is negative: a fingerprint is an unsigned "
                    f"64-bit integer (pass a uint64 array; signed values are never wrapped)",
                    value=int(values[i]),
                )
            return values.astype(np.uint64)
        if kind == "O":
            return _from_sequence(values.tolist(), name)
        if values.size == 0:
            return np.empty(0, dtype=np.uint64)
        raise TypeError(
            f"{name} must be an array of unsigned 64-bit integers, not dtype {values.dtype}"
        )
    if isinstance(values, (str, bytes, bytearray)) or not isinstance(values, Iterable):
        raise TypeError(
            f"{name} must be an iterable of ints or a uint64 array, not {type(values).__name__}"
        )
    return _from_sequence(list(values), name)


def _from_sequence(items: list[object], name: str) -> NDArray[np.uint64]:
    if all(type(v) is int for v in items):
        try:
            return np.array(items, dtype=np.uint64)
        except OverflowError:
            pass  # a value out of range: the loop below names it
    out = np.empty(len(items), dtype=np.uint64)
    for i, value in enumerate(items):
        out[i] = validate_fingerprint(value, name=f"{name}[{i}]")
    return out
