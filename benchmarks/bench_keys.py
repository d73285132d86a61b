"""The key store's bytes per key by part, lookup batch speed, snapshot bytes and restart time, for
three kinds of keys added in random order: ``k00000001``-style, decimal integers, and URLs of a
synthetic crawl (a few thousand hosts, paths of 3-6 segments from a vocabulary, 50-100 bytes).

Run (one kind per process, so that each RSS starts fresh)::

    .venv/bin/python benchmarks/bench_keys.py --kind k --n 1000000
    .venv/bin/python benchmarks/bench_keys.py --kind int --n 1000000
    .venv/bin/python benchmarks/bench_keys.py --kind url --n 1000000

It uses only the public surface (Index, memory_breakdown, query_many, Store), so the same script
measures an older commit with ``PYTHONPATH=<its checkout>``. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time

import numpy as np

from permindex import Index
from permindex.storage.store import Store

_WORDS = [
    "news",
    "sport",
    "world",
    "tech",
    "science",
    "health",
    "business",
    "culture",
    "travel",
    "food",
    "politics",
    "opinion",
    "video",
    "live",
    "archive",
    "2023",
    "2024",
    "2025",
    "en",
    "de",
    "fr",
    "article",
    "story",
    "blog",
    "post",
    "category",
    "tag",
    "author",
    "page",
    "local",
    "europe",
    "asia",
    "markets",
    "football",
    "tennis",
    "music",
    "film",
    "books",
]


def crawl_urls(n: int, seed: int = 0, hosts: int = 3000) -> list[str]:
    """n distinct synthetic crawl URLs (50-100 bytes) in random order."""
    rng = random.Random(seed)
    names = [
        f"https://www.{rng.choice(['the', 'my', 'daily', 'new'])}{rng.choice(_WORDS)}"
        f"{rng.randrange(1000)}.{rng.choice(['com', 'org', 'net', 'de', 'co.uk'])}/"
        for _ in range(hosts)
    ]
    out: set[str] = set()
    while len(out) < n:
        path = "/".join(rng.choice(_WORDS) for _ in range(rng.randint(3, 6)))
        url = f"{rng.choice(names)}{path}/{rng.choice(_WORDS)}-{rng.randrange(10**7)}.html"
        if 50 <= len(url) <= 100:
            out.add(url)
    keys = sorted(out)
    rng.shuffle(keys)
    return keys


def make_keys(kind: str, n: int) -> list[str]:
    rng = random.Random(1)
    if kind == "k":
        numbers = list(range(1, n + 1))
        rng.shuffle(numbers)
        return [f"k{i:08d}" for i in numbers]
    if kind == "int":
        numbers = list(range(n))
        rng.shuffle(numbers)
        return [str(i) for i in numbers]
    return crawl_urls(n)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kind", choices=["k", "int", "url"], default="k")
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=100_000)
    args = parser.parse_args()
    n = args.n
    keys = make_keys(args.kind, n)
    raw = sum(len(k.encode()) for k in keys)
    rng = np.random.default_rng(2)
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    index = Index()
    started = time.perf_counter()
    for i in range(0, n, args.batch):
        index.add_many(keys[i : i + args.batch], fps[i : i + args.batch])
    load = time.perf_counter() - started
    parts = index.memory_breakdown()._asdict()
    key_parts = {p: parts[p] / n for p in ("key_bytes", "key_offsets", "key_hashes", "key_map")}
    queries = fps[rng.integers(0, n, size=args.queries)] ^ np.uint64(3)
    times = []
    for _ in range(5):
        t = time.perf_counter()
        index.query_many(queries, k=3)
        times.append(time.perf_counter() - t)
    with tempfile.TemporaryDirectory() as tmp:
        with Store.open(tmp, fsync="never") as store:
            for i in range(0, n, args.batch):
                store.add_many(keys[i : i + args.batch], fps[i : i + args.batch])
            info = store.snapshot()
        snapshot_bytes = info.bytes
        restarts = []
        for _ in range(3):
            t = time.perf_counter()
            with Store.open(tmp, fsync="never") as store:
                assert len(store.index) == n
            restarts.append(time.perf_counter() - t)
    print(
        json.dumps(
            {
                "kind": args.kind,
                "n": n,
                "raw_utf8_per_key": round(raw / n, 2),
                "key_parts_per_key": {p: round(v, 2) for p, v in key_parts.items()},
                "keys_per_key": round(sum(key_parts.values()), 2),
                "keys_over_raw": round(sum(key_parts.values()) / (raw / n), 3),
                "total_per_key": round(sum(parts.values()) / n, 2),
                "load_s": round(load, 2),
                "query_many_s": round(statistics.median(times), 4),
                "snapshot_bytes_per_key": round(snapshot_bytes / n, 2),
                "restart_s": round(statistics.median(restarts), 3),
            }
        )
    )


if __name__ == "__main__":
    main()
