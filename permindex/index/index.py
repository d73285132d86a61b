"""The near-duplicate index: (key, fingerprint) pairs in the table-permutation index of Manku,
Jain & Das Sarma 2007, "Detecting Near-Duplicates for Web Crawling", section 3.

Layout (see :mod:`permindex.index.table` for one table):

* rows: every stored fingerprint has a row number; ``_fps`` ((capacity,) uint64) holds the
  fingerprint of each row, ``_live`` ((capacity,) bool) whether the row is current (None, and
  no memory, while every row is: until the first removal or replacement after a compaction), and
  ``_store`` (a :class:`~permindex.index.keystore.KeyStore`: UTF-8 bytes in one buffer and a numpy
  hash table, no Python object per key) each row's key and the current row of each key.
  Rows are appended and never change; replacing a key's fingerprint kills its row and appends a
  new one. When dead rows outnumber live ones (and a minimum), a compaction renumbers the rows and
  drops the dead ones from every table;
* C(blocks, leading) :class:`~permindex.index.table.Table` objects, one per permutation, holding row
  numbers by prefix.

A query computes the prefix of the fingerprint in each table, reads the candidates whose prefix
matches, and verifies each one exactly (popcount of the XOR). A fingerprint within k of the query
shares the prefix of at least one table (pigeonhole, k <= blocks - leading). A single query keeps
each candidate row once (a dict of its few hits); the batch forms (:meth:`Index.query_many`,
:meth:`Index.pairs`) run with numpy over the whole batch and report a match only from the first
table whose prefix it shares (``(a ^ b) & leading_mask == 0``), so no set is needed.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from operator import itemgetter
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError, LimitExceededError, NotFoundError
from permindex.index import join
from permindex.index.hamming import as_fingerprint_array, validate_fingerprint
from permindex.index.keys import MAX_KEY_BYTES, check_int, short_repr, validate_key
from permindex.index.keystore import (
    EncodedKeys,
    KeyStore,
    ahead_capacity,
    batch_subset,
    encode_keys,
    first_utf8_error,
    hash_key,
    hash_many,
    nearly_full,
    next_capacity,
)
from permindex.index.permutation import (
    DEFAULT_DESIGN,
    Design,
    argsort_prefixes,
    choose_design,
)
from permindex.index.table import (
    DEFAULT_MEMTABLE_LIMIT,
    MAX_ROWS,
    Run,
    Table,
    TableCheckError,
    filtered_ranges,
    gather_ranges,
)

__all__ = [
    "DEFAULT_COMPACTION_MIN",
    "MAX_KEY_BYTES",
    "Index",
    "Match",
    "validate_key",
]

#: Dead rows are compacted away once there are more of them than live rows and than this.
DEFAULT_COMPACTION_MIN = 1 << 16

_QUERY_CHUNK = 16384  # queries per numpy pass of query_many
_CANDIDATE_BUDGET = 1 << 22  # candidates per numpy pass (a chunk is split above it)
_SMALL_BATCH = 8  # query_many of at most this many fingerprints uses the per-query path
_GROW_AHEAD_ROWS = 1 << 16  # from this capacity on, arrays grow ahead in a background thread
_MATCH_ORDER = itemgetter(2, 0)  # (distance, key)
_AUTO_SIZE = 1_000_000  # fingerprints assumed by design="auto" without expected_size
_HASH_CHUNK = 1 << 16  # keys of a compact key section hashed per step
_PARALLEL_MIN = 1 << 17  # from this batch size on, the tables' runs are built in other threads
#: Threads that build the tables' runs of a large batch (one per CPU this process may use, at
#: most 4).
_BUILD_THREADS = min(
    4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
)
#: merge_all_runs merges a table once at least this share of its entries lies outside its
#: largest run.
MERGE_ALL_MIN_SHARE = 1 / 8
_UTF8_SLICE = 1 << 24  # bytes of a compact key section checked as UTF-8 per step

_TOP = 1 << 64  # fingerprints are below this
_U64 = NDArray[np.uint64]
_I64 = NDArray[np.int64]


class Match(NamedTuple):
    """One result of a query: a stored key, its fingerprint (int in [0, 2^64)) and its Hamming
    distance to the query (int, bits)."""

    key: str
    fingerprint: int
    distance: int


#: ``Match`` from a (key, fingerprint, distance) tuple without Python-level calls (what
#: ``Match._make`` does, minus its frame: about 0.2 instead of 0.4 us per match here).
_new_match = partial(tuple.__new__, Match)


def _validate_keys(keys: object) -> tuple[list[str], EncodedKeys]:
    """The keys as a list and encoded for the key store, every key validated (as
    :func:`validate_key`; the error names the first bad position)."""
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise TypeError(f"keys must be an iterable of str, not {type(keys).__name__}")
    out = keys if type(keys) is list else list(keys)
    # Fast path, C loops only: one join and encode; sizes checked on the encoded lengths.
    try:
        batch: EncodedKeys | None = encode_keys(out)
    except (TypeError, UnicodeEncodeError):
        batch = None
    if batch is not None:
        lengths = batch.lengths
        if not out or (int(lengths.min()) >= 1 and int(lengths.max()) <= MAX_KEY_BYTES):
            return out, batch
    out = [validate_key(key, name=f"keys[{i}]") for i, key in enumerate(out)]
    return out, encode_keys(out)  # only reached if the fast path was too strict


def _byte_view(raw: bytes | bytearray | NDArray[np.uint8]) -> memoryview:
    """A memoryview of the bytes of ``raw`` (a 1-dimensional contiguous uint8 array or a bytes
    object), no copy."""
    return raw.data if isinstance(raw, np.ndarray) else memoryview(raw)


def _hash_section(raw: bytes | bytearray | NDArray[np.uint8], ends: _I64) -> _U64:
    """XXH3-64 (:func:`~permindex.index.keystore.hash_key`) of each key of a compact key section
    (``raw``: every key's UTF-8 bytes then a NUL; ``ends``: (n,) int64, one past each key's
    NUL), as (n,) uint64. A slice of :data:`_HASH_CHUNK` keys at a time is split at its NULs
    (one C call making the chunk's bytes objects, which stay in the CPU cache while they are
    hashed); a chunk whose keys hold NUL themselves is cut by the lengths instead."""
    n = int(ends.size)
    out = np.empty(n, dtype=np.uint64)
    view = _byte_view(raw)
    bounds = [0, *ends[_HASH_CHUNK - 1 :: _HASH_CHUNK].tolist()]
    if bounds[-1] != int(ends[-1]):
        bounds.append(int(ends[-1]))
    for chunk, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        first = chunk * _HASH_CHUNK
        count = min(_HASH_CHUNK, n - first)
        parts: list[bytes] | list[memoryview] = bytes(view[lo : hi - 1]).split(b"\x00")
        if len(parts) != count:  # a key holds NUL
            cuts = ends[first : first + count].tolist()
            parts = [view[a : b - 1] for a, b in zip([lo, *cuts[:-1]], cuts, strict=True)]
        out[first : first + count] = hash_many(parts, count)
    return out


def _check_utf8(raw: bytes | bytearray | NDArray[np.uint8], ends: _I64) -> None:
    """InvalidArgumentError unless the key section ``raw`` (keys ending at ``ends``, (n,) int64)
    is valid UTF-8, decoded a slice of about 16 MiB at a time (cut after a NUL, a character
    boundary) so that no str of the whole section is made; the message gives the byte offset."""
    error = first_utf8_error(_byte_view(raw), ends, _UTF8_SLICE)
    if error is not None:
        raise InvalidArgumentError(f"a key is not valid UTF-8 ({error[1]} at byte {error[0]})")


class CheckAndAddResult(NamedTuple):
    """The outcome of :meth:`Index.check_and_add`."""

    #: True when no other key was within k: the key now holds the fingerprint.
    added: bool
    #: The other keys within k at the time of the check, sorted by (distance, key).
    matches: list[Match]
    #: True when added and the key was stored before the call.
    replaced: bool


class Index:
    """An in-memory near-duplicate index of (key, 64-bit fingerprint) pairs: which keys are
    within Hamming distance k bits of a fingerprint, exactly (no false negatives, no false
    positives), by the table-permutation method of Manku et al. 2007, section 3.

    Args:
        k: the largest Hamming distance (bits) the index answers, 0 <= k <= blocks - leading.
        design: a :class:`~permindex.index.permutation.Design` or ``(blocks, leading)`` (any blocks
            and leading, C(blocks, leading) tables); the default (4, 1) has 4 tables of 16-bit
            prefixes and answers k <= 3; (5, 2) has 10 tables of 25- or 26-bit prefixes and
            (6, 3) 20 of 31- to 33-bit prefixes. ``"auto"``: chosen by
            :func:`~permindex.index.permutation.choose_design` from ``expected_size`` (default 10^6
            fingerprints), k and ``memory_budget`` (bytes for the tables, keys excluded; None:
            no limit), the fastest modelled design that fits.
        expected_size, memory_budget: only for ``design="auto"``.
        memtable_limit: entries a table keeps in its sorted memtable before freezing them into a
            numpy run (a tuning knob; small values exercise freezing and merging in tests).
        compaction_min: dead rows (removed or replaced fingerprints) are dropped by a
            compaction once they outnumber the live rows and this minimum.

    Raises:
        TypeError: ``k``, ``memtable_limit`` or ``compaction_min`` is not an int, ``design`` is
            neither a Design nor a pair.
        InvalidArgumentError: k < 0, k above the design's guarantee (the message names it, e.g.
            "design (4 blocks, 1 leading) guarantees k <= 3"), an invalid design,
            ``memtable_limit`` < 1 or ``compaction_min`` < 0.

    Keys are non-empty str of at most 1,024 UTF-8 bytes; fingerprints ints in [0, 2^64) or
    uint64 arrays. Every argument is validated before anything changes; a call that raises
    leaves the index as it was.

    Thread safety: every public method (including ``len``, ``in`` and the start of iteration)
    reads and changes the index under one re-entrant lock (``threading.RLock``), so calls from
    several threads are serialized: each sees the index as a previous call left it and leaves it
    consistent. :meth:`check_and_add` queries and adds under one acquisition of the lock.
    Iterating yields from a copy of the keys taken under the lock. Readers do not run in
    parallel with each other. Two kinds of work a write does outside the lock, because they
    change nothing a reader sees: before it, validating and encoding keys and sorting a large
    batch's table runs; after it, merging runs (a merge reads immutable runs and swaps its
    result in under the lock; see ``_merge_runs``), so lookups go on while another thread
    ingests.
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
    ) -> None:
        if isinstance(design, str):
            if design != "auto":
                raise InvalidArgumentError(
                    f'design must be a Design, a (blocks, leading) pair or "auto", not {design!r}',
                    value=design,
                )
            size = _AUTO_SIZE if expected_size is None else check_int(expected_size, "size")
            budget = None if memory_budget is None else check_int(memory_budget, "budget")
            design = choose_design(max(size, 1), check_int(k, "k"), budget)
        self._design = Design.of(design)
        k = check_int(k, "k")
        if k < 0:
            raise InvalidArgumentError(f"k must be >= 0, got {k}", value=k)
        if k > self._design.max_k:
            raise InvalidArgumentError(
                f"{self._design} guarantees k <= {self._design.max_k}; got k={k} (a design of "
                f"b blocks with t leading finds k <= b - t: e.g. design ({k + 2}, 2), or "
                f"`permindex collections create NAME --k {k} --blocks {k + 2} --leading 2` "
                f"on a server)",
                value=k,
            )
        memtable_limit = check_int(memtable_limit, "memtable_limit")
        if memtable_limit < 1:
            raise InvalidArgumentError(
                f"memtable_limit must be >= 1, got {memtable_limit}", value=memtable_limit
            )
        compaction_min = check_int(compaction_min, "compaction_min")
        if compaction_min < 0:
            raise InvalidArgumentError(
                f"compaction_min must be >= 0, got {compaction_min}", value=compaction_min
            )
        self._k = k
        self._compaction_min = compaction_min
        self._lock = threading.RLock()
        self._permutations = self._design.permutations
        self._tables = [Table(p, memtable_limit) for p in self._permutations]
        for table in self._tables:
            table.defer_merges = True  # merged by _merge_runs, outside the lock
        self._merging = False
        # Leading-block masks: a pair shares table t's prefix iff (a ^ b) & mask[t] == 0.
        self._np_masks = [np.uint64(p.leading_mask) for p in self._permutations]
        self._fps: _U64 = np.zeros(0, dtype=np.uint64)
        self._live: NDArray[np.bool_] | None = None
        self._views()
        # The tables a query within each k <= self._k searches (all of them for the design's
        # largest k; fewer, and still exact, for smaller k: Design.tables_for).
        self._searched = {kk: self._design.tables_for(kk) for kk in range(k + 1)}
        self._n_rows = 0
        self._store = KeyStore()
        self._compactions = 0  # row numbers change at each compaction (see export_slices)
        self._last_write = time.monotonic()  # of the last add (merge_all_runs' idle test)
        self._grower: threading.Thread | None = None  # a growth ahead in progress

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
    ) -> Index:
        """A new index holding ``keys`` with (n,) ``fingerprints`` (bulk load: each table is
        built by one radix sort). Same arguments and errors as :class:`Index` and
        :meth:`add_many`; ``design="auto"`` chooses for n fingerprints."""
        if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
            raise TypeError(f"keys must be an iterable of str, not {type(keys).__name__}")
        key_list = keys if type(keys) is list else list(keys)
        index = cls(
            k,
            design,
            memtable_limit=memtable_limit,
            compaction_min=compaction_min,
            expected_size=len(key_list),
            memory_budget=memory_budget,
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
    ) -> Index:
        """A new index from keys in the compact form of :meth:`export_compact` -- (n,) UTF-8
        byte ``lengths`` and ``blob``, every key's bytes followed by a NUL -- and (n,)
        ``fingerprints``: a loader that never makes a Python str per key (a snapshot's key
        section has this layout). The key bytes are copied as they are; each key is hashed
        once. Validated as :meth:`add_many` (lengths 1 to 1,024, UTF-8, the NULs where the
        lengths say); a repeated key keeps its last fingerprint.

        Raises:
            InvalidArgumentError: lengths and blob disagree, a key is empty, too long or not
                UTF-8, or the counts differ; TypeError as :meth:`add_many`.
        """
        sizes = np.asarray(lengths if isinstance(lengths, np.ndarray) else list(lengths))
        if sizes.ndim != 1 or (sizes.size and sizes.dtype.kind not in "iu"):
            raise TypeError("lengths must be a 1-dimensional array of integers")
        if isinstance(blob, np.ndarray):
            raw: bytes | bytearray | NDArray[np.uint8] = (
                blob
                if blob.dtype == np.uint8 and blob.ndim == 1 and blob.flags.c_contiguous
                else np.frombuffer(blob.tobytes(), dtype=np.uint8)
            )
        else:
            raw = blob if isinstance(blob, (bytes, bytearray)) else bytes(blob)
        values = as_fingerprint_array(fingerprints)
        n = int(sizes.size)
        if values.size != n:
            raise InvalidArgumentError(
                f"got {n} key lengths and {values.size} fingerprints; the lengths must match",
                value=(n, int(values.size)),
            )
        index = cls(
            k,
            design,
            memtable_limit=memtable_limit,
            compaction_min=compaction_min,
            expected_size=n,
            memory_budget=memory_budget,
        )
        index._add_compact(sizes, raw, values)
        return index

    def _add_compact(
        self, sizes: NDArray[np.integer], raw: bytes | bytearray | NDArray[np.uint8], values: _U64
    ) -> None:
        """Store the n keys of a compact key section (``sizes``: (n,) UTF-8 byte lengths;
        ``raw``: every key's bytes then a NUL) with (n,) uint64 ``values``, as
        :meth:`add_many` would (a repeated key keeps its last fingerprint), after validating
        the section (InvalidArgumentError). ``raw`` is only read: the store copies the bytes."""
        n = int(sizes.size)
        if n == 0:
            if len(raw):
                raise InvalidArgumentError("no key lengths but a non-empty key section")
            return
        sizes = sizes.astype(np.int64)
        if int(sizes.min()) < 1 or int(sizes.max()) > MAX_KEY_BYTES:
            raise InvalidArgumentError(
                f"key lengths must be 1 to {MAX_KEY_BYTES} UTF-8 bytes", value=None
            )
        ends = np.cumsum(sizes + 1)
        data = raw if isinstance(raw, np.ndarray) else np.frombuffer(raw, dtype=np.uint8)
        if int(ends[-1]) != data.size or not bool((data[ends - 1] == 0).all()):
            raise InvalidArgumentError("the key section does not match the key lengths")
        if int(data.max()) >= 0x80:  # not ASCII
            _check_utf8(raw, ends)
        # The tables' runs (numpy sorts, which release the GIL) are built in other threads
        # while this one hashes the keys (Python calls, which hold it).
        with self._building_runs(values) as runs:
            batch = EncodedKeys(data, ends, _hash_section(raw, ends))
            ordered = np.sort(batch.hashes)
            repeated = bool((ordered[1:] == ordered[:-1]).any())
            del ordered
            prepared = None if runs is None or repeated else runs()
        if repeated:  # maybe a repeated key: the exact path
            del prepared
            view = _byte_view(raw)
            pieces = zip((ends - sizes - 1).tolist(), sizes.tolist(), strict=True)
            keys = [str(view[a : a + m], "utf-8") for a, m in pieces]
            self.add_many(keys, values)
        else:
            self._store_batch(batch, values, prepared)

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

    def __len__(self) -> int:
        """Number of keys stored."""
        with self._lock:
            return len(self._store)

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is stored (False for anything that is not a str)."""
        if not isinstance(key, str):
            return False
        try:
            data = key.encode("utf-8")
        except UnicodeEncodeError:
            return False
        h = hash_key(data)
        with self._lock:
            return self._store.find(data, h) >= 0

    def contains_many(self, keys: Iterable[str]) -> NDArray[np.bool_]:
        """(n,) bool: whether each of ``keys`` is stored, as ``key in index`` for each, in one
        vectorized lookup. Raises TypeError / InvalidArgumentError for a malformed key (as
        :meth:`add_many`)."""
        _key_list, batch = _validate_keys(keys)
        with self._lock:
            return self._store.find_many(batch) >= 0

    def __iter__(self) -> Iterator[str]:
        """The keys, in the order they were first added (a copy taken under the lock)."""
        with self._lock:
            rows = self._live_rows()
            return iter(self._store.keys(self._store.iteration_order(rows)))

    def get(self, key: str) -> int | None:
        """The fingerprint stored under ``key`` (int), or None. Raises TypeError /
        InvalidArgumentError for a malformed key (see :func:`validate_key`)."""
        data = validate_key(key).encode("utf-8")
        h = hash_key(data)
        with self._lock:
            row = self._store.find(data, h)
            return None if row < 0 else int(self._fps[row])

    # -- writes ---------------------------------------------------------------------------------

    def add(self, key: str, fingerprint: int) -> bool:
        """Store ``fingerprint`` (int in [0, 2^64)) under ``key``; a stored key's fingerprint is
        replaced (its old entries become tombstones and are never returned).

        Returns True if the key was not stored before. O(T log L) for T tables and memtable
        bound L, plus amortized freezing, merging and compaction.

        Raises:
            TypeError: ``key`` is not a str, or ``fingerprint`` is not an int (bool, float and
                str are refused).
            InvalidArgumentError: a malformed key, or a fingerprint outside [0, 2^64).
            LimitExceededError: 2^32 rows would be needed.
        """
        data = validate_key(key).encode("utf-8")
        value = validate_fingerprint(fingerprint)
        h = hash_key(data)
        self._await_growth(1, len(data) + 1)
        with self._lock:
            added = self._add(data, h, value)
        self._after_write()
        return added

    def _add(self, data: bytes, h: int, value: int) -> bool:
        self._reserve(1)
        store = self._store
        old = store.find(data, h)
        if old >= 0:
            if int(self._fps[old]) == value:
                return False
            self._kill(np.array([old], dtype=np.int64))
            store.unlink(old)
        row = store.append(data, h, moved_from=old)
        assert row == self._n_rows
        self._fps[row] = value
        if self._live is not None:
            self._live[row] = True
        self._n_rows = row + 1
        for table in self._tables:
            table.add(row, value, self._fps, self._live)
        self._maybe_compact()
        return old < 0

    def add_many(
        self, keys: Iterable[str], fingerprints: Iterable[int] | _U64
    ) -> NDArray[np.bool_]:
        """Store many (key, fingerprint) pairs; as :meth:`add` for each, but validated as a whole
        first and inserted with numpy. A batch of at least 2^17 becomes one sorted run per
        table, built in up to 4 threads (given a numpy array, while the keys are checked and
        hashed).

        Args:
            keys: an iterable of n str.
            fingerprints: an iterable of n ints in [0, 2^64), or a (n,) numpy array of an
                unsigned integer dtype (uint64 preferred) or a signed one without negative
                values.

        Returns:
            (n,) bool: True where the key was not stored before the call. A key repeated in
            the call takes its last fingerprint (every occurrence of a new key is True).

        Raises:
            TypeError: a key is not a str, a fingerprint not an int (or a bool/float array).
            InvalidArgumentError: a malformed key or fingerprint (the message names its
                position; a negative value in a signed array is refused, never wrapped), or
                ``len(keys) != len(fingerprints)``.
            LimitExceededError: 2^32 rows would be needed.
            Nothing is stored when any of these is raised.
        """
        if isinstance(fingerprints, np.ndarray):
            # Checked first so that a large batch's tables are built (in other threads) while
            # this one checks and hashes the keys; a bad key is still reported as before.
            values = as_fingerprint_array(fingerprints)
            with self._building_runs(values) as runs:
                key_list, batch = _validate_keys(keys)
                key_list, batch, values, which = self._distinct_keys(key_list, batch, values)
                prepared = None if runs is None or which is not None else runs()
        else:
            key_list, batch = _validate_keys(keys)
            values = as_fingerprint_array(fingerprints)
            key_list, batch, values, which = self._distinct_keys(key_list, batch, values)
            prepared = None
        if not key_list:
            return np.ones(0, dtype=bool)
        new = self._store_batch(batch, values, prepared)
        return new if which is None else new[which]

    @staticmethod
    def _distinct_keys(
        key_list: list[str], batch: EncodedKeys, values: _U64
    ) -> tuple[list[str], EncodedKeys, _U64, NDArray[np.intp] | None]:
        """The validated keys of :meth:`add_many` (``key_list`` and its encoded ``batch``, from
        ``_validate_keys``) with their (n,) ``values``, a repeated key kept once with its last
        value: (keys, their encoded batch, their values, and which: None when no key repeats,
        else the (n,) intp position of each input key's entry)."""
        n = len(key_list)
        if values.size != n:
            raise InvalidArgumentError(
                f"got {n} keys and {values.size} fingerprints; the lengths must match",
                value=(n, int(values.size)),
            )
        # Everything that does not read the index happens before the lock: repeated keys, and
        # the tables' runs of a large batch (radix sorts), so readers wait less.
        which: NDArray[np.intp] | None = None
        if n > 1:
            ordered = np.sort(batch.hashes)
            if bool((ordered[1:] == ordered[:-1]).any()):
                # Equal hashes: maybe a repeated key. The last occurrence wins, in order of
                # position (a dict over the keys is exact whatever the hashes).
                last = dict(zip(key_list, range(n), strict=True))
                if len(last) != n:
                    positions = np.fromiter(last.values(), dtype=np.int64, count=len(last))
                    positions.sort()
                    rank = {p: j for j, p in enumerate(positions.tolist())}
                    which = np.fromiter((rank[last[k]] for k in key_list), np.intp, n)
                    key_list = [key_list[i] for i in positions.tolist()]
                    batch = encode_keys(key_list)
                    values = values[positions]
        return key_list, batch, values, which

    def _store_batch(
        self, batch: EncodedKeys, values: _U64, prepared: list[Run] | None = None
    ) -> NDArray[np.bool_]:
        """Store the distinct, validated keys of ``batch`` with ``values``: the tables' runs of
        a large batch sorted before the lock (unless ``prepared``, the tables' runs of exactly
        ``values``, is given), the rows stored under it, runs merged after."""
        if prepared is None and self._tables[0].direct_run(int(values.size)):
            prepared = self._prepare_runs(values)
        self._await_growth(int(values.size), int(batch.blob.size))
        with self._lock:
            new = self._add_many(batch, values, prepared)
        self._after_write(int(values.size))
        return new

    def _prepare_runs(self, values: _U64) -> list[Run]:
        """Each table's run of the (n,) uint64 ``values``: in other threads for a large batch
        (:meth:`_building_runs`), else in this one."""
        with self._building_runs(values) as runs:
            if runs is not None:
                return runs()
        return [table.prepare_run(values) for table in self._tables]

    @contextmanager
    def _building_runs(self, values: _U64) -> Iterator[Callable[[], list[Run]] | None]:
        """Start building each table's run of the (n,) uint64 ``values`` (radix sorts, which
        release the GIL) in up to :data:`_BUILD_THREADS` threads, when n is at least
        :data:`_PARALLEL_MIN` and the batch becomes runs directly; yields a function that
        waits for the runs (in table order), or None when nothing was started. The caller
        does other work meanwhile; leaving the block waits for the threads (10^7
        fingerprints, 4 tables: 0.6 to 1.1 s in 2 threads against 1.1 to 1.8 s in one here)."""
        tables = self._tables
        n = int(values.size)
        if n < _PARALLEL_MIN or not tables[0].direct_run(n):
            yield None
            return
        workers = max(1, min(_BUILD_THREADS, len(tables)))
        pool = ThreadPoolExecutor(workers, thread_name_prefix="permindex-build")
        try:
            futures = [pool.submit(table.prepare_run, values) for table in tables]
            yield lambda: [future.result() for future in futures]
        finally:
            pool.shutdown(wait=True, cancel_futures=True)

    def _add_many(
        self, batch: EncodedKeys, values: _U64, prepared: list[Run] | None
    ) -> NDArray[np.bool_]:
        """Store the distinct keys of ``batch`` with ``values`` (``prepared``: the tables' runs of
        exactly ``values``, or None); returns, per key, whether it was new."""
        n = int(values.size)
        self._reserve(n)  # may compact (renumber rows): look rows up after it
        store = self._store
        old = store.find_many(batch)
        new = old < 0
        replaced = np.flatnonzero(old >= 0)
        if replaced.size:
            same = self._fps[old[replaced]] == values[replaced]
            if same.any():  # unchanged fingerprints: nothing to do for those keys
                apply = np.ones(old.size, dtype=bool)
                apply[replaced[same]] = False
                keep = np.flatnonzero(apply)
                if keep.size == 0:
                    return new
                batch = batch_subset(batch, keep)
                values = values[keep]
                old = old[keep]
                prepared = None
            self._kill(old[old >= 0])
        self._append_rows(batch, values, old if replaced.size else None, prepared)
        self._maybe_compact()
        return new

    def _append_rows(
        self,
        batch: EncodedKeys,
        values: _U64,
        moved_from: _I64 | None,
        prepared: list[Run] | None = None,
    ) -> None:
        """Store the keys of ``batch`` (no repeats; each either not stored, or stored on the row
        ``moved_from[i]``, already dead) with ``values`` as new rows (``prepared``: the tables'
        runs of exactly ``values``)."""
        m = int(values.size)
        self._reserve(m)
        start = self._n_rows
        first = self._store.append_many(batch, moved_from)
        assert first == start
        self._fps[start : start + m] = values
        if self._live is not None:
            self._live[start : start + m] = True
        self._n_rows = start + m
        for t, table in enumerate(self._tables):
            run = None if prepared is None else prepared[t]
            table.add_many(start, m, self._fps, self._live, run)

    def remove(self, key: str) -> None:
        """Remove ``key``. Raises :class:`~permindex.errors.NotFoundError` (a KeyError) when it
        is not stored, TypeError / InvalidArgumentError for a malformed key; nothing changes
        then. O(1) (a tombstone) plus amortized compaction."""
        key = validate_key(key)
        with self._lock:
            if not self._discard(key.encode("utf-8")):
                raise NotFoundError(f"key {short_repr(key)} is not stored", key=key)
        self._merge_runs()  # after a compaction

    def discard(self, key: str) -> bool:
        """Remove ``key`` if stored; returns whether it was. TypeError / InvalidArgumentError
        for a malformed key."""
        key = validate_key(key)
        with self._lock:
            found = self._discard(key.encode("utf-8"))
        self._merge_runs()  # after a compaction
        return found

    def _discard(self, data: bytes) -> bool:
        row = self._store.find(data, hash_key(data))
        if row < 0:
            return False
        self._kill(np.array([row], dtype=np.int64))
        self._store.unlink(row)
        self._maybe_compact()
        return True

    def _reserve(self, extra: int) -> None:
        """Make room for ``extra`` more rows, compacting first if row numbers would overflow."""
        if self._n_rows + extra > MAX_ROWS:
            self._compact()
            if self._n_rows + extra > MAX_ROWS:
                raise LimitExceededError(
                    f"an index holds at most {MAX_ROWS} fingerprints",
                    limit=MAX_ROWS,
                    actual=self._n_rows + extra,
                )
        need = self._n_rows + extra
        capacity = self._fps.size
        if need > capacity:
            capacity = min(max(next_capacity(need, capacity), 1024), MAX_ROWS)
            fps = np.zeros(capacity, dtype=np.uint64)
            fps[: self._n_rows] = self._fps[: self._n_rows]
            self._fps = fps
            if self._live is not None:
                live = np.zeros(capacity, dtype=bool)
                live[: self._n_rows] = self._live[: self._n_rows]
                self._live = live
            self._views()

    def _after_write(self, rows: int = 1) -> None:
        """Upkeep after a write of ``rows`` rows, outside the lock: grow ahead
        (:meth:`_grow_ahead`) unless the write was large (an eighth of the capacity or more: a
        bulk load leaves an eighth of room, :func:`~permindex.index.keystore.next_capacity`, and may
        be all there is: growing then would only take memory), and merge the tables' runs
        (:meth:`_merge_runs`)."""
        self._last_write = time.monotonic()
        if 8 * rows < self._fps.size:
            self._grow_ahead()
        self._merge_runs()

    def merge_all_runs(self, idle: float = 0.0, min_share: float = MERGE_ALL_MIN_SHARE) -> bool:
        """Merge a table's frozen runs and memtable into one sorted run when at least
        ``min_share`` of its entries lie outside its largest run, so that a query probes one
        run there: the single sorted table per permutation of Manku et al. 2007 (section 3),
        which the memtable and runs of recent writes approximate. A server loaded through a
        stream of adds holds 2 or 3 runs per table (a quarter or more of the entries outside
        the largest); a single lookup of 10^6 then costs about 3x the directory probes.
        ``min_share`` keeps a trickle of writes from paying a full merge each (one every
        eighth of the index's size, by default: amortized, 8 rows sorted per row written).

        One table at a time (the memory of one table's merge at most): the merge runs without
        the lock, like the automatic merges (reads meanwhile see the unmerged runs, which hold
        the same rows; writes go on and add runs after the merged ones), and the merged run
        replaces its inputs under the lock. Cost: a radix sort of the table's rows (about 0.1
        s per table at 10^6 here).

        Args:
            idle: merge only while nothing was added for at least this many seconds (a server
                calls this periodically with a small idle time, so that it merges after a
                load, not during one); checked before each table.
            min_share: 0 to 1; 0 merges every table that has more than one run or a memtable.

        Returns:
            True when a table was merged (or its memtable frozen); False when none qualified,
            the index was not idle long enough, another merge was running, or a compaction
            renumbered the rows meanwhile (that table's merge is dropped).
        """
        merged = False
        for table in self._tables:
            with self._lock:
                if self._merging or time.monotonic() - self._last_write < idle:
                    break
                sizes = table.run_sizes
                total = sum(sizes) + table.memtable_size
                outside = total - max(sizes, default=0)
                if outside == 0 or outside < min_share * total:
                    continue
                if table.memtable_size:
                    table.freeze(self._fps, self._live)
                    merged = True
                runs = table.runs
                if len(runs) < 2:
                    continue
                self._merging = True
                fps, live, compactions = self._fps, self._live, self._compactions
            if self._merge_unlocked(table, runs, fps, live, compactions):
                merged = True
        self._merge_runs()  # what writes left meanwhile
        return merged

    def _fits(self, rows: int, data_bytes: int) -> bool:
        """Whether ``rows`` more rows with ``data_bytes`` more key bytes fit in the row arrays
        and the key store without growing them (caller holds the lock)."""
        return self._n_rows + rows <= self._fps.size and self._store.fits(rows, data_bytes)

    def _growth_wanted(self) -> bool:
        """Whether the row arrays or the key store are close to an inline growth (caller holds
        the lock): rows above 7/8 of the capacity, or see :meth:`KeyStore.growth_wanted`. Small
        indexes (capacity below 2^16 rows) grow inline, which costs less than a thread."""
        if self._fps.size < _GROW_AHEAD_ROWS:
            return False
        return nearly_full(self._n_rows, self._fps.size) or self._store.growth_wanted()

    def _grow_ahead(self, rows: int = 0, data_bytes: int = 0) -> threading.Thread | None:
        """Start growing the arrays in a background thread (:meth:`_grow`) when they are close to
        full, or when ``rows`` more rows with ``data_bytes`` key bytes would not fit; returns the
        thread growing them (None: no growth). At 10^7 rows a growth under the lock would hold
        every query and write up for 0.2 s (copying the row arrays and the keys) to 2 s
        (rehashing the key store's table)."""
        grower = self._grower
        if grower is not None:
            return grower
        with self._lock:
            if self._grower is not None:
                return self._grower
            if self._fits(rows, data_bytes) and not self._growth_wanted():
                return None
            grower = threading.Thread(
                target=self._grow, args=(rows, data_bytes), name="permindex-grow", daemon=True
            )
            self._grower = grower
            grower.start()  # under the lock, so that no one joins it before it started
        return grower

    def _grow(self, rows: int, data_bytes: int) -> None:
        """Grow the row arrays (by half when above 7/8 full, and so that ``rows`` more fit) and
        the key store (:class:`~permindex.index.keystore.Growth`) mostly without the lock: the lock
        is taken to note the state (and copy the liveness mask), released while the rows noted are
        copied and the key store's hash table is rebuilt (rows never change once appended), and
        taken again to copy what was appended meanwhile, replay the key store's changes and swap
        the arrays in. A compaction meanwhile abandons it. Runs in the thread started by
        :meth:`_grow_ahead`."""
        try:
            with self._lock:
                growth = self._store.begin_growth(rows, data_bytes)
                start = self._n_rows
                fps = self._fps
                capacity = min(ahead_capacity(start, rows, fps.size), MAX_ROWS)
                live = None if self._live is None else self._live[:start].copy()
                compactions = self._compactions
            if live is None:
                linked = np.arange(start, dtype=np.int64)
            else:
                linked = np.flatnonzero(live).astype(np.int64)
            KeyStore.prepare_growth(growth, linked)
            new_fps = None
            if capacity > fps.size:
                new_fps = np.zeros(capacity, dtype=np.uint64)
                new_fps[:start] = fps[:start]
            with self._lock:
                if self._compactions != compactions:
                    return  # the compaction abandoned the key store's growth too
                self._store.finish_growth(growth)
                if new_fps is not None and capacity > self._fps.size:
                    n = self._n_rows
                    new_fps[start:n] = self._fps[start:n]
                    if self._live is not None:
                        grown_live = np.zeros(capacity, dtype=bool)
                        grown_live[:n] = self._live[:n]
                        self._live = grown_live
                    self._fps = new_fps
                    self._views()
        finally:
            with self._lock:
                self._grower = None

    def _await_growth(self, rows: int, data_bytes: int) -> None:
        """Before a write of ``rows`` rows with ``data_bytes`` key bytes, outside the lock (never
        call it holding the lock: the growth needs it): when the write would not fit in large
        arrays, have them grown by :meth:`_grow_ahead`'s thread and wait for it -- only this
        writer waits, queries go on. A write that still does not fit (another writer came
        first) grows the arrays under the lock, as small indexes always do."""
        if self._fps.size < _GROW_AHEAD_ROWS:
            return
        grower = self._grow_ahead(rows, data_bytes)
        if grower is not None:
            with self._lock:
                fits = self._fits(rows, data_bytes)
            if not fits:
                grower.join()

    def _merge_runs(self) -> None:
        """Merge the tables' runs that break the size ratio, without holding the lock while
        merging: runs are immutable and a row's fingerprint never changes, so a merge reads a
        consistent picture; the merged run replaces its two inputs under the lock, unless a
        compaction (which renumbers rows) happened meanwhile. One thread merges at a time; it
        goes on until no merge is pending, so when the write that called this returns, every
        table satisfies its ratio (if no other thread is still writing). Readers query the
        unmerged runs meanwhile, which hold the same rows."""
        while True:
            with self._lock:
                if self._merging:
                    return  # another thread merges, and will pick up what this write left
                for table in self._tables:
                    pair = table.pending_merge()
                    if pair is not None:
                        break
                else:
                    return
                self._merging = True
                fps, live, compactions = self._fps, self._live, self._compactions
            swapped = self._merge_unlocked(table, pair, fps, live, compactions)
            if not swapped and self._compactions == compactions:  # pragma: no cover - defensive
                return

    def _merge_unlocked(
        self,
        table: Table,
        runs: tuple[Run, ...],
        fps: _U64,
        live: NDArray[np.bool_] | None,
        compactions: int,
    ) -> bool:
        """Merge the consecutive ``runs`` of ``table`` without the lock -- the caller set
        ``_merging`` and read ``fps``, ``live`` and ``compactions`` under it -- then, under the
        lock, clear ``_merging`` and put the merged run in their place unless a compaction
        renumbered the rows meanwhile. Whether the merged run went in."""
        try:
            merged = table.merged_runs(runs, fps, live)
        except BaseException:
            with self._lock:
                self._merging = False
            raise
        with self._lock:
            self._merging = False
            return self._compactions == compactions and table.replace_runs(runs, merged)

    def _views(self) -> None:
        """memoryviews of the row arrays (Python ints and bools on indexing: single queries)."""
        self._fps_view: memoryview = self._fps.data
        self._live_view: memoryview | None = None if self._live is None else self._live.data

    def _kill(self, rows: _I64) -> None:
        """Mark ``rows`` dead (tombstones), allocating the liveness mask on the first death."""
        if self._live is None:
            self._live = np.zeros(self._fps.size, dtype=bool)
            self._live[: self._n_rows] = True
            self._live_view = self._live.data
        self._live[rows] = False

    def _live_mask(self, start: int = 0, stop: int | None = None) -> NDArray[np.bool_]:
        """The liveness of rows [start, stop) (stop None: all rows), as a bool array."""
        end = self._n_rows if stop is None else stop
        if self._live is None:
            return np.ones(max(0, end - start), dtype=bool)
        return self._live[start:end]

    def _live_rows(self) -> _I64:
        """Every live row, ascending, (n,) int64."""
        if self._live is None:
            return np.arange(self._n_rows, dtype=np.int64)
        return np.flatnonzero(self._live[: self._n_rows]).astype(np.int64)

    def _maybe_compact(self) -> None:
        live = len(self._store)
        if self._n_rows - live > max(self._compaction_min, live):
            self._compact()

    def _compact(self) -> None:
        """Renumber the live rows 0..n-1 in order and drop every dead row from every table."""
        n = self._n_rows
        live_rows = self._live_rows()
        m = int(live_rows.size)
        remap = np.full(n, -1, dtype=np.int64)
        remap[live_rows] = np.arange(m, dtype=np.int64)
        capacity = max(1024, m + m // 4)
        fps = np.zeros(capacity, dtype=np.uint64)
        fps[:m] = self._fps[live_rows]
        self._store.compact(live_rows.astype(np.int64))
        self._fps, self._live, self._n_rows = fps, None, m  # every row is live again
        self._views()
        self._compactions += 1
        for table in self._tables:
            table.compact(remap, fps, None)

    # -- queries --------------------------------------------------------------------------------

    def _resolve_k(self, k: object) -> int:
        if k is None:
            return self._k
        value = check_int(k, "k")
        if value < 0:
            raise InvalidArgumentError(f"k must be >= 0, got {value}", value=value)
        if value > self._k:
            raise InvalidArgumentError(
                f"k={value} is above the index's k={self._k} ({self._design} guarantees "
                f"k <= {self._design.max_k}; the index was built for k <= {self._k})",
                value=value,
            )
        return value

    @staticmethod
    def _resolve_limit(limit: object) -> int:
        if limit is None:
            return 0
        value = check_int(limit, "limit")
        if value < 0:
            raise InvalidArgumentError(f"limit must be >= 0 (0 = all), got {value}", value=value)
        return value

    def query(
        self, fingerprint: int, k: int | None = None, limit: int | None = None
    ) -> list[Match]:
        """Every stored key whose fingerprint is within Hamming distance ``k`` bits (inclusive)
        of ``fingerprint``, each once, sorted by (distance, key) (Manku et al. 2007, section 3:
        permuted tables searched by prefix, candidates verified exactly).

        Args:
            fingerprint: int in [0, 2^64).
            k: None for the index's k, else 0 <= k <= index.k.
            limit: None or 0 for all matches, else at most this many (the first after sorting).

        Raises:
            TypeError: a non-int fingerprint, k or limit.
            InvalidArgumentError: fingerprint outside [0, 2^64), k < 0 or above the index's k,
                limit < 0.

        Cost: per table, one prefix range per run (a directory lookup) and one in the memtable
        (a bisection); the candidates (about n / 2^prefix_bits per table for random
        fingerprints) verified with one numpy pass over all tables, or in pure Python when
        there are few; a candidate found in several tables is kept once.
        """
        if type(fingerprint) is int and k is None and limit is None and 0 <= fingerprint < _TOP:
            with self._lock:  # the common call: nothing else to check
                return self._query_one(fingerprint, self._k)
        value = validate_fingerprint(fingerprint)
        kk = self._resolve_k(k)
        lim = self._resolve_limit(limit)
        with self._lock:
            matches = self._query_one(value, kk)
        return matches[:lim] if lim else matches

    def _query_one(self, query: int, k: int) -> list[Match]:
        # A row can be a candidate in several tables: keep it once (by row).
        hits: dict[int, tuple[int, int]] = {}
        fps = self._fps_view
        tables = self._tables
        for t in self._searched[k]:
            tables[t].lookup(query, k, fps, hits)
        if not hits:
            return []
        live = self._live_view
        key_of = self._store.key
        if live is None:
            out = [_new_match((key_of(row), value, d)) for row, (value, d) in hits.items()]
        else:
            out = [
                _new_match((key_of(row), value, d)) for row, (value, d) in hits.items() if live[row]
            ]
        if len(out) > 1:
            out.sort(key=_MATCH_ORDER)
        return out

    def query_many(
        self,
        fingerprints: Iterable[int] | _U64,
        k: int | None = None,
        limit: int | None = None,
    ) -> list[list[Match]]:
        """:meth:`query` for each of n fingerprints: one list of matches per fingerprint, in
        order, each sorted by (distance, key).

        ``fingerprints`` is an iterable of ints or a (n,) uint64 array (signed arrays without
        negative values are accepted). Vectorized over the batch with numpy: per table and run,
        the prefix ranges of all queries, the candidates gathered, XOR and ``np.bitwise_count``;
        only the matches are turned into Python objects. Same errors as :meth:`query` (the
        message names the position of a bad fingerprint); nothing is queried then.
        """
        queries = as_fingerprint_array(fingerprints)
        kk = self._resolve_k(k)
        lim = self._resolve_limit(limit)
        n = int(queries.size)
        with self._lock:
            if n <= _SMALL_BATCH:
                results = [self._query_one(q, kk) for q in queries.tolist()]
                if lim:
                    for matches in results:
                        del matches[lim:]
            else:
                results = self._query_batch(queries, kk, lim)
        return results

    def _query_batch(self, queries: _U64, k: int, limit: int = 0) -> list[list[Match]]:
        """The matches of each query, sorted by (distance, key); with a ``limit`` (0: none),
        only the first ``limit`` of each are made into :class:`Match` objects: the order, keys
        included, is found on arrays first (one rank per distinct matched row), so a limit
        bounds the Python objects whatever the number of matches (1,024 queries of one
        fingerprint stored under 6,000 keys, limit 1: 1,024 objects, not 6 million)."""
        found_q: list[NDArray[np.intp]] = []
        found_rows: list[NDArray[np.uint32]] = []
        found_d: list[NDArray[np.uint8]] = []
        for start in range(0, queries.size, _QUERY_CHUNK):
            self._query_chunk(
                queries[start : start + _QUERY_CHUNK], start, k, found_q, found_rows, found_d
            )
        results: list[list[Match]] = [[] for _ in range(queries.size)]
        if not found_q:
            return results
        q_all = np.concatenate(found_q)
        rows_all = np.concatenate(found_rows)
        d_all = np.concatenate(found_d)
        if limit:
            return self._limited_results(results, q_all, rows_all, d_all, limit)
        # By query, then distance: most lists come out sorted; only ties of distance within one
        # query need the key order (a stable sort of that list).
        order = np.lexsort((d_all, q_all))
        q_all, rows_all, d_all = q_all[order], rows_all[order], d_all[order]
        matches = list(
            map(
                _new_match,
                zip(
                    self._store.keys(rows_all),
                    self._fps[rows_all].tolist(),
                    d_all.tolist(),
                    strict=True,
                ),
            )
        )
        q_list = q_all.tolist()
        for q, match in zip(q_list, matches, strict=True):
            results[q].append(match)
        if q_all.size > 1:
            tie = (q_all[1:] == q_all[:-1]) & (d_all[1:] == d_all[:-1])
            for q in np.unique(q_all[1:][tie]).tolist():  # each query with a tie sorted once
                results[q].sort(key=_MATCH_ORDER)
        return results

    def _limited_results(
        self,
        results: list[list[Match]],
        q_all: NDArray[np.intp],
        rows_all: NDArray[np.uint32],
        d_all: NDArray[np.uint8],
        limit: int,
    ) -> list[list[Match]]:
        """Fill ``results`` with the first ``limit`` matches of each query in (distance, key)
        order, from every match's query position, row and distance: the distinct rows' keys are
        ranked once (code point order), the matches sorted by (query, distance, key rank) with
        numpy and cut per query before any Match is made."""
        distinct, inverse = np.unique(rows_all, return_inverse=True)
        keys = self._store.keys(distinct)
        by_key = sorted(range(len(keys)), key=keys.__getitem__)
        rank = np.empty(len(keys), dtype=np.int64)
        rank[np.asarray(by_key, dtype=np.int64)] = np.arange(len(keys), dtype=np.int64)
        order = np.lexsort((rank[inverse], d_all, q_all))
        q_sorted = q_all[order]
        first = np.searchsorted(q_sorted, q_sorted, side="left")
        kept = order[np.arange(order.size) - first < limit]
        fps = self._fps[rows_all[kept]].tolist()
        for q, j, value, d in zip(
            q_all[kept].tolist(), inverse[kept].tolist(), fps, d_all[kept].tolist(), strict=True
        ):
            results[q].append(_new_match((keys[j], value, d)))
        return results

    def _query_chunk(
        self,
        chunk: _U64,
        offset: int,
        k: int,
        found_q: list[NDArray[np.intp]],
        found_rows: list[NDArray[np.uint32]],
        found_d: list[NDArray[np.uint8]],
    ) -> None:
        searched = self._searched[k]
        # Per table, the queries in the order of their prefixes: the candidate ranges are then
        # read in increasing position (streaming reads of the filters instead of one cache miss
        # per query; 7.6 -> 5.8 ms per 10,000 queries at 10^6 here). ``orders[i]`` maps a sorted
        # position back to the chunk's.
        orders: list[NDArray[np.intp]] = []
        sorted_chunks: list[_U64] = []
        ranges = []
        for t in searched:
            perm = self._permutations[t]
            prefixes = perm.prefix_array(chunk)
            order = argsort_prefixes(prefixes, perm.prefix_bits)
            orders.append(order)
            sorted_chunks.append(chunk[order])
            ranges.append(self._tables[t].ranges_many(prefixes[order], self._fps))
        total = sum(int(counts.sum()) for per_table in ranges for *_, counts in per_table)
        if total > _CANDIDATE_BUDGET and chunk.size > 1:
            half = chunk.size // 2
            self._query_chunk(chunk[:half], offset, k, found_q, found_rows, found_d)
            self._query_chunk(chunk[half:], offset + half, k, found_q, found_rows, found_d)
            return
        fps = self._fps
        live = self._live
        for i, (t, per_table) in enumerate(zip(searched, ranges, strict=True)):
            mask = self._np_masks[t]
            earlier = [self._np_masks[u] for u in searched[:i]]
            order, queries = orders[i], sorted_chunks[i]
            query_filters = self._permutations[t].filter_array(queries)
            for rows_of_run, filters, lo, counts in per_table:
                if filters is not None:
                    # Filters first: sequential uint16 reads reject ~99% of the candidates.
                    qpos, positions = filtered_ranges(lo, counts, filters, query_filters, k)
                else:
                    qpos, positions = gather_ranges(lo, counts)
                if positions.size == 0:
                    continue
                if isinstance(rows_of_run, Run):
                    rows = rows_of_run.rows_at(positions)
                else:
                    rows = rows_of_run[positions]
                x = fps[rows] ^ queries[qpos]
                distance = np.bitwise_count(x)
                selected = np.flatnonzero(distance <= k)
                if selected.size == 0:
                    continue
                x = x[selected]
                rows = rows[selected]
                keep = (x & mask) == 0
                for other in earlier:
                    keep &= (x & other) != 0
                if live is not None:
                    keep &= live[rows]
                found_q.append(order[qpos[selected][keep]] + offset)
                found_rows.append(rows[keep])
                found_d.append(distance[selected][keep])

    def check_and_add(self, key: str, fingerprint: int, k: int | None = None) -> CheckAndAddResult:
        """Atomically: query ``fingerprint`` with ``k`` and, only if no other key is within k,
        store it under ``key`` (replacing the key's fingerprint if stored; the key's own entry
        never blocks). Query and add happen under one acquisition of the index lock, so of two
        threads adding near-duplicates concurrently exactly one succeeds.

        Returns:
            :class:`CheckAndAddResult` (added, matches, replaced): added is True when no other key
            was within k (the key now holds ``fingerprint``); matches are the other keys within k,
            sorted by (distance, key), empty when added; replaced is True when added and the key
            was stored before the call (with any fingerprint).

        Raises: as :meth:`add` and :meth:`query`; nothing changes then.
        """
        key = validate_key(key)
        value = validate_fingerprint(fingerprint)
        kk = self._resolve_k(k)
        data = key.encode("utf-8")
        h = hash_key(data)
        with self._lock:
            matches = [m for m in self._query_one(value, kk) if m.key != key]
            if matches:
                return CheckAndAddResult(False, matches, False)
            replaced = self._store.find(data, h) >= 0
            self._add(data, h, value)
        self._after_write()
        return CheckAndAddResult(True, [], replaced)

    def pairs(self, k: int | None = None) -> list[tuple[str, str, int]]:
        """Every unordered pair of stored keys within Hamming distance ``k`` bits (inclusive;
        equal fingerprints under different keys give distance 0), each once, as (key_a, key_b,
        distance) with key_a < key_b in code point order; the list is sorted.

        A self-join over each table's prefix groups (Manku et al. 2007, section 3;
        :func:`permindex.index.join.self_join`, on the design
        :func:`permindex.index.join.join_design` picks for n): the fingerprints are grouped by
        prefix, every pair within a group verified with ``np.bitwise_count``, and a pair is kept
        only in the first table whose prefix it shares. Cost: O(T * (n + sum over groups of
        size^2)) numpy work for T searched tables, plus O(output) Python objects.

        Raises TypeError / InvalidArgumentError for a bad k (as :meth:`query`).
        """
        kk = self._resolve_k(k)
        with self._lock:
            rows_a, rows_b, distances = self._pairs(kk)
            keys_a = self._store.keys(rows_a)
            keys_b = self._store.keys(rows_b)
            out: list[tuple[str, str, int]] = []
            for key_a, key_b, d in zip(keys_a, keys_b, distances.tolist(), strict=True):
                out.append((key_a, key_b, d) if key_a < key_b else (key_b, key_a, d))
        out.sort()
        return out

    def _pairs(self, k: int) -> tuple[_I64, _I64, _I64]:
        """(rows_a, rows_b, distances) of every pair of live rows within k, each pair once: the
        self-join of :mod:`permindex.index.join` on the design
        :func:`~permindex.index.join.join_design` picks for the number of live rows."""
        rows = self._live_rows()
        design = join.join_design(self._design, k, int(rows.size))
        a, b, distances = join.self_join(self._fps[rows], k, design)
        return rows[a], rows[b], distances

    # -- export, memory, invariants --------------------------------------------------------------

    def export(self) -> tuple[list[str], _U64]:
        """A consistent copy of the contents, taken under the lock: (keys, fingerprints) with
        fingerprints a new (n,) uint64 array, element i stored under keys[i]. Order: by row
        (the order the current fingerprints were stored in)."""
        with self._lock:
            live = self._live_mask()
            return self._store.live_keys(live), self._fps[: self._n_rows][live]

    def export_compact(self) -> tuple[NDArray[np.int64], NDArray[np.uint8], _U64]:
        """As :meth:`export`, with the keys in compact form, for writers that do not need str
        objects (a snapshot): ((n,) int64 UTF-8 byte lengths, the UTF-8 bytes of every key each
        followed by a NUL, concatenated ((m,) uint8), (n,) uint64 fingerprints), in the order of
        :meth:`export`. No Python object per key: O(n + key bytes) numpy work."""
        with self._lock:
            live_rows = self._live_rows()
            lengths, blob = self._store.export(live_rows)
            return lengths, blob, self._fps[live_rows]

    def export_slices(
        self, rows_per_slice: int = 1 << 14
    ) -> list[tuple[NDArray[np.int64], NDArray[np.uint8], _U64]]:
        """The contents in the compact form of :meth:`export_compact`, as a list of slices
        ``(lengths, key bytes, fingerprints)``, taking the lock once per slice of
        ``rows_per_slice`` rows instead of once for everything: a snapshot of 10^7 keys then
        never holds up queries and writes for more than a slice's copy (about a millisecond).

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
        """
        rows_per_slice = max(1, int(rows_per_slice))
        for _attempt in range(3):
            with self._lock:
                stop = self._n_rows
                compactions = self._compactions
            parts: list[tuple[NDArray[np.int64], NDArray[np.uint8], _U64]] = []
            for start in range(0, stop, rows_per_slice):
                end = min(start + rows_per_slice, stop)
                with self._lock:
                    if self._compactions != compactions:
                        break
                    rows = np.flatnonzero(self._live_mask(start, end)).astype(np.int64)
                    rows += start
                    lengths, blob = self._store.export(rows)
                    parts.append((lengths, blob, self._fps[rows]))
                time.sleep(0)  # locks are not fair: let the threads waiting for it take it
            else:
                return parts
        with self._lock:
            return [self.export_compact()]

    def memory_bytes(self) -> int:
        """Bytes held by the arrays (by capacity): fingerprints and liveness, every table's runs
        (plus an estimate for the memtable entries, Python ints), and the key store."""
        with self._lock:
            return self.table_bytes() + self._store.nbytes()

    def table_bytes(self) -> int:
        """:meth:`memory_bytes` without the keys: fingerprint and liveness arrays (by capacity)
        and the tables."""
        with self._lock:
            total = int(self._fps.nbytes)
            if self._live is not None:
                total += int(self._live.nbytes)
            return total + sum(table.memory_bytes() for table in self._tables)

    def _check(self) -> None:
        """Verify every invariant in O(n) (numpy) and raise
        :class:`~permindex.index.table.TableCheckError` (an AssertionError) at the first broken one.
        For tests; takes the lock.

        Checked: the row store (sizes, the key dict and the row list agree, live rows are
        exactly the dict's rows, dead rows have no key); every table's own invariants
        (:meth:`Table._check`); in every table each live row appears exactly once and each dead
        row (a tombstone) at most once; the dead rows do not exceed the compaction bound."""
        with self._lock:
            n = self._n_rows
            _require = _check_condition  # raises TableCheckError with the message
            _require(self._fps.size >= n, "row arrays shorter than rows")
            if self._live is not None:
                _require(self._live.size == self._fps.size, "liveness and fingerprints differ")
                _require(not self._live[n:].any(), "live flag set beyond the last row")
            else:
                _require(len(self._store) == n, "no liveness mask, yet some rows are dead")
            live = self._live_mask()
            store = self._store
            _require(store.rows == n, f"{store.rows} keys by row, {n} rows")
            for problem in store._check():
                _require(False, f"key store: {problem}")
            _require(
                np.array_equal(store.linked_rows(), np.flatnonzero(live)),
                "live rows are not exactly the rows the key store finds",
            )
            dead = n - len(store)
            _require(
                dead <= max(self._compaction_min, len(store)),
                f"{dead} dead rows were not compacted",
            )
            for table in self._tables:
                rows = table._check(self._fps, n)
                copies = np.bincount(rows, minlength=n) if rows.size else np.zeros(n, np.int64)
                name = f"table {table.permutation.table}"
                _require(bool((copies <= 1).all()), f"{name}: a row appears twice")
                _require(bool((copies[live] == 1).all()), f"{name}: a live row is missing")


def _check_condition(condition: bool | np.bool_, message: str) -> None:
    if not condition:
        raise TableCheckError(message)
