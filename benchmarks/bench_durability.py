"""Durability numbers: ingest throughput under each fsync policy, and the longest pause of
lookups and writes while a snapshot of 10^7 fingerprints is written.

Run from the repository root (each part starts its own ``python -m permindex serve`` processes
on 127.0.0.1 with data directories under a temporary folder)::

    .venv/bin/python benchmarks/bench_durability.py ingest [--docs N] [--batch N] [--repeat N]
    .venv/bin/python benchmarks/bench_durability.py pause [--keys N] [--seconds S] [--loops L]

``ingest``: for each policy (always, interval, never), a fresh server and one client streaming
``--docs`` documents with fingerprints through one Ingest stream in batches of ``--batch``
(as ``permindex ingest`` does), then ``--docs`` / 10 in batches of 10; adds per second, the
median of ``--repeat`` runs with the policies interleaved.

``pause``: a server loaded with ``--keys`` fingerprints (a snapshot written directly, then
loaded at the start), two client processes -- one sending single-fingerprint Query requests in
a loop, one sending Add requests of 10 new documents in a loop (``--loops`` runs one alone) --
and Snapshot RPCs from this process. Reports, for each loop, the longest gap between two
consecutive completions while a snapshot was being written, and outside snapshots, plus the
snapshot times. Latency numbers need a quiet machine: run it alone (or under ``nice -n -10``
when the machine is shared).
"""

from __future__ import annotations

import argparse
import itertools
import json
import multiprocessing
import os
import random
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import grpc  # noqa: E402
import numpy as np  # noqa: E402

from permindex.storage.snapshot import SNAPSHOT_NAME, write_snapshot  # noqa: E402
from permindex.v1 import index_pb2 as pb  # noqa: E402
from permindex.v1.index_pb2_grpc import PermIndexStub  # noqa: E402

OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def start_server(data_dir: Path, *extra: str, timeout: float = 600) -> tuple[Any, str]:
    """A ``permindex serve`` subprocess and its address (read from its stderr)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "permindex", "serve", "--address", "127.0.0.1:0",
         "--data-dir", str(data_dir), *extra],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    assert process.stderr is not None
    deadline = time.monotonic() + timeout
    for line in process.stderr:
        found = re.search(r"serving on (\S+:\d+)", line)
        if found:
            threading.Thread(target=process.stderr.read, daemon=True).start()
            return process, found.group(1)
        if time.monotonic() > deadline:
            break
    process.kill()
    raise RuntimeError(f"server did not start: {process.stderr.read()}")


def stop_server(process: Any) -> None:
    process.terminate()
    process.wait(timeout=600)


# --------------------------------------------------------------------------------- ingest


def ingest_rate(address: str, docs: int, batch: int, seed: int) -> tuple[float, float]:
    """(adds per second, seconds) of one Ingest stream of ``docs`` documents."""
    rng = np.random.default_rng(seed)
    fps = rng.integers(0, 2**64, size=docs, dtype=np.uint64, endpoint=False).tolist()
    requests = [
        pb.AddRequest(
            documents=[
                pb.Document(key=f"https://example.org/{seed}/{i:09d}.html", fingerprint=fps[i])
                for i in range(start, min(start + batch, docs))
            ]
        )
        for start in range(0, docs, batch)
    ]
    with grpc.insecure_channel(address, options=OPTIONS) as channel:
        stub = PermIndexStub(channel)  # type: ignore[no-untyped-call]
        started = time.perf_counter()
        added = sum(r.added for r in stub.Ingest(iter(requests)))
        seconds = time.perf_counter() - started
    assert added == docs, (added, docs)
    return docs / seconds, seconds


def run_ingest(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="permindex-bench-"))
    rates: dict[tuple[int, str], list[float]] = {}
    try:
        for repeat in range(args.repeat):  # policies interleaved, so load drifts hit them alike
            for batch, docs in ((args.batch, args.docs), (10, args.docs // 10)):
                for policy in ("always", "interval", "never"):
                    data_dir = root / f"{policy}-{batch}-{repeat}"
                    process, address = start_server(
                        data_dir, "--fsync", policy, "--snapshot-interval", "0"
                    )
                    try:
                        rate, seconds = ingest_rate(address, docs, batch, seed=batch + repeat)
                    finally:
                        stop_server(process)
                    shutil.rmtree(data_dir, ignore_errors=True)
                    rates.setdefault((batch, policy), []).append(rate)
                    print(
                        json.dumps({"policy": policy, "batch": batch, "docs": docs,
                                    "seconds": round(seconds, 2), "adds_per_second": round(rate)}),
                        flush=True,
                    )  # fmt: skip
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"\n| fsync policy | batch | adds/s (median of {args.repeat}) | min | max |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for (batch, policy), values in rates.items():
        print(
            f"| {policy} | {batch:,} | {round(float(np.median(values))):,} | "
            f"{round(min(values)):,} | {round(max(values)):,} |"
        )


# ---------------------------------------------------------------------------------- pause


def _loop(kind: str, address: str, seconds: float, start_at: float, out: Any) -> None:
    """Client process: one request at a time for ``seconds``; the completion times."""
    rng = random.Random(kind)
    done: list[float] = []
    latencies: list[float] = []
    with grpc.insecure_channel(address, options=OPTIONS) as channel:
        stub = PermIndexStub(channel)  # type: ignore[no-untyped-call]
        while time.monotonic() < start_at:
            time.sleep(0.01)
        end = time.monotonic() + seconds
        i = 0
        while time.monotonic() < end:
            began = time.monotonic()
            if kind == "query":
                stub.Query(pb.QueryRequest(fingerprints=[rng.getrandbits(64)]), timeout=60)
            else:
                stub.Add(
                    pb.AddRequest(
                        documents=[
                            pb.Document(key=f"added/{i}/{j}", fingerprint=rng.getrandbits(64))
                            for j in range(10)
                        ]
                    ),
                    timeout=60,
                )
            now = time.monotonic()
            done.append(now)
            latencies.append(now - began)
            i += 1
    out.put((kind, done, latencies))


def _gaps(done: list[float], windows: list[tuple[float, float]]) -> tuple[float, float]:
    """(longest gap overlapping a window, longest gap outside every window), seconds."""
    inside = outside = 0.0
    for a, b in itertools.pairwise(done):
        gap = b - a
        if any(a < end and b > start for start, end in windows):
            inside = max(inside, gap)
        else:
            outside = max(outside, gap)
    return inside, outside


def run_pause(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="permindex-bench-"))
    try:
        data_dir = root / "data"
        data_dir.mkdir()
        n = args.keys
        started = time.perf_counter()
        rng = np.random.default_rng(2026)
        fps = rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)
        keys = [f"https://example.org/{i:08d}/page.html" for i in range(n)]
        write_snapshot(data_dir / SNAPSHOT_NAME, keys, fps, k=3, design=(4, 1))
        del keys, fps
        print(f"wrote a snapshot of {n:,} keys in {time.perf_counter() - started:.1f} s")
        started = time.perf_counter()
        process, address = start_server(
            data_dir, "--snapshot-interval", "0", *shlex.split(args.serve)
        )
        print(f"server loaded it in {time.perf_counter() - started:.1f} s")
        try:
            context = multiprocessing.get_context("spawn")
            out = context.Queue()
            start_at = time.monotonic() + 3
            clients = [
                context.Process(target=_loop, args=(kind, address, args.seconds, start_at, out))
                for kind in args.loops.split(",")
            ]
            for client in clients:
                client.start()
            windows = []
            with grpc.insecure_channel(address, options=OPTIONS) as channel:
                stub = PermIndexStub(channel)  # type: ignore[no-untyped-call]
                time.sleep(max(0.0, start_at - time.monotonic()) + args.seconds / 4)
                for _ in range(args.snapshots):
                    began = time.monotonic()
                    reply = stub.Snapshot(pb.SnapshotRequest(), timeout=600)
                    windows.append((began, time.monotonic()))
                    print(
                        f"snapshot: {reply.count:,} keys, {reply.bytes / 1e6:.0f} MB, "
                        f"{reply.seconds:.2f} s (RPC {windows[-1][1] - began:.2f} s)",
                        flush=True,
                    )
                    time.sleep(1)
            results = {}
            for _ in clients:
                kind, done, latencies = out.get(timeout=args.seconds + 600)
                results[kind] = (done, latencies)
            for client in clients:
                client.join()
        finally:
            stop_server(process)
        for kind, (done, latencies) in results.items():
            inside, outside = _gaps(done, windows)
            during = [
                lat for t, lat in zip(done, latencies, strict=True)
                if any(s <= t <= e for s, e in windows)
            ]  # fmt: skip
            print(
                f"{kind:5s} loop: {len(done):,} requests; longest gap between completions "
                f"during snapshots {inside * 1e3:.1f} ms, outside {outside * 1e3:.1f} ms; "
                f"p99 latency during snapshots "
                f"{np.percentile(during, 99) * 1e3 if during else 0:.1f} ms "
                f"({len(during):,} requests)"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    ingest = commands.add_parser("ingest", help="adds/s under each fsync policy")
    ingest.add_argument("--docs", type=int, default=300_000)
    ingest.add_argument("--batch", type=int, default=1000)
    ingest.add_argument("--repeat", type=int, default=3, help="runs of each policy (median)")
    ingest.set_defaults(func=run_ingest)
    pause = commands.add_parser("pause", help="longest pause while a snapshot is written")
    pause.add_argument("--keys", type=int, default=10_000_000)
    pause.add_argument("--seconds", type=float, default=40.0, help="length of the client loops")
    pause.add_argument("--snapshots", type=int, default=2)
    pause.add_argument(
        "--serve", default="", help='extra serve options, one string: --serve "--fsync interval"'
    )
    pause.add_argument(
        "--loops", default="query,add", help="client loops to run: query, add or both"
    )
    pause.set_defaults(func=run_pause)
    args = parser.parse_args()
    os.environ.setdefault("PYTHONPATH", str(REPO))
    args.func(args)


if __name__ == "__main__":
    main()
