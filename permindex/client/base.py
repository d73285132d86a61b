"""The plumbing every :class:`~permindex.client.Client` call goes through: the options, the one
:class:`~permindex.client.channel.Channel`, the call wrapper (errors as
:class:`~permindex.errors.ServerError`, retries of read-only calls on UNAVAILABLE with exponential
backoff) and the chunking of long inputs.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import grpc

from permindex.addresses import DEFAULT_ADDRESS
from permindex.client.batching import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE
from permindex.client.channel import Channel, Security
from permindex.errors import InvalidArgumentError, ServerError

__all__ = ["ClientBase"]

_T = TypeVar("_T")
_Self = TypeVar("_Self", bound="ClientBase")


class ClientBase:
    """A connection to a permindex server and the call wrapper (see
    :class:`~permindex.client.Client` for the arguments, which it takes unchanged).

    Raises:
        InvalidArgumentError: ``batch_size`` or ``batch_bytes`` below 1, or a client certificate
            without ``root_certificates``.
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
        security = Security(root_certificates, certificate_chain, private_key, server_name, token)
        self._channel = Channel(address, security)
        self._stub: Any = self._channel.stub
        self._metadata = self._channel.metadata

    def use(self: _Self, collection: str) -> _Self:
        """A client of the same connection whose calls name ``collection``; closing either
        closes both."""
        other = copy.copy(self)
        other.collection = collection
        return other

    def wait_ready(self, timeout: float) -> None:
        """Block until the connection is up, at most ``timeout`` seconds.

        Raises:
            ServerError: UNAVAILABLE (a ``ConnectionError``) when it is not up in time.
        """
        self._channel.wait_ready(timeout)

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled."""
        self._channel.close()

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _error(self, error: grpc.RpcError) -> ServerError:
        return self._channel.error(error)

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
