"""Near-duplicates of a Dask dataframe (:func:`near_duplicates`): from (key, fingerprint) — or
(key, text), fingerprinted per partition (:func:`fingerprint_texts`) — to the pairs within k, the
exact-duplicate groups, the clusters and the keep/drop list, as Dask dataframes, with the
definitions of :class:`permindex.index.join.clusters.NearDuplicates` (the local ``dedup``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd

from permindex.distributed.components import GATHER_EDGES, components
from permindex.distributed.join import (
    HOT_BUCKET,
    Collapsed,
    JoinPlan,
    collapse,
    join_partitions,
    persisted,
    value_pairs,
)
from permindex.index.tables.permutation import Design

if TYPE_CHECKING:
    import dask.dataframe as dd

__all__ = [
    "DistributedNearDuplicates",
    "fingerprint_column",
    "fingerprint_texts",
    "near_duplicates",
    "with_row_ids",
]

_ROW_PAIRS: Final = {"a": np.int64, "b": np.int64, "distance": np.int64}


def with_row_ids(frame: dd.DataFrame) -> dd.DataFrame:
    """``frame`` with a ``row`` column (int64): each row's position in the frame (0-based, in
    partition order), from one count of every partition's rows."""
    lengths = frame.map_partitions(len).compute().tolist()
    offsets = np.concatenate(([0], np.cumsum(lengths)[:-1])).astype(np.int64).tolist()

    def number(part: pd.DataFrame, partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
        start = offsets[partition_info["number"]] if partition_info else 0
        return part.assign(row=np.arange(start, start + len(part), dtype=np.int64))

    meta = frame._meta.assign(row=np.zeros(0, dtype=np.int64))
    return frame.map_partitions(number, meta=meta)


def fingerprint_column(frame: dd.DataFrame, column: str = "fingerprint") -> dd.DataFrame:
    """``frame`` with its ``column`` replaced by ``fingerprint`` (uint64), converted per
    partition by :func:`permindex.io.arrow.fingerprint_array`: uint64 as is, int64 as two's
    complement (as Spark and BigQuery store them), hex strings by the one hex rule. A bad
    value raises :class:`~permindex.io.arrow.ColumnError` naming the partition, the column and
    the row (1-based within the partition) when the frame is computed."""
    from permindex.io.arrow import fingerprint_array

    def convert(part: pd.DataFrame, partition_info: dict[str, Any] | None = None) -> pd.DataFrame:
        number = partition_info["number"] if partition_info else 0
        fps = fingerprint_array(part[column], source=f"partition {number}", column=column)
        return part.drop(columns=[column]).assign(fingerprint=fps)

    meta = frame._meta.drop(columns=[column]).assign(fingerprint=np.zeros(0, dtype=np.uint64))
    return frame.map_partitions(convert, meta=meta)


def fingerprint_texts(frame: dd.DataFrame, text: str = "text", **options: Any) -> dd.DataFrame:
    """``frame`` with ``fingerprint`` (uint64) and ``valid`` (bool: False for a text too short
    to fingerprint, fingerprint 0) columns, computed per partition by
    :func:`permindex.simhash_many` on column ``text`` (``options``: its shingle_size,
    tokenizer, min_words)."""
    from permindex.text.fingerprint import simhash_many

    def fingerprint(part: pd.DataFrame) -> pd.DataFrame:
        fps, valid = simhash_many(part[text].tolist(), **options)
        return part.assign(fingerprint=fps.astype(np.uint64), valid=valid.astype(bool))

    meta = frame._meta.assign(
        fingerprint=np.zeros(0, dtype=np.uint64), valid=np.zeros(0, dtype=bool)
    )
    return frame.map_partitions(fingerprint, meta=meta)


def _group_pairs(star: pd.DataFrame) -> pd.DataFrame:
    """Every pair of rows (a < b, distance 0) that share a representative, for a partition of
    the star holding whole groups."""
    from permindex.index.join.self_join import group_pairs
    from permindex.index.tuning import DEFAULT_TUNING

    order = np.lexsort((star["row"].to_numpy(), star["representative"].to_numpy()))
    reps = star["representative"].to_numpy(dtype=np.int64)[order]
    rows = star["row"].to_numpy(dtype=np.int64)[order]
    ends = np.flatnonzero(np.append(reps[1:] != reps[:-1], True)) + 1 if reps.size else reps
    group_end = np.repeat(ends, np.diff(np.append(0, ends))).astype(np.int64)
    parts = [(rows[i], rows[j]) for i, j in group_pairs(group_end, DEFAULT_TUNING.pair_budget)]
    if not parts:
        return pd.DataFrame({n: np.zeros(0, t) for n, t in _ROW_PAIRS.items()})
    a = np.concatenate([p[0] for p in parts])
    b = np.concatenate([p[1] for p in parts])
    return pd.DataFrame({"a": a, "b": b, "distance": np.zeros(a.size, dtype=np.int64)})


def _best_per_cluster(part: pd.DataFrame, column: str) -> pd.DataFrame:
    """(cluster, kept) for each cluster of a partition holding whole clusters of (row,
    cluster, ``column``): the smallest ``key`` or the largest ``length``, ties to the smallest
    row."""
    rows = part["row"].to_numpy(dtype=np.int64)
    cluster = part["cluster"].to_numpy(dtype=np.int64)
    if column == "key":
        rank = np.unique(part["key"].to_numpy(dtype=object), return_inverse=True)[1]
    else:
        rank = -part["length"].to_numpy(dtype=np.int64)
    order = np.lexsort((rows, rank, cluster))
    first = np.flatnonzero(np.append(True, cluster[order][1:] != cluster[order][:-1]))
    if not rows.size:
        first = first[:0]
    return pd.DataFrame({"cluster": cluster[order][first], "kept": rows[order][first]})


@dataclass
class DistributedNearDuplicates:
    """What :func:`near_duplicates` found, as Dask dataframes (row ids of the input frame's
    ``row`` column; join them with the input for keys, :meth:`with_keys`).

    Attributes:
        frame: the input (row, fingerprint[, key, length]), as given.
        k: the largest distance of a near-duplicate, bits.
        collapsed: the exact-duplicate collapse (:class:`permindex.distributed.join.Collapsed`).
        representative_pairs: (a, b, distance) pairs of *distinct* fingerprints within k, as
            their representatives' rows, a < b, each once; persisted.
    """

    frame: dd.DataFrame
    k: int
    collapsed: Collapsed
    representative_pairs: dd.DataFrame
    gather_edges: int = GATHER_EDGES

    def exact_groups(self) -> dd.DataFrame:
        """(row, group): every row whose fingerprint is held by two or more rows, with the
        group's smallest row (the exact-duplicate groups)."""
        return self.collapsed.star.rename(columns={"representative": "group"})

    def pairs(self) -> dd.DataFrame:
        """(a, b, distance): every pair of rows within k, a < b, each once — the pairs of each
        exact group (distance 0) and, for each pair of distinct fingerprints, every pair of
        their rows (the star expanded, as the local ``dedup`` lists them)."""
        import dask.dataframe as dd

        star = self.collapsed.star
        within = star.map_partitions(_group_pairs, meta=_ROW_PAIRS)
        members = star.rename(columns={"representative": "rep"})
        pairs = self.representative_pairs
        left = pairs.merge(members, left_on="a", right_on="rep", how="left")
        left["a"] = left["row"].fillna(left["a"]).astype(np.int64)
        left = left[["a", "b", "distance"]]
        right = left.merge(members, left_on="b", right_on="rep", how="left")
        right["b"] = right["row"].fillna(right["b"]).astype(np.int64)
        across = right[["a", "b", "distance"]]
        low = across[["a", "b"]].min(axis=1)
        high = across[["a", "b"]].max(axis=1)
        across = across.assign(a=low, b=high)
        return dd.concat([within, across])

    def labels(self) -> dd.DataFrame:
        """(node, label) per representative with a near-duplicate of another fingerprint:
        the smallest row of its component (:func:`permindex.distributed.components
        .components`)."""
        return components(self.representative_pairs, self.gather_edges)

    def clusters(self) -> dd.DataFrame:
        """(row, cluster): every row with a near-duplicate (a pair within k), with its cluster,
        named by its smallest row: the connected components of the pairs."""
        import dask.dataframe as dd

        labels = persisted(self.labels())
        star = self.collapsed.star
        flagged = dd.concat(
            [
                star.rename(columns={"representative": "node"}),
                labels[["node"]].assign(row=labels["node"]),
            ]
        ).drop_duplicates(subset=["row"])
        with_label = flagged.merge(labels, on="node", how="left")
        with_label["label"] = with_label["label"].fillna(with_label["node"]).astype(np.int64)
        return with_label[["row", "label"]].rename(columns={"label": "cluster"})

    def keep_drop(self, rule: str = "first") -> dd.DataFrame:
        """(row, cluster, kept): every clustered row with the row its cluster keeps, by
        ``rule``: "first" (the smallest row: read first), "smallest-key" (the smallest key in
        code point order) or "longest" (the largest ``length`` column, ties to the first).
        Each frame it persists is in the cluster's memory before the next graph is built
        (:func:`~permindex.distributed.join.persisted`): on Python 3.11, building a graph
        while the scheduler's thread materialized the previous one deadlocked on the
        class-wide locks of ``functools.cached_property`` (dask/distributed#8616; seen once
        in CI)."""
        clustered = persisted(self.clusters())
        if rule == "first":
            return clustered.assign(kept=clustered["cluster"])
        if rule not in ("smallest-key", "longest"):
            from permindex.errors import InvalidArgumentError

            raise InvalidArgumentError(f"unknown keep rule {rule!r}", value=rule)
        column = "key" if rule == "smallest-key" else "length"
        attrs = persisted(clustered.merge(self.frame[["row", column]], on="row"))
        chosen = persisted(
            attrs.shuffle(on="cluster").map_partitions(
                _best_per_cluster, column, meta={"cluster": np.int64, "kept": np.int64}
            )
        )
        return clustered.merge(chosen, on="cluster")

    def with_keys(self, pairs: dd.DataFrame) -> dd.DataFrame:
        """(key_a, key_b, distance) from row pairs, each pair with key_a < key_b."""
        keys = self.frame[["row", "key"]]
        named = pairs.merge(keys.rename(columns={"row": "a", "key": "key_a"}), on="a")
        named = named.merge(keys.rename(columns={"row": "b", "key": "key_b"}), on="b")

        def order(part: pd.DataFrame) -> pd.DataFrame:
            swap = part["key_a"] > part["key_b"]
            a = part["key_a"].where(~swap, part["key_b"])
            b = part["key_b"].where(~swap, part["key_a"])
            return pd.DataFrame({"key_a": a, "key_b": b, "distance": part["distance"]})

        return named.map_partitions(
            order, meta={"key_a": object, "key_b": object, "distance": np.int64}
        )


def near_duplicates(
    frame: dd.DataFrame,
    k: int = 3,
    *,
    design: Design | tuple[int, int] | None = None,
    hot_threshold: int = HOT_BUCKET,
    gather_edges: int = GATHER_EDGES,
    npartitions: int | None = None,
) -> DistributedNearDuplicates:
    """The near-duplicates within ``k`` bits of ``frame``, a Dask dataframe with columns
    ``fingerprint`` (uint64; a ``valid`` bool column, when present, drops the rows without
    one) and ``row`` (int64, distinct: :func:`with_row_ids`), plus ``key`` for
    :meth:`~DistributedNearDuplicates.with_keys` and the smallest-key rule.

    Exact duplicates are collapsed first (:func:`permindex.distributed.join.collapse`: one
    representative per distinct fingerprint, its copies attached as a star), then the distinct
    fingerprints are self-joined (:func:`permindex.distributed.join.value_pairs`), both
    shuffles into ``npartitions`` (default :func:`~permindex.distributed.join.join_partitions`
    of the frame's rows, one count, and the cluster's workers). The representative pairs are
    computed and persisted here, with the collapse, and are in the cluster's memory when this
    returns (:func:`~permindex.distributed.join.persisted`); everything else is lazy
    (``frame`` is read again by the methods that need keys or lengths: persist it first when
    it is costly to compute).

    Raises:
        InvalidArgumentError: k < 0 or above what the design finds.
    """
    JoinPlan.of(k, design)  # the k check, before any work
    if "valid" in frame.columns:
        frame = frame[frame["valid"]]
    if npartitions is None:
        from distributed import get_client

        rows = int(frame.map_partitions(len).sum().compute())
        npartitions = join_partitions(rows, len(get_client().nthreads()))
    collapsed = collapse(frame, npartitions)
    pairs = persisted(
        value_pairs(
            collapsed.distinct[["row", "fingerprint"]],
            k,
            design=design,
            hot_threshold=hot_threshold,
            npartitions=npartitions,
        )
    )
    return DistributedNearDuplicates(frame, k, collapsed, pairs, gather_edges)
