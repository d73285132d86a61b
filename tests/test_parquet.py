"""Parquet inputs and outputs: Arrow columns as fingerprints and keys (permindex.io.arrow) against
the JSONL rule, and the commands reading and writing Parquet files and datasets."""

from __future__ import annotations

import random

import numpy as np
import pytest

from permindex.errors import InvalidArgumentError
from permindex.index.hamming import parse_fingerprint
from permindex.io.arrow import ColumnError, fingerprint_array, key_array, text_array

pa = pytest.importorskip("pyarrow")


def _values(seed: int, n: int) -> list[int]:
    """n fingerprints, every fourth with the high bit set, and the extremes."""
    rng = random.Random(seed)
    values = [rng.getrandbits(64) | (1 << 63 if i % 4 == 0 else 0) for i in range(n)]
    return [*values, 0, 1, (1 << 64) - 1, 1 << 63]


def test_fingerprint_column_types_agree() -> None:
    values = _values(1, 500)
    want = np.array(values, dtype=np.uint64)
    signed = [v - (1 << 64) if v >= 1 << 63 else v for v in values]
    columns = {
        "uint64": pa.array(values, pa.uint64()),
        "int64": pa.array(signed, pa.int64()),
        "hex16": pa.array([f"{v:016x}" for v in values]),
        "HEX16": pa.array([f"{v:016X}" for v in values], pa.large_string()),
        "0x": pa.array([f"{v:#x}" for v in values]),
        "0X": pa.array([f"0X{v:X}" for v in values]).dictionary_encode(),
        "chunked": pa.chunked_array([pa.array(values[:7], pa.uint64()), values[7:]], pa.uint64()),
        "numpy int64": np.array(signed, dtype=np.int64),
    }
    for name, column in columns.items():
        got = fingerprint_array(column, source="f.parquet", column=name)
        assert got.dtype == np.uint64 and got.shape == (len(values),), name
        assert np.array_equal(got, want), name
    # hex strings read as parse_fingerprint reads them, one by one
    mixed = [f"0x{v:x}" if v % 2 else f"{v:016x}" for v in values]
    got = fingerprint_array(pa.array(mixed), source="f", column="c")
    assert got.tolist() == [parse_fingerprint(s) for s in mixed]


def test_narrow_integer_columns() -> None:
    for kind in (pa.uint8(), pa.uint16(), pa.uint32(), pa.int8(), pa.int16(), pa.int32()):
        got = fingerprint_array(pa.array([0, 5, 100], kind), source="f", column="c")
        assert got.tolist() == [0, 5, 100]
    with pytest.raises(ColumnError, match=r"f\.parquet, column 'fp', row 3: .*-3 is negative"):
        fingerprint_array(pa.array([1, 2, -3], pa.int32()), source="f.parquet", column="fp")
    empty = fingerprint_array(pa.array([], pa.string()), source="f", column="c")
    assert empty.dtype == np.uint64 and empty.shape == (0,)


@pytest.mark.parametrize(
    ("column", "message"),
    [
        (pa.array([1.0, 2.0]), r"column 'fp': has type double; a fingerprint column is uint64"),
        (pa.array([True]), r"column 'fp': has type bool"),
        (pa.array([b"\x00" * 8]), r"column 'fp': has type binary"),
        (pa.array([1, None], pa.uint64()), r"column 'fp', row 2: null value"),
        (pa.array(["0x1", None]), r"column 'fp', row 2: null value"),
        (pa.array(["000000000000007b", "7b"]), r"row 2: fingerprint '7b' has 2 digits, not 16"),
        (pa.array(["0x" + "f" * 17]), r"row 1: fingerprint '0xf+' has 17 hex digits"),
        (pa.array(["0x"]), r"row 1: fingerprint '0x' is not hex"),
        (pa.array([" 0x1"]), r"row 1: fingerprint ' 0x1' is not hex"),
        (pa.array(["-000000000000001"]), r"row 1: fingerprint '-000000000000001' is not hex"),
    ],
)
def test_bad_fingerprint_columns(column: object, message: str) -> None:
    with pytest.raises(ColumnError, match=message) as caught:
        fingerprint_array(column, source="f.parquet", column="fp", first_row=1)
    assert str(caught.value).startswith("f.parquet, column 'fp'")
    assert isinstance(caught.value, InvalidArgumentError)


def test_first_row_counts_a_batch() -> None:
    with pytest.raises(ColumnError, match=r"row 1002: null") as caught:
        fingerprint_array(pa.array([1, None], pa.int64()), source="s", column="c", first_row=1001)
    assert caught.value.row == 1002 and caught.value.source == "s" and caught.value.column == "c"


def test_key_and_text_columns() -> None:
    keys = ["a", "é", "x" * 1024]
    assert key_array(pa.array(keys), source="f", column="id") == keys
    assert key_array(pa.array(keys, pa.large_string()), source="f", column="id") == keys
    assert key_array(pa.array(keys).dictionary_encode(), source="f", column="id") == keys
    assert text_array(pa.array(["some text", ""]), source="f", column="text") == ["some text", ""]
    bad = [
        (pa.array([17]), r"column 'id': has type int64; a key column holds strings"),
        (pa.array(["a", None]), r"column 'id', row 2: null value"),
        (pa.array(["a", ""]), r"column 'id', row 2: key is empty"),
        (pa.array(["a", "é" * 513]), r"column 'id', row 2: key .* 1026 UTF-8 bytes long"),
        (pa.array([b"a"]), r"column 'id': has type binary"),
    ]
    for column, message in bad:
        with pytest.raises(ColumnError, match=message):
            key_array(column, source="f.parquet", column="id")
    with pytest.raises(ColumnError, match=r"column 'text', row 1: null"):
        text_array(pa.array([None], pa.string()), source="f.parquet", column="text")
    with pytest.raises(ColumnError, match=r"column 'text': has type int64; a text column"):
        text_array(pa.array([1]), source="f.parquet", column="text")
