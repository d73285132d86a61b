"""permindex.AsyncClient against real servers on 127.0.0.1 (port 0): every method equal to the
blocking Client's answer (and to brute force), errors of the right public class, TLS and
tokens, the batching of a large add, retries on UNAVAILABLE for read-only calls only, the
context manager, cancellation, and several shards. Each test drives its coroutine with
``asyncio.run`` (no pytest plugin)."""

from __future__ import annotations

import asyncio
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from certs import Certificates, make_certificates
from conftest import StartServer

import permindex
from permindex import Index
from permindex.client import ingest_result_of
from permindex.rpc.server import RunningServer

TEXT = "the quick brown fox jumps over the lazy dog near the river bank at dawn"
TOKEN = "rw-0123456789abcdef0123"


def planted(seed: int, n: int = 40) -> dict[str, int]:
    """``n`` random fingerprints and a copy of each 1..3 bits away under another key."""
    rng = random.Random(seed)
    stored: dict[str, int] = {}
    for i in range(n):
        fp = rng.getrandbits(64)
        stored[f"b{i}"] = fp
        for bit in rng.sample(range(64), rng.randint(1, 3)):
            fp ^= 1 << bit
        stored[f"n{i}"] = fp
    return stored


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_async_client_is_exported_lazily() -> None:
    from permindex.client.aio import AsyncClient

    assert permindex.AsyncClient is AsyncClient


def test_every_method_equals_the_blocking_client(server: RunningServer) -> None:
    stored = planted(1)
    items = list(stored.items())
    index = Index(k=3)
    index.add_many(list(stored), list(stored.values()))
    queries = list(stored.values())[:20]

    async def run() -> None:
        async with permindex.AsyncClient(server.address, timeout=30) as client:
            added = await client.add(items[:10])
            assert added.added == 10 and [r.status for r in added.results] == ["added"] * 10
            counts: list[int] = []
            result = await client.ingest(items, progress=lambda r: counts.append(r.documents))
            assert (result.documents, result.added, result.replaced) == (80, 70, 10)
            assert counts == [80]
            batched = await client.ingest_batches([items[:30], items[30:]])
            assert (batched.batches, batched.replaced) == (2, 80)
            assert await client.query(queries[0]) == index.query(queries[0])
            assert await client.query_many(queries, k=1, limit=1) == [
                index.query(q, k=1, limit=1) for q in queries
            ]
            columns = await client.query_columns(np.array(queries, np.uint64), batch=3, window=2)
            assert columns.to_lists(len(queries)) == [index.query(q) for q in queries]
            empty = await client.query_columns([])
            assert len(empty) == 0
            assert await client.get("b3") == stored["b3"]
            assert await client.get_many(["b1", "absent"]) == [stored["b1"], None]
            assert sorted([kv async for kv in client.export()]) == sorted(items)
            with permindex.Client(server.address) as blocking:
                assert await client.pairs() == blocking.pairs()
                assert await client.clusters(k=2) == blocking.clusters(k=2)
                assert await client.flags() == blocking.flags()
                assert [p async for p in client.iter_pairs(1)] == blocking.pairs(k=1)
                assert [c async for c in client.iter_clusters()] == blocking.clusters()
                assert [f async for f in client.iter_flags()] == blocking.flags()
            await client.add([("copy", stored["b0"])])
            groups = await client.exact_duplicates()
            assert [sorted(g.keys) for g in groups] == [["b0", "copy"]]
            assert [g async for g in client.iter_exact_duplicates()] == groups
            check = await client.check_and_add("c", stored["b2"] ^ 1)
            assert check.status == "near_duplicate" and check.matches[0].key == "b2"
            solo = 0x0123456789ABCDEF
            assert (await client.check_and_add("solo", solo)).status == "added"
            again = await client.check_and_add("solo", solo ^ 1)  # itself: replaced
            assert again.status == "replaced" and again.added
            many = await client.check_and_add_many([("t1", TEXT), ("t2", TEXT), ("t3", "a b")])
            assert [r.status for r in many] == ["added", "near_duplicate", "too_short"]
            removed = await client.remove(["c", "t1", "absent"])
            assert (removed.removed, removed.not_found) == (1, ["c", "absent"])
            stats = await client.stats()
            assert stats.count == 82 and stats.k == 3
            snap = await client.snapshot()
            assert snap.count == 82
            info = await client.create_collection("other", k=2)
            assert info.k == 2
            other = client.use("other")
            await other.add([("x", 1)])
            assert (await other.describe_collection("other")).count == 1
            assert [c.name for c in await client.list_collections()] == ["default", "other"]
            assert await client.drop_collection("other") == 1

    asyncio.run(run())


def test_errors_are_the_public_classes(server: RunningServer) -> None:
    async def run() -> None:
        async with permindex.AsyncClient(server.address, timeout=10) as client:
            with pytest.raises(permindex.InvalidArgumentError):  # before anything is sent
                await client.query(1 << 64)
            with pytest.raises(TypeError):
                await client.query(1, k="3")  # type: ignore[arg-type]
            with pytest.raises(permindex.ServerInvalidArgumentError) as bad_k:
                await client.query(1, k=9)
            with pytest.raises(permindex.ServerNotFoundError) as missing:
                await client.describe_collection("nope")
            with pytest.raises(permindex.ServerCollectionExistsError) as exists:
                await client.create_collection("default")
            with pytest.raises(permindex.ServerInvalidArgumentError):
                await client.add([("", 1)])
        for error in (bad_k.value, missing.value, exists.value):
            assert type(error).__module__ == "permindex.errors"
            assert not type(error).__name__.startswith("_")
            assert getattr(permindex, type(error).__name__) is type(error)
        assert isinstance(missing.value, KeyError) and missing.value.code == "NOT_FOUND"
        async with permindex.AsyncClient(f"127.0.0.1:{_free_port()}", retries=0) as down:
            with pytest.raises(permindex.ServerUnavailableError) as unavailable:
                await down.stats()
            assert isinstance(unavailable.value, ConnectionError)
            assert "failed to connect" in str(unavailable.value)

    asyncio.run(run())


def test_a_large_add_is_split_by_the_client(start_server: StartServer) -> None:
    server = start_server(max_batch=5)
    documents = [(f"k{i}", i * 0x9E3779B97F4A7C15 % (1 << 64)) for i in range(23)]

    async def run() -> None:
        async with permindex.AsyncClient(server.address, batch_size=5) as client:
            result = await client.add(documents)
            assert result.added == 23 and len(result.results) == 23
            assert [r.key for r in result.results] == [k for k, _ in documents]
            found = await client.get_many([k for k, _ in documents])
            assert found == [fp for _, fp in documents]
            assert len(await client.check_and_add_many(documents[:12], k=0)) == 12
        async with permindex.AsyncClient(server.address, batch_size=50) as unsplit:
            with pytest.raises(permindex.ServerLimitExceededError):
                await unsplit.add(documents)  # over the server's batch limit

    asyncio.run(run())
    with permindex.Client(server.address, batch_size=5) as blocking:
        assert blocking.add([(f"s{i}", i) for i in range(23)]).added == 23


def test_reads_are_retried_while_unavailable_writes_are_not(start_server: StartServer) -> None:
    address = f"127.0.0.1:{_free_port()}"
    started: list[RunningServer] = []

    def start_later() -> None:
        time.sleep(0.8)
        started.append(start_server(address=address))

    async def run() -> None:
        async with permindex.AsyncClient(
            address, retries=8, backoff=0.1, max_backoff=0.5, timeout=5
        ) as client:
            with pytest.raises(permindex.ServerUnavailableError):
                await client.add([("k", 1)])  # a write fails at once: never retried
            thread = threading.Thread(target=start_later)
            began = time.monotonic()
            thread.start()
            assert (await client.stats()).count == 0  # retried until the server came up
            thread.join()
            assert time.monotonic() - began >= 0.7

    asyncio.run(run())
    assert started


def test_context_manager_closes_the_channel(server: RunningServer) -> None:
    async def run() -> None:
        async with permindex.AsyncClient(server.address) as client:
            await client.wait_ready(10)
            assert (await client.stats()).count == 0
        for call in (client.stats(), client.use("other").get("k"), client.pairs()):
            with pytest.raises(permindex.InvalidArgumentError, match="closed"):
                await call

    asyncio.run(run())
    with permindex.Client(server.address) as blocking:
        assert blocking.stats().count == 0
    with pytest.raises(permindex.InvalidArgumentError, match="closed"):
        blocking.stats()


def test_cancellation_stops_the_call_and_the_client_goes_on(server: RunningServer) -> None:
    rng = np.random.default_rng(3)
    with permindex.Client(server.address) as blocking:
        blocking.ingest((f"k{i}", int(v)) for i, v in enumerate(rng.integers(0, 2**63, 20_000)))
    asked = rng.integers(0, 2**63, 400_000, dtype=np.uint64)

    async def run() -> None:
        async with permindex.AsyncClient(server.address) as client:
            task = asyncio.ensure_future(client.query_columns(asked, batch=1000, window=1))
            await asyncio.sleep(0.05)
            assert not task.done()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            stream = client.iter_export()
            first = await stream.__anext__()
            await stream.aclose()  # cancels the export call
            assert first[0].startswith("k")
            assert (await client.stats()).count == 20_000

    asyncio.run(run())


def test_tls_and_token(start_server: StartServer, tmp_path: Path) -> None:
    certificates: Certificates = make_certificates(tmp_path / "certs")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN} read-write\n")
    server = start_server(
        tls_cert=certificates.server_cert, tls_key=certificates.server_key, token_file=tokens
    )

    async def run() -> None:
        async with permindex.AsyncClient(
            server.address, root_certificates=certificates.ca, token=TOKEN
        ) as client:
            await client.add([("a", 5)])
            assert await client.get("a") == 5
        async with permindex.AsyncClient(
            server.address, root_certificates=certificates.ca, retries=0
        ) as anonymous:
            with pytest.raises(permindex.ServerPermissionError):
                await anonymous.stats()
        async with permindex.AsyncClient(
            server.address, token=TOKEN, timeout=3, retries=0
        ) as plain:
            with pytest.raises(permindex.ServerUnavailableError):
                await plain.stats()

    asyncio.run(run())


def test_several_shards_equal_one_server(start_server: StartServer, tmp_path: Path) -> None:
    shards = [start_server(data_dir=tmp_path / f"shard{i}") for i in range(3)]
    single = start_server(data_dir=tmp_path / "single")
    stored = planted(2)
    items = list(stored.items())
    queries = list(stored.values())[:30]

    async def run() -> None:
        async with (
            permindex.AsyncClient([s.address for s in shards]) as sharded,
            permindex.AsyncClient(single.address) as one,
        ):
            assert sharded.shards == 3
            assert (await sharded.ingest(items)).added == (await one.ingest(items)).added
            assert await sharded.query_many(queries, limit=2) == await one.query_many(
                queries, limit=2
            )
            columns = await sharded.query_columns(queries, batch=4)
            assert columns.to_lists(len(queries)) == await one.query_many(queries)
            batch: list[tuple[str, int | str]] = [
                ("new", queries[0] ^ 1),
                ("b1", stored["b1"] ^ 2),
                ("t", TEXT),
            ]
            assert await sharded.check_and_add_many(batch) == await one.check_and_add_many(batch)
            assert sorted([kv async for kv in sharded.export()]) == sorted(
                [kv async for kv in one.export()]
            )
            assert (await sharded.stats()).count == (await one.stats()).count
            with pytest.raises(permindex.InvalidArgumentError, match="dedup"):
                await sharded.pairs()
            with pytest.raises(permindex.InvalidArgumentError, match="dedup"):
                sharded.iter_clusters()

    asyncio.run(run())


def test_an_interrupted_ingest_leaves_its_counts_on_the_error(server: RunningServer) -> None:
    def documents() -> Iterator[tuple[str, int]]:
        for i in range(12):
            yield f"k{i}", i
        raise OSError("the input broke")

    async def run() -> None:
        async with permindex.AsyncClient(server.address, batch_size=5) as client:
            with pytest.raises(OSError, match="broke") as broken:
                await client.ingest(documents())
            counts = ingest_result_of(broken.value)
            assert counts is not None and (counts.documents, counts.batches) == (12, 3)
            with pytest.raises(permindex.ServerInvalidArgumentError) as refused:
                await client.ingest_batches([[("a", 1), ("b", 2)], [("", 3)], [("c", 4)]])
            counts = ingest_result_of(refused.value)
            assert counts is not None
            assert (counts.documents, counts.in_flight, counts.in_flight_batches) == (2, 1, 1)
            assert await client.get_many(["a", "c"]) == [1, None]

    asyncio.run(run())


def test_every_exception_class_is_public_and_exported() -> None:
    import permindex.errors as errors

    classes = [
        value
        for name, value in vars(errors).items()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and value.__module__ == errors.__name__
    ]
    assert len(classes) >= 20
    for cls in classes:
        assert not cls.__name__.startswith("_"), cls
        assert cls.__name__ in errors.__all__ and cls.__name__ in permindex.__all__, cls
        assert getattr(permindex, cls.__name__) is cls
    for code in ("INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "NOT_FOUND", "UNAVAILABLE", "OTHER"):
        error = errors.server_error(code, "details", "127.0.0.1:1")
        assert type(error) in classes and error.code == code


def test_an_async_client_made_outside_the_event_loop_is_refused_clearly() -> None:
    with pytest.raises(permindex.InvalidArgumentError, match="inside the running event loop"):
        permindex.AsyncClient("127.0.0.1:1")
