"""A/B of ``Index.query_many`` with the key store of issue 43: one process per version, 10^6
keys of one kind (benchmarks/bench_keys.py's generators, random order, batches of 10^5), 10^5
queries at k = 3 (each a stored fingerprint with two bits flipped), 9 rounds; prints the median
and the fastest. Run alternately on this checkout and on the commit before (``PYTHONPATH=<its
checkout>``)::

    .venv/bin/python benchmarks/ab_keys_query.py url
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import numpy as np
from bench_keys import make_keys

from permindex import Index


def main() -> None:
    kind = sys.argv[1]
    n = 1_000_000
    keys = make_keys(kind, n)
    rng = np.random.default_rng(2)
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64)
    index = Index()
    for i in range(0, n, 100_000):
        index.add_many(keys[i : i + 100_000], fps[i : i + 100_000])
    queries = fps[rng.integers(0, n, size=100_000)] ^ np.uint64(3)
    index.query_many(queries[:1000])
    times = []
    for _ in range(9):
        started = time.perf_counter()
        index.query_many(queries)
        times.append(time.perf_counter() - started)
    median, fastest = round(statistics.median(times), 4), round(min(times), 4)
    print(json.dumps({"kind": kind, "median": median, "min": fastest}))


if __name__ == "__main__":
    main()
