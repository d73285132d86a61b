"""The result of a lookup: :class:`Match` (a stored key, its fingerprint, its Hamming distance
to the query), how one is made without a Python-level call, the order of matches, and
:func:`match_lists`, which makes a batch's lists of them."""

from __future__ import annotations

from collections import deque
from functools import partial
from operator import itemgetter
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

__all__ = ["MATCH_ORDER", "Match", "match_lists", "new_match"]

#: Sort key of matches: (distance, key).
MATCH_ORDER = itemgetter(2, 0)


class Match(NamedTuple):
    """One result of a query: a stored key, its fingerprint (int in [0, 2^64)) and its Hamming
    distance to the query (int, bits).

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
