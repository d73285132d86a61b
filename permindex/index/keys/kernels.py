"""Compiled kernels of the key store's reads (:class:`~permindex.index.keys.rows.KeyRows`): the
distinct rows among a batch's matches, the UTF-8 bytes of rows' keys gathered into one buffer,
and runs of tied matches ordered by their keys' bytes.

Imported on first use (see :mod:`permindex.jit`); each is exact, and the tests check it against
numpy (:func:`numpy.unique`, a gather of the keys' bytes) and Python's ``sorted``. They keep the
GIL (``keep_gil=True``) for the reason :mod:`permindex.index.search.match_kernels` gives: they
run between steps that hold it anyway, for O(matches + key bytes).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from permindex.jit_numba import njit

__all__ = [
    "DISTINCT_SIGNATURE",
    "GATHER_SIGNATURE",
    "TIES_SIGNATURE",
    "distinct_rows",
    "gather_key_bytes",
    "order_ties_by_key",
]

#: distinct_rows(rows) -> (distinct rows, inverse).
DISTINCT_SIGNATURE = "UniTuple(int64[::1], 2)(int64[::1])"
#: gather_key_bytes(offsets, data, rows) -> (bytes, key lengths).
GATHER_SIGNATURE = "Tuple((uint8[::1], int64[::1]))(int64[::1], uint8[::1], int64[::1])"
#: order_ties_by_key(ties, rows, fps, offsets, data), in place.
TIES_SIGNATURE = "void(int64[::1], int64[::1], uint64[::1], int64[::1], uint8[::1])"

_I64 = NDArray[np.int64]
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing's multiplier, 2^64 / phi


@njit(DISTINCT_SIGNATURE, keep_gil=True)
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


@njit(GATHER_SIGNATURE, keep_gil=True)
def gather_key_bytes(
    offsets: _I64, data: NDArray[np.uint8], rows: _I64
) -> tuple[NDArray[np.uint8], _I64]:
    """The stored bytes of each of ``rows`` (m,) int64, concatenated in that order, and the
    length of each row's key (m,) int64 (its NUL excluded): row r's bytes are
    ``data[offsets[r]:offsets[r + 1]]`` (its key's UTF-8 bytes and the NUL after them),
    ``offsets`` (rows + 1,) int64, ``data`` uint8. O(m + bytes)."""
    m = rows.size
    lengths = np.empty(m, dtype=np.int64)
    total = 0
    for i in range(m):
        r = rows[i]
        size = offsets[r + 1] - offsets[r]
        lengths[i] = size - 1
        total += size
    out = np.empty(total, dtype=np.uint8)
    at = 0
    for i in range(m):
        r = rows[i]
        for b in range(offsets[r], offsets[r + 1]):
            out[at] = data[b]
            at += 1
    return out, lengths


@njit(inline=True)
def _key_before(a: int, b: int, offsets: _I64, data: NDArray[np.uint8]) -> bool:
    """Whether row ``a``'s key comes before row ``b``'s: their UTF-8 bytes compared as unsigned
    bytes, a prefix first (the code point order of the str keys)."""
    i, end_a = offsets[a], offsets[a + 1] - 1
    j, end_b = offsets[b], offsets[b + 1] - 1
    while i < end_a and j < end_b:
        if data[i] != data[j]:
            return bool(data[i] < data[j])
        i += 1
        j += 1
    return bool(end_a - i < end_b - j)


@njit(TIES_SIGNATURE, keep_gil=True)
def order_ties_by_key(
    ties: _I64, rows: _I64, fps: NDArray[np.uint64], offsets: _I64, data: NDArray[np.uint8]
) -> None:
    """Sort by key, in place, each run of matches of one query at one distance, ``rows`` (m,)
    int64 and their fingerprints ``fps`` (m,) uint64 alike: ``ties`` (t,) int64, increasing,
    are the positions i where match i + 1 ties with match i
    (:func:`~permindex.index.search.match_kernels.arrange_matches`), so a
    run of consecutive positions s..e in it is the run of matches s..e + 1. Keys are compared
    as their stored UTF-8 bytes (``offsets`` (rows + 1,) int64 into ``data`` uint8, each key
    followed by a NUL), which orders them as their code points do; equal keys keep their
    order. Insertion sort: O(r^2) key comparisons for a run of r matches, meant for runs of a
    few (a batch with more than ``Tuning.rank_ties`` ties ranks its keys instead)."""
    t = ties.size
    i = 0
    while i < t:
        j = i
        while j + 1 < t and ties[j + 1] == ties[j] + 1:
            j += 1
        start, end = ties[i], ties[j] + 2
        for a in range(start + 1, end):
            row, fp = rows[a], fps[a]
            b = a - 1
            while b >= start and _key_before(row, rows[b], offsets, data):
                rows[b + 1] = rows[b]
                fps[b + 1] = fps[b]
                b -= 1
            rows[b + 1] = row
            fps[b + 1] = fp
        i = j + 1
