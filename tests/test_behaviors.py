"""The call layers' one shape for a response stream (:func:`permindex.rpc.behaviors.rewrap`):
an async-generator behaviour is closed when its stream ends or fails, and a call coroutine that
is closed instead of awaited (what gRPC does to a call it drops, or the garbage collector to an
abandoned one) closes without an error of its own."""

from __future__ import annotations

import asyncio
import gc
import sys
import warnings
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from permindex.rpc.behaviors import Behavior, rewrap


class _Context:
    """Stands in for a grpc.aio servicer context: ``write`` records or fails."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.written: list[int] = []
        self.fail_at = fail_at

    async def write(self, message: int) -> None:
        if self.fail_at is not None and len(self.written) == self.fail_at:
            raise ConnectionError("the client went away")
        self.written.append(message)


def _handler(events: list[str], pause: asyncio.Event | None = None) -> Any:
    async def numbers(request: int, context: Any) -> AsyncIterator[int]:
        try:
            for i in range(request):
                if pause is not None:
                    await pause.wait()
                yield i
        finally:
            events.append("closed")

    def identity(behavior: Behavior) -> Behavior:
        return behavior

    return rewrap(grpc.unary_stream_rpc_method_handler(numbers), identity)


def test_a_stream_sends_every_message_and_closes_its_generator() -> None:
    events: list[str] = []
    context = _Context()
    asyncio.run(_handler(events).unary_stream(5, context))
    assert context.written == [0, 1, 2, 3, 4] and events == ["closed"]


def test_a_failed_send_closes_the_generator_and_raises() -> None:
    events: list[str] = []
    context = _Context(fail_at=2)
    with pytest.raises(ConnectionError):
        asyncio.run(_handler(events).unary_stream(5, context))
    assert context.written == [0, 1] and events == ["closed"]


def test_a_call_closed_while_its_generator_waits_closes_cleanly() -> None:
    """The coroutine is closed while the generator's ``__anext__`` is pending (before the fix:
    ``RuntimeError: aclose(): asynchronous generator is already running``, reported as an
    unraisable exception when the garbage collector did the closing)."""
    events: list[str] = []

    async def main() -> None:
        pause = asyncio.Event()
        call = _handler(events, pause).unary_stream(5, _Context())
        step = call.send(None)  # suspended inside the generator, at pause.wait()
        assert step is not None
        call.close()

    unraisable: list[Any] = []
    hook = sys.unraisablehook
    sys.unraisablehook = unraisable.append
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            asyncio.run(main())
            gc.collect()
    finally:
        sys.unraisablehook = hook
    assert unraisable == []
