"""Arrow columns as permindex values: a fingerprint column as ``(n,) uint64``
(:func:`fingerprint_array`), a key or text column as Python strings (:func:`key_array`,
:func:`text_array`), a crawl-time column as Unix seconds (:func:`added_at_array`), each
refusing what the JSONL reader refuses, with an error that names the file, the column and the
row. pyarrow is imported on first use (:func:`require_pyarrow`).

Rows in messages are counted from 1, as JSONL lines are (``row 1`` is a file's first row);
``first_row`` is the file row of a batch's first value, for a file read in batches.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.expiry import MAX_ADDED_AT
from permindex.index.hamming import FINGERPRINT_RULE, parse_fingerprint
from permindex.index.keys.rule import MAX_KEY_BYTES
from permindex.text.documents import check_key

__all__ = [
    "PARQUET_EXTRA",
    "ColumnError",
    "added_at_array",
    "fingerprint_array",
    "key_array",
    "require_pyarrow",
    "text_array",
]

#: What to install for Parquet, as the messages say it.
PARQUET_EXTRA: Final = "pip install '.[parquet]' in the permindex clone"
#: The one hex rule of :func:`permindex.index.hamming.parse_fingerprint`, as a regular expression.
_HEX_PATTERN: Final = "^(?:[0-9a-fA-F]{16}|0[xX][0-9a-fA-F]{1,16})$"


def _nibble_table() -> NDArray[np.uint64]:
    """The value of each ASCII byte as a hex digit (0 for the others, never looked up: the
    pattern has checked the digits), ``(256,) uint64``."""
    table = np.zeros(256, dtype=np.uint64)
    for digit in "0123456789abcdefABCDEF":
        table[ord(digit)] = int(digit, 16)
    return table


_NIBBLE: Final = _nibble_table()
#: A timestamp column's ticks per second, by its unit.
_TICKS_PER_SECOND: Final = {"s": 1, "ms": 1000, "us": 1_000_000, "ns": 1_000_000_000}
_FINGERPRINT_TYPES: Final = (
    "uint64, int64 (two's complement, as Spark and BigQuery store it), another integer type "
    "holding no negative value, or strings of hex"
)


class ColumnError(InvalidArgumentError):
    """A column of a columnar input (Parquet) is missing, of the wrong type, or holds a bad
    value. ``source`` names the file, ``column`` the column, ``row`` (1-based, None for the
    whole column) the row; the message says all three and the value."""

    def __init__(
        self, message: str, source: str, column: str, row: int | None = None, value: object = None
    ) -> None:
        where = f"{source}, column {column!r}" + (f", row {row}" if row is not None else "")
        super().__init__(f"{where}: {message}", value=value)
        self.source = source
        self.column = column
        self.row = row


def require_pyarrow() -> ModuleType:
    """The ``pyarrow`` module, imported on first call.

    Raises:
        InvalidArgumentError: pyarrow is not installed; the message says to
            ``pip install '.[parquet]'`` (exit code 4, ``invalid``, on the command line).
    """
    try:
        return importlib.import_module("pyarrow")
    except ImportError:
        raise InvalidArgumentError(
            f"reading or writing Parquet needs pyarrow: {PARQUET_EXTRA}"
        ) from None


def _chunks(values: Any) -> list[Any]:
    """``values`` (a pyarrow Array or ChunkedArray, or what ``pyarrow.array`` accepts: a numpy
    array, a pandas Series, a list) as a list of pyarrow Arrays, dictionaries decoded."""
    pa = require_pyarrow()
    if isinstance(values, pa.ChunkedArray):
        chunks = list(values.chunks)
    elif isinstance(values, pa.Array):
        chunks = [values]
    else:
        chunks = [pa.array(values)]
    return [
        chunk.dictionary_decode() if pa.types.is_dictionary(chunk.type) else chunk
        for chunk in chunks
    ]


def _refuse_nulls(chunk: Any, source: str, column: str, first_row: int) -> None:
    if chunk.null_count:
        pc = importlib.import_module("pyarrow.compute")
        row = int(pc.index(pc.is_null(chunk), True).as_py())
        raise ColumnError("null value (every row needs one)", source, column, first_row + row)


def _is_string(pa: ModuleType, kind: Any) -> bool:
    is_view = getattr(pa.types, "is_string_view", None)
    return bool(
        pa.types.is_string(kind)
        or pa.types.is_large_string(kind)
        or (is_view is not None and is_view(kind))
    )


def fingerprint_array(
    values: Any, *, source: str, column: str, first_row: int = 1
) -> NDArray[np.uint64]:
    """The fingerprints of a column as ``(n,) uint64``, by the column's type:

    - ``uint64``: the values as they are;
    - ``int64``: each value's 64 bits, two's complement (``-1`` is ``0xffffffffffffffff``): the
      form Spark and BigQuery store an unsigned 64-bit value in;
    - another integer type (``int8``..``int32``, ``uint8``..``uint32``): the values, which must
      not be negative (a negative narrow integer is no fingerprint's bits);
    - strings (``string``, ``large_string``; dictionary-encoded too): the one hex rule of
      :func:`permindex.index.hamming.parse_fingerprint` (exactly 16 hex digits, or ``0x`` and 1
      to 16), checked and parsed vectorised, exactly.

    ``values`` is a pyarrow Array or ChunkedArray, or anything ``pyarrow.array`` accepts (a
    numpy array, a pandas Series, a list). O(n) time and memory.

    Raises:
        ColumnError: (an :class:`~permindex.errors.InvalidArgumentError`) a null, a negative
            narrow integer, a string breaking the hex rule (the message names the row and the
            value), or another type (float, bool, binary, decimal...: the message names it).
        InvalidArgumentError: pyarrow is not installed.
    """
    pa = require_pyarrow()
    parts: list[NDArray[np.uint64]] = []
    row = first_row
    for chunk in _chunks(values):
        _refuse_nulls(chunk, source, column, row)
        parts.append(_chunk_fingerprints(pa, chunk, source, column, row))
        row += len(chunk)
    if not parts:
        return np.zeros(0, dtype=np.uint64)
    return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _chunk_fingerprints(
    pa: ModuleType, chunk: Any, source: str, column: str, first_row: int
) -> NDArray[np.uint64]:
    kind = chunk.type
    if pa.types.is_uint64(kind) or pa.types.is_int64(kind):
        array = np.asarray(chunk.to_numpy(zero_copy_only=False))
        return array.view(np.uint64) if array.dtype == np.int64 else array.astype(np.uint64)
    if pa.types.is_integer(kind):
        array = np.asarray(chunk.to_numpy(zero_copy_only=False))
        negative = np.flatnonzero(array < 0)
        if negative.size:
            i = int(negative[0])
            raise ColumnError(
                f"fingerprint {int(array[i])} is negative: a fingerprint column of type {kind} "
                "holds non-negative values (only int64 is read as two's complement)",
                source,
                column,
                first_row + i,
                int(array[i]),
            )
        return array.astype(np.uint64)
    if _is_string(pa, kind):
        return _hex_fingerprints(pa, chunk, source, column, first_row)
    raise ColumnError(
        f"has type {kind}; a fingerprint column is {_FINGERPRINT_TYPES}", source, column
    )


def _hex_fingerprints(
    pa: ModuleType, chunk: Any, source: str, column: str, first_row: int
) -> NDArray[np.uint64]:
    """Strings under the hex rule as uint64: checked by one regular expression, then padded to
    16 digits and read 16 bytes a row through a nibble table."""
    pc = importlib.import_module("pyarrow.compute")
    if len(chunk) == 0:
        return np.zeros(0, dtype=np.uint64)
    good = pc.match_substring_regex(chunk, _HEX_PATTERN)
    if not pc.all(good).as_py():
        i = int(pc.index(good, False).as_py())
        value = chunk[i].as_py()
        try:
            parse_fingerprint(value)
            problem = f"fingerprint {value!r} breaks the hex rule: {FINGERPRINT_RULE}"
        except InvalidArgumentError as error:
            problem = str(error)
        raise ColumnError(problem, source, column, first_row + i, value)
    digits = pc.replace_substring_regex(chunk, "^0[xX]", "")
    padded = pc.cast(pc.utf8_lpad(digits, 16, "0"), pa.binary(16))
    data = np.frombuffer(padded.buffers()[1], dtype=np.uint8)
    data = data[padded.offset * 16 : (padded.offset + len(padded)) * 16].reshape(-1, 16)
    nibbles = _NIBBLE[data]
    result = np.zeros(len(padded), dtype=np.uint64)
    for i in range(16):
        result |= nibbles[:, i] << np.uint64(60 - 4 * i)
    return result


def _string_column(
    values: Any, source: str, column: str, first_row: int, what: str
) -> tuple[list[str], list[Any]]:
    """The Python strings of a string column and its chunks (nulls and other types refused)."""
    pa = require_pyarrow()
    strings: list[str] = []
    chunks = _chunks(values)
    row = first_row
    for chunk in chunks:
        if not _is_string(pa, chunk.type):
            raise ColumnError(
                f"has type {chunk.type}; a {what} column holds strings (string or large_string)",
                source,
                column,
            )
        _refuse_nulls(chunk, source, column, row)
        strings.extend(chunk.to_pylist())
        row += len(chunk)
    return strings, chunks


def key_array(values: Any, *, source: str, column: str, first_row: int = 1) -> list[str]:
    """The keys of a column as Python strings, each within the key rule of
    :func:`permindex.text.documents.check_key` (non-empty, at most
    :data:`~permindex.index.keys.rule.MAX_KEY_BYTES` UTF-8 bytes).

    The column is of a string type (``string``, ``large_string``, dictionary-encoded too); an
    integer key column is refused as JSONL refuses a number key (``17`` would hide whether the
    key is ``"17"`` or ``"017"``). ``values`` as for :func:`fingerprint_array`. O(n).

    Raises:
        ColumnError: another type, a null, an empty key or one too long (the row named).
        InvalidArgumentError: pyarrow is not installed.
    """
    keys, chunks = _string_column(values, source, column, first_row, "key")
    pc = importlib.import_module("pyarrow.compute")
    row = first_row
    for chunk in chunks:
        lengths = pc.binary_length(chunk)
        if len(chunk) and (pc.min(lengths).as_py() == 0 or pc.max(lengths).as_py() > MAX_KEY_BYTES):
            bad = pc.or_(pc.equal(lengths, 0), pc.greater(lengths, MAX_KEY_BYTES))
            i = int(pc.index(bad, True).as_py())
            value = chunk[i].as_py()
            try:
                check_key(value)
            except InvalidArgumentError as error:
                raise ColumnError(str(error), source, column, row + i, value) from None
        row += len(chunk)
    return keys


def text_array(values: Any, *, source: str, column: str, first_row: int = 1) -> list[str]:
    """The texts of a column as Python strings: a string column (``string``, ``large_string``,
    dictionary-encoded too) without nulls. ``values`` as for :func:`fingerprint_array`. O(n).

    Raises:
        ColumnError: another type (binary too: a text is Unicode), or a null (the row named).
        InvalidArgumentError: pyarrow is not installed.
    """
    return _string_column(values, source, column, first_row, "text")[0]


def added_at_array(values: Any, *, source: str, column: str, first_row: int = 1) -> list[int]:
    """The crawl times of a column as Unix seconds (Python ints), by the rule of the JSONL
    field (:func:`~permindex.index.expiry.added_at_seconds`), checked vectorised: an integer
    column (any width) of values >= 0, a float column (floored), or a timestamp column (any
    unit or time zone: the instant, floored to whole seconds, not before 1970); 0 means the
    server's clock.
    ``values`` as for :func:`fingerprint_array`. O(n).

    Raises:
        ColumnError: another type (strings, timestamps, bool...: the message names it), a
            null, a negative, non-finite or too large value (the row named).
        InvalidArgumentError: pyarrow is not installed.
    """
    pa = require_pyarrow()
    times: list[int] = []
    row = first_row
    for chunk in _chunks(values):
        kind = chunk.type
        if not (
            pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_timestamp(kind)
        ):
            raise ColumnError(
                f"has type {kind}; an added_at column holds Unix seconds (an integer or float "
                "type) or is a timestamp",
                source,
                column,
            )
        _refuse_nulls(chunk, source, column, row)
        if pa.types.is_timestamp(kind):  # UTC instants in their unit: whole seconds, floored
            ticks = np.asarray(chunk.cast(pa.int64()).to_numpy(zero_copy_only=False))
            array = ticks // _TICKS_PER_SECOND[kind.unit]
        else:
            array = np.asarray(chunk.to_numpy(zero_copy_only=False))
        if array.dtype.kind == "f":
            good = np.isfinite(array) & (array >= 0) & (array < float(MAX_ADDED_AT))
            array = np.floor(np.where(good, array, 0))
        elif array.dtype == np.uint64:
            good = array <= np.uint64(MAX_ADDED_AT)
        else:
            good = array >= 0
        bad = np.flatnonzero(~good)
        if bad.size:
            i = int(bad[0])
            value = chunk[i].as_py()
            rule = "before 1970" if pa.types.is_timestamp(kind) else "not Unix seconds"
            raise ColumnError(
                f"added_at {value!r} is {rule} (a number 0 to 2**63 - 1; 0: the server's clock)",
                source,
                column,
                row + i,
                value,
            )
        times.extend(array.astype(np.int64).tolist())
        row += len(chunk)
    return times
