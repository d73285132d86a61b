"""Prometheus metrics of a real server (scraped over HTTP) and the JSON log format."""

from __future__ import annotations

import json
import logging
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import StartServer
from prometheus_client.parser import text_string_to_metric_families

import permindex
from permindex.cli.logs import JsonFormatter
from permindex.errors import ServerError

TOKEN = "metrics-token-0123456789"


def scrape(address: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as reply:
        text = reply.read().decode("utf-8")
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def test_metrics_count_calls_codes_and_state(start_server: StartServer, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN} read-write\n")
    server = start_server(metrics_address="127.0.0.1:0", token_file=tokens)
    assert server.metrics is not None and server.metrics.address is not None
    with permindex.Client(server.address, token=TOKEN) as client:
        client.add([(f"k{i}", i << 40) for i in range(10)])
        client.ingest((f"s{i}", i) for i in range(5))
        client.query(0)
        with pytest.raises(ServerError):
            client.query(0, k=9)
        assert len(client.query_columns(range(5), batch=2)) > 0  # one stream of 3 messages
        with pytest.raises(ServerError):
            client.query_columns([0], k=9)
        client.pairs()
        client.snapshot()
        client.add([("after", 1 << 63)])
    with permindex.Client(server.address, retries=0) as anonymous, pytest.raises(ServerError):
        anonymous.stats()
    # A call is counted when its handler returns; a refusal's status reaches the client a moment
    # before that (grpc.aio sends it from `abort`), so the last counts may lag the client by
    # one turn of the server's event loop: scrape until they are there (bounded).
    calls = {
        ("permindex_rpc_requests_total", "Add", "OK"): 2,
        ("permindex_rpc_requests_total", "Ingest", "OK"): 1,
        ("permindex_rpc_requests_total", "Query", "OK"): 1,
        ("permindex_rpc_errors_total", "Query", "INVALID_ARGUMENT"): 1,
        ("permindex_rpc_requests_total", "QueryColumns", "OK"): 1,
        ("permindex_rpc_errors_total", "QueryColumns", "INVALID_ARGUMENT"): 1,
        ("permindex_rpc_errors_total", "Stats", "UNAUTHENTICATED"): 1,
        ("permindex_rpc_requests_total", "Pairs", "OK"): 1,
    }
    deadline = time.monotonic() + 10
    while True:
        found = scrape(server.metrics.address)
        counted = {
            (name, method, code): found.get((name, (("code", code), ("method", method))))
            for name, method, code in calls
        }
        if counted == calls or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert counted == calls

    def value(name: str, **labels: str) -> float:
        return found[(name, tuple(sorted(labels.items())))]

    assert value("permindex_rpc_duration_seconds_count", method="Add") == 2
    assert value("permindex_fingerprints", collection="default") == 16
    assert value("permindex_index_memory_bytes", collection="default") > 0
    assert value("permindex_resident_memory_bytes") > 10 * 2**20
    assert value("permindex_snapshot_keys", collection="default") == 15
    assert value("permindex_snapshot_bytes", collection="default") > 0
    assert 0 <= value("permindex_snapshot_age_seconds", collection="default") < 60
    assert value("permindex_wal_bytes", collection="default") > 0
    assert value("permindex_wal_segments", collection="default") >= 1
    assert value("permindex_wal_sequence", collection="default") >= 3
    assert 0 <= value("permindex_wal_last_write_age_seconds", collection="default") < 60
    address = server.metrics.address
    server.stop(grace=0)
    with pytest.raises(OSError):
        scrape(address)


def test_metrics_can_leave_collection_names_out(start_server: StartServer) -> None:
    server = start_server(metrics_address="127.0.0.1:0", metrics_hide_collections=True)
    assert server.metrics is not None and server.metrics.address is not None
    with permindex.Client(server.address) as client:
        client.create_collection("secret-project")
        client.use("secret-project").add([("a", 1), ("b", 2)])
        client.add([("c", 3)])
    with urllib.request.urlopen(f"http://{server.metrics.address}/metrics", timeout=10) as reply:
        text = reply.read().decode("utf-8")
    assert "secret-project" not in text and 'collection="default"' not in text
    found = scrape(server.metrics.address)
    assert found[("permindex_fingerprints", (("collection", "all"),))] == 3


def test_metrics_are_off_by_default(start_server: StartServer) -> None:
    assert start_server().metrics is None


def test_json_log_lines() -> None:
    record = logging.LogRecord("permindex.x", logging.WARNING, __file__, 1, "a %s", ("b",), None)
    line = json.loads(JsonFormatter().format(record))
    assert line["level"] == "warning" and line["message"] == "a b"
    assert line["logger"] == "permindex.x" and line["time"].endswith("+00:00")


def test_serve_names_the_metrics_address_it_picked(tmp_path: Path) -> None:
    """With --metrics-address HOST:0 the serving line names the port picked (it showed only at
    --log-level info before), and that address serves the metrics."""
    import re

    from serverproc import ServeProcess

    proc = ServeProcess(tmp_path / "data", "--metrics-address", "127.0.0.1:0")
    try:
        assert proc.address() is not None, proc.text
        line = next(line for line in proc.stderr if "serving on" in line)
        found = re.search(r"; metrics on (http://127\.0\.0\.1:(\d+)/metrics)\)$", line.strip())
        assert found is not None and found.group(2) != "0", line
        with urllib.request.urlopen(found.group(1), timeout=10) as response:
            assert b"permindex_uptime_seconds" in response.read()
    finally:
        assert proc.stop() == 0, proc.text
