"""Keys are stored, replaced, removed and found: the key store (permindex.index.keys.store:
every operation against a dict model, growth of every array, removal with backward-shift
deletion, compaction, and the index on top of it), its rows (permindex.index.keys.rows: keys
read back by row, one, a few, many, repeated, under a liveness mask, the compact export, the
capacity rules), its hash table (permindex.index.keys.hash_table: probes wrapping around the
table's end, _check_table), and the KeyColumn of the offline dedup; each against a dict or list
model. The store is addressed by a compiled hash of each key's code, so the hashes a batch
carries (XXH3, or chosen ones) no longer steer its probes: the tests that chose colliding hashes
now run on a map up to 7/8 full, with long probe sequences of its own (tests/test_key_codes.py
has the store against a dict model through the Index)."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from key_model import apply_op, with_hashes
from numpy.typing import NDArray
from oracles import xxh3_of_keys
from strategies import SETTINGS

import permindex.index.keys.store as keystore_module
from permindex import Index, InvalidArgumentError
from permindex.index.keys.column import KeyColumn, keys_distinct, last_positions
from permindex.index.keys.hash_table import MIN_SLOTS, KeyTable
from permindex.index.keys.rows import (
    KeyRows,
    ahead_capacity,
    grown,
    nearly_full,
    next_capacity,
    ragged_positions,
)
from permindex.index.keys.store import KeyStore, batch_subset, encode_keys, hash_key
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


# Keys as the index stores them: any valid text, NUL and multi-byte characters often.
_keys = st.text(
    st.one_of(st.characters(codec="utf-8"), st.sampled_from(["\x00", "é", "€", "\U0001f600"])),
    min_size=1,
    max_size=8,
)


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
    rows = [store.append(k.encode()) for k, h in zip(keys, hashes, strict=True)]
    assert len(store) == len(keys) and _problems(store) == []
    for key, _h, row in zip(keys, hashes, rows, strict=True):
        assert store.find(key.encode()) == row
    assert store.find_many(with_hashes(keys, hashes)).tolist() == rows
    # Absent keys with a stored hash: a probe each, never a wrong row.
    absent = ["a\x00\x00", "b", "k", "k1\x00", "\x00\x00\x00", "aa"]
    for key in absent:
        assert store.find(key.encode()) == -1
    assert store.find_many(with_hashes(absent, [hashes[0]] * len(absent))).tolist() == [-1] * 6
    assert store.linked_rows().tolist() == rows


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
        for key, _h in zip(keys, hashes, strict=True):
            store.append(key)
        live = set(range(8))
        for row in order:
            store.unlink(row)
            live.discard(row)
            assert len(store) == len(live) and _problems(store) == []
            assert store.linked_rows().tolist() == sorted(live)
            for r in range(8):
                assert store.find(keys[r]) == (r if r in live else -1)


def test_unlinking_a_row_that_is_not_linked_is_a_key_error_and_changes_nothing() -> None:
    store = KeyStore()
    store.append_many(encode_keys(["a", "b", "c"]))
    store.unlink(1)
    with pytest.raises(KeyError):
        store.unlink(1)
    assert len(store) == 2 and _problems(store) == []
    assert store.find(b"a") == 0 and store.find(b"c") == 2


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
        assert store.find(key.encode()) == model.get(key, -1)


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
        assert store.find(data) == row
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
        hash_key(data)
        if op < 0.5:
            old = model.get(key, -1)
            if old >= 0:
                store.unlink(old)
            model[key] = store.append(data, moved_from=old)
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
