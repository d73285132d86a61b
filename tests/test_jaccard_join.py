"""The Jaccard mode's self-join kernel (:func:`permindex.near.jaccard.self_join`) against brute
force: for sets given with arbitrary band keys (few values, so buckets are crowded and pairs
agree in several bands), the pairs kept are exactly those that share a band and have J >= the
threshold (Python sets, exact fractions), each once, with the exact distance; the counts of
candidates and merges are those of the definition; the chunking does not change anything."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from permindex.near.jaccard import SCALE, ShingleSets, self_join, verify


def brute_force(
    sets: list[set[int]], keys: np.ndarray, threshold: float
) -> tuple[dict[tuple[int, int], int], int, int]:
    """(pair -> distance for the pairs kept, candidates, candidates whose sizes allow the
    threshold)."""
    t = Fraction(str(threshold))
    kept: dict[tuple[int, int], int] = {}
    candidates = merged = 0
    for u in range(len(sets)):
        for v in range(u + 1, len(sets)):
            if not (keys[u] == keys[v]).any():
                continue
            candidates += 1
            a, b = sets[u], sets[v]
            if Fraction(min(len(a), len(b)), max(len(a), len(b))) < t:
                continue
            merged += 1
            j = Fraction(len(a & b), len(a | b))
            if j >= t:
                kept[(u, v)] = math.floor((1 - j) * SCALE + Fraction(1, 2))
    return kept, candidates, merged


def family(draw: st.DrawFn) -> list[set[int]]:
    """Sets around a few templates (small edits, so that many pairs lie near any threshold),
    plus unrelated ones; all distinct."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    sets: list[set[int]] = []
    for _ in range(draw(st.integers(1, 4))):
        template = set(rng.integers(0, 2**64, size=int(rng.integers(5, 60)), dtype=np.uint64))
        for _ in range(int(rng.integers(2, 12))):
            s = set(template)
            for _ in range(int(rng.integers(0, 6))):
                if s and rng.random() < 0.5:
                    s.discard(sorted(s)[int(rng.integers(0, len(s)))])
                else:
                    s.add(np.uint64(rng.integers(0, 2**64, dtype=np.uint64)))
            sets.append({int(x) for x in s})
    for _ in range(int(rng.integers(0, 5))):
        sets.append({int(x) for x in rng.integers(0, 2**64, size=20, dtype=np.uint64)})
    distinct = {frozenset(s) for s in sets if s}
    return [set(s) for s in sorted(distinct, key=sorted)]


@settings(max_examples=60)
@given(
    st.composite(family)(),
    st.integers(0, 2**32 - 1),
    st.sampled_from([0.5, 0.7, 0.8, 0.9, 1.0]),
    st.sampled_from([1, 3, 17, 1 << 17]),
)
def test_self_join_against_brute_force(
    sets: list[set[int]], seed: int, threshold: float, batch: int
) -> None:
    rng = np.random.default_rng(seed)
    bands = int(rng.integers(1, 6))
    keys = rng.integers(0, 3, size=(len(sets), bands), dtype=np.uint64)
    data = ShingleSets.of([np.array(sorted(s), dtype=np.uint64) for s in sets])
    # the sets stored in another order: representative maps set x to its row
    order = rng.permutation(len(sets)).astype(np.int64)
    stored = data.take(order)
    representative = np.argsort(order).astype(np.int64)
    (u, v, d), candidates, merged = self_join(stored, representative, keys, threshold, batch)
    got = {(a, b): c for a, b, c in zip(u.tolist(), v.tolist(), d.tolist(), strict=True)}
    assert len(got) == u.size and all(a < b for a, b in got)
    expected, want_candidates, want_merged = brute_force(sets, keys, threshold)
    assert got == expected
    assert (candidates, merged) == (want_candidates, want_merged)
    # verify(), the --against check, agrees on every candidate
    pairs = [(a, b) for a in range(len(sets)) for b in range(a + 1, len(sets))]
    if pairs:
        left = representative[np.array([a for a, _ in pairs], dtype=np.int64)]
        right = representative[np.array([b for _, b in pairs], dtype=np.int64)]
        found = verify(stored, left, right, threshold)
        exact = brute_force(sets, np.zeros((len(sets), 1), dtype=np.uint64), threshold)[0]
        kept = [pair for pair, ok in zip(pairs, found.kept.tolist(), strict=True) if ok]
        assert kept == sorted(exact)
        assert found.distance.tolist() == [exact[pair] for pair in kept]
