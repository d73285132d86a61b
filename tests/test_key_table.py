"""The key store's hash table (permindex.index.keys.hash_table): find and find_many with hash
collisions forced by choosing the hashes (the table takes them as arguments), keys that differ
only in length or after a NUL, probe sequences that wrap around the table's end, backward-shift
deletion, link_rows on hand-built tables, EncodedKeys.lengths, and _check_table catching broken
preconditions; a hypothesis run against a dict model with a handful of hash values.

The table is filled through :class:`~permindex.index.keys.store.KeyStore` (a KeyTable), whose
append, unlink and append_many are its public writers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from key_model import apply_op, with_hashes
from numpy.typing import NDArray
from strategies import SETTINGS

from permindex.index.keys.hash_table import MIN_SLOTS, KeyTable, link_rows
from permindex.index.keys.store import KeyStore, encode_keys, hash_key

TOP = (1 << 64) - 1


def _problems(store: KeyTable) -> list[str]:
    return store._check_rows() + store._check_table()


def test_an_empty_table() -> None:
    table = KeyTable()
    assert len(table) == 0
    assert table.find(b"a", hash_key(b"a")) == -1
    assert table.find(b"", 0) == -1
    assert table.find_many(encode_keys(["a", "b"])).tolist() == [-1, -1]
    assert table.find_many(encode_keys([])).tolist() == []
    assert table.linked_rows().tolist() == [] and table.linked_rows().dtype == np.int64
    assert _problems(table) == []


@pytest.mark.parametrize(
    "hash_of",
    [
        lambda i: 0,  # one hash for every key
        lambda i: TOP,  # one hash, home in the last slot: every probe wraps around
        lambda i: i << 40,  # one home slot (the low bits), different hashes
        lambda i: (i % 3) * MIN_SLOTS + 15,  # three hashes, one home slot near the end
    ],
    ids=["same-hash", "last-slot", "same-home", "three-hashes"],
)
def test_colliding_keys_are_told_apart_by_their_bytes(hash_of: Callable[[int], int]) -> None:
    keys = ["a", "a\x00", "\x00a", "ab", "a\x00b", "é", "e", "\x00", "\x00\x00", "A"]
    keys += [f"k{i}" for i in range(30)]  # the table doubles on the way
    store = KeyStore()
    hashes = [hash_of(i) for i in range(len(keys))]
    rows = [store.append(k.encode(), h) for k, h in zip(keys, hashes, strict=True)]
    assert len(store) == len(keys) and _problems(store) == []
    for key, h, row in zip(keys, hashes, rows, strict=True):
        assert store.find(key.encode(), h) == row
    assert store.find_many(with_hashes(keys, hashes)).tolist() == rows
    # Absent keys with a stored hash: a probe each, never a wrong row.
    absent = ["a\x00\x00", "b", "k", "k1\x00", "\x00\x00\x00", "aa"]
    for key in absent:
        assert store.find(key.encode(), hashes[0]) == -1
    assert store.find_many(with_hashes(absent, [hashes[0]] * len(absent))).tolist() == [-1] * 6
    assert store.linked_rows().tolist() == rows


def test_a_stored_key_asked_with_another_hash_is_not_found() -> None:
    store = KeyStore()
    row = store.append(b"key", 5)
    assert store.find(b"key", 5) == row
    assert store.find(b"key", 5 + MIN_SLOTS) == -1  # same home slot, other hash
    assert store.find(b"key", 6) == -1
    assert store.find_many(with_hashes(["key", "key"], [5, 5 + MIN_SLOTS])).tolist() == [row, -1]


def test_find_many_with_a_key_twice_in_the_batch() -> None:
    store = KeyStore()
    store.append_many(encode_keys(["x", "y"]))
    assert store.find_many(encode_keys(["y", "y", "z", "x", "y"])).tolist() == [1, 1, -1, 0, 1]


def test_backward_shift_deletion_across_the_table_end() -> None:
    """Eight keys homed in the last of 16 slots fill slots 15, 0, 1, ..., 6; removing them in
    any order keeps every other key findable, and the table holds exactly the live rows."""
    for order in ([0, 1, 2, 3, 4, 5, 6, 7], [7, 6, 5, 4, 3, 2, 1, 0], [3, 0, 6, 1, 7, 2, 5, 4]):
        store = KeyStore()
        keys = [f"w{i}".encode() for i in range(8)]
        hashes = [15 if i % 2 else TOP for i in range(8)]  # home 15 in a 16-slot table
        for key, h in zip(keys, hashes, strict=True):
            store.append(key, h)
        live = set(range(8))
        for row in order:
            store.unlink(row)
            live.discard(row)
            assert len(store) == len(live) and _problems(store) == []
            assert store.linked_rows().tolist() == sorted(live)
            for r in range(8):
                assert store.find(keys[r], hashes[r]) == (r if r in live else -1)


def test_a_mixed_cluster_keeps_entries_from_other_homes() -> None:
    """A cluster of keys from several home slots: deleting the first must not move a key
    before its own home (which would make it unfindable)."""
    store = KeyStore()
    hashes = [14, 14, 15, 15, 0, 1, 14]
    rows = [store.append(f"m{i}".encode(), h) for i, h in enumerate(hashes)]
    for victim in [0, 2, 4]:
        store.unlink(rows[victim])
        assert _problems(store) == []
        for i, h in enumerate(hashes):
            expected = -1 if i in (0, 2, 4)[: (0, 2, 4).index(victim) + 1] else rows[i]
            assert store.find(f"m{i}".encode(), h) == expected


def test_unlinking_a_row_that_is_not_linked_is_a_key_error_and_changes_nothing() -> None:
    store = KeyStore()
    store.append_many(encode_keys(["a", "b", "c"]))
    store.unlink(1)
    with pytest.raises(KeyError):
        store.unlink(1)
    assert len(store) == 2 and _problems(store) == []
    assert store.find(b"a", hash_key(b"a")) == 0 and store.find(b"c", hash_key(b"c")) == 2


def test_replacements_in_a_batch_point_the_slots_at_the_new_rows() -> None:
    store = KeyStore()
    keys = ["a", "b", "c", "d"]
    hashes = [7, 7, 7 + MIN_SLOTS, 8]
    store.append_many(with_hashes(keys, hashes))
    first = store.append_many(
        with_hashes(["c", "a", "z"], [hashes[2], hashes[0], 7]), np.array([2, 0, -1])
    )
    assert first == 4 and len(store) == 5 and _problems(store) == []
    expect = {"a": 5, "b": 1, "c": 4, "d": 3, "z": 6}
    assert store.find_many(with_hashes(list(expect), [7, 7, 7 + MIN_SLOTS, 8, 7])).tolist() == list(
        expect.values()
    )
    assert store.linked_rows().tolist() == [1, 3, 4, 5, 6]


def test_the_table_grows_to_keep_the_load_at_most_half() -> None:
    store = KeyStore()
    before = store.nbytes()
    for i in range(MIN_SLOTS // 2):  # 8 keys fit in 16 slots
        store.append(f"k{i}".encode(), i)
    assert _problems(store) == []
    store.append(b"ninth", 3)  # the 9th doubles the table (load <= 1/2)
    assert _problems(store) == [] and store.nbytes() > before
    store.append_many(with_hashes([f"b{i}" for i in range(1000)], [0] * 1000))  # one big cluster
    assert len(store) == 1009 and _problems(store) == []
    assert store.find(b"b999", 0) == 1008 and store.find(b"ninth", 3) == 8


def test_check_table_reports_a_key_linked_twice() -> None:
    """append's precondition (the key is not linked now) broken: _check_table says so."""
    store = KeyStore()
    store.append(b"dup", 9)
    store.append(b"dup", 9)
    problems = _problems(store)
    assert "a key is linked on two rows" in problems
    assert "row 1 is linked but not found by its key" in problems


def test_check_table_reports_a_rank_shared_by_two_live_keys() -> None:
    """moved_from given for a row that stays linked: two live keys with one first-added rank."""
    store = KeyStore()
    store.append(b"a", 1)
    store.append(b"b", 2, moved_from=0)
    assert _problems(store) == ["two linked keys share a first-added rank"]


def test_encoded_keys_lengths() -> None:
    batch = encode_keys(["a", "é", "nul\x00in", "\U0001f600", "x" * 1024])
    assert batch.lengths.dtype == np.int64
    assert batch.lengths.tolist() == [1, 2, 6, 4, 1024]
    assert batch.ends.tolist() == np.cumsum([2, 3, 7, 5, 1025]).tolist()
    assert encode_keys([]).lengths.tolist() == []


def _probe_ok(slots: NDArray[np.uint32], hashes: NDArray[np.uint64], row: int) -> bool:
    """Whether linear probing from row's home reaches its tag before an empty slot."""
    mask = slots.size - 1
    i = int(hashes[row]) & mask
    for _ in range(slots.size):
        if slots[i] == row + 1:
            return True
        if slots[i] == 0:
            return False
        i = (i + 1) & mask
    return False


def test_link_rows_on_a_hand_built_table() -> None:
    slots = np.zeros(8, dtype=np.uint32)
    hashes = np.array([7, 7, 7, 2, 15, 0], dtype=np.uint64)  # rows 0-2 and 4 home in slot 7
    link_rows(slots, 7, hashes, np.array([0, 1, 2, 3, 4], dtype=np.int64))
    assert sorted(slots[slots != 0].tolist()) == [1, 2, 3, 4, 5]
    assert slots[7] in (1, 2, 3, 5)  # one of the rows homed there won the slot
    assert all(_probe_ok(slots, hashes, r) for r in range(5))
    assert not _probe_ok(slots, hashes, 5)  # not linked
    link_rows(slots, 7, hashes, np.array([5], dtype=np.int64))  # around occupied slots
    assert all(_probe_ok(slots, hashes, r) for r in range(6))
    assert np.count_nonzero(slots) == 6


def test_link_rows_with_nothing_to_link() -> None:
    slots = np.array([0, 3, 0, 0], dtype=np.uint32)
    link_rows(slots, 3, np.array([1, 2, 3], dtype=np.uint64), np.zeros(0, dtype=np.int64))
    assert slots.tolist() == [0, 3, 0, 0]


@SETTINGS
@given(
    st.integers(1, 7),
    st.lists(st.integers(0, TOP), min_size=1, max_size=128),
    st.data(),
)
def test_link_rows_finds_every_row_by_probing(
    log_size: int, hash_values: list[int], data: st.DataObject
) -> None:
    size = 1 << log_size
    hashes = np.array(hash_values, dtype=np.uint64)
    count = min(len(hash_values), size)  # no more rows than slots
    order = data.draw(st.permutations(range(len(hash_values))))
    rows = np.array(order[:count], dtype=np.int64)
    split = data.draw(st.integers(0, count))
    slots = np.zeros(size, dtype=np.uint32)
    link_rows(slots, size - 1, hashes, rows[:split])
    link_rows(slots, size - 1, hashes, rows[split:])  # a second batch around the first
    assert sorted(slots[slots != 0].tolist()) == sorted((rows + 1).tolist())
    assert all(_probe_ok(slots, hashes, int(r)) for r in rows)


# Hashes from a handful of values, some homed at the table's end whatever its size.
_hashes = st.sampled_from([0, 1, 15, TOP, TOP - 1, 1 << 63, (1 << 63) | 15, 7 << 32])
_keys = st.sampled_from(["a", "b", "a\x00", "\x00", "é", "ab", "k1", "k2", "k3", "k4", "€€"])
_ops = st.lists(
    st.tuples(st.sampled_from(["put", "remove", "batch"]), st.lists(_keys, min_size=1, max_size=6)),
    max_size=40,
)


@SETTINGS
@given(st.dictionaries(_keys, _hashes, min_size=11, max_size=11), _ops)
def test_against_a_dict_with_colliding_hashes(
    hashes: dict[str, int], ops: list[tuple[str, list[str]]]
) -> None:
    """Every key has a fixed hash from a few values; puts (a new row, a move for a stored key),
    removals and batch puts against {key: live row}."""
    store = KeyStore()
    model: dict[str, int] = {}
    for op, keys in ops:
        apply_op(store, model, hashes, op, keys)
        assert len(store) == len(model)
    assert _problems(store) == []
    assert store.linked_rows().tolist() == sorted(model.values())
    every = list(hashes)
    found = store.find_many(with_hashes(every, [hashes[k] for k in every])).tolist()
    assert found == [model.get(k, -1) for k in every]
    for key in every:
        assert store.find(key.encode(), hashes[key]) == model.get(key, -1)


@pytest.mark.timeout(20)
def test_append_many_moved_from_an_unlinked_row_is_refused_not_probed_forever() -> None:
    """moved_from must name rows still linked (their slots are pointed at the new rows): a row
    already unlinked ends its probe at an empty slot, a KeyError, where the probe used to loop
    without end."""
    store = KeyStore()
    store.append_many(encode_keys(["a", "b"]))
    old = store.find_many(encode_keys(["a"]))
    store.unlink(int(old[0]))
    with pytest.raises(KeyError, match="not linked"):
        store.append_many(encode_keys(["a"]), old)


def test_append_many_moved_from_linked_rows_keeps_the_keys_findable() -> None:
    store = KeyStore()
    store.append_many(encode_keys(["a", "b", "c"]))
    batch = encode_keys(["b", "d"])
    first = store.append_many(batch, store.find_many(batch))
    assert store.find_many(encode_keys(["a", "b", "c", "d"])).tolist() == [0, first, 2, first + 1]
    assert _problems(store) == []
