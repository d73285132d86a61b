"""Lookups equal brute force: single queries (Index.query) and batches (Index.query_many, as
Match lists and as columns) on every design and state of the tables (memtables, several runs,
tombstones, compactions, rows above 2^24), any keys, limits and the candidate bound, threads, and
lookups racing writes (each write seen whole or not at all). The kernels that order a batch's
matches and gather their keys are checked against numpy as well. The oracles: tests/oracles.py
through index_checks."""

from __future__ import annotations

import itertools
import random
import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from index_checks import expected_query
from oracles import brute_force_matches

import permindex.index.search.batch_queries as query_module
import permindex.index.search.matches as match_module
import permindex.index.tables.table as table_module
from permindex import Index, InvalidArgumentError, Match
from permindex.index.keys import kernels as key_kernels
from permindex.index.keys.store import EncodedKeys, KeyStore, encode_keys
from permindex.index.search import match_kernels
from permindex.index.search.batch_queries import QueryColumns
from permindex.index.search.lookup_kernels import BUCKET_LINES

# Single queries (Index.query): the compiled kernel over the frozen runs, the memtables beside it.
# The answers equal brute force through adds, removals, compactions and memtables, with no match,
# one, several and more than the kernel's output holds at first.


KEYS = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(KEYS, min_size=1, max_size=60, unique=True),
    seed=st.integers(0, 2**32 - 1),
    removed=st.integers(0, 59),
    k=st.integers(0, 3),
)
def test_single_queries_answer_as_brute_force(
    keys: list[str], seed: int, removed: int, k: int
) -> None:
    """Single queries with no, one and several matches (near-duplicate groups), any text as
    keys, some keys removed (a liveness mask, then a compaction), some added after the
    build (memtables), each k: the answers of brute force."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**64 - 1, 4, dtype=np.uint64, endpoint=True)
    flips = rng.integers(0, 64, (len(keys), 2))
    fps = [int(base[i % 4]) ^ (1 << int(a)) ^ (1 << int(b)) for i, (a, b) in enumerate(flips)]
    half = len(keys) // 2 + 1
    index = Index(3, memtable_limit=4, compaction_min=2)
    index.add_many(keys[:half], np.array(fps[:half], dtype=np.uint64))
    index.merge_all_runs(min_share=0.0)  # frozen runs only: the kernel alone
    stored = dict(zip(keys[:half], fps[:half], strict=True))
    queries = [*(int(v) for v in base), *(fps[i] ^ 1 for i in range(0, len(keys), 3))]
    queries.append(int(rng.integers(0, 2**64 - 1, dtype=np.uint64, endpoint=True)))
    for q in queries:
        assert index.query(q, k) == brute_force_matches(stored, q, k)
    for key in keys[: removed % half]:
        index.remove(key)
        del stored[key]
    for q in queries:
        assert index.query(q, k) == brute_force_matches(stored, q, k)
    for key, fp in zip(keys[half:], fps[half:], strict=True):
        index.add(key, fp)
        stored[key] = fp
    for q in queries:
        assert index.query(q, k) == brute_force_matches(stored, q, k)
        assert index.query(q, k, limit=1) == brute_force_matches(stored, q, k)[:1]
    index.merge_all_runs(min_share=0.0)
    for q in queries:
        assert index.query(q, k) == brute_force_matches(stored, q, k)
    index._check()


def test_single_queries_at_scale_answer_as_brute_force() -> None:
    """10^5 random fingerprints with planted near-duplicates: queries with no match, one,
    two, and more than the kernel's output holds at first; one non-ASCII key in ten."""
    rng = np.random.default_rng(11)
    n = 100_000
    fps = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    fps[:1000] = fps[1000:2000] ^ np.uint64(0b11)
    fps[2000:2300] = fps[5000] ^ (np.uint64(1) << rng.integers(0, 64, 300).astype(np.uint64))
    keys = [f"clé-{i}-ü" if i % 10 == 0 else f"k{i}" for i in range(n)]
    index = Index.from_arrays(keys, fps)
    queries = [
        *fps[:200].tolist(),  # two matches
        *(fps[3000:3200] ^ np.uint64(1 << 40)).tolist(),  # one match, at distance 1
        int(fps[5000]),  # 301 matches
        *rng.integers(0, 2**63, 200).tolist(),  # none
    ]
    for q in queries:
        near = np.flatnonzero(np.bitwise_count(fps ^ np.uint64(q)) <= 3).tolist()
        expected = sorted(
            (Match(keys[i], int(fps[i]), int(fps[i] ^ np.uint64(q)).bit_count()) for i in near),
            key=lambda m: (m.distance, m.key),
        )
        assert index.query(q) == expected
    assert len(index.query(int(fps[5000]))) > 256  # past the output's first capacity


def test_a_fingerprint_of_an_int_subclass_is_its_value() -> None:
    """An int subclass as the query is taken as its value, in the memtables and in the runs."""

    class Fingerprint(int):
        def __int__(self) -> int:
            return 0

    index = Index(3)
    index.add_many(["one", "two"], [1, 3])  # in the memtables
    expected = [Match("one", 1, 0), Match("two", 3, 1)]
    assert index.query(Fingerprint(1), k=1) == expected
    index.merge_all_runs(min_share=0.0)
    assert index.query(Fingerprint(1), k=1) == expected


# The compiled lookups (permindex.index.search.lookup, lookup_kernels): the answers of brute force
# (tests/oracles.py, through index_checks), on every design and state of the tables (memtables,
# several runs, tombstones, compactions); the columnar form; ``threads``; and the read view: a
# lookup racing writes sees each write entirely or not at all.


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


@pytest.mark.parametrize("design", [(4, 1), (5, 2), (6, 3)])
def test_kernels_on_rows_above_2_to_the_24(design: tuple[int, int]) -> None:
    """The kernels read a row as 16 + 8 bits below 2^24 and 16 + 16 bits from 2^24 on: tables
    whose rows start at 2^24 - 50 (a lazily zeroed fingerprint array, so no real memory),
    searched by both kernels, give brute force's matches, each once, on every paper design."""
    from permindex.index.search.lookup import kernels, make_plan
    from permindex.index.tables.permutation import Design
    from permindex.index.tables.table import RowSnapshot, Table

    first = (1 << 24) - 50
    rng = np.random.default_rng(24)
    fps = np.zeros(first + 400, dtype=np.uint64)
    base = rng.integers(0, 2**64 - 1, 100, dtype=np.uint64)
    fps[first:] = near(rng, np.repeat(base, 4), 3)
    rows = RowSnapshot(fps, None, first + 400)
    tables = [Table(perm, memtable_limit=8) for perm in Design(*design).permutations]
    for table in tables:
        table.add_many(first, 400, rows, None)
        assert table.runs[0].high.dtype == np.uint16
        table._check(rows)
    plan = make_plan(tables, tuple(range(len(tables))), lambda table: table.runs)
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


# The Match lists of a batch lookup (Index.query_many): the answers of brute force, one fresh list
# per query of Match objects with Python ints, whatever the keys (any text UTF-8 can encode, NUL
# included) and however often one stored key is matched.


#: Keys as a store may hold them: any text UTF-8 can encode (no lone surrogates), NUL too.
STORED_KEYS = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(STORED_KEYS, min_size=1, max_size=40, unique=True),
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(0, 3),
)
def test_lists_of_any_keys_are_those_of_brute_force(keys: list[str], seed: int, k: int) -> None:
    """Near-duplicate groups of any keys, queried in a batch of more than the single-query
    path's 8 (queries near a group, exact copies, and random ones): brute force's lists, each
    a list of its own."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**64 - 1, 3, dtype=np.uint64, endpoint=True)
    flips = np.uint64(1) << rng.integers(0, 64, len(keys)).astype(np.uint64)
    fps = base[np.arange(len(keys)) % 3] ^ flips
    index = Index.from_arrays(keys, fps)
    queries = np.concatenate(
        [base, fps, rng.integers(0, 2**64 - 1, 8, dtype=np.uint64, endpoint=True)]
    )
    got = index.query_many(queries, k)
    stored = dict(zip(keys, fps.tolist(), strict=True))
    assert got == [brute_force_matches(stored, q, k) for q in queries.tolist()]
    assert type(got) is list and all(type(lst) is list for lst in got)
    assert all(type(m) is Match and type(m.fingerprint) is int for lst in got for m in lst)
    assert all(type(m.distance) is int for lst in got for m in lst)
    # fresh objects: a caller may change one list without changing another
    got[0].append(Match("x", 1, 1))
    assert got[1:] == [brute_force_matches(stored, q, k) for q in queries[1:].tolist()]


def test_a_key_matched_by_many_queries_in_many_lists() -> None:
    """One stored key matched by 10^4 queries (and a second by none): every list holds it,
    each its own Match, all with the same key."""
    index = Index.from_arrays(["clé-ü", "other"], [0b1011, 2**64 - 1])
    queries = np.full(10_000, 0b1010, dtype=np.uint64)
    got = index.query_many(queries)
    assert got == [[Match("clé-ü", 0b1011, 1)]] * 10_000
    assert len({id(lst) for lst in got}) == 10_000


def test_query_many_answers_as_brute_force_at_scale() -> None:
    """5,000 fingerprints with near-duplicates planted at distance 2: the lists of brute force,
    sorted by (distance, key)."""
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64 - 1, 5_000, dtype=np.uint64, endpoint=True)
    fps[:500] = fps[500:1000] ^ np.uint64(0b101)
    keys = [f"k{i}" for i in range(fps.size)]
    index = Index.from_arrays(keys, fps)
    queries = np.concatenate([fps[:300] ^ np.uint64(1), rng.integers(0, 2**63, 300, np.uint64)])
    stored = dict(zip(keys, fps.tolist(), strict=True))
    got = index.query_many(queries)
    assert got == [brute_force_matches(stored, q, 3) for q in queries.tolist()]
    assert sum(map(len, got)) >= 600


# The batch query (permindex.index.search.batch_queries): a limit makes only the kept matches, and
# the answers equal brute force with and without it.


def test_query_many_limit_makes_only_the_kept_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A limit cuts each query's matches in (distance, key) order before any Match is made:
    200 queries of a fingerprint stored under 600 keys (ties at every distance, keys not in
    row order), limit 2, make 400 Match objects, and equal brute force cut to 2; without a
    limit every match is made, and also equals brute force."""
    rng = random.Random(4)
    base = 0x1234_5678_9ABC_DEF0
    names = [f"key-{rng.randrange(10**9):09d}-{i}" for i in range(600)]
    fps = [base if i % 3 else base ^ (1 << (i % 64)) for i in range(600)]
    noise = [rng.getrandbits(64) for _ in range(100)]
    index = Index()
    index.add_many(names + [f"noise-{i}" for i in range(100)], fps + noise)
    index.remove(names[5])  # a dead row among the matches
    stored = {k: v for k, v in zip(names, fps, strict=True) if k != names[5]}
    stored.update({f"noise-{i}": v for i, v in enumerate(noise)})
    queries = [base] * 150 + [base ^ 0b111] * 50
    made = [0]

    def brute(query: int) -> list[Match]:
        near = [Match(key, value, bin(value ^ query).count("1")) for key, value in stored.items()]
        return sorted((m for m in near if m.distance <= 3), key=lambda m: (m.distance, m.key))

    real_lists = match_module.match_lists

    def counting_lists(n: int, *found: Any) -> list[list[Match]]:  # where every Match is made
        made[0] += len(found[1])
        return real_lists(n, *found)

    monkeypatch.setattr(query_module, "match_lists", counting_lists)
    limited = index.query_many(queries, limit=2)
    assert made[0] == 2 * len(queries)
    for query, got in zip(queries, limited, strict=True):
        assert got == brute(query)[:2]
    made[0] = 0
    everything = index.query_many(queries[:20])
    assert made[0] == sum(len(matches) for matches in everything) > 20 * 400
    assert everything[0] == brute(base)


# The kernels that order a batch's matches and gather their keys
# (permindex.index.search.match_kernels): equal to numpy (lexsort, unique, a ragged gather), and,
# through ``Index.query_many``, the answers of brute force where rows repeat, keys tie and buckets
# are large.


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 50),
    data=st.data(),
)
def test_order_by_query_is_lexsort(n: int, data: st.DataObject) -> None:
    m = data.draw(st.integers(0, 300))
    queries = data.draw(hnp.arrays(np.int64, m, elements=st.integers(0, n - 1)))
    distances = data.draw(hnp.arrays(np.uint8, m, elements=st.integers(0, 64)))
    order = match_kernels.order_by_query(queries, distances, n)
    assert order.tolist() == np.lexsort((distances, queries)).tolist()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 50), data=st.data())
def test_arrange_matches_is_the_numpy_steps(n: int, data: st.DataObject) -> None:
    m = data.draw(st.integers(0, 300))
    queries = data.draw(hnp.arrays(np.int64, m, elements=st.integers(0, n - 1)))
    rows = data.draw(hnp.arrays(np.int64, m, elements=st.integers(0, 99)))
    distances = data.draw(hnp.arrays(np.int64, m, elements=st.integers(0, 64)))
    fps = data.draw(hnp.arrays(np.uint64, 100))
    found = np.ascontiguousarray(np.stack([queries, rows, distances], axis=1))
    q_out, rows_out, d_out, fps_out, ties = match_kernels.arrange_matches(found, n, fps)
    order = np.lexsort((distances, queries))
    assert q_out.tolist() == queries[order].tolist()
    assert rows_out.tolist() == rows[order].tolist()
    assert d_out.dtype == np.uint8 and d_out.tolist() == distances[order].tolist()
    assert fps_out.tolist() == fps[rows[order]].tolist()
    q, d = queries[order], distances[order]
    assert ties.tolist() == np.flatnonzero((q[1:] == q[:-1]) & (d[1:] == d[:-1])).tolist()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 50), data=st.data())
def test_query_offsets_are_the_cumulative_counts(n: int, data: st.DataObject) -> None:
    m = data.draw(st.integers(0, 300))
    queries = np.sort(data.draw(hnp.arrays(np.int64, m, elements=st.integers(0, n - 1))))
    offsets = match_kernels.query_offsets(queries, n)
    assert offsets.tolist() == [0, *np.cumsum(np.bincount(queries, minlength=n)).tolist()]


@settings(max_examples=60, deadline=None)
@given(rows=hnp.arrays(np.int64, st.integers(0, 400), elements=st.integers(0, 2**40)))
def test_distinct_rows_in_first_appearance_order(rows: np.ndarray) -> None:
    distinct, inverse = key_kernels.distinct_rows(rows)
    _, first = np.unique(rows, return_index=True)
    assert distinct.tolist() == rows[np.sort(first)].tolist()
    assert distinct[inverse].tolist() == rows.tolist()


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=40),
    data=st.data(),
)
def test_decode_rows_concatenates_the_rows(keys: list[bytes], data: st.DataObject) -> None:
    """The key store's decode kernel: each row's key bytes then a NUL, in the order asked."""
    stored = [key + b"\x00" for key in keys]
    store = KeyStore()
    ends = np.cumsum([len(s) for s in stored]).astype(np.int64)
    blob = np.frombuffer(b"".join(stored), dtype=np.uint8).copy()
    store.append_many(EncodedKeys(blob, ends, np.zeros(len(keys), dtype=np.uint64)))
    rows = data.draw(
        hnp.arrays(np.int64, st.integers(0, 100), elements=st.integers(0, len(keys) - 1))
    )
    words = store.dictionary
    got, lengths = key_kernels.decode_rows(
        store._codes, store._lens, store._bases, rows, words.data, words.offsets
    )
    assert got.tobytes() == b"".join(stored[r] for r in rows.tolist())
    assert lengths.tolist() == [len(keys[r]) for r in rows.tolist()]


def _loaded(keys: list[str], fps: np.ndarray) -> tuple[Index, dict[str, int]]:
    """An index of ``keys`` with ``fps`` and the same as a dict, for brute force."""
    return Index.from_arrays(keys, fps), dict(zip(keys, fps.tolist(), strict=True))


def test_one_key_matched_by_many_queries() -> None:
    """Rows that mostly repeat (each key decoded once, its str shared) and rows that do not;
    Unicode keys and keys holding NUL."""
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True)
    keys = [f"k\x00é-{i}" if i % 3 == 0 else f"键-{i}" for i in range(fps.size)]
    compiled, stored = _loaded(keys, fps)
    for queries in (
        np.repeat(fps[:3], 200),  # 600 queries, 3 distinct rows matched
        np.concatenate([fps[::2], fps[:40]]),  # a few repeats
    ):
        got = compiled.query_many(queries)
        assert got == [brute_force_matches(stored, q, 3) for q in queries.tolist()]
        assert sum(map(len, got)) >= queries.size
        columns = compiled.query_many(queries, columns=True)
        assert columns.keys == [m.key for ms in got for m in ms]
    compiled._check()


def test_ties_and_large_buckets_match_brute_force() -> None:
    """Thousands of fingerprints sharing table 0's prefix (a bucket far larger than the
    prefetched lines) and many matches per query at one distance (ordered by key)."""
    rng = np.random.default_rng(9)
    count = 40 * 16 * BUCKET_LINES
    low = rng.integers(0, 2**48, count, dtype=np.uint64)
    fps = (np.uint64(0xABCD) << np.uint64(48)) | low
    base = fps[:50]
    flips = np.uint64(1) << rng.integers(0, 64, (50, 30)).astype(np.uint64)
    near = (base[:, None] ^ flips).ravel()  # 30 neighbours at distance 1 of each of 50
    all_fps = np.concatenate([fps, near])
    keys = [f"doc-{i:06d}" for i in rng.permutation(all_fps.size)]
    compiled, stored = _loaded(keys, all_fps)
    queries = np.concatenate([base, rng.integers(0, 2**64 - 1, 200, dtype=np.uint64)])
    got = compiled.query_many(queries)
    assert got == [brute_force_matches(stored, q, 3) for q in queries.tolist()]
    assert max(len(m) for m in got) > 30
    assert [compiled.query(q) for q in queries[:60].tolist()] == got[:60]


_KEY_TEXT = st.text(
    alphabet=st.sampled_from(["a", "b", "é", "\uff5a", "😀", "\x00", "键", "A"]),
    min_size=0,
    max_size=6,
)


@settings(max_examples=80, deadline=None)
@given(keys=st.lists(_KEY_TEXT, min_size=1, max_size=30, unique=True), data=st.data())
def test_order_ties_by_key_is_the_code_point_order(keys: list[str], data: st.DataObject) -> None:
    """Runs of ties sorted by their keys' UTF-8 bytes give Python's str order (code points):
    prefixes first, 2-, 3- and 4-byte characters, NUL inside keys; positions outside the runs
    untouched; fingerprints moved with their rows."""
    store = KeyStore()
    store.append_many(encode_keys(keys))
    rows = np.array(data.draw(st.permutations(range(len(keys)))), dtype=np.int64)
    m = rows.size
    tied = data.draw(st.lists(st.booleans(), min_size=max(m - 1, 0), max_size=max(m - 1, 0)))
    ties = np.flatnonzero(np.array(tied, dtype=bool)).astype(np.int64)
    fps = (rows.astype(np.uint64) * np.uint64(1000003)) ^ np.uint64(0xFEED)
    expected = rows.tolist()
    start = 0
    for i in range(m):  # the runs: i and i + 1 in one run when i is a tie
        if i == m - 1 or not tied[i]:
            expected[start : i + 1] = sorted(expected[start : i + 1], key=keys.__getitem__)
            start = i + 1
    words = store.dictionary
    key_kernels.order_ties_by_key(
        ties, rows, fps, store._codes, store._lens, store._bases, words.data, words.offsets
    )
    assert rows.tolist() == expected
    assert fps.tolist() == [(r * 1000003) ^ 0xFEED for r in expected]


def test_a_few_ties_of_unicode_keys_match_brute_force() -> None:
    """Under Tuning.rank_ties ties (ordered by the kernel, not by ranking the keys): matches at
    one distance whose keys differ in 2- to 4-byte characters and by a prefix, in the code
    point order of brute force."""
    rng = np.random.default_rng(21)
    base = rng.integers(0, 2**64 - 1, 20, dtype=np.uint64, endpoint=True)
    bits = np.uint64(1) << rng.integers(0, 64, (20, 5)).astype(np.uint64)
    near = (base[:, None] ^ bits).ravel()  # 5 at distance 1 of each (or fewer if bits repeat)
    fps = np.concatenate([near, rng.integers(0, 2**64 - 1, 300, dtype=np.uint64, endpoint=True)])
    names = ["\uff5a", "😀", "é", "e", "ee", "e\x00", "键"]
    keys = [f"{names[i % len(names)]}{i % 11}" + "x" * (i % 3) for i in range(fps.size)]
    keys = [f"{key}/{i}" if i % 2 else key + "|" + str(i) for i, key in enumerate(keys)]
    compiled, stored = _loaded(keys, fps)
    got = compiled.query_many(base)
    assert got == [brute_force_matches(stored, q, 3) for q in base.tolist()]
    assert sum(len(m) for m in got) >= 60  # ties at distance 1 in most lists
    assert compiled.query_many(base, columns=True).keys == [m.key for ms in got for m in ms]


@settings(max_examples=40, deadline=None)
@given(
    design=st.sampled_from([(4, 1), (5, 2), (6, 3)]),
    offset=st.sampled_from([-40, -17, -16, -15, -1, 0, 1, 3]),
    seed=st.integers(0, 2**32 - 1),
    memtable_limit=st.sampled_from([16, 256]),
    removals=st.integers(0, 30),
)
def test_compact_tables_answer_as_brute_force_at_every_directory_width(
    design: tuple[int, int], offset: int, seed: int, memtable_limit: int, removals: int
) -> None:
    """The 5-byte entries (a 16-bit filter after the directory's r bits) on every paper design
    for k = 3, with the directory's width r forced to the prefix width plus ``offset`` (at
    least 1, at most 19): one bucket for everything (every filter bit a prefix bit), buckets
    of several prefixes (the filter's leading bits must be equal), exactly one prefix, and a
    prefix over 2^(r - P) buckets (their bits compared as a whole); a bulk load, a batch, single
    adds and removals (several runs, a memtable, tombstones). Every query, batched, single and
    as columns, at every k, equals brute force, and the tables' _check holds (each run's
    directory, order and filters for its r)."""
    rng = np.random.default_rng(seed)
    fps = np.concatenate(
        [
            rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True),
            near(rng, np.repeat(rng.integers(0, 2**64 - 1, 20, dtype=np.uint64), 10), 3),
            np.full(12, 0x0123_4567_89AB_CDEF, dtype=np.uint64),
        ]
    )
    rng.shuffle(fps)
    keys = [f"k{i}" for i in range(fps.size)]

    def forced(size: int, prefix_bits: int) -> int:
        return max(1, min(prefix_bits + offset, 19))

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(table_module, "directory_bits", forced)
        index = Index(k=3, design=design, memtable_limit=memtable_limit, compaction_min=1000)
        index.add_many(keys[:300], fps[:300])
        index.add_many(keys[300:600], fps[300:600])
        for key, value in zip(keys[600:], fps[600:].tolist(), strict=True):
            index.add(key, value)
        for i in rng.choice(fps.size, removals, replace=False).tolist():
            index.remove(keys[i])
        index._check()
        assert any(run.bits == forced(0, perm_bits) for run, perm_bits in _runs_and_prefixes(index))
        stored_keys, stored = index.export()
        queries = np.concatenate(
            [near(rng, fps[::9], 3), rng.integers(0, 2**64 - 1, 20, np.uint64)]
        )
        for k in range(4):
            expected = [expected_query(stored_keys, stored, q, k) for q in queries.tolist()]
            assert index.query_many(queries, k=k) == expected
            assert [index.query(q, k) for q in queries[::5].tolist()] == expected[::5]
            columns = index.query_many(queries, k=k, columns=True)
            assert columns_as_lists(columns) == [[tuple(m) for m in e] for e in expected]


def _runs_and_prefixes(index: Index) -> list[tuple[Any, int]]:
    return [(run, table.permutation.prefix_bits) for table in index._tables for run in table.runs]
