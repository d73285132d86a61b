"""The writes (permindex.index.writes) on a row store and its tables built by hand: a row
added, replaced (its old row a tombstone), left alone when its value is unchanged, discarded;
batches and compact sections with repeated keys; every step checked by the parts' _check and
by a single query of the kernels over those tables."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from permindex.errors import InvalidArgumentError
from permindex.index.keys.store import hash_key
from permindex.index.rows import RowStore
from permindex.index.search.lookup import Lookups
from permindex.index.table_set import TableSet
from permindex.index.tables.permutation import Design
from permindex.index.tables.table import Table
from permindex.index.writes import (
    add_batch,
    add_locked,
    add_section,
    discard_locked,
)


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
        assert add_locked(rows, runs, data, hash_key(data), 0b1011)
        assert not add_locked(rows, runs, data, hash_key(data), 0b1011)  # unchanged
        assert rows.n == 1
        assert not add_locked(rows, runs, data, hash_key(data), 0b1111)  # replaced
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
