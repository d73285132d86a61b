"""A batch's Match lists are left out of the cycle collector (issue 40: what the collector
switch bought, without touching the host's collector): the lists and Match objects that
``Index.query_many`` returns are untracked, equal to brute force, and the host's collector
settings are as they were."""

from __future__ import annotations

import gc

import numpy as np
import pytest
from oracles import brute_force_query

import permindex

pytestmark = pytest.mark.filterwarnings("error")


def _index(n: int, seed: int) -> tuple[permindex.Index, np.ndarray, list[str]]:
    rng = np.random.default_rng(seed)
    fps = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    keys = [f"k{i}" for i in range(n)]
    return permindex.Index.from_arrays(keys, fps, k=3), fps, keys


@pytest.mark.parametrize("batch", [600, 1_500, 4_097])
def test_batch_results_are_untracked_and_exact(batch: int) -> None:
    index, fps, keys = _index(20_000, batch)
    rng = np.random.default_rng(batch)
    flips = np.uint64(1) << rng.integers(0, 64, batch).astype(np.uint64)
    queries = fps[rng.integers(0, fps.size, batch)] ^ flips
    settings = (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count())
    results = index.query_many(queries)
    assert (gc.isenabled(), gc.get_threshold(), gc.get_freeze_count()) == settings
    assert isinstance(results, list) and gc.is_tracked(results)
    assert not any(map(gc.is_tracked, results))
    assert not any(gc.is_tracked(m) for r in results for m in r)
    assert sum(map(len, results)) >= batch  # each query is one bit from a stored fingerprint
    for query, got in zip(queries.tolist(), results, strict=True):
        rows = brute_force_query(fps, query, 3).tolist()
        expected = sorted((keys[r], int(fps[r]), (int(fps[r]) ^ query).bit_count()) for r in rows)
        assert sorted(map(tuple, got)) == expected
        assert [(m.distance, m.key) for m in got] == sorted((m.distance, m.key) for m in got)
    # the lists stay ordinary lists: a caller may change them
    results[0].append(permindex.Match("x", 1, 0))
    assert results[0][-1].key == "x"
    del results
    gc.collect()
