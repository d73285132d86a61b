"""Independent references the compiled kernels are checked against, each written from its
definition, not from a kernel's method, and as slow as that makes it (the tests keep their inputs
small):

- lookups and joins: brute force (O(n) per query, O(n^2) for all pairs), a plain union-find for
  the components, the ``xxhash`` package for XXH3 of keys;
- text and near-duplicates: SimHash and shingle hashes in plain Python (with the ``xxhash``
  package's XXH3-64 for each shingle), MinHash signatures in Python integers, exact Jaccard
  similarities and intersections with Python sets. ``tokenizer="auto"`` takes the package's
  choice rule (:func:`permindex.text.fingerprint.no_space_share`, a Python function that the
  kernels never re-implement: they are told the tokenizer of each text).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np
import xxhash
from numpy.typing import NDArray
from xxhash import xxh3_64_intdigest

from permindex import Match
from permindex.text.fingerprint import AUTO_CHARS_SHARE, no_space_share

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


__all__ = [
    "brute_force_matches",
    "brute_force_pairs",
    "brute_force_query",
    "intersection_size",
    "jaccard",
    "minhash_signature",
    "shingle_hashes",
    "shingle_strings",
    "simhash",
    "union_find_components",
    "vote",
    "xxh3_of_keys",
]

_BITS = 64
_MASK = (1 << 64) - 1


def _resolve(text: str, tokenizer: str) -> str:
    """``"words"`` or ``"chars"``; ``"auto"``: chars when at least 30 % of the non-whitespace
    characters of ``text`` are of a script written without spaces."""
    if tokenizer == "auto":
        return "chars" if no_space_share(text) >= AUTO_CHARS_SHARE else "words"
    return tokenizer


def _tokens(text: str, tokenizer: str) -> list[str]:
    """``text.lower().split()`` (words), or each non-whitespace character of ``text.lower()``
    (chars)."""
    words = text.lower().split()
    if _resolve(text, tokenizer) == "chars":
        return [c for word in words for c in word]
    return words


def shingle_strings(text: str, shingle_size: int = 3, tokenizer: str = "words") -> list[str]:
    """Every run of ``shingle_size`` consecutive tokens, joined by one space (words) or by
    nothing (chars), in order, repeats included."""
    tokens = _tokens(text, tokenizer)
    joiner = " " if _resolve(text, tokenizer) == "words" else ""
    return [
        joiner.join(tokens[i : i + shingle_size]) for i in range(len(tokens) - shingle_size + 1)
    ]


def shingle_hashes(text: str, shingle_size: int = 3, tokenizer: str = "words") -> list[int]:
    """XXH3-64 (seed 0, the ``xxhash`` package) of the UTF-8 bytes of each shingle, in order.
    Raises UnicodeEncodeError where a shingle holds a lone surrogate."""
    return [
        xxhash.xxh3_64_intdigest(s.encode("utf-8"))
        for s in shingle_strings(text, shingle_size, tokenizer)
    ]


def vote(hashes: Sequence[int]) -> int:
    """Charikar's vote: counter i gets +1 for each hash with bit i set and -1 for each without;
    bit i of the result is 1 where counter i > 0."""
    counters = [0] * _BITS
    for h in hashes:
        for bit in range(_BITS):
            counters[bit] += 1 if (h >> bit) & 1 else -1
    return sum(1 << bit for bit in range(_BITS) if counters[bit] > 0)


def simhash(
    text: str,
    shingle_size: int = 3,
    bits: int = 64,
    tokenizer: str = "words",
    min_words: int = 0,
    vote_: str = "multiset",
) -> int | None:
    """The SimHash of ``text`` by the definition (Charikar 2002, section 3): the vote of its
    shingle hashes (each occurrence, or each distinct hash once with ``vote_="set"``); None
    when it has fewer than ``shingle_size`` or ``min_words`` tokens; bit 63 cleared with
    ``bits=63``. Raises UnicodeEncodeError where a shingle holds a lone surrogate."""
    if len(_tokens(text, tokenizer)) < min_words:
        return None
    hashes = shingle_hashes(text, shingle_size, tokenizer)
    if not hashes:
        return None
    fingerprint = vote(sorted(set(hashes)) if vote_ == "set" else hashes)
    return fingerprint & ~(1 << 63) if bits == 63 else fingerprint


def minhash_signature(hashes: Iterable[int], a: Sequence[int], b: Sequence[int]) -> list[int]:
    """For each permutation p: the smallest ``((a[p] * x + b[p]) mod 2^64) >> 32`` over the
    shingle hashes x, in Python integers; 2^32 - 1 for no hash."""
    values = list(hashes)
    return [
        min(((ap * x + bp) & _MASK) >> 32 for x in values) if values else (1 << 32) - 1
        for ap, bp in zip(a, b, strict=True)
    ]


def intersection_size(left: Iterable[int], right: Iterable[int]) -> int:
    """|set(left) & set(right)|."""
    return len(set(left) & set(right))


def jaccard(left: Iterable[object], right: Iterable[object]) -> float:
    """|A & B| / |A | B| of the two sets (0.0 for two empty sets)."""
    a, b = set(left), set(right)
    union = len(a | b)
    return len(a & b) / union if union else 0.0
