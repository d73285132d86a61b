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
        i = offsets[left[k]]
        i_end = offsets[left[k] + 1]
        j = other_offsets[right[k]]
        j_end = other_offsets[right[k] + 1]
        count = 0
        while i < i_end and j < j_end:
            x = values[i]
            y = other_values[j]
            if x == y:
                count += 1
                i += 1
                j += 1
            elif x < y:
                i += 1
            else:
                j += 1
        out[k] = count
