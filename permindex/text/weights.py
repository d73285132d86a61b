"""Feature weights over a collection: the inverse document frequency (IDF) of shingles, counted
in hashed buckets (:class:`DocumentFrequency`, whose docstring gives the formula and the memory
bound), for the weighted SimHash (:func:`permindex.text.fingerprint.simhash_weighted`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError

__all__ = ["DEFAULT_BUCKET_BITS", "DocumentFrequency", "chunk_bucket_counts"]

#: Default number of bucket bits: 2^24 buckets of uint32, 64 MiB.
DEFAULT_BUCKET_BITS: Final = 24


def _check_bucket_bits(bucket_bits: int) -> None:
    if isinstance(bucket_bits, bool) or not isinstance(bucket_bits, int):
        raise TypeError(f"bucket_bits must be an int, not {type(bucket_bits).__name__}")
    if not 1 <= bucket_bits <= 32:
        raise InvalidArgumentError(
            f"bucket_bits must be in [1, 32], got {bucket_bits}", value=bucket_bits
        )


def chunk_bucket_counts(
    hashes_per_document: Sequence[NDArray[np.uint64]], bucket_bits: int = DEFAULT_BUCKET_BITS
) -> tuple[NDArray[np.uint32], NDArray[np.uint32]]:
    """For the shingle hashes of a chunk of documents, the distinct buckets and, for each, the
    number of documents of the chunk with at least one shingle in it: ``(buckets, counts)``,
    both (m,) uint32, buckets ascending. A document counts once per bucket however many of its
    shingles fall in it."""
    _check_bucket_bits(bucket_bits)
    shift = np.uint64(64 - bucket_bits)
    parts: list[NDArray[np.uint64]] = []
    for number, hashes in enumerate(hashes_per_document):
        if hashes.size:
            buckets = hashes >> shift
            # one value per (document, bucket): the document number above the bucket bits
            parts.append(np.unique(buckets) | np.uint64(number << bucket_bits))
    if not parts:
        empty = np.zeros(0, dtype=np.uint32)
        return empty, empty.copy()
    per_document = np.concatenate(parts) & np.uint64((1 << bucket_bits) - 1)
    buckets, counts = np.unique(per_document, return_counts=True)
    return buckets.astype(np.uint32), counts.astype(np.uint32)


class DocumentFrequency:
    """Document frequencies of shingles over a collection, by bucket of shingle hashes (see the
    below), and the IDF weights they give.

    Attributes:
        bucket_bits: bits of the shingle hash that choose a bucket (2^bucket_bits buckets).
        documents: N, the documents counted.
        counts: ((2^bucket_bits,) uint32) documents with a shingle in each bucket.

    Manku, Jain & Das Sarma 2007 (section 2) weight each feature of a page by its IDF, so that words
    every page carries (navigation, boilerplate) vote less than the words that make a page what it
    is. IDF is Spärck Jones's (1972) inverse document frequency, smoothed as scikit-learn's
    ``TfidfTransformer`` does by default::

        idf(s) = ln((1 + N) / (1 + df(s))) + 1

    with N documents and df(s) the number of documents containing shingle s at least once. It is
    >= 1, so a document made only of boilerplate still has a fingerprint, and a shingle never seen
    (df = 0) gets the largest weight, ln(1 + N) + 1. A shingle that occurs several times in a
    document votes each time, with its IDF each time (TF-IDF).

    Memory: the document frequencies are kept per *bucket* of shingle hashes, not per shingle: the
    top :attr:`DocumentFrequency.bucket_bits` bits (default 24, 16.7 million buckets of uint32: 64
    MiB) of each shingle's XXH3-64 hash choose its bucket. 10^6 web pages hold on the order of 10^8
    distinct shingles, whose exact counts would need gigabytes; with buckets, shingles that share
    one share a document frequency. A collision can only raise a shingle's df (lower its weight).

    Counting is split so that it can run in worker processes: :func:`chunk_bucket_counts` turns the
    shingle hashes of a chunk of documents into (bucket, number of documents) pairs, and
    :meth:`DocumentFrequency.add_counts` adds them up in the parent.
    """

    def __init__(self, bucket_bits: int = DEFAULT_BUCKET_BITS) -> None:
        _check_bucket_bits(bucket_bits)
        self.bucket_bits = bucket_bits
        self.documents = 0
        self.counts = np.zeros(1 << bucket_bits, dtype=np.uint32)

    def add_document(self, hashes: NDArray[np.uint64]) -> None:
        """Count one document from the hashes of its shingles (:func:`shingle_hashes`)."""
        buckets, counts = chunk_bucket_counts([hashes], self.bucket_bits)
        self.add_counts(buckets, counts, documents=1)

    def add_counts(
        self, buckets: NDArray[np.uint32], counts: NDArray[np.uint32], *, documents: int
    ) -> None:
        """Add the result of :func:`chunk_bucket_counts` for ``documents`` documents."""
        self.counts[buckets] += counts  # buckets are distinct: no repeated index
        self.documents += documents

    def idf(self, hashes: NDArray[np.uint64]) -> NDArray[np.float64]:
        """The IDF weight of each shingle hash: ``ln((1 + N) / (1 + df)) + 1``, (m,) float64."""
        df = self.counts[hashes >> np.uint64(64 - self.bucket_bits)].astype(np.float64)
        weights: NDArray[np.float64] = np.log((1.0 + self.documents) / (1.0 + df)) + 1.0
        return weights

    def used_buckets(self) -> int:
        """Buckets holding at least one shingle."""
        return int(np.count_nonzero(self.counts))
