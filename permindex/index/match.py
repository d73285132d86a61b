"""The result of a lookup: :class:`Match` (a stored key, its fingerprint, its Hamming distance
to the query), how one is made without a Python-level call, the order of matches,
:func:`collection_paused`, under which a batch's result objects are made, and
:func:`match_lists`, which makes a batch's lists of them."""

from __future__ import annotations

import gc
import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from operator import itemgetter
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

__all__ = ["MATCH_ORDER", "Match", "collection_paused", "match_lists", "new_match"]

#: Sort key of matches: (distance, key).
MATCH_ORDER = itemgetter(2, 0)


class Match(NamedTuple):
    """One result of a query: a stored key, its fingerprint (int in [0, 2^64)) and its Hamming
    distance to the query (int, bits)."""

    key: str
    fingerprint: int
    distance: int


#: ``Match`` from a (key, fingerprint, distance) tuple without a Python-level call (what
#: ``Match._make`` does, minus its frame).
new_match = partial(tuple.__new__, Match)


_pause_lock = threading.Lock()
_pauses = 0
_resume = False


@contextmanager
def collection_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused (``gc.disable()``) while the block makes many
    objects at once -- a batch's lists and :class:`Match` tuples, none of them in a cycle --
    and resumed after it if it was enabled before (nested and concurrent uses: by the last to
    leave).

    Why: every 700 container objects made start a collection of the youngest generation, and
    a batch's results, alive while they are made, are promoted to older generations; once
    enough are, Python collects all of them, every object of the process included. With
    numba's kernels loaded a process holds about 10^5 such objects, and that full collection
    took 80 to 110 ms here, about once in 7 batches of 10,000 lookups. Results the caller
    drops before the next collection are then freed by reference counting, never promoted.
    A ``gc.disable()`` by another thread while a block runs may be undone at its end."""
    global _pauses, _resume
    with _pause_lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _pause_lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                gc.enable()


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
    uint64, ``distances`` (m,) uint8. O(n + m); the caller pauses the collector
    (:func:`collection_paused`).

    Raises:
        ValueError: the lengths differ, or ``queries`` is not non-decreasing in [0, n).
    """
    m = int(queries.size)
    if not (len(keys) == fingerprints.size == distances.size == m):
        raise ValueError("match_lists: queries, keys, fingerprints and distances differ in length")
    if m and (queries[0] < 0 or queries[-1] >= n or bool((queries[1:] < queries[:-1]).any())):
        raise ValueError("match_lists: queries must be non-decreasing and in [0, n)")
    results: list[list[Match]] = [[] for _ in range(n)]
    matches = map(new_match, zip(keys, fingerprints.tolist(), distances.tolist(), strict=True))
    # list.append(results[q], match) for each match, looped in C (half the time of a Python
    # for loop)
    deque(map(list.append, map(results.__getitem__, queries.tolist()), matches), maxlen=0)
    return results
