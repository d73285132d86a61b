"""The compiled lookups (permindex.index.search.lookup, lookup_kernels): the answers of brute force
(tests/oracles.py, through index_checks), on every design and state of the tables (memtables,
several runs, tombstones, compactions); the columnar form; ``threads``; and the read view: a
lookup racing writes sees each write entirely or not at all."""

from __future__ import annotations

import itertools
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from index_checks import expected_query

from permindex import Index, InvalidArgumentError
from permindex.index.search.batch_queries import QueryColumns

DESIGNS = [((4, 1), 3), ((5, 2), 3), ((6, 3), 3), ((3, 1), 2), ((8, 2), 6), ((6, 2), 4)]


def near(rng: np.random.Generator, base: np.ndarray, k: int) -> np.ndarray:
    """Copies of ``base`` with 0..k random bits flipped each."""
    out = base.copy()
    for i in range(out.size):
        for bit in rng.choice(64, int(rng.integers(0, k + 1)), replace=False).tolist():
            out[i] ^= np.uint64(1 << bit)
    return out


def written(
    design_k: tuple[tuple[int, int], int],
    memtable_limit: int,
    rng: np.random.Generator,
    keys: list[str],
    fps: np.ndarray,
    removals: int,
) -> Index:
    """An index holding: a bulk load of a random share of ``keys``, single adds of the rest
    (memtables, freezes, merges), then ``removals`` random removals (tombstones, a compaction
    past compaction_min = 8)."""
    (design, k) = design_k
    index = Index(k=k, design=design, memtable_limit=memtable_limit, compaction_min=8)
    cut = int(rng.integers(0, fps.size))
    removed = rng.choice(fps.size, min(removals, fps.size), replace=False).tolist()
    index.add_many(keys[:cut], fps[:cut])
    for key, value in zip(keys[cut:], fps[cut:].tolist(), strict=True):
        index.add(key, value)
    for i in removed:
        index.remove(keys[i])
    return index


def columns_as_lists(columns: QueryColumns) -> list[list[tuple[str, int, int]]]:
    offsets = columns.offsets.tolist()
    fps = columns.fingerprints.tolist()
    d = columns.distances.tolist()
    return [
        list(zip(columns.keys[a:b], fps[a:b], d[a:b], strict=True))
        for a, b in itertools.pairwise(offsets)
    ]


@settings(max_examples=25, deadline=None)
@given(
    design_k=st.sampled_from(DESIGNS),
    seed=st.integers(0, 2**32 - 1),
    memtable_limit=st.sampled_from([4, 64, 8192]),
    removals=st.integers(0, 60),
)
def test_kernels_equal_brute_force(
    design_k: tuple[tuple[int, int], int],
    seed: int,
    memtable_limit: int,
    removals: int,
) -> None:
    """Single and batch lookups, lists and columns, one thread and two, at every k up to the
    index's: equal to brute force over the index's contents."""
    k = design_k[1]
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**64 - 1, 40, dtype=np.uint64, endpoint=True)
    fps = np.concatenate([near(rng, np.repeat(base, 6), k), base, base])  # exact copies too
    keys = [f"key-{i}" for i in range(fps.size)]
    fast = written(design_k, memtable_limit, rng, keys, fps, removals)
    fast.add(keys[0], int(fps[-1]))  # a replacement
    fast._check()
    stored_keys, stored = fast.export()
    queries = np.concatenate([near(rng, base, k), rng.integers(0, 2**63, 20, dtype=np.uint64)])
    for kk in range(k + 1):
        expected = [expected_query(stored_keys, stored, q, kk) for q in queries.tolist()]
        assert fast.query_many(queries, k=kk) == expected
        assert [fast.query(q, kk) for q in queries.tolist()] == expected
        assert fast.query_many(queries, k=kk, threads=2) == expected
        columns = fast.query_many(queries, k=kk, columns=True)
        assert columns.offsets.dtype == np.int64 and columns.distances.dtype == np.uint8
        assert columns.fingerprints.dtype == np.uint64
        assert columns_as_lists(columns) == [[tuple(m) for m in e] for e in expected]
        small = fast.query_many(queries[:5], k=kk, columns=True)  # the single-query path
        assert columns_as_lists(small) == [[tuple(m) for m in e] for e in expected[:5]]
        assert fast.query_many(queries, k=kk, limit=2) == [e[:2] for e in expected]


def test_large_index_several_runs_and_wide_rows() -> None:
    """A bulk load, a second batch (two runs per table) and single adds (a memtable): every
    query equal to brute force, in batches larger than the kernels' pipeline and output."""
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64 - 1, 200_000, dtype=np.uint64, endpoint=True)
    keys = [f"k{i}" for i in range(fps.size)]
    index = Index.from_arrays(keys[:150_000], fps[:150_000])
    index.add_many(keys[150_000:180_000], fps[150_000:180_000])
    for key, value in zip(keys[180_000:], fps[180_000:].tolist(), strict=True):
        index.add(key, value)
    assert any(len(runs) > 1 for runs, _ in index.table_runs())
    queries = np.concatenate([near(rng, fps[::400], 3), np.repeat(fps[7], 600)])
    got = index.query_many(queries)
    for q, matches in zip(queries.tolist()[::7], got[::7], strict=True):
        assert matches == expected_query(keys, fps, q, 3)
    assert all(m == got[-1] for m in got[-600:]) and got[-1][0].key == "k7"


def test_threads_argument_is_checked() -> None:
    index = Index.from_arrays(["a", "b"], [1, 2])
    with pytest.raises(InvalidArgumentError, match=r"threads must be in \[1, 256\], not 0"):
        index.query_many([1] * 20, threads=0)
    with pytest.raises(InvalidArgumentError, match="not 20000"):
        index.query_many([1] * 40_000, threads=20_000)  # one OS thread each: refused
    with pytest.raises(TypeError, match="columns must be True or False"):
        index.query_many([1] * 20, columns=1)  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="threads"):
        index.query_many([1] * 20, threads=1.5)  # type: ignore[call-overload]
    assert index.query_many([1] * 20, threads=8) == [index.query(1)] * 20
    assert index.query_many([1] * 20, threads=None) == [index.query(1)] * 20


def test_lookups_racing_writes_see_each_write_whole() -> None:
    """A key moved back and forth between two far-apart fingerprints, and one added and
    removed, while other threads look both up in batches and one at a time: every answer has
    the moving key at exactly one of its two places (a replacement is one write: never both,
    never neither), and the added-and-removed key with its fingerprint or not at all."""
    rng = np.random.default_rng(9)
    fps = rng.integers(0, 2**64 - 1, 50_000, dtype=np.uint64, endpoint=True)
    index = Index.from_arrays([f"k{i}" for i in range(fps.size)], fps, memtable_limit=64)
    a, b = 0x0123_4567_89AB_CDEF, 0xFEDC_BA98_7654_3210
    index.add("moving", a)
    queries = np.array([a, b] * 10, dtype=np.uint64)
    stop = threading.Event()
    errors: list[str] = []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            index.add("moving", b if i % 2 == 0 else a)
            index.add(f"extra{i}", int(fps[i % fps.size]) ^ 1)
            if i % 3 == 0:
                index.discard(f"extra{i - 3}")
            i += 1

    def reader(batch: bool) -> None:
        while not stop.is_set():
            if not batch:  # one call per place: each answer has the key once or not at all
                for place in (a, b):
                    if [(m.fingerprint, m.distance) for m in index.query(place)] not in (
                        [],
                        [(place, 0)],
                    ):
                        errors.append(f"single lookup of {place:#x}: {index.query(place)}")
                continue
            found = index.query_many(queries)
            for first, second in zip(found[0::2], found[1::2], strict=True):
                at_a = [m for m in first if m.key == "moving"]
                at_b = [m for m in second if m.key == "moving"]
                if len(at_a) + len(at_b) != 1:
                    errors.append(f"moving key at a {len(at_a)} and b {len(at_b)} times")
                    return

    threads = [threading.Thread(target=writer)]
    threads += [threading.Thread(target=reader, args=(batch,)) for batch in (True, True, False)]
    for thread in threads:
        thread.start()
    time.sleep(2.0)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    assert not errors, errors[:3]
    index._check()


def test_batch_lookups_leave_the_collector_as_they_find_it() -> None:
    """query_many makes a batch's lists and Match objects without switching the garbage
    collector off (it collects as usual, about once per 700 objects made) or changing its
    settings: enabled stays enabled, disabled by the caller stays disabled, the thresholds
    unchanged, also while batches run in several threads at once."""
    import gc

    rng = np.random.default_rng(11)
    fps = rng.integers(0, 2**64 - 1, 20_000, dtype=np.uint64)
    index = Index.from_arrays([f"k{i}" for i in range(fps.size)], fps)
    queries = np.concatenate((fps[:6_000], rng.integers(0, 2**64 - 1, 6_000, dtype=np.uint64)))
    thresholds = gc.get_threshold()
    assert gc.isenabled()
    started: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started.append(info["generation"])

    gc.callbacks.append(watch)
    try:
        results = index.query_many(queries)
        collections = len(started)
        threads = [threading.Thread(target=index.query_many, args=(queries,)) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        gc.callbacks.remove(watch)
    assert sum(len(r) for r in results) >= 6_000  # 12,000 lists and 6,000 Match objects
    assert collections >= 10, started
    assert gc.isenabled() and gc.get_threshold() == thresholds
    gc.disable()
    try:
        assert index.query_many(queries) == results
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_kernels_on_rows_above_2_to_the_24() -> None:
    """The kernels read a row as 16 + 8 bits below 2^24 and 16 + 16 bits from 2^24 on: tables
    whose rows start at 2^24 - 50 (a lazily zeroed fingerprint array, so no real memory),
    searched by both kernels, give brute force's matches, each once."""
    from permindex.index.search.lookup import kernels, make_plan
    from permindex.index.tables.permutation import Design
    from permindex.index.tables.table import RowSnapshot, Table

    first = (1 << 24) - 50
    rng = np.random.default_rng(24)
    fps = np.zeros(first + 400, dtype=np.uint64)
    base = rng.integers(0, 2**64 - 1, 100, dtype=np.uint64)
    fps[first:] = near(rng, np.repeat(base, 4), 3)
    rows = RowSnapshot(fps, None, first + 400)
    tables = [Table(perm, memtable_limit=8) for perm in Design(4, 1).permutations]
    for table in tables:
        table.add_many(first, 400, rows, None)
        assert table.runs[0].high.dtype == np.uint16
    plan = make_plan(tables, tuple(range(4)), lambda table: table.runs)
    queries = near(rng, fps[first::7], 3)
    module = kernels()
    empty = np.zeros(0, dtype=np.uint8)
    out = np.zeros((4096, 3), dtype=np.int64)
    count = module.lookup_batch(queries, 3, *plan, fps, empty, out)
    got = sorted(map(tuple, out[:count].tolist()))
    stored = fps[first:].astype(np.uint64)
    expected = sorted(
        (j, first + i, int(d))
        for j, q in enumerate(queries.tolist())
        for i, d in enumerate([(int(v) ^ q).bit_count() for v in stored.tolist()])
        if d <= 3
    )
    assert got == expected and len(got) >= queries.size  # each within 3 of its source
    one = np.zeros((256, 3), dtype=np.int64)
    for j, q in enumerate(queries.tolist()):
        found = module.lookup_one(q, 3, *plan, fps, empty, one)
        if found < 0:  # exactly one match, encoded as -(row * 64 + distance) - 1
            one[0] = (0, (-found - 1) >> 6, (-found - 1) & 63)
            found = 1
        assert sorted((j, row, d) for _, row, d in one[:found].tolist()) == [
            e for e in expected if e[0] == j
        ]


@settings(max_examples=25, deadline=None)
@given(
    design_k=st.sampled_from(DESIGNS),
    seed=st.integers(0, 2**32 - 1),
    memtable_limit=st.sampled_from([4, 64, 8192]),
    removals=st.integers(0, 60),
    copies=st.integers(0, 50),
)
def test_bounded_lookups_and_the_candidate_bound(
    design_k: tuple[tuple[int, int], int],
    seed: int,
    memtable_limit: int,
    removals: int,
    copies: int,
) -> None:
    """``max_candidates(k)`` bounds the matches of every query, whatever the state of the
    tables (memtables, several runs, tombstones); ``query_columns_within`` answers exactly as
    ``query_many(..., columns=True)`` within its bounds, and None one candidate or one match
    past them, and for at most Tuning.small_batch fingerprints."""
    k = design_k[1]
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**64 - 1, 30, dtype=np.uint64, endpoint=True)
    fps = np.concatenate([near(rng, np.repeat(base, 4), k), np.repeat(base[:1], copies)])
    keys = [f"key-{i}" for i in range(fps.size)]
    fast = written(design_k, memtable_limit, rng, keys, fps, removals)
    fast._check()
    stored_keys, stored = fast.export()
    queries = np.concatenate([near(rng, base, k), rng.integers(0, 2**63, 10, dtype=np.uint64)])
    n = queries.size
    for kk in range(k + 1):
        bound = fast.max_candidates(kk)
        for q in queries.tolist():
            assert len(expected_query(stored_keys, stored, q, kk)) <= bound
        live_copies = sum(1 for key in stored_keys if int(key[4:]) >= fps.size - copies)
        assert bound >= live_copies  # the copies share every bucket
        full = fast.query_many(queries, k=kk, columns=True)
        m = len(full.keys)
        got = fast.query_columns_within(queries, kk, max_candidates=n * bound, max_matches=m)
        assert got is not None and columns_as_lists(got) == columns_as_lists(full)
        limited = fast.query_columns_within(queries, kk, 1, max_candidates=n * bound, max_matches=m)
        assert limited is not None
        assert columns_as_lists(limited) == columns_as_lists(
            fast.query_many(queries, k=kk, limit=1, columns=True)
        )
        if bound:
            assert (
                fast.query_columns_within(queries, kk, max_candidates=n * bound - 1, max_matches=m)
                is None
            )
        if m:
            assert (
                fast.query_columns_within(queries, kk, max_candidates=n * bound, max_matches=m - 1)
                is None
            )
        roomy = {"max_candidates": 1 << 40, "max_matches": 1 << 40}
        assert fast.query_columns_within(queries[:8], kk, **roomy) is None  # Tuning.small_batch
    assert fast.max_candidates() == fast.max_candidates(k)


def test_bounded_lookup_arguments() -> None:
    index = Index.from_arrays([f"k{i}" for i in range(100)], np.arange(100, dtype=np.uint64))
    queries = np.arange(20, dtype=np.uint64)
    assert Index().max_candidates() == 0
    with pytest.raises(InvalidArgumentError, match="k"):
        index.max_candidates(4)
    with pytest.raises(InvalidArgumentError, match="max_matches"):
        index.query_columns_within(queries, max_candidates=10**6, max_matches=-1)
    with pytest.raises(InvalidArgumentError, match="max_candidates"):
        index.query_columns_within(queries, max_candidates=-1, max_matches=10)
    with pytest.raises(TypeError):
        index.query_columns_within(queries, max_candidates=1.5, max_matches=10)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="k"):
        index.query_columns_within(queries, 9, max_candidates=10**6, max_matches=10)
    roomy = {"max_candidates": 10**6, "max_matches": 10**6}
    assert index.query_columns_within(queries, **roomy) is None  # no read view yet
    expected = columns_as_lists(index.query_many(queries, columns=True))  # makes one
    got = index.query_columns_within(queries, **roomy)
    assert got is not None and columns_as_lists(got) == expected
    index.add("new", 5)  # a write: making the next view is not bounded work
    assert index.query_columns_within(queries, **roomy) is None
    expected = columns_as_lists(index.query_many(queries, columns=True))
    got = index.query_columns_within(queries, **roomy)
    assert got is not None and columns_as_lists(got) == expected
    assert expected[5][:2] == [("k5", 5, 0), ("new", 5, 0)]


def test_a_batch_started_during_another_is_looked_up_in_pieces_on_one_view(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A batch that starts while another thread's batch lookup runs is looked up in
    Tuning.overlap_pieces pieces (so that its ordering overlaps the other's kernel): the same
    answers, lists and columns, with and without a limit, as alone and as brute force, and
    every piece on the view taken when the call began (a write between two pieces is not
    seen by the second)."""
    from permindex.index.search import batch_queries as query

    rng = np.random.default_rng(21)
    fps = rng.integers(0, 2**64 - 1, 20_000, dtype=np.uint64)
    keys = [f"k{i}" for i in range(fps.size)]
    index = Index.from_arrays(keys, fps)
    n = index.tuning.overlap_pieces * index.tuning.overlap_piece + 3
    queries = np.concatenate(
        (near(rng, fps[: n // 2], 3), rng.integers(0, 2**64 - 1, n - n // 2, dtype=np.uint64))
    )
    queries = queries[rng.permutation(n)]  # near and far queries in every piece
    alone = index.query_many(queries)
    assert alone == [expected_query(keys, fps, q, 3) for q in queries.tolist()]
    assert sum(map(len, alone)) >= n // 2

    real = query.batch_arrays  # type: ignore[attr-defined]
    pieces: list[int] = []
    in_flight, finish = threading.Event(), threading.Event()
    late_key = "zz-added-between-pieces"

    def batch_arrays(view: object, part: np.ndarray, k: int, threads: int = 1) -> np.ndarray:
        if threading.current_thread().name == "other-batch":
            in_flight.set()
            assert finish.wait(30)
        else:
            pieces.append(int(part.size))
            if len(pieces) == 1:  # between the first piece and the second: a write
                index.add(late_key, int(queries[-1]))
        return real(view, part, k, threads)  # type: ignore[arg-type]

    monkeypatch.setattr(query, "batch_arrays", batch_arrays)
    other = threading.Thread(target=index.query_many, args=(queries,), name="other-batch")
    other.start()
    try:
        assert in_flight.wait(30)
        got = index.query_many(queries)
        assert len(pieces) == index.tuning.overlap_pieces and sum(pieces) == n
        assert got == alone  # the write after the first piece is not in the last one
        pieces.clear()
        index.remove(late_key)
        columns = index.query_many(queries, columns=True)
        assert columns_as_lists(columns) == [[tuple(m) for m in r] for r in alone]
        pieces.clear()
        index.remove(late_key)
        assert index.query_many(queries, limit=1) == [r[:1] for r in alone]
        assert len(pieces) == index.tuning.overlap_pieces
    finally:
        finish.set()
        other.join(30)
    monkeypatch.setattr(query, "batch_arrays", real)
    assert index.query(int(queries[-1]))[0].key == late_key  # seen once the call is over
    index._check()
