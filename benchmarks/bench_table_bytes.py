#!/usr/bin/env python3
"""Bytes per fingerprint of the permuted tables, by design: what ``Index.memory_breakdown()``
counts as ``tables`` (every run's row parts, filters and directory, exactly their arrays'
bytes), divided by N, after a bulk load of N random fingerprints (seed 7, as
``benchmarks/run.py``), and the bulk load's time.

    python benchmarks/bench_table_bytes.py --n 1e6 --designs 4,1 5,2 6,3

Each design is loaded in a fresh process (so one's memory does not weigh on the next) with the
interpreter running this script. The figures are the arrays' sizes, not the process's resident
memory (``benchmarks/bench_memory.py``, when present, measures that). Prints a Markdown table.
Not a test: nothing here runs under pytest.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

import numpy as np


def worker(n: int, design: tuple[int, int]) -> dict[str, float]:
    """One design's figures, in this process."""
    from permindex import Index

    fps = np.random.default_rng(7).integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    keys = [f"k{i:08d}" for i in range(n)]
    began = time.perf_counter()
    index = Index.from_arrays(keys, fps, k=3, design=design)
    seconds = time.perf_counter() - began
    parts = index.memory_breakdown()
    layout = index.table_runs()
    tables = len(layout)
    runs = sum(len(sizes) for sizes, _ in layout)
    return {
        "tables": tables,
        "runs": runs,
        "table_bytes_per_fp": parts.tables / n,
        "per_table_entry": parts.tables / n / tables,
        "fingerprint_bytes_per_fp": parts.fingerprints / n,
        "bulk_load_s": seconds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=float, default=1e6, help="fingerprints (default 1e6)")
    parser.add_argument(
        "--designs", nargs="+", default=["4,1", "5,2", "6,3"], help="BLOCKS,LEADING each"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = int(args.n)
    designs = [tuple(int(x) for x in d.split(",")) for d in args.designs]
    if args.worker:
        (design,) = designs
        print(json.dumps(worker(n, (design[0], design[1]))))
        return 0
    print(f"| N = {n:,}: design | tables | runs | tables B/fp | B per table entry | bulk load s |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for design in designs:
        done = subprocess.run(
            [
                sys.executable,
                __file__,
                "--worker",
                "--n",
                str(n),
                "--designs",
                "{},{}".format(*design),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        got = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"| ({design[0]}, {design[1]}) | {got['tables']} | {got['runs']} "
            f"| {got['table_bytes_per_fp']:.2f} | {got['per_table_entry']:.3f} "
            f"| {got['bulk_load_s']:.1f} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
