"""How the accounted memory that ``serve --max-memory`` is checked against relates to the server
process's resident memory: the ratio docs/operations/limits.md quotes.

Run from the repository root (it starts its own ``python -m permindex serve`` on 127.0.0.1 with
a data directory under a temporary folder)::

    .venv/bin/python benchmarks/bench_memory_limit.py [--keys N] [--batch N] [--limit SIZE]

A fresh server (``--fsync never``; with ``--limit``, under that ``--max-memory``) is sent
``--keys`` random fingerprints with ``k00000001``-style keys in Add batches of ``--batch``, in
random key order, until all are stored or a batch is refused; then the server's Stats are read:
``memory_bytes`` (the accounted memory, by part) and ``resident_memory_bytes`` (VmRSS), and the
peak resident memory (VmHWM) from /proc. Prints one JSON object: the figures, the ratios
RSS / accounted and (RSS - RSS of the empty server) / accounted, and bytes per key.
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import permindex
from permindex.errors import LimitExceededError


def _status(pid: int, field: str) -> int:
    """A ``VmRSS``/``VmHWM`` figure of process ``pid``, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--limit", default=None, help="serve --max-memory (default: none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        with socket.socket() as probe:  # a free port, released for the server
            probe.bind(("127.0.0.1", 0))
            address = f"127.0.0.1:{probe.getsockname()[1]}"
        command = [
            sys.executable, "-m", "permindex", "serve", "--address", address,
            "--data-dir", str(Path(folder) / "data"), "--fsync", "never",
            "--snapshot-interval", "0",
        ]  # fmt: skip
        if args.limit:
            command += ["--max-memory", args.limit]
        server = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        try:
            with permindex.Client(address) as client:
                client.wait_ready(120)
            time.sleep(1)  # settled
            empty_rss = _status(server.pid, "VmRSS")
            rng = np.random.default_rng(7)
            order = rng.permutation(args.keys)
            values = rng.integers(0, 2**64, args.keys, dtype=np.uint64)
            stored = refused = 0
            with permindex.Client(address) as client:
                for start in range(0, args.keys, args.batch):
                    rows = order[start : start + args.batch].tolist()
                    batch = [(f"k{row:08d}", int(values[row])) for row in rows]
                    try:
                        client.add(batch)
                    except LimitExceededError:
                        refused = 1
                        break
                    stored += len(batch)
                stats = client.stats()
            rss = _status(server.pid, "VmRSS")
            accounted = stats.memory_bytes
            print(
                json.dumps(
                    {
                        "keys": stored,
                        "refused_a_batch": bool(refused),
                        "limit": stats.max_memory_bytes,
                        "accounted_bytes": accounted,
                        "breakdown": stats.memory_breakdown._asdict(),
                        "rss_bytes": rss,
                        "peak_rss_bytes": _status(server.pid, "VmHWM"),
                        "empty_server_rss_bytes": empty_rss,
                        "rss_over_accounted": round(rss / accounted, 3),
                        "growth_over_accounted": round((rss - empty_rss) / accounted, 3),
                        "accounted_bytes_per_key": round(accounted / max(stored, 1), 1),
                        "rss_bytes_per_key": round(rss / max(stored, 1), 1),
                    },
                    indent=1,
                )
            )
        finally:
            server.terminate()
            server.wait(60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
