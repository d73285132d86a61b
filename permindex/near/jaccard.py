"""The Jaccard mode of ``permindex dedup`` (``--method minhash``): candidates from MinHash-LSH
bands (:mod:`permindex.near.minhash`), each verified by the exact Jaccard similarity of the two
shingle sets, so that every pair reported has J >= the threshold (precision 1.0 by
construction) and recall is the S-curve's (:func:`permindex.near.minhash.choose_bands`).

:class:`JaccardDuplicates` is a :class:`~permindex.index.join.clusters.NearDuplicates` whose join is
this one: pairs, clusters, flags, exact-duplicate groups and the keep rule are the SimHash
mode's, with a *distance* of ``round((1 - J) * 10^4)`` (:data:`SCALE`): 0 for identical sets,
so "nearest" means most similar, and the Jaccard to 4 decimals is ``1 - distance / 10^4``
(:func:`jaccard_text`). Identical shingle sets share one *set digest* (XXH3-64 of the sorted
set, in place of the fingerprint), so they are joined once and expanded only where pairs of
keys are listed, lazily.

Memory on templated corpora: a band bucket of m sets yields m(m-1)/2 candidate pairs, met and
verified in one compiled kernel per chunk of at most :data:`BATCH` pairs (:func:`self_join`:
only the pairs kept are written); a pair met in an earlier band is skipped (its band keys are
compared), so no set of the pairs seen is kept. Two sets of one *family* (a component of the
sets that share a band key, such as a template's edited copies) are verified from their small
differences to the family's reference set (:class:`FamilyDeltas`), the others by merging the
two sets. Held at once: the shingle sets (8 bytes a distinct shingle a document), the band
keys (8 bytes a band a document until the join is done, then of a distinct set, kept for
:meth:`JaccardDuplicates.matches`; the signatures, 4 bytes a permutation, are turned into band
keys as each chunk is read and not kept), the family deltas during the
join (at most half the sets' hashes; about 18 a set on a templated corpus), one chunk, and the
verified pairs of distinct sets (24 bytes each).
Importing it does not import numba.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np
import xxhash
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.join.clusters import NearDuplicates
from permindex.index.join.pair_stream import PairArrays, Values, distinct_values
from permindex.index.join.self_join import check_stop
from permindex.near.minhash import Bands, check_threshold

__all__ = [
    "BATCH",
    "SCALE",
    "FamilyDeltas",
    "JaccardDuplicates",
    "ShingleSets",
    "Verified",
    "family_deltas",
    "intersection_sizes",
    "jaccard_text",
    "lookup_batches",
    "self_join",
    "verified_tasks",
    "verify",
]

#: Distance units of the Jaccard mode: distance = round((1 - J) * SCALE).
SCALE: Final = 10_000
#: Candidate pairs generated and verified at once, at most.
BATCH: Final = 1 << 17

_I64 = NDArray[np.int64]


@dataclass(frozen=True)
class ShingleSets:
    """n shingle sets in one CSR array: set i is ``values[offsets[i]:offsets[i + 1]]``, its
    distinct (m_i,) uint64 shingle hashes in ascending order; offsets is (n + 1,) int64."""

    values: NDArray[np.uint64]
    offsets: _I64

    def __len__(self) -> int:
        return int(self.offsets.size) - 1

    @property
    def sizes(self) -> _I64:
        """((n,) int64) the size of each set."""
        return np.diff(self.offsets)

    @classmethod
    def of(cls, sets: Sequence[NDArray[np.uint64]]) -> ShingleSets:
        """From n arrays of shingle hashes (repeats and any order allowed)."""
        distinct = [_distinct(s) for s in sets]
        offsets = np.zeros(len(distinct) + 1, dtype=np.int64)
        np.cumsum([s.size for s in distinct], out=offsets[1:])
        values = np.concatenate(distinct) if distinct else np.zeros(0, dtype=np.uint64)
        return cls(values.astype(np.uint64, copy=False), offsets)

    @classmethod
    def concat(cls, parts: Sequence[ShingleSets]) -> ShingleSets:
        """The sets of ``parts``, one after the other."""
        if not parts:
            return cls(np.zeros(0, dtype=np.uint64), np.zeros(1, dtype=np.int64))
        values = np.concatenate([p.values for p in parts])
        sizes = np.concatenate([p.sizes for p in parts])
        offsets = np.zeros(sizes.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        return cls(values, offsets)

    def take(self, indices: _I64) -> ShingleSets:
        """The sets at ``indices`` ((m,) int64), in that order."""
        sizes = self.sizes[indices]
        offsets = np.zeros(indices.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        starts = np.repeat(self.offsets[:-1][indices] - offsets[:-1], sizes)
        return ShingleSets(self.values[starts + np.arange(int(offsets[-1]))], offsets)

    def digests(self) -> NDArray[np.uint64]:
        """((n,) uint64) the set digest of each set: XXH3-64 of its sorted hashes' bytes
        (little-endian uint64), seed s, the smallest s >= 0 for which equal digests mean equal
        sets (checked), so that the digest is a name of the set."""
        seed = 0
        while True:
            out = self.seeded_digests(seed)
            if self._digests_name_sets(out):
                return out
            seed += 1

    def seeded_digests(self, seed: int = 0) -> NDArray[np.uint64]:
        """((n,) uint64) XXH3-64 of each set's sorted hashes (little-endian uint64 bytes),
        seed ``seed``: :meth:`digests` before its check. O(total hashes)."""
        raw = self.values.astype("<u8", copy=False)
        offsets = self.offsets.tolist()
        return np.fromiter(
            (
                xxhash.xxh3_64_intdigest(raw[offsets[i] : offsets[i + 1]].tobytes(), seed)
                for i in range(len(self))
            ),
            dtype=np.uint64,
            count=len(self),
        )

    def check_digests(self) -> NDArray[np.uint64]:
        """((n,) uint64) a second name of each set, independent of :meth:`seeded_digests`: the
        high 64 bits of its XXH3-128 (seed 0). Two sets with equal digests *and* equal check
        digests are taken as equal by the Dask engine (:mod:`permindex.distributed.jaccard`),
        which does not hold the sets in one place to compare them. O(total hashes)."""
        raw = self.values.astype("<u8", copy=False)
        offsets = self.offsets.tolist()
        return np.fromiter(
            (
                xxhash.xxh3_128_intdigest(raw[offsets[i] : offsets[i + 1]].tobytes()) >> 64
                for i in range(len(self))
            ),
            dtype=np.uint64,
            count=len(self),
        )

    def _digests_name_sets(self, digests: NDArray[np.uint64]) -> bool:
        values = distinct_values(digests)
        for w in np.flatnonzero(values.counts > 1).tolist():
            members = values.by_value[values.first[w] : values.first[w] + values.counts[w]]
            first = self.set(int(members[0]))
            if any(not np.array_equal(first, self.set(int(m))) for m in members[1:].tolist()):
                return False
        return True

    def set(self, i: int) -> NDArray[np.uint64]:
        """Set i, (m_i,) uint64."""
        return self.values[self.offsets[i] : self.offsets[i + 1]]


def _distinct(hashes: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The distinct values of ``hashes``, ascending (a sort and one comparison: cheaper than
    :func:`numpy.unique` for the few hundred hashes of a page)."""
    ordered = np.sort(hashes)
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def intersection_sizes(
    sets: ShingleSets, left: _I64, right: _I64, other: ShingleSets | None = None
) -> _I64:
    """((k,) int64) |set left[i] & set right[i]| for each i, the right sets taken from
    ``other`` when given (else from ``sets``): one merge of the two sorted sets per pair in a
    compiled kernel (:func:`permindex.near.minhash_kernels.intersection_sizes`).
    O(sum of the pairs' set sizes)."""
    out = np.zeros(left.size, dtype=np.int64)
    if left.size == 0:
        return out
    from permindex.near import minhash_kernels

    right_sets = sets if other is None else other
    minhash_kernels.intersection_sizes(
        sets.values,
        sets.offsets,
        left.astype(np.int64),
        right_sets.values,
        right_sets.offsets,
        right.astype(np.int64),
        out,
    )
    return out


class Verified(NamedTuple):
    """What :func:`verify` found of k candidate pairs."""

    kept: NDArray[np.bool_]  # (k,) the pairs with J >= the threshold
    distance: _I64  # (m,) round((1 - J) * SCALE) of the m kept pairs, in order
    merged: int  # the candidates merged (those whose set sizes allow the threshold)


def verify(
    sets: ShingleSets,
    left: _I64,
    right: _I64,
    threshold: float,
    other: ShingleSets | None = None,
) -> Verified:
    """The exact check of candidate pairs (set ``left[i]`` of ``sets`` with set ``right[i]`` of
    ``other``, or of ``sets`` when None): the pairs with ``|A & B| / |A | B| >= threshold``
    and their distance ``round((1 - J) *`` :data:`SCALE` ``)`` (ties up). A pair whose sizes
    alone rule it out (``min / max < threshold``, as J <= min / max) is not merged.
    O(sum of the merged pairs' sizes)."""
    right_sets = sets if other is None else other
    size_l = sets.sizes[left]
    size_r = right_sets.sizes[right]
    possible = np.flatnonzero(np.minimum(size_l, size_r) / np.maximum(size_l, size_r) >= threshold)
    inter = intersection_sizes(sets, left[possible], right[possible], other)
    union = size_l[possible] + size_r[possible] - inter
    good = inter / union >= threshold
    kept = np.zeros(left.size, dtype=bool)
    kept[possible[good]] = True
    inter, union = inter[good], union[good]
    distance = ((union - inter) * 2 * SCALE + union) // (2 * union)
    return Verified(kept, distance.astype(np.int64), int(possible.size))


class FamilyDeltas(NamedTuple):
    """d sets of a self-join (rows x = 0..d-1) written as a few shingles removed from and
    added to a reference set, for a cheaper exact intersection of two rows of one family.

    Row x's *family* is an index f into ``references`` (its reference set R is
    ``references.set(f)``) or -1 (none); its delta is R - A (``removed``) and A - R
    (``added``), each ascending, in CSR (row x's removed shingles are
    ``removed.set(x)``; empty for a row without a family). For two rows A, B of one family,
    as A = (R - (R - A)) | (A - R) with A - R disjoint from R::

        |A & B| = |R| - |R - A| - |R - B| + |(R - A) & (R - B)| + |(A - R) & (B - R)|

    exactly, in two merges of the small deltas instead of one of the two whole sets. A
    family is a connected component of two or more rows that share a band key (in a templated
    corpus: a template's copies); its reference is the majority of its rows (the shingles of
    its smallest row's set that at most half of the rows remove, and those that more than
    half add: the template's own text), and a row joins it only when its delta is at most
    half its set (``2 (|R - A| + |A - R|) <= |A|``): a row far from the reference is merged
    whole, as before. Built by :func:`family_deltas`."""

    family: _I64  # (d,) int64: the family of each row (an index into references), or -1
    references: ShingleSets  # f sets: the reference set of each family
    removed: ShingleSets  # d sets: R - A of each row
    added: ShingleSets  # d sets: A - R of each row


def family_deltas(
    sets: ShingleSets, representative: _I64, keys: NDArray[np.uint64]
) -> FamilyDeltas:
    """The :class:`FamilyDeltas` of d rows (row x is ``sets.set(representative[x])``, its
    band keys ``keys[x]``, ``(d, bands) uint64``): the components of the rows that share a
    band key (union-find over each band's sorted keys, O(bands x d log d)), then four merges
    of each row of a component of two or more rows with its references, the first and the
    majority (O(total set sizes), and a sort of the first deltas),
    in compiled kernels (:func:`permindex.near.minhash_kernels.band_components`,
    :func:`~permindex.near.minhash_kernels.family_deltas`). Memory: the deltas, at most half
    the sets' hashes, and O(d)."""
    from permindex.near import minhash_kernels

    d = int(representative.size)
    if d == 0:
        empty = ShingleSets(np.zeros(0, dtype=np.uint64), np.zeros(1, dtype=np.int64))
        return FamilyDeltas(np.zeros(0, dtype=np.int64), empty, empty, empty)
    labels = minhash_kernels.band_components(np.ascontiguousarray(keys, dtype=np.uint64))
    family, *csr = minhash_kernels.family_deltas(
        labels, representative.astype(np.int64, copy=False), sets.values, sets.offsets
    )
    references, removed, added = (
        ShingleSets(csr[i].astype(np.uint64, copy=False), csr[i + 1].astype(np.int64, copy=False))
        for i in (0, 2, 4)
    )
    return FamilyDeltas(family, references, removed, added)


def self_join(
    sets: ShingleSets,
    representative: _I64,
    keys: NDArray[np.uint64],
    threshold: float,
    batch: int = BATCH,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[PairArrays, int, int]:
    """The verified pairs among d distinct sets (set x is ``sets.set(representative[x])``,
    its band keys ``keys[x]``, ``(d, bands) uint64``): every pair (u, v), u < v, equal in at
    least one band, taken once (in the first band where they agree: a pair whose keys agree
    in an earlier band is skipped), verified exactly. Returns (the pairs with J >=
    ``threshold``, as positions u, v and distance, :data:`SCALE` units; the candidates; the
    candidates merged, those whose set sizes allow the threshold).

    One compiled kernel per chunk of a band's buckets (:func:`verified_tasks`), so candidates
    are never materialised, only the pairs kept: a chunk holds whole rows of buckets (a member
    against the later ones), at most ``batch`` pairs or one row. Memory O(d + batch) besides
    the pairs kept, however large a bucket. Time O(bands x d log d) for the buckets, the merges
    of the candidates (a merge is given up once the threshold is out of reach), and O(bands)
    for each pair met again in a later band.

    ``should_stop`` (a server's call: cancelled, or its deadline passed) is called before each
    band and between kernel calls.

    Raises:
        CallCancelledError: ``should_stop`` returned True; nothing is returned.
    """
    d, bands = keys.shape
    parts: list[PairArrays] = []
    candidates = merged = 0
    deltas = family_deltas(sets, representative, keys)
    for band in range(bands):
        check_stop(should_stop)
        column = keys[:, band]
        order = np.argsort(column, kind="stable").astype(np.int64)
        ordered = column[order]
        starts = np.flatnonzero(np.append(True, ordered[1:] != ordered[:-1])).astype(np.int64)
        sizes = np.diff(np.append(starts, d)).astype(np.int64)
        shared = sizes >= 2
        starts, sizes = starts[shared], sizes[shared]
        if starts.size == 0:
            continue
        # row tasks: member i of a bucket against the members after it
        bucket = np.repeat(np.arange(starts.size, dtype=np.int64), sizes - 1)
        first_row = np.cumsum(sizes - 1) - (sizes - 1)
        row_index = np.arange(bucket.size, dtype=np.int64) - first_row[bucket]
        first = starts[bucket] + row_index
        found, tried, kept = verified_tasks(
            order, first, first + 1, starts[bucket] + sizes[bucket], keys, band,
            representative, sets, threshold, batch, deltas, should_stop,
        )  # fmt: skip
        candidates += found
        merged += tried
        parts.extend(kept)
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return PairArrays(empty, empty.copy(), empty.copy()), candidates, merged
    pairs = PairArrays(*(np.concatenate(x) for x in zip(*parts, strict=True)))
    return pairs, candidates, merged


def verified_tasks(
    order: _I64,
    first: _I64,
    low: _I64,
    high: _I64,
    keys: NDArray[np.uint64],
    band: int,
    representative: _I64,
    sets: ShingleSets,
    threshold: float,
    batch: int = BATCH,
    deltas: FamilyDeltas | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> tuple[int, int, list[PairArrays]]:
    """The verified pairs of row tasks t of one band (set ``order[first[t]]`` against each set
    of ``order[low[t]:high[t]]``, as :func:`permindex.near.minhash_kernels.
    bucket_pairs_verified` defines them), in chunks of whole tasks of at most ``batch`` pairs
    (or one task): (candidates, candidates merged, the kept pairs (u, v, distance) of each
    chunk that kept any). Two rows of one family of ``deltas`` (:func:`family_deltas` of
    the same rows) are verified from their deltas; without ``deltas`` every pair's sets are
    merged. The one caller of the kernel, for :func:`self_join` and the Dask engine's join
    (:mod:`permindex.distributed.jaccard`). Memory O(batch) besides the pairs kept.
    ``should_stop``: called between kernel calls (CallCancelledError when it returns True)."""
    from permindex.near import minhash_kernels

    if deltas is None:  # no family: an empty family array
        nothing = ShingleSets(np.zeros(0, dtype=np.uint64), np.zeros(1, dtype=np.int64))
        deltas = FamilyDeltas(np.zeros(0, dtype=np.int64), nothing, nothing, nothing)
    family, references, removed, added = deltas

    parts: list[PairArrays] = []
    candidates = merged = 0
    ends = np.cumsum(high - low)  # pairs up to and including each task
    at = 0
    while at < ends.size:
        check_stop(should_stop)
        before = int(ends[at - 1]) if at else 0
        stop = max(at + 1, int(np.searchsorted(ends, before + batch, side="right")))
        out = np.empty((3, int(ends[stop - 1]) - before), dtype=np.int64)
        found, tried, kept = minhash_kernels.bucket_pairs_verified(
            order, first[at:stop], low[at:stop], high[at:stop], keys, band,
            representative, sets.values, sets.offsets, threshold, SCALE,
            family, references.offsets, removed.values, removed.offsets, added.values,
            added.offsets,
            out[0], out[1], out[2],
        )  # fmt: skip
        candidates += found
        merged += tried
        if kept:
            parts.append(PairArrays(*out[:, :kept].copy()))
        at = stop
    return candidates, merged, parts


def lookup_batches(
    keys: NDArray[np.uint64],
    indexed: NDArray[np.uint64],
    batch: int = BATCH,
    should_stop: Callable[[], bool] | None = None,
) -> Iterator[tuple[_I64, _I64]]:
    """The LSH candidates between m query sets and n indexed sets given their ``(m, bands)``
    and ``(n, bands) uint64`` band keys: every pair (query row, indexed row) equal in at least
    one band, each exactly once (in the first band where they agree), in batches of at most
    ``batch`` pairs, however many indexed sets share one bucket. O(bands x (n log n + m log n))
    for the sorted bands and look-ups, plus the candidates; memory O(n + m + batch x bands).
    ``should_stop``: called before each batch (CallCancelledError when it returns True)."""
    for band in range(keys.shape[1]):
        check_stop(should_stop)
        order = np.argsort(indexed[:, band], kind="stable").astype(np.int64)
        ordered = indexed[order, band]
        low = np.searchsorted(ordered, keys[:, band], side="left").astype(np.int64)
        counts = np.searchsorted(ordered, keys[:, band], side="right") - low
        ends = np.cumsum(counts)
        total = int(ends[-1]) if ends.size else 0
        for start in range(0, total, batch):
            check_stop(should_stop)
            flat = np.arange(start, min(start + batch, total), dtype=np.int64)
            rows = np.searchsorted(ends, flat, side="right").astype(np.int64)
            found = order[low[rows] + flat - (ends[rows] - counts[rows])]
            if band:
                seen = (keys[rows, :band] == indexed[found, :band]).any(axis=1)
                rows, found = rows[~seen], found[~seen]
            if rows.size:
                yield rows, found


def jaccard_text(distance: int) -> str:
    """The Jaccard similarity of a pair at ``distance`` (units of 1/:data:`SCALE`), 4
    decimals: ``"0.8123"``."""
    whole, part = divmod(SCALE - distance, SCALE)
    return f"{whole}.{part:04d}"


class JaccardDuplicates(NearDuplicates):
    """Pairs of documents whose shingle sets have Jaccard similarity >= ``threshold``, found
    by MinHash-LSH and verified exactly (see the module docstring), with everything
    :class:`~permindex.index.join.clusters.NearDuplicates` offers on top (``k`` is the largest
    distance, ``round((1 - threshold) * SCALE)``; ``fingerprints`` are the set digests).

    Args:
        keys: n distinct keys.
        sets: their n shingle sets (:class:`ShingleSets`, none empty).
        keys_of_bands: their ``(n, shape.bands) uint64`` LSH band keys
            (:func:`permindex.near.minhash.band_keys` of their MinHash signatures).
        threshold: the least Jaccard similarity of a pair, in (0, 1].
        shape: the LSH bands (bands x rows <= permutations).

    Attributes:
        candidates: candidate pairs of distinct sets from the bands (each once).
        candidates_verified: those checked by exact Jaccard: the candidates whose set sizes
            allow the threshold (J <= min size / max size: a pair of sets of more unequal
            sizes is refused by that bound alone).
        threshold, shape: as given.

    Raises:
        InvalidArgumentError: a threshold outside (0, 1], keys and sets of different lengths.
    """

    def __init__(
        self,
        keys: Sequence[str],
        sets: ShingleSets,
        keys_of_bands: NDArray[np.uint64],
        threshold: float,
        shape: Bands,
        *,
        batch: int = BATCH,
    ) -> None:
        self.threshold = check_threshold(threshold)
        self.shape = shape
        self.candidates = 0
        self.candidates_verified = 0
        self._sets: ShingleSets | None = sets
        if keys_of_bands.shape != (len(sets), shape.bands):
            raise InvalidArgumentError(
                f"band keys of shape {keys_of_bands.shape} for {len(sets)} sets and "
                f"{shape.bands} bands"
            )
        self._batch = batch
        self._band_keys = keys_of_bands  # of every set until the join, then of distinct sets
        k = round((1.0 - self.threshold) * SCALE)
        super().__init__(keys, sets.digests(), k, join_values=self._join)

    @classmethod
    def joined_elsewhere(
        cls,
        keys: Sequence[str],
        digests: NDArray[np.uint64],
        threshold: float,
        shape: Bands,
        pairs: PairArrays,
        candidates: int,
        candidates_verified: int,
    ) -> JaccardDuplicates:
        """The same object from a join done elsewhere (the Dask engine,
        :mod:`permindex.distributed.jaccard`), without the sets: ``digests`` ((n,) uint64,
        the set digests, :meth:`ShingleSets.digests`), ``pairs`` every verified pair of
        positions into ``keys`` with *distinct* digests, one position per digest, each pair
        once, distance in :data:`SCALE` units; the join's counts as :attr:`candidates` and
        :attr:`candidates_verified` define them. :meth:`matches` is not available (no sets).
        O(n + pairs)."""
        self = cls.__new__(cls)
        self.threshold = check_threshold(threshold)
        self.shape = shape
        self.candidates = candidates
        self.candidates_verified = candidates_verified
        self._sets = None
        self._batch = BATCH
        self._band_keys = np.zeros((0, shape.bands), dtype=np.uint64)
        k = round((1.0 - self.threshold) * SCALE)

        def given(values: Values) -> PairArrays:
            of = values.value_of
            return PairArrays(of[pairs.a], of[pairs.b], pairs.distance)

        NearDuplicates.__init__(self, keys, digests, k, join_values=given)
        return self

    def _join(self, values: Values) -> PairArrays:
        """The verified pairs of distinct sets (positions into ``values.distinct``)."""
        assert self._sets is not None
        representative = values.by_value[values.first]
        keys = self._band_keys[representative]
        self._band_keys = keys  # of the distinct sets only: for matches()
        pairs, self.candidates, self.candidates_verified = self_join(
            self._sets, representative, keys, self.threshold, self._batch
        )
        return pairs

    def matches(self, sets: ShingleSets, keys_of_bands: NDArray[np.uint64]) -> PairArrays:
        """The pairs between m other sets and this collection's with Jaccard >= the
        threshold (``permindex dedup NEW --against CORPUS``: these are NEW's, ``sets`` a block
        of the corpus): ``(row, position, distance)``, row into ``sets``, position into
        :attr:`keys` (every key whose set is the one matched), distance as
        :meth:`iter_pairs`' (:data:`SCALE` units), in no particular order.

        Candidates are the pairs equal in at least one band of ``keys_of_bands`` (``(m,
        bands) uint64``, made as this collection's: :func:`~permindex.near.minhash.band_keys`
        of :func:`~permindex.near.minhash.signatures` with as many permutations), each once,
        against the distinct sets here (identical sets cost one check), in batches of at most
        the join's batch; each is verified exactly (:func:`verify`; not counted in
        :attr:`candidates`, which are this collection's own). Memory: one batch and the pairs
        found; this collection keeps its distinct sets' band keys (8 bytes a band a distinct
        set) for it.
        """
        if self._sets is None:
            raise InvalidArgumentError(
                "this join was done elsewhere (--engine dask): it holds no shingle sets to match"
            )
        values = self._values
        representative = values.by_value[values.first]
        parts: list[PairArrays] = []
        if len(sets):
            for rows, distinct in lookup_batches(keys_of_bands, self._band_keys, self._batch):
                found = verify(sets, rows, representative[distinct], self.threshold, self._sets)
                parts.append(PairArrays(rows[found.kept], distinct[found.kept], found.distance))
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return PairArrays(empty, empty.copy(), empty.copy())
        rows, distinct, distance = (np.concatenate(x) for x in zip(*parts, strict=True))
        counts = values.counts[distinct]  # each distinct set: every key that has it
        starts = np.repeat(values.first[distinct] - np.cumsum(counts) + counts, counts)
        positions = values.by_value[starts + np.arange(int(counts.sum()))]
        return PairArrays(np.repeat(rows, counts), positions, np.repeat(distance, counts))

    def sample_pairs(self, per_distance: int, order: _I64) -> PairArrays:
        """Up to ``per_distance`` pairs in each Jaccard bin of 0.05 (0.80-0.85, ..., 0.95-1.0:
        as many examples as the SimHash mode's 4 distances, whose diffs are the report's cost),
        chosen as the SimHash mode chooses them per distance
        (:meth:`NearDuplicates.sample_pairs`), most similar first within a bin."""
        a, b, d = super().sample_pairs(per_distance, order)
        if a.size == 0:
            return PairArrays(a, b, d)
        bins = np.minimum(SCALE - d, SCALE - 1) // (SCALE // 20)
        pick = np.argsort(-bins, kind="stable")
        ordered = bins[pick]
        starts = np.flatnonzero(np.append(True, ordered[1:] != ordered[:-1]))
        within = np.arange(ordered.size) - np.repeat(
            starts, np.diff(np.append(starts, ordered.size))
        )
        pick = pick[within < per_distance]
        return PairArrays(a[pick], b[pick], d[pick])

    def spans(self, groups: Sequence[_I64], limit: int = 4096) -> list[int | None]:
        """Not computed in the Jaccard mode (None for every group)."""
        return [None] * len(groups)

    def span(self, positions: _I64, limit: int = 4096) -> int | None:
        """Not computed in the Jaccard mode (None)."""
        return None

    def jaccard_counts(self, width: float = 0.01) -> list[tuple[str, int]]:
        """Pairs of keys per Jaccard bin: ``[(label, count)]`` from the threshold's bin up to
        ``"1.00"`` (pairs at J = 1.0000 exactly: identical sets, or distance 0), bins of
        ``width`` labelled by their lower end."""
        counts = self.distance_counts()
        step = round(width * SCALE)
        low = (SCALE - self.k) // step * step  # bin of the threshold, in SCALE units
        bins: list[tuple[str, int]] = []
        similarity = SCALE - np.arange(counts.size)
        for start in range(low, SCALE, step):
            inside = (similarity >= start) & (similarity < start + step)
            bins.append((f"{start / SCALE:.2f}", int(counts[inside].sum())))
        bins.append(("1.00", int(counts[0])))
        return bins
