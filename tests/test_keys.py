"""Keys: what the index accepts as a key, alone (permindex.index.keys.rule: the 1,024-byte
limit in every UTF-8 width, empty keys, lone surrogates, NUL inside a key, non-str input, the
error's reason, size and limit; check_int; short_repr), in a batch (permindex.index.keys.batches:
the first bad position named, a repeated key kept once with its last value) and in a compact key
section (permindex.storage.key_section: encoded, checked and decoded against per-key encodes,
validated and hashed in chunks exactly as hash_key does one key, and the rule for a key
repeated in one batch against a model written with a set and a dict)."""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import SETTINGS

from permindex import Index, InvalidArgumentError
from permindex.errors import InvalidKeyError
from permindex.index.keys.batches import (
    compact_inputs,
    distinct_keys,
    hash_section,
    section_ends,
    section_keys,
    validate_keys,
)
from permindex.index.keys.rule import MAX_KEY_BYTES, check_int, short_repr, validate_key
from permindex.index.keys.store import hash_key
from permindex.storage.key_section import (
    KeySectionError,
    batch_repeats,
    check_section,
    decode_section,
    encode_section,
    first_utf8_error,
    section_lengths,
)
from permindex.storage.key_section import (
    section_ends as codec_section_ends,
)

# The key rule (permindex.index.keys.rule): validate_key at the 1,024-byte limit in every UTF-8
# width, empty keys, lone surrogates, NUL inside a key, non-str input, the error's
# reason/size/limit and message; check_int with Python and numpy integers; short_repr's cut; and
# validate_key against a model written with str.encode.


@pytest.mark.parametrize(
    "key",
    [
        "a",
        "\x00",
        "nul\x00inside",
        "\x00" * 1024,
        "x" * 1024,  # ASCII, exactly at the limit
        "é" * 512,  # 2-byte characters, exactly at the limit
        "€" * 341 + "a",  # 3-byte characters, 1,024 bytes
        "\U0001f600" * 256,  # 4-byte characters, exactly at the limit
        "\U0010ffff",  # the last code point
        "\ufeff",  # a BOM is an ordinary character in a key
    ],
)
def test_valid_keys_are_returned_unchanged(key: str) -> None:
    assert len(key.encode("utf-8")) <= MAX_KEY_BYTES
    result = validate_key(key)
    assert result == key and type(result) is str


@pytest.mark.parametrize(
    ("key", "size"),
    [
        ("x" * 1025, 1025),  # the ASCII path measures characters
        ("é" * 512 + "a", 1025),  # the non-ASCII path measures bytes, not characters
        ("é" * 513, 1026),
        ("€" * 342, 1026),
        ("\U0001f600" * 256 + "a", 1025),
        ("a" * 1023 + "é", 1025),  # 1,024 characters but 1,025 bytes
        ("\x00" * 1025, 1025),
    ],
)
def test_over_the_limit_is_a_size_error(key: str, size: int) -> None:
    with pytest.raises(InvalidKeyError, match=f"is {size} UTF-8 bytes; at most 1024") as caught:
        validate_key(key)
    error = caught.value
    assert (error.reason, error.size, error.limit, error.value) == ("size", size, 1024, key)
    assert isinstance(error, InvalidArgumentError) and isinstance(error, ValueError)
    assert len(str(error)) < 150  # the key is cut in the message (short_repr)


def test_empty_key() -> None:
    with pytest.raises(InvalidKeyError, match=r"^key must not be empty$") as caught:
        validate_key("")
    assert (caught.value.reason, caught.value.size, caught.value.limit) == ("empty", 0, 1024)


@pytest.mark.parametrize("key", ["\ud800", "\udfff", "a\udc80b", "é\ud83d", "x" * 2000 + "\ud800"])
def test_lone_surrogates_are_an_encoding_error(key: str) -> None:
    with pytest.raises(InvalidKeyError, match="cannot be encoded as UTF-8: surrogates") as caught:
        validate_key(key)
    error = caught.value
    assert (error.reason, error.size, error.limit, error.value) == ("encoding", None, 1024, key)
    assert error.__cause__ is None and error.__suppress_context__  # raised "from None"


def test_surrogate_pair_written_as_one_character_is_valid() -> None:
    assert validate_key("\U0001f600") == "\U0001f600"
    with pytest.raises(InvalidKeyError):  # the same pair as two lone surrogates is not
        validate_key("\ud83d\ude00")


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (b"key", "bytes b'key'"),
        (None, "NoneType None"),
        (3, "int 3"),
        (["a"], "list ['a']"),
        (bytearray(b"k"), "bytearray bytearray(b'k')"),
    ],
)
def test_what_is_not_a_str_is_a_type_error(value: object, shown: str) -> None:
    with pytest.raises(TypeError) as caught:
        validate_key(value)
    assert str(caught.value) == f"key must be str, not {shown}"
    assert not isinstance(caught.value, InvalidArgumentError)


def test_name_and_max_bytes_options() -> None:
    with pytest.raises(TypeError, match=r"^keys\[3\] must be str"):
        validate_key(1, name="keys[3]")
    with pytest.raises(InvalidKeyError, match=r"^keys\[3\] must not be empty") as empty:
        validate_key("", name="keys[3]", max_bytes=10)
    assert empty.value.limit == 10
    with pytest.raises(InvalidKeyError, match=r"^id '\\ud800' cannot be encoded"):
        validate_key("\ud800", name="id")
    assert validate_key("é" * 5, max_bytes=10) == "é" * 5
    with pytest.raises(InvalidKeyError, match="is 3 UTF-8 bytes; at most 2 are allowed") as big:
        validate_key("é" + "a", max_bytes=2)
    assert (big.value.size, big.value.limit) == (3, 2)
    # A limit above the default is a server's choice; the rule follows it.
    assert validate_key("x" * 2000, max_bytes=4096) == "x" * 2000


def test_a_plain_str_subclass_is_returned_as_str() -> None:
    class Name(str):
        pass

    result = validate_key(Name("doc-1"))
    assert result == "doc-1" and type(result) is str


def test_the_empty_check_comes_before_the_size_check() -> None:
    with pytest.raises(InvalidKeyError) as caught:
        validate_key("", max_bytes=0)
    assert caught.value.reason == "empty"
    with pytest.raises(InvalidKeyError) as surrogate:
        validate_key("\ud800" * 600)  # too long too, but not measurable in bytes
    assert surrogate.value.reason == "encoding"


# A key's characters: any code point (surrogates included), NUL and multi-byte ones often.
_chars = st.one_of(
    st.characters(codec=None, exclude_categories=()),
    st.sampled_from(["\x00", "a", "é", "€", "\U0001f600", "\ud800"]),
)


@SETTINGS
@given(st.text(_chars, max_size=12), st.integers(min_value=0, max_value=40))
def test_validate_key_against_a_model(key: str, limit: int) -> None:
    try:
        size: int | None = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        size = None
    if not key:
        expected = "empty"
    elif size is None:
        expected = "encoding"
    elif size > limit:
        expected = "size"
    else:
        assert validate_key(key, max_bytes=limit) == key
        return
    with pytest.raises(InvalidKeyError) as caught:
        validate_key(key, max_bytes=limit)
    error = caught.value
    assert (error.reason, error.limit, error.value) == (expected, limit, key)
    assert error.size == (0 if expected == "empty" else size)


def test_check_int_accepts_python_and_numpy_integers() -> None:
    top = (1 << 64) - 1
    for value, expected in [
        (0, 0),
        (-5, -5),
        (1 << 100, 1 << 100),
        (np.uint64(top), top),
        (np.int64(-(1 << 63)), -(1 << 63)),
        (np.int8(-3), -3),
        (np.uint8(255), 255),
    ]:
        result = check_int(value, "k")
        assert result == expected and type(result) is int


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (True, "bool True"),
        (False, "bool False"),
        (np.bool_(True), "bool np.True_"),
        (1.0, "float 1.0"),
        (np.float64(2.0), "float64 np.float64(2.0)"),
        ("3", "str '3'"),
        (None, "NoneType None"),
    ],
)
def test_check_int_refuses_bools_and_non_integers(value: object, shown: str) -> None:
    with pytest.raises(TypeError) as caught:
        check_int(value, "limit")
    assert str(caught.value) == f"limit must be an int, not {shown}"


@SETTINGS
@given(st.integers())
def test_check_int_is_the_identity_on_ints(value: int) -> None:
    result = check_int(value, "n")
    assert result == value and type(result) is int


def test_short_repr_cuts_at_60_characters() -> None:
    assert short_repr("abc") == "'abc'"
    assert short_repr(None) == "None"
    exact = "x" * 58  # repr: 60 characters, kept whole
    assert short_repr(exact) == repr(exact)
    cut = short_repr("x" * 59)  # repr: 61 characters
    assert len(cut) == 60 and cut == "'" + "x" * 56 + "..."
    assert short_repr(b"\xff" * 100).startswith("b'\\xff") and len(short_repr(b"\xff" * 100)) == 60


@SETTINGS
@given(st.one_of(st.text(), st.binary(), st.integers(), st.lists(st.integers())))
def test_short_repr_is_a_prefix_of_repr(value: object) -> None:
    text = repr(value)
    shown = short_repr(value)
    assert len(shown) <= 60
    assert shown == text if len(text) <= 60 else shown == text[:57] + "..."


class _ShortLen(str):
    """A str subclass that lies about its length."""

    def __len__(self) -> int:
        return 1


class _OtherStr(str):
    """A str subclass whose str() is another text."""

    def __str__(self) -> str:
        return "other"


def test_a_str_subclass_is_checked_and_returned_by_its_characters() -> None:
    long = _ShortLen("x" * 2000)
    with pytest.raises(InvalidArgumentError, match="2000 UTF-8 bytes"):
        validate_key(long)
    key = validate_key(_OtherStr("abc"))
    assert key == "abc" and type(key) is str


def test_the_index_stores_a_str_subclass_key_by_its_characters() -> None:
    index = Index()
    index.add(_OtherStr("abc"), 7)
    assert index.export()[0] == ["abc"]
    with pytest.raises(InvalidArgumentError):
        index.add(_ShortLen("y" * 2000), 5)
    assert len(index) == 1


# The key-section codec (permindex.storage.key_section): encoding, checking and decoding a key
# section, against per-key encodes; and the rule for a key repeated in one batch, against a model
# written out with a set and a dict.


KEYS = ["a", "doc-00000001", "é", "\U0001f600x", "nul\x00inside", "\x00", "x" * 1024, "7"]


@pytest.mark.parametrize("keys", [[], ["a"], KEYS, KEYS[:4], ["\x00\x00", "b"]])
def test_encode_check_decode_round_trip(keys: list[str]) -> None:
    section, ends = encode_section(keys)
    encoded = [key.encode("utf-8") for key in keys]
    assert section == b"".join(e + b"\x00" for e in encoded)
    lengths = section_lengths(ends)
    assert lengths.dtype == np.dtype("<u4") and lengths.tolist() == [len(e) for e in encoded]
    assert np.array_equal(codec_section_ends(lengths), ends) and ends.dtype == np.int64
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


# Input batches (permindex.index.keys.batches): str keys validated with the first bad position,
# repeated keys kept once with their last value, and compact key sections validated and hashed in
# chunks exactly as hash_key does one key.


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
