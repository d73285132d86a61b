"""The key store's hash table: key -> live row, open addressing over the rows of
:class:`~permindex.index.keys.rows.KeyRows`.

``slots`` ((2^s,) uint32) holds row + 1, or 0 when empty; a key's probe sequence is linear from
``hash & (2^s - 1)``. Only live rows are in it: a removed key's slot is emptied by backward-shift
deletion (Knuth, TAOCP vol. 3, 6.4, Algorithm R), so there are no tombstones; a key moved to a new
row (a replacement) has its slot rewritten. The table doubles when live keys would exceed half its
slots (load <= 1/2). A lookup accepts a row only when both its stored hash and its bytes equal
the key's, so a hash collision costs a probe, never a wrong answer.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.index.keys.rows import KeyRows

__all__ = ["MIN_SLOTS", "EncodedKeys", "KeyTable", "link_rows"]

#: Slots of an empty table.
MIN_SLOTS = 16

_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]


class EncodedKeys(NamedTuple):
    """A batch of keys as the store takes them (made by
    :func:`~permindex.index.keys.store.encode_keys`).

    Attributes:
        blob: the batch's key section (:mod:`permindex.storage.key_section`), (m,) uint8.
        ends: (n,) int64; key i is ``blob[ends[i - 1]:ends[i] - 1]`` (ends[-1] = m).
        hashes: (n,) uint64, XXH3-64 of each key's bytes.
    """

    blob: NDArray[np.uint8]
    ends: _I64
    hashes: _U64

    @property
    def lengths(self) -> _I64:
        """(n,) int64 UTF-8 byte lengths (terminators excluded)."""
        return np.diff(self.ends, prepend=0) - 1


class KeyTable(KeyRows):
    """Rows with a key -> row hash table (see the module docstring). A key is *linked*
    (findable) on one live row at a time.

    Costs: :meth:`find` and a single unlink O(1) expected Python operations; :meth:`find_many`
    and the batch links O(n + bytes) numpy work in as many rounds as the longest probe sequence.
    """

    __slots__ = ("_live", "_mask", "_slot_mv", "_slots")

    def __init__(self) -> None:
        self._live = 0  # keys linked in the hash table
        self._slots: NDArray[np.uint32] = np.zeros(MIN_SLOTS, dtype=np.uint32)
        self._mask = MIN_SLOTS - 1
        super().__init__()

    def _views(self) -> None:
        super()._views()
        self._slot_mv = self._slots.data

    def __len__(self) -> int:
        """Keys linked (live)."""
        return self._live

    def _set_slots(self, slots: NDArray[np.uint32]) -> None:
        """Make ``slots`` (a power-of-two size) the table, its mask and view."""
        self._slots = slots
        self._mask = slots.size - 1
        self._slot_mv = slots.data

    def _ensure_slots(self, extra: int) -> None:
        """Double the hash table until ``live + extra`` keys keep the load at most 1/2."""
        size = self._slots.size
        target = 2 * (self._live + extra)
        if target <= size:
            return
        while size < target:
            size *= 2
        linked = self._slots[self._slots != 0].astype(np.int64) - 1
        self._set_slots(np.zeros(size, dtype=np.uint32))
        self._link_many(linked)

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

    def _unlink_slot(self, row: int) -> None:
        """Empty the slot of the linked ``row`` by backward-shift deletion (Knuth's
        Algorithm R). KeyError when ``row`` is not linked."""
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

    # -- batches ----------------------------------------------------------------------------

    def find_many(self, batch: EncodedKeys) -> _I64:
        """(n,) int64: the live row holding each key of ``batch``, or -1. Vectorized linear
        probing: each round reads one slot per unresolved key and verifies the rows whose hash
        matches against the key bytes."""
        hashes = batch.hashes
        n = int(hashes.size)
        out = np.full(n, -1, dtype=np.int64)
        if n == 0 or self._live == 0:
            return out
        starts = np.concatenate(([0], batch.ends[:-1])).astype(np.int64)
        sizes = batch.ends - starts
        pending = np.arange(n, dtype=np.int64)
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

    def _link_many(self, rows: _I64) -> None:
        """Put ``rows`` (distinct, not linked) into free slots (:func:`link_rows`)."""
        link_rows(self._slots, self._mask, self._hashes, rows)

    def _relink_many(self, old_rows: _I64, new_rows: _I64) -> None:
        """Point the slots of linked ``old_rows`` at ``new_rows`` (the same keys on new rows);
        the old rows become unfindable. Vectorized probing.

        Raises:
            KeyError: a row of ``old_rows`` is not linked (its probe reached an empty slot).
        """
        mask = self._mask
        slots = self._slots
        pos = (self._hashes[old_rows] & np.uint64(mask)).astype(np.int64)
        old_tag = (old_rows + 1).astype(np.uint32)
        new_tag = (new_rows + 1).astype(np.uint32)
        while old_rows.size:
            found = slots[pos]
            if not bool(found.all()):  # an empty slot ends a probe: that old row is not linked
                raise KeyError(f"rows {old_rows[found == 0].tolist()[:5]} are not linked")
            hit = found == old_tag
            slots[pos[hit]] = new_tag[hit]
            left = ~hit
            old_rows, old_tag, new_tag = old_rows[left], old_tag[left], new_tag[left]
            pos = (pos[left] + 1) & mask

    def _relink_all(self, count: int) -> None:
        """A new table for rows 0..count-1, all linked (after a compaction)."""
        size = MIN_SLOTS
        while size < 2 * count:
            size *= 2
        self._set_slots(np.zeros(size, dtype=np.uint32))
        self._live = count
        self._link_many(np.arange(count, dtype=np.int64))

    def linked_rows(self) -> _I64:
        """Every linked row, ascending."""
        return np.sort(self._slots[self._slots != 0].astype(np.int64) - 1)

    def _check_table(self) -> list[str]:
        """Problems of the table (empty when none), O(rows + bytes): the live count, no row
        twice or beyond the rows, the load bound, every linked row found by its key, no key
        linked on two rows."""
        problems: list[str] = []
        linked = self.linked_rows()
        if linked.size != self._live:
            problems.append(f"{linked.size} linked rows, live count {self._live}")
        if linked.size and (int(linked[-1]) >= self._rows or bool((np.diff(linked) == 0).any())):
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


def link_rows(slots: NDArray[np.uint32], mask: int, hashes: _U64, rows: _I64) -> None:
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
