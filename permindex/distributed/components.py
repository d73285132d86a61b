"""Connected components of a graph held as a Dask dataframe of edges (:func:`components`):
gathered to this process and joined by :func:`permindex.index.join.clusters.components` (union-find)
up to :data:`GATHER_EDGES` edges, else by label propagation with pointer jumping on the cluster
(:func:`propagate_labels`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np
import pandas as pd

from permindex.index.join import clusters

if TYPE_CHECKING:
    import dask.dataframe as dd

__all__ = ["GATHER_EDGES", "MAX_ROUNDS", "components", "gathered_labels", "propagate_labels"]

#: Most edges gathered to one process for its union-find (16 bytes each: 256 MiB); above,
#: labels are propagated on the cluster.
GATHER_EDGES: Final = 1 << 24
#: Most rounds of label propagation (each at least halves the longest path to a root when
#: pointers jump; a round that changes no label ends it).
MAX_ROUNDS: Final = 64

_META: Final = {"node": np.int64, "label": np.int64}


def gathered_labels(a: np.ndarray, b: np.ndarray) -> pd.DataFrame:
    """(node, label) for every node of the edges (a[i], b[i]) ((m,) int64 each): the label is
    the smallest node of its component (union-find on the compacted nodes)."""
    nodes = np.unique(np.concatenate((a, b)).astype(np.int64))
    labels = clusters.components(
        int(nodes.size),
        np.searchsorted(nodes, a).astype(np.int64),
        np.searchsorted(nodes, b).astype(np.int64),
    )
    return pd.DataFrame({"node": nodes, "label": nodes[labels]})


def propagate_labels(edges: dd.DataFrame, max_rounds: int = MAX_ROUNDS) -> dd.DataFrame:
    """(node, label) for every node of ``edges`` (a, b int64), label = the smallest node of its
    component, computed on the cluster: every node starts as its own label; each round every
    edge offers the smaller of its ends' labels to both ends *and* to both ends' labels
    (hooking a root onto a smaller one), each node takes the smallest offer, then pointers jump
    (label = label of label) until stable. Labels only decrease and stay nodes of the
    component, so the fixed point is the smallest node of each component. Each round's frames
    are persisted, and in the cluster's memory (:func:`~permindex.distributed.join.persisted`),
    before they are merged with frames derived from them; merges are hash merges on columns.
    Shuffles are by tasks up to :data:`~permindex.distributed.join.TASK_SHUFFLE_PARTITIONS`
    partitions of ``edges``, p2p above (:func:`~permindex.distributed.join.shuffle_method`).

    Raises:
        RuntimeError: no fixed point after ``max_rounds`` rounds.
    """
    import dask

    from permindex.distributed.join import shuffle_method

    # the merges and groupby shuffle as the join does: by tasks for a few partitions, p2p above
    with dask.config.set({"dataframe.shuffle.method": shuffle_method(edges.npartitions)}):
        return _propagate(edges, max_rounds)


def _propagate(edges: dd.DataFrame, max_rounds: int) -> dd.DataFrame:
    import dask.dataframe as dd

    from permindex.distributed.join import persisted

    pairs = persisted(edges[["a", "b"]])
    nodes = dd.concat([pairs["a"], pairs["b"]]).drop_duplicates().to_frame("node")
    labels = persisted(nodes.assign(label=nodes["node"]))
    for _ in range(max_rounds):
        # hash merges on columns (no set_index: its divisions would be computed while Dask
        # optimizes the expression)
        la = pairs.merge(labels.rename(columns={"node": "a", "label": "la"}), on="a")
        both = la.merge(labels.rename(columns={"node": "b", "label": "lb"}), on="b")
        low = both[["la", "lb"]].min(axis=1)
        offers = dd.concat(
            [
                pd_frame(both["a"], low),
                pd_frame(both["b"], low),
                pd_frame(both["la"], low),
                pd_frame(both["lb"], low),
                labels,
            ]
        )
        taken = persisted(offers.groupby("node")["label"].min().reset_index())
        jumped = taken.merge(
            taken.rename(columns={"node": "label", "label": "jump"}), on="label", how="left"
        )
        jumped["jump"] = jumped["jump"].fillna(jumped["label"]).astype(np.int64)
        new = persisted(jumped[["node", "jump"]].rename(columns={"jump": "label"}))
        compare = new.merge(labels, on="node", suffixes=("", "_old"))
        changed = int((compare["label"] != compare["label_old"]).sum().compute())
        labels = new
        if changed == 0:
            return labels
    raise RuntimeError(f"label propagation did not converge in {max_rounds} rounds")


def pd_frame(node: dd.Series, label: dd.Series) -> dd.DataFrame:
    """(node, label) frame of two aligned series of one frame."""
    return node.rename("node").to_frame().assign(label=label)


def components(edges: dd.DataFrame, gather_edges: int = GATHER_EDGES) -> dd.DataFrame:
    """(node, label) of every node of ``edges`` (a, b int64), label the smallest node of its
    component: :func:`gathered_labels` when there are at most ``gather_edges`` edges (one
    count, then the edges come here), else :func:`propagate_labels`. The same labels either
    way."""
    import dask.dataframe as dd

    count = int(edges.shape[0].compute())
    if count <= gather_edges:
        pairs = edges[["a", "b"]].compute()
        labels = gathered_labels(
            pairs["a"].to_numpy(dtype=np.int64), pairs["b"].to_numpy(dtype=np.int64)
        )
        return dd.from_pandas(labels, npartitions=max(1, edges.npartitions))
    return propagate_labels(edges)
