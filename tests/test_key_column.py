"""KeyColumn (permindex.index.keys.column): keys as one UTF-8 buffer and offsets, read as a
Sequence[str]; last_positions and keys_distinct against a dict over Python strings; the
compiled hash against the xxhash package (tests/oracles.py); and the offline dedup, whose keys
it holds, with repeated keys."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import xxh3_of_keys

from permindex.index.keys.column import KeyColumn, keys_distinct, last_positions
from permindex.near.dedup import run_dedup
from permindex.near.result import DedupOptions

KEYS = st.lists(
    st.text(st.characters(exclude_categories=["Cs"]), min_size=0, max_size=12), max_size=60
)


def reference_last(keys: list[str]) -> list[int]:
    last = {key: i for i, key in enumerate(keys)}
    return sorted(last.values())


@settings(max_examples=150, deadline=None)
@given(keys=KEYS, data=st.data())
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
@given(keys=KEYS)
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
