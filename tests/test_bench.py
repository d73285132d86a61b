"""``permindex bench`` against a real server: every operation, the request bound, the JSON
report, a corpus, and the errors a user can make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from permindex.cli import main
from permindex.cli.bench import BenchConfig, format_report, parse_mix, run_bench
from permindex.rpc.server import RunningServer


def test_mixed_load_bounded_by_requests(server: RunningServer, tmp_path: Path) -> None:
    config = BenchConfig(
        address=server.address,
        clients=2,
        duration=20.0,
        requests=15,
        batch=4,
        mix={"query": 2.0, "add": 1.0, "check": 1.0},
        preload=500,
        timeout=20.0,
    )
    report = run_bench(config)
    assert report["clients_reported"] == 2 and report["first_errors"] == []
    ops = report["operations"]
    assert sum(op["requests"] for op in ops.values()) == 30  # 15 per client, then it stopped
    assert report["total"]["items"] == 30 * 4
    for op in ops.values():
        if op["requests"]:
            assert 0 < op["p50_ms"] <= op["p90_ms"] <= op["p99_ms"] <= op["max_ms"]
    assert report["server"]["count"] >= 500
    # the rate is over the time the 15 requests took, not over --duration's 20 s
    total = report["total"]
    assert total["requests_per_second"] > 30 / 20.0 * 2
    assert report["seconds"] < 20.0
    text = format_report(report)
    assert "p50 ms" in text and "total" in text


def test_command_line_with_a_corpus_and_json(server: RunningServer, tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    lines = [
        {"id": f"d{i}", "fingerprint": f"{i * 0x9E3779B97F4A7C15 % 2**64:016x}"} for i in range(50)
    ]
    lines.append({"id": "t", "text": "three words here and more"})
    corpus.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench", "--address", server.address, "--clients", "1", "--duration", "0.5",
            "--corpus", str(corpus), "--json", str(out), "--mix", "query=1,add=1",
        ]
    )  # fmt: skip
    assert code == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["config"]["corpus"] == str(corpus)
    assert set(report["operations"]) == {"query", "add"}


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown operation"):
        parse_mix("query=1,delete=2")
    with pytest.raises(ValueError, match="positive"):
        parse_mix("query=0")
    assert parse_mix("query=3,check") == {"query": 3.0, "check": 1.0}
    assert main(["bench", "--mix", "nope", "--duration", "1"]) == 2
    assert main(["bench", "--corpus", str(tmp_path / "missing.jsonl")]) == 4
    assert main(["bench", "--address", "127.0.0.1:1", "--duration", "1", "--timeout", "1"]) == 3
