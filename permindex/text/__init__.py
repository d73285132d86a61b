"""The text layer: documents in (JSONL, folders, HTML), their SimHash fingerprints, IDF weights.

- :mod:`permindex.text.documents`: input readers and the visible text of HTML.
- :mod:`permindex.text.fingerprint`: SimHash of texts, weighted features and dense vectors
  (Charikar 2002, section 3); :func:`~permindex.text.fingerprint.simhash_many` for batches.
- :mod:`permindex.text.simhash_kernels`, :mod:`permindex.text.xxh3_kernels`: the compiled
  (numba) SimHash and XXH3-64 behind it, imported on first use.
- :mod:`permindex.text.weights`: document frequencies of shingles in hashed buckets.

Imports only :mod:`permindex.errors`, :mod:`permindex.index.hamming` (the fingerprint's range),
:mod:`permindex.index.keys.rule` (the key rule) and :mod:`permindex.jit` (the kernels).
"""
