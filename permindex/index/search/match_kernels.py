"""Compiled kernels of what a batch lookup does with its matches after the lookup kernels
(:mod:`permindex.index.search.lookup_kernels`) found them: order them by query and distance (with
their fingerprints and the positions of ties, :func:`arrange_matches`) and give each query's
offset into them (:func:`query_offsets`). The matches' keys are gathered and ties ordered by key
in :mod:`permindex.index.keys.kernels`.

Imported on first use (see :mod:`permindex.jit`); each is exact, and the tests check it against
numpy (:func:`numpy.lexsort`, cumulative counts).

They keep the GIL (``keep_gil=True``): each takes microseconds to tens of microseconds for a
batch of 10,000 lookups, between steps that hold the GIL anyway (making keys and results).
Letting it go for so short a time only hands it to another thread and has this one wait to take
it back (a thread woken on the other core): two threads looking up at once scale better with
them keeping it (benchmarks/README.md, "two threads against one thread"). Their run time is
O(matches), below that of the Python objects made from the same matches under the GIL.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from permindex.jit_numba import call_void_function, njit

__all__ = [
    "ARRANGE_SIGNATURE",
    "OFFSETS_SIGNATURE",
    "ORDER_SIGNATURE",
    "UNTRACK_SIGNATURE",
    "arrange_matches",
    "order_by_query",
    "query_offsets",
    "untrack_objects",
]

#: order_by_query(query positions, distances, n) -> order.
ORDER_SIGNATURE = "int64[::1](int64[::1], uint8[::1], int64)"
#: arrange_matches(found, n, fps) -> (query positions, rows, distances, fingerprints, ties).
ARRANGE_SIGNATURE = (
    "Tuple((int64[::1], int64[::1], uint8[::1], uint64[::1], int64[::1]))"
    "(int64[:, ::1], int64, uint64[::1])"
)
#: query_offsets(query positions, n) -> offsets.
OFFSETS_SIGNATURE = "int64[::1](int64[::1], int64)"

_I64 = NDArray[np.int64]


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


#: untrack_objects(address of PyObject_GC_UnTrack, object addresses).
UNTRACK_SIGNATURE = "void(uint64, uint64[::1])"


@njit(UNTRACK_SIGNATURE, keep_gil=True)
def untrack_objects(untrack: int, addresses: NDArray[np.uint64]) -> None:
    """Call ``untrack`` (the address of CPython's ``PyObject_GC_UnTrack``) on each object address
    of ``addresses`` (m,) uint64 (their ``id()``): the cycle collector no longer walks those
    objects. Holds the GIL. The caller keeps the objects alive and passes only objects that
    cannot take part in a reference cycle of their own (lists of Match, Match of str and int).
    O(m)."""
    for i in range(addresses.size):
        call_void_function(untrack, addresses[i])  # type: ignore[call-arg]
