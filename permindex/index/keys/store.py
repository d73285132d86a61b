"""The index's key store: each row's key, and the key -> live row lookup, in numpy arrays (no
Python object per key), growable without holding the index's lock.

:class:`KeyStore` is the public face the index uses; its parts are the rows
(:mod:`permindex.index.keys.rows`: key bytes, offsets, hashes, first-added ranks), the hash table
(:mod:`permindex.index.keys.hash_table`) and the growth off the lock
(:mod:`permindex.index.keys.growth`).
Keys are hashed in this module (XXH3-64, seed 0) and encoded as key sections
(:mod:`permindex.storage.key_section`).

Bytes per key: its UTF-8 length + 1, plus 8 (offset) + 8 (hash) + 4 (born) + 8 to 16 (slots).
Not thread-safe: the index serializes access.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray
from xxhash import xxh3_64_intdigest

from permindex.index.keys.growth import LINK, RELINK, UNLINK, Growth, prepare_growth
from permindex.index.keys.hash_table import EncodedKeys, KeyTable
from permindex.index.keys.rows import (
    ahead_capacity,
    capacity_after,
    nearly_full,
    next_capacity,
    ragged_positions,
)
from permindex.storage.key_section import encode_section, first_utf8_error

__all__ = [
    "EncodedKeys",
    "Growth",
    "KeyMemory",
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

_U8 = NDArray[np.uint8]
_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]


def hash_key(data: bytes) -> int:
    """XXH3-64 (seed 0) of a key's UTF-8 bytes, the hash the store is addressed by."""
    return int(xxh3_64_intdigest(data))


def hash_many(keys: Iterable[bytes | memoryview], count: int) -> _U64:
    """:func:`hash_key` of each of the ``count`` UTF-8 encoded ``keys``, as (n,) uint64."""
    return np.fromiter(map(xxh3_64_intdigest, keys), np.uint64, count)


def encode_keys(keys: Sequence[str]) -> EncodedKeys:
    """Encode str keys for the store: their key section and ends
    (:func:`~permindex.storage.key_section.encode_section`) and one XXH3 call per key. O(n + bytes).

    Raises TypeError when an element is not a str and UnicodeEncodeError when one is not
    encodable; the caller validates first to name the offending position."""
    n = len(keys)
    raw, ends = encode_section(keys)
    hashes = np.fromiter(map(xxh3_64_intdigest, map(str.encode, keys)), np.uint64, n)
    return EncodedKeys(np.frombuffer(raw, dtype=np.uint8), ends, hashes)


def batch_subset(batch: EncodedKeys, positions: _I64) -> EncodedKeys:
    """The keys of ``batch`` at ``positions`` ((m,) int64, increasing), as a new batch."""
    starts = np.concatenate(([0], batch.ends[:-1])).astype(np.int64)[positions]
    sizes = batch.ends[positions] - starts
    blob = batch.blob[ragged_positions(starts, sizes)] if positions.size else batch.blob[:0]
    return EncodedKeys(blob, np.cumsum(sizes), batch.hashes[positions])


class KeyMemory(NamedTuple):
    """The bytes of a key store's arrays, by capacity (:meth:`KeyStore.memory`)."""

    #: The keys' UTF-8 bytes, each ended by a NUL (``data``).
    key_bytes: int
    #: Where each row's key starts (``offsets``, 8 bytes a row).
    key_offsets: int
    #: Each row's XXH3-64 hash and first-added rank (12 bytes a row).
    key_hashes: int
    #: The key -> row hash table (open addressing, 4 bytes a slot, load at most 1/2).
    key_map: int


class KeyStore(KeyTable):
    """Keys by row with a key -> row hash table: the index appends a row for every stored
    fingerprint and the store holds that row's key; a key is *linked* (findable) on one live row
    at a time. Layout: :mod:`permindex.index.keys.rows` and :mod:`permindex.index.keys.hash_table`.

    Costs: :meth:`find` / :meth:`append` / :meth:`unlink` O(1) expected Python operations;
    :meth:`find_many` / :meth:`append_many` O(n + bytes) numpy work in a few probing rounds (the
    longest probe sequence); :meth:`compact` and growth O(rows + bytes).
    """

    __slots__ = ("_growth",)

    def __init__(self) -> None:
        self._growth: Growth | None = None  # a growth being prepared off the lock
        super().__init__()

    def nbytes(self) -> int:
        """Bytes of every array, by capacity."""
        return self._rows_nbytes() + int(self._slots.nbytes)

    def memory(self) -> KeyMemory:
        """:meth:`nbytes` by part (:class:`KeyMemory`). O(1)."""
        return KeyMemory(
            key_bytes=int(self._data.nbytes),
            key_offsets=int(self._offsets.nbytes),
            key_hashes=int(self._hashes.nbytes + self._born.nbytes),
            key_map=int(self._slots.nbytes),
        )

    def growth_bytes(self, rows: int, data_bytes: int, *, large: bool, small: bool) -> int:
        """How much :meth:`nbytes` may grow when ``rows`` more rows, each a new key, with
        ``data_bytes`` more key bytes (terminators included) are appended: each array at the
        capacity it may have after the write and its upkeep (:func:`capacity_after`; ``large``:
        the store grows ahead of need; ``small``: the write is small beside it, so a growth
        ahead follows it), the hash table doubled until its load is at most 1/2 (and once more
        when a growth ahead after the write would). An array
        that fits counts nothing (:meth:`nbytes` counts capacity); the copies alive while an
        array grows are not counted. O(log slots)."""
        size = int(self._hashes.size)
        per_row = self._hashes.itemsize + self._born.itemsize + self._offsets.itemsize
        grown = capacity_after(self._rows, rows, size, large=large, small=small)
        extra = (grown - size) * per_row
        used = int(self._offsets[self._rows])
        data = int(self._data.size)
        extra += capacity_after(used, data_bytes, data, large=large, small=small) - data
        slots = int(self._slots.size)
        live = self._live + rows
        ways = [(slots, live)]  # inline: doubled until the load is at most 1/2
        if large:  # grown ahead by a thread the write starts, noting it before or after it
            for noted in (self._live, live):
                ways.append((2 * slots if 5 * noted > 2 * slots else slots, noted + rows))
        grown_slots = 0
        for way, keys in ways:
            while way < 2 * keys:
                way *= 2
            if small and 5 * live > 2 * way:  # grown ahead after it
                way *= 2
            grown_slots = max(grown_slots, way)
        return extra + (grown_slots - slots) * self._slots.itemsize

    # -- writing ----------------------------------------------------------------------------

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
            self._growth.journal.append((LINK, np.array([row], dtype=np.int64), None))
        return row

    def unlink(self, row: int) -> None:
        """Make the live ``row``'s key unfindable (removal, or before a replacement's append):
        backward-shift deletion from its slot. O(cluster) Python steps."""
        self._unlink_slot(row)
        self._live -= 1
        if self._growth is not None:
            self._growth.journal.append((UNLINK, np.array([row], dtype=np.int64), None))

    def append_many(self, batch: EncodedKeys, moved_from: _I64 | None = None) -> int:
        """Store the keys of ``batch`` (distinct, none linked now) on consecutive new rows and link
        them; returns the first row. ``moved_from`` ((n,) int64, -1 for new keys): each key's
        previous row, still linked: its slot is pointed at the new row, which keeps its
        first-added rank.

        Raises:
            KeyError: a row of ``moved_from`` is not linked (a caller's error, raised instead
                of probing forever; the store is then left part-way, as ``_check`` reports).
        """
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
                journal.append((LINK, rows, None))
            else:
                journal.append((RELINK, moved_from[~new], rows[~new]))
                journal.append((LINK, rows[new], None))
        self._next_born += count
        self._rows = first + n
        self._live += count
        return first

    def compact(self, keep: _I64) -> None:
        """Keep only the rows ``keep`` ((m,) int64, increasing, all linked), renumbered 0..m-1 in
        order. A growth being prepared is abandoned (:meth:`finish_growth` then returns False).
        O(rows + bytes)."""
        if self._growth is not None:
            self._growth.abandoned = True
            self._growth = None
        self._compact_rows(keep)
        self._relink_all(int(keep.size))

    # -- growth off the lock ------------------------------------------------------------------

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
        """:func:`~permindex.index.keys.growth.prepare_growth`: fill ``growth``'s arrays without
        the index's lock."""
        prepare_growth(growth, linked)

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
                if change == LINK:
                    self._link_many(first)
                elif change == UNLINK:
                    self._unlink_slot(int(first[0]))
                else:
                    assert second is not None
                    self._relink_many(first, second)
        self._views()
        return True

    # -- invariants -----------------------------------------------------------------------------

    def _check(self) -> list[str]:
        """Problems found in O(rows + bytes) (empty when every invariant holds): of the rows
        (offsets increasing with a NUL at each key's end), hashes equal to the keys', of the
        table (births distinct for linked rows, every linked row findable from its home slot
        within its cluster, the live count, the load bound)."""
        problems = self._check_rows()
        if problems:
            return problems
        for row in range(self._rows):
            if hash_key(self.key_bytes(row)) != int(self._hashes[row]):
                problems.append(f"row {row}: stored hash is not the key's")
                break
        return problems + self._check_table()
