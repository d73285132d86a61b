"""The method handlers of ``permindex.v1.PermIndex``, derived from the service descriptor and
registered by us instead of by the generated ``add_PermIndexServicer_to_server``, so that a
request that is not a valid protobuf message gets INVALID_ARGUMENT with a message a user can act
on (:func:`method_handlers` gives the rules) instead of grpcio's INTERNAL.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, NoReturn, cast

import grpc
import numpy as np
from google.protobuf import message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor, ServiceDescriptor
from numpy.typing import NDArray

from permindex.errors import (
    AccessDeniedError,
    InvalidArgumentError,
    LimitExceededError,
    TokenRevokedError,
)
from permindex.v1 import index_pb2

if TYPE_CHECKING:
    from permindex.rpc.auth import Authorization, Token

    _Handler = grpc.RpcMethodHandler[Any, Any]
    _Behavior = Callable[[Any, grpc.aio.ServicerContext[Any, Any]], Any]

__all__ = [
    "MalformedRequest",
    "RequestReader",
    "add_servicer",
    "describe_malformed",
    "method_handlers",
    "tolerant_deserializer",
]

log = logging.getLogger(__name__)

#: The service whose handlers :func:`add_servicer` registers by default.
PERMINDEX_SERVICE: ServiceDescriptor = index_pb2.DESCRIPTOR.services_by_name["PermIndex"]

#: Nesting depth past which :func:`describe_malformed` stops looking (protobuf's own limit).
_MAX_DEPTH = 100


@dataclass(frozen=True)
class MalformedRequest:
    """What a :func:`tolerant_deserializer` returns for bytes that are not a valid message.

    Attributes:
        type_name: full name of the expected message type, e.g. ``permindex.v1.QueryRequest``.
        reason: the first problem found in the bytes (see :func:`describe_malformed`).
    """

    type_name: str
    reason: str

    @property
    def message(self) -> str:
        """The status message the client gets."""
        return f"the request is not a valid {self.type_name} message: {self.reason}"


class _Malformed(Exception):
    """A problem :func:`describe_malformed` found (internal)."""


def _varint(data: bytes, pos: int, end: int, what: str) -> tuple[int, int]:
    """The varint at ``data[pos:end]`` and the position after it."""
    value = 0
    for shift in range(0, 70, 7):
        if pos >= end:
            raise _Malformed(f"the bytes end inside {what} (byte {pos})")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
    raise _Malformed(f"{what} is a varint longer than 10 bytes (ending at byte {pos})")


def _check_message(
    data: bytes, start: int, end: int, descriptor: Descriptor, path: str, depth: int
) -> None:
    """Walk the fields of one message in ``data[start:end]``; raise :class:`_Malformed` at the
    first problem: a truncated field, an invalid wire type or field number, a string field that
    is not UTF-8 (in a known message field too, recursively)."""
    if depth > _MAX_DEPTH:
        raise _Malformed(f"messages nested more than {_MAX_DEPTH} deep")
    seen: dict[int, int] = {}
    pos = start
    while pos < end:
        tag_at = pos
        tag, pos = _varint(data, pos, end, f"a field tag of {path or 'the message'}")
        number, wire_type = tag >> 3, tag & 7
        if number == 0:
            raise _Malformed(f"field number 0 at byte {tag_at} (not a protobuf message?)")
        field = descriptor.fields_by_number.get(number)
        if field is None:
            name = f"{path}field {number}"
        else:
            name = path + field.name
            if field.is_repeated:
                seen[number] = seen.get(number, -1) + 1
                if field.type in (FieldDescriptor.TYPE_STRING, FieldDescriptor.TYPE_MESSAGE):
                    name += f"[{seen[number]}]"
        if wire_type == 0:
            _, pos = _varint(data, pos, end, name)
        elif wire_type in (1, 5):
            width = 8 if wire_type == 1 else 4
            if pos + width > end:
                raise _Malformed(
                    f"the bytes end inside {name} (needs {width} bytes at byte {pos}, "
                    f"{end - pos} left)"
                )
            pos += width
        elif wire_type == 2:
            length, pos = _varint(data, pos, end, f"the length of {name}")
            if pos + length > end:
                raise _Malformed(
                    f"the bytes end inside {name} (a length of {length} at byte {pos}, "
                    f"{end - pos} left)"
                )
            if field is not None and field.type == FieldDescriptor.TYPE_STRING:
                try:
                    data[pos : pos + length].decode("utf-8")
                except UnicodeDecodeError as error:
                    first, last = pos + error.start, pos + error.end - 1
                    where = f"byte {first}" if first == last else f"bytes {first}-{last}"
                    raise _Malformed(f"{name} is not valid UTF-8 ({where})") from None
            elif field is not None and field.message_type is not None:
                _check_message(data, pos, pos + length, field.message_type, name + ".", depth + 1)
            pos += length
        elif wire_type in (3, 4):
            return  # groups: not used by permindex; left to protobuf's own message
        else:
            raise _Malformed(f"invalid wire type {wire_type} in the tag at byte {tag_at}")


def _has_oneof(descriptor: Descriptor, depth: int = 0) -> bool:
    """Whether ``descriptor`` or a message type in its fields (to protobuf's nesting limit) has
    a oneof of its own (proto3 ``optional`` fields' synthetic oneofs do not count: a field
    cannot conflict with itself)."""
    if depth > _MAX_DEPTH:
        return False
    if any(not _synthetic(oneof.fields) for oneof in descriptor.oneofs):
        return True
    return any(
        field.message_type is not None and _has_oneof(field.message_type, depth + 1)
        for field in descriptor.fields
    )


def _synthetic(fields: Any) -> bool:
    """Whether a oneof of ``fields`` is a proto3 ``optional`` field's (one member only)."""
    return len(fields) == 1


def _oneof_conflict(
    data: bytes, start: int, end: int, descriptor: Descriptor, path: str, depth: int
) -> str | None:
    """The first message in ``data[start:end]`` (bytes that parse as ``descriptor``'s type) that
    carries two different members of one oneof, said as ``documents[2] sets both fingerprint
    and fingerprint_hex, ...``; None when there is none. The parser keeps the last member and
    drops the others without a word, so a client that set two (protobuf.js encodes every member
    it is given) would get an answer to a request it did not mean. Walks the nested messages
    that have oneofs; O(len(data))."""
    if depth > _MAX_DEPTH:
        return None
    members: dict[str, str] = {}
    elements: dict[int, int] = {}
    pos = start
    while pos < end:
        tag, pos = _varint(data, pos, end, "a field tag")
        number, wire_type = tag >> 3, tag & 7
        field = descriptor.fields_by_number.get(number)
        oneof = None if field is None else field.containing_oneof
        if field is not None and oneof is not None and not _synthetic(oneof.fields):
            first = members.setdefault(oneof.name, field.name)
            if first != field.name:
                return (
                    f"{path.removesuffix('.') or 'the message'} sets both {first} and "
                    f"{field.name}, two members of the oneof {oneof.name} (protobuf keeps only "
                    "the last): set one"
                )
        if wire_type == 0:
            _, pos = _varint(data, pos, end, "a varint")
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
        elif wire_type == 2:
            length, pos = _varint(data, pos, end, "a length")
            nested = None if field is None else field.message_type
            if field is not None and nested is not None and _has_oneof(nested):
                name = path + field.name
                if field.is_repeated:
                    elements[number] = elements.get(number, -1) + 1
                    name += f"[{elements[number]}]"
                found = _oneof_conflict(data, pos, pos + length, nested, name + ".", depth + 1)
                if found is not None:
                    return found
            pos += length
        else:
            return None  # groups: not used by permindex
    return None


def describe_malformed(data: bytes, descriptor: Descriptor, error: BaseException) -> str:
    """Say what is wrong with ``data``, bytes that ``descriptor``'s message class refused.

    Walks the protobuf wire format to name the first problem and where it is (``documents[2].key
    is not valid UTF-8 (byte 40)``, ``the bytes end inside fingerprints ...``, ``invalid wire
    type 7 ...``); when the walk finds nothing (a problem it does not check), the parser's own
    ``error`` message, without its "Error parsing message with type" prefix. Only called on the
    error path: its cost (linear in ``len(data)``) is never paid by a valid request.
    """
    try:
        _check_message(data, 0, len(data), descriptor, "", 0)
    except _Malformed as problem:
        return str(problem)
    except RecursionError:  # pragma: no cover - bounded by _MAX_DEPTH
        pass
    text = " ".join(str(error).split())
    _, marker, rest = text.partition(f"'{descriptor.full_name}': ")
    return (rest if marker else text) or type(error).__name__


#: The largest message whose bytes are walked in Python (:func:`describe_malformed`, the oneof
#: check) to say what is wrong with it; a larger one gets the parser's own words, and its
#: oneof check runs in a compiled kernel (:class:`RequestReader`), so that no request holds the
#: event loop for a walk of its bytes.
WALK_BYTES: Final = 64 * 1024


def tolerant_deserializer(
    descriptor: Descriptor, walk_bytes: int = WALK_BYTES
) -> Callable[[bytes], Any]:
    """A request deserializer for ``descriptor``'s message class that never raises.

    Returns:
        A function of the serialized bytes: the parsed message, or a :class:`MalformedRequest`
        when a message of at most ``walk_bytes`` sets two members of one oneof
        (:func:`_oneof_conflict`; the parser would keep the last without a word; a larger one
        is checked by :class:`RequestReader`), or when the parser raises anything
        (``google.protobuf.message.DecodeError`` for truncated or garbage bytes and for a
        string field that is not UTF-8, whichever protobuf backend raises what for them:
        parsing is a pure function of the bytes, so any exception of it is about the bytes;
        the problem described by :func:`describe_malformed` up to ``walk_bytes``, in the
        parser's words above).
    """
    parse = message_factory.GetMessageClass(descriptor).FromString
    type_name = descriptor.full_name
    has_oneof = _has_oneof(descriptor)

    def deserialize(data: bytes) -> Any:
        try:
            message = parse(data)
        except Exception as error:
            if len(data) > walk_bytes:
                text = " ".join(str(error).split())[:200] or type(error).__name__
                return MalformedRequest(type_name, f"protobuf's parser refused it: {text}")
            return MalformedRequest(type_name, describe_malformed(data, descriptor, error))
        # Two members of one oneof (a Document's fingerprint and fingerprint_hex): the parser
        # kept the last, so the message re-encodes shorter than it came. Only then are the
        # bytes walked (explicit default values, which protobuf.js sends when given them, are
        # the other cause of a shorter re-encoding).
        if has_oneof and len(data) <= walk_bytes and message.ByteSize() != len(data):
            conflict = _oneof_conflict(data, 0, len(data), descriptor, "", 0)
            if conflict is not None:
                return MalformedRequest(type_name, conflict)
        return message

    return deserialize


def _oneof_members(descriptor: Descriptor) -> tuple[int, NDArray[np.uint8], str] | None:
    """For :func:`permindex.rpc.wire_kernels.oneof_conflict`: the top-level field whose
    messages have a oneof (AddRequest's documents), the members of that oneof by field number,
    and the submessage's name; None when no such field."""
    for field in descriptor.fields:
        inner = field.message_type
        if field.type != FieldDescriptor.TYPE_MESSAGE or inner is None:
            continue
        groups = [oneof for oneof in inner.oneofs if not _synthetic(oneof.fields)]
        if groups:
            numbers = [member.number for member in groups[0].fields]
            members = np.zeros(max(numbers) + 1, dtype=np.uint8)
            members[numbers] = 1
            return field.number, members, f"{field.name} ({inner.full_name})"
    return None


def _field_kinds(descriptor: Descriptor) -> NDArray[np.uint8] | None:
    """The kind of each field number of ``descriptor`` for
    :func:`permindex.rpc.wire_kernels.count_items` (its repeated fields), or None when it has
    no repeated field."""
    from permindex.rpc import wire_kernels as wire

    packed = {
        FieldDescriptor.TYPE_FIXED64: wire.PACKED_64,
        FieldDescriptor.TYPE_SFIXED64: wire.PACKED_64,
        FieldDescriptor.TYPE_DOUBLE: wire.PACKED_64,
        FieldDescriptor.TYPE_FIXED32: wire.PACKED_32,
        FieldDescriptor.TYPE_SFIXED32: wire.PACKED_32,
        FieldDescriptor.TYPE_FLOAT: wire.PACKED_32,
    }
    repeated = [field for field in descriptor.fields if field.is_repeated]
    if not repeated:
        return None
    kinds = np.zeros(max(field.number for field in repeated) + 1, dtype=np.uint8)
    for field in repeated:
        if field.type in (
            FieldDescriptor.TYPE_STRING,
            FieldDescriptor.TYPE_BYTES,
            FieldDescriptor.TYPE_MESSAGE,
        ):
            kinds[field.number] = wire.EACH
        else:
            kinds[field.number] = packed.get(field.type, wire.PACKED_VARINT)
    return kinds


class RequestReader:
    """Turns a request's wire bytes into its message: sized first, then parsed.

    A message of more bytes than ``max_batch`` (fewer cannot hold more items than that) is
    first walked by :func:`permindex.rpc.wire_kernels.count_items` in a worker thread, without
    the GIL, which counts the items of every repeated top-level field (keys, documents,
    fingerprints), and all other fields together (unknown ones included), and stops at the
    first count past ``max_batch``: such a request is refused
    (:class:`~permindex.errors.LimitExceededError`, RESOURCE_EXHAUSTED) after reading at most
    about ``max_batch`` items of it, never parsed; bytes that are not protobuf are reported
    (:class:`MalformedRequest`) without a parse too. Only then does protobuf parse the message
    (:func:`tolerant_deserializer`), holding the GIL for a time bounded by ``max_batch`` items.
    """

    def __init__(self, descriptor: Descriptor, max_batch: int) -> None:
        self.parse = tolerant_deserializer(descriptor)
        self.type_name = descriptor.full_name
        self.max_batch = max_batch
        self.kinds = _field_kinds(descriptor)
        self.names = {field.number: field.name for field in descriptor.fields}
        self.oneof = _oneof_members(descriptor)

    async def read(self, data: bytes) -> Any:
        """The message of ``data``, or a :class:`MalformedRequest`.

        Raises:
            LimitExceededError: a repeated field of more than ``max_batch`` items.
        """
        if len(data) > self.max_batch:
            from permindex.rpc import wire_kernels as wire

            kinds = self.kinds if self.kinds is not None else np.zeros(1, dtype=np.uint8)
            counts = np.zeros(kinds.size, dtype=np.int64)
            buffer = np.frombuffer(data, dtype=np.uint8)
            outcome = await asyncio.to_thread(
                wire.count_items, buffer, kinds, counts, self.max_batch
            )
            if outcome == wire.OVER_LIMIT:
                number = int(counts.argmax())
                what = self.names.get(number, "items") if number else "fields"
                raise LimitExceededError(
                    f"more than {self.max_batch:,} {what} in one "
                    f"request; the server's limit is {self.max_batch:,} (max_batch): split "
                    "the request (permindex ingest --batch-size, the Client's batch_size)",
                    limit=self.max_batch,
                    actual=int(counts[number]),
                )
            if outcome >= 0:
                return MalformedRequest(
                    self.type_name, f"the bytes at {outcome} are not a valid protobuf field"
                )
        message = self.parse(data)
        if (
            self.oneof is not None
            and len(data) > WALK_BYTES
            and not isinstance(message, MalformedRequest)
            and message.ByteSize() != len(data)
        ):
            from permindex.rpc import wire_kernels as wire

            outer, members, name = self.oneof
            buffer = np.frombuffer(data, dtype=np.uint8)
            at = await asyncio.to_thread(wire.oneof_conflict, buffer, outer, members)
            if at >= 0:
                return MalformedRequest(
                    self.type_name,
                    f"an item of {name} at byte {at} sets two members of its oneof (the "
                    "parser would keep the last)",
                )
        return message


@dataclass(frozen=True)
class _Gate:
    """What a request goes through before its behaviour: the reader of its bytes, and, on a
    server with tokens, the scope check of the collection it names."""

    method: str  # the full name, /permindex.v1.PermIndex/Query
    reader: RequestReader
    authorization: Authorization | None

    def token(self, context: grpc.aio.ServicerContext[Any, Any]) -> Token | None:
        """The call's token (None on a server without tokens).

        Raises:
            TokenRevokedError: the token is no longer in force (removed since the call began).
            AccessDeniedError: its role no longer allows the method (lowered since then).
        """
        if self.authorization is None:
            return None
        token = self.authorization.token_of(context.invocation_metadata())
        if token is None:
            raise TokenRevokedError(
                "the token is no longer in force (it was removed from the token file)"
            )
        refusal = self.authorization.role_refusal(self.method, token)
        if refusal is not None:  # its role was lowered while the call ran
            raise AccessDeniedError(refusal.message)
        return token

    def check_scope(
        self, request: Any, token: Token | None, context: grpc.aio.ServicerContext[Any, Any]
    ) -> None:
        """Raise AccessDeniedError when ``token`` does not cover the request's collection."""
        if self.authorization is None or token is None:
            return
        refusal = self.authorization.scope(self.method, request, token)
        if refusal is not None:
            log.info("%s from %s refused: PERMISSION_DENIED: %s", self.method, context.peer(),
                     refusal.message)  # fmt: skip
            raise AccessDeniedError(refusal.message)

    def filter(self, response: Any, token: Token | None) -> Any:
        """The response as the token may see it."""
        if self.authorization is None or token is None:
            return response
        return self.authorization.filter(self.method, response, token)


async def _refuse(
    context: grpc.aio.ServicerContext[Any, Any], method: str, malformed: MalformedRequest
) -> NoReturn:
    log.debug("%s refused: INVALID_ARGUMENT: %s", method, malformed.message)
    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, malformed.message)


async def _admit(gate: _Gate, data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
    """The request of a unary call's bytes, sized, parsed and in the token's scope, with its
    token; the call aborted with the status of whatever stops it."""
    try:
        token = gate.token(context)
        request = await gate.reader.read(data)
        if isinstance(request, MalformedRequest):
            await _refuse(context, gate.method, request)
        gate.check_scope(request, token, context)
    except LimitExceededError as error:
        log.debug("%s refused: RESOURCE_EXHAUSTED: %s", gate.method, error)
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(error))
    except TokenRevokedError as error:
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, str(error))
    except AccessDeniedError as error:
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(error))
    return request, token


class _CheckedRequests(AsyncIterator[Any]):
    """A request iterator over a stream's wire bytes: each message sized, parsed and checked
    against the token's scope (:class:`_Gate`). At the first malformed message it records it
    and raises InvalidArgumentError; a message over the batch limit raises LimitExceededError,
    one outside the token's collections AccessDeniedError -- the servicer turns each into its
    status like any other refused request."""

    def __init__(
        self,
        requests: AsyncIterator[Any],
        gate: _Gate,
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        self._requests = requests.__aiter__()
        self._gate = gate
        self._context = context
        self.token: Token | None = None
        self.malformed: MalformedRequest | None = None

    async def __anext__(self) -> Any:
        data = await self._requests.__anext__()
        request = await self._gate.reader.read(data)
        if isinstance(request, MalformedRequest):
            self.malformed = request
            raise InvalidArgumentError(request.message, request.type_name)
        self.token = self._gate.token(self._context)
        self._gate.check_scope(request, self.token, self._context)
        return request


def _checking_unary_request(gate: _Gate, behavior: _Behavior) -> _Behavior:
    """Wrap a unary-request, unary-response behaviour: the request is sized, parsed and
    checked (:func:`_admit`) before it runs, the response filtered for the token."""

    async def handle(data: bytes, context: grpc.aio.ServicerContext[Any, Any]) -> Any:
        request, token = await _admit(gate, data, context)
        return gate.filter(await behavior(request, context), token)

    return handle


def _checking_unary_stream(gate: _Gate, behavior: _Behavior) -> _Behavior:
    """Wrap a unary-request, response-streaming behaviour (an async generator) the same way."""

    async def handle(
        data: bytes, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        request, _token = await _admit(gate, data, context)
        async for response in behavior(request, context):
            yield response

    return handle


def _checking_stream_stream(gate: _Gate, behavior: _Behavior) -> _Behavior:
    """Wrap a bidirectional behaviour (an async generator): the responses to the messages
    before a malformed one are sent, then the stream ends with INVALID_ARGUMENT."""

    async def handle(
        request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        requests = _CheckedRequests(request_iterator, gate, context)
        try:
            async for response in behavior(requests, context):
                yield response
        except Exception:
            if requests.malformed is not None:
                await _refuse(context, gate.method, requests.malformed)
            raise
        if requests.malformed is not None:
            await _refuse(context, gate.method, requests.malformed)

    return handle


def _serializer(descriptor: Descriptor) -> Callable[[Any], bytes]:
    """Serializes a response message; a response already encoded (bytes, as the bulk answers of
    :mod:`permindex.rpc.wire` are) is sent as it is."""
    serialize = message_factory.GetMessageClass(descriptor).SerializeToString

    def serializer(message: Any) -> bytes:
        if isinstance(message, bytes):
            return message
        result: bytes = serialize(message)
        return result

    return serializer


def method_handlers(
    servicer: object,
    service: ServiceDescriptor = PERMINDEX_SERVICE,
    *,
    max_batch: int = 100_000,
    authorization: Authorization | None = None,
) -> dict[str, _Handler]:
    """The method handlers of every RPC of ``service``, keyed by method name (``"Query"``).

    The handler table is derived from the service's descriptor: every RPC of
    ``permindex/v1/index.proto`` gets the servicer's method of the same name, its request and
    response message classes, and the handler kind of its ``stream`` flags (unary-unary,
    unary-stream, stream-stream), so a new RPC is picked up without listing it here.

    gRPC hands each handler the request's wire bytes (no deserializer): a
    :class:`RequestReader` sizes them against ``max_batch`` (RESOURCE_EXHAUSTED past it,
    without a parse) and parses them; bytes that do not parse (a truncated or garbage message,
    a string field that is not UTF-8) give a :class:`MalformedRequest` instead of an exception,
    and

    - for a unary request, the behaviour aborts with INVALID_ARGUMENT before the servicer sees it;
    - for a request stream (Ingest, QueryColumns), the servicer reads the messages before the
      malformed one as usual (each is applied and acknowledged), and the request iterator then
      raises :class:`~permindex.errors.InvalidArgumentError`, which ends the stream with
      INVALID_ARGUMENT.

    The status message names the message type and the first problem found in the bytes, e.g.
    ``the request is not a valid permindex.v1.AddRequest message: documents[0].key is not valid
    UTF-8 (byte 5)``. With ``authorization`` (a server with tokens), each request's collection
    is checked against the call's token (PERMISSION_DENIED outside its collections) and the
    responses of ListCollections and Stats are narrowed to it
    (:class:`~permindex.rpc.auth.Authorization`); the token itself and its role were checked
    from the call's metadata before any byte of the request was read. Messages over the
    server's size limit are refused by gRPC itself (RESOURCE_EXHAUSTED) before any of this runs.

    Raises:
        AttributeError: ``servicer`` lacks a method of the service.
    """
    handlers: dict[str, _Handler] = {}
    for method in service.methods:
        behavior = getattr(servicer, method.name)
        gate = _Gate(
            f"/{service.full_name}/{method.name}",
            RequestReader(method.input_type, max_batch),
            authorization,
        )
        options: dict[str, Any] = {
            "request_deserializer": None,
            "response_serializer": _serializer(method.output_type),
        }
        if method.client_streaming and not method.server_streaming:
            raise TypeError(f"{method.name}: request-streaming, unary-response RPCs are not used")
        if method.client_streaming:
            checked = _checking_stream_stream(gate, behavior)
            handler: Any = grpc.stream_stream_rpc_method_handler(checked, **options)
        elif method.server_streaming:
            checked = _checking_unary_stream(gate, behavior)
            handler = grpc.unary_stream_rpc_method_handler(checked, **options)
        else:
            checked = _checking_unary_request(gate, behavior)
            handler = grpc.unary_unary_rpc_method_handler(checked, **options)
        handlers[method.name] = cast("_Handler", handler)
    return handlers


def add_servicer(
    servicer: object,
    server: Any,
    service: ServiceDescriptor = PERMINDEX_SERVICE,
    *,
    max_batch: int = 100_000,
    authorization: Authorization | None = None,
) -> None:
    """Register ``servicer`` for ``service`` on ``server`` with :func:`method_handlers`: as a
    generic handler and as registered method handlers, as the generated
    ``add_PermIndexServicer_to_server`` does. Call before the server starts.

    Raises:
        AttributeError: ``servicer`` lacks a method of the service.
    """
    handlers = method_handlers(servicer, service, max_batch=max_batch, authorization=authorization)
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler(service.full_name, handlers),)
    )
    # not in the typing stubs yet; present since grpcio 1.63 (the generated code needs 1.85)
    cast("Any", server).add_registered_method_handlers(service.full_name, handlers)
