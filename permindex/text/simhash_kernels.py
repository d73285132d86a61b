"""The SimHash kernel behind :func:`permindex.text.fingerprint.simhash_many` (and
:func:`~permindex.text.fingerprint.simhash`): tokens, shingles, XXH3-64 and the votes of a batch
of lower-cased texts in one numba call, bit-exact with the algorithm of
:func:`~permindex.text.fingerprint.simhash` (Charikar 2002, section 3; Manku et al. 2007,
section 2). It is the one implementation of that algorithm in the package; the tests check it
against the definition written in plain Python (``tests/oracles.py``).

The batch travels as one UTF-8 buffer: each text is encoded, the encodings joined (and padded
by 8 zero bytes), with (n + 1,) byte offsets. Lower-casing is the kernel's too, as ``str.lower``
has it: ASCII letters directly, other characters through a table built from this Python's own
``str.lower`` (:func:`lower_table`); a text holding U+03A3 (whose lower case depends on the
context) or U+0130 (which lowers to two code points) is lower-cased by ``str.lower`` before.
Whitespace is the same before and after lower-casing (checked when the table is built). Per
text, in one pass over its bytes:

1. whitespace is recognised on the UTF-8 bytes exactly as ``str.split()`` has it: U+0009-U+000D,
   U+001C-U+0020, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000
   (continuation bytes, 0x80-0xBF, never start a character, so a byte-wise scan is safe); a
   word is scanned 8 bytes at a time, only bytes below 0x21 or above 0x7F checked one by one;
2. tokens are copied, lower-cased, into a scratch buffer, words separated by exactly one space
   (the word tokenizer) or characters with nothing between them (the character tokenizer), so
   that a shingle of ``shingle_size`` tokens is one contiguous slice of it: the bytes of
   ``" ".join(words)`` (or of ``"".join(chars)``);
3. each shingle is hashed (XXH3-64, :func:`permindex.text.xxh3_kernels.hash_at`) as soon as its
   last token ends: a ring of the last ``shingle_size`` token starts is all the state;
4. votes are counted eight bits at a time: byte k of counter word j counts bit 8k + j, spilled
   into 64 exact counters every 255 hashes; bit i is set where ``2 * ones[i] > shingles``. With
   the set vote (``vote="set"``) the text's hashes are kept, sorted, and each distinct one
   votes once.

Words are read 8 bytes at a time (:func:`permindex.text.xxh3_kernels.le64`, one unaligned load)
and copied to the scratch buffer the same way; the kernel passes its arrays to the inlined
helpers as views without an owner (:func:`permindex.jit_numba.unowned`), so that no helper call
touches a reference count.

O(total bytes) time (the set vote: plus sorting each text's hashes); memory: the encoded batch,
a scratch buffer of twice its longest text (the set vote: and 8 bytes a byte of it), and the
4.4 MB table once a non-ASCII text is seen. Import this module only where the kernel is needed:
it imports numba.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from permindex.jit_numba import njit, unowned
from permindex.text.xxh3_kernels import SECRET, hash_at, le64, store64

__all__ = [
    "KIND_CHARS",
    "KIND_WORDS",
    "LOWER",
    "lower_table",
    "shingle_hashes_of",
    "simhash_of",
]

#: Per-text tokenizer codes of :func:`simhash_of`.
KIND_WORDS: Final = 0
KIND_CHARS: Final = 1
#: Added to a kind: the kernel lower-cases the text itself (else it was lower-cased before).
LOWER: Final = 2

_ONES = np.uint64(0x0101010101010101)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_ADD5F = np.uint64(0x5F5F5F5F5F5F5F5F)  # (b & 0x7F) + 0x5F has bit 7 set iff b & 0x7F >= 0x21
_HIGH = np.uint64(0x8080808080808080)
_ADD3F = np.uint64(0x3F3F3F3F3F3F3F3F)  # (b & 0x7F) + 0x3F has bit 7 set iff b & 0x7F >= "A"
_ADD25 = np.uint64(0x2525252525252525)  # (b & 0x7F) + 0x25 has bit 7 set iff b & 0x7F > "Z"
_BYTE = np.uint64(0xFF)
_SPILL: Final = 255  # hashes per spill of the 8-bit counters
_PAD: Final = bytes(8)  # after the batch's bytes
_SLACK: Final = 16  # scratch bytes beyond the longest text
_BYTE_INDEX = np.uint64(0x0001020304050607)  # _first_byte
_NO_OUTPUT = np.empty(0, dtype=np.uint64)  # _batch votes
#: What _batch does with the shingle hashes: each votes, they are written out, each distinct
#: one votes once.
_VOTE: Final = 0
_EMIT: Final = 1
_VOTE_SET: Final = 2


@njit(inline=True)
def _space(b8: Any, i: int, end: int) -> int:
    """Bytes of the whitespace character starting at byte ``i`` of ``b8`` (``str.isspace``), 0
    if it is not one (or byte ``i`` is not a lead byte); ``end``: the end of the text."""
    c = b8[i]
    if c < 0x80:
        if (9 <= c <= 13) or (28 <= c <= 32):
            return 1
        return 0
    if c == 0xC2:
        if i + 1 < end:
            d = b8[i + 1]
            if d == 0x85 or d == 0xA0:
                return 2
        return 0
    if c < 0xE1 or c > 0xE3 or i + 2 >= end:
        return 0
    d = b8[i + 1]
    e = b8[i + 2]
    if c == 0xE1:
        return 3 if (d == 0x9A and e == 0x80) else 0
    if c == 0xE3:
        return 3 if (d == 0x80 and e == 0x80) else 0
    if d == 0x80:
        if (0x80 <= e <= 0x8A) or e == 0xA8 or e == 0xA9 or e == 0xAF:
            return 3
        return 0
    if d == 0x81 and e == 0x9F:
        return 3
    return 0


@njit(inline=True)
def _ascii_lower8(x: np.uint64) -> np.uint64:
    """``x`` with its bytes "A"-"Z" lower-cased, 8 bytes at a time (bytes >= 0x80 unchanged)."""
    h = x & _LOW7
    upper = (h + _ADD3F) & ~(h + _ADD25) & ~x & _HIGH
    return x | (upper >> np.uint64(2))


@njit(inline=True)
def _first_byte(special: np.uint64) -> int:
    """The index (0-7) of the lowest byte of ``special`` that has its bit 7 set, for a word
    whose only set bits are bits 7 of bytes (at least one): the lowest such bit, moved to bit
    0 of its byte (``1 << 8k``), times 0x0001020304050607 has k in its top byte."""
    lowest = special & (~special + np.uint64(1))
    return int(((lowest >> np.uint64(7)) * _BYTE_INDEX) >> np.uint64(56))


@njit(inline=True)
def _lower_char(b8: Any, j: int, s8: Any, w: int, table: Any) -> tuple[int, int]:
    """Decode the non-ASCII UTF-8 character at byte ``j`` of ``b8``, lower-case it with
    ``table`` (:func:`lower_table`) and write its UTF-8 at byte ``w`` of ``s8``. Returns
    ``(j, w)`` after it."""
    c = np.int64(b8[j])
    if c < 0xE0:
        cp = ((c & 0x1F) << 6) | (np.int64(b8[j + 1]) & 0x3F)
        j += 2
    elif c < 0xF0:
        cp = ((c & 0x0F) << 12) | ((np.int64(b8[j + 1]) & 0x3F) << 6) | (np.int64(b8[j + 2]) & 0x3F)
        j += 3
    else:
        cp = (
            ((c & 0x07) << 18)
            | ((np.int64(b8[j + 1]) & 0x3F) << 12)
            | ((np.int64(b8[j + 2]) & 0x3F) << 6)
            | (np.int64(b8[j + 3]) & 0x3F)
        )
        j += 4
    low = np.int64(table[cp])
    if low < 0x80:
        s8[w] = low
        return j, w + 1
    if low < 0x800:
        s8[w] = 0xC0 | (low >> 6)
        s8[w + 1] = 0x80 | (low & 0x3F)
        return j, w + 2
    if low < 0x10000:
        s8[w] = 0xE0 | (low >> 12)
        s8[w + 1] = 0x80 | ((low >> 6) & 0x3F)
        s8[w + 2] = 0x80 | (low & 0x3F)
        return j, w + 3
    s8[w] = 0xF0 | (low >> 18)
    s8[w + 1] = 0x80 | ((low >> 12) & 0x3F)
    s8[w + 2] = 0x80 | ((low >> 6) & 0x3F)
    s8[w + 3] = 0x80 | (low & 0x3F)
    return j, w + 4


@njit(inline=True)
def _next_token(
    b8: Any, i: int, end: int, s8: Any, w: int, chars: bool, lower: bool, table: Any
) -> tuple[int, int, int]:
    """The next token of the text bytes ``b8[i:end]``, copied to the scratch bytes ``s8`` from
    byte ``w`` (words: after one space when ``w > 0``), lower-cased on the way when ``lower``
    (ASCII directly, other characters with ``table``). Returns ``(i, start, w)``: the position
    after the token, its offset in the scratch buffer (-1 when there is no token left) and the
    new end of the scratch buffer."""
    c = 0
    while i < end:
        c = np.int64(b8[i])
        if c > 0x20 and c < 0x80:
            break
        if c == 0x20 or c == 0x0A:
            i += 1
            continue
        step = _space(b8, i, end)
        if step == 0:
            break
        i += step
    if i >= end:
        return i, -1, w
    if chars:
        start = w
        if lower:
            if c < 0x80:
                s8[w] = c + 32 if 0x41 <= c <= 0x5A else c
                return i + 1, start, w + 1
            i, w = _lower_char(b8, i, s8, w, table)
            return i, start, w
        s8[w] = c
        w += 1
        i += 1
        while i < end:
            c = np.int64(b8[i])
            if (c & 0xC0) != 0x80:
                break
            s8[w] = c
            w += 1
            i += 1
        return i, start, w
    if w > 0:
        s8[w] = 32
        w += 1
    first = i
    ascii_ = c < 0x80
    i += 1
    # The end of the word, 8 bytes at a time: a byte below 0x21 or above 0x7F is "special"
    # (may be whitespace; checked one by one), the others are word bytes for sure.
    while i < end:
        x = le64(b8, i)  # may read past the text: the next text or the padding
        special = (~((x & _LOW7) + _ADD5F) | x) & _HIGH
        if special == 0:
            i += 8
            continue
        j = i + _first_byte(special)
        if j >= end:
            i = end
            break
        if _space(b8, j, end) > 0:
            i = j
            break
        if b8[j] >= 0x80:
            ascii_ = False
        i = j + 1
    if i > end:
        i = end
    # Copy the word 8 bytes at a time: up to 7 bytes are read past it (the buffer is padded)
    # and written past it (the scratch buffer has room; the next token overwrites them).
    if not lower:
        for q in range(0, i - first, 8):
            store64(s8, w + q, le64(b8, first + q))
        return i, w, w + i - first
    if ascii_:
        for q in range(0, i - first, 8):
            store64(s8, w + q, _ascii_lower8(le64(b8, first + q)))
        return i, w, w + i - first
    start = w
    j = first
    while j < i:
        c = np.int64(b8[j])
        if c < 0x80:
            s8[w] = c + 32 if 0x41 <= c <= 0x5A else c
            j += 1
            w += 1
        else:
            j, w = _lower_char(b8, j, s8, w, table)
    return i, start, w


@njit()
def _spill(
    ones: NDArray[np.int64],
    p0: np.uint64,
    p1: np.uint64,
    p2: np.uint64,
    p3: np.uint64,
    p4: np.uint64,
    p5: np.uint64,
    p6: np.uint64,
    p7: np.uint64,
) -> None:
    """Add the eight packed 8-bit counter words to the 64 exact counters: byte k of word j
    counts bit 8k + j."""
    for k in range(8):
        shift = np.uint64(8 * k)
        ones[8 * k] += np.int64((p0 >> shift) & _BYTE)
        ones[8 * k + 1] += np.int64((p1 >> shift) & _BYTE)
        ones[8 * k + 2] += np.int64((p2 >> shift) & _BYTE)
        ones[8 * k + 3] += np.int64((p3 >> shift) & _BYTE)
        ones[8 * k + 4] += np.int64((p4 >> shift) & _BYTE)
        ones[8 * k + 5] += np.int64((p5 >> shift) & _BYTE)
        ones[8 * k + 6] += np.int64((p6 >> shift) & _BYTE)
        ones[8 * k + 7] += np.int64((p7 >> shift) & _BYTE)


@njit(inline=True)
def _tally(
    h: np.uint64,
    p0: np.uint64,
    p1: np.uint64,
    p2: np.uint64,
    p3: np.uint64,
    p4: np.uint64,
    p5: np.uint64,
    p6: np.uint64,
    p7: np.uint64,
) -> tuple[np.uint64, ...]:
    """The packed 8-bit counters with the bits of ``h`` added: bit 8k + j to byte k of word
    j."""
    return (
        p0 + (h & _ONES),
        p1 + ((h >> np.uint64(1)) & _ONES),
        p2 + ((h >> np.uint64(2)) & _ONES),
        p3 + ((h >> np.uint64(3)) & _ONES),
        p4 + ((h >> np.uint64(4)) & _ONES),
        p5 + ((h >> np.uint64(5)) & _ONES),
        p6 + ((h >> np.uint64(6)) & _ONES),
        p7 + ((h >> np.uint64(7)) & _ONES),
    )


@njit()
def _batch(
    buf: NDArray[np.uint8],
    offsets: NDArray[np.int64],
    kinds: NDArray[np.uint8],
    shingle_size: int,
    min_words: int,
    mode: int,
    scratch: NDArray[np.uint8],
    out: NDArray[np.uint64],
    secret: NDArray[np.uint8],
    table: NDArray[np.uint32],
) -> tuple[NDArray[np.uint64], NDArray[np.bool_], int]:
    """The kernel: fingerprints and validity of the texts ``buf[offsets[t] : offsets[t + 1]]``
    (``buf`` ends with 8 bytes of padding). ``kinds[t]``: :data:`KIND_CHARS` or not, plus
    :data:`LOWER` where the kernel lower-cases the text (with ``table`` for non-ASCII
    characters). ``scratch`` holds at least twice the longest text's bytes plus :data:`_SLACK`
    (a lower-cased character may take 3 bytes where it took 2). ``secret``:
    :data:`~permindex.text.xxh3_kernels.SECRET`. ``mode``: :data:`_VOTE` (each shingle votes),
    :data:`_EMIT` (the shingle hashes are written to ``out`` in order instead, room for all of
    them, at most one per byte, and their number is returned third) or :data:`_VOTE_SET` (each
    distinct shingle hash votes once; ``out`` has room for one hash per byte of the longest
    text)."""
    n = offsets.size - 1
    ring = np.zeros(shingle_size, dtype=np.int64)
    ones = np.zeros(64, dtype=np.int64)
    fingerprints = np.zeros(n, dtype=np.uint64)
    valid = np.zeros(n, dtype=np.bool_)
    # Views without owners for the helpers (each array passed to one costs an increment and a
    # decrement of its reference count otherwise: see permindex.jit_numba.unowned).
    buf = unowned(buf)
    scratch = unowned(scratch)
    secret = unowned(secret)
    table = unowned(table)
    ring = unowned(ring)
    ones = unowned(ones)
    out = unowned(out)
    s = shingle_size
    emitted = 0
    for t in range(n):
        end = offsets[t + 1]
        chars = (kinds[t] & KIND_CHARS) != 0
        lower = (kinds[t] & LOWER) != 0
        i = offsets[t]
        w = 0  # bytes written to scratch
        tokens = 0
        head = 0  # ring slot of the next token: tokens % shingle_size
        pending = 0  # hashes in the packed 8-bit counters
        voted = 0
        kept = 0  # _VOTE_SET: hashes of this text in out
        p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = np.uint64(0)
        ones[:] = 0
        while True:
            i, first, w = _next_token(buf, i, end, scratch, w, chars, lower, table)
            if first < 0:
                break
            ring[head] = first
            tokens += 1
            head += 1
            if head == s:
                head = 0
            if tokens < s:
                continue
            first = ring[head]  # the start of the token shingle_size - 1 tokens back
            h = hash_at(scratch, first, w - first, secret)
            if mode == _EMIT:
                out[emitted] = h
                emitted += 1
                continue
            if mode == _VOTE_SET:
                out[kept] = h
                kept += 1
                continue
            p0, p1, p2, p3, p4, p5, p6, p7 = _tally(h, p0, p1, p2, p3, p4, p5, p6, p7)
            voted += 1
            pending += 1
            if pending == _SPILL:
                _spill(ones, p0, p1, p2, p3, p4, p5, p6, p7)
                p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = np.uint64(0)
                pending = 0
        if tokens < s or tokens < min_words or mode == _EMIT:
            continue
        if mode == _VOTE_SET:
            distinct = out[:kept]
            distinct.sort()
            for r in range(kept):
                h = distinct[r]
                if r > 0 and h == distinct[r - 1]:
                    continue
                p0, p1, p2, p3, p4, p5, p6, p7 = _tally(h, p0, p1, p2, p3, p4, p5, p6, p7)
                voted += 1
                pending += 1
                if pending == _SPILL:
                    _spill(ones, p0, p1, p2, p3, p4, p5, p6, p7)
                    p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = np.uint64(0)
                    pending = 0
        _spill(ones, p0, p1, p2, p3, p4, p5, p6, p7)
        fp = np.uint64(0)
        for b in range(64):
            if 2 * ones[b] > voted:
                fp |= np.uint64(1) << np.uint64(b)
        fingerprints[t] = fp
        valid[t] = True
    return fingerprints, valid, emitted


@functools.cache
def lower_table() -> NDArray[np.uint32] | None:
    """(0x110000,) uint32: ``ord(chr(c).lower())`` for every code point c, as this Python's
    ``str.lower`` has it (built from it once per process, O(0x110000)), so that the kernel
    lower-cases characters exactly as Python does. Two characters are left out (mapped to
    themselves) and their texts are lower-cased by Python instead: U+03A3 (its lower case
    depends on the context: the final sigma) and U+0130 (it lowers to two code points). None,
    and every non-ASCII text is lower-cased by Python, if any other character lowers to more
    or fewer than one code point, or lower-casing changes whether a character is whitespace
    (neither happens in Unicode 15)."""
    codes = np.arange(0x110000, dtype="<u4")
    codes[[0x3A3, 0x130]] = 0
    every = codes.tobytes().decode("utf-32-le", "surrogatepass")
    low = every.lower()
    if len(low) != len(every):
        return None
    table = np.frombuffer(low.encode("utf-32-le", "surrogatepass"), dtype=np.uint32).copy()
    table[0x3A3] = 0x3A3
    table[0x130] = 0x130
    space = np.zeros(0x110000, dtype=bool)
    space[[ord(c) for c in _WHITESPACE]] = True
    if (space != space[table]).any():
        return None
    table.setflags(write=False)
    return table


#: The characters of str.isspace(), as _space recognises them.
_WHITESPACE: Final = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680"
    + "".join(map(chr, range(0x2000, 0x200B)))
    + "\u2028\u2029\u202f\u205f\u3000"
)
_NO_TABLE = np.zeros(1, dtype=np.uint32)  # the kernel's table argument when no text needs it
_NO_TABLE.setflags(write=False)  # read-only as lower_table(): one compiled signature


def _prepare(
    texts: list[str], kinds: NDArray[np.uint8]
) -> tuple[list[str], NDArray[np.uint8], NDArray[np.uint32]]:
    """Who lower-cases each text: the kernel (ASCII texts; others without U+03A3 or U+0130,
    with :func:`lower_table`) or ``str.lower`` here. Returns the texts as the kernel gets
    them, their kinds with :data:`LOWER` where the kernel lower-cases, and the table."""
    ready: list[str] = []
    flags = kinds.copy()
    table: NDArray[np.uint32] | None = _NO_TABLE
    for i, text in enumerate(texts):
        if text.isascii():
            ready.append(text)
            flags[i] |= LOWER
            continue
        if table is _NO_TABLE:
            table = lower_table()
        if table is not None and "\u03a3" not in text and "\u0130" not in text:
            ready.append(text)
            flags[i] |= LOWER
        else:
            ready.append(text.lower())
    return ready, flags, _NO_TABLE if table is None else table


def simhash_of(
    texts: list[str],
    kinds: NDArray[np.uint8],
    shingle_size: int,
    min_words: int,
    distinct: bool = False,
) -> tuple[NDArray[np.uint64], NDArray[np.bool_]]:
    """SimHash (64 bits) of each text of ``texts`` (lower-cased as ``str.lower`` does, in the
    kernel or before it): ``kinds[i]`` is :data:`KIND_WORDS` or :data:`KIND_CHARS`; options
    already checked; ``distinct``: each distinct shingle votes once (``vote="set"``), else
    each occurrence. Returns ``(fingerprints (n,) uint64, valid (n,) bool)``: valid where the
    text has at least ``shingle_size`` and ``min_words`` tokens, its fingerprint 0 otherwise.

    Raises:
        UnicodeEncodeError: a text holds a lone surrogate (see
            :func:`permindex.text.fingerprint.simhash_many` for what the caller makes of it).
    """
    ready, flags, table = _prepare(texts, kinds)
    buf, offsets, scratch = _encode(ready)
    out = _NO_OUTPUT
    if distinct:  # room for the hashes of the longest text: at most one per byte
        out = np.empty(max(1, int(np.diff(offsets).max(initial=0))), dtype=np.uint64)
    mode = _VOTE_SET if distinct else _VOTE
    fingerprints, valid, _ = _call(
        buf, offsets, flags, shingle_size, min_words, mode, scratch, out, table
    )
    return fingerprints, valid


def shingle_hashes_of(text: str, kind: int, shingle_size: int) -> NDArray[np.uint64]:
    """(m,) uint64: XXH3-64 of each shingle of one text (lower-cased as ``str.lower`` does),
    in order (``kind``: :data:`KIND_WORDS` or :data:`KIND_CHARS`). Raises UnicodeEncodeError
    on a lone surrogate."""
    ready, flags, table = _prepare([text], np.full(1, kind, dtype=np.uint8))
    buf, offsets, scratch = _encode(ready)
    out = np.empty(max(1, int(offsets[1])), dtype=np.uint64)  # at most one shingle per byte
    _, _, count = _call(buf, offsets, flags, shingle_size, 0, _EMIT, scratch, out, table)
    return out[:count].copy() if count < out.size // 2 else out[:count]


def _call(
    buf: NDArray[np.uint8],
    offsets: NDArray[np.int64],
    flags: NDArray[np.uint8],
    shingle_size: int,
    min_words: int,
    mode: int,
    scratch: NDArray[np.uint8],
    out: NDArray[np.uint64],
    table: NDArray[np.uint32],
) -> tuple[NDArray[np.uint64], NDArray[np.bool_], int]:
    """:func:`_batch` with the secret."""
    return _batch(  # type: ignore[no-any-return]
        buf, offsets, flags, shingle_size, min_words, mode, scratch, out, SECRET, table
    )


def _encode(texts: list[str]) -> tuple[NDArray[np.uint8], NDArray[np.int64], NDArray[np.uint8]]:
    """The kernel's inputs for ``texts``: the joined UTF-8 bytes (padded), the (n + 1,) byte
    offsets, and a scratch buffer for the longest text."""
    encoded = [text.encode("utf-8") for text in texts]
    lengths = list(map(len, encoded))
    offsets = np.array([0, *itertools.accumulate(lengths)], dtype=np.int64)
    encoded.append(_PAD)  # words are copied 8 bytes at a time: reads may pass the last text
    buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    return buf, offsets, np.empty(2 * max(lengths, default=0) + _SLACK, dtype=np.uint8)
