"""Request bytes that are not a valid protobuf message for their RPC, sent to a real server through
a generic channel call (no serializer: the bytes go out as they are): each gets INVALID_ARGUMENT
naming the message type and the problem (never grpcio's INTERNAL "Exception deserializing
request!"), changes nothing, is counted by the metrics with its status, and leaves the server
serving valid requests. In a request stream, the messages before the malformed one are applied
and acknowledged."""

from __future__ import annotations

import asyncio
import struct
import urllib.request
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import StartServer, make_stub
from google.protobuf import message_factory
from prometheus_client.parser import text_string_to_metric_families

from permindex.index.hamming import hamming
from permindex.rpc.handlers import (
    PERMINDEX_SERVICE,
    RequestReader,
    describe_malformed,
    method_handlers,
)
from permindex.rpc.server import RunningServer
from permindex.v1 import index_pb2 as pb
from permindex.v1 import index_pb2_grpc
from permindex.v1.index_pb2_grpc import PermIndexStub

TOKEN = "malformed-token-0123456789"
STORED = {"a": 0x0F, "b": 0xFF, "c": 1 << 63, "d": (1 << 64) - 1}

# Bytes that are no message at all: the tag 0xff.. is a varint that never ends.
GARBAGE = b"\xff\xff\xff"


def _with_invalid_utf8(message: Any, valid: bytes) -> bytes:
    """``message`` serialized with its placeholder string ``valid`` replaced by invalid UTF-8
    (a lone continuation byte and an 0xff, same length)."""
    data: bytes = message.SerializeToString()
    assert data.count(valid) == 1
    return data.replace(valid, b"\x80" + b"\xff" * (len(valid) - 1))


def _truncated(message: Any) -> bytes:
    data: bytes = message.SerializeToString()
    return data[:-3]


def _call_raw(channel: grpc.Channel, method: str, data: bytes, *, stream: bool) -> list[bytes]:
    """Send ``data`` unserialized to ``method``; the raw response message(s)."""
    path = f"/{PERMINDEX_SERVICE.full_name}/{method}"
    if stream:
        return list(
            channel.unary_stream(path, request_serializer=None, response_deserializer=None)(
                data, timeout=30
            )
        )
    return [
        channel.unary_unary(path, request_serializer=None, response_deserializer=None)(
            data, timeout=30
        )
    ]


def _expect_invalid(call: Any, type_name: str, reason: str) -> None:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    assert f"the request is not a valid {type_name} message: " in error.details()
    assert reason in error.details()


def _fill(stub: PermIndexStub) -> None:
    documents = [pb.Document(key=key, fingerprint=fp) for key, fp in STORED.items()]
    stub.Add(pb.AddRequest(documents=documents))


def _held(stub: PermIndexStub, keys: list[str]) -> dict[str, int]:
    response = stub.Get(pb.GetRequest(keys=keys))
    return {r.key: r.fingerprint for r in response.results if r.found}


def _brute_force(query: int, k: int) -> list[tuple[str, int, int]]:
    found = [(key, fp, hamming(query, fp)) for key, fp in STORED.items()]
    return sorted((m for m in found if m[2] <= k), key=lambda m: (m[2], m[0]))


def _assert_serving(stub: PermIndexStub) -> None:
    """A valid Query still gets the brute-force answer."""
    response = stub.Query(pb.QueryRequest(fingerprints=[0x0E], k=3))
    matches = [(m.key, m.fingerprint, m.distance) for m in response.results[0].matches]
    assert matches == _brute_force(0x0E, 3)


UNARY_CASES = [
    # (method, response streaming, bytes, message type, what the status names)
    ("Query", False, GARBAGE, "QueryRequest", "the bytes end inside a field tag"),
    (
        "Query",
        False,
        _truncated(pb.QueryRequest(fingerprints=[1, 2, 3], k=3)),
        "QueryRequest",
        "the bytes end inside fingerprints",
    ),
    (
        "Query",
        False,
        _with_invalid_utf8(pb.QueryRequest(fingerprints=[1], collection="xyz"), b"xyz"),
        "QueryRequest",
        "collection is not valid UTF-8",
    ),
    (
        "Get",
        False,
        _with_invalid_utf8(pb.GetRequest(keys=["a", "kkkk"]), b"kkkk"),
        "GetRequest",
        "keys[1] is not valid UTF-8",
    ),
    (
        "Add",
        False,
        _with_invalid_utf8(
            pb.AddRequest(documents=[pb.Document(key="new", fingerprint=5)]), b"new"
        ),
        "AddRequest",
        "documents[0].key is not valid UTF-8",
    ),
    ("Stats", False, b"\x0f", "StatsRequest", "invalid wire type 7"),
    ("Pairs", True, GARBAGE, "PairsRequest", "the bytes end inside"),
    (
        "Export",
        True,
        _with_invalid_utf8(pb.ExportRequest(collection="xyz"), b"xyz"),
        "ExportRequest",
        "collection is not valid UTF-8",
    ),
    (
        "Clusters",
        True,
        _truncated(pb.ClustersRequest(collection="abcdef")),
        "ClustersRequest",
        "the bytes end inside collection",
    ),
]


@pytest.mark.parametrize(("method", "streaming", "data", "type_name", "reason"), UNARY_CASES)
def test_malformed_unary_request_is_invalid_argument(
    server: RunningServer,
    method: str,
    streaming: bool,
    data: bytes,
    type_name: str,
    reason: str,
) -> None:
    channel, stub = make_stub(server.address)
    with channel:
        _fill(stub)
        _expect_invalid(
            lambda: _call_raw(channel, method, data, stream=streaming),
            f"permindex.v1.{type_name}",
            reason,
        )
        assert stub.Stats(pb.StatsRequest()).count == len(STORED)
        assert _held(stub, [*STORED, "new"]) == STORED
        _assert_serving(stub)
        # the same path with valid bytes is served (the raw call itself is right)
        valid = getattr(pb, type_name)().SerializeToString()
        assert len(_call_raw(channel, method, valid, stream=streaming)) >= (0 if streaming else 1)


def _stream_raw(channel: grpc.Channel, method: str, messages: list[bytes]) -> Any:
    path = f"/{PERMINDEX_SERVICE.full_name}/{method}"
    return channel.stream_stream(path, request_serializer=None, response_deserializer=None)(
        iter(messages), timeout=30
    )


def test_ingest_applies_the_batches_before_a_malformed_one(server: RunningServer) -> None:
    channel, stub = make_stub(server.address)
    with channel:
        first = pb.AddRequest(documents=[pb.Document(key="first", fingerprint=11)])
        bad = _with_invalid_utf8(
            pb.AddRequest(documents=[pb.Document(key="ok", fingerprint=1), pb.Document(key="zz")]),
            b"zz",
        )
        never = pb.AddRequest(documents=[pb.Document(key="never", fingerprint=12)])
        call = _stream_raw(
            channel,
            "Ingest",
            [first.SerializeToString(), bad, never.SerializeToString()],
        )
        received: list[pb.AddResponse] = []

        def read() -> None:
            for raw in call:
                received.append(pb.AddResponse.FromString(raw))

        _expect_invalid(read, "permindex.v1.AddRequest", "documents[1].key is not valid UTF-8")
        assert len(received) == 1
        assert received[0].added == 1 and [r.key for r in received[0].results] == ["first"]
        assert _held(stub, ["first", "ok", "never"]) == {"first": 11}
        # the stream with valid messages only is served
        again = list(stub.Ingest(iter([never])))
        assert [r.key for r in again[0].results] == ["never"]
        assert _held(stub, ["first", "ok", "never"]) == {"first": 11, "never": 12}


def test_query_columns_answers_the_requests_before_a_malformed_one(server: RunningServer) -> None:
    channel, stub = make_stub(server.address)
    with channel:
        _fill(stub)
        queries = [0x0E, 1 << 63]
        first = pb.QueryColumnsRequest(fingerprints=struct.pack("<2Q", *queries), k=3)
        bad = _truncated(pb.QueryColumnsRequest(fingerprints=struct.pack("<2Q", 1, 2), k=3))
        call = _stream_raw(channel, "QueryColumns", [first.SerializeToString(), bad])
        received: list[pb.QueryColumnsResponse] = []

        def read() -> None:
            for raw in call:
                received.append(pb.QueryColumnsResponse.FromString(raw))

        _expect_invalid(read, "permindex.v1.QueryColumnsRequest", "the bytes end inside")
        assert len(received) == 1
        reply = received[0]
        m = len(reply.keys)
        positions = struct.unpack(f"<{m}I", reply.query_positions)
        fingerprints = struct.unpack(f"<{m}Q", reply.fingerprints)
        got = list(zip(positions, reply.keys, fingerprints, reply.distances, strict=True))
        expected = [
            (position, *match)
            for position, query in enumerate(queries)
            for match in _brute_force(query, 3)
        ]
        assert got == expected
        _assert_serving(stub)


def test_malformed_first_message_of_a_stream(server: RunningServer) -> None:
    channel, stub = make_stub(server.address)
    with channel:
        call = _stream_raw(channel, "Ingest", [GARBAGE])
        _expect_invalid(lambda: list(call), "permindex.v1.AddRequest", "the bytes end inside")
        assert stub.Stats(pb.StatsRequest()).count == 0


def _scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        text = reply.read().decode("utf-8")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_malformed_requests_are_counted_and_checked_for_a_token_first(
    start_server: StartServer, tmp_path: Path
) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN} read-write\n")
    server = start_server(metrics_address="127.0.0.1:0", token_file=tokens)
    assert server.metrics is not None and server.metrics.address is not None
    metadata = (("authorization", f"Bearer {TOKEN}"),)
    channel, _ = make_stub(server.address)
    with channel:
        query = channel.unary_unary(
            f"/{PERMINDEX_SERVICE.full_name}/Query",
            request_serializer=None,
            response_deserializer=None,
        )
        ingest = channel.stream_stream(
            f"/{PERMINDEX_SERVICE.full_name}/Ingest",
            request_serializer=None,
            response_deserializer=None,
        )
        # without a token: refused for that, whatever the bytes
        with pytest.raises(grpc.RpcError) as caught:
            query(GARBAGE, timeout=30)
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        _expect_invalid(
            lambda: query(GARBAGE, timeout=30, metadata=metadata),
            "permindex.v1.QueryRequest",
            "",
        )
        _expect_invalid(
            lambda: list(ingest(iter([GARBAGE]), timeout=30, metadata=metadata)),
            "permindex.v1.AddRequest",
            "",
        )
        valid = pb.QueryRequest(fingerprints=[1]).SerializeToString()
        pb.QueryResponse.FromString(query(valid, timeout=30, metadata=metadata))
    found = _scrape(server.metrics.address)

    def value(name: str, **labels: str) -> float:
        return found.get((name, tuple(sorted(labels.items()))), 0.0)

    requests = "permindex_rpc_requests_total"
    assert value(requests, method="Query", code="UNAUTHENTICATED") == 1
    assert value(requests, method="Query", code="INVALID_ARGUMENT") == 1
    assert value(requests, method="Query", code="OK") == 1
    assert value("permindex_rpc_errors_total", method="Query", code="INVALID_ARGUMENT") == 1
    assert value(requests, method="Ingest", code="INVALID_ARGUMENT") == 1
    assert value(requests, method="Query", code="INTERNAL") == 0
    assert value(requests, method="Ingest", code="INTERNAL") == 0


def test_garbage_over_the_size_limit_is_still_resource_exhausted(
    start_server: StartServer,
) -> None:
    server = start_server(max_message_bytes=1 << 16)
    channel, _ = make_stub(server.address)
    with channel, pytest.raises(grpc.RpcError) as caught:
        _call_raw(channel, "Query", b"\xff" * (1 << 17), stream=False)
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x0a\x00" * 5, grpc.StatusCode.RESOURCE_EXHAUSTED),  # five empty keys
        (b"\x0a\x05ab", grpc.StatusCode.INVALID_ARGUMENT),  # a key cut short
        (b"\x0b" + b"\x0a\x00" * 4, grpc.StatusCode.INVALID_ARGUMENT),  # a group's wire type
        (b"\x0a\x01a" * 4, grpc.StatusCode.OK),  # four keys: the limit
    ],
)
def test_requests_longer_than_max_batch_are_sized_before_parsing(
    start_server: StartServer, data: bytes, code: grpc.StatusCode
) -> None:
    """A message of more bytes than --max-batch is walked by the wire scan first: over the
    limit or not protobuf, refused without a parse; else parsed and answered."""
    server = start_server(max_batch=4)
    channel, _ = make_stub(server.address)
    with channel:
        try:
            _call_raw(channel, "Get", data, stream=False)
            got = grpc.StatusCode.OK
        except grpc.RpcError as error:
            got = error.code()
            if got == grpc.StatusCode.INVALID_ARGUMENT:
                assert "not a valid permindex.v1.GetRequest message" in str(error.details())
            elif got == grpc.StatusCode.RESOURCE_EXHAUSTED:
                assert "more than 4 keys" in str(error.details())
    assert got == code


def test_every_rpc_of_the_service_gets_a_handler() -> None:
    servicer = index_pb2_grpc.PermIndexServicer()
    handlers = method_handlers(servicer)
    names = [method.name for method in PERMINDEX_SERVICE.methods]
    assert sorted(handlers) == sorted(names) and len(names) >= 18
    for method in PERMINDEX_SERVICE.methods:
        handler = handlers[method.name]
        assert handler.request_streaming == method.client_streaming
        assert handler.response_streaming == method.server_streaming
        assert handler.request_deserializer is None  # the handler sizes and parses the bytes
        reader = RequestReader(method.input_type, max_batch=100)
        parsed = asyncio.run(reader.read(b""))
        assert parsed == message_factory.GetMessageClass(method.input_type)()
        assert asyncio.run(reader.read(GARBAGE)).type_name == method.input_type.full_name


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (
            b"\x18" + b"\xff" * 10 + b"\x01",
            "field 3 is a varint longer than 10 bytes (ending at byte 11)",
        ),
        (b"\x00", "field number 0 at byte 0 (not a protobuf message?)"),
        (b"\x0e", "invalid wire type 6 in the tag at byte 0"),
        (b"\x1d\x01\x02", "the bytes end inside field 3 (needs 4 bytes at byte 1, 2 left)"),
        (
            b"\x0a\x03\x0a\x02\xc3",
            "the bytes end inside documents[0].key (a length of 2 at byte 4, 1 left)",
        ),
        (b"\x0a\x04\x0a\x02\xc3\x28", "documents[0].key is not valid UTF-8 (byte 4)"),
        (b"\x12\x02ok\x12\x01\xe0", "collection is not valid UTF-8 (byte 6)"),
    ],
)
def test_describe_malformed_names_the_problem(data: bytes, reason: str) -> None:
    with pytest.raises(Exception) as caught:
        pb.AddRequest.FromString(data)
    assert describe_malformed(data, pb.AddRequest.DESCRIPTOR, caught.value) == reason


def test_a_large_request_with_two_members_of_a_oneof_is_refused(
    start_server: StartServer,
) -> None:
    """Past the size walked in Python, the oneof check runs in the compiled scan: a document
    that sets both a fingerprint and a text, after 20,000 good ones, is found; nothing stored."""
    server = start_server()
    channel, stub = make_stub(server.address)
    documents = [pb.Document(key=f"k{i}", fingerprint=i) for i in range(20_000)]
    good = pb.AddRequest(documents=documents).SerializeToString()
    both = pb.Document(key="both", fingerprint=1).SerializeToString() + b"\x1a\x03abc"
    with channel:
        with pytest.raises(grpc.RpcError) as refused:
            _call_raw(channel, "Add", good + b"\x0a" + bytes([len(both)]) + both, stream=False)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "sets two members of its oneof" in str(refused.value.details())
        assert stub.Stats(pb.StatsRequest()).count == 0
        assert len(_call_raw(channel, "Add", good, stream=False)) > 0  # the rest is served
        assert stub.Stats(pb.StatsRequest()).count == 20_000
