"""The gRPC service end to end: a real server on 127.0.0.1 (port 0) with a real client, real files
on disk, and for signals a real ``python -c`` process running :func:`run_server`.

Answers are checked against brute force over what the server holds; malformed requests are
checked to change nothing (Get and Stats compared before and after)."""

from __future__ import annotations

import logging
import os
import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import StartServer, make_stub, server_config
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from oracles import brute_force_query
from serverproc import without_loading_notice

import permindex
from permindex import hamming, simhash
from permindex.errors import CorruptFileError, DataDirLockedError, exit_code_for
from permindex.rpc.server import RunningServer, create_server
from permindex.rpc.service import SERVICE_NAME
from permindex.storage.snapshot import SNAPSHOT_NAME, DataDir, read_snapshot, write_snapshot
from permindex.v1 import index_pb2 as pb
from permindex.v1.index_pb2_grpc import PermIndexStub

REPO = Path(__file__).resolve().parent.parent
TEXT = "the quick brown fox jumps over the lazy dog and keeps running far away"
ADDED = pb.DOCUMENT_STATUS_ADDED
REPLACED = pb.DOCUMENT_STATUS_REPLACED
TOO_SHORT = pb.DOCUMENT_STATUS_TOO_SHORT
NEAR_DUPLICATE = pb.DOCUMENT_STATUS_NEAR_DUPLICATE
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


# ------------------------------------------------------------------------------------ helpers


def doc(key: str, fingerprint: int | None = None, text: str | None = None) -> pb.Document:
    if text is not None:
        return pb.Document(key=key, text=text)
    if fingerprint is not None:
        return pb.Document(key=key, fingerprint=fingerprint)
    return pb.Document(key=key)


def add(stub: PermIndexStub, entries: dict[str, int]) -> pb.AddResponse:
    response: pb.AddResponse = stub.Add(
        pb.AddRequest(documents=[doc(k, fp) for k, fp in entries.items()])
    )
    return response


def get_all(stub: PermIndexStub, keys: Sequence[str]) -> dict[str, int | None]:
    response = stub.Get(pb.GetRequest(keys=list(keys)))
    assert [r.key for r in response.results] == list(keys)
    return {r.key: (r.fingerprint if r.found else None) for r in response.results}


def held(stub: PermIndexStub, keys: Sequence[str]) -> dict[str, int]:
    """What the server holds, among ``keys``."""
    return {k: fp for k, fp in get_all(stub, keys).items() if fp is not None}


def observed_state(stub: PermIndexStub, keys: Sequence[str]) -> tuple[int, dict[str, int | None]]:
    """(Stats.count, Get of ``keys``): compared before and after a refused request."""
    return stub.Stats(pb.StatsRequest()).count, get_all(stub, keys)


def brute_force(stored: dict[str, int], query: int, k: int) -> list[tuple[str, int, int]]:
    found = [(key, fp, hamming(query, fp)) for key, fp in stored.items()]
    return sorted((m for m in found if m[2] <= k), key=lambda m: (m[2], m[0]))


def as_tuples(matches: Any) -> list[tuple[str, int, int]]:
    return [(m.key, m.fingerprint, m.distance) for m in matches]


def brute_pairs(stored: dict[str, int], k: int) -> list[tuple[str, str, int]]:
    items = sorted(stored.items())
    out = []
    for i, (a, fa) in enumerate(items):
        for b, fb in items[i + 1 :]:
            d = hamming(fa, fb)
            if d <= k:
                out.append((a, b, d))
    return sorted(out)


def all_pairs(stub: PermIndexStub, k: int | None = None) -> list[tuple[str, str, int]]:
    request = pb.PairsRequest() if k is None else pb.PairsRequest(k=k)
    return sorted((p.key_a, p.key_b, p.distance) for r in stub.Pairs(request) for p in r.pairs)


def flip(value: int, bits: Sequence[int]) -> int:
    for bit in bits:
        value ^= 1 << bit
    return value


def neighbourhood(rng: random.Random, n_base: int) -> dict[str, int]:
    """Random fingerprints, each with neighbours at exact distances 0..5 (bits on block
    boundaries and bit 63 included)."""
    special = [0, 15, 16, 31, 32, 47, 48, 63]
    out: dict[str, int] = {}
    for i in range(n_base):
        base = rng.getrandbits(64)
        out[f"base/{i}"] = base
        for d in range(6):
            bits = rng.sample(special if d <= len(special) and i % 2 else range(64), d)
            out[f"near/{i}/{d}"] = flip(base, bits)
    return out


def expect_status(code: grpc.StatusCode, call: Any, *args: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as caught:
        result = call(*args)
        if isinstance(result, Iterator):
            list(result)
    assert caught.value.code() == code, caught.value.details()
    error: grpc.RpcError = caught.value
    return error


# -------------------------------------------------------------------------- add / get / query


def test_add_get_query_against_brute_force(stub: PermIndexStub) -> None:
    rng = random.Random(7)
    entries = neighbourhood(rng, 60)
    response = add(stub, entries)
    assert response.added == len(entries) and response.replaced == 0 == response.too_short
    assert [r.status for r in response.results] == [ADDED] * len(entries)
    stored = held(stub, list(entries))
    assert stored == entries
    queries = list(entries.values())[::3] + [rng.getrandbits(64) for _ in range(20)]
    for k in (0, 1, 2, 3):
        result = stub.Query(pb.QueryRequest(fingerprints=queries, k=k))
        assert len(result.results) == len(queries)
        for q, r in zip(queries, result.results, strict=True):
            assert as_tuples(r.matches) == brute_force(stored, q, k)
    default_k = stub.Query(pb.QueryRequest(fingerprints=queries[:1]))  # k defaults to 3
    assert as_tuples(default_k.results[0].matches) == brute_force(stored, queries[0], 3)
    limited = stub.Query(pb.QueryRequest(fingerprints=queries, limit=2))
    for q, r in zip(queries, limited.results, strict=True):
        assert as_tuples(r.matches) == brute_force(stored, q, 3)[:2]
    unlimited = stub.Query(pb.QueryRequest(fingerprints=queries[:5], limit=0))
    for q, r in zip(queries[:5], unlimited.results, strict=True):
        assert as_tuples(r.matches) == brute_force(stored, q, 3)


def test_add_replaces_and_reports_per_document(stub: PermIndexStub) -> None:
    add(stub, {"a": 1})
    response = stub.Add(
        pb.AddRequest(documents=[doc("a", 2), doc("b", 3), doc("b", 4), doc("c", text=TEXT)])
    )
    assert [(r.key, r.status) for r in response.results] == [
        ("a", REPLACED),
        ("b", ADDED),
        ("b", REPLACED),
        ("c", ADDED),
    ]
    assert [r.fingerprint for r in response.results] == [2, 3, 4, simhash(TEXT)]
    assert (response.added, response.replaced, response.too_short) == (2, 2, 0)
    assert get_all(stub, ["a", "b", "c", "zzz"]) == {
        "a": 2,
        "b": 4,
        "c": simhash(TEXT),
        "zzz": None,
    }


def test_too_short_texts_are_reported_and_skipped(stub: PermIndexStub) -> None:
    response = stub.Add(
        pb.AddRequest(
            documents=[
                doc("long", text=TEXT),
                doc("short", text="two words"),
                doc("empty", text=""),
                doc("fp", 0),  # 0 is a valid fingerprint
                doc("blank", text=" \n\t\u3000 "),
            ]
        )
    )
    assert [r.status for r in response.results] == [ADDED, TOO_SHORT, TOO_SHORT, ADDED, TOO_SHORT]
    assert not response.results[1].HasField("fingerprint")
    assert response.results[3].HasField("fingerprint") and response.results[3].fingerprint == 0
    assert (response.added, response.too_short) == (2, 3)
    assert get_all(stub, ["long", "short", "empty", "fp", "blank"]) == {
        "long": simhash(TEXT),
        "short": None,
        "empty": None,
        "fp": 0,
        "blank": None,
    }


def test_sixteen_mebibyte_text_document(start_server: StartServer) -> None:
    server = start_server(max_message_bytes=32 * 2**20)  # above the 16 MiB default
    _, stub = make_stub(server.address)
    words = " ".join(f"word{i}" for i in range(150_000))
    text = (words + " ") * (16 * 2**20 // (len(words) + 1) + 1)
    text = text[: 16 * 2**20]
    assert len(text.encode()) == 16 * 2**20
    response = stub.Add(pb.AddRequest(documents=[doc("big", text=text)]), timeout=60)
    assert response.results[0].status == ADDED
    assert response.results[0].fingerprint == simhash(text)


def test_message_over_the_size_limit_is_resource_exhausted(start_server: StartServer) -> None:
    server = start_server(max_message_bytes=1 << 20)
    channel, stub = make_stub(server.address)
    with channel:
        add(stub, {"kept": 5})
        before = observed_state(stub, ["kept", "huge"])
        big = pb.AddRequest(documents=[doc("huge", text="word " * (2 << 18))])
        expect_status(grpc.StatusCode.RESOURCE_EXHAUSTED, stub.Add, big)
        assert observed_state(stub, ["kept", "huge"]) == before


# ---------------------------------------------------------------------------------- streaming


def test_ingest_streams_several_batches_in_order(stub: PermIndexStub) -> None:
    batches = [
        [doc(f"b{b}/d{i}", fingerprint=b * 1000 + i) for i in range(50)]
        + [doc(f"b{b}/short", text="too short")]
        for b in range(5)
    ]
    batches[3].append(doc("b0/d0", fingerprint=7))  # replaces a key of batch 0
    responses = list(stub.Ingest(pb.AddRequest(documents=b) for b in batches))
    assert len(responses) == 5
    for b, (batch, response) in enumerate(zip(batches, responses, strict=True)):
        assert [r.key for r in response.results] == [d.key for d in batch]
        assert response.added == 50 and response.too_short == 1
        assert response.replaced == (1 if b == 3 else 0)
    assert stub.Stats(pb.StatsRequest()).count == 250
    assert get_all(stub, ["b0/d0", "b4/d49"]) == {"b0/d0": 7, "b4/d49": 4049}


def test_ingest_refused_batch_ends_the_stream_and_keeps_earlier_ones(stub: PermIndexStub) -> None:
    batches = [
        [doc("one", 1)],
        [doc("two", 2)],
        [doc("three", 3), doc("", 4)],  # refused as a whole
        [doc("four", 5)],  # never read
    ]
    call = stub.Ingest(pb.AddRequest(documents=b) for b in batches)
    received = []
    with pytest.raises(grpc.RpcError) as caught:
        for response in call:
            received.append(response)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "documents[1]: key is empty" in str(caught.value.details())
    assert len(received) == 2
    assert get_all(stub, ["one", "two", "three", "four"]) == {
        "one": 1,
        "two": 2,
        "three": None,
        "four": None,
    }


# ------------------------------------------------------------------------------- check and add


def test_check_and_add_within_one_batch(stub: PermIndexStub) -> None:
    base = 0x0123_4567_89AB_CDEF
    response = stub.CheckAndAdd(
        pb.CheckAndAddRequest(
            documents=[
                doc("first", base),
                doc("second", flip(base, [0, 63])),  # distance 2 from first
                doc("third", flip(base, [1, 2, 3, 4])),  # distance 4: not a near-duplicate
                doc("short", text="hi"),
                doc("first", flip(base, [5])),  # its own key never blocks: replaced
            ]
        )
    )
    got = [(r.key, r.status, as_tuples(r.matches)) for r in response.results]
    assert got == [
        ("first", ADDED, []),
        ("second", NEAR_DUPLICATE, [("first", base, 2)]),
        ("third", ADDED, []),
        ("short", TOO_SHORT, []),
        ("first", REPLACED, []),
    ]
    assert get_all(stub, ["first", "second", "third"]) == {
        "first": flip(base, [5]),
        "second": None,
        "third": flip(base, [1, 2, 3, 4]),
    }
    # with k=1 the distance-2 document is not blocked
    response = stub.CheckAndAdd(pb.CheckAndAddRequest(documents=[doc("second", base ^ 3)], k=1))
    assert response.results[0].status == ADDED


def test_check_and_add_from_two_concurrent_clients(server: RunningServer) -> None:
    channels = [make_stub(server.address) for _ in range(2)]
    rng = random.Random(11)
    rounds = 25
    try:
        with ThreadPoolExecutor(max_workers=2) as pool:
            for r in range(rounds):
                base = rng.getrandbits(64)
                barrier = threading.Barrier(2, timeout=10)
                docs = [doc(f"round{r}/a", base), doc(f"round{r}/b", flip(base, [r % 64]))]

                def send(
                    i: int, docs: list[pb.Document] = docs, b: threading.Barrier = barrier
                ) -> int:
                    b.wait()
                    stub = channels[i][1]
                    response = stub.CheckAndAdd(pb.CheckAndAddRequest(documents=[docs[i]]))
                    status: int = response.results[0].status
                    return status

                statuses = sorted(
                    f.result(timeout=20) for f in [pool.submit(send, i) for i in (0, 1)]
                )
                assert statuses == sorted([ADDED, NEAR_DUPLICATE]), r
        stub = channels[0][1]
        assert stub.Stats(pb.StatsRequest()).count == rounds
        assert all_pairs(stub) == []
    finally:
        for channel, _ in channels:
            channel.close()


# ------------------------------------------------------------------------------ remove / pairs


def test_remove_counts_and_lists_not_found(stub: PermIndexStub) -> None:
    add(stub, {"a": 1, "b": 2, "c": 3})
    response = stub.Remove(pb.RemoveRequest(keys=["a", "nope", "c", "a"]))
    assert response.removed == 2
    assert list(response.not_found) == ["nope"]
    assert get_all(stub, ["a", "b", "c"]) == {"a": None, "b": 2, "c": None}
    assert stub.Stats(pb.StatsRequest()).count == 1


def test_pairs_against_brute_force(stub: PermIndexStub) -> None:
    entries = neighbourhood(random.Random(3), 40)
    entries["dup/x"] = entries["dup/y"] = 42
    add(stub, entries)
    for k in (0, 1, 3):
        assert all_pairs(stub, k) == brute_pairs(entries, k)
    assert all_pairs(stub) == brute_pairs(entries, 3)


def test_pairs_over_ten_thousand_arrive_complete_in_chunks(stub: PermIndexStub) -> None:
    n = 152  # C(152, 2) = 11,476 pairs of equal fingerprints, plus near ones
    entries = {f"same/{i:03d}": 99 for i in range(n)}
    entries.update({f"near/{i}": 99 ^ (1 << i) for i in range(3)})
    add(stub, entries)
    chunks = list(stub.Pairs(pb.PairsRequest(k=1)))
    sizes = [len(c.pairs) for c in chunks]
    assert len(chunks) >= 2 and max(sizes) <= 10_000
    got = sorted((p.key_a, p.key_b, p.distance) for c in chunks for p in c.pairs)
    assert len(got) == len(set(got)) == n * (n - 1) // 2 + 3 * n
    assert got == brute_pairs(entries, 1)
    assert all(a < b for a, b, _ in got)


# ------------------------------------------------------------------------------ stats / snapshot


def test_stats(server: RunningServer, stub: PermIndexStub) -> None:
    stats = stub.Stats(pb.StatsRequest())
    assert stats.count == 0 and not stats.HasField("last_snapshot_unix_seconds")
    assert (stats.design.blocks, stats.design.leading, stats.design.tables) == (4, 1, 4)
    assert stats.design.k == 3
    assert stats.version == permindex.__version__
    assert stats.uptime_seconds > 0
    assert stats.resident_memory_bytes > 10 * 2**20
    add(stub, {f"k{i}": i for i in range(1000)})
    stats = stub.Stats(pb.StatsRequest())
    assert stats.count == 1000 and stats.memory_bytes > 1000 * 8
    snap = stub.Snapshot(pb.SnapshotRequest())
    path = Path(snap.path)
    assert path == server.data_dir / SNAPSHOT_NAME
    assert snap.count == 1000 and snap.bytes == path.stat().st_size and snap.seconds >= 0
    stats = stub.Stats(pb.StatsRequest())
    assert stats.last_snapshot_count == 1000 and stats.last_snapshot_bytes == snap.bytes
    assert abs(stats.last_snapshot_unix_seconds - time.time()) < 60


def test_snapshot_round_trip_restart_gives_same_answers(start_server: StartServer) -> None:
    entries = neighbourhood(random.Random(5), 80)
    entries["ключ/ü"] = entries["base/0"]
    queries = list(entries.values())[::4]
    first = start_server()
    channel, stub = make_stub(first.address)
    with channel:
        add(stub, entries)
        stub.Remove(pb.RemoveRequest(keys=["base/1"]))
        snap = stub.Snapshot(pb.SnapshotRequest())
        assert snap.count == len(entries) - 1
        before = (
            stub.Query(pb.QueryRequest(fingerprints=queries)),
            all_pairs(stub),
            get_all(stub, list(entries)),
        )
    first.stop(grace=1)
    second = start_server()  # same data dir
    assert second.loaded_count == len(entries) - 1
    channel, stub = make_stub(second.address)
    with channel:
        after = (
            stub.Query(pb.QueryRequest(fingerprints=queries)),
            all_pairs(stub),
            get_all(stub, list(entries)),
        )
        stats = stub.Stats(pb.StatsRequest())
        assert stats.last_snapshot_count == snap.count
    assert after == before
    assert after[2]["base/1"] is None


def test_stop_writes_a_final_snapshot_only_when_changed(start_server: StartServer) -> None:
    first = start_server()
    channel, stub = make_stub(first.address)
    with channel:
        add(stub, {"x": 1, "y": 2})
    info = first.stop(grace=1)
    assert info is not None and info.count == 2
    assert first.stop() is None  # idempotent
    second = start_server()
    assert second.loaded_count == 2
    assert second.stop(grace=1) is None  # nothing changed: no new generation
    assert read_snapshot(first.data_dir / SNAPSHOT_NAME).info.sequence == 1


def test_periodic_snapshot_only_when_changed(start_server: StartServer) -> None:
    server = start_server(snapshot_interval=0.1)
    path = server.data_dir / SNAPSHOT_NAME
    channel, stub = make_stub(server.address)

    def wait_for_sequence(sequence: int) -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if path.exists() and read_snapshot(path).info.sequence >= sequence:
                return
            time.sleep(0.05)
        pytest.fail(f"no snapshot of sequence {sequence} within 10 s")

    with channel:
        time.sleep(0.35)
        assert not path.exists()  # nothing changed yet
        add(stub, {"a": 1})
        wait_for_sequence(1)
        time.sleep(0.35)
        assert read_snapshot(path).info.sequence == 1  # unchanged: not rewritten
        add(stub, {"b": 2})
        wait_for_sequence(2)
        assert read_snapshot(path).keys == ["a", "b"]
    # The periodic snapshots are not the stop's: nothing changed since, so it writes none.
    assert server.stop(grace=1) is None
    assert server.final_snapshots == []


def test_idle_server_merges_its_runs(
    start_server: StartServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Adds in several batches leave several runs per table; once nothing was added for
    MERGE_IDLE_SECONDS the server merges them into one run per table (and not while adds keep
    coming); queries over gRPC answer as brute force before and after."""
    import permindex.rpc.server as server_module

    monkeypatch.setattr(server_module, "MERGE_IDLE_SECONDS", 0.3)
    server = start_server()
    index = server.state.index
    rng = random.Random(5)
    entries = {f"doc-{i}": rng.getrandbits(64) for i in range(3000)}
    names = list(entries)
    channel, stub = make_stub(server.address)
    # 2,000 then 400 (two runs: the older is more than 4 times larger), then 10 x 60 (the
    # memtable): a third of the entries outside the largest run.
    batches = [names[:2000], names[2000:2400]] + [
        names[start : start + 60] for start in range(2400, 3000, 60)
    ]
    with channel:
        for batch in batches:
            add(stub, {name: entries[name] for name in batch})
            time.sleep(0.05)  # adds keep coming: no merge yet
        assert all(runs == ((2000, 400), 600) for runs in index.table_runs())
        queries = [entries[name] ^ 0b101 for name in names[::150]]

        def answers() -> list[list[tuple[str, int]]]:
            reply = stub.Query(pb.QueryRequest(fingerprints=queries), timeout=30)
            return [[(m.key, m.distance) for m in r.matches] for r in reply.results]

        before = answers()
        deadline = time.monotonic() + 10
        while any(len(runs) > 1 or memtable for runs, memtable in index.table_runs()):
            assert time.monotonic() < deadline, "the runs were not merged within 10 s"
            time.sleep(0.05)
        assert answers() == before
    values = np.array(list(entries.values()), dtype=np.uint64)
    for q, got in zip(queries, before, strict=True):
        expected = sorted(
            (names[i], bin(int(values[i]) ^ q).count("1"))
            for i in brute_force_query(values, q, 3).tolist()
        )
        assert sorted(got) == expected


def test_snapshot_with_other_k_loads_with_a_warning(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    first = start_server(k=3)
    channel, stub = make_stub(first.address)
    with channel:
        add(stub, {"a": 0b1, "b": 0b11, "c": 0b1111})
    first.stop(grace=0)
    with caplog.at_level(logging.WARNING, logger="permindex"):
        second = start_server(k=1)
    assert "written with k=3" in caplog.text and "rebuilt" in caplog.text
    channel, stub = make_stub(second.address)
    with channel:
        assert all_pairs(stub) == [("a", "b", 1)]
        expect_status(grpc.StatusCode.INVALID_ARGUMENT, stub.Pairs, pb.PairsRequest(k=2))


# ------------------------------------------------------------------------- malformed requests


def test_malformed_requests_are_refused_and_change_nothing(stub: PermIndexStub) -> None:
    add(stub, {"kept": 1})
    keys = ["kept", "x", "y", "z" * 1025, "é" * 600]
    before = observed_state(stub, ["kept", "x", "y"])
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    cases: list[tuple[Any, Any, str]] = [
        (
            stub.Add,
            pb.AddRequest(documents=[doc("x", 1), doc("", 2)]),
            "documents[1]: key is empty",
        ),
        (
            stub.Add,
            pb.AddRequest(documents=[doc("x", 1), doc("y", 2), doc("z" * 1025, 3)]),
            "documents[2]: key 'zzz",
        ),
        (
            stub.Add,
            pb.AddRequest(documents=[doc("x", 1), doc("é" * 513, 3)]),  # 1,026 UTF-8 bytes
            "1,026 UTF-8 bytes; the limit is 1,024",
        ),
        (
            stub.Add,
            pb.AddRequest(documents=[doc("x", 1), doc("y")]),
            "documents[1] (key 'y'): no content",
        ),
        (stub.CheckAndAdd, pb.CheckAndAddRequest(documents=[doc("x", 1)], k=4), "k=4 is above"),
        (stub.CheckAndAdd, pb.CheckAndAddRequest(documents=[doc("x", 1), doc("")]), "key is empty"),
        (stub.Query, pb.QueryRequest(fingerprints=[1], k=4), "use k <= 3"),
        (stub.Pairs, pb.PairsRequest(k=4), "k=4"),
        (stub.Get, pb.GetRequest(keys=["kept", ""]), "keys[1]: key is empty"),
        (stub.Remove, pb.RemoveRequest(keys=["kept", "q" * 1025]), "keys[1]: key"),
        (stub.Ingest, iter([pb.AddRequest(documents=[doc("x", 1), doc("")])]), "key is empty"),
    ]
    for method, request, message in cases:
        error = expect_status(invalid, method, request)
        assert message in str(error.details()), (message, error.details())
        assert "Traceback" not in str(error.details())
        assert observed_state(stub, ["kept", "x", "y"]) == before
    assert get_all(stub, keys[:3]) == {"kept": 1, "x": None, "y": None}
    ok = stub.Add(pb.AddRequest(documents=[doc("é" * 512, 9)]))  # exactly 1,024 bytes
    assert ok.added == 1


def test_batches_over_max_batch_are_resource_exhausted(start_server: StartServer) -> None:
    server = start_server(max_batch=4)
    channel, stub = make_stub(server.address)
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
    keys = ["kept", "a", "b", "new"]
    with channel:
        add(stub, {"kept": 1, "a": 2, "b": 3, "c": 4})  # exactly the limit
        before = observed_state(stub, keys)
        five = [doc("kept", 5), doc("a", 6), doc("b", 7), doc("new", 8), doc("new2", 9)]
        cases: list[tuple[Any, Any]] = [
            (stub.Add, pb.AddRequest(documents=five)),
            (stub.Ingest, iter([pb.AddRequest(documents=five)])),
            (stub.CheckAndAdd, pb.CheckAndAddRequest(documents=five)),
            (stub.Query, pb.QueryRequest(fingerprints=[1, 2, 3, 4, 5])),
            (stub.Get, pb.GetRequest(keys=[*keys, "c"])),
            (stub.Remove, pb.RemoveRequest(keys=[*keys, "c"])),
        ]
        for method, request in cases:
            error = expect_status(exhausted, method, request)
            assert "limit is 4" in str(error.details())
            assert observed_state(stub, keys) == before


def test_unexpected_error_is_internal_without_traceback(
    server: RunningServer,
    stub: PermIndexStub,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def broken() -> tuple[list[str], Any]:
        raise RuntimeError("secret internal state")

    monkeypatch.setattr(server.state.index, "export", broken)  # what the join reads
    with caplog.at_level(logging.ERROR, logger="permindex"):
        error = expect_status(grpc.StatusCode.INTERNAL, stub.Pairs, pb.PairsRequest())
    details = str(error.details())
    assert "RuntimeError" in details and "see the server log" in details
    assert "secret" not in details and "Traceback" not in details
    assert "secret internal state" in caplog.text and "Traceback" in caplog.text


# ------------------------------------------------------------------------ health / reflection


def test_health_serving_after_load_and_not_serving_at_shutdown(server: RunningServer) -> None:
    channel = grpc.insecure_channel(server.address)
    health = health_pb2_grpc.HealthStub(channel)
    try:
        for service in ("", SERVICE_NAME):
            response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
            assert response.status == SERVING
        expect_status(
            grpc.StatusCode.NOT_FOUND,
            health.Check,
            health_pb2.HealthCheckRequest(service="no.such.Service"),
        )
        watch = health.Watch(health_pb2.HealthCheckRequest(service=SERVICE_NAME), timeout=20)
        assert next(watch).status == SERVING
        stopper = threading.Thread(target=server.stop, kwargs={"grace": 10})
        stopper.start()
        assert next(watch).status == NOT_SERVING  # sent when the shutdown begins
        watch.cancel()
        stopper.join(timeout=15)
        assert not stopper.is_alive() and server.stopped
    finally:
        channel.close()


def test_reflection_lists_the_service(server: RunningServer) -> None:
    with grpc.insecure_channel(server.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {SERVICE_NAME, "grpc.health.v1.Health"} <= services
        file = database.FindFileContainingSymbol(SERVICE_NAME)
        assert file.package == "permindex.v1"
        assert {m.name for m in file.service[0].method} == {
            "Add",
            "Ingest",
            "Query",
            "QueryColumns",
            "Get",
            "CheckAndAdd",
            "Remove",
            "Pairs",
            "Clusters",
            "Flags",
            "ExactDuplicates",
            "Stats",
            "Snapshot",
            "Export",
            "CreateCollection",
            "ListCollections",
            "DescribeCollection",
            "DropCollection",
        }


# ----------------------------------------------------------------------------- refused starts


def _corrupt(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "flip":
        data[len(data) // 2] ^= 0x01
    elif how == "truncate":
        del data[len(data) - 10 :]
    elif how == "foreign":
        data = bytearray(b"<html>not a snapshot</html>\n")
    elif how == "version":
        data[8] = 9
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["flip", "truncate", "foreign", "version"])
def test_corrupt_snapshot_is_refused_at_start(
    start_server: StartServer, tmp_path: Path, how: str
) -> None:
    first = start_server()
    channel, stub = make_stub(first.address)
    with channel:
        add(stub, {f"k{i}": i for i in range(100)})
    first.stop(grace=0)
    path = first.data_dir / SNAPSHOT_NAME
    _corrupt(path, how)
    with pytest.raises(CorruptFileError) as caught:
        create_server(server_config(first.data_dir))
    assert str(path) in str(caught.value)
    DataDir(first.data_dir).close()  # not left locked by the refused start
    with pytest.raises(CorruptFileError):  # and nothing was overwritten
        read_snapshot(path)


@pytest.mark.parametrize(
    ("keys", "match"),
    [
        (["a", "b", "a"], "3 entries but only 2 distinct keys|the key of row 2 is stored twice"),
        (["ok", "x" * 1025], "invalid entry"),
    ],
)
def test_well_formed_snapshot_with_bad_entries_is_refused(
    tmp_path: Path, keys: list[str], match: str
) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    path = data_dir / SNAPSHOT_NAME
    write_snapshot(path, keys, list(range(len(keys))), k=3, design=(4, 1))
    with pytest.raises(CorruptFileError, match=match) as caught:
        create_server(server_config(data_dir))
    assert caught.value.path == str(path)


def test_data_dir_in_use_is_refused(server: RunningServer) -> None:
    with pytest.raises(DataDirLockedError, match="in use"):
        create_server(server_config(server.data_dir))


def test_port_in_use_is_refused(server: RunningServer, tmp_path: Path) -> None:
    with pytest.raises(OSError, match="cannot listen on"):
        create_server(server_config(tmp_path / "other", address=server.address))


# --------------------------------------------------------------- real process: signals, exits

LAUNCHER = """
import sys
from pathlib import Path
from permindex.rpc.config import ServerConfig
from permindex.rpc.server import run_server
config = ServerConfig(address=sys.argv[1], data_dir=Path(sys.argv[2]), snapshot_interval=0,
                      grace_seconds=15)
sys.exit(run_server(config))
"""


class ServerProcess:
    """``python -c LAUNCHER ADDRESS DATA_DIR`` with its stderr read by a thread."""

    def __init__(self, address: str, data_dir: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", LAUNCHER, address, str(data_dir)],
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)
            self.lines.put(line)

    def address(self, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.2)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            found = re.search(r"serving on (\S+:\d+)", line)
            if found:
                return found.group(1)
        self.process.kill()
        self.wait()
        pytest.fail(f"server did not start; stderr: {''.join(self.stderr)}")

    def wait(self, timeout: float = 30) -> int:
        try:
            return self.process.wait(timeout=timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
            self._reader.join(timeout=5)
            assert self.process.stderr is not None
            self.process.stderr.close()


def test_sigterm_closes_idle_streams_at_once_then_snapshots(tmp_path: Path) -> None:
    """SIGTERM with an Ingest stream between batches and a health watch open (the default grace
    is 30 s): health goes NOT_SERVING, the watch sees it and is closed with UNAVAILABLE, the idle
    stream is closed with UNAVAILABLE at once (its acknowledged batch is kept), and the process
    exits within a few seconds with its final snapshot."""
    data_dir = tmp_path / "data"
    proc = ServerProcess("127.0.0.1:0", data_dir)
    address = proc.address()
    assert re.fullmatch(r"127\.0\.0\.1:\d+", address)
    line = next(line for line in proc.stderr if "serving on" in line)
    assert line.startswith("permindex: serving on ") and "(0 keys loaded from " in line
    channel, stub = make_stub(address)
    health = health_pb2_grpc.HealthStub(channel)
    with channel:
        add(stub, {f"before/{i}": i for i in range(100)})
        requests: queue.Queue[pb.AddRequest | None] = queue.Queue()
        call = stub.Ingest(iter(requests.get, None), timeout=60)
        requests.put(pb.AddRequest(documents=[doc("stream/1", 1)]))
        assert next(call).added == 1
        watch = health.Watch(health_pb2.HealthCheckRequest(), timeout=60)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        began = time.monotonic()
        proc.process.send_signal(signal.SIGTERM)
        assert next(watch).status == NOT_SERVING
        with pytest.raises(grpc.RpcError) as closed:
            next(watch)
        said = (closed.value.code(), closed.value.details())
        assert said[0] == grpc.StatusCode.UNAVAILABLE and "shutting down" in (said[1] or ""), said
        with pytest.raises(grpc.RpcError) as ended:
            next(call)
        said = (ended.value.code(), ended.value.details())
        assert said[0] == grpc.StatusCode.UNAVAILABLE and "shutting down" in (said[1] or ""), said
        requests.put(None)
        assert proc.wait() == 0, "".join(proc.stderr)
        assert time.monotonic() - began < 10, "".join(proc.stderr)
    assert "Traceback" not in "".join(proc.stderr)
    assert proc.stderr[-1].startswith("permindex: stopped; snapshot of 101 keys written to ")
    snapshot = read_snapshot(data_dir / SNAPSHOT_NAME)
    assert snapshot.info.count == 101
    assert {"stream/1", "before/99"} <= set(snapshot.keys)
    again = ServerProcess("127.0.0.1:0", data_dir)
    address = again.address()
    assert any("(101 keys loaded from " in line for line in again.stderr)
    channel, stub = make_stub(address)
    with channel:
        assert get_all(stub, ["stream/1", "before/5"]) == {"stream/1": 1, "before/5": 5}
    again.process.send_signal(signal.SIGINT)
    assert again.wait() == 0
    assert again.stderr[-1] == (
        "permindex: stopped; no snapshot needed: nothing changed since the last one or the start\n"
    )


def test_run_server_refuses_a_corrupt_snapshot_with_one_line(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    (data_dir / SNAPSHOT_NAME).write_bytes(b"\x89PMX\r\n\x1a\n" + bytes(30))
    proc = ServerProcess("127.0.0.1:0", data_dir)
    code = proc.wait()
    stderr = "".join(proc.stderr)
    assert code == exit_code_for(CorruptFileError("x")) == 7
    lines = without_loading_notice(stderr)  # the notice: loading the kernels took long
    assert len(lines) == 1 and lines[0].startswith("permindex: error: "), stderr
    assert str(data_dir / SNAPSHOT_NAME) in stderr and "truncated" in stderr
    assert "serving on" not in stderr and "Traceback" not in stderr


def test_run_server_refuses_a_port_in_use_with_one_line(
    server: RunningServer, tmp_path: Path
) -> None:
    proc = ServerProcess(server.address, tmp_path / "other")
    code = proc.wait()
    stderr = "".join(proc.stderr)
    assert code == 2  # the --address given cannot be used: a bad command line
    assert stderr.count("\n") == 1 and f"cannot listen on {server.address}" in stderr
    assert "the address is in use" in stderr and "port 0 picks a free one" in stderr
    assert "Traceback" not in stderr and "Errno" not in stderr


def test_streamed_replies_fit_a_small_message_limit(start_server: StartServer) -> None:
    """With --max-message-mb 1, Pairs, Clusters and Flags still arrive whole: their chunks are
    sized for the longest keys, not only counted."""
    running = start_server(max_message_bytes=1 << 20)
    channel, stub = make_stub(running.address)
    with channel:
        long = "k" * 1000
        entries = {f"{long}{i:04d}": (i % 2) * 0xFFFF for i in range(800)}  # two fingerprints
        add(stub, entries)
        pairs = [p for r in stub.Pairs(pb.PairsRequest(k=0)) for p in r.pairs]
        assert len(pairs) == 2 * (400 * 399 // 2)
        assert len({(p.key_a, p.key_b) for p in pairs}) == len(pairs)
        clusters = [
            key
            for r in stub.Clusters(pb.ClustersRequest(k=0))
            for c in r.clusters
            for key in c.keys
        ]
        assert sorted(clusters) == sorted(entries)
        flags = [f.key for r in stub.Flags(pb.FlagsRequest(k=0)) for f in r.flags]
        assert sorted(flags) == sorted(entries)


def test_a_query_answer_over_the_message_limit_is_refused_clearly(
    start_server: StartServer,
) -> None:
    running = start_server(max_message_bytes=1 << 20)
    channel, stub = make_stub(running.address)
    with channel:
        add(stub, {f"{'x' * 500}{i:05d}": 7 for i in range(1000)})  # 1000 equal fingerprints
        request = pb.QueryRequest(fingerprints=[7] * 100)  # 100 x 1000 matches x ~520 bytes
        error = expect_status(grpc.StatusCode.RESOURCE_EXHAUSTED, stub.Query, request)
        details = error.details() or ""
        assert "message limit" in details and "ask with a limit" in details
        # With a limit, the same request is answered.
        answer = stub.Query(pb.QueryRequest(fingerprints=[7] * 100, limit=5))
        assert [len(r.matches) for r in answer.results] == [5] * 100


def test_sighup_stops_gracefully_with_a_final_snapshot(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    proc = ServerProcess("127.0.0.1:0", data_dir)
    channel, stub = make_stub(proc.address())
    with channel:
        add(stub, {"a": 1, "b": 2})
    proc.process.send_signal(signal.SIGHUP)
    assert proc.wait() == 0, "".join(proc.stderr)
    assert proc.stderr[-1].startswith("permindex: stopped; snapshot of 2 keys written to ")
    assert read_snapshot(data_dir / SNAPSHOT_NAME).info.count == 2


def test_a_server_that_never_held_a_key_stops_without_claiming_a_snapshot(tmp_path: Path) -> None:
    """Nothing written since the start and no snapshot ever taken: the stop line says that no
    snapshot was needed, not that one was taken before; no snapshot file appears."""
    data_dir = tmp_path / "data"
    proc = ServerProcess("127.0.0.1:0", data_dir)
    proc.address()
    proc.process.send_signal(signal.SIGTERM)
    assert proc.wait() == 0, "".join(proc.stderr)
    assert proc.stderr[-1] == (
        "permindex: stopped; no snapshot needed: nothing changed since the last one or the start\n"
    )
    assert not (data_dir / SNAPSHOT_NAME).exists()


def test_remove_lists_each_missing_key_once(stub: PermIndexStub) -> None:
    add(stub, {"here": 5})
    response = stub.Remove(pb.RemoveRequest(keys=["gone", "here", "gone", "here", "other"]))
    assert response.removed == 1
    assert list(response.not_found) == ["gone", "other"]


def test_graceful_stop_names_the_snapshots_of_every_collection(tmp_path: Path) -> None:
    """Only a non-default collection changed: the stop line names its snapshot."""
    import permindex

    data_dir = tmp_path / "data"
    proc = ServerProcess("127.0.0.1:0", data_dir)
    with permindex.Client(proc.address()) as client:
        client.create_collection("crawl")
        client.use("crawl").add([("a", 1), ("b", 2), ("c", 3)])
    proc.process.send_signal(signal.SIGTERM)
    assert proc.wait() == 0, "".join(proc.stderr)
    last = proc.stderr[-1]
    assert last.startswith("permindex: stopped; snapshot of 3 keys written to "), last
    assert "collections/crawl/" in last
