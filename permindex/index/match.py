"""The result of a lookup: :class:`Match` (a stored key, its fingerprint, its Hamming distance
to the query), how one is made without a Python-level call, and the order of matches."""

from __future__ import annotations

from functools import partial
from operator import itemgetter
from typing import NamedTuple

__all__ = ["MATCH_ORDER", "Match", "new_match"]

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
