"""Growing the index's arrays without holding its lock: the key store's Growth (rows copied and
the hash table rebuilt off the lock, changes made meanwhile replayed), and the index's
background growth, checked against a dict model and brute force, with hash collisions forced
(see test_keys_store.py), concurrent writers and readers, and a compaction abandoning a growth;
and prepare_growth on hand-built Growths, with the journal a KeyStore records meanwhile.
"""

from __future__ import annotations

import random
import threading

import numpy as np
import pytest
from conftest import IndexParts
from hypothesis import given
from hypothesis import strategies as st
from key_model import apply_op, with_hashes
from numpy.typing import NDArray
from strategies import SETTINGS

from permindex import Index
from permindex.index.keys.growth import LINK, RELINK, UNLINK, Growth, prepare_growth
from permindex.index.keys.store import KeyStore, encode_keys
from permindex.index.tuning import Tuning


@pytest.fixture(params=[False], ids=["codes"])
def hashing(request: pytest.FixtureRequest) -> None:
    """The store's map is addressed by a compiled hash of each key's code: no collision can be
    forced from Python (a map up to 7/8 full has long probe sequences of its own)."""


def _linked(store: KeyStore, live: set[int]) -> np.ndarray:
    return np.array(sorted(live), dtype=np.int64)


def _check_store(store: KeyStore, model: dict[str, int]) -> None:
    assert store._check() == []
    assert len(store) == len(model)
    for key, row in model.items():
        data = key.encode()
        assert store.find(data) == row, key
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
        model[key] = store.append(data)
    growth = store.begin_growth(rows=500, data_bytes=5000)
    linked = _linked(store, set(model.values()))
    assert growth.slot_count > store._slots.size
    # Changes while the growth is prepared (as other writers would make them).
    for i in range(300, 420):  # single appends
        key = f"k{i}"
        data = key.encode()
        model[key] = store.append(data)
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
    assert store._lens.size >= 300 + 500
    _check_store(store, model)
    # And it goes on working after the swap.
    for i in range(2000):
        key = f"after{i}"
        data = key.encode()
        model[key] = store.append(data)
    _check_store(store, model)


def test_compaction_abandons_a_growth() -> None:
    store = KeyStore()
    for i in range(100):
        data = f"k{i}".encode()
        store.append(data)
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
        store.append(data)
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


def test_index_grows_in_the_background_under_concurrent_writes(
    monkeypatch: pytest.MonkeyPatch, index_parts: IndexParts
) -> None:
    """With background growth from 64 rows on, four writer threads (adds, replacements,
    removals, check-and-add) and a reader run together through many growths; at the end the
    contents equal the model and every query equals brute force."""
    steps = 400
    finished: list[int] = []  # journal lengths of the growths swapped in
    real_finish = KeyStore.finish_growth

    def counting_finish(store: KeyStore, growth: Growth) -> bool:
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

    def slow_prepare(growth: Growth, linked: np.ndarray) -> None:
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

    def held_prepare(growth: Growth, linked: np.ndarray) -> None:
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


# Growth off the lock (permindex.index.keys.growth): prepare_growth on hand-built Growths (what it
# copies, what it leaves alone, the new hash table), the journal of hash-table changes a KeyStore
# records while a growth is pending (its LINK / UNLINK / RELINK entries), when a growth is not
# swapped in, an array outgrown inline meanwhile, and a hypothesis run of changes journalled
# during a growth against a dict model with colliding hashes.


_I64 = NDArray[np.int64]


def _rows(values: list[int]) -> _I64:
    return np.array(values, dtype=np.int64)


def _sources(rows: int, capacity: int, used: int, data_size: int) -> Growth:
    """A Growth over hand-built source arrays: rows 0..rows-1 in use (codes of 3 ASCII bytes,
    ``used`` = 3 rows), the rest of each array filled with garbage (rows appended later)."""
    assert used == 3 * rows
    lens = np.full(capacity, 9, dtype=np.uint8)
    lens[:rows] = 3
    bases = np.full(capacity // 16 + 1, 5, dtype=np.int64)
    bases[: (rows + 15) // 16] = np.arange((rows + 15) // 16) * 48
    data = np.full(data_size, 0xEE, dtype=np.uint8)
    data[:used] = np.arange(used) % 90 + 33
    return Growth(
        rows=rows,
        used=used,
        row_capacity=capacity,
        data_capacity=data_size,
        slot_count=0,
        sources=(lens, bases, data),
    )


def test_a_growth_that_grows_nothing() -> None:
    growth = _sources(rows=10, capacity=64, used=30, data_size=1024)
    assert not growth.prepared and not growth.abandoned and growth.journal == []
    prepare_growth(growth, _rows(list(range(10))))
    assert growth.prepared
    assert growth.row_arrays is None and growth.data is None and growth.slots is None


def test_prepare_copies_the_rows_it_began_with() -> None:
    growth = _sources(rows=10, capacity=64, used=30, data_size=1024)
    growth.row_capacity, growth.data_capacity = 100, 2000
    before = [a.copy() for a in growth.sources]
    prepare_growth(growth, _rows([]))
    assert growth.row_arrays is not None and growth.data is not None and growth.slots is None
    lens, bases = growth.row_arrays
    assert (lens.size, bases.size, growth.data.size) == (100, 100 // 16 + 1, 2000)
    assert [a.dtype.str for a in (lens, bases)] == ["|u1", "<i8"]
    src_lens, src_bases, src_data = growth.sources
    assert np.array_equal(lens[:10], src_lens[:10])
    assert np.array_equal(bases[:1], src_bases[:1])
    assert np.array_equal(growth.data[:30], src_data[:30])
    # Nothing beyond the rows and bytes it began with is taken (they are written meanwhile).
    assert not lens[10:].any() and not bases[1:].any()
    assert not growth.data[30:].any()
    assert all(np.array_equal(a, growth.sources[i]) for i, a in enumerate(before))


def test_prepare_grows_only_what_is_asked() -> None:
    rows_only = _sources(rows=4, capacity=8, used=12, data_size=64)
    rows_only.row_capacity = 16
    prepare_growth(rows_only, _rows([]))
    assert rows_only.row_arrays is not None and rows_only.data is None
    data_only = _sources(rows=4, capacity=8, used=12, data_size=64)
    data_only.data_capacity = 128
    prepare_growth(data_only, _rows([]))
    assert data_only.row_arrays is None and data_only.data is not None
    smaller = _sources(rows=4, capacity=8, used=12, data_size=64)
    smaller.row_capacity, smaller.data_capacity = 4, 16  # never shrinks
    prepare_growth(smaller, _rows([]))
    assert smaller.row_arrays is None and smaller.data is None


def test_prepare_links_the_given_rows_into_the_new_table() -> None:
    from permindex.index.keys import kernels

    growth = _sources(rows=20, capacity=32, used=60, data_size=64)
    growth.slot_count = 64
    linked = _rows([0, 2, 3, 7, 11, 19])  # the live rows; the others are dead
    prepare_growth(growth, linked)
    slots, tags = growth.slots, growth.tags
    assert slots is not None and slots.size == 64 and slots.dtype == np.uint32
    assert tags is not None and tags.size == 64
    assert sorted(slots[slots != 0].tolist()) == (linked + 1).tolist()
    lens, bases, codes = growth.sources
    hashes = kernels.row_hashes(codes, lens, bases, linked)
    for row, h in zip(linked.tolist(), hashes.tolist(), strict=True):
        i = ((h >> 32) * 64) >> 32  # each within its probe sequence from its home slot
        while slots[i] != row + 1:
            assert slots[i] != 0
            i = (i + 1) % 64
        assert tags[i] == h & 0xFF


def _store(keys: list[str]) -> KeyStore:
    store = KeyStore()
    store.append_many(encode_keys(keys))
    return store


def _entries(growth: Growth) -> list[tuple[int, list[int], list[int] | None]]:
    return [
        (change, first.tolist(), None if second is None else second.tolist())
        for change, first, second in growth.journal
    ]


def test_the_store_journals_every_table_change_while_a_growth_is_pending() -> None:
    store = _store([f"k{i}" for i in range(10)])
    store.append(b"before")  # row 10, not journalled
    growth = store.begin_growth(rows=100)
    linked = store.linked_rows()  # the rows linked when it began
    assert (growth.rows, growth.journal) == (11, [])
    store.append(b"one")  # row 11
    store.unlink(3)
    store.append(b"k3", moved_from=3)  # row 12
    store.append_many(encode_keys(["x", "y"]))  # rows 13, 14
    store.append_many(encode_keys(["k5", "z", "k6"]), _rows([5, -1, 6]))  # rows 15-17
    assert _entries(growth) == [
        (LINK, [11], None),
        (UNLINK, [3], None),
        (LINK, [12], None),
        (LINK, [13, 14], None),
        (RELINK, [5, 6], [15, 17]),
        (LINK, [16], None),
    ]
    KeyStore.prepare_growth(growth, linked)
    assert store.finish_growth(growth)
    store.append(b"after")
    assert len(growth.journal) == 6  # no more journalling once it is swapped in
    assert store._check() == []


def test_a_growth_is_swapped_in_once_and_only_when_prepared() -> None:
    store = _store(["a", "b"])
    growth = store.begin_growth(rows=500, data_bytes=5000)
    assert not store.finish_growth(growth)  # not prepared: nothing changes
    assert store._check() == [] and len(store) == 2
    before = store.nbytes()
    KeyStore.prepare_growth(growth, store.linked_rows())
    assert store.finish_growth(growth)
    assert store.nbytes() > before
    assert not store.finish_growth(growth)  # the second time: not the store's growth any more
    other = _store(["c"]).begin_growth(rows=10)
    KeyStore.prepare_growth(other, np.zeros(1, dtype=np.int64))
    assert not store.finish_growth(other)  # another store's growth
    assert store._check() == [] and store.keys([0, 1]) == ["a", "b"]


def test_an_abandoned_growth_stops_journalling() -> None:
    store = _store(["a", "b", "c"])
    older = store.begin_growth(rows=100)
    store.append(b"d")
    newer = store.begin_growth(rows=100)
    assert older.abandoned and not newer.abandoned
    store.append(b"e")
    assert _entries(older) == [(LINK, [3], None)] and _entries(newer) == [(LINK, [4], None)]
    store.compact(store.linked_rows())
    assert newer.abandoned
    store.append(b"f")
    assert len(newer.journal) == 1
    KeyStore.prepare_growth(newer, np.arange(3, dtype=np.int64))
    assert not store.finish_growth(newer) and store._check() == [] and len(store) == 6


def test_arrays_outgrown_inline_meanwhile_are_kept() -> None:
    """The store outgrew the growth's capacities inline before it finished: the swap keeps the
    bigger inline arrays and every key."""
    keys = [f"k{i}" for i in range(60)]
    store = _store(keys)
    growth = store.begin_growth(rows=200)  # room for 200 more
    assert growth.row_capacity == 260 and growth.slot_count > store._slots.size
    linked = store.linked_rows()
    more = [f"late-{i}-" + "é" * (i % 4) for i in range(3000)]
    store.append_many(encode_keys(more[:1000]))
    for key in more[1000:1100]:
        store.append(key.encode())
    store.append_many(encode_keys(more[1100:]))
    size = store.nbytes()
    KeyStore.prepare_growth(growth, linked)
    assert store.finish_growth(growth)
    assert store.nbytes() == size  # nothing smaller swapped in
    assert store._check() == [] and len(store) == 3060
    everything = keys + more
    assert store.find_many(encode_keys(everything)).tolist() == list(range(3060))


# Keys with a handful of hashes (chosen, not XXH3: the store takes them as arguments).
_key = st.sampled_from(
    ["a", "b", "c", "a\x00", "\x00", "é", "ab", "€", *[f"k{i}" for i in range(12)]]
)
_hash_values = st.sampled_from([0, 1, 15, (1 << 64) - 1, 1 << 63, 31])
_op = st.tuples(st.sampled_from(["put", "remove", "batch"]), st.lists(_key, min_size=1, max_size=8))


@SETTINGS
@given(
    st.fixed_dictionaries(
        {
            k: _hash_values
            for k in ["a", "b", "c", "a\x00", "\x00", "é", "ab", "€", *[f"k{i}" for i in range(12)]]
        }
    ),
    st.lists(_op, max_size=12),
    st.lists(_op, max_size=25),
    st.integers(0, 40),
)
def test_changes_journalled_during_a_growth_against_a_dict(
    hashes: dict[str, int],
    before: list[tuple[str, list[str]]],
    during: list[tuple[str, list[str]]],
    extra_rows: int,
) -> None:
    """Changes before a growth begins, then during it (journalled), then the swap: the store
    equals {key: live row} with colliding hashes, and keeps working afterwards."""
    store = KeyStore()
    model: dict[str, int] = {}
    for op, keys in before:
        apply_op(store, model, hashes, op, keys)
    growth = store.begin_growth(rows=extra_rows, data_bytes=extra_rows * 4)
    linked = store.linked_rows()
    for op, keys in during:
        apply_op(store, model, hashes, op, keys)
    KeyStore.prepare_growth(growth, linked)
    assert store.finish_growth(growth)
    assert store._check_rows() == [] and store._check_table() == []
    every = list(hashes)
    batch = with_hashes(every, [hashes[k] for k in every])
    assert store.find_many(batch).tolist() == [model.get(k, -1) for k in every]
    assert store.linked_rows().tolist() == sorted(model.values())
    for op, keys in during[:5]:
        apply_op(store, model, hashes, op, keys)
    assert store._check_table() == [] and len(store) == len(model)
