"""What both clients share besides the plans of :mod:`permindex.client.operations`: the options
(checked once, in :class:`ClientCore`), the channels (one per shard), the retry rule, and the
blocking transport (:class:`ClientBase`: a plan run with grpc's blocking stubs, errors as
:class:`~permindex.errors.ServerError`, retries of read-only calls on UNAVAILABLE with
exponential backoff, the calls of one step made concurrently). The asyncio transport is
:mod:`permindex.client.aio`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import grpc

from permindex.addresses import DEFAULT_ADDRESS
from permindex.client.batching import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE
from permindex.client.channel import Channel, Security
from permindex.client.operations import Call, Plan, Target
from permindex.client.sharding import shard_addresses
from permindex.errors import InvalidArgumentError, ServerError

__all__ = ["ClientBase", "ClientCore"]

_T = TypeVar("_T")
_Self = TypeVar("_Self", bound="ClientCore")


class ClientCore:
    """The options and channels of a client (see :class:`~permindex.client.Client` for the
    arguments, which it takes unchanged), with no I/O of its own.

    Raises:
        InvalidArgumentError: ``batch_size`` or ``batch_bytes`` below 1, a malformed address
            (or list of addresses), or a client certificate without ``root_certificates``.
    """

    #: Whether the channels are asyncio ones (``grpc.aio``).
    _aio: ClassVar[bool] = False

    def __init__(
        self,
        address: str | Sequence[str] = DEFAULT_ADDRESS,
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
        #: The shards' addresses, in shard order.
        self.addresses = shard_addresses(address)
        #: The addresses as one string (``HOST:PORT`` or ``HOST:PORT,HOST:PORT,...``).
        self.address = ",".join(self.addresses)
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.batch_size = batch_size
        self.batch_bytes = batch_bytes
        #: The collection every call names ("": the server's default collection).
        self.collection = collection
        security = Security(root_certificates, certificate_chain, private_key, server_name, token)
        self._shards = [Channel(one, security, aio=self._aio) for one in self.addresses]
        self._stub: Any = self._shards[0].stub  # the single-server streaming paths
        self._metadata = security.metadata()
        self._closed = [False]  # shared with the clients of use()

    @property
    def shards(self) -> int:
        """The number of servers the keys are spread over (1: a single server)."""
        return len(self._shards)

    def use(self: _Self, collection: str) -> _Self:
        """A client of the same connection whose calls name ``collection``; closing either
        closes both.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.create_collection("crawl-2024")
            >>> crawl = client.use("crawl-2024")
            >>> _ = crawl.add([("a", 0)])
            >>> crawl.collection, crawl.get("a"), client.get("a")
            ('crawl-2024', 0, None)
        """
        other = copy.copy(self)
        other.collection = collection
        return other

    def _target(self) -> Target:
        return Target(len(self._shards), self.collection, self.batch_size, self.batch_bytes)

    def _retry_wait(self, failure: ServerError, idempotent: bool, attempt: int) -> float | None:
        """The wait, seconds, before attempt ``attempt + 1`` of a call that failed with
        ``failure``, or None when it is not retried: only idempotent calls, only on UNAVAILABLE,
        at most ``retries`` times, waits of ``backoff`` doubling up to ``max_backoff``."""
        if not idempotent or failure.code != "UNAVAILABLE" or attempt >= self.retries:
            return None
        return float(min(self.backoff * 2**attempt, self.max_backoff))

    def _kwargs(self) -> dict[str, Any]:
        self._check_open()
        return {"timeout": self.timeout, "metadata": self._metadata}

    def _check_open(self) -> None:
        """Raises:
        InvalidArgumentError: the client was closed (grpc would raise its own ValueError or
            UsageError)."""
        if self._closed[0]:
            raise InvalidArgumentError(
                f"this client of {self.address} is closed: open a new one", self.address
            )

    def _error(self, error: grpc.RpcError, shard: int = 0) -> ServerError:
        return self._shards[shard].error(error)


class ClientBase(ClientCore):
    """:class:`ClientCore` with the blocking transport: plans run with grpc's blocking stubs."""

    def wait_ready(self, timeout: float) -> None:
        """Block until every shard's connection is up, at most ``timeout`` seconds each.

        Raises:
            ServerError: UNAVAILABLE (a ``ConnectionError``) when one is not up in time.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> client.wait_ready(timeout=10)
            >>> client.stats().count
            0
        """
        for channel in self._shards:
            channel.wait_ready(timeout)

    def close(self) -> None:
        """Close the channels; calls in flight are cancelled; a later call raises
        :class:`~permindex.errors.InvalidArgumentError`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> with permindex.Client(address) as client:  # closed at the end of the block
            ...     client.get("a")
            >>> client.get("a")
            Traceback (most recent call last):
            ...
            permindex.errors.InvalidArgumentError: this client of ... is closed: open a new one
        """
        self._closed[0] = True
        for channel in self._shards:
            channel.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _call(
        self, function: Callable[[], _T], *, idempotent: bool, shard: int = 0, attempt: int = 0
    ) -> _T:
        """Run ``function`` (one RPC to ``shard``, fully consumed); RpcError becomes
        ServerError, and an idempotent call answered UNAVAILABLE is retried with exponential
        backoff (:meth:`_retry_wait`), counting from ``attempt``."""
        while True:
            try:
                return function()
            except grpc.RpcError as error:
                failure = self._error(error, shard)
            wait = self._retry_wait(failure, idempotent, attempt)
            if wait is None:
                raise failure
            attempt += 1
            time.sleep(wait)

    def _run(self, plan: Plan[_T]) -> _T:
        """The result of ``plan``, its calls made here (:meth:`_execute`); a failed step is
        thrown into the plan."""
        try:
            calls = next(plan)
            while True:
                try:
                    replies = self._execute(calls)
                except BaseException as error:
                    calls = plan.throw(error)
                else:
                    calls = plan.send(replies)
        except StopIteration as stop:
            result: _T = stop.value
            return result
        finally:
            plan.close()

    def _execute(self, calls: list[Call]) -> list[Any]:
        """The replies of ``calls``: one is made in this thread; several concurrently (grpc
        futures), each retried by itself, and the first failure raised once all have ended (so
        no write is left in flight)."""

        def invoke(call: Call) -> Callable[[], Any]:
            method = getattr(self._shards[call.shard].stub, call.rpc)
            return lambda: method(call.request, **self._kwargs())

        if len(calls) == 1:
            (call,) = calls
            return [self._call(invoke(call), idempotent=call.idempotent, shard=call.shard)]
        futures = [
            getattr(self._shards[c.shard].stub, c.rpc).future(c.request, **self._kwargs())
            for c in calls
        ]
        replies: list[Any] = []
        failure: ServerError | None = None
        try:
            for call, future in zip(calls, futures, strict=True):
                try:
                    replies.append(future.result())
                    continue
                except grpc.RpcError as error:
                    first = self._error(error, call.shard)
                wait = self._retry_wait(first, call.idempotent, 0)
                if wait is None or failure is not None:
                    failure = failure or first
                    continue
                time.sleep(wait)
                try:
                    replies.append(
                        self._call(invoke(call), idempotent=True, shard=call.shard, attempt=1)
                    )
                except ServerError as error:
                    failure = error
        finally:
            for future in futures:
                future.cancel()  # a no-op once done
        if failure is not None:
            raise failure
        return replies

    def _chunks(self, items: Sequence[_T]) -> Iterator[Sequence[_T]]:
        for start in range(0, len(items), self.batch_size):
            yield items[start : start + self.batch_size]
