"""The in-memory index of a Jaccard collection (:class:`JaccardIndex`): documents kept as MinHash
sketches, near-duplicates found by LSH bands (candidates) and verified by Jaccard similarity,
exactly (the shingle sets, ``verify="exact"``) or by the signature's estimate
(``verify="signature"``).

The candidate step is the offline Jaccard mode's (:mod:`permindex.near.minhash`: the same
signatures, the same bands x rows for a threshold, :func:`~permindex.near.minhash.choose_bands`),
and :meth:`JaccardIndex.near_duplicates` runs the offline self-join itself
(:func:`permindex.near.jaccard.self_join`) over one consistent copy, so that ``pairs`` of a
collection equals ``permindex dedup --method minhash`` on the same documents.

Layout: rows (one per add; a replaced or removed key leaves a dead row until compaction) hold
the key, a time, the band keys ``(bands,) uint64`` and the sketch: for ``"exact"`` the sorted
shingle-hash set in one CSR array (8 bytes a distinct shingle), for ``"signature"`` the
signature ``(permutations,) uint32``. The band keys of all rows are also kept in a small LSM of
sorted runs (8 bytes of mixed band key + 4 bytes of row per band and row; runs of similar size
merged, so about log2(n) runs): a lookup is a binary search of each query band key in each run.

Error of ``verify="signature"``: each signature value agrees with probability J (Broder 1997),
so the estimate ``equal values / permutations`` is a binomial proportion: unbiased, standard
deviation ``sqrt(J (1 - J) / permutations)`` (0.035 at J = 0.8, 128 permutations); a pair is
kept when its *estimate* reaches the threshold.

One lock serializes writes; a lookup holds it only to find its candidates (binary searches of
the runs) and take the arrays, and verifies them without it (a row's data never changes in an
array; compaction makes new ones); :meth:`JaccardIndex.near_duplicates` copies the rows under it
and joins without it. Importing this module does not import numba.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar, cast

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.jaccard.sketch import MinHashSketch, Verify, check_verify
from permindex.index.keys.rule import validate_key
from permindex.near.minhash import (
    DEFAULT_PERMUTATIONS,
    Bands,
    band_keys,
    check_permutations,
    check_threshold,
    choose_bands,
)

if TYPE_CHECKING:
    from permindex.index.join.pair_stream import PairArrays
    from permindex.near.jaccard import JaccardDuplicates

__all__ = ["JaccardIndex", "JaccardMatch", "signature_error"]

_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]
_MIX_BAND: Final = np.uint64(0xD6E8FEB86659FD93)
_MIX: Final = np.uint64(0x9E3779B97F4A7C15)
#: Rows kept dead before a write compacts (besides outnumbering the live ones).
COMPACT_MIN: Final = 4096
#: Bytes of overhead counted per row beyond the arrays (the key's str and dict entry).
_KEY_OVERHEAD: Final = 120


class JaccardMatch(NamedTuple):
    """A stored document similar to a query: its ``key`` and their Jaccard similarity
    ``jaccard`` (exact, or the signature's estimate, as the collection's ``verify`` says).

    >>> from permindex import JaccardMatch
    >>> JaccardMatch("https://example.com/a", 0.875).jaccard
    0.875
    """

    key: str
    jaccard: float


def signature_error(jaccard: float, permutations: int = DEFAULT_PERMUTATIONS) -> float:
    """The standard deviation of the signature's estimate of a Jaccard similarity,
    ``sqrt(J (1 - J) / permutations)`` (a binomial proportion: each value agrees with
    probability J).

    >>> from permindex.index.jaccard import signature_error
    >>> round(signature_error(0.8, 128), 4)
    0.0354
    """
    return float(np.sqrt(jaccard * (1.0 - jaccard) / permutations))


def _mixed(keys: _U64) -> _U64:
    """``(n, bands)`` band keys made distinct across bands (a bijection per band), flat."""
    bands = keys.shape[1]
    tags = (np.arange(1, bands + 1, dtype=np.uint64) * _MIX_BAND)[None, :]
    mixed = (keys ^ tags) * _MIX
    mixed ^= mixed >> np.uint64(31)
    return np.ascontiguousarray(mixed).reshape(-1)


_A = TypeVar("_A", bound="np.ndarray[Any, Any]")


def _grow(array: _A, need: int) -> _A:
    """``array`` with room for ``need`` rows (first axis), doubled when it grows."""
    if array.shape[0] >= need:
        return array
    size = max(need, 2 * array.shape[0], 16)
    out = np.zeros((size, *array.shape[1:]), dtype=array.dtype)
    out[: array.shape[0]] = array
    return cast(_A, out)


class JaccardIndex:
    """Documents (key -> :class:`~permindex.index.jaccard.sketch.MinHashSketch`) and their
    near-duplicates at Jaccard similarity >= ``threshold`` (see the module docstring).

    Args:
        threshold: the least Jaccard similarity of a near-duplicate, in (0, 1].
        permutations: signature values per document, 1..4,096.
        verify: ``"exact"`` (keep each shingle set; exact Jaccard, precision 1.0) or
            ``"signature"`` (keep only the signature; the estimate, far less memory).
        expire_after: seconds after which an entry not added again expires (None: never).
        clock: Unix seconds, for the times and expiry.

    Raises:
        InvalidArgumentError: a bad threshold, permutations, verify or expire_after.

    Thread-safe. O(bands x log n) binary searches and the candidates' verification per query.

    >>> from permindex import JaccardIndex, minhash_sketch
    >>> index = JaccardIndex(threshold=0.5)
    >>> text = "the quick brown fox jumps over the lazy dog"
    >>> index.add_many(["a"], [minhash_sketch(text)]).tolist()
    [True]
    >>> index.query_many([minhash_sketch(text + " again")])
    [[JaccardMatch(key='a', jaccard=0.875)]]
    """

    def __init__(
        self,
        threshold: float = 0.8,
        permutations: int = DEFAULT_PERMUTATIONS,
        verify: Verify = "exact",
        *,
        expire_after: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.threshold = check_threshold(threshold)
        self.permutations = check_permutations(permutations)
        self.verify: Verify = check_verify(verify)
        if expire_after is not None and (
            isinstance(expire_after, bool) or not isinstance(expire_after, int) or expire_after < 1
        ):
            raise InvalidArgumentError(f"expire_after must be a positive int, got {expire_after!r}")
        self.expire_after = expire_after
        self.clock = clock
        self.shape: Bands = choose_bands(self.threshold, self.permutations)
        self._lock = threading.RLock()
        self._keys: list[str] = []
        self._row_of: dict[str, int] = {}
        bands = self.shape.bands
        self._live: NDArray[np.bool_] = np.zeros(0, dtype=bool)
        self._times: NDArray[np.uint32] = np.zeros(0, dtype=np.uint32)
        self._bands: NDArray[np.uint64] = np.zeros((0, bands), dtype=np.uint64)
        self._offsets: NDArray[np.int64] = np.zeros(1, dtype=np.int64)
        self._values: NDArray[np.uint64] = np.zeros(0, dtype=np.uint64)
        self._used = 0  # values used
        width = self.permutations if verify == "signature" else 0
        self._signature: NDArray[np.uint32] = np.zeros((0, width), dtype=np.uint32)
        self._runs: list[tuple[_U64, NDArray[np.uint32]]] = []
        self._n = 0  # rows used
        self._added_since_merge = 0.0

    # ---- state

    def __len__(self) -> int:
        with self._lock:
            if self.expire_after is None:
                return len(self._row_of)
            rows = np.fromiter(self._row_of.values(), dtype=np.int64, count=len(self._row_of))
            return int(np.count_nonzero(~self._expired(rows)))

    def __contains__(self, key: object) -> bool:
        with self._lock:
            row = self._row_of.get(key) if isinstance(key, str) else None
            return row is not None and not bool(self._expired(np.array([row]))[0])

    def contains_many(self, keys: Sequence[str]) -> NDArray[np.bool_]:
        """(n,) bool: whether each key is stored (and not expired)."""
        return np.fromiter((key in self for key in keys), dtype=bool, count=len(keys))

    def _expired(self, rows: _I64) -> NDArray[np.bool_]:
        if self.expire_after is None:
            return np.zeros(rows.size, dtype=bool)
        now = int(self.clock())
        return now - self.expire_after >= self._times[rows].astype(np.int64)

    def is_expired(self, added_at: int) -> bool:
        """Whether an entry added at ``added_at`` is expired now (never without expiry)."""
        return self.expire_after is not None and int(self.clock()) - self.expire_after >= added_at

    def _sketch(self, row: int) -> MinHashSketch:
        if self.verify == "exact":
            values = self._values[self._offsets[row] : self._offsets[row + 1]].copy()
            return MinHashSketch(values, np.zeros(0, dtype=np.uint32))
        return MinHashSketch(np.zeros(0, dtype=np.uint64), self._signature[row].copy())

    def get(self, key: str) -> MinHashSketch | None:
        """The stored sketch of ``key`` (the set for ``"exact"``, the signature for
        ``"signature"``), or None."""
        with self._lock:
            row = self._row_of.get(key)
            if row is None or bool(self._expired(np.array([row]))[0]):
                return None
            return self._sketch(row)

    # ---- writes

    def add_many(
        self,
        keys: Sequence[str],
        sketches: Sequence[MinHashSketch],
        added_at: NDArray[np.uint32] | None = None,
        *,
        bands: _U64 | None = None,
    ) -> NDArray[np.bool_]:
        """Store each (key, sketch) in order (a stored key is replaced; a key repeated takes its
        last sketch), at ``added_at`` ((n,) uint32 Unix seconds; None: now); ``bands``, their
        :meth:`band_keys` when the caller has them already.

        Returns:
            (n,) bool: True where the key was not stored before (at its first occurrence).

        Raises:
            InvalidArgumentError: lengths differ, a bad key, a sketch without what this
                collection keeps. Nothing is stored then.
        """
        n = len(keys)
        if len(sketches) != n:
            raise InvalidArgumentError(f"got {n} keys and {len(sketches)} sketches")
        for i, key in enumerate(keys):
            validate_key(key, name=f"keys[{i}]")
        for i, sketch in enumerate(sketches):
            self.check_sketch(sketch, f"sketches[{i}]")
        if added_at is None:
            added_at = np.full(n, int(self.clock()), dtype=np.uint32)
        if n == 0:
            return np.zeros(0, dtype=bool)
        signature = np.stack([s.signature for s in sketches]).astype(np.uint32)
        if self.verify == "exact":
            sizes = np.array([s.shingle_hashes.size for s in sketches], dtype=np.int64)
            values = np.concatenate([s.shingle_hashes for s in sketches]).astype(np.uint64)
        else:
            sizes = np.full(n, self.permutations, dtype=np.int64)
            values = signature.reshape(-1).astype(np.uint64)
        if bands is None:
            bands = band_keys(signature, self.shape)
        return self.add_columns(list(keys), bands, sizes, values, added_at)

    def add_columns(
        self,
        keys: list[str],
        bands: _U64,
        sizes: _I64,
        values: _U64,
        added_at: NDArray[np.uint32],
    ) -> NDArray[np.bool_]:
        """:meth:`add_many` of n documents given as columns (a snapshot's or log's load, no
        object per document): their ``(n, bands) uint64`` band keys, and the concatenated
        sketches, ``sizes[i]`` values each (``"exact"``: the sorted distinct shingle hashes;
        ``"signature"``: ``permutations`` signature values, as uint64). Keys are not checked
        here (:meth:`add_many` checks them)."""
        n = len(keys)
        if n == 0:
            return np.zeros(0, dtype=bool)
        with self._lock:
            new = np.zeros(n, dtype=bool)
            seen: set[str] = set()
            start = self._n
            self._reserve(n, int(values.size))
            row_of = self._row_of
            live = self._live
            superseded: list[int] = []  # rows of this batch that a later repeat replaces
            for i, key in enumerate(keys):
                old = row_of.get(key)
                if old is not None:
                    if old >= start:
                        superseded.append(old)
                    else:
                        live[old] = False
                    new[i] = key not in seen and self.is_expired(int(self._times[old]))
                else:
                    new[i] = key not in seen
                seen.add(key)
                row_of[key] = start + i
            self._keys.extend(keys)
            end = start + n
            self._n = end
            live[start:end] = True
            live[superseded] = False
            self._times[start:end] = added_at
            self._bands[start:end] = bands
            if self.verify == "exact":
                self._values[self._used : self._used + values.size] = values
                self._offsets[start + 1 : end + 1] = self._used + np.cumsum(sizes)
                self._used += int(values.size)
            else:
                self._signature[start:end] = values.reshape(n, self.permutations)
            rows = np.arange(start, end, dtype=np.uint32)
            self._add_run(_mixed(bands), np.repeat(rows, self.shape.bands))
            self._added_since_merge = time.monotonic()
            if self._n - len(self._row_of) > max(COMPACT_MIN, len(self._row_of)):
                self._compact()
            return new

    def export_columns(
        self,
    ) -> tuple[list[str], NDArray[np.uint32], _U64, _I64, _U64]:
        """One consistent copy as columns (what a snapshot writes): the live keys, their
        times, ``(n, bands)`` band keys, sketch sizes and concatenated sketch values (as
        :meth:`add_columns` takes them). O(n + values) under the lock."""
        with self._lock:
            rows = self._live_rows()
            keys = [self._keys[r] for r in rows.tolist()]
            if self.verify == "exact":
                from permindex.near.jaccard import ShingleSets

                sets = ShingleSets(self._values, self._offsets).take(rows)
                sizes, values = sets.sizes, sets.values
            else:
                sizes = np.full(rows.size, self.permutations, dtype=np.int64)
                values = self._signature[rows].reshape(-1).astype(np.uint64)
            return keys, self._times[rows].copy(), self._bands[rows].copy(), sizes, values

    def check_sketch(self, sketch: MinHashSketch, name: str) -> None:
        """Raise InvalidArgumentError (naming ``name``) unless ``sketch`` has what this index
        keeps."""
        if sketch.signature.size != self.permutations:
            raise InvalidArgumentError(
                f"{name} has {sketch.signature.size} signature values, this index "
                f"{self.permutations}",
                name,
            )
        if self.verify == "exact" and sketch.shingle_hashes.size == 0:
            raise InvalidArgumentError(f"{name} has no shingle hashes (verify=exact)", name)

    def _reserve(self, rows: int, values: int) -> None:
        need = self._n + rows
        self._live = _grow(self._live, need)
        self._times = _grow(self._times, need)
        self._bands = _grow(self._bands, need)
        if self.verify == "exact":
            self._offsets = _grow(self._offsets, need + 1)
            self._values = _grow(self._values, self._used + values)
        else:
            self._signature = _grow(self._signature, need)

    def _add_run(self, keys: _U64, rows: NDArray[np.uint32]) -> None:
        order = np.argsort(keys, kind="stable")
        self._runs.append((keys[order], rows[order]))
        while len(self._runs) > 1 and self._runs[-2][0].size <= 2 * self._runs[-1][0].size:
            (a_keys, a_rows), (b_keys, b_rows) = self._runs[-2], self._runs[-1]
            merged_keys = np.concatenate([a_keys, b_keys])
            order = np.argsort(merged_keys, kind="stable")
            self._runs[-2:] = [(merged_keys[order], np.concatenate([a_rows, b_rows])[order])]

    def discard(self, key: str) -> bool:
        """Remove ``key`` if stored; whether it was (and not expired)."""
        with self._lock:
            row = self._row_of.pop(key, None)
            if row is None:
                return False
            self._live[row] = False
            return not bool(self._expired(np.array([row]))[0])

    # ---- lookups

    def band_keys(self, sketches: Sequence[MinHashSketch]) -> _U64:
        """``(n, bands) uint64``: the LSH band keys of each sketch's signature
        (:func:`permindex.near.minhash.band_keys`; one call for a batch: its cost is mostly
        per band and row, not per sketch)."""
        signature = np.stack([s.signature for s in sketches]).astype(np.uint32)
        return band_keys(signature, self.shape)

    def similarities(
        self, sketch: MinHashSketch, others: Sequence[MinHashSketch]
    ) -> NDArray[np.float64]:
        """The Jaccard similarity (exact or estimated, as this index verifies) of ``sketch``
        with each of ``others``, computed as a lookup verifies its candidates."""
        if not others:
            return np.zeros(0, dtype=np.float64)
        if self.verify == "signature":
            equal = np.stack([o.signature for o in others]) == sketch.signature[None, :]
            estimate: NDArray[np.float64] = equal.sum(axis=1) / float(self.permutations)
            return estimate
        from permindex.near.jaccard import ShingleSets, intersection_sizes

        sets = ShingleSets.of([sketch.shingle_hashes, *(o.shingle_hashes for o in others)])
        right = np.arange(1, len(others) + 1, dtype=np.int64)
        inter = intersection_sizes(sets, np.zeros(len(others), dtype=np.int64), right)
        union = sets.sizes[0] + sets.sizes[right] - inter
        similarity: NDArray[np.float64] = inter / union
        return similarity

    def _candidates(self, bands: _U64) -> tuple[_I64, _I64]:
        """(query, row) of every live, unexpired row sharing a band with each query's band keys
        ((m, bands) uint64), each pair once. Under the lock."""
        m = bands.shape[0]
        flat = _mixed(bands)
        query = np.repeat(np.arange(m, dtype=np.int64), self.shape.bands)
        parts_q: list[_I64] = []
        parts_r: list[_I64] = []
        for keys, rows in self._runs:
            low = np.searchsorted(keys, flat, side="left")
            count = np.searchsorted(keys, flat, side="right") - low
            total = int(count.sum())
            if not total:
                continue
            which = np.repeat(np.arange(flat.size), count)
            ends = np.cumsum(count)
            at = np.arange(total) - np.repeat(ends - count, count) + np.repeat(low, count)
            parts_q.append(query[which])
            parts_r.append(rows[at].astype(np.int64))
        if not parts_q:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty.copy()
        q, r = np.concatenate(parts_q), np.concatenate(parts_r)
        keep = self._live[r] & ~self._expired(r)
        q, r = q[keep], r[keep]
        pair = np.unique(q * np.int64(max(self._n, 1)) + r)
        return pair // max(self._n, 1), pair % max(self._n, 1)

    def _similarity(
        self,
        sketches: Sequence[MinHashSketch],
        query: _I64,
        rows: _I64,
        stored: tuple[_U64, _I64, NDArray[np.uint32]],
    ) -> NDArray[np.float64]:
        """The Jaccard similarity (exact or estimated) of each (query, row), from ``stored``,
        the (values, offsets, signature) arrays taken under the lock: a row's data never
        changes in them (writes fill rows after the last, compaction makes new arrays), so
        this runs without the lock."""
        if query.size == 0:
            return np.zeros(0, dtype=np.float64)
        values, offsets, signatures_ = stored
        if self.verify == "signature":
            signature = np.stack([s.signature for s in sketches])
            equal: _I64 = (signature[query] == signatures_[rows]).sum(axis=1)
            estimate: NDArray[np.float64] = equal / float(self.permutations)
            return estimate
        from permindex.near.jaccard import ShingleSets, intersection_sizes

        queries = ShingleSets.of([s.shingle_hashes for s in sketches])
        inter = intersection_sizes(queries, query, rows, ShingleSets(values, offsets))
        union = queries.sizes[query] + (offsets[rows + 1] - offsets[rows]) - inter
        similarity: NDArray[np.float64] = inter / union
        return similarity

    def query_many(
        self,
        sketches: Sequence[MinHashSketch],
        *,
        limit: int | None = None,
        exclude: Sequence[str | None] | None = None,
        bands: _U64 | None = None,
    ) -> list[list[JaccardMatch]]:
        """For each sketch, every stored key with Jaccard >= the threshold, most similar first
        (then by key), at most ``limit`` (None or 0: all); ``exclude[i]``, a key left out of
        answer i (a document's own key); ``bands``, the sketches' :meth:`band_keys` when the
        caller has them already.

        Raises:
            InvalidArgumentError: a sketch without what this index keeps.
        """
        for i, sketch in enumerate(sketches):
            self.check_sketch(sketch, f"sketches[{i}]")
        if not sketches:
            return []
        if bands is None:
            bands = self.band_keys(sketches)
        with self._lock:  # the candidates and the arrays; verified without the lock
            query, rows = self._candidates(bands)
            stored = (self._values, self._offsets, self._signature)
            key_list = self._keys  # appended to, or replaced by a compaction: rows stay valid
        similarity = self._similarity(sketches, query, rows, stored)
        good = similarity >= self.threshold
        query, rows, similarity = query[good], rows[good], similarity[good]
        keys = [key_list[r] for r in rows.tolist()]
        found: list[list[JaccardMatch]] = [[] for _ in sketches]
        for q, key, j in zip(query.tolist(), keys, similarity.tolist(), strict=True):
            if exclude is None or exclude[q] != key:
                found[q].append(JaccardMatch(key, j))
        for matches in found:
            matches.sort(key=lambda m: (-m.jaccard, m.key))
        if limit:
            found = [matches[:limit] for matches in found]
        return found

    def check_in_order(
        self,
        keys: Sequence[str],
        sketches: Sequence[MinHashSketch],
        stored: Sequence[list[JaccardMatch]],
        times: NDArray[np.uint32],
        *,
        bands: _U64 | None = None,
    ) -> list[list[JaccardMatch] | None]:
        """CheckAndAdd's decision over a batch, document by document in order, given
        ``stored[i]``, the stored matches of document i with its own key left out (this
        index's :meth:`query_many` with ``exclude=keys``; over shards, every shard's Query
        merged). Document i is a near-duplicate when another key matches it: a stored one, unless
        that key is added again earlier in the batch (its new document counts instead), or one of
        the batch's documents before it that are to be added and are not expired at their time
        (``times``, (n,) uint32 Unix seconds) -- candidates by a shared band key, verified by
        :meth:`similarities`, as a lookup verifies. A key never blocks itself (a re-add
        replaces). Nothing is stored here: the one decision of the server's CheckAndAdd
        (:meth:`permindex.storage.jaccard_store.JaccardStore.check_and_add_many`) and of the
        sharded client's (:mod:`permindex.client.operations`).

        Returns:
            per document, its matches (Jaccard descending, then key) when it is a
            near-duplicate, or None when it is to be added.

        O(n^2 x bands) band comparisons at most, and the candidates' verification.

        >>> import numpy as np
        >>> from permindex import JaccardIndex, minhash_sketch
        >>> index = JaccardIndex(threshold=0.5)
        >>> text = "the quick brown fox jumps over the lazy dog"
        >>> sketches = [minhash_sketch(text), minhash_sketch(text + " again")]
        >>> times = np.zeros(2, dtype=np.uint32)
        >>> index.check_in_order(["a", "b"], sketches, [[], []], times)
        [None, [JaccardMatch(key='a', jaccard=0.875)]]
        """
        if bands is None:
            bands = self.band_keys(sketches) if sketches else np.zeros((0, 0), dtype=np.uint64)
        decided: list[list[JaccardMatch] | None] = []
        pending: set[str] = set()  # the keys of the batch to be added so far
        live: list[int] = []  # of those, the ones not expired at their time (latest per key)
        for i, (key, sketch) in enumerate(zip(keys, sketches, strict=True)):
            matches = [m for m in stored[i] if m.key not in pending]
            earlier = [j for j in live if keys[j] != key]
            if earlier:
                shared = (bands[earlier] == bands[i]).any(axis=1)
                near = [j for j, s in zip(earlier, shared.tolist(), strict=True) if s]
                values = self.similarities(sketch, [sketches[j] for j in near])
                matches += [
                    JaccardMatch(keys[j], value)
                    for j, value in zip(near, values.tolist(), strict=True)
                    if value >= self.threshold
                ]
                matches.sort(key=lambda m: (-m.jaccard, m.key))
            if matches:
                decided.append(matches)
                continue
            decided.append(None)
            pending.add(key)
            live = [j for j in live if keys[j] != key]  # replaced within the batch
            if not self.is_expired(int(times[i])):
                live.append(i)
        return decided

    # ---- whole collection

    def export(self) -> tuple[list[str], list[MinHashSketch], NDArray[np.uint32]]:
        """One consistent copy: every live key, its sketch and time, in row order."""
        with self._lock:
            rows = self._live_rows()
            return (
                [self._keys[r] for r in rows.tolist()],
                [self._sketch(r) for r in rows.tolist()],
                self._times[rows].copy(),
            )

    def _live_rows(self) -> _I64:
        rows = np.flatnonzero(self._live[: self._n]).astype(np.int64)
        return rows[~self._expired(rows)]

    def near_duplicates(
        self,
        max_work: int | None = None,
        *,
        send_pairs: bool = True,
        should_stop: Callable[[], bool] | None = None,
    ) -> JaccardDuplicates:
        """Every pair at Jaccard >= the threshold, with clusters, flags and exact-duplicate
        groups: a :class:`permindex.near.jaccard.JaccardDuplicates` of one consistent copy
        (distances in its units, ``round((1 - J) * 10^4)``). For ``"exact"``, the offline
        self-join itself (:func:`permindex.near.jaccard.self_join`) over the sets, so the pairs
        and values are ``permindex dedup --method minhash``'s; for ``"signature"``, the same
        band candidates kept by their estimate. O(n log n) plus the candidates.

        ``max_work``: the most work allowed, estimated before the join as for a SimHash
        collection -- the candidate pairs of the distinct sets (pairs sharing a band's bucket,
        counted in every band they share) plus, with ``send_pairs`` (a caller that lists the
        pairs), the pairs of identical sets, which the join collapses but a list holds.
        ``should_stop`` (a server's call cancelled or past its deadline) is called between the
        join's steps (bands, kernel calls), outside the lock.

        Raises:
            WorkBudgetExceededError: the estimate is above ``max_work``; nothing was joined.
            CallCancelledError: ``should_stop`` returned True; nothing is returned.
        """
        from permindex.index.join.pair_stream import PairArrays, distinct_values
        from permindex.near.jaccard import JaccardDuplicates, ShingleSets, self_join

        with self._lock:
            rows = self._live_rows()
            keys = [self._keys[r] for r in rows.tolist()]
            bands = self._bands[rows]
            if self.verify == "exact":
                sets = ShingleSets(self._values, self._offsets).take(rows)
            else:
                signature = self._signature[rows]
        if self.verify == "exact":
            digests = sets.digests()
            values = distinct_values(digests)
            representative = values.by_value[values.first]
            _check_work(bands[representative], values.counts, max_work, send_pairs)
            pairs, candidates, verified = self_join(
                sets, representative, bands[representative], self.threshold,
                should_stop=should_stop,
            )  # fmt: skip
        else:
            p = self.permutations
            as_sets = ShingleSets(
                signature.reshape(-1).astype(np.uint64), np.arange(len(keys) + 1) * p
            )
            digests = as_sets.digests()
            values = distinct_values(digests)
            representative = values.by_value[values.first]
            _check_work(bands[representative], values.counts, max_work, send_pairs)
            pairs, candidates = self._signature_join(
                signature[representative], bands[representative], should_stop
            )
            verified = candidates
        found = PairArrays(representative[pairs.a], representative[pairs.b], pairs.distance)
        return JaccardDuplicates.joined_elsewhere(
            keys, digests, self.threshold, self.shape, found, candidates, verified
        )

    def _signature_join(
        self,
        signature: NDArray[np.uint32],
        bands: _U64,
        should_stop: Callable[[], bool] | None = None,
    ) -> tuple[PairArrays, int]:
        """Pairs (u < v) of distinct signatures sharing a band whose estimate reaches the
        threshold, distance in the offline units; and the candidates. ``should_stop``: called
        before each batch of candidates."""
        from permindex.index.join.pair_stream import PairArrays
        from permindex.near.jaccard import SCALE, lookup_batches

        p = self.permutations
        parts: list[PairArrays] = []
        candidates = 0
        for a, b in lookup_batches(bands, bands, should_stop=should_stop):
            keep = a < b
            a, b = a[keep], b[keep]
            candidates += int(a.size)
            equal = (signature[a] == signature[b]).sum(axis=1).astype(np.int64)
            good = equal / float(p) >= self.threshold
            a, b, equal = a[good], b[good], equal[good]
            distance = ((p - equal) * 2 * SCALE + p) // (2 * p)
            parts.append(PairArrays(a, b, distance))
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return PairArrays(empty, empty.copy(), empty.copy()), 0
        return PairArrays(*(np.concatenate(x) for x in zip(*parts, strict=True))), candidates

    # ---- memory

    def memory_bytes(self) -> int:
        """Estimated bytes of the index: its arrays by capacity, the runs, the keys."""
        with self._lock:
            arrays = (
                self._live.nbytes + self._times.nbytes + self._bands.nbytes
                + self._offsets.nbytes + self._values.nbytes + self._signature.nbytes
            )  # fmt: skip
            runs = sum(keys.nbytes + rows.nbytes for keys, rows in self._runs)
            keys = sum(len(key) for key in self._keys) + _KEY_OVERHEAD * len(self._keys)
            return int(arrays + runs + keys)

    def memory_growth(self, n: int, key_bytes: int, values: int = 0) -> int:
        """Bytes ``n`` new documents of ``key_bytes`` key bytes and ``values`` shingle hashes
        may add (each a new row; the arrays doubling counted)."""
        per_row = 1 + 4 + 8 * self.shape.bands + 12 * self.shape.bands + _KEY_OVERHEAD
        if self.verify == "exact":
            per_row += 8
        else:
            per_row += 4 * self.permutations
        growth = n * per_row + key_bytes + 8 * values
        with self._lock:
            if self._n + n > self._live.shape[0]:
                growth += self._live.shape[0] * (per_row - _KEY_OVERHEAD)
            if self.verify == "exact" and self._used + values > self._values.shape[0]:
                growth += self._values.nbytes
        return growth

    def compact(self, min_share: float = 0.0) -> bool:
        """Drop dead and expired rows when they are more than ``min_share`` of the rows;
        whether it compacted. O(n) under the lock."""
        with self._lock:
            live = self._live_rows().size
            dead = self._n - live
            if dead == 0 or dead <= min_share * max(self._n, 1):
                return False
            self._compact()
            return True

    def expire(self) -> int:
        """Forget the expired entries now (they already match nothing); how many."""
        with self._lock:
            if self.expire_after is None:
                return 0
            rows = np.flatnonzero(self._live[: self._n]).astype(np.int64)
            gone = rows[self._expired(rows)]
            for row in gone.tolist():
                self._live[row] = False
                self._row_of.pop(self._keys[row], None)
            return int(gone.size)

    def merge_all_runs(self, idle: float = 0.0) -> bool:
        """Merge the band runs into one when nothing was added for ``idle`` seconds; whether
        it merged."""
        with self._lock:
            if len(self._runs) < 2 or time.monotonic() - self._added_since_merge < idle:
                return False
            keys = np.concatenate([k for k, _ in self._runs])
            rows = np.concatenate([r for _, r in self._runs])
            order = np.argsort(keys, kind="stable")
            self._runs = [(keys[order], rows[order])]
            return True

    def _compact(self) -> None:
        """Rebuild every array from the live rows (under the lock)."""
        self.expire()
        rows = np.flatnonzero(self._live[: self._n]).astype(np.int64)
        n = rows.size
        keys = [self._keys[r] for r in rows.tolist()]
        self._keys = keys
        self._row_of = {key: i for i, key in enumerate(keys)}
        room = max(16, n + n // 4)
        live = np.zeros(room, dtype=bool)
        live[:n] = True
        self._live = live
        self._times = _grow(self._times[rows], room)
        self._bands = _grow(self._bands[rows], room)
        if self.verify == "exact":
            from permindex.near.jaccard import ShingleSets

            sets = ShingleSets(self._values, self._offsets).take(rows)
            self._offsets = _grow(sets.offsets, room + 1)
            self._used = int(sets.offsets[-1])
            self._values = _grow(sets.values, self._used + self._used // 4)
        else:
            self._signature = _grow(self._signature[rows], room)
        self._n = n
        self._runs = []
        if n:
            self._add_run(
                _mixed(self._bands[:n]),
                np.repeat(np.arange(n, dtype=np.uint32), self.shape.bands),
            )

    def _check(self) -> None:
        """Invariants (for tests): every key's row is live and holds it, the runs hold every
        live row's band keys, the CSR offsets ascend."""
        with self._lock:
            for key, row in self._row_of.items():
                assert self._live[row] and self._keys[row] == key
            assert int(np.count_nonzero(self._live[: self._n])) == len(self._row_of)
            total = sum(int(k.size) for k, _ in self._runs)
            assert total == self._n * self.shape.bands
            for keys, _rows in self._runs:
                assert bool((keys[1:] >= keys[:-1]).all())
            if self.verify == "exact":
                assert bool((np.diff(self._offsets[: self._n + 1]) >= 0).all())


def _check_work(
    bands: _U64, counts: NDArray[np.int64], max_work: int | None, send_pairs: bool
) -> None:
    """WorkBudgetExceededError when the join's work estimate (:meth:`JaccardIndex.
    near_duplicates`) is above ``max_work``: ``bands`` ``(d, bands)`` of the distinct sets,
    ``counts`` the keys holding each. O(bands x d log d), the join's own bucket sort."""
    if max_work is None:
        return
    from permindex.errors import WorkBudgetExceededError

    estimate = 0
    for band in range(bands.shape[1]):
        ordered = np.sort(bands[:, band])
        starts = np.flatnonzero(np.append(True, ordered[1:] != ordered[:-1]))
        sizes = np.diff(np.append(starts, ordered.size)).astype(np.int64)
        estimate += int((sizes * (sizes - 1) // 2).sum())
    what = "candidate pairs to verify"
    if send_pairs:
        estimate += int((counts * (counts - 1) // 2).sum())
        what += " plus pairs of identical shingle sets"
    if estimate > max_work:
        raise WorkBudgetExceededError(
            f"the estimated work, {estimate:,} ({what}), is above the budget of {max_work:,}",
            estimate=estimate,
            budget=max_work,
            what=what,
        )
