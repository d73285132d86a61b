"""A Python client of the permindex server: :class:`Client`, one typed method per RPC.

Importing ``permindex`` does not import this module (nor grpc): ``permindex.Client`` loads it on
first use.

- Results are the package's own types (:class:`~permindex.index.Match`, lists, small frozen
  dataclasses), never protobuf messages. Fingerprints are Python ints in [0, 2^64).
- A document's content is an ``int`` (its fingerprint) or a ``str`` (its text, fingerprinted by
  the server).
- :meth:`Client.ingest` streams any iterable of documents in batches bounded by count
  (``batch_size``) and bytes (``batch_bytes``), one message each, and waits for every batch's
  acknowledgement; if the stream fails, the batches acknowledged before stay applied and nothing
  else is (see the .proto).
- Errors are :class:`~permindex.errors.ServerError` instances carrying the gRPC status code
  (``.code``) that also subclass the matching permindex error or built-in (a too-large batch is a
  :class:`~permindex.errors.LimitExceededError`, an unreachable server a ``ConnectionError``...).
- Retries: only calls that change nothing (query, query_columns, get, stats, pairs, clusters, flags,
  exact_duplicates) are retried, and only on UNAVAILABLE, with exponential backoff (``retries``
  attempts after the first, waits of ``backoff`` seconds doubling up to ``max_backoff``). Writes
  are never retried: an UNAVAILABLE write may or may not have been applied.
- TLS: ``root_certificates`` (PEM bytes or a path) turns TLS on; ``certificate_chain`` and
  ``private_key`` add a client certificate. ``token`` is sent as ``authorization: Bearer TOKEN``.

Thread-safe: one Client (one channel) can serve many threads.
"""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

import grpc
import numpy as np
from numpy.typing import NDArray

from permindex.addresses import DEFAULT_ADDRESS
from permindex.errors import InvalidArgumentError, ServerError, server_error
from permindex.index import Match
from permindex.index.clusters import ExactGroup, Flag
from permindex.index.hamming import as_fingerprint_array
from permindex.v1 import index_pb2 as pb
from permindex.v1 import index_pb2_grpc

__all__ = [
    "AddResult",
    "CheckResult",
    "Client",
    "CollectionInfo",
    "ColumnMatches",
    "DocumentResult",
    "IngestResult",
    "RemoveResult",
    "ServerStats",
    "SnapshotResult",
]

_T = TypeVar("_T")

#: Default batching of :meth:`Client.ingest` (and of the batch methods on long inputs).
DEFAULT_BATCH_SIZE: Final = 1000
DEFAULT_BATCH_BYTES: Final = 4 * 1024 * 1024

_STATUS_NAMES: Final = {
    pb.DOCUMENT_STATUS_ADDED: "added",
    pb.DOCUMENT_STATUS_REPLACED: "replaced",
    pb.DOCUMENT_STATUS_TOO_SHORT: "too_short",
    pb.DOCUMENT_STATUS_NEAR_DUPLICATE: "near_duplicate",
}

Content = int | str
DocumentLike = tuple[str, Content]


@dataclass(frozen=True)
class DocumentResult:
    """One document of an add: ``status`` is ``"added"``, ``"replaced"`` or ``"too_short"``;
    ``fingerprint`` the one stored (None when too short)."""

    key: str
    status: str
    fingerprint: int | None


@dataclass(frozen=True)
class AddResult:
    """The reply to :meth:`Client.add`: one result per document, in order, and the counts."""

    results: list[DocumentResult]
    added: int
    replaced: int
    too_short: int


@dataclass(frozen=True)
class IngestResult:
    """The counts of :meth:`Client.ingest` over every acknowledged batch."""

    documents: int
    added: int
    replaced: int
    too_short: int
    batches: int


@dataclass(frozen=True)
class CheckResult:
    """One document of a check-and-add: ``status`` is ``"added"``, ``"replaced"``,
    ``"near_duplicate"`` or ``"too_short"``; ``matches`` the other keys within k at the time of
    the check (the document was stored only if there were none)."""

    key: str
    status: str
    fingerprint: int | None
    matches: list[Match]

    @property
    def added(self) -> bool:
        """Whether the document is now stored."""
        return self.status in ("added", "replaced")


@dataclass(frozen=True, eq=False)
class ColumnMatches:
    """The matches of :meth:`Client.query_columns` as columns: entry j of each describes match j.

    Matches are grouped by query position (ascending), and within one query ordered by
    distance, then key (as :meth:`Client.query_many`).

    Attributes:
        query_positions: (m,) int64, the position in the fingerprints asked of the query each
            match answers; non-decreasing.
        fingerprints: (m,) uint64, each match's stored fingerprint.
        distances: (m,) uint8, each match's Hamming distance to its query, bits.
        keys: m keys (str).
    """

    query_positions: NDArray[np.int64]
    fingerprints: NDArray[np.uint64]
    distances: NDArray[np.uint8]
    keys: list[str]

    def __len__(self) -> int:
        """m, the number of matches."""
        return len(self.keys)

    def to_lists(self, n: int) -> list[list[Match]]:
        """The matches as :meth:`Client.query_many` returns them: one list per query of the
        ``n`` asked, in order.

        Raises:
            InvalidArgumentError: a query position is ``n`` or more.
        """
        if len(self) and int(self.query_positions[-1]) >= n:
            raise InvalidArgumentError(
                f"a match answers query {int(self.query_positions[-1])}; only {n} were asked", n
            )
        found: list[list[Match]] = [[] for _ in range(n)]
        for q, key, fingerprint, distance in zip(
            self.query_positions.tolist(),
            self.keys,
            self.fingerprints.tolist(),
            self.distances.tolist(),
            strict=True,
        ):
            found[q].append(Match(key, fingerprint, distance))
        return found


@dataclass(frozen=True)
class RemoveResult:
    """How many keys were removed, and the keys that were not stored."""

    removed: int
    not_found: list[str]


@dataclass(frozen=True)
class ServerStats:
    """The Stats RPC (units in the .proto): counts, memory, design, uptime, last snapshot."""

    count: int
    memory_bytes: int
    resident_memory_bytes: int
    blocks: int
    leading: int
    tables: int
    k: int
    uptime_seconds: float
    last_snapshot_unix_seconds: float | None
    last_snapshot_count: int
    last_snapshot_bytes: int
    version: str
    collection: str = "default"


@dataclass(frozen=True)
class CollectionInfo:
    """A collection: its name, keys, index memory (bytes), design, k and text options."""

    name: str
    count: int
    memory_bytes: int
    blocks: int
    leading: int
    tables: int
    k: int
    shingle_size: int
    min_words: int


def _collection_info(message: Any) -> CollectionInfo:
    design = message.design
    return CollectionInfo(
        message.name,
        message.count,
        message.memory_bytes,
        design.blocks,
        design.leading,
        design.tables,
        design.k,
        message.shingle_size,
        message.min_words,
    )


@dataclass(frozen=True)
class SnapshotResult:
    """A snapshot written by the server: its path on the server, keys, bytes and seconds."""

    path: str
    count: int
    bytes: int
    seconds: float


def _pem(value: bytes | str | Path | None) -> bytes | None:
    """PEM bytes, or the content of the file a ``str`` / ``Path`` names."""
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


def _document(key: str, content: Content, where: str) -> pb.Document:
    if isinstance(content, bool) or not isinstance(content, int | str):
        raise InvalidArgumentError(
            f"{where}: content of key {key!r} is {type(content).__name__}; give an int "
            "(fingerprint) or a str (text)",
            content,
        )
    if isinstance(content, str):
        return pb.Document(key=key, text=content)
    if not 0 <= content < 1 << 64:
        raise InvalidArgumentError(
            f"{where}: fingerprint {content} of key {key!r} is not in [0, 2**64)", content
        )
    return pb.Document(key=key, fingerprint=content)


def _documents(documents: Iterable[DocumentLike]) -> Iterator[tuple[pb.Document, int]]:
    """(message, approximate size in bytes) per document."""
    for i, (key, content) in enumerate(documents):
        message = _document(key, content, f"documents[{i}]")
        size = len(key) + 16 + (len(content.encode("utf-8")) if isinstance(content, str) else 0)
        yield message, size


def _check_counts(**values: object) -> None:
    """Refuse, before anything is sent, an option the server takes as a uint32 (``k``, ``limit``)
    that is neither None nor an int in [0, 2^32): TypeError for a non-int (bool included),
    :class:`~permindex.errors.InvalidArgumentError` naming it otherwise."""
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int or None, not {type(value).__name__}")
        if not 0 <= int(value) < 1 << 32:
            raise InvalidArgumentError(f"{name} = {value} is outside 0 to 2**32 - 1", value)


def _matches(message: Any) -> list[Match]:
    return [Match(m.key, m.fingerprint, m.distance) for m in message]


class Client:
    """A connection to a permindex server (see the module docstring for errors, retries, TLS).

    Args:
        address: ``HOST:PORT`` of the server.
        timeout: deadline of each call, seconds (None: none); a call past it raises a
            ``TimeoutError`` (DEADLINE_EXCEEDED). Streaming calls get it per call, not per message.
        retries: extra attempts of a read-only call answered UNAVAILABLE.
        backoff: the first wait before a retry, seconds; doubled each time up to ``max_backoff``.
        root_certificates: PEM (bytes, or a path) of the CA that signed the server's certificate;
            turns TLS on.
        certificate_chain, private_key: PEM (bytes, or a path) of a client certificate and its key,
            for servers that require one.
        server_name: the name to check the server's certificate against, when it differs from the
            address's host.
        token: a bearer token (``authorization: Bearer TOKEN`` on every call).
        batch_size, batch_bytes: most documents, and about most bytes, per message of
            :meth:`ingest` (and per request of the batch methods).
        collection: the collection the calls name (default: the server's ``default``); see
            :meth:`use` for another one on the same connection.
    """

    def __init__(
        self,
        address: str = DEFAULT_ADDRESS,
        *,
        timeout: float | None = 60.0,
        retries: int = 4,
        backoff: float = 0.1,
        max_backoff: float = 2.0,
        root_certificates: bytes | str | Path | None = None,
        certificate_chain: bytes | str | Path | None = None,
        private_key: bytes | str | Path | None = None,
        server_name: str | None = None,
        token: str | None = None,
        batch_size: int = DEFAULT_BATCH_SIZE,
        batch_bytes: int = DEFAULT_BATCH_BYTES,
        collection: str = "",
    ) -> None:
        if batch_size < 1 or batch_bytes < 1:
            raise InvalidArgumentError("batch_size and batch_bytes must be at least 1")
        self.address = address
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        #: The collection every call names ("": the server's default collection).
        self.collection = collection
        self._metadata: tuple[tuple[str, str], ...] = (
            (("authorization", f"Bearer {token.strip()}"),) if token else ()
        )
        options: list[tuple[str, Any]] = [
            ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1),
        ]
        if server_name:
            options.append(("grpc.ssl_target_name_override", server_name))
        if root_certificates is None and (certificate_chain or private_key):
            raise InvalidArgumentError("a client certificate needs root_certificates (TLS)")
        if root_certificates is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_pem(root_certificates),
                private_key=_pem(private_key),
                certificate_chain=_pem(certificate_chain),
            )
            self._channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self._channel = grpc.insecure_channel(address, options=options)
        self._stub = index_pb2_grpc.PermIndexStub(self._channel)  # type: ignore[no-untyped-call]

    # ---- plumbing

    def use(self, collection: str) -> Client:
        """A client of the same connection whose calls name ``collection``; closing either
        closes both."""
        other = copy.copy(self)
        other.collection = collection
        return other

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _error(self, error: grpc.RpcError) -> ServerError:
        code = error.code() if isinstance(error, grpc.Call) else None
        details = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
        return server_error(code.name if code is not None else "UNKNOWN", details, self.address)

    def _call(self, function: Callable[[], _T], *, idempotent: bool) -> _T:
        """Run ``function`` (one RPC, fully consumed); RpcError becomes ServerError, and an
        idempotent call answered UNAVAILABLE is retried with exponential backoff."""
        wait = self.backoff
        attempt = 0
        while True:
            try:
                return function()
            except grpc.RpcError as error:
                failure = self._error(error)
            if not idempotent or failure.code != "UNAVAILABLE" or attempt >= self.retries:
                raise failure
            attempt += 1
            time.sleep(wait)
            wait = min(wait * 2, self.max_backoff)

    def _kwargs(self) -> dict[str, Any]:
        return {"timeout": self.timeout, "metadata": self._metadata}

    def _chunks(self, items: Sequence[_T]) -> Iterator[Sequence[_T]]:
        for start in range(0, len(items), self.batch_size):
            yield items[start : start + self.batch_size]

    # ---- writes (never retried)

    def add(self, documents: Iterable[DocumentLike]) -> AddResult:
        """Add (or replace) ``(key, fingerprint or text)`` documents in one request, applied as
        one step. For more than the server's batch limit, use :meth:`ingest`."""
        request = pb.AddRequest(
            collection=self.collection, documents=[message for message, _ in _documents(documents)]
        )
        reply = self._call(lambda: self._stub.Add(request, **self._kwargs()), idempotent=False)
        results = [
            DocumentResult(
                r.key, _STATUS_NAMES[r.status], r.fingerprint if r.HasField("fingerprint") else None
            )
            for r in reply.results
        ]
        return AddResult(results, reply.added, reply.replaced, reply.too_short)

    def _batches(self, documents: Iterable[DocumentLike]) -> Iterator[pb.AddRequest]:
        batch: list[pb.Document] = []
        size = 0
        for message, message_size in _documents(documents):
            if batch and (len(batch) >= self.batch_size or size + message_size > self.batch_bytes):
                yield pb.AddRequest(collection=self.collection, documents=batch)
                batch, size = [], 0
            batch.append(message)
            size += message_size
        if batch:
            yield pb.AddRequest(collection=self.collection, documents=batch)

    def ingest(
        self,
        documents: Iterable[DocumentLike],
        *,
        progress: Callable[[IngestResult], None] | None = None,
    ) -> IngestResult:
        """Stream ``(key, fingerprint or text)`` documents (any iterable, read lazily) to the
        server in batches of at most ``batch_size`` documents and about ``batch_bytes`` bytes.

        ``progress`` is called with the running counts after each acknowledged batch. On an
        error the batches acknowledged so far (the last counts given to ``progress``) stay
        applied; nothing after them is. No deadline applies to the whole stream.
        """
        counts = [0, 0, 0, 0, 0]  # documents, added, replaced, too short, batches

        def run() -> None:
            replies = self._stub.Ingest(self._batches(documents), metadata=self._metadata)
            for reply in replies:
                counts[0] += len(reply.results)
                counts[1] += reply.added
                counts[2] += reply.replaced
                counts[3] += reply.too_short
                counts[4] += 1
                if progress is not None:
                    progress(IngestResult(*counts))

        self._call(run, idempotent=False)
        return IngestResult(*counts)

    def check_and_add(self, key: str, content: Content, *, k: int | None = None) -> CheckResult:
        """Add the document only if no *other* key is within ``k`` (atomically on the server)."""
        return self.check_and_add_many([(key, content)], k=k)[0]

    def check_and_add_many(
        self, documents: Iterable[DocumentLike], *, k: int | None = None
    ) -> list[CheckResult]:
        """:meth:`check_and_add` for each document in order, in one request (so two
        near-duplicates in it can never both be added)."""
        _check_counts(k=k)
        request = pb.CheckAndAddRequest(
            collection=self.collection,
            documents=[message for message, _ in _documents(documents)],
            k=k,
        )
        reply = self._call(
            lambda: self._stub.CheckAndAdd(request, **self._kwargs()), idempotent=False
        )
        return [
            CheckResult(
                r.key,
                _STATUS_NAMES[r.status],
                r.fingerprint if r.HasField("fingerprint") else None,
                _matches(r.matches),
            )
            for r in reply.results
        ]

    def remove(self, keys: str | Iterable[str]) -> RemoveResult:
        """Remove a key or keys; the ones not stored are listed, not an error."""
        names = [keys] if isinstance(keys, str) else list(keys)
        removed = 0
        not_found: list[str] = []
        for chunk in self._chunks(names):
            request = pb.RemoveRequest(collection=self.collection, keys=chunk)
            reply = self._call(
                lambda r=request: self._stub.Remove(r, **self._kwargs()),  # type: ignore[misc]
                idempotent=False,
            )
            removed += reply.removed
            not_found.extend(reply.not_found)
        return RemoveResult(removed, not_found)

    def snapshot(self) -> SnapshotResult:
        """Ask the server to write a snapshot now; returns when it is durable."""
        reply = self._call(
            lambda: self._stub.Snapshot(
                pb.SnapshotRequest(collection=self.collection), **self._kwargs()
            ),
            idempotent=False,
        )
        return SnapshotResult(reply.path, reply.count, reply.bytes, reply.seconds)

    # ---- reads (retried on UNAVAILABLE)

    def query(
        self, fingerprint: int, *, k: int | None = None, limit: int | None = None
    ) -> list[Match]:
        """Every stored key within ``k`` of ``fingerprint``, by distance then key."""
        return self.query_many([fingerprint], k=k, limit=limit)[0]

    def query_many(
        self, fingerprints: Iterable[int], *, k: int | None = None, limit: int | None = None
    ) -> list[list[Match]]:
        """:meth:`query` for each fingerprint (one list each, in order), ``batch_size`` a
        request."""
        _check_counts(k=k, limit=limit)
        values = list(fingerprints)
        for i, value in enumerate(values):
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
                raise InvalidArgumentError(
                    f"fingerprints[{i}] = {value!r} is not an int in [0, 2**64)", value
                )
        found: list[list[Match]] = []
        for chunk in self._chunks(values):
            request = pb.QueryRequest(
                collection=self.collection, fingerprints=chunk, k=k, limit=limit
            )
            reply = self._call(
                lambda r=request: self._stub.Query(r, **self._kwargs()),  # type: ignore[misc]
                idempotent=True,
            )
            found.extend(_matches(result.matches) for result in reply.results)
        return found

    def query_columns(
        self,
        fingerprints: Iterable[int] | NDArray[np.unsignedinteger[Any]],
        *,
        k: int | None = None,
        limit: int | None = None,
        batch: int = 1000,
        window: int = 4,
    ) -> ColumnMatches:
        """:meth:`query_many` for large batches, in columns: the fingerprints go to the server
        packed, ``batch`` per message, on one QueryColumns stream with up to ``window`` messages
        in flight (sent before the earlier replies arrive), and the matches come back as packed
        columns, without a Python object per fingerprint.

        Args:
            fingerprints: (n,) uint64 array (or signed without negatives), or ints in [0, 2^64).
            k: largest distance, bits (None: the index's k).
            limit: at most this many matches per fingerprint (None or 0: all).
            batch: fingerprints per message (at most the server's batch limit, 100,000 by
                default).
            window: requests sent ahead of their replies (at least 1).

        Returns:
            :class:`ColumnMatches` over all n fingerprints (positions count from 0 over the
            whole input); :meth:`ColumnMatches.to_lists` gives :meth:`query_many`'s lists.

        Raises:
            InvalidArgumentError: a fingerprint outside [0, 2^64), ``k`` or ``limit`` outside
                [0, 2^32), ``batch`` or ``window`` below 1 (all before anything is sent), or the
                server's INVALID_ARGUMENT (k above the index's design).
            TypeError: a non-integer fingerprint, ``k`` or ``limit``.
            ServerError: any other refusal (e.g. RESOURCE_EXHAUSTED for a batch over the
                server's limit or a reply over its message limit: use a limit or a smaller
                batch); retried as a whole on UNAVAILABLE.
        """
        _check_counts(k=k, limit=limit)
        if batch < 1 or window < 1:
            raise InvalidArgumentError(f"batch and window must be at least 1 ({batch}, {window})")
        values = as_fingerprint_array(fingerprints).astype("<u8", copy=False)
        starts = range(0, len(values), batch)

        def run() -> ColumnMatches:
            room = threading.Semaphore(window)
            finished = threading.Event()

            def requests() -> Iterator[pb.QueryColumnsRequest]:
                for start in starts:
                    while not room.acquire(timeout=0.05):
                        if finished.is_set():
                            return
                    yield pb.QueryColumnsRequest(
                        fingerprints=values[start : start + batch].tobytes(),
                        k=k,
                        limit=limit,
                        collection=self.collection,
                    )

            positions: list[NDArray[np.int64]] = []
            found: list[NDArray[np.uint64]] = []
            distances: list[NDArray[np.uint8]] = []
            keys: list[str] = []
            try:
                replies = self._stub.QueryColumns(requests(), **self._kwargs())
                for i, reply in enumerate(replies):  # to the end: the call's status too
                    room.release()
                    start = starts[i]
                    at = np.frombuffer(reply.query_positions, dtype="<u4")
                    positions.append(at.astype(np.int64) + start)
                    found.append(np.frombuffer(reply.fingerprints, "<u8").astype(np.uint64))
                    distances.append(np.frombuffer(reply.distances, dtype=np.uint8).copy())
                    keys.extend(reply.keys)
            finally:
                finished.set()
            return ColumnMatches(
                np.concatenate(positions) if positions else np.zeros(0, np.int64),
                np.concatenate(found) if found else np.zeros(0, np.uint64),
                np.concatenate(distances) if distances else np.zeros(0, np.uint8),
                keys,
            )

        if not starts:  # nothing to ask (as query_many, which sends no request either)
            return ColumnMatches(
                np.zeros(0, np.int64), np.zeros(0, np.uint64), np.zeros(0, np.uint8), []
            )
        return self._call(run, idempotent=True)

    def get(self, key: str) -> int | None:
        """The stored fingerprint of ``key``, or None."""
        return self.get_many([key])[0]

    def get_many(self, keys: Iterable[str]) -> list[int | None]:
        """The stored fingerprint of each key (None where not stored), in order."""
        names = list(keys)
        found: list[int | None] = []
        for chunk in self._chunks(names):
            request = pb.GetRequest(collection=self.collection, keys=chunk)
            reply = self._call(
                lambda r=request: self._stub.Get(r, **self._kwargs()),  # type: ignore[misc]
                idempotent=True,
            )
            found.extend(r.fingerprint if r.found else None for r in reply.results)
        return found

    def pairs(self, *, k: int | None = None) -> list[tuple[str, str, int]]:
        """Every pair of stored keys within ``k``: ``(key_a, key_b, distance)``, key_a < key_b,
        sorted."""
        _check_counts(k=k)

        def run() -> list[tuple[str, str, int]]:
            replies = self._stub.Pairs(
                pb.PairsRequest(collection=self.collection, k=k), **self._kwargs()
            )
            return sorted((p.key_a, p.key_b, p.distance) for r in replies for p in r.pairs)

        return self._call(run, idempotent=True)

    def clusters(self, *, k: int | None = None) -> list[list[str]]:
        """The clusters within ``k`` (connected components of the pairs), largest first."""
        _check_counts(k=k)

        def run() -> list[list[str]]:
            found: dict[int, list[str]] = {}
            for reply in self._stub.Clusters(
                pb.ClustersRequest(collection=self.collection, k=k), **self._kwargs()
            ):
                for cluster in reply.clusters:
                    found.setdefault(cluster.id, []).extend(cluster.keys)
            return [found[i] for i in sorted(found)]

        return self._call(run, idempotent=True)

    def flags(self, *, k: int | None = None) -> list[Flag]:
        """Every key with another key within ``k``, with its nearest one, sorted by key."""
        _check_counts(k=k)

        def run() -> list[Flag]:
            replies = self._stub.Flags(
                pb.FlagsRequest(collection=self.collection, k=k), **self._kwargs()
            )
            return [
                Flag(f.key, f.nearest_key, f.distance, f.neighbors)
                for reply in replies
                for f in reply.flags
            ]

        return self._call(run, idempotent=True)

    def exact_duplicates(self) -> list[ExactGroup]:
        """The groups of keys sharing one fingerprint, largest first."""

        def run() -> list[ExactGroup]:
            found: dict[int, ExactGroup] = {}
            request = pb.ExactDuplicatesRequest(collection=self.collection)
            for reply in self._stub.ExactDuplicates(request, **self._kwargs()):
                for group in reply.groups:
                    found.setdefault(group.id, ExactGroup(group.fingerprint, [])).keys.extend(
                        group.keys
                    )
            return [found[i] for i in sorted(found)]

        return self._call(run, idempotent=True)

    def export(self) -> Iterator[tuple[str, int]]:
        """Every stored ``(key, fingerprint)`` (one consistent copy, in the order stored),
        streamed: iterate to the end (or close the client) to finish the call. Not retried."""
        try:
            for reply in self._stub.Export(
                pb.ExportRequest(collection=self.collection), metadata=self._metadata
            ):
                for entry in reply.entries:
                    yield entry.key, entry.fingerprint
        except grpc.RpcError as error:
            raise self._error(error) from None

    # ---- collections

    def create_collection(
        self,
        name: str,
        *,
        k: int | None = None,
        blocks: int | None = None,
        leading: int | None = None,
        shingle_size: int | None = None,
        min_words: int | None = None,
    ) -> CollectionInfo:
        """Create an empty collection (absent options: the server's own). Raises
        :class:`~permindex.errors.CollectionExistsError` (ALREADY_EXISTS) if the name is taken."""
        options = pb.CollectionOptions(
            k=k, blocks=blocks, leading=leading, shingle_size=shingle_size, min_words=min_words
        )
        request = pb.CreateCollectionRequest(name=name, options=options)
        reply = self._call(
            lambda: self._stub.CreateCollection(request, **self._kwargs()), idempotent=False
        )
        return _collection_info(reply)

    def list_collections(self) -> list[CollectionInfo]:
        """Every collection of the server, by name."""
        reply = self._call(
            lambda: self._stub.ListCollections(pb.ListCollectionsRequest(), **self._kwargs()),
            idempotent=True,
        )
        return [_collection_info(info) for info in reply.collections]

    def describe_collection(self, name: str) -> CollectionInfo:
        """One collection's options and counts (NOT_FOUND: a ``KeyError``)."""
        request = pb.DescribeCollectionRequest(name=name)
        reply = self._call(
            lambda: self._stub.DescribeCollection(request, **self._kwargs()), idempotent=True
        )
        return _collection_info(reply)

    def drop_collection(self, name: str) -> int:
        """Drop a collection (keys, memory, files); the keys it held."""
        request = pb.DropCollectionRequest(name=name)
        reply = self._call(
            lambda: self._stub.DropCollection(request, **self._kwargs()), idempotent=False
        )
        return int(reply.count)

    def stats(self) -> ServerStats:
        """The server's counts, memory, design, uptime and last snapshot."""
        reply = self._call(
            lambda: self._stub.Stats(pb.StatsRequest(collection=self.collection), **self._kwargs()),
            idempotent=True,
        )
        return ServerStats(
            count=reply.count,
            memory_bytes=reply.memory_bytes,
            resident_memory_bytes=reply.resident_memory_bytes,
            blocks=reply.design.blocks,
            leading=reply.design.leading,
            tables=reply.design.tables,
            k=reply.design.k,
            uptime_seconds=reply.uptime_seconds,
            last_snapshot_unix_seconds=(
                reply.last_snapshot_unix_seconds
                if reply.HasField("last_snapshot_unix_seconds")
                else None
            ),
            last_snapshot_count=reply.last_snapshot_count,
            last_snapshot_bytes=reply.last_snapshot_bytes,
            version=reply.version,
            collection=reply.collection or "default",
        )
