"""Hamming distance, fingerprint arrays; and the brute-force oracles of the tests
(tests/oracles.py) against plain Python loops."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import brute_force_pairs, brute_force_query
from strategies import SETTINGS, fingerprints

from permindex import hamming
from permindex.errors import InvalidArgumentError
from permindex.index.hamming import as_fingerprint_array, parse_fingerprint

TOP = (1 << 64) - 1


def test_hamming_known_values() -> None:
    assert hamming(0, 0) == 0
    assert hamming(0, TOP) == 64
    assert hamming(0, 1) == 1
    assert hamming(0, 1 << 63) == 1
    assert hamming(0b1011, 0b0110) == 3
    assert hamming(np.uint64(TOP), 0) == 64
    assert isinstance(hamming(np.uint64(5), np.int64(1)), int)


@SETTINGS
@given(fingerprints, fingerprints)
def test_hamming_is_popcount_of_xor(a: int, b: int) -> None:
    expected = bin(a ^ b).count("1")
    assert hamming(a, b) == expected == hamming(b, a)


@pytest.mark.parametrize("bad", [True, False, 1.0, "1", None, b"1", [1]])
def test_hamming_refuses_non_integers(bad: object) -> None:
    with pytest.raises(TypeError):
        hamming(bad, 0)
    with pytest.raises(TypeError):
        hamming(0, bad)


@pytest.mark.parametrize("bad", [-1, 1 << 64, -(1 << 63)])
def test_hamming_refuses_out_of_range(bad: int) -> None:
    with pytest.raises(InvalidArgumentError, match=str(bad)):
        hamming(bad, 0)


def test_brute_force_query_matches_python_loop() -> None:
    rng = np.random.default_rng(7)
    base = rng.integers(0, 1 << 64, 40, dtype=np.uint64)
    fps = np.concatenate([base, base ^ np.uint64(1), base ^ np.uint64(0b111), base])
    for q in base.tolist()[:10]:
        for k in range(5):
            expected = [i for i, f in enumerate(fps.tolist()) if bin(f ^ q).count("1") <= k]
            assert brute_force_query(fps, q, k).tolist() == expected


def test_brute_force_pairs_matches_python_loop() -> None:
    rng = np.random.default_rng(8)
    base = rng.integers(0, 1 << 64, 30, dtype=np.uint64)
    fps = np.concatenate([base, base ^ np.uint64(1 << 63), base ^ np.uint64(3), base[:5]])
    values = fps.tolist()
    for k in (0, 1, 2, 3):
        i, j, d = brute_force_pairs(fps, k)
        got = list(zip(i.tolist(), j.tolist(), d.tolist(), strict=True))
        expected = [
            (a, b, bin(values[a] ^ values[b]).count("1"))
            for a in range(len(values))
            for b in range(a + 1, len(values))
            if bin(values[a] ^ values[b]).count("1") <= k
        ]
        assert got == expected


def test_brute_force_pairs_crosses_blocks() -> None:
    fps = np.zeros(2500, dtype=np.uint64)  # more than one 1,024-row block, all equal
    i, j, d = brute_force_pairs(fps[:1100], 0)
    assert i.size == 1100 * 1099 // 2
    assert (i < j).all() and (d == 0).all()
    assert brute_force_pairs(fps[:0], 3)[0].size == 0


def test_as_fingerprint_array_accepts_integer_inputs() -> None:
    source = np.array([0, 1, TOP], dtype=np.uint64)
    out = as_fingerprint_array(source)
    assert out.dtype == np.uint64 and out.tolist() == [0, 1, TOP]
    out[0] = 5
    assert source[0] == 0  # a copy
    assert as_fingerprint_array([0, 1, TOP]).tolist() == [0, 1, TOP]
    assert as_fingerprint_array(iter([3, np.uint64(4), np.int8(5)])).tolist() == [3, 4, 5]
    assert as_fingerprint_array(np.array([1, 2], dtype=np.int64)).tolist() == [1, 2]
    assert as_fingerprint_array(np.array([1, 2], dtype=np.uint32)).tolist() == [1, 2]
    assert as_fingerprint_array(np.array([1, TOP], dtype=object)).tolist() == [1, TOP]
    assert as_fingerprint_array([]).size == 0
    assert as_fingerprint_array(np.array([])).size == 0


@pytest.mark.parametrize(
    ("values", "error", "pattern"),
    [
        (np.array([1, -1], dtype=np.int64), InvalidArgumentError, r"\[1\] = -1"),
        (np.array([-5], dtype=np.int8), InvalidArgumentError, "-5"),
        ([0, 1 << 64], InvalidArgumentError, r"\[1\]"),
        ([0, -1], InvalidArgumentError, r"\[1\]"),
        ([True], TypeError, "bool"),
        ([1.0], TypeError, "float"),
        (["1"], TypeError, "str"),
        (np.array([True, False]), TypeError, "bool"),
        (np.array([1.0]), TypeError, "float64"),
        (np.zeros((2, 2), dtype=np.uint64), InvalidArgumentError, "1-dimensional"),
        ("123", TypeError, "str"),
        (5, TypeError, "int"),
        (np.array([1, -1], dtype=object), InvalidArgumentError, r"\[1\]"),
    ],
)
def test_as_fingerprint_array_refuses(values: object, error: type[Exception], pattern: str) -> None:
    with pytest.raises(error, match=pattern):
        as_fingerprint_array(values)


# --- the one input rule of fingerprints ----------------------------------------------------


@SETTINGS
@given(fingerprints, st.integers(min_value=1, max_value=16), st.booleans())
def test_parse_fingerprint_strings_are_hex_and_numbers_their_value(
    value: int, width: int, upper: bool
) -> None:
    sixteen = f"{value:016X}" if upper else f"{value:016x}"
    assert parse_fingerprint(sixteen) == value
    assert parse_fingerprint(f"0x{value:x}") == value
    assert parse_fingerprint(f"0X{value:0{width}X}") == value
    assert parse_fingerprint(value) == value
    assert parse_fingerprint(np.uint64(value)) == value
    decimal = str(value)
    if len(decimal) != 16:  # a decimal string is never read as decimal
        with pytest.raises(InvalidArgumentError, match=repr(decimal)):
            parse_fingerprint(decimal)
    else:  # 16 decimal digits are 16 hex digits
        assert parse_fingerprint(decimal) == int(decimal, 16)


@SETTINGS
@given(st.text(max_size=20))
def test_parse_fingerprint_accepts_a_string_only_by_the_rule(text: str) -> None:
    digits = text[2:] if text[:2] in ("0x", "0X") else None
    hex_chars = set("0123456789abcdefABCDEF")
    by_rule = (len(text) == 16 and set(text) <= hex_chars) or (
        digits is not None and 1 <= len(digits) <= 16 and set(digits) <= hex_chars
    )
    if by_rule:
        assert parse_fingerprint(text) == int(digits if digits is not None else text, 16)
    else:
        with pytest.raises(InvalidArgumentError) as refused:
            parse_fingerprint(text)
        assert repr(text) in str(refused.value)
        assert "16 hex digits or 0x and 1 to 16" in str(refused.value)


@pytest.mark.parametrize(
    ("value", "named"),
    [(-1, "-1"), (2**64, str(2**64)), (True, "true"), (1.0, "1.0"), (None, "null"), ({}, "{}")],
)
def test_parse_fingerprint_refuses_other_values_naming_them(value: object, named: str) -> None:
    with pytest.raises(InvalidArgumentError, match=f"fingerprint {named} "):
        parse_fingerprint(value)
