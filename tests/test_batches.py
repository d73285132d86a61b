"""Input batches (permindex.index.keys.batches): str keys validated with the first bad position,
repeated keys kept once with their last value, and compact key sections validated and hashed
in chunks exactly as hash_key does one key."""

from __future__ import annotations

import numpy as np
import pytest

from permindex.errors import InvalidArgumentError
from permindex.index.keys.batches import (
    compact_inputs,
    distinct_keys,
    hash_section,
    section_ends,
    section_keys,
    validate_keys,
)
from permindex.index.keys.store import hash_key


def test_validate_keys_names_the_first_bad_position() -> None:
    keys, batch = validate_keys(iter(["a", "é"]))
    assert keys == ["a", "é"] and batch.lengths.tolist() == [1, 2]
    with pytest.raises(InvalidArgumentError, match=r"keys\[1\]"):
        validate_keys(["a", "", "b"])
    with pytest.raises(InvalidArgumentError, match=r"keys\[0\]"):
        validate_keys(["x" * 1025])
    with pytest.raises(TypeError):
        validate_keys("ab")
    with pytest.raises(TypeError, match=r"keys\[1\]"):
        validate_keys(["a", 3])


def test_distinct_keys_keeps_the_last_value() -> None:
    keys, batch = validate_keys(["a", "b", "a", "c", "b"])
    values = np.array([1, 2, 3, 4, 5], dtype=np.uint64)
    out, out_batch, out_values, which = distinct_keys(keys, batch, values)
    assert out == ["a", "c", "b"] and out_values.tolist() == [3, 4, 5]
    assert out_batch.lengths.tolist() == [1, 1, 1]
    assert which is not None and which.tolist() == [0, 2, 0, 1, 2]
    keys, batch = validate_keys(["x", "y"])
    assert distinct_keys(keys, batch, np.array([1, 2], np.uint64))[3] is None
    with pytest.raises(InvalidArgumentError, match="must match"):
        distinct_keys(keys, batch, np.array([1], np.uint64))


def test_sections_validated_hashed_and_decoded() -> None:
    names = ["a", "nul\x00in", "é", "\U0001f600", *[f"k{i}" for i in range(10)]]
    encoded = [name.encode() for name in names]
    sizes, raw, values = compact_inputs(
        [len(e) for e in encoded], b"".join(e + b"\x00" for e in encoded), range(len(names))
    )
    data, ends = section_ends(sizes, raw, 4)  # 4 bytes checked as UTF-8 a step
    assert data.size == len(raw) and ends.tolist() == np.cumsum(sizes + 1).tolist()
    assert hash_section(raw, ends, 3).tolist() == [hash_key(e) for e in encoded]  # 3 keys a step
    assert section_keys(raw, sizes, ends) == names
    assert values.tolist() == list(range(len(names)))
    bad = bytearray(raw)
    bad[ends[5] - 2] = 0xFF  # inside a later key
    with pytest.raises(InvalidArgumentError, match=f"at byte {ends[5] - 2}"):
        section_ends(sizes, bytes(bad), 4)
    for lengths, blob, message in [
        ([2], b"a\x00", "does not match"),
        ([0], b"\x00", "1 to 1024"),
        ([1025], b"a" * 1025 + b"\x00", "1 to 1024"),
    ]:
        with pytest.raises(InvalidArgumentError, match=message):
            section_ends(np.array(lengths), blob)
    with pytest.raises(InvalidArgumentError, match="must match"):
        compact_inputs([1], b"a\x00", [1, 2])
    with pytest.raises(TypeError):
        compact_inputs(np.array([[1]]), b"a\x00", [1])
