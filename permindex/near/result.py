"""What an offline dedup run is asked and what it finds: :class:`DedupOptions` (every option of
``permindex dedup``, checked in one place) and :class:`DedupResult` (the join's output, read by
the report folder writer and the HTML report). Data only: no I/O, no worker processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.join.clusters import KEEP_RULES, KeepRule, NearDuplicates
from permindex.near.minhash import check_permutations, check_threshold
from permindex.text.extract import Extract, check_extract
from permindex.text.fingerprint import VOTES, Tokenizer, Vote, check_shingle_options

__all__ = ["MAX_K", "METHODS", "WEIGHTS", "DedupOptions", "DedupResult", "Method", "Weights"]

Weights = Literal["none", "idf"]
Method = Literal["simhash", "minhash"]
#: The methods of ``--method``: SimHash within k bits, or Jaccard by MinHash-LSH, verified.
METHODS: Final = ("simhash", "minhash")
#: The weightings of ``--weights``.
WEIGHTS: Final = ("none", "idf")
#: The largest k of ``dedup`` (design (10 blocks, 2 leading), 45 tables, 12-bit prefixes).
MAX_K: Final = 8


@dataclass(frozen=True)
class DedupOptions:
    """What ``permindex dedup`` does (every option of the command).

    Attributes:
        source: a JSONL file (gzip or not), a folder, a Parquet file or dataset folder
            (:func:`permindex.io.parquet.open_documents`), or ``"-"`` (JSONL on standard input).
        out_dir: the report folder, created if missing; files in it are overwritten.
        k: largest Hamming distance of a near-duplicate, bits (0..:data:`MAX_K`).
        keep: the keep rule of :func:`permindex.index.join.clusters.keep_per_cluster`.
        jobs: worker processes (1: fingerprint in this process). They start by forkserver
            (spawn where there is none), which imports the caller's main module again: a script
            that calls :func:`permindex.near.dedup.run_dedup` with ``jobs > 1`` needs the usual
            ``if __name__ == "__main__":`` guard.
        weights: ``"none"`` (plain SimHash, the default fingerprint) or ``"idf"``.
        tokenizer, shingle_size, min_words: as :func:`permindex.text.fingerprint.simhash`.
        id_field, text_field, fingerprint_field: the JSONL fields (Parquet columns) of the
            key, the text and the fingerprint.
        examples: example pairs per distance in the HTML report.
        method: ``"simhash"`` (pairs within k bits) or ``"minhash"`` (pairs of Jaccard
            similarity >= ``threshold`` of their shingle sets: :mod:`permindex.near.jaccard`;
            ``k`` and ``weights`` are then unused).
        threshold: the least Jaccard similarity of a pair (minhash), in (0, 1].
        permutations: MinHash signature values per document (minhash), 1..4096.
        extract: the text of an HTML file of a folder: ``"visible"`` (default) or ``"main"``
            (:mod:`permindex.text.extract`; needs the ``extract`` extra).
        vote: how shingles vote in the SimHash fingerprint (simhash):
            ``"multiset"`` (default) or ``"set"`` (:func:`permindex.text.fingerprint.simhash`).
    """

    source: str
    out_dir: Path = Path("permindex-report")
    k: int = 3
    keep: KeepRule = "first"
    jobs: int = 1
    weights: Weights = "none"
    tokenizer: Tokenizer = "words"
    shingle_size: int = 3
    min_words: int = 0
    id_field: str = "id"
    text_field: str = "text"
    fingerprint_field: str = "fingerprint"
    examples: int = 3
    method: Method = "simhash"
    threshold: float = 0.8
    permutations: int = 128
    vote: Vote = "multiset"
    extract: Extract = "visible"

    def check(self) -> None:
        """Check every option, in the order k, keep, weights, the shingle options
        (:func:`permindex.text.fingerprint.check_shingle_options`), jobs and examples, then
        method, threshold, permutations, vote and extract.

        Raises:
            InvalidArgumentError: naming the first bad option.
        """
        if not 0 <= self.k <= MAX_K:
            raise InvalidArgumentError(f"k must be in 0..{MAX_K}, got {self.k}", value=self.k)
        if self.keep not in KEEP_RULES:
            raise InvalidArgumentError(f"unknown keep rule {self.keep!r}", value=self.keep)
        if self.weights not in WEIGHTS:
            raise InvalidArgumentError(f"unknown weights {self.weights!r}", value=self.weights)
        check_shingle_options(self.shingle_size, self.tokenizer, self.min_words)
        if self.jobs < 1 or self.examples < 0:
            raise InvalidArgumentError(
                f"jobs must be >= 1 and examples >= 0, got jobs={self.jobs}, "
                f"examples={self.examples}"
            )
        if self.method not in METHODS:
            raise InvalidArgumentError(f"unknown method {self.method!r}", value=self.method)
        check_threshold(self.threshold)
        check_permutations(self.permutations)
        if self.vote not in VOTES:
            raise InvalidArgumentError(f"unknown vote {self.vote!r}", value=self.vote)
        check_extract(self.extract)


@dataclass
class DedupResult:
    """What :func:`permindex.near.dedup.run_dedup` found.

    Attributes:
        options: the options it ran with.
        near: pairs, clusters, flags and exact groups (positions into ``near.keys``, the
            documents that have a fingerprint, each key once).
        ordinals: ((n,) int64) each of those documents' position in the input (0-based).
        lengths: ((n,) int64) characters of their text (0 when the input gave a fingerprint).
        kept: per cluster (in ``near.cluster_positions()`` order) the position kept.
        documents: documents read.
        too_short: (key, tokens) of the texts too short to fingerprint, in input order.
        skipped_by_reason: folder entries skipped, by reason.
        repeated_keys: documents whose key occurred again later in the input.
        seconds: wall time of each stage in this process, seconds: "read" (waiting for the
            input's next block: decompressing it here or waiting for the child process that
            does, listing a folder), "fingerprint" (the rest of the passes over the input:
            waiting for the workers that parse and fingerprint, collecting their results),
            "join" (the pairs), "cluster" (components and the keep rule), and later "write"
            (:func:`~permindex.near.dedup.write_outputs`). Reading and the workers overlap, so
            "fingerprint" is the part of their work that reading did not hide.
        cpu_seconds: CPU time of the workers (and of this process for the chunks it did
            itself), seconds, summed: "parse" (JSONL lines to documents) and "fingerprint".
    """

    options: DedupOptions
    near: NearDuplicates
    ordinals: NDArray[np.int64]
    lengths: NDArray[np.int64]
    kept: list[int]
    documents: int
    too_short: list[tuple[str, int]]
    skipped_by_reason: dict[str, int]
    repeated_keys: int
    seconds: dict[str, float]
    source_kind: str = "jsonl"
    reread_source: str | None = None  # where the texts can be read again (a file or folder)
    design: tuple[int, int] = (4, 1)
    spool: Path | None = None
    cpu_seconds: dict[str, float] = field(default_factory=dict)

    def dropped(self) -> list[tuple[int, int]]:
        """(position dropped, position kept instead) for every document to drop, by cluster."""
        out: list[tuple[int, int]] = []
        for members, kept in zip(self.near.cluster_positions(), self.kept, strict=True):
            out.extend((int(p), kept) for p in members.tolist() if p != kept)
        return out
