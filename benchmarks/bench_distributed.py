"""``permindex dedup FILE.parquet`` on the local engine and with ``--engine dask --workers 2``
on the same file, in the same run: wall time and peak memory of each, and a check that both give
the same pairs and clusters as an independent reference.

Run from the repository root::

    .venv/bin/python benchmarks/bench_distributed.py --documents 1000000 [--json PATH]
    .venv/bin/python benchmarks/bench_distributed.py --documents 100000000 --engines dask \\
        --worker-memory 4GiB --no-reference

The file (``--workdir``, default /tmp/permindex-bench-distributed) is written once per size:
Parquet, columns ``id`` (``doc/00000042``) and ``fingerprint`` (uint64), row groups of 10^6,
from tests/planted.py (random fingerprints; 1% near copies at 0..3 bits; one fingerprint held
by 1,000 documents; 5,000 distinct fingerprints sharing the first table's prefix). Each engine
runs ``permindex dedup FILE --out DIR --no-progress`` in a subprocess
(bench_dedup.run_dedup_command: wall time; peak RSS of the command's own process and of its
whole process tree, sampled every 0.1 s — with Dask, the tree holds the scheduler and the
workers).

The reference (skipped with ``--no-reference``, as for 10^8), independent of the join: an
:class:`permindex.Index` of every document queried with every fingerprint (the lookup tables,
not the self-join) gives the pairs, and a plain union-find in Python over them the clusters.
Both engines' stdout must equal the reference pairs, and their clusters.tsv its clusters;
without the reference, the engines' outputs must equal each other.
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


def reference(documents: int, k: int = 3) -> tuple[list[str], list[list[str]]]:
    """(pair lines as dedup prints them, clusters as sorted key lists sorted), from an Index
    lookup of every fingerprint and a Python union-find."""
    from permindex import Index
    from permindex.index.clusters import design_for

    fps = planted(documents)
    names = keys(0, documents)
    index = Index(k=k, design=design_for(k), expected_size=documents)
    index.add_many(names, fps)
    lines: list[str] = []
    parent = list(range(documents))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

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
                a, b = find(owner), find(position[other])
                if a != b:
                    parent[max(a, b)] = min(a, b)
    lines.sort()
    groups: dict[int, list[str]] = {}
    for i in range(documents):
        groups.setdefault(find(i), []).append(names[i])
    clusters = sorted(sorted(g) for g in groups.values() if len(g) > 1)
    return lines, clusters


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
    parser.add_argument("--no-reference", action="store_true")
    parser.add_argument("--json", type=Path, default=None)
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
        run = run_dedup_command(path, args.workdir / f"report-{engine}", extra=extra)
        run["stdout_sha256"] = digest(Path(run["pairs_path"]))
        results["runs"][engine] = run
        print(
            f"{engine}: {run['wall_seconds']} s, peak RSS {run['peak_rss_mb']} MiB own, "
            f"{run['peak_tree_rss_mb']} MiB tree; {run['summary']['pairs']} pairs"
        )
    runs = results["runs"]
    if "local" in runs and "dask" in runs:
        results["dask_over_local"] = round(
            runs["dask"]["wall_seconds"] / runs["local"]["wall_seconds"], 2
        )
        print(f"dask / local wall time: {results['dask_over_local']}")
    checks: dict[str, bool] = {}
    if not args.no_reference:
        lines, clusters = reference(args.documents)
        ref = hashlib.sha256("".join(lines).encode()).hexdigest()
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
