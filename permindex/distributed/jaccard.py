"""The Jaccard mode of ``permindex dedup`` on a Dask cluster (``--method minhash --engine
dask``): the self-join of :func:`permindex.near.jaccard.self_join` with the band keys as the
shuffle's keys (as the SimHash join's are its tables' prefixes, :mod:`permindex.distributed.join`)
and every candidate verified exactly on the workers, where the shingle sets travel with their rows
(:func:`jaccard_pairs`, whose docstring gives the steps and their bounds).

The shingle sets never come to the caller: each input task's sets stay on the worker that made
them (:class:`JaccardPart`), with their band keys; the caller holds, per document, what the local
engine holds (key, length, the set digest) and, for the join, the rows of the distinct sets.
Identical sets are collapsed there, before the join, by their set digest and a second,
independent 64-bit name (:meth:`permindex.near.jaccard.ShingleSets.check_digests`): two sets
are taken as equal when both agree (a collision of both, 2^-128 a pair, would join two different
sets as one; the local engine compares the sets themselves), so a template held by 1,000
documents is one set in the join.

Each partition's work is a plain numpy function on a pandas frame (:func:`band_rows`,
:func:`shared_memberships`, :func:`set_rows`, :func:`join_partition`); sets and band keys travel
as Arrow binary columns (``large_binary``: both Dask shuffles, by tasks and peer to peer, carry
them as they are, and Dask's conversion of object columns to strings leaves them alone).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import numpy as np
import pandas as pd
import pyarrow as pa
from numpy.typing import NDArray

from permindex.distributed.join import join_partitions, mix, persisted, shuffle_method
from permindex.index.join.pair_stream import PairArrays
from permindex.near.dedup import TaskDocuments
from permindex.near.jaccard import ShingleSets, verified_tasks
from permindex.near.minhash import Bands, band_keys

if TYPE_CHECKING:
    from distributed import Client

__all__ = [
    "HOT_BAND_BUCKET",
    "PARTITION_BYTES",
    "HeldSets",
    "JaccardPart",
    "Joined",
    "Light",
    "Selection",
    "band_rows",
    "digests_of",
    "jaccard_pairs",
    "join_partition",
    "light_of",
    "part_of",
    "set_rows",
    "shared_memberships",
]

_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]

#: Distinct sets sharing one band's key above which the bucket is *hot*: its members are cut
#: into blocks of half as many, and each pair of blocks is joined as a bucket of its own (no
#: partition holds more than this many of a bucket's sets; every pair is still met once).
HOT_BAND_BUCKET: Final = 4_096
#: Bytes of shingle sets and band keys per partition of the verifying shuffle, about.
PARTITION_BYTES: Final = 64 << 20
#: Bytes a shuffled row costs besides its set and band keys (its other columns).
_ROW_BYTES: Final = 40
#: Blocks of one side of a cross join's bucket, at most (its block pairs are numbered by
#: Cantor's pairing, which stays below 2^31): a bucket of 46,000 x 2,048 distinct sets.
_CROSS_BLOCKS: Final = 46_000

_BINARY: Final = pd.ArrowDtype(pa.large_binary())
_BAND_META: Final = {"key": np.uint64, "band": np.int16, "row": np.int64}
_SHARED_META: Final = {
    "row": np.int64,
    "band": np.int16,
    "key": np.uint64,
    "blocks": np.int32,
    "block": np.int32,
}
_SET_META: Final = {
    "dest": np.uint64,
    "row": np.int64,
    "keys": _BINARY,
    "set": _BINARY,
    "entries": _BINARY,
}
_PAIRS_META: Final = {"a": np.int64, "b": np.int64, "distance": np.int64}


@dataclass
class JaccardPart:
    """The shingle sets of one input task's documents that have one, in input order
    (:class:`~permindex.near.jaccard.ShingleSets`), and their ``(m, bands) uint64`` band keys
    (:func:`~permindex.near.minhash.band_keys`): what stays on the worker that read them."""

    sets: ShingleSets
    keys: _U64


class Light(NamedTuple):
    """What comes back to the caller of one task: its documents (the set digest, seed 0, as
    each fingerprint) without the sets, and per document with a set its check digest and
    set size ((m,) uint64, (m,) int64)."""

    read: TaskDocuments
    checks: _U64
    sizes: _I64


def part_of(done: Any, shape: Bands) -> JaccardPart | None:
    """The :class:`JaccardPart` of a task's result (:func:`permindex.near.dedup.run_task`,
    task "minhash"), or None for a failure (:func:`light_of` carries it)."""
    if not isinstance(done, TaskDocuments) or done.sets is None or done.signatures is None:
        return None
    return JaccardPart(done.sets, band_keys(done.signatures, shape))


def light_of(done: Any) -> Any:
    """The :class:`Light` of a task's result, or the result itself when it is a failure."""
    if not isinstance(done, TaskDocuments) or done.sets is None:
        return done
    documents = done.documents
    fps = np.zeros(documents.fingerprints.size, dtype=np.uint64)
    fps[documents.has_fingerprint] = done.sets.seeded_digests(0)
    read = TaskDocuments(replace(documents, fingerprints=fps), done.skipped)
    return Light(read, done.sets.check_digests(), done.sets.sizes)


def digests_of(part: JaccardPart | None, seed: int) -> _U64:
    """The set digests of a part's sets with ``seed`` ((m,) uint64), for a caller that found
    two different sets under one digest of the seed before."""
    if part is None:
        return np.zeros(0, dtype=np.uint64)
    return part.sets.seeded_digests(seed)


# ------------------------------------------------------------------------ binary columns


def _binary(data: NDArray[Any], offsets: _I64) -> pd.Series:
    """A ``large_binary`` Arrow column of n values: value i is the bytes
    ``data[offsets[i]:offsets[i + 1]]`` (``data`` a 1-d array whose items are counted by
    ``offsets``)."""
    raw = np.ascontiguousarray(data)
    width = raw.itemsize
    array = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(),
        int(offsets.size) - 1,
        [None, pa.py_buffer((offsets * width).astype(np.int64)), pa.py_buffer(raw.tobytes())],
    )
    return pd.Series(pd.arrays.ArrowExtensionArray(array))


def _unbinary(column: pd.Series, dtype: Any) -> tuple[NDArray[Any], _I64]:
    """The values of a binary column as (one array of ``dtype``, (n + 1,) int64 offsets in
    items of it): the inverse of :func:`_binary`. Each Arrow chunk's values are read in
    place (Arrow buffers are 64-byte aligned and every value is whole items) and copied once,
    into the one array."""
    array = pa.array(column)
    chunks = array.chunks if isinstance(array, pa.ChunkedArray) else [array]
    width = np.dtype(dtype).itemsize
    values: list[NDArray[Any]] = []
    sizes: list[_I64] = []
    for chunk in chunks:
        if chunk.type != pa.large_binary():
            chunk = chunk.cast(pa.large_binary())
        if len(chunk) == 0:
            continue
        bounds = np.frombuffer(chunk.buffers()[1], dtype=np.int64)
        bounds = bounds[chunk.offset : chunk.offset + len(chunk) + 1]
        start, stop = int(bounds[0]), int(bounds[-1])
        if stop > start:
            data = chunk.buffers()[2]
            values.append(
                np.frombuffer(data, dtype=dtype, count=(stop - start) // width, offset=start)
            )
        sizes.append(np.diff(bounds) // width)
    offsets = np.zeros(sum(x.size for x in sizes) + 1, dtype=np.int64)
    if sizes:
        np.cumsum(np.concatenate(sizes), out=offsets[1:])
    flat = np.concatenate(values) if values else np.zeros(0, dtype=dtype)
    return flat.astype(dtype, copy=False), offsets


# --------------------------------------------------------------------------- partitions


def band_rows(part: JaccardPart | None, local: _I64, rows: _I64) -> pd.DataFrame:
    """Step 1 of :func:`jaccard_pairs` for one part: (key, band, row) for each distinct set
    ``local`` of the part (its row ids ``rows``) in each band."""
    if part is None or local.size == 0:
        return pd.DataFrame({n: np.zeros(0, t) for n, t in _BAND_META.items()})
    keys = part.keys[local]
    bands = keys.shape[1]
    return pd.DataFrame(
        {
            "key": keys.T.ravel(),
            "band": np.repeat(np.arange(bands, dtype=np.int16), local.size),
            "row": np.tile(rows, bands),
        }
    )


def shared_memberships(
    frame: pd.DataFrame, hot_threshold: int, boundary: int | None = None
) -> pd.DataFrame:
    """Step 2 of :func:`jaccard_pairs` for one partition of :func:`band_rows` holding every
    row of each of its band keys: (row, band, key, blocks, block) for every row of a bucket (a band
    and key) of two or more rows; a bucket of more than ``hot_threshold`` rows is cut, in row
    order, into ``blocks`` blocks of ``max(1, hot_threshold // 2)`` (``block``: this row's),
    others have 1 block.

    With a ``boundary`` (the cross join of :func:`jaccard_pairs`: rows below it are one side,
    the others the other side), only buckets holding rows of both sides are kept, each side is
    cut into blocks of its own when the bucket is hot, and ``blocks`` is the number of blocks
    of the *other* side (the block pairs this row takes part in)."""
    band = frame["band"].to_numpy(dtype=np.int16)
    key = frame["key"].to_numpy(dtype=np.uint64)
    row = frame["row"].to_numpy(dtype=np.int64)
    order = np.lexsort((row, key, band))
    band, key, row = band[order], key[order], row[order]
    n = row.size
    if n == 0:
        return pd.DataFrame({name: np.zeros(0, t) for name, t in _SHARED_META.items()})
    change = np.ones(n, dtype=bool)
    change[1:] = (band[1:] != band[:-1]) | (key[1:] != key[:-1])
    starts = np.flatnonzero(change)
    sizes = np.diff(np.append(starts, n))
    size = np.repeat(sizes, sizes)
    rank = np.arange(n) - np.repeat(starts, sizes)
    half = max(1, hot_threshold // 2)
    hot = size > hot_threshold
    if boundary is None:
        blocks = np.where(hot, -(-size // half), 1).astype(np.int32)
        block = np.where(hot, rank // half, 0).astype(np.int32)
        keep = size >= 2
    else:
        first = row < boundary  # rows sorted within a bucket: the first side comes first
        ones = np.add.reduceat(first.astype(np.int64), starts)
        own = np.repeat(ones, sizes)  # rows of the first side in this row's bucket
        mine = np.where(first, own, size - own)
        theirs = size - mine
        rank = np.where(first, rank, rank - own)
        blocks = np.where(hot, -(-theirs // half), 1).astype(np.int32)
        block = np.where(hot, rank // half, 0).astype(np.int32)
        keep = (own >= 1) & (own < size)
        if int(blocks.max(initial=0)) + int(block.max(initial=0)) >= _CROSS_BLOCKS:
            raise ValueError(f"a band bucket of {int(size.max())} sets: too large to cut")
    return pd.DataFrame(
        {
            "row": row[keep],
            "band": band[keep],
            "key": key[keep],
            "blocks": blocks[keep],
            "block": block[keep],
        }
    )


def set_rows(
    part: JaccardPart | None,
    local: _I64,
    band: NDArray[np.int16],
    blocks: NDArray[np.int32],
    block: NDArray[np.int32],
    rows: _I64,
    boundary: int | None = None,
    whole: NDArray[np.bool_] | None = None,
    dest: _U64 | None = None,
) -> pd.DataFrame:
    """Step 3 of :func:`jaccard_pairs` for one part: each membership (set ``local[i]`` of the
    part, row ``rows[i]``, in bucket ``band[i]`` of a shared key, block ``block[i]`` of
    ``blocks[i]``) as an *entry* (key, band, task, side), sent with the set and its band keys
    to a destination ``dest`` (the shuffle's key); a frame row carries one set and its
    entries for one destination.

    - A membership of a *whole* component (``whole[i]``: its component of the band buckets'
      graph fits one partition) goes to its component's destination ``dest[i]``, task 0,
      side 0 (cross join: side 1 at or above ``boundary``): a set travels once, with all
      its memberships, and every bucket of its component is joined in one partition.
    - Any other membership goes once per block pair of its bucket that holds its block:
      task ``lo * blocks + hi`` (lo <= hi), side 0 in block lo, 1 in block hi (a bucket of
      one block: task 0, side 0); destination a hash of (band, key, task). With a
      ``boundary`` (the cross join): a row below it is side 0, in its side's block i, paired
      with each block j < ``blocks[i]`` of the other side, and a row at or above it side 1,
      in block j, paired with each block i; task ``(i + j)(i + j + 1) / 2 + j`` (Cantor's
      pairing) names the block pair from either side.

    An entry is two uint64: the band key, and ``band << 40 | task << 8 | side``."""
    if part is None or local.size == 0:
        empty = {n: np.zeros(0, t) for n, t in _SET_META.items() if t is not _BINARY}
        frame = pd.DataFrame(empty)
        zero = np.zeros(1, dtype=np.int64)
        for column in ("keys", "set", "entries"):
            frame[column] = _binary(np.zeros(0, np.uint64), zero)
        return frame
    if whole is None or dest is None:
        whole = np.zeros(local.size, dtype=bool)
        dest = np.zeros(local.size, dtype=np.uint64)
    split = np.flatnonzero(~whole)
    copies = blocks[split].astype(np.int64)
    at = split[np.repeat(np.arange(split.size), copies)]
    other = np.arange(at.size) - np.repeat(np.cumsum(copies) - copies, copies)  # j of blocks
    mine = block[at].astype(np.int64)
    if boundary is None:
        low, high = np.minimum(mine, other), np.maximum(mine, other)
        task = low * np.repeat(copies, copies) + high
        side = (mine != low).astype(np.int64)
    else:
        second = rows[at] >= boundary
        i, j = np.where(second, other, mine), np.where(second, mine, other)
        task = (i + j) * (i + j + 1) // 2 + j
        side = second.astype(np.int64)
    kept = np.flatnonzero(whole)
    at = np.concatenate((at, kept))
    task = np.concatenate((task, np.zeros(kept.size, dtype=np.int64)))
    side_whole = rows[kept] >= boundary if boundary is not None else np.zeros(kept.size, bool)
    side = np.concatenate((side, side_whole.astype(np.int64)))
    bands_of = band[at].astype(np.int64)
    key = part.keys[local[at], bands_of]
    name = (bands_of.astype(np.uint64) << np.uint64(32)) | task.astype(np.uint64)
    target = np.where(whole[at], dest[at], mix(key ^ mix(name + np.uint64(1))))
    # one frame row per (destination, set), its entries in order
    order = np.lexsort((at, local[at], target))
    at, target, key = at[order], target[order], key[order]
    packed = (
        (bands_of[order].astype(np.uint64) << np.uint64(40))
        | (task[order].astype(np.uint64) << np.uint64(8))
        | side[order].astype(np.uint64)
    )
    chosen_of = local[at]
    change = np.ones(at.size, dtype=bool)
    change[1:] = (target[1:] != target[:-1]) | (chosen_of[1:] != chosen_of[:-1])
    starts = np.flatnonzero(change)
    counts = np.diff(np.append(starts, at.size))
    chosen = chosen_of[starts]
    sets = part.sets.take(chosen)
    keys = part.keys[chosen]
    entries = np.empty(2 * at.size, dtype=np.uint64)
    entries[0::2], entries[1::2] = key, packed
    bounds = np.zeros(starts.size + 1, dtype=np.int64)
    np.cumsum(2 * counts, out=bounds[1:])
    frame = pd.DataFrame({"dest": target[starts], "row": rows[at[starts]]})
    frame["keys"] = _binary(keys.ravel(), np.arange(chosen.size + 1) * keys.shape[1])
    frame["set"] = _binary(sets.values, sets.offsets)
    frame["entries"] = _binary(entries, bounds)
    return frame


def join_partition(frame: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Step 4 of :func:`jaccard_pairs` for one partition of :func:`set_rows` holding every row
    of each of its buckets: per band, the verified pairs of its buckets (a bucket's rows
    against each other; a block pair's side-0 rows against its side-1 rows), a pair skipped
    when the two rows' band keys agree in an earlier band, by
    :func:`permindex.near.jaccard.verified_tasks` (the local engine's kernel). Returns (a,
    b, distance): row ids a < b, distance in :data:`~permindex.near.jaccard.SCALE` units,
    and one last row (-1, candidates, candidates merged) with the partition's counts."""
    counts = {"a": [-1], "b": [0], "distance": [0]}
    if len(frame) == 0:
        return pd.DataFrame(counts).astype(_PAIRS_META)
    values, offsets = _unbinary(frame["set"], np.uint64)
    sets = ShingleSets(values, offsets)
    flat, _ = _unbinary(frame["keys"], np.uint64)
    packed, bounds = _unbinary(frame["entries"], np.uint64)
    # one row per entry from here on: its set is representative[row] of the frame's sets
    representative = np.repeat(np.arange(len(frame), dtype=np.int64), np.diff(bounds) // 2)
    n = representative.size
    key = packed[0::2]
    code = packed[1::2]
    band = (code >> np.uint64(40)).astype(np.int16)
    task = ((code >> np.uint64(8)) & np.uint64(0xFFFFFFFF)).astype(np.int32)
    side = (code & np.uint64(0xFF)).astype(np.int8)
    rows = frame["row"].to_numpy(dtype=np.int64)[representative]
    keys = flat.reshape(len(frame), -1)[representative]
    order = np.lexsort((rows, side, task, key, band)).astype(np.int64)
    sb, sk, st, ss = band[order], key[order], task[order], side[order]
    change = np.ones(n, dtype=bool)
    change[1:] = (sb[1:] != sb[:-1]) | (sk[1:] != sk[:-1]) | (st[1:] != st[:-1])
    starts = np.flatnonzero(change)
    sizes = np.diff(np.append(starts, n))
    end = np.repeat(starts + sizes, sizes)
    # where each group's side-1 rows start (its end when it has none)
    side1 = np.where(ss == 1, np.arange(n), n)
    first_side1 = np.minimum.reduceat(side1, starts) if n else side1
    split_at = np.minimum(np.repeat(first_side1, sizes), end)
    at = np.arange(n, dtype=np.int64)
    crossed = split_at < end
    low = np.where(crossed, split_at, at + 1)
    tasks = (ss == 0) & (low < end)
    parts: list[PairArrays] = []
    candidates = merged = 0
    for b in np.unique(sb).tolist():
        pick = np.flatnonzero(tasks & (sb == b))
        if pick.size == 0:
            continue
        found, tried, kept = verified_tasks(
            order, pick, low[pick], end[pick], keys, int(b), representative, sets, threshold
        )
        candidates += found
        merged += tried
        parts.extend(kept)
    counts = {"a": [-1], "b": [candidates], "distance": [merged]}
    if not parts:
        return pd.DataFrame(counts).astype(_PAIRS_META)
    u, v, d = (np.concatenate(x) for x in zip(*parts, strict=True))
    a, b_ = rows[u], rows[v]
    found_pairs = pd.DataFrame({"a": np.minimum(a, b_), "b": np.maximum(a, b_), "distance": d})
    return pd.concat([found_pairs, pd.DataFrame(counts)], ignore_index=True).astype(_PAIRS_META)


# ------------------------------------------------------------------------------- the join


class Selection(NamedTuple):
    """The distinct sets of one part that take part in the join: ``local`` ((r,) int64,
    ascending) their positions among the part's sets, ``rows`` ((r,) int64) their row ids
    (input positions, ascending), ``sizes`` ((r,) int64) their set sizes."""

    local: _I64
    rows: _I64
    sizes: _I64


@dataclass
class HeldSets:
    """The distinct shingle sets of a Jaccard run's kept documents, left on the workers for a
    second join (``dedup NEW --against CORPUS``, :mod:`permindex.distributed.against`):
    ``parts`` the futures of each task's :class:`JaccardPart` (the sets stay alive while
    they are held here), ``selections`` their distinct sets, row ids the positions of their
    documents in the result's keys (``DedupResult.near.keys``). Empty when nothing was
    joined."""

    parts: list[Any] = field(default_factory=list)
    selections: list[Selection] = field(default_factory=list)


class Joined(NamedTuple):
    """What :func:`jaccard_pairs` found: the pairs (row ids a < b, distance in
    :data:`~permindex.near.jaccard.SCALE` units), the candidates and the candidates merged,
    as :func:`permindex.near.jaccard.self_join` counts them."""

    pairs: PairArrays
    candidates: int
    merged: int


def _whole_components(
    rows: _I64, band: NDArray[np.int16], key: _U64, row_bytes: _I64, limit: int
) -> tuple[NDArray[np.bool_], _U64]:
    """For m memberships (row, band, key) of shared buckets, each with its row's bytes in the
    shuffle: whether its row's component of the bucket graph (rows joined by a shared
    bucket: every candidate pair lies inside one) weighs at most ``limit`` bytes, and the
    destination of such a component (a hash of its smallest row): ((m,) bool, (m,) uint64).
    Union-find over the memberships, O(m log m)."""
    from permindex.index.join.clusters import components

    distinct, inverse = np.unique(rows, return_inverse=True)
    order = np.lexsort((rows, key, band))
    change = np.ones(rows.size, dtype=bool)
    change[1:] = (band[order][1:] != band[order][:-1]) | (key[order][1:] != key[order][:-1])
    firsts = np.maximum.accumulate(np.where(change, np.arange(rows.size), 0))
    labels = components(distinct.size, inverse[order][firsts], inverse[order])
    weights = np.zeros(distinct.size, dtype=np.int64)
    weights[inverse] = row_bytes  # a row's bytes, once
    total = np.bincount(labels, weights=weights, minlength=distinct.size)
    label = labels[inverse]
    whole = total[label] <= limit
    dest = mix(distinct[label].astype(np.uint64) ^ np.uint64(0x9E3779B97F4A7C15))
    return whole, dest


def _gathered(frame: Any) -> pd.DataFrame:
    """A persisted frame's partitions brought here one at a time, concatenated."""
    from distributed import futures_of

    parts = [future.result() for future in futures_of(frame)]
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()


def jaccard_pairs(
    client: Client,
    parts: list[Any],
    selections: list[Selection],
    threshold: float,
    bands: int,
    *,
    hot_threshold: int | None = None,
    partition_bytes: int | None = None,
    component_bytes: int | None = None,
    boundary: int | None = None,
    progress: bool = False,
) -> Joined:
    """Every pair of the selected distinct sets with Jaccard >= ``threshold`` that agree in
    at least one band: the pairs of :func:`permindex.near.jaccard.self_join` on the same sets
    (Indyk & Motwani 1998 banding, each candidate verified exactly), with the same counts.
    ``parts``: futures (or Dask delayed values) of each part's :class:`JaccardPart` (None for
    none), ``selections`` the distinct sets of each (row ids distinct over all parts, each
    part's in a range of its own).

    With a ``boundary`` (row id), the *cross join* of ``dedup NEW --against CORPUS``: only the
    pairs of a row below it (a new set) and a row at or above it (a corpus set), a < b; a
    bucket without rows of both sides is dropped in step 2, and a hot bucket's two sides are
    cut into blocks each (each pair of a new block and a corpus block joined as a bucket of
    its own). The counts are then those of the cross candidates.

    Steps:

    1. each part emits (band key, band, row) for each selected set and band
       (:func:`band_rows`: 18 bytes a set a band, no set), shuffled by the key;
    2. each partition keeps the rows of the buckets (band, key) shared by two or more sets
       (:func:`shared_memberships`), cutting a hot bucket (more than ``hot_threshold`` sets,
       default :data:`HOT_BAND_BUCKET`) into blocks; these *memberships* come here (26
       bytes each) and are sent back to the parts, so that an unrelated document's set never
       travels;
    3. here, the memberships' rows are cut into the connected components of the bucket
       graph (rows joined by a shared bucket, union-find: every candidate pair lies inside
       one); each part emits its sets with their band keys and memberships (:func:`set_rows`):
       a set of a component of at most ``component_bytes`` (default half a partition)
       *once*, to its component's destination, so that all the buckets of a template family
       are joined in one partition and its pages' sets travel once, not once per band; a set
       of a larger component once per bucket, a hot bucket's rows once per pair of blocks
       that holds theirs (a partition holds at most ``hot_threshold`` rows of one such bucket
       and nothing is dropped); shuffled by destination into partitions of about
       ``partition_bytes`` (default :data:`PARTITION_BYTES`);
    4. each partition verifies its buckets' candidates in the local engine's kernel
       (:func:`join_partition`), a pair only in the first band where the two sets agree, so
       no de-duplication of pairs is needed; the pairs come here.

    Memory here: the memberships (26 bytes each, and about as much for the components)
    and the pairs (24 bytes each). On a worker:
    one partition of a shuffle and one chunk of candidates. Each frame is persisted, and in
    the cluster's memory, before the next graph is built
    (:func:`~permindex.distributed.join.persisted`), so a lost worker's partitions are
    recomputed from their lineage.
    """
    import dask.dataframe as dd

    from permindex.distributed.join import show_progress

    if hot_threshold is None:  # read now: a test lowers them for a whole run
        hot_threshold = HOT_BAND_BUCKET
    if partition_bytes is None:
        partition_bytes = PARTITION_BYTES
    workers = max(1, len(client.nthreads()))
    total = sum(s.local.size for s in selections)
    empty = np.zeros(0, dtype=np.int64)
    nothing = Joined(PairArrays(empty, empty.copy(), empty.copy()), 0, 0)
    if total < 2:
        return nothing
    emitted = [
        client.submit(band_rows, part, s.local, s.rows, pure=False)
        for part, s in zip(parts, selections, strict=True)
    ]
    frame = dd.from_delayed(emitted, meta=_BAND_META, verify_meta=False)
    count = join_partitions(total * bands, workers)
    grouped = frame.shuffle(on="key", npartitions=count, shuffle_method=shuffle_method(count))
    shared = persisted(
        grouped.map_partitions(shared_memberships, hot_threshold, boundary, meta=_SHARED_META)
    )
    del frame, grouped, emitted
    members = _gathered(shared)
    del shared
    if members.empty:
        return nothing
    member_rows = members["row"].to_numpy(dtype=np.int64)
    order = np.argsort(member_rows, kind="stable")
    member_rows = member_rows[order]
    member_band = members["band"].to_numpy(dtype=np.int16)[order]
    member_key = members["key"].to_numpy(dtype=np.uint64)[order]
    member_blocks = members["blocks"].to_numpy(dtype=np.int32)[order]
    member_block = members["block"].to_numpy(dtype=np.int32)[order]
    del members
    # each row's bytes in the shuffle: its set, its band keys, its other columns
    every_row = np.concatenate([s.rows for s in selections])
    every_size = np.concatenate([s.sizes for s in selections])
    by_row = np.argsort(every_row, kind="stable")
    member_bytes = (
        every_size[by_row[np.searchsorted(every_row[by_row], member_rows)]] + bands
    ) * 8 + _ROW_BYTES
    if component_bytes is None:
        component_bytes = partition_bytes // 2
    whole, dest = _whole_components(
        member_rows, member_band, member_key, member_bytes, component_bytes
    )
    sent = []
    shipped = 0
    for part, s in zip(parts, selections, strict=True):
        if s.rows.size == 0:
            continue
        lo, hi = np.searchsorted(member_rows, [s.rows[0], s.rows[-1] + 1])
        if hi == lo:
            continue
        at = np.searchsorted(s.rows, member_rows[lo:hi])
        copies = np.where(whole[lo:hi], 0, member_blocks[lo:hi]).astype(np.int64)
        first = np.ones(hi - lo, dtype=bool)  # a whole component's set travels once
        first[1:] = member_rows[lo + 1 : hi] != member_rows[lo : hi - 1]
        shipped += int(member_bytes[lo:hi] @ (copies + (whole[lo:hi] & first)))
        shipped += 16 * int(copies.sum() + whole[lo:hi].sum())  # the entries
        sent.append(
            client.submit(
                set_rows,
                part,
                s.local[at],
                member_band[lo:hi],
                member_blocks[lo:hi],
                member_block[lo:hi],
                s.rows[at],
                boundary,
                whole[lo:hi],
                dest[lo:hi],
                pure=False,
            )
        )
    frame = dd.from_delayed(sent, meta=_SET_META, verify_meta=False)
    count = max(workers, -(-shipped // partition_bytes))
    grouped = frame.shuffle(on="dest", npartitions=count, shuffle_method=shuffle_method(count))
    joined = persisted(grouped.map_partitions(join_partition, threshold, meta=_PAIRS_META))
    if progress:
        show_progress(joined)
    del frame, grouped, sent
    found = _gathered(joined)
    del joined
    a = found["a"].to_numpy(dtype=np.int64)
    tallies = a < 0
    b = found["b"].to_numpy(dtype=np.int64)
    d = found["distance"].to_numpy(dtype=np.int64)
    pairs = PairArrays(a[~tallies], b[~tallies], d[~tallies])
    return Joined(pairs, int(b[tallies].sum()), int(d[tallies].sum()))
