#!/usr/bin/env python3
"""A/B in one process: ``query_many``'s Match lists made as before issue 40's change (every list
and Match tracked by the cycle collector) and as now (untracked a chunk at a time,
``permindex.index.search.matches.match_lists``), in alternating rounds.

    python benchmarks/ab_untracked_lists.py [--n 1e6] [--rounds 10] [--batches 20]

The data are ``benchmarks/run.py``'s (N random fingerprints, seed 7; 10,000 queries, half of
them stored fingerprints, half random), design (4, 1), k = 3. Each round times ``--batches``
batches with each version (the order alternates between rounds) and prints, per version, the
median over rounds of the mean batch time, and the full (generation 2) collections counted by a
``gc.callbacks`` hook; then the per-round ratios old / new and their median. Not a test.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections import deque
from typing import Any

import numpy as np

import permindex
import permindex.index.search.batch_queries as batch_queries
from permindex.index.search.matches import match_lists, new_match


def tracked_match_lists(
    n: int, queries: Any, keys: list[str], fingerprints: Any, distances: Any
) -> list[list[permindex.Match]]:
    """``match_lists`` as it was: every list and Match made at once, all tracked."""
    results: list[list[permindex.Match]] = [[] for _ in range(n)]
    made = map(new_match, zip(keys, fingerprints.tolist(), distances.tolist(), strict=True))
    deque(map(list.append, map(results.__getitem__, queries.tolist()), made), maxlen=0)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=float, default=1e6)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--batches", type=int, default=20)
    args = parser.parse_args()
    n = int(args.n)
    rng = np.random.default_rng(7)
    fps = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    index = permindex.Index.from_arrays([f"doc-{i:08d}" for i in range(n)], fps, k=3)
    queries = fps[rng.integers(0, n, 10_000)].copy()
    queries[5_000:] = rng.integers(0, 2**64 - 1, 5_000, dtype=np.uint64, endpoint=True)
    full = [0]

    def count(phase: str, info: dict[str, int]) -> None:
        full[0] += phase == "start" and info["generation"] == 2

    gc.callbacks.append(count)
    versions = {"tracked": tracked_match_lists, "untracked": match_lists}
    means: dict[str, list[float]] = {name: [] for name in versions}
    collections = dict.fromkeys(versions, 0)
    for function in versions.values():
        batch_queries.match_lists = function  # type: ignore[assignment]
        index.query_many(queries)
    for round_ in range(args.rounds):
        order = list(versions) if round_ % 2 == 0 else list(versions)[::-1]
        for name in order:
            batch_queries.match_lists = versions[name]  # type: ignore[assignment]
            before, times = full[0], []
            for _ in range(args.batches):
                start = time.perf_counter()
                index.query_many(queries)
                times.append(time.perf_counter() - start)
            means[name].append(statistics.mean(times))
            collections[name] += full[0] - before
    batch_queries.match_lists = match_lists
    print(f"N = {n:,}, {len(gc.get_objects()):,} objects tracked in this process")
    for name, values in means.items():
        print(
            f"{name}: median batch mean {statistics.median(values) * 1e3:.2f} ms, "
            f"{collections[name]} full collections in {args.rounds * args.batches} batches"
        )
    ratios = sorted(a / b for a, b in zip(means["tracked"], means["untracked"], strict=True))
    print("tracked / untracked per round:", ", ".join(f"{r:.2f}" for r in ratios))
    print(f"median {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
