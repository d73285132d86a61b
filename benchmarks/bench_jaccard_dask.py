"""The Jaccard mode on Dask against the local engine (issue 42, point 2): ``permindex dedup
FILE --method minhash --engine dask --workers 2`` and ``permindex dedup FILE --method minhash``
on the same synthetic file, their wall times, and whether their pairs, clusters, exact groups
and keep/drop files are byte for byte the same.

Run from the repository root::

    .venv/bin/python benchmarks/bench_jaccard_dask.py [--pages 100000] [--words 100 400]
        [--json PATH]

The corpus (JSONL.gz under ``--workdir``, written once per size and seed): template families of
edited copies (1 to 6 words replaced, inserted or deleted; family sizes a power law, the
largest 1,000 copies: 40 % of the pages), near-copy pairs (one page and a copy with 1 to 8
edits: 10 %), and unrelated pages (50 %), each of ``--words`` (default 100 to 400) words drawn
from a Zipf-like 30,000-word vocabulary (:func:`bench_jaccard.templated`'s draw).

The recall check (:func:`exact_check`), independent of permindex's shingling, hashing, bands
and join: each page's word 3-shingles as Python strings (``text.lower().split()``, three
consecutive words joined by a space), mapped to integers by a dict per group (string equality,
no hash); the *truth* is every pair inside a template family or a near-copy pair whose exact
Jaccard (integer counts from a 0/1 page x shingle matrix product) is >= 0.8; across groups,
``--cross-sample`` random pairs of pages of different groups are checked exactly (none should
reach 0.8: the draw makes unrelated pages share almost no shingle). Then every pair the Dask
engine printed must be in the truth with its exact value to 4 decimals (a printed pair across
groups is checked alone), and recall = printed truth pairs / truth pairs.
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
from numpy.typing import NDArray

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from bench_jaccard import edited_words  # noqa: E402

DEFAULT_WORKDIR = Path("/tmp/permindex-bench-jaccard-dask")
VOCABULARY = 30_000
LARGEST = 1_000


#: Rows a shuffle bucket holds on average while the corpus is written (memory: one bucket).
BUCKET_ROWS = 200_000


def corpus(path: Path, pages: int, seed: int, words: tuple[int, int]) -> dict[str, int]:
    """Write the corpus to ``path`` (JSONL.gz); returns its make-up. Pages of ``words`` (min, max)
    words. Streamed: each row goes to one of ``pages / BUCKET_ROWS`` temporary bucket files
    drawn at random, then each bucket is shuffled in memory and appended, which is a uniformly
    random order of all rows in the memory of one bucket (10^7 pages fit)."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / (np.arange(VOCABULARY) + 10.0)
    cdf = np.cumsum(weights / weights.sum())
    low, high = words

    def draw(n: int) -> list[str]:
        ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), VOCABULARY - 1)
        return [f"v{r}" for r in ranks.tolist()]

    def length() -> int:
        return int(rng.integers(low, high + 1))

    in_families = int(pages * 0.4)
    pairs = int(pages * 0.1) // 2
    sizes: list[int] = []
    rank, total = 1, 0
    while total < in_families:  # power law, the largest LARGEST copies
        sizes.append(max(2, min(LARGEST, int(LARGEST / rank**1.2))))
        total += sizes[-1]
        rank += 1
    buckets = max(1, -(-pages // BUCKET_ROWS))
    folder = path.parent / (path.name + ".buckets")
    folder.mkdir(exist_ok=True)
    files = [open(folder / f"{b:05d}", "w", encoding="utf-8") for b in range(buckets)]
    written = 0

    def emit(key: str, text: str) -> None:
        nonlocal written
        files[int(rng.integers(0, buckets))].write(json.dumps({"id": key, "text": text}) + "\n")
        written += 1

    for family, size in enumerate(sizes):
        template = draw(length())
        for copy in range(size):
            text = edited_words(rng, template, int(rng.integers(1, 7)), 10**9)
            emit(f"family{family:07d}/{copy:04d}", text)
    for pair in range(pairs):
        words_ = draw(length())
        emit(f"pair{pair:06d}/a", " ".join(words_))
        emit(f"pair{pair:06d}/b", edited_words(rng, words_, int(rng.integers(1, 9)), 10**9))
    for other in range(max(0, pages - written)):
        emit(f"other/{other:08d}", " ".join(draw(length())))
    for handle in files:
        handle.close()
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as out:
        for b in range(buckets):
            part = folder / f"{b:05d}"
            rows = part.read_text(encoding="utf-8").splitlines(keepends=True)
            out.writelines(rows[i] for i in rng.permutation(len(rows)).tolist())
            part.unlink()
    folder.rmdir()
    return {"pages": written, "families": len(sizes), "largest": max(sizes)}


def _group(key: str) -> str:
    """A page's group: its template family or near-copy pair, or its own key (unrelated)."""
    return key.rsplit("/", 1)[0] if not key.startswith("other/") else key


def _shingles(text: str) -> set[str]:
    words = text.lower().split()
    return {" ".join(words[i : i + 3]) for i in range(len(words) - 2)}


def _distance(inter: NDArray[np.int64], union: NDArray[np.int64]) -> NDArray[np.int64]:
    """round((1 - J) * 10^4), half up, from integer counts (as the mode rounds)."""
    return np.asarray(((union - inter) * 2 * 10_000 + union) // (2 * union), dtype=np.int64)


def _texts(path: Path, wanted: set[str]) -> dict[str, str]:
    """The texts of the keys ``wanted``, read from the corpus."""
    found: dict[str, str] = {}
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            if row["id"] in wanted:
                found[row["id"]] = row["text"]
    return found


def exact_check(
    path: Path, pairs_tsv: Path, pages: int, cross_sample: int, seed: int
) -> dict[str, Any]:
    """The recall, precision and values of ``pairs_tsv`` against exact Jaccard computed here
    (see the module docstring). Memory: the texts of the template families and near-copy pairs
    (half the pages), a sample of lines for the pairs across groups, one group's matrix."""
    rng = np.random.default_rng(seed)
    sampled_lines = set(rng.integers(0, pages, 2 * cross_sample + 1_000).tolist())
    groups: dict[str, dict[str, str]] = {}
    sample: dict[str, str] = {}
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for number, line in enumerate(lines):
            row = json.loads(line)
            if not row["id"].startswith("other/"):
                groups.setdefault(_group(row["id"]), {})[row["id"]] = row["text"]
            if number in sampled_lines:
                sample[row["id"]] = row["text"]
    printed: dict[tuple[str, str], str] = {}
    with open(pairs_tsv, encoding="utf-8") as lines:
        for line in lines:
            a, b, value = line.rstrip("\n").split("\t")
            printed[(a, b)] = value
    truth = found = wrong = below = 0
    seen: set[tuple[str, str]] = set()
    for members in groups.values():
        if len(members) < 2:
            continue
        keys = sorted(members)
        sets = [_shingles(members[k]) for k in keys]
        ids: dict[str, int] = {}
        rows = [[ids.setdefault(x, len(ids)) for x in s] for s in sets]
        matrix = np.zeros((len(keys), len(ids)), dtype=np.float32)
        for i, r in enumerate(rows):
            matrix[i, r] = 1.0
        inter = np.rint(matrix @ matrix.T).astype(np.int64)  # exact: counts below 2^24
        size = np.diag(inter)
        union = size[:, None] + size[None, :] - inter
        left, right = np.nonzero(np.triu(inter * 10 >= 8 * union, k=1))
        distance = _distance(inter[left, right], union[left, right])
        truth += left.size
        for u, v, d in zip(left.tolist(), right.tolist(), distance.tolist(), strict=True):
            shown = printed.get((keys[u], keys[v]))
            if shown is not None:
                found += 1
                seen.add((keys[u], keys[v]))
                whole, part = divmod(10_000 - d, 10_000)
                wrong += shown != f"{whole}.{part:04d}"
    rest = [pair for pair in printed if pair not in seen]  # printed, not a truth pair
    texts = {k: t for members in groups.values() for k, t in members.items()}
    texts.update(_texts(path, {key for pair in rest for key in pair} - texts.keys()))
    for a, b in rest:  # checked alone: below 0.8, or a pair across groups
        x, y = _shingles(texts[a]), _shingles(texts[b])
        inter_, union_ = len(x & y), len(x | y)
        if inter_ * 10 < 8 * union_:
            below += 1
    keys_all = list(sample)
    across = reached = 0
    while across < cross_sample:
        one, two = (keys_all[n] for n in rng.integers(0, len(keys_all), 2).tolist())
        if _group(one) == _group(two):
            continue
        across += 1
        x, y = _shingles(sample[one]), _shingles(sample[two])
        reached += len(x & y) * 10 >= 8 * len(x | y)
    return {
        "method": "exact Jaccard of shingle strings within every template family and "
        "near-copy pair, and of random pairs across groups",
        "truth_pairs": truth,
        "printed_pairs": len(printed),
        "printed_truth_pairs": found,
        "recall": round(found / truth, 5) if truth else 1.0,
        "printed_not_in_truth": len(rest),
        "printed_below_threshold": below,
        "printed_wrong_value": wrong,
        "cross_pairs_checked": across,
        "cross_pairs_at_or_above": reached,
    }


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
    parser.add_argument(
        "--cross-sample", type=int, default=100_000, help="random pairs across groups checked"
    )
    parser.add_argument("--skip-local", action="store_true", help="the Dask engine only")
    parser.add_argument(
        "--words", type=int, nargs=2, default=(100, 400), metavar=("MIN", "MAX"),
        help="words per page (default 100 400)",
    )  # fmt: skip
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    low, high = args.words
    path = args.workdir / f"jaccard-{args.pages}-{args.seed}-w{low}-{high}.jsonl.gz"
    made: dict[str, int] = {}
    if not path.exists():
        partial = path.with_suffix(".partial.gz")
        made = corpus(partial, args.pages, args.seed, (low, high))
        partial.rename(path)
    print(f"corpus: {path} {made}", file=sys.stderr)
    outs = {e: args.workdir / f"{e}-{args.pages}-w{low}-{high}" for e in ("local", "dask")}
    seconds: dict[str, float] = {}
    if not args.skip_local:
        seconds["local"] = run_dedup(path, outs["local"], "--jobs", str(args.jobs))
        print(f"local: {seconds['local']:.1f} s", file=sys.stderr)
    seconds["dask"] = run_dedup(
        path, outs["dask"], "--engine", "dask", "--workers", str(args.workers)
    )
    print(f"dask: {seconds['dask']:.1f} s", file=sys.stderr)
    engines = [e for e in ("local", "dask") if e in seconds]
    same = {
        name: (outs["local"] / name).read_bytes() == (outs["dask"] / name).read_bytes()
        for name in ("pairs.tsv", "clusters.tsv", "exact_duplicates.tsv", "keep_drop.tsv")
        if "local" in seconds
    }
    summaries = {e: json.loads((outs[e] / "summary.json").read_text()) for e in engines}
    started = time.perf_counter()
    check = exact_check(path, outs["dask"] / "pairs.tsv", args.pages, args.cross_sample, args.seed)
    check["seconds"] = round(time.perf_counter() - started, 1)
    result: dict[str, Any] = {
        "corpus": str(path),
        "pages": args.pages,
        **{f"{e}_seconds": round(seconds[e], 1) for e in engines},
        "identical": same,
        "pairs": summaries["dask"]["pairs"],
        "clusters": summaries["dask"]["clusters"],
        "candidates_verified": {e: summaries[e]["candidates_verified"] for e in engines},
        **{f"{e}_stages": summaries[e]["seconds"] for e in engines},
        "exact_check": check,
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    good = (
        all(same.values())
        and check["recall"] >= 0.95
        and check["printed_below_threshold"] == 0
        and check["printed_wrong_value"] == 0
    )
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
