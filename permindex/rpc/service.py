"""The permindex.v1.PermIndex servicer, and the state it shares with the server.

Every RPC validates its whole request (:mod:`permindex.rpc.convert`) before it changes anything,
fingerprints texts before it touches the index (so the index's lock is never held while hashing),
and then calls the :class:`~permindex.index.Index`, which is thread-safe on its own.

Errors become status codes in exactly one place, :func:`_abort`, through
:func:`permindex.errors.status_name_for`: our own errors keep their message (it says what to fix);
anything unexpected is logged with its traceback here and the client gets ``INTERNAL`` with a short
message, never a traceback. Logs never carry keys or texts at INFO or above.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import NoReturn, TypeVar

import grpc
import numpy as np

import permindex
from permindex.config import ServerConfig
from permindex.errors import PermindexError, status_name_for
from permindex.index import Index
from permindex.rpc import convert
from permindex.snapshot import DataDir, SnapshotInfo
from permindex.v1 import index_pb2 as pb
from permindex.v1 import index_pb2_grpc

__all__ = ["SERVICE_NAME", "PermIndexService", "ServerState", "SnapshotWriteError"]

log = logging.getLogger(__name__)

#: Full name of the service, as health checking and reflection know it.
SERVICE_NAME = pb.DESCRIPTOR.services_by_name["PermIndex"].full_name

_ADDED = pb.DOCUMENT_STATUS_ADDED
_REPLACED = pb.DOCUMENT_STATUS_REPLACED
_TOO_SHORT = pb.DOCUMENT_STATUS_TOO_SHORT
_NEAR_DUPLICATE = pb.DOCUMENT_STATUS_NEAR_DUPLICATE


class SnapshotWriteError(PermindexError, RuntimeError):
    """A snapshot could not be written (disk full, permissions); the index and the previous
    snapshot are unchanged. Reported as INTERNAL."""


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
    """What the servicer and the server share: the index, the data directory, the options, the
    start time, and what has changed since the last snapshot.

    Thread-safe: the change counter has its own lock; snapshots are serialized by another, and
    take a consistent copy of the index (:meth:`Index.export`) so queries and writes continue
    while the file is written.
    """

    def __init__(
        self,
        index: Index,
        config: ServerConfig,
        data_dir: DataDir,
        loaded: SnapshotInfo | None = None,
    ) -> None:
        self.index = index
        self.config = config
        self.data_dir = data_dir
        self.started_monotonic = time.monotonic()
        #: The last snapshot loaded or written (None: none yet).
        self.last_snapshot = loaded
        self._changes = 0  # mutations applied since the start
        self._saved_changes = 0  # value of _changes the last snapshot includes
        self._changes_lock = threading.Lock()
        self._snapshot_lock = threading.Lock()

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
        """Whether the index may differ from the last snapshot."""
        with self._changes_lock:
            return self._changes != self._saved_changes

    def snapshot(self, *, only_if_changed: bool = False) -> SnapshotInfo | None:
        """Write a snapshot of the index to the data directory now.

        Args:
            only_if_changed: skip the write (return None) when nothing changed since the last
                snapshot loaded or written.

        Returns:
            The :class:`SnapshotInfo` written, or None when skipped.

        Raises:
            SnapshotWriteError: the file could not be written; the previous snapshot stays.
        """
        with self._snapshot_lock:
            with self._changes_lock:
                # read before exporting: a change that races with the export is written again
                # next time rather than lost
                changes = self._changes
                if only_if_changed and changes == self._saved_changes:
                    return None
            keys, fingerprints = self.index.export()
            try:
                info = self.data_dir.save(
                    keys, fingerprints, k=self.index.k, design=self.index.design.as_tuple()
                )
            except OSError as error:
                log.error("snapshot to %s failed: %s", self.data_dir.snapshot_path, error)
                raise SnapshotWriteError(
                    f"snapshot could not be written to {self.data_dir.snapshot_path}: {error}"
                ) from error
            with self._changes_lock:
                self._saved_changes = changes
            self.last_snapshot = info
        log.info(
            "snapshot: %d keys, %d bytes written to %s in %.2f s",
            info.count,
            info.bytes,
            info.path,
            info.seconds,
        )
        return info


# --------------------------------------------------------------------------- error translation

_Req = TypeVar("_Req")
_Resp = TypeVar("_Resp")


def _abort(context: grpc.ServicerContext, method: str, error: Exception) -> NoReturn:
    """The one place where an exception becomes a gRPC status."""
    status = status_name_for(error)
    if isinstance(error, PermindexError) or status != "INTERNAL":
        message = str(error)
        log.debug("%s refused: %s: %s", method, status, message)
    else:
        log.error("%s failed", method, exc_info=error)
        message = f"internal error in {method} ({type(error).__name__}); see the server log"
    context.abort(grpc.StatusCode[status], message)


def _unary(
    method: Callable[[PermIndexService, _Req, grpc.ServicerContext], _Resp],
) -> Callable[[PermIndexService, _Req, grpc.ServicerContext], _Resp]:
    """Wrap a unary-response handler: domain errors become status codes via :func:`_abort`."""
    name = method.__name__

    @functools.wraps(method)
    def handler(self: PermIndexService, request: _Req, context: grpc.ServicerContext) -> _Resp:
        try:
            return method(self, request, context)
        except Exception as error:
            if not context.is_active():  # the client went away; nobody to answer
                log.debug("%s: call ended by the client (%s)", name, type(error).__name__)
                raise
            _abort(context, name, error)

    return handler


def _streaming(
    method: Callable[[PermIndexService, _Req, grpc.ServicerContext], Iterator[_Resp]],
) -> Callable[[PermIndexService, _Req, grpc.ServicerContext], Iterator[_Resp]]:
    """Wrap a response-streaming handler (a generator) the same way as :func:`_unary`."""
    name = method.__name__

    @functools.wraps(method)
    def handler(
        self: PermIndexService, request: _Req, context: grpc.ServicerContext
    ) -> Iterator[_Resp]:
        try:
            yield from method(self, request, context)
        except Exception as error:
            if not context.is_active():
                log.debug("%s: call ended by the client (%s)", name, type(error).__name__)
                return
            _abort(context, name, error)

    return handler


# ---------------------------------------------------------------------------------- servicer


class PermIndexService(index_pb2_grpc.PermIndexServicer):
    """Implements every RPC of ``permindex.v1.PermIndex`` (contract and status codes:
    ``protos/permindex/v1/index.proto``) over a :class:`ServerState`."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.index = state.index
        self.config = state.config

    # ---- writes

    def _add_batch(self, request: pb.AddRequest) -> pb.AddResponse:
        """Validate, fingerprint (outside the lock) and apply one batch with one ``add_many``."""
        batch = convert.documents_from_proto(
            request.documents,
            max_batch=self.config.max_batch,
            shingle_size=self.config.shingle_size,
        )
        stored = [i for i, fp in enumerate(batch.fingerprints) if fp is not None]
        keys = [batch.keys[i] for i in stored]
        fingerprints = np.fromiter(
            (batch.fingerprints[i] for i in stored), dtype=np.uint64, count=len(stored)
        )
        was_new = self.index.add_many(keys, fingerprints) if keys else np.zeros(0, dtype=bool)
        self.state.note_changes(len(keys))
        response = pb.AddResponse()
        status: dict[int, pb.DocumentStatus.ValueType] = {}
        seen: set[str] = set()
        for key, i, new in zip(keys, stored, was_new.tolist(), strict=True):
            # a key repeated in the batch: the first is ADDED (when new), the later ones REPLACED
            status[i] = _ADDED if new and key not in seen else _REPLACED
            seen.add(key)
        results = response.results
        for i, (key, fp) in enumerate(zip(batch.keys, batch.fingerprints, strict=True)):
            if fp is None:
                results.add(key=key, status=_TOO_SHORT)
            else:
                results.add(key=key, status=status[i], fingerprint=fp)
        counts = list(status.values())
        response.added = counts.count(_ADDED)
        response.replaced = counts.count(_REPLACED)
        response.too_short = batch.too_short
        return response

    @_unary
    def Add(self, request: pb.AddRequest, context: grpc.ServicerContext) -> pb.AddResponse:
        """One batch, applied as one step (see the .proto)."""
        return self._add_batch(request)

    @_streaming
    def Ingest(
        self, request_iterator: Iterator[pb.AddRequest], context: grpc.ServicerContext
    ) -> Iterator[pb.AddResponse]:
        """Each batch applied and acknowledged in order; a refused batch ends the stream."""
        for request in request_iterator:
            yield self._add_batch(request)

    @_unary
    def CheckAndAdd(
        self, request: pb.CheckAndAddRequest, context: grpc.ServicerContext
    ) -> pb.CheckAndAddResponse:
        """For each document in order, an atomic query-then-add under the index's lock."""
        k = convert.check_k(
            request.k if request.HasField("k") else None, self.index.k, self.index.design
        )
        batch = convert.documents_from_proto(
            request.documents,
            max_batch=self.config.max_batch,
            shingle_size=self.config.shingle_size,
        )
        response = pb.CheckAndAddResponse()
        changes = 0
        try:
            for key, fp in zip(batch.keys, batch.fingerprints, strict=True):
                if fp is None:
                    response.results.add(key=key, status=_TOO_SHORT)
                    continue
                added, matches, replaced = self.index.check_and_add(key, fp, k=k)
                if added:
                    changes += 1
                    status = _REPLACED if replaced else _ADDED
                else:
                    status = _NEAR_DUPLICATE
                response.results.add(
                    key=key,
                    status=status,
                    fingerprint=fp,
                    matches=convert.matches_to_proto(matches),
                )
        finally:
            self.state.note_changes(changes)
        return response

    @_unary
    def Remove(self, request: pb.RemoveRequest, context: grpc.ServicerContext) -> pb.RemoveResponse:
        """Removes the keys; the ones not stored are listed, not an error."""
        keys = convert.check_keys(request.keys, max_batch=self.config.max_batch)
        response = pb.RemoveResponse()
        removed: set[str] = set()
        try:
            for key in keys:
                if self.index.discard(key):
                    removed.add(key)
                elif key not in removed:  # a key named twice is not "not found" the 2nd time
                    response.not_found.append(key)
        finally:
            self.state.note_changes(len(removed))
        response.removed = len(removed)
        return response

    # ---- reads

    @_unary
    def Query(self, request: pb.QueryRequest, context: grpc.ServicerContext) -> pb.QueryResponse:
        """Every stored key within k of each fingerprint."""
        convert.check_batch_length(len(request.fingerprints), self.config.max_batch, "fingerprints")
        k = convert.check_k(
            request.k if request.HasField("k") else None, self.index.k, self.index.design
        )
        limit = convert.limit_from(request.limit if request.HasField("limit") else None)
        fingerprints = np.array(request.fingerprints, dtype=np.uint64)
        found = self.index.query_many(fingerprints, k=k, limit=limit)
        response = pb.QueryResponse()
        for matches in found:
            response.results.add(matches=convert.matches_to_proto(matches))
        return response

    @_unary
    def Get(self, request: pb.GetRequest, context: grpc.ServicerContext) -> pb.GetResponse:
        """The stored fingerprint of each key."""
        keys = convert.check_keys(request.keys, max_batch=self.config.max_batch)
        response = pb.GetResponse()
        for key in keys:
            fp = self.index.get(key)
            if fp is None:
                response.results.add(key=key, found=False)
            else:
                response.results.add(key=key, found=True, fingerprint=fp)
        return response

    @_streaming
    def Pairs(
        self, request: pb.PairsRequest, context: grpc.ServicerContext
    ) -> Iterator[pb.PairsResponse]:
        """All pairs within k, in chunks of at most :data:`convert.PAIRS_PER_MESSAGE`."""
        k = convert.check_k(
            request.k if request.HasField("k") else None, self.index.k, self.index.design
        )
        yield from convert.pairs_to_proto(self.index.pairs(k=k))

    @_unary
    def Stats(self, request: pb.StatsRequest, context: grpc.ServicerContext) -> pb.StatsResponse:
        """Counts, memory, design, uptime, last snapshot, version."""
        response = pb.StatsResponse(
            count=len(self.index),
            memory_bytes=self.index.memory_bytes(),
            design=convert.design_to_proto(self.index.design, self.index.k),
            uptime_seconds=self.state.uptime_seconds,
            version=permindex.__version__,
            resident_memory_bytes=resident_memory_bytes(),
        )
        last = self.state.last_snapshot
        if last is not None:
            response.last_snapshot_unix_seconds = last.created_unix_seconds
            response.last_snapshot_count = last.count
            response.last_snapshot_bytes = last.bytes
        return response

    @_unary
    def Snapshot(
        self, request: pb.SnapshotRequest, context: grpc.ServicerContext
    ) -> pb.SnapshotResponse:
        """Writes a snapshot now and answers once it is durable."""
        info = self.state.snapshot()
        if info is None:  # pragma: no cover - only_if_changed is False
            raise RuntimeError("snapshot skipped")
        return pb.SnapshotResponse(
            path=str(info.path), count=info.count, bytes=info.bytes, seconds=info.seconds
        )
