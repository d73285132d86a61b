"""The memory benchmark's instruments (issue 43, point 4): the synthetic crawl's URLs
(benchmarks/urls.py) have the properties the figures rest on, and benchmarks/bench_memory.py
runs end to end at a tiny N, in its own processes, with every answer it checks right."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def urls() -> ModuleType:
    return _module("urls")


@pytest.fixture(scope="module")
def crawl(urls: ModuleType) -> Any:
    return urls.Crawl(seed=7)


def _parts(url: str) -> tuple[str, list[str]]:
    assert url.startswith("https://")
    host, *segments = url[len("https://") :].split("/")
    return host, segments


def test_urls_lengths_segments_and_uniqueness(crawl: Any) -> None:
    ids = np.concatenate([np.arange(30_000), [10**9, 10**10 - 1, 99_999_999, 100_000_000]])
    made = crawl.urls(ids)
    assert len(made) == ids.size
    assert len(set(made)) == ids.size  # unique
    lengths = np.array([len(u.encode("utf-8")) for u in made])
    assert lengths.min() >= 50 and lengths.max() <= 100
    assert 60 <= lengths.mean() <= 80
    counts = np.zeros(7, dtype=int)
    for url, number in zip(made, ids.tolist(), strict=True):
        assert url.isascii()
        host, segments = _parts(url)
        assert 12 <= len(host) <= 25
        assert 3 <= len(segments) <= 6
        counts[len(segments)] += 1
        assert all(segments) and all(s.isalpha() for s in segments[:-1])
        # the last segment carries the document number between "-" and the suffix
        word, rest = segments[-1].split("-")
        assert word.isalpha() and rest.rstrip(".htmlp").isdigit()
        assert int("".join(c for c in rest if c.isdigit())) == number
    assert all(counts[3:] > ids.size // 10)  # every count from 3 to 6 is common


def test_urls_hosts_and_shared_prefixes(crawl: Any) -> None:
    assert len(crawl.hosts) == len(set(crawl.hosts)) == 3_000
    made = crawl.urls(np.arange(50_000))
    hosts = [_parts(u)[0] for u in made]
    distinct, per_host = np.unique(hosts, return_counts=True)
    assert 2_000 <= distinct.size <= 3_000  # a few thousand hosts
    assert per_host.max() >= 20 * np.median(per_host)  # Zipf-like: a few hosts hold many pages
    # the pages of a popular host share their first segments (its sections)
    top = distinct[np.argmax(per_host)]
    firsts = [_parts(u)[1][0] for u, h in zip(made, hosts, strict=True) if h == top]
    _, shares = np.unique(firsts, return_counts=True)
    assert shares.max() >= len(firsts) // 20
    assert len(set(firsts)) >= 10


def test_urls_deterministic_and_order_free(urls: ModuleType, crawl: Any) -> None:
    ids = np.random.default_rng(1).permutation(5_000) + 123_456
    made = crawl.urls(ids)
    assert made == urls.Crawl(seed=7).urls(ids)  # the same from another instance
    assert made != urls.Crawl(seed=8).urls(ids)
    order = np.argsort(ids)
    assert [made[i] for i in order] == crawl.urls(ids[order])  # each a function of its id
    lengths, blob = crawl.url_bytes(ids)
    assert lengths.tolist() == [len(u) for u in made]
    assert blob.tobytes() == b"".join(u.encode("ascii") + b"\x00" for u in made)
    assert crawl.urls(np.zeros(0, dtype=np.int64)) == []
    with pytest.raises(ValueError, match="document numbers"):
        crawl.urls(np.array([10**10]))
    with pytest.raises(ValueError, match="document numbers"):
        crawl.urls(np.array([-1]))


def test_bench_memory_end_to_end(tmp_path: Path) -> None:
    n = 10_000
    command = [
        sys.executable, str(BENCHMARKS / "bench_memory.py"), "--sizes", "1e4",
        "--designs", "4,1 6,3", "--results", str(tmp_path), "--no-docs",
    ]  # fmt: skip
    # a cold numba cache compiles every kernel first (about 25 s of CPU here)
    done = subprocess.run(command, capture_output=True, text=True, timeout=280, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    entries = json.loads((tmp_path / "memory.json").read_text(encoding="utf-8"))
    ours = {(e["kind"], tuple(e["design"])): e for e in entries if e["system"] == "permindex"}
    assert set(ours) == {("k", (4, 1)), ("int", (4, 1)), ("url", (4, 1)), ("k", (6, 3))}
    for entry in ours.values():
        assert entry["n"] == n
        assert entry["wrong_gets"] == 0 and entry["lookups_wrong"] == 0
        assert entry["lookups_checked"] == 20
        assert entry["rss_load_bytes"] > entry["baseline_rss_bytes"] > 0
        assert entry["hwm_bytes"] >= entry["rss_load_bytes"]
        assert entry["accounted_bytes"] == sum(entry["breakdown"].values())
        assert entry["breakdown"]["fingerprints"] >= 8 * n
    assert ours[("k", (4, 1))]["raw_key_bytes"] == 9 * n
    assert ours[("int", (4, 1))]["raw_key_bytes"] == sum(len(str(i)) for i in range(n))
    assert 50 * n <= ours[("url", (4, 1))]["raw_key_bytes"] <= 100 * n
    # more tables, more table bytes; longer keys, more key bytes
    assert (
        ours[("k", (6, 3))]["breakdown"]["tables"] > 4 * ours[("k", (4, 1))]["breakdown"]["tables"]
    )
    assert ours[("url", (4, 1))]["accounted_bytes"] > ours[("k", (4, 1))]["accounted_bytes"]
    restarts = [e for e in entries if e["system"] == "restart"]
    assert {e["kind"] for e in restarts} == {"k", "int", "url"}
    assert all(e["keys_loaded"] == n - 1_000 for e in restarts)  # 1,000 removed before
    assert all(ours[(e["kind"], (4, 1))]["snapshot_bytes"] > 8 * n for e in restarts)
    peers = {e["system"]: e for e in entries if e["system"] in ("faiss", "hammingbird")}
    assert set(peers) == {"faiss", "hammingbird"}  # measured, or said to be not installed
    table = (tmp_path / "memory.md").read_text(encoding="utf-8")
    assert "| permindex (4, 1) | URLs | 10^4 |" in table
    assert "hammingbird" in table and "URL keys' share" in table
    # rendering again from the JSON alone gives the same table
    again = [sys.executable, str(BENCHMARKS / "bench_memory.py"), "--render-only"]
    again += ["--results", str(tmp_path), "--no-docs"]
    subprocess.run(again, capture_output=True, timeout=60, check=True)
    assert (tmp_path / "memory.md").read_text(encoding="utf-8") == table
