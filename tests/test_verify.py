"""The one candidate-verification step (permindex.index.verify): both strategies -- Python
ints for one query, numpy for a batch -- keep exactly the live candidates within k, and the
batch strategy reports a match only from the first table whose prefix it shares."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from permindex.index.keystore import encode_keys
from permindex.index.permutation import Design
from permindex.index.rows import RowStore
from permindex.index.verify import verify


def _rows(fps: np.ndarray, dead: list[int]) -> RowStore:
    rows = RowStore(threading.RLock())
    rows.append_many(encode_keys([f"k{i}" for i in range(fps.size)]), fps, None)
    if dead:
        rows.kill(np.array(dead, dtype=np.int64))
    return rows


@pytest.mark.parametrize("k", [0, 1, 3, 7])
def test_both_strategies_keep_the_live_candidates_within_k(k: int) -> None:
    rng = np.random.default_rng(k)
    query = int(rng.integers(0, 2**63))
    flips = rng.integers(0, 10, 300)
    fps = np.array(
        [query ^ sum(1 << int(b) for b in rng.choice(64, f, replace=False)) for f in flips],
        dtype=np.uint64,
    )
    dead = [1, 2, 50]
    rows = _rows(fps, dead)
    candidates = [*range(300), 5, 5, 7]  # repeats: a row found by several tables
    expected = {
        r: (int(fps[r]), int(flips[r])) for r in range(300) if flips[r] <= k and r not in dead
    }
    assert verify(query, candidates, k, rows) == expected
    rows_array = np.array(candidates, dtype=np.uint32)
    queries = np.full(rows_array.size, query, dtype=np.uint64)
    selected, distances = verify(queries, rows_array, k, rows)
    got = [(int(rows_array[i]), int(d)) for i, d in zip(selected, distances, strict=True)]
    repeated: list[tuple[int, int]] = [(r, expected[r][1]) for r in (5, 5, 7) if r in expected]
    assert sorted(got) == sorted([(r, d) for r, (_, d) in expected.items()] + repeated)


def test_batch_strategy_reports_a_match_from_the_first_shared_table() -> None:
    perms = Design(4, 1).permutations
    masks = [np.uint64(p.leading_mask) for p in perms]
    query = 0x0123_4567_89AB_CDEF
    # Row 0 shares every prefix; row 1 differs in the first block only; row 2 in every block.
    fps = np.array([query ^ 1, query ^ (1 << 63), query ^ 0x8000_8000_8000_8000], np.uint64)
    rows = _rows(fps, [])
    candidates = np.array([0, 1, 2], dtype=np.uint32)
    queries = np.full(3, query, dtype=np.uint64)
    table_of = {}
    for t in range(4):
        selected, _ = verify(queries, candidates, 4, rows, masks[t], masks[:t])
        for i in selected.tolist():
            assert i not in table_of, "a match reported by two tables"
            table_of[i] = t
    first = next(t for t in range(4) if (int(fps[0]) ^ query) & perms[t].leading_mask == 0)
    assert table_of[0] == first
    assert 1 in table_of and table_of[1] != 0  # not the table of the differing block
    assert 2 not in table_of  # shares no prefix: no table reports it
    selected, distances = verify(queries, candidates, 4, rows)  # no masks: distance and liveness
    assert selected.tolist() == [0, 1, 2] and distances.tolist() == [1, 1, 4]
