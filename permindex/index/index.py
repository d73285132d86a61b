"""The near-duplicate index, :class:`Index`: the public API of (key, fingerprint) pairs in the
table-permutation index of Manku, Jain & Das Sarma 2007, "Detecting Near-Duplicates for Web
Crawling", section 3 -- argument checks, the design choice and the one lock; the work is done by
its parts:

* :mod:`permindex.index.rows` -- the row store (fingerprints, liveness, keys by row,
  tombstones, compaction, growth ahead);
* :mod:`permindex.index.table_set` -- the tables (:mod:`permindex.index.tables.table`, one
  per
  permutation): building, writing and merging their runs;
* :mod:`permindex.index.search.lookup` and :mod:`permindex.index.search.lookup_kernels` -- the
  lookups on
  compiled kernels (the prefix-range search and the exact check of each candidate) and the
  read view;
* :mod:`permindex.index.search.batch_queries` -- the batch query;
  :mod:`permindex.index.keys.batches` -- input
  batches (str keys, compact key sections);
* :mod:`permindex.index.join.self_join` -- the self-join of :meth:`Index.pairs`;
* :mod:`permindex.index.expiry` -- :class:`~permindex.index.expiry.ExpiringIndex`, this class
  with entries that expire when not added again within a duration.

Thread safety: every public method reads and changes the index under one re-entrant lock
(``threading.RLock``), held for microseconds by single lookups and writes. A batch lookup
(:meth:`Index.query_many` of more than a few fingerprints, ``Tuning.small_batch``) holds it only
to take a consistent read view (:mod:`permindex.index.search.lookup`: the frozen runs, which are
immutable, the memtables frozen as runs, the row arrays, whose rows below the view's count never
change, and the liveness mask, copied by a removal while a lookup searches it) and, after the
search, to read the matched rows' keys; the search itself runs without the lock in a compiled
kernel that releases the GIL, so lookups from several threads run in parallel and a lookup
racing a write sees the index as it was before or after each write, never a mix.
:meth:`Index.check_and_add` queries and adds under one acquisition of the lock; iterating yields
from a copy of the keys taken under it. A write does outside the lock what changes nothing a
reader sees: before it, validating keys and sorting a large batch's runs; after it, merging runs
(swapped in under the lock) and growing the row arrays ahead (:mod:`permindex.index.table_set`,
:mod:`permindex.index.rows`), so lookups go on while another thread ingests.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Literal, NamedTuple, TypedDict, overload

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError, NotFoundError
from permindex.index.hamming import as_fingerprint_array, validate_fingerprint
from permindex.index.join.pair_stream import self_join_pairs
from permindex.index.keys.batches import Section, compact_inputs, validate_keys
from permindex.index.keys.batches import key_list as as_key_list
from permindex.index.keys.rule import MAX_KEY_BYTES, check_int, short_repr, validate_key
from permindex.index.memory import MemoryBreakdown, breakdown, growth_bytes, release_free_heap
from permindex.index.rows import DEFAULT_COMPACTION_MIN, RowStore, export_slices
from permindex.index.search.batch_queries import (
    LookupOptions,
    QueryColumns,
    lookup_many,
    lookup_within,
)
from permindex.index.search.lookup import Lookups
from permindex.index.search.matches import Match
from permindex.index.table_set import TableSet
from permindex.index.tables.permutation import (
    DEFAULT_DESIGN,
    Design,
    check_design_k,
    choose_design,
    query_k,
)
from permindex.index.tables.table import DEFAULT_MEMTABLE_LIMIT, Table
from permindex.index.tuning import DEFAULT_TUNING, Tuning
from permindex.index.writes import (
    add_batch,
    add_coded,
    add_locked,
    add_one,
    add_section,
    after_write,
    discard_locked,
)

if TYPE_CHECKING:
    from permindex.index.keys.codec import Dictionary

__all__ = [
    "DEFAULT_COMPACTION_MIN",
    "MAX_KEY_BYTES",
    "CheckAndAddResult",
    "Index",
    "Match",
    "validate_key",
]

#: Fingerprints design="auto" assumes without expected_size.
AUTO_SIZE = 1_000_000

_TOP = 1 << 64  # fingerprints are below this
_U64 = NDArray[np.uint64]
_I64 = NDArray[np.int64]


class _Sized(TypedDict):
    memtable_limit: int
    compaction_min: int
    expected_size: int
    memory_budget: int | None
    tuning: Tuning


def _sized(
    memtable_limit: int, compaction_min: int, n: int, memory_budget: int | None, tuning: Tuning
) -> _Sized:
    """The keyword arguments of an :class:`Index` built for ``n`` fingerprints."""
    return {
        "memtable_limit": memtable_limit,
        "compaction_min": compaction_min,
        "expected_size": n,
        "memory_budget": memory_budget,
        "tuning": tuning,
    }


class CheckAndAddResult(NamedTuple):
    """The outcome of :meth:`Index.check_and_add`: a named tuple (added, matches, replaced).

    Examples:
        >>> from permindex import CheckAndAddResult
        >>> CheckAndAddResult(True, [], False).added
        True
    """

    #: True when no other key was within k: the key now holds the fingerprint.
    added: bool
    #: The other keys within k at the time of the check, sorted by (distance, key).
    matches: list[Match]
    #: True when added and the key was stored before the call.
    replaced: bool


def _options(
    k: object,
    design: Design | tuple[int, int] | str,
    memtable_limit: object,
    compaction_min: object,
    expected_size: int | None,
    memory_budget: int | None,
) -> tuple[int, Design, int, int]:
    """The validated (k, design, memtable_limit, compaction_min) of :class:`Index` (its
    errors); ``design="auto"`` chosen by
    :func:`~permindex.index.tables.permutation.choose_design`."""
    if isinstance(design, str):
        if design != "auto":
            raise InvalidArgumentError(
                f'design must be a Design, a (blocks, leading) pair or "auto", not {design!r}',
                value=design,
            )
        size = AUTO_SIZE if expected_size is None else check_int(expected_size, "size")
        budget = None if memory_budget is None else check_int(memory_budget, "budget")
        design = choose_design(max(size, 1), check_int(k, "k"), budget)
    chosen = Design.of(design)
    kk = check_design_k(check_int(k, "k"), chosen)
    limit = check_int(memtable_limit, "memtable_limit")
    if limit < 1:
        raise InvalidArgumentError(f"memtable_limit must be >= 1, got {limit}", value=limit)
    minimum = check_int(compaction_min, "compaction_min")
    if minimum < 0:
        raise InvalidArgumentError(f"compaction_min must be >= 0, got {minimum}", value=minimum)
    return kk, chosen, limit, minimum


def _resolve_limit(limit: object) -> int:
    if limit is None:
        return 0
    value = check_int(limit, "limit")
    if value < 0:
        raise InvalidArgumentError(f"limit must be >= 0 (0 = all), got {value}", value=value)
    return value


class Index:
    """An in-memory near-duplicate index of (key, 64-bit fingerprint) pairs: which stored keys lie
    within Hamming distance ``k`` bits of a fingerprint, exactly -- no false negatives, no false
    positives -- by the table-permutation method of Manku, Jain & Das Sarma 2007, section 3: the
    fingerprints are kept in C(blocks, leading) tables, each sorted under one permutation of the
    blocks; two fingerprints within k <= blocks - leading bits agree on the leading blocks of at
    least one table (pigeonhole), so a query reads one prefix range per table and verifies each
    candidate there by popcount(a XOR b).

    Examples:
        >>> from permindex import Index
        >>> index = Index(k=3)
        >>> index.add("page-1", 0xFFFF)
        True
        >>> index.add_many(["page-2", "page-3"], [0xFFFE, 0xF0F0])
        array([ True,  True])
        >>> index.query(0xFFFF)  # doctest: +NORMALIZE_WHITESPACE
        [Match(key='page-1', fingerprint=65535, distance=0),
         Match(key='page-2', fingerprint=65534, distance=1)]
        >>> len(index), "page-3" in index
        (3, True)

    Methods, by purpose:

    * build: :meth:`from_arrays`, :meth:`from_compact`;
    * write: :meth:`add`, :meth:`add_many`, :meth:`add_compact`, :meth:`check_and_add`,
      :meth:`remove`, :meth:`discard`;
    * look up: :meth:`query`, :meth:`query_many` (lists or columns), :meth:`max_candidates`,
      :meth:`query_columns_within`;
    * keys: :meth:`get`, ``key in index``, :meth:`contains_many`, ``len(index)``,
      ``iter(index)``;
    * the whole set: :meth:`pairs`, :meth:`iter_pairs`, :meth:`export`, :meth:`export_compact`,
      :meth:`export_slices`;
    * upkeep and figures: :meth:`merge_all_runs`, :meth:`compact`, :meth:`table_runs`,
      :meth:`memory_bytes`, :meth:`memory_breakdown`, :meth:`memory_growth`,
      :meth:`table_bytes`, :attr:`compactions`, :meth:`_check` (every invariant, for tests).

    Args:
        k: the largest Hamming distance (bits) the index answers, 0 <= k <= blocks - leading.
        design: a :class:`~permindex.index.tables.permutation.Design` or ``(blocks, leading)``
            (any blocks and leading: C(blocks, leading) tables); the default (4, 1) has 4 tables
            of 16-bit prefixes and answers k <= 3; (5, 2) has 10 tables of 25- or 26-bit
            prefixes, (6, 3) 20 of 31- to 33-bit ones. ``"auto"``: chosen by
            :func:`~permindex.index.tables.permutation.choose_design` from ``expected_size``
            (default 10^6 fingerprints), k and ``memory_budget`` (bytes for the tables, keys
            excluded; None: no limit): the fastest modelled design that fits.
        expected_size: only for ``design="auto"``.
        memory_budget: only for ``design="auto"``.
        memtable_limit: entries a table keeps in its sorted memtable before freezing them into a
            sorted run (small values exercise freezing and merging in tests).
        compaction_min: dead rows (removed or replaced fingerprints) are dropped by a compaction
            once they outnumber the live rows and this minimum.
        tuning: the speed and memory knobs (:class:`~permindex.index.tuning.Tuning`); they never
            change an answer.

    Raises:
        TypeError: ``k``, ``memtable_limit`` or ``compaction_min`` is not an int, ``design`` is
            neither a Design, a pair nor "auto", ``tuning`` is not a Tuning.
        InvalidArgumentError: k < 0, k above the design's guarantee (the message names it, e.g.
            "design (4 blocks, 1 leading) guarantees k <= 3"), an invalid design,
            ``memtable_limit`` < 1 or ``compaction_min`` < 0.

    Keys are non-empty str of at most 1,024 UTF-8 bytes (:func:`validate_key`); fingerprints are
    ints in [0, 2^64) or uint64 arrays. Every argument is validated before anything changes: a
    call that raises leaves the index as it was. Memory: 8 bytes of fingerprint per row, about 7
    per row and table, and the key bytes with about 12 more per key.

    Thread safety: every method may be called from any thread (see the module docstring: one
    re-entrant lock; batch lookups search without it, on a consistent view).
    """

    def __init__(
        self,
        k: int = 3,
        design: Design | tuple[int, int] | str = DEFAULT_DESIGN,
        *,
        memtable_limit: int = DEFAULT_MEMTABLE_LIMIT,
        compaction_min: int = DEFAULT_COMPACTION_MIN,
        expected_size: int | None = None,
        memory_budget: int | None = None,
        tuning: Tuning = DEFAULT_TUNING,
    ) -> None:
        k, self._design, memtable_limit, compaction_min = _options(
            k, design, memtable_limit, compaction_min, expected_size, memory_budget
        )
        if not isinstance(tuning, Tuning):
            raise TypeError(f"tuning must be a Tuning, not {type(tuning).__name__}")
        self._k, self._lock, self._tuning = k, threading.RLock(), tuning
        self._rows = RowStore(self._lock, compaction_min, tuning)
        self._store = self._rows.keys  # the key store (the single query reads keys here)
        changes = self._rows.changes  # shared by the tables: what the lookup caches check
        self._tables = [
            Table(p, memtable_limit, changes, tuning) for p in self._design.permutations
        ]
        self._runs = TableSet(self._tables, self._rows)
        # The tables a query within each k <= self._k searches (Design.tables_for).
        self._searched = {kk: self._design.tables_for(kk) for kk in range(k + 1)}
        # Lookups loads the kernels now, not at the first lookup.
        self._lookups = Lookups(self._tables, self._rows, self._searched, changes)
        # The matches of one query (the caller holds the lock), sorted.
        self._query_one = self._lookups.one

    @classmethod
    def from_arrays(
        cls,
        keys: Iterable[str],
        fingerprints: Iterable[int] | _U64,
        *,
        k: int = 3,
        design: Design | tuple[int, int] | str = DEFAULT_DESIGN,
        memtable_limit: int = DEFAULT_MEMTABLE_LIMIT,
        compaction_min: int = DEFAULT_COMPACTION_MIN,
        memory_budget: int | None = None,
        tuning: Tuning = DEFAULT_TUNING,
    ) -> Index:
        """A new index holding ``keys`` with their fingerprints (a bulk load: each table is built by
        one radix sort, O(n) per table); ``design="auto"`` chooses for n fingerprints. The other
        arguments are those of :class:`Index`.

        Args:
            keys: an iterable of n str.
            fingerprints: n ints in [0, 2^64), or a (n,) unsigned integer array (uint64
                preferred).

        Raises:
            TypeError, InvalidArgumentError: as :class:`Index` and :meth:`add_many`.

        Examples:
            >>> from permindex import Index
            >>> index = Index.from_arrays(["a", "b"], [0b1011, 0b1000])
            >>> index.get("b")
            8
        """
        key_list = as_key_list(keys)
        index = cls(
            k,
            design,
            **_sized(memtable_limit, compaction_min, len(key_list), memory_budget, tuning),
        )
        index.add_many(key_list, fingerprints)
        return index

    @classmethod
    def from_compact(
        cls,
        lengths: NDArray[np.integer] | Iterable[int],
        blob: NDArray[np.uint8] | bytes | bytearray,
        fingerprints: Iterable[int] | _U64,
        *,
        k: int = 3,
        design: Design | tuple[int, int] | str = DEFAULT_DESIGN,
        memtable_limit: int = DEFAULT_MEMTABLE_LIMIT,
        compaction_min: int = DEFAULT_COMPACTION_MIN,
        memory_budget: int | None = None,
        tuning: Tuning = DEFAULT_TUNING,
    ) -> Index:
        r"""A new index from keys in the compact form of :meth:`export_compact` and their
        fingerprints: a loader that never makes a Python str per key (a snapshot's key section has
        this layout). The key bytes are copied as they are; each key is hashed once. A repeated key
        keeps its last fingerprint. O(n + key bytes).

        Args:
            lengths: (n,) integers, each key's UTF-8 byte length (1 to 1,024).
            blob: every key's UTF-8 bytes, each followed by a NUL, as bytes or a (m,) uint8 array.
            fingerprints: n ints in [0, 2^64) or a (n,) uint64 array.
            k: as :class:`Index`; likewise ``design``, ``memtable_limit``, ``compaction_min``,
                ``memory_budget`` and ``tuning``.

        Raises:
            InvalidArgumentError: lengths and blob disagree, a key is empty, too long or not UTF-8,
                or the counts differ; TypeError as :meth:`add_many`.

        Examples:
            >>> from permindex import Index
            >>> index = Index.from_compact([1, 2], b"a\x00bc\x00", [0b1011, 0xFFFF])
            >>> sorted(index)
            ['a', 'bc']
        """
        sizes, raw, values = compact_inputs(lengths, blob, fingerprints)
        n = int(sizes.size)
        index = cls(k, design, **_sized(memtable_limit, compaction_min, n, memory_budget, tuning))
        _add_section(index, sizes, raw, values)
        return index

    def add_compact(
        self,
        lengths: NDArray[np.integer] | Iterable[int],
        blob: NDArray[np.uint8] | bytes | bytearray,
        fingerprints: Iterable[int] | _U64,
    ) -> None:
        r"""Store keys in the compact form of :meth:`export_compact` (``lengths``, ``blob``: see
        :meth:`from_compact`) with their (n,) ``fingerprints``, as :meth:`add_many` would, into
        this index (:meth:`from_compact` does the same into a new one). A contiguous uint8 ``blob``
        is copied into the key store once; no Python str is made per key. O(n + key bytes).

        Raises:
            InvalidArgumentError, TypeError: as :meth:`from_compact`; nothing is stored then.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add_compact([1, 1], b"x\x00y\x00", [1, 2])
            >>> index.get("y")
            2
        """
        self._before_call()
        _add_section(self, *compact_inputs(lengths, blob, fingerprints))

    def _before_call(self) -> None:
        """Called first by each public method that reads or writes the entries (not by the
        properties, :meth:`table_runs`, :meth:`max_candidates`, :meth:`merge_all_runs`, the
        memory figures or :meth:`_check`), without the lock: the one hook of a subclass whose
        entries change with time (:class:`~permindex.index.expiry.ExpiringIndex` drops its
        expired entries here). Does nothing here."""

    def __repr__(self) -> str:
        d = self._design
        return f"Index(k={self._k}, design=({d.blocks}, {d.leading}), keys={len(self)})"

    # -- properties ---------------------------------------------------------------------------

    @property
    def k(self) -> int:
        """The largest Hamming distance (bits) this index answers; the default of queries."""
        return self._k

    @property
    def design(self) -> Design:
        """The table design (blocks, leading)."""
        return self._design

    @property
    def tuning(self) -> Tuning:
        """The tuning knobs this index was built with (:class:`~permindex.index.tuning.Tuning`)."""
        return self._tuning

    @property
    def compactions(self) -> int:
        """Compactions so far: each drops the dead rows and renumbers the live ones."""
        return self._rows.compactions

    def table_runs(self) -> list[tuple[tuple[int, ...], int]]:
        """Per table, in the design's order: the entries of each frozen run (oldest, largest first)
        and of the memtable, tombstones of dead rows included. After :meth:`merge_all_runs` has
        merged a table it holds one run and an empty memtable; a single lookup probes one directory
        per run. O(tables + runs), under the lock.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add("a", 1)
            True
            >>> index.table_runs()
            [((), 1), ((), 1), ((), 1), ((), 1)]
        """
        self._before_call()
        with self._lock:
            return [(table.run_sizes, table.memtable_size) for table in self._tables]

    def __len__(self) -> int:
        """The number of keys stored. O(1).

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add_many(["a", "b"], [1, 2]).tolist()
            [True, True]
            >>> len(index)
            2
        """
        self._before_call()
        with self._lock:
            return len(self._store)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is stored (False for anything that is not a str). O(len(key)).

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add("a", 1)
            True
            >>> "a" in index, "b" in index, 3 in index
            (True, False, False)
        """
        self._before_call()
        if not isinstance(key, str):
            return False
        try:
            data = key.encode("utf-8")
        except UnicodeEncodeError:
            return False
        with self._lock:
            return self._store.find(data) >= 0

    def contains_many(self, keys: Iterable[str]) -> NDArray[np.bool_]:
        """(n,) bool: whether each of ``keys`` is stored, as ``key in index`` for each, in one
        vectorized lookup. O(n + key bytes).

        Raises:
            TypeError, InvalidArgumentError: a malformed key (as :meth:`add_many`).

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add("a", 1)
            True
            >>> index.contains_many(["a", "b"]).tolist()
            [True, False]
        """
        self._before_call()
        _key_list, batch = validate_keys(keys)
        with self._lock:
            return self._store.find_many(batch) >= 0

    def __iter__(self) -> Iterator[str]:
        """The keys, in the order they were last added (a replacement moves a key to the end;
        the key store keeps no first-added rank), a copy taken under the lock. O(n).

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add_many(["b", "a"], [1, 2]).tolist()
            [True, True]
            >>> list(index)
            ['b', 'a']
        """
        self._before_call()
        with self._lock:
            rows = self._rows.live_rows()
            return iter(self._store.keys(self._store.iteration_order(rows)))

    def get(self, key: str) -> int | None:
        """The fingerprint stored under ``key`` (int), or None. O(len(key)).

        Raises:
            TypeError, InvalidArgumentError: a malformed key (:func:`validate_key`).

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add("a", 0xFFFF)
            True
            >>> index.get("a"), index.get("b")
            (65535, None)
        """
        self._before_call()
        data = validate_key(key).encode("utf-8")
        with self._lock:
            row = self._store.find(data)
            return None if row < 0 else int(self._rows.fps[row])

    # -- writes ---------------------------------------------------------------------------------

    def add(self, key: str, fingerprint: int) -> bool:
        """Store ``fingerprint`` under ``key``; a stored key's fingerprint is replaced (its old
        entries become tombstones, never returned).

        Args:
            key: a non-empty str of at most 1,024 UTF-8 bytes.
            fingerprint: an int in [0, 2^64).

        Returns:
            True if the key was not stored before.

        Raises:
            TypeError: ``key`` is not a str, or ``fingerprint`` is not an int (bool, float and str
                are refused).
            InvalidArgumentError: a malformed key, or a fingerprint outside [0, 2^64).
            LimitExceededError: 2^32 - 1 rows would be needed.

        Cost: O(T log L) for T tables and memtable bound L, plus amortized freezing, merging and
        compaction.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add("a", 0b1011)
            True
            >>> index.add("a", 0b1000)  # replaced
            False
            >>> index.get("a")
            8
        """
        self._before_call()
        return add_one(self._rows, self._runs, key, fingerprint)

    def add_many(
        self, keys: Iterable[str], fingerprints: Iterable[int] | _U64
    ) -> NDArray[np.bool_]:
        """Store many (key, fingerprint) pairs: :meth:`add` for each, but validated as a whole first
        and inserted with numpy. A large batch becomes one sorted run per table, built in threads
        (``Tuning.parallel_min``, ``Tuning.build_threads``), given a numpy array while the keys are
        checked and hashed. Nothing is stored when any of the errors below is raised.

        Args:
            keys: an iterable of n str.
            fingerprints: an iterable of n ints in [0, 2^64), or a (n,) array of an unsigned integer
                dtype (uint64 preferred) or a signed one without negative values.

        Returns:
            (n,) bool: True where the key was not stored before the call. A key repeated in the call
            takes its last fingerprint (every occurrence of a new key is True).

        Raises:
            TypeError: a key is not a str, a fingerprint not an int (or a bool/float array).
            InvalidArgumentError: a malformed key or fingerprint (the message names its position; a
                negative value in a signed array is refused, never wrapped), or
                ``len(keys) != len(fingerprints)``.
            LimitExceededError: 2^32 - 1 rows would be needed.

        Cost: O(n log n) for the keys' repeats, O(n) per table (radix sort), amortized merging.

        Examples:
            >>> import numpy as np
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add_many(["a", "b", "a"], np.array([1, 2, 3], dtype=np.uint64)).tolist()
            [True, True, True]
            >>> index.get("a")
            3
        """
        self._before_call()
        added = add_batch(self._rows, self._runs, keys, fingerprints)
        if 0 < self._tuning.release_heap_rows <= added.size:
            release_free_heap()  # the buffers the batch freed, back to the OS
        return added

    def remove(self, key: str) -> None:
        """Remove ``key``. O(1) (a tombstone) plus amortized compaction.

        Raises:
            NotFoundError: (a KeyError) ``key`` is not stored; nothing changes.
            TypeError, InvalidArgumentError: a malformed key.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add("a", 1)
            True
            >>> index.remove("a")
            >>> "a" in index
            False
        """
        self._before_call()
        key = validate_key(key)
        with self._lock:
            if not discard_locked(self._rows, key.encode("utf-8")):
                raise NotFoundError(f"key {short_repr(key)} is not stored", key=key)
        self._runs.merge_pending()  # after a compaction

    def discard(self, key: str) -> bool:
        """Remove ``key`` if stored; returns whether it was. O(1) plus amortized compaction.

        Raises:
            TypeError, InvalidArgumentError: a malformed key.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.discard("a")
            False
        """
        self._before_call()
        key = validate_key(key)
        with self._lock:
            found = discard_locked(self._rows, key.encode("utf-8"))
        self._runs.merge_pending()  # after a compaction
        return found

    def merge_all_runs(self, idle: float = 0.0, min_share: float | None = None) -> bool:
        """Merge a table's frozen runs and memtable into one sorted run when at least ``min_share``
        of its entries lie outside its largest run, so that a query probes one run there (the
        single sorted table per permutation of Manku et al. 2007, section 3). One table at a time,
        merged without the lock (reads see the unmerged runs meanwhile, writes go on) and swapped in
        under it. Cost: a radix sort of a table's rows, O(n) per table.

        Args:
            idle: merge only while nothing was added for at least this many seconds (a server calls
                this periodically with a small idle time, so that it merges after a load, not during
                one); checked before each table.
            min_share: 0 to 1; 0 merges every table that has more than one run or a memtable; None:
                the index's ``tuning.merge_all_min_share``.

        Returns:
            True when a table was merged (or its memtable frozen); False when none qualified, the
            index was not idle long enough, another merge was running, or a compaction renumbered
            the rows meanwhile (that table's merge is dropped).

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add("a", 1)
            True
            >>> index.merge_all_runs(min_share=0)
            True
            >>> index.table_runs()[0]
            ((1,), 0)
        """
        return self._runs.merge_all(idle, min_share)

    # -- queries --------------------------------------------------------------------------------

    def query(
        self, fingerprint: int, k: int | None = None, limit: int | None = None
    ) -> list[Match]:
        """Every stored key whose fingerprint is within Hamming distance ``k`` bits (inclusive) of
        ``fingerprint``, each once, sorted by (distance, key): Manku et al. 2007, section 3 -- the
        searched tables' prefix ranges read, each candidate verified exactly, in a compiled kernel.

        Args:
            fingerprint: an int in [0, 2^64).
            k: None for the index's k, else 0 <= k <= index.k.
            limit: None or 0 for all matches, else at most this many (the first after sorting).

        Returns:
            A list of :class:`Match` (key, fingerprint, distance).

        Raises:
            TypeError: a non-int fingerprint, k or limit.
            InvalidArgumentError: fingerprint outside [0, 2^64), k < 0 or above the index's k,
                limit < 0.

        Cost: O(tables * runs + log L + candidates), under the lock.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add_many(["a", "b", "c"], [0b1011, 0b1000, 0xFFFF]).tolist()
            [True, True, True]
            >>> [m.key for m in index.query(0b1011)]
            ['a', 'b']
            >>> index.query(0b1011, k=1)
            [Match(key='a', fingerprint=11, distance=0)]
            >>> index.query(0b1011, limit=1)[0].key
            'a'
        """
        self._before_call()
        if type(fingerprint) is int and k is None and limit is None and 0 <= fingerprint < _TOP:
            with self._lock:  # the common call: nothing else to check
                return self._query_one(fingerprint, self._k)
        value = validate_fingerprint(fingerprint)
        kk = query_k(k, self._k, self._design)
        lim = _resolve_limit(limit)
        with self._lock:
            matches = self._query_one(value, kk)
        return matches[:lim] if lim else matches

    @overload
    def query_many(
        self,
        fingerprints: Iterable[int] | _U64,
        k: int | None = ...,
        limit: int | None = ...,
        *,
        threads: int | None = ...,
        columns: Literal[False] = ...,
    ) -> list[list[Match]]: ...

    @overload
    def query_many(
        self,
        fingerprints: Iterable[int] | _U64,
        k: int | None = ...,
        limit: int | None = ...,
        *,
        threads: int | None = ...,
        columns: Literal[True],
    ) -> QueryColumns: ...

    def query_many(
        self,
        fingerprints: Iterable[int] | _U64,
        k: int | None = None,
        limit: int | None = None,
        *,
        threads: int | None = None,
        columns: bool = False,
    ) -> list[list[Match]] | QueryColumns:
        """:meth:`query` for each of n fingerprints: one list of matches per fingerprint, in order,
        each sorted by (distance, key); with ``columns=True`` the same matches as one
        :class:`~permindex.index.search.batch_queries.QueryColumns` -- ``offsets`` (n + 1,)
        int64 (the matches of query i are rows ``offsets[i]:offsets[i + 1]``), ``keys`` (m str),
        ``fingerprints`` (m,) uint64, ``distances`` (m,) uint8 -- with no Python object per match
        but its key.

        The lists and :class:`Match` objects of a batch are not tracked by Python's cycle
        collector (they hold only str and int; a large batch then brings on no full collection
        of the process's objects). They are ordinary lists otherwise; only a reference cycle you
        build through one (a list appended to itself, say) is freed once you break it, not by
        the collector.

        Args:
            fingerprints: an iterable of n ints, or a (n,) uint64 array (signed arrays without
                negative values are accepted).
            k: as :meth:`query`.
            limit: as :meth:`query`.
            threads: None or 1 for the calling thread only; up to 256 threads, each on a slice.
            columns: False for lists of :class:`Match`, True for columns.

        Raises:
            TypeError: a bad fingerprint, k or limit type, ``threads`` not an int, ``columns`` not a
                bool.
            InvalidArgumentError: as :meth:`query` (the message names the position of a bad
                fingerprint), ``threads`` outside [1, 256]. Nothing is queried then.

        The lookup runs in compiled kernels on a consistent read view of the index, without its
        lock: lookups from several threads run in parallel, and a lookup racing a write sees the
        index as it was before or after each write, never a mix. Cost: O(n * (tables * runs +
        candidates)) in the kernels, O(m log m) to order m matches.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add_many(["a", "b", "c"], [0b1011, 0b1000, 0xFFFF]).tolist()
            [True, True, True]
            >>> [[m.key for m in ms] for ms in index.query_many([0b1011, 0xFFFE, 0xF0F00000])]
            [['a', 'b'], ['c'], []]
            >>> cols = index.query_many([0b1011, 0xFFFE], columns=True)
            >>> cols.offsets.tolist(), cols.keys, cols.distances.tolist()
            ([0, 2, 3], ['a', 'b', 'c'], [0, 2, 1])
        """
        self._before_call()
        queries = as_fingerprint_array(fingerprints)
        kk = query_k(k, self._k, self._design)
        lim = _resolve_limit(limit)
        options = LookupOptions.checked(kk, lim, threads, columns)
        return lookup_many(self._lock, self._lookups, queries, options, self._query_one)

    def max_candidates(self, k: int | None = None) -> int:
        """An upper bound of the candidates one query within ``k`` (None: the index's) meets: the
        largest prefix bucket of each searched run plus the memtables (removed entries count until
        a compaction). O(tables * runs) after a change, else O(1).

        Raises:
            TypeError, InvalidArgumentError: a bad ``k``, as :meth:`query`.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add_many(["a", "b"], [1, 2]).tolist()
            [True, True]
            >>> index.max_candidates() >= 2
            True
        """
        self._before_call()
        kk = query_k(k, self._k, self._design)
        with self._lock:
            return self._lookups.most_candidates(kk)

    def query_columns_within(
        self,
        fingerprints: Iterable[int] | _U64,
        k: int | None = None,
        limit: int | None = None,
        *,
        max_candidates: int,
        max_matches: int,
    ) -> QueryColumns | None:
        """``query_many(fingerprints, k, limit, columns=True)`` when its cost is bounded -- at most
        ``max_candidates`` candidates in all (``n * max_candidates(k)``), at most ``max_matches``
        matches, and nothing written since the last batch lookup (its read view reused) -- else
        None, having done at most one kernel pass (a server answers a stream's small messages
        inline this way). Errors as :meth:`query_many`; TypeError / InvalidArgumentError for a
        bound that is not an int >= 0.

        Examples:
            >>> from permindex import Index
            >>> index = Index(k=3)
            >>> _ = index.add_many(["a", "b"], [0b1011, 0xFFFF])
            >>> queries = [0b1000] * 9  # more than a small batch
            >>> _ = index.query_many(queries)  # the read view the next call reuses
            >>> columns = index.query_columns_within(queries, max_candidates=1_000, max_matches=100)
            >>> columns.offsets.tolist()[:3], columns.keys[:2], columns.distances.tolist()[:2]
            ([0, 1, 2], ['a', 'a'], [2, 2])
            >>> index.query_columns_within(queries, max_candidates=0, max_matches=100) is None
            True
        """
        queries = as_fingerprint_array(fingerprints)
        kk, lim = query_k(k, self._k, self._design), _resolve_limit(limit)
        options = LookupOptions.checked(kk, lim, None, True)
        bounds = (max_candidates, max_matches)
        return lookup_within(self._lock, self._lookups, queries, options, *bounds)

    def check_and_add(self, key: str, fingerprint: int, k: int | None = None) -> CheckAndAddResult:
        """Atomically: query ``fingerprint`` within ``k`` and, only if no other key is within k,
        store it under ``key`` (replacing the key's fingerprint if stored; the key's own entry never
        blocks). Query and add happen under one acquisition of the lock, so of two threads adding
        near-duplicates at once exactly one succeeds: the check-and-add loop of a crawler
        (Manku et al. 2007, section 1).

        Returns:
            :class:`CheckAndAddResult` (added, matches, replaced): added is True when no other key
            was within k (the key now holds ``fingerprint``); matches are the other keys within k,
            sorted by (distance, key), empty when added; replaced is True when added and the key
            was stored before the call (with any fingerprint).

        Raises:
            TypeError, InvalidArgumentError, LimitExceededError: as :meth:`add` and :meth:`query`;
                nothing changes then.

        Cost: :meth:`query` plus :meth:`add`.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.check_and_add("a", 0xFFFF)
            CheckAndAddResult(added=True, matches=[], replaced=False)
            >>> result = index.check_and_add("b", 0xFFFE)
            >>> result.added, [m.key for m in result.matches]
            (False, ['a'])
        """
        self._before_call()
        return check_and_add(self, key, fingerprint, k)

    def pairs(self, k: int | None = None) -> list[tuple[str, str, int]]:
        """:meth:`iter_pairs` as a list: every pair within ``k`` of the index as it is now.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add_many(["a", "b", "c"], [0b1011, 0b1000, 0xFFFF]).tolist()
            [True, True, True]
            >>> index.pairs()
            [('a', 'b', 2)]
        """
        return list(self.iter_pairs(k))

    def iter_pairs(
        self, k: int | None = None, *, should_stop: Callable[[], bool] | None = None
    ) -> Iterator[tuple[str, str, int]]:
        """Every unordered pair of keys within ``k`` bits (default: the index's; keys sharing a
        fingerprint: distance 0) once, as (key_a, key_b, distance) with key_a < key_b by code point,
        sorted: of the index at the call, joined now under the lock (the self-join of Manku et al.
        2007, section 3, on the distinct fingerprints, ``join.pair_stream.self_join_pairs``), then
        listed lazily as read, without the lock. Cost: O(n) numpy work plus the join's (about
        sum over tables of the squared prefix-group sizes), O(1) per pair read.

        Raises:
            InvalidArgumentError: k < 0 or above the index's k.
            CallCancelledError: ``should_stop`` returned True (checked between chunks).

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add_many(["b", "a"], [7, 7]).tolist()
            [True, True]
            >>> list(index.iter_pairs(0))
            [('a', 'b', 0)]
        """
        self._before_call()
        with self._lock:
            return self_join_pairs(
                self._rows, self._design, query_k(k, self._k, self._design), should_stop
            )

    # -- export, memory, invariants --------------------------------------------------------------

    def export(self) -> tuple[list[str], _U64]:
        """A consistent copy of the contents, taken under the lock: (keys, fingerprints), with
        fingerprints a new (n,) uint64 array, element i stored under keys[i], in row order (the
        order the current fingerprints were stored in). O(n).

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add_many(["a", "b"], [1, 2]).tolist()
            [True, True]
            >>> keys, fps = index.export()
            >>> keys, fps.tolist()
            (['a', 'b'], [1, 2])
        """
        self._before_call()
        with self._lock:
            rows = self._rows
            live = rows.live_mask()
            return self._store.live_keys(live), rows.fps[: rows.n][live]

    def export_compact(self) -> tuple[NDArray[np.int64], NDArray[np.uint8], _U64]:
        r""":meth:`export` with the keys in compact form, for writers that need no str (a snapshot):
        ((n,) int64 UTF-8 byte lengths, (m,) uint8 bytes of every key each followed by a NUL,
        (n,) uint64 fingerprints), in the order of :meth:`export`. No Python object per key:
        O(n + key bytes) numpy work.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> index.add("ab", 5)
            True
            >>> lengths, blob, fps = index.export_compact()
            >>> lengths.tolist(), blob.tobytes(), fps.tolist()
            ([2], b'ab\x00', [5])
        """
        self._before_call()
        with self._lock:
            live_rows = self._rows.live_rows()
            lengths, blob = self._store.export(live_rows)
            return lengths, blob, self._rows.fps[live_rows]

    def export_slices(
        self, rows_per_slice: int = 1 << 14
    ) -> list[tuple[NDArray[np.int64], NDArray[np.uint8], _U64]]:
        """The contents in the compact form of :meth:`export_compact`, as a list of slices
        ``(lengths, key bytes, fingerprints)``, taking the lock once per slice of
        ``rows_per_slice`` rows: a large snapshot holds up queries and writes for at most one
        slice's copy, O(rows_per_slice + its key bytes).

        The result is *fuzzy*, not a point-in-time copy: only the rows stored when the call
        starts are read (a key first stored later is left out), and a key changed or removed
        meanwhile appears with its value at some moment after the start, or not at all. Each key
        appears at most once (a key has one live row, and rows only die). Combined with a log of
        every change made after the start, replayed over it (as the server's snapshots are, see
        :mod:`permindex.storage.store`), it gives exactly the state at the end of the log. A
        compaction (which renumbers the rows) during the call starts it over; after three, the rest
        is read under one acquisition of the lock. Between slices the thread yields
        (``time.sleep(0)``), so that a query or write waiting for the lock gets it before the next
        slice. Cost: O(n + key bytes) numpy work in total.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> _ = index.add_many(["a", "b"], [0b1011, 0xFFFF])
            >>> [(lengths.tolist(), keys.tobytes(), fps.tolist())
            ...  for lengths, keys, fps in index.export_slices(rows_per_slice=1)]
            [([1], b'a\\x00', [11]), ([1], b'b\\x00', [65535])]
        """
        self._before_call()
        parts = export_slices(self._rows, self._store, max(1, int(rows_per_slice)))
        if parts is not None:
            return [part[:3] for part in parts]
        with self._lock:
            return [self.export_compact()]

    def memory_bytes(self) -> int:
        """Bytes held by the arrays (by capacity): fingerprints and liveness, every table's runs
        (plus an estimate for the memtable entries, Python ints), and the key store.
        O(tables + runs).

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> _ = index.add_many(["a", "b"], [0b1011, 0xFFFF])
            >>> index.memory_bytes() > index.table_bytes() > 0
            True
        """
        self._before_call()
        with self._lock:
            return self.table_bytes() + self._store.nbytes()

    def memory_breakdown(self) -> MemoryBreakdown:
        """:meth:`memory_bytes` by part (:class:`~permindex.index.memory.MemoryBreakdown`:
        fingerprints, liveness, times, tables, key bytes, key offsets, key hashes, the key map);
        its ``total`` is :meth:`memory_bytes`. O(tables + runs).

        >>> from permindex import Index
        >>> index = Index()
        >>> _ = index.add("page-1", 0xFFFF)
        >>> parts = index.memory_breakdown()
        >>> parts.total == index.memory_bytes(), parts.key_bytes >= len("page-1") + 1
        (True, True)
        """
        with self._lock:
            return breakdown(self._rows, self._runs)

    def memory_growth(self, count: int, key_bytes: int) -> int:
        """An estimate of how much :meth:`memory_bytes` grows when ``count`` keys of
        ``key_bytes`` UTF-8 bytes in all are added in one batch, each counted as a new row and
        a new key (:func:`~permindex.index.memory.growth_bytes`: the arrays that would not fit
        counted at the capacity they would grow to, the tables' new entries). O(tables).

        Raises:
            TypeError, InvalidArgumentError: ``count`` or ``key_bytes`` is not an int >= 0.

        >>> from permindex import Index
        >>> index = Index()
        >>> index.memory_growth(0, 0), index.memory_growth(1, 6) > 0
        (0, True)
        """
        count = check_int(count, "count")
        key_bytes = check_int(key_bytes, "key_bytes")
        if count < 0 or key_bytes < 0:
            raise InvalidArgumentError(
                f"count and key_bytes must be >= 0, got {count} and {key_bytes}"
            )
        with self._lock:
            return growth_bytes(self._rows, self._runs, count, key_bytes)

    def compact(self, min_share: float = 0.0) -> bool:
        """Drop the dead rows (of removed, replaced or expired keys) now, renumbering the live
        ones, when they are more than ``min_share`` (0 to 1) of the rows; the arrays are
        rebuilt with a quarter of room, so :meth:`memory_bytes` falls. An index compacts by
        itself once its dead rows outnumber the live ones and ``compaction_min``; this is for
        an owner that needs the memory back sooner (a server at its memory limit). O(n) under
        the lock.

        Returns:
            Whether it compacted (False: no dead row, or too few).

        >>> from permindex import Index
        >>> index = Index()
        >>> _ = index.add_many(["a", "b"], [1, 2])
        >>> index.remove("a")
        >>> index.compact(), index.compact(), len(index)
        (True, False, 1)
        """
        if not 0 <= min_share <= 1:
            raise InvalidArgumentError(f"min_share must be in [0, 1], got {min_share!r}")
        self._before_call()
        with self._lock:
            rows = self._rows
            dead = rows.n - len(rows.keys)
            if dead <= 0 or dead <= min_share * rows.n:
                return False
            rows.compact()
        self._runs.merge_pending()
        if self._tuning.release_heap_rows:
            release_free_heap()  # the arrays the compaction replaced, back to the OS
        return True

    def table_bytes(self) -> int:
        """:meth:`memory_bytes` without the keys: fingerprint and liveness arrays (by capacity) and
        the tables.

        Examples:
            >>> from permindex import Index
            >>> index = Index()
            >>> _ = index.add("a", 0b1011)
            >>> index.table_bytes() > 0
            True
        """
        self._before_call()
        with self._lock:
            return self._rows.nbytes() + self._runs.nbytes()

    def _check(self) -> None:
        """Verify every invariant in O(n) (numpy) and raise
        :class:`~permindex.index.tables.table.TableCheckError` (an AssertionError) at the first
        broken
        one: the row store's (:meth:`permindex.index.rows.RowStore._check`), then the tables'
        (:meth:`permindex.index.table_set.TableSet._check`). For tests; takes the lock."""
        with self._lock:
            self._rows._check()
            self._runs._check()


def _add_section(index: Index, sizes: NDArray[np.integer], raw: Section, values: _U64) -> None:
    """:meth:`Index.add_compact` of arguments :func:`~permindex.index.keys.batches.compact_inputs`
    has checked."""
    keys = add_section(index._rows, index._runs, sizes, raw, values)
    if keys is not None:  # maybe a repeated key: the exact path
        index.add_many(keys, values)


def load_codes(
    index: Index,
    words: Dictionary,
    lens: NDArray[np.uint8],
    spans: NDArray[np.uint8],
    bases: NDArray[np.int64],
    values: _U64,
) -> None:
    """Fill the empty ``index`` with keys as the key store holds them (a version-4 snapshot's
    :class:`~permindex.storage.snapshot.KeyCodes`, checked) and their (n,) uint64 ``values``:
    no key decoded, coded or hashed with XXH3 again (:func:`~permindex.index.writes.add_coded`).

    Raises:
        ValueError: the index is not empty, or a key is stored twice (nothing is kept).
    """
    add_coded(index._rows, index._runs, words, lens, spans, bases, values)


def stored_count(index: Index) -> int:
    """The keys ``index`` stores, counted without its hook: ``len(index)``, but for an
    :class:`~permindex.index.expiry.ExpiringIndex` its entries expired and not yet dropped
    count too (a snapshot's count is checked against this as it was loaded). O(1)."""
    with index._lock:
        return len(index._store)


def check_and_add(
    index: Index, key: str, fingerprint: int, k: int | None, when: int = 0
) -> CheckAndAddResult:
    """:meth:`Index.check_and_add` (its contract and errors), storing the key at time ``when``
    (kept by an index with expiry, :mod:`permindex.index.expiry`)."""
    key = validate_key(key)
    value = validate_fingerprint(fingerprint)
    kk = query_k(k, index._k, index._design)
    data = key.encode("utf-8")
    with index._lock:
        matches = [m for m in index._query_one(value, kk) if m.key != key]
        if matches:
            return CheckAndAddResult(False, matches, False)
        replaced = index._store.find(data) >= 0
        add_locked(index._rows, index._runs, data, value, when)
    after_write(index._rows, index._runs)
    return CheckAndAddResult(True, [], replaced)
