"""The near-duplicate self-join of a Dask dataframe of fingerprints (:func:`value_pairs`, whose
docstring gives the method), with the exact-duplicate collapse it starts from
(:func:`collapse`). Rows are integer row ids (``row``, int64) and fingerprints (``fingerprint``,
uint64) only: keys never travel through a shuffle.

Each partition's work is a plain numpy function (:func:`collapse_partition`,
:func:`emit_partition`, :func:`join_partition`) on a pandas frame, so the same functions run
under any engine that maps a function over groups of rows (see docs/guides/dask.md).
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from permindex.index.join import self_join as join
from permindex.index.join.clusters import design_for
from permindex.index.tables.permutation import Design

if TYPE_CHECKING:
    import dask.dataframe as dd

__all__ = [
    "HOT_BUCKET",
    "ROWS_PER_PARTITION",
    "TASK_SHUFFLE_PARTITIONS",
    "Collapsed",
    "JoinPlan",
    "collapse",
    "collapse_partition",
    "emit_partition",
    "join_partition",
    "join_partitions",
    "mix",
    "show_progress",
    "shuffle_method",
    "value_pairs",
]

_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]
_ALL: Final = (1 << 64) - 1

#: Distinct fingerprints sharing one table's prefix above which the prefix is *hot*: its rows
#: are split by the next bits (:class:`JoinPlan`) instead of joined all against all.
HOT_BUCKET: Final = 20_000

_PAIRS_META: Final = {"a": np.int64, "b": np.int64, "distance": np.int64}

#: Rows of (row, fingerprint) per partition of the join's shuffles (32 MiB; each is emitted
#: once per table, 4 times for k <= 3): few large partitions, since each task and each shuffle
#: partition has a fixed cost.
ROWS_PER_PARTITION: Final = 1 << 21
#: Partitions up to which a shuffle is Dask's task-based one (n^2 small tasks); above, its
#: peer-to-peer shuffle (spills to disk, for inputs larger than the workers' memory).
TASK_SHUFFLE_PARTITIONS: Final = 32


def join_partitions(rows: int, workers: int = 1) -> int:
    """Partitions of the shuffles for ``rows`` rows on ``workers`` workers: at least one per
    worker, at most :data:`ROWS_PER_PARTITION` rows each."""
    return max(1, workers, -(-rows // ROWS_PER_PARTITION))


def shuffle_method(partitions: int) -> str:
    """The Dask shuffle for ``partitions`` output partitions (see
    :data:`TASK_SHUFFLE_PARTITIONS`)."""
    return "tasks" if partitions <= TASK_SHUFFLE_PARTITIONS else "p2p"


def persisted(frame: dd.DataFrame) -> dd.DataFrame:
    """``frame.persist()``, returned only once its partitions are in the cluster's memory (an
    exception of a task is raised here).

    Why wait: with dask and distributed 2026.8 on a local cluster, label propagation
    (:mod:`permindex.distributed.components`), which built each round's graphs on frames whose
    persist had not finished, hung about once in 15 runs on a loaded machine -- a compute that
    Dask issued while optimizing an expression (the divisions of a ``set_index``) waited
    forever, and the scheduler no longer held the persisted frame's keys -- or failed with
    "lost dependencies". Waiting here orders each graph after the frames it uses."""
    from distributed import futures_of, wait

    held = frame.persist()
    wait(futures_of(held))
    for future in futures_of(held):
        if future.status == "error":
            future.result()  # raises the task's exception
    return held


def mix(x: _U64) -> _U64:
    """splitmix64's finalizer, (n,) uint64 to (n,) uint64: spreads bucket keys over the shuffle's
    partitions (equal inputs, equal outputs)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


@dataclass(frozen=True)
class JoinPlan:
    """The tables of the distributed join within ``k`` on ``design`` and the split of a hot
    prefix.

    A *code* names what a row is emitted for: code ``t * (s + 1)`` for table rank t of
    :func:`permindex.index.join.self_join.join_tables` (its leading blocks: ``masks[code]``), and,
    for
    each hot prefix of table t, the codes ``t * (s + 1) + 1 + j``, j < s = k + 1, keyed by the
    prefix *and* the j-th of s blocks of the 64 - prefix bits left (``masks[code]`` = the
    table's mask | that block's). Two fingerprints within k that share table t's prefix differ
    in at most k of those s blocks, so they share at least one: the split is itself a
    permutation-scheme join (one leading block of s) on the remaining bits, and stays exact.

    ``earlier[code]`` are the masks a pair must not share to be kept under that code: every
    earlier table's, and for a split code the earlier blocks' of its table, so that each pair is
    kept exactly once, under the first table (and block) whose key it shares.
    """

    k: int
    design: Design
    tables: int  # T, tables searched
    split: int  # s, blocks of a hot prefix
    masks: tuple[int, ...]  # per code
    earlier: tuple[tuple[int, ...], ...]  # per code

    @classmethod
    def of(cls, k: int, design: Design | tuple[int, int] | None = None) -> JoinPlan:
        """The plan within ``k`` (0 <= k <= design.max_k) on ``design`` (default
        :func:`permindex.index.join.clusters.design_for` ``(k)``)."""
        chosen = design_for(k) if design is None else Design.of(design)
        leading = [chosen.permutations[t].leading_mask for t in join.join_tables(chosen, k)]
        split = k + 1
        masks: list[int] = []
        earlier: list[tuple[int, ...]] = []
        for t, mask in enumerate(leading):
            masks.append(mask)
            earlier.append(tuple(leading[:t]))
            free = [bit for bit in range(64) if not (mask >> bit) & 1]
            size, extra = divmod(len(free), split)
            blocks: list[int] = []
            at = 0
            for j in range(split):  # s contiguous runs of the free bits, sizes differing by 1
                width = size + (j < extra)
                blocks.append(sum(1 << bit for bit in free[at : at + width]))
                at += width
            for j, block in enumerate(blocks):
                masks.append(int(mask) | block)
                earlier.append((*leading[:t], *blocks[:j]))
        return cls(k, chosen, len(leading), split, tuple(masks), tuple(earlier))

    def table_code(self, t: int) -> int:
        return t * (self.split + 1)

    def bucket(self, code: int, fingerprints: _U64) -> _U64:
        """(n,) uint64 bucket ids of ``fingerprints`` under ``code``: rows that share a key
        share the id (different keys rarely do; a shared id only puts them in one partition)."""
        key = fingerprints & np.uint64(self.masks[code])
        return mix(key ^ mix(np.full(key.size, code + 1, dtype=np.uint64)))


@dataclass
class Collapsed:
    """The exact-duplicate collapse of a frame (:func:`collapse`), persisted.

    Attributes:
        distinct: (row, fingerprint): one representative per distinct fingerprint, the
            smallest row id holding it.
        star: (row, representative): every row of a fingerprint held by two or more rows,
            representative included, with its representative's row id.
    """

    distinct: dd.DataFrame
    star: dd.DataFrame


def collapse_partition(frame: pd.DataFrame) -> pd.DataFrame:
    """One partition of :func:`collapse`: ``frame`` (row, fingerprint) holding every row of each
    of its fingerprints; returns (row, fingerprint, representative, copies) per row, sorted by
    (fingerprint, row): the representative is the group's smallest row."""
    fps = frame["fingerprint"].to_numpy(dtype=np.uint64)
    rows = frame["row"].to_numpy(dtype=np.int64)
    order = np.lexsort((rows, fps))
    fps, rows = fps[order], rows[order]
    start = np.flatnonzero(np.append(True, fps[1:] != fps[:-1])) if fps.size else np.zeros(0, int)
    sizes = np.diff(np.append(start, fps.size))
    return pd.DataFrame(
        {
            "row": rows,
            "fingerprint": fps,
            "representative": np.repeat(rows[start], sizes),
            "copies": np.repeat(sizes, sizes).astype(np.int64),
        }
    )


def collapse(frame: dd.DataFrame, npartitions: int | None = None) -> Collapsed:
    """Collapse exact duplicates: one shuffle of ``frame`` (row int64, fingerprint uint64) by
    fingerprint into ``npartitions`` (default: as many as ``frame``), then per partition
    :func:`collapse_partition`; both outputs are derived from the one persisted shuffle (no
    merge of a frame with one derived from it). Each frame is in the cluster's memory before
    this returns (:func:`persisted`)."""
    parts = npartitions or frame.npartitions
    shuffled = frame[["row", "fingerprint"]].shuffle(
        on="fingerprint", npartitions=parts, shuffle_method=shuffle_method(parts)
    )
    grouped = persisted(
        shuffled.map_partitions(
            collapse_partition,
            meta={
                "row": np.int64,
                "fingerprint": np.uint64,
                "representative": np.int64,
                "copies": np.int64,
            },
        )
    )
    distinct = grouped[grouped["row"] == grouped["representative"]][["row", "fingerprint"]]
    shared = grouped[grouped["copies"] > 1][["row", "representative"]]
    return Collapsed(persisted(distinct), persisted(shared))


def emit_partition(frame: pd.DataFrame, plan: JoinPlan, hot: _U64) -> pd.DataFrame:
    """Rows of ``frame`` (row, fingerprint: distinct fingerprints) once per table of ``plan``,
    as (bucket uint64, code int16, row, fingerprint); a row whose table bucket is in ``hot``
    (sorted (h,) uint64 bucket ids) is emitted under the table's split codes instead."""
    fps = frame["fingerprint"].to_numpy(dtype=np.uint64)
    rows = frame["row"].to_numpy(dtype=np.int64)
    parts: list[pd.DataFrame] = []

    def add(code: int, pick: NDArray[Any]) -> None:
        if pick.size:
            parts.append(
                pd.DataFrame(
                    {
                        "bucket": plan.bucket(code, fps[pick]),
                        "code": np.full(pick.size, code, dtype=np.int16),
                        "row": rows[pick],
                        "fingerprint": fps[pick],
                    }
                )
            )

    everything = np.arange(fps.size)
    for t in range(plan.tables):
        code = plan.table_code(t)
        buckets = plan.bucket(code, fps)
        is_hot = _member(buckets, hot)
        add(code, everything[~is_hot])
        for j in range(plan.split):
            add(code + 1 + j, everything[is_hot])
    if not parts:
        return _emitted_meta()
    return pd.concat(parts, ignore_index=True)


def _member(values: _U64, sorted_set: _U64) -> NDArray[np.bool_]:
    if sorted_set.size == 0:
        return np.zeros(values.size, dtype=bool)
    at = np.minimum(np.searchsorted(sorted_set, values), sorted_set.size - 1)
    return np.asarray(sorted_set[at] == values)


def _emitted_meta() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "bucket": np.zeros(0, np.uint64),
            "code": np.zeros(0, np.int16),
            "row": np.zeros(0, np.int64),
            "fingerprint": np.zeros(0, np.uint64),
        }
    )


def join_partition(frame: pd.DataFrame, plan: JoinPlan) -> pd.DataFrame:
    """The pairs of one partition of emitted rows (:func:`emit_partition`, every row of each of
    its buckets present): per code, :func:`permindex.index.join.self_join.keyed_pairs` on the
    code's key
    with its earlier masks. Returns (a, b, distance): representative row ids, a < b, each pair
    of the whole join in exactly one partition."""
    codes = frame["code"].to_numpy()
    fps = frame["fingerprint"].to_numpy(dtype=np.uint64)
    rows = frame["row"].to_numpy(dtype=np.int64)
    parts: list[tuple[_I64, _I64, _I64]] = []
    for code in np.unique(codes).tolist():
        pick = np.flatnonzero(codes == code)
        values = fps[pick]
        keys = values & np.uint64(plan.masks[code])
        i, j, d = join.keyed_pairs(keys, values, plan.k, plan.earlier[code])
        a, b = rows[pick[i]], rows[pick[j]]
        parts.append((np.minimum(a, b), np.maximum(a, b), d))
    if not parts:
        return pd.DataFrame({name: np.zeros(0, dtype) for name, dtype in _PAIRS_META.items()})
    a, b, d = (np.concatenate(x) for x in zip(*parts, strict=True))
    return pd.DataFrame({"a": a, "b": b, "distance": d})


def _table_buckets(frame: pd.DataFrame, plan: JoinPlan) -> _U64:
    """The table bucket id of every fingerprint of ``frame`` in every table (T * n, uint64)."""
    fps = frame["fingerprint"].to_numpy(dtype=np.uint64)
    ids = [plan.bucket(plan.table_code(t), fps) for t in range(plan.tables)]
    return np.concatenate(ids) if ids else fps[:0]


def hot_buckets(distinct: dd.DataFrame, plan: JoinPlan, threshold: int = HOT_BUCKET) -> _U64:
    """The table buckets (ids of :meth:`JoinPlan.bucket` under a table's code) holding more than
    ``threshold`` of the ``distinct`` fingerprints: (h,) uint64, sorted.

    Two passes over ``distinct`` and nothing shuffled: a bucket above ``threshold`` over P
    partitions holds more than threshold / P rows in at least one of them (pigeonhole), so each
    partition sends only its buckets above that (the candidates: none for random
    fingerprints), then, if there are candidates, each partition counts those exactly and the
    counts are summed here."""
    parts = max(1, distinct.npartitions)

    def candidates(frame: pd.DataFrame) -> pd.DataFrame:
        found, n = np.unique(_table_buckets(frame, plan), return_counts=True)
        return pd.DataFrame({"bucket": found[n * parts > threshold]})

    listed = distinct.map_partitions(candidates, meta={"bucket": np.uint64}).compute()
    candidate = np.unique(listed["bucket"].to_numpy(dtype=np.uint64))
    if candidate.size == 0:
        return candidate

    def exact(frame: pd.DataFrame) -> pd.DataFrame:
        ids = _table_buckets(frame, plan)
        ids = ids[_member(ids, candidate)]
        counts = np.bincount(np.searchsorted(candidate, ids), minlength=candidate.size)
        return pd.DataFrame({"n": counts.astype(np.int64)})

    counted = distinct.map_partitions(exact, meta={"n": np.int64}).compute()
    total = counted["n"].to_numpy().reshape(-1, candidate.size).sum(axis=0)
    return candidate[total > threshold]


def value_pairs(
    distinct: dd.DataFrame,
    k: int,
    *,
    design: Design | tuple[int, int] | None = None,
    hot_threshold: int = HOT_BUCKET,
    npartitions: int | None = None,
) -> dd.DataFrame:
    """Every pair of ``distinct`` fingerprints within ``k`` bits (Manku et al. 2007, section
    3, as a shuffle): (a, b, distance), a < b their representatives' row ids, each pair once.

    ``distinct``: (row int64, fingerprint uint64) with distinct fingerprints
    (:attr:`Collapsed.distinct`). Method: each row is emitted once per table of the join's
    design (:class:`JoinPlan`), keyed by (table, prefix) (:func:`emit_partition`); a shuffle
    groups the rows of a bucket in one partition; each partition runs
    :func:`permindex.index.join.self_join.keyed_pairs` per table on its rows
    (:func:`join_partition`),
    keeping a pair only in the first table whose prefix it shares, so no global
    de-duplication of pairs is needed. A prefix shared by more than ``hot_threshold``
    fingerprints (:func:`hot_buckets`) is split by the next bits (see :class:`JoinPlan`):
    O(T * n) rows shuffled, O(candidates) verified.
    """
    plan = JoinPlan.of(k, design)
    if k == 0:
        return distinct.map_partitions(
            lambda f: pd.DataFrame({n: np.zeros(0, t) for n, t in _PAIRS_META.items()}),
            meta=_PAIRS_META,
        )
    hot = hot_buckets(distinct, plan, hot_threshold)
    emitted = distinct.map_partitions(emit_partition, plan, hot, meta=_emitted_meta())
    parts = npartitions or max(distinct.npartitions, 1)
    grouped = emitted.shuffle(on="bucket", npartitions=parts, shuffle_method=shuffle_method(parts))
    return grouped.map_partitions(join_partition, plan, meta=_PAIRS_META)


def show_progress(work: Any) -> None:
    """Dask's own progress bar (:func:`distributed.progress`) for ``work`` (futures or a
    persisted collection), until it is done, on stderr (Dask writes it to stdout, which carries
    the pairs)."""
    from distributed import progress

    with contextlib.redirect_stdout(sys.stderr):
        progress(work, multi=False)
        sys.stderr.write("\n")
