"""Columnar inputs and outputs: Arrow columns as fingerprints and keys (:mod:`permindex.io.arrow`)
and Parquet files and datasets as document sources and as outputs (:mod:`permindex.io.parquet`).
pyarrow is an optional extra (``pip install '.[parquet]'``): it is imported on first use,
never by ``import permindex``.
"""
