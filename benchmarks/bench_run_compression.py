#!/usr/bin/env python3
"""What Manku's compression of a sorted run would buy here (issue 43, point 2): the exact bytes
of the tables' 16-bit filters delta-coded per directory bucket, and what a lookup would pay to
decode them, measured on a real index. A measurement, not a layout: the index is not changed.

    .venv/bin/python benchmarks/bench_run_compression.py --n 1e6 --designs 4,1 5,2 6,3
    .venv/bin/python benchmarks/bench_run_compression.py --n 1e7 --designs 4,1

Each (N, design) runs in a fresh process with the interpreter running this script: N random
fingerprints (seed 7, as ``benchmarks/bench_table_bytes.py``) with ``k00000001``-style keys,
one ``Index.from_arrays`` (one run per table), k = 3. The runs' arrays are read from the table
objects (``Index._tables``, each ``Table.runs``: ``filters``, ``offsets``, ``low``, ``high``)
-- ``Index.table_runs()`` gives only their sizes; ``Index.memory_breakdown()`` gives the
tables' bytes before, and the total per fingerprint that the saving is a share of.

Sizes, per run of m entries and 2^r directory buckets (the filters of a bucket are sorted
first: the run's counting sort keeps a bucket's entries in input order, so today they are not):

* **Elias-Fano, one l per run** (the l of 0..16 that gives the fewest bits): each filter's low
  l bits packed at bit ``l * e`` of entry e, its high 16 - l bits in unary, bucket b's at bit
  ``offsets[b] + b * 2^(16 - l)`` of a second bit array. Both positions come from the
  directory the run has anyway, so no block index is needed. Built here (numba), decoded back
  and compared with the sorted filters; its bytes are the two uint64 arrays' exact sizes.
* **Golomb-Rice, one parameter b per run** (the best of 0..16): each gap to the previous filter
  of the bucket (the first: the filter itself) as b low bits and the rest in unary; the exact
  bit count, not built, plus the block index it needs to start a bucket: the unary stream's
  bit offset as a uint32 per 64 buckets and a uint16 per bucket (a uint32 per bucket where a
  group's span does not fit 16 bits).
* **The floor** of any code of the bucket's sorted filters: log2 C(2^16 + n_b - 1, n_b) bits
  for a bucket of n_b (a multiset of n_b 16-bit values), summed.

The directory (a uint32 per bucket) and the row references (3 bytes below 2^24 rows) stay: the
rows of a bucket are in no order a code could use (random fingerprints get their rows in input
order, so within a bucket they are a random subset of [0, N) in random order), and sorting a
bucket by filter or by row takes the same log2(n_b!) bits of order once, not twice; a row then
takes at least log2(N) bits (19.9 at 10^6, 23.3 at 10^7; 24 stored).

Lookups, 10,000 queries (``benchmarks/run.py``'s ``fresh_queries``: half of them 0 to 3 bits
from a stored fingerprint), k = 3, every run of every table a query within 3 searches, the same
bucket per query and run for both prototypes (numba, compiled before timing):

* **plain**: the scan of the 16-bit filter array as the batch kernel does it -- the directory
  entry and the bucket's filters prefetched 2D and D queries ahead, a filter passes when it is
  within k bits of the query's and equal on the leading prefix bits it holds;
* **Elias-Fano**: the same pipeline, prefetching the bucket's low and high bit arrays instead;
  each filter decoded (the next set bit of the high bits, its low l bits) then compared the
  same way; where the filter holds prefix bits, the sorted order lets the scan stop once the
  decoded prefix bits pass the query's (the unsorted plain scan cannot).

Both count the filters that pass (and must agree). Beside them, the index's own batch lookup
(``Index.query_many(queries, columns=True)``, one thread) in the same rounds: 5 alternating
rounds, the best of each. The estimated batch ratio is ``(batch - plain + Elias-Fano) /
batch``: the batch with its scan replaced by the decoding one. Prints a Markdown table;
writes ``benchmarks/results/run_compression.json`` (entries of the same N and design replaced).
Not a test: nothing here runs under pytest.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
OUT = RESULTS / "run_compression.json"
K = 3
ROUNDS = 5
#: Queries ahead whose directory entry (2D) and bucket (D) the prototypes prefetch, as the
#: batch kernel (``lookup_kernels.DISTANCE``).
DISTANCE = 4
#: Cache lines of a bucket prefetched ahead of its scan, as the batch kernel.
LINES = 5
FILTER_BITS = 16

_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]


# -- sizes --------------------------------------------------------------------------------------


def sorted_filters(filters: NDArray[np.uint16], offsets: NDArray[np.uint32]) -> NDArray[np.uint16]:
    """The run's filters sorted within each directory bucket ((m,) uint16)."""
    counts = np.diff(offsets).astype(np.int64)
    bucket = np.repeat(np.arange(counts.size, dtype=np.uint64), counts)
    keys = (bucket << np.uint64(FILTER_BITS)) | filters.astype(np.uint64)
    keys.sort()
    return (keys & np.uint64(0xFFFF)).astype(np.uint16)


def ef_bits(m: int, buckets: int, low_bits: int) -> int:
    """Bits of the Elias-Fano code of a run with one l (``low_bits``) for every bucket."""
    return m * low_bits + m + buckets * (1 << (FILTER_BITS - low_bits))


def best_ef(m: int, buckets: int) -> int:
    """The l of 0..16 that gives the fewest bits."""
    return min(range(FILTER_BITS + 1), key=lambda lb: ef_bits(m, buckets, lb))


def gaps(values: NDArray[np.uint16], offsets: NDArray[np.uint32]) -> _I64:
    """Each sorted filter minus the previous one of its bucket (the first: itself)."""
    out = values.astype(np.int64)
    out[1:] -= values[:-1].astype(np.int64)
    starts = offsets[:-1].astype(np.int64)
    starts = starts[starts < values.size]
    out[starts] = values[starts].astype(np.int64)
    return out


def rice(values: NDArray[np.uint16], offsets: NDArray[np.uint32]) -> dict[str, int]:
    """The best Golomb-Rice parameter of the run and its exact bits, with the block index."""
    gap = gaps(values, offsets)
    m = int(values.size)
    best_b, best = 0, -1
    for b in range(FILTER_BITS + 1):
        bits = m * (b + 1) + int((gap >> b).sum())
        if best < 0 or bits < best:
            best_b, best = b, bits
    unary = gap >> best_b
    unary += 1
    buckets = offsets.size - 1
    running = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(unary, out=running[1:])
    per_bucket = running[offsets[1:]] - running[offsets[:-1]]
    groups = -(-buckets // 64)
    padded = np.zeros(groups * 64, dtype=np.int64)
    padded[:buckets] = per_bucket
    span = padded.reshape(groups, 64).sum(axis=1)
    index_bits = groups * 32 + buckets * (16 if int(span.max()) < 1 << 16 else 32)
    return {"b": best_b, "code_bits": best, "index_bits": index_bits}


def floor_bits(offsets: NDArray[np.uint32]) -> float:
    """log2 C(2^16 + n - 1, n) summed over the buckets of n filters each."""
    counts = np.diff(offsets.astype(np.int64))
    values, times = np.unique(counts, return_counts=True)
    universe = 1 << FILTER_BITS
    total = 0.0
    for n, t in zip(values.tolist(), times.tolist(), strict=True):
        ln = math.lgamma(universe + n) - math.lgamma(n + 1) - math.lgamma(universe)
        total += t * ln / math.log(2)
    return total


# -- kernels ------------------------------------------------------------------------------------


def kernels() -> Any:
    """The prototypes, compiled on first use (numba through permindex's tools)."""
    from permindex.jit_numba import numba, popcount64, prefetch

    # permindex's options but numba's cache: these closures are compiled in each process (a
    # few seconds), so that no cached copy is tied to how this file was imported
    def njit(*, inline: bool = False) -> Any:
        return numba.njit(nogil=True, boundscheck=False, inline="always" if inline else "never")

    @njit(inline=True)
    def bits_at(code, p, lb):  # type: ignore[no-untyped-def]
        """The ``lb`` bits of ``code`` from bit ``p`` (both words read, no branch: a code has
        a word of room at its end)."""
        w = p >> 6
        s = np.uint64(p & 63)
        v = (code[w] >> s) | ((code[w + 1] << np.uint64(1)) << (np.uint64(63) - s))
        return v & np.uint64((1 << lb) - 1)

    @njit()
    def encode(values, offsets, lb, code):  # type: ignore[no-untyped-def]
        """Write the Elias-Fano code of the run's bucket-sorted ``values`` into ``code``
        (zeroed): bucket b from bit ``offsets[b] * (lb + 1) + b * 2^(16 - lb)``, its n high
        parts in unary (n ones, 2^(16 - lb) zeros), then its n low parts of ``lb`` bits."""
        span = 1 << (16 - lb)
        mask = np.uint64((1 << lb) - 1)
        for b in range(offsets.size - 1):
            first = np.int64(offsets[b])
            n = np.int64(offsets[b + 1]) - first
            start = first * (lb + 1) + b * span
            lows = start + n + span
            for i in range(n):
                v = np.uint64(values[first + i])
                pos = start + np.int64(v >> np.uint64(lb)) + i
                code[pos >> 6] |= np.uint64(1) << np.uint64(pos & 63)
                if lb:
                    p = lows + i * lb
                    s = p & 63
                    code[p >> 6] |= (v & mask) << np.uint64(s)
                    if s + lb > 64:
                        code[(p >> 6) + 1] |= (v & mask) >> np.uint64(64 - s)

    @njit(inline=True)
    def next_one(code, w, word):  # type: ignore[no-untyped-def]
        """The word index and word holding the next set bit from ``word`` (at ``w``) on, and
        that bit's position in the word."""
        while word == 0:
            w += 1
            word = code[w]
        return w, word, np.int64(popcount64((word & (~word + np.uint64(1))) - np.uint64(1)))

    @njit()
    def decode(offsets, lb, code, out):  # type: ignore[no-untyped-def]
        """Every filter of the run back from its code, in order."""
        span = 1 << (16 - lb)
        ones = np.uint64(0xFFFFFFFFFFFFFFFF)
        for b in range(offsets.size - 1):
            first = np.int64(offsets[b])
            n = np.int64(offsets[b + 1]) - first
            start = first * (lb + 1) + b * span
            lows = start + n + span
            w = start >> 6
            word = code[w] & (ones << np.uint64(start & 63))
            for i in range(n):
                w, word, t = next_one(code, w, word)
                word &= word - np.uint64(1)
                h = np.uint64((w << 6) + t - start - i)
                out[first + i] = (h << np.uint64(lb)) | bits_at(code, lows + i * lb, lb)

    @njit()
    def scan_plain(buckets, windows, exact, dir_base, entry_base, directory, filters, k):  # type: ignore[no-untyped-def]
        """Filters within ``k`` of each query's in its bucket of every run, counted."""
        count = 0
        q = buckets.shape[1]
        for r in range(buckets.shape[0]):
            db = dir_base[r]
            eb = entry_base[r]
            ex = np.uint64(exact[r])
            prefixed = exact[r] < 16
            for i in range(q + 2 * DISTANCE):
                if i < q:
                    prefetch(directory, db + buckets[r, i])  # type: ignore[call-arg]
                j = i - DISTANCE
                if 0 <= j < q:
                    b = db + buckets[r, j]
                    start = eb + np.int64(directory[b])
                    end = eb + np.int64(directory[b + 1])
                    last = min(end, start + 32 * LINES)
                    for e in range(start, last, 32):
                        prefetch(filters, e)  # type: ignore[call-arg]
                    # the last line, when start is not aligned
                    prefetch(filters, last - 1)  # type: ignore[call-arg]
                j = i - 2 * DISTANCE
                if 0 <= j < q:
                    b = db + buckets[r, j]
                    f = np.uint64(windows[r, j])
                    for e in range(eb + np.int64(directory[b]), eb + np.int64(directory[b + 1])):
                        fx = np.uint64(filters[e]) ^ f
                        if np.int64(popcount64(fx)) > k:
                            continue
                        if prefixed and (fx >> ex) != 0:
                            continue
                        count += 1
        return count

    @njit()
    def scan_ef(buckets, windows, exact, dir_base, low_bits, code_base, directory, code, k):  # type: ignore[no-untyped-def]
        """:func:`scan_plain` on the Elias-Fano code: each filter decoded, then compared."""
        count = 0
        q = buckets.shape[1]
        ones = np.uint64(0xFFFFFFFFFFFFFFFF)
        for r in range(buckets.shape[0]):
            db = dir_base[r]
            lb = low_bits[r]
            span = 1 << (16 - lb)
            base = code_base[r]
            ex = np.uint64(exact[r])
            prefixed = exact[r] < 16
            for i in range(q + 2 * DISTANCE):
                if i < q:
                    prefetch(directory, db + buckets[r, i])  # type: ignore[call-arg]
                j = i - DISTANCE
                if 0 <= j < q:
                    bucket = buckets[r, j]
                    first = np.int64(directory[db + bucket])
                    n = np.int64(directory[db + bucket + 1]) - first
                    start = base + first * (lb + 1) + bucket * span
                    end = start + n * (lb + 1) + span
                    last = min((end >> 6) + 2, (start >> 6) + 8 * LINES)
                    for w in range(start >> 6, last, 8):
                        prefetch(code, w)  # type: ignore[call-arg]
                    # the last line, when start is not aligned
                    prefetch(code, last - 1)  # type: ignore[call-arg]
                j = i - 2 * DISTANCE
                if 0 <= j < q:
                    bucket = buckets[r, j]
                    f = np.uint64(windows[r, j])
                    want = f >> ex
                    first = np.int64(directory[db + bucket])
                    n = np.int64(directory[db + bucket + 1]) - first
                    start = base + first * (lb + 1) + bucket * span
                    lows = start + n + span
                    w = start >> 6
                    word = code[w] & (ones << np.uint64(start & 63))
                    for i2 in range(n):
                        w, word, t = next_one(code, w, word)
                        word &= word - np.uint64(1)
                        h = np.uint64((w << 6) + t - start - i2)
                        v = (h << np.uint64(lb)) | bits_at(code, lows + i2 * lb, lb)
                        if prefixed:
                            got = v >> ex
                            if got > want:
                                break
                            if got < want:
                                continue
                        if np.int64(popcount64(v ^ f)) <= k:
                            count += 1
        return count

    return encode, decode, scan_plain, scan_ef


# -- one (N, design) ----------------------------------------------------------------------------


def best_of_rounds(calls: dict[str, Any], rounds: int) -> dict[str, float]:
    """The best seconds of each call over ``rounds`` rounds, the calls' order reversed each
    round (alternating)."""
    best = {name: math.inf for name in calls}
    names = list(calls)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            began = time.perf_counter()
            calls[name]()
            best[name] = min(best[name], time.perf_counter() - began)
    return best


def worker(n: int, design: tuple[int, int]) -> dict[str, Any]:
    """One design's figures at N, in this process."""
    from run import fresh_queries

    from permindex import Index

    encode, decode, scan_plain, scan_ef = kernels()
    fps = np.random.default_rng(7).integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    keys = [f"k{i:08d}" for i in range(n)]
    began = time.perf_counter()
    index = Index.from_arrays(keys, fps, k=K, design=design)
    load_s = time.perf_counter() - began
    del keys
    parts = index.memory_breakdown()
    queries = fresh_queries(fps)
    searched = set(index.design.tables_for(K))

    before_filters = 0
    ef_bytes = 0
    rice_bytes = 0
    floor = 0.0
    entries = 0
    bucket_count = 0
    encode_s = 0.0
    lbs: list[int] = []
    rice_params: list[int] = []
    # per searched run: the lookup inputs
    buckets_rows: list[_I64] = []
    windows_rows: list[_I64] = []
    exact: list[int] = []
    dir_parts: list[NDArray[np.uint32]] = []
    filter_parts: list[NDArray[np.uint16]] = []
    code_parts: list[_U64] = []
    low_bits: list[int] = []
    for t, table in enumerate(index._tables):
        perm = table.permutation
        permuted = perm.permute_array(queries)
        for run in table.runs:
            m = len(run)
            r = run.bits
            entries += m
            bucket_count += 1 << r
            before_filters += int(run.filters.nbytes)
            began = time.perf_counter()
            values = sorted_filters(run.filters, run.offsets)
            lb = best_ef(m, (1 << r))
            code = np.zeros(((ef_bits(m, 1 << r, lb) + 63) >> 6) + 1, dtype=np.uint64)
            encode(values, run.offsets, lb, code)
            encode_s += time.perf_counter() - began
            back = np.empty(m, dtype=np.uint64)
            decode(run.offsets, lb, code, back)
            if not np.array_equal(back, values.astype(np.uint64)):
                raise AssertionError(f"table {t}: the Elias-Fano code does not decode back")
            del back
            ef_bytes += int(code.nbytes)
            lbs.append(lb)
            got = rice(values, run.offsets)
            rice_params.append(got["b"])
            rice_bytes += -(-(got["code_bits"] + got["index_bits"]) // 8)
            floor += floor_bits(run.offsets) / 8
            if t not in searched:
                continue
            buckets_rows.append((permuted >> np.uint64(64 - r)).astype(np.int64))
            windows_rows.append(
                ((permuted >> np.uint64(48 - r)) & np.uint64(0xFFFF)).astype(np.int64)
            )
            exact.append(16 - min(perm.prefix_bits - r, 16))
            dir_parts.append(run.offsets)
            filter_parts.append(run.filters)
            code_parts.append(code)
            low_bits.append(lb)

    def bases(sizes: list[int]) -> _I64:
        return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    buckets = np.ascontiguousarray(np.stack(buckets_rows))
    windows = np.ascontiguousarray(np.stack(windows_rows))
    exact_a = np.array(exact, dtype=np.int64)
    directory = np.concatenate(dir_parts)
    dir_base = bases([p.size for p in dir_parts])
    filters = np.concatenate(filter_parts)
    entry_base = bases([p.size for p in filter_parts])
    code_all = np.concatenate(code_parts)
    code_base = bases([p.size * 64 for p in code_parts])
    lb_a = np.array(low_bits, dtype=np.int64)
    del code_parts, filter_parts

    def plain() -> int:
        return int(
            scan_plain(buckets, windows, exact_a, dir_base, entry_base, directory, filters, K)
        )

    def ef() -> int:
        return int(
            scan_ef(
                buckets,
                windows,
                exact_a,
                dir_base,
                lb_a,
                code_base,
                directory,
                code_all,
                K,
            )
        )

    def batch() -> None:
        index.query_many(queries, K, columns=True)

    passed_plain, passed_ef = plain(), ef()
    if passed_plain != passed_ef:
        raise AssertionError(f"candidates differ: plain {passed_plain}, Elias-Fano {passed_ef}")
    matches = int(index.query_many(queries, K, columns=True).offsets[-1])
    if matches > passed_plain:  # each match passes the filter of the table that reports it
        raise AssertionError(f"{matches} matches but only {passed_plain} filters passed")
    best = best_of_rounds({"plain": plain, "ef": ef, "batch": batch}, ROUNDS)

    tables_before = parts.tables
    tables_ef = tables_before - before_filters + ef_bytes
    tables_rice = tables_before - before_filters + rice_bytes
    saved = tables_before - tables_ef
    return {
        "n": n,
        "design": list(design),
        "tables": len(index._tables),
        "searched_runs": int(buckets.shape[0]),
        "entries": entries,
        "entries_per_bucket": entries / bucket_count,
        "directory_bits": sorted({int(run.bits) for table in index._tables for run in table.runs}),
        "ef_low_bits": sorted(set(lbs)),
        "rice_b": sorted(set(rice_params)),
        "total_bytes_per_fp": parts.total / n,
        "tables_bytes_per_fp": tables_before / n,
        "tables_ef_bytes_per_fp": tables_ef / n,
        "tables_rice_bytes_per_fp": tables_rice / n,
        "filter_bits_per_entry": 8 * before_filters / entries,
        "ef_bits_per_entry": 8 * ef_bytes / entries,
        "rice_bits_per_entry": 8 * rice_bytes / entries,
        "floor_bits_per_entry": 8 * floor / entries,
        "saved_bytes_per_fp": saved / n,
        "saved_share_of_total": saved / parts.total,
        "floor_saved_share_of_total": (before_filters - floor) / parts.total,
        "bulk_load_s": load_s,
        "sort_and_encode_s": encode_s,
        "candidates": passed_plain,
        "matches": matches,
        "plain_s": best["plain"],
        "ef_s": best["ef"],
        "batch_s": best["batch"],
        "scan_ratio": best["ef"] / best["plain"],
        "batch_ratio": (best["batch"] - best["plain"] + best["ef"]) / best["batch"],
    }


# -- the parent ---------------------------------------------------------------------------------


def row(got: dict[str, Any]) -> str:
    """One Markdown row of a worker's figures."""
    n = got["n"]
    size = f"10^{round(math.log10(n))}" if n == 10 ** round(math.log10(n)) else f"{n:,}"
    return (
        f"| ({got['design'][0]}, {got['design'][1]}) | {size} | {got['entries_per_bucket']:.1f} "
        f"| {got['filter_bits_per_entry']:.2f} | {got['ef_bits_per_entry']:.2f} "
        f"(l = {','.join(map(str, got['ef_low_bits']))}) "
        f"| {got['rice_bits_per_entry']:.2f} | {got['floor_bits_per_entry']:.2f} "
        f"| {got['tables_bytes_per_fp']:.2f} | {got['tables_ef_bytes_per_fp']:.2f} "
        f"| {got['total_bytes_per_fp']:.1f} | {100 * got['saved_share_of_total']:.1f} % "
        f"({100 * got['floor_saved_share_of_total']:.1f} %) "
        f"| {got['plain_s'] * 1e3:.2f} | {got['ef_s'] * 1e3:.2f} | {got['scan_ratio']:.2f} "
        f"| {got['batch_s'] * 1e3:.1f} | {got['batch_ratio']:.2f} |"
    )


HEADER = (
    "| design | N | entries a bucket | filter bits an entry | Elias-Fano | Golomb-Rice "
    "| floor | tables B/fp | with Elias-Fano | total B/fp | saved of total (floor) "
    "| plain scan ms | Elias-Fano scan ms | scan ratio | batch ms | est. batch ratio |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
    "| ---: | ---: | ---: | ---: |"
)


def commit() -> str:
    """The clone's commit (short), or "unknown"."""
    done = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=HERE, capture_output=True, text=True
    )
    return done.stdout.strip() or "unknown"


def save(results: list[dict[str, Any]]) -> None:
    """Merge ``results`` into the JSON file (same N and design replaced)."""
    old: list[dict[str, Any]] = json.loads(OUT.read_text()) if OUT.exists() else []
    done = {(g["n"], tuple(g["design"])) for g in results}
    kept = [g for g in old if (g["n"], tuple(g["design"])) not in done]
    merged = sorted(kept + results, key=lambda g: (g["n"], g["design"]))
    OUT.write_text(json.dumps(merged, indent=1) + "\n")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=float, default=1e6, help="fingerprints (default 1e6)")
    parser.add_argument(
        "--designs", nargs="+", default=["4,1", "5,2", "6,3"], help="BLOCKS,LEADING each"
    )
    parser.add_argument("--no-save", action="store_true", help="print only, no JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = int(args.n)
    designs = [tuple(int(x) for x in d.split(",")) for d in args.designs]
    if args.worker:
        (design,) = designs
        print(json.dumps(worker(n, (design[0], design[1]))))
        return 0
    print(HEADER, flush=True)
    results = []
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
        got["measured"] = {
            "utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
            "commit": commit(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
        }
        results.append(got)
        print(row(got), flush=True)
    if not args.no_save:
        save(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
