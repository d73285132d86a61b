"""The Jaccard mode of ``permindex dedup`` (``--method minhash``) on a templated corpus, where
it verifies many pairs: a synthetic stand-in for issue 42's held-back corpus (10^4 pages,
10^6+ pairs with word-3-shingle Jaccard >= 0.8), timed beside the SimHash mode on the same file,
with the exact verification's rate (candidate pairs per second per core).

Run from the repository root::

    .venv/bin/python benchmarks/bench_jaccard.py [--pages 10000] [--rounds 3] [--json PATH]

The corpus (``templated``): ``--families`` template pages of 250 to 400 words (a Zipf-like draw
over a 30,000-word vocabulary), each copied into a family whose sizes follow a power law (the
largest about 1,000 copies), every copy with 1 to ``--edits`` (6) words replaced, inserted or
deleted (so that most pairs of a family have J >= 0.8, and few are within 3 bits: a few edits
move a page's SimHash by more), plus unrelated pages (``--unrelated-share``). Written once
per size and seed under ``--workdir`` as JSONL.gz.

Each round runs, in subprocesses with ``--no-progress --jobs 1`` (one core each, so the
figures are per core), ``permindex dedup FILE --method minhash --threshold 0.8`` and
``permindex dedup FILE`` (SimHash, k = 3), alternately, and keeps each one's wall time, its CPU
time (user + system, of the child process: less moved by other processes on a shared machine
than the wall time) and its summary.json (pairs, candidates, the join's seconds). Then, in this
process, the join alone (:class:`permindex.near.jaccard.JaccardDuplicates` on the shingle sets
already made) is timed and the verification's rate measured on its candidates: candidate pairs
verified per second of one core (the self-join: two sets of one family from their deltas to the
family's reference, the others by a merge of the two sorted shingle-hash arrays), beside whole
merges alone on the pairs kept (``verify``).

Then the peers, each in its own subprocess (one core), as their READMEs show them: rensa
(``RMinHash`` + ``RMinHashLSH``) and datasketch (``MinHash`` + ``MinHashLSH``, ``insert`` then
``query``), 128 permutations, threshold 0.8, on the same word-3-shingle sets; each candidate
kept where the peer's own estimate is >= 0.8. Their wall and CPU time (sketches + LSH + the
pairs listed, the corpus already read), RSS growth per document, and recall and precision
against a brute force (every pair's Jaccard from a sparse document x shingle matrix product,
scipy; its pairs and the others listed checked on samples with Python sets), permindex's own
pairs scored the same way. A peer not installed is skipped with a message (``--no-peers``
skips them all). ``--corpus FILE.jsonl.gz`` (rows ``{"id", "text"}``) runs on another corpus,
e.g. ``--corpus ../shared/corpora/libstdc++-12-doc.jsonl.gz --no-cli``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
DEFAULT_WORKDIR = Path("/tmp/permindex-bench-jaccard")
VOCABULARY = 30_000


def edited_words(rng: np.random.Generator, words: list[str], edits: int, fresh: int) -> str:
    """``words`` after ``edits`` random edits -- a word replaced, a word inserted or a word
    deleted, each new word ``e<n>`` with n below ``fresh`` -- joined by spaces."""
    copy = list(words)
    for _ in range(edits):
        at = int(rng.integers(0, len(copy)))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            copy[at] = f"e{int(rng.integers(0, fresh))}"
        elif kind == 1:
            copy.insert(at, f"e{int(rng.integers(0, fresh))}")
        else:
            del copy[at]
    return " ".join(copy)


def templated(
    path: Path, pages: int, families: int, unrelated_share: float, edits: int, seed: int
) -> dict[str, int]:
    """Write the templated corpus to ``path`` (JSONL.gz); returns its make-up."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / (np.arange(VOCABULARY) + 10.0)
    cdf = np.cumsum(weights / weights.sum())

    def draw(n: int) -> list[str]:
        ranks = np.minimum(np.searchsorted(cdf, rng.random(n)), VOCABULARY - 1)
        return [f"v{r}" for r in ranks.tolist()]

    unrelated = int(pages * unrelated_share)
    copies = pages - unrelated
    sizes = 1.0 / (np.arange(families) + 1.0) ** 0.9  # power law: the largest ~1,000 copies
    sizes = np.maximum(2, np.floor(sizes / sizes.sum() * copies)).astype(int)
    sizes[0] += copies - int(sizes.sum())
    rows: list[str] = []
    for family, size in enumerate(sizes.tolist()):
        template = draw(int(rng.integers(250, 401)))
        for copy in range(size):
            text = edited_words(rng, template, int(rng.integers(1, edits + 1)), 10**6)
            key = f"family{family:03d}/page{copy:05d}"
            rows.append(json.dumps({"id": key, "text": text}))
    for other in range(unrelated):
        text = " ".join(draw(int(rng.integers(100, 401))))
        rows.append(json.dumps({"id": f"other/{other:05d}", "text": text}))
    order = rng.permutation(len(rows))
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=1) as out:
        out.writelines(rows[i] + "\n" for i in order.tolist())
    return {"pages": len(rows), "families": families, "largest": int(sizes.max())}


def corpus(args: argparse.Namespace) -> Path:
    args.workdir.mkdir(parents=True, exist_ok=True)
    name = f"templated-{args.pages}-{args.families}-{args.edits}-{args.seed}.jsonl.gz"
    path: Path = args.workdir / name
    if not path.exists():
        partial = path.with_suffix(".partial.gz")
        templated(partial, args.pages, args.families, args.unrelated_share, args.edits, args.seed)
        partial.rename(path)
    return path


def run_dedup(path: Path, out: Path, *extra: str, tree: Path | None = None) -> dict[str, Any]:
    """One ``permindex dedup`` in a subprocess (the package of ``tree`` when given, a
    ``git archive`` of another commit, else this repository's), run in that folder: ``python
    -m`` puts the current folder first on ``sys.path``, before PYTHONPATH, so a baseline run
    from this repository would import this tree. Its wall time, CPU time (user + system) and
    summary.json."""
    command = [
        sys.executable, "-m", "permindex", "dedup", str(path.resolve()), "--no-progress",
        "--jobs", "1", "--out", str(out.resolve()), *extra,
    ]  # fmt: skip
    env = dict(os.environ)
    root = (tree if tree is not None else REPO).resolve()
    env["PYTHONPATH"] = str(root)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(
        command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        cwd=root,
    )  # fmt: skip
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    summary = json.loads((out / "summary.json").read_text())
    return {"wall": wall, "cpu": cpu, "summary": summary}


def join_alone(path: Path, threshold: float) -> dict[str, Any]:
    """The Jaccard join in this process on the corpus's shingle sets (one core; CPU seconds of
    this process, :func:`time.process_time`, so that other processes on a shared machine move
    them little): the whole
    :class:`~permindex.near.jaccard.JaccardDuplicates` (set digests, band keys, the verified
    self-join, flags), the family deltas alone (:func:`~permindex.near.jaccard.family_deltas`:
    rows in a family, their mean delta), the self-join alone
    (:func:`~permindex.near.jaccard.self_join`, deltas included: its candidates per second),
    and the exact check by whole merges alone (:func:`~permindex.near.jaccard.
    verify`, one merge per pair) on the pairs the join kept: pairs per second."""
    from permindex.near.jaccard import (
        JaccardDuplicates,
        ShingleSets,
        family_deltas,
        self_join,
        verify,
    )
    from permindex.near.minhash import band_keys, choose_bands, signatures
    from permindex.text.fingerprint import shingle_hashes

    with gzip.open(path, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    keys = [row["id"] for row in rows]
    sets = ShingleSets.of([shingle_hashes(row["text"]) for row in rows])
    signature = signatures(sets.values, sets.offsets, 128)
    shape = choose_bands(threshold, 128)
    bands = band_keys(signature, shape)
    JaccardDuplicates(keys[:50], sets.take(np.arange(50)), bands[:50], threshold, shape)
    started = time.process_time()
    near = JaccardDuplicates(keys, sets, bands, threshold, shape)
    join = time.process_time() - started
    started = time.process_time()
    pairs = sum(1 for _ in near.iter_pairs())
    listed = time.process_time() - started
    exact = {(a, b) if a < b else (b, a) for a, b, _ in near.iter_pairs()}
    _, first = np.unique(sets.digests(), return_index=True)
    reps = np.sort(first).astype(np.int64)
    bands = band_keys(signature[reps], shape)
    started = time.process_time()
    deltas = family_deltas(sets, reps, bands)
    deltas_seconds = time.process_time() - started
    in_family = deltas.family >= 0
    started = time.process_time()
    (u, v, _), candidates, merged = self_join(sets, reps, bands, threshold)
    kernel = time.process_time() - started
    started = time.process_time()
    found = verify(sets, reps[u], reps[v], threshold)
    check = time.process_time() - started
    assert found.kept.all()
    return {
        "_exact": exact,
        "join_seconds": join,
        "pairs_listed_seconds": listed,
        "pairs": pairs,
        "distinct_sets": int(reps.size),
        "mean_set_size": float(sets.sizes.mean()),
        "candidates": candidates,
        "candidates_merged": merged,
        "distinct_pairs_kept": int(u.size),
        "rows_in_families": int(in_family.sum()),
        "families": len(deltas.references),
        "mean_delta_size": float(
            (deltas.removed.sizes + deltas.added.sizes)[in_family].mean() if in_family.any() else 0
        ),
        "family_deltas_seconds": deltas_seconds,
        "self_join_seconds": kernel,
        "self_join_candidates_per_second": candidates / kernel,
        "verify_seconds": check,
        "verify_pairs_per_second": u.size / check,
    }


PEERS = ("permindex", "rensa", "datasketch")  # permindex: the same kind of process
PERMUTATIONS = 128


def word_shingles(text: str, size: int = 3) -> list[str]:
    """The distinct word-``size``-shingles of ``text`` as strings (lower-cased, split on
    Unicode whitespace, joined by one space: :func:`permindex.shingles`' word tokenizer), the
    sets permindex hashes, given to the peers and to the brute force."""
    words = text.lower().split()
    return list({" ".join(words[i : i + size]) for i in range(max(0, len(words) - size + 1))})


def rss_bytes() -> int:
    """This process's resident set size now (Linux ``/proc/self/statm``), in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peer_pairs(name: str, texts: list[str], threshold: float) -> set[tuple[int, int]]:
    """Each peer as its README shows it: a MinHash of ``PERMUTATIONS`` per document (its
    shingles), every one inserted in the peer's LSH at ``threshold``, then each queried;
    candidates kept where the peer's own estimate is >= ``threshold``. Pairs of row numbers,
    i < j."""
    found: set[tuple[int, int]] = set()
    if name == "permindex":  # the same kind of process: shingle hashes, signatures, join
        from permindex.near.jaccard import JaccardDuplicates, ShingleSets
        from permindex.near.minhash import band_keys, choose_bands, signatures
        from permindex.text.fingerprint import shingle_hashes

        keys = [str(i) for i in range(len(texts))]
        sets = ShingleSets.of([shingle_hashes(text) for text in texts])
        signature = signatures(sets.values, sets.offsets, PERMUTATIONS)
        shape = choose_bands(threshold, PERMUTATIONS)
        near = JaccardDuplicates(keys, sets, band_keys(signature, shape), threshold, shape)
        for a, b, _ in near.iter_pairs():
            i, j = int(a), int(b)
            found.add((i, j) if i < j else (j, i))
    elif name == "rensa":
        from rensa import RMinHash, RMinHashLSH  # type: ignore[import-untyped]

        sketches = []
        for text in texts:
            sketch = RMinHash(num_perm=PERMUTATIONS, seed=42)
            sketch.update(word_shingles(text))
            sketches.append(sketch)
        lsh = RMinHashLSH(threshold=threshold, num_perm=PERMUTATIONS, num_bands=16)
        for i, sketch in enumerate(sketches):
            lsh.insert(i, sketch)
        for i, sketch in enumerate(sketches):
            for j in lsh.query(sketch):
                if j > i and sketch.jaccard(sketches[j]) >= threshold:
                    found.add((i, j))
    elif name == "datasketch":
        from datasketch import MinHash, MinHashLSH  # type: ignore[import-untyped]

        minhashes = []
        for text in texts:
            minhash = MinHash(num_perm=PERMUTATIONS)
            minhash.update_batch([s.encode("utf-8") for s in word_shingles(text)])
            minhashes.append(minhash)
        index = MinHashLSH(threshold=threshold, num_perm=PERMUTATIONS)
        for i, minhash in enumerate(minhashes):
            index.insert(i, minhash)
        for i, minhash in enumerate(minhashes):
            for j in index.query(minhash):
                if j > i and minhash.jaccard(minhashes[j]) >= threshold:
                    found.add((i, j))
    else:
        raise ValueError(f"unknown peer {name!r}")
    return found


def run_peer_child(name: str, path: Path, threshold: float, out: Path) -> None:
    """The child process of :func:`run_peer`: reads the corpus, times the peer (wall and CPU
    seconds of this process), and writes its figures and its pairs (as keys) to ``out``."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    texts = [row["text"] for row in rows]
    keys = [row["id"] for row in rows]
    if name == "permindex":  # its kernels compiled (or loaded from numba's cache) first
        peer_pairs(name, ["a b c d e f"] * 3, threshold)
    rss = rss_bytes()
    wall, cpu = time.perf_counter(), time.process_time()
    found = peer_pairs(name, texts, threshold)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    grown = rss_bytes() - rss
    pairs = sorted(tuple(sorted((keys[i], keys[j]))) for i, j in found)
    out.write_text(
        json.dumps(
            {"wall": wall, "cpu": cpu, "rss_growth": grown, "documents": len(rows), "pairs": pairs}
        )
        + "\n"
    )


def run_peer(name: str, path: Path, threshold: float, workdir: Path) -> dict[str, Any] | None:
    """One peer in a subprocess (as ``permindex dedup``: one process, one core), or None with
    a message when it is not installed."""
    try:
        __import__(name)
    except ImportError:
        print(f"{name}: not installed, skipped (pip install -e '.[bench]')", file=sys.stderr)
        return None
    out = workdir / f"peer-{name}.json"
    command = [sys.executable, str(Path(__file__).resolve()), "--peer", name, "--peer-out",
               str(out), "--threshold", str(threshold), "--corpus", str(path)]  # fmt: skip
    subprocess.run(command, check=True)
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def compare(found: list[list[str]], exact: set[tuple[str, str]]) -> dict[str, float | int]:
    """Recall and precision of a peer's pairs against the exact pairs."""
    pairs = {(a, b) for a, b in found}
    both = len(pairs & exact)
    return {
        "pairs": len(pairs),
        "recall": both / len(exact) if exact else 1.0,
        "precision": both / len(pairs) if pairs else 1.0,
    }


def brute_force_pairs(path: Path, threshold: float) -> tuple[set[tuple[str, str]], int]:
    """Every pair with word-3-shingle Jaccard >= ``threshold``, by brute force: a sparse
    document x shingle matrix M (scipy), the intersections M M^T, J = |A & B| / |A | B|.
    Returns the pairs (keys, a < b) and the number of pairs sharing a shingle."""
    from scipy import sparse  # type: ignore[import-untyped]

    with gzip.open(path, "rt", encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines]
    keys = [row["id"] for row in rows]
    vocabulary: dict[str, int] = {}
    indices: list[int] = []
    indptr = [0]
    for row in rows:
        shingles = word_shingles(row["text"])
        indices.extend(vocabulary.setdefault(s, len(vocabulary)) for s in shingles)
        indptr.append(len(indices))
    data = np.ones(len(indices), dtype=np.int32)
    matrix = sparse.csr_matrix((data, indices, indptr), shape=(len(rows), len(vocabulary)))
    sizes = np.diff(matrix.indptr)
    shared = sparse.triu(matrix @ matrix.T, k=1).tocoo()
    union = sizes[shared.row] + sizes[shared.col] - shared.data
    keep = shared.data >= threshold * union - 1e-9
    pairs = {
        (keys[i], keys[j]) if keys[i] < keys[j] else (keys[j], keys[i])
        for i, j in zip(shared.row[keep].tolist(), shared.col[keep].tolist(), strict=True)
    }
    return pairs, int(shared.nnz)


def check_sample(
    path: Path, truth: set[tuple[str, str]], others: set[tuple[str, str]], threshold: float,
    sample: int = 2000, seed: int = 0,
) -> dict[str, int]:  # fmt: skip
    """Recompute the Jaccard similarity with Python sets for a sample of the brute-force
    pairs (each must be >= ``threshold``) and of the other pairs listed by anyone (each must
    be below it): a check of the oracle itself; raises AssertionError otherwise."""
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        text = {row["id"]: row["text"] for row in map(json.loads, lines)}
    rng = np.random.default_rng(seed)

    def jaccard(a: str, b: str) -> float:
        x, y = set(word_shingles(text[a])), set(word_shingles(text[b]))
        return len(x & y) / len(x | y) if x | y else 1.0

    def pick(pairs: set[tuple[str, str]]) -> list[tuple[str, str]]:
        listed = sorted(pairs)
        if not listed:
            return []
        chosen = rng.choice(len(listed), size=min(sample, len(listed)), replace=False)
        return [listed[i] for i in chosen.tolist()]

    kept, rest = pick(truth), pick(others - truth)
    bad_kept = [p for p in kept if jaccard(*p) < threshold]
    bad_rest = [p for p in rest if jaccard(*p) >= threshold]
    assert not bad_kept, f"brute-force pairs below {threshold}: {bad_kept[:3]}"
    assert not bad_rest, f"pairs >= {threshold} brute force missed: {bad_rest[:3]}"
    return {"checked_brute_force_pairs": len(kept), "checked_other_pairs": len(rest)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--families", type=int, default=200)
    parser.add_argument("--unrelated-share", type=float, default=0.2)
    parser.add_argument("--edits", type=int, default=6, help="most edits of a copy (1 to N)")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threshold", type=float, default=0.8)
    parser.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--no-cli", action="store_true", help="only the join in this process")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="a tree of another commit (git archive): its Jaccard and SimHash runs in the same "
        "rounds, for a before/after",
    )
    parser.add_argument("--no-peers", action="store_true", help="without rensa and datasketch")
    parser.add_argument("--corpus", type=Path, default=None, help="this JSONL.gz instead")
    parser.add_argument("--peer", choices=PEERS, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--peer-out", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer is not None:
        run_peer_child(args.peer, args.corpus, args.threshold, args.peer_out)
        return 0
    path = args.corpus if args.corpus is not None else corpus(args)
    args.workdir.mkdir(parents=True, exist_ok=True)
    print(f"corpus: {path}", file=sys.stderr)
    result: dict[str, Any] = {"corpus": str(path)}
    if args.corpus is None:
        result["pages"] = args.pages
    if not args.no_cli:
        jaccard: list[dict[str, Any]] = []
        simhash: list[dict[str, Any]] = []
        out = args.workdir / "out"
        before_j: list[dict[str, Any]] = []
        before_s: list[dict[str, Any]] = []
        if args.baseline is not None:  # its kernels compiled before the rounds
            run_dedup(path, out / "base-jaccard", "--method", "minhash", tree=args.baseline)
        for _ in range(args.rounds):
            jaccard.append(
                run_dedup(path, out / "jaccard", "--method", "minhash", "--threshold",
                          str(args.threshold))
            )  # fmt: skip
            simhash.append(run_dedup(path, out / "simhash"))
            if args.baseline is not None:
                before_j.append(
                    run_dedup(path, out / "base-jaccard", "--method", "minhash", "--threshold",
                              str(args.threshold), tree=args.baseline)
                )  # fmt: skip
                before_s.append(run_dedup(path, out / "base-simhash", tree=args.baseline))
        ratios = [j["wall"] / s["wall"] for j, s in zip(jaccard, simhash, strict=True)]
        cpu_ratios = [j["cpu"] / s["cpu"] for j, s in zip(jaccard, simhash, strict=True)]
        if args.baseline is not None:
            result["baseline"] = str(args.baseline)
            result["baseline_jaccard_wall"] = statistics.median(r["wall"] for r in before_j)
            result["baseline_simhash_wall"] = statistics.median(r["wall"] for r in before_s)
            result["baseline_ratio_median"] = statistics.median(
                j["wall"] / s["wall"] for j, s in zip(before_j, before_s, strict=True)
            )
            result["baseline_jaccard_cpu"] = statistics.median(r["cpu"] for r in before_j)
            result["baseline_simhash_cpu"] = statistics.median(r["cpu"] for r in before_s)
            result["baseline_cpu_ratio_median"] = statistics.median(
                j["cpu"] / s["cpu"] for j, s in zip(before_j, before_s, strict=True)
            )
            result["baseline_jaccard_seconds"] = before_j[-1]["summary"].get("seconds")
        summary = jaccard[-1]["summary"]
        result.update(
            {
                "jaccard_wall": statistics.median(j["wall"] for j in jaccard),
                "simhash_wall": statistics.median(s["wall"] for s in simhash),
                "ratio_median": statistics.median(ratios),
                "ratios": ratios,
                "jaccard_cpu": statistics.median(j["cpu"] for j in jaccard),
                "simhash_cpu": statistics.median(s["cpu"] for s in simhash),
                "cpu_ratio_median": statistics.median(cpu_ratios),
                "cpu_ratios": cpu_ratios,
                "jaccard_pairs": summary["pairs"],
                "jaccard_candidates": summary.get("candidates"),
                "jaccard_candidates_verified": summary.get("candidates_verified"),
                "jaccard_seconds": summary.get("seconds"),
                "simhash_pairs": simhash[-1]["summary"]["pairs"],
                "simhash_seconds": simhash[-1]["summary"].get("seconds"),
            }
        )
    alone = join_alone(path, args.threshold)
    exact: set[tuple[str, str]] = alone.pop("_exact")
    result.update(alone)
    try:
        import scipy  # noqa: F401  # type: ignore[import-untyped]
    except ImportError:
        print(
            "scipy not installed: peers and brute force skipped (the bench extra)", file=sys.stderr
        )
        args.no_peers = True
    if not args.no_peers:
        truth, sharing = brute_force_pairs(path, args.threshold)
        others = set(exact)
        result["brute_force"] = {"pairs": len(truth), "pairs_sharing_a_shingle": sharing}
        result["permindex"] = {
            "cpu": alone["join_seconds"],
            **compare([list(p) for p in exact], truth),
        }
        for name in PEERS:
            peer = run_peer(name, path, args.threshold, args.workdir)
            if peer is None:
                result[name] = "not installed"
                continue
            others |= {(a, b) for a, b in peer["pairs"]}
            result[name if name != "permindex" else "permindex_process"] = {
                "wall": peer["wall"],
                "cpu": peer["cpu"],
                "rss_growth_per_document": peer["rss_growth"] / peer["documents"],
                **compare(peer["pairs"], truth),
            }
        result["exact_check"] = check_sample(path, truth, others, args.threshold)
    text = json.dumps(result, indent=2)
    print(text)
    if args.json is not None:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
