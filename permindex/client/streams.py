"""The streaming calls of the client: :meth:`~StreamingClient.ingest` and
:meth:`~StreamingClient.ingest_batches` (the Ingest stream, one message per batch, with a progress
callback per acknowledged batch), :meth:`~StreamingClient.query_columns` (packed columns over one
QueryColumns stream with a window of messages in flight) and :meth:`~StreamingClient.export`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import itemgetter
from typing import Any

import grpc
import numpy as np
from numpy.typing import NDArray

from permindex.client.base import ClientBase
from permindex.client.batching import batches
from permindex.client.messages import check_counts, document_messages
from permindex.client.results import ColumnMatches, DocumentLike, IngestResult
from permindex.errors import InvalidArgumentError, ServerError
from permindex.index.hamming import as_fingerprint_array
from permindex.v1 import index_pb2 as pb

__all__ = ["StreamingClient"]


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
        is raised here once the batches before it are acknowledged."""
        counts = [0, 0, 0, 0, 0]  # documents, added, replaced, too short, batches
        sent: deque[int] = deque()  # documents per batch sent and not yet acknowledged
        failures: list[Exception] = []

        def requests() -> Iterator[pb.AddRequest]:
            try:
                for batch in messages:
                    sent.append(len(batch))
                    yield pb.AddRequest(collection=self.collection, documents=batch)
            except Exception as error:  # raised again below, in the calling thread
                failures.append(error)

        def run() -> None:
            replies = self._stub.Ingest(requests(), metadata=self._metadata)
            for reply in replies:
                documents = sent.popleft() if sent else 0
                counts[0] += len(reply.results) or documents
                counts[1] += reply.added
                counts[2] += reply.replaced
                counts[3] += reply.too_short
                counts[4] += 1
                if progress is not None:
                    progress(IngestResult(*counts))

        try:
            self._call(run, idempotent=False)
        except ServerError:
            if failures:  # the input broke off first: that is the cause to report
                raise failures[0] from None
            raise
        if failures:
            raise failures[0]
        return IngestResult(*counts)

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
