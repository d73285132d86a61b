"""The compiled kernels of the Jaccard mode: MinHash signatures of CSR shingle sets
(:func:`permindex.near.minhash.signatures`; Broder 1997, with the multiply-add-shift family of
Dietzfelbinger 1996) and the intersection sizes of pairs of sorted sets
(:func:`permindex.near.jaccard.intersection_sizes`), the one implementation of each (the tests
check them against the definitions in Python integers and Python sets, tests/oracles.py).
Import only where a kernel is needed: it imports numba.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from permindex.jit_numba import njit

_SHIFT = np.uint64(32)


@njit()
def signatures_of(
    values: NDArray[np.uint64],
    offsets: NDArray[np.int64],
    a: NDArray[np.uint64],
    b: NDArray[np.uint64],
    out: NDArray[np.uint32],
) -> None:
    """out[i, p] = min over x in values[offsets[i]:offsets[i+1]] of (a[p] * x + b[p]) >> 32,
    as uint32 (out filled with 0xFFFFFFFF by the caller)."""
    n = offsets.size - 1
    permutations = a.size
    for i in range(n):
        row = out[i]
        for s in range(offsets[i], offsets[i + 1]):
            x = values[s]
            for p in range(permutations):
                h = np.uint32((a[p] * x + b[p]) >> _SHIFT)
                if h < row[p]:
                    row[p] = h


@njit(inline=True)
def _common(
    values: NDArray[np.uint64],
    i: int,
    i_end: int,
    other: NDArray[np.uint64],
    j: int,
    j_end: int,
    need: int,
) -> int:
    """|values[i:i_end] & other[j:j_end]| (two sorted runs of distinct values, one merge), or
    -1 as soon as fewer than ``need`` common values remain possible (``need`` <= 0: never)."""
    count = 0
    while i < i_end and j < j_end:
        x = values[i]
        y = other[j]
        if x == y:
            count += 1
            i += 1
            j += 1
            continue
        if x < y:
            i += 1
        else:
            j += 1
        if count + min(i_end - i, j_end - j) < need:  # only a miss lowers the bound
            return -1
    return count


@njit()
def intersection_sizes(
    values: NDArray[np.uint64],
    offsets: NDArray[np.int64],
    left: NDArray[np.int64],
    other_values: NDArray[np.uint64],
    other_offsets: NDArray[np.int64],
    right: NDArray[np.int64],
    out: NDArray[np.int64],
) -> None:
    """out[k] = |set left[k] of (values, offsets) & set right[k] of (other_values,
    other_offsets)|, sets stored sorted and distinct in CSR (the same arrays twice for pairs
    of one collection): one merge of the two runs per pair."""
    for k in range(left.size):
        out[k] = _common(
            values,
            offsets[left[k]],
            offsets[left[k] + 1],
            other_values,
            other_offsets[right[k]],
            other_offsets[right[k] + 1],
            0,
        )


@njit()
def bucket_pairs_verified(
    order: NDArray[np.int64],
    first: NDArray[np.int64],
    low: NDArray[np.int64],
    high: NDArray[np.int64],
    keys: NDArray[np.uint64],
    band: int,
    representative: NDArray[np.int64],
    values: NDArray[np.uint64],
    offsets: NDArray[np.int64],
    threshold: float,
    scale: int,
    out_u: NDArray[np.int64],
    out_v: NDArray[np.int64],
    out_distance: NDArray[np.int64],
) -> tuple[int, int, int]:
    """The candidates of one band's buckets, verified: for each row task t, the pairs of
    set a = order[first[t]] with each set b of order[low[t]:high[t]] (a member of a bucket
    against the members after it: low = first + 1, high = the bucket's end; or, for one block
    pair of a split bucket, a member of one block against the other block), distinct sets,
    u = min(a, b), v = max(a, b), rows of ``keys``; a pair whose band keys agree in an earlier
    band is skipped (it was a candidate there); one whose sizes rule it out (min / max <
    threshold) is counted, not merged; the others are merged (set x is
    ``values[offsets[representative[x]]:...]``), the merge given up once the threshold is out
    of reach. Kept: ``|A & B| / |A | B| >= threshold``, written to out_* with distance
    ``((union - inter) * 2 * scale + union) // (2 * union)``. The out_* arrays hold every
    pair of the tasks. Returns (candidates, merged, kept)."""
    candidates = 0
    merged = 0
    kept = 0
    for t in range(first.size):
        a = order[first[t]]
        for at in range(low[t], high[t]):
            b = order[at]
            u = min(a, b)
            v = max(a, b)
            seen = False
            for earlier in range(band):
                if keys[u, earlier] == keys[v, earlier]:
                    seen = True
                    break
            if seen:
                continue
            candidates += 1
            su = offsets[representative[u] + 1] - offsets[representative[u]]
            sv = offsets[representative[v] + 1] - offsets[representative[v]]
            if min(su, sv) / max(su, sv) < threshold:
                continue
            merged += 1
            # J >= t  <=>  inter >= t (su + sv) / (1 + t): a bound a little below, to give up
            need = int(threshold * (su + sv) / (1.0 + threshold)) - 1
            inter = _common(
                values,
                offsets[representative[u]],
                offsets[representative[u] + 1],
                values,
                offsets[representative[v]],
                offsets[representative[v] + 1],
                need,
            )
            if inter < 0:
                continue
            union = su + sv - inter
            if inter / union >= threshold:
                out_u[kept] = u
                out_v[kept] = v
                out_distance[kept] = ((union - inter) * 2 * scale + union) // (2 * union)
                kept += 1
    return candidates, merged, kept
