"""How well SimHash pairs at k = 0..6 match pairs of documents whose word 3-shingle sets are
similar (Jaccard >= 0.8 and >= 0.9), on the shared corpora, with plain and IDF-weighted SimHash.

Run from the repository root (about a minute; writes the Markdown table to stdout)::

    .venv/bin/python benchmarks/quality.py [--corpora ../shared/corpora] [--max-k 6]

Ground truth, exact over all pairs (3,906 documents: 7.6 million pairs): each document's set of
distinct word 3-shingles (lower-cased, split on whitespace, as the default SimHash), each shingle
named by its XXH3-64 hash (so "exact" up to a hash collision, about n^2 / 2^64). The intersection
size of every pair of sets is computed without enumerating the pairs' shingles:

* shingles in fewer than ``DENSE_DF`` documents: an inverted index, each such shingle adding 1 to
  every pair of its documents (at most C(63, 2) pairs each);
* the frequent ones (boilerplate): a dense 0/1 matrix M (documents x those shingles), and M M^T
  in float32 blocks — exact integers, every count being below 2^24.

Jaccard(A, B) = |A & B| / (|A| + |B| - |A & B|). No candidate filter is involved, so the recall
figures are exact.

SimHash pairs: every pair within k bits, by brute force over all pairs. Plain SimHash is the
default fingerprint; IDF-weighted SimHash weighs each shingle by ln((1 + N) / (1 + df)) + 1 over
the corpus (:mod:`permindex.text.weights`, as ``permindex dedup --weights idf``).

Precision at k: the share of SimHash pairs within k whose Jaccard reaches the threshold; recall:
the share of pairs at or above the threshold that SimHash finds within k.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

from permindex.text.fingerprint import shingle_hashes, simhash, simhash_weighted
from permindex.text.weights import DocumentFrequency

DENSE_DF = 64  # shingles in at least this many documents go to the dense product
BLOCK = 4096  # dense columns per matrix product
CORPORA = ("libstdc++-12-doc.jsonl.gz", "postgresql-doc-15.jsonl.gz")
THRESHOLDS = (0.8, 0.9)


def load(path: Path) -> tuple[list[str], list[str]]:
    keys: list[str] = []
    texts: list[str] = []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            keys.append(row["id"])
            texts.append(row["text"])
    return keys, texts


def intersections(sets: list[NDArray[np.uint64]]) -> NDArray[np.int32]:
    """(n, n) int32: |sets[i] & sets[j]| for every i, j (upper triangle and diagonal filled)."""
    n = len(sets)
    doc = np.repeat(np.arange(n, dtype=np.int64), [s.size for s in sets])
    shingle = np.concatenate(sets) if sets else np.zeros(0, dtype=np.uint64)
    _, column, df = np.unique(shingle, return_inverse=True, return_counts=True)
    column = column.reshape(-1)
    out = np.zeros((n, n), dtype=np.int32)
    # frequent shingles: dense products
    frequent = np.flatnonzero(df >= DENSE_DF)
    if frequent.size:
        dense_id = np.full(df.size, -1, dtype=np.int64)
        dense_id[frequent] = np.arange(frequent.size)
        chosen = dense_id[column] >= 0
        for start in range(0, frequent.size, BLOCK):
            m = np.zeros((n, min(BLOCK, frequent.size - start)), dtype=np.float32)
            ids = dense_id[column[chosen]] - start
            inside = (ids >= 0) & (ids < m.shape[1])
            m[doc[chosen][inside], ids[inside]] = 1.0
            out += np.rint(m @ m.T).astype(np.int32)
    # rare shingles (2 <= df < DENSE_DF): every pair of their documents, counted
    rare = (df[column] >= 2) & (df[column] < DENSE_DF)
    order = np.argsort(column[rare], kind="stable")
    docs = doc[rare][order]
    cols = column[rare][order]
    starts = np.flatnonzero(np.append(True, cols[1:] != cols[:-1]))
    sizes = np.diff(np.append(starts, cols.size))
    for size in np.unique(sizes).tolist():
        groups = starts[sizes == size]
        members = docs[groups[:, None] + np.arange(size)]  # (g, size), ascending documents
        i, j = np.triu_indices(size, k=1)
        a = members[:, i].ravel()
        b = members[:, j].ravel()
        flat = np.bincount(a * n + b, minlength=n * n)
        out += flat.reshape(n, n).astype(np.int32)
    # shingles in one document only: the diagonal (the set sizes)
    np.fill_diagonal(out, [s.size for s in sets])
    return out


def jaccard_matrix(sets: list[NDArray[np.uint64]]) -> NDArray[np.float64]:
    """(n, n) Jaccard similarity of every pair of sets (upper triangle; 0 for two empty sets)."""
    inter = intersections(sets).astype(np.float64)
    sizes = np.array([s.size for s in sets], dtype=np.float64)
    union = sizes[:, None] + sizes[None, :] - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def jaccard_pairs(
    sets: list[NDArray[np.uint64]],
) -> tuple[NDArray[np.intp], NDArray[np.intp], NDArray[np.float64]]:
    """(i, j, Jaccard) of every pair i < j with Jaccard >= min(THRESHOLDS)."""
    jac = jaccard_matrix(sets)
    i, j = np.nonzero(np.triu(jac >= min(THRESHOLDS), k=1))
    return i, j, jac[i, j]


def distances(fps: NDArray[np.uint64]) -> NDArray[np.uint8]:
    """(n, n) Hamming distances."""
    return np.bitwise_count(fps[:, None] ^ fps[None, :])


def idf_fingerprints(texts: list[str]) -> NDArray[np.uint64]:
    df = DocumentFrequency()
    hashes = [shingle_hashes(t) for t in texts]
    for h in hashes:
        df.add_document(h)
    out = np.zeros(len(texts), dtype=np.uint64)
    for i, h in enumerate(hashes):
        value = simhash_weighted(h, df.idf(h))
        out[i] = 0 if value is None else value
    return out


def table(
    name: str,
    fps: NDArray[np.uint64],
    jac: NDArray[np.float64],
    truth: dict[float, set[tuple[int, int]]],
    max_k: int,
) -> list[str]:
    dist = distances(fps)
    rows = []
    for k in range(max_k + 1):
        i, j = np.nonzero(np.triu(dist <= k, k=1))
        found = set(zip(i.tolist(), j.tolist(), strict=True))
        median = f"{float(np.median(jac[i, j])):.2f}" if found else "n/a"
        cells = [name, str(k), f"{len(found):,}", median]
        for threshold in THRESHOLDS:
            good = found & truth[threshold]
            precision = f"{len(good) / len(found):.2f}" if found else "n/a"
            recall = f"{len(good) / len(truth[threshold]):.2f}" if truth[threshold] else "n/a"
            cells += [precision, recall]
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpora",
        type=Path,
        default=Path(__file__).resolve().parent.parent.parent / "shared" / "corpora",
    )
    parser.add_argument("--max-k", type=int, default=6)
    args = parser.parse_args()
    for corpus in CORPORA:
        path = args.corpora / corpus
        if not path.exists():
            print(f"skipped {path}: not found", file=sys.stderr)
            continue
        started = time.monotonic()
        _keys, texts = load(path)
        sets = [np.unique(shingle_hashes(t)) for t in texts]
        jac = jaccard_matrix(sets)
        truth = {}
        for threshold in THRESHOLDS:
            i, j = np.nonzero(np.triu(jac >= threshold, k=1))
            truth[threshold] = set(zip(i.tolist(), j.tolist(), strict=True))
        truth_seconds = time.monotonic() - started
        plain = np.array([simhash(t) or 0 for t in texts], dtype=np.uint64)
        weighted = idf_fingerprints(texts)
        n = len(texts)
        print(
            f"\n**{corpus}**: {n:,} documents, {n * (n - 1) // 2:,} pairs; "
            f"{len(truth[0.8]):,} pairs with Jaccard >= 0.8, {len(truth[0.9]):,} with >= 0.9 "
            f"(ground truth in {truth_seconds:.0f} s)\n"
        )
        print(
            "| SimHash | k | pairs within k | median Jaccard | precision J>=0.8 "
            "| recall J>=0.8 | precision J>=0.9 | recall J>=0.9 |"
        )
        print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
        rows = table("plain", plain, jac, truth, args.max_k)
        rows += table("IDF", weighted, jac, truth, args.max_k)
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
