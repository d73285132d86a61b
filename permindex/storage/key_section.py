"""The key section, the one encoding of a batch of keys in memory and on disk, and the rule for a
key repeated in one batch.

A key section holds n keys in order, each as its UTF-8 bytes followed by one NUL byte (0x00).
The keys' byte lengths (the NUL excluded) are authoritative, since a key may itself contain
U+0000; the NULs let a reader decode the whole section once and split it. Key i occupies
``section[ends[i] - lengths[i] - 1 : ends[i] - 1]`` where ``ends = cumsum(lengths + 1)`` (one past
each key's NUL). The key store's byte buffer, the snapshot's key section and the write-ahead
log record's key section are all this layout.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Final, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.keys.rule import MAX_KEY_BYTES

__all__ = [
    "UTF8_SLICE",
    "BatchRepeats",
    "KeySectionError",
    "batch_repeats",
    "check_section",
    "decode_section",
    "encode_keys",
    "encode_section",
    "first_utf8_error",
    "section_ends",
    "section_lengths",
]

#: Bytes of a non-ASCII section decoded per step by :func:`check_section` (16 MiB).
UTF8_SLICE: Final = 1 << 24

_I64 = NDArray[np.int64]
_U8 = NDArray[np.uint8]

#: What is wrong with a section: ``length`` (a key length outside the allowed range), ``size``
#: (the lengths do not add up to the section), ``nul`` (a key not followed by its NUL),
#: ``utf8`` (bytes that are not valid UTF-8).
Problem = Literal["length", "size", "nul", "utf8"]


class KeySectionError(InvalidArgumentError):
    """A key section that is not well formed (a ``ValueError``).

    Attributes:
        kind: the :data:`Problem`.
        offset: for ``utf8``, the byte offset of the first invalid byte in the section (else -1).
        reason: for ``utf8``, the decoder's reason (``"invalid start byte"``; else "").
    """

    def __init__(self, message: str, kind: Problem, *, offset: int = -1, reason: str = "") -> None:
        super().__init__(message, None)
        self.kind: Problem = kind
        self.offset = offset
        self.reason = reason


# ------------------------------------------------------------------------------------ encoding


def encode_section(keys: Sequence[str]) -> tuple[bytes, _I64]:
    """The key section of ``keys`` and its ends: ((B,) bytes, (n,) int64 one past each key's NUL).

    One join and one encode for the whole batch (C loops); the ends are read off the NUL bytes,
    or, when a key itself contains NUL, computed from one encode per key. O(n + B).

    Raises:
        TypeError: an element is not a str.
        UnicodeEncodeError: an element cannot be encoded (a lone surrogate). The callers that
            must name the offending key validate the keys first.
    """
    n = len(keys)
    raw = "\x00".join(itertools.chain(keys, ("",))).encode("utf-8")
    ends = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 0)
    if ends.size == n:
        ends += 1
        return raw, ends.astype(np.int64, copy=False)
    lengths = np.fromiter((len(key.encode("utf-8")) for key in keys), np.int64, n)
    return raw, np.cumsum(lengths + 1)


def section_lengths(ends: _I64) -> NDArray[np.uint32]:
    """(n,) little-endian uint32 key lengths (NUL excluded) from the (n,) int64 ``ends``."""
    return (np.diff(ends, prepend=0) - 1).astype("<u4")


def encode_keys(keys: Sequence[str]) -> tuple[NDArray[np.uint32], bytes]:
    """(n,) little-endian uint32 UTF-8 lengths (NUL excluded) and the key section of ``keys``
    (:func:`encode_section`), as a log record and a snapshot write them.

    Raises:
        TypeError: a key is not a str.
        InvalidArgumentError: a key is not encodable as UTF-8 (a lone surrogate).

    Examples:
        >>> lengths, section = encode_keys(["a", "bc"])
        >>> lengths.tolist(), section
        ([1, 2], b'a\\x00bc\\x00')
    """
    try:
        section, ends = encode_section(keys)
    except TypeError as error:
        raise TypeError(f"keys must be str: {error}") from None
    except UnicodeEncodeError as error:
        raise InvalidArgumentError(f"a key is not encodable as UTF-8: {error}") from None
    return section_lengths(ends), section


def section_ends(lengths: NDArray[np.integer]) -> _I64:
    """(n,) int64 one past each key's NUL, from the (n,) key ``lengths`` (NUL excluded)."""
    return np.cumsum(lengths.astype(np.int64) + 1)


# ------------------------------------------------------------------------------ checking, decoding


def check_section(
    section: _U8,
    lengths: NDArray[np.integer],
    *,
    max_bytes: int | None = MAX_KEY_BYTES,
    utf8: bool = True,
    utf8_slice: int = UTF8_SLICE,
) -> _I64:
    """Check that ``section`` ((B,) uint8) is the key section of keys of ``lengths`` ((n,),
    NUL excluded) and return its (n,) int64 ends.

    The checks, in this order: every length in 1..``max_bytes`` (``None``: no upper bound), the
    lengths adding up to B, a NUL after every key, and (with ``utf8``) valid UTF-8 -- without
    decoding when the section is ASCII, else :func:`first_utf8_error` in slices of about
    ``utf8_slice`` bytes. O(n + B); no str is made.

    Raises:
        KeySectionError: the first check that fails (its ``kind``); the messages are those
            :meth:`permindex.index.Index.from_compact` gives.
    """
    n = int(lengths.size)
    if n == 0:
        if section.size:
            raise KeySectionError("no key lengths but a non-empty key section", "size")
        return np.zeros(0, dtype=np.int64)
    if int(lengths.min()) < 1 or (max_bytes is not None and int(lengths.max()) > max_bytes):
        limit = MAX_KEY_BYTES if max_bytes is None else max_bytes
        raise KeySectionError(f"key lengths must be 1 to {limit} UTF-8 bytes", "length")
    ends = section_ends(lengths)
    if int(ends[-1]) != section.size:
        raise KeySectionError("the key section does not match the key lengths", "size")
    if not bool((section[ends - 1] == 0).all()):
        raise KeySectionError("the key section does not match the key lengths", "nul")
    if utf8 and int(section.max()) >= 0x80:  # not ASCII
        error = first_utf8_error(section.data, ends, utf8_slice)
        if error is not None:
            offset, reason = error
            raise KeySectionError(
                f"a key is not valid UTF-8 ({reason} at byte {offset})",
                "utf8",
                offset=offset,
                reason=reason,
            )
    return ends


def first_utf8_error(view: memoryview, ends: _I64, slice_bytes: int) -> tuple[int, str] | None:
    """Where a key section (``view``: every key's UTF-8 bytes then a NUL; ``ends``: (n,) int64,
    one past each key's NUL, n >= 1) is not valid UTF-8: (byte offset in the section, reason), or
    None. Decoded about ``slice_bytes`` at a time, each slice cut after a NUL (a character
    boundary), so that no str of the whole section is made. O(B)."""
    size = len(view)
    cuts = np.searchsorted(ends, np.arange(1, size // slice_bytes + 1) * slice_bytes)
    bounds = sorted({0, *ends[np.minimum(cuts, ends.size - 1)].tolist(), size})
    for lo, hi in itertools.pairwise(bounds):
        try:
            str(view[lo:hi], "utf-8")
        except UnicodeDecodeError as error:
            return lo + error.start, error.reason
    return None


def decode_section(data: bytes, lengths: NDArray[np.integer]) -> list[str]:
    """The n keys of the section ``data`` (well formed but for UTF-8), of (n,) ``lengths`` (NUL
    excluded): one decode and one split at the NULs, or one decode per key when a key itself
    contains NUL. O(n + B).

    Raises:
        KeySectionError: ``utf8``, the bytes are not valid UTF-8 (``offset`` in the section).
    """
    n = int(lengths.size)
    if n == 0:
        return []
    try:
        if data.count(0) == n:
            keys = data.decode("utf-8").split("\x00")
            keys.pop()  # the empty string after the last NUL
            return keys
    except UnicodeDecodeError as error:
        raise _utf8_error(error, 0) from None
    keys = []
    start = 0
    for length in lengths.tolist():
        try:
            keys.append(data[start : start + length].decode("utf-8"))
        except UnicodeDecodeError as error:
            raise _utf8_error(error, start) from None
        start += length + 1
    return keys


def _utf8_error(error: UnicodeDecodeError, start: int) -> KeySectionError:
    offset = start + error.start
    return KeySectionError(
        f"a key is not valid UTF-8 ({error.reason} at byte {offset})",
        "utf8",
        offset=offset,
        reason=error.reason,
    )


# ------------------------------------------------------------------------------ repeated keys


class BatchRepeats(NamedTuple):
    """Where the keys of a batch repeat (see :func:`batch_repeats`).

    Attributes:
        first: (n,) bool, True at the first occurrence of each key.
        last: (m,) int64, increasing: the position of each distinct key's last occurrence.
        which: (n,) intp: for each position, the index in ``last`` of its key.
    """

    first: NDArray[np.bool_]
    last: _I64
    which: NDArray[np.intp]


def batch_repeats(
    keys: Sequence[str], hashes: NDArray[np.uint64] | None = None
) -> BatchRepeats | None:
    """The rule for a key repeated in one batch, which applies in order: the last occurrence's
    value is the one stored (the batch stores ``keys[last]``); the first occurrence of a key that
    was not stored before the batch *adds* it and every later occurrence *replaces* it (a log
    op, a reply's status: ``new & first``); a removal removes a stored key at its first
    occurrence (``stored & first``).

    Args:
        keys: the n keys of the batch, in order.
        hashes: optional (n,) uint64 hashes of the keys; when they are all distinct no key
            repeats, which is decided without a dict over the keys.

    Returns:
        None when no key repeats (the common case), else the :class:`BatchRepeats`.
        O(n) expected (a dict over the keys), O(n log n) for the hash check.
    """
    n = len(keys)
    if n < 2:
        return None
    if hashes is not None:
        ordered = np.sort(hashes)
        if not bool((ordered[1:] == ordered[:-1]).any()):
            return None
    elif len(set(keys)) == n:
        return None
    last = dict(zip(keys, range(n), strict=True))
    if len(last) == n:
        return None
    positions = np.fromiter(last.values(), dtype=np.int64, count=len(last))
    positions.sort()
    rank = {p: j for j, p in enumerate(positions.tolist())}
    which = np.fromiter((rank[last[key]] for key in keys), np.intp, n)
    first = np.zeros(n, dtype=bool)
    first[np.unique(which, return_index=True)[1]] = True
    return BatchRepeats(first, positions, which)
