"""The index of a Jaccard collection: documents as MinHash sketches, near-duplicates by LSH
bands verified by Jaccard similarity (:class:`JaccardIndex`, :class:`JaccardMatch`,
:class:`MinHashSketch`). Built on the offline Jaccard mode's signatures, bands and join
(:mod:`permindex.near.minhash`, :mod:`permindex.near.jaccard`)."""

from __future__ import annotations

from permindex.index.jaccard.index import JaccardIndex, JaccardMatch, signature_error
from permindex.index.jaccard.sketch import MinHashSketch, Verify

__all__ = ["JaccardIndex", "JaccardMatch", "MinHashSketch", "Verify", "signature_error"]
