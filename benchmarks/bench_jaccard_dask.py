"""The Jaccard mode on Dask against the local engine (issue 42, point 2): ``permindex dedup
FILE --method minhash --engine dask --workers 2`` and ``permindex dedup FILE --method minhash``
on the same synthetic file, their wall times, and whether their pairs, clusters, exact groups
and keep/drop files are byte for byte the same.

Run from the repository root::

    .venv/bin/python benchmarks/bench_jaccard_dask.py [--pages 100000] [--json PATH]

The corpus (JSONL.gz under ``--workdir``, written once per size and seed): template families of
edited copies (1 to 6 words replaced, inserted or deleted; family sizes a power law, the
largest 1,000 copies: 40 % of the pages), near-copy pairs (one page and a copy with 1 to 8
edits: 10 %), and unrelated pages (50 %), each of 100 to 400 words drawn from a Zipf-like
30,000-word vocabulary (:func:`bench_jaccard.templated`'s draw).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_jaccard import edited_words  # noqa: E402

DEFAULT_WORKDIR = Path("/tmp/permindex-bench-jaccard-dask")
VOCABULARY = 30_000
LARGEST = 1_000


def corpus(path: Path, pages: int, seed: int) -> dict[str, int]:
    """Write the corpus to ``path`` (JSONL.gz); returns its make-up."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / (np.arange(VOCABULARY) + 10.0)
    cdf = np.cumsum(weights / weights.sum())

    def draw(n: int) -> list[str]:
        ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), VOCABULARY - 1)
        return [f"v{r}" for r in ranks.tolist()]

    in_families = int(pages * 0.4)
    pairs = int(pages * 0.1) // 2
    sizes: list[int] = []
    rank = 1
    while sum(sizes) < in_families:  # power law, the largest LARGEST copies
        sizes.append(max(2, min(LARGEST, int(LARGEST / rank**1.2))))
        rank += 1
    rows: list[str] = []
    for family, size in enumerate(sizes):
        template = draw(int(rng.integers(100, 401)))
        for copy in range(size):
            text = edited_words(rng, template, int(rng.integers(1, 7)), 10**9)
            rows.append(json.dumps({"id": f"family{family:05d}/{copy:04d}", "text": text}))
    for pair in range(pairs):
        words = draw(int(rng.integers(100, 401)))
        rows.append(json.dumps({"id": f"pair{pair:05d}/a", "text": " ".join(words)}))
        text = edited_words(rng, words, int(rng.integers(1, 9)), 10**9)
        rows.append(json.dumps({"id": f"pair{pair:05d}/b", "text": text}))
    for other in range(max(0, pages - len(rows))):
        text = " ".join(draw(int(rng.integers(100, 401))))
        rows.append(json.dumps({"id": f"other/{other:06d}", "text": text}))
    order = rng.permutation(len(rows))
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as out:
        out.writelines(rows[i] + "\n" for i in order.tolist())
    return {"pages": len(rows), "families": len(sizes), "largest": max(sizes)}


def run_dedup(path: Path, out: Path, *extra: str) -> float:
    """One ``permindex dedup --method minhash`` in a subprocess: its wall time."""
    command = [
        sys.executable, "-m", "permindex", "dedup", str(path), "--method", "minhash",
        "--no-progress", "--out", str(out), *extra,
    ]  # fmt: skip
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=dict(os.environ))
    return time.perf_counter() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--jobs", type=int, default=2, help="the local engine's --jobs")
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    path = args.workdir / f"jaccard-{args.pages}-{args.seed}.jsonl.gz"
    made: dict[str, int] = {}
    if not path.exists():
        partial = path.with_suffix(".partial.gz")
        made = corpus(partial, args.pages, args.seed)
        partial.rename(path)
    print(f"corpus: {path} {made}", file=sys.stderr)
    local = run_dedup(path, args.workdir / "local", "--jobs", str(args.jobs))
    remote = run_dedup(
        path, args.workdir / "dask", "--engine", "dask", "--workers", str(args.workers)
    )
    same = {
        name: (args.workdir / "local" / name).read_bytes()
        == (args.workdir / "dask" / name).read_bytes()
        for name in ("pairs.tsv", "clusters.tsv", "exact_duplicates.tsv", "keep_drop.tsv")
    }
    summaries = [
        json.loads((args.workdir / e / "summary.json").read_text()) for e in ("local", "dask")
    ]
    result: dict[str, Any] = {
        "corpus": str(path),
        "pages": args.pages,
        "local_seconds": round(local, 1),
        "dask_seconds": round(remote, 1),
        "identical": same,
        "pairs": summaries[0]["pairs"],
        "clusters": summaries[0]["clusters"],
        "candidates_verified": [s["candidates_verified"] for s in summaries],
        "dask_stages": summaries[1]["seconds"],
        "local_stages": summaries[0]["seconds"],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0 if all(same.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
