"""The compiled self-join, distinct values and union-find (permindex.index.join.kernels, used by
self_join, distinct_values and components) against the oracles of the tests (brute force, a
dict, a search and a plain union-find): random and hypothesis inputs, planted near-duplicates
at every distance 0..k, groups of equal values, hot prefixes, wide designs (long prefixes,
prefix + row bits over 64), output chunks of 1 to 3 pairs, cancellation between kernel calls."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import brute_force_pairs, union_find_components
from strategies import SETTINGS
from test_pairs import FINGERPRINT_LISTS, reference_values

import permindex.index.join.self_join as join_module
from permindex.errors import CallCancelledError
from permindex.index.join.clusters import NearDuplicates, components
from permindex.index.join.pair_stream import distinct_values
from permindex.index.join.self_join import BYTE_PAIRS, JoinDesign, self_join
from permindex.index.tables.permutation import Design
from permindex.index.tuning import Tuning

#: Ways to join with the largest k each answers: 16-bit prefixes, 26-bit ones (5, 2), 32-bit
#: ones (6, 3), 4-bit ones (16, 1) at k = 10, 56-bit ones (8, 7) whose key and row number do not
#: fit in 64 bits past 256 rows, and the byte-pair join.
JOINS: list[tuple[JoinDesign, int]] = [
    (Design(4, 1), 3),
    (Design(5, 2), 3),
    (Design(6, 3), 3),
    (Design(16, 1), 10),
    (Design(8, 7), 1),
    (Design(7, 2), 5),
    (BYTE_PAIRS, 3),
]
IDS = [str(d) for d, _ in JOINS]


#: The tables one after the other, or in 3 threads at any size (by default from
#: Tuning.join_threads_min_rows values, in a thread per CPU).
TUNINGS = [Tuning(join_threads=1), Tuning(join_threads=3, join_threads_min_rows=0)]
THREADS = pytest.mark.parametrize("tuning", TUNINGS, ids=["one-thread", "threads"])


def as_pairs(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> list[tuple[int, int, int]]:
    return sorted(
        zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist(), d.tolist(), strict=True)
    )


def check_join(
    values: np.ndarray, k: int, design: JoinDesign, tuning: Tuning
) -> list[tuple[int, int, int]]:
    """The kernel's join == brute force, each pair once (positions a != b); returns the
    pairs."""
    a, b, d = self_join(values, k, design, tuning=tuning)
    assert a.dtype == b.dtype == d.dtype == np.int64
    assert not (a == b).any()
    got = as_pairs(a, b, d)
    assert len(set(got)) == len(got)
    i, j, dd = brute_force_pairs(values, k)
    assert got == as_pairs(i, j, dd)
    return got


def planted(rng: np.random.Generator, n: int, k: int) -> np.ndarray:
    """n values: a quarter random bases, the rest copies of them with 0..k random bits flipped
    (so equal values and pairs at every distance 0..k), shuffled."""
    bases = rng.integers(0, 2**64, size=max(1, n // 4), dtype=np.uint64)
    values = bases[rng.integers(0, bases.size, size=n)]
    for i in range(n):
        flips = rng.choice(64, size=int(rng.integers(0, k + 1)), replace=False)
        for bit in flips.tolist():
            values[i] ^= np.uint64(1 << bit)
    return values[rng.permutation(n)]


@THREADS
@pytest.mark.parametrize(("design", "kmax"), JOINS, ids=IDS)
def test_planted_near_duplicates_at_every_distance(
    design: JoinDesign, kmax: int, tuning: Tuning
) -> None:
    rng = np.random.default_rng(5)
    values = planted(rng, 600, kmax)
    for k in range(kmax + 1):
        pairs = check_join(values, k, design, tuning)
        assert {d for _, _, d in pairs} == set(range(k + 1))  # every distance is there


@THREADS
@pytest.mark.parametrize(("design", "kmax"), JOINS, ids=IDS)
def test_exact_duplicate_groups_and_hot_prefixes(
    design: JoinDesign, kmax: int, tuning: Tuning
) -> None:
    """400 copies of one value, 300 values sharing every table's prefix bits (only the low
    bits differ: one hot group per table), random values around them."""
    rng = np.random.default_rng(9)
    hot = np.uint64(0xDEADBEEF00000000) | rng.integers(0, 1 << 6, 300, dtype=np.uint64)
    values = np.concatenate(
        [
            np.full(400, 0x0123456789ABCDEF, dtype=np.uint64),
            hot,
            rng.integers(0, 2**64, 300, dtype=np.uint64),
        ]
    )
    check_join(values[rng.permutation(values.size)], kmax, design, tuning)


@THREADS
@pytest.mark.parametrize("budget", [1, 2, 3, 50])
@pytest.mark.parametrize(("design", "kmax"), JOINS, ids=IDS)
def test_kernel_resumes_between_small_chunks(
    design: JoinDesign, kmax: int, budget: int, tuning: Tuning
) -> None:
    """Tuning.pair_budget pairs per kernel call (and 16x as many candidates): calls stop at
    every point of a group and resume there, nothing lost or repeated."""
    rng = np.random.default_rng(budget)
    small = dataclasses.replace(tuning, pair_budget=budget)
    check_join(planted(rng, 300, kmax), kmax, design, small)


@pytest.mark.parametrize("budget", [1, 2, 7, 2**62, 2**63 - 3, 2**63 - 1])
def test_kernel_work_budget_bounds_each_call(budget: int) -> None:
    """group_pairs_verified verifies at most work_budget candidates a call and always makes
    progress, up to the largest int64 budget (an end computed as j + budget overflowed there
    and the kernel returned where it started)."""
    from permindex.index.join import kernels as join_kernels

    keys = np.repeat(np.arange(3, dtype=np.uint64), [5, 1, 4])
    values = np.arange(keys.size, dtype=np.uint64)
    positions = np.arange(keys.size, dtype=np.int64)
    out = [np.empty(16, dtype=np.int64) for _ in range(3)]
    found: list[tuple[int, int, int]] = []
    i, j = 0, 1
    while i < keys.size:
        count, i2, j2 = join_kernels.group_pairs_verified(
            keys, values, positions, 64, np.zeros(0, dtype=np.uint64), i, j, budget, *out
        )
        assert (i2, j2) > (i, j), "no progress"
        assert count <= budget  # k = 64: every candidate verified is a pair kept
        a, b, d = (column[:count].tolist() for column in out)
        found.extend(zip(a, b, d, strict=True))
        i, j = i2, j2
    # every pair of each run of equal keys (runs of 5, 1 and 4: 10 + 0 + 6), each once
    assert sorted((a, b) for a, b, _ in found) == [
        (a, b) for a in range(10) for b in range(a + 1, 10) if keys[a] == keys[b]
    ]


@SETTINGS
@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=60),
    st.lists(st.tuples(st.integers(0, 59), st.integers(0, 63)), max_size=60),
    st.sampled_from(JOINS),
    st.sampled_from(TUNINGS),
)
def test_kernel_equals_brute_force(
    base: list[int], flips: list[tuple[int, int]], join: tuple[JoinDesign, int], tuning: Tuning
) -> None:
    """Any values (with near copies: a bit of value i flipped, appended), every k the join
    answers."""
    design, kmax = join
    values = list(base)
    for i, bit in flips:
        if base:
            values.append(base[i % len(base)] ^ (1 << bit))
    array = np.array(values, dtype=np.uint64)
    for k in range(kmax + 1):
        check_join(array, k, design, tuning)


@THREADS
def test_should_stop_is_checked_between_kernel_calls(tuning: Tuning) -> None:
    """A should_stop that turns True after a few checks stops a join of many kernel calls:
    one thread at the 11th check; in threads, each of (4, 1)'s 4 tables at its first True
    at most."""
    small = dataclasses.replace(tuning, pair_budget=4)
    values = planted(np.random.default_rng(3), 2000, 3)
    calls = 0
    lock = threading.Lock()

    def stop() -> bool:
        nonlocal calls
        with lock:
            calls += 1
            return calls > 10

    with pytest.raises(CallCancelledError):
        self_join(values, 3, Design(4, 1), stop, tuning=small)
    threaded = tuning.join_threads > 1
    assert 11 <= calls <= 10 + 4 if threaded else calls == 11


def dfs_labels(n: int, a: np.ndarray, b: np.ndarray) -> list[int]:
    """Each node's smallest node of its component, by depth-first search."""
    neighbours: list[list[int]] = [[] for _ in range(n)]
    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        neighbours[x].append(y)
        neighbours[y].append(x)
    label = [-1] * n
    for start in range(n):
        if label[start] >= 0:
            continue
        stack, seen = [start], [start]
        label[start] = start
        while stack:
            for other in neighbours[stack.pop()]:
                if label[other] < 0:
                    label[other] = start
                    stack.append(other)
                    seen.append(other)
    return label


@SETTINGS
@given(st.integers(1, 80), st.lists(st.tuples(st.integers(0, 79), st.integers(0, 79))))
def test_union_find_equals_a_plain_one_and_search(n: int, edges: list[tuple[int, int]]) -> None:
    a = np.array([x % n for x, _ in edges], dtype=np.int64)
    b = np.array([y % n for _, y in edges], dtype=np.int64)
    truth = dfs_labels(n, a, b)
    assert union_find_components(n, a.tolist(), b.tolist()) == truth
    assert components(n, a, b).tolist() == truth


@SETTINGS
@given(FINGERPRINT_LISTS)
def test_distinct_values_kernel_equals_a_dict(fps: list[int]) -> None:
    """The kernel's grouping of distinct_values (group_by_value, after the sort that finds the
    repeated values) gives what a dict gives."""
    array = np.array(fps, dtype=np.uint64)
    by_value, first, counts, distinct = reference_values(fps)
    got = distinct_values(array)
    assert got.by_value.tolist() == by_value
    assert got.first.tolist() == first
    assert got.counts.tolist() == counts
    assert got.distinct.tolist() == distinct
    assert got.distinct[got.value_of].tolist() == fps
    assert got.value_of.dtype == np.int64 and got.distinct.dtype == np.uint64


def test_distinct_values_kernel_with_every_value_repeated_or_one_value() -> None:
    """The kernel's edge cases: every value repeated (no single), one value n times, a filter
    table whose slots every position passes (values alike in their top bits), and arrays
    that are not native contiguous uint64 (big-endian, strided: a TypingError before)."""
    rng = np.random.default_rng(8)
    base = rng.integers(0, 2**64, 500, dtype=np.uint64)
    repeats = np.concatenate((base, base[::-1], base[:7]))
    for array in (
        repeats,
        np.full(1000, 12345, dtype=np.uint64),
        np.arange(2000, dtype=np.uint64) % np.uint64(300),
        repeats.astype(">u8"),
        np.repeat(repeats, 2)[::3],
    ):
        got = distinct_values(array)
        by_value, first, counts, distinct = reference_values(array.tolist())
        assert got.by_value.tolist() == by_value
        assert got.first.tolist() == first
        assert got.counts.tolist() == counts
        assert got.distinct.tolist() == distinct


def test_long_chains_and_stars() -> None:
    """A path over 20,000 nodes in a shuffled order (deep trees for a naive union-find) and a
    star: one component each, labelled by its smallest node."""
    rng = np.random.default_rng(1)
    n = 20_000
    path = rng.permutation(n).astype(np.int64)
    order = rng.permutation(n - 1)
    a, b = path[:-1][order], path[1:][order]
    star_a = np.full(999, n, dtype=np.int64)
    star_b = np.arange(n + 1, n + 1000, dtype=np.int64)
    a, b = np.concatenate([a, star_b]), np.concatenate([b, star_a])
    labels = components(n + 1000, a, b)
    assert (labels[:n] == 0).all() and (labels[n:] == n).all()


@THREADS
def test_near_duplicates_equal_brute_force(tuning: Tuning) -> None:
    """The whole answer on the kernels: the pairs in key order are brute force's, the
    clusters the components of those pairs (a plain union-find), the flags their keys."""
    rng = np.random.default_rng(4)
    values = planted(rng, 3000, 3)
    keys = [f"k{int(x):05d}" for x in rng.permutation(values.size)]
    near = NearDuplicates(keys, values, 3, tuning=tuning)
    i, j, d = brute_force_pairs(values, 3)
    expected = sorted(
        (min(keys[a], keys[b]), max(keys[a], keys[b]), dist)
        for a, b, dist in zip(i.tolist(), j.tolist(), d.tolist(), strict=True)
    )
    assert list(near.iter_pairs()) == expected and expected
    labels = union_find_components(values.size, i.tolist(), j.tolist())
    groups: dict[int, list[str]] = {}
    for position, label in enumerate(labels):
        groups.setdefault(label, []).append(keys[position])
    clustered = sorted(sorted(group) for group in groups.values() if len(group) > 1)
    assert sorted(sorted(cluster) for cluster in near.clusters()) == clustered
    assert {flag.key for flag in near.flags()} == {key for group in clustered for key in group}


@THREADS
@pytest.mark.parametrize("threshold", [0, 1 << 62], ids=["8-tables", "on-4-1"])
def test_byte_pairs_on_their_8_tables_or_on_4_1(
    threshold: int, tuning: Tuning, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled join keeps BYTE_PAIRS' 8 tables of 24-bit keys from
    Tuning.byte_pairs_min_rows values on (the larger joins, where (4, 1)'s runs of equal
    16-bit keys grow long), and joins on (4, 1) below it: the same pairs as brute force
    either way, planted at every distance, equal values and hot prefixes included."""
    chosen = dataclasses.replace(tuning, byte_pairs_min_rows=threshold)
    tables: list[object] = []
    real = join_module._table_key

    def table_key(values: np.ndarray, k: int, design: JoinDesign, t: int) -> Any:
        tables.append(design)
        return real(values, k, design, t)

    monkeypatch.setattr(join_module, "_table_key", table_key)
    rng = np.random.default_rng(31)
    values = np.concatenate(
        [
            planted(rng, 800, 3),
            np.full(50, 7, np.uint64),
            np.arange(60, dtype=np.uint64) << np.uint64(30),
        ]
    )
    for k in range(4):
        tables.clear()
        pairs = check_join(values, k, BYTE_PAIRS, chosen)
        assert tables == [BYTE_PAIRS] * 8 if threshold == 0 else [Design(4, 1)] * 4
        assert {d for _, _, d in pairs} == set(range(k + 1))


def test_an_exception_in_the_calling_thread_stops_the_join_threads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A KeyboardInterrupt lands in the calling thread only, which waits for the tables'
    threads: when it arrives (here a signal handler raising in that thread after the 5th
    kernel call), the running tables stop at their next check -- one kernel call each at
    most -- and no other table starts; before, the pool's exit waited for every running
    table to finish."""
    import signal

    class Interrupted(Exception):
        pass

    tuning = Tuning(join_threads=2, join_threads_min_rows=0, pair_budget=16)
    from permindex.index.join import kernels as join_kernels

    real = join_kernels.group_pairs_verified
    main = threading.get_ident()
    calls = {"before": 0, "after": 0}
    sent, landed = threading.Event(), threading.Event()

    def counted(*args: Any) -> Any:
        if landed.is_set():
            calls["after"] += 1
        elif not sent.is_set():
            calls["before"] += 1
            if calls["before"] == 5:
                sent.set()
                signal.pthread_kill(main, signal.SIGUSR1)  # where Ctrl-C lands
        return real(*args)

    def handler(signum: int, frame: object) -> None:
        landed.set()
        raise Interrupted

    monkeypatch.setattr(join_kernels, "group_pairs_verified", counted)
    rng = np.random.default_rng(8)
    blocks = rng.integers(0, 4, (4, 4000), dtype=np.uint64)  # every table: 4 keys, long runs
    values = sum(blocks[i] << np.uint64(16 * i) for i in range(4)).astype(np.uint64)
    previous = signal.signal(signal.SIGUSR1, handler)
    try:
        with pytest.raises(Interrupted):
            self_join(values, 3, Design(4, 1), tuning=tuning)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    assert landed.is_set() and calls["after"] <= 2, calls  # one call per thread at most
    # every table thread ends at once (one landing inside pool.submit, between a thread's
    # start and the pool noting it, is not joined by the pool's exit: it ends on its own)
    deadline = time.monotonic() + 10
    while any(t.name.startswith("permindex-join") for t in threading.enumerate()):
        assert time.monotonic() < deadline, threading.enumerate()
        time.sleep(0.01)
