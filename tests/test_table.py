"""One table of the permutation index (permindex.index.table): runs (row parts, shifting,
building from unsorted rows), the batch candidate filter, and the single-query bucket scan, each
against brute force; the table reads the index's rows through a RowSnapshot."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from index_checks import clustered
from strategies import SETTINGS

from permindex.index.hamming import brute_force_query
from permindex.index.permutation import Design
from permindex.index.ranges import filtered_ranges, gather_ranges
from permindex.index.table import RowSnapshot, Run, Table, _split_rows


def test_runs_with_rows_above_2_to_the_24() -> None:
    """Row numbers are kept as 16 + 8 bits below 2^24 and 16 + 16 bits above: a table whose rows
    start at 2^24 - 50 (a lazily zeroed fingerprint array, so no real memory) answers as brute
    force, in both the single and the batch path, before and after a merge."""
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
    assert [run.row_at(i) for i in range(5)] == run.rows[:5].tolist()
    table._check(rows)
    narrow = Run(np.array([0, 7, (1 << 24) - 1], dtype=np.uint32), np.zeros(3, np.uint16),
                 np.zeros(2, np.uint32), 0)  # fmt: skip
    assert narrow.high.dtype == np.uint8 and narrow.rows.tolist() == [0, 7, (1 << 24) - 1]
    perm = table.permutation
    for q in fps[first::37].tolist():
        candidates: list[int] = []
        table.lookup(q, 3, candidates)
        hits = {r for r in candidates if (int(fps[r]) ^ q).bit_count() <= 3}
        expected = {first + int(i) for i in brute_force_query(fps[first:], q, 3)}
        same_prefix = {r for r in expected if perm.prefix(int(fps[r])) == perm.prefix(q)}
        assert same_prefix <= hits <= expected
        ((source, _filters, lo, counts),) = table.ranges_many(
            perm.prefix_array(np.array([q], dtype=np.uint64)), rows
        )
        assert isinstance(source, Run)
        got = set(source.rows_at(np.arange(lo[0], lo[0] + counts[0])).tolist())
        assert same_prefix <= got


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


@pytest.mark.parametrize("k", [0, 1, 3, 16])
def test_filtered_ranges_equals_gathering_then_filtering(k: int) -> None:
    """The batch path's candidate filter: the same (query, position) pairs, in the same order,
    as expanding every range and comparing each candidate's filter with its query's; empty
    ranges, a query without candidates, and all queries empty included."""
    rng = np.random.default_rng(k)
    filters = rng.integers(0, 1 << 32, 5000, dtype=np.uint32)
    for queries in (0, 1, 300):
        counts = rng.integers(0, 40, queries).astype(np.int64)
        counts[::7] = 0
        lo = rng.integers(0, 5000 - 40, queries).astype(np.int64)
        query_filters = rng.integers(0, 1 << 32, queries, dtype=np.uint32)
        query_filters[::3] = filters[lo[::3]]  # some exact filter matches
        qpos, positions = gather_ranges(lo, counts)
        near = np.bitwise_count(filters[positions] ^ query_filters[qpos]) <= k
        got_q, got_p = filtered_ranges(lo, counts, filters, query_filters, k)
        assert got_q.tolist() == qpos[near].tolist()
        assert got_p.tolist() == positions[near].tolist()


@given(
    size=st.integers(1, 60),
    k=st.integers(0, 17),
    seed=st.integers(0, 2**32 - 1),
)
@SETTINGS
def test_single_query_bucket_filter_test_equals_brute_force(size: int, k: int, seed: int) -> None:
    """The single-query scan of one bucket (the filters of every entry tested at once as 16-bit
    lanes of one int, up to PYTHON_SCAN entries; numpy above) finds exactly the entries within
    k of the query, for every bucket size and for k past the filter's 16 bits."""
    rng = np.random.default_rng(seed)
    perm = Design(4, 1).permutations[0]
    prefix = int(rng.integers(0, 1 << 16))
    query = (prefix << 48) | int(rng.integers(0, 1 << 48))
    # One bucket of `size` entries sharing the query's prefix: random ones and near ones.
    low = rng.integers(0, 1 << 48, size, dtype=np.uint64)
    flips = [rng.choice(48, int(rng.integers(0, 5)), replace=False) for _ in range(size)]
    near = np.array([query ^ sum(1 << int(b) for b in bits) for bits in flips], dtype=np.uint64)
    fps = np.where(rng.random(size) < 0.5, np.uint64(prefix << 48) | low, near).astype(np.uint64)
    table = Table(perm, memtable_limit=1)  # a run, not the memtable
    table.add_many(0, size, RowSnapshot(fps, None, size), None)
    assert len(table.runs) == 1
    candidates: list[int] = []
    table.lookup(query, k, candidates)
    # Every candidate passed the filter test (a filter within k), each entry once; verified,
    # they are exactly the entries within k.
    qf = perm.filter(query)
    assert len(set(candidates)) == len(candidates)
    assert all((perm.filter(int(fps[r])) ^ qf).bit_count() <= k for r in candidates)
    values = fps.tolist()
    hits = {
        r: (values[r], (values[r] ^ query).bit_count())
        for r in candidates
        if (values[r] ^ query).bit_count() <= k
    }
    expected = {
        row: (value, (value ^ query).bit_count())
        for row, value in enumerate(fps.tolist())
        if (value ^ query).bit_count() <= k
    }
    assert hits == expected
