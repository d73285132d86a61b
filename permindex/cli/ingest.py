"""``permindex ingest`` and ``permindex import``: documents from a JSONL file, a folder or stdin,
streamed to the server through :meth:`permindex.Client.ingest_batches`.

Where the documents are batched: :meth:`_IngestFeed.batches` drops the texts under
``--min-words`` and the documents over ``--max-document-bytes`` (:meth:`_IngestFeed.documents`),
then cuts the stream with :func:`permindex.client.batching.timed_batches` (``--batch-size``
documents, about ``--batch-bytes`` bytes, :meth:`~permindex.text.documents.Document.size_bytes`
each, or whatever was read when the first document of a batch has waited 1 s: a slow pipe's
documents are sent within a second and its stream never sits idle); the Client sends one Ingest
message per batch, and :func:`ingest` counts each acknowledgement.

An ingest that stops early (Ctrl-C, the server stopping, the connection lost) reports two
counts: the documents the server acknowledged (stored), and those handed to the Client and not
acknowledged (in flight: each of their batches may or may not be stored). Delivery is
at-least-once; running the same ingest again is safe, as adding a key again replaces it.
"""

from __future__ import annotations

import argparse
import functools
import signal
import sys
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final, cast

import numpy as np
from numpy.typing import NDArray

from permindex.cli.args import (
    CommandFactory,
    add_field_arguments,
    min_words_value,
    positive,
    with_field_hint,
)
from permindex.cli.connection import ClientOptions, connect
from permindex.cli.output import (
    CommandError,
    command_error,
    compile_notice,
    counted,
    err,
    nothing_read_warning,
)
from permindex.cli.signals import raise_if_stopped
from permindex.client.batching import (
    DEFAULT_BATCH_BYTES,
    DEFAULT_BATCH_SIZE,
    DEFAULT_FLUSH_SECONDS,
    timed_batches,
)
from permindex.client.results import Content, DocumentLike, IngestResult, SketchHex
from permindex.errors import EXIT_CODES, InvalidArgumentError, ServerError, exit_code_for
from permindex.io.parquet import open_documents
from permindex.io.sketches import SketchDocument, open_export
from permindex.text.documents import (
    Document,
    DocumentReader,
    MalformedInputError,
    ReadProgress,
    read_file_text,
)
from permindex.text.extract import EXTRACTS, MIN_MAIN_WORDS, Extract, check_extract
from permindex.text.fingerprint import VOTES, Vote, simhash_many

__all__ = [
    "DEFAULT_MAX_DOCUMENT_BYTES",
    "IngestSummary",
    "add_import_command",
    "add_ingest_command",
    "ingest",
]

_MIB: Final = 1024 * 1024
#: Larger documents are skipped by ingest (named on stderr, counted as "too large"): the
#: server's default --max-text-bytes (32 MiB), so that one large document is a skip, not a
#: refused batch that ends the ingest; also well under its default message limit (16 MiB).
DEFAULT_MAX_DOCUMENT_BYTES: Final = 32 * _MIB
#: Exit code after Ctrl-C (SIGINT), as shells report it.
EXIT_INTERRUPTED: Final = 128 + signal.SIGINT
#: Status codes after which the server may hold batches it did not acknowledge (a refusal
#: ends the stream after the batches before it, all acknowledged).
_UNCERTAIN: Final = ("UNAVAILABLE", "DEADLINE_EXCEEDED", "CANCELLED", "UNKNOWN", "INTERNAL")
#: Names of a single file that ``ingest`` reads as HTML (as inside a folder), not as JSONL.
_HTML_NAMES: Final = (".html", ".htm", ".html.gz", ".htm.gz")


@dataclass
class IngestSummary:
    """What an ingest did: documents sent and acknowledged, the server's counts, inputs skipped
    by the reader (by reason) and the wall time in seconds."""

    documents: int = 0
    added: int = 0
    replaced: int = 0
    too_short: int = 0
    skipped: int = 0
    skipped_by_reason: dict[str, int] | None = None
    seconds: float = 0.0

    def line(self) -> str:
        """The summary line printed on stderr."""
        reasons = ""
        if self.skipped_by_reason:
            reasons = " (" + ", ".join(f"{n} {r}" for r, n in self.skipped_by_reason.items()) + ")"
        return (
            f"{counted(self.documents, 'document')} in {self.seconds:.1f} s: {self.added} added, "
            f"{self.replaced} replaced, {self.too_short} too short, {self.skipped} skipped"
            f"{reasons}"
        )


class _IngestFeed:
    """The batches of the Ingest stream, read by grpc on its own thread. An exception from the
    reader (a malformed line) ends the batches cleanly and is kept in ``error`` for the calling
    thread to raise once the batches before it are acknowledged. ``sent`` holds, per batch sent
    and not yet acknowledged, the input position in bytes. Texts of fewer than ``min_words``
    words are not sent: ``too_short`` counts them; ``too_large`` counts the documents over
    ``max_document_bytes``."""

    def __init__(
        self,
        reader: DocumentReader,
        max_docs: int,
        max_bytes: int,
        min_words: int = 0,
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
        flush_seconds: float = DEFAULT_FLUSH_SECONDS,
    ) -> None:
        self._reader = reader
        self._flush_seconds = flush_seconds
        self._max_docs = max_docs
        self._max_bytes = max_bytes
        self._min_words = min_words
        self._max_document_bytes = max_document_bytes
        self.error: Exception | None = None
        self.sent: deque[int] = deque()
        self.too_short = 0
        self.too_large = 0
        #: Documents handed to the Client to send (every batch yielded), in all.
        self.handed = 0
        #: ``--vote set``: fingerprints texts here (simhash_many), sent instead of the texts.
        self.fingerprint: Callable[[list[str]], tuple[NDArray[np.uint64], NDArray[np.bool_]]]
        self.fingerprint = _no_fingerprint
        #: ``import``: the collection's method ("simhash" or "minhash"), each document checked
        #: against it (:meth:`_content`); None: not checked (ingest).
        self.method: str | None = None
        #: ``import`` into a Jaccard collection: its verify ("exact" or "signature").
        self.verify = ""
        self.collection = ""

    def documents(self) -> Iterator[Document]:
        """The reader's documents less the too short and the too large ones."""
        for document in self._reader:
            text = document.text
            if self._min_words and text is not None and len(text.split()) < self._min_words:
                self.too_short += 1
                continue
            size = document.size_bytes()
            if size > self._max_document_bytes:
                self.too_large += 1
                err(
                    f"permindex ingest: skipping {document.key!r}: {size} bytes is more than "
                    f"--max-document-bytes {self._max_document_bytes}"
                )
                continue
            yield document

    def batches(self) -> Iterator[list[DocumentLike]]:
        """The batches to send, as ``(key, text or fingerprint, added_at)`` documents."""
        try:
            # each document travels with the input position after it, as the reading runs ahead
            positioned = ((d, self._reader.position_bytes()) for d in self.documents())
            for batch in timed_batches(
                positioned,
                self._max_docs,
                self._max_bytes,
                lambda item: item[0].size_bytes(),
                self._flush_seconds,
            ):
                documents: list[DocumentLike] = [
                    (d.key, self._content(d), d.added_at) for d, _ in batch
                ]
                documents = self._fingerprinted(documents)
                self.sent.append(batch[-1][1])
                self.handed += len(documents)
                yield documents
        except Exception as error:  # raised again by ingest() in the calling thread
            self.error = error

    def _content(self, document: Document) -> Content:
        """What is sent of ``document``: its text, its fingerprint, or an export's sketch (as
        the hex it was exported as, with its kind: the field it was read from; shingle hashes
        sent to a ``verify="signature"`` collection are signed by the server with its
        permutations).

        Raises:
            InvalidArgumentError: with :attr:`method` set (import), a sketch for a SimHash
                collection or a fingerprint for a Jaccard one (the other kind's export), or a
                signature for a ``verify="exact"`` collection.
        """
        if document.text is not None:
            return document.text
        sketch = document.sketch if isinstance(document, SketchDocument) else None
        if sketch is not None and self.method == "minhash" and self.verify == "exact":
            if cast(SketchDocument, document).kind == "signature":
                raise InvalidArgumentError(
                    f"{self._reader.name}: key {document.key!r} has a signature (an export of "
                    f"a --verify signature collection) and collection {self.collection} verifies "
                    "exactly (--verify exact), which needs each document's shingle hashes: "
                    "import it into a collection made with --verify signature and the same "
                    "--permutations",
                    document.key,
                )
        if self.method is not None and (sketch is not None) != (self.method == "minhash"):
            if sketch is not None:
                sent, other, create = "a sketch", "Jaccard", " --method minhash"
                this = "a SimHash collection, which stores fingerprints"
            else:
                sent, other, create = "a fingerprint", "SimHash", ""
                this = "a Jaccard collection (method minhash), which stores sketches"
            raise InvalidArgumentError(
                f"{self._reader.name}: key {document.key!r} has {sent} (an export of a {other} "
                f"collection) and collection {self.collection} is {this}: import it into a "
                f"{other} collection (permindex collections create NAME{create}; "
                "import --collection NAME)",
                document.key,
            )
        if sketch is not None:  # with its kind: shingle hashes a signature collection signs
            return SketchHex(sketch, cast(SketchDocument, document).kind)
        return document.fingerprint or 0

    def _fingerprinted(self, documents: list[DocumentLike]) -> list[DocumentLike]:
        """``documents`` with their texts fingerprinted here when :attr:`fingerprint` is set
        (``--vote set``); a text too short for a fingerprint is counted and not sent."""
        if self.fingerprint is _no_fingerprint:
            return documents
        texts = [(i, d[1]) for i, d in enumerate(documents) if isinstance(d[1], str)]
        fps, valid = self.fingerprint([t for _, t in texts])
        out = list(documents)
        dropped: set[int] = set()
        for (i, _), fp, ok in zip(texts, fps.tolist(), valid.tolist(), strict=True):
            if ok:
                out[i] = (documents[i][0], int(fp))
            else:
                dropped.add(i)
        self.too_short += len(dropped)
        return [d for i, d in enumerate(out) if i not in dropped]


def _no_fingerprint(texts: list[str]) -> tuple[NDArray[np.uint64], NDArray[np.bool_]]:
    raise AssertionError("texts are fingerprinted by the server")  # never called


def _stored_before(count: int) -> str:
    """ "1 document before it was stored" / "N documents before it were stored"."""
    if count == 1:
        return "1 document before it was stored"
    return f"{count} documents before it were stored"


def accounting(acknowledged: int, in_flight: int) -> str:
    """The line of an ingest that stopped early: documents acknowledged (stored) and in flight
    (sent, not acknowledged: may or may not be stored), and that re-running is safe."""
    return (
        f"{acknowledged} documents acknowledged by the server (stored); {in_flight} in flight "
        "(sent, not acknowledged: they may or may not be stored; delivery is at-least-once). "
        "Running the same ingest again is safe: adding a key again replaces it"
    )


class _HtmlFileReader(DocumentReader):
    """One ``.html`` / ``.htm`` file (``.gz`` or not) given as the ingest's PATH: one document
    keyed by the file's name, its text read exactly as a folder's file is
    (:func:`~permindex.text.documents.read_file_text`: decompressed, reduced to visible text).

    Raises (when iterated) InvalidArgumentError: the file is not text or cannot be read."""

    def __init__(self, path: Path, extract: Extract = "visible") -> None:
        super().__init__(path, extract=extract)
        self.kind = "html"
        self._file = path
        self._read = False

    def position_bytes(self) -> int:
        return (self.size_bytes or 0) if self._read else 0

    def __iter__(self) -> Iterator[Document]:
        text = read_file_text(self._file, self.extract)
        self._read = True
        self.stats.documents += 1
        yield Document(self._file.name, text=text)


def _standard_input() -> IO[bytes]:
    """A buffered reader of our own over descriptor 0 when ``sys.stdin`` is it, else
    ``sys.stdin.buffer`` (a replaced ``sys.stdin``, as in tests)."""
    try:
        if sys.stdin.fileno() == 0:
            return open(0, "rb", closefd=False)
    except (AttributeError, OSError, ValueError):  # no descriptor (io.UnsupportedOperation)
        pass
    return sys.stdin.buffer


def open_input(
    path: str,
    *,
    html: bool = True,
    id_field: str = "id",
    text_field: str = "text",
    fingerprint_field: str = "fingerprint",
    extract: Extract = "visible",
    added_at_field: str = "added_at",
) -> DocumentReader:
    """The reader of an ingest's PATH: with ``html``, a single HTML file (by its name:
    ``.html``, ``.htm``, either ``.gz``) is one HTML document as in a folder; anything else is
    :func:`~permindex.io.parquet.open_documents` (Parquet, JSONL, a folder, ``-``), with the
    JSONL fields (Parquet columns) of the key, the text, the fingerprint and the crawl time;
    ``extract``: the text of HTML files, as :func:`~permindex.text.documents.read_documents`
    has it.

    Raises:
        InvalidArgumentError: no such file or folder; Parquet without pyarrow installed.
    """
    fields: dict[str, Any] = {
        "id_field": id_field,
        "text_field": text_field,
        "fingerprint_field": fingerprint_field,
        "added_at_field": added_at_field,
    }
    if path == "-":
        # Standard input through a buffer of our own over descriptor 0, not sys.stdin.buffer:
        # grpc reads it on a daemon thread, and an ingest stopped early (Ctrl-C, the server
        # gone) would otherwise abort at exit ("could not acquire lock for <stdin> at
        # interpreter shutdown") while that thread waits in a read.
        return open_documents(path, stdin=_standard_input(), **fields)
    file = Path(path)
    if html and file.name.lower().endswith(_HTML_NAMES) and file.is_file():
        return _HtmlFileReader(file, extract)
    return open_documents(path, extract=extract, **fields)


def ingest(
    reader: DocumentReader,
    address: str,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    progress: bool = True,
    min_words: int = 0,
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    connection: ClientOptions | None = None,
    command: str = "ingest",
    vote: Vote = "multiset",
    check_method: bool = False,
) -> IngestSummary:
    """Stream the documents of ``reader`` to the server at ``address`` (with the TLS, token and
    collection of ``connection``; default plain) over the Ingest RPC, in batches bounded by
    ``batch_size`` documents and ``batch_bytes`` bytes; a tqdm progress bar on stderr when
    ``progress``. Texts of fewer than ``min_words`` words are counted as too short and not sent;
    documents over ``max_document_bytes`` (key and UTF-8 text, bytes) are skipped, named on
    stderr and counted as "too large". ``vote="set"``: texts are fingerprinted here with each
    distinct shingle voting once (:func:`permindex.text.fingerprint.simhash_many`), with the
    collection's shingle size and min words (DescribeCollection), and the fingerprints sent.
    ``check_method`` (import): the collection's method is asked first (DescribeCollection), and
    a fingerprint for a Jaccard collection or a sketch for a SimHash one (the other kind's
    export) ends the ingest before its batch is sent.

    Raises:
        CommandError: an RPC failure, or the reader's error (a malformed input line, with its
            exit code) after the batches before it are acknowledged, or Ctrl-C (exit code 130).
            Its message says how many documents were stored; when the server stopped, the
            connection was lost or Ctrl-C came (the ingest's ``command`` names the lines), the
            acknowledged and the in-flight counts apart (:func:`accounting`).
    """
    started = time.monotonic()
    summary = IngestSummary()
    feed = _IngestFeed(reader, batch_size, batch_bytes, min_words, max_document_bytes)
    bar = ReadProgress(reader, "ingest", enabled=progress)

    def acknowledged(counts: IngestResult) -> None:
        raise_if_stopped()  # a Ctrl-C whose exception was swallowed on its way up
        position = feed.sent.popleft() if feed.sent else 0
        done = counts.documents - summary.documents
        summary.documents = counts.documents
        summary.added = counts.added
        summary.replaced = counts.replaced
        summary.too_short = counts.too_short
        bar.advance(position, done)

    def stopped(cause: str, exit_code: int) -> CommandError:
        # read once the channel is closed: nothing handed after this was sent
        in_flight = max(0, feed.handed - summary.documents)
        failure = CommandError(
            f"{cause}\npermindex {command}: {accounting(summary.documents, in_flight)}", "error"
        )
        failure.exit_code = exit_code
        return failure

    refused: ServerError | None = None
    try:
        with connect(address, connection) as client:
            if check_method:
                feed.collection = (connection.collection if connection else "") or "default"
                info = client.describe_collection(feed.collection)
                feed.method, feed.verify = info.method, info.verify
            if vote == "set":
                info = client.describe_collection(connection.collection if connection else "")
                feed.fingerprint = functools.partial(
                    simhash_many,
                    shingle_size=info.shingle_size,
                    min_words=info.min_words,
                    vote="set",
                )
            try:
                # a notice if --vote set compiles the kernels here (the first run after an install)
                with compile_notice(command, "fingerprint") if vote == "set" else nullcontext():
                    client.ingest_batches(feed.batches(), progress=acknowledged)
            except ServerError as error:  # handled once the channel is closed
                refused = error
    except KeyboardInterrupt:
        raise stopped("interrupted (Ctrl-C)", EXIT_INTERRUPTED) from None
    finally:
        bar.close()
    if refused is not None and feed.error is None:
        failure = command_error(refused, address)
        never_connected = "failed to connect" in refused.details and not summary.documents
        if refused.code in _UNCERTAIN and never_connected:  # nothing reached any server
            failure.args = (f"{failure}\npermindex {command}: nothing was stored",)
            raise failure from None
        if refused.code in _UNCERTAIN:  # the server may hold batches it did not acknowledge
            raise stopped(str(failure), failure.exit_code) from None
        # refused by the server: the batches before the refused one were acknowledged
        message = f"{failure} ({_stored_before(summary.documents)})"
        if "max_text_bytes" in refused.details:
            message += (
                "; an ingest --max-document-bytes at or under the server's --max-text-bytes "
                "skips such documents instead"
            )
        failure.args = (message,)
        raise failure from None
    if feed.error is not None:
        # The input broke off (a malformed line): the batches before it were acknowledged.
        failure = CommandError(f"{feed.error} ({_stored_before(summary.documents)})", "error")
        failure.exit_code = exit_code_for(feed.error)
        raise failure from feed.error
    summary.documents += feed.too_short
    summary.too_short += feed.too_short
    skipped = dict(reader.stats.skipped_by_reason)
    if feed.too_large:
        skipped["too large"] = feed.too_large
    summary.skipped = sum(skipped.values())
    summary.skipped_by_reason = dict(sorted(skipped.items()))
    summary.seconds = time.monotonic() - started
    return summary


def _cmd_ingest(args: argparse.Namespace) -> int:
    try:  # import has no --extract
        extract = check_extract(getattr(args, "extract", "visible"))
    except InvalidArgumentError as error:
        raise CommandError(f"--extract main: {error}", "usage") from None
    if args.command == "import":  # an export of either kind of collection
        reader = open_export(
            args.path,
            stdin=_standard_input() if args.path == "-" else None,
            id_field=args.id_field,
            text_field=args.text_field,
            fingerprint_field=args.fingerprint_field,
            added_at_field=args.added_at_field,
        )
    else:
        reader = open_input(
            args.path,
            html=True,
            id_field=args.id_field,
            text_field=args.text_field,
            fingerprint_field=args.fingerprint_field,
            extract=extract,
            added_at_field=args.added_at_field,
        )
    progress = not args.no_progress and sys.stderr.isatty()
    try:
        summary = ingest(
            reader,
            args.address,
            batch_size=args.batch_size,
            batch_bytes=args.batch_bytes,
            progress=progress,
            min_words=args.min_words,
            max_document_bytes=args.max_document_bytes,
            connection=args.connection,
            command=args.command,
            vote=getattr(args, "vote", "multiset"),  # import has no --vote
            check_method=args.command == "import",
        )
    except CommandError as failure:
        line = failure.__cause__  # a malformed line ended the input
        if isinstance(line, MalformedInputError):
            hinted = with_field_hint(
                line,
                id_field=args.id_field,
                text_field=args.text_field,
                fingerprint_field=args.fingerprint_field,
            )
            failure.args = (str(failure).replace(str(line), str(hinted), 1),)
        raise
    err(f"permindex {args.command}: {summary.line()}")
    warning = nothing_read_warning(
        args.command,
        args.path,
        documents=summary.documents,
        too_short=summary.too_short,
        skipped=summary.skipped,
        kept=summary.added + summary.replaced,
        verb="stored",
    )
    if warning is not None:
        err(warning)
    return EXIT_CODES["ok"]


def _cmd_import(args: argparse.Namespace) -> int:
    args.min_words = 0
    args.max_document_bytes = DEFAULT_MAX_DOCUMENT_BYTES
    return _cmd_ingest(args)


def add_ingest_command(command: CommandFactory) -> None:
    """Register ``permindex ingest``."""
    ingest_ = command(
        "ingest",
        "add documents from a JSONL file, a folder or Parquet",
        "Add (or replace) documents. PATH is one of:\n"
        '  a JSONL file, gzip-compressed or not: {"id": KEY, "text": TEXT} or\n'
        '    {"id": KEY, "fingerprint": FP} a line. KEY is a JSON string (a number is\n'
        "    refused). FP is a JSON integer (its value), or a string in hex: exactly 16 hex\n"
        "    digits, or 0x and 1 to 16 hex digits. A malformed line stops the ingest with an\n"
        "    error naming its line number; the batches before it stay stored.\n"
        "  a folder: every regular file below it is a document keyed by its path relative to\n"
        "    the folder (as on disk); .gz files are read decompressed, .html/.htm reduced to\n"
        "    their visible text; symlinks and files that are not UTF-8 text are skipped and\n"
        "    counted.\n"
        "  a single .html or .htm file (.gz or not): one document keyed by the file's name,\n"
        "    reduced to its visible text as in a folder.\n"
        "  a .parquet file, or a folder whose first file is one (a dataset: every file below\n"
        "    it .parquet, read in path order; names beginning with . or _ passed over): the\n"
        "    columns id and text, or id and fingerprint (uint64; int64, two's complement, as\n"
        "    Spark and BigQuery store it; or hex strings as in JSONL). Needs pyarrow:\n"
        "    pip install '.[parquet]'. A bad file, column or value stops the ingest\n"
        "    with an error naming the file, the column and the row.\n"
        "  -: JSONL on standard input.\n"
        'An optional "added_at" field (column) is when the document was crawled, Unix seconds\n'
        "(a number >= 0, floored; 0: the server's clock; in Parquet also a timestamp column):\n"
        "in a collection with --expire-after, the entry expires that long after it (an import\n"
        "of an earlier crawl); null, a string or a negative number stops the ingest with an\n"
        "error naming the line (row).\n"
        "--id-field, --text-field, --fingerprint-field and --added-at-field rename the fields\n"
        "(columns).\n"
        "Documents are streamed to the server in batches; a progress bar goes to stderr when it\n"
        "is a terminal, and a summary (added, replaced, too short, skipped, seconds) to stderr.\n"
        "Stopped early (Ctrl-C: exit 130; the server stopping or the connection lost: exit 3),\n"
        "it prints the documents the server acknowledged (stored) and those in flight (sent,\n"
        "not acknowledged: they may or may not be stored). Delivery is at-least-once: running\n"
        "the same ingest again is safe, as adding a key again replaces it.",
    )
    ingest_.add_argument(
        "path",
        metavar="PATH",
        help="JSONL file (.gz or not), folder, Parquet file or dataset, or -",
    )
    add_field_arguments(ingest_, added_at=True)
    ingest_.add_argument(
        "--batch-size",
        type=positive,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"most documents per batch (default {DEFAULT_BATCH_SIZE})",
    )
    ingest_.add_argument(
        "--max-document-bytes",
        type=positive,
        default=DEFAULT_MAX_DOCUMENT_BYTES,
        metavar="N",
        help="skip (name on stderr and count as too large) a document whose key and UTF-8 text\n"
        "are more than N bytes; keep it at or under the server's --max-text-bytes (a longer\n"
        "text is refused with its whole batch, which ends the ingest) and its --max-message-mb\n"
        f"(default {DEFAULT_MAX_DOCUMENT_BYTES}, 32 MiB: the server's default --max-text-bytes)",
    )
    ingest_.add_argument(
        "--batch-bytes",
        type=positive,
        default=DEFAULT_BATCH_BYTES,
        metavar="N",
        help=f"about this many bytes per batch at most; a larger document travels alone "
        f"(default {DEFAULT_BATCH_BYTES}, 4 MiB)",
    )
    ingest_.add_argument(
        "--min-words",
        type=min_words_value,
        default=0,
        metavar="N",
        help="texts of fewer words are too short: not sent, counted in the summary (default 0:\n"
        "the server decides; the article behind SimHash deduplication uses 20)",
    )
    ingest_.add_argument(
        "--extract",
        choices=EXTRACTS,
        default="visible",
        help="the text of an HTML file: visible (default: all its visible text) or main\n"
        "(boilerplate removed by trafilatura, pip install '.[extract]'; the visible\n"
        f"text when the main text has fewer than {MIN_MAIN_WORDS} words)",
    )
    ingest_.add_argument(
        "--vote",
        choices=VOTES,
        default="multiset",
        help="multiset (default): texts are sent and the server fingerprints them (with the\n"
        "collection's vote: `collections create --vote`); set: each\n"
        "distinct shingle votes once, texts fingerprinted here with the collection's shingle\n"
        "size and min words, fingerprints sent",
    )
    ingest_.add_argument("--no-progress", action="store_true", help="no progress bar")
    ingest_.set_defaults(func=_cmd_ingest)


def add_import_command(command: CommandFactory) -> None:
    """Register ``permindex import``."""
    import_ = command(
        "import",
        "load a JSONL or Parquet export (as ingest)",
        "Load a file written by `permindex export` (or any JSONL or Parquet that ingest reads:\n"
        "a .parquet file or dataset folder, columns id and fingerprint), streamed in batches; a\n"
        "key already stored gets the file's fingerprint. The added_at an export writes (a\n"
        "collection with expiry) is read back: each entry keeps its age and expires on time.\n"
        'The export of a Jaccard collection, {"id": KEY, "shingle_hashes": HEX} or\n'
        '{"id": KEY, "signature": HEX} lines (Parquet: a string column of that name), goes\n'
        "into a Jaccard collection (collections create NAME --method minhash), each sketch\n"
        "restored exactly: shingle hashes into one with --verify exact (into --verify\n"
        "signature they become its signatures), a signature into one with --verify signature\n"
        "and the same --permutations. A sketch for a SimHash collection, a fingerprint for a\n"
        "Jaccard one (the other kind's export), a signature for --verify exact: refused\n"
        "before anything is sent (exit 4).",
    )
    import_.add_argument(
        "path", metavar="PATH", help="JSONL file (.gz or not), Parquet file or dataset, or -"
    )
    add_field_arguments(import_, added_at=True)
    import_.add_argument(
        "--batch-size",
        type=positive,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"most documents per batch (default {DEFAULT_BATCH_SIZE})",
    )
    import_.add_argument(
        "--batch-bytes",
        type=positive,
        default=DEFAULT_BATCH_BYTES,
        metavar="N",
        help=f"at most about this many bytes per batch (default {DEFAULT_BATCH_BYTES})",
    )
    import_.add_argument("--no-progress", action="store_true", help="no progress bar")
    import_.set_defaults(func=_cmd_import)
