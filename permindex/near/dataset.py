"""Near-duplicate rows of a table in memory: :func:`dedup_dataset` for a Hugging Face
``datasets.Dataset``, a pandas ``DataFrame`` or a ``pyarrow.Table`` (or any object with named
columns), the ``permindex dedup`` decision row by row. None of those packages is imported here:
the table is read through the few methods they share.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.join.clusters import (
    KEEP_RULES,
    KeepRule,
    NearDuplicates,
    design_for,
    keep_per_cluster,
)
from permindex.near.result import MAX_K
from permindex.text.fingerprint import simhash_many

__all__ = ["DatasetDedup", "dedup_dataset"]


@dataclass(frozen=True, eq=False)
class DatasetDedup:
    """What :func:`dedup_dataset` decided for each of the n rows of a table.

    Attributes:
        keep: (n,) bool: True for the rows to keep (every row in no cluster, and one row per
            cluster), False for the rows to drop: ``dataset.select(result.keep.nonzero()[0])``,
            ``df[result.keep]``, ``table.filter(result.keep)`` keep them.
        cluster: (n,) int64: the row's cluster, 0 to ``clusters - 1``, numbered as
            ``permindex dedup``'s ``clusters.tsv`` numbers them from 1 (largest first, then by
            the smallest id); -1 for a row in no cluster (no near-duplicate, or too short).
        kept_row: (n,) int64: for a row in a cluster, the position of the row kept for it (itself
            when it is the kept one); -1 for a row in no cluster.
        fingerprints: (n,) uint64: each row's SimHash (0 where ``has_fingerprint`` is False).
        has_fingerprint: (n,) bool: False for a text too short to fingerprint (fewer than 3
            words): such a row is kept and in no cluster.
        k: the largest Hamming distance of a near-duplicate, bits.
        keep_rule: the rule that picked each cluster's kept row.

    Examples:
        >>> import pandas as pd, permindex
        >>> page = "the quick brown fox jumps over the lazy dog"
        >>> texts = [page, page, "tides come in twice a day"]
        >>> frame = pd.DataFrame({"id": ["a", "b", "c"], "text": texts})
        >>> import permindex
        >>> result = permindex.dedup_dataset(frame, id_column="id")
        >>> frame[result.keep]["id"].tolist(), result.kept_row.tolist(), result.clusters
        (['a', 'c'], [0, 0, -1], 1)
    """

    keep: NDArray[np.bool_]
    cluster: NDArray[np.int64]
    kept_row: NDArray[np.int64]
    fingerprints: NDArray[np.uint64]
    has_fingerprint: NDArray[np.bool_]
    k: int
    keep_rule: KeepRule

    @property
    def clusters(self) -> int:
        """The number of clusters (each of two rows or more)."""
        return int(self.cluster.max(initial=-1)) + 1

    @property
    def dropped(self) -> int:
        """The number of rows to drop."""
        return int(self.keep.size - np.count_nonzero(self.keep))


def _column_names(data: object) -> list[str]:
    names: Any = getattr(data, "column_names", None)  # datasets.Dataset, pyarrow.Table
    if names is None and hasattr(data, "columns"):  # pandas.DataFrame
        names = list(data.columns)
    if names is None and hasattr(data, "keys"):  # a mapping of column name to values
        names = list(data.keys())
    if isinstance(names, dict):  # a datasets.DatasetDict: names per split
        raise InvalidArgumentError(
            f"data has splits ({', '.join(map(str, names))}), not columns: pass one split, "
            "such as data['train']",
            value=list(names),
        )
    if names is None:
        raise InvalidArgumentError(
            "data must be a datasets.Dataset, a pandas DataFrame, a pyarrow Table or a mapping "
            f"of column names to values, not {type(data).__name__}",
            value=type(data).__name__,
        )
    return [str(name) for name in names]


def _column(data: Any, name: str, what: str) -> list[object]:
    """The values of column ``name`` of ``data`` in row order, as Python objects, read once."""
    names = _column_names(data)
    if name not in names:
        raise InvalidArgumentError(
            f"{what} {name!r} is not a column of the data; its columns: {', '.join(names)}",
            value=name,
        )
    if names.count(name) > 1:
        raise InvalidArgumentError(
            f"{what} {name!r} names {names.count(name)} columns of the data; rename them so "
            "that it names one",
            value=name,
        )
    if hasattr(data, "with_format") and hasattr(data, "__len__"):
        column = data.with_format("arrow")[name]  # datasets.Dataset: in its row order (indices)
    else:
        column = data[name]  # a DataFrame, Table, mapping; an IterableDataset: read as it streams
    if hasattr(column, "to_pylist"):  # pyarrow (Chunked)Array
        values: list[object] = column.to_pylist()
    elif hasattr(column, "tolist"):  # pandas Series, numpy array
        values = column.tolist()
    else:
        values = list(column)
    return values


def _missing(value: object) -> bool:
    """None, NaN, pandas.NA or NaT: a missing value of a table."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return True
    return type(value).__name__ in ("NAType", "NaTType")


def _texts(values: list[object], column: str) -> list[str]:
    for row, value in enumerate(values):
        if not isinstance(value, str):
            problem = "is missing" if _missing(value) else f"is a {type(value).__name__}, not str"
            raise InvalidArgumentError(
                f"text column {column!r}, row {row}: the text {problem} (fill or drop such "
                'rows first, e.g. with "", which is kept as too short)',
                value=row,
            )
    return cast("list[str]", values)


def _id_ranks(values: list[object], column: str) -> NDArray[np.int64]:
    """Each row's rank among the ids in their natural order (code point order for strings)."""
    for row, value in enumerate(values):
        if _missing(value):
            raise InvalidArgumentError(f"id column {column!r}, row {row}: the id is missing", row)
    try:
        order = sorted(range(len(values)), key=values.__getitem__)  # type: ignore[arg-type]
    except TypeError as error:
        raise InvalidArgumentError(
            f"id column {column!r}: the ids cannot be ordered ({error})", value=column
        ) from None
    for before, after in itertools.pairwise(order):
        if values[before] == values[after]:
            first, second = sorted((before, after))
            raise InvalidArgumentError(
                f"id column {column!r}: the id {values[first]!r} is in rows {first} and "
                f"{second}; ids must be distinct",
                value=values[first],
            )
    ranks = np.empty(len(values), dtype=np.int64)
    ranks[np.array(order, dtype=np.int64)] = np.arange(len(values), dtype=np.int64)
    return ranks


def dedup_dataset(
    data: object,
    *,
    text_column: str = "text",
    id_column: str | None = None,
    k: int = 3,
    keep: KeepRule = "first",
) -> DatasetDedup:
    """The near-duplicate rows of a table, and one row to keep per cluster: what ``permindex
    dedup`` decides for a JSONL file of the same ids and texts, row by row.

    Args:
        data: a ``datasets.Dataset`` (in its row order, after any ``select``/``shuffle``), an
            ``IterableDataset`` (streamed once per column read), a pandas ``DataFrame``, a
            ``pyarrow.Table``, or a mapping of column names to sequences. None of these packages
            is needed by permindex itself.
        text_column: the column of texts (``str``; the text is fingerprinted as it is, so reduce
            HTML to text first with :func:`permindex.html_to_text`).
        id_column: a column of distinct ids (strings, or any values that order among
            themselves, such as ints): ``keep="smallest-key"`` keeps the smallest id of a
            cluster, and clusters of the same size are numbered by their smallest id. None: the
            row positions are the ids.
        k: the largest Hamming distance of a near-duplicate, bits, 0 to 8 (as ``dedup --k``).
        keep: which row of a cluster is kept (as ``dedup --keep``,
            :func:`permindex.index.join.clusters.keep_per_cluster`): ``"first"`` the first row,
            ``"longest"`` the longest text (ties: the first), ``"smallest-key"`` the smallest id.

    Returns:
        A :class:`DatasetDedup`: ``keep`` ((n,) bool) and ``cluster`` ((n,) int64, -1 for a row
        in no cluster), with each row's kept row and fingerprint.

    The texts are read once (one column read, one list of str) and fingerprinted by
    :func:`permindex.simhash_many` (the default fingerprint: word 3-shingles); a text of fewer
    than 3 words has no fingerprint: its row is kept and in no cluster. Clusters are the
    connected components of the pairs within k (:class:`permindex.NearDuplicates`, the exact
    self-join), so they can chain: a dropped row can be more than k bits from the row kept.
    O(total text length) to fingerprint, then the join's work; memory O(n) beside the texts.

    Raises:
        InvalidArgumentError: a column that is not there or whose name two columns share, an
            id column whose length is not the text column's, a text that is missing (None, NaN) or
            not a ``str`` (naming its row), an id that is missing or repeated (naming both
            rows) or ids that do not order, a k outside 0..8, an unknown keep rule.

    Examples:
        >>> import permindex
        >>> page = "the quick brown fox jumps over the lazy dog"
        >>> texts = [page, page, "tides come in twice a day"]
        >>> result = permindex.dedup_dataset({"text": texts})
        >>> result.keep.tolist(), result.cluster.tolist(), result.dropped
        ([True, False, True], [0, 0, -1], 1)
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 0 <= k <= MAX_K:
        raise InvalidArgumentError(f"k must be an integer in 0..{MAX_K}, got {k!r}", value=k)
    if keep not in KEEP_RULES:
        raise InvalidArgumentError(
            f"keep must be one of {', '.join(KEEP_RULES)}, got {keep!r}", value=keep
        )
    texts = _texts(_column(data, text_column, "text_column"), text_column)
    n = len(texts)
    if id_column is None:
        ranks = np.arange(n, dtype=np.int64)
    else:
        ids = _column(data, id_column, "id_column")
        if len(ids) != n:
            raise InvalidArgumentError(
                f"id column {id_column!r} has {len(ids)} values and text column "
                f"{text_column!r} {n}: the columns of one table have one length",
                value=(len(ids), n),
            )
        ranks = _id_ranks(ids, id_column)
    fingerprints, valid = simhash_many(texts)
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=n)
    del texts
    rows = np.flatnonzero(valid).astype(np.int64)
    # The join's keys: each row's id rank, zero-padded, so that code point order is id order.
    width = len(str(max(n - 1, 0)))
    keys: Sequence[str] = [f"{r:0{width}d}" for r in ranks[rows].tolist()]
    near = NearDuplicates(keys, fingerprints[rows], k, design=design_for(k))
    groups = near.cluster_positions()
    kept = keep_per_cluster(groups, keep, order=rows, lengths=lengths[rows], rank=near.key_rank)
    cluster = np.full(n, -1, dtype=np.int64)
    kept_row = np.full(n, -1, dtype=np.int64)
    keep_mask = np.ones(n, dtype=bool)
    if groups:
        members = rows[np.concatenate(groups)]
        sizes = np.fromiter((g.size for g in groups), dtype=np.int64, count=len(groups))
        numbers = np.repeat(np.arange(len(groups), dtype=np.int64), sizes)
        cluster[members] = numbers
        kept_rows = rows[np.array(kept, dtype=np.int64)]
        kept_row[members] = kept_rows[numbers]
        keep_mask[members] = False
        keep_mask[kept_rows] = True
    return DatasetDedup(
        keep=keep_mask,
        cluster=cluster,
        kept_row=kept_row,
        fingerprints=fingerprints,
        has_fingerprint=valid,
        k=k,
        keep_rule=keep,
    )
