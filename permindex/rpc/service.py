"""The permindex.v1.PermIndex servicer (:class:`PermIndexService`, whose docstring gives the order
of every call: validate, fingerprint, then read or log-and-apply), and the one place where a
domain error becomes a gRPC status (:func:`_abort`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, cast

import grpc
import numpy as np

import permindex
from permindex.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermindexError,
    WorkBudgetExceededError,
    status_name_for,
)
from permindex.index import ExpiringIndex, Index
from permindex.index.jaccard import JaccardIndex
from permindex.index.jaccard.sketch import check_verify
from permindex.index.join.clusters import NearDuplicates
from permindex.rpc import columns, convert, jaccard
from permindex.rpc.catalog import Catalog, CollectionOptions
from permindex.rpc.jaccard import JaccardState
from permindex.rpc.limits import StreamClosed
from permindex.rpc.memory import MemoryLimitError
from permindex.rpc.slices import SliceSize, slices
from permindex.rpc.state import DEFAULT_COLLECTION, ServerState, resident_memory_bytes
from permindex.rpc.work import Work, read_outcome
from permindex.storage.key_section import batch_repeats
from permindex.text.fingerprint import Vote
from permindex.v1 import index_pb2 as pb
from permindex.v1 import index_pb2_grpc

if TYPE_CHECKING:
    from permindex.near.jaccard import JaccardDuplicates

__all__ = ["SERVICE_NAME", "PermIndexService"]

log = logging.getLogger(__name__)

#: Full name of the service, as health checking and reflection know it.
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["PermIndex"].full_name

#: Candidates (``Index.max_candidates``) up to which a Query of one fingerprint runs on the
#: event loop: its matches are at most this many.
_LOOP_SINGLE_CANDIDATES = 4096

_ADDED = pb.DOCUMENT_STATUS_ADDED
_REPLACED = pb.DOCUMENT_STATUS_REPLACED
_TOO_SHORT = pb.DOCUMENT_STATUS_TOO_SHORT
_NEAR_DUPLICATE = pb.DOCUMENT_STATUS_NEAR_DUPLICATE


# --------------------------------------------------------------------------- error translation

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")
_T = TypeVar("_T")
_Context = grpc.aio.ServicerContext[Any, Any]
#: Exceptions that end a call by themselves and must not be translated.
_PASS_THROUGH = (StreamClosed, grpc.aio.AbortError, asyncio.CancelledError)


async def _abort(context: _Context, method: str, error: Exception) -> NoReturn:
    """The one place where an exception becomes a gRPC status."""
    status = status_name_for(error)
    if isinstance(error, PermindexError) or status != "INTERNAL":
        message = str(error)
        log.debug("%s refused: %s: %s", method, status, message)
    else:
        log.error("%s failed", method, exc_info=error)
        message = f"internal error in {method} ({type(error).__name__}); see the server log"
    await context.abort(grpc.StatusCode[status], message)


def _unary(
    method: Callable[[PermIndexService, _Req, threading.Event], _Resp],
) -> Callable[[PermIndexService, _Req, _Context], Coroutine[Any, Any, _Resp]]:
    """A unary handler from a blocking body ``(self, request, stop) -> response``: the body runs
    in the executor (:class:`Work`); domain errors become status codes via :func:`_abort`."""
    return _unary_inline_when(None)(method)


def _unary_inline_when(
    small: Callable[[PermIndexService, Any], bool] | None,
) -> Callable[
    [Callable[[PermIndexService, _Req, threading.Event], _Resp]],
    Callable[[PermIndexService, _Req, _Context], Coroutine[Any, Any, _Resp]],
]:
    """As :func:`_unary`, except that a request for which ``small(service, request)`` is true
    runs on the event loop itself: a call bounded to a little index work (one lookup of
    bounded candidates, a few keys, the counts), for which the hop to the executor and back
    would cost more than the work."""

    def decorate(
        method: Callable[[PermIndexService, _Req, threading.Event], _Resp],
    ) -> Callable[[PermIndexService, _Req, _Context], Coroutine[Any, Any, _Resp]]:
        name = method.__name__

        @functools.wraps(method)
        async def handler(self: PermIndexService, request: _Req, context: _Context) -> _Resp:
            try:
                if small is not None and small(self, request):
                    return method(self, request, _NEVER)  # nothing to stop: it runs at once
                stop = threading.Event()
                return await self.work.run(method, self, request, stop, stop=stop)
            except _PASS_THROUGH:
                raise
            except Exception as error:
                await _abort(context, name, error)

        return handler

    return decorate


#: The stop event of a call served on the event loop (never set: such a call is not cut short).
_NEVER = threading.Event()
#: Keys or fingerprints of a request small enough to be served on the event loop.
_INLINE_ITEMS = 16


def _streaming(
    method: Callable[[PermIndexService, _Req, _Context], AsyncIterator[_Resp]],
) -> Callable[[PermIndexService, _Req, _Context], AsyncIterator[_Resp]]:
    """Wrap a response-streaming handler (an async generator) the same way as :func:`_unary`."""
    name = method.__name__

    @functools.wraps(method)
    async def handler(
        self: PermIndexService, request: _Req, context: _Context
    ) -> AsyncIterator[_Resp]:
        try:
            async for response in method(self, request, context):
                yield response
        except _PASS_THROUGH:
            raise
        except Exception as error:
            await _abort(context, name, error)

    return handler


# ------------------------------------------------------------------- the server's request limits


def _documents(state: ServerState, documents: Sequence[pb.Document]) -> convert.DocumentBatch:
    """The documents of an Add, Ingest or CheckAndAdd request checked against the collection's
    limits and fingerprinted with its options (:func:`convert.documents_from_proto`)."""
    config = state.config
    return convert.documents_from_proto(
        documents,
        max_batch=config.max_batch,
        shingle_size=config.shingle_size,
        min_words=config.min_words,
        max_key_bytes=config.max_key_bytes,
        max_text_bytes=config.max_text_bytes,
        vote=config.vote,
    )


def _keys(state: ServerState, keys: Sequence[str]) -> list[str]:
    """The keys of a Get or Remove request checked against the collection's limits."""
    config = state.config
    return convert.check_keys(keys, max_batch=config.max_batch, max_key_bytes=config.max_key_bytes)


def _growth(state: ServerState, keys: list[str]) -> Callable[[], int]:
    """The estimated memory growth of adding ``keys`` (each a new row and key) to ``state``'s
    index, computed when called (:meth:`Index.memory_growth
    <permindex.index.Index.memory_growth>`; only under a memory limit)."""
    return lambda: state.index.memory_growth(len(keys), sum(len(key.encode()) for key in keys))


# ---------------------------------------------------------------------------------- servicer


class PermIndexService(index_pb2_grpc.PermIndexServicer):
    """Implements every RPC of ``permindex.v1.PermIndex`` (contract and status codes:
    ``protos/permindex/v1/index.proto``) over a :class:`ServerState`.

    Every RPC validates its whole request (:mod:`permindex.rpc.convert`) before it changes anything,
    fingerprints texts before it touches the index (so the index's lock is never held while
    hashing), and then reads the :class:`~permindex.index.Index`, which is thread-safe on its own,
    or changes it through the :class:`~permindex.storage.store.Store`, which logs every change
    (write-ahead log) before it applies it; a change the log cannot take (disk full, read-only) is
    refused with RESOURCE_EXHAUSTED or UNAVAILABLE and nothing is applied.

    Errors of a parsed request become status codes in one place, :func:`_abort`, through
    :func:`permindex.errors.status_name_for`: our own errors keep their message (it says what to
    fix); anything unexpected is logged with its traceback there and the client gets ``INTERNAL``
    with a short message, never a traceback. Bytes that do not parse as the request message never
    reach the servicer: :mod:`permindex.rpc.handlers` answers them INVALID_ARGUMENT. Logs never
    carry keys or texts at INFO or above.
    """

    def __init__(
        self,
        state: ServerState,
        catalog: Catalog | None = None,
        *,
        work: Work | None = None,
        on_budget_refused: Callable[[], None] | None = None,
    ) -> None:
        #: Where index work runs (default: an executor of ``config.workers`` threads).
        self.work = work or Work(ThreadPoolExecutor(state.config.workers, "permindex-work"))
        #: Called for each call refused by ``--max-join-work`` (the metrics' counter).
        self.on_budget_refused = on_budget_refused or (lambda: None)
        #: The default collection's state, and the catalog of every collection.
        self.state = state
        self.index = state.index
        self.config = state.config
        self.catalog = catalog if catalog is not None else Catalog(state.config, state)
        #: QueryColumns streams open (changed on the event loop only).
        self.column_streams = 0

    def _collection(self, name: str) -> ServerState:
        """The state of collection ``name`` (empty: the default one); NotFoundError if none."""
        return self.catalog.get(name)

    # ---- writes

    def _add_batch(self, request: pb.AddRequest, what: str = "this Add") -> pb.AddResponse:
        """Validate, fingerprint (outside the lock), admit under the memory limit and apply one
        batch with one ``add_many``."""
        state = self._collection(request.collection)
        if isinstance(state, JaccardState):
            return jaccard.add(state, request, self.catalog.memory.admit, what)
        batch = _documents(state, request.documents)
        stored = [i for i, fp in enumerate(batch.fingerprints) if fp is not None]
        keys = [batch.keys[i] for i in stored]
        fingerprints = np.fromiter(
            (batch.fingerprints[i] for i in stored), dtype=np.uint64, count=len(stored)
        )
        # Admitted (MemoryLimitError: nothing logged), logged, then applied.
        with self.catalog.memory.admit(_growth(state, keys), what):
            was_new = state.store.add_many(keys, fingerprints, added_at=batch.stored_added_at())
        state.note_changes(len(keys))
        response = pb.AddResponse()
        status: dict[int, pb.DocumentStatus.ValueType] = {}
        repeats = batch_repeats(keys)  # a repeated key: ADDED at its first occurrence only
        added = was_new if repeats is None else was_new & repeats.first
        for i, new in zip(stored, added.tolist(), strict=True):
            status[i] = _ADDED if new else _REPLACED
        results = response.results
        for i, (key, fp) in enumerate(zip(batch.keys, batch.fingerprints, strict=True)):
            if fp is None:
                results.add(key=key, status=_TOO_SHORT)
            else:
                results.add(key=key, status=status[i], fingerprint=fp)
        counts = list(status.values())
        response.added = counts.count(_ADDED)
        response.replaced = counts.count(_REPLACED)
        response.too_short = batch.too_short
        return response

    @_unary
    def Add(self, request: pb.AddRequest, stop: threading.Event) -> pb.AddResponse:
        """One batch, applied as one step (see the .proto)."""
        return self._add_batch(request)

    @_streaming
    async def Ingest(
        self, request_iterator: AsyncIterator[pb.AddRequest], context: _Context
    ) -> AsyncIterator[pb.AddResponse]:
        """Each batch applied (in the executor) and acknowledged in order; a refused batch ends
        the stream. A batch received is applied whole even when the call ends meanwhile."""
        messages = documents = 0  # applied and acknowledged
        async for request in request_iterator:
            what = f"message {messages + 1} of this Ingest"
            work = asyncio.ensure_future(self.work.run(self._add_batch, request, what))
            # if the call ends meanwhile, a refusal of the batch is read here, not left for
            # asyncio to log as "Task exception was never retrieved"
            work.add_done_callback(read_outcome)
            try:
                response = await asyncio.shield(work)
            except MemoryLimitError as error:
                raise error.noting(
                    (
                        "no message before it was applied"
                        if messages == 0
                        else f"the {messages} message{'' if messages == 1 else 's'} before it, "
                        f"{documents} document{'' if documents == 1 else 's'}, "
                        f"{'was' if messages == 1 else 'were'} applied and acknowledged"
                    )
                    + "; it and the messages after it were not"
                ) from None
            messages += 1
            documents += len(request.documents)
            yield response

    @_unary
    def CheckAndAdd(
        self, request: pb.CheckAndAddRequest, stop: threading.Event
    ) -> pb.CheckAndAddResponse:
        """For each document in order, query-then-add, the whole batch as one logged step."""
        state = self._collection(request.collection)
        if isinstance(state, JaccardState):
            return jaccard.check_and_add(state, request, self.catalog.memory.admit)
        k = convert.check_k(
            request.k if request.HasField("k") else None, state.index.k, state.index.design
        )
        batch = _documents(state, request.documents)
        response = pb.CheckAndAddResponse()
        stored = [
            (key, fp)
            for key, fp in zip(batch.keys, batch.fingerprints, strict=True)
            if fp is not None
        ]
        keys = [key for key, _ in stored]
        # every document counted as added: the checks run under the store's lock, after this
        with self.catalog.memory.admit(_growth(state, keys), "this CheckAndAdd"):
            outcomes = iter(
                state.store.check_and_add_many(
                    keys, [fp for _, fp in stored], k=k, added_at=batch.stored_added_at()
                )
            )
        changes = 0
        for key, fp in zip(batch.keys, batch.fingerprints, strict=True):
            if fp is None:
                response.results.add(key=key, status=_TOO_SHORT)
                continue
            added, matches, replaced = next(outcomes)
            if added:
                changes += 1
                status = _REPLACED if replaced else _ADDED
            else:
                status = _NEAR_DUPLICATE
            response.results.add(
                key=key,
                status=status,
                fingerprint=fp,
                matches=convert.matches_to_proto(matches),
            )
        state.note_changes(changes)
        return response

    @_unary
    def Remove(self, request: pb.RemoveRequest, stop: threading.Event) -> pb.RemoveResponse:
        """Removes the keys; the ones not stored are listed, not an error."""
        state = self._collection(request.collection)
        keys = _keys(state, request.keys)
        response = pb.RemoveResponse()
        removed_here = state.store.remove_many(keys)  # logged, then applied
        removed = {key for key, r in zip(keys, removed_here, strict=True) if r}
        state.note_changes(len(removed))
        # each key once, in request order (a key named twice is not "not found" the 2nd time)
        response.not_found.extend(dict.fromkeys(key for key in keys if key not in removed))
        response.removed = len(removed)
        return response

    # ---- reads

    def _single_on_loop(self, request: pb.QueryRequest) -> bool:
        """Whether a Query runs on the event loop: one fingerprint, in a collection whose
        :meth:`Index.max_candidates <permindex.index.Index.max_candidates>` is at most
        :data:`_LOOP_SINGLE_CANDIDATES` (many copies of one page go to the executor). A request
        that will be refused (unknown collection, bad k) is refused on the loop."""
        if len(request.fingerprints) + len(request.fingerprints_hex) != 1:
            return False
        try:
            found = self._collection(request.collection)
            if isinstance(found, JaccardState):
                return False
            index = found.index
            bound = index.max_candidates(request.k if request.HasField("k") else None)
        except PermindexError:
            return True
        return bound <= _LOOP_SINGLE_CANDIDATES

    @_unary_inline_when(_single_on_loop)
    def Query(self, request: pb.QueryRequest, stop: threading.Event) -> pb.QueryResponse:
        """Every stored key within k of each fingerprint (sent as integers or in hex)."""
        state = self._collection(request.collection)
        if isinstance(state, JaccardState):
            return jaccard.query(state, request)
        if request.texts or request.keys or request.sketches:
            raise InvalidArgumentError(
                "Query by texts, keys or sketches is for a Jaccard collection (method minhash); "
                "this collection is SimHash: send fingerprints or fingerprints_hex",
                "texts",
            )
        queries = convert.query_fingerprints(
            request.fingerprints, request.fingerprints_hex, state.config.max_batch
        )
        k = convert.check_k(
            request.k if request.HasField("k") else None, state.index.k, state.index.design
        )
        limit = convert.limit_from(request.limit if request.HasField("limit") else None)
        response = pb.QueryResponse()
        add = response.results.add
        if len(queries) == 1:  # the common small call: no array, no batch path
            matches = state.index.query(queries[0], k=k, limit=limit)
            add(matches=convert.matches_to_proto(matches))
            self._check_query_size(state, response, convert.query_wire_bytes([matches]), 1, 1)
            return response
        fingerprints = np.array(queries, dtype=np.uint64)
        n = len(fingerprints)
        size = 0
        # Slices (slices), so that the index lock is let go between them, a cancelled call stops
        # within one, and an answer too large for one message is refused early.
        for found, done in slices(state, fingerprints, k, limit, stop):
            for matches in found:
                if matches:
                    add(matches=convert.matches_to_proto(matches))
                else:
                    add()
            size += convert.query_wire_bytes(found)
            self._check_query_size(state, response, size, done, n)
        return response

    @staticmethod
    def _check_query_size(
        state: ServerState, response: pb.QueryResponse, bound: int, done: int, n: int
    ) -> None:
        """Refuse a Query reply that would not fit the message limit: ``bound`` (an upper bound
        of its size, bytes) is checked first, and only when it is over the limit is the exact
        size computed (``ByteSize``, which walks every match).

        Raises:
            LimitExceededError: the reply is over the limit (:func:`convert.check_reply_size`).
        """
        limit = state.config.max_message_bytes
        if bound > convert.reply_room(limit):
            convert.check_reply_size(response.ByteSize(), limit, done, n)

    @_streaming
    async def QueryColumns(
        self, request_iterator: AsyncIterator[pb.QueryColumnsRequest], context: _Context
    ) -> AsyncIterator[pb.QueryColumnsResponse | bytes]:
        """Each request answered in order by one columnar response (an answer without a match
        already encoded); a refused request ends the stream with its status (see the .proto)."""
        stop = threading.Event()
        sizing = SliceSize()  # learnt over the stream's messages
        self.column_streams += 1
        try:
            async for request in request_iterator:
                state = self._collection(request.collection)
                if isinstance(state, JaccardState):
                    raise InvalidArgumentError(
                        "QueryColumns takes fingerprints: this collection is a Jaccard "
                        "collection (method minhash); use Query with texts, keys or sketches",
                        request.collection,
                    )
                # on the loop only while this is the only QueryColumns stream and nothing runs
                # in the executor (one stream gains no core from it; several share the cores)
                alone = not self.work.running and self.column_streams == 1
                response = columns.on_loop(state, request, sizing) if alone else None
                if response is None:
                    response = await self.work.run(
                        columns.in_slices, state, request, stop, sizing, stop=stop
                    )
                yield response
        finally:
            self.column_streams -= 1

    @_unary_inline_when(lambda _service, request: len(request.keys) <= _INLINE_ITEMS)
    def Get(self, request: pb.GetRequest, stop: threading.Event) -> pb.GetResponse:
        """The stored fingerprint of each key."""
        state = self._collection(request.collection)
        if isinstance(state, JaccardState):
            return jaccard.get(state, request)
        keys = _keys(state, request.keys)
        response = pb.GetResponse()
        for key in keys:
            fp = state.index.get(key)
            if fp is None:
                response.results.add(key=key, found=False)
            else:
                response.results.add(key=key, found=True, fingerprint=fp)
        return response

    @_streaming
    async def Pairs(
        self, request: pb.PairsRequest, context: _Context
    ) -> AsyncIterator[bytes | pb.PairsResponse]:
        """All pairs within k, in the documented order, in chunks of at most
        :data:`convert.PAIRS_PER_MESSAGE` (fewer when the message limit needs it: a chunk of the
        longest keys must fit). The join is estimated first (``--max-join-work``), then pairs are
        produced one message at a time as the client takes them (flow control)."""
        state = self._collection(request.collection)
        k = request.k if request.HasField("k") else None
        chunk = convert.items_per_message(
            state.config.max_message_bytes, convert.PAIR_WIRE_BYTES, convert.PAIRS_PER_MESSAGE
        )
        stop = threading.Event()
        if isinstance(state, JaccardState):
            jaccard.refuse_k(request.HasField("k"), "Pairs")
            pairs = await self.work.run(
                self._jaccard_near_duplicates, state, False, True, stop, stop=stop
            )
            async for reply in self.work.each(
                jaccard.pair_messages(pairs, chunk, stop.is_set), stop
            ):
                yield reply
            return
        found = await self.work.run(self._near_duplicates, state, k, stop, stop=stop)
        async for message in self.work.each(
            convert.pair_chunks_to_proto(found, chunk, stop.is_set), stop
        ):
            yield message

    def _keys_per_message(self) -> int:
        """Keys per Clusters/Flags/ExactDuplicates message that fit the message limit."""
        return convert.items_per_message(
            self.config.max_message_bytes, convert.KEY_WIRE_BYTES, convert.KEYS_PER_MESSAGE
        )

    def _near_duplicates(
        self, state: ServerState, k: int | None, stop: threading.Event, send_pairs: bool = True
    ) -> NearDuplicates:
        """Pairs, clusters, flags and exact groups of one consistent export of the index, its
        work estimate checked against ``--max-join-work`` first (runs in the executor); with
        ``send_pairs`` False (Clusters, Flags, ExactDuplicates) the pairs of identical
        fingerprints, which those calls never list, are not counted."""
        k = convert.check_k(k, state.index.k, state.index.design)
        budget = state.config.max_join_work
        try:
            return NearDuplicates.of_index(
                state.index, k, max_work=budget, should_stop=stop.is_set, send_pairs=send_pairs
            )
        except WorkBudgetExceededError as error:
            raise self._over_budget(error, "lower k, or raise the budget") from None

    def _jaccard_near_duplicates(
        self, state: JaccardState, has_k: bool, send_pairs: bool, stop: threading.Event
    ) -> JaccardDuplicates:
        """:func:`jaccard.near_duplicates` with its work estimate checked against
        ``--max-join-work`` first, as :meth:`_near_duplicates` (runs in the executor; stops
        once ``stop`` is set)."""
        try:
            return jaccard.near_duplicates(
                state,
                has_k,
                max_work=state.config.max_join_work,
                send_pairs=send_pairs,
                should_stop=stop.is_set,
            )
        except WorkBudgetExceededError as error:
            raise self._over_budget(
                error,
                "raise the budget, or the collection's threshold (a new collection): a "
                "template repeated with small edits shares its band buckets",
            ) from None

    def _over_budget(self, error: WorkBudgetExceededError, advice: str) -> WorkBudgetExceededError:
        """``error`` counted (metrics) and worded for the client: the estimate, the budget,
        the option, and ``advice``."""
        self.on_budget_refused()
        return WorkBudgetExceededError(
            f"this call's work estimate is {error.estimate:,} ({error.what}), above the "
            f"server's budget of {error.budget:,} per call (serve --max-join-work): {advice}",
            estimate=error.estimate,
            budget=error.budget,
            what=error.what,
        )

    async def _stream_groups(
        self,
        request: Any,
        k: int | None,
        to_proto: Callable[[NearDuplicates], Iterator[_Resp]],
        jaccard_messages: Callable[[Any], Iterator[_Resp]] | None = None,
    ) -> AsyncIterator[_Resp]:
        """Join (in the executor, estimated first), then send ``to_proto``'s messages, each
        built in the executor as the client takes the previous one."""
        state = self._collection(request.collection)
        stop = threading.Event()
        if isinstance(state, JaccardState):
            has_k = request.HasField("k") if "k" in request.DESCRIPTOR.fields_by_name else False
            # no pair is sent: the pairs of identical sets are no work here
            found_j = await self.work.run(
                self._jaccard_near_duplicates, state, has_k, False, stop, stop=stop
            )
            async for message in self.work.each((jaccard_messages or to_proto)(found_j), stop):
                yield message
            return
        # no pair is sent: the pairs of identical fingerprints are no work here
        found = await self.work.run(self._near_duplicates, state, k, stop, False, stop=stop)
        async for message in self.work.each(to_proto(found), stop):
            yield message

    @_streaming
    async def Clusters(
        self, request: pb.ClustersRequest, context: _Context
    ) -> AsyncIterator[pb.ClustersResponse]:
        """Connected components of the pairs within k, chunked (see the .proto)."""
        chunk = self._keys_per_message()
        k = request.k if request.HasField("k") else None
        async for message in self._stream_groups(
            request, k, lambda found: convert.clusters_to_proto(found.clusters(), chunk)
        ):
            yield message

    @_streaming
    async def Flags(
        self, request: pb.FlagsRequest, context: _Context
    ) -> AsyncIterator[pb.FlagsResponse]:
        """Every key with another key within k, sorted by key, chunked."""
        chunk = self._keys_per_message()
        k = request.k if request.HasField("k") else None
        async for message in self._stream_groups(
            request,
            k,
            lambda found: convert.flags_to_proto(found.flags(), chunk),
            lambda found: jaccard.flags_messages(found, chunk),
        ):
            yield message

    @_streaming
    async def ExactDuplicates(
        self, request: pb.ExactDuplicatesRequest, context: _Context
    ) -> AsyncIterator[pb.ExactDuplicatesResponse]:
        """Groups of keys sharing one fingerprint, chunked."""
        chunk = self._keys_per_message()
        async for message in self._stream_groups(
            request,
            0,
            lambda found: convert.exact_groups_to_proto(found.exact_duplicates(), chunk),
        ):
            yield message

    @_unary_inline_when(lambda _service, _request: True)
    def Stats(self, request: pb.StatsRequest, stop: threading.Event) -> pb.StatsResponse:
        """Counts, memory (by part, and against the server's limit), design, uptime, last
        snapshot, version."""
        state = self._collection(request.collection)
        if isinstance(state, JaccardState):
            return self._jaccard_stats(state, request)
        response = pb.StatsResponse(
            count=len(state.index),
            memory_bytes=state.index.memory_bytes(),
            design=convert.design_to_proto(state.index.design, state.index.k),
            uptime_seconds=self.state.uptime_seconds,  # the server's
            version=permindex.__version__,
            resident_memory_bytes=resident_memory_bytes(),
            collection=request.collection or DEFAULT_COLLECTION,
        )
        index = state.index
        parts = index.memory_breakdown()
        response.memory_breakdown.CopyFrom(
            pb.MemoryBreakdown(
                fingerprint_bytes=parts.fingerprints,
                liveness_bytes=parts.liveness,
                time_bytes=parts.times,
                table_bytes=parts.tables,
                key_bytes=parts.key_bytes,
                key_offset_bytes=parts.key_offsets,
                key_hash_bytes=parts.key_hashes,
                key_map_bytes=parts.key_map,
                log_buffer_bytes=state.store.log_buffer_bytes,
            )
        )
        response.memory_bytes = parts.total  # the same moment as its parts
        memory = self.catalog.memory
        response.max_memory_bytes = memory.limit or 0
        response.server_memory_bytes = memory.used()
        if isinstance(index, ExpiringIndex):
            response.expire_after = index.expire_after
            response.expired_pending = index.expired_pending
        last = state.last_snapshot
        if last is not None:
            response.last_snapshot_unix_seconds = last.created_unix_seconds
            response.last_snapshot_count = last.count
            response.last_snapshot_bytes = last.bytes
        return response

    def _jaccard_stats(self, state: JaccardState, request: pb.StatsRequest) -> pb.StatsResponse:
        """Stats of a Jaccard collection: counts, memory (no SimHash breakdown), snapshot."""
        index = state.jaccard
        memory = self.catalog.memory
        response = pb.StatsResponse(
            count=len(index),
            memory_bytes=index.memory_bytes(),
            uptime_seconds=self.state.uptime_seconds,
            version=permindex.__version__,
            resident_memory_bytes=resident_memory_bytes(),
            collection=request.collection or DEFAULT_COLLECTION,
            expire_after=index.expire_after or 0,
            max_memory_bytes=memory.limit or 0,
            server_memory_bytes=memory.used(),
        )
        last = state.last_snapshot
        if last is not None:
            response.last_snapshot_unix_seconds = last.created_unix_seconds
            response.last_snapshot_count = last.count
            response.last_snapshot_bytes = last.bytes
        return response

    @_unary
    def Snapshot(self, request: pb.SnapshotRequest, stop: threading.Event) -> pb.SnapshotResponse:
        """Writes a snapshot now and answers once it is durable."""
        state = self._collection(request.collection)
        info = state.snapshot()
        if info is None:  # pragma: no cover - only_if_changed is False
            raise RuntimeError("snapshot skipped")
        return pb.SnapshotResponse(
            path=str(info.path), count=info.count, bytes=info.bytes, seconds=info.seconds
        )

    @_streaming
    async def Export(
        self, request: pb.ExportRequest, context: _Context
    ) -> AsyncIterator[pb.ExportResponse]:
        """Every (key, fingerprint, added_at) of one consistent copy, in chunks of
        :data:`convert.KEYS_PER_MESSAGE`, each message built as the client takes the last."""
        state = self._collection(request.collection)
        if isinstance(state, JaccardState):
            messages = await self.work.run(
                lambda: list(jaccard.export_messages(state, convert.KEYS_PER_MESSAGE))
            )
            for reply in messages:
                yield reply
            return
        copy = await self.work.run(convert.export_copy, state.index)
        async for message in self.work.each(
            convert.export_to_proto(*copy, chunk=convert.KEYS_PER_MESSAGE)
        ):
            yield message

    # ---- collections

    def _info(self, name: str, state: ServerState) -> pb.CollectionInfo:
        options = self.catalog.options(name)
        if isinstance(state, JaccardState):
            index = state.jaccard
            return pb.CollectionInfo(
                name=name, count=len(index), memory_bytes=index.memory_bytes(),
                shingle_size=options.shingle_size, min_words=options.min_words,
                expire_after=options.expire_after, method="minhash",
                threshold=index.threshold, permutations=index.permutations,
                bands=index.shape.bands, rows=index.shape.rows, verify=index.verify,
            )  # fmt: skip
        return pb.CollectionInfo(
            name=name,
            count=len(state.index),
            memory_bytes=state.index.memory_bytes(),
            design=convert.design_to_proto(state.index.design, state.index.k),
            shingle_size=options.shingle_size,
            min_words=options.min_words,
            expire_after=options.expire_after,
            vote=options.vote,
        )

    @_unary
    def CreateCollection(
        self, request: pb.CreateCollectionRequest, stop: threading.Event
    ) -> pb.CollectionInfo:
        """An empty collection; absent options take the server's own (expire_after: never); an
        unknown vote is INVALID_ARGUMENT (:meth:`CollectionOptions.check`)."""
        given = request.options
        design = self.index.design
        method = given.method or "simhash"
        minhash_fields = [f for f in ("threshold", "permutations") if given.HasField(f)]
        minhash_fields += ["verify"] if given.verify else []
        simhash_fields = [f for f in ("k", "blocks", "leading") if given.HasField(f)]
        simhash_fields += ["vote"] if given.vote else []
        if method == "minhash" and simhash_fields:
            raise InvalidArgumentError(
                f"options {', '.join(simhash_fields)} are for SimHash collections; a Jaccard "
                "collection (method minhash) takes threshold, permutations and verify",
                simhash_fields[0],
            )
        if method != "minhash" and minhash_fields:
            raise InvalidArgumentError(
                f"options {', '.join(minhash_fields)} are for Jaccard collections: set method "
                "minhash",
                minhash_fields[0],
            )
        if method == "minhash":
            options = CollectionOptions(
                shingle_size=(
                    given.shingle_size
                    if given.HasField("shingle_size")
                    else self.config.shingle_size
                ),
                min_words=(
                    given.min_words if given.HasField("min_words") else self.config.min_words
                ),
                expire_after=given.expire_after,
                method="minhash",
                threshold=given.threshold if given.HasField("threshold") else 0.8,
                permutations=given.permutations if given.HasField("permutations") else 128,
                verify=given.verify or "exact",
            ).check()
            empty_bytes = JaccardIndex(
                options.threshold, options.permutations, check_verify(options.verify)
            ).memory_bytes
            with self.catalog.memory.admit(empty_bytes, "this CreateCollection"):
                state = self.catalog.create(request.name, options)
            return self._info(request.name, state)
        options = CollectionOptions(
            k=given.k if given.HasField("k") else self.index.k,
            blocks=given.blocks if given.HasField("blocks") else design.blocks,
            leading=given.leading if given.HasField("leading") else design.leading,
            shingle_size=(
                given.shingle_size if given.HasField("shingle_size") else self.config.shingle_size
            ),
            min_words=given.min_words if given.HasField("min_words") else self.config.min_words,
            expire_after=given.expire_after,
            vote=cast(Vote, given.vote) if given.vote else self.config.vote,  # checked below
            method=method,  # "simhash", or a method check() refuses
        )
        options.check()  # before the empty index is built for its size
        empty = Index(k=options.k, design=(options.blocks, options.leading))
        with self.catalog.memory.admit(empty.memory_bytes, "this CreateCollection"):
            state = self.catalog.create(request.name, options)
        return self._info(request.name, state)

    @_unary
    def ListCollections(
        self, request: pb.ListCollectionsRequest, stop: threading.Event
    ) -> pb.ListCollectionsResponse:
        """Every collection, by name."""
        response = pb.ListCollectionsResponse()
        for name, state in self.catalog.items():
            try:
                response.collections.append(self._info(name, state))
            except NotFoundError:  # dropped meanwhile
                continue
        return response

    @_unary
    def DescribeCollection(
        self, request: pb.DescribeCollectionRequest, stop: threading.Event
    ) -> pb.CollectionInfo:
        """One collection's options and counts."""
        name = request.name or DEFAULT_COLLECTION
        return self._info(name, self._collection(name))

    @_unary
    def DropCollection(
        self, request: pb.DropCollectionRequest, stop: threading.Event
    ) -> pb.DropCollectionResponse:
        """Drops a collection: keys, memory, files."""
        return pb.DropCollectionResponse(count=self.catalog.drop(request.name))
