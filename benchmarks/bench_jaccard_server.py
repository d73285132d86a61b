"""Memory per document of a Jaccard collection (issue 42, point 1): a
:class:`permindex.JaccardIndex` (what a ``method="minhash"`` collection holds in the server)
filled with 10^5 and 10^6 documents, for ``verify="exact"`` and ``verify="signature"``.

Run from the repository root::

    .venv/bin/python benchmarks/bench_jaccard_server.py [--sizes 100000 1000000]
        [--shingles 200] [--json PATH]

Documents: synthetic sketches, so that no text is made or held here: each document a set of
``--shingles`` distinct random 64-bit shingle hashes (what a page of about that many words
gives) and its signature of 128 values, made by the package's kernel
(:func:`permindex.near.minhash.signatures`), added in batches of 10,000 keys
``https://example.com/page/NNNNNNN`` (35 bytes). Each size and mode runs in a fresh child
process, which reports the index's own estimate (``memory_bytes``: arrays by capacity, band
runs, keys) and the growth of the process's resident memory (VmRSS after the load, less
VmRSS before it, the sketches of a batch freed), both per document. Figures: see
benchmarks/README.md and docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from typing import Any

BATCH = 10_000


def resident() -> int:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def child(n: int, verify: str, shingles: int, seed: int) -> dict[str, Any]:
    import numpy as np

    from permindex import JaccardIndex, MinHashSketch
    from permindex.near.minhash import signatures

    rng = np.random.default_rng(seed)
    index = JaccardIndex(threshold=0.8, verify=verify)  # type: ignore[arg-type]
    signatures(np.zeros(1, np.uint64), np.array([0, 1]), 128)  # the kernel loaded
    before = resident()
    started = time.perf_counter()
    for start in range(0, n, BATCH):
        m = min(BATCH, n - start)
        values = np.sort(rng.integers(0, 2**63, size=(m, shingles), dtype=np.uint64), axis=1)
        offsets = np.arange(m + 1, dtype=np.int64) * shingles
        signature = signatures(values.reshape(-1), offsets, 128)
        keys = [f"https://example.com/page/{i:07d}" for i in range(start, start + m)]
        index.add_many(keys, [MinHashSketch(values[i], signature[i]) for i in range(m)])
        del values, signature
    seconds = time.perf_counter() - started
    after = resident()
    return {
        "documents": n,
        "verify": verify,
        "shingles": shingles,
        "memory_bytes_per_document": index.memory_bytes() / n,
        "resident_bytes_per_document": (after - before) / n,
        "load_seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--shingles", type=int, default=200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", metavar="PATH")
    parser.add_argument("--child", nargs=2, metavar=("N", "VERIFY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        found = child(int(args.child[0]), args.child[1], args.shingles, args.seed)
        print(json.dumps(found))
        return
    rows = []
    for n in args.sizes:
        for verify in ("exact", "signature"):
            done = subprocess.run(
                [sys.executable, __file__, "--child", str(n), verify,
                 "--shingles", str(args.shingles), "--seed", str(args.seed)],
                capture_output=True, text=True, check=True,
            )  # fmt: skip
            row = json.loads(done.stdout.strip().splitlines()[-1])
            rows.append(row)
            print(
                f"{n:>9,} documents, verify={verify:<9}: "
                f"{row['memory_bytes_per_document']:7.0f} B/doc (memory_bytes), "
                f"{row['resident_bytes_per_document']:7.0f} B/doc (RSS growth), "
                f"load {row['load_seconds']:.1f} s",
                flush=True,
            )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
