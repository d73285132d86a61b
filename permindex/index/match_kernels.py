"""Compiled kernels of what a batch lookup does with its matches after the lookup kernels
(:mod:`permindex.index.lookup_kernels`) found them: order them by query and distance (with
their fingerprints and the positions of ties, :func:`arrange_matches`), find the distinct rows
among them, and gather the UTF-8 bytes of those rows' keys into one buffer.

Imported on first use (see :mod:`permindex.jit`); each is exact, and the tests check it against
numpy (:func:`numpy.lexsort`, :func:`numpy.unique`, a gather of the keys' bytes).

They keep the GIL (``keep_gil=True``): each takes microseconds to tens of microseconds for a
batch of 10,000 lookups, between steps that hold the GIL anyway (making keys and results).
Letting it go for so short a time only hands it to another thread and has this one wait to
take it back (a thread woken on the other core): with two threads looking up at once, the
columnar form's speed-up over one thread was 1.34x with them keeping it against 1.21x without
(benchmarks/README.md). Their run time is O(matches), below that of the Python objects made
from the same matches under the GIL.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from permindex.jit_numba import njit

__all__ = [
    "ARRANGE_SIGNATURE",
    "DISTINCT_SIGNATURE",
    "GATHER_SIGNATURE",
    "OFFSETS_SIGNATURE",
    "ORDER_SIGNATURE",
    "TIES_SIGNATURE",
    "arrange_matches",
    "distinct_rows",
    "gather_key_bytes",
    "order_by_query",
    "order_ties_by_key",
    "query_offsets",
]

#: order_by_query(query positions, distances, n) -> order.
ORDER_SIGNATURE = "int64[::1](int64[::1], uint8[::1], int64)"
#: distinct_rows(rows) -> (distinct rows, inverse).
DISTINCT_SIGNATURE = "UniTuple(int64[::1], 2)(int64[::1])"
#: arrange_matches(found, n, fps) -> (query positions, rows, distances, fingerprints, ties).
ARRANGE_SIGNATURE = (
    "Tuple((int64[::1], int64[::1], uint8[::1], uint64[::1], int64[::1]))"
    "(int64[:, ::1], int64, uint64[::1])"
)
#: query_offsets(query positions, n) -> offsets.
OFFSETS_SIGNATURE = "int64[::1](int64[::1], int64)"
#: gather_key_bytes(offsets, data, rows) -> (bytes, key lengths).
GATHER_SIGNATURE = "Tuple((uint8[::1], int64[::1]))(int64[::1], uint8[::1], int64[::1])"
#: order_ties_by_key(ties, rows, fps, offsets, data), in place.
TIES_SIGNATURE = "void(int64[::1], int64[::1], uint64[::1], int64[::1], uint8[::1])"

_I64 = NDArray[np.int64]
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # Fibonacci hashing's multiplier, 2^64 / phi


@njit(ORDER_SIGNATURE, keep_gil=True)
def order_by_query(queries: _I64, distances: NDArray[np.uint8], n: int) -> _I64:
    """The permutation (m,) int64 that orders m matches by (query position, distance), matches
    equal in both keeping their order: ``queries`` (m,) int64 in [0, n), ``distances`` (m,)
    uint8 in [0, 64]. Two stable counting sorts (by distance, then by query): O(m + n) time,
    O(m + n) memory. Equal to ``numpy.lexsort((distances, queries))``."""
    m = queries.size
    by_distance = np.empty(m, dtype=np.int64)
    starts = np.zeros(66, dtype=np.int64)
    for i in range(m):
        starts[np.int64(distances[i]) + 1] += 1
    for distance in range(65):
        starts[distance + 1] += starts[distance]
    for i in range(m):
        d = np.int64(distances[i])
        by_distance[starts[d]] = i
        starts[d] += 1
    firsts = np.zeros(n + 1, dtype=np.int64)
    for i in range(m):
        firsts[queries[i] + 1] += 1
    for q in range(n):
        firsts[q + 1] += firsts[q]
    order = np.empty(m, dtype=np.int64)
    for i in range(m):
        p = by_distance[i]
        q = queries[p]
        order[firsts[q]] = p
        firsts[q] += 1
    return order


@njit(ARRANGE_SIGNATURE, keep_gil=True)
def arrange_matches(
    found: NDArray[np.int64], n: int, fps: NDArray[np.uint64]
) -> tuple[_I64, _I64, NDArray[np.uint8], NDArray[np.uint64], _I64]:
    """The m matches of a batch lookup, ``found`` (m, 3) int64 rows of (query position in
    [0, n), row, distance in [0, 64]) as the lookup kernels write them, ordered by (query
    position, distance), matches equal in both keeping their order (:func:`order_by_query`):
    (query positions (m,) int64, rows (m,) int64, distances (m,) uint8, the rows' fingerprints
    ``fps[row]`` (m,) uint64, ties (t,) int64: the positions i where match i + 1 has the same
    query position and distance as match i, increasing). One call instead of a dozen numpy
    steps: O(m + n) time and memory."""
    m = found.shape[0]
    queries = np.empty(m, dtype=np.int64)
    distances = np.empty(m, dtype=np.uint8)
    for i in range(m):
        queries[i] = found[i, 0]
        distances[i] = np.uint8(found[i, 2])
    order = order_by_query(queries, distances, n)
    q_out = np.empty(m, dtype=np.int64)
    rows = np.empty(m, dtype=np.int64)
    d_out = np.empty(m, dtype=np.uint8)
    fp_out = np.empty(m, dtype=np.uint64)
    tie = np.empty(max(m - 1, 0), dtype=np.int64)
    ties = 0
    for i in range(m):
        p = order[i]
        q_out[i] = queries[p]
        d_out[i] = distances[p]
        row = found[p, 1]
        rows[i] = row
        fp_out[i] = fps[row]
        if i and q_out[i] == q_out[i - 1] and d_out[i] == d_out[i - 1]:
            tie[ties] = i - 1
            ties += 1
    return q_out, rows, d_out, fp_out, tie[:ties].copy()


@njit(OFFSETS_SIGNATURE, keep_gil=True)
def query_offsets(queries: _I64, n: int) -> _I64:
    """The offsets (n + 1,) int64 of the matches of each query: ``queries`` (m,) int64, query
    positions in [0, n), non-decreasing; query i's matches are positions ``offsets[i]:offsets[i
    + 1]``. Equal to a cumulative sum of ``numpy.bincount(queries, minlength=n)``. O(m + n)."""
    offsets = np.zeros(n + 1, dtype=np.int64)
    for i in range(queries.size):
        offsets[queries[i] + 1] += 1
    for q in range(n):
        offsets[q + 1] += offsets[q]
    return offsets


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
    are the positions i where match i + 1 ties with match i (:func:`arrange_matches`), so a
    run of consecutive positions s..e in it is the run of matches s..e + 1. Keys are compared
    as their stored UTF-8 bytes (``offsets`` (rows + 1,) int64 into ``data`` uint8, each key
    followed by a NUL), which orders them as their code points do; equal keys keep their
    order. Insertion sort: O(r^2) key comparisons for a run of r matches, meant for runs of a
    few (a batch with more than ``query.RANK_TIES`` ties ranks its keys instead)."""
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
