"""The result of a lookup: :class:`Match` (a stored key, its fingerprint, its Hamming distance
to the query), how one is made without a Python-level call, the order of matches, and
:func:`match_lists`, which makes a batch's lists of them."""

from __future__ import annotations

from collections import deque
from functools import cache, partial
from operator import itemgetter
from typing import NamedTuple, TypeVar

import numpy as np
from numpy.typing import NDArray

__all__ = ["MATCH_ORDER", "Match", "match_lists", "new_match"]

#: Sort key of matches: (distance, key).
MATCH_ORDER = itemgetter(2, 0)


class Match(NamedTuple):
    """One result of a query: a stored key, its fingerprint (int in [0, 2^64)) and its Hamming
    distance to the query (int, bits).

    Examples:
        >>> from permindex import Index
        >>> index = Index()
        >>> index.add("a", 0b1011)
        True
        >>> match = index.query(0b1000)[0]
        >>> match.key, match.fingerprint, match.distance
        ('a', 11, 2)
    """

    key: str
    fingerprint: int
    distance: int


#: ``Match`` from a (key, fingerprint, distance) tuple without a Python-level call (what
#: ``Match._make`` does, minus its frame).
new_match = partial(tuple.__new__, Match)


def match_lists(
    n: int,
    queries: NDArray[np.int64],
    keys: list[str],
    fingerprints: NDArray[np.uint64],
    distances: NDArray[np.uint8],
) -> list[list[Match]]:
    """The result lists of a batch of n queries: list q holds ``Match(keys[i],
    fingerprints[i], distances[i])`` for every i with ``queries[i] == q``, in order;
    ``queries`` (m,) int64 non-decreasing in [0, n), ``keys`` m str, ``fingerprints`` (m,)
    uint64, ``distances`` (m,) uint8. O(n + m).

    The n lists and m Match objects are left untracked by the cycle collector (they hold only
    str and int, so they cannot form a cycle of their own), a chunk at a time as they are made:
    a batch's results then never bring on a full collection of the host's objects. A reference
    cycle a caller builds through one of these lists is freed only once broken.

    Raises:
        ValueError: the lengths differ, or ``queries`` is not non-decreasing in [0, n).
    """
    m = int(queries.size)
    if not (len(keys) == fingerprints.size == distances.size == m):
        raise ValueError("match_lists: queries, keys, fingerprints and distances differ in length")
    if m and (queries[0] < 0 or queries[-1] >= n or bool((queries[1:] < queries[:-1]).any())):
        raise ValueError("match_lists: queries must be non-decreasing and in [0, n)")
    results: list[list[Match]] = []
    for start in range(0, n, UNTRACK_CHUNK):
        results += _untracked([[] for _ in range(min(UNTRACK_CHUNK, n - start))])
    values, spans = fingerprints.tolist(), distances.tolist()
    matches: list[Match] = []
    for start in range(0, m, UNTRACK_CHUNK):
        end = start + UNTRACK_CHUNK
        made = map(
            new_match, zip(keys[start:end], values[start:end], spans[start:end], strict=True)
        )
        matches += _untracked(list(made))
    # list.append(results[q], match) for each match, looped in C (half the time of a Python
    # for loop)
    deque(map(list.append, map(results.__getitem__, queries.tolist()), matches), maxlen=0)
    return results


#: Objects made between two calls that untrack them: below the young generation's threshold
#: (700 allocations by default), so that the collector's young collections find few of them and
#: none reach the old generation.
UNTRACK_CHUNK = 512

_T = TypeVar("_T")


def _untracked(objects: list[_T]) -> list[_T]:
    """``objects``, each left untracked by the cycle collector
    (:func:`~permindex.index.search.match_kernels.untrack_objects`). O(len(objects))."""
    from permindex.index.search import match_kernels

    addresses = np.fromiter(map(id, objects), dtype=np.uint64, count=len(objects))
    match_kernels.untrack_objects(_gc_untrack(), addresses)
    return objects


@cache
def _gc_untrack() -> int:
    """The address of CPython's ``PyObject_GC_UnTrack`` in this process."""
    import ctypes

    address = ctypes.cast(ctypes.pythonapi.PyObject_GC_UnTrack, ctypes.c_void_p).value
    if not address:  # pragma: no cover - CPython always has it
        raise RuntimeError("PyObject_GC_UnTrack is not available")
    return address
