"""``permindex dedup FILE.parquet`` on the local engine and with ``--engine dask --workers 2``
on the same file, in the same run: wall time and peak memory of each, and a check that both give
the same pairs and clusters as an independent reference.

Run from the repository root::

    .venv/bin/python benchmarks/bench_distributed.py --documents 1000000 [--json PATH]
    .venv/bin/python benchmarks/bench_distributed.py --documents 100000000 --engines dask \\
        --worker-memory 4GiB --reference join

The file (``--workdir``, default /tmp/permindex-bench-distributed) is written once per size:
Parquet, columns ``id`` (``doc/00000042``) and ``fingerprint`` (uint64), row groups of 10^6,
from tests/planted.py (random fingerprints; 1% near copies at 0..3 bits; one fingerprint held
by 1,000 documents; 5,000 distinct fingerprints sharing the first table's prefix). Each engine
runs ``permindex dedup FILE --out DIR --no-progress`` in a subprocess
(bench_dedup.run_dedup_command: wall time; peak RSS of the command's own process and of its
whole process tree, sampled every 0.1 s — with Dask, the tree holds the scheduler and the
workers).

The reference (``--reference``):

* ``index`` (the default), independent of the join: an :class:`permindex.Index` of every
  document queried with every fingerprint (the lookup tables, not the self-join) gives the
  pairs, and a plain union-find in Python over them the clusters;
* ``join``, for sizes where the local engine does not fit in memory (it holds about 270 bytes
  a document: 27 GB at 10^8): the single-process join,
  :func:`permindex.index.join.self_join.self_join`
  on the design :func:`~permindex.index.join.self_join.join_design` picks (as the local engine does)
  over the (n,) uint64 fingerprints alone in this process (no keys: ``doc/%08d`` sorts as its
  row number), and a union-find over an (n,) int64 parent array for the clusters;
* ``none`` (or ``--no-reference``): no reference; with both engines run, their outputs must
  equal each other.

Each engine's stdout must equal the reference pairs, and its clusters.tsv the clusters.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import numpy as np  # noqa: E402
from bench_dedup import run_dedup_command  # noqa: E402
from planted import keys, planted  # noqa: E402

ROW_GROUP = 1_000_000


def parquet_file(documents: int, workdir: Path) -> Path:
    """The planted file of ``documents`` rows (written on first use)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = workdir / f"planted-{documents}.parquet"
    if path.exists():
        return path
    workdir.mkdir(parents=True, exist_ok=True)
    fps = planted(documents)
    schema = pa.schema([("id", pa.string()), ("fingerprint", pa.uint64())])
    partial = path.with_suffix(".partial")
    with pq.ParquetWriter(partial, schema) as writer:
        for start in range(0, documents, ROW_GROUP):
            stop = min(documents, start + ROW_GROUP)
            writer.write_table(
                pa.table(
                    {"id": keys(start, stop), "fingerprint": pa.array(fps[start:stop])},
                    schema=schema,
                )
            )
    partial.rename(path)
    return path


def find(parent: Any, x: int) -> int:
    """The root of ``x`` in the union-find forest ``parent`` (a list or an (n,) int64 array of
    parents), halving the path on the way."""
    while (up := int(parent[x])) != x:
        parent[x] = parent[up]
        x = int(parent[x])
    return x


def union(parent: Any, x: int, y: int) -> None:
    """Join the trees of ``x`` and ``y``: the larger root points to the smaller."""
    a, b = find(parent, x), find(parent, y)
    if a != b:
        parent[max(a, b)] = min(a, b)


def reference(documents: int, k: int = 3) -> tuple[list[str], list[list[str]]]:
    """(pair lines as dedup prints them, clusters as sorted key lists sorted), from an Index
    lookup of every fingerprint and a Python union-find."""
    from permindex import Index
    from permindex.index.join.clusters import design_for

    fps = planted(documents)
    names = keys(0, documents)
    index = Index(k=k, design=design_for(k), expected_size=documents)
    index.add_many(names, fps)
    lines: list[str] = []
    parent = list(range(documents))
    position = {name: i for i, name in enumerate(names)}
    step = 100_000
    for start in range(0, documents, step):
        found = index.query_many(fps[start : start + step], k, columns=True)
        owners = np.repeat(np.arange(start, start + found.offsets.size - 1), np.diff(found.offsets))
        for owner, other, d in zip(
            owners.tolist(), found.keys, found.distances.tolist(), strict=True
        ):
            mine = names[owner]
            if mine < other:
                lines.append(f"{mine}\t{other}\t{d}\n")
                union(parent, owner, position[other])
    lines.sort()
    groups: dict[int, list[str]] = {}
    for i in range(documents):
        groups.setdefault(find(parent, i), []).append(names[i])
    clusters = sorted(sorted(g) for g in groups.values() if len(g) > 1)
    return lines, clusters


def join_reference(documents: int, k: int = 3) -> tuple[str, list[list[str]], dict[str, float]]:
    """(sha256 of the pair lines as dedup prints them, clusters as sorted key lists sorted,
    seconds and peak-RSS figures) from the single-process self-join of the fingerprints alone.

    The keys are ``doc/%08d`` (documents <= 10^8), so their order is the row order: a pair
    (a, b) with a < b prints as ``doc/a<TAB>doc/b<TAB>d`` and the lines sort as (a, b)."""
    import resource

    from permindex.index.join.self_join import join_design, self_join
    from permindex.index.tables.permutation import DEFAULT_DESIGN

    if documents > 100_000_000:
        raise SystemExit("--reference join: at most 10^8 documents (8-digit keys)")
    started = time.monotonic()
    fps = planted(documents)
    # the design the local engine's join picks by cost (at 10^8 not (4, 1): its 16-bit prefixes
    # hold 1,500 fingerprints each, 10^11 candidates)
    design = join_design(DEFAULT_DESIGN, k, documents)
    a, b, d = self_join(fps, k, design)
    joined = time.monotonic() - started
    low, high = np.minimum(a, b), np.maximum(a, b)
    order = np.lexsort((high, low))
    low, high, d = low[order], high[order], d[order]
    del a, b, order
    sha = hashlib.sha256()
    step = 1 << 20
    for start in range(0, low.size, step):
        sha.update(
            "".join(
                f"doc/{x:08d}\tdoc/{y:08d}\t{z}\n"
                for x, y, z in zip(
                    low[start : start + step].tolist(),
                    high[start : start + step].tolist(),
                    d[start : start + step].tolist(),
                    strict=True,
                )
            ).encode()
        )
    parent = np.arange(documents, dtype=np.int64)
    for x, y in zip(low.tolist(), high.tolist(), strict=True):
        union(parent, x, y)
    members = np.unique(np.concatenate([low, high]))
    groups: dict[int, list[str]] = {}
    for x in members.tolist():
        groups.setdefault(find(parent, x), []).append(f"doc/{x:08d}")
    clusters = sorted(sorted(g) for g in groups.values())
    figures = {
        "join_seconds": round(joined, 1),
        "seconds": round(time.monotonic() - started, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "pairs": int(low.size),
        "design": str(design),
    }
    return sha.hexdigest(), clusters, figures


def clusters_of(folder: Path) -> list[list[str]]:
    """The clusters of a report folder's clusters.tsv (cluster<TAB>key...), as sorted key
    lists, sorted."""
    groups: dict[str, list[str]] = {}
    with open(folder / "clusters.tsv", encoding="utf-8") as lines:
        for line in lines:
            number, key = line.rstrip("\n").split("\t")[:2]
            groups.setdefault(number, []).append(key)
    return sorted(sorted(g) for g in groups.values())


def digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--engines", default="local,dask", help="comma-separated: local, dask")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--worker-memory", default=None, metavar="SIZE")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/permindex-bench-distributed"))
    parser.add_argument(
        "--reference",
        choices=("index", "join", "none"),
        default="index",
        help="index: Index lookups of every fingerprint (default); join: the single-process "
        "self-join of the fingerprints alone (for 10^8); none: no reference",
    )
    parser.add_argument("--no-reference", action="store_true", help="the same as --reference none")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="do not run the engines: check the report folders an earlier run left in --workdir",
    )
    args = parser.parse_args()

    started = time.monotonic()
    path = parquet_file(args.documents, args.workdir)
    print(
        f"file {path} ({path.stat().st_size / 2**20:.0f} MiB) in {time.monotonic() - started:.0f} s"
    )
    results: dict[str, Any] = {"documents": args.documents, "file": str(path), "runs": {}}
    for engine in args.engines.split(","):
        extra: tuple[str, ...] = ()
        if engine == "dask":
            extra = ("--engine", "dask", "--workers", str(args.workers))
            if args.worker_memory:
                extra += ("--worker-memory", args.worker_memory)
        folder = args.workdir / f"report-{engine}"
        if args.reuse:
            run = {
                "pairs_path": str(folder / "pairs-stdout.tsv"),
                "summary": json.loads((folder / "summary.json").read_text(encoding="utf-8")),
                "wall_seconds": None,
                "peak_rss_mb": None,
                "peak_tree_rss_mb": None,
            }
        else:
            run = run_dedup_command(path, folder, extra=extra)
        run["stdout_sha256"] = digest(Path(run["pairs_path"]))
        results["runs"][engine] = run
        print(
            f"{engine}: {run['wall_seconds']} s, peak RSS {run['peak_rss_mb']} MiB own, "
            f"{run['peak_tree_rss_mb']} MiB tree; {run['summary']['pairs']} pairs"
        )
    runs = results["runs"]
    if "local" in runs and "dask" in runs and not args.reuse:
        results["dask_over_local"] = round(
            runs["dask"]["wall_seconds"] / runs["local"]["wall_seconds"], 2
        )
        print(f"dask / local wall time: {results['dask_over_local']}")
    checks: dict[str, bool] = {}
    if args.no_reference:
        args.reference = "none"
    if args.reference != "none":
        if args.reference == "index":
            lines, clusters = reference(args.documents)
            ref = hashlib.sha256("".join(lines).encode()).hexdigest()
        else:
            ref, clusters, figures = join_reference(args.documents)
            results["reference"] = figures
            print(
                f"reference (single-process join): {figures['seconds']} s "
                f"(join {figures['join_seconds']} s), peak RSS {figures['peak_rss_mb']} MiB; "
                f"{figures['pairs']} pairs"
            )
        for engine, run in runs.items():
            checks[f"{engine} pairs = reference"] = run["stdout_sha256"] == ref
            checks[f"{engine} clusters = reference"] = (
                clusters_of(args.workdir / f"report-{engine}") == clusters
            )
    elif len(runs) == 2:
        local, dask = runs["local"], runs["dask"]
        checks["pairs equal"] = local["stdout_sha256"] == dask["stdout_sha256"]
        checks["clusters equal"] = clusters_of(args.workdir / "report-local") == clusters_of(
            args.workdir / "report-dask"
        )
    results["checks"] = checks
    for name, ok in checks.items():
        print(f"{name}: {'yes' if ok else 'NO'}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
