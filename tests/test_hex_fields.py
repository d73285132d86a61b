"""The hex forms of the fingerprints a client sends (``Document.fingerprint_hex``,
``QueryRequest.fingerprints_hex``) against a real ``permindex serve`` process: they store and find
what the fixed64 forms do, and the server refuses, with INVALID_ARGUMENT naming the field and the
value, every string that is not exactly 16 hex digits, both query forms at once and a document
that carries two members of its oneof on the wire. Nothing of a refused request is applied."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc
import pytest
from conftest import make_stub
from serverproc import ServeProcess

from permindex.index.hamming import hamming
from permindex.v1 import index_pb2 as pb
from permindex.v1.index_pb2_grpc import PermIndexStub

FP = 0x7BDB22CF023304C1

#: Strings that are not 16 hex digits, each of which a loader's fixed64 conversion would have
#: turned into some number; and what each refusal must say besides the field and the value.
BAD_HEX = [
    ("abc", "has 3 hex digits, not 16; zero-padded: 0000000000000abc"),
    ("xyz", "is not hex"),
    ("0x10", "0x prefix; write it as 0000000000000010"),
    ("-5", "is not hex"),
    ("18446744073709551616", "20 hex digits, more than 64 bits"),
    ("", "is empty"),
    (
        "8924765359055242433",
        "19 hex digits, more than 64 bits (if it is decimal, its hex is 7bdb22cf023304c1)",
    ),
    ("7bdb22cf023304c", "15 hex digits, not 16; zero-padded: 07bdb22cf023304c"),
    ("7bdb22cf023304c10", "17 hex digits, more than 64 bits"),
    (" 7bdb22cf023304c1", "is not hex"),
    ("7bdb22cf023304c1\n", "is not hex"),
    ("+bdb22cf023304c1", "is not hex"),
    ("7bdb_2cf023304c1", "is not hex"),
    ("\u0660" * 16, "is not hex"),  # Arabic-Indic zeros: int(s, 16) would take them
]


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real server process on 127.0.0.1 (port 0) for the module's tests."""
    serve = ServeProcess(tmp_path_factory.mktemp("hex") / "data")
    found = serve.address()
    assert found is not None, serve.text
    yield found
    assert serve.stop() == 0, serve.text


@pytest.fixture(scope="module")
def channel_stub(address: str) -> Iterator[tuple[Any, PermIndexStub]]:
    channel, stub = make_stub(address)
    yield channel, stub
    channel.close()


@pytest.fixture
def stub(channel_stub: tuple[Any, PermIndexStub]) -> PermIndexStub:
    return channel_stub[1]


@pytest.fixture
def raw_call(channel_stub: tuple[Any, PermIndexStub]) -> Callable[[str, bytes], bytes]:
    """Call a unary method with request bytes as they are (a client's own encoding)."""
    channel = channel_stub[0]

    def call(method: str, data: bytes) -> bytes:
        invoke = channel.unary_unary(
            f"/permindex.v1.PermIndex/{method}",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        result: bytes = invoke(data, timeout=30)
        return result

    return call


def _refusal(call: Callable[[], object]) -> str:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    error: Any = caught.value
    assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, error.details()
    details: str = error.details()
    return details


def _not_stored(stub: PermIndexStub, *keys: str) -> None:
    found = stub.Get(pb.GetRequest(keys=list(keys)), timeout=30)
    assert [r.found for r in found.results] == [False] * len(keys)


def test_add_by_hex_stores_the_fingerprint_either_case(stub: PermIndexStub) -> None:
    reply = stub.Add(
        pb.AddRequest(
            documents=[
                pb.Document(key="hex/lower", fingerprint_hex=f"{FP:016x}"),
                pb.Document(key="hex/upper", fingerprint_hex=f"{FP ^ 0b101:016X}"),
                pb.Document(key="hex/zero", fingerprint_hex="0000000000000000"),
                pb.Document(key="hex/max", fingerprint_hex="ffffffffffffffff"),
            ]
        ),
        timeout=30,
    )
    assert [r.fingerprint for r in reply.results] == [FP, FP ^ 0b101, 0, 2**64 - 1]
    assert reply.added == 4
    got = stub.Get(pb.GetRequest(keys=["hex/lower", "hex/upper", "hex/zero", "hex/max"]))
    assert [r.fingerprint for r in got.results] == [FP, FP ^ 0b101, 0, 2**64 - 1]


def test_query_by_hex_answers_as_the_fixed64_query(stub: PermIndexStub) -> None:
    stored = {f"q/{i}": FP ^ (1 << i) ^ (1 << (i + 7)) for i in range(0, 40, 3)}
    stored["q/far"] = ~FP & (2**64 - 1)
    stub.Add(
        pb.AddRequest(documents=[pb.Document(key=k, fingerprint=fp) for k, fp in stored.items()]),
        timeout=30,
    )
    queries = [FP, FP ^ 1, ~FP & (2**64 - 1), 0x0123456789ABCDEF]
    for k in (None, 2, 3):
        hex_request = pb.QueryRequest(fingerprints_hex=[f"{q:016x}" for q in queries], k=k)
        int_request = pb.QueryRequest(fingerprints=queries, k=k)
        by_hex = stub.Query(hex_request, timeout=30)
        assert by_hex == stub.Query(int_request, timeout=30)
        within = 3 if k is None else k
        for query, result in zip(queries, by_hex.results, strict=True):
            found = [(m.key, m.fingerprint, m.distance) for m in result.matches if "q/" in m.key]
            expected = sorted(
                ((key, fp, hamming(fp, query)) for key, fp in stored.items()),
                key=lambda t: (t[2], t[0]),
            )
            assert found == [t for t in expected if t[2] <= within]
    one = stub.Query(pb.QueryRequest(fingerprints_hex=[f"{FP:016X}"]), timeout=30)
    assert ("q/0", 2) in [(m.key, m.distance) for m in one.results[0].matches]


def test_check_and_add_by_hex(stub: PermIndexStub) -> None:
    first = pb.Document(key="cna/a", fingerprint_hex="00000000000000f0")
    near = pb.Document(key="cna/b", fingerprint_hex="00000000000000F1")
    reply = stub.CheckAndAdd(pb.CheckAndAddRequest(documents=[first, near]), timeout=30)
    statuses = [r.status for r in reply.results]
    assert statuses == [pb.DOCUMENT_STATUS_ADDED, pb.DOCUMENT_STATUS_NEAR_DUPLICATE]
    assert [(m.key, m.distance) for m in reply.results[1].matches] == [("cna/a", 1)]
    assert reply.results[1].fingerprint == 0xF1


@pytest.mark.parametrize(("value", "problem"), BAD_HEX)
def test_malformed_hex_in_a_document_is_refused(
    stub: PermIndexStub, value: str, problem: str
) -> None:
    documents = [
        pb.Document(key="bad/ok", fingerprint_hex="0000000000000001"),
        pb.Document(key="bad/x", fingerprint_hex=value),
    ]
    details = _refusal(lambda: stub.Add(pb.AddRequest(documents=documents), timeout=30))
    assert details.startswith("documents[1].fingerprint_hex (key 'bad/x'): "), details
    assert repr(value) in details and problem in details, details
    details = _refusal(
        lambda: stub.CheckAndAdd(pb.CheckAndAddRequest(documents=documents), timeout=30)
    )
    assert "documents[1].fingerprint_hex" in details and repr(value) in details
    _not_stored(stub, "bad/ok", "bad/x")


@pytest.mark.parametrize(("value", "problem"), BAD_HEX)
def test_malformed_hex_in_a_query_is_refused(stub: PermIndexStub, value: str, problem: str) -> None:
    request = pb.QueryRequest(fingerprints_hex=["0000000000000001", value])
    details = _refusal(lambda: stub.Query(request, timeout=30))
    assert details.startswith(f"fingerprints_hex[1]: {value!r} "), details
    assert problem in details, details
    alone = pb.QueryRequest(fingerprints_hex=[value])  # the single-lookup path
    assert _refusal(lambda: stub.Query(alone, timeout=30)).startswith("fingerprints_hex[0]: ")


def test_both_query_forms_at_once_are_refused(stub: PermIndexStub) -> None:
    request = pb.QueryRequest(fingerprints=[FP], fingerprints_hex=[f"{FP:016x}"])
    details = _refusal(lambda: stub.Query(request, timeout=30))
    assert "both fingerprints (1) and fingerprints_hex (1)" in details, details


def _document(key: str, *fields: bytes) -> bytes:
    """A Document's bytes with the given encoded fields after its key, as a client that set
    several members of the oneof sends it (protobuf.js writes every member it is given)."""
    body = b"\x0a" + bytes([len(key)]) + key.encode() + b"".join(fields)
    return b"\x0a" + bytes([len(body)]) + body  # field 1 (documents) of the request


FIXED = b"\x11" + (5).to_bytes(8, "little")  # fingerprint = 5
HEX = b"\x22\x10" + b"0000000000000006"  # fingerprint_hex = "0000000000000006"
TEXT = b"\x1a\x0b" + b"a b c d e f"  # text


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ((FIXED, HEX), "fingerprint and fingerprint_hex"),
        ((HEX, FIXED), "fingerprint_hex and fingerprint"),
        ((TEXT, HEX), "text and fingerprint_hex"),
        ((FIXED, TEXT), "fingerprint and text"),
    ],
)
def test_two_members_of_the_oneof_on_the_wire_are_refused(
    stub: PermIndexStub,
    raw_call: Callable[[str, bytes], bytes],
    fields: tuple[bytes, ...],
    names: str,
) -> None:
    data = _document("two/ok", FIXED) + _document("two/x", *fields)
    for method in ("Add", "CheckAndAdd"):
        details = _refusal(lambda method=method: raw_call(method, data))  # type: ignore[misc]
        assert f"documents[1] sets both {names}" in details, details
    _not_stored(stub, "two/ok", "two/x")


def test_explicit_defaults_on_the_wire_are_still_accepted(
    stub: PermIndexStub, raw_call: Callable[[str, bytes], bytes]
) -> None:
    # collection = "" sent explicitly (protobuf.js does when given it): the request re-encodes
    # shorter, the bytes are walked, and nothing is wrong with them.
    data = _document("defaults/a", HEX) + b"\x12\x00"
    reply = pb.AddResponse.FromString(raw_call("Add", data))
    assert reply.added == 1 and reply.results[0].fingerprint == 6
    # the same member twice is protobuf's ordinary "last one wins", not two members
    reply = pb.AddResponse.FromString(raw_call("Add", _document("defaults/b", FIXED, FIXED)))
    assert reply.results[0].fingerprint == 5


def test_ingest_applies_the_batches_before_a_malformed_hex(stub: PermIndexStub) -> None:
    batches = [
        pb.AddRequest(documents=[pb.Document(key="ingest/a", fingerprint_hex="00000000000000aa")]),
        pb.AddRequest(documents=[pb.Document(key="ingest/b", fingerprint_hex="0xab")]),
        pb.AddRequest(documents=[pb.Document(key="ingest/c", fingerprint_hex="00000000000000ac")]),
    ]
    replies: list[pb.AddResponse] = []

    def ingest() -> None:
        replies.extend(stub.Ingest(iter(batches), timeout=30))

    details = _refusal(ingest)
    assert details.startswith("documents[0].fingerprint_hex (key 'ingest/b'): '0xab' "), details
    assert [r.results[0].fingerprint for r in replies] == [0xAA]
    got = stub.Get(pb.GetRequest(keys=["ingest/a", "ingest/b", "ingest/c"]), timeout=30)
    assert [r.found for r in got.results] == [True, False, False]


def test_ingest_refuses_two_oneof_members_on_the_wire(
    channel_stub: tuple[Any, PermIndexStub],
) -> None:
    channel, stub = channel_stub
    ingest = channel.stream_stream(
        "/permindex.v1.PermIndex/Ingest",
        request_serializer=lambda b: b,
        response_deserializer=pb.AddResponse.FromString,
    )
    messages = [_document("stream/a", HEX), _document("stream/b", HEX, FIXED)]
    replies: list[pb.AddResponse] = []
    details = _refusal(lambda: replies.extend(ingest(iter(messages), timeout=30)))
    assert "documents[0] sets both fingerprint_hex and fingerprint" in details, details
    assert [r.added for r in replies] == [1]
    _not_stored(stub, "stream/b")
