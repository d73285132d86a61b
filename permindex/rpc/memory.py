"""The server's memory limit, ``serve --max-memory SIZE`` (:class:`MemoryBudget`): a write that
would take the server past it is refused with RESOURCE_EXHAUSTED before it is logged or applied
(:class:`MemoryLimitError`), instead of the process growing until the kernel kills it.

What "memory" means here, and why. The limit is checked against the server's *accounted*
memory: :meth:`Index.memory_bytes <permindex.index.Index.memory_bytes>` summed over every
collection -- the index's arrays by capacity (fingerprints, liveness, times, tables, keys, the
key map; :class:`~permindex.index.memory.MemoryBreakdown`) -- plus the estimated growth of the
writes admitted and still being applied (:attr:`MemoryBudget.reserved`). That figure is
deterministic (the same writes give the same number on every machine), so a refusal can be
predicted and tested, and it is what the data costs, which is what removing data gives back. It
is not the process's resident memory (RSS), which also holds the interpreter and its modules,
the compiled kernels, the allocator's free lists, requests being received, and the copies alive
while an array grows or runs merge; docs/operations/limits.md gives the ratio measured, from
which to set the limit below the machine's memory.

Admission (:meth:`MemoryBudget.admit`): a write of n documents with B bytes of keys needs
:meth:`Index.memory_growth <permindex.index.Index.memory_growth>` (n, B) -- every document
counted as a new row and a new key; an array that would grow counts at the capacity it would
grow to; the tables' new entries -- and a new collection the bytes of an empty index. The write
is admitted when the accounted memory, plus what the writes admitted before it and not yet
applied reserved, plus its own need, is at most the limit; its need is then reserved until it
is applied (or refused by the log), so that concurrent writes cannot pass the limit together.
Before refusing, the budget drops the dead rows (removed, replaced or expired keys) of every
collection where they are at least :data:`COMPACT_SHARE` of the rows
(:meth:`Index.compact <permindex.index.Index.compact>`, O(n)), and admits the write if that
made room: a removal gives its memory back when it is needed, not at the index's own
compaction point. Removes, reads, snapshots and the recovery at the start are never refused:
a server that starts above its limit (a snapshot restored into a smaller limit) serves reads
and removes, and refuses writes until it is under it again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Final

from permindex.errors import LimitExceededError
from permindex.rpc.state import ServerState

__all__ = ["COMPACT_SHARE", "MemoryBudget", "MemoryLimitError", "format_bytes"]

log = logging.getLogger(__name__)

#: A refused write first compacts the collections whose dead rows are at least this share of
#: their rows (below it a compaction gives back little and costs O(n) each time).
COMPACT_SHARE: Final = 1 / 8


class MemoryLimitError(LimitExceededError):
    """A write would take the server past ``serve --max-memory``: nothing was applied or logged.

    Attributes:
        limit: the limit, bytes.
        used: the accounted memory when the write was refused (writes admitted and not yet
            applied included), bytes.
        needed: the write's estimated growth, bytes.
    """

    def __init__(self, message: str, *, limit: int, used: int, needed: int) -> None:
        super().__init__(message, limit=limit, actual=used + needed)
        self.memory_limit = limit
        self.used = used
        self.needed = needed

    def noting(self, note: str) -> MemoryLimitError:
        """The same refusal with ``note`` added to its message (what a stream applied)."""
        return MemoryLimitError(
            f"{self} ({note})", limit=self.memory_limit, used=self.used, needed=self.needed
        )


def format_bytes(size: int) -> str:
    """``size`` bytes with its binary unit: ``1,234,567 bytes (1.2 MiB)``."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size:,} bytes ({size / scale:.1f} {unit})"
    return f"{size:,} bytes"


class MemoryBudget:
    """Admission of writes under a server's memory limit (the module docstring gives the rules).

    Args:
        limit: bytes, or None for no limit (every write admitted, nothing computed).
        collections: the server's collections, ``(name, state)`` pairs (the catalog's
            :meth:`~permindex.rpc.catalog.Catalog.items`).

    Thread-safe: admissions are serialized by one lock, held while the accounted memory is
    summed (O(collections x (tables + runs))) and, before a refusal, while collections compact.
    """

    def __init__(
        self, limit: int | None, collections: Callable[[], list[tuple[str, ServerState]]]
    ) -> None:
        self.limit = limit
        self._collections = collections
        self._lock = threading.Lock()
        #: Estimated bytes of the writes admitted and not yet applied.
        self.reserved = 0

    def accounted(self) -> int:
        """:meth:`Index.memory_bytes <permindex.index.Index.memory_bytes>` summed over every
        collection, bytes."""
        return sum(state.index.memory_bytes() for _, state in self._collections())

    def used(self) -> int:
        """What the limit is checked against: :meth:`accounted` plus :attr:`reserved`."""
        return self.accounted() + self.reserved

    @contextmanager
    def admit(self, needed: Callable[[], int], what: str) -> Iterator[None]:
        """Run the body of the ``with`` (the write) when the write fits under the limit, with
        its need reserved until the body ends.

        Args:
            needed: the write's estimated growth, bytes (called only when there is a limit).
            what: the write, for the message (``"this Add"``).

        Raises:
            MemoryLimitError: it does not fit, even after compacting the collections with many
                dead rows; the body did not run.
        """
        limit = self.limit
        if limit is None:
            yield
            return
        need = max(0, needed())
        with self._lock:
            used = self.used()
            if used + need > limit and self._compact():
                used = self.used()
            if used + need > limit:
                raise self._refusal(what, limit, used, need)
            self.reserved += need
        try:
            yield
        finally:
            with self._lock:
                self.reserved -= need

    def _compact(self) -> bool:
        """Compact every collection whose dead rows are at least :data:`COMPACT_SHARE` of its
        rows; whether one was."""
        compacted = False
        for name, state in self._collections():
            before = state.index.memory_bytes()
            if state.index.compact(COMPACT_SHARE):
                compacted = True
                log.info(
                    "collection %s compacted for the memory limit: %d bytes, then %d",
                    name,
                    before,
                    state.index.memory_bytes(),
                )
        return compacted

    @staticmethod
    def _refusal(what: str, limit: int, used: int, need: int) -> MemoryLimitError:
        return MemoryLimitError(
            f"{what} would take the server past its memory limit of {format_bytes(limit)} "
            f"(serve --max-memory): the collections hold {format_bytes(used)} (memory_bytes "
            f"summed, see Stats) and this write needs about {format_bytes(need)} more; nothing "
            "was applied. Remove or expire data (its memory is given back when needed), drop a "
            "collection, or raise --max-memory",
            limit=limit,
            used=used,
            needed=need,
        )
