"""Candidate ranges of a batch lookup on the reference path
(:func:`permindex.index.query.query_batch`): the per-query ranges of a run's prefix buckets
expanded into candidate positions, with or without the filter test (Manku, Jain & Das Sarma
2007, section 3)."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["filtered_ranges", "gather_ranges"]


def gather_ranges(
    lo: NDArray[np.int64], counts: NDArray[np.int64]
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Expand per-query ranges into candidate positions: for query i, ``lo[i]:lo[i] +
    counts[i]``.

    Returns (query positions (t,) intp, positions (t,) intp) with t = counts.sum(), grouped by
    query in order."""
    _ends, positions = _range_positions(lo, counts)
    if positions.size == 0:
        return np.empty(0, dtype=np.intp), positions
    return np.repeat(np.arange(counts.size, dtype=np.intp), counts), positions


def _range_positions(
    lo: NDArray[np.int64], counts: NDArray[np.int64]
) -> tuple[NDArray[np.int64], NDArray[np.intp]]:
    """(ends: the cumulative counts, (q,) int64; positions: ``lo[i]:lo[i] + counts[i]`` for each
    query i in order, (t,) intp)."""
    ends = np.cumsum(counts)
    total = int(ends[-1]) if ends.size else 0
    positions = np.arange(total, dtype=np.intp)
    if total:
        positions += np.repeat(lo - (ends - counts), counts)
    return ends, positions


def filtered_ranges(
    lo: NDArray[np.int64],
    counts: NDArray[np.int64],
    filters: NDArray[np.uint32],
    query_filters: NDArray[np.uint32],
    k: int,
) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """:func:`gather_ranges`, keeping only the candidates whose 32-bit filter is within ``k``
    bits of their query's: ``filters`` ((m,) uint32, by position), ``query_filters`` ((q,)
    uint32, by query). The query's filter is repeated along its range (sequential) instead of
    gathered by query position, and the query positions are found only for the candidates that
    pass, by a binary search of the ranges' ends. O(t + s log q) for t candidates of which s
    pass.

    Returns (query positions (t,) intp, positions (t,) intp), grouped by query in order."""
    ends, positions = _range_positions(lo, counts)
    if positions.size == 0:
        return np.empty(0, dtype=np.intp), positions
    near = filters[positions]
    near ^= np.repeat(query_filters, counts)
    passed = np.flatnonzero(np.bitwise_count(near) <= k)
    query = np.searchsorted(ends, passed, side="right")
    return query.astype(np.intp, copy=False), positions[passed]
