"""What an index's memory is made of (:class:`MemoryBreakdown`), and how much a write would add
to it (:func:`growth_bytes`): the accounting behind :meth:`Index.memory_bytes
<permindex.index.Index.memory_bytes>`, :meth:`Index.memory_breakdown
<permindex.index.Index.memory_breakdown>` and :meth:`Index.memory_growth
<permindex.index.Index.memory_growth>`, which a server's memory limit admits writes by
(:mod:`permindex.rpc.memory`).

Every figure is of the arrays the index keeps, by capacity (an array's room not yet used
counts), plus an estimate of the memtables' Python ints; none is the process's resident
memory, which also holds the interpreter, the compiled kernels, the allocator's free lists and
the copies alive while an array grows or runs merge (docs/operations/limits.md gives the
ratio measured).
"""

from __future__ import annotations

from typing import NamedTuple

from permindex.index.rows import RowStore
from permindex.index.table_set import TableSet

__all__ = ["MemoryBreakdown", "breakdown", "growth_bytes"]


class MemoryBreakdown(NamedTuple):
    """The bytes of one index by part, each by capacity; :attr:`total` is
    :meth:`Index.memory_bytes <permindex.index.Index.memory_bytes>`.

    >>> from permindex import Index
    >>> index = Index()
    >>> _ = index.add_many(["a", "b"], [1, 2])
    >>> parts = index.memory_breakdown()
    >>> parts.total == index.memory_bytes() and parts.fingerprints >= 16
    True
    """

    #: The fingerprint of each row, 8 bytes a row.
    fingerprints: int
    #: Whether each row is live, 1 byte a row; 0 while every row is (no removal or replacement
    #: since the last compaction).
    liveness: int
    #: When each row's key was last added, 4 bytes a row; 0 without expiry.
    times: int
    #: The permuted tables: sorted runs (5 bytes an entry per table, 6 from 2^24 rows on, and
    #: their directories, at most half a byte an entry) and memtable entries (an estimate of
    #: their Python ints).
    tables: int
    #: The keys' UTF-8 bytes, each ended by a NUL.
    key_bytes: int
    #: Where each row's key starts, 8 bytes a row.
    key_offsets: int
    #: Each row's key hash and first-added rank, 12 bytes a row.
    key_hashes: int
    #: The key -> row hash table, 4 bytes a slot (at least 2 slots a key).
    key_map: int

    @property
    def total(self) -> int:
        """The sum of every part, bytes."""
        return sum(self)


def breakdown(rows: RowStore, runs: TableSet) -> MemoryBreakdown:
    """The :class:`MemoryBreakdown` of the row store ``rows`` and its tables ``runs`` (the
    caller holds the index's lock). O(tables + runs)."""
    keys = rows.keys.memory()
    return MemoryBreakdown(
        fingerprints=int(rows.fps.nbytes),
        liveness=0 if rows.live is None else int(rows.live.nbytes),
        times=0 if rows.times is None else int(rows.times.nbytes),
        tables=runs.nbytes(),
        key_bytes=keys.key_bytes,
        key_offsets=keys.key_offsets,
        key_hashes=keys.key_hashes,
        key_map=keys.key_map,
    )


def growth_bytes(rows: RowStore, runs: TableSet, count: int, key_bytes: int) -> int:
    """An estimate of how much :func:`breakdown`'s total grows when a batch of ``count`` keys of
    ``key_bytes`` UTF-8 bytes in all is added, each counted as a new row and a new key (a
    replacement also takes a new row; a key re-added with the fingerprint it holds takes
    nothing, so the estimate is high for those): the row arrays, the key store and the hash
    table at the capacity they would grow to when they would not fit
    (:meth:`RowStore.growth_bytes <permindex.index.rows.RowStore.growth_bytes>`, with the
    growth ahead that follows a write), and
    every table's new entries (:meth:`TableSet.growth_bytes
    <permindex.index.table_set.TableSet.growth_bytes>`). Not counted: the copies alive while
    an array grows or runs merge (transient), and a growth ahead of need that a later write
    would have started anyway. The caller holds the index's lock. O(tables + log slots)."""
    if count <= 0:
        return 0
    return rows.growth_bytes(count, key_bytes + count) + runs.growth_bytes(count, rows.n + count)
