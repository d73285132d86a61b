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

import ctypes
import ctypes.util
import functools
import sys
from collections.abc import Callable
from typing import NamedTuple

from permindex.index.rows import RowStore
from permindex.index.table_set import TableSet

__all__ = ["MemoryBreakdown", "breakdown", "growth_bytes", "release_free_heap"]


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
    #: The keys' codes (:mod:`permindex.index.keys.codec`) and their dictionary.
    key_bytes: int
    #: Where each row's code is: a length byte a row, an 8-byte offset a block of 16 rows.
    key_offsets: int
    #: The key -> row hash table's tags, 1 byte a slot (no hash is kept per row).
    key_hashes: int
    #: The key -> row hash table's row numbers, 4 bytes a slot (at most 7/8 of them used).
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


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's ``malloc_trim``, or None where the C library has none (musl, macOS, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def release_free_heap() -> bool:
    """Give the free pages of the C heap back to the operating system: glibc's
    ``malloc_trim(0)``, which releases the free chunks of every arena, the middle of the heap
    included. The index calls it after a batch write of at least ``Tuning.release_heap_rows``
    rows and after a compaction: the buffers such a write frees (the arrays it grew from, the
    runs it merged, its temporaries) come from the heap once glibc's dynamic mmap threshold has
    risen, and glibc keeps them resident, interleaved with live arrays -- at 10^6 keys loaded in
    batches, 120 bytes a fingerprint resident against 58 accounted, 68 after this call
    (benchmarks/README.md, "Resident memory after a bulk load").

    It changes no allocator setting (no ``mallopt``): later allocations of the host work as
    before, and may fault the released pages in again. O(free chunks of the heap); a few
    milliseconds at 10^6 keys. Returns False, doing nothing, where the C library has no
    ``malloc_trim``.

    >>> from permindex.index.memory import release_free_heap
    >>> release_free_heap() in (True, False)
    True
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
