"""Rewrapping the behaviour of a ``grpc.aio`` method handler, for the server's call layers
(:mod:`permindex.rpc.limits`, :mod:`permindex.rpc.auth`, :mod:`permindex.rpc.metrics`), and
:class:`ServiceHandlers`, which collects every service's handlers so that the layers are applied
once, when the server is built.

The layers are not grpc.aio interceptors: an interceptor runs for every call and builds the
handler anew each time, a cost every unary call pays (benchmarks/README.md has the figure);
wrapped once at registration, a call pays only the layers' coroutine frames.

A grpc.aio behaviour is a coroutine function (unary response) or, for a response stream, either
an async generator function (it yields messages) or a coroutine function that writes them with
``context.write``. :func:`rewrap` gives every layer one shape to wrap: a coroutine function
``(request_or_iterator, context, send) -> response | None`` where ``send(message)`` is awaited
for each message of a response stream, so a wrapper sees each message go out (and how long the
client takes to take it).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, cast

import grpc

__all__ = ["Behavior", "Layer", "Send", "ServiceHandlers", "kind_of", "refusal", "rewrap"]

if TYPE_CHECKING:
    from permindex.rpc.auth import Authorization

    _Handler = grpc.RpcMethodHandler[Any, Any]
else:
    _Handler = Any

#: Sends one message of a response stream.
Send = Callable[[Any], Awaitable[None]]
#: The one shape :func:`rewrap` hands to a wrapper: (request or request iterator, context, send).
Behavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any], Send], Awaitable[Any]]
#: A call layer: (full method name ``/package.Service/Method``, handler) -> the wrapped handler.
Layer = Callable[[str, "_Handler"], "_Handler"]


def kind_of(handler: _Handler) -> str:
    """``unary_unary``, ``unary_stream``, ``stream_unary`` or ``stream_stream``."""
    request = "stream" if handler.request_streaming else "unary"
    response = "stream" if handler.response_streaming else "unary"
    return f"{request}_{response}"


def _inner(handler: _Handler) -> Behavior:
    """The handler's behaviour in the one shape of :data:`Behavior`."""
    kind = kind_of(handler)
    behavior = getattr(handler, kind)
    if not handler.response_streaming:

        async def unary(request: Any, context: Any, send: Send) -> Any:
            return await behavior(request, context)

        return unary
    if inspect.isasyncgenfunction(behavior):

        async def generated(request: Any, context: Any, send: Send) -> None:
            messages = cast("Any", behavior(request, context))
            try:
                async for message in messages:
                    await send(message)
            except GeneratorExit:
                # this coroutine is being closed, not awaited (gRPC dropped the call, or it is
                # garbage-collected): nothing may be awaited now, and CPython leaves a generator
                # whose __anext__ was pending marked as running, so aclose() would raise
                raise
            except BaseException:
                await messages.aclose()
                raise
            await messages.aclose()

        return generated

    async def writing(request: Any, context: Any, send: Send) -> None:
        # a coroutine that writes with context.write itself: its messages bypass `send` (and so
        # the idle bound of each write); every stream the server registers is an async
        # generator, so none takes this path
        await behavior(request, context)

    return writing


def rewrap(handler: _Handler, wrap: Callable[[Behavior], Behavior]) -> _Handler:
    """A handler like ``handler`` (same kind, serializers) whose behaviour is ``wrap`` applied to
    the original in the :data:`Behavior` shape. A response stream is sent with
    ``context.write`` (each message through the wrapped ``send``)."""
    wrapped = wrap(_inner(handler))
    options = {
        "request_deserializer": handler.request_deserializer,
        "response_serializer": handler.response_serializer,
    }
    kind = kind_of(handler)
    if not handler.response_streaming:

        async def unary(request: Any, context: Any) -> Any:
            return await wrapped(request, context, _no_send)

        factory = (
            grpc.unary_unary_rpc_method_handler
            if kind == "unary_unary"
            else grpc.stream_unary_rpc_method_handler
        )
        return factory(unary, **options)

    async def streaming(request: Any, context: Any) -> None:
        await wrapped(request, context, context.write)

    factory = (
        grpc.unary_stream_rpc_method_handler
        if kind == "unary_stream"
        else grpc.stream_stream_rpc_method_handler
    )
    return factory(streaming, **options)


async def _no_send(message: Any) -> None:  # pragma: no cover - unary calls send nothing
    raise RuntimeError("a unary call has no response stream")


def refusal(handler: _Handler, code: grpc.StatusCode, message: str) -> _Handler:
    """A handler of the same kind as ``handler`` that only aborts with ``code`` and
    ``message`` (its behaviour never runs)."""

    def wrap(inner: Behavior) -> Behavior:
        async def refuse(request: Any, context: Any, send: Send) -> Any:
            await context.abort(code, message)

        return refuse

    return rewrap(handler, wrap)


class ServiceHandlers:
    """Every method handler of the services registered on it, by full method name.

    It stands in for the server in the generated ``add_*Servicer_to_server`` functions (health,
    reflection) and in :func:`permindex.rpc.handlers.add_servicer`, which call
    :meth:`add_generic_rpc_handlers` and :meth:`add_registered_method_handlers`; then
    :meth:`register` puts them on the real server, each wrapped by the layers.
    """

    def __init__(self) -> None:
        self.services: dict[str, dict[str, _Handler]] = {}

    def add_generic_rpc_handlers(self, generic_handlers: Any) -> None:
        """Ignored: the same handlers arrive through :meth:`add_registered_method_handlers`."""

    def add_registered_method_handlers(
        self, service_name: str, method_handlers: dict[str, _Handler]
    ) -> None:
        """Record the handlers of ``service_name``."""
        self.services[service_name] = dict(method_handlers)

    def register(
        self,
        server: grpc.aio.Server,
        layers: list[Layer],
        *,
        authorization: Authorization | None = None,
        refusal_layer: Layer | None = None,
    ) -> None:
        """Add every recorded service to ``server``, each handler wrapped by ``layers`` (the
        first one outermost), as a generic handler and as registered method handlers.

        With ``authorization`` (a server with tokens) one generic handler serves every method
        instead (:class:`~permindex.rpc.auth.AuthorizingHandler`): gRPC asks it for each call's
        handler with the call's metadata before reading the request, and a call without a
        valid token gets a handler that refuses it without reading its message (wrapped by
        ``refusal_layer``, the metrics); no registered method handlers then, since gRPC looks
        those up without asking."""
        every: dict[str, _Handler] = {}
        for service, handlers in self.services.items():
            wrapped: dict[str, _Handler] = {}
            for name, handler in handlers.items():
                method = f"/{service}/{name}"
                for layer in reversed(layers):
                    handler = layer(method, handler)
                wrapped[name] = handler
                every[method] = handler
            if authorization is None:
                server.add_generic_rpc_handlers(
                    (grpc.method_handlers_generic_handler(service, wrapped),)
                )
                cast("Any", server).add_registered_method_handlers(service, wrapped)
        if authorization is not None:
            from permindex.rpc.auth import AuthorizingHandler

            server.add_generic_rpc_handlers(
                (AuthorizingHandler(every, authorization, refusal_layer),)
            )
