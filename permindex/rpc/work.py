"""Index work in the server's executor, off the event loop (:class:`Work`): each function runs in
a worker thread and hands its outcome back to the loop with one ``call_soon_threadsafe``; a call
cancelled meanwhile sets its stop event and waits until the work has ended, so that work its
client gave up on cannot pile up in the executor behind the call limits' backs.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Executor
from typing import Any, TypeVar, cast

__all__ = ["Work", "read_outcome"]

_T = TypeVar("_T")


def read_outcome(future: asyncio.Future[Any]) -> None:
    """Mark a done future's exception as read (no "exception was never retrieved" log)."""
    if not future.cancelled():
        future.exception()


class _Job:
    """One :meth:`Work.run`: ``outcome`` (a future of the event loop) gets the result or the
    exception of the function run in a worker thread."""

    __slots__ = ("abandoned", "done", "loop", "on_done", "outcome")

    def __init__(self, loop: asyncio.AbstractEventLoop, on_done: Callable[[], None]) -> None:
        self.loop = loop
        #: Called on the loop once the function has returned or raised.
        self.on_done = on_done
        self.outcome: asyncio.Future[Any] = loop.create_future()
        #: Set on the loop once the function has returned or raised.
        self.done = False
        #: Set when the awaiting call was cancelled (:meth:`finished`).
        self.abandoned = False

    def run(self, function: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """In a worker thread: ``function(*args)``, its outcome handed to the loop."""
        try:
            result, error = function(*args), None
        except BaseException as raised:  # raised again in the awaiting task
            result, error = None, raised
        # RuntimeError: the loop is closed, so nothing awaits the outcome any more
        with contextlib.suppress(RuntimeError):
            self.loop.call_soon_threadsafe(self._settle, result, error)

    def _settle(self, result: Any, error: BaseException | None) -> None:
        self.done = True
        self.on_done()
        if self.outcome.done():  # cancelled with the call that awaited it
            return
        if self.abandoned:  # what the work raised (CallCancelledError, most often) is dropped
            self.outcome.set_result(None)
        elif error is None:
            self.outcome.set_result(result)
        else:
            self.outcome.set_exception(error)

    async def finished(self) -> None:
        """After the awaiting call was cancelled: wait until the function has ended."""
        if self.done:
            read_outcome(self.outcome)  # it ended before the cancel reached the call
            return
        self.abandoned = True
        self.outcome = self.loop.create_future()
        await asyncio.wait((self.outcome,))


class Work:
    """Runs index work in the server's executor, never on the event loop.

    ``stop`` events let long work end early: when the awaiting call is cancelled (the client
    went away, its deadline passed, the server stops past its grace), the event is set, and the
    join and the batch lookups, which check it between chunks, raise CallCancelledError soon
    after; the call ends (and frees its place under the limits) only then, so the work queued in
    the executor stays bounded by the limits."""

    def __init__(self, executor: Executor) -> None:
        self.executor = executor
        #: Functions submitted and not yet ended (changed on the event loop only).
        self.running = 0

    def _ended(self) -> None:
        self.running -= 1

    async def run(
        self, function: Callable[..., _T], *args: Any, stop: threading.Event | None = None
    ) -> _T:
        """``function(*args)`` in the executor; its result or exception.

        The worker hands the outcome back with one ``call_soon_threadsafe`` (no
        ``run_in_executor``, ``wrap_future`` and ``shield``: this runs for every message of a
        stream). When the awaiting call is cancelled, ``stop`` is set and the call waits for the
        work to end; what the work raised then (CallCancelledError, most often) is dropped."""
        loop = asyncio.get_running_loop()
        job = _Job(loop, self._ended)
        self.executor.submit(job.run, function, args)
        self.running += 1
        try:
            return cast("_T", await job.outcome)
        except asyncio.CancelledError:
            if stop is not None:
                stop.set()
            # the call keeps its place under the limits until its work has stopped: work the
            # client gave up on cannot pile up in the executor behind the limits' backs
            await job.finished()
            raise

    async def each(
        self, messages: Iterator[_T], stop: threading.Event | None = None
    ) -> AsyncIterator[_T]:
        """The items of ``messages``, each made in the executor only when the one before has
        been taken (a streamed answer follows its client), ``stop`` as for :meth:`run`."""
        while (message := await self.run(next, messages, None, stop=stop)) is not None:
            yield message
