"""Near-duplicates over a whole collection: every pair within k, the clusters those pairs form,
the keys that have a near-duplicate (flags), the groups of equal fingerprints (exact duplicates)
(:class:`NearDuplicates`, whose docstring gives the definitions and the order), and which
document of each cluster to keep (:func:`keep_per_cluster`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Final, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError, WorkBudgetExceededError
from permindex.index.hamming import as_fingerprint_array
from permindex.index.join import self_join as join
from permindex.index.join.pair_stream import (
    DEFAULT_CHUNK,
    PairArrays,
    PairStream,
    Values,
    distinct_values,
    flagged_positions,
    identical_pairs,
    join_distinct,
)
from permindex.index.keys.column import KeyColumn, keys_distinct
from permindex.index.tables.permutation import DEFAULT_DESIGN, Design, query_k
from permindex.index.tuning import DEFAULT_TUNING, Tuning

if TYPE_CHECKING:
    from permindex.index import Index

__all__ = [
    "KEEP_RULES",
    "ExactGroup",
    "Flag",
    "KeepRule",
    "NearDuplicates",
    "clusters",
    "components",
    "design_for",
    "exact_duplicates",
    "flags",
    "keep_per_cluster",
    "pairs_within",
    "value_pairs",
]

_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]

KeepRule = Literal["first", "longest", "smallest-key"]
#: The rules of :func:`keep_per_cluster`.
KEEP_RULES: Final = ("first", "longest", "smallest-key")


class Flag(NamedTuple):
    """A key with at least one other key within k: its ``nearest`` other key (smallest distance,
    then smallest key), their ``distance`` in bits, and the number of ``neighbors`` (other keys
    within k).

    Examples:
        >>> import permindex
        >>> index = permindex.Index(k=3)
        >>> _ = index.add_many(["a", "b", "c", "d"], [0b0000, 0b0111, 0b0111, 2**64 - 1])
        >>> permindex.flags(index)[0]
        Flag(key='a', nearest='b', distance=3, neighbors=2)
    """

    key: str
    nearest: str
    distance: int
    neighbors: int


class ExactGroup(NamedTuple):
    """Two or more keys (sorted) that share one ``fingerprint``.

    Examples:
        >>> import permindex
        >>> index = permindex.Index(k=3)
        >>> _ = index.add_many(["a", "b", "c", "d"], [0b0000, 0b0111, 0b0111, 2**64 - 1])
        >>> group = permindex.exact_duplicates(index)[0]
        >>> permindex.format_fingerprint(group.fingerprint), group.keys
        ('0000000000000007', ['b', 'c'])
    """

    fingerprint: int
    keys: list[str]


def design_for(k: int) -> Design:
    """A table design that finds every pair within ``k`` bits: the default (4 blocks, 1 leading:
    4 tables of 16-bit prefixes) up to k = 3; above, (k + 2 blocks, 2 leading): for k = 4..6,
    15, 21 and 28 tables of 21-, 18- and 16-bit prefixes (Manku et al. 2007, section 3: any two
    fingerprints within k share the prefix of at least one table when k <= blocks - leading).

    Raises:
        TypeError: ``k`` is not an int (bool refused).
        InvalidArgumentError: ``k < 0``, or a k whose design would need more tables than
            :data:`permindex.index.tables.permutation.MAX_TABLES`.
    """
    if isinstance(k, bool) or not isinstance(k, int):
        raise TypeError(f"k must be an int, not {type(k).__name__}")
    if k < 0:
        raise InvalidArgumentError(f"k must be >= 0, got {k}", value=k)
    if k <= DEFAULT_DESIGN.max_k:
        return DEFAULT_DESIGN
    return Design(k + 2, 2)


def _empty_pairs() -> PairArrays:
    empty = np.zeros(0, dtype=np.int64)
    return PairArrays(empty, empty.copy(), empty.copy())


def _check_design(k: int, design: Design | tuple[int, int] | None) -> Design:
    chosen = design_for(k) if design is None else Design.of(design)
    if k < 0 or k > chosen.max_k:
        raise InvalidArgumentError(
            f"k={k} is outside what {chosen} finds exactly (0 <= k <= {chosen.max_k})", value=k
        )
    return chosen


def value_pairs(
    distinct: _U64,
    k: int,
    design: Design | tuple[int, int] | None = None,
    should_stop: Callable[[], bool] | None = None,
    *,
    tuning: Tuning = DEFAULT_TUNING,
) -> PairArrays:
    """Every pair (u, v) of positions of ``distinct`` (an (n,) uint64 array of *distinct*
    fingerprints) within ``k`` bits, each once, in no particular order: the block-keyed
    self-join of Manku et al. 2007, section 3 (:func:`permindex.index.join.self_join.self_join`).
    It joins on
    ``design`` when one is given, else on the design
    :func:`permindex.index.join.self_join.join_design` finds
    cheapest for n among :func:`design_for` ``(k)`` and a few others that answer k. Exact: no
    pair is missed (pigeonhole, k <= blocks - leading) and none is reported twice.

    ``should_stop`` is checked between chunks of the join; ``tuning``: the join's knobs
    (:class:`~permindex.index.tuning.Tuning`).

    Raises:
        InvalidArgumentError: k < 0, or k above what ``design`` guarantees.
        CallCancelledError: ``should_stop`` returned True.
    """
    plan = _plan(k, design, int(distinct.size))
    return join_distinct(distinct, k, plan, should_stop, tuning)


def _plan(
    k: int, design: Design | tuple[int, int] | None, n: int, cheapest: bool = False
) -> join.JoinDesign:
    """What to join n distinct fingerprints on: ``design`` as given, or (None, or with
    ``cheapest``) what :func:`~permindex.index.join.self_join.join_design` finds cheapest among it
    (default
    :func:`design_for` ``(k)``) and a few others that answer k."""
    chosen = _check_design(k, design)
    if design is None or cheapest:
        return join.join_design(chosen, k, n)
    return chosen


def _expand(values: Values, pairs: PairArrays, budget: int) -> PairArrays:
    """Pairs of distinct values as every pair of their positions, plus every pair of positions
    that share a value (distance 0), listed ``budget`` pairs at a time; a < b."""
    by_value, first, counts = values.by_value, values.first, values.counts
    parts_a: list[_I64] = []
    parts_b: list[_I64] = []
    parts_d: list[_I64] = []
    if (counts > 1).any():
        ends = np.repeat(first + counts, counts)
        for i, j in join.group_pairs(ends, budget):
            parts_a.append(by_value[i])
            parts_b.append(by_value[j])
            parts_d.append(np.zeros(i.size, dtype=np.int64))
    u, v, distance = pairs
    if u.size:
        per_pair = counts[u] * counts[v]
        pair = np.repeat(np.arange(u.size, dtype=np.int64), per_pair)
        local = np.arange(int(per_pair.sum()), dtype=np.int64)
        local -= np.repeat(np.cumsum(per_pair) - per_pair, per_pair)
        width = counts[v][pair]
        parts_a.append(by_value[first[u[pair]] + local // width])
        parts_b.append(by_value[first[v[pair]] + local % width])
        parts_d.append(distance[pair])
    if not parts_a:
        return _empty_pairs()
    a = np.concatenate(parts_a)
    b = np.concatenate(parts_b)
    return PairArrays(np.minimum(a, b), np.maximum(a, b), np.concatenate(parts_d))


def pairs_within(
    fingerprints: object,
    k: int,
    design: Design | tuple[int, int] | None = None,
    *,
    tuning: Tuning = DEFAULT_TUNING,
) -> PairArrays:
    """Every pair of positions (a, b), a < b, of ``fingerprints`` (an (n,) uint64 array or an
    iterable of ints) within Hamming distance ``k`` bits, each once, as :class:`PairArrays` in
    no particular order: equal fingerprints are joined once per distinct value
    (:func:`value_pairs`) and expanded to their positions, with every pair of positions that
    share a value at distance 0. Memory O(n + pairs). ``tuning``: the join's knobs.

    Raises:
        InvalidArgumentError: k < 0, or k above what ``design`` guarantees; a bad fingerprint.
    """
    fps = as_fingerprint_array(fingerprints)
    _check_design(k, design)
    values = distinct_values(fps)
    pairs = value_pairs(values.distinct, k, design, tuning=tuning)
    return _expand(values, pairs, tuning.pair_budget)


def components(n: int, a: _I64, b: _I64) -> _I64:
    """Connected components of the graph on positions 0..n-1 with edges (a[i], b[i]): a (n,)
    int64 array giving each position the smallest position of its component (so an isolated
    position is its own label). A union-find by smaller root with path halving in a compiled
    kernel (:func:`permindex.index.join.kernels.union_find_labels`): O((n + edges) alpha(n))
    time, O(n) memory."""
    from permindex.index.join import kernels as join_kernels

    return join_kernels.union_find_labels(
        n, np.ascontiguousarray(a, dtype=np.int64), np.ascontiguousarray(b, dtype=np.int64)
    )


def _groups(labels: _I64, members: _I64, rank: _I64) -> list[_I64]:
    """``members`` grouped by ``labels`` (one label per member), the groups of at least two
    members only, each sorted by ``rank`` (distinct per member), largest group first, then by
    the smallest rank: one lexsort for all the groups, each returned as a view of one array."""
    if members.size == 0:
        return []
    member_rank = rank[members]
    order = np.lexsort((member_rank, labels))
    sorted_labels = labels[order]
    starts = np.flatnonzero(np.append(True, sorted_labels[1:] != sorted_labels[:-1]))
    sizes = np.diff(np.append(starts, members.size))
    several = sizes > 1
    starts, sizes = starts[several], sizes[several]
    by_size = np.lexsort((member_rank[order[starts]], -sizes))
    grouped = members[order]
    ends = starts + sizes
    return [
        grouped[s:e] for s, e in zip(starts[by_size].tolist(), ends[by_size].tolist(), strict=True)
    ]


class NearDuplicates:
    """Pairs, clusters, flags and exact-duplicate groups of one collection (see the module
    docstring), computed from one consistent view.

    The join runs on the *distinct* fingerprints (:func:`value_pairs`); keys that share a
    fingerprint are expanded only where the answer lists pairs of keys, and then lazily, in key
    order (:meth:`pair_chunks`). So clusters, flags and exact groups of 10,000 copies of one
    page cost O(10,000), not the 5 x 10^7 pairs between them, and streaming those pairs holds
    one chunk at a time.

    Args:
        keys: n distinct keys.
        fingerprints: their (n,) uint64 fingerprints (key i has fingerprint i).
        k: the largest distance of a near-duplicate, bits.
        design: the table design of the self-join (default :func:`design_for` ``(k)``).
        cheapest: join on what :func:`~permindex.index.join.self_join.join_design` finds cheapest
            among ``design`` and a few others that answer k (the same pairs, often faster).
        max_work: refuse, before joining, when :attr:`work_estimate` is above it (None: no
            limit).
        send_pairs: whether the pairs of identical fingerprints count as work (True: a caller
            that lists the pairs; False: one that wants only clusters, flags or exact groups,
            which cost O(n) whatever the groups).
        should_stop: checked between chunks of the join (each at most about
            ``tuning.pair_budget`` candidates) and before ordering the
            keys.
        join_values: the join done elsewhere (the Jaccard mode of ``dedup``,
            :mod:`permindex.near.jaccard`): a function from the distinct fingerprints
            (:class:`~permindex.index.join.pair_stream.Values`) to their pairs (u, v, distance),
            positions into ``Values.distinct``, each pair once, distance an int64 in 0..k;
            ``design`` and ``cheapest`` are then unused and :attr:`work_estimate` counts only
            the pairs of identical fingerprints.
        joined: the join's result computed elsewhere (e.g. on a cluster,
            :mod:`permindex.distributed`): every pair of positions with *distinct* fingerprints
            within k, one position per fingerprint, each pair once; the join is then skipped
            (and not checked).
        tuning: the join's knobs (:class:`~permindex.index.tuning.Tuning`; ``of_index`` passes
            the index's).

    Attributes:
        keys, fingerprints, k: as given.
        key_rank: ((n,) int64) for each key with a near-duplicate, its rank among those keys
            in code point order; -1 for the others.
        work_estimate: (int) the candidate pairs the join verifies
            (:func:`~permindex.index.join.self_join.estimate_join_work` on the distinct
            fingerprints:
            identical fingerprints cost none) plus, with ``send_pairs``, the pairs of keys with
            identical fingerprints (pairs to send); computed on first use unless ``max_work``
            is given. ``work_what`` names that unit.

    Raises:
        InvalidArgumentError: repeated keys, lengths that differ, a bad k or fingerprint.
        WorkBudgetExceededError: ``work_estimate`` > ``max_work``; nothing was joined.
        CallCancelledError: ``should_stop`` returned True.

    Definitions (k is the largest Hamming distance that counts as a near-duplicate):

    pairs
        every unordered pair of keys whose fingerprints are within k bits (distance 0 included).
    clusters
        the connected components of the graph whose edges are the pairs, with at least two keys.
        **Near-duplication is not transitive**: A within k of B and B within k of C puts A, B and C
        in one cluster even when A and C are far apart, so a cluster can *chain* (its span, the
        largest distance between two of its members, can exceed k — a series of pages each edited a
        little from the previous one ends in one cluster). That is the grouping a de-duplication
        wants (each page has a representative), but a cluster is not a set of mutual
        near-duplicates.
    flags
        every key with at least one other key within k — the article's "this page has a
        near-duplicate" view — with its nearest other key, their distance, and how many keys are
        within k.
    exact duplicates
        the groups of two or more keys with the same fingerprint (their texts are usually, but not
        necessarily, identical).

    Everything is computed from one consistent view: keys (distinct) with their (n,) uint64
    fingerprints, as :meth:`permindex.index.Index.export` returns them. The join runs on the
    distinct fingerprints (:func:`value_pairs`, the block-keyed self-join of Manku et al. 2007,
    section 3 — :func:`permindex.index.join.self_join.self_join`, the join the index runs, here on
    a plain
    array and for any table design, so that k can exceed the index's 3); keys sharing a fingerprint
    are expanded only where pairs of keys are listed. It is checked against brute force in the
    tests. Components are found by a vectorized union-find (hooking each root onto the smaller of
    two roots joined by an edge, then pointer jumping), which needs no Python object per key.

    Order, everywhere deterministic: keys compare in code point order; a pair is (key_a, key_b,
    distance) with key_a < key_b, pairs sorted; a cluster's or group's keys are sorted; clusters and
    groups come largest first, then by their smallest key; flags are sorted by key.

    Examples:
        >>> import permindex
        >>> keys, fingerprints = ["a", "b", "c", "d"], [0b0000, 0b0111, 0b0111, 2**64 - 1]
        >>> found = permindex.NearDuplicates(keys, fingerprints, k=3)
        >>> found.clusters(), found.exact_duplicates()
        ([['a', 'b', 'c']], [ExactGroup(fingerprint=7, keys=['b', 'c'])])
    """

    def __init__(
        self,
        keys: Sequence[str],
        fingerprints: object,
        k: int,
        *,
        design: Design | tuple[int, int] | None = None,
        cheapest: bool = False,
        max_work: int | None = None,
        should_stop: Callable[[], bool] | None = None,
        send_pairs: bool = True,
        join_values: Callable[[Values], PairArrays] | None = None,
        joined: PairArrays | None = None,
        tuning: Tuning = DEFAULT_TUNING,
    ) -> None:
        fps = as_fingerprint_array(fingerprints)
        if len(keys) != fps.size:
            raise InvalidArgumentError(
                f"got {len(keys)} keys and {fps.size} fingerprints; the lengths must match",
                value=(len(keys), int(fps.size)),
            )
        if not keys_distinct(keys):
            raise InvalidArgumentError("keys must be distinct", value=len(keys))
        self.keys = keys
        self.fingerprints = fps
        self.k = k
        self.tuning = tuning
        self._values = values = distinct_values(fps)
        given = join_values is not None
        self._plan = None if given else _plan(k, design, int(values.distinct.size), cheapest)
        self._estimate: int | None = None
        self._send_pairs = send_pairs
        self.work_what = "candidate pairs to verify" + (
            " plus pairs of identical fingerprints" if send_pairs else ""
        )
        if max_work is not None and self.work_estimate > max_work:
            raise WorkBudgetExceededError(
                f"the estimated work, {self.work_estimate:,} ({self.work_what}), is above the "
                f"budget of {max_work:,}",
                estimate=self.work_estimate,
                budget=max_work,
                what=self.work_what,
            )
        if join_values is not None:
            self._value_pairs = join_values(values)
        elif joined is not None:  # joined elsewhere: positions of distinct fingerprints to values
            of = values.value_of
            self._value_pairs = PairArrays(of[joined.a], of[joined.b], joined.distance)
        else:
            assert self._plan is not None
            plan = self._plan
            self._value_pairs = join_distinct(values.distinct, k, plan, should_stop, tuning)
        members = flagged_positions(values, self._value_pairs)
        join.check_stop(should_stop)
        # rank: position of the key among the keys with a near-duplicate, code point order
        self.key_rank = np.full(fps.size, -1, dtype=np.int64)
        if isinstance(keys, KeyColumn):  # the keys a report reads, decoded once
            keys.remember(members)
        by_key = sorted(members.tolist(), key=keys.__getitem__)
        self.key_rank[np.array(by_key, dtype=np.int64)] = np.arange(len(by_key), dtype=np.int64)
        self._flagged = np.array(by_key, dtype=np.int64)  # positions, sorted by key
        self._stream: PairStream | None = None
        self._pairs: PairArrays | None = None
        self._clusters: list[_I64] | None = None

    @classmethod
    def of_index(
        cls,
        index: Index,
        k: int | None = None,
        *,
        max_work: int | None = None,
        should_stop: Callable[[], bool] | None = None,
        send_pairs: bool = True,
    ) -> NearDuplicates:
        """From the contents of ``index`` at one instant (:meth:`Index.export`, one acquisition
        of its lock; the join runs after it, without the lock); ``k`` defaults to the index's k
        and may not exceed it (the k rule of a query,
        :func:`permindex.index.tables.permutation.query_k`, as for :meth:`Index.pairs`). The join
        runs on the cheapest of the index's design and a few others that answer k
        (``cheapest=True``). ``max_work``, ``should_stop`` and ``send_pairs`` as for the
        constructor: the work is estimated before the join. O(n) memory for n keys, plus the join's.

        Raises:
            TypeError: ``k`` is not an int.
            InvalidArgumentError: ``k < 0`` or above the index's k.
            WorkBudgetExceededError: the estimate is above ``max_work``.
            CallCancelledError: ``should_stop`` returned True.
        """
        kk = query_k(k, index.k, index.design)
        keys, fingerprints = index.export()
        join.check_stop(should_stop)
        return cls(
            keys,
            fingerprints,
            kk,
            design=index.design,
            cheapest=True,
            max_work=max_work,
            should_stop=should_stop,
            send_pairs=send_pairs,
            tuning=index.tuning,
        )

    @property
    def work_estimate(self) -> int:
        """Candidate pairs the join verifies plus (``send_pairs``) pairs of identical
        fingerprints (see the class docstring); O(T * n log n) on first use."""
        if self._estimate is None:
            values = self._values
            joined = 0
            if self.k > 0 and values.distinct.size > 1 and self._plan is not None:
                joined = join.estimate_join_work(values.distinct, self.k, self._plan)
            same = identical_pairs(values.counts) if self._send_pairs else 0
            self._estimate = joined + same
        return self._estimate

    def __len__(self) -> int:
        """Number of pairs of keys (counted, not listed)."""
        counts = self._values.counts
        u, v, _ = self._value_pairs
        return int((counts * (counts - 1) // 2).sum() + (counts[u] * counts[v]).sum())

    def distance_counts(self) -> _I64:
        """((k + 1,) int64) the number of pairs of keys at each distance 0..k."""
        counts = self._values.counts
        u, v, d = self._value_pairs
        out = np.bincount(d, weights=counts[u] * counts[v], minlength=self.k + 1)
        out = np.rint(out).astype(np.int64)
        out[0] += int((counts * (counts - 1) // 2).sum())
        return out

    @property
    def pairs(self) -> PairArrays:
        """Every pair of keys within k as positions into ``keys``, all in memory (listed on
        first use and kept: O(pairs); :meth:`pair_chunks` streams them instead):
        ``keys[a] < keys[b]``, sorted by (keys[a], keys[b])."""
        if self._pairs is None:
            parts = list(self.pair_chunks(max(len(self), 1)))
            if not parts:
                self._pairs = _empty_pairs()
            else:
                self._pairs = PairArrays(*(np.concatenate(x) for x in zip(*parts, strict=True)))
        return self._pairs

    def pair_chunks(
        self, max_pairs: int = DEFAULT_CHUNK, should_stop: Callable[[], bool] | None = None
    ) -> Iterator[PairArrays]:
        """Every pair of keys within k as positions (a, b) into ``keys``, ``keys[a] <
        keys[b]``, sorted by (keys[a], keys[b]) in code point order, in chunks of at most
        ``max_pairs`` (all full but the last; a chunk may end inside one key's pairs).

        Lazy (:meth:`permindex.index.join.pair_stream.PairStream.chunks`): the keys sharing a
        fingerprint are expanded from their one group as they are reached, never all at once,
        so memory is O(max_pairs + the largest neighbourhood of one key), not O(pairs), and the
        work is proportional to the pairs read.

        Raises:
            ValueError: ``max_pairs`` < 1.
            CallCancelledError: ``should_stop`` returned True (checked between batches).
        """
        if self._stream is None:
            values = self._values
            flagged = self._flagged
            self._stream = PairStream(
                flagged,
                values.value_of[flagged],
                self._value_pairs,
                int(values.distinct.size),
                self.tuning.segment_budget,
            )
        return self._stream.chunks(max_pairs, should_stop)

    def sample_pairs(self, per_distance: int, order: _I64) -> PairArrays:
        """Up to ``per_distance`` pairs at each distance 0..k: those whose later key (the
        larger of ``order[a]`` and ``order[b]``, ``order`` an (n,) int64 array such as input
        ordinals) is smallest, ties in pair order; sorted by (distance, that later order, pair
        order). Streamed from :meth:`pair_chunks`: O(chunk + (k + 1) * per_distance) memory,
        O(pairs log chunk) time.

        Raises:
            ValueError: ``per_distance`` < 0.
        """
        if per_distance < 0:
            raise ValueError(f"per_distance must be >= 0, got {per_distance}")
        empty = np.zeros(0, dtype=np.int64)
        kept = [empty] * 5  # a, b, distance, later order, pair number
        if per_distance == 0:
            return PairArrays(*kept[:3])
        seen = 0
        # per distance, the largest later order kept while per_distance are kept (a pair of a
        # later chunk enters only below it: ties go to the earlier pair), else the most
        worst = np.full(self.k + 2, np.iinfo(np.int64).max, dtype=np.int64)
        for a, b, d in self.pair_chunks():
            number = np.arange(seen, seen + a.size, dtype=np.int64)
            seen += int(a.size)
            later = np.maximum(order[a], order[b]).astype(np.int64)
            enters = later < worst[np.minimum(d, self.k + 1)]
            if not enters.all():  # only the pairs that can still enter are sorted
                a, b, d, later, number = (x[enters] for x in (a, b, d, later, number))
            if a.size == 0:
                continue
            parts = [np.concatenate(x) for x in zip(kept, (a, b, d, later, number), strict=True)]
            ordered = np.lexsort((parts[4], parts[3], parts[2]))
            dist = parts[2][ordered]
            starts = np.flatnonzero(np.append(True, dist[1:] != dist[:-1]))
            sizes = np.diff(np.append(starts, dist.size))
            within = np.arange(dist.size) - np.repeat(starts, sizes)
            pick = ordered[within < per_distance]
            kept = [x[pick] for x in parts]
            full = starts[sizes >= per_distance]  # the last pair kept there bounds the later ones
            worst[np.minimum(dist[full], self.k + 1)] = parts[3][ordered[full + per_distance - 1]]
            worst[self.k + 1] = np.iinfo(np.int64).max  # distances above k (none): no bound
        return PairArrays(*kept[:3])

    def iter_pairs(self, key: Callable[[int], str] | None = None) -> Iterator[tuple[str, str, int]]:
        """The pairs as (key_a, key_b, distance), key_a < key_b, sorted; streamed from
        :meth:`pair_chunks`. ``key``: the key of a position (default: ``keys[position]``), for
        a caller that holds the keys decoded already."""
        if key is None:
            key = self.keys.__getitem__
        return chain.from_iterable(
            zip(map(key, a.tolist()), map(key, b.tolist()), d.tolist(), strict=True)
            for a, b, d in self.pair_chunks()
        )

    def sort_by_key(self, positions: _I64) -> _I64:
        """``positions`` (each with a near-duplicate) ordered by their keys."""
        return positions[np.argsort(self.key_rank[positions], kind="stable")]

    def cluster_positions(self) -> list[_I64]:
        """Clusters as arrays of positions, each sorted by key; largest first, then by first
        key."""
        if self._clusters is None:
            values = self._values
            u, v, _ = self._value_pairs
            labels = components(values.distinct.size, u, v)
            members = self._flagged
            self._clusters = _groups(labels[values.value_of[members]], members, self.key_rank)
        return self._clusters

    def clusters(self) -> list[list[str]]:
        """Clusters as lists of keys (see :meth:`cluster_positions`)."""
        keys = self.keys
        return [[keys[p] for p in g.tolist()] for g in self.cluster_positions()]

    def flag_arrays(self) -> tuple[_I64, _I64, _I64, _I64]:
        """(position, nearest position, distance, neighbors), (m,) int64 each, one row per key
        with a near-duplicate, sorted by key. The nearest key is another key of the same
        fingerprint when there is one (distance 0, the smallest such key), else the smallest
        key of the nearest other fingerprint."""
        values = self._values
        counts = values.counts
        flagged = self._flagged  # sorted by key
        if flagged.size == 0:
            return flagged, flagged.copy(), flagged.copy(), flagged.copy()
        nv = counts.size
        w = values.value_of[flagged]
        # per value: its smallest and second smallest key (flagged is in key order)
        order = np.argsort(w, kind="stable")
        w_sorted = w[order]
        starts = np.flatnonzero(np.append(True, w_sorted[1:] != w_sorted[:-1]))
        smallest = np.full(nv, -1, dtype=np.int64)
        second = np.full(nv, -1, dtype=np.int64)
        smallest[w_sorted[starts]] = flagged[order[starts]]
        two = starts[counts[w_sorted[starts]] > 1]
        second[w_sorted[two]] = flagged[order[two + 1]]
        # per value: the nearest other value (distance, then its smallest key) and the keys of
        # all values within k
        u, v, d = self._value_pairs
        node = np.concatenate((u, v))
        other = np.concatenate((v, u))
        distance = np.concatenate((d, d))
        near_key = np.full(nv, -1, dtype=np.int64)
        near_d = np.zeros(nv, dtype=np.int64)
        around = np.zeros(nv, dtype=np.int64)
        if node.size:
            # the least (distance, rank of the other value's smallest key) of each value, as
            # one int64 (distance x ranks + rank): one unbuffered minimum, no sort
            ranks = np.int64(flagged.size)
            pair_key = distance.astype(np.int64) * ranks + self.key_rank[smallest[other]]
            best = np.full(nv, np.iinfo(np.int64).max, dtype=np.int64)
            np.minimum.at(best, node, pair_key)
            has = np.flatnonzero(best != np.iinfo(np.int64).max)
            near_key[has] = flagged[best[has] % ranks]
            near_d[has] = best[has] // ranks
            np.add.at(around, node, counts[other])
        same = counts[w] > 1
        nearest = np.where(
            same, np.where(smallest[w] == flagged, second[w], smallest[w]), near_key[w]
        )
        dist = np.where(same, 0, near_d[w])
        neighbors = counts[w] - 1 + around[w]
        return flagged, nearest, dist.astype(np.int64), neighbors.astype(np.int64)

    def flags(self) -> list[Flag]:
        """Every key with a near-duplicate, sorted by key (see :class:`Flag`)."""
        keys = self.keys
        node, other, distance, neighbors = self.flag_arrays()
        return [
            Flag(keys[p], keys[q], d, c)
            for p, q, d, c in zip(
                node.tolist(), other.tolist(), distance.tolist(), neighbors.tolist(), strict=True
            )
        ]

    def exact_positions(self) -> list[_I64]:
        """Groups of equal fingerprints as arrays of positions sorted by key; largest first,
        then by first key."""
        values = self._values
        members = self._flagged
        shared = values.counts[values.value_of[members]] > 1
        return _groups(values.value_of[members[shared]], members[shared], self.key_rank)

    def exact_duplicates(self) -> list[ExactGroup]:
        """Groups of equal fingerprints (see :class:`ExactGroup`), largest first."""
        keys = self.keys
        return [
            ExactGroup(int(self.fingerprints[g[0]]), [keys[p] for p in g.tolist()])
            for g in self.exact_positions()
        ]

    def spans(self, groups: Sequence[_I64], limit: int = 4096) -> list[int | None]:
        """:meth:`span` of each group of positions: the groups of at most 64 positions (and
        ``limit``) together, every pair of positions within each compared in one pass of
        numpy (O(sum of size^2)), the larger ones one by one."""
        out: list[int | None] = [0] * len(groups)
        small_size = min(64, limit)
        small = [i for i, g in enumerate(groups) if g.size <= small_size]
        if small:
            members = np.concatenate([groups[i] for i in small]).astype(np.int64, copy=False)
            sizes = np.fromiter((groups[i].size for i in small), dtype=np.int64, count=len(small))
            group_of = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
            best = np.zeros(sizes.size, dtype=np.int64)
            fps = self.fingerprints[members]
            ends = np.repeat(np.cumsum(sizes), sizes)
            for i, j in join.group_pairs(ends, self.tuning.pair_budget):
                np.maximum.at(best, group_of[i], np.bitwise_count(fps[i] ^ fps[j]))
            for at, value in zip(small, best.tolist(), strict=True):
                out[at] = value
        for at, group in enumerate(groups):
            if group.size > small_size:
                out[at] = self.span(group, limit)
        return out

    def span(self, positions: _I64, limit: int = 4096) -> int | None:
        """The largest Hamming distance between two of ``positions`` (a cluster's span: above k
        when the cluster chains), or None for more than ``limit`` distinct fingerprints
        (O(size^2))."""
        fps = np.unique(self.fingerprints[positions])
        if fps.size > limit:
            return None
        best = 0
        for start in range(0, fps.size, 512):
            block = np.bitwise_count(fps[start : start + 512, None] ^ fps[None, :])
            best = max(best, int(block.max()))
        return best


def keep_per_cluster(
    clusters: Sequence[_I64],
    rule: KeepRule,
    *,
    order: _I64,
    lengths: _I64 | None = None,
    rank: _I64 | None = None,
) -> list[int]:
    """The position kept in each cluster (the others are to be dropped), by ``rule``:

    - ``"first"``: the document read first (smallest ``order``, its input position): what a
      crawler that checks each page against the pages before it keeps;
    - ``"longest"``: the longest text (largest ``lengths``, characters of visible text), ties
      to the first read — the most complete copy;
    - ``"smallest-key"``: the smallest key in code point order (``rank``: ordering of keys) —
      reproducible whatever the input order.

    Every position of a cluster is compared, so with a chained cluster the kept document can be
    far (more than k bits) from some dropped ones: one document per cluster is the rule.
    ``clusters`` holds arrays of positions into ``order`` (and ``lengths``, ``rank``: (n,)
    int64 each). O(total cluster size) time.

    Raises:
        InvalidArgumentError: an unknown rule, or ``"longest"`` without ``lengths``
            (``"smallest-key"`` without ``rank``).
    """
    if rule not in KEEP_RULES:
        raise InvalidArgumentError(
            f"keep rule must be one of {', '.join(KEEP_RULES)}, got {rule!r}", value=rule
        )
    if not clusters:
        return []
    if rule == "longest" and lengths is None:
        raise InvalidArgumentError("the longest rule needs the texts' lengths")
    if rule == "smallest-key" and rank is None:
        raise InvalidArgumentError("the smallest-key rule needs the keys' order")
    members = np.concatenate(clusters).astype(np.int64, copy=False)
    sizes = np.fromiter((c.size for c in clusters), dtype=np.int64, count=len(clusters))
    cluster = np.repeat(np.arange(sizes.size, dtype=np.int64), sizes)
    within = np.arange(members.size, dtype=np.int64)  # ties: the first in the cluster's order
    if rule == "first":
        sort_keys: tuple[_I64, ...] = (within, order[members], cluster)
    elif rule == "longest":
        assert lengths is not None
        sort_keys = (within, order[members], -lengths[members], cluster)
    else:
        assert rank is not None
        sort_keys = (within, rank[members], cluster)
    by_rule = np.lexsort(sort_keys)  # clusters in turn, each one's best member first
    starts = np.cumsum(sizes) - sizes
    best: list[int] = members[by_rule[starts]].tolist()
    return best


# -- functions over an Index ------------------------------------------------------------------


def clusters(index: Index, k: int | None = None) -> list[list[str]]:
    """The clusters of ``index`` within ``k`` (default: the index's k): connected components of
    the near-duplicate pairs graph, at least two keys each, keys sorted, largest cluster first.
    A cluster can chain (see :class:`NearDuplicates`).

    Examples:
        >>> import permindex
        >>> index = permindex.Index(k=3)
        >>> _ = index.add_many(["a", "b", "c", "d"], [0b0000, 0b0111, 0b0111, 2**64 - 1])
        >>> permindex.clusters(index), permindex.clusters(index, k=2)
        ([['a', 'b', 'c']], [['b', 'c']])
    """
    return NearDuplicates.of_index(index, k).clusters()


def flags(index: Index, k: int | None = None) -> list[Flag]:
    """Every key of ``index`` with another key within ``k`` (default: the index's k), sorted by
    key, with its nearest other key, their distance and its number of neighbors.

    Examples:
        >>> import permindex
        >>> index = permindex.Index(k=3)
        >>> _ = index.add_many(["a", "b", "c", "d"], [0b0000, 0b0111, 0b0111, 2**64 - 1])
        >>> permindex.flags(index)
        [Flag(key='a', nearest='b', distance=3, neighbors=2),
         Flag(key='b', nearest='c', distance=0, neighbors=2),
         Flag(key='c', nearest='b', distance=0, neighbors=2)]
    """
    return NearDuplicates.of_index(index, k).flags()


def exact_duplicates(index: Index) -> list[ExactGroup]:
    """The groups of keys of ``index`` that share one fingerprint, largest first.

    Examples:
        >>> import permindex
        >>> index = permindex.Index(k=3)
        >>> _ = index.add_many(["a", "b", "c", "d"], [0b0000, 0b0111, 0b0111, 2**64 - 1])
        >>> permindex.exact_duplicates(index)
        [ExactGroup(fingerprint=7, keys=['b', 'c'])]
    """
    return NearDuplicates.of_index(index, 0).exact_duplicates()
