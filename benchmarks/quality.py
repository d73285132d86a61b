"""How well near-duplicate pairs match pairs of documents whose word 3-shingle sets are
similar, by Jaccard band: SimHash within k bits (k = 0..8, multiset and set votes, and IDF
weights with ``--idf``) and the Jaccard mode of ``permindex dedup`` (MinHash-LSH, verified), on
the shared corpora and on a synthetic corpus of edited documents.

Run from the repository root (a minute or two; writes Markdown tables to stdout)::

    .venv/bin/python benchmarks/quality.py [--corpora ../shared/corpora] [--max-k 8] [--idf]

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

Recall in a band: the share of the pairs whose Jaccard lies in the band that the method
reports. Precision: the share of the method's pairs with Jaccard >= 0.8 (the Jaccard mode at
threshold t reports only pairs >= t, verified: its precision against t is 1.0 by construction).

SimHash pairs: every pair within k bits, by brute force over all pairs. Plain SimHash is the
default fingerprint (``vote="multiset"``); ``set`` votes each distinct shingle once; IDF weighs
each shingle by ln((1 + N) / (1 + df)) + 1 over the corpus (``dedup --weights idf``).

The synthetic corpus (:func:`edited_corpus`): base documents of 100 to 800 words drawn from a
Zipf-like law over 20,000 made-up words, each with edited copies (a share of 0 to 8 % of the
words replaced, inserted or deleted, in place), and unrelated documents.
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

from permindex.near.jaccard import JaccardDuplicates, ShingleSets
from permindex.near.minhash import band_keys, choose_bands, signatures
from permindex.text.fingerprint import VOTES, shingle_hashes, simhash_many, simhash_weighted
from permindex.text.weights import DocumentFrequency

DENSE_DF = 64  # shingles in at least this many documents go to the dense product
BLOCK = 4096  # dense columns per matrix product
CORPORA = ("libstdc++-12-doc.jsonl.gz", "postgresql-doc-15.jsonl.gz")
THRESHOLDS = (0.7,)  # the least Jaccard of a band
PRECISION_AT = 0.8  # precision: the share of a method's pairs with Jaccard >= this
#: The Jaccard bands of the recall columns: [low, high).
BANDS = ((0.98, 1.01), (0.95, 0.98), (0.90, 0.95), (0.85, 0.90), (0.80, 0.85), (0.70, 0.80))


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


def edited_corpus(
    seed: int = 2007, bases: int = 300, copies: int = 4, unrelated: int = 1500
) -> list[str]:
    """The synthetic corpus of edited documents (see the module docstring), texts only."""
    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"{chr(97 + i % 26)}{i:05d}" for i in range(20_000)], dtype=object)
    weights = 1.0 / (np.arange(vocabulary.size) + 10.0)
    cdf = np.cumsum(weights / weights.sum())

    def draw(size: int) -> list[str]:
        return vocabulary[np.minimum(np.searchsorted(cdf, rng.random(size)), 19_999)].tolist()

    texts: list[str] = []
    for _ in range(bases):
        words = draw(int(rng.integers(100, 801)))
        texts.append(" ".join(words))
        for _ in range(copies):
            edited = list(words)
            for _ in range(round(len(words) * rng.uniform(0.0, 0.08))):
                at = int(rng.integers(0, len(edited)))
                kind = int(rng.integers(0, 3))
                if kind == 0:
                    edited[at] = draw(1)[0]
                elif kind == 1:
                    edited.insert(at, draw(1)[0])
                elif len(edited) > 10:
                    del edited[at]
            texts.append(" ".join(edited))
    texts += [" ".join(draw(int(rng.integers(100, 801)))) for _ in range(unrelated)]
    return texts


def cells(
    found: NDArray[np.bool_], jac: NDArray[np.float64], bands: list[NDArray[np.bool_]]
) -> list[str]:
    """pairs, precision, recall per band of the pairs ``found`` ((n, n) upper triangle)."""
    count = int(found.sum())
    good = int((found & (jac >= PRECISION_AT)).sum())
    out = [f"{count:,}", f"{good / count:.2f}" if count else "n/a"]
    for band in bands:
        total = int(band.sum())
        out.append(f"{int((found & band).sum()) / total:.2f}" if total else "n/a")
    return out


def simhash_rows(
    name: str,
    fps: NDArray[np.uint64],
    jac: NDArray[np.float64],
    bands: list[NDArray[np.bool_]],
    max_k: int,
) -> list[str]:
    dist = distances(fps)
    upper = np.triu(np.ones(dist.shape, dtype=bool), k=1)
    return [
        "| "
        + " | ".join([f"SimHash, {name}", f"k = {k}", *cells((dist <= k) & upper, jac, bands)])
        + " |"
        for k in range(max_k + 1)
    ]


def minhash_rows(
    sets: ShingleSets, jac: NDArray[np.float64], bands: list[NDArray[np.bool_]], threshold: float
) -> tuple[str, str]:
    """The Jaccard mode's row, and a note of its work (candidates, seconds)."""
    started = time.monotonic()
    signature = signatures(sets.values, sets.offsets, 128)
    shape = choose_bands(threshold, 128)
    keys = [f"{i:07d}" for i in range(len(sets))]  # positions in key order
    near = JaccardDuplicates(keys, sets, band_keys(signature, shape), threshold, shape)
    a, b, _ = near.pairs
    seconds = time.monotonic() - started
    found = np.zeros(jac.shape, dtype=bool)
    found[np.minimum(a, b), np.maximum(a, b)] = True
    row = (
        "| "
        + " | ".join(
            [
                f"MinHash-LSH, {shape.bands} x {shape.rows}",
                f"J >= {threshold}",
                *cells(found, jac, bands),
            ]
        )
        + " |"
    )
    note = (
        f"J >= {threshold}: {near.candidates:,} candidates from the bands, "
        f"{near.candidates_verified:,} verified by exact Jaccard "
        f"({near.candidates_verified / len(sets):.2f} per document), {seconds:.1f} s"
    )
    return row, note


def report(name: str, texts: list[str], max_k: int, idf: bool) -> None:
    started = time.monotonic()
    sets = [np.unique(shingle_hashes(t)) for t in texts]
    jac = jaccard_matrix(sets)
    n = len(texts)
    upper = np.triu(np.ones((n, n), dtype=bool), k=1)
    bands = [upper & (jac >= low) & (jac < high) for low, high in BANDS]
    truth_seconds = time.monotonic() - started
    at_08 = int((upper & (jac >= 0.8)).sum())
    sizes = ", ".join(
        f"{int(b.sum()):,} in [{low:.2f}, {min(high, 1.0):.2f}{']' if high > 1 else ')'}"
        for b, (low, high) in zip(bands, BANDS, strict=True)
    )
    print(
        f"\n**{name}**: {n:,} documents, {n * (n - 1) // 2:,} pairs; {at_08:,} with Jaccard >= 0.8 "
        f"({sizes}); ground truth in {truth_seconds:.0f} s\n"
    )
    labels = [f"{low:.2f}-{high:.2f}" if high <= 1 else f">= {low:.2f}" for low, high in BANDS]
    print("| method | k or threshold | pairs | precision J>=0.8 | " + " | ".join(labels) + " |")
    print("| --- | --- | ---: | ---: | " + " | ".join("---:" for _ in labels) + " |")
    rows: list[str] = []
    for vote in VOTES:
        fps, _ = simhash_many(texts, vote=vote)
        rows += simhash_rows(f"{vote} vote", fps, jac, bands, max_k)
    if idf:
        rows += simhash_rows("IDF", idf_fingerprints(texts), jac, bands, max_k)
    notes = []
    for threshold in (0.8, 0.7):
        row, note = minhash_rows(ShingleSets.of(sets), jac, bands, threshold)
        rows.append(row)
        notes.append(note)
    print("\n".join(rows))
    print("\nJaccard mode: " + "; ".join(notes) + ".")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--corpora",
        type=Path,
        default=Path(__file__).resolve().parent.parent.parent / "shared" / "corpora",
    )
    parser.add_argument("--max-k", type=int, default=8)
    parser.add_argument("--idf", action="store_true", help="also IDF-weighted SimHash")
    args = parser.parse_args()
    for corpus in CORPORA:
        path = args.corpora / corpus
        if not path.exists():
            print(f"skipped {path}: not found", file=sys.stderr)
            continue
        _keys, texts = load(path)
        report(corpus, texts, args.max_k, args.idf)
    report("synthetic edited corpus (edited_corpus())", edited_corpus(), args.max_k, args.idf)
    return 0


if __name__ == "__main__":
    sys.exit(main())
