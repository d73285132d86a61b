"""The hint of a JSONL line without the text's (or the key's) field, for ``ingest``, ``import``
and ``dedup``: the reader's error names the fields it looked for; this adds the fields the line
has, read again from the file on disk, and the option that names another (``--text-field
body``)."""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Final

from permindex.errors import InvalidArgumentError
from permindex.index.hamming import parse_fingerprint
from permindex.text.documents import MalformedInputError

__all__ = ["with_field_hint"]

#: The most bytes read again to find the line (a line far into a huge file goes without its
#: fields: the hint still names the option).
_MAX_BYTES_READ: Final = 64 * 1024 * 1024
_GZIP_MAGIC: Final = b"\x1f\x8b"


def with_field_hint(
    error: MalformedInputError, *, id_field: str, text_field: str, fingerprint_field: str
) -> MalformedInputError:
    """``error`` with a hint appended when its line has neither ``text_field`` nor
    ``fingerprint_field``: the line's fields and the option to name the right one
    (``(its fields: id, body, url); name the text's field with --text-field body``). The
    guess is the field of the longest string other than the key's; a field that holds only a
    fingerprint (16 hex digits, a number) is named for ``--fingerprint-field``; with no guess
    (or a line that cannot be read again, as from standard input) both options are named. Any
    A line without ``id_field`` gets its fields and ``name the key's field with --id-field
    NAME``. Any other error is returned as it is; the hinted one keeps its class, path and
    line."""
    message = str(error).removeprefix(f"{error.path}, line {error.line}: ")
    no_key = message == f'no "{id_field}"'
    if not no_key and not message.startswith(f'neither "{text_field}" nor "{fingerprint_field}"'):
        return error
    fields = _line_fields(error.path, error.line)
    shown = "" if fields is None else f" (its fields: {', '.join(fields)})"
    if no_key:
        hint = "name the key's field with --id-field NAME"
        return MalformedInputError(f"{message}{shown}; {hint}", error.path, error.line)
    texts: dict[str, str] = {}
    fingerprints: list[str] = []
    for name, value in (fields or {}).items():
        if name == id_field:
            continue
        try:
            parse_fingerprint(value)
            fingerprints.append(name)
        except InvalidArgumentError:
            if isinstance(value, str):
                texts[name] = value
    if texts:
        guess = max(texts, key=lambda name: len(texts[name]))
        hint = f"name the text's field with --text-field {guess}"
    elif fingerprints:
        hint = f"name the fingerprint's field with --fingerprint-field {fingerprints[0]}"
    else:
        hint = "name the text's field with --text-field NAME or a fingerprint's with "
        hint += "--fingerprint-field NAME"
    return MalformedInputError(f"{message}{shown}; {hint}", error.path, error.line, error.value)


def _line_fields(path: str, line: int) -> dict[str, object] | None:
    """The JSON object of line ``line`` (1-based) of the JSONL file ``path`` (gzip or not), or
    None: not a file (standard input), not within the first 64 MiB, not an object."""
    file = Path(path)
    found: bytes | None = None
    try:
        if not file.is_file():
            return None
        with open(file, "rb") as raw:
            gzipped = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            stream: Iterable[bytes] = gzip.GzipFile(fileobj=raw) if gzipped else raw
            read = 0
            for number, text in enumerate(stream, start=1):
                if number == line:
                    found = text
                    break
                read += len(text)
                if read > _MAX_BYTES_READ:
                    break
    except (OSError, EOFError):  # gzip.BadGzipFile is an OSError
        return None
    if found is None:
        return None
    try:
        obj = json.loads(found.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None
