"""The key store: every operation against a dict model, with hash collisions forced (a hash with
a handful of values), growth of every array, removal with backward-shift deletion, compaction,
keys holding NUL and non-ASCII characters; and the index on top of it with the same collisions.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from conftest import IndexParts

import permindex.index.keys.store as keystore_module
from permindex import Index, InvalidArgumentError
from permindex.index.keys.store import KeyStore, batch_subset, encode_keys, hash_key
from permindex.index.tuning import Tuning


@pytest.fixture
def colliding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every key hashes to one of 32 values: long probe sequences, equal hashes of different
    keys, so only the byte comparison can tell keys apart."""

    def weak(data: bytes) -> int:
        return (len(data) % 2) * (1 << 63) + data[-1] % 16

    monkeypatch.setattr(keystore_module, "xxh3_64_intdigest", weak)


KEYS = [
    "a",
    "b",
    "doc-00000001",
    "é",
    "\U0001f600x",
    "nul\x00inside",
    "\x00",
    "x" * 1024,
    "7",
    "77",
]


def check(store: KeyStore, model: dict[str, int]) -> None:
    assert store._check() == []
    assert len(store) == len(model)
    for key, row in model.items():
        data = key.encode()
        assert store.find(data, hash_key(data)) == row
        assert store.key(row) == key
    batch = encode_keys([*model, "absent", "absent\x00"])
    assert store.find_many(batch).tolist() == [*model.values(), -1, -1]
    rows = np.array(sorted(model.values()), dtype=np.int64)
    assert store.keys(rows) == [store.key(r) for r in rows.tolist()]


@pytest.mark.parametrize("collide", [False, True])
def test_store_against_a_dict(collide: bool, request: pytest.FixtureRequest) -> None:
    if collide:
        request.getfixturevalue("colliding")
    rng = random.Random(5)
    store = KeyStore()
    model: dict[str, int] = {}  # key -> live row
    pool = KEYS + [f"k{i}" for i in range(300)]
    for step in range(2000):
        op = rng.random()
        key = rng.choice(pool)
        data = key.encode()
        h = hash_key(data)
        if op < 0.5:
            old = model.get(key, -1)
            if old >= 0:
                store.unlink(old)
            model[key] = store.append(data, h, moved_from=old)
        elif op < 0.7 and key in model:
            store.unlink(model.pop(key))
        elif op < 0.8:
            batch_keys = list(dict.fromkeys(rng.choice(pool) for _ in range(rng.randint(1, 40))))
            batch = encode_keys(batch_keys)
            old_rows = store.find_many(batch)
            assert old_rows.tolist() == [model.get(k, -1) for k in batch_keys]
            first = store.append_many(batch, old_rows)
            for i, k in enumerate(batch_keys):
                model[k] = first + i
        elif op < 0.82:
            keep = np.array(sorted(model.values()), dtype=np.int64)
            order = sorted(model, key=model.__getitem__)
            store.compact(keep)
            model = {k: i for i, k in enumerate(order)}
        if step % 300 == 0:
            check(store, model)
    check(store, model)


def test_first_added_order_survives_moves_and_compaction() -> None:
    store = KeyStore()
    rows = {k: store.append(k.encode(), hash_key(k.encode())) for k in ["c", "a", "b"]}
    store.unlink(rows["a"])
    rows["a"] = store.append(b"a", hash_key(b"a"), moved_from=rows["a"])
    live = np.array(sorted(rows.values()), dtype=np.int64)
    assert store.keys(store.iteration_order(live)) == ["c", "a", "b"]
    store.compact(live)
    assert store.keys(store.iteration_order(np.arange(3, dtype=np.int64))) == ["c", "a", "b"]


def test_growth_and_export() -> None:
    store = KeyStore()
    keys = [f"https://example.org/{i}/" + "é" * (i % 7) for i in range(20000)]
    first = store.append_many(encode_keys(keys[:10]))
    store.append_many(encode_keys(keys[10:]))
    assert first == 0 and store.rows == 20000 and store._check() == []
    rows = np.arange(0, 20000, 3, dtype=np.int64)
    lengths, blob = store.export(rows)
    expected = [keys[i].encode() for i in rows.tolist()]
    assert lengths.tolist() == [len(e) for e in expected]
    assert blob.tobytes() == b"".join(e + b"\x00" for e in expected)
    live = np.zeros(20000, dtype=bool)
    live[rows] = True
    assert store.live_keys(live) == [keys[i] for i in rows.tolist()]
    assert store.keys(rows[::-1]) == [keys[i] for i in rows[::-1].tolist()]
    subset = batch_subset(encode_keys(keys[:50]), np.array([1, 4, 49], dtype=np.int64))
    assert subset.lengths.tolist() == [len(keys[i].encode()) for i in (1, 4, 49)]
    assert store.find_many(subset).tolist() == [1, 4, 49]


@pytest.mark.parametrize("collide", [False, True])
def test_index_with_colliding_hashes(collide: bool, request: pytest.FixtureRequest) -> None:
    if collide:
        request.getfixturevalue("colliding")
    index = Index(memtable_limit=8, compaction_min=4)
    names = KEYS + [f"k{i}" for i in range(200)]
    values = [i * 0x9E37_79B9_7F4A_7C15 % (1 << 64) for i in range(len(names))]
    assert index.add_many(names, values).all()
    assert index.add_many(names[:5] + names[:5], values[5:15]).tolist() == [False] * 10
    for i, name in enumerate(names):
        expected = values[5 + i % 5 + 5] if i < 5 else values[i]
        assert index.get(name) == expected and name in index
    for name in names[::3]:
        index.remove(name)
    assert all((name in index) == (i % 3 != 0) for i, name in enumerate(names))
    index._check()
    keys_, _ = index.export()
    assert sorted(keys_) == sorted(n for i, n in enumerate(names) if i % 3)
    assert index.check_and_add("new", 12345).added
    index._check()


def test_from_compact_round_trip_and_errors() -> None:
    names = ["a", "é", "nul\x00in", "\U0001f600", *[f"k{i}" for i in range(300)]]
    values = [(i * 0x9E37_79B9_7F4A_7C15) % (1 << 64) for i in range(len(names))]
    index = Index.from_arrays(names, values)
    index.remove("k3")
    lengths, blob, fps = index.export_compact()
    copy = Index.from_compact(lengths, blob, fps, design="auto")
    copy._check()
    assert copy.export()[0] == index.export()[0] and np.array_equal(copy.export()[1], fps)
    assert copy.query(values[5]) == index.query(values[5])
    ascii_only = Index.from_compact(np.array([1, 2]), b"a\x00bc\x00", [1, 2])
    assert ascii_only.get("bc") == 2 and len(ascii_only) == 2
    repeated = Index.from_compact([1, 1], b"x\x00x\x00", [1, 2])  # the last one wins
    assert repeated.get("x") == 2 and len(repeated) == 1
    assert len(Index.from_compact([], b"", [])) == 0
    for lengths_, blob_, fps_, message in [
        ([2], b"a\x00", [1], "does not match"),
        ([1], b"ab", [1], "does not match"),
        ([0], b"\x00", [1], "1 to 1024"),
        ([1025], b"a" * 1025 + b"\x00", [1], "1 to 1024"),
        ([1], b"\xff\x00", [1], "UTF-8"),
        ([1, 1], b"a\x00b\x00", [1], "must match"),
        ([], b"a\x00", [], "non-empty"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            Index.from_compact(lengths_, blob_, fps_)


def test_from_compact_in_chunks_and_with_the_tables_built_in_a_thread(
    prepare_run_threads: list[str], index_parts: IndexParts
) -> None:
    """The key section is hashed a chunk of keys at a time (keys holding NUL cut by their
    lengths, the others split at the NULs) and checked as UTF-8 a slice at a time, while a
    second thread builds the tables: every stored hash is the key's, every query equals brute
    force, a repeated key keeps its last fingerprint, and a bad byte is reported at its offset
    in the whole section."""
    threads = prepare_run_threads
    tuning = Tuning(hash_chunk=7, parallel_min=1, utf8_slice=16)
    rng = np.random.default_rng(8)
    names = [f"k{i}" for i in range(1000)]
    names[10] = "nul\x00in"
    names[500] = "é\x00ü"
    names[777] = "\U0001f600"
    centers = rng.integers(0, 2**64 - 1, 20, dtype=np.uint64, endpoint=True)
    values = centers[rng.integers(0, 20, len(names))]
    values ^= np.uint64(1) << rng.integers(0, 64, len(names)).astype(np.uint64)
    encoded = [name.encode("utf-8") for name in names]
    lengths = np.array([len(e) for e in encoded])
    blob = b"".join(e + b"\x00" for e in encoded)
    index = Index.from_compact(lengths, bytearray(blob), values, memtable_limit=64, tuning=tuning)
    assert threads and all(name.startswith("permindex-build") for name in threads)
    index._check()  # includes: every stored hash is hash_key of the row's bytes
    assert index.export()[0] == names and np.array_equal(index.export()[1], values)
    keys = index_parts.rows[-1].keys  # the index's key store
    assert all(keys.hash_of(row) == hash_key(e) for row, e in enumerate(encoded))
    for q in values[::37].tolist():
        expected = {names[i] for i in np.flatnonzero(np.bitwise_count(values ^ np.uint64(q)) <= 3)}
        assert {m.key for m in index.query(q)} == expected
    assert [{m.key for m in ms} for ms in index.query_many(values[::53])] == [
        {names[i] for i in np.flatnonzero(np.bitwise_count(values ^ q) <= 3)} for q in values[::53]
    ]
    twice = Index.from_compact(np.r_[lengths, 2], blob + b"k5\x00", np.r_[values, 99])
    assert len(twice) == len(names) and twice.get("k5") == 99
    twice._check()
    bad = bytearray(blob)
    offset = blob.index(b"k900\x00") + 1  # far beyond the first 16-byte slice
    bad[offset] = 0xFF
    with pytest.raises(InvalidArgumentError, match=f"not valid UTF-8 .* at byte {offset}\\)"):
        Index.from_compact(lengths, bad, values)


def test_check_reports_each_part() -> None:
    """_check covers the rows (terminators, hashes) and the hash table (live count, findable
    rows): a store damaged in one part reports that part."""

    def filled() -> KeyStore:
        store = KeyStore()
        store.append_many(encode_keys(["a", "bb", "ccc"]))
        assert store._check() == []
        return store

    store = filled()
    store._data[1] = 1  # the NUL after "a"
    assert store._check() == ["a key is not NUL-terminated"]
    store = filled()
    store._hashes[1] ^= np.uint64(1)
    assert any("stored hash" in problem for problem in store._check())
    store = filled()
    store._live = 2
    assert any("live count" in problem for problem in store._check())
    store = filled()
    store._slots[:] = 0
    assert any("linked rows" in problem for problem in store._check())
