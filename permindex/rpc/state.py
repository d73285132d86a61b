"""The state one collection's servicer calls share: :class:`ServerState` (the durable store,
its index, the server's options, the start time, the last snapshot), and the name of the
collection a request without one addresses. No grpc here: the catalog and the servicer both build
on this module.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Final

from permindex.errors import SnapshotWriteError
from permindex.rpc.config import ServerConfig
from permindex.storage.snapshot import SnapshotInfo
from permindex.storage.store import Store

__all__ = ["DEFAULT_COLLECTION", "ServerState", "resident_memory_bytes"]

log = logging.getLogger(__name__)

#: The collection a request without one names.
DEFAULT_COLLECTION: Final = "default"


def resident_memory_bytes() -> int:
    """Resident memory of this process (VmRSS of /proc/self/status), bytes; 0 where unknown."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    number, unit = line.split()[1:3]
                    return int(number) * (1024 if unit.lower() == "kb" else 1)
    except (OSError, ValueError, IndexError):
        pass
    return 0


class ServerState:
    """What the servicer and the server share: the durable store (the index, the data directory,
    the write-ahead log), the options and the start time.

    Thread-safe: every change goes through :attr:`store`, which logs it before applying it and
    serializes writers; snapshots are serialized by the store and export the index in slices,
    so queries and writes continue while the file is written (:mod:`permindex.storage.store`).
    """

    def __init__(self, store: Store, config: ServerConfig) -> None:
        self.store = store
        self.index = store.index
        self.config = config
        self.data_dir = store.data_dir
        self.started_monotonic = time.monotonic()
        #: The last snapshot loaded or written (None: none yet).
        self.last_snapshot: SnapshotInfo | None = store.recovery.snapshot
        self._changes = 0  # mutations applied since the start
        self._changes_lock = threading.Lock()

    @property
    def uptime_seconds(self) -> float:
        """Seconds since the state was created (the server started)."""
        return time.monotonic() - self.started_monotonic

    def note_changes(self, n: int = 1) -> None:
        """Record that ``n`` mutations were applied to the index (call after applying them)."""
        if n:
            with self._changes_lock:
                self._changes += n

    @property
    def changed(self) -> bool:
        """Whether the log holds changes the last snapshot may not (loaded at the start, or
        made since)."""
        return self.store.sequence != self.data_dir.log_sequence

    def snapshot(self, *, only_if_changed: bool = False) -> SnapshotInfo | None:
        """Write a snapshot of the index to the data directory now (and drop the log segments
        it makes unnecessary).

        Args:
            only_if_changed: skip the write (return None) when the log holds nothing after the
                last snapshot loaded or written.

        Returns:
            The :class:`SnapshotInfo` written, or None when skipped.

        Raises:
            SnapshotWriteError: the file could not be written; the previous snapshot and the
                whole log stay.
        """
        if only_if_changed and not self.changed:
            return None
        try:
            info = self.store.snapshot()
        except OSError as error:
            log.error("snapshot to %s failed: %s", self.data_dir.snapshot_path, error)
            raise SnapshotWriteError(
                f"snapshot could not be written to {self.data_dir.snapshot_path}: {error}"
            ) from error
        self.last_snapshot = info
        log.info(
            "snapshot: %d keys, %d bytes written to %s in %.2f s (log sequence %d)",
            info.count,
            info.bytes,
            info.path,
            info.seconds,
            info.log_sequence,
        )
        return info
