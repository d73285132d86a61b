"""The streaming calls of the client: :meth:`~StreamingClient.ingest` and
:meth:`~StreamingClient.ingest_batches` (the Ingest stream, one message per batch, with a progress
callback per acknowledged batch), :meth:`~StreamingClient.query_columns` (packed columns over one
QueryColumns stream with a window of messages in flight) and :meth:`~StreamingClient.export`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any, TypeVar

import grpc
import numpy as np
from numpy.typing import NDArray

from permindex.client.base import ClientBase
from permindex.client.batching import batches
from permindex.client.messages import check_counts, document_messages
from permindex.client.results import (
    ColumnMatches,
    DocumentLike,
    IngestResult,
    attach_ingest_result,
)
from permindex.errors import InvalidArgumentError, ServerError
from permindex.index.clusters import ExactGroup, Flag
from permindex.index.hamming import as_fingerprint_array
from permindex.v1 import index_pb2 as pb

__all__ = ["StreamingClient"]

_T = TypeVar("_T")
_G = TypeVar("_G")


class StreamingClient(ClientBase):
    """The streaming calls (see the module docstring); :class:`~permindex.client.Client` adds
    the one-request calls."""

    def ingest(
        self,
        documents: Iterable[DocumentLike],
        *,
        progress: Callable[[IngestResult], None] | None = None,
    ) -> IngestResult:
        """Stream ``(key, fingerprint or text)`` documents (any iterable, read lazily) to the
        server in batches of at most ``batch_size`` documents and about ``batch_bytes`` bytes
        (:func:`~permindex.client.batching.batches`).

        ``progress`` is called with the running counts after each acknowledged batch. On an
        error the batches acknowledged so far (the last counts given to ``progress``) stay
        applied; nothing after them is. No deadline applies to the whole stream.

        Raises:
            InvalidArgumentError: a document's content is not an int in [0, 2^64) or a str (the
                batches before it are sent and acknowledged first).
            ServerError: the server refused a batch or the call failed; never retried.
            Exception: whatever iterating ``documents`` raised, after the batches read before
                it are acknowledged.
        """
        messages = batches(
            document_messages(documents), self.batch_size, self.batch_bytes, itemgetter(1)
        )
        return self._ingest(([m for m, _ in batch] for batch in messages), progress)

    def ingest_batches(
        self,
        documents: Iterable[Sequence[DocumentLike]],
        *,
        progress: Callable[[IngestResult], None] | None = None,
    ) -> IngestResult:
        """:meth:`ingest` of batches made by the caller: one Ingest message per batch of
        ``documents``, as given (e.g. by :func:`~permindex.client.batching.batches` with the
        caller's own size rule), ``batch_size`` and ``batch_bytes`` unused. The counts, the
        ``progress`` calls and the errors are :meth:`ingest`'s; ``progress`` is called once per
        batch, in order, so a caller can pair each call with the batch it acknowledges."""

        def messages() -> Iterator[list[pb.Document]]:
            start = 0
            for batch in documents:
                yield [m for m, _ in document_messages(batch, start)]
                start += len(batch)

        return self._ingest(messages(), progress)

    def _ingest(
        self,
        messages: Iterator[list[pb.Document]],
        progress: Callable[[IngestResult], None] | None,
    ) -> IngestResult:
        """The Ingest stream of the message batches: the request iterator (run by grpc on its
        own thread) ends the stream cleanly when reading the input raises, and that exception
        is raised here once the batches before it are acknowledged.

        Accounting: ``handed`` counts what the request iterator gave grpc (documents, batches),
        ``acknowledged`` what the replies confirmed; each is replaced in one assignment, so an
        interrupt (KeyboardInterrupt) between two statements leaves a batch in flight, never
        lost from both. On any exception the call is cancelled first (nothing more is sent),
        then the counts are left on the exception (:func:`ingest_result_of`)."""
        acknowledged = [(0, 0, 0, 0, 0)]  # documents, added, replaced, too short, batches
        handed = [(0, 0)]  # documents, batches given to grpc to send
        sent: deque[int] = deque()  # documents per batch handed and not yet acknowledged
        failures: list[Exception] = []
        calls: list[Any] = []

        def requests() -> Iterator[pb.AddRequest]:
            try:
                for batch in messages:
                    sent.append(len(batch))
                    documents, count = handed[0]
                    handed[0] = (documents + len(batch), count + 1)
                    yield pb.AddRequest(collection=self.collection, documents=batch)
            except Exception as error:  # raised again below, in the calling thread
                failures.append(error)

        def result() -> IngestResult:
            documents, added, replaced, too_short, batches = acknowledged[0]
            handed_documents, handed_batches = handed[0]
            return IngestResult(
                documents,
                added,
                replaced,
                too_short,
                batches,
                max(0, handed_documents - documents),
                max(0, handed_batches - batches),
            )

        def run() -> None:
            replies = self._stub.Ingest(requests(), metadata=self._metadata)
            calls.append(replies)
            for reply in replies:
                size = sent.popleft() if sent else len(reply.results)
                documents, added, replaced, too_short, batches = acknowledged[0]
                acknowledged[0] = (
                    documents + size,
                    added + reply.added,
                    replaced + reply.replaced,
                    too_short + reply.too_short,
                    batches + 1,
                )
                if progress is not None:
                    progress(result())

        try:
            self._call(run, idempotent=False)
        except BaseException as error:
            for call in calls:
                call.cancel()  # nothing more is sent once cancelled
            counts = result()
            if isinstance(error, ServerError) and failures:
                # the input broke off first: that is the cause to report
                attach_ingest_result(failures[0], counts)
                raise failures[0] from None
            attach_ingest_result(error, counts)
            raise
        if failures:
            attach_ingest_result(failures[0], result())
            raise failures[0]
        return result()

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
        check_counts(k=k, limit=limit)
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

    def export(self, *, timeout: float | None = None) -> Iterator[tuple[str, int]]:
        """:meth:`iter_export` (kept under its first name)."""
        return self.iter_export(timeout=timeout)

    # ---- streamed reads: iterators, no deadline unless given, retried before the first reply

    def iter_export(
        self, *, collection: str | None = None, timeout: float | None = None
    ) -> Generator[tuple[str, int], None, None]:
        """Every stored ``(key, fingerprint)`` (one consistent copy, in the order stored),
        yielded as the server's messages arrive (see :meth:`_stream` for deadlines, retries,
        cancellation and flow control)."""
        request = pb.ExportRequest(collection=self._collection_of(collection))
        return self._stream(
            "Export", request, lambda r: ((e.key, e.fingerprint) for e in r.entries), timeout
        )

    def iter_pairs(
        self,
        k: int | None = None,
        *,
        collection: str | None = None,
        timeout: float | None = None,
    ) -> Generator[tuple[str, str, int], None, None]:
        """Every pair of stored keys within ``k`` bits (None: the collection's k) as
        ``(key_a, key_b, distance)``, key_a < key_b, in the server's order (sorted by key_a,
        then key_b), yielded as the messages arrive; nothing is sorted or held by the client.

        Raises:
            InvalidArgumentError: ``k`` outside [0, 2^32) (before anything is sent), or the
                server's INVALID_ARGUMENT (k above the design).
            ServerError: any other failure (e.g. RESOURCE_EXHAUSTED: the call's work is over
                the server's budget), raised where the iteration stands.
        """
        check_counts(k=k)
        request = pb.PairsRequest(collection=self._collection_of(collection), k=k)
        return self._stream(
            "Pairs", request, lambda r: ((p.key_a, p.key_b, p.distance) for p in r.pairs), timeout
        )

    def iter_clusters(
        self,
        k: int | None = None,
        *,
        collection: str | None = None,
        timeout: float | None = None,
    ) -> Generator[list[str], None, None]:
        """The clusters within ``k`` (connected components of the pairs; each a list of its
        keys, sorted), largest first, each yielded once all its parts have arrived. Errors as
        :meth:`iter_pairs`."""
        check_counts(k=k)
        request = pb.ClustersRequest(collection=self._collection_of(collection), k=k)
        return _whole_groups(
            self._stream("Clusters", request, lambda r: r.clusters, timeout),
            lambda keys, _first: keys,
        )

    def iter_flags(
        self,
        k: int | None = None,
        *,
        collection: str | None = None,
        timeout: float | None = None,
    ) -> Generator[Flag, None, None]:
        """Every key with another key within ``k``, with its nearest one, sorted by key, yielded
        as the messages arrive. Errors as :meth:`iter_pairs`."""
        check_counts(k=k)
        request = pb.FlagsRequest(collection=self._collection_of(collection), k=k)
        return self._stream(
            "Flags",
            request,
            lambda r: (Flag(f.key, f.nearest_key, f.distance, f.neighbors) for f in r.flags),
            timeout,
        )

    def iter_exact_duplicates(
        self, *, collection: str | None = None, timeout: float | None = None
    ) -> Generator[ExactGroup, None, None]:
        """The groups of keys sharing one fingerprint, largest first, each yielded once all its
        parts have arrived. Errors as :meth:`iter_pairs`."""
        request = pb.ExactDuplicatesRequest(collection=self._collection_of(collection))
        return _whole_groups(
            self._stream("ExactDuplicates", request, lambda r: r.groups, timeout),
            lambda keys, first: ExactGroup(first.fingerprint, keys),
        )

    def _collection_of(self, collection: str | None) -> str:
        return self.collection if collection is None else collection

    def _stream(
        self,
        rpc: str,
        request: Any,
        items: Callable[[Any], Iterable[_T]],
        timeout: float | None,
    ) -> Generator[_T, None, None]:
        """The items of the server-streaming call ``rpc``, ``items(reply)`` of each reply, as
        the replies arrive.

        Nothing is sent until the first ``next()``. ``timeout`` is the deadline of the whole
        call, seconds (None: none; the Client's ``timeout`` does not apply). Flow control: the
        client holds a few messages at most, so a consumer that stops reading stops the
        server's work for the call. Closing the iterator (``break`` out of a ``for``, ``close()``,
        garbage collection) cancels the call on the server. An UNAVAILABLE answer before the
        first reply is retried as the one-request reads are; after it, it is raised.

        Raises:
            ServerError: the call failed (DEADLINE_EXCEEDED: a ``TimeoutError``).
        """
        wait = self.backoff
        attempt = 0
        while True:
            call = getattr(self._stub, rpc)(request, timeout=timeout, metadata=self._metadata)
            started = False
            try:
                for reply in call:
                    started = True
                    yield from items(reply)
                return
            except grpc.RpcError as error:
                failure = self._error(error)
            finally:
                call.cancel()  # a no-op once the call has ended; else it stops the server's work
            if started or failure.code != "UNAVAILABLE" or attempt >= self.retries:
                raise failure
            attempt += 1
            time.sleep(wait)
            wait = min(wait * 2, self.max_backoff)


def _whole_groups(
    parts: Generator[Any, None, None], make: Callable[[list[str], Any], _G]
) -> Generator[_G, None, None]:
    """Whole groups from the streamed parts of Clusters or ExactDuplicates messages (a group's
    parts share its ``id`` and come in order; ``size`` is the whole group's key count): each
    group as ``make(keys, first_part)``, yielded when its last part arrives (or the next group
    starts). Holds one group's keys at a time."""
    keys: list[str] = []
    first: Any = None
    try:
        for part in parts:
            if first is not None and part.id != first.id:
                yield make(keys, first)
                keys, first = [], None
            if first is None:
                first = part
            keys.extend(part.keys)
            if len(keys) >= first.size:
                yield make(keys, first)
                keys, first = [], None
        if first is not None:
            yield make(keys, first)
    finally:
        parts.close()  # closing the groups cancels the call
