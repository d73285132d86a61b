#!/usr/bin/env python3
"""A/B timing of two permindex trees: lookups, bulk load and restart, alternately in one sitting.

    python benchmarks/ab.py OLD_TREE NEW_TREE [--n 1e6] [--rounds 4]

Each tree needs its own virtual environment with permindex installed from it (``TREE/.venv``;
``python3 -m venv TREE/.venv && TREE/.venv/bin/pip install TREE``). For each of ``--rounds``
rounds the worker runs once per tree, old then new (new then old in every second round), each
in a fresh process started from that tree's interpreter, so the machine's load falls on both
alike. A worker builds the same data as
``benchmarks/run.py`` (N random fingerprints, seed 7, 1 % planted near-duplicates, 10,000
queries) and measures:

- ``bulk_load_per_s``: ``Index.from_arrays`` of N string keys and fingerprints, design (4, 1)
  (``--design`` for another; the restart keeps (4, 1));
- ``batch_qps``: ``query_many`` of the 10,000 queries (median of 7), k = 3;
- ``single_qps``: 4,000 single ``Index.query`` calls, half near a stored fingerprint (median
  of 7);
- ``pairs_s``: ``Index.pairs()`` of that index, every pair within k = 3 (median of 3);
- ``add_many_per_s``: ``add_many`` of 500,000 in batches of 10,000 into an empty index;
- ``restart_s``: ``Store.open`` of a data directory holding a snapshot of the N keys (40-byte
  keys), what the server does before it listens.

Only the public API is used (``Index``, ``Store``, the snapshot writer), under the module path
each tree has. The medians per tree and the ratios new / old are printed as a Markdown table and
written to ``benchmarks/results/ab-N.json``. Not a test: nothing here runs under pytest.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
SEED = 7
QUERIES = 10_000
REPEATS = 7
METRICS = ("bulk_load_per_s", "batch_qps", "single_qps", "pairs_s", "add_many_per_s", "restart_s")
#: Pairs of the index per figure of ``pairs_s``.
PAIRS_REPEATS = 3


def make_data(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(n,) uint64 fingerprints with 1 % planted near-duplicates, and (10,000,) uint64 queries of
    which half lie 0 to 3 bits from a stored fingerprint (as benchmarks/run.py makes them)."""
    rng = np.random.default_rng(SEED)
    fps = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    planted = n // 100

    def flip(values: np.ndarray) -> np.ndarray:
        flips = rng.integers(0, 4, values.size)
        bits = rng.integers(0, 64, (values.size, 3)).astype(np.uint64)
        out = values.copy()
        for j in range(3):
            use = flips > j
            out[use] ^= np.uint64(1) << bits[use, j]
        return out

    if planted:
        fps[:planted] = flip(fps[planted : 2 * planted])
    near = flip(fps[rng.integers(0, n, QUERIES // 2)])
    far = rng.integers(0, 2**64 - 1, QUERIES - near.size, dtype=np.uint64, endpoint=True)
    return fps, np.concatenate([near, far])


def _first(*names: str) -> Any:
    """The first of ``module:attribute`` names that imports (module paths differ by tree)."""
    for name in names:
        module, _, attribute = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attribute)
        except (ImportError, AttributeError):
            continue
    raise ImportError(f"none of {names} imports")


def _median_rate(count: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(REPEATS):
        began = time.perf_counter()
        run()
        times.append(time.perf_counter() - began)
    return count / statistics.median(times)


def _lookups(index: Any, queries: np.ndarray) -> dict[str, float]:
    """Batch and single lookup rates of ``index`` for ``queries`` ((10,000,) uint64)."""
    index.query_many(queries)  # the first batch after a load pays for the first touch
    singles = queries[np.r_[0:2000, QUERIES // 2 : QUERIES // 2 + 2000]].tolist()

    def one_by_one() -> None:
        for q in singles:
            index.query(q)

    return {
        "batch_qps": _median_rate(QUERIES, lambda: index.query_many(queries)),
        "single_qps": _median_rate(len(singles), one_by_one),
    }


def worker(
    n: int, lookups_only: bool = False, design: tuple[int, int] = (4, 1)
) -> dict[str, float]:
    """One tree's figures (see the module docstring) for ``design``; runs in the tree's own
    interpreter."""
    from permindex import Index

    store_class = _first("permindex.storage.store:Store", "permindex.store:Store")
    data_dir_class = _first(
        "permindex.storage.datadir:DataDir",
        "permindex.storage.snapshot:DataDir",
        "permindex.snapshot:DataDir",
    )
    fps, queries = make_data(n)
    keys = [f"doc-{i:08d}" for i in range(n)]
    out: dict[str, float] = {}
    began = time.perf_counter()
    index = Index.from_arrays(keys, fps, k=3, design=design)
    out["bulk_load_per_s"] = n / (time.perf_counter() - began)
    del keys
    out.update(_lookups(index, queries))
    times = []
    for _ in range(PAIRS_REPEATS):
        began = time.perf_counter()
        pairs = index.pairs()
        times.append(time.perf_counter() - began)
        del pairs  # freed outside the clock
    out["pairs_s"] = statistics.median(times)
    del index
    if lookups_only:
        return out
    rng = np.random.default_rng(11)
    total = 500_000
    values = rng.integers(0, 2**64 - 1, total, dtype=np.uint64, endpoint=True)
    names = [f"new-{i:08d}" for i in range(total)]
    fresh = Index()
    began = time.perf_counter()
    for start in range(0, total, 10_000):
        fresh.add_many(names[start : start + 10_000], values[start : start + 10_000])
    out["add_many_per_s"] = total / (time.perf_counter() - began)
    del fresh, names, values
    urls = [f"https://example.org/p/{i:013d}.html" for i in range(n)]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMP")) as tmp:
        root = Path(tmp) / "data"
        exported_keys, exported = Index.from_arrays(urls, fps).export()
        with data_dir_class(root) as data_dir:
            data_dir.save(exported_keys, exported, k=3, design=(4, 1))
        del exported_keys, exported, urls
        began = time.perf_counter()
        store = store_class.open(root, k=3, design=(4, 1))
        out["restart_s"] = time.perf_counter() - began
        try:
            if len(store.index) != n:
                raise RuntimeError(f"restart holds {len(store.index)} keys, not {n}")
        finally:
            store.close()
    return out


def run_worker(
    tree: Path, n: int, lookups_only: bool, design: tuple[int, int] = (4, 1)
) -> dict[str, float]:
    """Run :func:`worker` in ``tree``'s interpreter, from a directory outside every tree (so the
    installed package is the one imported)."""
    python = tree / ".venv" / "bin" / "python"
    with tempfile.TemporaryDirectory() as cwd:
        done = subprocess.run(
            [str(python), str(Path(__file__).resolve()), "--worker", "--n", str(n)]
            + ["--design", f"{design[0]},{design[1]}"]
            + (["--lookups-only"] if lookups_only else []),
            cwd=cwd,
            capture_output=True,
            text=True,
            check=False,
        )
    if done.returncode != 0:
        raise SystemExit(f"worker in {tree} failed:\n{done.stderr}")
    result: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("old", nargs="?", type=Path, help="the tree before the change")
    parser.add_argument("new", nargs="?", type=Path, help="the tree after the change")
    parser.add_argument("--n", type=float, default=1e6, help="fingerprints (default 1e6)")
    parser.add_argument("--rounds", type=int, default=4, help="A/B rounds (default 4)")
    parser.add_argument(
        "--lookups-only",
        action="store_true",
        help="only bulk load, lookups and pairs (shorter rounds)",
    )
    parser.add_argument(
        "--design",
        default="4,1",
        help="the index's design as BLOCKS,LEADING for the bulk load, lookups and pairs "
        "(default 4,1)",
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    n = int(args.n)
    blocks, _, leading = args.design.partition(",")
    design = (int(blocks), int(leading))
    if args.worker:
        print(json.dumps(worker(n, args.lookups_only, design)))
        return 0
    if args.old is None or args.new is None:
        parser.error("OLD_TREE and NEW_TREE are required")
    metrics = METRICS[:4] if args.lookups_only else METRICS
    rounds: dict[str, list[dict[str, float]]] = {"old": [], "new": []}
    order = (("old", args.old), ("new", args.new))
    for r in range(args.rounds):  # old, new, then new, old: a drift of the machine falls on both
        for name, tree in order if r % 2 == 0 else order[::-1]:
            result = run_worker(tree, n, args.lookups_only, design)
            rounds[name].append(result)
            shown = ", ".join(f"{m} {result[m]:,.3g}" for m in metrics)
            print(f"round {r + 1} {name}: {shown}", file=sys.stderr, flush=True)
    medians = {
        name: {m: statistics.median(x[m] for x in results) for m in metrics}
        for name, results in rounds.items()
    }
    paired = {
        m: statistics.median(b[m] / a[m] for a, b in zip(rounds["old"], rounds["new"], strict=True))
        for m in metrics
    }
    print(
        f"| N = {n:,}, design {design}, {args.rounds} rounds A/B | old (median) | new (median) "
        "| new / old | median of the rounds' new / old |"
    )
    print("| --- | ---: | ---: | ---: | ---: |")
    for m in metrics:
        old, new = medians["old"][m], medians["new"][m]
        print(f"| {m} | {old:,.4g} | {new:,.4g} | {new / old:.3f} | {paired[m]:.3f} |")
    named = "" if design == (4, 1) else f"-{design[0]}-{design[1]}"
    out = HERE / "results" / f"ab-{n:.0e}{named}.json".replace("+0", "")
    out.write_text(
        json.dumps({"n": n, "rounds": rounds, "medians": medians, "paired": paired}, indent=1)
        + "\n",
        encoding="utf-8",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
