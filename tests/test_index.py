"""The index: every result checked against brute force, mutation invariants (``_check``) in a
randomized stress sequence, input validation that changes nothing, check_and_add under threads.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from conftest import IndexParts
from hypothesis import given
from hypothesis import strategies as st
from index_checks import (
    TOP,
    assert_queries_match_brute_force,
    clustered,
    expected_pairs,
    expected_query,
    snapshot,
)
from index_checks import export_lists as _export_lists
from strategies import (
    DESIGNS,
    SETTINGS,
    boundary_bits,
    designs,
    fingerprints,
    flip,
    keys,
    neighbours,
)

import permindex.index.join.self_join as join_module
from permindex import Index, InvalidArgumentError, Match, NotFoundError, hamming
from permindex.index import CheckAndAddResult
from permindex.index.tables.permutation import Design
from permindex.index.tuning import Tuning

Design_K = tuple[tuple[int, int], int]


def make_index(design_k: Design_K, **options: Any) -> Index:
    pair, k = design_k
    return Index(k, pair, **options)


# -- construction ----------------------------------------------------------------------------


def test_defaults() -> None:
    index = Index()
    assert index.k == 3
    assert index.design == Design(4, 1)
    assert len(index) == 0
    assert index.query(0) == []
    assert index.pairs() == []
    assert repr(index) == "Index(k=3, design=(4, 1), keys=0)"


@pytest.mark.parametrize(("pair", "max_k"), DESIGNS)
def test_k_above_the_design_guarantee_is_refused(pair: tuple[int, int], max_k: int) -> None:
    Index(max_k, pair)
    with pytest.raises(InvalidArgumentError, match=rf"guarantees k <= {max_k}") as refused:
        Index(max_k + 1, pair)
    # The design the message suggests does find that k.
    suggested = re.search(r"such as \((\d+) blocks, (\d+) leading\)", str(refused.value))
    assert suggested is not None
    Index(max_k + 1, (int(suggested.group(1)), int(suggested.group(2))))


def test_k_message_names_the_design() -> None:
    with pytest.raises(InvalidArgumentError, match=r"design \(4 blocks, 1 leading\) guarantees"):
        Index(4)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"k": -1}, InvalidArgumentError),
        ({"k": 1.0}, TypeError),
        ({"k": True}, TypeError),
        ({"k": "3"}, TypeError),
        ({"design": (4, 4)}, InvalidArgumentError),
        ({"design": [4, 1]}, TypeError),
        ({"memtable_limit": 0}, InvalidArgumentError),
        ({"compaction_min": -1}, InvalidArgumentError),
        ({"tuning": {"pair_budget": 7}}, TypeError),
    ],
)
def test_invalid_construction(args: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        Index(**args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("knobs", "error"),
    [
        ({"pair_budget": 0}, InvalidArgumentError),
        ({"pair_budget": 2**32}, InvalidArgumentError),
        ({"build_threads": 1.5}, TypeError),
        ({"hash_chunk": True}, TypeError),
        ({"merge_all_min_share": 1.5}, InvalidArgumentError),
        ({"row_limit": -1}, InvalidArgumentError),
    ],
)
def test_invalid_tuning(knobs: dict[str, Any], error: type[Exception]) -> None:
    with pytest.raises(error):
        Tuning(**knobs)


# -- basic operations -------------------------------------------------------------------------


def test_add_get_remove_discard() -> None:
    index = Index()
    assert index.add("a", 5) is True
    assert index.add("b", TOP) is True
    assert index.add("a", 7) is False  # replaced
    assert index.add("a", 7) is False  # unchanged
    assert index.get("a") == 7 and type(index.get("a")) is int
    assert index.get("zzz") is None
    assert "a" in index and "zzz" not in index and 5 not in index
    assert len(index) == 2
    assert list(index) == ["b", "a"]  # the order of the last addition: "a" was replaced
    index.remove("a")
    assert "a" not in index and index.get("a") is None
    with pytest.raises(NotFoundError) as raised:
        index.remove("a")
    assert isinstance(raised.value, KeyError)
    assert index.discard("a") is False
    assert index.discard("b") is True
    assert len(index) == 0
    index._check()


def test_replace_leaves_no_stale_entry(index_parts: IndexParts) -> None:
    index = Index(memtable_limit=4, compaction_min=2)
    old, new = 0x1234_5678_9ABC_DEF0, 0xFEDC_BA98_7654_3210
    index.add("doc", old)
    index.add_many([f"n{i}" for i in range(10)], [old ^ (1 << i) for i in range(10)])
    index.add("doc", new)
    index._check()
    assert [m.key for m in index.query(old, k=0)] == []
    assert index.query(new) == [Match("doc", new, 0)]
    assert all(m.key != "doc" for m in index.query(old))
    assert all("doc" not in pair[:2] for pair in index.pairs())
    for _ in range(200):  # repeated replacement is compacted away
        index.add("doc", old)
        index.add("doc", new)
    index._check()
    assert index_parts.rows[-1].n <= 2 * len(index) + 2


def test_match_fields_are_python_types() -> None:
    index = Index()
    index.add_many(["a", "b"], np.array([1, TOP], dtype=np.uint64))
    qs = [1, TOP] * 10
    for result in [index.query(1), *index.query_many(qs), *index.query_many(qs[:2])]:
        for match in result:
            assert type(match.key) is str
            assert type(match.fingerprint) is int
            assert type(match.distance) is int


def test_keys_at_the_byte_limit() -> None:
    index = Index()
    ascii_key = "a" * 1024
    wide_key = "\U0001f600" * 256  # 4 bytes each: 1,024 bytes
    assert index.add(ascii_key, 1) and index.add(wide_key, 2)
    assert index.add_many(["é" * 512, "x" * 1024], [3, 4]).tolist() == [True, True]
    for bad in ("a" * 1025, "a" + "\U0001f600" * 256, "é" * 513):
        with pytest.raises(InvalidArgumentError, match=r"\d+ UTF-8 bytes; at most 1024"):
            index.add(bad, 1)
        with pytest.raises(InvalidArgumentError):
            index.add_many(["ok", bad], [1, 2])
    assert len(index) == 4


def test_add_many_semantics() -> None:
    index = Index(memtable_limit=4)
    assert index.add_many([], []).tolist() == []
    index.add("x", 10)
    new = index.add_many(["a", "x", "a", "b"], [1, 11, 2, 3])
    assert new.dtype == bool and new.tolist() == [True, False, True, True]
    assert index.get("a") == 2 and index.get("x") == 11 and index.get("b") == 3
    new = index.add_many((f"g{i}" for i in range(3)), (i for i in range(3)))
    assert new.tolist() == [True] * 3
    new = index.add_many(np.array(["a", "n1"]), np.array([2, 7], dtype=np.int64))
    assert new.tolist() == [False, True]
    assert index.add_many(["u"], np.array([TOP], dtype=np.uint64)).tolist() == [True]
    assert index.get("u") == TOP
    index._check()
    # A bulk load with a repeated key into an empty index.
    fresh = Index(memtable_limit=2)
    assert fresh.add_many(["k", "j", "k"], [1, 2, 3]).tolist() == [True, True, True]
    assert fresh.get("k") == 3 and len(fresh) == 2
    fresh._check()


def test_from_arrays_and_export() -> None:
    rng = np.random.default_rng(3)
    fps = rng.integers(0, TOP, 5000, dtype=np.uint64, endpoint=True)
    names = [f"https://example.org/{i}" for i in range(5000)]
    index = Index.from_arrays(names, fps, k=2, design=(5, 2), memtable_limit=64)
    assert index.k == 2 and index.design == Design(5, 2)
    keys_, exported = index.export()
    assert keys_ == names and np.array_equal(exported, fps) and exported.dtype == np.uint64
    exported[0] ^= np.uint64(1)
    assert index.get(names[0]) == int(fps[0])  # export is a copy
    index._check()
    assert index.memory_bytes() >= 5000 * (8 + 10 * 4)


def test_iteration_order_and_copy() -> None:
    index = Index(compaction_min=0)
    for name in ["c", "a", "b"]:
        index.add(name, hash(name) & TOP)
    index.add("a", 12345)  # replacing moves the key to the end (the order of last addition)
    iterator = iter(index)
    index.remove("b")  # iteration is over a copy
    assert list(iterator) == ["c", "b", "a"]
    assert list(index) == ["c", "a"]


# -- queries against brute force --------------------------------------------------------------


@pytest.mark.parametrize("design_k", DESIGNS)
def test_random_and_clustered_sets(design_k: Design_K) -> None:
    rng = np.random.default_rng(sum(design_k[0]))
    k = design_k[1]
    fps = np.concatenate(
        [
            rng.integers(0, TOP, 300, dtype=np.uint64, endpoint=True),
            clustered(rng, 500, 12, k + 2),
            np.full(40, 0xDEAD_BEEF_0000_0001, dtype=np.uint64),  # many equal fingerprints
        ]
    )
    names = [f"key-{i:04d}" for i in range(fps.size)]
    index = make_index(design_k, memtable_limit=32, compaction_min=8)
    index.add_many(names[:400], fps[:400])
    for name, value in zip(names[400:600], fps[400:600].tolist(), strict=True):
        index.add(name, value)
    index.add_many(names[600:], fps[600:])
    for name in names[::9]:
        index.remove(name)
    index._check()
    queries = fps[::7].tolist() + rng.integers(0, TOP, 20, dtype=np.uint64).tolist()
    queries += [int(fps[5]) ^ 1, int(fps[500]) ^ (1 << 63)]
    assert_queries_match_brute_force(index, queries)
    for smaller in range(k):
        assert_queries_match_brute_force(index, queries[::3], k=smaller)
    keys_, values = index.export()
    for kk in range(k + 1):
        assert index.pairs(kk) == expected_pairs(keys_, values, kk)


@SETTINGS
@given(st.data(), designs, fingerprints, st.booleans())
def test_neighbours_at_exact_distances(
    data: st.DataObject, design_k: Design_K, base: int, bulk: bool
) -> None:
    pair, k = design_k
    names: list[str] = []
    values: list[int] = []
    for distance in range(k + 2):
        for copy in range(2):
            neighbour, _bits = data.draw(neighbours(pair, base, distance))
            names.append(f"d{distance}-{copy}")
            values.append(neighbour)
    for bit in boundary_bits(pair):  # every boundary bit alone
        names.append(f"b{bit}")
        values.append(flip(base, [bit]))
    index = Index(k, pair, memtable_limit=3)
    if bulk:
        index.add_many(names, values)
    else:
        for name, value in zip(names, values, strict=True):
            index.add(name, value)
    index._check()
    got = index.query(base)
    assert got == expected_query(names, np.array(values, dtype=np.uint64), base, k)
    assert {m.key for m in got} >= {n for n, v in zip(names, values, strict=True) if v == base}
    for name, value in zip(names, values, strict=True):
        d = hamming(base, value)
        assert (name in {m.key for m in got}) == (d <= k)
    assert_queries_match_brute_force(index, [base, *values[:6]])
    kk = data.draw(st.integers(min_value=0, max_value=k))
    assert_queries_match_brute_force(index, [base], k=kk)
    assert index.pairs() == expected_pairs(names, np.array(values, dtype=np.uint64), k)


@SETTINGS
@given(designs, st.dictionaries(keys, fingerprints, max_size=30), st.lists(fingerprints))
def test_arbitrary_keys_and_fingerprints(
    design_k: Design_K, stored: dict[str, int], queries: list[int]
) -> None:
    index = make_index(design_k, memtable_limit=5)
    index.add_many(list(stored), list(stored.values()))
    index._check()
    assert dict(zip(*_export_lists(index), strict=True)) == stored
    assert_queries_match_brute_force(index, queries + list(stored.values())[:5])


def test_limit() -> None:
    index = Index()
    base = 0x0F0F_0F0F_0F0F_0F0F
    index.add_many([f"k{i}" for i in range(10)], [base ^ (1 << i) for i in range(10)])
    index.add("same", base)
    full = index.query(base)
    assert len(full) == 11 and full[0] == Match("same", base, 0)
    assert index.query(base, limit=3) == full[:3]
    assert index.query(base, limit=0) == full
    assert index.query(base, limit=None) == full
    assert index.query(base, limit=100) == full
    assert index.query_many([base] * 12, limit=2) == [full[:2]] * 12
    assert index.query_many([base] * 2, limit=2) == [full[:2]] * 2
    with pytest.raises(InvalidArgumentError):
        index.query(base, limit=-1)
    with pytest.raises(TypeError):
        index.query(base, limit=True)


def test_pairs_with_a_big_group_of_equal_fingerprints() -> None:
    value = 0xAAAA_5555_AAAA_5555
    names = [f"same{i:03d}" for i in range(300)]
    values = [value] * 300 + [value ^ 1, value ^ (1 << 63) ^ 1, value ^ 0xF, 0]
    names += ["near1", "near2", "far4", "zero"]
    index = Index(memtable_limit=16)
    index.add_many(names, values)
    pairs = index.pairs()
    # 300 equal, near1/near2 to each of them, near1-near2 (1 bit), far4-near1 (3 bits)
    assert len(pairs) == 300 * 299 // 2 + 2 * 300 + 2
    assert pairs == expected_pairs(names, np.array(values, dtype=np.uint64), 3)
    assert index.pairs(0) == expected_pairs(names, np.array(values, dtype=np.uint64), 0)
    small = Index(memtable_limit=16, tuning=Tuning(pair_budget=7))
    small.add_many(names, values)
    assert small.pairs() == pairs


def test_pairs_key_order_is_code_point_order() -> None:
    index = Index()
    index.add_many(["é", "a", "Z", "\U0001f600"], [0, 0, 1, 3])
    assert index.pairs() == [
        ("Z", "a", 1),
        ("Z", "é", 1),
        ("Z", "\U0001f600", 1),
        ("a", "é", 0),
        ("a", "\U0001f600", 2),
        ("é", "\U0001f600", 2),
    ]


# -- randomized stress with invariants ---------------------------------------------------------


@pytest.mark.parametrize(("design_k", "seed"), [(d, seed) for seed, d in enumerate(DESIGNS)])
def test_randomized_stress(design_k: Design_K, seed: int, index_parts: IndexParts) -> None:
    pair, k = design_k
    rng = random.Random(seed)
    limit = 4
    index = Index(k, pair, memtable_limit=limit, compaction_min=3)
    rows, runs = index_parts.rows[-1], index_parts.runs[-1]
    model: dict[str, int] = {}
    centers = [rng.getrandbits(64) for _ in range(6)]
    edges = boundary_bits(pair)
    pool = [f"key{i:02d}" for i in range(40)]
    most_runs = 0
    compactions = 0

    def fingerprint() -> int:
        if rng.random() < 0.15:
            return rng.getrandbits(64)
        bits = rng.sample(edges, min(len(edges), rng.randint(0, k + 1)))
        return flip(rng.choice(centers), bits)

    for step in range(1200):
        op = rng.random()
        rows_before = rows.n
        if op < 0.35:
            key, value = rng.choice(pool), fingerprint()
            assert index.add(key, value) == (key not in model)
            model[key] = value
        elif op < 0.5:
            size = rng.choice([1, 2, 3, limit, limit + 3, 12])
            batch = [rng.choice(pool) for _ in range(size)]
            values = [fingerprint() for _ in batch]
            expected_new = [key not in model for key in batch]
            arg: object = np.array(values, dtype=np.uint64) if rng.random() < 0.5 else values
            assert index.add_many(batch, arg).tolist() == expected_new  # type: ignore[arg-type]
            model.update(zip(batch, values, strict=True))
        elif op < 0.65:
            key = rng.choice(pool)
            if key in model:
                index.remove(key)
                del model[key]
            else:
                before = snapshot(index)
                with pytest.raises(NotFoundError):
                    index.remove(key)
                assert snapshot(index) == before
        elif op < 0.75:
            key = rng.choice(pool)
            assert index.discard(key) == (key in model)
            model.pop(key, None)
        elif op < 0.9 and model:
            key = rng.choice(sorted(model))  # replace, sometimes with the same value
            value = model[key] if rng.random() < 0.3 else fingerprint()
            assert index.add(key, value) is False
            model[key] = value
        else:
            key, value = rng.choice(pool), fingerprint()
            added, matches, replaced = index.check_and_add(key, value)
            others = [m for m in expected_query(*_model_arrays(model), value, k) if m.key != key]
            assert matches == ([] if added else others)
            assert added == (not others)
            assert replaced == (added and key in model)
            if added:
                model[key] = value
        index._check()
        assert len(index) == len(model)
        assert dict(zip(*_export_lists(index), strict=True)) == model
        most_runs = max(most_runs, len(runs.tables[0].run_sizes))
        compactions += rows.n < rows_before
        if step % 25 == 0:
            assert_queries_match_brute_force(index, [fingerprint() for _ in range(10)])
            assert index.pairs() == expected_pairs(*_model_arrays(model), k)
    assert most_runs >= 2, "the sequence never had two frozen runs"
    assert compactions > 0, "the sequence never compacted"


def _model_arrays(model: dict[str, int]) -> tuple[list[str], np.ndarray]:
    return list(model), np.array(list(model.values()), dtype=np.uint64)


# -- invalid input changes nothing ---------------------------------------------------------------

# The calls take Any: they pass wrong types on purpose.
BAD_CALLS: list[tuple[str, Callable[[Any], object], type[Exception]]] = [
    ("negative fp", lambda ix: ix.add("k", -1), InvalidArgumentError),
    ("2^64 fp", lambda ix: ix.add("k", 1 << 64), InvalidArgumentError),
    ("bool fp", lambda ix: ix.add("k", True), TypeError),
    ("float fp", lambda ix: ix.add("k", 1.0), TypeError),
    ("str fp", lambda ix: ix.add("k", "1"), TypeError),
    ("None fp", lambda ix: ix.add("k", None), TypeError),
    ("empty key", lambda ix: ix.add("", 1), InvalidArgumentError),
    ("long key", lambda ix: ix.add("k" * 1025, 1), InvalidArgumentError),
    ("bytes key", lambda ix: ix.add(b"k", 1), TypeError),
    ("int key", lambda ix: ix.add(5, 1), TypeError),
    ("surrogate key", lambda ix: ix.add("\ud800", 1), InvalidArgumentError),
    ("lengths", lambda ix: ix.add_many(["a", "b"], [1]), InvalidArgumentError),
    ("lengths 2", lambda ix: ix.add_many(["a"], [1, 2]), InvalidArgumentError),
    (
        "int64 negative",
        lambda ix: ix.add_many(["old0", "new"], np.array([5, -1], dtype=np.int64)),
        InvalidArgumentError,
    ),
    ("2^64 in list", lambda ix: ix.add_many(["old0", "z"], [5, 1 << 64]), InvalidArgumentError),
    ("bool in list", lambda ix: ix.add_many(["old0", "z"], [5, True]), TypeError),
    ("float in list", lambda ix: ix.add_many(["old0", "z"], [5, 2.0]), TypeError),
    ("float array", lambda ix: ix.add_many(["old0"], np.array([5.0])), TypeError),
    ("bool array", lambda ix: ix.add_many(["old0"], np.array([True])), TypeError),
    ("empty key in batch", lambda ix: ix.add_many(["old0", ""], [5, 6]), InvalidArgumentError),
    (
        "long key in batch",
        lambda ix: ix.add_many(["old0", "x" * 1025], [5, 6]),
        InvalidArgumentError,
    ),
    ("int key in batch", lambda ix: ix.add_many(["old0", 3], [5, 6]), TypeError),
    ("str as keys", lambda ix: ix.add_many("ab", [5, 6]), TypeError),
    ("remove unknown", lambda ix: ix.remove("unknown"), NotFoundError),
    ("remove empty", lambda ix: ix.remove(""), InvalidArgumentError),
    ("discard int", lambda ix: ix.discard(3), TypeError),
    ("get int", lambda ix: ix.get(3), TypeError),
    ("query negative", lambda ix: ix.query(-1), InvalidArgumentError),
    ("query k too large", lambda ix: ix.query(1, k=4), InvalidArgumentError),
    ("query k negative", lambda ix: ix.query(1, k=-1), InvalidArgumentError),
    ("query k bool", lambda ix: ix.query(1, k=True), TypeError),
    ("query_many bad", lambda ix: ix.query_many([1, -1]), InvalidArgumentError),
    ("query_many int64", lambda ix: ix.query_many(np.array([-1])), InvalidArgumentError),
    ("query_many k", lambda ix: ix.query_many([1], k=9), InvalidArgumentError),
    ("check_and_add fp", lambda ix: ix.check_and_add("new", -1), InvalidArgumentError),
    ("check_and_add key", lambda ix: ix.check_and_add("", 1), InvalidArgumentError),
    ("check_and_add k", lambda ix: ix.check_and_add("new", 1, k=4), InvalidArgumentError),
    ("pairs k", lambda ix: ix.pairs(4), InvalidArgumentError),
]


@pytest.mark.parametrize(("name", "call", "error"), BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_invalid_input_raises_and_changes_nothing(
    name: str, call: Callable[[Any], object], error: type[Exception]
) -> None:
    index = Index(memtable_limit=2)
    index.add_many([f"old{i}" for i in range(5)], [i * 0x0101_0101 for i in range(5)])
    before = snapshot(index)
    with pytest.raises(error):
        call(index)
    assert snapshot(index) == before
    index._check()


# -- check_and_add and threads ---------------------------------------------------------------------


def test_check_and_add_semantics() -> None:
    index = Index()
    base = 0x0123_4567_89AB_CDEF
    assert index.check_and_add("a", base) == (True, [], False)
    assert index.check_and_add("b", base ^ 0b111) == (False, [Match("a", base, 3)], False)
    assert "b" not in index
    assert index.check_and_add("b", base ^ 0b111, k=2) == (True, [], False)
    # The key's own entry does not block; its fingerprint is replaced.
    assert index.check_and_add("a", base ^ 0b1000_0000, k=0) == (True, [], True)
    assert index.get("a") == base ^ 0b1000_0000
    added, matches, replaced = index.check_and_add("a", base ^ 0b111)
    assert not replaced
    assert not added and matches == [Match("b", base ^ 0b111, 0)]
    assert index.get("a") == base ^ 0b1000_0000  # unchanged when blocked
    index._check()


def race_check_and_add(index: Index, calls: list[tuple[str, int]]) -> list[CheckAndAddResult]:
    """Run ``index.check_and_add(key, value)`` for each call in its own thread, all released
    at once by a barrier; the results in call order."""
    barrier = threading.Barrier(len(calls))
    results = [CheckAndAddResult(False, [], False)] * len(calls)

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = index.check_and_add(*calls[i])

    pool = [threading.Thread(target=worker, args=(i,)) for i in range(len(calls))]
    for t in pool:
        t.start()
    for t in pool:
        t.join(timeout=10)
    return results


@pytest.mark.parametrize("threads", [2, 6])
def test_racing_near_duplicates_exactly_one_added(threads: int) -> None:
    rng = random.Random(threads)
    for _trial in range(25):
        index = Index()
        base = rng.getrandbits(64)
        calls = [(f"doc{i}", base ^ (1 << (i * 10))) for i in range(threads)]  # 2 bits apart
        results = race_check_and_add(index, calls)
        assert sum(result.added for result in results) == 1
        assert len(index) == 1
        (winner,) = list(index)
        for added, matches, replaced in results:
            assert not replaced
            if not added:
                assert [m.key for m in matches] == [winner]
        index._check()


def test_thread_safety_smoke() -> None:
    index = Index(memtable_limit=8, compaction_min=4)
    errors: list[BaseException] = []
    models: list[dict[str, int]] = [{} for _ in range(4)]
    stop = threading.Event()

    def writer(w: int) -> None:
        rng = random.Random(w)
        model = models[w]
        try:
            for step in range(300):
                key = f"w{w}-{rng.randrange(30)}"
                value = rng.getrandbits(64) if rng.random() < 0.5 else rng.getrandbits(8)
                op = rng.random()
                if op < 0.5:
                    index.add(key, value)
                    model[key] = value
                elif op < 0.7:
                    batch = [f"w{w}-{rng.randrange(30)}" for _ in range(5)]
                    values = [rng.getrandbits(64) for _ in batch]
                    index.add_many(batch, values)
                    model.update(zip(batch, values, strict=True))
                elif op < 0.9:
                    index.discard(key)
                    model.pop(key, None)
                else:
                    index.query(value)
                if step % 50 == 0:
                    index.pairs(1)
        except BaseException as error:  # re-raised in the main thread
            errors.append(error)

    def reader() -> None:
        rng = random.Random(99)
        try:
            while not stop.is_set():
                qs = [rng.getrandbits(8) for _ in range(20)]
                for q, result in zip(qs, index.query_many(qs), strict=True):
                    assert result == sorted(result, key=lambda m: (m.distance, m.key))
                    for match in result:
                        assert hamming(q, match.fingerprint) == match.distance <= 3
                keys_, fps = index.export()
                assert len(keys_) == fps.size
                len(index)
                list(index)
        except BaseException as error:
            errors.append(error)

    writers = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join(timeout=60)
    stop.set()
    for t in readers:
        t.join(timeout=60)
    assert not errors, errors
    index._check()
    expected = {key: value for model in models for key, value in model.items()}
    assert dict(zip(*_export_lists(index), strict=True)) == expected


@pytest.mark.parametrize("seed", [0, 48])
def test_large_buckets_in_runs_and_memtables(seed: int) -> None:
    """Buckets of hundreds of entries (near-duplicates share every prefix), in runs and in the
    memtable: single and batch queries answer as brute force."""
    rng = np.random.default_rng(seed)
    fps = clustered(rng, 900, 3, 5)
    names = [f"n{i}" for i in range(fps.size)]
    index = Index(memtable_limit=100)
    index.add_many(names[:700], fps[:700])
    for name, value in zip(names[700:], fps[700:].tolist(), strict=True):
        index.add(name, value)
    index.discard(names[3])
    index._check()
    assert_queries_match_brute_force(index, [*fps[::45].tolist(), int(fps[0]) ^ 7])


@pytest.mark.parametrize("design", [(4, 1), (5, 2), (6, 3), (3, 1), (8, 4)])
def test_designs_bulk_and_auto(design: tuple[int, int]) -> None:
    rng = np.random.default_rng(design[0])
    fps = np.concatenate([rng.integers(0, TOP, 3000, dtype=np.uint64), clustered(rng, 300, 4, 3)])
    names = [f"k{i}" for i in range(fps.size)]
    index = Index.from_arrays(names, fps, k=min(3, design[0] - design[1]), design=design)
    index._check()
    assert_queries_match_brute_force(index, fps[::50].tolist())
    auto = Index.from_arrays(names, fps, design="auto", memory_budget=10**9)
    assert auto.design.max_k >= 3
    assert_queries_match_brute_force(auto, fps[::100].tolist())
    with pytest.raises(InvalidArgumentError, match="auto"):
        Index(design="fast")
    with pytest.raises(InvalidArgumentError, match=r"guarantees k <= 1"):
        Index(k=3, design=(3, 2))
    assert isinstance(InvalidArgumentError("x"), ValueError)


def test_liveness_mask_only_while_rows_are_dead(index_parts: IndexParts) -> None:
    index = Index(compaction_min=0)
    rows = index_parts.rows[-1]
    fps = np.arange(1, 5001, dtype=np.uint64) * np.uint64(0x9E37_79B9_7F4A_7C15)
    index.add_many([f"k{i}" for i in range(5000)], fps)
    assert rows.live is None  # a bulk load: every row live, no mask
    per_fp = index.table_bytes() / 5000
    directories = 4 * 4 * (2**9 + 1) / 5000  # 4 tables of 2^9 buckets at 5,000 rows
    # The fingerprint (its array with an eighth of room after a bulk load: next_capacity), and
    # per table 3 bytes of row number and a 2-byte filter.
    assert per_fp == pytest.approx(8 * 9 / 8 + 4 * 5 + directories, abs=0.01)
    index.remove("k1")
    assert rows.live is not None and index.table_bytes() / 5000 > per_fp
    index.discard("k2")
    index._check()
    for i in range(3, 2502):  # the 2,501st removal outnumbers the live rows: a compaction
        index.remove(f"k{i}")
    assert rows.live is None and len(index) == 5000 - 2501
    index._check()
    assert_queries_match_brute_force(index, fps[::97].tolist())


@pytest.mark.parametrize(
    ("join", "k"), [((4, 1), 3), ((5, 2), 3), ((6, 2), 3), ((6, 3), 3), ((3, 1), 2)]
)
def test_pairs_on_every_join_design(
    monkeypatch: pytest.MonkeyPatch, join: tuple[int, int], k: int
) -> None:
    """Short prefixes (long runs of equal keys) and long ones (mostly unique) against brute
    force: random, clustered, a group of equal fingerprints, removed keys."""
    monkeypatch.setattr(join_module, "join_design", lambda design, kk, n: Design(*join))
    rng = np.random.default_rng(join[0])
    fps = np.concatenate(
        [
            rng.integers(0, TOP, 400, dtype=np.uint64, endpoint=True),
            clustered(rng, 300, 6, k + 1),
            np.full(30, 0x0123_4567_89AB_CDEF, dtype=np.uint64),
        ]
    )
    names = [f"p{i}" for i in range(fps.size)]
    index = Index(k, join, memtable_limit=64)
    index.add_many(names, fps)
    for name in names[::11]:
        index.remove(name)
    keys_, values = index.export()
    for kk in range(k + 1):
        assert index.pairs(kk) == expected_pairs(keys_, values, kk)


def test_pairs_on_the_byte_pair_join(monkeypatch: pytest.MonkeyPatch) -> None:
    """Index.pairs through the byte-pair join (chosen by cost for k = 3 at about 10^5
    fingerprints and more) against brute force, with removed keys and equal fingerprints."""
    calls: list[int] = []

    def byte_pairs(design: Design, kk: int, n: int) -> str:
        calls.append(kk)
        return join_module.BYTE_PAIRS

    monkeypatch.setattr(join_module, "join_design", byte_pairs)
    rng = np.random.default_rng(5)
    fps = np.concatenate(
        [
            rng.integers(0, TOP, 400, dtype=np.uint64, endpoint=True),
            clustered(rng, 300, 6, 4),
            np.full(30, 0x0123_4567_89AB_CDEF, dtype=np.uint64),
        ]
    )
    names = [f"p{i}" for i in range(fps.size)]
    index = Index(3, memtable_limit=64)
    index.add_many(names, fps)
    for name in names[::13]:
        index.remove(name)
    keys_, values = index.export()
    for kk in range(4):
        assert index.pairs(kk) == expected_pairs(keys_, values, kk)
    assert calls == [0, 1, 2, 3]
