"""Reading a Jaccard collection's export back (``permindex import``): JSONL lines
``{"id": KEY, "sketch": HEX}`` and Parquet files with the columns ``id`` and ``sketch`` (a
string column), each ``HEX`` the sketch the server stored, in hex, as the Export RPC carries it
(``ExportEntry.sketch_hex``: 16 hex digits per shingle hash of a ``verify="exact"`` collection,
8 per signature value of a ``verify="signature"`` one, big-endian). An optional ``added_at``
field (column) is read as ingest reads it.

The readers here read SimHash exports and texts too (a line or a file without the ``sketch``
field is read exactly as :class:`~permindex.text.documents.DocumentReader` and
:class:`~permindex.io.parquet.ParquetReader` read it): what ``import`` loads into which kind of
collection is the command's to check (:class:`SketchDocument` tells a sketch apart).
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from permindex.errors import InvalidArgumentError
from permindex.index.expiry import added_at_seconds
from permindex.io.arrow import added_at_array, key_array, require_pyarrow, text_array
from permindex.io.parquet import (
    ParquetReader,
    _arrow_errors,
    _check_magic,
    _one_line,
    is_parquet_source,
    parquet_files,
)
from permindex.text.documents import (
    Document,
    DocumentReader,
    MalformedInputError,
    check_key,
)

__all__ = ["SKETCH_FIELD", "SketchDocument", "open_export"]

#: The field (Parquet column) of a Jaccard collection's export that holds each key's sketch.
SKETCH_FIELD: Final = "sketch"
_NEEDLE: Final = b'"' + SKETCH_FIELD.encode() + b'"'
#: Whole 32-bit values in hex (a signature value is 8 digits, a shingle hash 16).
_SKETCH_HEX: Final = re.compile("(?:[0-9a-fA-F]{8})+")
_SKETCH_BATCH_ROWS: Final = 4096


@dataclass(frozen=True, slots=True)
class SketchDocument(Document):
    """A document of a Jaccard collection's export: its key, its sketch in hex (``sketch``,
    whole 32-bit values, 8 hex digits each; the server checks it against the collection) and
    its crawl time.

    >>> from permindex.io.sketches import SketchDocument
    >>> SketchDocument("a", sketch="00000000000000ff").size_bytes()
    33
    """

    sketch: str | None = None

    def size_bytes(self) -> int:
        """Approximate size in a request message, bytes (key and sketch, a little framing)."""
        return len(self.key.encode("utf-8")) + 16 + len(self.sketch or "")


def _sketch_value(value: object) -> str:
    """``value`` if it is a sketch in hex (whole 32-bit values), else InvalidArgumentError."""
    if not isinstance(value, str) or not _SKETCH_HEX.fullmatch(value):
        shown = json.dumps(value)[:40] if not isinstance(value, bytes) else repr(value)[:40]
        raise InvalidArgumentError(
            f'"{SKETCH_FIELD}" must be a sketch in hex (a Jaccard collection\'s export: 8 or 16 '
            f"hex digits a value, at least one), not {shown}",
            value,
        )
    return value


class _SketchJsonlReader(DocumentReader):
    """:class:`~permindex.text.documents.DocumentReader` (JSONL, gzip or not, ``-``, a folder)
    that also reads ``{"id": KEY, "sketch": HEX}`` lines as :class:`SketchDocument`."""

    def _parse_line(self, line: bytes, number: int) -> Document | None:
        if _NEEDLE not in line:  # no sketch: the ordinary reader's line (parsed once)
            return super()._parse_line(line, number)
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # the ordinary reader says what is wrong
            return super()._parse_line(line, number)
        if not isinstance(obj, dict) or SKETCH_FIELD not in obj:
            return super()._parse_line(line, number)

        def bad(message: str, value: object = None) -> MalformedInputError:
            return MalformedInputError(message, self.name, number, value)

        if self._text_field in obj or self._fingerprint_field in obj:
            raise bad(
                f'"{SKETCH_FIELD}" with "{self._text_field}" or "{self._fingerprint_field}": '
                "give exactly one"
            )
        if self._id_field not in obj:
            raise bad(f'no "{self._id_field}"')
        key = obj[self._id_field]
        if not isinstance(key, str):
            raise bad(f'"{self._id_field}" must be a string (a key), not {json.dumps(key)[:40]}')
        try:
            check_key(key)
            sketch = _sketch_value(obj[SKETCH_FIELD])
        except InvalidArgumentError as error:
            raise bad(str(error), error.value) from None
        added_at = None
        field = self._added_at_field
        if field is not None and field in obj:
            try:
                added_at = added_at_seconds(obj[field])
            except InvalidArgumentError as error:
                raise bad(str(error).replace("added_at", f'"{field}"', 1), obj[field]) from None
        return SketchDocument(key, added_at=added_at, sketch=sketch)


class _SketchParquetReader(ParquetReader):
    """The rows of Parquet files with the columns ``id`` and ``sketch`` (a string column of
    sketches in hex) and optionally ``added_at``, as :class:`SketchDocument`; each file checked
    when its turn comes, every error naming the file, the column and the row."""

    def __iter__(self) -> Iterator[Document]:
        for path in self.files:
            size = _check_magic(path)
            yield from self._sketch_rows(path, size)
            self._done_bytes += size
            self._current = (0, 0, 0)

    def _sketch_rows(self, path: Path, size: int) -> Iterator[SketchDocument]:
        name = str(path)
        errors = _arrow_errors(self._pa)
        try:
            parquet = self._pq.ParquetFile(path)
        except errors as error:
            raise InvalidArgumentError(
                f"{name}: not a readable Parquet file: {_one_line(error)}", value=name
            ) from None
        with parquet:
            names = parquet.schema_arrow.names
            for column in (self._id_field, SKETCH_FIELD):
                if column not in names:
                    raise InvalidArgumentError(
                        f"{name}: no column {column!r} (the file has {', '.join(names)}); a "
                        f"Jaccard collection's export has the columns {self._id_field!r} and "
                        f"{SKETCH_FIELD!r}",
                        value=name,
                    )
            timed = self._added_at_field is not None and self._added_at_field in names
            read = [self._id_field, SKETCH_FIELD] + ([str(self._added_at_field)] if timed else [])
            rows = parquet.metadata.num_rows
            first = 1
            try:
                batches = parquet.iter_batches(batch_size=_SKETCH_BATCH_ROWS, columns=read)
                for batch in batches:
                    yield from self._batch_documents(batch, name, first, timed)
                    first += batch.num_rows
                    self._current = (size, rows, first - 1)
            except errors as error:
                raise InvalidArgumentError(
                    f"{name}: cannot read (corrupt?) near row {first}: {_one_line(error)}",
                    value=name,
                ) from None

    def _batch_documents(
        self, batch: Any, name: str, first: int, timed: bool
    ) -> list[SketchDocument]:
        keys = key_array(batch.column(0), source=name, column=self._id_field, first_row=first)
        sketches = text_array(batch.column(1), source=name, column=SKETCH_FIELD, first_row=first)
        times: list[int | None] = [None] * len(keys)
        if timed:
            column = str(self._added_at_field)
            times = list(added_at_array(batch.column(2), source=name, column=column,
                                        first_row=first))  # fmt: skip
        documents = []
        for row, (key, sketch, added_at) in enumerate(zip(keys, sketches, times, strict=True)):
            try:
                _sketch_value(sketch)
            except InvalidArgumentError as error:
                raise InvalidArgumentError(
                    f"{name}, column {SKETCH_FIELD!r}, row {first + row}: {error}", sketch
                ) from None
            documents.append(SketchDocument(key, added_at=added_at, sketch=sketch))
        self.stats.documents += len(documents)
        return documents


def _has_sketch_column(source: str | Path) -> bool:
    """Whether the first Parquet file of ``source`` has a ``sketch`` column (a Jaccard
    collection's export); False when it cannot be read (the reader says why)."""
    pq = importlib.import_module("pyarrow.parquet")
    try:
        files = parquet_files(source)
        return bool(files) and SKETCH_FIELD in pq.read_schema(files[0]).names
    except Exception:  # the reader reports a bad file, with its name
        return False


def open_export(
    source: str | Path,
    *,
    stdin: IO[bytes] | None = None,
    id_field: str = "id",
    text_field: str = "text",
    fingerprint_field: str = "fingerprint",
    added_at_field: str | None = None,
) -> DocumentReader:
    """The reader of an export (``permindex import``'s PATH) of either kind of collection: a
    JSONL file (gzip or not), ``-`` or a folder, whose ``{"id": KEY, "sketch": HEX}`` lines are
    :class:`SketchDocument`; a Parquet file or dataset with a ``sketch`` column (its first
    file's schema says), read as sketches; any other input as
    :func:`~permindex.io.parquet.open_documents` reads it. O(1) until read; reading is O(n).

    Raises:
        InvalidArgumentError: no such source; Parquet without pyarrow (``pip install
            '.[parquet]'``). When read: a malformed line or row (its line, or its file, column
            and row, named).

    >>> import json, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "export.jsonl"
    >>> _ = path.write_text(json.dumps({"id": "a", "sketch": "00000000000000ff"}) + "\\n")
    >>> [(d.key, d.sketch) for d in open_export(path)]
    [('a', '00000000000000ff')]
    """
    fields: dict[str, Any] = {
        "id_field": id_field,
        "text_field": text_field,
        "fingerprint_field": fingerprint_field,
        "added_at_field": added_at_field,
    }
    if source != "-" and is_parquet_source(source):
        require_pyarrow()
        if _has_sketch_column(source):
            return _SketchParquetReader(source, **fields)
        return ParquetReader(source, **fields)
    return _SketchJsonlReader(source, stdin=stdin, **fields)
