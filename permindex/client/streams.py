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
from typing import Any, Literal, TypeVar, overload

import grpc
import numpy as np
from numpy.typing import NDArray

from permindex.client.base import ClientBase
from permindex.client.batching import batches
from permindex.client.messages import document_messages
from permindex.client.operations import ingest_by_add
from permindex.client.results import (
    ColumnMatches,
    DocumentLike,
    IngestResult,
    attach_ingest_result,
)
from permindex.client.sharding import merge_columns
from permindex.client.stream_parts import (
    ColumnParts,
    ColumnRequests,
    Groups,
    StreamRead,
    clusters_read,
    exact_duplicates_read,
    export_read,
    flags_read,
    pairs_read,
)
from permindex.errors import ServerError
from permindex.index.join.clusters import ExactGroup, Flag
from permindex.v1 import index_pb2 as pb

__all__ = ["StreamingClient"]

_T = TypeVar("_T")


class StreamingClient(ClientBase):
    """The streaming calls (see the module docstring); :class:`~permindex.client.Client` adds
    the one-request calls."""

    def ingest(
        self,
        documents: Iterable[DocumentLike],
        *,
        progress: Callable[[IngestResult], None] | None = None,
    ) -> IngestResult:
        """Stream ``(key, fingerprint or text)`` or ``(key, content, added_at)`` documents (any
        iterable, read lazily; :class:`~permindex.client.Document`) to the
        server in batches of at most ``batch_size`` documents and about ``batch_bytes`` bytes
        (:func:`~permindex.client.batching.batches`).

        ``progress`` is called with the running counts after each acknowledged batch. On an
        error the batches acknowledged so far (the last counts given to ``progress``) stay
        applied; nothing after them is. No deadline applies to the whole stream.

        Raises:
            InvalidArgumentError: a document's content is not an int in [0, 2^64) or a str, or
                its ``added_at`` not a number >= 0 (the batches before it are sent and
                acknowledged first).
            ServerError: the server refused a batch or the call failed; never retried.
            Exception: whatever iterating ``documents`` raised, after the batches read before
                it are acknowledged.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address, batch_size=2)
            >>> pages = ((f"page-{i}", f"text number {i} of the crawl") for i in range(5))
            >>> result = client.ingest(pages)
            >>> result.documents, result.added, result.batches
            (5, 5, 3)
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
        batch, in order, so a caller can pair each call with the batch it acknowledges.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> result = client.ingest_batches([[("a", 0), ("b", 1)], [("c", 2)]])
            >>> result.documents, result.batches
            (3, 2)
        """

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
        then the counts are left on the exception (:func:`ingest_result_of`).

        Over several shards, each batch is one Add step instead (one Add per shard holding some
        of its keys: :func:`~permindex.client.operations.ingest_by_add`)."""
        if self.shards > 1:
            return self._run(ingest_by_add(self._target(), messages, progress))
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
            self._check_open()
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

        Over several shards: one such stream per shard, in turn, and the columns merged in one
        server's order (:func:`~permindex.client.sharding.merge_columns`).

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

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0000), ("b", 0b0111)])
            >>> columns = client.query_columns([0, 2**64 - 1])
            >>> columns.query_positions.tolist(), columns.keys, columns.distances.tolist()
            ([0, 0], ['a', 'b'], [0, 3])
        """
        asked = ColumnRequests(fingerprints, k, limit, batch, window, self.collection)
        if not asked.starts:  # nothing to ask (as query_many, which sends no request either)
            return ColumnParts().result()
        parts = [
            self._call(lambda s=shard: self._columns(asked, s), idempotent=True, shard=shard)  # type: ignore[misc]
            for shard in range(self.shards)
        ]
        return merge_columns(parts, limit)

    def _columns(self, asked: ColumnRequests, shard: int) -> ColumnMatches:
        """The QueryColumns stream of ``asked`` to ``shard``, ``asked.window`` requests ahead of
        their replies."""
        room = threading.Semaphore(asked.window)
        finished = threading.Event()
        starts = asked.starts

        def requests() -> Iterator[pb.QueryColumnsRequest]:
            for start in starts:
                while not room.acquire(timeout=0.05):
                    if finished.is_set():
                        return
                yield asked.request(start)

        parts = ColumnParts()
        try:
            stub = self._shards[shard].stub
            replies = stub.QueryColumns(requests(), **self._kwargs())
            for i, reply in enumerate(replies):  # to the end: the call's status too
                room.release()
                parts.add(starts[i], reply)
        finally:
            finished.set()
        return parts.result()

    def export(self, *, timeout: float | None = None) -> Iterator[tuple[str, int]]:
        """:meth:`iter_export` (kept under its first name).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0), ("b", 7)])
            >>> sorted(client.export())
            [('a', 0), ('b', 7)]
        """
        return self.iter_export(timeout=timeout)

    # ---- streamed reads: iterators, no deadline unless given, retried before the first reply

    @overload
    def iter_export(
        self,
        *,
        collection: str | None = None,
        timeout: float | None = None,
        with_times: Literal[False] = False,
    ) -> Generator[tuple[str, int], None, None]: ...

    @overload
    def iter_export(
        self,
        *,
        collection: str | None = None,
        timeout: float | None = None,
        with_times: Literal[True],
    ) -> Generator[tuple[str, int, int], None, None]: ...

    def iter_export(
        self,
        *,
        collection: str | None = None,
        timeout: float | None = None,
        with_times: bool = False,
    ) -> Generator[Any, None, None]:
        """Every stored ``(key, fingerprint)`` (one consistent copy, in the order stored; over
        shards, each shard's in turn), yielded as the server's messages arrive (see
        :meth:`_stream` for deadlines, retries, cancellation and flow control).

        ``with_times``: ``(key, fingerprint, added_at)`` items, ``added_at`` when the key was
        last added (Unix seconds; 0 in a collection without expiry), the form
        :meth:`ingest` takes back: ``other.ingest(client.iter_export(with_times=True))`` copies
        a collection with its entries' ages. From a Jaccard collection (``method="minhash"``)
        each item carries a :class:`~permindex.client.SketchHex` (the stored sketch in hex) in
        place of the fingerprint (the annotation names the SimHash case), which ``ingest`` and
        ``add`` send back as it is: the same copy, sketches restored exactly.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0), ("b", 7)])
            >>> sorted(client.iter_export())
            [('a', 0), ('b', 7)]
            >>> sorted(client.iter_export(with_times=True))  # 0: a collection without expiry
            [('a', 0, 0), ('b', 7, 0)]
        """
        read = export_read(self._collection_of(collection), with_times)
        if self.shards == 1:
            return self._stream(read, timeout)
        return self._chain([self._stream(read, timeout, shard) for shard in range(self.shards)])

    def iter_pairs(
        self,
        k: int | None = None,
        *,
        collection: str | None = None,
        timeout: float | None = None,
    ) -> Generator[tuple[str, str, int | float], None, None]:
        """Every pair of stored keys within ``k`` bits (None: the collection's k) as
        ``(key_a, key_b, distance)``, key_a < key_b, in the server's order (sorted by key_a,
        then key_b), yielded as the messages arrive; nothing is sorted or held by the client.
        From a Jaccard collection (``method="minhash"``; ``k`` must then be None) the third
        item is the pair's Jaccard similarity to 4 decimals, a float, as ``permindex dedup
        --method minhash`` prints it.

        Raises:
            InvalidArgumentError: ``k`` outside [0, 2^32), or several shards (a pair may cross
                shards: ``permindex export``, then ``permindex import`` into one server's
                collection with the same options, instead), before anything is sent; or the
                server's INVALID_ARGUMENT (k above the design).
            ServerError: any other failure (e.g. RESOURCE_EXHAUSTED: the call's work is over
                the server's budget), raised where the iteration stands.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0000), ("b", 0b0111), ("c", 0b1111)])
            >>> for key_a, key_b, distance in client.iter_pairs(k=3):
            ...     print(key_a, key_b, distance)
            a b 3
            b c 1
        """
        read = pairs_read(self._collection_of(collection), k, self.shards)
        return self._stream(read, timeout)

    def iter_clusters(
        self,
        k: int | None = None,
        *,
        collection: str | None = None,
        timeout: float | None = None,
    ) -> Generator[list[str], None, None]:
        """The clusters within ``k`` (connected components of the pairs; each a list of its
        keys, sorted), largest first, each yielded once all its parts have arrived. Errors as
        :meth:`iter_pairs`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0000), ("b", 0b0111), ("c", 7), ("d", 2**64 - 1)])
            >>> list(client.iter_clusters())
            [['a', 'b', 'c']]
        """
        read = clusters_read(self._collection_of(collection), k, self.shards)
        return self._stream(read, timeout)

    def iter_flags(
        self,
        k: int | None = None,
        *,
        collection: str | None = None,
        timeout: float | None = None,
    ) -> Generator[Flag, None, None]:
        """Every key with another key within ``k``, with its nearest one, sorted by key, yielded
        as the messages arrive. Errors as :meth:`iter_pairs`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0000), ("b", 0b0001), ("c", 2**64 - 1)])
            >>> [(flag.key, flag.nearest, flag.distance) for flag in client.iter_flags()]
            [('a', 'b', 1), ('b', 'a', 1)]
        """
        read = flags_read(self._collection_of(collection), k, self.shards)
        return self._stream(read, timeout)

    def iter_exact_duplicates(
        self, *, collection: str | None = None, timeout: float | None = None
    ) -> Generator[ExactGroup, None, None]:
        """The groups of keys sharing one fingerprint, largest first, each yielded once all its
        parts have arrived. Errors as :meth:`iter_pairs`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 7), ("b", 7), ("c", 0)])
            >>> list(client.iter_exact_duplicates())
            [ExactGroup(fingerprint=7, keys=['a', 'b'])]
        """
        read = exact_duplicates_read(self._collection_of(collection), self.shards)
        return self._stream(read, timeout)

    def _collection_of(self, collection: str | None) -> str:
        return self.collection if collection is None else collection

    @staticmethod
    def _chain(streams: list[Generator[_T, None, None]]) -> Generator[_T, None, None]:
        try:
            for stream in streams:
                yield from stream
        finally:
            for stream in streams:
                stream.close()

    def _stream(
        self, read: StreamRead, timeout: float | None, shard: int = 0
    ) -> Generator[Any, None, None]:
        """The items of the server-streaming call ``read`` to ``shard``, as the replies arrive
        (whole groups when ``read.group`` is set).

        Nothing is sent until the first ``next()``. ``timeout`` is the deadline of the whole
        call, seconds (None: none; the Client's ``timeout`` does not apply). Flow control: the
        client holds a few messages at most, so a consumer that stops reading stops the
        server's work for the call. Closing the iterator (``break`` out of a ``for``, ``close()``,
        garbage collection) cancels the call on the server. An UNAVAILABLE answer before the
        first reply is retried as the one-request reads are; after it, it is raised.

        Raises:
            ServerError: the call failed (DEADLINE_EXCEEDED: a ``TimeoutError``).
        """
        attempt = 0
        stub = self._shards[shard].stub
        while True:
            self._check_open()
            call = getattr(stub, read.rpc)(read.request, timeout=timeout, metadata=self._metadata)
            groups = Groups(read.group) if read.group is not None else None
            started = False
            try:
                for reply in call:
                    started = True
                    if groups is None:
                        yield from read.items(reply)
                    else:
                        for part in read.items(reply):
                            yield from groups.feed(part)
                if groups is not None:
                    yield from groups.finish()
                return
            except grpc.RpcError as error:
                failure = self._error(error, shard)
            finally:
                call.cancel()  # a no-op once the call has ended; else it stops the server's work
            wait = None if started else self._retry_wait(failure, True, attempt)
            if wait is None:
                raise failure
            attempt += 1
            time.sleep(wait)
