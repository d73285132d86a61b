#!/usr/bin/env python3
"""permindex benchmarks: one command measures permindex (every design) and its peers side by side
and regenerates ``benchmarks/results/`` (results.json, results.md, plot.png) and the measured
section of docs/performance.md (with its copy of the plot, docs/assets/plot.png).

    python benchmarks/run.py                       # N = 10^6 and 10^7: designs, peers, gRPC
    python benchmarks/run.py --sizes 1e5 --quick   # a smoke run of every part (a minute)
    python benchmarks/run.py --scale 1e8           # 10^8 fingerprints, permindex only (memory)
    python benchmarks/run.py --only grpc [--quick] # the gRPC part alone (about 5 minutes)

Setup (peers are optional; a missing one is reported as skipped):

    pip install -e '.[bench]'                       # faiss-cpu, matplotlib
    pip install --target benchmarks/.peers/simhash simhash
    pip install --target benchmarks/.peers/simhash-pybind simhash-pybind

``simhash`` and ``simhash-pybind`` both install a top-level module named ``simhash``, so each lives
in its own directory and runs in its own process (PEERS_DIR overrides benchmarks/.peers).

Every system runs in a fresh subprocess (``--worker``) on the same data: N random 64-bit
fingerprints (seed 7) of which 1% are planted near-duplicates (0 to 3 bits from another stored
one), and 10,000 queries of which half are 0 to 3 bits from a stored fingerprint. Timings are
medians of repeats; faiss and permindex run on one thread (2-thread figures beside). Every
system's answers are compared with brute force (numpy XOR and popcount over all N) on a sample of
queries, so that a fast wrong answer cannot win. Benchmarks are not tests: nothing here runs
under pytest.
"""

from __future__ import annotations

import argparse
import functools
import gc
import importlib.util
import json
import os
import platform
import re
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent import futures
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
_R = TypeVar("_R")
PEERS = Path(os.environ.get("PEERS_DIR", HERE / ".peers"))
K = 3
QUERIES = 10_000
SAMPLE = 100  # queries checked against brute force per system
SEED = 7
GRPC_ROUNDS = 3  # alternating rounds of the echo server and permindex (unary calls)
STREAM_WINDOW = 4  # QueryColumns messages in flight per stream, as Client.query_columns sends
DEDUP_ROUNDS = 3  # alternating runs of dedup (kernels, baseline) of which the median is kept
STREAM_LARGE_MESSAGE = 8192  # fingerprints per message of the second server-CPU comparison
README_START = "<!-- benchmark:start -->"
README_END = "<!-- benchmark:end -->"
ECHO_METHOD = "/bench.Echo/Echo"


# -- data ----------------------------------------------------------------------------------------


def flip(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each value with 0 to 3 random bits flipped (coinciding draws flip fewer)."""
    m = values.size
    flips = rng.integers(0, 4, m)
    bits = rng.integers(0, 64, (m, 3)).astype(np.uint64)
    out = values.copy()
    for j in range(3):
        use = flips > j
        out[use] ^= np.uint64(1) << bits[use, j]
    return out


def make_data(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(N stored fingerprints, QUERIES queries), the same in every worker."""
    rng = np.random.default_rng(SEED)
    fps = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    planted = n // 100
    if planted:
        fps[:planted] = flip(fps[planted : 2 * planted], rng)
    near = flip(fps[rng.integers(0, n, QUERIES // 2)], rng)
    far = rng.integers(0, 2**64 - 1, QUERIES - near.size, dtype=np.uint64, endpoint=True)
    return fps, np.concatenate([near, far])


def sample_positions(n_queries: int) -> np.ndarray:
    """Positions of the checked queries: half planted, half random."""
    half = SAMPLE // 2
    return np.concatenate([np.arange(half), n_queries // 2 + np.arange(SAMPLE - half)])


def brute_force(fps: np.ndarray, query: int) -> set[int]:
    return set(np.flatnonzero(np.bitwise_count(fps ^ np.uint64(query)) <= K).tolist())


def median_rate(count: int, run: Callable[[], object], repeats: int) -> float:
    """``count`` per second of the median of ``repeats`` runs of ``run``; each run's result
    is freed after its clock stops (as in :func:`best_of`)."""
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        result = run()
        times.append(time.perf_counter() - began)
        del result
    return count / statistics.median(times)


def best_of(run: Callable[[], _R], repeats: int) -> tuple[float, _R]:
    """Seconds of the fastest of ``repeats`` (>= 1) runs of ``run``, and the last run's
    result. The clock times the call only: the previous run's result is freed before it
    starts (a batch's Match lists take about 0.5 ms to free at 10^6; before, every run but
    the first paid for its predecessor's)."""
    times = []
    results: list[_R] = []
    for _ in range(repeats):
        results.clear()  # the previous result freed before the clock starts
        began = time.perf_counter()
        results.append(run())
        times.append(time.perf_counter() - began)
    return min(times), results[0]


def best_rate(count: int, run: Callable[[], object], repeats: int) -> float:
    """``count`` per second of the fastest of ``repeats`` runs of ``run``."""
    return count / best_of(run, repeats)[0]


def fresh_queries(fps: np.ndarray) -> np.ndarray:
    """QUERIES other queries of :func:`make_data`'s make-up (half of them within 3 bits of a
    stored fingerprint), from another seed."""
    rng = np.random.default_rng(SEED + 1)
    near = flip(fps[rng.integers(0, fps.size, QUERIES // 2)], rng)
    far = rng.integers(0, 2**64 - 1, QUERIES - near.size, dtype=np.uint64, endpoint=True)
    return np.concatenate([near, far])


def rss_bytes() -> int:
    with open("/proc/self/statm", encoding="ascii") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


# -- workers (each runs in its own process and prints one JSON line) ------------------------------


def halves_in_threads(
    index: Any, queries: np.ndarray, columns: bool = False
) -> Callable[[], tuple[Any, Any]]:
    """A run of ``index.query_many`` on each half of ``queries``, in two threads at once: the
    calling thread looks up one half while one thread of a pool made once (as a server's
    executor or a user's pool would be; starting threads is not timed) looks up the other;
    ``columns``: the columnar form.

    The halves are every other query, not the first and the second half: :func:`make_data`
    puts the near queries first, so a cut in the middle gave one thread every match (and all
    the Python objects to make) and the other none. A pool of two with the caller waiting
    was not used: its queue wakes one idle worker at a time, and on this machine an idle
    vCPU took up to ~1.6 ms to wake, so the second half often ran after the first, on the
    same worker (benchmarks/README.md)."""
    from concurrent.futures import ThreadPoolExecutor

    halves = (queries[0::2].copy(), queries[1::2].copy())
    pool = ThreadPoolExecutor(1, thread_name_prefix="bench-halves")
    lookup = functools.partial(index.query_many, columns=True) if columns else index.query_many

    def run() -> tuple[Any, Any]:
        # both halves' results returned, so that they are freed outside the timing, as the
        # one-thread call's result is (median_rate, best_of)
        other = pool.submit(lookup, halves[1])
        mine = lookup(halves[0])
        return mine, other.result()

    return run


def kernel_alone(
    index: Any, queries: np.ndarray
) -> tuple[Callable[[], object], Callable[[], tuple[object, object]]]:
    """The lookup kernel alone on a read view of ``index`` (``lookup.batch_arrays``: no
    ordering, no keys, no Python objects, no GIL): one thread on all of ``queries``, and two
    threads on every other query each, split and started as :func:`halves_in_threads` does.
    Beside the two-thread figures it shows what the machine gives a second thread for this
    work (the part of a batch that holds the GIL cannot gain more). Reads the index's private
    lookup state: a benchmark's probe, not an API. The index must have no removed rows (a view
    with a liveness mask counts as a reader until released)."""
    from concurrent.futures import ThreadPoolExecutor

    from permindex.index.search.lookup import batch_arrays

    with index._lock:
        view = index._lookups.view(K)
    halves = (queries[0::2].copy(), queries[1::2].copy())
    pool = ThreadPoolExecutor(1, thread_name_prefix="bench-kernel")

    def one() -> object:
        return batch_arrays(view, queries, K)

    def two() -> tuple[object, object]:
        other = pool.submit(batch_arrays, view, halves[1], K)
        mine = batch_arrays(view, halves[0], K)
        return mine, other.result()

    return one, two


def worker_permindex(n: int, design: tuple[int, int], repeats: int, extras: bool) -> dict[str, Any]:
    from permindex import Index
    from permindex.index.rows import RowStore
    from permindex.index.table_set import TableSet
    from permindex.index.tables.permutation import Design
    from permindex.index.tables.table import RowSnapshot, Table

    fps, queries = make_data(n)
    keys = [f"doc-{i:08d}" for i in range(n)]
    out: dict[str, Any] = {"system": f"permindex {design}", "n": n, "design": list(design)}
    # Tables alone, one thread: three builds, the median reported (the first, which also pays
    # for the process's first touch of that much memory, beside it); then the index's own
    # build of the runs, in up to 4 threads (2 here).
    builds = []
    for _ in range(3):
        tables = [Table(p) for p in Design(*design).permutations]
        began = time.perf_counter()
        for table in tables:
            table.add_many(0, n, RowSnapshot(fps, None, n), None)
        builds.append(time.perf_counter() - began)
        del tables
        gc.collect()
    out["build_tables_s"] = statistics.median(builds)
    out["build_tables_first_s"] = builds[0]
    tables = [Table(p) for p in Design(*design).permutations]
    runs_of_tables = TableSet(tables, RowStore(threading.RLock(), 0))
    began = time.perf_counter()
    runs = runs_of_tables.prepare(fps)
    out["build_tables_threads_s"] = time.perf_counter() - began
    del runs, runs_of_tables, tables
    gc.collect()
    began = time.perf_counter()
    index = Index.from_arrays(keys, fps, k=K, design=design)
    out["build_s"] = time.perf_counter() - began
    del keys
    gc.collect()
    out["bytes_per_fp"] = index.table_bytes() / n
    out["key_bytes_per_key"] = (index.memory_bytes() - index.table_bytes()) / n
    out["rss_bytes"] = rss_bytes()
    index.query_many(queries)  # warm-up
    out["batch_qps"] = median_rate(queries.size, lambda: index.query_many(queries), repeats)
    out["batch_qps_k1"] = median_rate(queries.size, lambda: index.query_many(queries, k=1), repeats)
    singles = queries[np.r_[0:1000, QUERIES // 2 : QUERIES // 2 + 1000]].tolist()

    def one_by_one() -> None:
        for q in singles:
            index.query(q)

    out["single_qps"] = median_rate(len(singles), one_by_one, repeats)
    out["batch_qps_2threads"] = median_rate(
        queries.size, halves_in_threads(index, queries), repeats
    )
    wrong = 0
    for position in sample_positions(queries.size).tolist():
        q = int(queries[position])
        got = {int(m.key[4:]) for m in index.query(q)}
        if got != brute_force(fps, q):
            wrong += 1
    out["checked"] = SAMPLE
    out["wrong"] = wrong
    if extras:
        # The best of 3 calls at 10^6 (simhash-pybind's figure beside it too; a single call
        # took 0.24 to 0.93 s on this VM, the same code), one at 10^7.
        out["pairs_s"], pairs = best_of(index.pairs, 3 if n <= 1_000_000 else 1)
        out["pairs"] = len(pairs)
        planted = n // 100
        found = {(a, b) for a, b, _ in pairs}
        expected = [
            (f"doc-{i:08d}", f"doc-{i + planted:08d}")
            for i in range(planted)
            if int(np.bitwise_count(fps[i] ^ fps[i + planted])) <= K
        ]
        out["pairs_planted_missing"] = sum(1 for pair in expected if pair not in found)
        out.update(ingest_figures(index, queries, repeats))
        if n <= 1_000_000:
            import bench_dedup

            source = bench_dedup.baseline_source()
            if source is not None:
                out["pairs_before"] = pairs_before(n, source)
    return out


def index_pairs_seconds(n: int) -> list[float]:
    """Seconds of ``Index.pairs()`` (k = 3), 3 times, on an index of :func:`make_data`'s ``n``
    fingerprints (keys ``doc-%08d``), on whichever ``permindex`` this process imports: run by
    :func:`pairs_before` in processes of their own."""
    from permindex import Index

    fps, _ = make_data(n)
    index = Index.from_arrays([f"doc-{i:08d}" for i in range(n)], fps)
    seconds = []
    for _ in range(3):
        began = time.perf_counter()
        index.pairs()
        seconds.append(time.perf_counter() - began)
    return seconds


def pairs_before(n: int, source: Path) -> dict[str, Any]:
    """All pairs of this tree against main when issue 13 was filed (``source``: that commit's
    package), :func:`index_pairs_seconds` in processes of their own, alternating twice; the
    medians of the 6 timings of each: whether the figure moved with the code or the machine."""
    timings: dict[str, list[float]] = {"now": [], "before": []}
    for _ in range(2):
        for name, cwd in (("now", ROOT), ("before", source)):
            timings[name].extend(in_tree(f"index_pairs_seconds({n})", cwd))
    return {name: statistics.median(values) for name, values in timings.items()}


def in_tree(call: str, cwd: Path) -> Any:
    """The JSON result of ``run.<call>`` (e.g. ``index_pairs_seconds(1000000)``) evaluated in a
    process of its own whose ``permindex`` is the package under ``cwd`` (this tree's, or an
    older commit's).

    Raises:
        RuntimeError: the process failed (the end of its stderr in the message).
    """
    code = (
        f"import json, sys; sys.path.insert(0, {str(HERE)!r}); import run; "
        f"print(json.dumps(run.{call}))"
    )
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, env=env
    )
    if done.returncode != 0:
        raise RuntimeError(f"{call} in {cwd} failed: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ingest_figures(index: Any, queries: np.ndarray, repeats: int) -> dict[str, Any]:
    """add_many in batches of 10,000 and single add into a fresh index; batch lookups on
    ``index`` while another thread ingests at full speed, against the same index idle."""
    from permindex import Index

    out: dict[str, Any] = {}
    rng = np.random.default_rng(11)
    total = 500_000
    values = rng.integers(0, 2**64 - 1, total, dtype=np.uint64, endpoint=True)
    names = [f"new-{i:08d}" for i in range(total)]
    pairs = list(zip(names[:50_000], values[:50_000].tolist(), strict=True))
    # Each the best of 3 passes, each into a fresh index made before its clock starts, as
    # every lookup figure is the best of 3 runs (a slower pass is the machine's other work: one
    # pass of single adds gave 35,514/s and 69,746/s in two runs an hour apart, the same code;
    # benchmarks/README.md).
    batch_s, single_s = [], []
    for _ in range(3):
        fresh, single = Index(), Index()
        began = time.perf_counter()
        for start in range(0, total, 10_000):
            fresh.add_many(names[start : start + 10_000], values[start : start + 10_000])
        batch_s.append(time.perf_counter() - began)
        began = time.perf_counter()
        for key, value in pairs:
            single.add(key, value)
        single_s.append(time.perf_counter() - began)
        del fresh, single
    out["add_many_per_s"] = total / min(batch_s)
    out["add_per_s"] = len(pairs) / min(single_s)
    # At least 15 batches each: with 5, the figure rested on which of the writer's steps the
    # five met (0.33x-0.73x in four runs of the same worker; benchmarks/README.md).
    repeats = max(15, repeats)
    idle = median_rate(queries.size, lambda: index.query_many(queries), repeats)
    stop = threading.Event()
    written = [0]

    def writer() -> None:
        start = 0
        while not stop.is_set():
            batch = slice(start % total, start % total + 10_000)
            index.add_many(names[batch], values[batch])
            written[0] += 10_000
            start += 10_000

    thread = threading.Thread(target=writer)
    thread.start()
    began = time.perf_counter()
    busy = median_rate(queries.size, lambda: index.query_many(queries), repeats)
    seconds = time.perf_counter() - began
    stop.set()
    thread.join()
    out["batch_qps_idle"] = idle
    out["batch_qps_while_ingesting"] = busy
    out["ingest_per_s_during_lookups"] = written[0] / seconds
    return out


def worker_restart(n: int) -> dict[str, Any]:
    """A data directory holding a snapshot of n fingerprints with ~40-byte keys (and an empty
    write-ahead log): write it, then time what the server does before it listens,
    ``Store.open`` (lock, read and check the snapshot, build the index, replay the log), and,
    apart, the snapshot read alone."""
    from permindex import Index
    from permindex.storage.snapshot import SNAPSHOT_NAME, DataDir, read_snapshot
    from permindex.storage.store import Store

    fps, _ = make_data(n)
    keys = [f"https://example.org/p/{i:013d}.html" for i in range(n)]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        root = Path(tmp) / "data"
        index = Index.from_arrays(keys, fps)
        del keys
        exported_keys, exported = index.export()
        began = time.perf_counter()
        with DataDir(root) as data_dir:
            info = data_dir.save(exported_keys, exported, k=K, design=(4, 1))
        write_s = time.perf_counter() - began
        del index, exported_keys, exported
        gc.collect()
        began = time.perf_counter()
        snapshot = read_snapshot(root / SNAPSHOT_NAME)
        read_s = time.perf_counter() - began
        del snapshot
        gc.collect()
        began = time.perf_counter()
        store = Store.open(root, k=K, design=(4, 1))
        ready_s = time.perf_counter() - began
        try:
            assert len(store.index) == n
            position = n // 2
            hits = store.index.query(int(fps[position]), k=0)
            assert f"https://example.org/p/{position:013d}.html" in {m.key for m in hits}
        finally:
            store.close()
    return {
        "system": "restart",
        "n": n,
        "snapshot_bytes": info.bytes,
        "snapshot_write_s": write_s,
        "snapshot_read_s": read_s,
        "restart_ready_s": ready_s,
    }


def worker_faiss(n: int, repeats: int) -> dict[str, Any]:
    import faiss

    fps, queries = make_data(n)
    xb = fps.view(np.uint8).reshape(n, 8)
    xq = queries.view(np.uint8).reshape(-1, 8)
    faiss.omp_set_num_threads(1)
    before = rss_bytes()
    began = time.perf_counter()
    index = faiss.IndexBinaryMultiHash(64, 4, 16)
    index.add(xb)
    out: dict[str, Any] = {"system": "faiss MultiHash(4, b=16)", "n": n}
    out["build_s"] = time.perf_counter() - began
    out["bytes_per_fp"] = (rss_bytes() - before) / n
    index.range_search(xq, K + 1)  # warm-up; radius is exclusive: distance < 4
    out["batch_qps"] = median_rate(xq.shape[0], lambda: index.range_search(xq, K + 1), repeats)
    singles = np.r_[0:1000, QUERIES // 2 : QUERIES // 2 + 1000]

    def one_by_one() -> None:
        for i in singles.tolist():
            index.range_search(xq[i : i + 1], K + 1)

    out["single_qps"] = median_rate(singles.size, one_by_one, repeats)
    faiss.omp_set_num_threads(2)
    out["batch_qps_2threads"] = median_rate(
        xq.shape[0], lambda: index.range_search(xq, K + 1), repeats
    )
    faiss.omp_set_num_threads(1)
    wrong = 0
    for position in sample_positions(xq.shape[0]).tolist():
        lims, _distances, ids = index.range_search(xq[position : position + 1], K + 1)
        if set(ids[lims[0] : lims[1]].tolist()) != brute_force(fps, int(queries[position])):
            wrong += 1
    out["checked"] = SAMPLE
    out["wrong"] = wrong
    return out


def worker_head_to_head(n: int, rounds: int) -> dict[str, Any]:
    """permindex (4, 1) and faiss MultiHash(4, b=16) built in one process and timed in
    alternating rounds (batch and one per call), so that both systems see the same machine
    load: the ratio targets come from here (the per-system rows above come from separate
    processes at different times, where the machine's load can move one of them by 20 %)."""
    import faiss

    from permindex import Index

    fps, queries = make_data(n)
    index = Index.from_arrays([f"doc-{i:08d}" for i in range(n)], fps, k=K, design=(4, 1))
    # The first batch after the build, then the next: queries of the same make-up (half with
    # a stored neighbour) never asked before, so that the next batch does not find the first
    # one's buckets in the cache (no cold first query: the build pays for what a first
    # lookup would).
    fresh = fresh_queries(fps)
    began = time.perf_counter()
    index.query_many(queries)
    first_qps = queries.size / (time.perf_counter() - began)
    began = time.perf_counter()
    index.query_many(fresh)
    second_qps = fresh.size / (time.perf_counter() - began)
    gc.collect()
    faiss.omp_set_num_threads(1)
    xq = queries.view(np.uint8).reshape(-1, 8)
    multihash = faiss.IndexBinaryMultiHash(64, 4, 16)
    multihash.add(fps.view(np.uint8).reshape(n, 8))
    singles = np.r_[0:1000, QUERIES // 2 : QUERIES // 2 + 1000]
    single_ints = queries[singles].tolist()

    def permindex_single() -> None:
        for q in single_ints:
            index.query(q)

    def faiss_single() -> None:
        for i in singles.tolist():
            multihash.range_search(xq[i : i + 1], K + 1)

    permindex_two_threads = halves_in_threads(index, queries)
    permindex_two_threads_columns = halves_in_threads(index, queries, columns=True)
    kernel_one, kernel_two = kernel_alone(index, queries)

    # Each system's figure of a round is its best of 3 runs (as timeit advises: a slower run
    # is the machine's other work, not the code's), for every system alike.
    measured: dict[str, Callable[[], float]] = {
        "permindex_batch_qps": lambda: best_rate(
            queries.size, lambda: index.query_many(queries), 3
        ),
        "permindex_columns_qps": lambda: best_rate(
            queries.size, lambda: index.query_many(queries, columns=True), 3
        ),
        "permindex_two_threads_qps": lambda: best_rate(queries.size, permindex_two_threads, 3),
        "permindex_two_threads_columns_qps": lambda: best_rate(
            queries.size, permindex_two_threads_columns, 3
        ),
        "kernel_qps": lambda: best_rate(queries.size, kernel_one, 3),
        "kernel_two_threads_qps": lambda: best_rate(queries.size, kernel_two, 3),
        "faiss_batch_qps": lambda: best_rate(
            queries.size, lambda: multihash.range_search(xq, K + 1), 3
        ),
        "permindex_single_qps": lambda: best_rate(singles.size, permindex_single, 3),
        "faiss_single_qps": lambda: best_rate(singles.size, faiss_single, 3),
    }
    for run in measured.values():  # warm-up
        run()
    per_round: dict[str, list[float]] = {name: [] for name in measured}
    for _ in range(rounds):
        for name, run in measured.items():
            per_round[name].append(run())
    out: dict[str, Any] = {"system": "head to head", "n": n, "rounds": per_round}
    out["first_batch_qps"], out["second_batch_qps"] = first_qps, second_qps
    for name, values in per_round.items():
        out[name] = statistics.median(values)
    pairs = (
        ("batch", "permindex_batch_qps", "faiss_batch_qps"),
        ("columns", "permindex_columns_qps", "faiss_batch_qps"),
        ("single", "permindex_single_qps", "faiss_single_qps"),
        ("two_threads", "permindex_two_threads_qps", "permindex_batch_qps"),
        ("two_threads_columns", "permindex_two_threads_columns_qps", "permindex_columns_qps"),
        ("kernel_two_threads", "kernel_two_threads_qps", "kernel_qps"),
    )
    for kind, ours, theirs in pairs:
        ratios = [p / f for p, f in zip(per_round[ours], per_round[theirs], strict=True)]
        out[f"{kind}_ratios"] = ratios
        out[f"{kind}_ratio"] = statistics.median(ratios)
    return out


#: Queries per thread-scaling batch: run.py's 10,000 queries repeated, so that each of two
#: threads works about 100 ms or more on its half (issue 40's two-thread figure).
SCALING_QUERIES = 400_000


def gather_halves(
    size: int, count: int
) -> tuple[Callable[[], object], Callable[[], tuple[object, object]]]:
    """The reference of the two-thread figure: a GIL-free, memory-bound numpy kernel -- a random
    gather (``numpy.take``, which lets the GIL go) of ``count`` positions from a uint64 array of
    ``size`` elements (the tables' size) -- in one thread on all positions, and in two threads
    on every other position each, split and started as :func:`halves_in_threads` does."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(SEED)
    table = rng.integers(0, 2**63, size, dtype=np.uint64)
    positions = rng.integers(0, size, count, dtype=np.int64)
    halves = (positions[0::2].copy(), positions[1::2].copy())
    pool = ThreadPoolExecutor(1, thread_name_prefix="bench-gather")

    def one() -> object:
        return np.take(table, positions)

    def two() -> tuple[object, object]:
        other = pool.submit(np.take, table, halves[1])
        mine = np.take(table, halves[0])
        return mine, other.result()

    return one, two


def worker_thread_scaling(n: int, rounds: int) -> dict[str, Any]:
    """Issue 40's two-thread figure, in one process: ``query_many`` of SCALING_QUERIES queries
    (Match lists, and columns) in one thread against two threads on halves, beside the same
    machine's gain for a GIL-free random gather over an array the size of the tables (as many
    positions as the lookups' candidates touch, about), each round alternating all six; per
    round, (two / one of permindex) / (two / one of the gather). The figure is the median over
    the rounds of the better of lists and columns."""
    from permindex import Index

    fps, queries = make_data(n)
    index = Index.from_arrays([f"doc-{i:08d}" for i in range(n)], fps, k=K, design=(4, 1))
    batch = np.tile(queries, SCALING_QUERIES // queries.size)
    lists_two = halves_in_threads(index, batch)
    columns_two = halves_in_threads(index, batch, columns=True)
    gather_one, gather_two = gather_halves(index.table_bytes() // 8, 4 * SCALING_QUERIES * 4)
    measured: dict[str, Callable[[], float]] = {
        "lists_one": lambda: best_rate(batch.size, lambda: index.query_many(batch), 3),
        "lists_two": lambda: best_rate(batch.size, lists_two, 3),
        "columns_one": lambda: best_rate(
            batch.size, lambda: index.query_many(batch, columns=True), 3
        ),
        "columns_two": lambda: best_rate(batch.size, columns_two, 3),
        "gather_one": lambda: best_rate(batch.size, gather_one, 3),
        "gather_two": lambda: best_rate(batch.size, gather_two, 3),
    }
    for run in measured.values():  # warm-up
        run()
    per_round: dict[str, list[float]] = {name: [] for name in measured}
    for round_ in range(rounds):
        names = list(measured) if round_ % 2 == 0 else list(measured)[::-1]
        for name in names:
            per_round[name].append(measured[name]())
    out: dict[str, Any] = {"system": "thread scaling", "n": n, "rounds": per_round}
    for kind in ("lists", "columns", "gather"):
        gains = [
            t / o for t, o in zip(per_round[f"{kind}_two"], per_round[f"{kind}_one"], strict=True)
        ]
        out[f"{kind}_gains"] = gains
        out[f"{kind}_gain"] = statistics.median(gains)
    for kind in ("lists", "columns"):
        shares = [g / r for g, r in zip(out[f"{kind}_gains"], out["gather_gains"], strict=True)]
        out[f"{kind}_share"] = statistics.median(shares)
    best = max(("lists", "columns"), key=lambda kind: out[f"{kind}_share"])
    out["figure"] = {"form": best, "share_of_gather": out[f"{best}_share"]}
    return out


def worker_simhash(n: int, repeats: int) -> dict[str, Any]:
    """The pure-Python ``simhash`` package's SimhashIndex (k + 1 blocks)."""
    sys.path.insert(0, str(PEERS / "simhash"))
    from simhash import Simhash, SimhashIndex

    fps, queries = make_data(n)
    values = fps.tolist()
    before = rss_bytes()
    began = time.perf_counter()
    index = SimhashIndex([(str(i), Simhash(v)) for i, v in enumerate(values)], k=K)
    out: dict[str, Any] = {"system": "simhash SimhashIndex", "n": n}
    out["build_s"] = time.perf_counter() - began
    out["bytes_per_fp"] = (rss_bytes() - before) / n
    singles = queries[np.r_[0:250, QUERIES // 2 : QUERIES // 2 + 250]].tolist()

    def one_by_one() -> None:
        for q in singles:
            index.get_near_dups(Simhash(q))

    out["single_qps"] = median_rate(len(singles), one_by_one, max(1, repeats // 2))
    wrong = 0
    for position in sample_positions(queries.size).tolist():
        q = int(queries[position])
        got = {int(i) for i in index.get_near_dups(Simhash(q))}
        if got != brute_force(fps, q):
            wrong += 1
    out["checked"] = SAMPLE
    out["wrong"] = wrong
    return out


def worker_simhash_pybind(n: int) -> dict[str, Any]:
    """``simhash-pybind`` find_all: all pairs of distinct fingerprints within k."""
    sys.path.insert(0, str(PEERS / "simhash-pybind"))
    import simhash

    fps, _ = make_data(n)
    distinct = set(fps.tolist())
    out: dict[str, Any] = {"system": "simhash-pybind find_all", "n": n}
    for blocks in (4, 6):
        out[f"pairs_{blocks}_blocks_s"], found = best_of(  # as permindex's figure beside it
            functools.partial(simhash.find_all, distinct, blocks, K), 3 if n <= 1_000_000 else 1
        )
        out[f"pairs_{blocks}_blocks"] = len(found)
    return out


def worker_brute(n: int) -> dict[str, Any]:
    fps, queries = make_data(n)
    sample = queries[sample_positions(queries.size)]

    def run() -> None:
        for q in sample.tolist():
            np.flatnonzero(np.bitwise_count(fps ^ np.uint64(q)) <= K)

    return {
        "system": "brute force (numpy)",
        "n": n,
        "batch_qps": median_rate(sample.size, run, 3),
        "bytes_per_fp": 8.0,
        "checked": SAMPLE,
        "wrong": 0,
    }


def worker_scale(n: int, repeats: int) -> dict[str, Any]:
    """10^8-class: load in batches of 10^6 (keys made per batch: no list of n str), then
    memory, lookups and a brute-force check of a sample."""
    from permindex import Index

    rng = np.random.default_rng(SEED)
    index = Index()
    batch = 1_000_000
    began = time.perf_counter()
    sample_fps: list[int] = []
    for start in range(0, n, batch):
        count = min(batch, n - start)
        values = rng.integers(0, 2**64 - 1, count, dtype=np.uint64, endpoint=True)
        index.add_many([f"doc-{i:08d}" for i in range(start, start + count)], values)
        sample_fps += values[:: max(1, count // 50)].tolist()
    load_s = time.perf_counter() - began
    gc.collect()
    queries = flip(np.array(sample_fps[: QUERIES // 2], dtype=np.uint64), rng)
    queries = np.concatenate(
        [queries, rng.integers(0, 2**64 - 1, QUERIES - queries.size, dtype=np.uint64)]
    )
    index.query_many(queries)
    out: dict[str, Any] = {
        "system": "permindex (4, 1)",
        "n": n,
        "load_s": load_s,
        "bytes_per_fp": index.table_bytes() / n,
        "key_bytes_per_key": (index.memory_bytes() - index.table_bytes()) / n,
        "rss_bytes": rss_bytes(),
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "batch_qps": median_rate(queries.size, lambda: index.query_many(queries), repeats),
    }
    singles = queries[:2000].tolist()

    def one_by_one() -> None:
        for q in singles:
            index.query(q)

    out["single_qps"] = median_rate(len(singles), one_by_one, repeats)
    # The brute-force reference from the compact export: no Python str per key.
    lengths, blob, fps = index.export_compact()
    starts = np.concatenate(([0], np.cumsum(lengths + 1)[:-1]))
    data = blob.tobytes()
    del blob
    wrong = 0
    for q in queries[sample_positions(queries.size)].tolist():
        expected = set()
        for i in brute_force(fps, q):
            start = int(starts[i])
            expected.add(data[start : start + int(lengths[i])].decode("utf-8"))
        if {m.key for m in index.query(q)} != expected:
            wrong += 1
    out["checked"] = SAMPLE
    out["wrong"] = wrong
    return out


# -- gRPC: permindex serve against a do-nothing echo server ---------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def echo_server(port: int) -> None:
    import grpc

    def echo(request: bytes, _context: object) -> bytes:
        return request

    handler = grpc.method_handlers_generic_handler(
        "bench.Echo",
        {"Echo": grpc.unary_unary_rpc_method_handler(echo, lambda b: b, lambda b: b)},
    )
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=8))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    server.wait_for_termination()


def echo_aio_server(port: int) -> None:
    """The echo server of :func:`echo_server` on grpc.aio: the handler runs on the event loop."""
    import asyncio

    import grpc

    async def echo(request: bytes, _context: object) -> bytes:
        return request

    async def serve() -> None:
        handler = grpc.method_handlers_generic_handler(
            "bench.Echo",
            {"Echo": grpc.unary_unary_rpc_method_handler(echo, lambda b: b, lambda b: b)},
        )
        server = grpc.aio.server()
        server.add_generic_rpc_handlers((handler,))
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        await server.wait_for_termination()

    asyncio.run(serve())


def grpc_client(target: str, kind: str, seconds: float, start_at: float) -> dict[str, Any]:
    """Sequential calls for ``seconds`` from ``start_at``: ``echo`` sends 12 bytes to the echo
    server; ``query`` one fingerprint, ``batch`` 1,000 fingerprints to permindex Query;
    ``stream`` (or ``stream:N``) a QueryColumns stream of 1,000 (N) fingerprints a message."""
    import grpc

    from permindex.v1 import index_pb2 as pb
    from permindex.v1 import index_pb2_grpc

    rng = np.random.default_rng(os.getpid())
    channel = grpc.insecure_channel(target)
    grpc.channel_ready_future(channel).result(timeout=30)
    if kind.startswith("stream"):
        per_message = int(kind.partition(":")[2] or 1000)
        return stream_client(channel, rng, seconds, start_at, per_message)
    if kind == "echo":
        call = channel.unary_unary(ECHO_METHOD)
        payload: Any = b"x" * 12

        def send() -> object:
            return call(payload, timeout=30)
    else:
        stub = index_pb2_grpc.PermIndexStub(channel)
        size = 1000 if kind == "batch" else 1
        requests = [
            pb.QueryRequest(fingerprints=rng.integers(0, 2**63, size, dtype=np.uint64).tolist())
            for _ in range(16)
        ]

        def send() -> object:
            return stub.Query(requests[int(rng.integers(0, 16))], timeout=30)

    for _ in range(20):
        send()
    time.sleep(max(0.0, start_at - time.time()))
    latencies: list[float] = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        began = time.perf_counter()
        send()
        latencies.append(time.perf_counter() - began)
    channel.close()
    return {"calls": len(latencies), "p50_ms": float(np.median(latencies) * 1e3)}


def stream_client(
    channel: Any, rng: np.random.Generator, seconds: float, start_at: float, per_message: int = 1000
) -> dict[str, Any]:
    """QueryColumns on one stream for ``seconds`` from ``start_at``: ``per_message`` packed
    fingerprints a message, up to STREAM_WINDOW messages in flight (as
    ``Client.query_columns`` sends them);
    every reply's columns are decoded into numpy arrays and keys, as a client would."""
    import threading

    from permindex.v1 import index_pb2 as pb
    from permindex.v1 import index_pb2_grpc

    stub = index_pb2_grpc.PermIndexStub(channel)
    requests = [
        pb.QueryColumnsRequest(
            fingerprints=rng.integers(0, 2**63, per_message, dtype=np.uint64)
            .astype("<u8")
            .tobytes()
        )
        for _ in range(16)
    ]
    room = threading.Semaphore(STREAM_WINDOW)
    stop = threading.Event()

    def send() -> Any:
        for i in range(10**9):
            while not room.acquire(timeout=0.05):
                if stop.is_set():
                    return
            if stop.is_set():
                return
            yield requests[i % 16]

    replies = stub.QueryColumns(send(), timeout=seconds + 60)
    for _ in range(20):  # warm up
        next(replies)
        room.release()
    time.sleep(max(0.0, start_at - time.time()))
    calls = matches = 0
    deadline = time.perf_counter() + seconds
    began = time.perf_counter()
    for reply in replies:
        room.release()
        np.frombuffer(reply.query_positions, dtype="<u4")
        np.frombuffer(reply.fingerprints, dtype="<u8")
        np.frombuffer(reply.distances, dtype=np.uint8)
        matches += len(list(reply.keys))
        calls += 1
        if time.perf_counter() >= deadline:
            break
    elapsed = time.perf_counter() - began
    stop.set()
    replies.cancel()
    channel.close()
    return {"calls": calls, "ms_per_message": elapsed / max(calls, 1) * 1e3, "matches": matches}


def run_clients(target: str, kind: str, clients: int, seconds: float) -> dict[str, Any]:
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 2.0 + 0.5 * clients
    with context.Pool(clients) as pool:
        parts = pool.starmap(grpc_client, [(target, kind, seconds, start_at)] * clients)
    calls = sum(p["calls"] for p in parts)
    # per client: the p50 of sequential calls, or the mean time per message of a stream
    latency = "ms_per_message" if kind.startswith("stream") else "p50_ms"
    return {
        "calls_per_s": calls / seconds,
        latency: statistics.median(p[latency] for p in parts),
    }


def server_kind() -> str:
    """``asyncio`` when ``permindex serve`` has the stream limits of the grpc.aio server (with
    the event loop it picks by default), else ``sync`` (the thread-pool server), and the commit
    of the measured tree when known: e.g. ``asyncio on uvloop, commit 1234abc``."""
    usage = subprocess.run(
        [sys.executable, "-m", "permindex", "serve", "--help"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    ).stdout
    kind = "asyncio" if "--max-streams" in usage else "sync"
    if kind == "asyncio" and "--event-loop" in usage:  # serve's default loop: uvloop if found
        kind += " on uvloop" if importlib.util.find_spec("uvloop") else " on asyncio's loop"
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    ).stdout.strip()
    return f"{kind}, commit {commit}" if commit else kind


def process_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def serve_process(
    port: int, data_dir: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> Any:
    """``permindex serve`` on 127.0.0.1:``port`` (a subprocess; ``env``: extra variables;
    ``cwd``: its working directory, whose ``permindex`` package ``-m`` finds first)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "permindex",
            "serve",
            "--address",
            f"127.0.0.1:{port}",
            "--data-dir",
            str(data_dir),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        cwd=cwd,
    )


def stream_cpu(
    process: Any, target: str, clients: int, seconds: float, per_message: int = 1000
) -> dict[str, Any]:
    """:func:`run_clients` of QueryColumns streams of ``per_message`` fingerprints a message,
    with the server's CPU seconds per 10^6 lookups over the run."""
    before = process_cpu_seconds(process.pid)
    result = run_clients(target, f"stream:{per_message}", clients, seconds)
    cpu = process_cpu_seconds(process.pid) - before
    lookups = result["calls_per_s"] * per_message * seconds
    result["lookups_per_s"] = result["calls_per_s"] * per_message
    result["server_cpu_s_per_million"] = cpu / lookups * 1e6 if lookups else None
    return result


def random_batches(per_call: int) -> list[np.ndarray]:
    """16 batches of ``per_call`` random fingerprints ((per_call,) uint64, seed 11): the
    batches the index's CPU timings look up, as :func:`stream_client` sends."""
    rng = np.random.default_rng(11)
    return [rng.integers(0, 2**63, per_call, dtype=np.uint64) for _ in range(16)]


def lookup_cpu(index: Any, batches: list[np.ndarray], calls: int, columns: bool) -> float:
    """CPU seconds per 10^6 lookups of ``calls`` calls of ``index.query_many`` over
    ``batches`` in turn (one untimed call first)."""
    options = {"columns": True} if columns else {}
    index.query_many(batches[0], **options)
    began = time.process_time()
    for i in range(calls):
        index.query_many(batches[i % len(batches)], **options)
    return (time.process_time() - began) / (calls * batches[0].size) * 1e6


def cpu_factor(
    per_call: int, fast: tuple[str, list[float]], slow: tuple[str, list[float]]
) -> dict[str, Any]:
    """The medians of two sets of CPU timings (per 10^6 lookups) under their names and their
    ratio, slow over fast."""
    fast_s, slow_s = statistics.median(fast[1]), statistics.median(slow[1])
    return {
        "per_call": per_call,
        f"{fast[0]}_cpu_s_per_million": fast_s,
        f"{slow[0]}_cpu_s_per_million": slow_s,
        "factor": slow_s / fast_s,
    }


def index_lookup_cpu(n: int, per_call: int, calls: int, columns: bool) -> list[float]:
    """CPU seconds per 10^6 lookups of ``Index.query_many`` (``columns``: the columnar form) on
    ``per_call`` random fingerprints a call (those of :func:`stream_client`), ``calls`` calls,
    3 times, over an index of :func:`make_data`'s ``n`` fingerprints: run by
    :func:`index_cpu_before` in a process of its own, on whichever ``permindex`` that process
    imports (this tree's, or main's when issue 13 was filed, which had no columnar form)."""
    from permindex import Index

    fps, _ = make_data(n)
    keys = [f"doc-{i:08d}" for i in range(n)]
    index = Index.from_arrays(keys, fps)  # c1b4e0d has it too
    batches = random_batches(per_call)
    return [lookup_cpu(index, batches, calls, columns) for _ in range(3)]


def index_cpu_before(n: int, per_call: int, source: Path) -> dict[str, Any]:
    """The index's own factor against main when issue 13 was filed (``source``: that commit's
    package, bench_dedup.BASELINE_COMMIT): CPU per 10^6 lookups of ``query_many(columns=True)``
    of this tree (what QueryColumns runs now) vs ``query_many`` of that package (Match lists,
    the only form it had, what its QueryColumns ran), :func:`index_lookup_cpu` in processes
    of their own, alternating twice; medians of the 6 timings of each."""
    calls_now = max(1, 2_000_000 // per_call)
    timings: dict[str, list[float]] = {"now": [], "before": []}
    for _ in range(2):
        for name, cwd, calls, columns in (
            ("now", ROOT, calls_now, True),
            ("before", source, max(1, calls_now // 5), False),
        ):
            call = f"index_lookup_cpu({n}, {per_call}, {calls}, {columns})"
            timings[name].extend(in_tree(call, cwd))
    return cpu_factor(per_call, ("now", timings["now"]), ("before", timings["before"]))


def worker_grpc(n: int, seconds: float) -> dict[str, Any]:
    import bench_dedup
    import grpc

    from permindex.cli.bench import preload
    from permindex.client import Client
    from permindex.v1 import index_pb2 as pb
    from permindex.v1 import index_pb2_grpc

    fps, _ = make_data(n)
    out: dict[str, Any] = {"system": "gRPC", "n": n, "server": server_kind()}
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        try:
            port = free_port()
            server = serve_process(port, Path(tmp) / "data")
            processes.append(server)
            echo_port = free_port()
            aio_port = free_port()
            for worker, echo_at in (("echo-server", echo_port), ("echo-aio-server", aio_port)):
                processes.append(
                    subprocess.Popen(
                        [sys.executable, __file__, "--worker", worker, "--n", str(echo_at)],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            target = f"127.0.0.1:{port}"
            channel = grpc.insecure_channel(target)
            grpc.channel_ready_future(channel).result(timeout=60)
            stub = index_pb2_grpc.PermIndexStub(channel)
            began = time.perf_counter()
            with Client(target, timeout=120) as client:
                preload(client, [f"doc-{i:08d}" for i in range(n)], fps.tolist())
            out["preload_s"] = time.perf_counter() - began
            # The preload's snapshot now, so that the periodic one (every 60 s while the log
            # holds anything newer) does not fall into the measured rounds.
            stub.Snapshot(pb.SnapshotRequest(), timeout=600)
            # The server merges its runs into one per table once nothing was added for 1 s
            # (about 0.5 s of work at 10^6): let that happen before the measured rounds too.
            time.sleep(4.0)
            channel.close()
            echo = f"127.0.0.1:{echo_port}"
            aio_echo = f"127.0.0.1:{aio_port}"
            # the sync echo, the asyncio echo and permindex alternate, GRPC_ROUNDS times, so
            # that a burst of load from elsewhere on the machine falls on all alike; medians
            # over the rounds are kept, and each round's ratio (to the sync echo) beside them
            rounds: dict[str, list[dict[str, Any]]] = {}
            for _ in range(GRPC_ROUNDS):
                for name, kind, address, clients in (
                    ("echo_1", "echo", echo, 1),
                    ("aio_echo_1", "echo", aio_echo, 1),
                    ("query_1", "query", target, 1),
                    ("echo_4", "echo", echo, 4),
                    ("aio_echo_4", "echo", aio_echo, 4),
                    ("query_4", "query", target, 4),
                ):
                    rounds.setdefault(name, []).append(run_clients(address, kind, clients, seconds))
            for name, runs in rounds.items():
                out[name] = {key: statistics.median(run[key] for run in runs) for key in runs[0]}
            for ours in ("query", "aio_echo"):
                out[f"{ours}_1"]["p50_ratios"] = [
                    q["p50_ms"] / e["p50_ms"]
                    for q, e in zip(rounds[f"{ours}_1"], rounds["echo_1"], strict=True)
                ]
                out[f"{ours}_4"]["calls_ratios"] = [
                    q["calls_per_s"] / e["calls_per_s"]
                    for q, e in zip(rounds[f"{ours}_4"], rounds["echo_4"], strict=True)
                ]
            for name, kind, address, clients in (
                ("batch_1", "batch", target, 1),
                ("batch_2", "batch", target, 2),
                ("stream_1", "stream", target, 1),
                ("stream_2", "stream", target, 2),
            ):
                out[name] = run_clients(address, kind, clients, seconds)
            for name in ("batch_1", "batch_2", "stream_1", "stream_2"):
                out[name]["lookups_per_s"] = out[name]["calls_per_s"] * 1000
            # The server's CPU per QueryColumns lookup on this tree and, on the same data in a
            # second server, as main had it when issue 13 was filed (its package, run from its
            # own tree), alternating. (A server on the reference paths, PERMINDEX_JIT=0, was
            # measured beside until issue 40 deleted them: results.json keeps its figures.)
            servers = {"kernels": (server, target)}
            before_source = bench_dedup.baseline_source()
            if before_source is not None:
                before_port = free_port()
                before = serve_process(
                    before_port,
                    Path(tmp) / "before",
                    {"PYTHONPATH": str(before_source)},
                    cwd=before_source,
                )
                processes.append(before)
                servers["before"] = (before, f"127.0.0.1:{before_port}")
                out["before_commit"] = bench_dedup.BASELINE_COMMIT
            for name, (_, address) in servers.items():
                if name == "kernels":
                    continue
                with Client(address, timeout=120) as client:
                    client.wait_ready(60)
                    preload(client, [f"doc-{i:08d}" for i in range(n)], fps.tolist())
            time.sleep(4.0)
            for per_message, suffix in ((1000, ""), (STREAM_LARGE_MESSAGE, "_large")):
                cpu_rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in servers}
                for _ in range(GRPC_ROUNDS):
                    for name, (process, address) in servers.items():
                        cpu_rounds[name].append(
                            stream_cpu(process, address, 1, seconds, per_message)
                        )
                for name, runs in cpu_rounds.items():
                    out[f"stream_cpu{suffix}_{name}"] = {
                        key: statistics.median(run[key] for run in runs) for key in runs[0]
                    }
                out[f"stream_cpu{suffix}_kernels"]["per_message"] = per_message
            if before_source is not None:  # the index's factor against that commit
                out["index_cpu_before"] = index_cpu_before(n, 1000, before_source)
                out["index_cpu_large_before"] = index_cpu_before(
                    n, STREAM_LARGE_MESSAGE, before_source
                )
        finally:
            for process in processes:
                process.terminate()
                process.wait(timeout=30)
    return out


# -- fingerprints and dedup: benchmarks/bench_simhash.py, benchmarks/bench_dedup.py -------------


def worker_simhash_many(quick: bool) -> dict[str, Any]:
    """simhash_many against the per-shingle Python hashing floor and simhash per text, on
    300-word windows of a shared corpus, in one run (bench_simhash.run), with the first call's
    cost in fresh processes (compiling, then from the cache)."""
    import bench_simhash

    return {"system": "simhash_many", **bench_simhash.run(docs=2000, rounds=3 if quick else 5)}


def worker_dedup(n: int) -> dict[str, Any]:
    """``permindex dedup`` of n documents of benchmarks/synthetic.py on the compiled kernels, on
    the reference paths (PERMINDEX_JIT=0: fingerprints, join and components without kernels)
    and as main had it when issue 13 was filed (bench_dedup.BASELINE_COMMIT, when git has it),
    one after the other (bench_dedup.run)."""
    import bench_dedup

    source = bench_dedup.baseline_source()
    # The kernels and the baseline alternate DEDUP_ROUNDS times and the run of median wall time
    # of each is kept (its per-round ratios beside): on this VM one run of the same code took
    # from 7.5 to 12.5 s within an hour (benchmarks/README.md). The sample of pairs is checked
    # on the first run; the reference paths run once, beside.
    kernels_runs = [bench_dedup.run(n)]
    reference = bench_dedup.run(n, sample=0, jit=False)
    baseline_runs = []
    for round_ in range(DEDUP_ROUNDS):
        if round_:
            kernels_runs.append(bench_dedup.run(n, sample=0))
        if source is not None:
            baseline_runs.append(bench_dedup.run(n, sample=0, source=source))
    kernels = median_run(kernels_runs)
    if kernels["check"] is None:
        kernels["check"] = kernels_runs[0]["check"]
    kernels["wall_rounds"] = [run["wall_seconds"] for run in kernels_runs]
    out = {"system": "dedup", "n": n, "kernels": kernels, "reference": reference}
    if baseline_runs:
        out["baseline"] = median_run(baseline_runs)
        out["baseline"]["commit"] = bench_dedup.BASELINE_COMMIT
        out["baseline"]["wall_rounds"] = [run["wall_seconds"] for run in baseline_runs]
        out["baseline_ratios"] = [
            b["wall_seconds"] / k["wall_seconds"]
            for k, b in zip(kernels_runs, baseline_runs, strict=True)
        ]
    return out


def median_run(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The run of median ``wall_seconds`` (the lower middle one of an even count)."""
    ordered = sorted(runs, key=lambda run: run["wall_seconds"])
    return dict(ordered[(len(ordered) - 1) // 2])


def replace_part(result: dict[str, Any], system: str) -> None:
    """Put ``result`` in results/results.json in place of the entry of ``system`` (of the same
    N, for a part measured per N)."""
    path = RESULTS / "results.json"
    kept = json.loads(path.read_text(encoding="utf-8")) if path.exists() else None
    if kept is None:
        kept = {"machine": result["machine"], "results": []}
    kept["results"] = [
        r
        for r in kept["results"]
        if not (r.get("system") == system and r.get("n", result.get("n")) == result.get("n"))
    ] + [result]
    path.write_text(json.dumps(kept, indent=1) + "\n", encoding="utf-8")


# -- driver ----------------------------------------------------------------------------------------


def run_worker(args: list[str], timeout: float = 3600) -> dict[str, Any] | None:
    command = [sys.executable, __file__, "--worker", *args]
    print("  $", " ".join(command[2:]), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        print("    skipped:", " | ".join(tail), flush=True)
        return None
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    print(
        "   ",
        json.dumps(
            {
                k: round(v, 3) if isinstance(v, float) else v
                for k, v in result.items()
                if not isinstance(v, dict)
            }
        ),
        flush=True,
    )
    return result


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
        found = re.search(r"model name\s*:\s*(.+)", text)
        cpu = found.group(1).strip() if found else cpu
    except OSError:
        pass
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--sizes", default="1e6,1e7", help="N values (1e6,1e7)")
    parser.add_argument("--designs", default="4,1 5,2 6,2 6,3", help="permindex designs")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="fewer repeats, shorter gRPC runs")
    parser.add_argument(
        "--skip",
        default="",
        help="comma list: faiss,simhash,pybind,brute,grpc,restart,simhash-many,dedup",
    )
    parser.add_argument("--scale", type=float, default=None, help="only the 10^8-class run")
    parser.add_argument(
        "--only",
        choices=["grpc", "simhash-many", "dedup", "head-to-head", "thread-scaling"],
        help="only this part (grpc: the server against the sync and asyncio echo servers, "
        "N = 10^6 unless --sizes is smaller; simhash-many: simhash_many against the Python "
        "hashing floor; dedup: permindex dedup of 10^6 synthetic documents, kernels and "
        "reference paths; thread-scaling: two threads on halves of a large batch against a "
        "GIL-free random gather, N = 10^6; head-to-head: permindex (4, 1) and faiss in one "
        "process at each of "
        "--sizes); its result replaces the part's entry in results/results.json, the rest is "
        "kept",
    )
    parser.add_argument(
        "--no-docs",
        "--no-readme",
        dest="no_docs",
        action="store_true",
        help="leave docs/performance.md and docs/assets/plot.png alone",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=float, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--design", default="4,1", help=argparse.SUPPRESS)
    parser.add_argument("--extras", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = int(args.n)
    if args.worker:
        design = tuple(int(x) for x in args.design.split(","))
        workers: dict[str, Callable[[], Any]] = {
            "permindex": lambda: worker_permindex(
                n, (design[0], design[1]), args.repeats, args.extras
            ),
            "faiss": lambda: worker_faiss(n, args.repeats),
            "head-to-head": lambda: worker_head_to_head(n, max(15, args.repeats)),
            "thread-scaling": lambda: worker_thread_scaling(n, max(7, args.repeats)),
            "simhash": lambda: worker_simhash(n, args.repeats),
            "pybind": lambda: worker_simhash_pybind(n),
            "brute": lambda: worker_brute(n),
            "restart": lambda: worker_restart(n),
            "scale": lambda: worker_scale(n, args.repeats),
            "grpc": lambda: worker_grpc(n, 2.0 if args.quick else 5.0),
            "simhash-many": lambda: worker_simhash_many(args.quick),
            "dedup": lambda: worker_dedup(n),
            "echo-server": lambda: echo_server(n),
            "echo-aio-server": lambda: echo_aio_server(n),
        }
        print(json.dumps(workers[args.worker]()))
        return 0
    RESULTS.mkdir(parents=True, exist_ok=True)
    repeats = ["--repeats", str(2 if args.quick else args.repeats)]
    if args.scale:
        result = run_worker(["scale", "--n", str(int(args.scale)), *repeats], timeout=7200)
        if result is None:
            return 1
        result["machine"] = machine()
        (RESULTS / "scale.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
        write_outputs(args.no_docs)
        return 0
    skip = set(filter(None, args.skip.split(",")))
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    if args.only:
        quick = ["--quick"] if args.quick else []
        part_sizes = sizes if args.only == "head-to-head" else [min(max(sizes), 1_000_000)]
        for n_part in part_sizes:
            result = run_worker([args.only, "--n", str(n_part), *quick, *repeats], timeout=7200)
            if result is None:
                return 1
            result["machine"] = machine()
            replace_part(result, result["system"])
        write_outputs(args.no_docs)
        return 0
    designs = args.designs.split()
    results: list[dict[str, Any]] = []
    info = machine()
    for size in sizes:
        print(f"N = {size:,}", flush=True)
        common = ["--n", str(size), *repeats]
        for d in designs:
            extras = ["--extras"] if d == "4,1" else []
            results.append(run_worker(["permindex", "--design", d, *common, *extras]) or {})
        if "faiss" not in skip:
            results.append(run_worker(["faiss", *common]) or {})
            results.append(run_worker(["head-to-head", *common]) or {})
        if size <= 1_000_000:
            results.append(run_worker(["thread-scaling", *common]) or {})
        if "brute" not in skip:
            results.append(run_worker(["brute", *common]) or {})
        if "simhash" not in skip and size <= 1_000_000:
            results.append(run_worker(["simhash", *common]) or {})
        if "pybind" not in skip:
            results.append(run_worker(["pybind", *common]) or {})
    if "restart" not in skip:
        results.append(run_worker(["restart", "--n", str(max(sizes))]) or {})
    if "grpc" not in skip:
        quick = ["--quick"] if args.quick else []
        results.append(run_worker(["grpc", "--n", str(min(max(sizes), 1_000_000)), *quick]) or {})
    if "simhash-many" not in skip:
        quick = ["--quick"] if args.quick else []
        results.append(run_worker(["simhash-many", *quick]) or {})
    if "dedup" not in skip:
        dedup_n = min(max(sizes), 1_000_000)
        results.append(run_worker(["dedup", "--n", str(dedup_n)], timeout=7200) or {})
    payload = {"machine": info, "results": [r for r in results if r]}
    (RESULTS / "results.json").write_text(json.dumps(payload, indent=1) + "\n", encoding="utf-8")
    write_outputs(args.no_docs)
    return 0


def write_outputs(no_docs: bool) -> None:
    """results.md, plot.png and the section of docs/performance.md from the saved JSON files."""
    from render import plot, render

    payload = json.loads((RESULTS / "results.json").read_text(encoding="utf-8"))
    scale_path = RESULTS / "scale.json"
    scale = json.loads(scale_path.read_text(encoding="utf-8")) if scale_path.exists() else None
    markdown = render(payload, scale)
    (RESULTS / "results.md").write_text(markdown, encoding="utf-8")
    try:
        plot(payload, RESULTS / "plot.png")
    except ImportError:
        print("matplotlib is not installed: no plot (pip install -e '.[bench]')")
    if no_docs:
        return
    if (RESULTS / "plot.png").exists():
        shutil.copyfile(RESULTS / "plot.png", ROOT / "docs" / "assets" / "plot.png")
    page = ROOT / "docs" / "performance.md"
    text = page.read_text(encoding="utf-8")
    if README_START in text and README_END in text:
        head, rest = text.split(README_START, 1)
        _, tail = rest.split(README_END, 1)
        page.write_text(f"{head}{README_START}\n{markdown}\n{README_END}{tail}", encoding="utf-8")
        print("docs/performance.md updated")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
