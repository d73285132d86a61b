"""The text layer: documents in (JSONL, folders, HTML), their SimHash fingerprints, IDF weights.

- :mod:`permindex.text.documents`: input readers and the visible text of HTML.
- :mod:`permindex.text.fingerprint`: SimHash of texts, weighted features and dense vectors
  (Charikar 2002, section 3).
- :mod:`permindex.text.weights`: document frequencies of shingles in hashed buckets.

Imports only :mod:`permindex.errors`, :mod:`permindex.index.hamming` (the fingerprint's range)
and :mod:`permindex.index.keys` (the key rule).
"""
