"""The near-duplicate join on a Dask cluster (``pip install '.[dask]'``): from a Dask
dataframe of (key, fingerprint) — or (key, text) — to pairs, exact-duplicate groups, clusters and
keep/drop as Dask dataframes (:func:`near_duplicates`), with the local ``dedup``'s definitions
and results; batch queries of a corpus against a new batch (:mod:`permindex.distributed.against`).

Modules: :mod:`~permindex.distributed.join` (the shuffle join), :mod:`~permindex.distributed
.components` (connected components), :mod:`~permindex.distributed.dedup` (the frames API),
:mod:`~permindex.distributed.engine` (the ``dedup --engine dask`` command's work).
Importing this package needs pandas and dask (:func:`require_dask` says what to install).
"""

from __future__ import annotations

from permindex.distributed.dedup import (
    DistributedNearDuplicates,
    fingerprint_column,
    fingerprint_texts,
    near_duplicates,
    with_row_ids,
)

__all__ = [
    "DistributedNearDuplicates",
    "fingerprint_column",
    "fingerprint_texts",
    "near_duplicates",
    "with_row_ids",
]
