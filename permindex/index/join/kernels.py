"""Compiled kernels of the self-join (:func:`permindex.index.join.self_join.self_join`), of the
distinct
values it joins (:func:`permindex.index.join.pair_stream.distinct_values`) and of the connected
components of its pairs (:func:`permindex.index.join.clusters.components`).

Imported only by the code that calls them (importing it compiles nothing until a kernel is first
called; numba's on-disk cache then loads them, see :mod:`permindex.jit`). The tests check each
against an independent reference (brute force for the pairs, a dict for the distinct values,
a plain union-find for the components: ``tests/oracles.py``, ``tests/test_pairs.py``).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from permindex.jit_numba import njit, popcount64

__all__ = [
    "group_by_value",
    "group_pairs_verified",
    "root_labels",
    "union",
    "union_find_labels",
]

_ZERO = np.uint64(0)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # 2^64 / phi: Fibonacci hashing


@njit()
def group_pairs_verified(
    keys: NDArray[np.uint64],
    values: NDArray[np.uint64],
    positions: NDArray[np.int64],
    k: int,
    earlier_masks: NDArray[np.uint64],
    start_i: int,
    start_j: int,
    work_budget: int,
    out_a: NDArray[np.int64],
    out_b: NDArray[np.int64],
    out_d: NDArray[np.int64],
) -> tuple[int, int, int]:
    """The pairs of one table of a self-join, from where the previous call stopped.

    Args:
        keys: (m,) uint64, a table's keys (prefixes) sorted ascending, so that a group of
            equal keys is a run.
        values: (m,) uint64, the fingerprint of each entry, in ``keys``' order.
        positions: (m,) int64, the position of each entry in the joined array.
        k: largest Hamming distance kept, bits.
        earlier_masks: (e,) uint64, the key masks of the tables searched before this one: a
            pair whose XOR is 0 under one of them was already reported there and is skipped.
        start_i, start_j: the candidate (i, j), i < j, to start at (0, 1 at first).
        work_budget: candidates to verify in this call, at most (>= 1).
        out_a, out_b, out_d: (c,) int64 output buffers, c >= 1: the positions and distance
            of each pair kept.

    Returns:
        (count, i, j): the pairs written to the buffers' first ``count`` slots, and the
        candidate to resume at; ``i == m`` when the table is done. Every candidate pair
        (i, j), i < j, with ``keys[i] == keys[j]`` is verified exactly once over the calls,
        in order of (i, j); it is kept when popcount(values[i] ^ values[j]) <= k and no
        earlier mask hides it. A call stops when the buffers are full or after
        ``work_budget`` candidates.

    Each run of equal keys is found once (a scan for its end), then each row's candidates are
    its later entries in the run, verified without comparing keys. O(m + candidates) time over
    the calls; no memory besides the buffers.
    """
    m = keys.size
    capacity = out_a.size
    n_masks = earlier_masks.size
    count = 0
    work = 0
    i = start_i
    j = start_j
    end = i  # the end (exclusive) of the run of i's key, found once per run
    while i < m:
        if i >= end:
            end = i + 1
            key = keys[i]
            while end < m and keys[end] == key:
                end += 1
        if j <= i:
            j = i + 1
        stop = end  # the budget, checked once per row (compared, not added: no overflow)
        if end - j > work_budget - work:
            stop = j + (work_budget - work)
        value = values[i]
        started = j
        while j < stop:
            x = value ^ values[j]
            d = np.int64(popcount64(x))  # int64: compared with k as integers
            if d <= k:
                first = True
                for t in range(n_masks):
                    if (x & earlier_masks[t]) == _ZERO:
                        first = False
                        break
                if first:
                    if count >= capacity:
                        return count, i, j
                    out_a[count] = positions[i]
                    out_b[count] = positions[j]
                    out_d[count] = d
                    count += 1
            j += 1
        work += j - started
        if j < end:
            return count, i, j
        i += 1
        j = i + 1
        work += 1  # a row without candidates still costs a step
        if work >= work_budget and i < m:
            return count, i, j
    return count, m, m


@njit()
def group_by_value(
    fps: NDArray[np.uint64],
    repeated: NDArray[np.uint64],
    bits: int,
    by_value: NDArray[np.int64],
    first: NDArray[np.int64],
    counts: NDArray[np.int64],
    distinct: NDArray[np.uint64],
    value_of: NDArray[np.int64],
) -> None:
    """The distinct values of ``fps`` given those that occur more than once, into the arrays
    :func:`permindex.index.join.pair_stream.distinct_values` returns (allocated by the caller, so
    that numpy's large-page allocations are used).

    Args:
        fps: (n,) uint64 values.
        repeated: (r,) uint64, r >= 1, the values occurring at least twice in ``fps``, sorted
            ascending without repeats.
        bits: bits of the filter table of ``repeated``'s hashes (``pair_stream._hash_bits``;
            the slot of a value is the top ``bits`` bits of value * 2^64/phi).
        by_value, value_of: (n,) int64, written: positions grouped by value; each position's
            distinct value.
        first, counts, distinct: (d,) int64, int64, uint64, d the number of distinct values,
            written: where each value's positions start in ``by_value``, how many, the value.

    The values that occur once come first, in position order, then the repeated ones in
    ascending order, positions ascending within each. Two passes over ``fps`` (a position
    passing the filter is looked up in ``repeated`` by binary search): O(n + r log r) time,
    2^bits bytes of table and (r,) counters besides the outputs.
    """
    n = fps.size
    r = repeated.size
    shift = np.uint64(64 - bits)
    table = np.zeros(1 << bits, dtype=np.bool_)
    for g in range(r):
        table[(repeated[g] * _GOLDEN) >> shift] = True
    fill = np.zeros(r, dtype=np.int64)  # positions per repeated value, then where the next goes
    ones = 0
    for i in range(n):
        value = fps[i]
        group = -1
        if table[(value * _GOLDEN) >> shift]:
            low = 0
            high = r
            while low < high:
                middle = (low + high) >> 1
                if repeated[middle] < value:
                    low = middle + 1
                else:
                    high = middle
            if low < r and repeated[low] == value:
                group = low
        if group < 0:
            value_of[i] = ones  # a single: numbered in position order
            ones += 1
        else:
            value_of[i] = -1 - group  # a member, numbered below once ones is known
            fill[group] += 1
    at = ones
    for g in range(r):
        first[ones + g] = at
        counts[ones + g] = fill[g]
        distinct[ones + g] = repeated[g]
        at += fill[g]
        fill[g] = at - fill[g]
    for i in range(n):
        v = value_of[i]
        if v >= 0:
            by_value[v] = i
            first[v] = v
            counts[v] = 1
            distinct[v] = fps[i]
        else:
            g = -1 - v
            by_value[fill[g]] = i
            fill[g] += 1
            value_of[i] = ones + g


@njit()
def union_find_labels(n: int, a: NDArray[np.int64], b: NDArray[np.int64]) -> NDArray[np.int64]:
    """Connected components of the graph on 0..n-1 with edges (a[e], b[e]): (n,) int64, each
    position labelled with the smallest position of its component. :func:`union` per edge,
    then :func:`root_labels`; O((n + e) alpha(n)) time, O(n) memory."""
    parent = np.arange(n, dtype=np.int64)
    for e in range(a.size):
        union(parent, a[e], b[e])
    root_labels(parent)
    return parent


@njit(inline=True)
def union(parent: NDArray[np.int64], x: int, y: int) -> None:
    """In a kernel: join the components of ``x`` and ``y`` in the union-find forest ``parent``
    (``parent[r] == r`` at a root; start from ``arange``): path halving on the way to each
    root, then the larger root linked under the smaller, so that a parent is never larger than
    its child (what :func:`root_labels` relies on)."""
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    while parent[y] != y:
        parent[y] = parent[parent[y]]
        y = parent[y]
    if x < y:
        parent[y] = x
    elif y < x:
        parent[x] = y


@njit(inline=True)
def root_labels(parent: NDArray[np.int64]) -> None:
    """In a kernel: ``parent`` (a forest built by :func:`union`) rewritten in place to each
    position's root, the smallest position of its component. One ascending pass: a parent is
    smaller than its child, so it is already final when the child is reached. O(n)."""
    for p in range(parent.size):
        parent[p] = parent[parent[p]]
