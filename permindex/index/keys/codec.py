"""The key codec: each key's UTF-8 bytes as a short canonical code, so that the key store holds
keys close to their information, whatever order they come in, and decodes only the keys it
returns.

A key is coded on its own (no block to decode for one key), left to right:

* at each segment start -- the key's start, or just after a delimiter (``/ ? & = #``) -- the
  segment up to and including the next delimiter (or the key's end) is looked up in the store's
  *dictionary* (:class:`Dictionary`, at most 16,384 segments of 3 bytes or more, 256 KiB in
  all, trained once from the keys stored first: the hosts and path segments a crawl repeats);
  when found it is written as a 2-byte token ``0x80 | id >> 8, id & 0xFF``;
* otherwise each piece of the segment (up to and including a minor delimiter ``- . _``, or the
  segment's end) is looked up the same way, and written as a token when found;
* otherwise the piece's bytes are written as: a run of 3 to 19 ASCII digits as one code byte
  ``0xC0 + (length - 3)`` and the run's value in the fewest little-endian bytes any run of that
  length needs (8 digits: 4 bytes, 19 digits: 8 bytes; a longer run is cut into runs of 19, a
  tail of 1 or 2 digits stays literal) -- so a decimal integer key takes at most its uint64's 8
  bytes and one code byte; a run of 1 to 16 bytes >= 0x80 (non-ASCII UTF-8) as
  ``0xE0 + (count - 1)`` and the bytes; any other byte (ASCII, NUL included) as itself.

The code is a function of the key and the dictionary, and decoding inverts it, so two keys are
equal exactly when their codes are: the store compares and hashes codes, never UTF-8. A code is
at most ``len(utf8) + (len(utf8) + 1) // 3`` bytes (each run of non-ASCII bytes, 2 or more in
valid UTF-8, adds a byte: ``é`` between ASCII bytes takes 3 bytes for 2; :func:`code_bound`),
and usually much shorter:
``k00000001`` takes 6 bytes, ``12345678`` 5, a 75-byte crawl URL about 15 with a trained
dictionary.

Kernels (compiled, :mod:`permindex.jit`): :func:`encode_section` (a batch's key section to codes
and their hashes), :func:`decode_codes` (codes back to a key section), :func:`code_hash`.
The store's layout over the codes is :mod:`permindex.index.keys.rows`'.
"""

from __future__ import annotations

import collections
import itertools
import re
from collections.abc import Iterable, Sequence
from typing import Any, Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.jit_numba import njit
from permindex.jit_numba import unowned as _unowned_intrinsic

#: :func:`permindex.jit_numba.unowned`, typed for the checker (the same intrinsic).
unowned: Any = _unowned_intrinsic

__all__ = [
    "DELIMITERS",
    "MAX_DICTIONARY_BYTES",
    "MAX_TOKENS",
    "Dictionary",
    "code_bound",
    "code_hash",
    "decode_codes",
    "encode_section",
    "train_dictionary",
]

#: Bytes that end a segment (a dictionary entry ends with one, or at the key's end).
DELIMITERS: Final = b"/?&=#"
#: Most segments a dictionary holds (2-byte tokens 0x80..0xBF, 0x00..0xFF).
MAX_TOKENS: Final = 1 << 14
#: Most bytes of a dictionary's segments.
MAX_DICTIONARY_BYTES: Final = 1 << 18
#: Shortest segment a dictionary holds (a token takes 2 bytes).
_MIN_TOKEN_BYTES: Final = 3

_U8 = NDArray[np.uint8]
_I64 = NDArray[np.int64]
_I32 = NDArray[np.int32]
_U64 = NDArray[np.uint64]

#: Bytes the value of a digit run of each length (0..19) takes: ceil(length * log2(10) / 8).
_RUN_BYTES = np.array([0, 1, 1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 5, 6, 6, 7, 7, 8, 8, 8], dtype=np.int64)
_PRIME1 = np.uint64(0x9E3779B185EBCA87)
_PRIME2 = np.uint64(0xC2B2AE3D27D4EB4F)
_PRIME3 = np.uint64(0x165667B19E3779F9)


class Dictionary(NamedTuple):
    """The segments a store codes as tokens (:func:`train_dictionary`), and their lookup table.

    Attributes:
        data: (b,) uint8, every segment's bytes in token order.
        offsets: (t + 1,) int64; token i is ``data[offsets[i]:offsets[i + 1]]``.
        slots: (2^s,) int32 open-addressing table of token ids by :func:`code_hash` of their
            bytes (-1: empty), at most half full (size 1 and -1 when empty).
    """

    data: _U8
    offsets: _I64
    slots: _I32

    @property
    def size(self) -> int:
        """Tokens in the dictionary."""
        return int(self.offsets.size - 1)

    @property
    def nbytes(self) -> int:
        """Bytes of the three arrays."""
        return int(self.data.nbytes + self.offsets.nbytes + self.slots.nbytes)

    @classmethod
    def empty(cls) -> Dictionary:
        """The dictionary without segments: keys coded by runs and literals only."""
        return cls.of_segments([])

    @classmethod
    def of_segments(cls, segments: Iterable[bytes]) -> Dictionary:
        """The dictionary of ``segments`` (distinct, each 3 or more bytes, at most
        :data:`MAX_TOKENS`; token ids in the given order). O(bytes).

        Raises:
            ValueError: too many segments, a short or repeated one, or one with a delimiter
                before its last byte (it could never be looked up).
        """
        parts = list(segments)
        if len(parts) > MAX_TOKENS or len(set(parts)) != len(parts):
            raise ValueError("a dictionary holds at most 16384 distinct segments")
        for part in parts:
            if len(part) < _MIN_TOKEN_BYTES or any(d in DELIMITERS for d in part[:-1]):
                raise ValueError(f"{part!r} is not a dictionary segment")
        data = np.frombuffer(b"".join(parts), dtype=np.uint8).copy()
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        size = 1
        while size < 2 * len(parts):
            size *= 2
        slots = np.full(size, -1, dtype=np.int32)
        _fill_token_slots(data, offsets, slots)
        return cls(data, offsets, slots)

    def segments(self) -> list[bytes]:
        """The segments, in token order."""
        raw = self.data.tobytes()
        bounds = self.offsets.tolist()
        return [raw[a:b] for a, b in itertools.pairwise(bounds)]


#: A segment: bytes up to and including a delimiter, or the bytes after the last one.
_SEGMENT = re.compile(rb"[^/?&=#\x00]*[/?&=#]|[^/?&=#\x00]+")
#: A piece of a segment: bytes up to and including a minor delimiter (``- . _``) or the
#: segment's end.
_PIECE = re.compile(rb"[^/?&=#\-._\x00]*[\-._]|[^/?&=#\-._\x00]*[/?&=#]|[^/?&=#\-._\x00]+")


def train_dictionary(keys: Sequence[bytes], limit: int = MAX_TOKENS) -> Dictionary:
    """A dictionary for keys like ``keys`` (UTF-8 bytes without NUL, a sample of the store's;
    a key holding NUL is cut there, which only makes the sample worse): the segments (cut after
    each delimiter) and their pieces (cut after each minor delimiter) seen at least twice, of 3
    bytes or more, the ``limit`` that save the most bytes (occurrences x (length - 2), less the
    segment's own bytes and 18 for its length and slots) first, if they save any. Two
    regular-expression passes over the joined sample and counts (C loops), then a sort of the
    repeated segments; an empty dictionary when nothing repeats.

    >>> words = train_dictionary([b"https://a.org/x/%d" % i for i in range(10)])
    >>> sorted(words.segments())
    [b'a.org/', b'https:/']
    """
    joined = b"\x00".join(keys)
    counts = collections.Counter(_SEGMENT.findall(joined))
    pieces = collections.Counter(_PIECE.findall(joined))
    for segment, count in counts.items():
        if segment.translate(None, b"-._") == segment:  # its one piece is itself: once
            pieces[segment] -= count
    counts.update(pieces)
    # A token saves len - 2 bytes an occurrence and costs its bytes, a length and a slot.
    ranked = sorted(
        (
            ((len(s) - 2) * c - (len(s) + 18), s)
            for s, c in counts.items()
            if c >= 2 and len(s) >= _MIN_TOKEN_BYTES
        ),
        reverse=True,
    )
    ranked = [(saving, s) for saving, s in ranked if saving > 0]
    chosen: list[bytes] = []
    room = MAX_DICTIONARY_BYTES
    for _, segment in ranked[: min(limit, MAX_TOKENS)]:
        if len(segment) <= room:
            chosen.append(segment)
            room -= len(segment)
    return Dictionary.of_segments(chosen)


# ------------------------------------------------------------------------------------ kernels


@njit(inline=True)
def _mix(h: np.uint64) -> np.uint64:
    h ^= h >> np.uint64(33)
    h *= _PRIME2
    h ^= h >> np.uint64(29)
    h *= _PRIME3
    h ^= h >> np.uint64(32)
    return h


@njit(inline=True)
def _hash_bytes(data: _U8, start: int, size: int) -> np.uint64:
    """A 64-bit hash of ``data[start:start + size]``: 8-byte words multiplied in, then mixed."""
    h = np.uint64(size) * _PRIME1
    i = 0
    while i + 8 <= size:
        w = np.uint64(0)
        for b in range(8):
            w |= np.uint64(data[start + i + b]) << np.uint64(8 * b)
        h = (h ^ _mix(w)) * _PRIME1
        i += 8
    if i < size:
        w = np.uint64(0)
        for b in range(size - i):
            w |= np.uint64(data[start + i + b]) << np.uint64(8 * b)
        h = (h ^ _mix(w ^ np.uint64(0xFF))) * _PRIME1
    return _mix(h)


@njit()
def code_hash(data: _U8, start: int, size: int) -> np.uint64:
    """The store's hash of the code ``data[start:start + size]`` (uint8): the key -> row map is
    addressed by it. O(size)."""
    return _hash_bytes(data, start, size)


@njit()
def _fill_token_slots(data: _U8, offsets: _I64, slots: _I32) -> None:
    mask = slots.size - 1
    for t in range(offsets.size - 1):
        i = np.int64(_hash_bytes(data, offsets[t], offsets[t + 1] - offsets[t]) & np.uint64(mask))
        while slots[i] >= 0:
            i = (i + 1) & mask
        slots[i] = t


@njit(inline=True)
def _find_token(
    key: _U8, start: int, size: int, dict_data: _U8, dict_offsets: _I64, dict_slots: _I32
) -> Any:
    mask = dict_slots.size - 1
    i = np.int64(_hash_bytes(key, start, size) & np.uint64(mask))
    while True:
        t = dict_slots[i]
        if t < 0:
            return -1
        a = dict_offsets[t]
        if dict_offsets[t + 1] - a == size:
            same = True
            for b in range(size):
                if dict_data[a + b] != key[start + b]:
                    same = False
                    break
            if same:
                return t
        i = (i + 1) & mask


@njit(inline=True)
def _is_delimiter(byte: np.uint8) -> Any:
    return byte == 47 or byte == 63 or byte == 38 or byte == 61 or byte == 35  # / ? & = #


@njit(inline=True)
def _is_minor(byte: np.uint8) -> Any:
    return byte == 45 or byte == 46 or byte == 95  # - . _


@njit(inline=True)
def _encode_plain(key: _U8, start: int, end: int, out: _U8, at: int) -> int:
    """Code ``key[start:end]`` without the dictionary into ``out`` from ``at``; the new end."""
    i = start
    while i < end:
        byte = key[i]
        if 48 <= byte <= 57:
            j = i
            while j < end and 48 <= key[j] <= 57:
                j += 1
            while j - i >= 3:
                length = min(19, j - i)
                value = np.uint64(0)
                for d in range(i, i + length):
                    value = value * np.uint64(10) + np.uint64(key[d] - 48)
                out[at] = 0xC0 + length - 3
                at += 1
                for b in range(_RUN_BYTES[length]):
                    out[at] = np.uint8((value >> np.uint64(8 * b)) & np.uint64(0xFF))
                    at += 1
                i += length
            while i < j:
                out[at] = key[i]
                at += 1
                i += 1
        elif byte >= 0x80:
            j = i
            while j < end and j - i < 16 and key[j] >= 0x80:
                j += 1
            out[at] = 0xE0 + (j - i - 1)
            at += 1
            for b in range(i, j):
                out[at] = key[b]
                at += 1
            i = j
        else:
            out[at] = byte
            at += 1
            i += 1
    return at


@njit(inline=True)
def _encode_key(
    key: _U8,
    start: int,
    end: int,
    out: _U8,
    at: int,
    dict_data: _U8,
    dict_offsets: _I64,
    dict_slots: _I32,
) -> int:
    """Code the key ``key[start:end]`` into ``out`` from ``at``; the new end."""
    if dict_offsets.size <= 1:
        return _encode_plain(key, start, end, out, at)
    i = start
    while i < end:
        j = i
        while j < end and not _is_delimiter(key[j]):
            j += 1
        stop = j + 1 if j < end else end
        t = -1
        if stop - i >= 3:
            t = _find_token(key, i, stop - i, dict_data, dict_offsets, dict_slots)
        if t >= 0:
            out[at] = 0x80 | (t >> 8)
            out[at + 1] = t & 0xFF
            at += 2
            i = stop
            continue
        first = i
        while i < stop:  # the segment's pieces, each ended by a minor delimiter
            j = i
            while j < stop - 1 and not _is_minor(key[j]):
                j += 1
            piece = j + 1
            t = -1
            if piece - i >= 3 and (i > first or piece < stop):  # not the segment again
                t = _find_token(key, i, piece - i, dict_data, dict_offsets, dict_slots)
            if t >= 0:
                out[at] = 0x80 | (t >> 8)
                out[at + 1] = t & 0xFF
                at += 2
            else:
                at = _encode_plain(key, i, piece, out, at)
            i = piece
    return at


def code_bound(section_bytes: int) -> int:
    """The most code bytes the keys of a key section of ``section_bytes`` bytes (each key's
    bytes and its NUL) take, whatever the bytes: a run of non-ASCII bytes takes a code byte more,
    and a run ends at an ASCII byte or the NUL unless it is 16 bytes long, so a key of u bytes
    takes at most u + (u + 1) // 2 (u + (u + 1) // 3 in valid UTF-8, where a run has 2 bytes or
    more). O(1).

    >>> from permindex.index.keys.codec import code_bound
    >>> code_bound(1000)
    1500
    """
    return section_bytes + section_bytes // 2


def encode_section(
    section: _U8,
    ends: _I64,
    dict_data: _U8,
    dict_offsets: _I64,
    dict_slots: _I32,
) -> tuple[_U8, _I64, _U64]:
    """Code the n keys of a key section (``section`` (B,) uint8, each key's UTF-8 bytes then a
    NUL; ``ends`` (n,) int64 one past each NUL) with the dictionary's arrays: (codes
    concatenated (c,) uint8, (n,) int64 code lengths, (n,) uint64 :func:`code_hash` of each).
    O(B), in the compiled :func:`_encode_into`."""
    n = int(ends.size)
    room = code_bound(int(ends[-1])) if n else 0
    out = np.empty(room, dtype=np.uint8)
    sizes = np.empty(n, dtype=np.int64)
    hashes = np.empty(n, dtype=np.uint64)
    used = _encode_into(section, ends, dict_data, dict_offsets, dict_slots, out, sizes, hashes)
    return out[:used].copy(), sizes, hashes


@njit()
def _encode_into(
    section: _U8,
    ends: _I64,
    dict_data: _U8,
    dict_offsets: _I64,
    dict_slots: _I32,
    out: _U8,
    sizes: _I64,
    hashes: _U64,
) -> int:
    """:func:`encode_section` into the caller's ``out`` (room for the codes), ``sizes`` and
    ``hashes``; the code bytes written."""
    # Views without an owner: no reference counted per helper call (the caller keeps them).
    section, ends, out = unowned(section), unowned(ends), unowned(out)
    sizes, hashes = unowned(sizes), unowned(hashes)
    dict_data, dict_offsets, dict_slots = (
        unowned(dict_data),
        unowned(dict_offsets),
        unowned(dict_slots),
    )
    at = 0
    start = 0
    for k in range(ends.size):
        end = ends[k] - 1
        first = at
        at = _encode_key(section, start, end, out, at, dict_data, dict_offsets, dict_slots)
        sizes[k] = at - first
        hashes[k] = _hash_bytes(out, first, at - first)
        start = ends[k]
    return at


@njit(inline=True)
def _decode_key(
    code: _U8, start: int, size: int, out: _U8, at: int, dict_data: _U8, dict_offsets: _I64
) -> int:
    """Decode ``code[start:start + size]`` into ``out`` from ``at``; the new end."""
    i = start
    end = start + size
    while i < end:
        byte = code[i]
        if byte < 0x80:
            out[at] = byte
            at += 1
            i += 1
        elif byte < 0xC0:
            t = (int(byte & 0x3F) << 8) | int(code[i + 1])
            for b in range(dict_offsets[t], dict_offsets[t + 1]):
                out[at] = dict_data[b]
                at += 1
            i += 2
        elif byte < 0xE0:
            length = int(byte) - 0xC0 + 3
            value = np.uint64(0)
            for b in range(_RUN_BYTES[length]):
                value |= np.uint64(code[i + 1 + b]) << np.uint64(8 * b)
            for d in range(length - 1, -1, -1):
                out[at + d] = np.uint8(48 + value % np.uint64(10))
                value //= np.uint64(10)
            at += length
            i += 1 + _RUN_BYTES[length]
        else:
            count = int(byte) - 0xE0 + 1
            for b in range(count):
                out[at + b] = code[i + 1 + b]
            at += count
            i += 1 + count
    return at


@njit(inline=True)
def _decoded_size(code: _U8, start: int, size: int, dict_offsets: _I64) -> int:
    """UTF-8 bytes of the key coded as ``code[start:start + size]``."""
    i = start
    end = start + size
    total = 0
    while i < end:
        byte = code[i]
        if byte < 0x80:
            total += 1
            i += 1
        elif byte < 0xC0:
            t = (int(byte & 0x3F) << 8) | int(code[i + 1])
            total += dict_offsets[t + 1] - dict_offsets[t]
            i += 2
        elif byte < 0xE0:
            length = int(byte) - 0xC0 + 3
            total += length
            i += 1 + _RUN_BYTES[length]
        else:
            count = int(byte) - 0xE0 + 1
            total += count
            i += 1 + count
    return total


@njit()
def decode_codes(
    codes: _U8, starts: _I64, sizes: _I64, dict_data: _U8, dict_offsets: _I64
) -> tuple[_U8, _I64]:
    """Decode the m codes ``codes[starts[i]:starts[i] + sizes[i]]`` ((m,) int64 each): their
    key section ((B,) uint8, each key's UTF-8 bytes then a NUL) and (m,) int64 UTF-8 lengths.
    O(m + B)."""
    codes, starts, sizes = unowned(codes), unowned(starts), unowned(sizes)
    dict_data, dict_offsets = unowned(dict_data), unowned(dict_offsets)
    m = starts.size
    lengths = np.empty(m, dtype=np.int64)
    total = 0
    for i in range(m):
        lengths[i] = _decoded_size(codes, starts[i], sizes[i], dict_offsets)
        total += lengths[i] + 1
    out = np.empty(total, dtype=np.uint8)
    at = 0
    for i in range(m):
        at = _decode_key(codes, starts[i], sizes[i], out, at, dict_data, dict_offsets)
        out[at] = 0
        at += 1
    return out, lengths
