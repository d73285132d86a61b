#!/usr/bin/env python3
"""Memory per fingerprint with keys (issue 43, point 4): permindex with three kinds of keys and
its peers, one fresh process per system and size.

Run from the repository root::

    .venv/bin/pip install -e '.[bench]'                          # faiss-cpu, a peer
    bash benchmarks/peers/hammingbird/build.sh                   # hammingbird's core, a peer
    .venv/bin/python benchmarks/bench_memory.py                  # 10^6 and 10^7 (~15 min)
    .venv/bin/python benchmarks/bench_memory.py --sizes 1e8      # the 10^8-class run (below)
    .venv/bin/python benchmarks/bench_memory.py --sizes 1e4 --no-docs   # a smoke run

What one permindex process does (``--worker permindex``), for N fingerprints, a design and a
kind of key:

1. imports permindex and compiles (or loads from numba's cache) every kernel the run uses, on
   a tiny index; then reads its own resident memory: the **baseline** (interpreter, imports,
   kernels), reported apart;
2. adds N keys to an empty ``Index(design=...)`` in **random order** (a pseudo-random
   permutation of the document numbers, a Feistel network: no array of N is held) in
   ``add_many`` batches of ``--batch`` (100,000), each key with a **random 64-bit fingerprint**
   (a hash of its document number, so every process and peer has the same without storing
   them). Keys: ``k00000001``-style (``f"k{i:08d}"``), decimal integers (``str(i)``) or the
   URLs of a synthetic crawl (``benchmarks/urls.py``, 50-100 bytes);
3. once a growth ahead the last batches started (a background thread) has finished, reads
   VmRSS and VmHWM (peak) from /proc/self/status and ``Index.memory_breakdown()`` (by part);
4. runs the issue's workload: 1,000 ``get``, 1,000 re-adds (``add`` of a stored key with a new
   fingerprint), 1,000 ``remove``, each a call, and reads VmRSS again;
5. checks the answers (the gets, and 20 lookups against brute force over the N fingerprints)
   and, for (4, 1), writes a snapshot as the server does (``DataDir.save_parts`` of
   ``Index.export_slices``, what ``Store.snapshot`` writes); a second fresh process
   (``--worker restart``) then times ``Store.open`` of that directory, what a server does before
   it listens.

The headline figure is **RSS after load minus the baseline, per fingerprint**; the process's
whole RSS per fingerprint is beside it. Peers, same fingerprints in the same order, fresh
processes: faiss ``IndexBinaryMultiHash(64, 4, 16)`` (no keys; it keeps ids) and hammingbird
(a Rust index of bit chunks in hash maps; ids, no keys): its Python package when it can be
imported, else its Rust core in the harness ``benchmarks/peers/hammingbird`` when that is built
(``bash benchmarks/peers/hammingbird/build.sh``: the sdist from PyPI, Debian's crates), else
reported as not installed. The harness is its own fresh process, fed the same fingerprints in
the same order and batches through a file; 20 of its answers (stored fingerprints 0-4 bits
away, and random ones) are compared with brute force. The URL keys'
share is the total with URL keys minus the total with integer keys, against the URLs' raw
UTF-8 bytes (the issue's criterion: at most 0.6 of them).

Writes ``benchmarks/results/memory.json`` (entries of the same system, kind, design and N
replaced, the others kept: a ``--sizes 1e8`` run adds to a 10^6/10^7 run),
``benchmarks/results/memory.md``, the section between ``<!-- memory:start -->`` and
``<!-- memory:end -->`` of docs/performance.md and the 10^10 table of docs/scale.md
(``--no-docs`` leaves the docs alone).

The 10^8-class run (``--sizes 1e8``) does as ``benchmarks/run.py --scale 1e8`` does: keys made
per batch (no list of N str), permindex (4, 1) only (the three kinds, each in its own process;
``--designs`` to add others), no snapshot unless ``--snapshot-max`` allows it. Its peak is
about 10^8 x P_peak of the 10^7 run: before issue 43, 14 GB with ``k00000001`` keys and 23 GB
with URLs (too close to this machine's 24 GiB: ``--kinds k,int`` leaves the URLs out); about an
hour on this machine (2 cores).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
KINDS: Final = ("k", "int", "url")
KIND_NAMES: Final = {"k": "k00000001", "int": "integers", "url": "URLs"}
SEED: Final = 43
K: Final = 3
WORKLOAD: Final = 1_000  # gets, re-adds and removes, each
CHECKED: Final = 20  # lookups compared with brute force
DOCS_START: Final = "<!-- memory:start -->"
DOCS_END: Final = "<!-- memory:end -->"
SCALE_START: Final = "<!-- scale-memory:start -->"
SCALE_END: Final = "<!-- scale-memory:end -->"
HAMMINGBIRD_NOTE: Final = (
    "hammingbird 0.5.0 is an sdist only (no wheel on PyPI); building it needs its Rust crates "
    "(pyo3 0.22, numpy 0.22, hashbrown 0.15, rayon) from crates.io, which this machine cannot "
    "reach, and Debian bookworm packages older versions (pyo3 0.17, hashbrown 0.12); its Rust "
    "core runs in benchmarks/peers/hammingbird once built there "
    "(bash benchmarks/peers/hammingbird/build.sh)"
)
HARNESS: Final = HERE / "peers" / "hammingbird" / "target" / "release" / "hammingbird-harness"
HARNESS_LABEL: Final = "hammingbird-core 0.5.0 (Rust harness, Debian crates)"
ISSUE_HAMMINGBIRD_BYTES: Final = 40.0  # the issue's figure, RSS per fingerprint, no keys


# -- the data: a pure function of the document number ---------------------------------------------


def _mix(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finaliser, elementwise."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def fingerprints(ids: NDArray[np.uint64], salt: int = 0) -> NDArray[np.uint64]:
    """The random 64-bit fingerprint of each document number (``salt`` 1: the re-adds')."""
    return _mix(ids + np.uint64((SEED * 0x9E3779B97F4A7C15 + salt) % 2**64))


class Order:
    """A pseudo-random permutation of [0, n): position -> document number, by a 4-round Feistel
    network on the smallest even number of bits covering n, walking cycles back into range. No
    array of n is made. O(m) per call of m positions (about 2 rounds of walking at worst)."""

    def __init__(self, n: int, seed: int = SEED) -> None:
        bits = max(2, (n - 1).bit_length() + ((n - 1).bit_length() & 1))
        self.n = n
        self.half = bits // 2
        self.mask = np.uint64((1 << self.half) - 1)
        self.keys = [
            np.uint64((seed * 1_000_003 + r) * 0xD6E8FEB86659FD93 % 2**64) for r in range(4)
        ]

    def _encrypt(self, x: NDArray[np.uint64]) -> NDArray[np.uint64]:
        left = x >> np.uint64(self.half)
        right = x & self.mask
        for key in self.keys:
            left, right = right, left ^ (_mix(right ^ key) & self.mask)
        return (left << np.uint64(self.half)) | right

    def __call__(self, positions: NDArray[np.uint64]) -> NDArray[np.uint64]:
        out = self._encrypt(positions.astype(np.uint64))
        outside = out >= np.uint64(self.n)
        while outside.any():
            out[outside] = self._encrypt(out[outside])
            outside = out >= np.uint64(self.n)
        return out


class Keys:
    """The keys of one kind (``k``, ``int``, ``url``) for document numbers."""

    def __init__(self, kind: str) -> None:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        self.kind = kind
        self._crawl: Any = None
        if kind == "url":
            import urls

            self._crawl = urls.Crawl(SEED)

    def __call__(self, ids: NDArray[np.uint64]) -> list[str]:
        if self.kind == "k":
            return [f"k{i:08d}" for i in ids.tolist()]
        if self.kind == "int":
            return [str(i) for i in ids.tolist()]
        result: list[str] = self._crawl.urls(ids)
        return result


def batches(n: int, size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, n, size):
        yield start, min(n, start + size)


# -- measuring -------------------------------------------------------------------------------------


def status(field: str, pid: str = "self") -> int:
    """A ``VmRSS``/``VmHWM`` figure of /proc/PID/status, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} in /proc/{pid}/status")


def settled_rss() -> int:
    gc.collect()
    return status("VmRSS")


def trimmed_rss() -> int:
    """VmRSS after glibc's ``malloc_trim(0)`` hands the allocator's free memory back to the
    system (a diagnostic: how much of the RSS is freed memory the allocator keeps, in this
    process only, after the figures above were read)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return 0
    return settled_rss()


def warm_up(design: tuple[int, int]) -> None:
    """Every kernel of the run compiled (or loaded from numba's cache) on a tiny index."""
    from permindex import Index

    index = Index(k=K, design=design)
    ids = np.arange(3_000, dtype=np.uint64)
    keys = [f"w{i}" for i in ids.tolist()]
    index.add_many(keys, fingerprints(ids))
    index.add("w1", 5)
    index.get("w2")
    index.remove("w3")
    index.query_many(fingerprints(ids[:100]))
    index.query(int(fingerprints(ids[:1])[0]))
    index.memory_breakdown()
    index.export_slices()
    del index
    gc.collect()


def worker_permindex(
    n: int, kind: str, design: tuple[int, int], batch: int, snapshot: str
) -> dict[str, Any]:
    from permindex import Index

    make_keys = Keys(kind)
    warm_up(design)
    baseline = settled_rss()
    order = Order(n)
    index = Index(k=K, design=design)
    raw_key_bytes = 0
    began = time.perf_counter()
    for start, stop in batches(n, batch):
        ids = order(np.arange(start, stop, dtype=np.uint64))
        keys = make_keys(ids)
        raw_key_bytes += sum(map(len, keys))  # ASCII: characters = UTF-8 bytes
        index.add_many(keys, fingerprints(ids))
        del keys
    load_s = time.perf_counter() - began
    # The last batches may have started a growth ahead (a background thread that copies the
    # arrays into larger ones, the old and new both resident until it swaps them in): the
    # figure is of the index at rest, once it has finished (tens of milliseconds to a second).
    index._rows.wait_for_growth()
    rss_load = settled_rss()
    hwm_load = status("VmHWM")
    parts = index.memory_breakdown()
    out: dict[str, Any] = {
        "system": "permindex",
        "kind": kind,
        "design": list(design),
        "n": n,
        "batch": batch,
        "load_s": load_s,
        "baseline_rss_bytes": baseline,
        "rss_load_bytes": rss_load,
        "hwm_load_bytes": hwm_load,
        "raw_key_bytes": raw_key_bytes,
        "breakdown": parts._asdict(),
        "accounted_bytes": parts.total,
    }
    # the workload: three disjoint sets of stored documents
    rng = np.random.default_rng(SEED + 1)
    chosen = rng.choice(n, size=min(n, 3 * WORKLOAD), replace=False).astype(np.uint64)
    gets, readds, removes = np.array_split(chosen, 3)
    get_keys, readd_keys, remove_keys = make_keys(gets), make_keys(readds), make_keys(removes)
    new_fps = fingerprints(readds, salt=1).tolist()
    began = time.perf_counter()
    got = [index.get(key) for key in get_keys]
    for key, value in zip(readd_keys, new_fps, strict=True):
        index.add(key, value)
    for key in remove_keys:
        index.remove(key)
    out["workload_s"] = time.perf_counter() - began
    out["rss_after_workload_bytes"] = settled_rss()
    out["hwm_bytes"] = status("VmHWM")
    out["rss_trimmed_bytes"] = trimmed_rss()
    out["accounted_after_workload_bytes"] = index.memory_breakdown().total
    # checks
    wrong = sum(1 for a, b in zip(got, fingerprints(gets).tolist(), strict=True) if a != b)
    wrong += sum(
        1 for key, value in zip(readd_keys, new_fps, strict=True) if index.get(key) != value
    )
    wrong += sum(1 for key in remove_keys if index.get(key) is not None)
    wrong += len(index) != n - len(removes)
    out["wrong_gets"] = wrong
    out["lookups_checked"], out["lookups_wrong"] = check_lookups(
        index, n, make_keys, readds, removes, rng
    )
    if snapshot:
        from permindex.storage.snapshot import DataDir
        from permindex.storage.store import EXPORT_SLICE_ROWS

        began = time.perf_counter()
        with DataDir(snapshot) as data_dir:
            info = data_dir.save_parts(
                index.export_slices(EXPORT_SLICE_ROWS), k=K, design=design, log_sequence=0
            )
        out["snapshot_s"] = time.perf_counter() - began
        out["snapshot_bytes"] = info.bytes
    return out


def check_lookups(
    index: Any,
    n: int,
    make_keys: Keys,
    readds: NDArray[np.uint64],
    removes: NDArray[np.uint64],
    rng: np.random.Generator,
) -> tuple[int, int]:
    """``CHECKED`` lookups (half 0-3 bits from a stored fingerprint, half random) compared with
    brute force over every stored fingerprint (made again in chunks): (checked, wrong)."""
    stored = fingerprints(rng.integers(0, n, CHECKED // 2).astype(np.uint64))
    flips = rng.integers(0, 64, (stored.size, 3)).astype(np.uint64)
    near = stored ^ (np.uint64(1) << flips[:, 0]) ^ (np.uint64(1) << flips[:, 1])
    queries = np.concatenate([near, rng.integers(0, 2**64, CHECKED - near.size, dtype=np.uint64)])
    readd_fps = fingerprints(readds, salt=1)
    gone = set(readds.tolist()) | set(removes.tolist())
    expected: list[set[int]] = [set() for _ in range(queries.size)]
    for start, stop in batches(n, 1 << 20):
        ids = np.arange(start, stop, dtype=np.uint64)
        values = fingerprints(ids)
        for q, query in enumerate(queries):
            hits = ids[np.bitwise_count(values ^ query) <= K].tolist()
            expected[q].update(h for h in hits if h not in gone)
    for q, query in enumerate(queries):
        hits = readds[np.bitwise_count(readd_fps ^ query) <= K].tolist()
        expected[q].update(hits)
    wrong = 0
    for q, query in enumerate(queries.tolist()):
        want = set(make_keys(np.array(sorted(expected[q]), dtype=np.uint64)))
        if {m.key for m in index.query(query)} != want:
            wrong += 1
    return int(queries.size), wrong


def parse_design(text: str) -> tuple[int, int]:
    blocks, leading = (int(x) for x in text.split(","))
    return blocks, leading


def worker_warm(designs: list[str]) -> dict[str, Any]:
    """Every kernel compiled once into numba's cache, so that no measured process compiles
    (compiling leaves its memory in the process's baseline)."""
    for design in designs:
        warm_up(parse_design(design))
    return {"system": "warm", "designs": designs}


def worker_restart(n: int, kind: str, design: tuple[int, int], path: str) -> dict[str, Any]:
    """``Store.open`` of the data directory the permindex worker wrote: seconds, memory."""
    from permindex.storage.store import Store

    warm_up(design)
    baseline = settled_rss()
    began = time.perf_counter()
    store = Store.open(path, k=K, design=design, fsync="never")
    ready_s = time.perf_counter() - began
    try:
        rss = settled_rss()
        count = len(store.index)
    finally:
        store.close()
    return {
        "system": "restart",
        "kind": kind,
        "design": list(design),
        "n": n,
        "restart_s": ready_s,
        "keys_loaded": count,
        "baseline_rss_bytes": baseline,
        "rss_restart_bytes": rss,
        "hwm_bytes": status("VmHWM"),
    }


def worker_faiss(n: int, batch: int) -> dict[str, Any]:
    try:
        import faiss
    except ImportError as error:
        return {
            "system": "faiss",
            "kind": "none",
            "design": [4, 1],
            "n": n,
            "skipped": f"not installed ({error}): pip install -e '.[bench]'",
        }

    faiss.omp_set_num_threads(1)
    index = faiss.IndexBinaryMultiHash(64, 4, 16)
    warm = faiss.IndexBinaryMultiHash(64, 4, 16)
    warm.add(fingerprints(np.arange(1000, dtype=np.uint64)).view(np.uint8).reshape(-1, 8))
    del warm
    baseline = settled_rss()
    order = Order(n)
    began = time.perf_counter()
    for start, stop in batches(n, batch):
        ids = order(np.arange(start, stop, dtype=np.uint64))
        index.add(np.ascontiguousarray(fingerprints(ids)).view(np.uint8).reshape(-1, 8))
    load_s = time.perf_counter() - began
    rss = settled_rss()
    return {
        "system": "faiss",
        "kind": "none",
        "design": [4, 1],
        "n": n,
        "load_s": load_s,
        "baseline_rss_bytes": baseline,
        "rss_load_bytes": rss,
        "hwm_load_bytes": status("VmHWM"),
        "hwm_bytes": status("VmHWM"),
        "note": "IndexBinaryMultiHash(64, 4, 16): ids, no keys",
    }


def worker_hammingbird(n: int, batch: int) -> dict[str, Any]:
    try:
        import hammingbird  # type: ignore[import-not-found]
    except ImportError as error:
        if HARNESS.exists():
            return harness_hammingbird(n, batch)
        return {
            "system": "hammingbird",
            "kind": "none",
            "design": [0, 0],
            "n": n,
            "skipped": f"not installed ({error}): {HAMMINGBIRD_NOTE}",
        }
    # Its streaming Index as its README shows it (Index(d_bytes, k), add_batch of (m, d_bytes)
    # uint8 rows); never run here, where it could not be installed.
    warm = hammingbird.Index(d_bytes=8, k=K)
    warm.add_batch(fingerprints(np.arange(1000, dtype=np.uint64)).view(np.uint8).reshape(-1, 8))
    del warm
    baseline = settled_rss()
    index = hammingbird.Index(d_bytes=8, k=K)
    order = Order(n)
    began = time.perf_counter()
    for start, stop in batches(n, batch):
        values = fingerprints(order(np.arange(start, stop, dtype=np.uint64)))
        index.add_batch(np.ascontiguousarray(values).view(np.uint8).reshape(-1, 8))
    load_s = time.perf_counter() - began
    return {
        "system": "hammingbird",
        "kind": "none",
        "design": [0, 0],
        "n": n,
        "load_s": load_s,
        "baseline_rss_bytes": baseline,
        "rss_load_bytes": settled_rss(),
        "hwm_load_bytes": status("VmHWM"),
    }


def harness_hammingbird(n: int, batch: int) -> dict[str, Any]:
    """hammingbird's Rust core in the harness (``benchmarks/peers/hammingbird``), a fresh
    process: this one writes the N fingerprints in load order (little-endian uint64, the bytes
    the Python binding would get) and ``CHECKED`` queries to files, the harness loads them as
    ``worker_hammingbird`` does (``Index(8, K)``, ``add_batch`` of ``batch`` rows) and reports
    its own memory; its answers are then compared with brute force over the same order."""
    order = Order(n)
    rng = np.random.default_rng(SEED + 2)
    stored = fingerprints(order(rng.integers(0, n, CHECKED // 2).astype(np.uint64)))
    near = np.array(
        [  # distinct bits flipped: 0, 1, 2, 3 or 4 (the last one past k)
            int(value) ^ sum(1 << int(b) for b in rng.choice(64, i % 5, replace=False))
            for i, value in enumerate(stored)
        ],
        dtype=np.uint64,
    )
    queries = np.concatenate([near, rng.integers(0, 2**64, CHECKED - near.size, dtype=np.uint64)])
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        data, asked = Path(tmp) / "fingerprints.u64", Path(tmp) / "queries.u64"
        with data.open("wb") as out:
            for start, stop in batches(n, batch):
                values = fingerprints(order(np.arange(start, stop, dtype=np.uint64)))
                out.write(values.astype("<u8").tobytes())
        asked.write_bytes(queries.astype("<u8").tobytes())
        done = subprocess.run(
            [str(HARNESS), "load", str(data), str(batch), str(asked)],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{HARNESS} failed ({done.returncode}): {done.stderr.strip()}")
    report: dict[str, Any] = json.loads(done.stdout)
    expected: list[set[tuple[int, int]]] = [set() for _ in range(queries.size)]
    for start, stop in batches(n, 1 << 20):
        values = fingerprints(order(np.arange(start, stop, dtype=np.uint64)))
        for q, query in enumerate(queries):
            distances = np.bitwise_count(values ^ query)
            rows = np.flatnonzero(distances <= K)
            expected[q].update(zip((rows + start).tolist(), distances[rows].tolist(), strict=True))
    answers = [{(int(row), int(d)) for row, d in hits} for hits in report["hits"]]
    wrong = sum(1 for got, want in zip(answers, expected, strict=True) if got != want)
    wrong += report["len"] != n
    return {
        "system": "hammingbird",
        "label": HARNESS_LABEL,
        "kind": "none",
        "design": [0, 0],
        "n": n,
        "batch": batch,
        "load_s": report["load_s"],
        "baseline_rss_bytes": report["baseline_rss_bytes"],
        "rss_load_bytes": report["rss_load_bytes"],
        "hwm_load_bytes": report["hwm_load_bytes"],
        "hwm_bytes": report["hwm_load_bytes"],
        "lookups_checked": int(queries.size),
        "lookups_wrong": wrong,
        "matches_expected": sum(len(want) for want in expected),
        "note": "Index(d_bytes=8, k=3) of hammingbird-core 0.5.0 in benchmarks/peers/hammingbird "
        "(build.sh: hashbrown 0.12, rayon 1.6, rustc-hash 1.1 of Debian bookworm): ids, no keys",
    }


# -- the driver ------------------------------------------------------------------------------------


def run_worker(args: list[str], timeout: float = 7200) -> dict[str, Any] | None:
    command = [sys.executable, str(Path(__file__).resolve()), "--worker", *args]
    print("  $", " ".join(args), flush=True)
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        print("    failed:", " | ".join(tail), flush=True)
        return None
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    shown = {k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()}
    shown.pop("breakdown", None)
    print("   ", json.dumps(shown), flush=True)
    return result


def commit() -> str:
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
        check=False,
    )  # fmt: skip
    return done.stdout.strip() or "unknown"


def machine() -> dict[str, Any]:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    cpu = "unknown"
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(memory / 2**30, 1),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit(),
    }


def order_of(entry: dict[str, Any]) -> tuple[Any, ...]:
    """Entries by N, then permindex's designs, its kinds of key as in KINDS, then the peers."""
    system = ("permindex", "restart", "faiss", "hammingbird").index(entry["system"])
    kind = KINDS.index(entry["kind"]) if entry["kind"] in KINDS else 0
    return (entry["n"], system, entry["design"], kind)


def identity(entry: dict[str, Any]) -> tuple[Any, ...]:
    return (entry["system"], entry["kind"], tuple(entry["design"]), entry["n"])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sizes", default="1e6,1e7", help="N values (1e6,1e7; 1e8 as an option)")
    parser.add_argument("--kinds", default="k,int,url", help="kinds of key (k,int,url)")
    parser.add_argument(
        "--designs",
        default="4,1 5,2 6,3",
        help="designs; those past the first run with k00000001 keys only and not at 10^8 "
        "(their tables differ, their keys do not; --all-kinds runs every kind)",
    )
    parser.add_argument("--all-kinds", action="store_true", help="every kind for every design")
    parser.add_argument("--batch", type=int, default=100_000, help="keys per add_many call")
    parser.add_argument("--skip", default="", help="comma list: faiss,hammingbird,restart")
    parser.add_argument(
        "--snapshot-max",
        type=float,
        default=1e7,
        help="write a snapshot and time the restart up to this N (1e7)",
    )
    parser.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    parser.add_argument("--fresh", action="store_true", help="do not keep earlier entries")
    parser.add_argument("--no-docs", action="store_true", help="leave docs/ alone")
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: render results/memory.json into memory.md and the docs again",
    )
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--n", type=float, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--kind", default="k", help=argparse.SUPPRESS)
    parser.add_argument("--design", default="4,1", help=argparse.SUPPRESS)
    parser.add_argument("--path", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        n = int(args.n)
        design = args.design
        workers: dict[str, Callable[[], dict[str, Any]]] = {
            "permindex": lambda: worker_permindex(
                n, args.kind, parse_design(design), args.batch, args.path
            ),
            "restart": lambda: worker_restart(n, args.kind, parse_design(design), args.path),
            "faiss": lambda: worker_faiss(n, args.batch),
            "hammingbird": lambda: worker_hammingbird(n, args.batch),
            "warm": lambda: worker_warm(args.design.split()),
        }
        print(json.dumps(workers[args.worker]()))
        return 0
    if args.render_only:
        everything = json.loads((args.results / "memory.json").read_text(encoding="utf-8"))
        publish(everything, args.results, args.no_docs)
        return 0
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    kinds = [k for k in args.kinds.split(",") if k]
    designs = args.designs.split()
    skip = set(filter(None, args.skip.split(",")))
    info = machine()
    entries: list[dict[str, Any]] = []
    failed = 0
    run_worker(["warm", "--design", " ".join(designs)])
    for n in sizes:
        print(f"N = {n:,}", flush=True)
        for d, design in enumerate(designs):
            if d > 0 and n > 10**7 and args.designs == parser.get_default("designs"):
                continue  # the 10^8-class run: (4, 1) only unless designs are named
            for kind in kinds if (d == 0 or args.all_kinds) else kinds[:1]:
                common = ["--n", str(n), "--kind", kind, "--design", design]
                common += ["--batch", str(args.batch)]
                snapshot = d == 0 and n <= args.snapshot_max and "restart" not in skip
                with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
                    path = str(Path(tmp) / "data") if snapshot else ""
                    entry = run_worker(["permindex", *common, "--path", path])
                    if entry is None:
                        failed += 1
                        continue
                    entries.append(entry)
                    if snapshot:
                        restart = run_worker(["restart", *common, "--path", path])
                        if restart is None:
                            failed += 1
                        else:
                            entries.append(restart)
        for peer in ("faiss", "hammingbird"):
            if peer not in skip:
                entry = run_worker([peer, "--n", str(n), "--batch", str(args.batch)])
                if entry is None:
                    failed += 1
                else:
                    entries.append(entry)
    for entry in entries:
        entry["machine"] = info
    args.results.mkdir(parents=True, exist_ok=True)
    path = args.results / "memory.json"
    kept: list[dict[str, Any]] = []
    if path.exists() and not args.fresh:
        new = {identity(e) for e in entries}
        kept = [e for e in json.loads(path.read_text(encoding="utf-8")) if identity(e) not in new]
    everything = sorted(kept + entries, key=order_of)
    path.write_text(json.dumps(everything, indent=1) + "\n", encoding="utf-8")
    publish(everything, args.results, args.no_docs)
    return 1 if failed else 0


def publish(everything: list[dict[str, Any]], results: Path, no_docs: bool) -> None:
    """memory.md in ``results``, and the sections of docs/performance.md and docs/scale.md
    unless ``no_docs``."""
    markdown = render(everything)
    (results / "memory.md").write_text(markdown, encoding="utf-8")
    print(markdown)
    if not no_docs:
        replace_section(ROOT / "docs" / "performance.md", DOCS_START, DOCS_END, markdown)
        scale = render_scale(everything)
        replace_section(ROOT / "docs" / "scale.md", SCALE_START, SCALE_END, scale)


def replace_section(page: Path, start: str, end: str, markdown: str) -> None:
    text = page.read_text(encoding="utf-8")
    if start not in text or end not in text:
        print(f"{page}: no {start} ... {end} section; left alone")
        return
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    page.write_text(f"{head}{start}\n{markdown}\n{end}{tail}", encoding="utf-8")
    print(f"{page.relative_to(ROOT)} updated")


# -- rendering -------------------------------------------------------------------------------------


def _power(n: int) -> str:
    exponent = len(str(n)) - 1
    return f"10^{exponent}" if n == 10**exponent else f"{n:,}"


def _f(value: float | None, digits: int = 1) -> str:
    return (
        "—"
        if value is None or (isinstance(value, float) and math.isnan(value))
        else f"{value:,.{digits}f}"
    )


def _design(entry: dict[str, Any]) -> str:
    return f"({entry['design'][0]}, {entry['design'][1]})"


def per_fp(entry: dict[str, Any], field: str) -> float | None:
    """``field`` minus the process's baseline, per fingerprint."""
    if field not in entry:
        return None
    return float(entry[field] - entry["baseline_rss_bytes"]) / float(entry["n"])


def find(
    entries: list[dict[str, Any]], system: str, kind: str, design: tuple[int, int], n: int
) -> dict[str, Any] | None:
    for entry in entries:
        if identity(entry) == (system, kind, design, n):
            return entry
    return None


def url_share(entries: list[dict[str, Any]], n: int) -> tuple[float, float, float] | None:
    """(RSS share / raw bytes, accounted share / raw bytes, raw bytes per URL) at n, (4, 1)."""
    url = find(entries, "permindex", "url", (4, 1), n)
    ints = find(entries, "permindex", "int", (4, 1), n)
    if url is None or ints is None:
        return None
    raw = url["raw_key_bytes"]
    rss = (url["rss_load_bytes"] - url["baseline_rss_bytes"]) - (
        ints["rss_load_bytes"] - ints["baseline_rss_bytes"]
    )
    accounted = url["accounted_bytes"] - ints["accounted_bytes"]
    return rss / raw, accounted / raw, raw / n


def render(entries: list[dict[str, Any]]) -> str:
    ours = [e for e in entries if e["system"] == "permindex"]
    peers = [e for e in entries if e["system"] in ("faiss", "hammingbird")]
    restarts = {identity(e)[1:]: e for e in entries if e["system"] == "restart"}
    lines: list[str] = []
    machines = sorted({(e["machine"]["date"], e["machine"]["commit"]) for e in entries})
    m = entries[0]["machine"] if entries else {}
    loads = {
        (e["machine"]["date"], e["machine"]["commit"]): e["machine"]["load_average_at_start"]
        for e in entries
    }
    runs = "; ".join(
        f"{date}, commit {c}, load average at the start {loads[(date, c)]}" for date, c in machines
    )
    lines.append(
        f"Measured on {m.get('cpu', '?')} ({m.get('cores', '?')} cores, {m.get('memory_gib', '?')} "
        f"GiB), Python {m.get('python', '?')}, numpy {m.get('numpy', '?')} ({runs}) by "
        "`.venv/bin/python benchmarks/bench_memory.py` (10^8: `--sizes 1e8`): one fresh process "
        "per system, design, kind of key and N; random 64-bit fingerprints; keys added in random "
        "order in `add_many` batches of 100,000; **B/fp**: resident memory (VmRSS) minus the "
        "same process's baseline before loading (interpreter, imports, compiled kernels; in "
        "MiB beside), per fingerprint. Peak: VmHWM minus the baseline. After the workload: "
        f"{WORKLOAD:,} gets, {WORKLOAD:,} re-adds and {WORKLOAD:,} removes, one per call. "
        "Trimmed: after the workload and glibc's `malloc_trim(0)` (the memory the allocator "
        "kept after it was freed is the difference; a diagnostic, no server calls it). "
        "Accounted: `Index.memory_breakdown()` in all. Memory is what the figures are for; "
        "the seconds beside it move with the load of this shared machine."
    )
    lines.append("")
    lines.append(
        "| system | keys | N | B/fp after load | after the workload | trimmed | peak | accounted "
        "| whole process B/fp | baseline MiB | key bytes (raw) | load s | checked (wrong) |"
    )
    lines.append("| --- | --- | ---: |" + " ---: |" * 10)
    for e in ours:
        lines.append(
            f"| permindex {_design(e)} | {KIND_NAMES[e['kind']]} | {_power(e['n'])} "
            f"| **{_f(per_fp(e, 'rss_load_bytes'))}** "
            f"| {_f(per_fp(e, 'rss_after_workload_bytes'))} "
            f"| {_f(per_fp(e, 'rss_trimmed_bytes'))} "
            f"| {_f(per_fp(e, 'hwm_bytes'))} | {_f(e['accounted_bytes'] / e['n'])} "
            f"| {_f(e['rss_load_bytes'] / e['n'])} | {_f(e['baseline_rss_bytes'] / 2**20, 0)} "
            f"| {_f(e['raw_key_bytes'] / e['n'])} | {_f(e['load_s'], 2)} "
            f"| {e['lookups_checked'] + 3 * WORKLOAD} "
            f"({e['lookups_wrong'] + e['wrong_gets']}) |"
        )
    for e in peers:
        name = (
            "faiss IndexBinaryMultiHash(64, 4, 16)"
            if e["system"] == "faiss"
            else e.get("label", e["system"])
        )
        if "skipped" in e:
            cited = (
                f" (the issue's figure: {ISSUE_HAMMINGBIRD_BYTES:.0f}, not measured here)"
                if e["system"] == "hammingbird"
                else ""
            )
            lines.append(
                f"| {name} | none (ids) | {_power(e['n'])} | not measured: not installed{cited} "
                "|" + " |" * 9
            )
            continue
        lines.append(
            f"| {name} | none (ids) | {_power(e['n'])} | **{_f(per_fp(e, 'rss_load_bytes'))}** "
            f"| — | — | {_f(per_fp(e, 'hwm_load_bytes'))} | — | {_f(e['rss_load_bytes'] / e['n'])} "
            f"| {_f(e['baseline_rss_bytes'] / 2**20, 0)} | — | {_f(e['load_s'], 2)} "
            + (
                f"| {e['lookups_checked']} ({e['lookups_wrong']}) |"
                if "lookups_checked" in e
                else "| — |"
            )
        )
    notes = {e["system"]: e["skipped"] for e in peers if "skipped" in e}
    for system, note in notes.items():
        lines.append("")
        lines.append(f"{system}: {note}.")
    harnessed = [e for e in peers if "label" in e]
    if harnessed:
        lines.append("")
        lines.append(
            f"{HARNESS_LABEL}: its streaming `Index(d_bytes=8, k=3)` (4 hash maps, one per 16-bit "
            "chunk, of row ids; the rows beside) in the harness `benchmarks/peers/hammingbird`, "
            "a Rust process of its own fed the same fingerprints in the same order and batches "
            f"(`add_batch` of {harnessed[0]['batch']:,} rows); built by its `build.sh` from the "
            "PyPI sdist against Debian bookworm's crates (hashbrown 0.12 and rayon 1.6 instead "
            "of 0.15 and 1.10, rustc-hash 1.1 under a 2.0 shim; see benchmarks/README.md). Its "
            "baseline is the harness's own (no interpreter). Checked: lookups compared with "
            f"brute force. The issue's figure was {ISSUE_HAMMINGBIRD_BYTES:.0f} B/fp."
        )
    # the breakdown
    part_names: list[str] = []
    for e in ours:
        for name in e["breakdown"]:
            if name not in part_names:
                part_names.append(name)
    lines.append("")
    lines.append(
        "`Index.memory_breakdown()` after load, by part, bytes per fingerprint (by capacity: "
        "an array's room not yet used counts):"
    )
    lines.append("")
    lines.append("| system | keys | N | " + " | ".join(part_names) + " | total |")
    lines.append("| --- | --- | ---: | " + " | ".join("---:" for _ in part_names) + " | ---: |")
    for e in ours:
        cells = [_f(e["breakdown"].get(name, 0) / e["n"]) for name in part_names]
        lines.append(
            f"| permindex {_design(e)} | {KIND_NAMES[e['kind']]} | {_power(e['n'])} | "
            + " | ".join(cells)
            + f" | {_f(e['accounted_bytes'] / e['n'])} |"
        )
    # snapshots and restarts
    with_snapshot = [e for e in ours if "snapshot_bytes" in e]
    if with_snapshot:
        lines.append("")
        lines.append(
            "Snapshot (written as `Store.snapshot` writes it) and restart (`Store.open` in a fresh "
            "process: read, check, build the index), per fingerprint:"
        )
        lines.append("")
        lines.append(
            "| system | keys | N | snapshot B/fp | write s | restart s | restart µs/fp "
            "| B/fp after restart | peak during restart |"
        )
        lines.append("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        for e in with_snapshot:
            r = restarts.get(identity(e)[1:])
            lines.append(
                f"| permindex {_design(e)} | {KIND_NAMES[e['kind']]} | {_power(e['n'])} "
                f"| {_f(e['snapshot_bytes'] / e['n'])} | {_f(e['snapshot_s'], 2)} "
                + (
                    f"| {_f(r['restart_s'], 2)} | {_f(r['restart_s'] / e['n'] * 1e6, 2)} "
                    f"| {_f(per_fp(r, 'rss_restart_bytes'))} | {_f(per_fp(r, 'hwm_bytes'))} |"
                    if r
                    else "| — | — | — | — |"
                )
            )
    # the issue's figures
    lines.append("")
    lines.append("The figures of issue 43 (B/fp after load, keys in random order):")
    lines.append("")
    lines.append("| figure | N | measured | goal |")
    lines.append("| --- | ---: | ---: | --- |")
    for n in sorted({e["n"] for e in ours}):
        for kind, goal in (("k", 52.0), ("int", 44.0)):
            found = find(entries, "permindex", kind, (4, 1), n)
            if found is not None:
                value = per_fp(found, "rss_load_bytes") or 0.0
                verdict = ("met" if value <= goal else "not met") if n == 10**7 else "—"
                lines.append(
                    f"| permindex (4, 1), {KIND_NAMES[kind]} keys | {_power(n)} | {value:.1f} B/fp "
                    f"| ≤ {goal:.0f} at 10^7 ({verdict}) |"
                )
        share = url_share(entries, n)
        if share is not None:
            lines.append(
                "| URL keys' share (URLs minus integer keys) / raw UTF-8 bytes "
                f"({share[2]:.1f} B a URL); "
                f"accounted beside | {_power(n)} | {share[0]:.2f} ({share[1]:.2f}) "
                f"| ≤ 0.6 ({'met' if share[0] <= 0.6 else 'not met'}) |"
            )
    return "\n".join(lines) + "\n"


def render_scale(entries: list[dict[str, Any]]) -> str:
    """The table of docs/scale.md: for each design and kind of key, at the largest N measured,
    the bytes per fingerprint by part and what 10^10 fingerprints take at those rates."""
    largest: dict[tuple[Any, ...], dict[str, Any]] = {}
    for e in entries:
        if e["system"] == "permindex":
            key = (tuple(e["design"]), e["kind"])
            if key not in largest or e["n"] > largest[key]["n"]:
                largest[key] = e
    if not largest:
        return "(no permindex entry measured yet)\n"
    runs = sorted({(e["machine"]["date"], e["machine"]["commit"]) for e in largest.values()})
    lines = [
        "Measured by `benchmarks/bench_memory.py` ("
        + "; ".join(f"{date}, commit {c}" for date, c in runs)
        + "), each row at the largest N measured for it. **T** tables (the part `tables`; per "
        "table beside), **R** rows (`fingerprints` + `liveness` + `times`), **K** keys (every "
        "other part, per key), **A** = T + R + K accounted; **P** resident memory the load "
        "added (VmRSS minus the baseline), **P_peak** its peak (VmHWM). At 10^10: servers of "
        "10^8 (100 of them) at P each, and the machines of 64 GiB that 10^10 needs at P_peak.",
        "",
        "| design | keys | N | T (per table) | R | K | A | P | P_peak "
        "| one server of 10^8 at P (P_peak) | 10^10 at P | 64 GiB machines for 10^10 |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for (design, _kind), e in sorted(
        largest.items(), key=lambda item: (item[0][0], KINDS.index(item[0][1]))
    ):
        n = e["n"]
        parts = e["breakdown"]
        tables = parts.get("tables", 0) / n
        rows = sum(parts.get(name, 0) for name in ("fingerprints", "liveness", "times")) / n
        keys = e["accounted_bytes"] / n - tables - rows
        count = math.comb(design[0], design[1])
        p = per_fp(e, "rss_load_bytes") or 0.0
        peak = per_fp(e, "hwm_load_bytes") or p
        machines = math.ceil(1e10 * peak / (64 * 2**30))
        lines.append(
            f"| {_design(e)} | {KIND_NAMES[e['kind']]} | {_power(n)} "
            f"| {tables:.1f} ({tables / count:.1f}) | {rows:.1f} | {keys:.1f} "
            f"| {e['accounted_bytes'] / n:.1f} | {p:.1f} | {peak:.1f} "
            f"| {p * 1e8 / 2**30:.1f} GiB ({peak * 1e8 / 2**30:.1f}) "
            f"| {p * 1e10 / 1e12:.2f} TB | {machines} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    raise SystemExit(main())
