"""Limits at and past each bound (key length, text length, batch length, message size, calls at
once), deadlines, and a cancelled ingest stream; real servers on 127.0.0.1 (port 0)."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from conftest import StartServer, make_stub

import permindex
from permindex.errors import InvalidArgumentError, LimitExceededError, ServerError
from permindex.v1 import index_pb2 as pb

WORDS = "alpha beta gamma delta "


def test_key_length_at_and_past_the_bound(start_server: StartServer) -> None:
    server = start_server(max_key_bytes=10)
    with permindex.Client(server.address) as client:
        client.add([("k" * 10, 1), ("é" * 5, 2)])  # 10 bytes each
        with pytest.raises(InvalidArgumentError) as refused:
            client.add([("k" * 11, 3)])
        assert isinstance(refused.value, ServerError)
        assert refused.value.code == "INVALID_ARGUMENT" and "max_key_bytes" in str(refused.value)
        with pytest.raises(InvalidArgumentError):
            client.get("é" * 6)
        with pytest.raises(InvalidArgumentError):
            client.check_and_add("k" * 11, 3)
        assert client.stats().count == 2


def test_text_length_at_and_past_the_bound(start_server: StartServer) -> None:
    server = start_server(max_text_bytes=1000)
    at_bound = (WORDS * 100)[:1000]
    assert len(at_bound.encode()) == 1000
    with permindex.Client(server.address) as client:
        assert client.add([("a", at_bound)]).added == 1
        with pytest.raises(LimitExceededError) as refused:
            client.add([("b", "x"), ("c", at_bound + "é")])
        assert isinstance(refused.value, ServerError)
        assert refused.value.code == "RESOURCE_EXHAUSTED"
        assert "documents[1]" in str(refused.value) and "max_text_bytes" in str(refused.value)
        assert client.get("b") is None  # nothing of the batch applied
        with pytest.raises(LimitExceededError):
            client.check_and_add("c", at_bound + "x")


def test_batch_length_at_and_past_the_bound(start_server: StartServer) -> None:
    server = start_server(max_batch=4)
    with permindex.Client(server.address, batch_size=100) as client:
        client.add([(f"k{i}", i) for i in range(4)])
        with pytest.raises(LimitExceededError):
            client.add([(f"k{i}", i) for i in range(5)])
        with pytest.raises(LimitExceededError):
            client.query_many(range(5))
        with pytest.raises(LimitExceededError):
            client.get_many(["k0"] * 5)
        assert len(client.query_many(range(4))) == 4


def test_message_size_at_and_past_the_bound(start_server: StartServer) -> None:
    server = start_server(max_message_bytes=1 << 20)
    with permindex.Client(server.address) as client:
        client.add([("small", WORDS * 40_000)])  # 960,000 bytes: under 1 MiB
        with pytest.raises(LimitExceededError) as refused:
            client.add([("large", WORDS * 50_000)])  # 1,200,000 bytes
        assert isinstance(refused.value, ServerError)
        assert refused.value.code == "RESOURCE_EXHAUSTED"
        assert client.get("large") is None and client.get("small") is not None


def test_unary_calls_beyond_the_bound_are_refused_not_queued(start_server: StartServer) -> None:
    """--max-concurrent-rpcs counts unary calls only: two held Ingest streams do not keep a
    Stats call out, and 8 clients sending large Query batches at a bound of 2 see some calls
    refused at once (RESOURCE_EXHAUSTED naming the option) and every other one answered."""
    server = start_server(max_concurrent_rpcs=2, workers=2)
    release = threading.Event()

    def held_open() -> Iterator[pb.AddRequest]:
        yield pb.AddRequest(documents=[pb.Document(key="held", fingerprint=1)])
        release.wait(30)

    channel, stub = make_stub(server.address)
    rng = random.Random(5)
    try:
        streams = [stub.Ingest(held_open()) for _ in range(2)]
        for stream in streams:
            next(stream)  # both streams are open
        with permindex.Client(server.address, retries=0) as client:
            assert client.stats().count == 1  # streams do not count against the bound
            client.ingest((f"k{i}", rng.getrandbits(64)) for i in range(100_000))
            batch = [rng.getrandbits(64) for _ in range(50_000)]
            refused: list[str] = []
            answered: list[int] = []

            def caller() -> None:
                with permindex.Client(server.address, retries=0) as own:
                    for _ in range(6):
                        began = time.monotonic()
                        try:
                            answered.append(len(own.query_many(batch)))
                        except LimitExceededError as error:
                            assert time.monotonic() - began < 5  # at once, not queued
                            refused.append(str(error))

            threads = [threading.Thread(target=caller) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
            assert refused, "8 concurrent callers never met a bound of 2"
            assert all("--max-concurrent-rpcs" in message for message in refused)
            assert answered and set(answered) == {len(batch)}
            assert len(refused) + len(answered) == 48
        release.set()
        for stream in streams:
            assert list(stream) == []
    finally:
        release.set()
        channel.close()


def test_deadlines_are_honoured(start_server: StartServer) -> None:
    server = start_server()
    with permindex.Client(server.address) as client:
        rng = random.Random(3)
        client.ingest((f"k{i}", rng.getrandbits(64)) for i in range(20_000))
    with permindex.Client(server.address, timeout=1e-4, retries=0) as hurried:
        # streamed reads have no deadline by default (not the Client's timeout): their own
        assert len(hurried.pairs()) == len(hurried.pairs(timeout=60))
        with pytest.raises(TimeoutError) as late:
            hurried.pairs(timeout=1e-4)
        assert isinstance(late.value, ServerError) and late.value.code == "DEADLINE_EXCEEDED"


def test_a_cancelled_ingest_stream_applies_only_what_was_acknowledged(
    start_server: StartServer,
) -> None:
    server = start_server()
    acknowledged = [threading.Event() for _ in range(2)]
    waiting = threading.Event()

    def batches() -> Iterator[pb.AddRequest]:
        for b in range(2):
            yield pb.AddRequest(
                documents=[pb.Document(key=f"b{b}-{i}", fingerprint=b * 100 + i) for i in range(50)]
            )
            acknowledged[b].wait(10)
        waiting.set()
        time.sleep(2)  # cancelled meanwhile: the third batch is never read by the server
        yield pb.AddRequest(documents=[pb.Document(key="b2-0", fingerprint=999)])

    channel, stub = make_stub(server.address)
    try:
        call = stub.Ingest(batches())
        replies = []
        for b in range(2):
            replies.append(next(call))
            acknowledged[b].set()
        assert waiting.wait(10)
        call.cancel()
        with pytest.raises(grpc.RpcError) as ended:
            next(call)
        assert ended.value.code() == grpc.StatusCode.CANCELLED
    finally:
        channel.close()
    assert [r.added for r in replies] == [50, 50]
    time.sleep(2.5)  # past the moment the third batch would have been sent
    with permindex.Client(server.address) as client:
        assert client.stats().count == 100
        assert client.get("b2-0") is None
        assert client.get_many([f"b1-{i}" for i in range(50)]) == [100 + i for i in range(50)]
