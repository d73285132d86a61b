"""The index's keys, compactly: every key's UTF-8 bytes in one growing buffer, and an
open-addressing hash table from key to row, all in numpy arrays (no Python object per key).

A Python dict of 10^8 short str keys takes about 13 GB (a str object of ~60 bytes, a dict entry,
an int per value); this store keeps ``doc-00000001`` (12 bytes) in about 40 bytes, so 10^8 keys fit
in about 4 GB beside the tables.

Layout, by row (the index's row numbers: a key is stored once per row, and a row's key never
changes):

* ``data`` ((capacity,) uint8): the keys' UTF-8 bytes, each followed by a NUL byte, in row order;
  a key may itself contain NUL (the offsets, not the terminators, delimit keys);
* ``offsets`` ((rows + 1,) int64): row r's key is ``data[offsets[r]:offsets[r + 1] - 1]``;
* ``hashes`` ((rows,) uint64): XXH3-64 (seed 0) of each row's key bytes;
* ``born`` ((rows,) uint32): the rank of the key's first addition, so that iteration gives keys in
  the order they were first added even after a replacement moved them to a new row;
* ``slots`` ((2^s,) uint32): the hash table, linear probing from ``hash & (2^s - 1)``; a slot holds
  row + 1, or 0 when empty. Only live rows are in it: when a key is removed its slot is emptied
  with backward-shift deletion (Knuth, TAOCP vol. 3, 6.4, Algorithm R), so there are no tombstones
  and probe sequences stay short; when a key moves to a new row (replacement) its slot is
  rewritten. The table doubles when live keys exceed half its slots (load <= 1/2).

A lookup hashes the key, probes slots, and accepts a row only when both its stored hash and its
bytes are equal to the key's, so a hash collision (tested by forcing one) costs a probe, never a
wrong answer. Dead rows keep their bytes until :meth:`KeyStore.compact` (called by the index when
dead rows outnumber live ones) renumbers the rows.

Costs: single :meth:`find` / :meth:`append` / :meth:`unlink` O(1) expected Python operations;
:meth:`find_many` / :meth:`append_many` O(n + bytes) numpy work in a few probing rounds (the
longest probe sequence); :meth:`compact` and growth O(rows + bytes). Bytes per key: its UTF-8
length + 1, plus 8 (offset) + 8 (hash) + 4 (born) + 8 to 16 (slots) — about 40 for 12-byte keys.

Not thread-safe: the index serializes access.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple, TypeVar

import numpy as np
from numpy.typing import NDArray
from xxhash import xxh3_64_intdigest

__all__ = [
    "EncodedKeys",
    "Growth",
    "KeyStore",
    "ahead_capacity",
    "batch_subset",
    "encode_keys",
    "first_utf8_error",
    "hash_key",
    "hash_many",
    "nearly_full",
    "next_capacity",
]

_MIN_SLOTS = 16
_LINK, _UNLINK, _RELINK = 0, 1, 2  # changes to the hash table recorded while a growth is prepared
_U8 = NDArray[np.uint8]
_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]


def hash_key(data: bytes) -> int:
    """XXH3-64 (seed 0) of a key's UTF-8 bytes, the hash the store is addressed by."""
    return int(xxh3_64_intdigest(data))


def hash_many(keys: Iterable[bytes | memoryview], count: int) -> _U64:
    """:func:`hash_key` of each of the ``count`` UTF-8 encoded ``keys``, as (n,) uint64."""
    return np.fromiter(map(xxh3_64_intdigest, keys), np.uint64, count)


class EncodedKeys(NamedTuple):
    """A batch of keys as the store takes them.

    Attributes:
        blob: every key's UTF-8 bytes followed by a NUL, concatenated ((m,) uint8).
        ends: (n,) int64; key i is ``blob[ends[i - 1]:ends[i] - 1]`` (ends[-1] = m).
        hashes: (n,) uint64, XXH3-64 of each key's bytes.
    """

    blob: _U8
    ends: _I64
    hashes: _U64

    @property
    def lengths(self) -> _I64:
        """(n,) int64 UTF-8 byte lengths (terminators excluded)."""
        return np.diff(self.ends, prepend=0) - 1


def encode_keys(keys: Sequence[str]) -> EncodedKeys:
    """Encode str keys for the store: one join and one encode for the whole batch (C loops), the
    key boundaries read off the NUL terminators (one encode per key only when a key contains NUL),
    and one XXH3 call per key.

    Raises TypeError when an element is not a str and UnicodeEncodeError when one is not
    encodable; the caller validates first to name the offending position."""
    n = len(keys)
    if n == 0:
        return EncodedKeys(np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.uint64))
    raw = "\x00".join(itertools.chain(keys, ("",))).encode("utf-8")
    blob = np.frombuffer(raw, dtype=np.uint8)
    ends = np.flatnonzero(blob == 0)
    if ends.size == n:
        ends += 1
        encoded: Sequence[bytes] | None = None
    else:  # a key holds NUL: lengths from the keys themselves
        encoded = [key.encode("utf-8") for key in keys]
        ends = np.cumsum(np.fromiter(map(len, encoded), np.int64, n) + 1)
    if encoded is None:
        encoded_iter = map(str.encode, keys)
        hashes = np.fromiter(map(xxh3_64_intdigest, encoded_iter), np.uint64, n)
    else:
        hashes = np.fromiter(map(xxh3_64_intdigest, encoded), np.uint64, n)
    return EncodedKeys(blob, ends.astype(np.int64, copy=False), hashes)


def batch_subset(batch: EncodedKeys, positions: _I64) -> EncodedKeys:
    """The keys of ``batch`` at ``positions`` (increasing), as a new batch."""
    starts = np.concatenate(([0], batch.ends[:-1])).astype(np.int64)[positions]
    sizes = batch.ends[positions] - starts
    blob = batch.blob[_ragged_positions(starts, sizes)] if positions.size else batch.blob[:0]
    return EncodedKeys(blob, np.cumsum(sizes), batch.hashes[positions])


def _ragged_positions(starts: _I64, lengths: _I64) -> _I64:
    """Concatenated ``arange(starts[i], starts[i] + lengths[i])`` for every i (lengths >= 1)."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    out = np.ones(total, dtype=np.int64)
    out[0] = starts[0]
    if lengths.size > 1:
        # At each segment's first position jump from the previous segment's last position.
        out[ends[:-1]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return np.cumsum(out)


@dataclass(eq=False)
class Growth:
    """Bigger arrays for a :class:`KeyStore`, prepared without holding the index's lock: begun
    under the lock (:meth:`KeyStore.begin_growth`), filled without it
    (:meth:`KeyStore.prepare_growth`), swapped in under it (:meth:`KeyStore.finish_growth`).

    Rows, hashes, births, offsets and key bytes are append-only, so the first ``rows`` rows of
    the arrays taken at the beginning (``sources``) never change and are copied without the lock;
    the rows appended meanwhile are copied at the end. The hash table is rebuilt from the rows
    linked at the beginning; every link, unlink and relink made meanwhile is recorded in
    ``journal`` and replayed on the new table at the end. A compaction (which renumbers rows)
    abandons the growth.
    """

    rows: int  # rows appended at the beginning
    used: int  # key bytes used at the beginning
    row_capacity: int  # new capacity in rows (the current one: no growth)
    data_capacity: int  # new capacity in key bytes
    slot_count: int  # new hash table size (0: it keeps its size)
    sources: tuple[_U64, NDArray[np.uint32], _I64, _U8]  # hashes, born, offsets, data then
    journal: list[tuple[int, _I64, _I64 | None]] = field(default_factory=list)
    abandoned: bool = False
    prepared: bool = False
    row_arrays: tuple[_U64, NDArray[np.uint32], _I64] | None = None  # hashes, born, offsets
    data: _U8 | None = None
    slots: NDArray[np.uint32] | None = None


class KeyStore:
    """Keys by row with a key → row hash table; see the module docstring for the layout.

    The index appends a row for every stored fingerprint; the store holds that row's key. A key is
    *linked* (findable) on one live row at a time.
    """

    __slots__ = (
        "_born",
        "_data",
        "_data_mv",
        "_growth",
        "_hash_mv",
        "_hashes",
        "_live",
        "_mask",
        "_next_born",
        "_off_mv",
        "_offsets",
        "_rows",
        "_slot_mv",
        "_slots",
    )

    def __init__(self) -> None:
        self._rows = 0  # rows appended (live and dead)
        self._live = 0  # keys linked in the hash table
        self._next_born = 0
        self._data: _U8 = np.zeros(1024, dtype=np.uint8)
        self._offsets: _I64 = np.zeros(65, dtype=np.int64)
        self._hashes: _U64 = np.zeros(64, dtype=np.uint64)
        self._born: NDArray[np.uint32] = np.zeros(64, dtype=np.uint32)
        self._slots: NDArray[np.uint32] = np.zeros(_MIN_SLOTS, dtype=np.uint32)
        self._mask = _MIN_SLOTS - 1
        self._growth: Growth | None = None  # a growth being prepared off the lock
        self._views()

    def _views(self) -> None:
        # memoryviews give Python ints on indexing, without numpy scalar overhead (single ops).
        self._data_mv = self._data.data
        self._off_mv = self._offsets.data
        self._hash_mv = self._hashes.data
        self._slot_mv = self._slots.data

    # -- sizes ------------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys linked (live)."""
        return self._live

    @property
    def rows(self) -> int:
        """Rows appended, dead ones included."""
        return self._rows

    def nbytes(self) -> int:
        """Bytes of every array, by capacity."""
        return int(
            self._data.nbytes
            + self._offsets.nbytes
            + self._hashes.nbytes
            + self._born.nbytes
            + self._slots.nbytes
        )

    # -- growth -----------------------------------------------------------------------------

    def _reserve(self, rows: int, data_bytes: int) -> None:
        """Room for ``rows`` more rows and ``data_bytes`` more key bytes (:func:`next_capacity`)."""
        need = self._rows + rows
        if need > self._hashes.size:
            capacity = next_capacity(need, self._hashes.size)
            self._hashes = _grown(self._hashes, capacity, self._rows)
            self._born = _grown(self._born, capacity, self._rows)
            self._offsets = _grown(self._offsets, capacity + 1, self._rows + 1)
        used = int(self._offsets[self._rows])
        if used + data_bytes > self._data.size:
            capacity = next_capacity(used + data_bytes, self._data.size)
            self._data = _grown(self._data, capacity, used)
        self._views()

    def _ensure_slots(self, extra: int) -> None:
        """Double the hash table until ``live + extra`` keys keep the load at most 1/2."""
        size = self._slots.size
        target = 2 * (self._live + extra)
        if target <= size:
            return
        while size < target:
            size *= 2
        linked = self._slots[self._slots != 0].astype(np.int64) - 1
        self._slots = np.zeros(size, dtype=np.uint32)
        self._mask = size - 1
        self._slot_mv = self._slots.data
        self._link_many(linked)

    def fits(self, rows: int, data_bytes: int) -> bool:
        """Whether ``rows`` more rows with ``data_bytes`` more key bytes fit without growing any
        array (the hash table included, counting each row as a new key). Exact when the caller
        holds the index's lock; a hint otherwise."""
        return (
            self._rows + rows <= self._hashes.size
            and int(self._offsets[self._rows]) + data_bytes <= self._data.size
            and 2 * (self._live + rows) <= self._slots.size
        )

    def growth_wanted(self) -> bool:
        """Whether growing ahead is due: rows or key bytes above 7/8 of their capacity, or live
        keys above 2/5 of the hash table's slots (it doubles inline above 1/2)."""
        return (
            nearly_full(self._rows, self._hashes.size)
            or nearly_full(int(self._offsets[self._rows]), self._data.size)
            or 5 * self._live > 2 * self._slots.size
        )

    def begin_growth(self, rows: int = 0, data_bytes: int = 0) -> Growth:
        """Begin growing (the caller holds the index's lock; O(1)) so that ``rows`` more rows
        (new keys) with ``data_bytes`` more key bytes fit, and ahead of that: arrays past 7/8
        of their capacity grow by half, the hash table past a load of 2/5 doubles. Record every
        change to the hash table from now until :meth:`finish_growth`. Replaces a growth begun
        earlier and not finished (which is then abandoned)."""
        if self._growth is not None:
            self._growth.abandoned = True
        row_capacity = ahead_capacity(self._rows, rows, self._hashes.size)
        used = int(self._offsets[self._rows])
        data_capacity = ahead_capacity(used, data_bytes, self._data.size)
        slot_count = self._slots.size
        if 5 * self._live > 2 * slot_count:
            slot_count *= 2
        while 2 * (self._live + rows) > slot_count:
            slot_count *= 2
        if slot_count == self._slots.size:
            slot_count = 0
        growth = Growth(
            rows=self._rows,
            used=used,
            row_capacity=row_capacity,
            data_capacity=data_capacity,
            slot_count=slot_count,
            sources=(self._hashes, self._born, self._offsets, self._data),
        )
        self._growth = growth
        return growth

    @staticmethod
    def prepare_growth(growth: Growth, linked: _I64) -> None:
        """Fill ``growth``'s arrays: copy the rows it began with and, when the hash table grows,
        link ``linked`` ((m,) int64: the rows linked when it began, the live rows below
        ``growth.rows``) into a new one. Reads only what never changes, so it runs without the
        index's lock (and without the GIL for most of its time: numpy copies). O(rows + bytes)."""
        hashes, born, offsets, data = growth.sources
        rows, used = growth.rows, growth.used
        if growth.row_capacity > hashes.size:
            growth.row_arrays = (
                _grown(hashes, growth.row_capacity, rows),
                _grown(born, growth.row_capacity, rows),
                _grown(offsets, growth.row_capacity + 1, rows + 1),
            )
        if growth.data_capacity > data.size:
            growth.data = _grown(data, growth.data_capacity, used)
        if growth.slot_count > 0:
            slots = np.zeros(growth.slot_count, dtype=np.uint32)
            _link_rows(slots, growth.slot_count - 1, hashes, linked)
            growth.slots = slots
        growth.prepared = True

    def finish_growth(self, growth: Growth) -> bool:
        """Swap in ``growth``'s arrays (the caller holds the index's lock): copy the rows
        appended since it began and replay the hash table's changes since then on the new
        table. An array the store already outgrew inline meanwhile is left as it is. Returns
        False (nothing changes) when the growth was abandoned (a compaction, or a newer
        growth) or not prepared. O(rows and bytes appended meanwhile + changes meanwhile)."""
        if growth.abandoned or not growth.prepared or self._growth is not growth:
            return False
        self._growth = None
        rows, used = growth.rows, growth.used
        now_rows = self._rows
        now_used = int(self._offsets[now_rows])
        if growth.row_arrays is not None and growth.row_capacity > self._hashes.size:
            hashes, born, offsets = growth.row_arrays
            hashes[rows:now_rows] = self._hashes[rows:now_rows]
            born[rows:now_rows] = self._born[rows:now_rows]
            offsets[rows + 1 : now_rows + 1] = self._offsets[rows + 1 : now_rows + 1]
            self._hashes, self._born, self._offsets = hashes, born, offsets
        if growth.data is not None and growth.data_capacity > self._data.size:
            growth.data[used:now_used] = self._data[used:now_used]
            self._data = growth.data
        if growth.slots is not None and growth.slots.size > self._slots.size:
            self._slots = growth.slots
            self._mask = growth.slots.size - 1
            self._views()
            for change, first, second in growth.journal:
                if change == _LINK:
                    self._link_many(first)
                elif change == _UNLINK:
                    self._unlink_slot(int(first[0]))
                else:
                    assert second is not None
                    self._relink_many(first, second)
        self._views()
        return True

    # -- single keys ------------------------------------------------------------------------

    def find(self, key: bytes, h: int) -> int:
        """The live row holding ``key`` (UTF-8 bytes, hash ``h``), or -1."""
        slots = self._slot_mv
        hashes = self._hash_mv
        offsets = self._off_mv
        data = self._data_mv
        mask = self._mask
        size = len(key) + 1
        i = h & mask
        while True:
            v = slots[i]
            if not v:
                return -1
            row = v - 1
            if hashes[row] == h:
                start = offsets[row]
                if offsets[row + 1] - start == size and data[start : start + size - 1] == key:
                    return row
            i = (i + 1) & mask

    def append(self, key: bytes, h: int, *, moved_from: int = -1) -> int:
        """Store ``key`` (UTF-8 bytes, hash ``h``, not linked now) on a new row and link it;
        returns the row. ``moved_from``: the key's previous row, already unlinked (a
        replacement keeps its first-added rank)."""
        size = len(key)
        self._reserve(1, size + 1)
        self._ensure_slots(1)
        row = self._rows
        start = self._off_mv[row]
        self._data_mv[start : start + size] = key
        self._data_mv[start + size] = 0
        self._off_mv[row + 1] = start + size + 1
        self._hash_mv[row] = h
        if moved_from >= 0:
            self._born[row] = self._born[moved_from]
        else:
            self._born[row] = self._next_born
            self._next_born += 1
        self._rows = row + 1
        slots = self._slot_mv
        mask = self._mask
        i = h & mask
        while slots[i]:
            i = (i + 1) & mask
        slots[i] = row + 1
        self._live += 1
        if self._growth is not None:
            self._growth.journal.append((_LINK, np.array([row], dtype=np.int64), None))
        return row

    def unlink(self, row: int) -> None:
        """Make the live ``row``'s key unfindable (removal, or before a replacement's append):
        backward-shift deletion from its slot. O(cluster) Python steps."""
        self._unlink_slot(row)
        self._live -= 1
        if self._growth is not None:
            self._growth.journal.append((_UNLINK, np.array([row], dtype=np.int64), None))

    def _unlink_slot(self, row: int) -> None:
        """Empty the slot of the linked ``row`` by backward-shift deletion (Knuth's
        Algorithm R)."""
        slots = self._slot_mv
        hashes = self._hash_mv
        mask = self._mask
        target = row + 1
        i = hashes[row] & mask
        while slots[i] != target:
            if not slots[i]:
                raise KeyError(row)
            i = (i + 1) & mask
        j = i
        while True:
            j = (j + 1) & mask
            v = slots[j]
            if not v:
                break
            home = hashes[v - 1] & mask
            # The entry at j may move to the hole at i unless its home lies cyclically in (i, j].
            if (i < j and (home <= i or home > j)) or (i > j and home <= i and home > j):
                slots[i] = v
                i = j
        slots[i] = 0

    def key(self, row: int) -> str:
        """The key of ``row`` (live or dead), decoded."""
        offsets = self._off_mv
        return str(self._data_mv[offsets[row] : offsets[row + 1] - 1], "utf-8")

    def key_bytes(self, row: int) -> bytes:
        """The UTF-8 bytes of ``row``'s key."""
        offsets = self._off_mv
        return bytes(self._data_mv[offsets[row] : offsets[row + 1] - 1])

    def hash_of(self, row: int) -> int:
        """The stored XXH3-64 of ``row``'s key."""
        return int(self._hash_mv[row])

    # -- batches ----------------------------------------------------------------------------

    def find_many(self, batch: EncodedKeys) -> _I64:
        """(n,) int64: the live row holding each key of ``batch``, or -1. Vectorized linear
        probing: each round reads one slot per unresolved key and verifies the rows whose hash
        matches against the key bytes."""
        n = int(batch.hashes.size)
        out = np.full(n, -1, dtype=np.int64)
        if n == 0 or self._live == 0:
            return out
        starts = np.concatenate(([0], batch.ends[:-1])).astype(np.int64)
        sizes = batch.ends - starts
        pending = np.arange(n, dtype=np.int64)
        hashes = batch.hashes
        mask = np.uint64(self._mask)
        pos = (hashes & mask).astype(np.int64)
        while pending.size:
            v = self._slots[pos].astype(np.int64)
            occupied = v != 0
            rows = v - 1
            same = occupied.copy()
            same[occupied] = self._hashes[rows[occupied]] == hashes[pending[occupied]]
            if same.any():
                which = np.flatnonzero(same)
                equal = self._equal_bytes(
                    batch.blob, starts[pending[which]], sizes[pending[which]], rows[which]
                )
                out[pending[which[equal]]] = rows[which[equal]]
                occupied[which[equal]] = False  # found: stop probing
            pending = pending[occupied]
            pos = (pos[occupied] + 1) & self._mask
        return out

    def _equal_bytes(self, blob: _U8, starts: _I64, sizes: _I64, rows: _I64) -> NDArray[np.bool_]:
        """For each i: whether ``blob[starts[i]:starts[i] + sizes[i]]`` equals row ``rows[i]``'s
        stored bytes (terminators included, so equal sizes are required)."""
        stored_starts = self._offsets[rows]
        stored_sizes = self._offsets[rows + 1] - stored_starts
        result = stored_sizes == sizes
        check = np.flatnonzero(result)
        if check.size:
            lengths = sizes[check]
            a = blob[_ragged_positions(starts[check], lengths)]
            b = self._data[_ragged_positions(stored_starts[check], lengths)]
            boundaries = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            mismatches = np.add.reduceat((a != b).astype(np.int64), boundaries)
            result[check] = mismatches == 0
        return np.asarray(result, dtype=bool)

    def append_many(self, batch: EncodedKeys, moved_from: _I64 | None = None) -> int:
        """Store the keys of ``batch`` (distinct, none linked now) on consecutive new rows and link
        them; returns the first row. ``moved_from`` ((n,) int64, -1 for new keys): each key's
        previous row, already unlinked (keeps its first-added rank)."""
        n = int(batch.hashes.size)
        first = self._rows
        if n == 0:
            return first
        new = np.ones(n, dtype=bool) if moved_from is None else moved_from < 0
        count = int(new.sum())
        used = int(self._offsets[first])
        self._reserve(n, int(batch.blob.size))
        self._ensure_slots(count)
        self._data[used : used + batch.blob.size] = batch.blob
        self._offsets[first + 1 : first + n + 1] = batch.ends + used
        self._hashes[first : first + n] = batch.hashes
        born = self._born[first : first + n]
        rows = np.arange(first, first + n, dtype=np.int64)
        if moved_from is None:
            born[:] = np.arange(self._next_born, self._next_born + n, dtype=np.uint32)
            self._link_many(rows)
        else:
            born[new] = np.arange(self._next_born, self._next_born + count, dtype=np.uint32)
            moved = ~new
            born[moved] = self._born[moved_from[moved]]
            self._relink_many(moved_from[moved], rows[moved])
            self._link_many(rows[new])
        if self._growth is not None:
            journal = self._growth.journal
            if moved_from is None:
                journal.append((_LINK, rows, None))
            else:
                journal.append((_RELINK, moved_from[~new], rows[~new]))
                journal.append((_LINK, rows[new], None))
        self._next_born += count
        self._rows = first + n
        self._live += count
        return first

    def _link_many(self, rows: _I64) -> None:
        """Put ``rows`` (distinct, not linked) into free slots: vectorized linear probing, one
        round per probe step; of several rows aiming at one free slot, one wins and the others
        move on."""
        _link_rows(self._slots, self._mask, self._hashes, rows)

    def _relink_many(self, old_rows: _I64, new_rows: _I64) -> None:
        """Point the slots of linked ``old_rows`` at ``new_rows`` (the same keys on new rows);
        the old rows become unfindable. Vectorized probing."""
        mask = self._mask
        slots = self._slots
        pos = (self._hashes[old_rows] & np.uint64(mask)).astype(np.int64)
        old_tag = (old_rows + 1).astype(np.uint32)
        new_tag = (new_rows + 1).astype(np.uint32)
        while old_rows.size:
            hit = slots[pos] == old_tag
            slots[pos[hit]] = new_tag[hit]
            left = ~hit
            old_rows, old_tag, new_tag = old_rows[left], old_tag[left], new_tag[left]
            pos = (pos[left] + 1) & mask

    # -- reading keys -----------------------------------------------------------------------

    def keys(self, rows: NDArray[np.integer] | Sequence[int]) -> list[str]:
        """The keys of ``rows`` (any order, repeats allowed), decoded: few rows one by one, many
        rows gathered into one buffer, decoded once and split at the NULs; a repeated row is
        decoded once (its str object shared)."""
        rows = np.asarray(rows, dtype=np.int64)
        n = int(rows.size)
        if n == 0:
            return []
        if n <= 32:
            key = self.key
            return [key(row) for row in rows.tolist()]
        unique, inverse = np.unique(rows, return_inverse=True)
        if unique.size < n:  # repeats (one key matching many queries): decode each row once
            decoded = self.keys(unique)
            return [decoded[i] for i in inverse.tolist()]
        starts = self._offsets[rows]
        sizes = self._offsets[rows + 1] - starts
        return _split(self._data[_ragged_positions(starts, sizes)], sizes)

    def live_keys(self, live: NDArray[np.bool_]) -> list[str]:
        """The keys of the rows where ``live`` ((rows,) bool) is set, in row order, decoded in one
        pass (a boolean mask over the bytes, no per-byte index array)."""
        n = self._rows
        count = int(live[:n].sum())
        if count == 0:
            return []
        used = int(self._offsets[n])
        sizes = np.diff(self._offsets[: n + 1])
        if count == n:
            return _split(self._data[:used], sizes)
        return _split(self._data[:used][np.repeat(live[:n], sizes)], sizes[live[:n]])

    def export(self, rows: _I64) -> tuple[_I64, _U8]:
        """The keys of ``rows`` in compact form: ((m,) int64 UTF-8 lengths, the bytes of every
        key each followed by a NUL, concatenated) -- the layout of a snapshot's key section."""
        starts = self._offsets[rows]
        sizes = self._offsets[rows + 1] - starts
        if rows.size == self._rows and (rows.size == 0 or bool((np.diff(rows) == 1).all())):
            raw = self._data[: int(self._offsets[self._rows])].copy()
        else:
            raw = self._data[_ragged_positions(starts, sizes)] if rows.size else self._data[:0]
        return sizes - 1, raw

    def iteration_order(self, rows: _I64) -> _I64:
        """``rows`` reordered by the first-added rank of their keys."""
        return rows[np.argsort(self._born[rows], kind="stable")]

    # -- compaction and invariants -------------------------------------------------------------

    def compact(self, keep: _I64) -> None:
        """Keep only the rows ``keep`` (increasing, all linked), renumbered 0..m-1 in order. A
        growth being prepared is abandoned (:meth:`finish_growth` then returns False)."""
        if self._growth is not None:
            self._growth.abandoned = True
            self._growth = None
        m = int(keep.size)
        starts = self._offsets[keep]
        sizes = self._offsets[keep + 1] - starts
        total = int(sizes.sum())
        data = np.zeros(max(1024, total + total // 4), dtype=np.uint8)
        if m:
            data[:total] = self._data[_ragged_positions(starts, sizes)]
        capacity = max(64, m + m // 4)
        offsets = np.zeros(capacity + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1 : m + 1])
        hashes = np.zeros(capacity, dtype=np.uint64)
        hashes[:m] = self._hashes[keep]
        born = np.zeros(capacity, dtype=np.uint32)
        ranks = np.argsort(np.argsort(self._born[keep], kind="stable"), kind="stable")
        born[:m] = ranks.astype(np.uint32)
        self._data, self._offsets, self._hashes, self._born = data, offsets, hashes, born
        self._rows = m
        self._live = m
        self._next_born = m
        size = _MIN_SLOTS
        while size < 2 * m:
            size *= 2
        self._slots = np.zeros(size, dtype=np.uint32)
        self._mask = size - 1
        self._views()
        self._link_many(np.arange(m, dtype=np.int64))

    def linked_rows(self) -> _I64:
        """Every linked row, ascending."""
        return np.sort(self._slots[self._slots != 0].astype(np.int64) - 1)

    def _check(self) -> list[str]:
        """Problems found in O(rows + bytes) (empty when every invariant holds): offsets
        increasing with a NUL at each key's end, hashes equal to the keys', births distinct for
        linked rows, every linked row findable from its home slot within its cluster, the live
        count, the load bound."""
        problems: list[str] = []
        n = self._rows
        offsets = self._offsets[: n + 1]
        if offsets[0] != 0 or not bool((np.diff(offsets) >= 2).all()):
            problems.append("key offsets are not increasing by at least 2")
            return problems
        if n and not bool((self._data[offsets[1:] - 1] == 0).all()):
            problems.append("a key is not NUL-terminated")
        for row in range(n):
            if hash_key(self.key_bytes(row)) != int(self._hashes[row]):
                problems.append(f"row {row}: stored hash is not the key's")
                break
        linked = self.linked_rows()
        if linked.size != self._live:
            problems.append(f"{linked.size} linked rows, live count {self._live}")
        if linked.size and (int(linked[-1]) >= n or bool((np.diff(linked) == 0).any())):
            problems.append("a slot holds a row twice or beyond the rows")
        if 2 * self._live > self._slots.size:
            problems.append("hash table more than half full")
        if linked.size != np.unique(self._born[linked]).size:
            problems.append("two linked keys share a first-added rank")
        for row in linked.tolist():
            if self.find(self.key_bytes(row), int(self._hashes[row])) != row:
                problems.append(f"row {row} is linked but not found by its key")
                break
        keys = [self.key_bytes(row) for row in linked.tolist()]
        if len(set(keys)) != len(keys):
            problems.append("a key is linked on two rows")
        return problems


_A = TypeVar("_A", bound=np.generic)


def first_utf8_error(view: memoryview, ends: _I64, slice_bytes: int) -> tuple[int, str] | None:
    """Where a key section (``view``: every key's UTF-8 bytes then a NUL; ``ends``: (n,) int64,
    one past each key's NUL, n >= 1) is not valid UTF-8: (byte offset in the section, reason), or
    None. Decoded about ``slice_bytes`` at a time, each slice cut after a NUL (a character
    boundary), so that no str of the whole section is made."""
    size = len(view)
    cuts = np.searchsorted(ends, np.arange(1, size // slice_bytes + 1) * slice_bytes)
    bounds = sorted({0, *ends[np.minimum(cuts, ends.size - 1)].tolist(), size})
    for lo, hi in itertools.pairwise(bounds):
        try:
            str(view[lo:hi], "utf-8")
        except UnicodeDecodeError as error:
            return lo + error.start, error.reason
    return None


def nearly_full(used: int, capacity: int) -> bool:
    """Whether an array of ``capacity`` elements with ``used`` in use is past 7/8 full: the
    point where a growth ahead of need starts (:class:`Growth`)."""
    return 8 * used > 7 * capacity


def ahead_capacity(used: int, extra: int, capacity: int) -> int:
    """The capacity a growth ahead of need gives an array of ``capacity`` elements with
    ``used`` in use: half as much again when it is :func:`nearly_full`, else the same, and in
    any case room for ``extra`` more."""
    grown = capacity + capacity // 2 if nearly_full(used, capacity) else capacity
    return max(grown, used + extra)


def next_capacity(need: int, capacity: int) -> int:
    """The capacity an array of ``capacity`` elements grows to when ``need`` must fit: half as
    much again (amortized O(1) appends), or ``need`` plus an eighth when a bulk write needs more
    than that -- room for the writes that follow it, so that the first small write after loading
    10^7 keys does not wait for a growth (it starts one in the background instead, see
    :class:`Growth`)."""
    grown = capacity + capacity // 2
    return max(grown, need) if need <= grown else need + need // 8


def _link_rows(slots: NDArray[np.uint32], mask: int, hashes: _U64, rows: _I64) -> None:
    """Put ``rows`` (distinct, not in ``slots``) into free slots of the table ``slots`` (size
    mask + 1) by their ``hashes``: vectorized linear probing, one round per probe step; of
    several rows aiming at one free slot, one wins and the others move on."""
    pos = (hashes[rows] & np.uint64(mask)).astype(np.int64)
    tag = (rows + 1).astype(np.uint32)
    while rows.size:
        free = slots[pos] == 0
        slots[pos[free]] = tag[free]
        won = free & (slots[pos] == tag)
        left = ~won
        rows, tag = rows[left], tag[left]
        pos = (pos[left] + 1) & mask


def _grown(array: NDArray[_A], capacity: int, used: int) -> NDArray[_A]:
    out = np.zeros(capacity, dtype=array.dtype)
    out[:used] = array[:used]
    return out


def _split(raw: _U8, sizes: _I64) -> list[str]:
    """Decode the keys concatenated in ``raw``, each of ``sizes[i]`` bytes with its NUL: one
    decode and one split at the NULs, or one decode per key when a key itself contains NUL."""
    n = int(sizes.size)
    data = raw.tobytes()
    if data.count(0) == n:
        parts = data.decode("utf-8").split("\x00")
        parts.pop()  # the empty string after the last NUL
        return parts
    out: list[str] = []
    start = 0
    for size in sizes.tolist():
        out.append(data[start : start + size - 1].decode("utf-8"))
        start += size
    return out
