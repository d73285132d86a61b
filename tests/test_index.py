"""The index: every result checked against brute force, mutation invariants (``_check``) in a
randomized stress sequence, input validation that changes nothing, check_and_add under threads.
"""

from __future__ import annotations

import random
import re
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
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

import permindex.index.index as index_module
import permindex.index.join as join_module
from permindex import Index, InvalidArgumentError, Match, NotFoundError, hamming
from permindex.index import CheckAndAddResult
from permindex.index.hamming import brute_force_pairs, brute_force_query
from permindex.index.permutation import Design

TOP = (1 << 64) - 1
Design_K = tuple[tuple[int, int], int]


# -- reference answers ---------------------------------------------------------------------


def expected_query(keys_: list[str], fps: np.ndarray, q: int, k: int) -> list[Match]:
    found = brute_force_query(fps, q, k).tolist()
    values = fps.tolist()
    out = [Match(keys_[i], values[i], bin(values[i] ^ q).count("1")) for i in found]
    return sorted(out, key=lambda m: (m.distance, m.key))


def expected_pairs(keys_: list[str], fps: np.ndarray, k: int) -> list[tuple[str, str, int]]:
    i, j, d = brute_force_pairs(fps, k)
    out = []
    for a, b, dist in zip(i.tolist(), j.tolist(), d.tolist(), strict=True):
        ka, kb = keys_[a], keys_[b]
        out.append((ka, kb, dist) if ka < kb else (kb, ka, dist))
    return sorted(out)


def assert_queries_match_brute_force(
    index: Index, queries: Iterable[int], k: int | None = None
) -> None:
    keys_, fps = index.export()
    qs = list(queries)
    kk = index.k if k is None else k
    singles = [index.query(q, k) for q in qs]
    for q, got in zip(qs, singles, strict=True):
        assert got == expected_query(keys_, fps, q, kk), f"query {q:#x} k={kk}"
    assert index.query_many(np.array(qs, dtype=np.uint64), k) == singles
    assert index.query_many(qs, k) == singles


def snapshot(index: Index) -> tuple[list[str], list[int], int]:
    keys_, fps = index.export()
    return keys_, fps.tolist(), len(index)


def clustered(rng: np.random.Generator, n: int, centers: int, max_flips: int) -> np.ndarray:
    """n fingerprints around a few centers (0..max_flips flipped bits), some exact copies."""
    base = rng.integers(0, TOP, centers, dtype=np.uint64, endpoint=True)
    out = base[rng.integers(0, centers, n)]
    for i in range(n):
        for bit in rng.choice(64, int(rng.integers(0, max_flips + 1)), replace=False):
            out[i] ^= np.uint64(1) << np.uint64(bit)
    return out


def make_index(design_k: Design_K, **options: int) -> Index:
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
    suggested = re.search(r"e\.g\. design \((\d+), (\d+)\)", str(refused.value))
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
    ],
)
def test_invalid_construction(args: dict[str, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        Index(**args)  # type: ignore[arg-type]


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
    assert list(index) == ["a", "b"]
    index.remove("a")
    assert "a" not in index and index.get("a") is None
    with pytest.raises(NotFoundError) as raised:
        index.remove("a")
    assert isinstance(raised.value, KeyError)
    assert index.discard("a") is False
    assert index.discard("b") is True
    assert len(index) == 0
    index._check()


def test_replace_leaves_no_stale_entry() -> None:
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
    assert index._n_rows <= 2 * len(index) + 2


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
    index.add("a", 12345)  # replacing keeps the key's place
    iterator = iter(index)
    index.remove("b")  # iteration is over a copy
    assert list(iterator) == ["c", "a", "b"]
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
    real = index_module.Match

    class CountingMatch:  # stands in for the Match class: counts what is made
        def __call__(self, *fields: Any) -> Match:
            made[0] += 1
            return real(*fields)

        def _make(self, fields: Iterable[Any]) -> Match:
            made[0] += 1
            return real._make(fields)

    def brute(query: int) -> list[Match]:
        near = [Match(key, value, bin(value ^ query).count("1")) for key, value in stored.items()]
        return sorted((m for m in near if m.distance <= 3), key=lambda m: (m.distance, m.key))

    def counting_new_match(fields: tuple[str, int, int]) -> Match:
        made[0] += 1
        return real._make(fields)

    monkeypatch.setattr(index_module, "Match", CountingMatch())
    monkeypatch.setattr(index_module, "_new_match", counting_new_match)
    limited = index.query_many(queries, limit=2)
    assert made[0] == 2 * len(queries)
    for query, got in zip(queries, limited, strict=True):
        assert got == brute(query)[:2]
    made[0] = 0
    everything = index.query_many(queries[:20])
    assert made[0] == sum(len(matches) for matches in everything) > 20 * 400
    assert everything[0] == brute(base)


def test_query_many_chunks_and_candidate_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(11)
    fps = clustered(rng, 600, 5, 4)
    index = Index(memtable_limit=50)
    index.add_many([f"k{i}" for i in range(600)], fps)
    queries = fps[:40].tolist()
    expected = [index.query(q) for q in queries]
    monkeypatch.setattr(index_module, "_QUERY_CHUNK", 7)
    monkeypatch.setattr(index_module, "_CANDIDATE_BUDGET", 5)
    assert index.query_many(queries) == expected


def test_pairs_with_a_big_group_of_equal_fingerprints(monkeypatch: pytest.MonkeyPatch) -> None:
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
    monkeypatch.setattr(join_module, "PAIR_BUDGET", 7)
    assert index.pairs() == pairs


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
def test_randomized_stress(design_k: Design_K, seed: int) -> None:
    pair, k = design_k
    rng = random.Random(seed)
    limit = 4
    index = Index(k, pair, memtable_limit=limit, compaction_min=3)
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
        rows_before = index._n_rows
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
        most_runs = max(most_runs, len(index._tables[0].run_sizes))
        compactions += index._n_rows < rows_before
        if step % 25 == 0:
            assert_queries_match_brute_force(index, [fingerprint() for _ in range(10)])
            assert index.pairs() == expected_pairs(*_model_arrays(model), k)
    assert most_runs >= 2, "the sequence never had two frozen runs"
    assert compactions > 0, "the sequence never compacted"


def _model_arrays(model: dict[str, int]) -> tuple[list[str], np.ndarray]:
    return list(model), np.array(list(model.values()), dtype=np.uint64)


def _export_lists(index: Index) -> tuple[list[str], list[int]]:
    keys_, fps = index.export()
    return keys_, fps.tolist()


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


@pytest.mark.parametrize("scan", [0, 48, 10**6])
def test_large_buckets_every_single_query_path(monkeypatch: pytest.MonkeyPatch, scan: int) -> None:
    """Buckets of hundreds of entries (near-duplicates share every prefix), in runs and in the
    memtable; single queries with the Python filter scan, the numpy one, and both mixed."""
    import permindex.index.table as table_module

    monkeypatch.setattr(table_module, "PYTHON_SCAN", scan)
    rng = np.random.default_rng(scan)
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


def test_liveness_mask_only_while_rows_are_dead() -> None:
    index = Index(compaction_min=0)
    fps = np.arange(1, 5001, dtype=np.uint64) * np.uint64(0x9E37_79B9_7F4A_7C15)
    index.add_many([f"k{i}" for i in range(5000)], fps)
    assert index._live is None  # a bulk load: every row live, no mask
    per_fp = index.table_bytes() / 5000
    directories = 4 * 4 * 2**11 / 5000  # 4 tables of 2^11 buckets at 5,000 rows
    # The fingerprint (its array with an eighth of room after a bulk load: next_capacity), and
    # per table 3 bytes of row number and a 2-byte filter.
    assert per_fp == pytest.approx(8 * 9 / 8 + 4 * 5 + directories, abs=0.1)
    index.remove("k1")
    assert index._live is not None and index.table_bytes() / 5000 > per_fp
    index.discard("k2")
    index._check()
    for i in range(3, 2502):  # the 2,501st removal outnumbers the live rows: a compaction
        index.remove(f"k{i}")
    assert index._live is None and len(index) == 5000 - 2501
    index._check()
    assert_queries_match_brute_force(index, fps[::97].tolist())


@pytest.mark.parametrize(
    ("join", "k"), [((4, 1), 3), ((5, 2), 3), ((6, 2), 3), ((6, 3), 3), ((3, 1), 2)]
)
def test_pairs_on_every_join_design(
    monkeypatch: pytest.MonkeyPatch, join: tuple[int, int], k: int
) -> None:
    """Short prefixes (grouped, filters first) and long ones (one sort, pairs by sorted distance)
    against brute force: random, clustered, a group of equal fingerprints, removed keys."""
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
    monkeypatch.setattr(join_module, "COUNT_BITS", 0)  # long prefixes: sort every row
    assert index.pairs() == expected_pairs(keys_, values, k)


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


def test_merge_outside_the_lock_survives_a_compaction(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction between a merge's computation and its swap: the merged run is discarded
    (its rows were renumbered) and the merging goes on from the new runs."""
    import permindex.index.table as table_module

    index = Index(memtable_limit=4, compaction_min=0)
    original = table_module.Table.merged_runs
    calls = [0]

    def merged_with_a_compaction(self: Any, *args: Any) -> Any:
        calls[0] += 1
        if calls[0] == 2:
            with index._lock:
                index._compact()
        return original(self, *args)

    monkeypatch.setattr(table_module.Table, "merged_runs", merged_with_a_compaction)
    rng = np.random.default_rng(4)
    fps = clustered(rng, 400, 4, 3)
    for start in range(0, 400, 50):
        index.add_many([f"m{i}" for i in range(start, start + 50)], fps[start : start + 50])
    index.remove("m7")
    index._check()
    assert calls[0] > 2
    assert_queries_match_brute_force(index, fps[::40].tolist())


def test_runs_with_rows_above_2_to_the_24() -> None:
    """Row numbers are kept as 16 + 8 bits below 2^24 and 16 + 16 bits above: a table whose rows
    start at 2^24 - 50 (a lazily zeroed fingerprint array, so no real memory) answers as brute
    force, in both the single and the batch path, before and after a merge."""
    from permindex.index.permutation import Design
    from permindex.index.table import Run, Table

    first = (1 << 24) - 50
    rng = np.random.default_rng(24)
    fps = np.zeros(first + 400, dtype=np.uint64)
    fps[first:] = clustered(rng, 400, 5, 3)
    table = Table(Design(4, 1).permutations[2], memtable_limit=8)
    table.add_many(first, 300, fps, None)
    table.add_many(first + 300, 100, fps, None)  # a second run, merged into the first
    assert table.run_sizes == (400,)
    run = table._runs[0]
    assert run.high.dtype == np.uint16 and int(run.rows.max()) == first + 399
    assert [run.row_at(i) for i in range(5)] == run.rows[:5].tolist()
    table._check(fps, first + 400)
    narrow = Run(np.array([0, 7, (1 << 24) - 1], dtype=np.uint32), np.zeros(3, np.uint16),
                 np.zeros(2, np.uint32), 0)  # fmt: skip
    assert narrow.high.dtype == np.uint8 and narrow.rows.tolist() == [0, 7, (1 << 24) - 1]
    perm = table.permutation
    for q in fps[first::37].tolist():
        hits: dict[int, tuple[int, int]] = {}
        table.lookup(q, 3, fps.data, hits)
        expected = {first + int(i) for i in brute_force_query(fps[first:], q, 3)}
        same_prefix = {r for r in expected if perm.prefix(int(fps[r])) == perm.prefix(q)}
        assert same_prefix <= set(hits) <= expected
        ((source, _filters, lo, counts),) = table.ranges_many(
            perm.prefix_array(np.array([q], dtype=np.uint64)), fps
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
    from permindex.index.table import Run, _split_rows

    rng = np.random.default_rng(top % 1000)
    rows: np.ndarray = np.unique(np.r_[rng.integers(0, top + 1, 500), 0, top]).astype(dtype)
    rng.shuffle(rows)
    for source in (rows, rows[::2]):
        low, high = _split_rows(source)
        assert low.dtype == np.uint16
        assert high.dtype == (np.uint8 if int(source.max()) < 1 << 24 else np.uint16)
        joined = (high.astype(np.int64) << 16) | low
        assert joined.tolist() == source.astype(np.int64).tolist()
    filters = rng.integers(0, 1 << 16, rows.size, dtype=np.uint16)
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
    from permindex.index.permutation import Design
    from permindex.index.table import Run

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
    from permindex.index.table import filtered_ranges, gather_ranges

    rng = np.random.default_rng(k)
    filters = rng.integers(0, 1 << 16, 5000, dtype=np.uint16)
    for queries in (0, 1, 300):
        counts = rng.integers(0, 40, queries).astype(np.int64)
        counts[::7] = 0
        lo = rng.integers(0, 5000 - 40, queries).astype(np.int64)
        query_filters = rng.integers(0, 1 << 16, queries, dtype=np.uint16)
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
    from permindex.index.table import Table

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
    table.add_many(0, size, fps, None)
    assert len(table._runs) == 1
    hits: dict[int, tuple[int, int]] = {}
    table.lookup(query, k, fps.data, hits)
    expected = {
        row: (value, (value ^ query).bit_count())
        for row, value in enumerate(fps.tolist())
        if (value ^ query).bit_count() <= k
    }
    assert hits == expected


def test_large_batches_build_the_tables_in_threads(
    monkeypatch: pytest.MonkeyPatch, prepare_run_threads: list[str]
) -> None:
    """A batch of at least _PARALLEL_MIN fingerprints has its tables' runs built by a pool of
    _BUILD_THREADS threads; the index is the same as one built in one thread (invariants,
    every query equal to brute force)."""
    threads = prepare_run_threads
    monkeypatch.setattr(index_module, "_PARALLEL_MIN", 1000)
    monkeypatch.setattr(index_module, "_BUILD_THREADS", 3)
    rng = np.random.default_rng(21)
    fps = np.concatenate([rng.integers(0, TOP, 3000, dtype=np.uint64), clustered(rng, 200, 4, 3)])
    names = [f"b{i}" for i in range(fps.size)]
    index = Index(design=(5, 2), memtable_limit=64)
    index.add_many(names, fps)
    assert len(threads) == 10 and all(name.startswith("permindex-build") for name in threads)
    threads.clear()
    index.add_many([f"small{i}" for i in range(500)], fps[:500] ^ np.uint64(1))
    assert len(threads) == 10 and not any(name.startswith("permindex-build") for name in threads)
    index._check()
    assert_queries_match_brute_force(index, [*fps[::40].tolist(), *(fps[:500:25] ^ 1).tolist()])


def test_large_batch_tables_built_while_keys_are_checked(
    monkeypatch: pytest.MonkeyPatch, prepare_run_threads: list[str]
) -> None:
    """With a fingerprint array, a large batch's tables are built in other threads while the
    keys are checked and hashed: a bad key is still refused with its position (nothing stored,
    no build thread left running), and repeated keys still keep their last fingerprint (the
    runs built for the whole batch are dropped)."""
    threads = prepare_run_threads
    monkeypatch.setattr(index_module, "_PARALLEL_MIN", 1000)
    rng = np.random.default_rng(22)
    fps = rng.integers(0, TOP, 3000, dtype=np.uint64)
    index = Index()
    index.add("kept", 5)
    names: list[Any] = [f"a{i}" for i in range(3000)]
    names[1500] = ""
    with pytest.raises(InvalidArgumentError, match="1500"):
        index.add_many(names, fps)
    # The runs were started before the keys were checked, in build threads (those not yet
    # started when the key was refused are cancelled).
    assert 1 <= len(threads) <= 4
    assert all(name.startswith("permindex-build") for name in threads)
    assert index.export()[0] == ["kept"]
    assert not [t for t in threading.enumerate() if t.name.startswith("permindex-build")]
    names[1500] = "a0"  # repeated: the later fingerprint wins
    new = index.add_many(names, fps)
    assert new.size == 3000 and bool(new.all())
    assert index.get("a0") == int(fps[1500])
    index._check()
    expected = {name: int(value) for name, value in zip(names, fps.tolist(), strict=True)}
    expected["kept"] = 5
    assert dict(zip(*_export_lists(index), strict=True)) == expected
    assert_queries_match_brute_force(index, fps[::60].tolist())


def test_merge_all_runs_leaves_one_run_per_table() -> None:
    """merge_all_runs: every table's runs and memtable become one run (dead rows dropped),
    queries equal brute force before and after; nothing to do returns False; an index written
    to less than ``idle`` seconds ago is left alone; a few writes after the merge (under
    min_share of the entries) are left to the memtable, unless min_share=0."""
    rng = np.random.default_rng(31)
    fps = np.concatenate([rng.integers(0, TOP, 5000, dtype=np.uint64), clustered(rng, 600, 5, 3)])
    names = [f"r{i}" for i in range(fps.size)]
    index = Index(memtable_limit=64)
    for start in range(0, 5000, 700):  # batches: several runs per table
        index.add_many(names[start : start + 700], fps[start : start + 700])
    for name, value in zip(names[5000:], fps[5000:].tolist(), strict=True):
        index.add(name, value)  # singles: some left in the memtables
    index.remove("r10")
    assert any(len(t.runs) > 1 for t in index._tables)
    queries = [*fps[::97].tolist(), *(fps[5000::37] ^ np.uint64(3)).tolist()]
    before = [index.query(q) for q in queries]
    assert not index.merge_all_runs(idle=60.0)  # just written to
    assert index.merge_all_runs()
    assert all(len(t.runs) == 1 and not t.memtable_size for t in index._tables)
    assert all(len(t) == fps.size - 1 for t in index._tables)  # the dead row dropped
    index._check()
    assert [index.query(q) for q in queries] == before
    assert_queries_match_brute_force(index, queries)
    assert not index.merge_all_runs()  # nothing left to merge
    for i in range(10):
        index.add(f"late-{i}", i)
    assert all(t.memtable_size == 10 for t in index._tables)
    # A trickle (10 of 5,609 entries, under the default eighth) is not worth a full merge.
    assert not index.merge_all_runs()
    assert all(t.memtable_size == 10 for t in index._tables)
    assert index.merge_all_runs(min_share=0)
    assert all(len(t.runs) == 1 and not t.memtable_size for t in index._tables)
    assert [m.key for m in index.query(3, k=0)] == ["late-3"]


def test_merge_all_runs_with_concurrent_writes_and_a_compaction(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Writes while merge_all_runs merges (outside the lock) land after the merged runs and are
    kept; a compaction meanwhile drops the merge (returns False) and nothing is lost."""
    import permindex.index.table as table_module

    rng = np.random.default_rng(32)
    fps = rng.integers(0, TOP, 4000, dtype=np.uint64)
    index = Index(memtable_limit=64, compaction_min=0)
    for start in range(0, 3000, 500):
        index.add_many([f"w{i}" for i in range(start, start + 500)], fps[start : start + 500])
    original = table_module.Table.merged_runs
    during = {"write": True, "compact": False}

    def merged_runs_with_a_write(self: Any, runs: Any, *args: Any) -> Any:
        if during["write"]:
            during["write"] = False
            index.add_many([f"w{i}" for i in range(3000, 4000)], fps[3000:])
        if during["compact"]:
            during["compact"] = False
            with index._lock:
                index._compact()
        return original(self, runs, *args)

    monkeypatch.setattr(table_module.Table, "merged_runs", merged_runs_with_a_write)
    assert index.merge_all_runs()
    index._check()
    assert len(index) == 4000
    assert_queries_match_brute_force(index, fps[::50].tolist())
    for start in range(0, 1000, 200):
        index.add_many([f"x{i}" for i in range(start, start + 200)], fps[start : start + 200])
    index.remove("x5")
    during["compact"] = True
    assert not index.merge_all_runs()
    index._check()
    assert len(index) == 4999
    assert_queries_match_brute_force(index, fps[::50].tolist())
