"""``serve --max-memory``: writes past the limit refused with RESOURCE_EXHAUSTED and nothing applied
or logged, reads and removes served when full, removals letting writes in again, Ingest's count
of what it applied, bad sizes refused at the start; the Stats breakdown of the index memory and
its CLI; real servers on 127.0.0.1 (port 0)."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import grpc
import numpy as np
import pytest
from conftest import StartServer, make_stub

import permindex
from permindex.cli import main
from permindex.errors import EXIT_CODES, LimitExceededError, ServerError
from permindex.rpc.config import memory_size
from permindex.rpc.server import RunningServer
from permindex.v1 import index_pb2 as pb

MIB = 1 << 20
BREAKDOWN_FIELDS = (
    "fingerprint_bytes", "liveness_bytes", "time_bytes", "table_bytes", "key_bytes",
    "key_offset_bytes", "key_hash_bytes", "key_map_bytes",
)  # fmt: skip


def entries(prefix: str, n: int, seed: int = 0) -> list[tuple[str, int]]:
    values = np.random.default_rng(seed).integers(0, 2**63, n, dtype=np.uint64).tolist()
    return [(f"{prefix}{i:08d}", value) for i, value in enumerate(values)]


def accounted(server: RunningServer) -> int:
    """The index memory of every collection of ``server``, bytes."""
    assert server.catalog is not None
    return sum(state.index.memory_bytes() for _, state in server.catalog.items())


def fill(client: permindex.Client, server: RunningServer, limit: int) -> list[tuple[str, int]]:
    """Add batches of 1,000 until one is refused; after each admitted one the accounted memory
    is within ``limit`` (the estimate is an upper bound). Returns the refused batch."""
    for step in range(1000):
        batch = entries(f"b{step}-", 1000, seed=step)
        try:
            client.add(batch)
        except LimitExceededError as refused:
            assert isinstance(refused, ServerError) and refused.code == "RESOURCE_EXHAUSTED"
            return batch
        server.state.index._rows.wait_for_growth()  # a growth ahead counts once it is done
        assert accounted(server) <= limit
    raise AssertionError("the limit was never reached")


def test_a_write_past_the_limit_is_refused_and_changes_nothing(
    start_server: StartServer,
) -> None:
    limit = 4 * MIB
    server = start_server(max_memory=limit)
    with permindex.Client(server.address) as client:
        refused_batch = fill(client, server, limit)
        count, sequence = client.stats().count, server.state.store.sequence
        with pytest.raises(LimitExceededError) as refused:
            client.add(refused_batch)
        message = str(refused.value)
        assert f"{limit:,} bytes" in message and "--max-memory" in message
        used, need = (int(n.replace(",", "")) for n in re.findall(r"([\d,]+) bytes", message)[1:3])
        assert used + need > limit and used <= limit
        assert "nothing was applied" in message and "remove or expire data" in message.lower()
        with pytest.raises(LimitExceededError):
            client.check_and_add_many(refused_batch)  # half of it may fit: the keys are small
        assert client.stats().count == count
        assert server.state.store.sequence == sequence  # not logged
        assert client.get(refused_batch[0][0]) is None
    server.stop()
    again = start_server(max_memory=limit)  # the same data directory: the log replayed
    with permindex.Client(again.address) as client:
        assert client.stats().count == count
        assert client.get_many([key for key, _ in refused_batch]) == [None] * len(refused_batch)


def test_reads_and_removes_are_served_when_full_and_removals_let_writes_in(
    start_server: StartServer, tmp_path: Path
) -> None:
    loaded = entries("k", 30_000)
    server = start_server()
    with permindex.Client(server.address) as client:
        client.add(loaded)
    server.stop()
    # restarted under a limit below what it holds: it starts, and refuses every write
    server = start_server(max_memory=MIB)
    assert accounted(server) > MIB
    with permindex.Client(server.address) as client:
        with pytest.raises(LimitExceededError, match="max-memory"):
            client.add([("new", 1)])
        with pytest.raises(LimitExceededError, match="max-memory"):
            client.check_and_add("new", 1)
        with pytest.raises(LimitExceededError, match="CreateCollection"):
            client.create_collection("other")
        assert client.list_collections()[0].name == "default"
        key, value = loaded[7]
        assert client.get(key) == value
        assert [m.key for m in client.query(value, k=0)] == [key]
        assert sum(1 for _ in client.export()) == len(loaded)
        stats = client.stats()
        assert (stats.max_memory_bytes, stats.count) == (MIB, len(loaded))
        assert stats.server_memory_bytes == accounted(server) > MIB
        client.snapshot()
        assert client.remove([k for k, _ in loaded[:29_000]]).removed == 29_000
        # the dead rows are compacted when a write needs their memory
        assert client.add([("new", 1)]).added == 1
        assert accounted(server) <= MIB
        assert client.stats().count == 1001
        client.create_collection("other")


def test_ingest_reports_what_it_applied_before_the_refusal(start_server: StartServer) -> None:
    limit = 2 * MIB
    server = start_server(max_memory=limit)
    channel, stub = make_stub(server.address)
    acknowledged = 0
    try:
        requests = (
            pb.AddRequest(
                documents=[pb.Document(key=key, fingerprint=value) for key, value in batch]
            )
            for batch in (entries(f"m{step}-", 500, seed=step) for step in range(1000))
        )
        with pytest.raises(grpc.RpcError) as ended:
            for reply in stub.Ingest(requests):
                assert reply.added == 500
                acknowledged += 1
        assert ended.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        details = ended.value.details() or ""
        assert f"message {acknowledged + 1} of this Ingest" in details
        assert f"the {acknowledged} messages before it, {acknowledged * 500} documents" in details
        count = stub.Stats(pb.StatsRequest()).count
        assert acknowledged > 0 and count == acknowledged * 500
    finally:
        channel.close()


def test_stats_breakdown_sums_to_the_memory(start_server: StartServer) -> None:
    server = start_server(max_memory=64 * MIB)
    with permindex.Client(server.address) as client:
        client.create_collection("aging", expire_after=3600)
        for target in (client, client.use("aging")):
            target.add(entries("s", 5000))
            target.remove(["s00000001"])
    channel, stub = make_stub(server.address)
    try:
        total = 0
        for collection in ("", "aging"):
            stats = stub.Stats(pb.StatsRequest(collection=collection))
            parts = stats.memory_breakdown
            values = [getattr(parts, name) for name in BREAKDOWN_FIELDS]
            assert sum(values) == stats.memory_bytes > 0
            assert parts.log_buffer_bytes == 0  # at rest
            state = server.catalog.get(collection) if server.catalog else server.state
            assert tuple(state.index.memory_breakdown()) == tuple(values)
            assert parts.fingerprint_bytes >= 8 * 5000 and parts.liveness_bytes > 0
            assert parts.key_bytes >= 5000 * 6  # "s00000000": "s", a digit-run code, 4 bytes
            assert (parts.time_bytes > 0) == (collection == "aging")
            total += stats.memory_bytes
            assert stats.max_memory_bytes == 64 * MIB
        assert stats.server_memory_bytes == total
    finally:
        channel.close()


def test_the_stats_command_shows_the_breakdown(
    start_server: StartServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server = start_server(max_memory=64 * MIB)
    with permindex.Client(server.address) as client:
        client.add(entries("c", 100))
        memory = client.stats().memory_bytes
    assert main(["stats", "--address", server.address, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    parts = shown["memory_breakdown"]
    assert sum(v for k, v in parts.items() if k != "log_buffer_bytes") == memory
    assert parts["fingerprints_bytes"] > 0 and parts["key_map_bytes"] > 0
    assert shown["max_memory_bytes"] == 64 * MIB and shown["server_memory_bytes"] == memory
    assert main(["stats", "--address", server.address]) == 0
    text = dict(line.split("\t") for line in capsys.readouterr().out.splitlines())
    assert text["memory.tables_bytes"] == str(parts["tables_bytes"])
    assert text["max_memory_bytes"] == str(64 * MIB)


def test_metrics_export_the_limit_and_the_use(start_server: StartServer) -> None:
    server = start_server(max_memory=64 * MIB, metrics_address="127.0.0.1:0")
    with permindex.Client(server.address) as client:
        client.add(entries("g", 100))
    assert server.metrics is not None and server.metrics.address is not None
    url = f"http://{server.metrics.address}/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    values = dict(
        line.split(" ", 1) for line in text.splitlines() if line.startswith("permindex_memory_")
    )
    assert float(values["permindex_memory_limit_bytes"]) == 64 * MIB
    assert float(values["permindex_memory_used_bytes"]) == accounted(server)


@pytest.mark.parametrize(
    ("text", "size"),
    [("8GiB", 8 << 30), ("500MB", 500_000_000), ("1.5 gb", 1_500_000_000), ("1048576", MIB)],
)
def test_sizes(text: str, size: int) -> None:
    assert memory_size(text) == size


@pytest.mark.parametrize(
    ("argv", "environ", "fragment"),
    [
        (["--max-memory", "lots"], {}, "--max-memory: not a size: 'lots'"),
        (["--max-memory", "8XB"], {}, "not a size"),
        (["--max-memory", "1kB"], {}, "at least 1 MiB"),
        ([], {"PERMINDEX_MAX_MEMORY": "0"}, "PERMINDEX_MAX_MEMORY"),
    ],
)
def test_bad_sizes_are_refused_at_the_start(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    argv: list[str],
    environ: dict[str, str],
    fragment: str,
) -> None:
    monkeypatch.delenv("PERMINDEX_CONFIG", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    code = main(["serve", "--data-dir", str(tmp_path), "--address", "127.0.0.1:0", *argv])
    assert code == EXIT_CODES["usage"]
    assert fragment in capsys.readouterr().err
    assert not (tmp_path / "wal-00000000000000000001.log").exists()
