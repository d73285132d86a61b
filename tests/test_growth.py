"""Growing the index's arrays without holding its lock: the key store's Growth (rows copied and
the hash table rebuilt off the lock, changes made meanwhile replayed), and the index's
background growth, checked against a dict model and brute force, with hash collisions forced
(see test_keystore.py), concurrent writers and readers, and a compaction abandoning a growth.
"""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from conftest import IndexParts

import permindex.index.keys.store as keystore_module
from permindex import Index
from permindex.index.keys.store import KeyStore, encode_keys, hash_key
from permindex.index.tuning import Tuning


@pytest.fixture(params=[False, True], ids=["xxh3", "colliding"])
def hashing(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    if request.param:  # every key hashes to one of 32 values: long probe sequences

        def weak(data: bytes) -> int:
            return (len(data) % 2) * (1 << 63) + data[-1] % 16

        monkeypatch.setattr(keystore_module, "xxh3_64_intdigest", weak)


def _linked(store: KeyStore, live: set[int]) -> np.ndarray:
    return np.array(sorted(live), dtype=np.int64)


def _check_store(store: KeyStore, model: dict[str, int]) -> None:
    assert store._check() == []
    assert len(store) == len(model)
    for key, row in model.items():
        data = key.encode()
        assert store.find(data, hash_key(data)) == row, key
    batch = encode_keys(list(model))
    assert store.find_many(batch).tolist() == list(model.values())


@pytest.mark.usefixtures("hashing")
def test_growth_replays_every_change_made_while_it_was_prepared() -> None:
    """Links, unlinks and relinks (single and batch) between begin_growth and finish_growth
    are all in the grown table; appended rows and bytes are copied over."""
    rng = random.Random(7)
    store = KeyStore()
    model: dict[str, int] = {}  # key -> row
    for i in range(300):
        key = f"k{i}"
        data = key.encode()
        model[key] = store.append(data, hash_key(data))
    growth = store.begin_growth(rows=500, data_bytes=5000)
    linked = _linked(store, set(model.values()))
    assert growth.slot_count > store._slots.size
    # Changes while the growth is prepared (as other writers would make them).
    for i in range(300, 420):  # single appends
        key = f"k{i}"
        data = key.encode()
        model[key] = store.append(data, hash_key(data))
    for key in rng.sample(sorted(model), 60):  # removals
        store.unlink(model.pop(key))
    moved = rng.sample(sorted(model), 40)  # replacements, batched, with new keys mixed in
    fresh = [f"new{i}" for i in range(30)]
    batch_keys = moved + fresh
    moved_from = np.array([model[k] for k in moved] + [-1] * len(fresh), dtype=np.int64)
    first = store.append_many(encode_keys(batch_keys), moved_from)
    for j, key in enumerate(batch_keys):
        model[key] = first + j
    KeyStore.prepare_growth(growth, linked)
    assert store.finish_growth(growth)
    assert store._slots.size == growth.slot_count
    assert store._hashes.size >= 300 + 500
    _check_store(store, model)
    # And it goes on working after the swap.
    for i in range(2000):
        key = f"after{i}"
        data = key.encode()
        model[key] = store.append(data, hash_key(data))
    _check_store(store, model)


def test_compaction_abandons_a_growth() -> None:
    store = KeyStore()
    for i in range(100):
        data = f"k{i}".encode()
        store.append(data, hash_key(data))
    growth = store.begin_growth(rows=1000)
    store.unlink(3)
    store.compact(np.array([r for r in range(100) if r != 3], dtype=np.int64))
    KeyStore.prepare_growth(growth, np.arange(100, dtype=np.int64))
    assert not store.finish_growth(growth)
    assert store._check() == []
    assert len(store) == 99


def test_a_newer_growth_abandons_an_older_one() -> None:
    store = KeyStore()
    for i in range(100):
        data = f"k{i}".encode()
        store.append(data, hash_key(data))
    older = store.begin_growth(rows=1000)
    newer = store.begin_growth(rows=1000)
    KeyStore.prepare_growth(older, np.arange(100, dtype=np.int64))
    KeyStore.prepare_growth(newer, np.arange(100, dtype=np.int64))
    assert not store.finish_growth(older)
    assert store.finish_growth(newer)
    assert store._check() == []


def _brute(model: dict[str, int], query: int, k: int) -> list[tuple[int, str]]:
    return sorted(
        (bin(fp ^ query).count("1"), key)
        for key, fp in model.items()
        if bin(fp ^ query).count("1") <= k
    )


@pytest.mark.parametrize("colliding", [False, True], ids=["xxh3", "colliding"])
def test_index_grows_in_the_background_under_concurrent_writes(
    monkeypatch: pytest.MonkeyPatch, colliding: bool, index_parts: IndexParts
) -> None:
    """With background growth from 64 rows on, four writer threads (adds, replacements,
    removals, check-and-add) and a reader run together through many growths; at the end the
    contents equal the model and every query equals brute force."""
    steps = 400
    if colliding:  # probe sequences as long as the table: fewer keys

        def weak(data: bytes) -> int:
            return (len(data) % 2) * (1 << 63) + data[-1] % 16

        monkeypatch.setattr(keystore_module, "xxh3_64_intdigest", weak)
        steps = 40
    finished: list[int] = []  # journal lengths of the growths swapped in
    real_finish = KeyStore.finish_growth

    def counting_finish(store: KeyStore, growth: keystore_module.Growth) -> bool:
        journal = len(growth.journal)
        swapped = real_finish(store, growth)
        if swapped:
            finished.append(journal)
        return swapped

    monkeypatch.setattr(KeyStore, "finish_growth", counting_finish)
    index = Index(k=3, compaction_min=64, tuning=Tuning(grow_ahead_rows=64))
    rows = index_parts.rows[-1]
    models = [dict[str, int]() for _ in range(4)]
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(w: int) -> None:
        rng = random.Random(w)
        model = models[w]
        try:
            for step in range(steps):
                roll = rng.random()
                if roll < 0.5 or not model:
                    keys = [f"w{w}-{step}-{j}" for j in range(rng.randint(1, 40))]
                    fps = [rng.getrandbits(64) for _ in keys]
                    index.add_many(keys, fps)
                    model.update(zip(keys, fps, strict=True))
                elif roll < 0.7:
                    key = rng.choice(sorted(model))
                    model[key] = rng.getrandbits(64)
                    index.add(key, model[key])
                elif roll < 0.9:
                    key = rng.choice(sorted(model))
                    index.remove(key)
                    del model[key]
                else:
                    key = f"w{w}-cas-{step}"
                    fp = rng.getrandbits(64)
                    if index.check_and_add(key, fp, k=0).added:
                        model[key] = fp
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    def reader() -> None:
        rng = random.Random(99)
        try:
            while not stop.is_set():
                index.query(rng.getrandbits(64))
                index.query_many(np.array([rng.getrandbits(64) for _ in range(20)], np.uint64))
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    reading = threading.Thread(target=reader)
    reading.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    stop.set()
    reading.join(timeout=60)
    assert not errors, errors
    rows.wait_for_growth(timeout=60)
    index._check()
    model = {k: v for m in models for k, v in m.items()}
    assert len(index) == len(model)
    assert {key: index.get(key) for key in model} == model
    rng = random.Random(5)
    queries = [rng.choice(list(model.values())) ^ (1 << rng.randrange(64)) for _ in range(100)]
    for query in queries:
        got = sorted((m.distance, m.key) for m in index.query(query))
        assert got == _brute(model, query, 3)
    assert len(finished) >= 3  # it grew in the background, several times


def test_growth_does_not_hold_the_lock_while_it_copies(
    monkeypatch: pytest.MonkeyPatch, index_parts: IndexParts
) -> None:
    """While the growth a write needs is being prepared, a query completes: the lock is free,
    only the writer waits. Then the growth finishes and everything is there."""
    index = Index(k=3, tuning=Tuning(grow_ahead_rows=1024))
    rows = index_parts.rows[-1]
    rng = np.random.default_rng(3)
    fps = rng.integers(0, 2**64, 1024, dtype=np.uint64)
    index.add_many([f"k{i}" for i in range(1024)], fps)
    assert rows.capacity == 1024 + 128  # room for 128 more (next_capacity)
    preparing = threading.Event()
    proceed = threading.Event()
    real_prepare = KeyStore.prepare_growth

    def slow_prepare(growth: keystore_module.Growth, linked: np.ndarray) -> None:
        preparing.set()
        assert proceed.wait(timeout=30)
        real_prepare(growth, linked)

    monkeypatch.setattr(KeyStore, "prepare_growth", staticmethod(slow_prepare))
    more = [f"k-new-{i}" for i in range(500)]
    writer = threading.Thread(target=index.add_many, args=(more, range(500)))  # needs a growth
    writer.start()
    assert preparing.wait(timeout=30)
    done: list[object] = []
    other = threading.Thread(target=lambda: done.append(index.query(int(fps[7]))))
    other.start()
    other.join(timeout=10)
    assert done and done[0][0].key == "k7"  # type: ignore[index]
    assert writer.is_alive()  # waiting for the growth it needs, not holding the lock
    proceed.set()
    writer.join(timeout=30)
    assert not writer.is_alive()
    assert [index.get(key) for key in more] == list(range(500))
    assert rows.capacity >= 1024 + 500
    index._check()


def test_the_first_small_write_after_a_bulk_load_does_not_wait_for_a_growth(
    monkeypatch: pytest.MonkeyPatch, index_parts: IndexParts
) -> None:
    """A bulk load leaves an eighth of room (next_capacity), so the next small writes fit at
    once; the growth they start runs in the background (held back here until they are done)."""
    n = 100_000
    rng = np.random.default_rng(11)
    fps = rng.integers(0, 2**64, n, dtype=np.uint64)
    index = Index.from_arrays([f"key-{i}" for i in range(n)], fps)
    rows = index_parts.rows[-1]
    assert rows.capacity == n + n // 8
    proceed = threading.Event()
    real_prepare = KeyStore.prepare_growth

    def held_prepare(growth: keystore_module.Growth, linked: np.ndarray) -> None:
        assert proceed.wait(timeout=30)
        real_prepare(growth, linked)

    monkeypatch.setattr(KeyStore, "prepare_growth", staticmethod(held_prepare))
    done: list[int] = []

    def writes() -> None:
        for i in range(50):
            index.add(f"new-{i}", i)
        index.add_many([f"batch-{i}" for i in range(100)], list(range(100)))
        done.append(1)

    writer = threading.Thread(target=writes)
    writer.start()
    writer.join(timeout=30)
    assert done == [1]  # finished while the growth was held back
    grower = rows.grower
    assert grower is not None and grower.is_alive()
    proceed.set()
    grower.join(timeout=30)
    assert rows.capacity == (n + n // 8) * 3 // 2
    index._check()
    assert index.get("new-7") == 7 and index.get("batch-99") == 99 and index.get("key-5") == fps[5]
