"""The key store's hash table: key -> live row, open addressing over the rows of
:class:`~permindex.index.keys.rows.KeyRows`, addressed by the hash of each key's code
(:func:`~permindex.index.keys.codec.code_hash`).

``slots`` ((S,) uint32) holds row + 1, or 0 when empty, and ``tags`` ((S,) uint8) the low byte
of that row's code hash; S is any size (the home slot of hash h is ``(h >> 32) * S >> 32``), and
a key's probe sequence is linear from its home. Only live rows are in it: a removed key's slot is
emptied by backward-shift deletion (Knuth, TAOCP vol. 3, 6.4, Algorithm R; an entry's home is
found by hashing its stored code), so there are no tombstones; a key moved to a new row (a
replacement) has its slot rewritten. No hash is stored per row: a lookup compares a row's code
only where the slot's tag matches (1 in 256 of the other slots), so a collision costs a probe,
never a wrong answer. The load stays at most :data:`MAX_LOAD` (7/8); a table that grows is made
for a load of :data:`GROWN_LOAD` (3/4) after the write: 5 bytes a slot, about 6 to 7 a key.
"""

from __future__ import annotations

from typing import Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.index.keys.rows import KeyRows, zeroed

__all__ = ["GROWN_LOAD", "MAX_LOAD", "MIN_SLOTS", "EncodedKeys", "KeyTable", "slots_for"]

#: Slots of an empty table.
MIN_SLOTS: Final = 16
#: Most live keys per slot.
MAX_LOAD: Final = 7 / 8
#: Live keys per slot of a table just grown (or built by a compaction or a load).
GROWN_LOAD: Final = 3 / 4

_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]
_U8 = NDArray[np.uint8]


def slots_for(keys: int, load: float = GROWN_LOAD) -> int:
    """Slots of a table holding ``keys`` at ``load``."""
    return max(MIN_SLOTS, int(keys / load) + 1)


def fits_load(keys: int, slots: int) -> bool:
    """Whether ``keys`` live keys keep a table of ``slots`` within :data:`MAX_LOAD`."""
    return 8 * keys <= 7 * slots


class EncodedKeys(NamedTuple):
    """A batch of keys as the store takes them (made by
    :func:`~permindex.index.keys.store.encode_keys`).

    Attributes:
        blob: the batch's key section (:mod:`permindex.storage.key_section`), (m,) uint8.
        ends: (n,) int64; key i is ``blob[ends[i - 1]:ends[i] - 1]`` (ends[-1] = m).
        hashes: (n,) uint64, XXH3-64 of each key's bytes (a batch's repeated keys are found by
            them, :func:`~permindex.storage.key_section.batch_repeats`).
    """

    blob: NDArray[np.uint8]
    ends: _I64
    hashes: _U64

    @property
    def lengths(self) -> _I64:
        """(n,) int64 UTF-8 byte lengths (terminators excluded)."""
        return np.diff(self.ends, prepend=0) - 1


class Codes(NamedTuple):
    """A batch's keys coded with a store's dictionary: ``codes`` concatenated ((c,) uint8), their
    (n,) int64 ``sizes`` and (n,) uint64 code ``hashes``."""

    codes: _U8
    sizes: _I64
    hashes: _U64


class KeyTable(KeyRows):
    """Rows with a key -> row hash table (see the module docstring). A key is *linked*
    (findable) on one live row at a time.

    Costs: :meth:`find_codes` O(n) expected compiled probes; linking and unlinking O(1)
    expected per key; a new table O(rows + code bytes) (every linked row's code hashed).
    """

    __slots__ = ("_live", "_slots", "_tags")

    def __init__(self) -> None:
        self._live = 0  # keys linked in the hash table
        self._slots: NDArray[np.uint32] = np.zeros(MIN_SLOTS, dtype=np.uint32)
        self._tags: _U8 = np.zeros(MIN_SLOTS, dtype=np.uint8)
        super().__init__()

    def __len__(self) -> int:
        """Keys linked (live)."""
        return self._live

    def _map_nbytes(self) -> int:
        return int(self._slots.nbytes + self._tags.nbytes)

    def _code(self, batch: EncodedKeys) -> Codes:
        """``batch`` coded with the store's dictionary."""
        from permindex.index.keys.codec import encode_section

        words = self._words
        if batch.ends.size == 0:
            return Codes(np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.uint64))
        return Codes(
            *encode_section(batch.blob, batch.ends, words.data, words.offsets, words.slots)
        )

    def _new_table(self, size: int, linked: _I64) -> tuple[NDArray[np.uint32], _U8]:
        """A table of ``size`` slots holding the rows ``linked`` (their codes hashed)."""
        from permindex.index.keys import kernels

        slots = zeroed(size, np.uint32)
        tags = zeroed(size, np.uint8)
        hashes = kernels.row_hashes(self._codes, self._lens, self._bases, linked)
        kernels.link_rows(slots, tags, linked, hashes)
        return slots, tags

    def _ensure_slots(self, extra: int) -> None:
        """Grow the table (to :data:`GROWN_LOAD`, and by a quarter at least: a rebuild hashes
        every linked row's code) unless ``live + extra`` keys fit within :data:`MAX_LOAD`."""
        if fits_load(self._live + extra, self._slots.size):
            return
        linked = self.linked_rows()
        size = max(slots_for(self._live + extra), self._slots.size * 5 // 4)  # amortized
        self._slots, self._tags = self._new_table(size, linked)

    # -- lookups and links ------------------------------------------------------------------

    def find_codes(self, coded: Codes) -> _I64:
        """(n,) int64: the live row holding each coded key, or -1."""
        from permindex.index.keys import kernels

        if self._live == 0 or coded.sizes.size == 0:
            return np.full(coded.sizes.size, -1, dtype=np.int64)
        return kernels.find_codes(
            coded.codes,
            coded.sizes,
            coded.hashes,
            self._slots,
            self._tags,
            self._codes,
            self._lens,
            self._bases,
        )

    def _unlink_slot(self, row: int) -> None:
        """Empty the slot of the linked ``row`` (backward-shift deletion). KeyError when ``row``
        is not linked."""
        from permindex.index.keys import kernels

        if not kernels.unlink_row(
            self._slots, self._tags, row, self._codes, self._lens, self._bases
        ):
            raise KeyError(row)

    def _link_many(self, rows: _I64, hashes: _U64 | None = None) -> None:
        """Put ``rows`` (distinct, not linked) into free slots, with their code ``hashes``
        (None: hashed here)."""
        from permindex.index.keys import kernels

        if hashes is None:
            hashes = kernels.row_hashes(self._codes, self._lens, self._bases, rows)
        kernels.link_rows(self._slots, self._tags, rows, hashes)

    def _relink_many(self, old_rows: _I64, new_rows: _I64) -> None:
        """Point the slots of linked ``old_rows`` at ``new_rows`` (the same keys on new rows);
        the old rows become unfindable.

        Raises:
            KeyError: a row of ``old_rows`` is not linked (its probe reached an empty slot).
        """
        from permindex.index.keys import kernels

        missing = kernels.relink_rows(
            self._slots, old_rows, new_rows, self._codes, self._lens, self._bases
        )
        if missing >= 0:
            raise KeyError(f"row {missing} is not linked")

    def _relink_all(self, count: int) -> None:
        """A new table for rows 0..count-1, all linked (after a compaction)."""
        self._live = count
        self._slots, self._tags = self._new_table(
            slots_for(count), np.arange(count, dtype=np.int64)
        )

    def linked_rows(self) -> _I64:
        """Every linked row, ascending."""
        return np.sort(self._slots[self._slots != 0].astype(np.int64) - 1)

    def _check_table(self) -> list[str]:
        """Problems of the table (empty when none), O(rows + bytes): the live count, no row
        twice or beyond the rows, the load bound, the tags, every linked row found by its code,
        no key linked on two rows."""
        from permindex.index.keys import kernels

        problems: list[str] = []
        linked = self.linked_rows()
        if linked.size != self._live:
            problems.append(f"{linked.size} linked rows, live count {self._live}")
        if linked.size and (int(linked[-1]) >= self._rows or bool((np.diff(linked) == 0).any())):
            problems.append("a slot holds a row twice or beyond the rows")
            return problems
        if not fits_load(self._live, self._slots.size):
            problems.append("hash table more than 7/8 full")
        occupied = np.flatnonzero(self._slots)
        rows = self._slots[occupied].astype(np.int64) - 1
        hashes = kernels.row_hashes(self._codes, self._lens, self._bases, rows)
        if not np.array_equal(self._tags[occupied], (hashes & np.uint64(0xFF)).astype(np.uint8)):
            problems.append("a slot's tag is not its row's")
        codes, sizes = self._row_codes(linked)
        found = self.find_codes(
            Codes(codes, sizes, kernels.row_hashes(self._codes, self._lens, self._bases, linked))
        )
        if not np.array_equal(found, linked):
            problems.append("a linked row is not found by its key")
        return problems
