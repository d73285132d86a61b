"""The SimHash kernel behind :func:`permindex.text.fingerprint.simhash_many` (and
:func:`~permindex.text.fingerprint.simhash`): tokens, shingles, XXH3-64 and the votes of a batch
of lower-cased texts in one numba call, bit-exact with the reference algorithm of
:func:`~permindex.text.fingerprint.simhash`.

The batch travels as one UTF-8 buffer: each lower-cased text is encoded, the encodings joined
(and padded by 8 zero bytes), with (n + 1,) byte offsets. Per text, in one pass over its bytes:

1. whitespace is recognised on the UTF-8 bytes exactly as ``str.split()`` has it: U+0009-U+000D,
   U+001C-U+0020, U+0085, U+00A0, U+1680, U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000
   (continuation bytes, 0x80-0xBF, never start a character, so a byte-wise scan is safe);
2. tokens are copied into a scratch buffer, words separated by exactly one space (the word
   tokenizer) or characters with nothing between them (the character tokenizer), so that a
   shingle of ``shingle_size`` tokens is one contiguous slice of it: the bytes of
   ``" ".join(words)`` (or of ``"".join(chars)``);
3. each shingle is hashed (XXH3-64, :mod:`permindex.text.xxh3_kernels`) as soon as its last
   token ends: a ring of the last ``shingle_size`` token starts is all the state;
4. votes are counted eight bits at a time: byte k of counter word j counts bit 8k + j, spilled
   into 64 exact counters every 255 hashes; bit i is set where ``2 * ones[i] > shingles``.

O(total bytes) time; memory: the encoded batch plus one scratch buffer the size of its longest
text. Import this module only where the kernel is needed: it imports numba.
"""

from __future__ import annotations

from typing import Final

import numpy as np
from numpy.typing import NDArray

from permindex.jit import njit
from permindex.text.xxh3_kernels import (
    SECRET,
    _hash,
    _load8,
    _load64,
    _store8,
    _store64,
    address,
    trailing_zeros,
)

__all__ = ["KIND_CHARS", "KIND_WORDS", "shingle_hashes_lowered", "simhash_lowered"]

#: Per-text tokenizer codes of :func:`simhash_lowered`.
KIND_WORDS: Final = 0
KIND_CHARS: Final = 1

_ONES = np.uint64(0x0101010101010101)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_ADD5F = np.uint64(0x5F5F5F5F5F5F5F5F)  # (b & 0x7F) + 0x5F has bit 7 set iff b & 0x7F >= 0x21
_HIGH = np.uint64(0x8080808080808080)
_BYTE = np.uint64(0xFF)
_SPILL: Final = 255  # hashes per spill of the 8-bit counters
_PAD: Final = bytes(8)  # after the batch's bytes
_SLACK: Final = 16  # scratch bytes beyond the longest text
_NO_OUTPUT = np.empty(0, dtype=np.uint64)  # _batch votes


@njit(inline=True)
def _space(p: int, i: int, end: int) -> int:
    """Bytes of the whitespace character starting at byte ``i`` of the buffer at address ``p``
    (``str.isspace``), 0 if it is not one (or byte ``i`` is not a lead byte); ``end``: the end
    of the text."""
    c = _load8(p + i)
    if c < 0x80:
        if (9 <= c <= 13) or (28 <= c <= 32):
            return 1
        return 0
    if c == 0xC2:
        if i + 1 < end:
            d = _load8(p + i + 1)
            if d == 0x85 or d == 0xA0:
                return 2
        return 0
    if c < 0xE1 or c > 0xE3 or i + 2 >= end:
        return 0
    d = _load8(p + i + 1)
    e = _load8(p + i + 2)
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
def _next_token(bp: int, i: int, end: int, sp: int, w: int, chars: bool) -> tuple[int, int, int]:
    """The next token of the text bytes ``[i, end)`` at address ``bp``, copied to the scratch
    buffer at address ``sp`` from offset ``w`` (words: after one space when ``w > 0``).
    Returns ``(i, start, w)``: the position after the token, its offset in the scratch buffer
    (-1 when there is no token left) and the new end of the scratch buffer."""
    c = 0
    while i < end:
        c = _load8(bp + i)
        if c > 0x20 and c < 0x80:
            break
        if c == 0x20 or c == 0x0A:
            i += 1
            continue
        step = _space(bp, i, end)
        if step == 0:
            break
        i += step
    if i >= end:
        return i, -1, w
    if chars:
        start = w
        _store8(sp + w, c)
        w += 1
        i += 1
        while i < end:
            c = _load8(bp + i)
            if (c & 0xC0) != 0x80:
                break
            _store8(sp + w, c)
            w += 1
            i += 1
        return i, start, w
    if w > 0:
        _store8(sp + w, 32)
        w += 1
    first = i
    i += 1
    # The end of the word, 8 bytes at a time: a byte below 0x21 or above 0x7F is "special"
    # (may be whitespace; checked one by one), the others are word bytes for sure.
    while i < end:
        x = _load64(bp + i)  # may read past the text: the next text or the padding
        special = (~((x & _LOW7) + _ADD5F) | x) & _HIGH
        if special == 0:
            i += 8
            continue
        j = i + (trailing_zeros(special) >> 3)
        if j >= end:
            i = end
            break
        if _space(bp, j, end) > 0:
            i = j
            break
        i = j + 1
    if i > end:
        i = end
    # Copy the word 8 bytes at a time: up to 7 bytes are read past it (the buffer is padded)
    # and written past it (the scratch buffer has room; the next token overwrites them).
    for q in range(0, i - first, 8):
        _store64(sp + w + q, _load64(bp + first + q))
    return i, w, w + i - first


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


@njit()
def _batch(
    buf: NDArray[np.uint8],
    offsets: NDArray[np.int64],
    kinds: NDArray[np.uint8],
    shingle_size: int,
    min_words: int,
    scratch: NDArray[np.uint8],
    secret: NDArray[np.uint8],
    out: NDArray[np.uint64],
) -> tuple[NDArray[np.uint64], NDArray[np.bool_], int]:
    """The kernel: fingerprints and validity of the texts ``buf[offsets[t] : offsets[t + 1]]``.
    ``scratch`` holds at least the longest text's bytes plus :data:`_SLACK`. With a non-empty
    ``out`` the shingle hashes are written there in order instead of voting (room for all of
    them: at most one per byte) and their number is returned third. Every array read or
    written through its address is an argument, so that the caller keeps it alive."""
    n = offsets.size - 1
    ring = np.zeros(shingle_size, dtype=np.int64)
    ones = np.zeros(64, dtype=np.int64)
    fingerprints = np.zeros(n, dtype=np.uint64)
    valid = np.zeros(n, dtype=np.bool_)
    bp = address(buf)
    sp = address(scratch)
    k = address(secret)
    s = shingle_size
    emit = out.size > 0
    emitted = 0
    for t in range(n):
        end = offsets[t + 1]
        chars = kinds[t] == KIND_CHARS
        i = offsets[t]
        w = 0  # bytes written to scratch
        tokens = 0
        head = 0  # ring slot of the next token: tokens % shingle_size
        pending = 0  # hashes in the packed 8-bit counters
        voted = 0
        p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = np.uint64(0)
        ones[:] = 0
        while True:
            i, first, w = _next_token(bp, i, end, sp, w, chars)
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
            h = _hash(sp + first, w - first, k)
            if emit:
                out[emitted] = h
                emitted += 1
                continue
            p0 += h & _ONES
            p1 += (h >> np.uint64(1)) & _ONES
            p2 += (h >> np.uint64(2)) & _ONES
            p3 += (h >> np.uint64(3)) & _ONES
            p4 += (h >> np.uint64(4)) & _ONES
            p5 += (h >> np.uint64(5)) & _ONES
            p6 += (h >> np.uint64(6)) & _ONES
            p7 += (h >> np.uint64(7)) & _ONES
            voted += 1
            pending += 1
            if pending == _SPILL:
                _spill(ones, p0, p1, p2, p3, p4, p5, p6, p7)
                p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = np.uint64(0)
                pending = 0
        if tokens >= s and tokens >= min_words:
            _spill(ones, p0, p1, p2, p3, p4, p5, p6, p7)
            fp = np.uint64(0)
            for b in range(64):
                if 2 * ones[b] > voted:
                    fp |= np.uint64(1) << np.uint64(b)
            fingerprints[t] = fp
            valid[t] = True
    return fingerprints, valid, emitted


def simhash_lowered(
    lowered: list[str], kinds: NDArray[np.uint8], shingle_size: int, min_words: int
) -> tuple[NDArray[np.uint64], NDArray[np.bool_]]:
    """SimHash (64 bits) of each already lower-cased text of ``lowered``: ``kinds[i]`` is
    :data:`KIND_WORDS` or :data:`KIND_CHARS`; options already checked. Returns
    ``(fingerprints (n,) uint64, valid (n,) bool)``: valid where the text has at least
    ``shingle_size`` and ``min_words`` tokens, its fingerprint 0 otherwise.

    Raises:
        UnicodeEncodeError: a text holds a lone surrogate (the caller falls back to the
            reference path, which raises only where a shingle holds it).
    """
    buf, offsets, scratch = _encode(lowered)
    fingerprints, valid, _ = _batch(
        buf, offsets, kinds, shingle_size, min_words, scratch, SECRET, _NO_OUTPUT
    )
    return fingerprints, valid


def shingle_hashes_lowered(lowered: str, kind: int, shingle_size: int) -> NDArray[np.uint64]:
    """(m,) uint64: XXH3-64 of each shingle of one lower-cased text, in order (``kind``:
    :data:`KIND_WORDS` or :data:`KIND_CHARS`). Raises UnicodeEncodeError on a lone surrogate."""
    buf, offsets, scratch = _encode([lowered])
    out = np.empty(max(1, int(offsets[1])), dtype=np.uint64)  # at most one shingle per byte
    kinds = np.full(1, kind, dtype=np.uint8)
    _, _, count = _batch(buf, offsets, kinds, shingle_size, 0, scratch, SECRET, out)
    return out[:count].copy() if count < out.size // 2 else out[:count]


def _encode(lowered: list[str]) -> tuple[NDArray[np.uint8], NDArray[np.int64], NDArray[np.uint8]]:
    """The kernel's inputs for ``lowered``: the joined UTF-8 bytes (padded), the (n + 1,) byte
    offsets, and a scratch buffer for the longest text."""
    encoded = [text.encode("utf-8") for text in lowered]
    n = len(encoded)
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=n), out=offsets[1:])
    encoded.append(_PAD)  # words are copied 8 bytes at a time: reads may pass the last text
    buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)
    longest = int(np.diff(offsets).max()) if n else 0
    return buf, offsets, np.empty(longest + _SLACK, dtype=np.uint8)
