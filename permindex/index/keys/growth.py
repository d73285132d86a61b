"""Growing a key store's arrays without holding the index's lock: the :class:`Growth` begun
under the lock, filled without it and swapped in under it, with the journal of the hash table's
changes made meanwhile.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

import numpy as np
from numpy.typing import NDArray

from permindex.index.keys.rows import grown, zeroed

__all__ = ["LINK", "RELINK", "UNLINK", "Growth", "JournalEntry", "prepare_growth"]

#: Changes to the hash table recorded while a growth is prepared (:attr:`Growth.journal`).
LINK: Final = 0
UNLINK: Final = 1
RELINK: Final = 2

_U8 = NDArray[np.uint8]
_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]

#: One journal entry: (LINK, rows, None), (UNLINK, (1,) row, None) or (RELINK, old rows, new rows).
JournalEntry = tuple[int, _I64, "_I64 | None"]


@dataclass(eq=False)
class Growth:
    """Bigger arrays for a :class:`~permindex.index.keys.store.KeyStore`, prepared without holding
    the index's lock: begun under the lock (:meth:`KeyStore.begin_growth`), filled without it
    (:func:`prepare_growth`), swapped in under it (:meth:`KeyStore.finish_growth`).

    Rows, their lengths, block offsets and codes are append-only, so the first ``rows`` rows of
    the arrays taken at the beginning (``sources``) never change and are copied without the lock;
    the rows appended meanwhile are copied at the end. The hash table is rebuilt from the rows
    linked at the beginning; every link, unlink and relink made meanwhile is recorded in
    ``journal`` and replayed on the new table at the end. A compaction (which renumbers rows)
    abandons the growth.

    Attributes:
        rows: rows appended at the beginning.
        used: code bytes used at the beginning.
        row_capacity: new capacity in rows (the current one: no growth).
        data_capacity: new capacity in code bytes.
        slot_count: new hash table size (0: it keeps its size).
        sources: the arrays at the beginning: row lengths, block offsets, codes.
        journal: the hash table's changes since the beginning (:data:`JournalEntry`).
        abandoned: a compaction or a newer growth replaced it; it will not be swapped in.
        prepared: :func:`prepare_growth` filled it.
        row_arrays, data, slots, tags: the new arrays (None: that one does not grow).
    """

    rows: int
    used: int
    row_capacity: int
    data_capacity: int
    slot_count: int
    sources: tuple[_U8, _I64, _U8]
    journal: list[JournalEntry] = field(default_factory=list)
    abandoned: bool = False
    prepared: bool = False
    row_arrays: tuple[_U8, _I64] | None = None
    data: _U8 | None = None
    slots: NDArray[np.uint32] | None = None
    tags: _U8 | None = None


def prepare_growth(growth: Growth, linked: _I64) -> None:
    """Fill ``growth``'s arrays: copy the rows it began with and, when the hash table grows,
    link ``linked`` ((m,) int64: the rows linked when it began, the live rows below
    ``growth.rows``) into a new one, their codes hashed. Reads only what never changes, so it
    runs without the index's lock (and without the GIL for most of its time: numpy copies and
    the hashing kernel). O(rows + bytes)."""
    from permindex.index.keys import kernels

    lens, bases, codes = growth.sources
    rows, used = growth.rows, growth.used
    if growth.row_capacity > lens.size:
        growth.row_arrays = (
            grown(lens, growth.row_capacity, rows),
            grown(bases, growth.row_capacity // 16 + 1, rows // 16 + 1),
        )
    if growth.data_capacity > codes.size:
        growth.data = grown(codes, growth.data_capacity, used)
    if growth.slot_count > 0:
        slots = zeroed(growth.slot_count, np.uint32)
        tags = zeroed(growth.slot_count, np.uint8)
        hashes = kernels.row_hashes(codes, lens, bases, linked)
        kernels.link_rows(slots, tags, linked, hashes)
        growth.slots, growth.tags = slots, tags
    growth.prepared = True
