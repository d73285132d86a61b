"""Keys are stored, replaced, removed and found: the key store (permindex.index.keys.store:
every operation against a dict model, with hash collisions forced, growth of every array,
removal with backward-shift deletion, compaction, and the index on top of it with the same
collisions), its rows (permindex.index.keys.rows: keys read back by row, one, a few, many,
repeated, under a liveness mask, the compact export, the first-added order, the capacity rules),
its hash table (permindex.index.keys.hash_table: collisions forced by choosing the hashes,
probes wrapping around the table's end, _check_table), and the KeyColumn of the offline dedup;
each against a dict or list model, the hashes against the xxhash package (tests/oracles.py)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from conftest import IndexParts
from hypothesis import given, settings
from hypothesis import strategies as st
from key_model import apply_op, with_hashes
from numpy.typing import NDArray
from oracles import xxh3_of_keys
from strategies import SETTINGS

import permindex.index.keys.store as keystore_module
from permindex import Index, InvalidArgumentError
from permindex.index.keys.column import KeyColumn, keys_distinct, last_positions
from permindex.index.keys.hash_table import MIN_SLOTS, EncodedKeys, KeyTable, link_rows
from permindex.index.keys.rows import (
    KeyRows,
    ahead_capacity,
    grown,
    nearly_full,
    next_capacity,
    ragged_positions,
)
from permindex.index.keys.store import KeyStore, batch_subset, encode_keys, hash_key
from permindex.index.tuning import Tuning
from permindex.near.dedup import run_dedup
from permindex.near.result import DedupOptions

# The key store's rows (permindex.index.keys.rows): reading keys back by row (one, a few, many,
# repeated, a liveness mask, the compact export) with NUL inside keys and multi-byte UTF-8, the
# first-added order, _check_rows on rows written through the public appends, and the array helpers
# (ragged_positions, grown and the capacity rules) against plain Python models.


ROW_KEYS = [
    "a",
    "é",
    "nul\x00inside",
    "\x00",
    "\x00\x00",
    "\U0001f600x",
    "x" * 1024,
    "€" * 341,
    "7",
]


def _filled(keys: list[str]) -> KeyStore:
    store = KeyStore()
    if keys:
        store.append_many(encode_keys(keys))
    return store


def _rows(values: list[int]) -> NDArray[np.int64]:
    return np.array(values, dtype=np.int64)


def test_an_empty_rows_object() -> None:
    rows = KeyRows()
    assert rows.rows == 0
    assert rows.keys([]) == [] and rows.keys(_rows([])) == []
    assert rows.live_keys(np.zeros(0, dtype=bool)) == []
    assert rows.live_keys(np.ones(64, dtype=bool)) == []  # no rows: the mask's tail is ignored
    lengths, blob = rows.export(_rows([]))
    assert lengths.tolist() == [] and blob.size == 0 and blob.dtype == np.uint8
    assert rows.iteration_order(_rows([])).tolist() == []
    assert rows._check_rows() == []


def test_each_row_reads_back_its_key_bytes_and_hash() -> None:
    store = _filled(ROW_KEYS)
    assert store.rows == len(ROW_KEYS)
    for row, key in enumerate(ROW_KEYS):
        data = key.encode("utf-8")
        assert store.key(row) == key
        assert store.key_bytes(row) == data and type(store.key_bytes(row)) is bytes
        assert store.hash_of(row) == hash_key(data)
    assert store._check_rows() == []


def test_hash_of_returns_the_hash_given_at_append() -> None:
    store = KeyStore()
    top = (1 << 64) - 1
    for i, h in enumerate([0, top, 1 << 63, 12345]):
        row = store.append(f"k{i}".encode(), h)
        assert store.hash_of(row) == h and type(store.hash_of(row)) is int


@pytest.mark.parametrize("count", [1, 32, 33, 200])  # one by one up to 32, gathered above
def test_keys_of_rows_in_any_order(count: int) -> None:
    keys = [ROW_KEYS[i % len(ROW_KEYS)] + str(i) for i in range(count)]
    keys[0] = "nul\x00" * 3  # a key holding NUL: the gathered path must not split it
    store = _filled(keys)
    forward = list(range(count))
    assert store.keys(forward) == keys
    assert store.keys(_rows(forward[::-1])) == keys[::-1]
    picked = forward[::3] + forward[1::3]
    assert store.keys(_rows(picked)) == [keys[i] for i in picked]


def test_keys_of_repeated_rows_share_one_decode() -> None:
    keys = [f"k{i}é" for i in range(40)]
    store = _filled(keys)
    rows = [5, 7, 5, 39, 5, 0] * 10  # more than 32 rows, 4 distinct
    found = store.keys(_rows(rows))
    assert found == [keys[r] for r in rows]
    assert found[0] is found[2]  # one str per distinct row


def test_live_keys_follow_the_mask_in_row_order() -> None:
    store = _filled(ROW_KEYS)
    n = len(ROW_KEYS)
    assert store.live_keys(np.ones(n, dtype=bool)) == ROW_KEYS
    assert store.live_keys(np.zeros(n, dtype=bool)) == []
    mask = np.array([i % 2 == 0 for i in range(n)])
    assert store.live_keys(mask) == ROW_KEYS[::2]
    only_nul = np.zeros(n, dtype=bool)
    only_nul[2] = True
    assert store.live_keys(only_nul) == ["nul\x00inside"]
    longer = np.zeros(n + 100, dtype=bool)  # a mask by capacity: the tail beyond the rows
    longer[n:] = True
    longer[1] = True
    assert store.live_keys(longer) == ["é"]


@pytest.mark.parametrize(
    "rows",
    [
        list(range(len(ROW_KEYS))),  # every row in order (the whole buffer)
        list(range(len(ROW_KEYS)))[::-1],  # every row but not in order
        [2, 0, 2],
        [len(ROW_KEYS) - 1],
        [],
    ],
)
def test_export_is_the_key_section_of_the_rows(rows: list[int]) -> None:
    store = _filled(ROW_KEYS)
    lengths, blob = store.export(_rows(rows))
    encoded = [ROW_KEYS[r].encode("utf-8") for r in rows]
    assert lengths.dtype == np.int64 and lengths.tolist() == [len(e) for e in encoded]
    assert blob.dtype == np.uint8 and blob.tobytes() == b"".join(e + b"\x00" for e in encoded)


def test_export_is_a_copy() -> None:
    store = _filled(["ab", "cd"])
    _, blob = store.export(_rows([0, 1]))
    blob[:] = 0x41
    assert store.keys([0, 1]) == ["ab", "cd"]


def test_iteration_order_is_first_added_order() -> None:
    store = KeyStore()
    row = {k: store.append(k.encode(), hash_key(k.encode())) for k in ["c", "a", "b", "d"]}
    store.unlink(row["a"])  # "a" replaced: a new row, its first-added rank kept
    row["a"] = store.append(b"a", hash_key(b"a"), moved_from=row["a"])
    batch = encode_keys(["c", "e"])  # "c" replaced in a batch (moved while linked), "e" new
    first = store.append_many(batch, _rows([row["c"], -1]))
    row["c"], row["e"] = first, first + 1
    live = _rows(sorted(row.values()))
    assert store.keys(live) == ["b", "d", "a", "c", "e"]  # row order
    assert store.keys(store.iteration_order(live)) == ["c", "a", "b", "d", "e"]
    assert store.keys(store.iteration_order(live[::-1])) == ["c", "a", "b", "d", "e"]
    assert store._check_rows() == []


def test_rows_grow_past_every_initial_capacity() -> None:
    """Past 64 rows and 1,024 key bytes, one append at a time and in one batch: nothing read
    back changes."""
    keys = [f"row-{i}-" + "é" * (i % 5) for i in range(300)]
    store = KeyStore()
    for key in keys[:150]:
        store.append(key.encode(), hash_key(key.encode()))
    store.append_many(encode_keys(keys[150:]))
    assert store.rows == 300 and store._check_rows() == []
    assert store.keys(np.arange(300)) == keys
    assert store.live_keys(np.ones(300, dtype=bool)) == keys
    assert store.key(0) == keys[0] and store.key(299) == keys[299]


def test_compaction_renumbers_rows_and_ranks() -> None:
    keys = [f"k{i}" for i in range(100)]
    store = _filled(keys)
    for row in range(0, 100, 2):
        store.unlink(row)
    keep = np.arange(1, 100, 2, dtype=np.int64)
    store.compact(keep)
    assert store.rows == 50 and store._check_rows() == []
    assert store.keys(np.arange(50)) == keys[1::2]
    order = store.iteration_order(np.arange(50, dtype=np.int64)[::-1])
    assert order.tolist() == list(range(50))
    compacted = KeyStore()
    compacted.compact(_rows([]))  # compacting to nothing
    assert compacted.rows == 0 and compacted._check_rows() == []


def test_check_rows_reports_an_empty_key() -> None:
    """append takes bytes unchecked (the caller validates); an empty key breaks the layout."""
    store = _filled(["a"])
    store.append(b"", 0)
    assert store._check_rows() == ["key offsets are not increasing by at least 2"]


def test_check_rows_reports_a_missing_terminator() -> None:
    store = KeyStore()
    blob = np.frombuffer(b"ab", dtype=np.uint8)  # key "a" of ends [2] but no NUL after it
    store.append_many(EncodedKeys(blob, _rows([2]), np.zeros(1, dtype=np.uint64)))
    assert store._check_rows() == ["a key is not NUL-terminated"]


# Keys as the index stores them: any valid text, NUL and multi-byte characters often.
_keys = st.text(
    st.one_of(st.characters(codec="utf-8"), st.sampled_from(["\x00", "é", "€", "\U0001f600"])),
    min_size=1,
    max_size=8,
)


@SETTINGS
@given(st.lists(_keys, min_size=1, max_size=60, unique=True), st.data())
def test_reads_against_a_list_model(keys: list[str], data: st.DataObject) -> None:
    store = KeyStore()
    split = data.draw(st.integers(0, len(keys)))
    for key in keys[:split]:
        store.append(key.encode(), hash_key(key.encode()))
    if split < len(keys):
        store.append_many(encode_keys(keys[split:]))
    assert store._check() == []
    n = len(keys)
    rows = data.draw(st.lists(st.integers(0, n - 1), max_size=80))
    assert store.keys(_rows(rows)) == [keys[r] for r in rows]
    lengths, blob = store.export(_rows(rows))
    assert lengths.tolist() == [len(keys[r].encode()) for r in rows]
    assert blob.tobytes() == b"".join(keys[r].encode() + b"\x00" for r in rows)
    mask = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    assert store.live_keys(np.array(mask, dtype=bool)) == [
        k for k, m in zip(keys, mask, strict=True) if m
    ]


@SETTINGS
@given(
    st.lists(
        st.tuples(st.integers(0, 10_000), st.integers(1, 50)),
        min_size=1,
        max_size=30,
    )
)
def test_ragged_positions_against_ranges(segments: list[tuple[int, int]]) -> None:
    starts = _rows([s for s, _ in segments])
    lengths = _rows([n for _, n in segments])
    expected = [p for s, n in segments for p in range(s, s + n)]
    out = ragged_positions(starts, lengths)
    assert out.dtype == np.int64 and out.tolist() == expected


@SETTINGS
@given(
    st.sampled_from([np.uint8, np.uint32, np.int64, np.uint64]),
    st.lists(st.integers(0, 255), max_size=40),
    st.data(),
)
def test_grown_keeps_the_used_prefix_and_zeroes_the_rest(
    dtype: type[np.generic], values: list[int], data: st.DataObject
) -> None:
    array = np.array(values, dtype=dtype)
    used = data.draw(st.integers(0, len(values)))
    capacity = data.draw(st.integers(used, used + 50))
    out = grown(array, capacity, used)
    assert out.dtype == array.dtype and out.size == capacity
    assert out[:used].tolist() == values[:used]
    assert not out[used:].any()
    assert array.tolist() == values  # the source is untouched
    if out.size:
        out[0] = 1
        assert array.tolist() == values  # a new array, not a view


def test_capacity_rules_on_known_values() -> None:
    assert not nearly_full(0, 0) and not nearly_full(56, 64) and nearly_full(57, 64)
    assert not nearly_full(7, 8) and nearly_full(8, 8)
    assert next_capacity(65, 64) == 96  # half as much again
    assert next_capacity(96, 64) == 96
    assert next_capacity(97, 64) == 97 + 12  # a bulk write: need plus an eighth
    assert next_capacity(10_000, 1024) == 11_250
    assert ahead_capacity(56, 0, 64) == 64  # not nearly full: the same
    assert ahead_capacity(57, 0, 64) == 96  # nearly full: half as much again
    assert ahead_capacity(10, 100, 64) == 110  # room for the extra in any case
    assert ahead_capacity(60, 100, 64) == 160


@SETTINGS
@given(st.integers(0, 1 << 40), st.integers(1, 1 << 40))
def test_nearly_full_is_past_seven_eighths(used: int, capacity: int) -> None:
    assert nearly_full(used, capacity) == (Fraction(used, capacity) > Fraction(7, 8))


@SETTINGS
@given(st.integers(1, 1 << 40), st.integers(1, 1 << 40))
def test_next_capacity_fits_the_need_with_room(capacity: int, extra: int) -> None:
    need = capacity + extra  # it is asked only when the need does not fit
    out = next_capacity(need, capacity)
    assert out >= need
    assert out >= capacity + capacity // 2  # amortized: at least half as much again
    assert out >= need + need // 8 or out == capacity + capacity // 2
    assert out <= max(capacity + capacity // 2, need + need // 8)


@SETTINGS
@given(st.integers(0, 1 << 40), st.integers(0, 1 << 20), st.integers(1, 1 << 40))
def test_ahead_capacity_never_shrinks_and_fits_the_extra(
    used: int, extra: int, capacity: int
) -> None:
    out = ahead_capacity(used, extra, capacity)
    assert out >= capacity and out >= used + extra
    if nearly_full(used, capacity):
        assert out >= capacity + capacity // 2
    elif used + extra <= capacity:
        assert out == capacity


# The key store's hash table (permindex.index.keys.hash_table): find and find_many with hash
# collisions forced by choosing the hashes (the table takes them as arguments), keys that differ
# only in length or after a NUL, probe sequences that wrap around the table's end, backward-shift
# deletion, link_rows on hand-built tables, EncodedKeys.lengths, and _check_table catching broken
# preconditions; a hypothesis run against a dict model with a handful of hash values.


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


_table_keys = st.sampled_from(["a", "b", "a\x00", "\x00", "é", "ab", "k1", "k2", "k3", "k4", "€€"])


_ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "remove", "batch"]), st.lists(_table_keys, min_size=1, max_size=6)
    ),
    max_size=40,
)


@SETTINGS
@given(st.dictionaries(_table_keys, _hashes, min_size=11, max_size=11), _ops)
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


# KeyColumn (permindex.index.keys.column): keys as one UTF-8 buffer and offsets, read as a
# Sequence[str]; last_positions and keys_distinct against a dict over Python strings; the compiled
# hash against the xxhash package (tests/oracles.py); and the offline dedup, whose keys it holds,
# with repeated keys.


KEY_LISTS = st.lists(
    st.text(st.characters(exclude_categories=["Cs"]), min_size=0, max_size=12), max_size=60
)


def reference_last(keys: list[str]) -> list[int]:
    last = {key: i for i, key in enumerate(keys)}
    return sorted(last.values())


@settings(max_examples=150, deadline=None)
@given(keys=KEY_LISTS, data=st.data())
def test_reads_back_as_the_strings(keys: list[str], data: st.DataObject) -> None:
    column = KeyColumn.of_strings(keys)
    assert len(column) == len(keys)
    assert list(column) == keys and column == keys and column[:] == keys
    for i in range(len(keys)):
        assert column[i] == keys[i] and column[i - len(keys)] == keys[i]
    positions = data.draw(st.lists(st.integers(0, max(0, len(keys) - 1)), max_size=20))
    if keys:
        taken = column.take(np.array(positions, dtype=np.int64))
        assert list(taken) == [keys[p] for p in positions]
        at = np.array(positions, dtype=np.int64)
        assert column.strings(at) == [keys[p] for p in positions]
        remembered = KeyColumn.of_strings(keys)
        remembered.remember(at)
        assert list(remembered) == keys and [remembered[p] for p in positions] == [
            keys[p] for p in positions
        ]
    cut = data.draw(st.integers(0, len(keys)))
    joined = KeyColumn.concat([KeyColumn.of_strings(keys[:cut]), KeyColumn.of_strings(keys[cut:])])
    assert joined == column and list(joined) == keys


@settings(max_examples=100, deadline=None)
@given(
    keys=st.lists(st.sampled_from(["a", "b", "ключ", "a\x00", "", "ab", "c" * 300]), max_size=40)
)
def test_last_positions_equal_a_dict(keys: list[str]) -> None:
    column = KeyColumn.of_strings(keys)
    assert last_positions(column).tolist() == reference_last(keys)
    assert keys_distinct(column) == (len(set(keys)) == len(keys))
    assert last_positions(keys).tolist() == reference_last(keys)


@settings(max_examples=100, deadline=None)
@given(keys=KEY_LISTS)
def test_hashes_are_xxh3_of_the_utf8_bytes(keys: list[str]) -> None:
    """The kernel's XXH3-64 of each key equals the xxhash package's, for keys of every length
    class XXH3 has (0, 1-3, 4-8, 9-16, 17-128, 129-240, longer)."""
    keys = [*keys, "", "a", "doc/00000042", "ключ", "x" * 241, "\x00", "y" * 1000]
    assert KeyColumn.of_strings(keys).hashes().tolist() == xxh3_of_keys(keys)


def test_out_of_range_and_bad_arrays() -> None:
    column = KeyColumn.of_strings(["a", "b"])
    with pytest.raises(IndexError, match="out of range"):
        column[2]
    with pytest.raises(IndexError):
        column[-3]
    with pytest.raises(ValueError, match="int64 offsets"):
        KeyColumn(np.zeros(1, dtype=np.uint8), np.zeros(2, dtype=np.int32))
    with pytest.raises(ValueError, match="within the data"):
        KeyColumn(np.zeros(1, dtype=np.uint8), np.array([0, 5], dtype=np.int64))
    with pytest.raises(UnicodeEncodeError):
        KeyColumn.of_strings(["\ud800"])
    assert column != ["a"] and column != ["a", "c"] and column == ["a", "b"]


def test_take_of_every_position_is_the_column_itself() -> None:
    column = KeyColumn.of_strings(["a", "b", "c"])
    assert column.take(np.arange(3, dtype=np.int64)) is column
    assert list(column.take(np.array([2, 1, 0], dtype=np.int64))) == ["c", "b", "a"]


def test_dedup_keeps_each_keys_last_occurrence(tmp_path: Path) -> None:
    """A JSONL input with repeated keys: each key joins with its last fingerprint, as ingest
    would leave it in a server; the result's keys are a KeyColumn equal to those keys."""
    base = 0x0123456789ABCDEF
    rows = [
        ("a", base),
        ("b", base ^ 0b1),
        ("a", base ^ 0xFFFF_FFFF_0000_0000),  # a moves away from b
        ("c", base ^ 0b11),
        ("ключ", base ^ 0b111),
        ("c", base ^ 0b11),
    ]
    source = tmp_path / "in.jsonl"
    source.write_text(
        "".join(json.dumps({"id": key, "fingerprint": f"{fp:016x}"}) + "\n" for key, fp in rows),
        encoding="utf-8",
    )
    result = run_dedup(DedupOptions(source=str(source), out_dir=tmp_path / "out"))
    assert result.repeated_keys == 2
    assert list(result.near.keys) == ["b", "a", "ключ", "c"]  # in order of last occurrence
    assert list(result.near.iter_pairs()) == [("b", "c", 1), ("b", "ключ", 2), ("c", "ключ", 1)]


# The key store: every operation against a dict model, with hash collisions forced (a hash with a
# handful of values), growth of every array, removal with backward-shift deletion, compaction,
# keys holding NUL and non-ASCII characters; and the index on top of it with the same collisions.


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
