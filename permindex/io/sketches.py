"""Reading a Jaccard collection's export back (``permindex import``): JSONL lines
``{"id": KEY, "shingle_hashes": HEX}`` (a ``verify="exact"`` collection: 16 hex digits per
shingle hash) or ``{"id": KEY, "signature": HEX}`` (``verify="signature"``: 8 per signature
value), and Parquet files with the columns ``id`` and one of ``shingle_hashes`` and
``signature`` (string columns): each ``HEX`` the sketch the server stored, big-endian, as the
Export RPC carries it (``ExportEntry.sketch_hex``), under the name of what it holds (the names
of :class:`~permindex.MinHashSketch`'s fields), so that an import knows which it is. An
optional ``added_at`` field (column) is read as ingest reads it.

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
from permindex.index.jaccard.sketch import SKETCH_KINDS, SketchKind
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

__all__ = ["SKETCH_FIELDS", "SketchDocument", "open_export"]

#: The fields (Parquet columns) of a Jaccard collection's export that hold each key's sketch:
#: the shingle hashes of a ``verify="exact"`` collection, the signature of a ``"signature"`` one.
SKETCH_FIELDS: Final[tuple[SketchKind, ...]] = SKETCH_KINDS
_NEEDLES: Final = tuple(b'"' + field.encode() + b'"' for field in SKETCH_FIELDS)
#: Whole values in hex: a shingle hash is 16 digits, a signature value 8.
_SKETCH_HEX: Final = {
    "shingle_hashes": re.compile("(?:[0-9a-fA-F]{16})+"),
    "signature": re.compile("(?:[0-9a-fA-F]{8})+"),
}
_SKETCH_BATCH_ROWS: Final = 4096


@dataclass(frozen=True, slots=True)
class SketchDocument(Document):
    """A document of a Jaccard collection's export: its key, its sketch in hex (``sketch``:
    whole values, 16 hex digits each for ``kind`` ``"shingle_hashes"``, 8 for ``"signature"``;
    the server checks it against the collection) and its crawl time.

    >>> from permindex.io.sketches import SketchDocument
    >>> SketchDocument("a", sketch="00000000000000ff", kind="shingle_hashes").size_bytes()
    33
    """

    sketch: str | None = None
    kind: SketchKind = "shingle_hashes"

    def size_bytes(self) -> int:
        """Approximate size in a request message, bytes (key and sketch, a little framing)."""
        return len(self.key.encode("utf-8")) + 16 + len(self.sketch or "")


def _sketch_value(value: object, kind: str) -> str:
    """``value`` if it is ``kind`` (a field of :data:`SKETCH_FIELDS`) in hex, whole values (16
    hex digits each for shingle hashes, 8 for a signature), else InvalidArgumentError."""
    if not isinstance(value, str) or not _SKETCH_HEX[kind].fullmatch(value):
        shown = json.dumps(value)[:40] if not isinstance(value, bytes) else repr(value)[:40]
        digits = 16 if kind == "shingle_hashes" else 8
        raise InvalidArgumentError(
            f'"{kind}" must be hex, {digits} hex digits a value, at least one (a Jaccard '
            f"collection's export), not {shown}",
            value,
        )
    return value


class _SketchJsonlReader(DocumentReader):
    """:class:`~permindex.text.documents.DocumentReader` (JSONL, gzip or not, ``-``, a folder)
    that also reads ``{"id": KEY, "shingle_hashes": HEX}`` and ``{"id": KEY, "signature":
    HEX}`` lines as :class:`SketchDocument`."""

    def _parse_line(self, line: bytes, number: int) -> Document | None:
        if not any(needle in line for needle in _NEEDLES):  # the ordinary reader's line
            return super()._parse_line(line, number)
        try:
            obj = json.loads(line)
        except (ValueError, RecursionError):  # the ordinary reader says what is wrong
            return super()._parse_line(line, number)
        kinds = [kind for kind in SKETCH_FIELDS if isinstance(obj, dict) and kind in obj]
        if not kinds:
            return super()._parse_line(line, number)

        def bad(message: str, value: object = None) -> MalformedInputError:
            return MalformedInputError(message, self.name, number, value)

        if len(kinds) > 1 or self._text_field in obj or self._fingerprint_field in obj:
            raise bad(
                f'more than one of "{self._text_field}", "{self._fingerprint_field}", '
                f'"shingle_hashes" and "signature": give exactly one'
            )
        kind = kinds[0]
        if self._id_field not in obj:
            raise bad(f'no "{self._id_field}"')
        key = obj[self._id_field]
        if not isinstance(key, str):
            raise bad(f'"{self._id_field}" must be a string (a key), not {json.dumps(key)[:40]}')
        try:
            check_key(key)
            sketch = _sketch_value(obj[kind], kind)
        except InvalidArgumentError as error:
            raise bad(str(error), error.value) from None
        added_at = None
        field = self._added_at_field
        if field is not None and field in obj:
            try:
                added_at = added_at_seconds(obj[field])
            except InvalidArgumentError as error:
                raise bad(str(error).replace("added_at", f'"{field}"', 1), obj[field]) from None
        return SketchDocument(key, added_at=added_at, sketch=sketch, kind=kind)


class _SketchParquetReader(ParquetReader):
    """The rows of Parquet files with the columns ``id`` and ``shingle_hashes`` or
    ``signature`` (a string column of sketches in hex) and optionally ``added_at``, as
    :class:`SketchDocument`; each file checked when its turn comes, every error naming the file,
    the column and the row."""

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
            kinds = [kind for kind in SKETCH_FIELDS if kind in names]
            if self._id_field not in names or len(kinds) != 1:
                raise InvalidArgumentError(
                    f"{name}: the columns are {', '.join(names)}; a Jaccard collection's export "
                    f"has the column {self._id_field!r} and one of 'shingle_hashes' and "
                    "'signature'",
                    value=name,
                )
            kind = kinds[0]
            timed = self._added_at_field is not None and self._added_at_field in names
            read = [self._id_field, kind] + ([str(self._added_at_field)] if timed else [])
            rows = parquet.metadata.num_rows
            first = 1
            try:
                batches = parquet.iter_batches(batch_size=_SKETCH_BATCH_ROWS, columns=read)
                for batch in batches:
                    yield from self._batch_documents(batch, name, first, timed, kind)
                    first += batch.num_rows
                    self._current = (size, rows, first - 1)
            except errors as error:
                raise InvalidArgumentError(
                    f"{name}: cannot read (corrupt?) near row {first}: {_one_line(error)}",
                    value=name,
                ) from None

    def _batch_documents(
        self, batch: Any, name: str, first: int, timed: bool, kind: SketchKind
    ) -> list[SketchDocument]:
        keys = key_array(batch.column(0), source=name, column=self._id_field, first_row=first)
        sketches = text_array(batch.column(1), source=name, column=kind, first_row=first)
        times: list[int | None] = [None] * len(keys)
        if timed:
            column = str(self._added_at_field)
            times = list(added_at_array(batch.column(2), source=name, column=column,
                                        first_row=first))  # fmt: skip
        documents = []
        for row, (key, sketch, added_at) in enumerate(zip(keys, sketches, times, strict=True)):
            try:
                _sketch_value(sketch, kind)
            except InvalidArgumentError as error:
                raise InvalidArgumentError(
                    f"{name}, column {kind!r}, row {first + row}: {error}", sketch
                ) from None
            documents.append(SketchDocument(key, added_at=added_at, sketch=sketch, kind=kind))
        self.stats.documents += len(documents)
        return documents


def _has_sketch_column(source: str | Path) -> bool:
    """Whether the first Parquet file of ``source`` has a ``shingle_hashes`` or ``signature``
    column (a Jaccard collection's export); False when it cannot be read (the reader says
    why)."""
    pq = importlib.import_module("pyarrow.parquet")
    try:
        files = parquet_files(source)
        names = pq.read_schema(files[0]).names if files else []
        return any(kind in names for kind in SKETCH_FIELDS)
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
    JSONL file (gzip or not), ``-`` or a folder, whose ``{"id": KEY, "shingle_hashes": HEX}``
    and ``{"id": KEY, "signature": HEX}`` lines are :class:`SketchDocument`; a Parquet file or
    dataset with one of those columns (its first file's schema says), read as sketches; any
    other input as :func:`~permindex.io.parquet.open_documents` reads it. O(1) until read;
    reading is O(n).

    Raises:
        InvalidArgumentError: no such source; Parquet without pyarrow (``pip install
            '.[parquet]'``). When read: a malformed line or row (its line, or its file, column
            and row, named).

    >>> import json, tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "export.jsonl"
    >>> _ = path.write_text(json.dumps({"id": "a", "shingle_hashes": "00000000000000ff"}) + "\\n")
    >>> [(d.key, d.kind, d.sketch) for d in open_export(path)]
    [('a', 'shingle_hashes', '00000000000000ff')]
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
