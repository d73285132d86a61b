"""The key store's rows (permindex.index.keys.rows): reading keys back by row (one, a few, many,
repeated, a liveness mask, the compact export) with NUL inside keys and multi-byte UTF-8, the
first-added order, _check_rows on rows written through the public appends, and the array helpers
(ragged_positions, grown and the capacity rules) against plain Python models.

The rows are filled through :class:`~permindex.index.keys.store.KeyStore` (a KeyRows), whose
appends are the only public writers; a bare KeyRows is the empty case.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.typing import NDArray
from strategies import SETTINGS

from permindex.index.keys.hash_table import EncodedKeys
from permindex.index.keys.rows import (
    KeyRows,
    ahead_capacity,
    grown,
    nearly_full,
    next_capacity,
    ragged_positions,
)
from permindex.index.keys.store import KeyStore, encode_keys, hash_key

KEYS = ["a", "é", "nul\x00inside", "\x00", "\x00\x00", "\U0001f600x", "x" * 1024, "€" * 341, "7"]


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
    store = _filled(KEYS)
    assert store.rows == len(KEYS)
    for row, key in enumerate(KEYS):
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
    keys = [KEYS[i % len(KEYS)] + str(i) for i in range(count)]
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
    store = _filled(KEYS)
    n = len(KEYS)
    assert store.live_keys(np.ones(n, dtype=bool)) == KEYS
    assert store.live_keys(np.zeros(n, dtype=bool)) == []
    mask = np.array([i % 2 == 0 for i in range(n)])
    assert store.live_keys(mask) == KEYS[::2]
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
        list(range(len(KEYS))),  # every row in order (the whole buffer)
        list(range(len(KEYS)))[::-1],  # every row but not in order
        [2, 0, 2],
        [len(KEYS) - 1],
        [],
    ],
)
def test_export_is_the_key_section_of_the_rows(rows: list[int]) -> None:
    store = _filled(KEYS)
    lengths, blob = store.export(_rows(rows))
    encoded = [KEYS[r].encode("utf-8") for r in rows]
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
