"""The bounded self-join (issue 12, bounded work per call): pairs streamed in key order from the
join on distinct fingerprints (NearDuplicates.pair_chunks / iter_pairs, Index.iter_pairs) against
brute force; chunk sizes; flat memory on 5,000 keys of one fingerprint; the work estimate before
the join (estimate_join_work against a count of the candidates, WorkBudgetExceededError); and
cancellation between chunks (CallCancelledError within 100 ms)."""

from __future__ import annotations

import threading
import time
import tracemalloc
from collections.abc import Callable
from itertools import accumulate, combinations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import brute_force_pairs
from strategies import DESIGNS, SETTINGS

from permindex import Index
from permindex.errors import CallCancelledError, WorkBudgetExceededError
from permindex.index.join import self_join as join
from permindex.index.join.clusters import NearDuplicates
from permindex.index.join.pair_stream import distinct_values
from permindex.index.join.self_join import BYTE_PAIRS, JoinDesign, estimate_join_work, join_tables
from permindex.index.tables.permutation import Design
from permindex.index.tuning import Tuning

Pair = tuple[str, str, int]


def brute_force(keys: list[str], fps: np.ndarray, k: int) -> list[Pair]:
    i, j, d = brute_force_pairs(fps, k)
    return sorted(
        (min(keys[x], keys[y]), max(keys[x], keys[y]), int(z))
        for x, y, z in zip(i.tolist(), j.tolist(), d.tolist(), strict=True)
    )


@st.composite
def clumped(draw: st.DrawFn) -> tuple[list[str], np.ndarray]:
    """Keys (random text, random order) whose fingerprints are a few bases, repeated and with a
    few bits flipped: many groups of identical fingerprints and many near ones."""
    n = draw(st.integers(0, 60))
    bases = draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=5))
    fps = []
    for _ in range(n):
        fp = draw(st.sampled_from(bases))
        for bit in draw(st.lists(st.integers(0, 63), max_size=draw(st.sampled_from([0, 0, 1, 3])))):
            fp ^= 1 << bit
        fps.append(fp)
    keys = draw(st.lists(st.text(min_size=1, max_size=4), min_size=n, max_size=n, unique=True))
    return keys, np.array(fps, dtype=np.uint64)


def chunks_as_pairs(near: NearDuplicates, max_pairs: int) -> list[Pair]:
    out: list[Pair] = []
    sizes: list[int] = []
    for a, b, d in near.pair_chunks(max_pairs):
        sizes.append(int(a.size))
        out.extend(
            (near.keys[x], near.keys[y], z)
            for x, y, z in zip(a.tolist(), b.tolist(), d.tolist(), strict=True)
        )
    assert all(s == max_pairs for s in sizes[:-1])  # every chunk full but the last
    assert all(0 < s <= max_pairs for s in sizes)
    return out


@SETTINGS
@given(
    data=clumped(),
    design=st.sampled_from(DESIGNS),
    k=st.integers(0, 4),
    max_pairs=st.sampled_from([1, 2, 3, 7, 64, 65_536]),
)
def test_pair_chunks_equal_brute_force_in_order(
    data: tuple[list[str], np.ndarray],
    design: tuple[tuple[int, int], int],
    k: int,
    max_pairs: int,
) -> None:
    keys, fps = data
    shape, kmax = design
    k = min(k, kmax)
    expected = brute_force(keys, fps, k)
    near = NearDuplicates(keys, fps, k, design=shape)
    got = chunks_as_pairs(near, max_pairs)
    assert got == expected  # the same pairs, in exactly the documented order
    assert list(near.iter_pairs()) == expected
    assert len(near) == len(expected)
    a, b, d = near.pairs
    listed = zip(a.tolist(), b.tolist(), d.tolist(), strict=True)
    assert [(keys[x], keys[y], z) for x, y, z in listed] == expected


@SETTINGS
@given(data=clumped(), k=st.integers(0, 3), remove=st.integers(0, 5))
def test_index_iter_pairs_equal_brute_force(
    data: tuple[list[str], np.ndarray], k: int, remove: int
) -> None:
    keys, fps = data
    index = Index(k=3)
    index.add_many(keys, fps)
    for key in keys[:remove]:  # removed rows are not paired
        index.remove(key)
    kept = keys[remove:]
    expected = brute_force(kept, fps[remove:], k)
    assert list(index.iter_pairs(k)) == expected
    assert index.pairs(k) == expected


def test_segment_windows_of_one_key() -> None:
    """Windows of a single key (lowered budget) give the same stream as one big window."""
    rng = np.random.default_rng(7)
    base = rng.integers(0, 2**64, size=4, dtype=np.uint64)
    fps = base[rng.integers(0, 4, size=300)]
    flips = np.uint64(1) << rng.integers(0, 64, size=300).astype(np.uint64)
    fps[::3] ^= flips[::3]
    keys = [f"k{x:03d}" for x in rng.permutation(300).tolist()]
    expected = brute_force(keys, fps, 3)
    one = NearDuplicates(keys, fps, 3, tuning=Tuning(segment_budget=1))
    assert chunks_as_pairs(one, 5) == expected
    assert chunks_as_pairs(NearDuplicates(keys, fps, 3), 1000) == expected


def identical(n: int) -> Index:
    index = Index(k=3)
    index.add_many(
        [f"https://example.com/page/{i:05d}" for i in range(n)], np.full(n, 0xABCD, np.uint64)
    )
    return index


def test_identical_keys_stream_with_flat_memory() -> None:
    """5,000 keys of one fingerprint: all 12,497,500 pairs, in order, while the memory traced
    stays far below the 300 MB the three int64 arrays of all pairs would take."""
    index = identical(5000)
    tracemalloc.start()
    try:
        near = NearDuplicates.of_index(index, max_work=13_000_000)
        assert near.work_estimate == 12_497_500  # identical fingerprints cost no candidate
        count = 0
        last = (-1, -1)
        rank = near.key_rank
        for a, b, d in near.pair_chunks(65_536):
            assert a.size <= 65_536
            assert not d.any()
            assert (int(rank[a[0]]), int(rank[b[0]])) > last  # chunks continue in order
            last = (int(rank[a[-1]]), int(rank[b[-1]]))
            count += int(a.size)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert count == 12_497_500
    assert peak < 16 * 2**20, peak


def test_identical_keys_iter_pairs_sorted() -> None:
    index = identical(600)
    pairs = list(index.iter_pairs())
    assert len(pairs) == 600 * 599 // 2
    assert pairs == sorted(pairs)
    assert all(a < b and d == 0 for a, b, d in pairs)


def masked_groups(fps: np.ndarray, masks: list[int]) -> int:
    """The candidates of a join by definition: pairs of positions sharing a table's key."""
    values = fps.tolist()
    return sum(sum(1 for x, y in combinations(values, 2) if (x ^ y) & mask == 0) for mask in masks)


def table_masks(design: JoinDesign, k: int) -> list[int]:
    if isinstance(design, Design):
        return [design.permutations[t].leading_mask for t in join_tables(design, k)]
    return list(join.BYTE_PAIR_MASKS)


@SETTINGS
@given(
    data=clumped(),
    choice=st.sampled_from([((4, 1), 3), ((5, 2), 3), ((6, 3), 3), ((2, 1), 1), ((16, 1), 6)]),
    k=st.integers(0, 6),
)
def test_estimate_counts_the_candidates(
    data: tuple[list[str], np.ndarray], choice: tuple[tuple[int, int], int], k: int
) -> None:
    _, fps = data
    shape, kmax = choice
    design = Design(*shape)
    k = min(k, kmax)
    assert estimate_join_work(fps, k, design) == masked_groups(fps, table_masks(design, k))
    if k <= 3:
        estimate = estimate_join_work(fps, k, BYTE_PAIRS)
        assert estimate == masked_groups(fps, table_masks(BYTE_PAIRS, k))


def exploding() -> Index:
    """60,000 random fingerprints under 16 blocks of 4 bits, 1 leading: k = 10 searches 11
    tables of 4-bit prefixes, groups of about 3,750 rows: about 10^9 candidates (seconds for
    the compiled join). The join's code is loaded first (a first join in a process loads the
    compiled kernels before its first check of should_stop)."""
    rng = np.random.default_rng(11)
    warm = rng.integers(0, 2**64 - 1, 1000, np.uint64, endpoint=True)
    join.self_join(warm, 3, Design(4, 1))
    index = Index(k=10, design=(16, 1))
    index.add_many([f"doc-{i}" for i in range(60_000)], rng.integers(0, 2**64, 60_000, np.uint64))
    return index


def test_budget_refuses_an_exploding_join_before_it_starts() -> None:
    index = exploding()
    started = time.monotonic()
    with pytest.raises(WorkBudgetExceededError) as caught:
        NearDuplicates.of_index(index, max_work=10_000_000)
    assert time.monotonic() - started < 5
    error = caught.value
    assert error.budget == 10_000_000
    assert error.estimate > 10**8
    assert error.what == "candidate pairs to verify plus pairs of identical fingerprints"
    assert f"{error.estimate:,}" in str(error) and "10,000,000" in str(error)
    _, fps = index.export()
    assert error.estimate == estimate_join_work(fps, 10, Design(16, 1))


def test_identical_fingerprints_cost_no_candidates() -> None:
    index = identical(5000)
    near = NearDuplicates.of_index(index, max_work=12_497_500)
    assert near.work_estimate == 12_497_500
    with pytest.raises(WorkBudgetExceededError) as caught:
        NearDuplicates.of_index(index, max_work=12_497_499)
    assert caught.value.estimate == 12_497_500


def stop_at(at: float) -> Callable[[], bool]:
    """A should_stop that turns True at time ``at`` (time.monotonic)."""
    return lambda: time.monotonic() >= at


@pytest.mark.parametrize("delay", [0.05, 0.3, 0.8])
def test_cancel_stops_the_join_within_100_ms(delay: float) -> None:
    """The join (about 10^9 candidates, seconds) raises within 100 ms of should_stop
    turning True, whichever part of the join it is in."""
    index = exploding()
    at = time.monotonic() + delay
    with pytest.raises(CallCancelledError):
        NearDuplicates.of_index(index, should_stop=stop_at(at))
    lag = time.monotonic() - at
    assert lag < 0.1, lag


def test_cancel_from_another_thread_stops_the_join() -> None:
    """The server's way: an event set by another thread (a cancelled call)."""
    index = exploding()
    event = threading.Event()
    timer = threading.Timer(0.3, event.set)
    timer.start()
    started = time.monotonic()
    with pytest.raises(CallCancelledError):
        list(index.iter_pairs(10, should_stop=event.is_set))
    timer.join()
    assert time.monotonic() - started < 0.3 + 0.2


def test_cancel_stops_the_stream() -> None:
    near = NearDuplicates.of_index(identical(5000))
    event = threading.Event()
    got = 0
    with pytest.raises(CallCancelledError):
        for a, _, _ in near.pair_chunks(1000, should_stop=event.is_set):
            got += int(a.size)
            if got >= 50_000:
                event.set()
    assert got == 50_000  # the next chunk was not made


@SETTINGS
@given(data=clumped(), per_distance=st.integers(0, 4), seed=st.integers(0, 2**32 - 1))
def test_sample_pairs_equal_the_listed_choice(
    data: tuple[list[str], np.ndarray], per_distance: int, seed: int
) -> None:
    """sample_pairs (streamed) picks what a choice over all listed pairs picks: per distance
    the pairs whose later document comes first, ties in pair order."""
    keys, fps = data
    order = np.random.default_rng(seed).permutation(len(keys)).astype(np.int64)
    near = NearDuplicates(keys, fps, 3)
    a, b, d = near.pairs
    later = np.maximum(order[a], order[b])
    chosen: list[int] = []
    for distance in range(4):
        at = np.flatnonzero(d == distance)
        chosen.extend(at[np.argsort(later[at], kind="stable")[:per_distance]].tolist())
    got = near.sample_pairs(per_distance, order)
    assert got.a.tolist() == a[chosen].tolist()
    assert got.b.tolist() == b[chosen].tolist()
    assert got.distance.tolist() == d[chosen].tolist()


def test_groups_without_pairs_to_send_cost_nothing() -> None:
    """Clusters, flags and exact groups list no pairs: with send_pairs=False the 12,497,500
    pairs of 5,000 identical keys are not counted, and the refusal names the smaller unit."""
    index = identical(5000)
    near = NearDuplicates.of_index(index, max_work=0, send_pairs=False)
    assert near.work_estimate == 0
    assert near.exact_duplicates()[0].keys[:2] == [
        "https://example.com/page/00000",
        "https://example.com/page/00001",
    ]
    with pytest.raises(WorkBudgetExceededError) as caught:
        NearDuplicates.of_index(exploding(), max_work=1000, send_pairs=False)
    assert caught.value.what == "candidate pairs to verify"


def reference_values(fps: list[int]) -> tuple[list[int], list[int], list[int], list[int]]:
    """What distinct_values returns, by a dict: (by_value, first, counts, distinct) with the
    values that occur once first in position order, then the repeated ones by ascending value,
    positions ascending within each."""
    where: dict[int, list[int]] = {}
    for position, value in enumerate(fps):
        where.setdefault(value, []).append(position)
    singles = [v for v in where if len(where[v]) == 1]  # dicts keep first-seen order
    groups = [where[v] for v in singles] + [where[v] for v in sorted(where) if len(where[v]) > 1]
    by_value = [p for group in groups for p in group]
    counts = [len(group) for group in groups]
    first = [0, *accumulate(counts)][: len(counts)]
    return by_value, first, counts, [fps[group[0]] for group in groups]


#: Lists of fingerprints for distinct_values: many repeats, any values, values alike in their
#: low bits (so that their hashes spread only by the multiplication).
FINGERPRINT_LISTS = st.lists(
    st.one_of(
        st.integers(0, 15),  # small values: many repeats
        st.integers(0, 2**64 - 1),
        st.integers(0, 7).map(lambda i: i << 40),  # alike in their low bits
    ),
    min_size=0,
    max_size=300,
)


def test_distinct_values_of_a_million_positions_with_repeats() -> None:
    """At 10^6 positions with 2,000 values repeated up to 4 times (the kernel's hash table
    passes some positions whose value does not repeat: the search must drop them): what a
    dict finds."""
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64 - 1, 1_000_000, dtype=np.uint64, endpoint=True)
    for copies in range(1, 4):
        fps[copies * 2000 : copies * 2000 + 2000] = fps[:2000]
    got = distinct_values(fps)
    by_value, first, counts, distinct = reference_values(fps.tolist())
    assert got.by_value.tolist() == by_value
    assert got.counts.tolist() == counts
    assert got.distinct.tolist() == distinct
    assert got.first.tolist() == first
