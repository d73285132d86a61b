"""The compiled kernels of the Jaccard mode: MinHash signatures of CSR shingle sets
(:func:`permindex.near.minhash.signatures`; Broder 1997, with the multiply-add-shift family of
Dietzfelbinger 1996) and the intersection sizes of pairs of sorted sets
(:func:`permindex.near.jaccard.intersection_sizes`), the one implementation of each (the tests
check them against the definitions in Python integers and Python sets, tests/oracles.py); the
self-join's verification of a band's buckets (:func:`bucket_pairs_verified`) and the family
deltas it verifies from (:func:`band_components`, :func:`family_deltas`; the contract is
:class:`permindex.near.jaccard.FamilyDeltas`).
Import only where a kernel is needed: it imports numba.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from permindex.index.join.kernels import root_labels, union
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
def band_components(keys: NDArray[np.uint64]) -> NDArray[np.int64]:
    """The connected components of the sets that share a band key: labels[x] (d,) int64, the
    smallest row of x's component, for the rows of ``keys`` ``(d, bands)``. Union-find
    (:func:`permindex.index.join.kernels.union`, the self-join's) over each band's rows sorted
    by key, neighbours with equal keys joined. O(bands x d log d)."""
    d = keys.shape[0]
    parent = np.arange(d, dtype=np.int64)
    column = np.empty(d, dtype=np.uint64)
    for band in range(keys.shape[1]):
        for x in range(d):
            column[x] = keys[x, band]
        order = np.argsort(column)
        for i in range(1, d):
            if column[order[i - 1]] == column[order[i]]:
                union(parent, order[i - 1], order[i])
    root_labels(parent)
    return parent


@njit(inline=True)
def _difference(
    values: NDArray[np.uint64],
    i: int,
    i_end: int,
    other: NDArray[np.uint64],
    j: int,
    j_end: int,
    out: NDArray[np.uint64],
    at: int,
    write: bool,
) -> tuple[int, int]:
    """Of two sorted runs of distinct values A = values[i:i_end], R = other[j:j_end]: the
    sizes of R - A and of A - R, and (when ``write``) R - A written to out[at:], ascending
    (A - R is the same call with the runs swapped). One merge. Kept apart from
    :func:`_common`, though |A & R| = |A| - |A - R|: the verification's merge gives up as soon
    as the threshold is out of reach, which a merge that counts both differences cannot."""
    removed = 0
    added = 0
    while i < i_end or j < j_end:
        if j == j_end or (i < i_end and values[i] < other[j]):
            i += 1
            added += 1
        elif i == i_end or other[j] < values[i]:
            if write:
                out[at + removed] = other[j]
            j += 1
            removed += 1
        else:
            i += 1
            j += 1
    return removed, added


@njit()
def _deltas_against(
    number: NDArray[np.int64],
    labels: NDArray[np.int64],
    representative: NDArray[np.int64],
    values: NDArray[np.uint64],
    offsets: NDArray[np.int64],
    reference_values: NDArray[np.uint64],
    reference_offsets: NDArray[np.int64],
) -> tuple[
    NDArray[np.int64], NDArray[np.uint64], NDArray[np.int64], NDArray[np.uint64], NDArray[np.int64]
]:
    """Each row's family (``number[labels[x]]`` when ``2 (|R - A| + |A - R|) <= |A|``, else
    -1) and its R - A and A - R in CSR, ascending: two merges a row."""
    d = labels.size
    family = np.full(d, -1, dtype=np.int64)
    removed_offsets = np.zeros(d + 1, dtype=np.int64)
    added_offsets = np.zeros(d + 1, dtype=np.int64)
    nothing = np.empty(0, dtype=np.uint64)
    for x in range(d):
        removed_offsets[x + 1] = removed_offsets[x]
        added_offsets[x + 1] = added_offsets[x]
        f = number[labels[x]]
        if f < 0:
            continue
        a = representative[x]
        removed, added = _difference(
            values, offsets[a], offsets[a + 1], reference_values, reference_offsets[f],
            reference_offsets[f + 1], nothing, 0, False,
        )  # fmt: skip
        if 2 * (removed + added) > offsets[a + 1] - offsets[a]:
            continue
        family[x] = f
        removed_offsets[x + 1] += removed
        added_offsets[x + 1] += added
    removed_values = np.empty(removed_offsets[d], dtype=np.uint64)
    added_values = np.empty(added_offsets[d], dtype=np.uint64)
    for x in range(d):
        f = family[x]
        if f < 0:
            continue
        a = representative[x]
        _difference(
            values, offsets[a], offsets[a + 1], reference_values, reference_offsets[f],
            reference_offsets[f + 1], removed_values, removed_offsets[x], True,
        )  # fmt: skip
        _difference(
            reference_values, reference_offsets[f], reference_offsets[f + 1], values,
            offsets[a], offsets[a + 1], added_values, added_offsets[x], True,
        )  # fmt: skip
    return family, removed_values, removed_offsets, added_values, added_offsets


@njit()
def _majority(
    rows: NDArray[np.int64], values: NDArray[np.uint64], offsets: NDArray[np.int64]
) -> NDArray[np.uint64]:
    """The values that more than half of ``rows``' sets (CSR, sorted, distinct) hold,
    ascending."""
    total = 0
    for x in rows:
        total += offsets[x + 1] - offsets[x]
    pooled = np.empty(total, dtype=np.uint64)
    at = 0
    for x in rows:
        size = offsets[x + 1] - offsets[x]
        pooled[at : at + size] = values[offsets[x] : offsets[x + 1]]
        at += size
    pooled.sort()
    out = np.empty(total, dtype=np.uint64)
    kept = 0
    start = 0
    for i in range(1, total + 1):
        if i == total or pooled[i] != pooled[start]:
            if 2 * (i - start) > rows.size:
                out[kept] = pooled[start]
                kept += 1
            start = i
    return out[:kept]


@njit()
def family_deltas(
    labels: NDArray[np.int64],
    representative: NDArray[np.int64],
    values: NDArray[np.uint64],
    offsets: NDArray[np.int64],
) -> tuple[
    NDArray[np.int64],
    NDArray[np.uint64],
    NDArray[np.int64],
    NDArray[np.uint64],
    NDArray[np.int64],
    NDArray[np.uint64],
    NDArray[np.int64],
]:
    """Each row's family, the families' reference sets and each row's delta from its
    family's reference (the contract is :class:`permindex.near.jaccard.FamilyDeltas`): a
    component of ``labels`` (:func:`band_components`) with two or more rows is a family.
    Its reference is first the set of its smallest row (set ``representative[r]``), then
    the majority of its rows: the shingles of that set that at most half of the rows
    which joined remove, and those that more than half of them add (a template's own text,
    when the rows are its edited copies). Row x joins the family when
    ``2 (|R - A| + |A - R|) <= |A|``. Returns (family (d,) int64, -1 or an index into the
    references; the references' values and offsets (f + 1,); removed values and offsets
    (d + 1,); added values and offsets (d + 1,)): row x's R - A and A - R, ascending, empty
    for a row without a family. Four merges a row and a sort of the first deltas: O(total
    set sizes + deltas log deltas)."""
    d = labels.size
    members = np.zeros(d, dtype=np.int64)
    for x in range(d):
        members[labels[x]] += 1
    number = np.full(d, -1, dtype=np.int64)  # a component's family index
    families = 0
    first_offsets = np.zeros(d + 1, dtype=np.int64)
    for x in range(d):
        if labels[x] == x and members[x] >= 2:
            number[x] = families
            r = representative[x]
            first_offsets[families + 1] = first_offsets[families] + (offsets[r + 1] - offsets[r])
            families += 1
    first_offsets = first_offsets[: families + 1].copy()
    first_values = np.empty(first_offsets[families], dtype=np.uint64)
    for x in range(d):
        f = number[x]
        if f >= 0:
            r = representative[x]
            first_values[first_offsets[f] : first_offsets[f + 1]] = values[
                offsets[r] : offsets[r + 1]
            ]
    family, removed_values, removed_offsets, added_values, added_offsets = _deltas_against(
        number, labels, representative, values, offsets, first_values, first_offsets
    )
    # the majority reference of each family: its rows grouped by family
    by_family = np.argsort(family, kind="mergesort")
    start = 0
    while start < d and family[by_family[start]] < 0:
        start += 1
    parts = []
    sizes = np.zeros(families + 1, dtype=np.int64)
    renewed = np.zeros(families, dtype=np.bool_)
    while start < d:
        f = family[by_family[start]]
        end = start
        while end < d and family[by_family[end]] == f:
            end += 1
        rows = by_family[start:end]
        dropped = _majority(rows, removed_values, removed_offsets)
        gained = _majority(rows, added_values, added_offsets)
        old = first_values[first_offsets[f] : first_offsets[f + 1]]
        merged = np.empty(old.size - dropped.size + gained.size, dtype=np.uint64)
        i = j = k = at = 0
        while i < old.size or k < gained.size:
            if j < dropped.size and i < old.size and old[i] == dropped[j]:
                i += 1
                j += 1
            elif k == gained.size or (i < old.size and old[i] < gained[k]):
                merged[at] = old[i]
                i += 1
                at += 1
            else:
                merged[at] = gained[k]
                k += 1
                at += 1
        parts.append((f, merged))
        sizes[f + 1] = merged.size
        renewed[f] = True
        start = end
    for f in range(families):
        if not renewed[f]:  # no row joined: the first reference kept
            sizes[f + 1] = first_offsets[f + 1] - first_offsets[f]
    reference_offsets = np.cumsum(sizes)
    reference_values = np.empty(reference_offsets[families], dtype=np.uint64)
    for f in range(families):
        if not renewed[f]:
            reference_values[reference_offsets[f] : reference_offsets[f + 1]] = first_values[
                first_offsets[f] : first_offsets[f + 1]
            ]
    for f, merged in parts:
        reference_values[reference_offsets[f] : reference_offsets[f + 1]] = merged
    family, removed_values, removed_offsets, added_values, added_offsets = _deltas_against(
        number, labels, representative, values, offsets, reference_values, reference_offsets
    )
    return (
        family, reference_values, reference_offsets, removed_values, removed_offsets,
        added_values, added_offsets,
    )  # fmt: skip


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
    family: NDArray[np.int64],
    reference_offsets: NDArray[np.int64],
    removed_values: NDArray[np.uint64],
    removed_offsets: NDArray[np.int64],
    added_values: NDArray[np.uint64],
    added_offsets: NDArray[np.int64],
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
    threshold) is counted, not merged; the others are merged. Two rows of one family
    (``family[u] == family[v] >= 0``, :func:`family_deltas`; ``family`` empty: none) are
    merged from their deltas against the family's reference R: ``|A & B| = |R| - |R - A| -
    |R - B| + |(R - A) & (R - B)| + |(A - R) & (B - R)|``; any other pair from the sets (set
    x is ``values[offsets[representative[x]]:...]``), the merge given up once the threshold
    is out of reach. Kept: ``|A & B| / |A | B| >= threshold``, written to out_* with distance
    ``((union - inter) * 2 * scale + union) // (2 * union)``. The out_* arrays hold every
    pair of the tasks. Returns (candidates, merged, kept)."""
    candidates = 0
    merged = 0
    kept = 0
    deltas = family.size > 0
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
            if deltas and family[u] >= 0 and family[u] == family[v]:
                f = family[u]
                inter = (
                    reference_offsets[f + 1]
                    - reference_offsets[f]
                    - (removed_offsets[u + 1] - removed_offsets[u])
                    - (removed_offsets[v + 1] - removed_offsets[v])
                    + _common(
                        removed_values, removed_offsets[u], removed_offsets[u + 1],
                        removed_values, removed_offsets[v], removed_offsets[v + 1], 0,
                    )
                    + _common(
                        added_values, added_offsets[u], added_offsets[u + 1],
                        added_values, added_offsets[v], added_offsets[v + 1], 0,
                    )
                )  # fmt: skip
            else:
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
