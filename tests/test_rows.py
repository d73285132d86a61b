"""The row store (permindex.index.rows): appending rows with their keys, tombstones and the
liveness mask, inline growth, compaction renumbering rows (and telling the tables), the
MAX_ROWS limit, the fuzzy slices of export_slices, and _check catching a broken invariant.
Growth ahead in a background thread is tested in test_growth.py."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from permindex.errors import LimitExceededError
from permindex.index.keys.store import encode_keys, hash_key
from permindex.index.rows import RowStore, export_slices
from permindex.index.tables.table import TableCheckError
from permindex.index.tuning import DEFAULT_TUNING, Tuning


def _store(n: int, compaction_min: int = 0, tuning: Tuning = DEFAULT_TUNING) -> RowStore:
    rows = RowStore(threading.RLock(), compaction_min, tuning)
    keys = [f"k{i}" for i in range(n)]
    rows.append_many(encode_keys(keys), np.arange(n, dtype=np.uint64) * np.uint64(3), None)
    return rows


def test_append_kill_and_liveness() -> None:
    rows = _store(10)
    assert rows.n == 10 and rows.capacity >= 10 and rows.live is None
    assert rows.fps[:10].tolist() == [3 * i for i in range(10)]
    assert rows.live_rows().tolist() == list(range(10))
    assert rows.live_mask(2, 5).tolist() == [True] * 3
    rows._check()
    rows.kill(np.array([3], dtype=np.int64))
    rows.keys.unlink(3)
    assert rows.live is not None and rows.live_view is not None
    assert rows.live_rows().tolist() == [0, 1, 2, *range(4, 10)]
    assert rows.live_mask(2, 5).tolist() == [True, False, True]
    data = b"k3"
    rows.reserve(1)
    row = rows.append(data, hash_key(data), 99, moved_from=3)
    assert row == 10 and rows.fps_view[row] == 99 and rows.live_view[row]
    assert rows.keys.find(data, hash_key(data)) == 10
    assert rows.nbytes() == rows.fps.nbytes + rows.live.nbytes
    rows._check()


def test_reserve_grows_inline_and_keeps_the_rows() -> None:
    rows = _store(5)
    rows.kill(np.array([1], dtype=np.int64))
    rows.keys.unlink(1)
    before = rows.fps[:5].copy()
    rows.reserve(5000)
    assert rows.capacity >= 5005
    assert np.array_equal(rows.fps[:5], before)
    assert rows.live is not None and rows.live.size == rows.capacity
    assert rows.live[:5].tolist() == [True, False, True, True, True]
    assert rows.fps_view.nbytes == rows.fps.nbytes


def test_compaction_renumbers_rows_and_calls_on_compact() -> None:
    rows = _store(8, compaction_min=2)
    remaps: list[list[int]] = []
    rows.on_compact = lambda remap: remaps.append(remap.tolist())
    for row in (1, 2, 5):
        rows.kill(np.array([row], dtype=np.int64))
        rows.keys.unlink(row)
    assert not rows.compaction_due()  # 3 dead rows, 5 live: not due, but may be compacted
    rows.compact()
    assert remaps == [[0, -1, -1, 1, 2, -1, 3, 4]]
    assert rows.n == 5 and rows.live is None and rows.compactions == 1
    assert rows.fps[:5].tolist() == [0, 9, 12, 18, 21]
    assert [rows.keys.key(r) for r in range(5)] == ["k0", "k3", "k4", "k6", "k7"]
    rows._check()


def test_compaction_is_due_when_dead_rows_outnumber_live_ones() -> None:
    rows = _store(8, compaction_min=2)
    for row in range(4):
        rows.kill(np.array([row], dtype=np.int64))
        rows.keys.unlink(row)
        assert not rows.compaction_due()
    rows.kill(np.array([4], dtype=np.int64))
    rows.keys.unlink(4)
    assert rows.compaction_due()  # 5 dead > max(2, 3 live)


def test_max_rows_compacts_first_then_refuses() -> None:
    rows = _store(10, tuning=Tuning(row_limit=12))
    compacted: list[int] = []
    rows.on_compact = lambda remap: compacted.append(int(remap.size))
    for row in range(6):
        rows.kill(np.array([row], dtype=np.int64))
        rows.keys.unlink(row)
    rows.reserve(6)  # 10 + 6 > 12: compacted to 4 rows, then room for 6
    assert compacted == [10] and rows.n == 4
    with pytest.raises(LimitExceededError):
        rows.reserve(9)


def test_export_slices_reads_the_live_rows_in_slices() -> None:
    rows = _store(10)
    for row in (0, 4):
        rows.kill(np.array([row], dtype=np.int64))
        rows.keys.unlink(row)
    parts = export_slices(rows, rows.keys, 3)
    assert parts is not None and len(parts) == 4
    fps = np.concatenate([p[2] for p in parts]).tolist()
    assert fps == [3 * i for i in range(10) if i not in (0, 4)]
    blob = b"".join(bytes(p[1]) for p in parts)
    assert blob.split(b"\x00")[:-1] == [f"k{i}".encode() for i in range(10) if i not in (0, 4)]
    assert export_slices(RowStore(threading.RLock()), rows.keys, 3) == []


def test_check_names_a_broken_invariant() -> None:
    rows = _store(4)
    rows.kill(np.array([2], dtype=np.int64))  # dead, yet the key store still links it
    with pytest.raises(TableCheckError, match="live rows are not exactly"):
        rows._check()


def test_of_fingerprints_for_tables_alone() -> None:
    fps = np.array([5, 6, 7], dtype=np.uint64)
    rows = RowStore.of_fingerprints(fps)
    assert rows.n == 3 and rows.live is None and rows.fps_view[2] == 7
