"""Writes, tables and compaction: a row added, replaced (its old row a tombstone), left alone when
its value is unchanged, discarded; batches and compact sections with repeated keys
(permindex.index.writes); the tables' runs (row parts, shifting, built from unsorted rows, merged
across 2^24 rows); every step checked by the parts' _check and by lookups against brute force."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from index_checks import clustered

from permindex.errors import InvalidArgumentError
from permindex.index.keys.store import hash_key
from permindex.index.rows import RowStore
from permindex.index.search.lookup import Lookups
from permindex.index.table_set import TableSet
from permindex.index.tables.permutation import Design
from permindex.index.tables.table import RowSnapshot, Run, Table, _split_rows
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
    changes = [0, 0, 0]  # shared by the rows and the tables, as an Index shares them
    rows.changes = changes
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
                 np.zeros(2, np.uint32), 0)  # fmt: skip
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
    filters = rng.integers(0, 1 << 32, rows.size, dtype=np.uint32)
    run = Run(rows, filters, np.zeros(2, np.uint32), 0)
    assert run.rows.tolist() == rows.astype(np.int64).tolist()
    assert run.shifted(0) is run
    if top < (1 << 32) - 1 - 1000:
        moved = run.shifted(1000)
        assert moved.rows.tolist() == (rows.astype(np.int64) + 1000).tolist()
        assert moved.high.dtype == (np.uint8 if top + 1000 < 1 << 24 else np.uint16)
        assert moved.filters is run.filters


def test_run_from_unsorted_with_consecutive_rows() -> None:
    """The run of consecutive rows from ``first_row`` (rows=None: no gather) equals the run of
    the same rows given explicitly, on both sides of 2^24, for 16-bit and wider prefixes."""
    rng = np.random.default_rng(5)
    values = rng.integers(0, 2**64 - 1, 3000, dtype=np.uint64, endpoint=True)
    for pair in ((4, 1), (6, 3)):
        perm = Design(*pair).permutations[1]
        bits = perm.prefix_bits
        filters = perm.filter_array(values)
        prefixes = perm.prefix_array16(values) if bits <= 16 else perm.prefix_array(values)
        for first in (0, 17, (1 << 24) - 1000):
            rows = np.arange(first, first + values.size, dtype=np.uint32)
            made = Run.from_unsorted(None, prefixes, filters, bits, first_row=first)
            given = Run.from_unsorted(rows, perm.prefix_array(values), filters, bits)
            assert made.rows.tolist() == given.rows.tolist()
            assert made.high.dtype == given.high.dtype
            assert np.array_equal(made.filters, given.filters)
            assert np.array_equal(made.offsets, given.offsets) and made.shift == given.shift
            ordered = perm.prefix_array(values[made.rows.astype(np.int64) - first])
            assert bool((ordered[1:] >= ordered[:-1]).all())
