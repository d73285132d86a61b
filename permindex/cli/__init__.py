"""The ``permindex`` command: a server (``serve``) and the client commands that talk to it.

Every client command takes ``--address HOST:PORT`` after the subcommand (default
:data:`~permindex.addresses.DEFAULT_ADDRESS`). grpc is imported only inside the commands that talk
to a server, so ``import permindex.cli`` and ``permindex fingerprint`` stay light.

Errors are turned into one line on stderr and an exit code here, in :func:`main`, and nowhere
else: permindex's own exceptions through :func:`permindex.errors.exit_code_for`, gRPC status codes
through the same table (:data:`permindex.errors.ERROR_TABLE`, read from status to exit code), and
an unreachable server (``UNAVAILABLE``, ``DEADLINE_EXCEEDED``) as ``unavailable``. The codes are
listed in ``permindex --help``.

Output formats (stdout, UTF-8, ``\\n`` line ends):

- a fingerprint is always 16 lower-case hex digits, zero-padded (in JSON too, as a string);
- ``query``: ``key<TAB>fingerprint<TAB>distance`` per match, sorted by distance then key;
- ``pairs``: ``key_a<TAB>key_b<TAB>distance`` per pair, ``key_a < key_b``, lines sorted by
  ``(key_a, key_b)`` in code point order (the order of ``sorted()`` on the two keys; for the shared
  corpora it equals ``LC_ALL=C sort``), no header.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from permindex.addresses import DEFAULT_ADDRESS
from permindex.cli.serve import add_serve_command
from permindex.errors import (
    ERROR_TABLE,
    EXIT_CODES,
    InvalidArgumentError,
    NotFoundError,
    exit_code_for,
)
from permindex.text.documents import (
    Document,
    DocumentReader,
    format_fingerprint,
    parse_fingerprint,
    read_documents,
    read_file_text,
    tsv_field,
)

if TYPE_CHECKING:
    import grpc

    from permindex.v1 import index_pb2

__all__ = ["CommandError", "IngestSummary", "build_parser", "ingest", "main"]

_MIB: Final = 1024 * 1024
DEFAULT_BATCH_SIZE: Final = 1000
DEFAULT_BATCH_BYTES: Final = 4 * _MIB
#: Larger documents are skipped by ingest: a request must stay under the server's message limit
#: (64 MiB by default).
DEFAULT_MAX_DOCUMENT_BYTES: Final = 60 * _MIB

#: What each exit code means (keys of permindex.errors.EXIT_CODES), for ``permindex --help``.
_EXIT_CODE_HELP: Final[dict[str, str]] = {
    "ok": "success",
    "error": "an unexpected error (or stdout closed early, e.g. by `head`)",
    "usage": "bad command line",
    "unavailable": "the server cannot be reached, is starting up or shutting down, or cannot\n"
    "     write its data directory (read-only or failing disk: writes refused, lookups go on)",
    "invalid": "invalid input (a malformed JSONL line, fingerprint, key or path),\n"
    "     or a request the server refused as invalid, too large, not permitted (token),\n"
    "     or for lack of disk space",
    "not_found": "a key that is not stored",
    "too_short": "a text with fewer words than a shingle: it has no fingerprint",
    "data": "a corrupt snapshot or log, or a data directory owned by another process\n"
    "     or not writable",
}

#: Words of grpc's own status details when no connection could be made (as opposed to an
#: UNAVAILABLE status sent by the server itself).
_TRANSPORT_FAILURES: Final = (
    "failed to connect",
    "DNS resolution failed",
    "Connection refused",
    "Socket closed",
    "Connection reset",
    "connections to all backends failing",
)

#: Client channel options: the server enforces its own message limit; the client takes any size.
_CHANNEL_OPTIONS: Final = [
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
]


class CommandError(Exception):
    """A command failed in a way the user can act on: ``message`` is printed after
    ``permindex COMMAND:`` and the process exits with ``EXIT_CODES[exit_name]``."""

    def __init__(self, message: str, exit_name: str) -> None:
        super().__init__(message)
        self.exit_code = EXIT_CODES[exit_name]


# --------------------------------------------------------------------------------------------
# Errors and output


def _exit_code_for_status(status_name: str) -> int:
    """Exit code for a gRPC status code name: UNAVAILABLE and DEADLINE_EXCEEDED (no server, or
    one starting or stopping) are ``unavailable``; the rest as ERROR_TABLE maps the error that
    produces that status on the server; anything else ``error``."""
    if status_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        return EXIT_CODES["unavailable"]
    if status_name in ("UNAUTHENTICATED", "PERMISSION_DENIED"):  # a missing or read-only token
        return EXIT_CODES["invalid"]
    for _cls, status, exit_name in ERROR_TABLE:
        if status == status_name:
            return EXIT_CODES[exit_name]
    return EXIT_CODES["error"]


def _rpc_error(error: grpc.RpcError, address: str) -> CommandError:
    """One CommandError for a failed RPC: its status details and mapped exit code."""
    import grpc

    code = error.code() if isinstance(error, grpc.Call) else None
    details = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
    name = code.name if code is not None else "UNKNOWN"
    exit_code = _exit_code_for_status(name)
    if exit_code == EXIT_CODES["unavailable"]:
        if any(sign in details for sign in _TRANSPORT_FAILURES) or name == "DEADLINE_EXCEEDED":
            message = f"cannot reach permindex server at {address}: {details}"
        else:  # the server answered: shutting down, or its data directory cannot be written
            message = f"permindex server at {address} is unavailable: {details}"
    else:
        message = f"{details} ({name})"
    failure = CommandError(message, "error")
    failure.exit_code = exit_code
    return failure


def _out(text: str | Iterable[str]) -> None:
    """Write ``text`` (a string, or lines) to stdout as UTF-8, whatever the locale, in chunks of
    about 1 MiB (one huge write to a pipe closed early can fail without an error)."""
    stream = sys.stdout
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        stream.writelines([text] if isinstance(text, str) else text)
        return
    stream.flush()
    parts = [text] if isinstance(text, str) else text
    chunk: list[str] = []
    size = 0
    for part in parts:
        chunk.append(part)
        size += len(part)
        if size >= _MIB:
            buffer.write("".join(chunk).encode("utf-8"))
            chunk, size = [], 0
    buffer.write("".join(chunk).encode("utf-8"))
    buffer.flush()


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _parse_cli_fingerprint(value: str) -> int:
    """A fingerprint given on the command line: 16 hex digits or ``0x`` hex (as in JSON), or a
    decimal number of any other length."""
    if value.isascii() and value.isdigit() and len(value) != 16:
        return parse_fingerprint(int(value))
    try:
        return parse_fingerprint(value)
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"fingerprint {value!r} is not 16 hex digits, 0x-prefixed hex, or a decimal number",
            value=value,
        ) from None


# --------------------------------------------------------------------------------------------
# gRPC client


@dataclass
class _ClientSecurity:
    """TLS material and token of the client commands (``--tls-ca``, ``--tls-cert``,
    ``--tls-key``, ``--tls-server-name``, ``--token-file`` or ``PERMINDEX_TOKEN``)."""

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    server_name: str | None = None
    token: str | None = None
    #: The collection every request names (``--collection``; "": the default one).
    collection: str = ""


_CLIENT_SECURITY = _ClientSecurity()


def _reset_client_security() -> None:
    global _CLIENT_SECURITY
    _CLIENT_SECURITY = _ClientSecurity()


def _set_client_security(args: argparse.Namespace) -> None:
    """Read the TLS files and the token named on the command line (or PERMINDEX_TOKEN)."""
    global _CLIENT_SECURITY

    def read(path: str | None) -> bytes | None:
        return None if path is None else Path(path).read_bytes()

    token = os.environ.get("PERMINDEX_TOKEN") or None
    if args.token_file is not None:
        lines = Path(args.token_file).read_text(encoding="utf-8").split()
        token = lines[0] if lines else None
        if token is None:
            raise InvalidArgumentError(f"{args.token_file}: no token in the file")
    if args.tls_ca is None and (args.tls_cert or args.tls_key):
        raise InvalidArgumentError("--tls-cert and --tls-key need --tls-ca")
    _CLIENT_SECURITY = _ClientSecurity(
        read(args.tls_ca),
        read(args.tls_cert),
        read(args.tls_key),
        args.tls_server_name,
        token,
        args.collection or "",
    )


def _with_metadata(
    channel: Any, metadata: tuple[tuple[str, str], ...], collection: str = ""
) -> Any:
    """``channel`` with ``metadata`` (the bearer token) added to every call, and ``collection``
    set in every request that has that field and leaves it empty."""
    import grpc

    def named(request: Any) -> Any:
        if collection and "collection" in request.DESCRIPTOR.fields_by_name:
            if not request.collection:
                request.collection = collection
        return request

    def each_named(requests: Any) -> Any:
        return (named(request) for request in requests)

    class MetadataInterceptor(
        grpc.UnaryUnaryClientInterceptor,  # type: ignore[type-arg]
        grpc.UnaryStreamClientInterceptor,  # type: ignore[type-arg]
        grpc.StreamUnaryClientInterceptor,  # type: ignore[type-arg]
        grpc.StreamStreamClientInterceptor,  # type: ignore[type-arg]
    ):
        """Adds fixed metadata (the bearer token) to every call."""

        def __init__(self, metadata: tuple[tuple[str, str], ...]) -> None:
            self._metadata = metadata

        def _details(self, details: Any) -> Any:
            return details._replace(metadata=(*(details.metadata or ()), *self._metadata))

        def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(self._details(details), named(request))

        def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
            return continuation(self._details(details), named(request))

        def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
            return continuation(self._details(details), each_named(requests))

        def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
            return continuation(self._details(details), each_named(requests))

    return grpc.intercept_channel(channel, MetadataInterceptor(metadata))


@contextmanager
def _connect(address: str) -> Iterator[Any]:
    """A PermIndex stub on a channel to ``address``; a failed RPC inside the block becomes a
    CommandError. The stub is typed Any: the generated grpc module has no type stubs."""
    import grpc

    from permindex.v1 import index_pb2_grpc

    channel = open_channel(address, _CLIENT_SECURITY)
    try:
        yield index_pb2_grpc.PermIndexStub(channel)  # type: ignore[no-untyped-call]
    except grpc.RpcError as error:
        raise _rpc_error(error, address) from None
    finally:
        channel.close()


def open_channel(address: str, security: _ClientSecurity) -> Any:
    """A gRPC channel to ``address`` with the TLS material, token and collection of
    ``security`` (what the client options of the command line give; ``permindex bench`` passes
    it to its client processes)."""
    import grpc

    if security.root_certificates is not None:
        credentials = grpc.ssl_channel_credentials(
            root_certificates=security.root_certificates,
            private_key=security.private_key,
            certificate_chain=security.certificate_chain,
        )
        options: list[tuple[str, Any]] = list(_CHANNEL_OPTIONS)
        if security.server_name:
            options.append(("grpc.ssl_target_name_override", security.server_name))
        channel = grpc.secure_channel(address, credentials, options=options)
    else:
        channel = grpc.insecure_channel(address, options=_CHANNEL_OPTIONS)
    if security.token or security.collection:
        metadata = (("authorization", f"Bearer {security.token}"),) if security.token else ()
        channel = _with_metadata(channel, metadata, security.collection)
    return channel


def _pb() -> Any:
    from permindex.v1 import index_pb2

    return index_pb2


# --------------------------------------------------------------------------------------------
# ingest


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
        reasons = ""
        if self.skipped_by_reason:
            reasons = " (" + ", ".join(f"{n} {r}" for r, n in self.skipped_by_reason.items()) + ")"
        return (
            f"{self.documents} documents in {self.seconds:.1f} s: {self.added} added, "
            f"{self.replaced} replaced, {self.too_short} too short, {self.skipped} skipped"
            f"{reasons}"
        )


def _batches(
    documents: Iterable[Document], max_docs: int, max_bytes: int
) -> Iterator[list[Document]]:
    """Consecutive batches of at most ``max_docs`` documents and about ``max_bytes`` bytes (a
    single document larger than that travels alone). When reading fails (a malformed line), the
    documents read before it are still yielded, then the error is raised: everything before the
    bad line gets stored."""
    batch: list[Document] = []
    size = 0
    try:
        for document in documents:
            document_size = document.size_bytes()
            if batch and (len(batch) >= max_docs or size + document_size > max_bytes):
                yield batch
                batch, size = [], 0
            batch.append(document)
            size += document_size
    except Exception as error:
        failure = error
    else:
        if batch:
            yield batch
        return
    if batch:
        yield batch
    raise failure


class _RequestFeed:
    """The request iterator of the Ingest stream, run by grpc on its own thread. An exception
    from the reader (a malformed line) ends the stream cleanly and is kept in ``error`` for the
    calling thread to raise once the batches before it are acknowledged. ``sent`` holds, per
    batch sent and not yet acknowledged, (documents, input position in bytes). Texts of fewer
    than ``min_words`` words are not sent: ``too_short`` counts them."""

    def __init__(
        self,
        reader: DocumentReader,
        max_docs: int,
        max_bytes: int,
        min_words: int = 0,
        max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
    ) -> None:
        self._reader = reader
        self._max_docs = max_docs
        self._max_bytes = max_bytes
        self._min_words = min_words
        self._max_document_bytes = max_document_bytes
        self.error: Exception | None = None
        self.sent: deque[tuple[int, int]] = deque()
        self.too_short = 0
        self.too_large = 0

    def _documents(self) -> Iterator[Document]:
        for document in self._reader:
            text = document.text
            if self._min_words and text is not None and len(text.split()) < self._min_words:
                self.too_short += 1
                continue
            size = document.size_bytes()
            if size > self._max_document_bytes:
                self.too_large += 1
                _err(
                    f"permindex ingest: skipping {document.key!r}: {size} bytes is more than "
                    f"--max-document-bytes {self._max_document_bytes}"
                )
                continue
            yield document

    def __iter__(self) -> Iterator[index_pb2.AddRequest]:
        pb = _pb()
        try:
            for batch in _batches(self._documents(), self._max_docs, self._max_bytes):
                request = pb.AddRequest(
                    documents=[
                        pb.Document(key=d.key, text=d.text)
                        if d.text is not None
                        else pb.Document(key=d.key, fingerprint=d.fingerprint)
                        for d in batch
                    ]
                )
                self.sent.append((len(batch), self._reader.position_bytes()))
                yield request
        except Exception as error:  # raised again by ingest() in the calling thread
            self.error = error


def _stored_before(count: int) -> str:
    """ "1 document before it was stored" / "N documents before it were stored"."""
    if count == 1:
        return "1 document before it was stored"
    return f"{count} documents before it were stored"


def ingest(
    reader: DocumentReader,
    address: str,
    *,
    batch_size: int = DEFAULT_BATCH_SIZE,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    progress: bool = True,
    min_words: int = 0,
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
) -> IngestSummary:
    """Stream the documents of ``reader`` to the server at ``address`` over the Ingest RPC, in
    batches bounded by ``batch_size`` documents and ``batch_bytes`` bytes; a tqdm progress bar on
    stderr when ``progress``. Texts of fewer than ``min_words`` words are counted as too short
    and not sent; documents over ``max_document_bytes`` (key and UTF-8 text, bytes) are skipped,
    named on stderr and counted as "too large". Raises CommandError (an RPC failure), or the
    reader's error (a malformed input line) after the batches before it are acknowledged."""
    from tqdm import tqdm

    started = time.monotonic()
    summary = IngestSummary()
    feed = _RequestFeed(reader, batch_size, batch_bytes, min_words, max_document_bytes)
    by_bytes = reader.size_bytes is not None
    bar = tqdm(
        total=reader.size_bytes,
        unit="B" if by_bytes else " docs",
        unit_scale=by_bytes,
        unit_divisor=1024 if by_bytes else 1000,
        desc="ingest",
        file=sys.stderr,
        disable=not progress,
        leave=False,
    )
    try:
        with _connect(address) as stub:
            for response in stub.Ingest(iter(feed)):
                documents, position = feed.sent.popleft() if feed.sent else (0, 0)
                summary.documents += len(response.results) or documents
                summary.added += response.added
                summary.replaced += response.replaced
                summary.too_short += response.too_short
                bar.update(position - bar.n if by_bytes else len(response.results))
    except CommandError as error:
        if feed.error is None:
            error.args = (f"{error} ({_stored_before(summary.documents)})",)
            raise
    finally:
        bar.close()
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


# --------------------------------------------------------------------------------------------
# Commands


def _cmd_ingest(args: argparse.Namespace) -> int:
    reader = read_documents(args.path)
    progress = not args.no_progress and sys.stderr.isatty()
    summary = ingest(
        reader,
        args.address,
        batch_size=args.batch_size,
        batch_bytes=args.batch_bytes,
        progress=progress,
        min_words=args.min_words,
        max_document_bytes=args.max_document_bytes,
    )
    _err(f"permindex {args.command}: {summary.line()}")
    return EXIT_CODES["ok"]


def _cmd_export(args: argparse.Namespace) -> int:
    pb = _pb()
    count = 0

    def lines(stub: Any) -> Iterator[str]:
        nonlocal count
        for reply in stub.Export(pb.ExportRequest()):
            for entry in reply.entries:
                count += 1
                record = {"id": entry.key, "fingerprint": format_fingerprint(entry.fingerprint)}
                yield json.dumps(record, ensure_ascii=False) + "\n"

    with _connect(args.address) as stub:
        if args.out == "-":
            _out(lines(stub))
        else:  # written beside, then renamed: an interrupted export leaves no half file
            target = Path(args.out)
            partial = target.with_name(target.name + ".partial")
            with open(partial, "w", encoding="utf-8", newline="\n") as file:
                file.writelines(lines(stub))
            partial.replace(target)
    _err(f"permindex export: {count} keys written to {args.out if args.out != '-' else 'stdout'}")
    return EXIT_CODES["ok"]


def _cmd_collections(args: argparse.Namespace) -> int:
    pb = _pb()
    if args.action != "list" and not args.name:
        args.parser.error(f"collections {args.action} needs a NAME")

    def fields(info: Any) -> dict[str, Any]:
        design = info.design
        return {
            "name": info.name,
            "count": info.count,
            "memory_bytes": info.memory_bytes,
            "k": design.k,
            "blocks": design.blocks,
            "leading": design.leading,
            "tables": design.tables,
            "shingle_size": info.shingle_size,
            "min_words": info.min_words,
        }

    with _connect(args.address) as stub:
        if args.action == "list":
            infos = [
                fields(i) for i in stub.ListCollections(pb.ListCollectionsRequest()).collections
            ]
            if args.json:
                _out(json.dumps(infos) + "\n")
            else:
                _out(
                    f"{i['name']}\t{i['count']}\t{i['k']}\t{i['blocks']}/{i['leading']}\n"
                    for i in infos
                )
            return EXIT_CODES["ok"]
        if args.action == "drop":
            reply = stub.DropCollection(pb.DropCollectionRequest(name=args.name))
            _err(f"permindex collections: dropped {args.name} ({reply.count} keys)")
            return EXIT_CODES["ok"]
        if args.action == "create":
            options = pb.CollectionOptions(
                k=args.k,
                blocks=args.blocks,
                leading=args.leading,
                shingle_size=args.shingle_size,
                min_words=args.min_words,
            )
            info = fields(
                stub.CreateCollection(pb.CreateCollectionRequest(name=args.name, options=options))
            )
        else:
            info = fields(stub.DescribeCollection(pb.DescribeCollectionRequest(name=args.name)))
    _out(json.dumps(info) + "\n" if args.json else "".join(f"{k}\t{v}\n" for k, v in info.items()))
    return EXIT_CODES["ok"]


def _cmd_import(args: argparse.Namespace) -> int:
    args.min_words = 0
    args.max_document_bytes = DEFAULT_MAX_DOCUMENT_BYTES
    return _cmd_ingest(args)


def _cmd_query(args: argparse.Namespace) -> int:
    from permindex.text.fingerprint import simhash

    pb = _pb()
    own_key: str | None = None
    if args.text is not None:
        fingerprint = simhash(args.text, shingle_size=args.shingle_size)
        if fingerprint is None:
            raise CommandError(
                f"the text has fewer than {args.shingle_size} words: it has no fingerprint",
                "too_short",
            )
    elif args.fingerprint is not None:
        fingerprint = _parse_cli_fingerprint(args.fingerprint)
    else:
        fingerprint = None
        own_key = args.key
    limit = args.limit or 0
    with _connect(args.address) as stub:
        if own_key is not None:
            result = stub.Get(pb.GetRequest(keys=[own_key])).results[0]
            if not result.found:
                raise NotFoundError(f"key {own_key!r} is not stored", key=own_key)
            fingerprint = result.fingerprint
        request = pb.QueryRequest(fingerprints=[fingerprint])
        if args.k is not None:
            request.k = args.k
        if limit:
            # One more, in case the key's own entry is among the nearest and is left out.
            request.limit = limit + 1 if own_key is not None else limit
        matches = list(stub.Query(request).results[0].matches)
    matches = [m for m in matches if m.key != own_key]
    if limit:
        matches = matches[:limit]
    if args.json:
        rows = [
            {"key": m.key, "fingerprint": format_fingerprint(m.fingerprint), "distance": m.distance}
            for m in matches
        ]
        _out(json.dumps(rows, ensure_ascii=False) + "\n")
    else:
        _out(
            f"{tsv_field(m.key)}\t{format_fingerprint(m.fingerprint)}\t{m.distance}\n"
            for m in matches
        )
    return EXIT_CODES["ok"]


def _cmd_fingerprint(args: argparse.Namespace) -> int:
    from permindex.text.fingerprint import simhash

    if (args.text is None) == (args.file is None):
        args.parser.error("give exactly one of TEXT, --file PATH or - (standard input)")
    if args.file is not None:
        text = read_file_text(args.file)
        source = args.file
    elif args.text == "-":
        try:
            text = sys.stdin.buffer.read().decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise CommandError(f"standard input is not valid UTF-8: {error}", "invalid") from None
        source = "standard input"
    else:
        text = args.text
        source = "the text"
    fingerprint = simhash(text, shingle_size=args.shingle_size, bits=args.bits)
    if fingerprint is None:
        raise CommandError(
            f"{source} has fewer than {args.shingle_size} words: it has no fingerprint",
            "too_short",
        )
    _out(format_fingerprint(fingerprint) + "\n")
    return EXIT_CODES["ok"]


def _cmd_pairs(args: argparse.Namespace) -> int:
    pb = _pb()
    request = pb.PairsRequest()
    if args.k is not None:
        request.k = args.k
    pairs: list[tuple[str, str, int]] = []
    with _connect(args.address) as stub:
        for response in stub.Pairs(request):
            for pair in response.pairs:
                a, b = pair.key_a, pair.key_b
                pairs.append((a, b, pair.distance) if a < b else (b, a, pair.distance))
    pairs.sort()
    _out(f"{tsv_field(a)}\t{tsv_field(b)}\t{d}\n" for a, b, d in pairs)
    return EXIT_CODES["ok"]


def _cmd_get(args: argparse.Namespace) -> int:
    pb = _pb()
    with _connect(args.address) as stub:
        results = stub.Get(pb.GetRequest(keys=args.keys)).results
    _out(
        "".join(
            f"{tsv_field(r.key)}\t{format_fingerprint(r.fingerprint)}\n" for r in results if r.found
        )
    )
    missing = [r.key for r in results if not r.found]
    if missing:
        raise NotFoundError(f"not stored: {', '.join(missing)}", key=missing[0])
    return EXIT_CODES["ok"]


def _cmd_remove(args: argparse.Namespace) -> int:
    pb = _pb()
    with _connect(args.address) as stub:
        response = stub.Remove(pb.RemoveRequest(keys=args.keys))
    _err(f"permindex remove: removed {response.removed} of {len(args.keys)} keys")
    if response.not_found:
        missing = list(response.not_found)
        raise NotFoundError(f"not stored: {', '.join(missing)}", key=missing[0])
    return EXIT_CODES["ok"]


def _cmd_stats(args: argparse.Namespace) -> int:
    pb = _pb()
    with _connect(args.address) as stub:
        stats = stub.Stats(pb.StatsRequest())
    last = (
        stats.last_snapshot_unix_seconds if stats.HasField("last_snapshot_unix_seconds") else None
    )
    fields: dict[str, object] = {
        "count": stats.count,
        "memory_bytes": stats.memory_bytes,
        "resident_memory_bytes": stats.resident_memory_bytes,
        "design": {
            "blocks": stats.design.blocks,
            "leading": stats.design.leading,
            "tables": stats.design.tables,
            "k": stats.design.k,
        },
        "uptime_seconds": stats.uptime_seconds,
        "last_snapshot_unix_seconds": last,
        "last_snapshot_count": stats.last_snapshot_count,
        "last_snapshot_bytes": stats.last_snapshot_bytes,
        "version": stats.version,
    }
    if args.json:
        _out(json.dumps(fields) + "\n")
        return EXIT_CODES["ok"]
    design = stats.design
    when = "never" if last is None else time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(last))
    lines = [
        f"count\t{stats.count}",
        f"memory_bytes\t{stats.memory_bytes}",
        f"resident_memory_bytes\t{stats.resident_memory_bytes}",
        f"design\t{design.blocks} blocks, {design.leading} leading, {design.tables} tables, "
        f"k = {design.k}",
        f"uptime_seconds\t{stats.uptime_seconds:.1f}",
        f"last_snapshot\t{when} ({stats.last_snapshot_count} keys, "
        f"{stats.last_snapshot_bytes} bytes)",
        f"version\t{stats.version}",
    ]
    _out("".join(line + "\n" for line in lines))
    return EXIT_CODES["ok"]


def _cmd_snapshot(args: argparse.Namespace) -> int:
    pb = _pb()
    with _connect(args.address) as stub:
        response = stub.Snapshot(pb.SnapshotRequest())
    _out(
        f"{response.path}\t{response.count} keys\t{response.bytes} bytes\t"
        f"{response.seconds:.3f} s\n"
    )
    return EXIT_CODES["ok"]


# --------------------------------------------------------------------------------------------
# Parser


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _positive(text: str) -> int:
    value = _non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be 1 or more, got 0")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def _bounded(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        value = _non_negative(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {value}")
        return value

    return parse


def _exit_codes_epilog() -> str:
    lines = ["exit codes:"]
    for name, code in sorted(EXIT_CODES.items(), key=lambda item: item[1]):
        lines.append(f"  {code}  {_EXIT_CODE_HELP.get(name, name.replace('_', ' '))}")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``permindex`` (every subcommand)."""
    from permindex import __version__

    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="permindex",
        description="A near-duplicate index server of 64-bit SimHash fingerprints, and its "
        "client.\nStart a server with `permindex serve`; the other commands talk to it\n"
        f"(--address HOST:PORT after the command, default {DEFAULT_ADDRESS}), except\n"
        "`fingerprint`, which needs no server.",
        epilog=_exit_codes_epilog(),
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"permindex {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    client = argparse.ArgumentParser(add_help=False)
    client.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        metavar="HOST:PORT",
        help=f"the server (default {DEFAULT_ADDRESS})",
    )
    client.add_argument(
        "--tls-ca",
        metavar="PEM",
        help="connect with TLS, trusting the server certificates this CA file signed",
    )
    client.add_argument("--tls-cert", metavar="PEM", help="client certificate (mutual TLS)")
    client.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    client.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="check the server certificate against NAME instead of the address's host",
    )
    client.add_argument(
        "--collection",
        metavar="NAME",
        help="the collection the command works on (default: the server's `default`)",
    )
    client.add_argument(
        "--token-file",
        metavar="FILE",
        help="send the token on the first line of FILE as `authorization: Bearer TOKEN`\n"
        "(default: the PERMINDEX_TOKEN environment variable, when set)",
    )

    def command(name: str, help_: str, description: str, *, parents: bool = True) -> Any:
        sub = commands.add_parser(
            name,
            help=help_,
            description=description,
            epilog=_exit_codes_epilog(),
            formatter_class=formatter,
            parents=[client] if parents else [],
        )
        sub.set_defaults(parser=sub)
        return sub

    add_serve_command(command)

    ingest_ = command(
        "ingest",
        "add documents from a JSONL file or a folder",
        "Add (or replace) documents. PATH is one of:\n"
        '  a JSONL file, gzip-compressed or not: {"id": KEY, "text": TEXT} or\n'
        '    {"id": KEY, "fingerprint": FP} a line. An integer id is taken as its decimal\n'
        "    string. FP is a JSON integer (decimal), or a string of 16 hex digits or 0x...\n"
        "    (hex). A malformed line stops the ingest with an error naming its line number;\n"
        "    the batches before it stay stored.\n"
        "  a folder: every regular file below it is a document keyed by its path relative to\n"
        "    the folder (as on disk); .gz files are read decompressed, .html/.htm reduced to\n"
        "    their visible text; symlinks and files that are not UTF-8 text are skipped and\n"
        "    counted.\n"
        "  -: JSONL on standard input.\n"
        "Documents are streamed to the server in batches; a progress bar goes to stderr when it\n"
        "is a terminal, and a summary (added, replaced, too short, skipped, seconds) to stderr.",
    )
    ingest_.add_argument("path", metavar="PATH", help="JSONL file (.gz or not), folder, or -")
    ingest_.add_argument(
        "--batch-size",
        type=_positive,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"most documents per batch (default {DEFAULT_BATCH_SIZE})",
    )
    ingest_.add_argument(
        "--max-document-bytes",
        type=_positive,
        default=DEFAULT_MAX_DOCUMENT_BYTES,
        metavar="N",
        help="skip (name on stderr and count as too large) a document whose key and UTF-8 text\n"
        f"are more than N bytes; keep it under the server's --max-message-mb "
        f"(default {DEFAULT_MAX_DOCUMENT_BYTES}, 60 MiB)",
    )
    ingest_.add_argument(
        "--batch-bytes",
        type=_positive,
        default=DEFAULT_BATCH_BYTES,
        metavar="N",
        help=f"about this many bytes per batch at most; a larger document travels alone "
        f"(default {DEFAULT_BATCH_BYTES}, 4 MiB)",
    )
    ingest_.add_argument(
        "--min-words",
        type=_non_negative,
        default=0,
        metavar="N",
        help="texts of fewer words are too short: not sent, counted in the summary (default 0:\n"
        "the server decides; the article behind SimHash deduplication uses 20)",
    )
    ingest_.add_argument("--no-progress", action="store_true", help="no progress bar")
    ingest_.set_defaults(func=_cmd_ingest)

    query = command(
        "query",
        "find the stored keys near a text, fingerprint or key",
        "Print the stored keys within Hamming distance k, nearest first (then by key), one\n"
        "`key<TAB>fingerprint<TAB>distance` line each (fingerprint: 16 hex digits). --text is\n"
        "fingerprinted here, with the default SimHash; --key looks up the key's fingerprint and\n"
        "leaves the key itself out of the answer.\n"
        "A fingerprint F is hex when it is 16 hex digits or starts with 0x; otherwise decimal.",
    )
    what = query.add_mutually_exclusive_group(required=True)
    what.add_argument("--text", metavar="T", help="a text (at least --shingle-size words)")
    what.add_argument("--fingerprint", metavar="F", help="a fingerprint")
    what.add_argument("--key", metavar="K", help="a stored key")
    query.add_argument(
        "--k", type=_bounded(0, 64), metavar="N", help="largest distance (default: the server's k)"
    )
    query.add_argument(
        "--limit",
        type=_bounded(0, 2**32 - 1),
        metavar="N",
        help="at most N matches, the nearest (default, or 0: all)",
    )
    query.add_argument(
        "--shingle-size",
        type=_positive,
        default=3,
        metavar="N",
        help="words per shingle for --text (default 3; use the server's)",
    )
    query.add_argument(
        "--json",
        action="store_true",
        help='print a JSON array of {"key", "fingerprint" (16 hex digits), "distance"}',
    )
    query.set_defaults(func=_cmd_query)

    fingerprint = command(
        "fingerprint",
        "print the SimHash fingerprint of a text (no server)",
        "Print the SimHash fingerprint of a text as 16 lower-case hex digits. --file reads a\n"
        "file as `ingest` of a folder would (.gz decompressed, HTML reduced to visible text);\n"
        "- reads standard input. A text with fewer words than a shingle has no fingerprint:\n"
        f"nothing is printed and the exit code is {EXIT_CODES['too_short']}.",
        parents=False,
    )
    fingerprint.add_argument("text", nargs="?", metavar="TEXT", help="the text, or - for stdin")
    fingerprint.add_argument("--file", metavar="PATH", help="read the text from a file")
    fingerprint.add_argument(
        "--shingle-size", type=_positive, default=3, metavar="N", help="words per shingle (3)"
    )
    fingerprint.add_argument(
        "--bits",
        type=int,
        choices=(63, 64),
        default=64,
        help="64 (default), or 63: bit 63 left clear, for a signed BIGINT column",
    )
    fingerprint.set_defaults(func=_cmd_fingerprint)

    pairs = command(
        "pairs",
        "list every near-duplicate pair in the server",
        "Print every unordered pair of stored keys within Hamming distance k, one\n"
        "`key_a<TAB>key_b<TAB>distance` line each, key_a < key_b, lines sorted by (key_a,\n"
        "key_b) in code point order, no header.",
    )
    pairs.add_argument(
        "--k", type=_bounded(0, 64), metavar="N", help="largest distance (default: the server's k)"
    )
    pairs.set_defaults(func=_cmd_pairs)

    get = command(
        "get",
        "print the stored fingerprint of keys",
        "Print `key<TAB>fingerprint` for each stored key; keys not stored are named on\n"
        f"stderr (exit code {EXIT_CODES['not_found']}).",
    )
    get.add_argument("keys", nargs="+", metavar="KEY")
    get.set_defaults(func=_cmd_get)

    remove = command(
        "remove",
        "remove keys",
        "Remove keys; keys not stored are named on stderr "
        f"(exit code {EXIT_CODES['not_found']}), the others are removed.",
    )
    remove.add_argument("keys", nargs="+", metavar="KEY")
    remove.set_defaults(func=_cmd_remove)

    stats = command(
        "stats",
        "print the server's counts, memory, design and last snapshot",
        "Print the server's statistics, one `name<TAB>value` line each.",
    )
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(func=_cmd_stats)

    snapshot = command(
        "snapshot",
        "write a snapshot now",
        "Ask the server to write a snapshot now; prints its path, keys, bytes and seconds.",
    )
    snapshot.set_defaults(func=_cmd_snapshot)

    collections = command(
        "collections",
        "list, create, describe or drop collections",
        "Collections are independent indexes in one server, each with its own k, table design,\n"
        "text options, snapshots and log; every other command works on the one of --collection\n"
        "(default: `default`, which always exists).\n"
        "  list                 one `name<TAB>keys<TAB>k<TAB>blocks/leading` line each\n"
        "  create NAME [opts]   an empty collection (options default to the server's own)\n"
        "  describe NAME        its options and counts, `name<TAB>value` lines\n"
        "  drop NAME            its keys, memory and files (`default` cannot be dropped)",
    )
    collections.add_argument("action", choices=("list", "create", "describe", "drop"))
    collections.add_argument("name", nargs="?", metavar="NAME")
    for option, what in (
        ("--k", "largest distance the collection answers, bits"),
        ("--blocks", "table design: blocks of the 64 bits"),
        ("--leading", "table design: leading blocks per table"),
        ("--shingle-size", "words per shingle for texts"),
        ("--min-words", "texts of fewer words are too short"),
    ):
        collections.add_argument(option, type=_non_negative, metavar="N", help=what)
    collections.add_argument("--json", action="store_true", help="print JSON")
    collections.set_defaults(func=_cmd_collections)

    export = command(
        "export",
        "write every stored key and fingerprint as JSONL",
        'Write every stored key as one JSON line, {"id": KEY, "fingerprint": "16 hex digits"},\n'
        "from one consistent copy of the index, in the order the keys were stored: a backup or\n"
        "a migration that `permindex import` (or ingest) loads back.",
    )
    export.add_argument(
        "--out",
        default="-",
        metavar="FILE",
        help="write here (through FILE.partial, renamed when complete); default - (stdout)",
    )
    export.set_defaults(func=_cmd_export)

    import_ = command(
        "import",
        "load a JSONL export (as ingest)",
        "Load a file written by `permindex export` (or any JSONL that ingest reads), streamed in\n"
        "batches; a key already stored gets the file's fingerprint.",
    )
    import_.add_argument("path", metavar="PATH", help="JSONL file (.gz or not), or -")
    import_.add_argument(
        "--batch-size",
        type=_positive,
        default=DEFAULT_BATCH_SIZE,
        metavar="N",
        help=f"most documents per batch (default {DEFAULT_BATCH_SIZE})",
    )
    import_.add_argument(
        "--batch-bytes",
        type=_positive,
        default=DEFAULT_BATCH_BYTES,
        metavar="N",
        help=f"about most bytes per batch (default {DEFAULT_BATCH_BYTES})",
    )
    import_.add_argument("--no-progress", action="store_true", help="no progress bar")
    import_.set_defaults(func=_cmd_import)

    from permindex.cli.near import add_commands  # clusters, flags, dedup

    add_commands(command, _non_negative, _positive)

    from permindex.cli.bench import add_command as add_bench  # load generator

    add_bench(command, _non_negative, _positive)
    return parser


# --------------------------------------------------------------------------------------------
# Entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``permindex`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code.
    Never raises (except SystemExit for --help/--version/usage errors being turned into their
    code) and never prints a traceback unless PERMINDEX_DEBUG is set."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "serve":  # options also from --config FILE and PERMINDEX_* variables
            from permindex.cli.serve import ConfigError, apply_defaults, config_path

            arguments = list(sys.argv[1:] if argv is None else argv)
            try:
                apply_defaults(args.parser, config_path(arguments), os.environ)
            except ConfigError as error:
                _err(f"permindex serve: {error}")
                return EXIT_CODES["usage"]
            args = parser.parse_args(arguments)
    except SystemExit as exit_:  # --help, --version, usage errors (argparse printed them)
        return exit_.code if isinstance(exit_.code, int) else EXIT_CODES["usage"]
    prefix = f"permindex {args.command}"
    try:
        if hasattr(args, "tls_server_name"):  # a client command
            _set_client_security(args)
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except SystemExit as exit_:  # parser.error() inside a command
        return exit_.code if isinstance(exit_.code, int) else EXIT_CODES["usage"]
    except BrokenPipeError:
        # stdout was closed early (`permindex pairs | head`): stop quietly.
        # Point stdout at /dev/null so that the interpreter's final flush does not fail again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # no real file descriptor (captured output)
            pass
        return EXIT_CODES["error"]
    except KeyboardInterrupt:
        _err(f"{prefix}: interrupted")
        return 130
    except CommandError as error:
        _err(f"{prefix}: {error}")
        return error.exit_code
    except Exception as error:
        if os.environ.get("PERMINDEX_DEBUG"):
            raise
        message = str(error) or type(error).__name__
        if exit_code_for(error) == EXIT_CODES["error"]:
            message = f"{type(error).__name__}: {message}"
        _err(f"{prefix}: {message}")
        return exit_code_for(error)
    finally:
        _reset_client_security()  # no option outlives its command (in-process calls)
