"""Parquet files and datasets as document sources (:class:`ParquetReader`, chosen by
:func:`open_documents`) and as outputs (:class:`ParquetTableWriter`). pyarrow is imported on
first use (:func:`permindex.io.arrow.require_pyarrow`).

A Parquet source holds the columns a JSONL line holds: a key column (``id``) and either a text
column (``text``) or a fingerprint column (``fingerprint``), each renamable; the values are read
by :func:`permindex.io.arrow.key_array`, :func:`~permindex.io.arrow.text_array` and
:func:`~permindex.io.arrow.fingerprint_array`, so they follow the same rules (a string key, the
one fingerprint rule; uint64, two's-complement int64 or hex strings), and optionally a crawl
time column (``added_at_field``, :func:`~permindex.io.arrow.added_at_array`; ``ingest`` and
``import`` name ``added_at``, ``dedup`` none). Only those columns are
read, in batches of rows, so memory is bounded by a batch (and a row group's pages).
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import IO, Any, Final

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.io.arrow import (
    ColumnError,
    added_at_array,
    fingerprint_array,
    key_array,
    require_pyarrow,
    text_array,
)
from permindex.text.documents import Document, DocumentColumns, DocumentReader, read_documents
from permindex.text.extract import Extract

__all__ = [
    "FINGERPRINT_TYPES",
    "PARQUET_SUFFIX",
    "ParquetReader",
    "ParquetTableWriter",
    "is_parquet_source",
    "open_documents",
    "parquet_files",
]

PARQUET_SUFFIX: Final = ".parquet"
_MAGIC: Final = b"PAR1"  # the first and the last four bytes of every Parquet file
#: Names that a dataset folder's walk passes over, as pyarrow's datasets and Spark do
#: (``_SUCCESS``, ``_metadata``, ``.part-0.crc``).
_IGNORED_PREFIXES: Final = (".", "_")
#: Rows per batch read: texts are large, fingerprints are 8 bytes.
_TEXT_BATCH_ROWS: Final = 1024
_FINGERPRINT_BATCH_ROWS: Final = 65536
#: Fingerprint column types :class:`ParquetTableWriter` users may ask for (``export``).
FINGERPRINT_TYPES: Final = ("uint64", "int64")


def _walk(folder: Path) -> Iterator[Path]:
    """The files below ``folder``, depth first, each folder's entries in code point order of
    their names; names beginning with ``.`` or ``_`` passed over, symbolic links to folders
    not followed."""
    try:
        with os.scandir(folder) as scan:
            entries = sorted(scan, key=lambda e: e.name)
    except OSError as error:
        raise InvalidArgumentError(
            f"{folder}: cannot list: {error.strerror or error}", value=str(folder)
        ) from None
    for entry in entries:
        if entry.name.startswith(_IGNORED_PREFIXES):
            continue
        if entry.is_dir(follow_symlinks=False):
            yield from _walk(Path(entry.path))
        elif entry.is_file():
            yield Path(entry.path)


def _is_parquet_name(path: Path) -> bool:
    return path.name.lower().endswith(PARQUET_SUFFIX)


def is_parquet_source(source: str | Path) -> bool:
    """Whether ``source`` is read as Parquet: a file whose name ends ``.parquet`` (any case), or
    a folder whose first file in reading order (depth first, names in code point order, names
    beginning with ``.`` or ``_`` passed over) is one; a folder whose first file is anything
    else is a folder of documents (:func:`permindex.text.documents.read_documents`). Reads
    folder listings only up to that first file."""
    if str(source) == "-":
        return False
    path = Path(source)
    if path.is_file():
        return _is_parquet_name(path)
    if path.is_dir():
        try:
            first = next(_walk(path), None)
        except InvalidArgumentError:
            return False
        return first is not None and _is_parquet_name(first)
    return False


def parquet_files(source: str | Path) -> list[Path]:
    """The files of a Parquet source, in reading order: ``[source]`` for a file; for a folder
    (a dataset), every file below it in the order of :func:`is_parquet_source` (so stable
    across runs and machines), names beginning with ``.`` or ``_`` passed over.

    Raises:
        InvalidArgumentError: a dataset holds a file that is not ``.parquet`` (naming it), or
            no file at all, or cannot be listed.
    """
    path = Path(source)
    if not path.is_dir():
        return [path]
    files = list(_walk(path))
    for file in files:
        if not _is_parquet_name(file):
            raise InvalidArgumentError(
                f"{path}: a Parquet dataset holds only .parquet files (and names beginning "
                f"with . or _, passed over), but {file.relative_to(path)} is not one",
                value=str(file),
            )
    if not files:
        raise InvalidArgumentError(f"{path}: no .parquet file in this folder", value=str(path))
    return files


def _check_magic(path: Path) -> int:
    """The size of ``path``, bytes, once its first and last four bytes are Parquet's magic.

    Raises:
        InvalidArgumentError: it cannot be read, or is not (or no longer: truncated) Parquet.
    """
    try:
        with open(path, "rb") as file:
            head = file.read(4)
            size = os.fstat(file.fileno()).st_size
            file.seek(max(0, size - 4))
            tail = file.read(4)
    except OSError as error:
        raise InvalidArgumentError(
            f"{path}: cannot read: {error.strerror or error}", value=str(path)
        ) from None
    if head != _MAGIC:
        raise InvalidArgumentError(
            f"{path}: not a Parquet file (it does not begin with PAR1)", value=str(path)
        )
    if size < 12 or tail != _MAGIC:
        raise InvalidArgumentError(
            f"{path}: not a complete Parquet file (it does not end with PAR1: truncated?)",
            value=str(path),
        )
    return size


def _one_line(error: BaseException) -> str:
    """pyarrow's message of ``error`` on one line (its lines joined by "; ")."""
    lines = [line.strip() for line in str(error).splitlines()]
    return "; ".join(line for line in lines if line) or type(error).__name__


def _arrow_errors(pa: ModuleType) -> tuple[type[BaseException], ...]:
    """What pyarrow raises for a file it cannot decode."""
    return (pa.ArrowException, OSError, ValueError)


class ParquetReader(DocumentReader):
    """The documents of a Parquet file or dataset folder (``kind`` ``"parquet"``), file by file
    in :func:`parquet_files` order, each file's rows in order.

    Each file is checked when its turn comes: its magic bytes, its footer, then its schema (the
    key column and exactly one of the text and fingerprint columns, of the types
    :mod:`permindex.io.arrow` reads); every error names the file (and the column, and the row
    for a bad value, 1-based within the file). ``size_bytes`` is the files' total size and
    :meth:`position_bytes` the bytes of the files read plus the read fraction of the current one
    (by rows), for a progress bar.

    Raises (when constructed) InvalidArgumentError: pyarrow missing, no such source, a dataset
    holding a file that is not ``.parquet``. Raises (when read) InvalidArgumentError and
    :class:`~permindex.io.arrow.ColumnError`: a file that is not Parquet, is truncated or corrupt,
    lacks a column, has one of the wrong type or a bad value.
    """

    def __init__(
        self,
        source: str | Path,
        *,
        id_field: str = "id",
        text_field: str = "text",
        fingerprint_field: str = "fingerprint",
        added_at_field: str | None = None,
    ) -> None:
        super().__init__(
            source,
            id_field=id_field,
            text_field=text_field,
            fingerprint_field=fingerprint_field,
            added_at_field=added_at_field,
        )
        self.kind = "parquet"
        self._pa = require_pyarrow()
        self._pq: ModuleType = importlib.import_module("pyarrow.parquet")
        self.files = parquet_files(source)
        self.size_bytes = 0
        for file in self.files:
            try:
                self.size_bytes += file.stat().st_size
            except OSError:
                pass
        self._done_bytes = 0
        self._current: tuple[int, int, int] = (0, 0, 0)  # size, rows, rows read

    def position_bytes(self) -> int:
        size, rows, read = self._current
        return self._done_bytes + (size * read // rows if rows else 0)

    def __iter__(self) -> Iterator[Document]:
        for columns, times in self._timed_batches():
            documents = columns.documents(times)
            self.stats.documents += len(documents)
            yield from documents

    def column_batches(self) -> Iterator[DocumentColumns]:
        """The documents as :class:`~permindex.text.documents.DocumentColumns`, a batch of rows
        at a time (1024 rows of texts, 65536 of fingerprints), crawl times checked, not kept;
        :attr:`stats` is not updated (the caller counts). Iterate it once, instead of iterating
        the reader.

        Raises: as the class says, when the bad file's turn comes.
        """
        for columns, _ in self._timed_batches():
            yield columns

    def _timed_batches(self) -> Iterator[tuple[DocumentColumns, list[int] | None]]:
        """:meth:`column_batches` with each batch's crawl times (None: no such column)."""
        for path in self.files:
            size = _check_magic(path)
            yield from self._file_batches(path, size)
            self._done_bytes += size
            self._current = (0, 0, 0)

    def _file_batches(
        self, path: Path, size: int
    ) -> Iterator[tuple[DocumentColumns, list[int] | None]]:
        name = str(path)
        errors = _arrow_errors(self._pa)
        try:
            parquet = self._pq.ParquetFile(path)
        except errors as error:
            raise InvalidArgumentError(
                f"{name}: not a readable Parquet file: {_one_line(error)}", value=name
            ) from None
        with parquet:  # closed when the file is read, or the reading stopped
            yield from self._read_file(parquet, name, size)

    def _read_file(
        self, parquet: Any, name: str, size: int
    ) -> Iterator[tuple[DocumentColumns, list[int] | None]]:
        errors = _arrow_errors(self._pa)
        key_column, value_column, is_text = self._columns(name, parquet.schema_arrow)
        times_column = self._added_at_field
        timed = times_column is not None and times_column in parquet.schema_arrow.names
        read = [key_column, value_column] + ([times_column] if times_column and timed else [])
        rows = int(parquet.metadata.num_rows)
        self._current = (size, rows, 0)
        batches = parquet.iter_batches(
            batch_size=_TEXT_BATCH_ROWS if is_text else _FINGERPRINT_BATCH_ROWS,
            columns=read,
            use_threads=False,
        )
        first = 1
        while True:
            try:
                batch = next(batches, None)
            except errors as error:
                raise InvalidArgumentError(
                    f"{name}: cannot read (corrupt?) columns {key_column!r} and "
                    f"{value_column!r} near row {first}: {_one_line(error)}",
                    value=name,
                ) from None
            if batch is None:
                return
            n = batch.num_rows
            keys = key_array(batch.column(0), source=name, column=key_column, first_row=first)
            if is_text:
                texts: list[str | None] = list(
                    text_array(batch.column(1), source=name, column=value_column, first_row=first)
                )
                fingerprints: list[int | None] = [None] * n
            else:
                found = fingerprint_array(
                    batch.column(1), source=name, column=value_column, first_row=first
                )
                texts = [None] * n
                fingerprints = list(found.tolist())
            times = None
            if times_column is not None and timed:
                times = added_at_array(
                    batch.column(2), source=name, column=times_column, first_row=first
                )
            first += n
            self._current = (size, rows, first - 1)
            yield DocumentColumns(keys, texts, fingerprints), times

    def _columns(self, name: str, schema: Any) -> tuple[str, str, bool]:
        """(key column, value column, whether it is the text column) of a file's schema, once
        their types are checked (an empty array of each column's type, read as a batch
        would be)."""
        pa = self._pa
        names = list(schema.names)
        shown = ", ".join(repr(n) for n in names[:12]) + (", ..." if len(names) > 12 else "")
        id_field, text_field = self._id_field, self._text_field
        fp_field = self._fingerprint_field
        if id_field not in names:
            raise ColumnError(
                f"no such column (the file has {shown}); --id-field names the key column",
                name,
                id_field,
            )
        has_text, has_fp = text_field in names, fp_field in names
        if has_text == has_fp:
            which = f"both {text_field!r} and" if has_text else f"neither {text_field!r} nor"
            raise InvalidArgumentError(
                f"{name}: {which} {fp_field!r} columns (the file has {shown}): give exactly one "
                "(--text-field and --fingerprint-field name them)",
                value=name,
            )
        value_field = text_field if has_text else fp_field
        empty = {n: pa.array([], type=schema.field(n).type) for n in (id_field, value_field)}
        key_array(empty[id_field], source=name, column=id_field)
        if has_text:
            text_array(empty[value_field], source=name, column=value_field)
        else:
            fingerprint_array(empty[value_field], source=name, column=value_field)
        if self._added_at_field is not None and self._added_at_field in names:
            column = self._added_at_field
            empty_times = pa.array([], type=schema.field(column).type)
            added_at_array(empty_times, source=name, column=column)
        return id_field, value_field, has_text


def open_documents(
    source: str | Path,
    *,
    stdin: IO[bytes] | None = None,
    id_field: str = "id",
    text_field: str = "text",
    fingerprint_field: str = "fingerprint",
    extract: Extract = "visible",
    added_at_field: str | None = None,
) -> DocumentReader:
    """The reader of ``source``: a :class:`ParquetReader` when :func:`is_parquet_source` says
    so (a ``.parquet`` file, or a folder whose first file is one), else
    :func:`permindex.text.documents.read_documents` (JSONL, a folder of documents, ``-``). The
    field names are the key, text, fingerprint and (optional) crawl time columns (JSONL fields)
    of either; ``extract`` is how the HTML files of a folder become text (Parquet and JSONL
    texts are taken as they are).

    Raises:
        InvalidArgumentError: as the chosen reader's constructor (no such source; for Parquet,
            pyarrow missing: the message says ``pip install '.[parquet]'``).
    """
    if is_parquet_source(source):
        return ParquetReader(
            source,
            id_field=id_field,
            text_field=text_field,
            fingerprint_field=fingerprint_field,
            added_at_field=added_at_field,
        )
    return read_documents(
        source,
        stdin=stdin,
        id_field=id_field,
        text_field=text_field,
        fingerprint_field=fingerprint_field,
        extract=extract,
        added_at_field=added_at_field,
    )


class ParquetTableWriter:
    """A Parquet file written a batch at a time: ``columns`` is ``(name, type)`` pairs, the type
    ``"string"``, ``"int64"``, ``"uint64"`` or ``"float64"``. :meth:`write` takes rows (tuples
    in column order); every ``batch_rows`` of them become a record batch (a row group of the
    file at most).
    Use it as a context manager: leaving the block writes the rest and closes the file (an
    error inside it closes it too, leaving what was written).

    Raises (when constructed) InvalidArgumentError: pyarrow missing. OSError: the file cannot
    be written.
    """

    def __init__(
        self, path: str | Path, columns: Sequence[tuple[str, str]], *, batch_rows: int = 65536
    ) -> None:
        pa = require_pyarrow()
        self._pa = pa
        pq = importlib.import_module("pyarrow.parquet")
        types = {
            "string": pa.string(),
            "int64": pa.int64(),
            "uint64": pa.uint64(),
            "float64": pa.float64(),
        }
        self._schema = pa.schema([(name, types[kind]) for name, kind in columns])
        numeric = {"int64": np.int64, "uint64": np.uint64, "float64": np.float64}
        self._dtypes = [numeric.get(kind) for _, kind in columns]
        self._writer = pq.ParquetWriter(str(path), self._schema)
        self._rows: list[tuple[Any, ...]] = []
        self._batch_rows = max(1, batch_rows)
        self.rows = 0

    def write(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Add ``rows`` (each a tuple with one value per column, in order)."""
        for row in rows:
            self._rows.append(row)
            if len(self._rows) >= self._batch_rows:
                self._flush()

    def write_columns(self, columns: Sequence[Sequence[Any] | NDArray[Any]]) -> None:
        """Add rows given as columns (one sequence, numpy array or Arrow array of the column's
        type per column, in order, all of one length): the rows held by :meth:`write` first,
        then these, in record batches of at most ``batch_rows``. Faster than :meth:`write` for
        many rows (no tuple per row).

        Raises ValueError: the columns are not one per column of the file, or their lengths
        differ."""
        if len(columns) != len(self._schema):
            raise ValueError(f"{len(columns)} columns given for a file of {len(self._schema)}")
        lengths = {len(column) for column in columns}
        if len(lengths) > 1:
            raise ValueError(f"columns of different lengths: {sorted(lengths)}")
        self._flush()
        size = lengths.pop() if lengths else 0
        for start in range(0, size, self._batch_rows):
            end = min(size, start + self._batch_rows)
            arrays = [
                self._array(column[start:end], field, dtype)
                for column, field, dtype in zip(columns, self._schema, self._dtypes, strict=True)
            ]
            self._writer.write_batch(self._pa.record_batch(arrays, schema=self._schema))
            self.rows += end - start

    def _array(self, part: Any, field: Any, dtype: Any) -> Any:
        """One column's rows as an Arrow array: an Arrow array as it is, a numpy array of a
        numeric column's dtype wrapped without a copy, a list of int of an integer column as
        a numpy array, a list of str as UTF-8 bytes and offsets (``pyarrow.array`` imports
        pandas on its first call, about half a second of a report), anything else (None,
        other types) by ``pyarrow.array``."""
        pa = self._pa
        if isinstance(part, pa.Array):
            return part
        if isinstance(part, np.ndarray) and part.ndim == 1 and part.dtype == dtype:
            values = np.ascontiguousarray(part)
            return pa.Array.from_buffers(field.type, values.size, [None, pa.py_buffer(values)])
        if field.type == pa.string() and isinstance(part, list):
            if all(type(item) is str for item in part):
                encoded = [item.encode("utf-8") for item in part]
                offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
                np.cumsum([len(item) for item in encoded], out=offsets[1:])
                if offsets[-1] < 2**31:
                    data = pa.py_buffer(b"".join(encoded))
                    at = pa.py_buffer(offsets.astype(np.int32))
                    return pa.Array.from_buffers(field.type, len(encoded), [None, at, data])
        if dtype is not None and dtype is not np.float64 and isinstance(part, list):
            if all(type(item) is int for item in part):  # out of range: OverflowError
                values = np.array(part, dtype=dtype)
                return pa.Array.from_buffers(field.type, len(part), [None, pa.py_buffer(values)])
        return pa.array(part, type=field.type)

    def _flush(self) -> None:
        if not self._rows:
            return
        values = list(zip(*self._rows, strict=True))
        arrays = [
            self._pa.array(column, type=field.type)
            for column, field in zip(values, self._schema, strict=True)
        ]
        self._writer.write_batch(self._pa.record_batch(arrays, schema=self._schema))
        self.rows += len(self._rows)
        self._rows.clear()

    def close(self) -> None:
        """Write the rows held and the file's footer."""
        try:
            self._flush()
        finally:
            self._writer.close()

    def __enter__(self) -> ParquetTableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
