"""Compiled kernels of the key store (:class:`~permindex.index.keys.store.KeyStore`): where a
row's code is (:mod:`permindex.index.keys.rows`' layout), the rows' codes hashed, gathered and
decoded, the key -> row map probed, filled and emptied (:mod:`permindex.index.keys.hash_table`'s
layout), the distinct rows among a batch's matches, and runs of tied matches ordered by key.

Imported on first use (see :mod:`permindex.jit`); each is exact, and the tests check the store
they make against a dict. They keep the GIL (``keep_gil=True``) for the reason
:mod:`permindex.index.search.match_kernels` gives, but for the few that run over the whole store
(hashing every row for a new map, gathering every code), which let it go.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from permindex.index.keys.codec import (
    _RUN_BYTES,
    _decode_key,
    _decoded_size,
    _hash_bytes,
    decode_codes,
)
from permindex.jit_numba import njit
from permindex.jit_numba import unowned as _unowned_intrinsic

#: :func:`permindex.jit_numba.unowned`, typed for the checker (the same intrinsic).
unowned: Any = _unowned_intrinsic

__all__ = [
    "BLOCK_SHIFT",
    "DECODE_ROW_SIGNATURE",
    "LONG",
    "decode_row",
    "decode_rows",
    "distinct_rows",
    "find_codes",
    "link_distinct",
    "link_rows",
    "order_ties_by_key",
    "relink_rows",
    "row_hashes",
    "row_spans",
    "scan_codes",
    "unlink_row",
    "warm",
    "write_codes",
]

_I64 = NDArray[np.int64]
_U8 = NDArray[np.uint8]
_U32 = NDArray[np.uint32]
_U64 = NDArray[np.uint64]
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing's multiplier, 2^64 / phi

#: Rows per block of the code offsets: ``bases[r >> BLOCK_SHIFT]`` is where row r's block starts.
BLOCK_SHIFT = 4
#: A row length byte meaning "a 2-byte little-endian length precedes the code".
LONG = 255
_RUN_BYTES_K = _RUN_BYTES
#: 10^length, the bound of a digit run's value.
_POWERS = np.array([10**i for i in range(20)], dtype=np.uint64)


@njit(inline=True)
def _span(codes: _U8, lens: _U8, bases: _I64, row: Any) -> tuple[Any, Any, Any]:
    """(where row's span starts, where its code starts, the code's size)."""
    block = row >> BLOCK_SHIFT
    at = bases[block]
    for i in range(block << BLOCK_SHIFT, row):
        size = lens[i]
        if size == LONG:
            at += 2 + (np.int64(codes[at]) | (np.int64(codes[at + 1]) << 8))
        else:
            at += size
    size = lens[row]
    if size == LONG:
        return at, at + 2, np.int64(codes[at]) | (np.int64(codes[at + 1]) << 8)
    return at, at, np.int64(size)


@njit(inline=True)
def _home(h: np.uint64, size: int) -> Any:
    """The home slot of hash ``h`` in a map of ``size`` slots (the high half, scaled)."""
    return np.int64(((h >> np.uint64(32)) * np.uint64(size)) >> np.uint64(32))


@njit(inline=True)
def _tag(h: np.uint64) -> np.uint8:
    return np.uint8(h & np.uint64(0xFF))


@njit(keep_gil=True)
def row_spans(codes: _U8, lens: _U8, bases: _I64, rows: _I64) -> tuple[_I64, _I64, _I64]:
    """For each of ``rows`` (m,) int64: where its span (length prefix and code) starts, where
    its code starts, and the code's size ((m,) int64 each). O(m * 16)."""
    codes, lens, bases, rows = unowned(codes), unowned(lens), unowned(bases), unowned(rows)
    m = rows.size
    spans = np.empty(m, dtype=np.int64)
    starts = np.empty(m, dtype=np.int64)
    sizes = np.empty(m, dtype=np.int64)
    for i in range(m):
        spans[i], starts[i], sizes[i] = _span(codes, lens, bases, rows[i])
    return spans, starts, sizes


@njit()
def row_hashes(codes: _U8, lens: _U8, bases: _I64, rows: _I64) -> _U64:
    """The code hash (:func:`~permindex.index.keys.codec.code_hash`) of each of ``rows``, (m,)
    uint64. O(m * 16 + their code bytes)."""
    codes, lens, bases, rows = unowned(codes), unowned(lens), unowned(bases), unowned(rows)
    m = rows.size
    out = np.empty(m, dtype=np.uint64)
    for i in range(m):
        _, start, size = _span(codes, lens, bases, rows[i])
        out[i] = _hash_bytes(codes, start, size)
    return out


@njit(keep_gil=True)
def write_codes(
    codes: _U8, lens: _U8, bases: _I64, first: int, used: int, new: _U8, sizes: _I64
) -> int:
    """Append the codes ``new`` (their (n,) int64 ``sizes``) as rows ``first``.. at byte
    ``used`` of ``codes`` (room made by the caller: sizes plus 2 bytes a code of 255 bytes or
    more); returns the bytes used after them. O(n + bytes)."""
    codes, lens, bases = unowned(codes), unowned(lens), unowned(bases)
    new, sizes = unowned(new), unowned(sizes)
    at = used
    src = 0
    for k in range(sizes.size):
        row = first + k
        if (row & ((1 << BLOCK_SHIFT) - 1)) == 0:
            bases[row >> BLOCK_SHIFT] = at
        size = sizes[k]
        if size >= LONG:
            lens[row] = LONG
            codes[at] = size & 0xFF
            codes[at + 1] = size >> 8
            at += 2
        else:
            lens[row] = size
        for b in range(size):
            codes[at + b] = new[src + b]
        at += size
        src += size
    return at


@njit(keep_gil=True)
def decode_rows(
    codes: _U8, lens: _U8, bases: _I64, rows: _I64, dict_data: _U8, dict_offsets: _I64
) -> tuple[_U8, _I64]:
    """The keys of ``rows`` (m,) int64 decoded, in that order: their key section ((B,) uint8,
    each key's UTF-8 bytes then a NUL) and (m,) int64 UTF-8 lengths: each row's code found
    (:func:`_span`), then :func:`~permindex.index.keys.codec.decode_codes`. O(m * 16 + B)."""
    codes, lens, bases, rows = unowned(codes), unowned(lens), unowned(bases), unowned(rows)
    m = rows.size
    starts = np.empty(m, dtype=np.int64)
    sizes = np.empty(m, dtype=np.int64)
    for i in range(m):
        _, starts[i], sizes[i] = _span(codes, lens, bases, rows[i])
    return decode_codes(codes, starts, sizes, dict_data, dict_offsets)


#: decode_row(codes, lens, bases, row, dict_data, dict_offsets, out) -> UTF-8 length.
DECODE_ROW_SIGNATURE = (
    "int64(uint8[::1], uint8[::1], int64[::1], int64, uint8[::1], int64[::1], uint8[::1])"
)


@njit(DECODE_ROW_SIGNATURE, keep_gil=True)
def decode_row(
    codes: _U8, lens: _U8, bases: _I64, row: int, dict_data: _U8, dict_offsets: _I64, out: _U8
) -> int:
    """The key of one ``row`` decoded into the caller's ``out`` ((capacity,) uint8) as
    :func:`decode_rows` decodes it: returns its UTF-8 length, or minus that length (nothing
    written) when ``out`` is shorter. One call, no array made or returned: a single lookup's
    match, called through its compiled entry point. O(16 + B)."""
    codes, lens, bases = unowned(codes), unowned(lens), unowned(bases)
    dict_data, dict_offsets, out = unowned(dict_data), unowned(dict_offsets), unowned(out)
    _, start, size = _span(codes, lens, bases, row)
    length = _decoded_size(codes, start, size, dict_offsets)
    if length > out.size:
        return -length
    _decode_key(codes, start, size, out, 0, dict_data, dict_offsets)
    return length


@njit(inline=True)
def _same_code(codes: _U8, start: int, size: int, query: _U8, qstart: int, qsize: int) -> bool:
    if size != qsize:
        return False
    for b in range(size):
        if codes[start + b] != query[qstart + b]:
            return False
    return True


@njit(keep_gil=True)
def find_codes(
    query: _U8,
    qsizes: _I64,
    qhashes: _U64,
    slots: _U32,
    tags: _U8,
    codes: _U8,
    lens: _U8,
    bases: _I64,
) -> _I64:
    """The row linked under each of n query codes (``query`` concatenated, (n,) ``qsizes`` and
    ``qhashes``), or -1: linear probing from the home slot, a row's code compared only where
    the slot's tag matches. O(n * probes + compared bytes)."""
    query, qsizes, qhashes = unowned(query), unowned(qsizes), unowned(qhashes)
    slots, tags = unowned(slots), unowned(tags)
    codes, lens, bases = unowned(codes), unowned(lens), unowned(bases)
    n = qsizes.size
    out = np.full(n, -1, dtype=np.int64)
    size = slots.size
    qstart = 0
    for k in range(n):
        h = qhashes[k]
        tag = _tag(h)
        i = _home(h, size)
        while True:
            v = slots[i]
            if v == 0:
                break
            if tags[i] == tag:
                row = np.int64(v) - 1
                _, start, csize = _span(codes, lens, bases, row)
                if _same_code(codes, start, csize, query, qstart, qsizes[k]):
                    out[k] = row
                    break
            i += 1
            if i == size:
                i = 0
        qstart += qsizes[k]
    return out


@njit()
def link_rows(slots: _U32, tags: _U8, rows: _I64, hashes: _U64) -> None:
    """Put ``rows`` (m,) int64 (distinct, not in the map) with their code ``hashes`` (m,)
    uint64 into free slots. O(m * probes)."""
    slots, tags, rows, hashes = unowned(slots), unowned(tags), unowned(rows), unowned(hashes)
    size = slots.size
    for k in range(rows.size):
        h = hashes[k]
        i = _home(h, size)
        while slots[i] != 0:
            i += 1
            if i == size:
                i = 0
        slots[i] = np.uint32(rows[k] + 1)
        tags[i] = _tag(h)


@njit(keep_gil=True)
def relink_rows(
    slots: _U32, old_rows: _I64, new_rows: _I64, codes: _U8, lens: _U8, bases: _I64
) -> int:
    """Point the slots of the linked ``old_rows`` at ``new_rows`` (the same keys on new rows);
    returns -1, or the first old row that is not linked (then the map is left part-way)."""
    slots, old_rows, new_rows = unowned(slots), unowned(old_rows), unowned(new_rows)
    codes, lens, bases = unowned(codes), unowned(lens), unowned(bases)
    size = slots.size
    for k in range(old_rows.size):
        row = old_rows[k]
        _, start, csize = _span(codes, lens, bases, row)
        i = _home(_hash_bytes(codes, start, csize), size)
        target = np.uint32(row + 1)
        while slots[i] != target:
            if slots[i] == 0:
                return int(row)
            i += 1
            if i == size:
                i = 0
        slots[i] = np.uint32(new_rows[k] + 1)
    return -1


@njit(keep_gil=True)
def unlink_row(slots: _U32, tags: _U8, row: int, codes: _U8, lens: _U8, bases: _I64) -> bool:
    """Empty the slot of the linked ``row`` by backward-shift deletion (Knuth, TAOCP vol. 3,
    6.4, Algorithm R), each following entry's home found by hashing its code; False when
    ``row`` is not linked. O(cluster)."""
    slots, tags = unowned(slots), unowned(tags)
    codes, lens, bases = unowned(codes), unowned(lens), unowned(bases)
    size = slots.size
    _, start, csize = _span(codes, lens, bases, row)
    i = _home(_hash_bytes(codes, start, csize), size)
    target = np.uint32(row + 1)
    while slots[i] != target:
        if slots[i] == 0:
            return False
        i += 1
        if i == size:
            i = 0
    j = i
    while True:
        j += 1
        if j == size:
            j = 0
        v = slots[j]
        if v == 0:
            break
        _, start, csize = _span(codes, lens, bases, int(v) - 1)
        home = _home(_hash_bytes(codes, start, csize), size)
        # The entry at j may move to the hole at i unless its home lies cyclically in (i, j].
        if (i < j and (home <= i or home > j)) or (i > j and home <= i and home > j):
            slots[i] = v
            tags[i] = tags[j]
            i = j
    slots[i] = 0
    tags[i] = 0
    return True


@njit("UniTuple(int64[::1], 2)(int64[::1])", keep_gil=True)
def distinct_rows(rows: _I64) -> tuple[_I64, _I64]:
    """The distinct values of ``rows`` (m,) int64 (each >= 0) in order of first appearance, and
    ``inverse`` (m,) int64 with ``distinct[inverse[i]] == rows[i]``. An open-addressing hash
    table of at least 2m slots: O(m) expected time, O(m) memory."""
    m = rows.size
    bits = 1
    while (1 << bits) < 2 * m:
        bits += 1
    size = 1 << bits
    mask = size - 1
    shift = np.uint64(64 - bits)
    slot_row = np.full(size, -1, dtype=np.int64)
    slot_index = np.empty(size, dtype=np.int64)
    distinct = np.empty(m, dtype=np.int64)
    inverse = np.empty(m, dtype=np.int64)
    count = 0
    for i in range(m):
        row = rows[i]
        h = np.int64((np.uint64(row) * _GOLDEN) >> shift)
        while True:
            held = slot_row[h]
            if held == row:
                inverse[i] = slot_index[h]
                break
            if held == -1:
                slot_row[h] = row
                slot_index[h] = count
                distinct[count] = row
                inverse[i] = count
                count += 1
                break
            h = (h + 1) & mask
    return distinct[:count].copy(), inverse


@njit(inline=True)
def _before(section: _U8, a0: int, a1: int, b0: int, b1: int) -> bool:
    """Whether the UTF-8 bytes ``section[a0:a1]`` come before ``section[b0:b1]`` (unsigned
    bytes, a prefix first: the code point order of the str keys)."""
    i, j = a0, b0
    while i < a1 and j < b1:
        if section[i] != section[j]:
            return bool(section[i] < section[j])
        i += 1
        j += 1
    return bool(a1 - i < b1 - j)


@njit(keep_gil=True)
def order_ties_by_key(
    ties: _I64,
    rows: _I64,
    fps: _U64,
    codes: _U8,
    lens: _U8,
    bases: _I64,
    dict_data: _U8,
    dict_offsets: _I64,
) -> None:
    """Sort by key, in place, each run of matches of one query at one distance, ``rows`` (m,)
    int64 and their fingerprints ``fps`` (m,) uint64 alike: ``ties`` (t,) int64, increasing,
    are the positions i where match i + 1 ties with match i
    (:func:`~permindex.index.search.match_kernels.arrange_matches`), so a run of consecutive
    positions s..e in it is the run of matches s..e + 1. Each run's keys are decoded once and
    compared as UTF-8 bytes, which orders them as their code points do; equal keys keep their
    order. Insertion sort: O(r^2) key comparisons for a run of r matches, meant for runs of a
    few (a batch with more than ``Tuning.rank_ties`` ties ranks its keys instead)."""
    t = ties.size
    i = 0
    while i < t:
        j = i
        while j + 1 < t and ties[j + 1] == ties[j] + 1:
            j += 1
        start, end = ties[i], ties[j] + 2
        section, lengths = decode_rows(codes, lens, bases, rows[start:end], dict_data, dict_offsets)
        r = end - start
        lo = np.empty(r, dtype=np.int64)
        at = 0
        for k in range(r):
            lo[k] = at
            at += lengths[k] + 1
        order = np.arange(r)
        for a in range(1, r):
            pick = order[a]
            b = a - 1
            while b >= 0 and _before(
                section,
                lo[pick],
                lo[pick] + lengths[pick],
                lo[order[b]],
                lo[order[b]] + lengths[order[b]],
            ):
                order[b + 1] = order[b]
                b -= 1
            order[b + 1] = pick
        sorted_rows = rows[start:end].copy()
        sorted_fps = fps[start:end].copy()
        for k in range(r):
            rows[start + k] = sorted_rows[order[k]]
            fps[start + k] = sorted_fps[order[k]]
        i = j + 1


def warm() -> None:
    """Run the read kernels, and the kernels that load a version-4 snapshot's keys
    (:func:`scan_codes`, :func:`row_hashes`, :func:`link_distinct`), once on a two-row store
    (their code is then loaded, or compiled into the cache at a server's first start rather
    than at its first restart from a snapshot)."""
    from permindex.index.keys.codec import Dictionary

    words = Dictionary.empty()
    codes = np.array([98, 97], dtype=np.uint8)
    lens = np.ones(2, dtype=np.uint8)
    bases = np.zeros(1, dtype=np.int64)
    two = np.array([1, 0], dtype=np.int64)
    distinct, _ = distinct_rows(two)
    decode_rows(codes, lens, bases, distinct, words.data, words.offsets)
    decode_row(codes, lens, bases, 1, words.data, words.offsets, np.zeros(2, dtype=np.uint8))
    order_ties_by_key(
        np.zeros(1, dtype=np.int64),
        np.arange(2, dtype=np.int64),
        np.zeros(2, dtype=np.uint64),
        codes,
        lens,
        bases,
        words.data,
        words.offsets,
    )
    loaded, _, _, _ = scan_codes(lens, codes, words.offsets)
    rows = np.arange(2, dtype=np.int64)
    hashes = row_hashes(codes, lens, loaded, rows)  # as KeyStore.load_codes links a snapshot
    link_distinct(
        np.zeros(8, dtype=np.uint32), np.zeros(8, dtype=np.uint8), rows, hashes, codes, lens, loaded
    )


@njit()
def link_distinct(
    slots: _U32, tags: _U8, rows: _I64, hashes: _U64, codes: _U8, lens: _U8, bases: _I64
) -> int:
    """:func:`link_rows`, each row's code compared with the linked ones of its tag on the way:
    returns -1, or the first row whose key is already linked (then the map is left part-way).
    For a store loaded whole (a snapshot). O(m * probes + compared bytes)."""
    slots, tags, rows, hashes = unowned(slots), unowned(tags), unowned(rows), unowned(hashes)
    codes, lens, bases = unowned(codes), unowned(lens), unowned(bases)
    size = slots.size
    for k in range(rows.size):
        h = hashes[k]
        tag = _tag(h)
        _, start, csize = _span(codes, lens, bases, rows[k])
        i = _home(h, size)
        while slots[i] != 0:
            if tags[i] == tag:
                _, other, osize = _span(codes, lens, bases, int(slots[i]) - 1)
                if _same_code(codes, other, osize, codes, start, csize):
                    return int(rows[k])
            i += 1
            if i == size:
                i = 0
        slots[i] = np.uint32(rows[k] + 1)
        tags[i] = tag
    return -1


@njit()
def scan_codes(lens: _U8, spans: _U8, dict_offsets: _I64) -> tuple[_I64, int, bool, int]:
    """Walk the rows of a store's layout read from a file (``lens`` (n,) uint8, ``spans`` the
    codes with their long-length prefixes) checking that every code lies within ``spans`` and
    is well formed (token ids below the dictionary's size, ``dict_offsets`` (t + 1,) int64,
    digit-run values below 10^length, runs inside their code): (the (n / 16 + 1,) int64 block
    offsets, -1, whether a code holds a raw run: bytes that may not be UTF-8, the longest key's
    UTF-8 bytes) or (empty, the first bad row, False, 0); a row of ``n`` means the spans hold
    bytes after the last code. O(n + bytes)."""
    n = lens.size
    bases = np.zeros(n // 16 + 1, dtype=np.int64)
    at = 0
    end = spans.size
    raw = False
    longest = 0
    tokens = dict_offsets.size - 1
    for row in range(n):
        if (row & 15) == 0:
            bases[row >> 4] = at
        size = np.int64(lens[row])
        if size == LONG:
            if at + 2 > end:
                return bases[:0], row, False, 0
            size = np.int64(spans[at]) | (np.int64(spans[at + 1]) << 8)
            at += 2
        stop = at + size
        if size == 0 or stop > end:  # a key is never empty
            return bases[:0], row, False, 0
        i = at
        decoded = 0
        while i < stop:
            byte = spans[i]
            if byte < 0x80:
                i += 1
                decoded += 1
            elif byte < 0xC0:
                if i + 2 > stop:
                    return bases[:0], row, False, 0
                t = (int(byte & 0x3F) << 8) | int(spans[i + 1])
                if t >= tokens:
                    return bases[:0], row, False, 0
                decoded += int(dict_offsets[t + 1] - dict_offsets[t])
                i += 2
            elif byte < 0xE0:
                length = int(byte) - 0xC0 + 3
                if length > 19 or i + 1 + _RUN_BYTES_K[length] > stop:
                    return bases[:0], row, False, 0
                value = np.uint64(0)
                for b in range(_RUN_BYTES_K[length]):
                    value |= np.uint64(spans[i + 1 + b]) << np.uint64(8 * b)
                if value >= _POWERS[length]:
                    return bases[:0], row, False, 0
                decoded += length
                i += 1 + _RUN_BYTES_K[length]
            else:
                count = int(byte) - 0xE0 + 1
                if count > 16 or i + 1 + count > stop:
                    return bases[:0], row, False, 0
                raw = True
                decoded += count
                i += 1 + count
        longest = max(longest, int(decoded))
        at = int(stop)
    if at != end:
        return bases[:0], n, False, 0
    return bases, -1, raw, longest
