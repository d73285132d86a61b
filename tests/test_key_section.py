"""The key-section codec (permindex.storage.key_section): encoding, checking and decoding a key
section, against per-key encodes; and the rule for a key repeated in one batch, against a
model written out with a set and a dict.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from permindex import InvalidArgumentError
from permindex.storage.key_section import (
    KeySectionError,
    batch_repeats,
    check_section,
    decode_section,
    encode_section,
    first_utf8_error,
    section_ends,
    section_lengths,
)

KEYS = ["a", "doc-00000001", "é", "\U0001f600x", "nul\x00inside", "\x00", "x" * 1024, "7"]


@pytest.mark.parametrize("keys", [[], ["a"], KEYS, KEYS[:4], ["\x00\x00", "b"]])
def test_encode_check_decode_round_trip(keys: list[str]) -> None:
    section, ends = encode_section(keys)
    encoded = [key.encode("utf-8") for key in keys]
    assert section == b"".join(e + b"\x00" for e in encoded)
    lengths = section_lengths(ends)
    assert lengths.dtype == np.dtype("<u4") and lengths.tolist() == [len(e) for e in encoded]
    assert np.array_equal(section_ends(lengths), ends) and ends.dtype == np.int64
    raw = np.frombuffer(section, dtype=np.uint8)
    assert np.array_equal(check_section(raw, lengths), ends)
    assert decode_section(section, lengths) == keys


def test_encode_refuses_what_is_not_a_str_or_not_encodable() -> None:
    with pytest.raises(TypeError):
        encode_section(["a", 1])  # type: ignore[list-item]
    with pytest.raises(UnicodeEncodeError):
        encode_section(["a", "\ud800"])


@pytest.mark.parametrize(
    ("lengths", "section", "kind", "message"),
    [
        ([0], b"\x00", "length", "1 to 1024"),
        ([1025], b"a" * 1025 + b"\x00", "length", "1 to 1024"),
        ([0, 5], b"\x00", "length", "1 to 1024"),  # the length check comes first
        ([2], b"a\x00", "size", "does not match"),
        ([], b"a\x00", "size", "non-empty"),
        ([1], b"ab", "nul", "does not match"),
        ([1], b"\xff\x00", "utf8", "not valid UTF-8 \\(invalid start byte at byte 0\\)"),
        ([1, 2], b"a\x00\xc3(\x00", "utf8", "at byte 2\\)"),
    ],
)
def test_check_names_the_first_problem(
    lengths: list[int], section: bytes, kind: str, message: str
) -> None:
    raw = np.frombuffer(section, dtype=np.uint8)
    with pytest.raises(KeySectionError, match=message) as caught:
        check_section(raw, np.array(lengths, dtype=np.int64))
    assert caught.value.kind == kind and isinstance(caught.value, InvalidArgumentError)
    if kind == "utf8":
        assert caught.value.offset >= 0 and caught.value.reason


def test_check_options() -> None:
    long = np.frombuffer(b"a" * 1025 + b"\x00", dtype=np.uint8)
    assert check_section(long, np.array([1025]), max_bytes=None).tolist() == [1026]
    bad = np.frombuffer(b"\xff\x00", dtype=np.uint8)
    assert check_section(bad, np.array([1]), utf8=False).tolist() == [2]


def test_utf8_errors_at_their_offset_in_any_slice() -> None:
    """A bad byte is reported at its offset in the whole section, whatever the slice size, by
    the checker and by the decoder (one decode, or one per key when a key holds NUL)."""
    keys = [f"k{i}é" for i in range(200)] + ["nul\x00é"]
    section, ends = encode_section(keys)
    bad = bytearray(section)
    offset = section.index("k150é".encode()) + 1
    bad[offset] = 0xFF
    lengths = section_lengths(ends)
    for slice_bytes in (1, 16, 1000, 1 << 24):
        assert first_utf8_error(memoryview(bytes(bad)), ends, slice_bytes) == (
            offset,
            "invalid start byte",
        )
        with pytest.raises(KeySectionError, match=f"at byte {offset}\\)"):
            check_section(np.frombuffer(bytes(bad), np.uint8), lengths, utf8_slice=slice_bytes)
    with pytest.raises(KeySectionError, match=f"at byte {offset}\\)") as caught:
        decode_section(bytes(bad), lengths)
    assert caught.value.offset == offset
    assert first_utf8_error(memoryview(section), ends, 16) is None


def _model(keys: list[str]) -> tuple[list[bool], list[int], list[int]]:
    seen: set[str] = set()
    first = []
    for key in keys:
        first.append(key not in seen)
        seen.add(key)
    last_of = {key: i for i, key in enumerate(keys)}
    last = sorted(last_of.values())
    which = [last.index(last_of[key]) for key in keys]
    return first, last, which


def test_batch_repeats_against_a_model() -> None:
    rng = random.Random(3)
    assert batch_repeats([]) is None and batch_repeats(["a"]) is None
    assert batch_repeats(["a", "b", "c"]) is None
    for _ in range(200):
        keys = [rng.choice("abcdefg") for _ in range(rng.randint(2, 12))]
        found = batch_repeats(keys)
        if len(set(keys)) == len(keys):
            assert found is None
            continue
        assert found is not None
        first, last, which = _model(keys)
        assert found.first.tolist() == first
        assert found.last.tolist() == last and found.last.dtype == np.int64
        assert found.which.tolist() == which
        hashes = np.array([ord(k) for k in keys], dtype=np.uint64)
        with_hashes = batch_repeats(keys, hashes)
        assert with_hashes is not None and with_hashes.last.tolist() == last


def test_batch_repeats_with_equal_hashes_is_exact() -> None:
    """Equal hashes only say a key may repeat; distinct keys with one hash do not repeat."""
    assert batch_repeats(["a", "b"], np.array([7, 7], dtype=np.uint64)) is None
    assert batch_repeats(["a", "a"], np.array([1, 2], dtype=np.uint64)) is None  # trusted
