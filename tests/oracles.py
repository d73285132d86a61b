"""Independent references the compiled kernels are checked against: brute force for lookups and
joins, a plain union-find for the components, the ``xxhash`` package for XXH3. Each is written
from the definition, not from a kernel's method, and is as slow as that makes it (O(n) per
query, O(n^2) for all pairs): the tests keep their inputs small.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
from numpy.typing import NDArray
from xxhash import xxh3_64_intdigest

from permindex import Match

#: Rows of the distance matrix :func:`brute_force_pairs` computes at once.
_PAIR_BLOCK = 1024


def brute_force_matches(stored: Mapping[str, int], query: int, k: int) -> list[Match]:
    """Every stored (key, fingerprint) within Hamming distance ``k`` of ``query`` as a
    :class:`Match`, sorted by (distance, key): what ``Index.query`` answers. O(n)."""
    found = [
        Match(key, fp, (fp ^ query).bit_count())
        for key, fp in stored.items()
        if (fp ^ query).bit_count() <= k
    ]
    return sorted(found, key=lambda m: (m.distance, m.key))


def brute_force_query(fingerprints: NDArray[np.uint64], query: int, k: int) -> NDArray[np.intp]:
    """The positions (ascending) of the elements of the (n,) uint64 ``fingerprints`` within
    Hamming distance ``k`` of ``query``. O(n)."""
    fps = np.asarray(fingerprints, dtype=np.uint64)
    return np.flatnonzero(np.bitwise_count(fps ^ np.uint64(query)) <= k)


def brute_force_pairs(
    fingerprints: NDArray[np.uint64], k: int
) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.uint8]]:
    """Every (i, j), i < j, whose elements of the (n,) uint64 ``fingerprints`` are within
    Hamming distance ``k``: three (m,) arrays (i, j, distance) ordered by i then j. O(n^2)
    time, O(n * 1024) memory."""
    fps = np.asarray(fingerprints, dtype=np.uint64)
    out_i: list[NDArray[np.intp]] = []
    out_j: list[NDArray[np.intp]] = []
    out_d: list[NDArray[np.uint8]] = []
    for start in range(0, fps.size, _PAIR_BLOCK):
        block = fps[start : start + _PAIR_BLOCK]
        dist = np.bitwise_count(block[:, None] ^ fps[None, :])
        i, j = np.nonzero(dist <= k)
        i = i + start
        upper = i < j
        out_i.append(i[upper])
        out_j.append(j[upper])
        out_d.append(dist[i[upper] - start, j[upper]])
    if not out_i:
        empty = np.empty(0, dtype=np.intp)
        return empty, empty.copy(), np.empty(0, dtype=np.uint8)
    return np.concatenate(out_i), np.concatenate(out_j), np.concatenate(out_d)


def union_find_components(n: int, a: Sequence[int], b: Sequence[int]) -> list[int]:
    """Connected components of the graph on 0..n-1 with edges (a[e], b[e]): each position's
    smallest position of its component, by a plain union-find in Python. O((n + e) log n)."""
    parent = list(range(n))

    def root(x: int) -> int:
        while parent[x] != x:
            x = parent[x]
        return x

    for x, y in zip(a, b, strict=True):
        rx, ry = root(x), root(y)
        if rx != ry:
            parent[max(rx, ry)] = min(rx, ry)
    return [root(x) for x in range(n)]


def xxh3_of_keys(keys: Sequence[str]) -> list[int]:
    """XXH3-64 (seed 0) of each key's UTF-8 bytes, by the ``xxhash`` package."""
    return [xxh3_64_intdigest(key.encode("utf-8")) for key in keys]
