"""Expiry for re-crawls: :class:`ExpiringIndex`, an :class:`~permindex.index.Index` whose entries
expire when their key was not added again within ``expire_after`` seconds.

Every row keeps the time its key was last added (:attr:`RowStore.times
<permindex.index.rows.RowStore.times>`: uint32 Unix seconds, 4 bytes per row, only in an index
with expiry): the clock's time at the write, or the ``added_at`` the caller gives (an import of an
earlier crawl). Adding a key again -- with the same fingerprint or a new one -- renews it. An entry
added at time t is expired from the moment ``now >= t + expire_after``: it is then as if removed,
which is the SQL ``DELETE FROM page WHERE crawled_at <= now - expire_after`` run before every call.

How: every public call first compares the clock with the oldest time stored (one comparison while
nothing is due), and when something is due it kills the expired rows under the index lock (a
tombstone each, O(n) numpy work over the times: at most once per second of the clock, as times are
whole seconds) before it answers. So an expired entry never matches a query, never blocks
:meth:`~permindex.index.Index.check_and_add`, and is in no pair, cluster, flag or export; its
memory is reclaimed by the next compaction (at once when a sweep kills many rows).
:attr:`ExpiringIndex.expired_pending` counts the expired rows still awaiting it.

Times: ``added_at`` is Unix seconds (int or float, floored), 0 or None meaning the clock's time; a
time in the future counts as the clock's time (clock skew between machines must not make an entry
outlive its duration); a negative, non-finite or non-number time is refused. An entry added with a
time already past its duration is added and expired at once (as the same row inserted into the SQL
table and deleted by the next ``DELETE``).

Threads: the check of the clock is made when a call starts, without the lock; a call that starts
while another thread is writing an entry already expired on arrival may see that entry (the
write's own answers and every later call do not).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.index import CheckAndAddResult, Index, check_and_add
from permindex.index.keys.batches import compact_inputs, key_list, validate_keys
from permindex.index.rows import DEFAULT_COMPACTION_MIN, export_slices
from permindex.index.search.batch_queries import QueryColumns
from permindex.index.tables.permutation import DEFAULT_DESIGN, Design
from permindex.index.tables.table import DEFAULT_MEMTABLE_LIMIT
from permindex.index.tuning import DEFAULT_TUNING, Tuning
from permindex.index.writes import add_batch, add_one, add_section

__all__ = [
    "MAX_ADDED_AT",
    "MAX_EXPIRE_AFTER",
    "AddedAt",
    "ExpiringIndex",
    "added_at_seconds",
    "check_expire_after",
    "parse_duration",
    "stamps",
]

#: The longest ``expire_after``, seconds (times are uint32 seconds).
MAX_EXPIRE_AFTER: Final = (1 << 32) - 1
#: The largest ``added_at`` a document can carry (the proto's int64), Unix seconds.
MAX_ADDED_AT: Final = (1 << 63) - 1
_NEVER: Final = 1 << 62  # the oldest time of an index without rows
_UNITS: Final = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_DURATION: Final = re.compile(r"([0-9]{1,12})([smhd]?)")

_U32 = NDArray[np.uint32]
_U64 = NDArray[np.uint64]


def parse_duration(text: str) -> int:
    """Seconds of a duration written as digits and a unit, ``s``, ``m``, ``h`` or ``d`` (``45s``,
    ``90m``, ``12h``, ``30d``; digits alone are seconds).

    Raises:
        InvalidArgumentError: anything else, 0, or above :data:`MAX_EXPIRE_AFTER` seconds.
    """
    match = _DURATION.fullmatch(text.strip())
    if match is None:
        raise InvalidArgumentError(
            f"duration {text[:40]!r} is not digits and a unit s, m, h or d (30d, 12h, 90m, 45s)",
            text,
        )
    return check_expire_after(int(match.group(1)) * _UNITS[match.group(2) or "s"])


def check_expire_after(value: object) -> int:
    """``value`` if it is an int in [1, :data:`MAX_EXPIRE_AFTER`] (seconds).

    Raises:
        TypeError: not an int (bool refused).
        InvalidArgumentError: out of range.
    """
    if type(value) is not int:
        raise TypeError(f"expire_after must be an int (seconds), not {type(value).__name__}")
    if not 1 <= value <= MAX_EXPIRE_AFTER:
        raise InvalidArgumentError(
            f"expire_after must be 1 to {MAX_EXPIRE_AFTER} seconds, got {value}", value
        )
    return value


#: The ``added_at`` of a write: None (now), one time for all entries, or one per entry.
AddedAt = float | Iterable[float] | NDArray[np.number] | None


def stamps(added_at: AddedAt, n: int, now: float) -> _U32:
    """The (n,) uint32 times of n entries written at ``now`` (Unix seconds): ``added_at`` None
    (every entry at ``now``), one number for all, or n numbers; each floored, 0 meaning ``now``,
    a time after ``now`` taken as ``now`` (see the module docstring).

    Raises:
        TypeError: a time that is not a number (bool refused).
        InvalidArgumentError: a negative or non-finite time, or not n of them.
    """
    clock = min(max(int(now), 0), MAX_EXPIRE_AFTER)
    if added_at is None:
        return np.full(n, clock, dtype=np.uint32)
    if isinstance(added_at, bool) or isinstance(added_at, (str, bytes)):
        raise TypeError(f"added_at must be Unix seconds, not {type(added_at).__name__}")
    given: Any
    if isinstance(added_at, (int, float, np.integer, np.floating)):
        values = np.full(n, float(added_at))
        given = None
    else:
        array = added_at if isinstance(added_at, np.ndarray) else np.array(list(added_at))
        if array.dtype.kind not in "iuf" or array.ndim != 1:
            raise TypeError(f"added_at must be Unix seconds, not an array of {array.dtype}")
        if array.size != n:
            raise InvalidArgumentError(f"{n} entries but {array.size} added_at times", array.size)
        values = array.astype(np.float64)
        given = array
    if values.size and not (bool(np.isfinite(values).all()) and float(values.min()) >= 0):
        at = int(np.flatnonzero(~(np.isfinite(values) & (values >= 0)))[0])
        bad = added_at if given is None else given[at].item()
        where = "" if given is None else f" (entry {at})"
        raise InvalidArgumentError(f"added_at must be Unix seconds >= 0, got {bad!r}{where}", bad)
    floored = np.floor(values)
    floored[(floored == 0) | (floored > clock)] = clock
    result: _U32 = floored.astype(np.uint32)
    return result


def added_at_seconds(value: object) -> int:
    """The ``added_at`` a document carries to a server (``Document.added_at``, int64) for
    ``value``, Unix seconds: an int, or a float floored (the rule of :func:`stamps`); 0 means
    the server's clock at the write. The one rule of the clients, ``ingest`` and ``import``
    (JSONL fields, Parquet columns).

    Raises:
        InvalidArgumentError: not a number (None, bool and str refused), negative, not finite,
            or above :data:`MAX_ADDED_AT`; the message says the value and the rule.
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        seconds = int(value)
    elif isinstance(value, (float, np.floating)) and bool(np.isfinite(value)):
        seconds = int(np.floor(value))
    else:
        shown = "null" if value is None else repr(value)[:40]
        raise InvalidArgumentError(
            f"added_at {shown} is not Unix seconds (a number >= 0; 0: the server's clock)", value
        )
    if not 0 <= seconds <= MAX_ADDED_AT:
        raise InvalidArgumentError(
            f"added_at {value!r} is not Unix seconds: it must be 0 to 2**63 - 1 "
            "(0: the server's clock)",
            value,
        )
    return seconds


class _Pending(NamedTuple):
    """Rows expired since the compaction numbered ``compactions`` (their memory awaits the
    next one)."""

    compactions: int
    rows: int


class ExpiringIndex(Index):
    """An :class:`~permindex.index.Index` whose entries expire ``expire_after`` seconds after their
    key was last added (see the module docstring): the same methods, answers and errors, over
    the entries not expired, and the writes take an ``added_at`` (Unix seconds) too. Each row
    keeps its time (4 bytes more per row); every public call first drops the expired entries
    (:meth:`expire`: one comparison while none is due, O(n) numpy work when some are).
    ``from_arrays`` and ``from_compact`` are not available: build it, then :meth:`add_many`.

    Examples:
        >>> from permindex import ExpiringIndex
        >>> now = [1_000_000.0]
        >>> index = ExpiringIndex(expire_after=60, clock=lambda: now[0])
        >>> index.add("fresh", 0xFFFF)
        True
        >>> index.add("older", 0xFFFE, added_at=999_950)  # expires at 1,000,010
        True
        >>> [m.key for m in index.query(0xFFFF)]
        ['fresh', 'older']
        >>> now[0] += 15
        >>> [m.key for m in index.query(0xFFFF)], len(index)
        (['fresh'], 1)

    Args:
        expire_after: seconds, 1 to :data:`MAX_EXPIRE_AFTER`.
        clock: the wall clock, Unix seconds (``time.time``; tests pass their own).
        k: as :class:`~permindex.index.Index`; likewise ``design``, ``memtable_limit``,
            ``compaction_min``, ``expected_size``, ``memory_budget`` and ``tuning``.

    Raises:
        TypeError, InvalidArgumentError: as :class:`~permindex.index.Index`, and for a bad
            ``expire_after`` (:func:`check_expire_after`).
    """

    def __init__(
        self,
        k: int = 3,
        design: Design | tuple[int, int] | str = DEFAULT_DESIGN,
        *,
        expire_after: int,
        clock: Callable[[], float] = time.time,
        memtable_limit: int = DEFAULT_MEMTABLE_LIMIT,
        compaction_min: int = DEFAULT_COMPACTION_MIN,
        expected_size: int | None = None,
        memory_budget: int | None = None,
        tuning: Tuning = DEFAULT_TUNING,
    ) -> None:
        self._expire_after = check_expire_after(expire_after)
        super().__init__(
            k,
            design,
            memtable_limit=memtable_limit,
            compaction_min=compaction_min,
            expected_size=expected_size,
            memory_budget=memory_budget,
            tuning=tuning,
        )
        self._clock = clock
        self._oldest = _NEVER  # no stored time is older (a lower bound, kept under the lock)
        self._pending = _Pending(0, 0)
        #: Oldest time of each write in flight -> how many such writes (under the lock).
        self._in_flight: dict[int, int] = {}
        with self._lock:
            self._rows.keep_times()

    def __repr__(self) -> str:
        return f"{super().__repr__()[:-1]}, expire_after={self._expire_after})"

    # -- expiry -------------------------------------------------------------------------------

    @property
    def expire_after(self) -> int:
        """Seconds after its last addition at which an entry expires."""
        return self._expire_after

    @property
    def expired_pending(self) -> int:
        """Expired rows whose memory awaits the next compaction (they match nothing). O(1) after the
        expiry every call makes.
        """
        self.expire()
        with self._lock:
            pending = self._pending
            return pending.rows if pending.compactions == self._rows.compactions else 0

    def now(self) -> float:
        """The clock's time, Unix seconds.

        Examples:
            >>> from permindex import ExpiringIndex
            >>> ExpiringIndex(expire_after=60, clock=lambda: 1_000.0).now()
            1000.0
        """
        return self._clock()

    def is_expired(self, added_at: int) -> bool:
        """Whether an entry added at ``added_at`` (Unix seconds) is expired now: ``now >= added_at +
        expire_after``.

        Examples:
            >>> from permindex import ExpiringIndex
            >>> index = ExpiringIndex(expire_after=60, clock=lambda: 1_000.0)
            >>> index.is_expired(940), index.is_expired(941)
            (True, False)
        """
        return int(self._clock()) - self._expire_after >= added_at

    def times(self, keys: Iterable[str]) -> list[int | None]:
        """When each of ``keys`` was last added (Unix seconds), None where not stored (never added,
        removed, or expired: expired rows are dropped first, as every call does). O(n + key bytes).

        Raises:
            TypeError, InvalidArgumentError: a malformed key (as :meth:`contains_many`).

        Examples:
            >>> from permindex import ExpiringIndex
            >>> index = ExpiringIndex(expire_after=60, clock=lambda: 1_000.0)
            >>> index.add("a", 1, added_at=990)
            True
            >>> index.times(["a", "b"])
            [990, None]
        """
        self.expire()
        _keys, batch = validate_keys(keys)
        with self._lock:  # rows found and read under one hold: a compaction renumbers them
            found = self._store.find_many(batch)
            times = self._rows.times
            assert times is not None
            return [None if row < 0 else int(times[row]) for row in found.tolist()]

    def expire(self) -> int:
        """Drop the entries expired now (every public call does this first); returns how many. O(1)
        while none is due, else O(n) numpy work under the lock (a tombstone per expired row, a
        compaction when ``Tuning.compact_after_expiring`` or more expire at once).

        Examples:
            >>> now = [1_000.0]
            >>> from permindex import ExpiringIndex
            >>> index = ExpiringIndex(expire_after=60, clock=lambda: now[0])
            >>> index.add_many(["a", "b"], [1, 2], added_at=[950, 990]).tolist()
            [True, True]
            >>> now[0] = 1_015.0
            >>> index.expire()
            1
            >>> list(index)
            ['b']
        """
        cutoff = int(self._clock()) - self._expire_after
        if cutoff < self._oldest:
            return 0
        rows = self._rows
        with self._lock:
            times = rows.times
            assert times is not None
            n = rows.n
            live = rows.live_mask()
            expired = np.flatnonzero(live & (times[:n] <= cutoff)).astype(np.int64)
            kept = times[:n][live & (times[:n] > cutoff)]
            floor = min(self._in_flight) if self._in_flight else _NEVER
            self._oldest = min(int(kept.min()) if kept.size else _NEVER, floor)
            if expired.size:
                rows.kill(expired)
                if expired.size >= rows.tuning.compact_after_expiring:
                    rows.compact()  # relinks the keys of the live rows: no unlink each
                else:
                    for row in expired.tolist():
                        rows.keys.unlink(row)
                    pending = self._pending
                    count = pending.rows if pending.compactions == rows.compactions else 0
                    self._pending = _Pending(rows.compactions, count + int(expired.size))
                    if rows.compaction_due():
                        rows.compact()
        if expired.size:
            self._runs.merge_pending()
        return int(expired.size)

    @contextmanager
    def _writing(self, added_at: AddedAt, n: int) -> Iterator[_U32]:
        """The times of a write of n entries, noted before the write (so that a call racing it
        sweeps) and held as *in flight* until the write is done: a sweep meanwhile sets the
        oldest time no later than theirs, so rows stored after the sweep are not left out of
        the next one (an entry seen past its expiry)."""
        times = stamps(added_at, n, self._clock())
        if not times.size:
            yield times
            return
        oldest = int(times.min())
        with self._lock:
            self._oldest = min(self._oldest, oldest)
            self._in_flight[oldest] = self._in_flight.get(oldest, 0) + 1
        try:
            yield times
        finally:
            with self._lock:
                left = self._in_flight[oldest] - 1
                if left:
                    self._in_flight[oldest] = left
                else:
                    del self._in_flight[oldest]

    # -- writes ---------------------------------------------------------------------------------

    def add(self, key: str, fingerprint: int, *, added_at: float | None = None) -> bool:
        """:meth:`Index.add <permindex.index.Index.add>` at ``added_at`` (Unix seconds; None or 0:
        now; a future time counts as now); the key's time is renewed even when its fingerprint is
        unchanged.

        Raises:
            TypeError, InvalidArgumentError: as :meth:`Index.add <permindex.index.Index.add>`, and
                for a bad ``added_at`` (not a number, negative, not finite).

        Examples:
            >>> from permindex import ExpiringIndex
            >>> index = ExpiringIndex(expire_after=60, clock=lambda: 1_000.0)
            >>> index.add("a", 0xFFFF, added_at=990)
            True
            >>> index.times(["a"])
            [990]
        """
        self.expire()
        with self._writing(added_at, 1) as times:
            return add_one(self._rows, self._runs, key, fingerprint, int(times[0]))

    def add_many(
        self,
        keys: Iterable[str],
        fingerprints: Iterable[int] | _U64,
        *,
        added_at: AddedAt = None,
    ) -> NDArray[np.bool_]:
        """:meth:`Index.add_many <permindex.index.Index.add_many>` at ``added_at``: None (now), one
        time for all, or one per key (a repeated key takes its last).

        Raises:
            TypeError, InvalidArgumentError: as :meth:`Index.add_many
                <permindex.index.Index.add_many>`, and for bad times (or not one per key).

        Examples:
            >>> from permindex import ExpiringIndex
            >>> index = ExpiringIndex(expire_after=60, clock=lambda: 1_000.0)
            >>> index.add_many(["a", "b"], [1, 2], added_at=[980, 990]).tolist()
            [True, True]
            >>> index.times(["a", "b"])
            [980, 990]
        """
        self.expire()
        keys = key_list(keys)
        with self._writing(added_at, len(keys)) as times:
            return add_batch(self._rows, self._runs, keys, fingerprints, times)

    def add_compact(
        self,
        lengths: NDArray[np.integer] | Iterable[int],
        blob: NDArray[np.uint8] | bytes | bytearray,
        fingerprints: Iterable[int] | _U64,
        *,
        added_at: AddedAt = None,
    ) -> None:
        """:meth:`Index.add_compact <permindex.index.Index.add_compact>` at ``added_at`` (as
        :meth:`add_many`).

        Examples:
            >>> from permindex import ExpiringIndex
            >>> index = ExpiringIndex(expire_after=60, clock=lambda: 1_000.0)
            >>> index.add_compact([1, 1], b"a\\x00b\\x00", [1, 2], added_at=990)
            >>> index.times(["a", "b"])
            [990, 990]
        """
        self.expire()
        sizes, raw, values = compact_inputs(lengths, blob, fingerprints)
        with self._writing(added_at, int(sizes.size)) as times:
            keys = add_section(self._rows, self._runs, sizes, raw, values, times)
            if keys is not None:  # maybe a repeated key: the exact path
                self.add_many(keys, values, added_at=times)

    def check_and_add(
        self, key: str, fingerprint: int, k: int | None = None, *, added_at: float | None = None
    ) -> CheckAndAddResult:
        """:meth:`Index.check_and_add <permindex.index.Index.check_and_add>` among the entries not
        expired, storing the key at ``added_at`` (None: now).

        Examples:
            >>> now = [1_000.0]
            >>> from permindex import ExpiringIndex
            >>> index = ExpiringIndex(expire_after=60, clock=lambda: now[0])
            >>> index.check_and_add("a", 0xFFFF).added
            True
            >>> index.check_and_add("b", 0xFFFE).added  # "a" is within 3 bits
            False
            >>> now[0] += 60  # "a" expired
            >>> index.check_and_add("b", 0xFFFE).added
            True
        """
        self.expire()
        with self._writing(added_at, 1) as times:
            return check_and_add(self, key, fingerprint, k, int(times[0]))

    def _before_call(self) -> None:
        """Expire the rows due (:meth:`expire`) before each public call of
        :class:`~permindex.index.Index` (its one hook)."""
        self.expire()

    # -- reads ----------------------------------------------------------------------------------

    def query_columns_within(
        self,
        fingerprints: Iterable[int] | _U64,
        k: int | None = None,
        limit: int | None = None,
        *,
        max_candidates: int,
        max_matches: int,
    ) -> QueryColumns | None:
        """:meth:`Index.query_columns_within
        <permindex.index.Index.query_columns_within>`, and None as well while rows are due to
        expire (expiring them is O(n): :meth:`query_many` does it).

        Examples:
            >>> from permindex import ExpiringIndex
            >>> index = ExpiringIndex(expire_after=60, clock=lambda: 1_000.0)
            >>> _ = index.add_many(["a", "b"], [1, 2], added_at=990)
            >>> _ = index.query_many([0] * 9)  # the read view the next call reuses
            >>> index.query_columns_within([1] * 9, max_candidates=1_000, max_matches=100).keys[:2]
            ['a', 'b']
        """
        if self.is_expired(self._oldest):
            return None
        return super().query_columns_within(
            fingerprints, k, limit, max_candidates=max_candidates, max_matches=max_matches
        )

    def export_timed_slices(
        self, rows_per_slice: int = 1 << 14
    ) -> list[tuple[NDArray[np.int64], NDArray[np.uint8], _U64, _U32]]:
        """:meth:`Index.export_slices <permindex.index.Index.export_slices>` (its contract),
        each slice with the (m,) uint32 times of its keys: what a snapshot writes.

        Examples:
            >>> from permindex import ExpiringIndex
            >>> index = ExpiringIndex(expire_after=60, clock=lambda: 1_000.0)
            >>> _ = index.add_many(["a", "b"], [1, 2], added_at=990)
            >>> [(keys.tobytes(), times.tolist())
            ...  for _, keys, _, times in index.export_timed_slices(rows_per_slice=1)]
            [(b'a\\x00', [990]), (b'b\\x00', [990])]
        """
        self.expire()
        parts = export_slices(self._rows, self._store, max(1, int(rows_per_slice)))
        if parts is None:
            return [self._timed_copy()]
        return [(a, b, c, _times_of(d)) for a, b, c, d in parts]

    def export_timed_compact(self) -> tuple[NDArray[np.int64], NDArray[np.uint8], _U64, _U32]:
        """:meth:`export_compact` (one consistent copy, under the lock) with the (n,) uint32
        times of its keys, Unix seconds: what the server's Export sends. O(n + key bytes).

        Examples:
            >>> from permindex import ExpiringIndex
            >>> index = ExpiringIndex(expire_after=60, clock=lambda: 1_000.0)
            >>> _ = index.add_many(["a", "b"], [1, 2], added_at=990)
            >>> lengths, keys, fps, times = index.export_timed_compact()
            >>> lengths.tolist(), keys.tobytes(), fps.tolist(), times.tolist()
            ([1, 1], b'a\\x00b\\x00', [1, 2], [990, 990])
        """
        self.expire()
        return self._timed_copy()

    def _timed_copy(self) -> tuple[NDArray[np.int64], NDArray[np.uint8], _U64, _U32]:
        with self._lock:
            live = self._rows.live_rows()
            lengths, blob = self._store.export(live)
            return lengths, blob, self._rows.fps[live], _times_of(self._rows.times)[live]


def _times_of(times: _U32 | None) -> _U32:
    assert times is not None  # an expiring index keeps times
    return times
