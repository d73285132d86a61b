"""SimHash fingerprints of text (Charikar 2002, "Similarity estimation techniques from rounding
algorithms", section 3; the 64-bit text form used by Manku, Jain & Das Sarma 2007, section 2).

The default algorithm, which every stored fingerprint and the shared reference vectors assume:

1. ``text.lower()``, then ``str.split()`` (runs of Unicode whitespace separate words, so NBSP and
   U+3000 do);
2. every run of ``shingle_size`` consecutive words joined by one space is a *shingle*; a shingle
   that repeats votes each time it occurs;
3. each shingle is hashed with XXH3-64 (seed 0) of its UTF-8 bytes;
4. counter i gets +1 when bit i (value ``1 << i``) of the hash is set and -1 otherwise;
5. bit i of the fingerprint is 1 where counter i > 0 (a tie gives 0).

A text with fewer words than ``shingle_size`` has no fingerprint: :func:`simhash` returns ``None``,
never 0. With ``bits=63`` bit 63 is cleared, so that the value fits a signed 64-bit integer column
(the article's PHP implementation does the same).
"""

from __future__ import annotations

import numpy as np
import xxhash

from permindex.errors import InvalidArgumentError

__all__ = ["FINGERPRINT_BITS", "MAX_FINGERPRINT", "shingles", "simhash", "validate_fingerprint"]

FINGERPRINT_BITS = 64
MAX_FINGERPRINT = (1 << FINGERPRINT_BITS) - 1
_BIT63 = 1 << 63
_CHUNK = 1 << 16  # shingle hashes counted per numpy pass (bounds memory at 4 MiB of bits)
_SMALL = 24  # below this many shingles, counting in pure Python is faster than numpy


def validate_fingerprint(value: object, *, name: str = "fingerprint") -> int:
    """Return ``value`` as a Python int in [0, 2^64).

    Accepts ``int`` and numpy integer scalars. Raises ``TypeError`` for ``bool``, ``float``,
    ``str`` and any other type, and :class:`~permindex.errors.InvalidArgumentError` (a
    ``ValueError``) for a negative value or one of 2^64 or more; the message names the value.
    Nothing is ever masked or wrapped around.
    """
    if isinstance(value, bool) or isinstance(value, np.bool_):
        raise TypeError(f"{name} must be an integer in [0, 2**64), not bool {value!r}")
    if isinstance(value, int):
        number = value
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


def shingles(text: str, shingle_size: int = 3) -> list[str]:
    """The word shingles of ``text`` in order, repeats included: lower-cased, split on Unicode
    whitespace, ``shingle_size`` consecutive words joined by one space. Empty when the text has
    fewer words than ``shingle_size``."""
    words = text.lower().split()
    n = len(words) - shingle_size + 1
    if n <= 0:
        return []
    if shingle_size == 1:
        return words
    return [" ".join(words[i : i + shingle_size]) for i in range(n)]


def _check_options(shingle_size: int, bits: int) -> None:
    if isinstance(shingle_size, bool) or not isinstance(shingle_size, int) or shingle_size < 1:
        raise InvalidArgumentError(
            f"shingle_size must be a positive integer, got {shingle_size!r}", value=shingle_size
        )
    if bits not in (63, 64) or isinstance(bits, bool):
        raise InvalidArgumentError(
            f"bits must be 64 (the default) or 63 (bit 63 left clear), got {bits!r}", value=bits
        )


def _vote(hashes: list[int]) -> int:
    """Fingerprint from the hashes of the shingles (each votes once): bit i is 1 when more than
    half of the hashes have bit i set."""
    n = len(hashes)
    if n < _SMALL:
        result = 0
        for i in range(FINGERPRINT_BITS):
            mask = 1 << i
            ones = sum(1 for h in hashes if h & mask)
            if 2 * ones > n:
                result |= mask
        return result
    ones_total = np.zeros(FINGERPRINT_BITS, dtype=np.int64)
    for start in range(0, n, _CHUNK):
        chunk = np.array(hashes[start : start + _CHUNK], dtype="<u8")
        # (m, 64) little-endian bit matrix: column i is bit i of each hash.
        bits = np.unpackbits(chunk.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        ones_total += bits.sum(axis=0, dtype=np.int64)
    set_bits = np.flatnonzero(2 * ones_total > n)
    return sum(1 << int(i) for i in set_bits)


def simhash(text: str, *, shingle_size: int = 3, bits: int = 64) -> int | None:
    """The SimHash fingerprint of ``text`` (algorithm in the module docstring).

    Args:
        text: any ``str``.
        shingle_size: words per shingle (default 3).
        bits: 64 (default) or 63; with 63, bit 63 is cleared so the value fits a signed BIGINT.

    Returns:
        An int in [0, 2^64) (in [0, 2^63) with ``bits=63``), or ``None`` when the text has fewer
        than ``shingle_size`` words.

    Raises:
        TypeError: ``text`` is not a ``str``.
        InvalidArgumentError: (a ``ValueError``) ``shingle_size`` < 1 or ``bits`` not 63/64.

    Source: Charikar 2002, section 3 (random-hyperplane rounding, here with one hash per
    shingle); Manku et al. 2007, section 2, for 64-bit fingerprints of web pages.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    _check_options(shingle_size, bits)
    parts = shingles(text, shingle_size)
    if not parts:
        return None
    hash_ = xxhash.xxh3_64_intdigest
    fingerprint = _vote([hash_(s.encode("utf-8")) for s in parts])
    if bits == 63:
        fingerprint &= ~_BIT63
    return fingerprint
