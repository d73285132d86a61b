"""Writes, tables and compaction: a row added, replaced (its old row a tombstone), left alone
when its value is unchanged, discarded; batches and compact sections with repeated keys
(permindex.index.writes); the row store (tombstones and the liveness mask, inline growth,
compaction renumbering rows and telling the tables, the MAX_ROWS limit, export_slices); the
tables' runs (row parts, shifting, built from unsorted rows, merged across 2^24 rows, a large
batch's runs built in threads, merges outside the lock with concurrent writes and compactions,
merge_all_runs); every step checked by the parts' _check and by lookups against brute force.
Growth ahead in a background thread is in test_growth.py."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from conftest import IndexParts
from index_checks import TOP, assert_queries_match_brute_force, clustered, export_lists

import permindex.index.tables.table as table_module
from permindex import Index, InvalidArgumentError
from permindex.errors import LimitExceededError
from permindex.index.keys.store import encode_keys
from permindex.index.rows import RowStore, export_slices
from permindex.index.search.lookup import Lookups
from permindex.index.table_set import TableSet
from permindex.index.tables.permutation import Design, directory_bits
from permindex.index.tables.table import RowSnapshot, Run, Table, TableCheckError, _split_rows
from permindex.index.tuning import DEFAULT_TUNING, Tuning
from permindex.index.writes import (
    add_batch,
    add_locked,
    add_section,
    discard_locked,
)

# The writes (permindex.index.writes) on a row store and its tables built by hand: a row added,
# replaced (its old row a tombstone), left alone when its value is unchanged, discarded; batches
# and compact sections with repeated keys; every step checked by the parts' _check and by a single
# query of the kernels over those tables.


def _parts(compaction_min: int = 100) -> tuple[RowStore, TableSet]:
    rows = RowStore(threading.RLock(), compaction_min)
    changes = rows.changes  # shared by the rows and the tables, as an Index shares them
    tables = [Table(p, memtable_limit=4, changes=changes) for p in Design(4, 1).permutations]
    return rows, TableSet(tables, rows)


def _check(rows: RowStore, runs: TableSet) -> None:
    rows._check()
    runs._check()


def _found(rows: RowStore, runs: TableSet, query: int, k: int = 3) -> dict[str, int]:
    design = Design(4, 1)
    searched = {kk: design.tables_for(kk) for kk in range(k + 1)}
    lookups = Lookups(list(runs.tables), rows, searched, rows.changes)
    return {match.key: match.distance for match in lookups.one(query, k)}


def test_add_replace_unchanged_and_discard() -> None:
    rows, runs = _parts()
    data = b"doc"
    with rows.lock:
        assert add_locked(rows, runs, data, 0b1011)
        assert not add_locked(rows, runs, data, 0b1011)  # unchanged
        assert rows.n == 1
        assert not add_locked(rows, runs, data, 0b1111)  # replaced
        assert rows.n == 2 and rows.live is not None and not rows.live[0]
        _check(rows, runs)
        assert _found(rows, runs, 0b1011) == {"doc": 1}
        assert discard_locked(rows, data) and not discard_locked(rows, data)
        assert _found(rows, runs, 0b1011) == {}
        _check(rows, runs)


def test_batches_keep_the_last_value_of_a_repeated_key() -> None:
    rows, runs = _parts(compaction_min=0)
    new = add_batch(rows, runs, ["a", "b", "a"], [1, 2, 3])
    assert new.tolist() == [True, True, True]
    assert _found(rows, runs, 3, k=0) == {"a": 0}
    new = add_batch(rows, runs, ["b", "c"], np.array([2, 7], dtype=np.uint64))
    assert new.tolist() == [False, True]
    with rows.lock:
        _check(rows, runs)
    with pytest.raises(InvalidArgumentError):
        add_batch(rows, runs, ["x", ""], [1, 2])
    assert len(rows.keys) == 3


def test_sections_store_or_hand_back_the_keys() -> None:
    rows, runs = _parts()
    assert (
        add_section(rows, runs, np.array([1, 2]), b"a\x00bc\x00", np.array([5, 6], np.uint64))
        is None
    )
    assert _found(rows, runs, 6, k=0) == {"bc": 0}
    repeated = add_section(rows, runs, np.array([1, 1]), b"x\x00x\x00", np.array([1, 2], np.uint64))
    assert repeated == ["x", "x"] and len(rows.keys) == 2  # nothing stored: the exact path
    assert add_section(rows, runs, np.zeros(0, np.int64), b"", np.zeros(0, np.uint64)) is None
    with pytest.raises(InvalidArgumentError, match="non-empty"):
        add_section(rows, runs, np.zeros(0, np.int64), b"a\x00", np.zeros(0, np.uint64))
    with rows.lock:
        _check(rows, runs)


# One table of the permutation index (permindex.index.tables.table): runs (row parts, shifting,
# building from unsorted rows, merging across 2^24); the table reads the index's rows through a
# RowSnapshot. Its lookups are the kernels' (tests/test_lookups.py).


def test_runs_with_rows_above_2_to_the_24() -> None:
    """Row numbers are kept as 16 + 8 bits below 2^24 and 16 + 16 bits above: a table whose rows
    start at 2^24 - 50 (a lazily zeroed fingerprint array, so no real memory) merges two runs
    into one of wide row parts that holds every row, sorted by prefix (its _check)."""
    first = (1 << 24) - 50
    rng = np.random.default_rng(24)
    fps = np.zeros(first + 400, dtype=np.uint64)
    fps[first:] = clustered(rng, 400, 5, 3)
    table = Table(Design(4, 1).permutations[2], memtable_limit=8)
    rows = RowSnapshot(fps, None, first + 400)
    table.add_many(first, 300, rows, None)
    table.add_many(first + 300, 100, rows, None)  # a second run, merged into the first
    assert table.run_sizes == (400,)
    run = table.runs[0]
    assert run.high.dtype == np.uint16 and int(run.rows.max()) == first + 399
    assert sorted(run.rows.tolist()) == list(range(first, first + 400))
    table._check(rows)
    narrow = Run(np.array([0, 7, (1 << 24) - 1], dtype=np.uint32), np.zeros(3, np.uint16),
                 np.zeros(3, np.uint32), 1, 16)  # fmt: skip
    assert narrow.high.dtype == np.uint8 and narrow.rows.tolist() == [0, 7, (1 << 24) - 1]


@pytest.mark.parametrize("dtype", [np.uint32, np.intp])
@pytest.mark.parametrize("top", [5, (1 << 24) - 1, 1 << 24, (1 << 32) - 1])
def test_run_row_parts_and_shift(dtype: type, top: int) -> None:
    """A run keeps each row as 16 + 8 bits below 2^24 and 16 + 16 bits from 2^24 on, whether its
    rows come as uint32 or intp, contiguous or strided; shifting a run adds to every row and
    widens the parts when it crosses 2^24."""
    rng = np.random.default_rng(top % 1000)
    rows: np.ndarray = np.unique(np.r_[rng.integers(0, top + 1, 500), 0, top]).astype(dtype)
    rng.shuffle(rows)
    for source in (rows, rows[::2]):
        low, high = _split_rows(source)
        assert low.dtype == np.uint16
        assert high.dtype == (np.uint8 if int(source.max()) < 1 << 24 else np.uint16)
        joined = (high.astype(np.int64) << 16) | low
        assert joined.tolist() == source.astype(np.int64).tolist()
    filters = rng.integers(0, 1 << 16, rows.size, dtype=np.uint16)
    run = Run(rows, filters, np.zeros(3, np.uint32), 1, 16)
    assert run.rows.tolist() == rows.astype(np.int64).tolist()
    assert run.shifted(0) is run
    if top < (1 << 32) - 1 - 1000:
        moved = run.shifted(1000)
        assert moved.rows.tolist() == (rows.astype(np.int64) + 1000).tolist()
        assert moved.high.dtype == (np.uint8 if top + 1000 < 1 << 24 else np.uint16)
        assert moved.filters is run.filters and moved.offsets is run.offsets


@pytest.mark.parametrize("size", [1, 40, 3000, 70_000])
def test_run_build_is_a_stable_sort_by_the_directory_bits(size: int) -> None:
    """The compiled build of a run (a counting sort) equals numpy's stable argsort of the top r
    permuted bits, its filters and directory those computed from the sorted values; the run of
    consecutive rows from ``first_row`` (rows=None: no gather) equals the run of the same rows
    given explicitly, on both sides of 2^24, for 16-bit and wider prefixes (a directory
    finer than the prefix, and coarser)."""
    rng = np.random.default_rng(size)
    values = rng.integers(0, 2**64 - 1, size, dtype=np.uint64, endpoint=True)
    values[: size // 3] = values[0]  # equal values: the order among them is the input's
    for pair in ((4, 1), (6, 3), (8, 1)):
        perm = Design(*pair).permutations[1]
        bits = directory_bits(size, perm.prefix_bits)
        top = perm.permute_array(values) >> np.uint64(64 - bits)
        order = np.argsort(top, kind="stable")
        for first in (0, 17, (1 << 24) - 1000):
            rows = np.arange(first, first + values.size, dtype=np.uint32)
            made = Run.build(values, None, perm, first_row=first)
            given = Run.build(values, rows, perm)
            assert made.rows.tolist() == given.rows.tolist() == (order + first).tolist()
            assert made.high.dtype == given.high.dtype
            assert made.high.dtype == (np.uint8 if first + size <= 1 << 24 else np.uint16)
            assert made.bits == given.bits == bits
            assert np.array_equal(made.filters, perm.filter_array(values[order], bits))
            assert np.array_equal(made.filters, given.filters)
            expected = np.searchsorted(top[order], np.arange((1 << bits) + 1, dtype=np.uint64))
            assert np.array_equal(made.offsets, expected)
            assert np.array_equal(made.offsets, given.offsets)


# The row store (permindex.index.rows): appending rows with their keys, tombstones and the
# liveness mask, inline growth, compaction renumbering rows (and telling the tables), the MAX_ROWS
# limit, the fuzzy slices of export_slices, and _check catching a broken invariant. Growth ahead
# in a background thread is tested in test_growth.py.


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
    row = rows.append(data, 99, moved_from=3)
    assert row == 10 and rows.fps_view[row] == 99 and rows.live_view[row]
    assert rows.keys.find(data) == 10
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


# The tables' runs (permindex.index.table_set): a large batch's runs built in threads (also while
# the keys are checked), merges outside the lock (with concurrent writes and compactions), and
# merge_all_runs; every index checked with _check and against brute force.


def test_large_batches_build_the_tables_in_threads(prepare_run_threads: list[str]) -> None:
    """A batch of at least Tuning.parallel_min fingerprints has its tables' runs built by a pool
    of Tuning.build_threads threads; the index is the same as one built in one thread (invariants,
    every query equal to brute force)."""
    threads = prepare_run_threads
    rng = np.random.default_rng(21)
    fps = np.concatenate([rng.integers(0, TOP, 3000, dtype=np.uint64), clustered(rng, 200, 4, 3)])
    names = [f"b{i}" for i in range(fps.size)]
    tuning = Tuning(parallel_min=1000, build_threads=3)
    index = Index(design=(5, 2), memtable_limit=64, tuning=tuning)
    index.add_many(names, fps)
    assert len(threads) == 10 and all(name.startswith("permindex-build") for name in threads)
    threads.clear()
    index.add_many([f"small{i}" for i in range(500)], fps[:500] ^ np.uint64(1))
    assert len(threads) == 10 and not any(name.startswith("permindex-build") for name in threads)
    index._check()
    assert_queries_match_brute_force(index, [*fps[::40].tolist(), *(fps[:500:25] ^ 1).tolist()])


def test_large_batch_tables_built_while_keys_are_checked(prepare_run_threads: list[str]) -> None:
    """With a fingerprint array, a large batch's tables are built in other threads while the
    keys are checked and hashed: a bad key is still refused with its position (nothing stored,
    no build thread left running), and repeated keys still keep their last fingerprint (the
    runs built for the whole batch are dropped)."""
    threads = prepare_run_threads
    rng = np.random.default_rng(22)
    fps = rng.integers(0, TOP, 3000, dtype=np.uint64)
    index = Index(tuning=Tuning(parallel_min=1000))
    index.add("kept", 5)
    names: list[Any] = [f"a{i}" for i in range(3000)]
    names[1500] = ""
    with pytest.raises(InvalidArgumentError, match="1500"):
        index.add_many(names, fps)
    # The runs were started before the keys were checked, in build threads (those not yet
    # started when the key was refused are cancelled).
    assert 1 <= len(threads) <= 4
    assert all(name.startswith("permindex-build") for name in threads)
    assert index.export()[0] == ["kept"]
    assert not [t for t in threading.enumerate() if t.name.startswith("permindex-build")]
    names[1500] = "a0"  # repeated: the later fingerprint wins
    new = index.add_many(names, fps)
    assert new.size == 3000 and bool(new.all())
    assert index.get("a0") == int(fps[1500])
    index._check()
    expected = {name: int(value) for name, value in zip(names, fps.tolist(), strict=True)}
    expected["kept"] = 5
    assert dict(zip(*export_lists(index), strict=True)) == expected
    assert_queries_match_brute_force(index, fps[::60].tolist())


def test_merge_all_runs_leaves_one_run_per_table(index_parts: IndexParts) -> None:
    """merge_all_runs: every table's runs and memtable become one run (dead rows dropped),
    queries equal brute force before and after; nothing to do returns False; an index written
    to less than ``idle`` seconds ago is left alone; a few writes after the merge (under
    min_share of the entries) are left to the memtable, unless min_share=0."""
    rng = np.random.default_rng(31)
    fps = np.concatenate([rng.integers(0, TOP, 5000, dtype=np.uint64), clustered(rng, 600, 5, 3)])
    names = [f"r{i}" for i in range(fps.size)]
    index = Index(memtable_limit=64)
    tables = index_parts.runs[-1].tables
    for start in range(0, 5000, 700):  # batches: several runs per table
        index.add_many(names[start : start + 700], fps[start : start + 700])
    for name, value in zip(names[5000:], fps[5000:].tolist(), strict=True):
        index.add(name, value)  # singles: some left in the memtables
    index.remove("r10")
    assert any(len(t.runs) > 1 for t in tables)
    queries = [*fps[::97].tolist(), *(fps[5000::37] ^ np.uint64(3)).tolist()]
    before = [index.query(q) for q in queries]
    assert not index.merge_all_runs(idle=60.0)  # just written to
    assert index.merge_all_runs()
    assert all(len(t.runs) == 1 and not t.memtable_size for t in tables)
    assert all(len(t) == fps.size - 1 for t in tables)  # the dead row dropped
    index._check()
    assert [index.query(q) for q in queries] == before
    assert_queries_match_brute_force(index, queries)
    assert not index.merge_all_runs()  # nothing left to merge
    for i in range(10):
        index.add(f"late-{i}", i)
    assert all(t.memtable_size == 10 for t in tables)
    # A trickle (10 of 5,609 entries, under the default eighth) is not worth a full merge.
    assert not index.merge_all_runs()
    assert all(t.memtable_size == 10 for t in tables)
    assert index.merge_all_runs(min_share=0)
    assert all(len(t.runs) == 1 and not t.memtable_size for t in tables)
    assert [m.key for m in index.query(3, k=0)] == ["late-3"]


def test_merge_all_runs_with_concurrent_writes_and_a_compaction(
    monkeypatch: pytest.MonkeyPatch, index_parts: IndexParts
) -> None:
    """Writes while merge_all_runs merges (outside the lock) land after the merged runs and are
    kept; a compaction meanwhile drops the merge (returns False) and nothing is lost."""
    rng = np.random.default_rng(32)
    fps = rng.integers(0, TOP, 4000, dtype=np.uint64)
    index = Index(memtable_limit=64, compaction_min=0)
    rows = index_parts.rows[-1]
    for start in range(0, 3000, 500):
        index.add_many([f"w{i}" for i in range(start, start + 500)], fps[start : start + 500])
    original = table_module.Table.merged_runs
    during = {"write": True, "compact": False}

    def merged_runs_with_a_write(self: Any, runs: Any, *args: Any) -> Any:
        if during["write"]:
            during["write"] = False
            index.add_many([f"w{i}" for i in range(3000, 4000)], fps[3000:])
        if during["compact"]:
            during["compact"] = False
            with rows.lock:
                rows.compact()
        return original(self, runs, *args)

    monkeypatch.setattr(table_module.Table, "merged_runs", merged_runs_with_a_write)
    assert index.merge_all_runs()
    index._check()
    assert len(index) == 4000
    assert_queries_match_brute_force(index, fps[::50].tolist())
    for start in range(0, 1000, 200):
        index.add_many([f"x{i}" for i in range(start, start + 200)], fps[start : start + 200])
    index.remove("x5")
    during["compact"] = True
    assert not index.merge_all_runs()
    index._check()
    assert len(index) == 4999
    assert_queries_match_brute_force(index, fps[::50].tolist())


def test_merge_outside_the_lock_survives_a_compaction(
    monkeypatch: pytest.MonkeyPatch, index_parts: IndexParts
) -> None:
    """A compaction between a merge's computation and its swap: the merged run is discarded
    (its rows were renumbered) and the merging goes on from the new runs."""
    index = Index(memtable_limit=4, compaction_min=0)
    rows = index_parts.rows[-1]
    original = table_module.Table.merged_runs
    calls = [0]

    def merged_with_a_compaction(self: Any, *args: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:
            with rows.lock:
                rows.compact()
        return original(self, *args)

    monkeypatch.setattr(table_module.Table, "merged_runs", merged_with_a_compaction)
    rng = np.random.default_rng(4)
    fps = clustered(rng, 400, 4, 3)
    for start in range(0, 400, 50):
        index.add_many([f"m{i}" for i in range(start, start + 50)], fps[start : start + 50])
    index.remove("m7")
    index._check()
    assert calls[0] > 2
    assert_queries_match_brute_force(index, fps[::40].tolist())
