"""The run compression benchmark's instruments (issue 43, point 2): the sizes that
benchmarks/bench_run_compression.py reports are those of codes that decode back (Elias-Fano)
or of a bit-by-bit count (Golomb-Rice, the floor), its two scan prototypes count the filters
that brute force counts, and the script runs end to end at a tiny N in its own processes."""

from __future__ import annotations

import importlib.util
import math
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_run_compression", BENCHMARKS / "bench_run_compression.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # registered, so that numba's cache of its kernels can find the module again
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def kernels(bench: ModuleType) -> Any:
    return bench.kernels()


def _run(
    rng: np.random.Generator, buckets: int, mean: float
) -> tuple[NDArray[np.uint16], NDArray[np.uint32]]:
    """Unsorted 16-bit filters in ``buckets`` directory buckets (some empty, one large), and
    the directory."""
    counts = rng.poisson(mean, buckets)
    counts[: buckets // 8] = 0
    counts[-1] = 40 * int(mean) + 3
    rng.shuffle(counts)
    offsets = np.zeros(buckets + 1, dtype=np.uint32)
    offsets[1:] = np.cumsum(counts)
    filters = rng.integers(0, 1 << 16, int(offsets[-1]), dtype=np.uint16)
    filters[:5] = [0, 0, 0xFFFF, 0xFFFF, 1]  # repeats and both ends
    return filters, offsets


CASES = [(64, 3.0), (256, 15.0), (32, 150.0), (16, 1500.0)]


@pytest.mark.parametrize(("buckets", "mean"), CASES)
def test_sorted_filters_sort_within_each_bucket(
    bench: ModuleType, buckets: int, mean: float
) -> None:
    filters, offsets = _run(np.random.default_rng(buckets), buckets, mean)
    got = bench.sorted_filters(filters, offsets)
    for b in range(buckets):
        part = slice(int(offsets[b]), int(offsets[b + 1]))
        assert got[part].tolist() == sorted(filters[part].tolist())


@pytest.mark.parametrize(("buckets", "mean"), CASES)
def test_elias_fano_decodes_back_within_its_counted_bits(
    bench: ModuleType, kernels: Any, buckets: int, mean: float
) -> None:
    encode, decode, _, _ = kernels
    filters, offsets = _run(np.random.default_rng(buckets + 1), buckets, mean)
    values = bench.sorted_filters(filters, offsets)
    m = int(values.size)
    best = bench.best_ef(m, buckets)
    assert bench.ef_bits(m, buckets, best) == min(bench.ef_bits(m, buckets, lb) for lb in range(17))
    for lb in sorted({0, 1, 7, 8, best, 15, 16}):
        bits = bench.ef_bits(m, buckets, lb)
        code = np.zeros(((bits + 63) >> 6) + 1, dtype=np.uint64)
        encode(values, offsets, lb, code)
        back = np.empty(m, dtype=np.uint64)
        decode(offsets, lb, code, back)
        assert back.tolist() == values.tolist(), f"l = {lb}"
        # nothing written past the bits counted
        ones = np.flatnonzero(np.unpackbits(code.view(np.uint8), bitorder="little"))
        assert ones.size == 0 or int(ones[-1]) < bits


def _rice_bits(values: list[list[int]], b: int) -> int:
    total = 0
    for bucket in values:
        previous = 0
        for v in bucket:
            total += b + 1 + ((v - previous) >> b)
            previous = v
    return total


@pytest.mark.parametrize(("buckets", "mean"), CASES)
def test_rice_counts_the_bits_of_the_best_parameter(
    bench: ModuleType, buckets: int, mean: float
) -> None:
    filters, offsets = _run(np.random.default_rng(buckets + 2), buckets, mean)
    values = bench.sorted_filters(filters, offsets)
    per_bucket = [values[int(offsets[b]) : int(offsets[b + 1])].tolist() for b in range(buckets)]
    bits = [_rice_bits(per_bucket, b) for b in range(17)]
    got = bench.rice(values, offsets)
    assert got["code_bits"] == min(bits)
    assert bits[got["b"]] == min(bits)
    unary = [  # each gap's quotient in unary: (gap >> b) zeros and a one
        sum(((v - p) >> got["b"]) + 1 for v, p in zip(bk, [0, *bk][:-1], strict=True))
        for bk in per_bucket
    ]
    spans = [sum(unary[g : g + 64]) for g in range(0, buckets, 64)]
    width = 16 if max(spans) < 1 << 16 else 32
    assert got["index_bits"] == len(spans) * 32 + buckets * width


def test_floor_is_log2_of_the_multisets(bench: ModuleType) -> None:
    counts = [0, 1, 2, 15, 15, 150, 1500]
    offsets = np.zeros(len(counts) + 1, dtype=np.uint32)
    offsets[1:] = np.cumsum(counts)
    want = sum(math.log2(math.comb((1 << 16) + n - 1, n)) for n in counts)
    assert bench.floor_bits(offsets) == pytest.approx(want, rel=1e-9)


def test_scans_count_what_brute_force_counts(bench: ModuleType, kernels: Any) -> None:
    encode, _, scan_plain, scan_ef = kernels
    rng = np.random.default_rng(43)
    k = 3
    queries = 300
    # exact: the filter's low bits that are not prefix bits (16: none are; 0: all 16 are)
    exacts = [16, 16, 10, 4, 0]
    runs = []
    for i, exact in enumerate(exacts):
        buckets = 64
        filters, offsets = _run(rng, buckets, [3.0, 40.0, 15.0, 150.0, 8.0][i])
        values = bench.sorted_filters(filters, offsets)
        # queries: half at 0..3 bits from a stored filter of their bucket
        qb = rng.integers(0, buckets, queries)
        qw = rng.integers(0, 1 << 16, queries)
        for j in range(0, queries, 2):
            lo, hi = int(offsets[qb[j]]), int(offsets[qb[j] + 1])
            if hi > lo:
                near = int(values[rng.integers(lo, hi)])
                for bit in rng.integers(0, 16, rng.integers(0, 4)):
                    near ^= 1 << int(bit)
                qw[j] = near
        runs.append((values, offsets, qb.astype(np.int64), qw.astype(np.int64), exact))
    want = 0
    for values, offsets, qb, qw, exact in runs:
        for b, w in zip(qb.tolist(), qw.tolist(), strict=True):
            for v in values[int(offsets[b]) : int(offsets[b + 1])].tolist():
                x = v ^ w
                want += int(x.bit_count() <= k and (x >> exact) == 0)
    assert want > queries  # the near queries pass

    def bases(sizes: list[int]) -> NDArray[np.int64]:
        return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)

    codes = []
    low_bits = []
    for values, offsets, *_ in runs:
        lb = bench.best_ef(int(values.size), offsets.size - 1)
        code = np.zeros(
            ((bench.ef_bits(int(values.size), offsets.size - 1, lb) + 63) >> 6) + 1, dtype=np.uint64
        )
        encode(values, offsets, lb, code)
        codes.append(code)
        low_bits.append(lb)
    buckets_a = np.stack([r[2] for r in runs])
    windows = np.stack([r[3] for r in runs])
    exact_a = np.array(exacts, dtype=np.int64)
    directory = np.concatenate([r[1] for r in runs])
    dir_base = bases([r[1].size for r in runs])
    # the plain scan does not need sorted filters: give it each bucket reversed
    plain_filters = np.concatenate(
        [
            np.concatenate(
                [values[int(o[b]) : int(o[b + 1])][::-1] for b in range(o.size - 1)]
                + [np.zeros(0, np.uint16)]
            )
            for values, o, *_ in runs
        ]
    )
    entry_base = bases([r[0].size for r in runs])
    got_plain = scan_plain(
        buckets_a, windows, exact_a, dir_base, entry_base, directory, plain_filters, k
    )
    got_ef = scan_ef(
        buckets_a,
        windows,
        exact_a,
        dir_base,
        np.array(low_bits, dtype=np.int64),
        bases([c.size * 64 for c in codes]),
        directory,
        np.concatenate(codes),
        k,
    )
    assert (got_plain, got_ef) == (want, want)


@pytest.mark.slow
def test_bench_run_compression_end_to_end() -> None:
    """The script at N = 20,000, (4, 1) and (5, 2), each in its own process: its checks (the
    codes decode back, the prototypes agree, the index's matches are within the candidates)
    pass and it prints one row per design with the sizes it computed."""
    command = [
        sys.executable,
        str(BENCHMARKS / "bench_run_compression.py"),
        "--n",
        "2e4",
        "--designs",
        "4,1",
        "5,2",
        "--no-save",
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=280, check=False)
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| (")]
    assert [row.split("|")[1].strip() for row in rows] == ["(4, 1)", "(5, 2)"]
    for row in rows:
        cells = [c.strip() for c in row.split("|")[1:-1]]
        assert cells[3] == "16.00"  # the filters as stored
        ef, rice, floor = float(cells[4].split()[0]), float(cells[5]), float(cells[6])
        assert floor < ef < 16 and floor < rice
