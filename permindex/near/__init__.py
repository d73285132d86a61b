"""Near-duplicates over a whole collection, offline: ``permindex dedup`` and its HTML report.

- :mod:`permindex.near.result`: what a run is asked (:class:`DedupOptions`) and finds.
- :mod:`permindex.near.dedup`: read, fingerprint (in worker processes), join, cluster.
- :mod:`permindex.near.minhash`, :mod:`permindex.near.jaccard`: the Jaccard mode
  (``--method minhash``): MinHash-LSH candidates, each verified by exact Jaccard.
- :mod:`permindex.near.outputs`: write the report folder (TSV, JSON, summary, report.html).
- :mod:`permindex.near.report`: the self-contained ``report.html``.
"""
