"""Batch queries of a corpus against a new batch (``permindex dedup NEW --against CORPUS``;
Manku et al. 2007, section 3.2): the new batch's tables are built once (an
:class:`permindex.Index` of its fingerprints) and the corpus is scanned block by block, each
block's fingerprints looked up with :meth:`~permindex.Index.query_many`, no shuffle and no
join of the corpus with itself (:func:`against_pairs`). The Dask engine runs the same
:func:`block_pairs` on its workers (:mod:`permindex.distributed.against`).

The Jaccard mode (``--method minhash``) is the same scan with the new batch's LSH bands in
place of the tables: each corpus block's shingle sets and signatures are made as the new
batch's were, its band keys looked up among the new batch's distinct sets and every candidate
verified exactly (:meth:`permindex.near.jaccard.JaccardDuplicates.matches`,
:func:`jaccard_block_pairs`), so every pair has J >= the threshold.

Output: every (new key, corpus key, distance) within k (the Jaccard mode: with J >= the
threshold, the distance in 1/10^4 of Jaccard, :data:`permindex.near.jaccard.SCALE`), sorted,
each once (a corpus key read twice with the same fingerprint, or shingle set, gives one line);
pairs of two new documents are not among them (they are in the new batch's own report). And
the new documents with no match (:func:`write_unmatched`: ``new_unmatched.tsv`` in the report
folder).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final

import numpy as np

from permindex.index import Index
from permindex.index.join.clusters import design_for
from permindex.near.dedup import (
    Documents,
    TaskDocuments,
    fingerprint_tasks,
    raise_failure,
    run_task,
)
from permindex.near.jaccard import JaccardDuplicates
from permindex.near.minhash import band_keys
from permindex.near.result import DedupOptions, DedupResult
from permindex.text.documents import format_fingerprint, tsv_field

__all__ = [
    "UNMATCHED_FILE",
    "AgainstPair",
    "against_pairs",
    "block_pairs",
    "corpus_options",
    "jaccard_block_pairs",
    "new_index",
    "unmatched",
    "write_unmatched",
]

#: The report folder's file of the new documents with no match in the corpus:
#: ``key<TAB>fingerprint`` per document (the Jaccard mode: the set digest), sorted by key.
UNMATCHED_FILE: Final = "new_unmatched.tsv"

AgainstPair = tuple[str, str, int]  # (new key, corpus key, distance)


def new_index(result: DedupResult) -> Index:
    """An :class:`~permindex.Index` of the new batch's documents (``result.near``: each key
    once) on the design that answers ``result.options.k``."""
    k = result.options.k
    index = Index(k=k, design=design_for(k), expected_size=max(1, len(result.near.keys)))
    index.add_many(result.near.keys, result.near.fingerprints)
    return index


def block_pairs(index: Index, documents: Documents, k: int) -> list[AgainstPair]:
    """The (new key, corpus key, distance) pairs within ``k`` of one block of corpus
    ``documents`` (those with a fingerprint) against ``index``: one
    :meth:`~permindex.Index.query_many` (columns) for the block."""
    valid = np.flatnonzero(documents.has_fingerprint)
    if valid.size == 0:
        return []
    found = index.query_many(documents.fingerprints[valid], k, columns=True)
    counts = np.diff(found.offsets)
    corpus_keys = documents.keys
    owners = np.repeat(valid, counts).tolist()
    return [
        (new, corpus_keys[at], d)
        for new, at, d in zip(found.keys, owners, found.distances.tolist(), strict=True)
    ]


def jaccard_block_pairs(near: JaccardDuplicates, read: TaskDocuments) -> list[AgainstPair]:
    """The (new key, corpus key, distance) pairs with Jaccard >= ``near.threshold`` of one
    block of corpus documents ``read`` by a "minhash" task (its shingle sets and signatures,
    for the documents with a set) against the new batch ``near``
    (:meth:`~permindex.near.jaccard.JaccardDuplicates.matches`)."""
    if read.sets is None or read.signatures is None or len(read.sets) == 0:
        return []
    rows, positions, distance = near.matches(read.sets, band_keys(read.signatures, near.shape))
    valid = np.flatnonzero(read.documents.has_fingerprint)  # the rows' documents
    corpus_keys, new_keys = read.documents.keys, near.keys
    return [
        (new_keys[p], corpus_keys[at], d)
        for p, at, d in zip(
            positions.tolist(), valid[rows].tolist(), distance.tolist(), strict=True
        )
    ]


def corpus_options(options: DedupOptions, corpus: str) -> DedupOptions:
    """The options that read the corpus: those of the new batch with ``corpus`` as source."""
    from dataclasses import replace

    return replace(options, source=corpus)


def against_pairs(result: DedupResult, corpus: str) -> list[AgainstPair]:
    """Every (new key, corpus key, distance) within ``result.options.k`` between the new batch
    (``result``, from :func:`permindex.near.dedup.run_dedup`) and the documents of ``corpus``
    (read and fingerprinted as the new batch was, block by block in this process), sorted, each
    once. In the Jaccard mode (``result.near`` a
    :class:`~permindex.near.jaccard.JaccardDuplicates`) every pair with J >=
    ``result.options.threshold``, found by its bands and verified exactly
    (:func:`jaccard_block_pairs`). Memory: the new batch's index (its shingle sets and band
    keys), one block of the corpus and the pairs.

    Raises:
        InvalidArgumentError: as :func:`~permindex.near.dedup.run_dedup` for the corpus.
    """
    from permindex.io.parquet import open_documents

    options = corpus_options(result.options, corpus)
    near = result.near
    index = None if isinstance(near, JaccardDuplicates) else new_index(result)
    reader = open_documents(
        corpus,
        id_field=options.id_field,
        text_field=options.text_field,
        fingerprint_field=options.fingerprint_field,
    )
    found: set[AgainstPair] = set()
    for task in fingerprint_tasks(reader, options):
        read = raise_failure(run_task(*task))
        if index is None:
            assert isinstance(near, JaccardDuplicates)
            found.update(jaccard_block_pairs(near, read))
        else:
            found.update(block_pairs(index, read.documents, options.k))
    return sorted(found)


def unmatched(result: DedupResult, pairs: Iterable[AgainstPair]) -> list[int]:
    """Positions (into ``result.near.keys``) of the new documents with no pair, sorted by
    key."""
    matched = {new for new, _, _ in pairs}
    keys = result.near.keys
    return sorted((i for i, key in enumerate(keys) if key not in matched), key=keys.__getitem__)


def write_unmatched(result: DedupResult, positions: Sequence[int], folder: Path) -> Path:
    """Write :data:`UNMATCHED_FILE` in ``folder``: ``key<TAB>fingerprint`` (16 hex digits; in
    the Jaccard mode the set digest, as ``exact_duplicates.tsv`` gives it) per position, in the
    given order."""
    path = folder / UNMATCHED_FILE
    keys, fps = result.near.keys, result.near.fingerprints
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        out.writelines(
            f"{tsv_field(keys[i])}\t{format_fingerprint(int(fps[i]))}\n" for i in positions
        )
    return path
