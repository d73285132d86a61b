"""The asyncio client of a permindex server: :class:`AsyncClient`, the methods of
:class:`~permindex.client.Client` as coroutines on ``grpc.aio``, for crawlers and services that
run an event loop (one RPC per batch of pages, never a blocked loop).

It is a second transport over the same code: the options, channels and retry rule of
:class:`~permindex.client.base.ClientCore`, the plans of :mod:`permindex.client.operations`
(request building, batching, shards, merged results) and the stream parts of
:mod:`permindex.client.stream_parts`; errors are the same
:class:`~permindex.errors.ServerError` classes, translated by the same
:meth:`~permindex.client.channel.Channel.error`.

Importing ``permindex`` does not import this module (nor grpc): ``permindex.AsyncClient`` loads
it on first use.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Awaitable, Callable, Iterable, Sequence
from operator import itemgetter
from typing import Any, ClassVar, Literal, TypeVar, overload

import grpc
import grpc.aio
import numpy as np
from numpy.typing import NDArray

from permindex.client import operations
from permindex.client.base import ClientCore
from permindex.client.batching import batches
from permindex.client.messages import document_messages
from permindex.client.operations import Call, Plan
from permindex.client.results import (
    AddResult,
    CheckResult,
    CollectionInfo,
    ColumnMatches,
    Content,
    DocumentLike,
    IngestResult,
    RemoveResult,
    ServerStats,
    SketchHex,
    SnapshotResult,
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
from permindex.index import Match
from permindex.index.jaccard import JaccardMatch, MinHashSketch
from permindex.index.join.clusters import ExactGroup, Flag
from permindex.text.fingerprint import Vote

__all__ = ["AsyncClient"]

_T = TypeVar("_T")
#: What ``read()`` of a grpc.aio stream returns after the last message.
_EOF: Any = grpc.aio.EOF  # type: ignore[attr-defined]
_Self = TypeVar("_Self", bound="AsyncTransport")


class AsyncTransport(ClientCore):
    """:class:`~permindex.client.base.ClientCore` on ``grpc.aio`` channels: a plan's calls
    awaited (those of one step concurrently), errors translated, idempotent calls retried on
    UNAVAILABLE with exponential backoff (``asyncio.sleep``)."""

    _aio: ClassVar[bool] = True

    async def wait_ready(self, timeout: float) -> None:
        """Wait until every shard's connection is up, at most ``timeout`` seconds each.

        Raises:
            ServerError: UNAVAILABLE (a ``ConnectionError``) when one is not up in time.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.wait_ready(timeout=10)
            ...         return (await client.stats()).count
            >>> asyncio.run(main())
            0
        """
        for channel in self._shards:
            await channel.await_ready(timeout)

    async def close(self) -> None:
        """Close the channels; calls in flight are cancelled; a later call raises
        :class:`~permindex.errors.InvalidArgumentError`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     client = permindex.AsyncClient(address)
            ...     await client.close()  # or: async with permindex.AsyncClient(address) as client
            ...     return await client.get("a")
            >>> asyncio.run(main())
            Traceback (most recent call last):
            ...
            permindex.errors.InvalidArgumentError: this client of ... is closed: open a new one
        """
        self._closed[0] = True
        for channel in self._shards:
            await channel.aclose()

    async def __aenter__(self: _Self) -> _Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def _retrying(
        self, function: Callable[[], Awaitable[_T]], *, idempotent: bool, shard: int
    ) -> _T:
        """``await function()`` (one RPC to ``shard``): RpcError becomes ServerError; an
        idempotent call answered UNAVAILABLE is retried (:meth:`_retry_wait`)."""
        attempt = 0
        while True:
            try:
                return await function()
            except grpc.RpcError as error:
                failure = self._error(error, shard)
            wait = self._retry_wait(failure, idempotent, attempt)
            if wait is None:
                raise failure
            attempt += 1
            await asyncio.sleep(wait)

    async def _one(self, call: Call) -> Any:
        method = getattr(self._shards[call.shard].stub, call.rpc)
        return await self._retrying(
            lambda: method(call.request, **self._kwargs()),
            idempotent=call.idempotent,
            shard=call.shard,
        )

    async def _run(self, plan: Plan[_T]) -> _T:
        """The result of ``plan``, its calls awaited here; the calls of one step run
        concurrently and all end before the first failure is thrown into the plan (so no
        write is left in flight); cancelling the awaiting task cancels them."""
        try:
            calls = next(plan)
            while True:
                try:
                    if len(calls) == 1:
                        replies = [await self._one(calls[0])]
                    else:
                        done = await asyncio.gather(
                            *(self._one(c) for c in calls), return_exceptions=True
                        )
                        for outcome in done:
                            if isinstance(outcome, BaseException):
                                raise outcome
                        replies = list(done)
                except (Exception, asyncio.CancelledError) as error:
                    calls = plan.throw(error)
                else:
                    calls = plan.send(replies)
        except StopIteration as stop:
            result: _T = stop.value
            return result
        finally:
            plan.close()

    def _stream(
        self, read: StreamRead, timeout: float | None, shard: int = 0
    ) -> AsyncGenerator[Any, None]:
        """The items of the server-streaming call ``read`` to ``shard`` as the replies arrive
        (whole groups when ``read.group`` is set), as the Client's ``_stream``: nothing is sent
        before the first ``__anext__``; ``timeout`` is the whole call's deadline (None: none);
        ``aclose()`` cancels the call; UNAVAILABLE before the first reply is retried."""

        async def items() -> AsyncGenerator[Any, None]:
            attempt = 0
            stub = self._shards[shard].stub
            while True:
                self._check_open()
                call = getattr(stub, read.rpc)(
                    read.request, timeout=timeout, metadata=self._metadata
                )
                groups = Groups(read.group) if read.group is not None else None
                started = False
                try:
                    async for reply in call:
                        started = True
                        if groups is None:
                            for item in read.items(reply):
                                yield item
                        else:
                            for part in read.items(reply):
                                for group in groups.feed(part):
                                    yield group
                    if groups is not None:
                        for group in groups.finish():
                            yield group
                    return
                except grpc.RpcError as error:
                    failure = self._error(error, shard)
                finally:
                    call.cancel()  # a no-op once the call has ended
                wait = None if started else self._retry_wait(failure, True, attempt)
                if wait is None:
                    raise failure
                attempt += 1
                await asyncio.sleep(wait)

        return items()

    async def _collect(self, stream: Callable[[], AsyncGenerator[_T, None]]) -> list[_T]:
        """The items of ``stream()`` as a list; a stream broken off by UNAVAILABLE after some
        items is read again from the start (as the Client's ``_collect``)."""
        attempt = 0
        while True:
            found: list[_T] = []
            try:
                async for item in stream():
                    found.append(item)
                return found
            except ServerError as error:
                wait = self._retry_wait(error, True, attempt) if found else None
                if wait is None:
                    raise
            attempt += 1
            await asyncio.sleep(wait)

    async def _columns(self, asked: ColumnRequests, shard: int) -> ColumnMatches:
        """The QueryColumns stream of ``asked`` to ``shard``, up to ``asked.window`` requests
        written ahead of their replies."""
        call = self._shards[shard].stub.QueryColumns(**self._kwargs())
        starts = asked.starts
        parts = ColumnParts()
        written = 0
        try:
            for i, start in enumerate(starts):
                while written < len(starts) and written - i < asked.window:
                    await call.write(asked.request(starts[written]))
                    written += 1
                    if written == len(starts):
                        await call.done_writing()
                reply = await call.read()
                if reply is _EOF:  # the server answers each request: not seen
                    break
                parts.add(start, reply)
            await call.read()  # EOF, or the call's error
        finally:
            call.cancel()
        return parts.result()


class AsyncClient(AsyncTransport):
    """An asyncio connection to a permindex server, or to several shards: the arguments, the
    results, the errors, the retries (read-only calls only, on UNAVAILABLE), the batching and
    the sharding of :class:`~permindex.client.Client`, each method a coroutine (the ``iter_``
    methods and :meth:`export` async iterators). Use it as ``async with AsyncClient(...) as
    client:``, which closes the channels at the end.

    One difference: :meth:`ingest` sends each batch as one Add call (awaited before the next,
    ``progress`` called after each) rather than on one Ingest stream; the counts, the
    accounting of an interrupted ingest (:func:`~permindex.client.ingest_result_of`) and the
    errors are the Client's.

    One AsyncClient serves many tasks of its event loop; it must be used on the loop it was
    first used on (a ``grpc.aio`` rule).

    Examples:
        ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

        >>> import asyncio, permindex
        >>> import permindex
        >>> async def main():
        ...     async with permindex.AsyncClient(address) as client:
        ...         await client.add([("a", 0b0000), ("b", 0b0111)])
        ...         return await client.query(0b0001)
        >>> asyncio.run(main())
        [Match(key='a', fingerprint=0, distance=1), Match(key='b', fingerprint=7, distance=2)]
    """

    # ---- writes (never retried)

    async def add(self, documents: Iterable[DocumentLike]) -> AddResult:
        """:meth:`Client.add <permindex.client.Client.add>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         return (await client.add([("a", 0), ("b", "too short")])).added
            >>> asyncio.run(main())
            1
        """
        return await self._run(operations.add(self._target(), documents))

    async def check_and_add(
        self, key: str, content: Content, *, k: int | None = None, added_at: float | None = None
    ) -> CheckResult:
        """:meth:`Client.check_and_add <permindex.client.Client.check_and_add>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.check_and_add("a", 0)
            ...         return (await client.check_and_add("b", 1)).status
            >>> asyncio.run(main())
            'near_duplicate'
        """
        return (await self.check_and_add_many([(key, content, added_at)], k=k))[0]

    async def check_and_add_many(
        self, documents: Iterable[DocumentLike], *, k: int | None = None
    ) -> list[CheckResult]:
        """:meth:`Client.check_and_add_many <permindex.client.Client.check_and_add_many>`
        (atomic on one server; over shards, what it says).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         results = await client.check_and_add_many([("a", 0), ("b", 1)])
            ...         return [result.status for result in results]
            >>> asyncio.run(main())
            ['added', 'near_duplicate']
        """
        return await self._run(operations.check_and_add(self._target(), documents, k))

    async def remove(self, keys: str | Iterable[str]) -> RemoveResult:
        """:meth:`Client.remove <permindex.client.Client.remove>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0)])
            ...         return await client.remove(["a", "b"])
            >>> asyncio.run(main())
            RemoveResult(removed=1, not_found=['b'])
        """
        return await self._run(operations.remove(self._target(), keys))

    async def snapshot(self) -> SnapshotResult:
        """:meth:`Client.snapshot <permindex.client.Client.snapshot>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0)])
            ...         return (await client.snapshot()).count
            >>> asyncio.run(main())
            1
        """
        return await self._run(operations.snapshot(self._target()))

    async def ingest(
        self,
        documents: Iterable[DocumentLike],
        *,
        progress: Callable[[IngestResult], None] | None = None,
    ) -> IngestResult:
        """:meth:`Client.ingest <permindex.client.Client.ingest>`: ``documents`` read lazily
        in batches of ``batch_size`` / ``batch_bytes``, one Add call each.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         pages = ((f"page-{i}", i) for i in range(5))
            ...         return (await client.ingest(pages)).added
            >>> asyncio.run(main())
            5
        """
        cut = batches(
            document_messages(documents), self.batch_size, self.batch_bytes, itemgetter(1)
        )
        messages = ([m for m, _ in batch] for batch in cut)
        return await self._run(operations.ingest_by_add(self._target(), messages, progress))

    async def ingest_batches(
        self,
        documents: Iterable[Sequence[DocumentLike]],
        *,
        progress: Callable[[IngestResult], None] | None = None,
    ) -> IngestResult:
        """:meth:`Client.ingest_batches <permindex.client.Client.ingest_batches>`: one Add call
        per batch, as given.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         result = await client.ingest_batches([[("a", 0), ("b", 1)], [("c", 2)]])
            ...         return result.documents, result.batches
            >>> asyncio.run(main())
            (3, 2)
        """

        def messages() -> Iterable[list[Any]]:
            start = 0
            for batch in documents:
                yield [m for m, _ in document_messages(batch, start)]
                start += len(batch)

        return await self._run(operations.ingest_by_add(self._target(), messages(), progress))

    # ---- reads (retried on UNAVAILABLE)

    async def query(
        self, fingerprint: int, *, k: int | None = None, limit: int | None = None
    ) -> list[Match]:
        """:meth:`Client.query <permindex.client.Client.query>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0)])
            ...         return await client.query(1)
            >>> asyncio.run(main())
            [Match(key='a', fingerprint=0, distance=1)]
        """
        return (await self.query_many([fingerprint], k=k, limit=limit))[0]

    async def query_many(
        self, fingerprints: Iterable[int], *, k: int | None = None, limit: int | None = None
    ) -> list[list[Match]]:
        """:meth:`Client.query_many <permindex.client.Client.query_many>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0)])
            ...         return await client.query_many([1, 2**64 - 1])
            >>> asyncio.run(main())
            [[Match(key='a', fingerprint=0, distance=1)], []]
        """
        return await self._run(operations.query_many(self._target(), fingerprints, k, limit))

    async def query_columns(
        self,
        fingerprints: Iterable[int] | NDArray[np.unsignedinteger[Any]],
        *,
        k: int | None = None,
        limit: int | None = None,
        batch: int = 1000,
        window: int = 4,
    ) -> ColumnMatches:
        """:meth:`Client.query_columns <permindex.client.Client.query_columns>`: one
        QueryColumns stream per shard, ``window`` messages ahead, merged.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0)])
            ...         columns = await client.query_columns([1, 2**64 - 1])
            ...         return columns.query_positions.tolist(), columns.keys
            >>> asyncio.run(main())
            ([0], ['a'])
        """
        asked = ColumnRequests(fingerprints, k, limit, batch, window, self.collection)
        if not asked.starts:
            return ColumnParts().result()
        parts = await asyncio.gather(
            *(
                self._retrying(
                    lambda s=shard: self._columns(asked, s),  # type: ignore[misc]
                    idempotent=True,
                    shard=shard,
                )
                for shard in range(self.shards)
            )
        )
        return merge_columns(parts, limit)

    async def query_jaccard(
        self,
        items: Iterable[str | MinHashSketch],
        *,
        by: str = "text",
        limit: int | None = None,
    ) -> list[list[JaccardMatch]]:
        """:meth:`Client.query_jaccard <permindex.client.Client.query_jaccard>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.create_collection("pages-async", method="minhash")
            ...         pages = client.use("pages-async")
            ...         text = "the quick brown fox jumps over the lazy dog"
            ...         await pages.add([("a", text)])
            ...         return await pages.query_jaccard([text + " again"], limit=1)
            >>> asyncio.run(main())
            [[JaccardMatch(key='a', jaccard=0.875)]]
        """
        return await self._run(operations.query_jaccard(self._target(), items, by, limit))

    async def get(self, key: str) -> int | SketchHex | None:
        """:meth:`Client.get <permindex.client.Client.get>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 7)])
            ...         return await client.get("a"), await client.get("b")
            >>> asyncio.run(main())
            (7, None)
        """
        return (await self.get_many([key]))[0]

    async def get_many(self, keys: Iterable[str]) -> list[int | SketchHex | None]:
        """:meth:`Client.get_many <permindex.client.Client.get_many>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 7)])
            ...         return await client.get_many(["a", "b"])
            >>> asyncio.run(main())
            [7, None]
        """
        return await self._run(operations.get_many(self._target(), keys))

    async def stats(self) -> ServerStats:
        """:meth:`Client.stats <permindex.client.Client.stats>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 7)])
            ...         return (await client.stats()).count
            >>> asyncio.run(main())
            1
        """
        return await self._run(operations.stats(self._target()))

    # ---- streamed reads: async iterators, and their lists

    def export(self, *, timeout: float | None = None) -> AsyncGenerator[tuple[str, int], None]:
        """:meth:`iter_export`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 7)])
            ...         return sorted([item async for item in client.export()])
            >>> asyncio.run(main())
            [('a', 7)]
        """
        return self.iter_export(timeout=timeout)

    @overload
    def iter_export(
        self,
        *,
        collection: str | None = None,
        timeout: float | None = None,
        with_times: Literal[False] = False,
    ) -> AsyncGenerator[tuple[str, int], None]: ...

    @overload
    def iter_export(
        self,
        *,
        collection: str | None = None,
        timeout: float | None = None,
        with_times: Literal[True],
    ) -> AsyncGenerator[tuple[str, int, int], None]: ...

    def iter_export(
        self,
        *,
        collection: str | None = None,
        timeout: float | None = None,
        with_times: bool = False,
    ) -> AsyncGenerator[Any, None]:
        """:meth:`Client.iter_export <permindex.client.Client.iter_export>` (``with_times``
        too), as an async iterator (over shards: each shard's in turn).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 7)])
            ...         return [item async for item in client.iter_export(with_times=True)]
            >>> asyncio.run(main())
            [('a', 7, 0)]
        """
        read = export_read(self._collection_of(collection), with_times)
        streams = [self._stream(read, timeout, shard) for shard in range(self.shards)]

        async def chained() -> AsyncGenerator[Any, None]:
            try:
                for stream in streams:
                    async for item in stream:
                        yield item
            finally:
                for stream in streams:
                    await stream.aclose()

        return streams[0] if len(streams) == 1 else chained()

    def iter_pairs(
        self, k: int | None = None, *, collection: str | None = None, timeout: float | None = None
    ) -> AsyncGenerator[tuple[str, str, int | float], None]:
        """:meth:`Client.iter_pairs <permindex.client.Client.iter_pairs>` (refused, before
        anything is sent, over several shards).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0), ("b", 7)])
            ...         return [pair async for pair in client.iter_pairs()]
            >>> asyncio.run(main())
            [('a', 'b', 3)]
        """
        return self._stream(pairs_read(self._collection_of(collection), k, self.shards), timeout)

    def iter_clusters(
        self, k: int | None = None, *, collection: str | None = None, timeout: float | None = None
    ) -> AsyncGenerator[list[str], None]:
        """:meth:`Client.iter_clusters <permindex.client.Client.iter_clusters>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0), ("b", 7)])
            ...         return [cluster async for cluster in client.iter_clusters()]
            >>> asyncio.run(main())
            [['a', 'b']]
        """
        read = clusters_read(self._collection_of(collection), k, self.shards)
        return self._stream(read, timeout)

    def iter_flags(
        self, k: int | None = None, *, collection: str | None = None, timeout: float | None = None
    ) -> AsyncGenerator[Flag, None]:
        """:meth:`Client.iter_flags <permindex.client.Client.iter_flags>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0), ("b", 7)])
            ...         return [flag.key async for flag in client.iter_flags()]
            >>> asyncio.run(main())
            ['a', 'b']
        """
        return self._stream(flags_read(self._collection_of(collection), k, self.shards), timeout)

    def iter_exact_duplicates(
        self, *, collection: str | None = None, timeout: float | None = None
    ) -> AsyncGenerator[ExactGroup, None]:
        """:meth:`Client.iter_exact_duplicates
        <permindex.client.Client.iter_exact_duplicates>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 7), ("b", 7)])
            ...         return [group.keys async for group in client.iter_exact_duplicates()]
            >>> asyncio.run(main())
            [['a', 'b']]
        """
        read = exact_duplicates_read(self._collection_of(collection), self.shards)
        return self._stream(read, timeout)

    async def pairs(
        self, *, k: int | None = None, collection: str | None = None, timeout: float | None = None
    ) -> list[tuple[str, str, int | float]]:
        """:meth:`Client.pairs <permindex.client.Client.pairs>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0), ("b", 7)])
            ...         return await client.pairs()
            >>> asyncio.run(main())
            [('a', 'b', 3)]
        """
        read = pairs_read(self._collection_of(collection), k, self.shards)
        return await self._collect(lambda: self._stream(read, timeout))

    async def clusters(
        self, *, k: int | None = None, collection: str | None = None, timeout: float | None = None
    ) -> list[list[str]]:
        """:meth:`Client.clusters <permindex.client.Client.clusters>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0), ("b", 7)])
            ...         return await client.clusters()
            >>> asyncio.run(main())
            [['a', 'b']]
        """
        read = clusters_read(self._collection_of(collection), k, self.shards)
        return await self._collect(lambda: self._stream(read, timeout))

    async def flags(
        self, *, k: int | None = None, collection: str | None = None, timeout: float | None = None
    ) -> list[Flag]:
        """:meth:`Client.flags <permindex.client.Client.flags>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 0), ("b", 7)])
            ...         return [flag.nearest for flag in await client.flags()]
            >>> asyncio.run(main())
            ['b', 'a']
        """
        read = flags_read(self._collection_of(collection), k, self.shards)
        return await self._collect(lambda: self._stream(read, timeout))

    async def exact_duplicates(
        self, *, collection: str | None = None, timeout: float | None = None
    ) -> list[ExactGroup]:
        """:meth:`Client.exact_duplicates <permindex.client.Client.exact_duplicates>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.add([("a", 7), ("b", 7)])
            ...         return await client.exact_duplicates()
            >>> asyncio.run(main())
            [ExactGroup(fingerprint=7, keys=['a', 'b'])]
        """
        read = exact_duplicates_read(self._collection_of(collection), self.shards)
        return await self._collect(lambda: self._stream(read, timeout))

    def _collection_of(self, collection: str | None) -> str:
        return self.collection if collection is None else collection

    # ---- collections (on every shard)

    async def create_collection(
        self,
        name: str,
        *,
        k: int | None = None,
        blocks: int | None = None,
        leading: int | None = None,
        shingle_size: int | None = None,
        min_words: int | None = None,
        expire_after: int | None = None,
        vote: Vote | None = None,
        method: str | None = None,
        threshold: float | None = None,
        permutations: int | None = None,
        verify: str | None = None,
    ) -> CollectionInfo:
        """:meth:`Client.create_collection <permindex.client.Client.create_collection>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         info = await client.create_collection("crawl-2024", k=3)
            ...         return info.name, info.count
            >>> asyncio.run(main())
            ('crawl-2024', 0)
        """
        plan = operations.create_collection(
            self._target(),
            name,
            k=k,
            blocks=blocks,
            leading=leading,
            shingle_size=shingle_size,
            min_words=min_words,
            expire_after=expire_after,
            vote=vote,
            method=method,
            threshold=threshold,
            permutations=permutations,
            verify=verify,
        )
        return await self._run(plan)

    async def list_collections(self) -> list[CollectionInfo]:
        """:meth:`Client.list_collections <permindex.client.Client.list_collections>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         return [info.name for info in await client.list_collections()]
            >>> asyncio.run(main())
            ['default']
        """
        return await self._run(operations.list_collections(self._target()))

    async def describe_collection(self, name: str) -> CollectionInfo:
        """:meth:`Client.describe_collection <permindex.client.Client.describe_collection>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         return (await client.describe_collection("default")).k
            >>> asyncio.run(main())
            3
        """
        return await self._run(operations.describe_collection(self._target(), name))

    async def drop_collection(self, name: str) -> int:
        """:meth:`Client.drop_collection <permindex.client.Client.drop_collection>`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import asyncio
            >>> import permindex
            >>> async def main():
            ...     async with permindex.AsyncClient(address) as client:
            ...         await client.create_collection("old")
            ...         await client.use("old").add([("a", 0)])
            ...         return await client.drop_collection("old")
            >>> asyncio.run(main())
            1
        """
        return await self._run(operations.drop_collection(self._target(), name))
