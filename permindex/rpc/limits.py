"""What clients may hold: the streams open at once (in all and per client IP address), the
unary calls served at once, and how long a stream may sit idle (:class:`CallLimits`, a call
layer of :mod:`permindex.rpc.behaviors`); and the closing of idle streams at shutdown
(:meth:`CallLimits.close`).

The rules (docs/operations/limits.md says what a client sees):

- A *stream* is a call with a request or a response stream (Ingest, QueryColumns, Pairs,
  Clusters, Flags, ExactDuplicates, Export, ``grpc.health.v1.Health/Watch``, reflection). Past
  ``max_streams`` open streams in all, or ``max_streams_per_address`` from one client address
  (whatever its port; an IPv6 address counted by its /64), a new stream is refused at once with
  RESOURCE_EXHAUSTED; nothing queues. Health watches, open to callers without a token, are
  counted in a pool of ``max_streams`` of their own, so they cannot take the data streams'.
- A *unary call* (one request, one response) is never counted with the streams: with any number
  of streams open, unary calls are admitted. Past ``max_unary`` unary calls served at once a new
  one is refused with RESOURCE_EXHAUSTED; health checks (``Health/Check``) are always admitted.
- A stream is *idle* while the server waits for its client: for its next request message, or
  for it to take the next response message (flow control). Idle for ``idle_seconds`` (0: no
  limit), it is closed with DEADLINE_EXCEEDED. A health watch waiting for a status change is not
  idle in this sense (watches are long by design) but is closed at shutdown.
- At shutdown (:meth:`CallLimits.close`) every stream idle at that moment or later is closed with
  UNAVAILABLE at once; work already received (a batch being applied, a join running) finishes,
  and the answer to it is still sent (within a second) before the stream is closed; new calls
  but health checks are refused with UNAVAILABLE. A closed stream whose client does not take
  its messages cannot get its status out (it queues behind them): once no call is at work any
  more (:meth:`CallLimits.wait_idle`), the server gives what is left a second, then cancels
  it, instead of waiting out its grace period.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from permindex.rpc.behaviors import Behavior, Send, rewrap

__all__ = ["HEALTH_CHECK", "HEALTH_WATCH", "CallLimits", "StreamClosed", "client_address"]

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    _Handler = grpc.RpcMethodHandler[Any, Any]
else:
    _Handler = Any

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
#: At shutdown, how long an answer to work already done may take to go out, seconds.
_LAST_SEND_SECONDS = 1.0
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
_T = TypeVar("_T")


def client_address(peer: str) -> str:
    """The client's address (no port) of a gRPC peer string, as the per-address limit counts
    it: ``ipv4:127.0.0.1:5000`` -> ``127.0.0.1``; an IPv6 address by its /64 network (one host
    commonly has a whole /64): ``ipv6:[2001:db8::1]:5000`` -> ``2001:db8::/64``, ``::1`` as
    itself; other forms (``unix:...``) whole."""
    kind, _, rest = peer.partition(":")
    if kind == "ipv4":
        return rest.rpartition(":")[0] or rest
    if kind == "ipv6":
        host = (rest.rpartition(":")[0] if rest.startswith("[") else rest).strip("[]")
        host = host.partition("%")[0]  # a zone index
        try:
            address = ipaddress.IPv6Address(host)
        except ValueError:
            return host or rest
        if address.is_loopback or address.ipv4_mapped is not None:
            return str(address.ipv4_mapped or address)
        return str(ipaddress.IPv6Network((address, 64), strict=False))
    return peer


class StreamClosed(Exception):
    """Raised inside a stream the server closes (idle, or shutting down): the status to end it
    with."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class _Waits:
    """The idle bound of one stream's waits for its client (:meth:`CallLimits.wait_for_client`):
    one timer per stream, moved only when it fires, instead of one per wait (a stream waits
    twice for every message). A wait notes when it began; the timer, when it fires, closes the
    stream if the wait in progress began ``idle`` seconds ago or more, else moves itself to that
    wait's deadline. Exact: a stream is closed once one wait has lasted ``idle`` seconds.
    Created, used and stopped on the event loop, in the stream's task."""

    __slots__ = ("began", "cut_short", "handle", "idle", "loop", "task", "waiting")

    def __init__(self, idle: float) -> None:
        self.loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None  # a stream's handler runs in a task of its own
        self.task = task
        self.idle = idle
        self.began = 0.0
        #: Whether a wait is in progress, and whether it was cut short (:meth:`cut`).
        self.waiting = False
        self.cut_short = False
        self.handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        """A wait begins (armed with a timer when none is)."""
        self.began = self.loop.time()
        self.waiting = True
        self.cut_short = False
        if self.handle is None and self.idle:
            self.handle = self.loop.call_at(self.began + self.idle, self._fire)

    def _fire(self) -> None:
        self.handle = None
        if not self.waiting:
            return  # the next wait arms a timer again
        due = self.began + self.idle
        if self.loop.time() >= due:
            self.cut()
        else:
            self.handle = self.loop.call_at(due, self._fire)

    def cut(self) -> None:
        """End the wait in progress (idle for too long, or the server stopping): its task is
        cancelled, and :meth:`CallLimits.wait_for_client` turns that into the stream's status."""
        if self.waiting and not self.cut_short:
            self.cut_short = True
            self.task.cancel()

    def stop(self) -> None:
        """The stream ended: no timer left behind."""
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None


class CallLimits:
    """Admission of calls and the idle rule of streams (the module docstring gives the rules).

    Args:
        max_streams: streams open at once in all, >= 1.
        max_streams_per_address: streams open at once from one client IP address, >= 1.
        max_unary: unary calls served at once (health checks not counted), >= 1.
        idle_seconds: how long a stream may wait for its client; 0: no limit.
        on_refused: called with ``"streams"``, ``"streams_per_address"`` or ``"unary"`` for each
            refusal (the metrics' counter).
        on_idle_closed: called for each stream closed as idle.

    Counts are changed only on the event loop (no lock). Memory: one entry per open stream and
    per client address with open streams.
    """

    def __init__(
        self,
        *,
        max_streams: int,
        max_streams_per_address: int,
        max_unary: int,
        idle_seconds: float,
        on_refused: Callable[[str], None] | None = None,
        on_idle_closed: Callable[[], None] | None = None,
    ) -> None:
        self.max_streams = max_streams
        self.max_streams_per_address = max_streams_per_address
        self.max_unary = max_unary
        self.idle_seconds = idle_seconds
        self._on_refused = on_refused or (lambda what: None)
        self._on_idle_closed = on_idle_closed or (lambda: None)
        self.streams = 0
        #: Health watches open (a pool of their own, also of ``max_streams``).
        self.watches = 0
        self.unary = 0
        #: Calls (unary or stream, health checks too) whose handler is still at work: not yet
        #: returned, and not ending with a status of :class:`StreamClosed`.
        self.working = 0
        self._per_address: dict[str, int] = {}
        self._closing: asyncio.Future[None] | None = None
        #: The idle bounds of the open streams (:meth:`wait_for_client`).
        self._waits: set[_Waits] = set()

    # -- shutdown

    def _closing_future(self) -> asyncio.Future[None]:
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_future()
        return self._closing

    @property
    def closing(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closing is not None and self._closing.done()

    def close(self) -> None:
        """Close every idle stream with UNAVAILABLE, now and whenever a stream next waits for its
        client. Call on the event loop."""
        future = self._closing_future()
        if not future.done():
            future.set_result(None)
        for waits in self._waits:
            waits.cut()  # each wait for a client in progress ends with UNAVAILABLE

    async def wait_idle(self, poll: float = 0.02) -> None:
        """Return once :meth:`close` was called and no call is at work (:attr:`working` 0):
        what is still open then only sends its last message or status, or waits for a client
        that does not read. Polls every ``poll`` seconds (shutdown only)."""
        await self.wait_closing()
        while self.working:
            await asyncio.sleep(poll)

    async def wait_closing(self) -> None:
        """Return once :meth:`close` is called (health watches wait on this)."""
        await asyncio.shield(self._closing_future())

    async def wait_for_client(self, step: Awaitable[_T], what: str, waits: _Waits) -> _T:
        """Await ``step`` (a read of the next request, a send of the next response), bounded by
        the idle limit (``waits``, the stream's) and cut short by :meth:`close`.

        Raises:
            StreamClosed: DEADLINE_EXCEEDED after ``idle_seconds``; UNAVAILABLE at shutdown.
        """
        if self.closing:
            _discard(step)
            raise _shutting_down()
        task = waits.task
        cancelling = task.cancelling()
        waits.start()
        try:
            result = await step
        except asyncio.CancelledError:
            if not waits.cut_short or task.uncancel() > cancelling:
                raise  # not this bound's: the call was cancelled
            if self.closing:
                raise _shutting_down() from None
            self._on_idle_closed()
            raise StreamClosed(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"the stream was idle for {self.idle_seconds:g} s (no message {what}); "
                "the server closed it (serve --stream-idle-seconds)",
            ) from None
        finally:
            waits.waiting = False
        if waits.cut_short:  # cut as the step ended: the cancel is not this call's
            task.uncancel()
        return result

    # -- admission

    def _admit_stream(self, address: str, watch: bool) -> str | None:
        """None when a stream from ``address`` may open (and count it); else the refusal.
        Health watches, which need no token, have a pool of their own, so that they cannot
        take the places of the data streams."""
        held_in_pool = self.watches if watch else self.streams
        if held_in_pool >= self.max_streams:
            self._on_refused("streams")
            what = "health watches" if watch else "streams"
            return (
                f"too many {what} open: {held_in_pool} of at most {self.max_streams} "
                "(serve --max-streams); close idle streams or retry later"
            )
        held = self._per_address.get(address, 0)
        if held >= self.max_streams_per_address:
            self._on_refused("streams_per_address")
            return (
                f"too many streams open from {address}: {held} of at most "
                f"{self.max_streams_per_address} (serve --max-streams-per-address); close idle "
                "streams or retry later"
            )
        if watch:
            self.watches += 1
        else:
            self.streams += 1
        self._per_address[address] = held + 1
        return None

    def _release_stream(self, address: str, watch: bool) -> None:
        if watch:
            self.watches -= 1
        else:
            self.streams -= 1
        left = self._per_address[address] - 1
        if left:
            self._per_address[address] = left
        else:
            del self._per_address[address]

    def _stream(self, inner: Behavior, *, request_streaming: bool, watch: bool) -> Behavior:
        async def stream(request: Any, context: Any, send: Send) -> Any:
            if self.closing:
                await _refuse_shutting_down(context)
            address = client_address(context.peer())
            refused = self._admit_stream(address, watch)
            if refused is not None:
                log.debug("stream refused: %s", refused)
                await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, refused)
            self.working += 1
            working = True
            waits = _Waits(self.idle_seconds)
            self._waits.add(waits)
            try:
                if request_streaming:
                    request = self._requests(request, waits)

                async def send_bounded(message: Any) -> None:
                    if self.closing and request_streaming:
                        # the answer to a request already received (a batch applied) still
                        # goes out at shutdown, within a second, so that its client can count
                        # it; the next read of the stream then ends it
                        try:
                            await asyncio.wait_for(send(message), _LAST_SEND_SECONDS)
                        except TimeoutError:
                            raise _shutting_down() from None
                        return
                    await self.wait_for_client(send(message), "taken by the client", waits)

                return await inner(request, context, send if watch else send_bounded)
            except StreamClosed as closed:
                self.working -= 1
                working = False
                await context.abort(closed.code, closed.message)
            finally:
                waits.stop()
                self._waits.discard(waits)
                self.working -= working
                self._release_stream(address, watch)

        return stream

    async def _requests(self, requests: AsyncIterator[Any], waits: _Waits) -> AsyncIterator[Any]:
        iterator = requests.__aiter__()
        while True:
            try:
                request = await self.wait_for_client(iterator.__anext__(), "from the client", waits)
            except StopAsyncIteration:
                return
            yield request

    def _unary(self, inner: Behavior, *, counted: bool) -> Behavior:
        async def unary(request: Any, context: Any, send: Send) -> Any:
            if counted and self.closing:
                await _refuse_shutting_down(context)
            if counted and self.unary >= self.max_unary:
                self._on_refused("unary")
                await context.abort(
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                    f"too many calls at once: {self.unary} of at most {self.max_unary} "
                    "(serve --max-concurrent-rpcs); retry with backoff",
                )
            self.unary += counted
            self.working += 1
            try:
                return await inner(request, context, send)
            finally:
                self.unary -= counted
                self.working -= 1

        return unary

    def wrap(self, method: str, handler: _Handler) -> _Handler:
        """``handler`` of ``method`` (``/package.Service/Method``) under these limits (a
        :data:`~permindex.rpc.behaviors.Layer`)."""
        if handler.request_streaming or handler.response_streaming:
            request_streaming = bool(handler.request_streaming)
            watch = method == HEALTH_WATCH
            return rewrap(
                handler,
                lambda inner: self._stream(inner, request_streaming=request_streaming, watch=watch),
            )
        counted = method != HEALTH_CHECK
        return rewrap(handler, lambda inner: self._unary(inner, counted=counted))


def _shutting_down() -> StreamClosed:
    return StreamClosed(
        grpc.StatusCode.UNAVAILABLE,
        "the server is shutting down; retry on another server or once it is back (an Ingest: "
        "resend what was not acknowledged)",
    )


async def _refuse_shutting_down(context: Any) -> None:
    """End a call that arrived after :meth:`CallLimits.close` with UNAVAILABLE."""
    closed = _shutting_down()
    await context.abort(closed.code, closed.message)


def _discard(step: Awaitable[Any]) -> None:
    if asyncio.iscoroutine(step):
        step.close()
