"""A Python client of the permindex server: :class:`Client`, one typed method per RPC.

Importing ``permindex`` does not import this module (nor grpc): ``permindex.Client`` loads it on
first use.

- Results are the package's own types (:class:`~permindex.index.Match`, lists, small frozen
  dataclasses of :mod:`permindex.client.results`), never protobuf messages. Fingerprints are
  Python ints in [0, 2^64).
- A document's content is an ``int`` (its fingerprint) or a ``str`` (its text, fingerprinted by
  the server).
- :meth:`Client.ingest` streams any iterable of documents in batches bounded by count
  (``batch_size``) and bytes (``batch_bytes``), one message each, and waits for every batch's
  acknowledgement; if the stream fails, the batches acknowledged before stay applied and nothing
  else is (see the .proto). :meth:`Client.ingest_batches` streams batches the caller made.
- Errors are :class:`~permindex.errors.ServerError` instances carrying the gRPC status code
  (``.code``) that also subclass the matching permindex error or built-in (a too-large batch is a
  :class:`~permindex.errors.LimitExceededError`, an unreachable server a ``ConnectionError``...).
- Retries: only calls that change nothing (query, query_columns, get, stats, pairs, clusters, flags,
  exact_duplicates, list and describe collections) are retried, and only on UNAVAILABLE, with
  exponential backoff (``retries`` attempts after the first, waits of ``backoff`` seconds doubling
  up to ``max_backoff``). Writes are never retried: an UNAVAILABLE write may or may not have been
  applied.
- TLS: ``root_certificates`` (PEM bytes or a path) turns TLS on; ``certificate_chain`` and
  ``private_key`` add a client certificate. ``token`` is sent as ``authorization: Bearer TOKEN``
  (:mod:`permindex.client.channel`).

Thread-safe: one Client (one channel) can serve many threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from permindex.client.messages import (
    STATUS_NAMES,
    check_counts,
    check_fingerprints,
    collection_info,
    document_messages,
    matches,
    server_stats,
)
from permindex.client.results import (
    AddResult,
    CheckResult,
    CollectionInfo,
    Content,
    DocumentLike,
    DocumentResult,
    RemoveResult,
    ServerStats,
    SnapshotResult,
)
from permindex.client.streams import StreamingClient
from permindex.errors import ServerError
from permindex.index import Match
from permindex.index.clusters import ExactGroup, Flag
from permindex.v1 import index_pb2 as pb

__all__ = ["Client"]

_T = TypeVar("_T")


class Client(StreamingClient):
    """A connection to a permindex server (see the module docstring for errors, retries, TLS).

    Args:
        address: ``HOST:PORT`` of the server.
        timeout: deadline of each one-request call and of :meth:`query_columns`, seconds (None:
            none); a call past it raises a ``TimeoutError`` (DEADLINE_EXCEEDED). The streamed
            reads (pairs, clusters, flags, exact duplicates, export, and their ``iter_`` forms)
            and :meth:`ingest` have no deadline unless their own ``timeout`` is given.
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

    # ---- writes (never retried)

    def add(self, documents: Iterable[DocumentLike]) -> AddResult:
        """Add (or replace) ``(key, fingerprint or text)`` documents in one request, applied as
        one step. For more than the server's batch limit, use :meth:`ingest`."""
        request = pb.AddRequest(
            collection=self.collection,
            documents=[message for message, _ in document_messages(documents)],
        )
        reply = self._call(lambda: self._stub.Add(request, **self._kwargs()), idempotent=False)
        results = [
            DocumentResult(
                r.key, STATUS_NAMES[r.status], r.fingerprint if r.HasField("fingerprint") else None
            )
            for r in reply.results
        ]
        return AddResult(results, reply.added, reply.replaced, reply.too_short)

    def check_and_add(self, key: str, content: Content, *, k: int | None = None) -> CheckResult:
        """Add the document only if no *other* key is within ``k`` (atomically on the server)."""
        return self.check_and_add_many([(key, content)], k=k)[0]

    def check_and_add_many(
        self, documents: Iterable[DocumentLike], *, k: int | None = None
    ) -> list[CheckResult]:
        """:meth:`check_and_add` for each document in order, in one request (so two
        near-duplicates in it can never both be added)."""
        check_counts(k=k)
        request = pb.CheckAndAddRequest(
            collection=self.collection,
            documents=[message for message, _ in document_messages(documents)],
            k=k,
        )
        reply = self._call(
            lambda: self._stub.CheckAndAdd(request, **self._kwargs()), idempotent=False
        )
        return [
            CheckResult(
                r.key,
                STATUS_NAMES[r.status],
                r.fingerprint if r.HasField("fingerprint") else None,
                matches(r.matches),
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
        check_counts(k=k, limit=limit)
        values = check_fingerprints(fingerprints)
        found: list[list[Match]] = []
        for chunk in self._chunks(values):
            request = pb.QueryRequest(
                collection=self.collection, fingerprints=chunk, k=k, limit=limit
            )
            reply = self._call(
                lambda r=request: self._stub.Query(r, **self._kwargs()),  # type: ignore[misc]
                idempotent=True,
            )
            found.extend(matches(result.matches) for result in reply.results)
        return found

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

    def pairs(
        self, *, k: int | None = None, collection: str | None = None, timeout: float | None = None
    ) -> list[tuple[str, str, int]]:
        """Every pair of stored keys within ``k``: ``(key_a, key_b, distance)``, key_a < key_b,
        sorted (by key_a, then key_b: the server's order). The list of :meth:`iter_pairs`, whose
        arguments and errors it takes; retried as a whole on UNAVAILABLE."""
        return self._collect(lambda: self.iter_pairs(k, collection=collection, timeout=timeout))

    def clusters(
        self, *, k: int | None = None, collection: str | None = None, timeout: float | None = None
    ) -> list[list[str]]:
        """The clusters within ``k`` (connected components of the pairs), largest first: the
        list of :meth:`iter_clusters`."""
        return self._collect(lambda: self.iter_clusters(k, collection=collection, timeout=timeout))

    def flags(
        self, *, k: int | None = None, collection: str | None = None, timeout: float | None = None
    ) -> list[Flag]:
        """Every key with another key within ``k``, with its nearest one, sorted by key: the
        list of :meth:`iter_flags`."""
        return self._collect(lambda: self.iter_flags(k, collection=collection, timeout=timeout))

    def exact_duplicates(
        self, *, collection: str | None = None, timeout: float | None = None
    ) -> list[ExactGroup]:
        """The groups of keys sharing one fingerprint, largest first: the list of
        :meth:`iter_exact_duplicates`."""
        return self._collect(
            lambda: self.iter_exact_duplicates(collection=collection, timeout=timeout)
        )

    def _collect(self, stream: Callable[[], Iterator[_T]]) -> list[_T]:
        """``list(stream())``; a stream broken off by UNAVAILABLE after some items is read again
        from the start (the iterator itself retries a failure before its first reply), as the
        one-request reads are retried."""
        wait = self.backoff
        attempt = 0
        while True:
            items: list[_T] = []
            try:
                items.extend(stream())
                return items
            except ServerError as error:
                if not items or error.code != "UNAVAILABLE" or attempt >= self.retries:
                    raise
            attempt += 1
            time.sleep(wait)
            wait = min(wait * 2, self.max_backoff)

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
        expire_after: int | None = None,
    ) -> CollectionInfo:
        """Create an empty collection (absent options: the server's own; ``expire_after``,
        seconds after which an entry not added again expires: None, never). Raises
        :class:`~permindex.errors.CollectionExistsError` (ALREADY_EXISTS) if the name is taken."""
        options = pb.CollectionOptions(
            k=k,
            blocks=blocks,
            leading=leading,
            shingle_size=shingle_size,
            min_words=min_words,
            expire_after=expire_after or 0,
        )
        request = pb.CreateCollectionRequest(name=name, options=options)
        reply = self._call(
            lambda: self._stub.CreateCollection(request, **self._kwargs()), idempotent=False
        )
        return collection_info(reply)

    def list_collections(self) -> list[CollectionInfo]:
        """Every collection of the server, by name."""
        reply = self._call(
            lambda: self._stub.ListCollections(pb.ListCollectionsRequest(), **self._kwargs()),
            idempotent=True,
        )
        return [collection_info(info) for info in reply.collections]

    def describe_collection(self, name: str) -> CollectionInfo:
        """One collection's options and counts (NOT_FOUND: a ``KeyError``)."""
        request = pb.DescribeCollectionRequest(name=name)
        reply = self._call(
            lambda: self._stub.DescribeCollection(request, **self._kwargs()), idempotent=True
        )
        return collection_info(reply)

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
        return server_stats(reply)
