"""Reading inputs into documents, ``(key, text)`` or ``(key, fingerprint)``: JSONL (gzip or not,
or standard input) and folders (:func:`read_documents`, whose docstring gives the formats), the
text of an HTML file (visible text: :func:`permindex.text.html.html_to_text`, re-exported here),
fingerprints as the outputs write them, the TSV field escape, and the readers' wording of the
key rule (:func:`check_key`). Importing it does
not import grpc; lxml is imported on the first HTML file.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final, NamedTuple

from permindex.errors import InvalidArgumentError, InvalidKeyError
from permindex.index.expiry import added_at_seconds
from permindex.index.hamming import parse_fingerprint, validate_fingerprint
from permindex.index.keys.rule import MAX_KEY_BYTES, validate_key
from permindex.text import gzip_stream
from permindex.text.extract import Extract
from permindex.text.html import html_page_text, html_to_text  # re-exported
from permindex.text.inflated_blocks import InflatedBlocks, SharedBlock, reads, whole_lines

__all__ = [
    "Document",
    "DocumentColumns",
    "DocumentReader",
    "JsonlParser",
    "MalformedInputError",
    "ReadProgress",
    "ReadStats",
    "check_key",
    "folder_file_text",
    "format_fingerprint",
    "html_page_text",
    "html_to_text",
    "read_documents",
    "read_file_text",
]

_GZIP_MAGIC: Final = b"\x1f\x8b"
_HTML_SUFFIXES: Final = (".html", ".htm")


class MalformedInputError(InvalidArgumentError):
    """A line of a JSONL input is malformed (bad JSON, no ``id``, neither or both of ``text`` and
    ``fingerprint``, a bad fingerprint or key). ``path`` and ``line`` (1-based) say where."""

    def __init__(self, message: str, path: str, line: int, value: object = None) -> None:
        super().__init__(f"{path}, line {line}: {message}", value=value)
        self.path = path
        self.line = line


@dataclass(frozen=True, slots=True)
class Document:
    """One input document: its key and either its text or its fingerprint (exactly one is set),
    and when it was crawled (``added_at``, Unix seconds; None: not given)."""

    key: str
    text: str | None = None
    fingerprint: int | None = None
    added_at: int | None = None

    def size_bytes(self) -> int:
        """Approximate size of the document in a request message, bytes (UTF-8 key and text,
        plus a little framing)."""
        size = len(self.key.encode("utf-8")) + 16
        if self.text is not None:
            # len(str) undercounts non-ASCII text; the exact figure is cheap next to the RPC.
            size += len(self.text.encode("utf-8", "surrogatepass"))
        return size


@dataclass(slots=True)
class ReadStats:
    """What a reader has done so far: documents yielded and inputs skipped, by reason."""

    documents: int = 0
    skipped_by_reason: Counter[str] = field(default_factory=Counter)

    @property
    def skipped(self) -> int:
        """Inputs (folder entries) skipped, all reasons together."""
        return sum(self.skipped_by_reason.values())

    def skip(self, reason: str) -> None:
        self.skipped_by_reason[reason] += 1


#: A UTF-16 surrogate code point: a JSON \\ud800-style escape can produce one alone, and no
#: UTF-8 text (nor a protobuf string) can hold it.
_SURROGATE: Final = re.compile("[\ud800-\udfff]")


def _loads_line_stdlib(line: bytes) -> Any:
    return json.loads(line.decode("utf-8"))


_loads_line: Callable[[bytes], Any]
try:  # orjson: the faster parser (benchmarks/README.md has the A/B); strict RFC 8259 and UTF-8
    from orjson import loads as _loads_line
except ImportError:  # not installed: the standard library's parser
    _loads_line = _loads_line_stdlib
_TSV_ESCAPES: Final = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})


def tsv_field(text: str) -> str:
    r"""``text`` as one field of our tab-separated outputs: backslash, TAB, LF and CR written as
    ``\\``, ``\t``, ``\n`` and ``\r`` (PostgreSQL's COPY text rule), so a key holding them
    cannot split a line or a column. Keys without them (URLs, paths) are printed unchanged."""
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        return text.translate(_TSV_ESCAPES)
    return text


def format_fingerprint(fingerprint: int) -> str:
    """A fingerprint as every permindex output writes it: 16 lower-case hex digits,
    zero-padded (``format_fingerprint(0x7b) == "000000000000007b"``), which
    :func:`~permindex.index.hamming.parse_fingerprint` reads back.

    Raises:
        TypeError: not an integer (a bool, float, str...).
        InvalidArgumentError: outside [0, 2^64).

    Examples:
        >>> import permindex
        >>> permindex.format_fingerprint(0x7B)
        '000000000000007b'
        >>> permindex.parse_fingerprint(permindex.format_fingerprint(2**64 - 1)) == 2**64 - 1
        True
    """
    return f"{validate_fingerprint(fingerprint):016x}"


def check_key(key: str) -> None:
    """Check ``key`` as the server would: the key rule of
    :func:`permindex.index.keys.rule.validate_key` (non-empty, at most
    :data:`~permindex.index.keys.rule.MAX_KEY_BYTES` UTF-8 bytes), with this reader's wording.

    Raises:
        InvalidKeyError: (an :class:`~permindex.errors.InvalidArgumentError`) an empty key, one
            that is not valid Unicode text (a lone surrogate) or one that is too long.
    """
    try:
        validate_key(key)
    except InvalidKeyError as error:
        if error.reason == "empty":
            message = "key is empty"
        elif error.reason == "encoding":
            message = f"key {key!r} is not valid Unicode text"
        else:
            message = (
                f"key {key[:40]!r}... is {error.size} UTF-8 bytes long; the limit is {error.limit}"
            )
        raise InvalidKeyError(message, key, error.reason, error.size, error.limit) from None


def _decode_text(data: bytes) -> str | None:
    """``data`` as UTF-8 text (a leading byte-order mark dropped), or None when it is not text:
    it contains a NUL byte or is not valid UTF-8."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        return None


class _SkippedFile(Exception):
    """A folder entry that is not a document; ``reason`` is how it is counted."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def _file_text(path: Path, extract: Extract = "visible") -> str:
    """The text of one file as a folder document, or _SkippedFile. HTML: its visible text, or
    with ``extract="main"`` its main content (:func:`permindex.text.extract.main_text`; the
    visible text when that is too short)."""
    try:
        data = path.read_bytes()
    except OSError as error:
        raise _SkippedFile("unreadable", f"cannot read: {error.strerror or error}") from None
    name = path.name
    if name.endswith(".gz"):
        try:
            data = gzip_stream.decompress(data)
        except gzip_stream.errors() as error:
            raise _SkippedFile("not text", f"not a valid gzip file ({error})") from None
        name = name[:-3]
    text = _decode_text(data)
    if text is None:
        raise _SkippedFile("not text", "not text (contains a NUL byte or is not valid UTF-8)")
    if name.lower().endswith(_HTML_SUFFIXES):
        try:
            text = html_page_text(text, extract)
        except InvalidArgumentError as error:
            raise _SkippedFile("unparseable HTML", str(error)) from None
    return text


def folder_file_text(path: Path, extract: Extract = "visible") -> tuple[str | None, str | None]:
    """The text of one file as a folder document carries it, as ``(text, None)``, or ``(None,
    reason)`` when it is skipped (the reason it is counted under in :class:`ReadStats`).
    ``extract``: as :func:`read_documents`."""
    try:
        return _file_text(path, extract), None
    except _SkippedFile as skipped:
        return None, skipped.reason


def read_file_text(path: str | Path, extract: Extract = "visible") -> str:
    """The text of one file exactly as a folder document carries it (``.gz`` decompressed, HTML
    reduced to visible text, or its main content with ``extract="main"``). Raises
    :class:`~permindex.errors.InvalidArgumentError` when it is not text or cannot be read.

    Examples:
        >>> import pathlib, tempfile, permindex
        >>> page = pathlib.Path(tempfile.mkdtemp()) / "page.html"
        >>> _ = page.write_text("<html><body><h1>Tides</h1><p>Twice a <b>day</b>.</p></body>")
        >>> import permindex
        >>> permindex.read_file_text(page)
        'Tides\\nTwice a day.'
    """
    try:
        return _file_text(Path(path), extract)
    except _SkippedFile as skipped:
        raise InvalidArgumentError(f"{path}: {skipped}", value=str(path)) from None


def _valid_key(key: str) -> bool:
    """Whether ``key`` passes the key rule (:func:`validate_key`; O(1) for an ASCII key)."""
    try:
        validate_key(key)
    except InvalidKeyError:
        return False
    return True


class DocumentColumns(NamedTuple):
    """Documents as three lists of one length: ``keys``, ``texts`` (None where the input gave
    a fingerprint) and ``fingerprints`` (None where it gave a text); no crawl times (what
    ``dedup`` reads)."""

    keys: list[str]
    texts: list[str | None]
    fingerprints: list[int | None]

    def documents(self, added_at: list[int] | None = None) -> list[Document]:
        """The same as :class:`Document` objects, with the crawl times ``added_at`` (Unix
        seconds, one per document) when given."""
        times: Iterable[int | None] = added_at if added_at is not None else [None] * len(self.keys)
        return [
            Document(k, text=t, fingerprint=f, added_at=a)
            for k, t, f, a in zip(self.keys, self.texts, self.fingerprints, times, strict=True)
        ]


@dataclass(frozen=True)
class JsonlParser:
    """The parser of one JSONL input's lines (picklable, so that worker processes parse):
    ``name`` (the input's name in messages), ``id_field``, ``text_field``,
    ``fingerprint_field`` and ``added_at_field`` (that of the crawl time, read when named: None,
    the default, reads no time, as ``dedup``)."""

    name: str
    id_field: str = "id"
    text_field: str = "text"
    fingerprint_field: str = "fingerprint"
    added_at_field: str | None = None

    def columns(self, lines: Iterable[bytes], first: int) -> DocumentColumns:
        """The documents of consecutive ``lines`` (the first being line ``first``, 1-based),
        blank lines skipped, as columns: those of :meth:`parse_line`, one line at a time, with
        a shortcut for a plain line (an object with a string key within the key rule, a string
        text that is ASCII or holds no lone surrogate, and no fingerprint or added_at field): the
        same document by fewer checks, and no :class:`Document` object made. The shortcut parses
        with orjson where it is installed (strict JSON and UTF-8: a line it refuses, such as one
        with NaN or a lone surrogate, takes :meth:`parse_line`'s standard-library path, so the
        documents and errors are the same either way). The crawl times (with an
        ``added_at_field``) are checked, not kept.

        Raises:
            MalformedInputError: the first malformed line (see :meth:`parse_line`).
        """
        keys: list[str] = []
        texts: list[str | None] = []
        fingerprints: list[int | None] = []
        id_field, text_field, fp_field = self.id_field, self.text_field, self.fingerprint_field
        at_field = self.added_at_field
        loads = _loads_line
        for number, line in enumerate(lines, start=first):
            try:
                obj = loads(line)
            except (ValueError, RecursionError):
                obj = None
            if (
                type(obj) is dict
                and fp_field not in obj
                and (at_field is None or at_field not in obj)
            ):
                key = obj.get(id_field)
                text = obj.get(text_field)
                if (
                    type(key) is str
                    and type(text) is str
                    and _valid_key(key)
                    and (text.isascii() or _SURROGATE.search(text) is None)
                ):
                    keys.append(key)
                    texts.append(text)
                    fingerprints.append(None)
                    continue
            document = self.parse_line(line, number)
            if document is not None:
                keys.append(document.key)
                texts.append(document.text)
                fingerprints.append(document.fingerprint)
        return DocumentColumns(keys, texts, fingerprints)

    def block_columns(self, block: bytes | SharedBlock, first: int) -> DocumentColumns:
        """:meth:`columns` of the lines of ``block`` (as :meth:`DocumentReader.text_blocks`
        gives them: whole lines, the first being line ``first``; a SharedBlock is read first).

        Raises:
            MalformedInputError: the first malformed line.
            OSError: a SharedBlock's ring file is gone.
        """
        if isinstance(block, SharedBlock):
            block = block.read()
        lines = block.split(b"\n")
        if block.endswith(b"\n"):
            lines.pop()  # what follows the last newline is not a line
        return self.columns(lines, first)

    def parse_line(self, line: bytes, number: int) -> Document | None:
        """The document of one line (line ``number``, 1-based), or None for a blank line.

        Raises:
            MalformedInputError: the line is not UTF-8, not a JSON object, has no key or a bad
                one, neither or both of the text and ``fingerprint``, a text that is not a
                string or holds a lone surrogate, a bad fingerprint, or an ``added_at`` that is
                not a number >= 0 (:func:`~permindex.index.expiry.added_at_seconds`).
        """

        def bad(message: str, value: object = None) -> MalformedInputError:
            return MalformedInputError(message, self.name, number, value)

        try:
            text_line = line.decode("utf-8")
        except UnicodeDecodeError as error:
            raise bad(f"not valid UTF-8 ({error.reason} at byte {error.start})") from None
        if not text_line.strip():
            return None
        try:
            obj = json.loads(text_line)
        except ValueError as error:
            raise bad(f"bad JSON: {error}") from None
        except RecursionError:  # arrays or objects nested thousands deep
            raise bad("bad JSON: nested too deeply (no document nests that far)") from None
        if not isinstance(obj, dict):
            raise bad(f"expected a JSON object, got {type(obj).__name__}")
        id_field, text_field, fp_field = self.id_field, self.text_field, self.fingerprint_field
        if id_field not in obj:
            raise bad(f'no "{id_field}"')
        key = obj[id_field]
        if not isinstance(key, str):
            shown = json.dumps(key)[:40]
            hint = f' (write "{key}")' if isinstance(key, int) and not isinstance(key, bool) else ""
            raise bad(f'"{id_field}" must be a string (a key), not {shown}{hint}', key)
        try:
            check_key(key)
        except InvalidArgumentError as error:
            raise bad(f'"{id_field}": {error}', key) from None
        has_text, has_fp = text_field in obj, fp_field in obj
        if has_text == has_fp:
            which = f'both "{text_field}" and' if has_text else f'neither "{text_field}" nor'
            raise bad(f'{which} "{fp_field}": give exactly one')
        if has_text:
            text = obj[text_field]
            if not isinstance(text, str):
                raise bad(f'"{text_field}" must be a string, not {json.dumps(text)[:40]}')
            surrogate = _SURROGATE.search(text)
            if surrogate is not None:
                raise bad(
                    f'"{text_field}" holds a lone surrogate \\u{ord(surrogate.group()):04x} at '
                    f"character {surrogate.start()}: not Unicode text (a bad \\u escape?)"
                )
        added_at = None
        if self.added_at_field is not None and self.added_at_field in obj:
            try:
                added_at = added_at_seconds(obj[self.added_at_field])
            except InvalidArgumentError as error:
                message = str(error).replace("added_at", f'"{self.added_at_field}"', 1)
                raise bad(message, obj[self.added_at_field]) from None
        if has_text:
            return Document(key, text=text, added_at=added_at)
        try:
            fingerprint = parse_fingerprint(obj[fp_field])
        except InvalidArgumentError as error:
            raise bad(str(error), obj[fp_field]) from None
        return Document(key, fingerprint=fingerprint, added_at=added_at)


class DocumentReader:
    """An iterable of :class:`Document` from one input, with running :class:`ReadStats`.

    Iterate it once. ``kind`` is ``"jsonl"`` or ``"folder"``; ``size_bytes`` is the input file's
    size on disk where known (a JSONL file), and :meth:`position_bytes` how far into it the reader
    is (compressed bytes for a gzip file), for a progress bar.
    """

    def __init__(
        self,
        source: str | Path,
        *,
        stdin: IO[bytes] | None = None,
        id_field: str = "id",
        text_field: str = "text",
        fingerprint_field: str = "fingerprint",
        extract: Extract = "visible",
        added_at_field: str | None = None,
    ) -> None:
        self.name = str(source)
        self.extract = extract
        self._id_field = id_field
        self._text_field = text_field
        self._fingerprint_field = fingerprint_field
        self._added_at_field = added_at_field
        self.stats = ReadStats()
        self.size_bytes: int | None = None
        self._raw: IO[bytes] | None = None
        self._end: int | None = None
        self._stdin = stdin
        self._parser: JsonlParser | None = None
        self._inflate_elsewhere = False
        self._shared_slots = 0
        self._inflated: InflatedBlocks | None = None  # set while a child process decompresses
        if self.name == "-":
            self.kind = "jsonl"
            self.name = "<stdin>"
            return
        path = Path(source)
        self._path = path
        if path.is_dir():
            self.kind = "folder"
        elif path.is_file():
            self.kind = "jsonl"
            self.size_bytes = path.stat().st_size
        elif path.exists():
            raise InvalidArgumentError(f"{path}: not a regular file or a folder", value=self.name)
        else:
            raise InvalidArgumentError(f"{path}: no such file or folder", value=self.name)

    def position_bytes(self) -> int:
        """Bytes of the input file consumed so far (0 when unknown)."""
        if self._end is not None:
            return self._end
        if self._inflated is not None and self._inflated.position is not None:
            return self._inflated.position
        if self._raw is None:
            return 0
        try:
            return self._raw.tell()
        except (OSError, ValueError):
            return 0

    def __iter__(self) -> Iterator[Document]:
        if self.kind == "folder":
            yield from self._read_folder()
        elif self.name == "<stdin>":
            stream = self._stdin if self._stdin is not None else sys.stdin.buffer
            yield from self._read_jsonl(stream)
        else:
            with open(self._path, "rb") as raw:
                self._raw = raw
                yield from self._read_jsonl(raw)
                self._end = self.size_bytes or 0

    def _read_jsonl(self, raw: IO[bytes]) -> Iterator[Document]:
        head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
        if head == _GZIP_MAGIC:
            stream: Iterable[bytes] = gzip_stream.open_stream(raw)
        else:
            stream = raw
        try:
            for number, line in enumerate(stream, start=1):
                document = self._parse_line(line, number)
                if document is not None:
                    self.stats.documents += 1
                    yield document
        except gzip_stream.errors() as error:  # a truncated or corrupt gzip stream
            raise InvalidArgumentError(f"{self.name}: cannot read: {error}") from None

    def _parse_line(self, line: bytes, number: int) -> Document | None:
        if self._parser is None:
            self._parser = self.parser()
        return self._parser.parse_line(line, number)

    # -- blocks of lines: JSONL read here, parsed elsewhere (permindex dedup's workers) ---------

    def parser(self) -> JsonlParser:
        """What parses this input's lines (:class:`JsonlParser`: picklable, for a worker)."""
        return JsonlParser(
            self.name,
            self._id_field,
            self._text_field,
            self._fingerprint_field,
            self._added_at_field,
        )

    def text_blocks(
        self, max_bytes: int, *, inflate_elsewhere: bool = False, shared_slots: int = 0
    ) -> Iterator[tuple[int, bytes | SharedBlock]]:
        """The lines of a JSONL input, not parsed, in blocks of whole lines of about
        ``max_bytes`` (>= 1; a longer line is a block of its own): (number of the block's first
        line, 1-based; the block's bytes, each line ending with a newline but perhaps the last
        of the input). Parsing each block with :meth:`JsonlParser.block_columns` gives the
        documents and errors of iterating the reader, in order; :attr:`stats` is not updated
        (the caller counts the documents). Each block is one read of the same
        :func:`~permindex.text.gzip_stream.open_stream` (or of the file), cut after its last
        newline; so one difference:
        a truncated or corrupt gzip stream is reported (``cannot read``) before the malformed
        lines of the last block read before it.

        ``inflate_elsewhere``: a gzip file is decompressed and cut by a child process
        (:class:`~permindex.text.inflated_blocks.InflatedBlocks`), so that this process only
        hands the blocks on: the same blocks and errors, for a caller that has other work.
        With ``shared_slots`` > 0 as well, blocks come as
        :class:`~permindex.text.inflated_blocks.SharedBlock` (read in any process of this
        machine, or by :meth:`JsonlParser.block_columns`) where they fit a ring file of that
        many slots; call :meth:`release_block` once per block after it has been read.

        Iterate it once, instead of iterating the reader. O(max_bytes + longest line) memory
        (with ``shared_slots``, a ring file of ``2 * max_bytes`` per slot besides).

        Raises:
            ValueError: the input is a folder (see :meth:`folder_files`).
            InvalidArgumentError: the input cannot be read (a truncated or corrupt gzip stream).
            RuntimeError: ``shared_slots`` blocks were taken and none released.
        """
        if self.kind == "folder":
            raise ValueError("text_blocks reads a JSONL input; a folder is read by folder_files")
        self._inflate_elsewhere = inflate_elsewhere
        self._shared_slots = shared_slots
        if self.name == "<stdin>":
            stream = self._stdin if self._stdin is not None else sys.stdin.buffer
            yield from self._text_blocks(stream, max_bytes)
            return
        with open(self._path, "rb") as raw:
            self._raw = raw
            yield from self._text_blocks(raw, max_bytes)
            self._end = self.size_bytes or 0

    def release_block(self) -> None:
        """After :meth:`text_blocks` with ``shared_slots``: the oldest block handed out has been
        read (its slot of the ring file may be written again). Nothing otherwise."""
        if self._inflated is not None:
            self._inflated.release()

    def close_blocks(self) -> None:
        """After :meth:`text_blocks` with ``shared_slots``: remove the ring file now, whether or
        not every block was released (a caller that stops on an error). Nothing otherwise."""
        if self._inflated is not None:
            self._inflated.close()

    def _text_blocks(
        self, raw: IO[bytes], max_bytes: int
    ) -> Iterator[tuple[int, bytes | SharedBlock]]:
        head = raw.peek(2)[:2] if hasattr(raw, "peek") else b""
        if head == _GZIP_MAGIC and self._inflate_elsewhere and raw is self._raw:
            self._inflated = InflatedBlocks(
                str(self._path), self.name, max_bytes, slots=self._shared_slots
            )
            return iter(self._inflated)
        stream: IO[bytes] = raw
        if head == _GZIP_MAGIC:
            stream = gzip_stream.open_stream(raw)
        return whole_lines(reads(stream, max(1, max_bytes), self.name))

    def _read_folder(self) -> Iterator[Document]:
        for key, path in self.folder_files():
            text, reason = folder_file_text(path, self.extract)
            if text is None:
                self.stats.skip(reason or "not text")
                continue
            self.stats.documents += 1
            yield Document(key, text=text)

    def folder_files(self) -> Iterator[tuple[str, Path]]:
        """For a folder input, ``(key, path)`` of every regular file that can be a document, in
        reading order, without reading it: entries that are not (symlinks, special files,
        names that are not UTF-8 or too long) are counted in ``stats`` as they are met. Read each
        file with :func:`folder_file_text` (in another process if need be), and count a file it
        refuses with ``stats.skip(reason)``. :meth:`__iter__` is this and that together.
        One directory listing open per level of depth; each listing sorted (O(entries log
        entries)).

        Raises:
            InvalidArgumentError: the input is not a folder.
        """
        if self.kind != "folder":
            raise InvalidArgumentError(f"{self.name} is not a folder", value=self.name)
        # Depth first, each folder's entries in code point order of their names, descending into
        # a subfolder where its name comes. A stack of open listings, not recursion.
        listings: list[tuple[Iterator[os.DirEntry[str]], str]] = []
        self._open_listing(self._path, "", listings)
        while listings:
            entries, prefix = listings[-1]
            entry = next(entries, None)
            if entry is None:
                listings.pop()
                continue
            key = prefix + entry.name
            if entry.is_symlink():
                self.stats.skip("symlink")
                continue
            try:
                key.encode("utf-8")
            except UnicodeEncodeError:  # os.fsdecode's surrogate escapes: not UTF-8
                self.stats.skip("name not UTF-8")
                continue
            if entry.is_dir(follow_symlinks=False):
                self._open_listing(Path(entry.path), key + "/", listings)
                continue
            if not entry.is_file(follow_symlinks=False):
                self.stats.skip("not a regular file")
                continue
            if len(key.encode("utf-8")) > MAX_KEY_BYTES:
                self.stats.skip("path too long for a key")
                continue
            yield key, Path(entry.path)

    def _open_listing(
        self, folder: Path, prefix: str, listings: list[tuple[Iterator[os.DirEntry[str]], str]]
    ) -> None:
        try:
            with os.scandir(folder) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError:
            self.stats.skip("unreadable")
            return
        listings.append((iter(entries), prefix))


class ReadProgress:
    """A progress bar on stderr (tqdm, imported when one is made) of how far a
    :class:`DocumentReader`'s input has been read: in bytes where its size is known
    (``size_bytes``), else in documents. Disabled, it draws nothing. Close it when done.

    Examples:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = Path(folder) / "in.jsonl"
        ...     _ = path.write_text('{"id": "a", "text": "one two three"}\\n')
        ...     progress = ReadProgress(DocumentReader(path), "read", enabled=False)
        ...     progress.advance(path.stat().st_size, 1)
        ...     progress.close()
    """

    def __init__(self, reader: DocumentReader, label: str, *, enabled: bool) -> None:
        from tqdm import tqdm

        self._by_bytes = reader.size_bytes is not None
        self._bar = tqdm(
            total=reader.size_bytes,
            unit="B" if self._by_bytes else " docs",
            unit_scale=self._by_bytes,
            unit_divisor=1024 if self._by_bytes else 1000,
            desc=label,
            file=sys.stderr,
            disable=not enabled,
            leave=False,
        )

    def advance(self, position_bytes: int, documents: int) -> None:
        """The input read up to ``position_bytes`` (the reader's
        :meth:`~DocumentReader.position_bytes` then), ``documents`` more documents done."""
        bar = self._bar
        bar.update(position_bytes - bar.n if self._by_bytes else documents)

    def close(self) -> None:
        """Take the bar off the terminal."""
        self._bar.close()


def read_documents(
    source: str | Path,
    *,
    stdin: IO[bytes] | None = None,
    id_field: str = "id",
    text_field: str = "text",
    fingerprint_field: str = "fingerprint",
    extract: Extract = "visible",
    added_at_field: str | None = None,
) -> DocumentReader:
    """A reader of the documents in ``source``: a JSONL file (gzip or not), a folder, or ``"-"``
    for JSONL on ``stdin`` (default: ``sys.stdin.buffer``); ``id_field``, ``text_field``,
    ``fingerprint_field`` and ``added_at_field`` name the JSONL fields of the key, the text, the
    fingerprint and the optional crawl time (None: none read; formats below). Parquet is read
    by :func:`permindex.io.parquet.open_documents`, which calls this for every other source.

    Raises :class:`~permindex.errors.InvalidArgumentError` when ``source`` does not exist or is
    neither a regular file nor a folder. Reading (iterating) raises :class:`MalformedInputError`
    for a malformed JSONL line.

    Three kinds of input, told apart by ``source``:

    JSONL (a file, gzip-compressed or not, or ``-`` for standard input)
        One JSON object a line: ``{"id": KEY, "text": TEXT}`` or ``{"id": KEY, "fingerprint": FP}``.
        ``id`` is a string (a JSON number is refused: ``{"id": 17}`` would hide whether the key
        is ``"17"`` or ``"017"``). Exactly one of ``text`` and ``fingerprint`` is present
        (``null`` counts as present, and is refused). Other fields are ignored; blank lines are
        skipped. A fingerprint follows the one rule of
        :func:`permindex.index.hamming.parse_fingerprint`: a JSON number is its value (0 <= v <
        2^64), a string is hex (exactly 16 hex digits, or ``0x`` and 1 to 16 hex digits).
        With an ``added_at_field`` (``ingest`` and ``import`` name ``added_at``), that optional
        field is when the document was crawled, Unix seconds (a JSON number
        >= 0, a fraction floored; 0: the server's clock), for a collection with expiry; ``null``,
        a string or a negative number is refused (:func:`~permindex.index.expiry.added_at_seconds`).
        Compression is recognised by the gzip magic bytes, not by the name. Any malformed line stops
        the reading with :class:`MalformedInputError`, which names the file and the line number.
        Other schemas: ``id_field``, ``text_field`` and ``fingerprint_field`` name the fields that
        hold the key, the text and the fingerprint (e.g. ``url`` and ``content``).

    A folder
        Every regular file below it, depth first in code point order of the names, is one document
        keyed by its path relative to the folder, ``/``-separated and exactly as on disk
        (``a/b.html.gz`` keeps its ``.gz``). A ``.gz`` file is read decompressed; an ``.html`` or
        ``.htm`` file (also ``.html.gz``) is reduced to its visible text by :func:`html_to_text`
        (``extract="visible"``, the default) or to its main content (``extract="main"``:
        :func:`permindex.text.extract.main_text`, the visible text when that is too short).
        Skipped, and counted in :class:`ReadStats` by reason: symbolic links (to files or folders:
        never followed), entries that are not regular files (sockets, FIFOs, devices), files that
        are not text (a NUL byte, or not valid UTF-8 after decompression, or a ``.gz`` that does not
        decompress), files that cannot be read (permissions), names that are not valid UTF-8 (a key
        is a UTF-8 string) and relative paths longer than a key may be.

    Keys are checked on the client, as the server would check them: non-empty and at most
    :data:`~permindex.index.keys.rule.MAX_KEY_BYTES` UTF-8 bytes.
    """
    return DocumentReader(
        source,
        stdin=stdin,
        id_field=id_field,
        text_field=text_field,
        fingerprint_field=fingerprint_field,
        extract=extract,
        added_at_field=added_at_field,
    )
