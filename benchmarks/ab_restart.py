#!/usr/bin/env python3
"""Restart A/B of two permindex trees: ``Store.open`` of a data directory of N URL-like keys,
each tree's own snapshot format, timed alternately in fresh processes (what ``permindex serve``
does before it listens, without the interpreter's start).

    python benchmarks/ab_restart.py OLD_TREE NEW_TREE [--n 1e7] [--rounds 6]

Each tree needs its own virtual environment (``TREE/.venv``, as ``benchmarks/ab.py``). Each
tree writes its data directory once (N random fingerprints, seed 7, keys
``https://example.org/p/{i:013d}.html``, design (4, 1)) under ``--workdir``; then each round
opens old then new (new then old in every second round), each in a fresh process, and checks
that the store holds N keys. Prints the times and the median of the rounds' new / old.
``benchmarks/ab.py`` times a restart too, but in a worker whose heap already held and freed an
index of N; this one starts from a fresh process, as a server does. Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path

WORKER = r"""
import json, sys, time
from pathlib import Path
import numpy as np
from permindex import Index
from permindex.storage.store import Store
try:
    from permindex.storage.datadir import DataDir
except ImportError:  # an older tree
    from permindex.storage.snapshot import DataDir
mode, root, n = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
if mode == "write":
    fps = np.random.default_rng(7).integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    urls = [f"https://example.org/p/{i:013d}.html" for i in range(n)]
    keys, exported = Index.from_arrays(urls, fps).export()
    with DataDir(root) as data_dir:
        data_dir.save(keys, exported, k=3, design=(4, 1))
    print("{}")
else:
    began = time.perf_counter()
    store = Store.open(root, k=3, design=(4, 1))
    seconds = time.perf_counter() - began
    if len(store.index) != n:
        raise SystemExit(f"restart holds {len(store.index)} keys, not {n}")
    store.close()
    print(json.dumps(seconds))
"""


def run(tree: Path, *args: str) -> str:
    """The worker under ``tree``'s interpreter, from a neutral folder: its stdout."""
    command = [str(tree / ".venv" / "bin" / "python"), "-c", WORKER, *args]
    return subprocess.run(command, check=True, capture_output=True, text=True, cwd="/").stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("old", type=Path)
    parser.add_argument("new", type=Path)
    parser.add_argument("--n", type=float, default=1e7)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/permindex-ab-restart"))
    args = parser.parse_args()
    n = int(args.n)
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    for name, tree in trees.items():
        root = args.workdir / f"{name}-{n}" / "data"
        if not root.exists():
            root.parent.mkdir(parents=True, exist_ok=True)
            run(tree, "write", str(root), str(n))
    times: dict[str, list[float]] = {"old": [], "new": []}
    for r in range(args.rounds):
        for name in ("old", "new") if r % 2 == 0 else ("new", "old"):
            root = args.workdir / f"{name}-{n}" / "data"
            times[name].append(float(run(trees[name], "open", str(root), str(n))))
            print(f"round {r + 1} {name}: {times[name][-1]:.2f} s", flush=True)
    ratios = [new / old for old, new in zip(times["old"], times["new"], strict=True)]
    print(
        json.dumps(
            {
                "n": n,
                "old_median_s": statistics.median(times["old"]),
                "new_median_s": statistics.median(times["new"]),
                "median_ratio_new_old": statistics.median(ratios),
                "ratios": ratios,
            }
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
