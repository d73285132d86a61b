"""The tables' runs (permindex.index.table_set): a large batch's runs built in threads (also
while
the keys are checked), merges outside the lock (with concurrent writes and compactions), and
merge_all_runs; every index checked with _check and against brute force."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest
from conftest import IndexParts
from index_checks import TOP, assert_queries_match_brute_force, clustered, export_lists

import permindex.index.tables.table as table_module
from permindex import Index, InvalidArgumentError
from permindex.index.tuning import Tuning


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
