"""The standard health service (``grpc.health.v1.Health``: Check, List, Watch) on the asyncio
server, with the one difference from grpcio-health-checking's reference servicer that shutdown
needs: when the server stops, every Watch is sent NOT_SERVING and then closed with UNAVAILABLE
at once (:class:`HealthService`), instead of holding the shutdown until its grace period ends.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from permindex.rpc.limits import CallLimits, StreamClosed

__all__ = ["MAX_HEALTH_REQUEST_BYTES", "NOT_SERVING", "SERVING", "HealthService", "bounded"]

#: The largest health request served (a service name of about a kilobyte): the health service
#: is open to callers without a token, so a larger one is refused (INVALID_ARGUMENT) as soon as
#: it is received, its bytes dropped, never parsed, held or echoed.
MAX_HEALTH_REQUEST_BYTES = 1024

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


class HealthService(health_pb2_grpc.HealthServicer):  # type: ignore[misc]
    """Serving status per service name (``""`` is the whole server).

    Check answers NOT_FOUND for a service never set; Watch sends the current status (or
    SERVICE_UNKNOWN), then each change, until the client leaves or the server stops
    (:meth:`CallLimits.close`): then NOT_SERVING and UNAVAILABLE. Statuses are changed on the
    event loop only (:meth:`set`, :meth:`stop_serving`).
    """

    def __init__(self, limits: CallLimits, services: tuple[str, ...]) -> None:
        self._limits = limits
        self._status: dict[str, Any] = dict.fromkeys(services, NOT_SERVING)
        self._changed = asyncio.Event()

    def set(self, service: str, status: Any) -> None:
        """Set one service's status and wake its watchers."""
        self._status[service] = status
        self._changed.set()
        self._changed = asyncio.Event()

    def set_all(self, status: Any) -> None:
        """Set every service's status."""
        for service in list(self._status):
            self.set(service, status)

    async def Check(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> health_pb2.HealthCheckResponse:
        status = self._status.get(request.service)
        if status is None:
            await context.abort(
                grpc.StatusCode.NOT_FOUND, f"unknown service {request.service[:80]!r}"
            )
        return health_pb2.HealthCheckResponse(status=status)

    async def List(self, request: Any, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        response = health_pb2.HealthListResponse()
        for service, status in self._status.items():
            response.statuses[service].status = status
        return response

    async def Watch(
        self, request: health_pb2.HealthCheckRequest, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[health_pb2.HealthCheckResponse]:
        last = None
        closing = asyncio.ensure_future(self._limits.wait_closing())
        try:
            while True:
                status = self._status.get(request.service, _UNKNOWN)
                if status != last:
                    yield health_pb2.HealthCheckResponse(status=status)
                    last = status
                if closing.done():
                    if last != NOT_SERVING:
                        yield health_pb2.HealthCheckResponse(status=NOT_SERVING)
                    raise StreamClosed(
                        grpc.StatusCode.UNAVAILABLE,
                        "the server is shutting down; watch another server or reconnect later",
                    )
                changed = asyncio.ensure_future(self._changed.wait())
                try:
                    await asyncio.wait((changed, closing), return_when=asyncio.FIRST_COMPLETED)
                finally:
                    changed.cancel()
        finally:
            closing.cancel()


def bounded(handlers: dict[str, Any]) -> dict[str, Any]:
    """The health service's method handlers (by method name) taking the request's bytes
    instead of a parsed message: a request over :data:`MAX_HEALTH_REQUEST_BYTES`, or one that
    is not a valid message, gets INVALID_ARGUMENT without a parse; the others go on to the
    handler's behaviour parsed."""
    result: dict[str, Any] = {}
    for name, handler in handlers.items():
        parse = handler.request_deserializer
        behavior = handler.unary_unary or handler.unary_stream
        options = {"request_deserializer": None, "response_serializer": handler.response_serializer}

        async def checked(data: bytes, context: Any, parse: Any = parse) -> Any:
            if len(data) > MAX_HEALTH_REQUEST_BYTES:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"a health request is at most {MAX_HEALTH_REQUEST_BYTES} bytes; this one "
                    f"has {len(data):,}",
                )
            try:
                return parse(data) if parse is not None else data
            except Exception:
                await context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, "the request is not a valid health request"
                )

        if handler.unary_unary is not None:

            async def unary(data: bytes, context: Any, behavior: Any = behavior) -> Any:
                request = await checked(data, context)
                return await behavior(request, context)

            result[name] = grpc.unary_unary_rpc_method_handler(unary, **options)
        else:

            async def stream(data: bytes, context: Any, behavior: Any = behavior) -> Any:
                request = await checked(data, context)
                async for message in behavior(request, context):
                    yield message

            result[name] = grpc.unary_stream_rpc_method_handler(stream, **options)
    return result
