"""Pairs equal brute force: the self-join (permindex.index.join) on every join design against
brute force on random, clustered, duplicated, tiny and adversarial inputs for every k it answers,
the covers it searches and the byte-pair join's pigeonhole; the bounded join that streams pairs in
key order (NearDuplicates.pair_chunks, Index.iter_pairs) with flat memory, its work estimate and
budget, and cancellation between chunks. The oracles: tests/oracles.py."""

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

import permindex.index.join.self_join as join_module
from permindex import Index, InvalidArgumentError
from permindex.errors import CallCancelledError, WorkBudgetExceededError
from permindex.index.join.clusters import NearDuplicates
from permindex.index.join.pair_stream import distinct_values
from permindex.index.join.self_join import (
    BYTE_PAIR_MASKS,
    BYTE_PAIRS,
    JoinDesign,
    estimate_join_work,
    join_design,
    join_tables,
    self_join,
)
from permindex.index.tables.permutation import Design
from permindex.index.tuning import Tuning

# The self-join (permindex.index.join.self_join): every join design against brute force on random,
# clustered, duplicated, tiny and adversarial inputs for every k it answers; the covers it
# searches; the byte-pair join's pigeonhole over every placement of up to 3 differing bits.


TOP = (1 << 64) - 1


#: Every way to join, with the largest k each answers: short prefixes, 17 to 24 bits, longer,
#: and the byte-pair join (joined on (4, 1) below its threshold of values).
JOINS: list[tuple[JoinDesign, int]] = [
    (Design(4, 1), 3),
    (Design(5, 2), 3),
    (Design(6, 2), 4),
    (Design(6, 3), 3),
    (Design(3, 1), 2),
    (Design(7, 2), 5),
    (Design(8, 2), 6),
    (BYTE_PAIRS, 3),
]


JOIN_IDS = [str(d) for d, _ in JOINS]


def as_pairs(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> list[tuple[int, int, int]]:
    """Pairs as sorted (low position, high position, distance) tuples."""
    return sorted(
        zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist(), d.tolist(), strict=True)
    )


def expected(values: np.ndarray, k: int) -> list[tuple[int, int, int]]:
    i, j, d = brute_force_pairs(values, k)
    return as_pairs(i, j, d)


def check(values: np.ndarray, design: JoinDesign, k: int) -> None:
    a, b, d = self_join(values, k, design)
    assert a.dtype == b.dtype == d.dtype == np.int64
    assert (a != b).all()
    got = as_pairs(a, b, d)
    assert got == expected(values, k)  # no pair missed, none twice, distances right


def clustered(rng: np.random.Generator, n: int, centers: int, max_flips: int) -> np.ndarray:
    """n fingerprints around a few centers, 0..max_flips bits flipped, some exact copies."""
    base = rng.integers(0, TOP, centers, dtype=np.uint64, endpoint=True)
    out = base[rng.integers(0, centers, n)]
    for i in range(n):
        for bit in rng.choice(64, int(rng.integers(0, max_flips + 1)), replace=False):
            out[i] ^= np.uint64(1) << np.uint64(bit)
    return out


def mixed(seed: int, k: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [
            rng.integers(0, TOP, 500, dtype=np.uint64, endpoint=True),
            clustered(rng, 400, 8, k + 1),
            np.full(40, 0x0123_4567_89AB_CDEF, dtype=np.uint64),  # a big group of equal values
            np.array([0, TOP, 1, TOP - 1, 1 << 63], dtype=np.uint64),
        ]
    )


@pytest.mark.parametrize(("design", "kmax"), JOINS, ids=JOIN_IDS)
def test_every_join_design_against_brute_force(design: JoinDesign, kmax: int) -> None:
    values = mixed(kmax, kmax)
    for k in range(kmax + 1):
        check(values, design, k)


@pytest.mark.parametrize(("design", "kmax"), JOINS, ids=JOIN_IDS)
def test_tiny_inputs(design: JoinDesign, kmax: int) -> None:
    for values in ([], [5], [5, 5], [0, 7], [0, 15], [TOP, TOP, TOP], [1, 2, 4, 8]):
        check(np.array(values, dtype=np.uint64), design, kmax)


@pytest.mark.parametrize(("design", "kmax"), JOINS, ids=JOIN_IDS)
def test_bits_flipped_on_every_key_boundary(design: JoinDesign, kmax: int) -> None:
    """Neighbours of one base at every combination of up to min(kmax, 3) flipped bits among
    the first and last bit of every byte: pairs that differ exactly at key boundaries."""
    base = 0x5A5A_A5A5_0F0F_F0F0
    edges = sorted({8 * b for b in range(8)} | {8 * b + 7 for b in range(8)})
    values = [base]
    for r in range(1, min(kmax, 3) + 1):
        for bits in combinations(edges, r):
            value = base
            for bit in bits:
                value ^= 1 << bit
            values.append(value)
    array = np.array(values, dtype=np.uint64)
    check(array, design, min(kmax, 3))


@given(
    bases=st.lists(st.integers(0, TOP), min_size=1, max_size=4),
    flips=st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.integers(0, 63), max_size=5)),
        min_size=0,
        max_size=40,
    ),
    join=st.sampled_from(range(len(JOINS))),
)
@SETTINGS
def test_hypothesis_near_copies(
    bases: list[int], flips: list[tuple[int, list[int]]], join: int
) -> None:
    design, kmax = JOINS[join]
    values = list(bases)
    for which, bits in flips:
        value = bases[which % len(bases)]
        for bit in bits:
            value ^= 1 << bit
        values.append(value)
    array = np.array(values, dtype=np.uint64)
    for k in range(kmax + 1):
        check(array, design, k)


def test_byte_pair_keys_cover_every_placement_of_three_bits() -> None:
    """The pigeonhole of the byte-pair join, exhaustively: for every set of at most 3 bit
    positions, some table's key bits avoid all of them."""
    masks = np.array(BYTE_PAIR_MASKS, dtype=np.uint64)
    for r in range(4):
        for bits in combinations(range(64), r):
            x = 0
            for bit in bits:
                x |= 1 << bit
            assert ((masks & np.uint64(x)) == 0).any(), bits
    # and it is tight: some 4 bits break every table
    four = np.uint64((1 << 0) | (1 << 16) | (1 << 32) | (1 << 48))
    assert not ((masks & four) == 0).any()


def test_byte_pairs_with_big_groups_of_equal_values() -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [np.full(120, 42, dtype=np.uint64), clustered(rng, 300, 3, 3), np.full(50, TOP, np.uint64)]
    )
    for k in range(4):
        check(values, BYTE_PAIRS, k)


@pytest.mark.parametrize(
    "pair", [(4, 1), (5, 2), (6, 2), (6, 3), (3, 1), (7, 2), (7, 3), (8, 2), (2, 1), (9, 3)]
)
def test_join_tables_cover_every_k_set_and_are_no_larger(pair: tuple[int, int]) -> None:
    design = Design(*pair)
    for k in range(design.max_k + 1):
        tables = join_tables(design, k)
        assert list(tables) == sorted(set(tables))
        assert len(tables) <= len(design.tables_for(k))
        leading = [set(design.permutations[t].leading_blocks) for t in tables]
        for differing in combinations(range(design.blocks), k):
            assert any(not lead & set(differing) for lead in leading), (k, differing)


def test_join_tables_finds_the_two_triangles_of_6_2() -> None:
    design = Design(6, 2)
    assert len(design.tables_for(3)) == 7  # the greedy cover
    tables = join_tables(design, 3)
    assert len(tables) == 6
    with pytest.raises(InvalidArgumentError):
        join_tables(design, 5)


def test_join_design_choices() -> None:
    assert join_design(Design(4, 1), 3, 1_000_000) == BYTE_PAIRS
    assert join_design(Design(4, 1), 3, 100) == Design(4, 1)
    chosen = join_design(Design(6, 2), 4, 1_000_000)
    assert isinstance(chosen, Design) and chosen.max_k >= 4
    with pytest.raises(InvalidArgumentError):
        join_design(Design(4, 1), 4, 100)


def test_bad_arguments() -> None:
    values = np.arange(10, dtype=np.uint64)
    with pytest.raises(InvalidArgumentError, match="k <= 3"):
        self_join(values, 4, BYTE_PAIRS)
    with pytest.raises(InvalidArgumentError, match="k <= 3"):
        self_join(values, -1, BYTE_PAIRS)
    with pytest.raises(InvalidArgumentError):
        self_join(values, 4, Design(4, 1))
    with pytest.raises(InvalidArgumentError):
        self_join(values, -1, Design(4, 1))
    with pytest.raises(TypeError, match="Design"):
        self_join(values, 1, "pairs")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):  # checked before the empty input's answer
        self_join(values[:0], 4, Design(4, 1))


def test_join_tables_of_a_wide_design_are_found_without_listing_k_sets() -> None:
    """(64, 1) at k = 10 has 1.5 * 10^11 k-sets of blocks: join_tables falls back to
    Design.tables_for at once (listing them took the memory of the machine)."""
    started = time.monotonic()
    design = Design(64, 1)
    assert join_tables(design, 10) == design.tables_for(10)
    assert time.monotonic() - started < 5


def test_keyed_pairs_is_one_table_with_the_first_table_rule() -> None:
    """keyed_pairs over each table of (4, 1) in turn, with the earlier tables' masks, gives
    exactly brute force's pairs (each once)."""
    values = mixed(3, 3)
    design = Design(4, 1)
    masks = [design.permutations[t].leading_mask for t in join_tables(design, 3)]
    parts = [
        join_module.keyed_pairs(values & np.uint64(mask), values, 3, masks[:t])
        for t, mask in enumerate(masks)
    ]
    a, b, d = (np.concatenate(x) for x in zip(*parts, strict=True))
    assert as_pairs(a, b, d) == expected(values, 3)
    empty = join_module.keyed_pairs(values[:1], values[:1], 3)
    assert all(x.size == 0 for x in empty)


# The bounded self-join (issue 12, bounded work per call): pairs streamed in key order from the
# join on distinct fingerprints (NearDuplicates.pair_chunks / iter_pairs, Index.iter_pairs)
# against brute force; chunk sizes; flat memory on 5,000 keys of one fingerprint; the work
# estimate before the join (estimate_join_work against a count of the candidates,
# WorkBudgetExceededError); and cancellation between chunks (CallCancelledError within 100 ms).


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
    return list(join_module.BYTE_PAIR_MASKS)


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
    join_module.self_join(warm, 3, Design(4, 1))
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
