"""Reference answers and checks shared by the tests of the index core (test_index, test_table,
test_runs, test_query, ...): brute force over the exported contents, clustered fingerprints."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from oracles import brute_force_pairs, brute_force_query

from permindex import Index, Match

TOP = (1 << 64) - 1


def expected_query(keys_: list[str], fps: np.ndarray, q: int, k: int) -> list[Match]:
    found = brute_force_query(fps, q, k).tolist()
    values = fps.tolist()
    out = [Match(keys_[i], values[i], bin(values[i] ^ q).count("1")) for i in found]
    return sorted(out, key=lambda m: (m.distance, m.key))


def expected_pairs(keys_: list[str], fps: np.ndarray, k: int) -> list[tuple[str, str, int]]:
    i, j, d = brute_force_pairs(fps, k)
    out = []
    for a, b, dist in zip(i.tolist(), j.tolist(), d.tolist(), strict=True):
        ka, kb = keys_[a], keys_[b]
        out.append((ka, kb, dist) if ka < kb else (kb, ka, dist))
    return sorted(out)


def assert_queries_match_brute_force(
    index: Index, queries: Iterable[int], k: int | None = None
) -> None:
    keys_, fps = index.export()
    qs = list(queries)
    kk = index.k if k is None else k
    singles = [index.query(q, k) for q in qs]
    for q, got in zip(qs, singles, strict=True):
        assert got == expected_query(keys_, fps, q, kk), f"query {q:#x} k={kk}"
    assert index.query_many(np.array(qs, dtype=np.uint64), k) == singles
    assert index.query_many(qs, k) == singles


def snapshot(index: Index) -> tuple[list[str], list[int], int]:
    keys_, fps = index.export()
    return keys_, fps.tolist(), len(index)


def clustered(rng: np.random.Generator, n: int, centers: int, max_flips: int) -> np.ndarray:
    """n fingerprints around a few centers (0..max_flips flipped bits), some exact copies."""
    base = rng.integers(0, TOP, centers, dtype=np.uint64, endpoint=True)
    out = base[rng.integers(0, centers, n)]
    for i in range(n):
        for bit in rng.choice(64, int(rng.integers(0, max_flips + 1)), replace=False):
            out[i] ^= np.uint64(1) << np.uint64(bit)
    return out


def export_lists(index: Index) -> tuple[list[str], list[int]]:
    keys_, fps = index.export()
    return keys_, fps.tolist()
