"""One table of the permutation index (permindex.index.tables.table): runs (row parts, shifting,
building from unsorted rows, merging across 2^24); the table reads the index's rows through a
RowSnapshot. Its lookups are the kernels' (tests/test_lookup.py, tests/test_single_lookup.py)."""

from __future__ import annotations

import numpy as np
import pytest
from index_checks import clustered

from permindex.index.tables.permutation import Design
from permindex.index.tables.table import RowSnapshot, Run, Table, _split_rows


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
