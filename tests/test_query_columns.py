"""The QueryColumns RPC (a stream of packed fingerprints answered in columns) and
``Client.query_columns``: every answer checked against brute force and against Query, every
refusal with its status code; real servers on 127.0.0.1 (port 0)."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import StartServer, make_stub

import permindex
from permindex import hamming
from permindex.client import ColumnMatches
from permindex.errors import InvalidArgumentError, LimitExceededError, ServerError
from permindex.v1 import index_pb2 as pb
from permindex.v1.index_pb2_grpc import PermIndexStub

RW_TOKEN = "rw-0123456789abcdef0123"
RO_TOKEN = "ro-0123456789abcdef0123"

FAR = (1 << 64) - 1  # 62 bits from the fingerprint 5 stored in the limit test

Row = tuple[int, str, int, int]  # (query position, key, fingerprint, distance)


def brute_force(stored: dict[str, int], queries: list[int], k: int, limit: int = 0) -> list[Row]:
    """The columns QueryColumns must answer, as rows, in its order."""
    rows: list[Row] = []
    for q, query in enumerate(queries):
        found = sorted(
            ((hamming(query, fp), key, fp) for key, fp in stored.items() if hamming(query, fp) <= k)
        )
        rows.extend((q, key, fp, d) for d, key, fp in found[: limit or None])
    return rows


def rows_of(reply: pb.QueryColumnsResponse) -> list[Row]:
    """A response's columns as rows, its wire format checked on the way."""
    m = len(reply.keys)
    assert len(reply.query_positions) == 4 * m
    assert len(reply.fingerprints) == 8 * m
    assert len(reply.distances) == m
    positions = np.frombuffer(reply.query_positions, dtype="<u4").tolist()
    fingerprints = np.frombuffer(reply.fingerprints, dtype="<u8").tolist()
    distances = list(reply.distances)
    return list(zip(positions, list(reply.keys), fingerprints, distances, strict=True))


def packed(values: list[int]) -> bytes:
    return np.array(values, dtype="<u8").tobytes()


def request(values: list[int], **fields: Any) -> pb.QueryColumnsRequest:
    return pb.QueryColumnsRequest(fingerprints=packed(values), **fields)


def neighbourhood(rng: random.Random, n_base: int) -> dict[str, int]:
    """Random fingerprints, each with neighbours at distances 0..5, some keys not ASCII."""
    out: dict[str, int] = {}
    for i in range(n_base):
        base = rng.getrandbits(64)
        out[f"base/{i}"] = base
        for d in range(6):
            value = base
            for bit in rng.sample(range(64), d):
                value ^= 1 << bit
            out[f"near/{i}/{d}" if i % 3 else f"près/{i}/{d}/é"] = value
    out["zero"] = 0
    out["ones"] = (1 << 64) - 1
    return out


def expect_status(code: grpc.StatusCode, replies: Iterator[Any]) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        list(replies)
    assert caught.value.code() == code, caught.value.details()
    error: grpc.RpcError = caught.value
    return error


Loaded = tuple[PermIndexStub, dict[str, int], list[int], str]


@pytest.fixture
def loaded(stub: PermIndexStub, server: Any) -> Loaded:
    """(stub, stored entries, queries, server address)."""
    rng = random.Random(11)
    entries = neighbourhood(rng, 40)
    stub.Add(
        pb.AddRequest(documents=[pb.Document(key=k, fingerprint=v) for k, v in entries.items()])
    )
    queries = list(entries.values())[::2] + [rng.getrandbits(64) for _ in range(30)]
    return stub, entries, queries, server.address


def test_a_stream_of_requests_against_brute_force_and_query(
    loaded: Loaded,
) -> None:
    stub, entries, queries, _ = loaded
    asked = [
        request(queries, k=0),
        request(queries, k=1),
        request(queries[:7], k=2),
        request(queries),  # k: the index's, 3
        request(queries, limit=2),
        request(queries, limit=0),
        request([]),
        request(queries[::-1], k=3, limit=1),
    ]
    replies = list(stub.QueryColumns(iter(asked)))
    assert len(replies) == len(asked)  # one response per request, in order
    expected = [
        brute_force(entries, queries, 0),
        brute_force(entries, queries, 1),
        brute_force(entries, queries[:7], 2),
        brute_force(entries, queries, 3),
        brute_force(entries, queries, 3, limit=2),
        brute_force(entries, queries, 3),
        [],
        brute_force(entries, queries[::-1], 3, limit=1),
    ]
    for reply, rows in zip(replies, expected, strict=True):
        assert rows_of(reply) == rows
    assert any(rows_of(replies[3])) and any(key.startswith("près") for key in replies[3].keys)
    # the same matches, in the same order, as the unary Query
    unary = stub.Query(pb.QueryRequest(fingerprints=queries))
    from_query = [
        (q, m.key, m.fingerprint, m.distance)
        for q, result in enumerate(unary.results)
        for m in result.matches
    ]
    assert rows_of(replies[3]) == from_query


def test_more_fingerprints_than_one_slice_of_the_index_lock(
    loaded: Loaded,
) -> None:
    stub, entries, queries, _ = loaded
    many = (queries * 40)[:2500]  # the server looks up 1,024 per slice
    (reply,) = stub.QueryColumns(iter([request(many)]))
    assert rows_of(reply) == brute_force(entries, many, 3)


def test_messages_within_and_past_the_event_loops_bounds(loaded: Loaded) -> None:
    """The server looks a message up on its event loop only within bounds
    (``Index.query_columns_within``: at most 1,024 fingerprints, 2^18 candidates, 1,024
    matches, a read view made after the last write), else in its executor, and after a message
    past them sends the next 16 of the stream to the executor. With 400 copies of one page
    stored, the bound of candidates lies between 4 x 400 and 4 x the entries stored: 60
    fingerprints stay under 2^18, 700 go over; a message holding the page twice has 800
    matches, three times 1,200. Every answer, on one stream through every switch between the
    two, as brute force."""
    stub, entries, queries, _ = loaded
    page = 0x0123456789ABCDEF
    copies = {f"copy/{i:03d}": page for i in range(400)}
    stub.Add(
        pb.AddRequest(documents=[pb.Document(key=k, fingerprint=v) for k, v in copies.items()])
    )
    stored = {**entries, **copies}
    within = ([page, page ^ 1, *queries] * 3)[:60]  # 800 matches of the copies
    many = [page, page, page ^ 0b11, *queries[:57]]  # 1,200: past the bound of matches
    wide = ([page ^ 0b111, *queries] * 8)[:700]  # past the bound of candidates
    rng = random.Random(5)
    far = [rng.getrandbits(64) for _ in range(20)]  # no match: the answer sent pre-encoded
    assert len(within) * 4 * len(stored) <= 1 << 18 < len(wide) * 4 * len(copies)
    asked = [
        (within, 3),  # the executor: written since the last lookup (no current read view)
        *[(within, 3)] * 16,  # the next 16 of the stream too
        (far, 3),  # the loop from here on
        (within, 3),
        (many, 3),  # past the bound of matches: the executor
        *[(within, 3)] * 16,  # and the next 16
        (within, 1),  # the loop again
        (wide, 3),  # past the bound of candidates
        (queries[:9], 0),
    ]
    replies = list(stub.QueryColumns(iter([request(q, k=k) for q, k in asked])))
    assert [rows_of(reply) for reply in replies] == [brute_force(stored, q, k) for q, k in asked]
    assert len(replies[0].keys) > 800 and len(replies[19].keys) > 1200
    assert rows_of(replies[17]) == [] and replies[17] == pb.QueryColumnsResponse()


def test_refusals_end_the_stream_after_the_answers_before(
    loaded: Loaded,
) -> None:
    stub, entries, queries, _ = loaded
    good = request(queries[:3])
    cases = [
        (pb.QueryColumnsRequest(fingerprints=b"\x00" * 12), grpc.StatusCode.INVALID_ARGUMENT),
        (request(queries, k=4), grpc.StatusCode.INVALID_ARGUMENT),
        (request(queries, collection="nope"), grpc.StatusCode.NOT_FOUND),
    ]
    for bad, code in cases:
        replies = stub.QueryColumns(iter([good, bad, good]))
        first = next(replies)
        assert rows_of(first) == brute_force(entries, queries[:3], 3)
        error = expect_status(code, replies)
        if bad.fingerprints == b"\x00" * 12:
            assert "12 bytes, not a multiple of 8" in (error.details() or "")
        if bad.HasField("k"):
            assert "k <= 3" in (error.details() or "")


def test_a_long_stream_small_messages_many_matches_and_refusals(loaded: Loaded) -> None:
    """A stream long enough that its slices have grown to whole messages (the stream has
    learnt they find few matches), then a message of thousands of matches (its slices shrink
    again), then small ones, then refusals: every answer as brute force gives it, every
    refusal with its status and the answers before it intact."""
    stub, entries, queries, _ = loaded
    copies = {f"copy/{i:05d}": 0x5A5A_5A5A_0F0F_F0F0 for i in range(2_500)}
    stub.Add(
        pb.AddRequest(documents=[pb.Document(key=k, fingerprint=v) for k, v in copies.items()])
    )
    stored = {**entries, **copies}
    small = [queries[i % len(queries) :] + queries[: i % len(queries)] for i in range(12)]
    crowd = [0x5A5A_5A5A_0F0F_F0F1, *queries[:5]]  # 2,500 matches at distance 1
    asked = [request(q) for q in small] + [request(crowd)] + [request(q) for q in small[:3]]
    expected = [brute_force(stored, q, 3) for q in small]
    expected += [brute_force(stored, crowd, 3), *expected[:3]]
    replies = list(stub.QueryColumns(iter(asked)))
    assert [rows_of(reply) for reply in replies] == expected
    assert len(rows_of(replies[12])) > 2_500
    for bad, code, says in (
        (
            pb.QueryColumnsRequest(fingerprints=b"\x00" * 20),
            grpc.StatusCode.INVALID_ARGUMENT,
            "20 bytes, not a multiple of 8",
        ),
        (request(small[0], k=4), grpc.StatusCode.INVALID_ARGUMENT, "k <= 3"),
        (request(small[0], collection="nope"), grpc.StatusCode.NOT_FOUND, "nope"),
    ):
        replies_iter = stub.QueryColumns(
            iter([request(q) for q in small] + [bad, request(small[0])])
        )
        for rows in expected[: len(small)]:  # the answers of ``small``, computed above
            assert rows_of(next(replies_iter)) == rows
        error = expect_status(code, replies_iter)
        assert says in (error.details() or "")


def test_batch_and_message_limits(start_server: StartServer) -> None:
    server = start_server(max_batch=600, max_message_bytes=1 << 20)
    long_key = "x" * 1000
    channel, stub = make_stub(server.address)
    try:
        for start in range(0, 1100, 500):  # 1,100 keys of ~1 KB, one fingerprint: > 1 MiB
            stub.Add(
                pb.AddRequest(
                    documents=[
                        pb.Document(key=f"{long_key}{i:05d}", fingerprint=5)
                        for i in range(start, min(start + 500, 1100))
                    ]
                )
            )
        error = expect_status(
            grpc.StatusCode.RESOURCE_EXHAUSTED, stub.QueryColumns(iter([request([5])]))
        )
        assert "ask with a limit" in (error.details() or "")
        (limited,) = stub.QueryColumns(iter([request([5, 4], limit=3)]))
        keys = sorted(f"{long_key}{i:05d}" for i in range(1100))
        assert rows_of(limited) == [(0, key, 5, 0) for key in keys[:3]] + [
            (1, key, 5, 1) for key in keys[:3]
        ]
        # over the batch limit: refused as Query refuses it; at the limit: answered
        error = expect_status(
            grpc.StatusCode.RESOURCE_EXHAUSTED, stub.QueryColumns(iter([request([1] * 601)]))
        )
        assert "601 fingerprints" in (error.details() or "")
        with pytest.raises(grpc.RpcError) as unary:
            stub.Query(pb.QueryRequest(fingerprints=[1] * 601))
        assert unary.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        (at_limit,) = stub.QueryColumns(iter([request([FAR] * 600)]))
        assert rows_of(at_limit) == []
    finally:
        channel.close()
    with permindex.Client(server.address) as client:
        with pytest.raises(LimitExceededError):
            client.query_columns([FAR] * 601, batch=601)
        assert len(client.query_columns([FAR] * 601, batch=600)) == 0


def test_client_query_columns(loaded: Loaded) -> None:
    _, entries, queries, address = loaded
    with permindex.Client(address, batch_size=7) as client:
        expected = brute_force(entries, queries, 3)
        for batch, window in ((1000, 4), (7, 1), (7, 3), (1, 2)):
            found = client.query_columns(
                np.array(queries, dtype=np.uint64), batch=batch, window=window
            )
            assert found.query_positions.dtype == np.int64
            assert found.fingerprints.dtype == np.uint64
            assert found.distances.dtype == np.uint8
            assert _rows(found) == expected
            assert found.to_lists(len(queries)) == client.query_many(queries)
        limited = client.query_columns(queries, k=1, limit=1, batch=5)
        assert _rows(limited) == brute_force(entries, queries, 1, limit=1)
        empty = client.query_columns([])
        assert len(empty) == 0 and empty.to_lists(0) == []
        with pytest.raises(InvalidArgumentError):
            client.query_columns([-1])
        with pytest.raises(InvalidArgumentError):
            client.query_columns([1 << 64])
        with pytest.raises(TypeError):
            client.query_columns([1.5])  # type: ignore[list-item]
        with pytest.raises(InvalidArgumentError):
            client.query_columns([1], batch=0)
        with pytest.raises(InvalidArgumentError):
            client.query_columns([1], window=0)
        with pytest.raises(InvalidArgumentError) as too_far:
            client.query_columns(queries, k=4)
        assert isinstance(too_far.value, ServerError)
        with pytest.raises(InvalidArgumentError):
            client.query_columns(queries).to_lists(1)


def test_collections_are_answered_apart(start_server: StartServer) -> None:
    server = start_server()
    with permindex.Client(server.address) as client:
        client.add([("a", 1), ("b", 3)])
        crawl = client.use("crawl")
        client.create_collection("crawl", k=2)
        crawl.add([("c", 1), ("d", 7)])
        found = crawl.query_columns([1, 3])
        assert _rows(found) == [(0, "c", 1, 0), (0, "d", 7, 2), (1, "c", 1, 1),
                                               (1, "d", 7, 1)]  # fmt: skip
        assert _rows(client.query_columns([1])) == [(0, "a", 1, 0), (0, "b", 3, 1)]
        with pytest.raises(InvalidArgumentError):
            crawl.query_columns([1], k=3)  # the collection's k is 2
        with pytest.raises(ServerError) as missing:
            client.use("nope").query_columns([1])
        assert missing.value.code == "NOT_FOUND"


def test_tokens(start_server: StartServer, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{RW_TOKEN} read-write\n{RO_TOKEN} read-only\n")
    server = start_server(token_file=tokens)
    with permindex.Client(server.address, token=RW_TOKEN) as writer:
        writer.add([("a", 1)])
    with permindex.Client(server.address, token=RO_TOKEN) as reader:
        assert _rows(reader.query_columns([1, FAR])) == [(0, "a", 1, 0)]
    with permindex.Client(server.address, retries=0) as nobody:
        with pytest.raises(ServerError) as refused:
            nobody.query_columns([1])
        assert refused.value.code == "UNAUTHENTICATED"


def _rows(found: ColumnMatches) -> list[Row]:
    """Client columns as rows (position, key, fingerprint, distance)."""
    return list(
        zip(
            found.query_positions.tolist(),
            found.keys,
            found.fingerprints.tolist(),
            found.distances.tolist(),
            strict=True,
        )
    )


def test_one_fingerprint_at_and_past_the_message_limit(start_server: StartServer) -> None:
    """Replies are measured exactly enough: 48,000 matches of 6-byte keys (~0.9 MB as Query,
    ~1.0 MB as columns) fit a 1 MiB limit, although a bound of the largest Match (22 bytes
    each) would not; 56,000 do not fit, in Query's single-fingerprint path, its batch path and
    in QueryColumns."""
    server = start_server(max_message_bytes=1 << 20)
    channel, stub = make_stub(server.address)
    try:

        def add(start: int, stop: int) -> None:
            for first in range(start, stop, 8000):
                documents = [
                    pb.Document(key=f"k{i:05d}", fingerprint=9)
                    for i in range(first, min(first + 8000, stop))
                ]
                stub.Add(pb.AddRequest(documents=documents))

        add(0, 48_000)
        keys = [f"k{i:05d}" for i in range(48_000)]
        (result,) = stub.Query(pb.QueryRequest(fingerprints=[9])).results
        assert [m.key for m in result.matches] == keys
        assert {(m.fingerprint, m.distance) for m in result.matches} == {(9, 0)}
        (reply,) = stub.QueryColumns(iter([request([9])]))
        assert rows_of(reply) == [(0, key, 9, 0) for key in keys]
        add(48_000, 56_000)
        for call in (
            lambda: stub.Query(pb.QueryRequest(fingerprints=[9])),
            lambda: stub.Query(pb.QueryRequest(fingerprints=[FAR, 9])),
            lambda: list(stub.QueryColumns(iter([request([9])]))),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                call()
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "ask with a limit" in (refused.value.details() or "")
    finally:
        channel.close()
