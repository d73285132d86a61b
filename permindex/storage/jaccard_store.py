"""A durable Jaccard collection: a :class:`~permindex.index.jaccard.JaccardIndex` kept in its
data directory by the same write-ahead log as a SimHash collection's (segments, framing, CRC,
fsync policies, torn-tail recovery: :mod:`permindex.storage.wal`,
:mod:`permindex.storage.wal_recovery`) with records that carry sketches, and by snapshots of
its own format (:class:`JaccardStore`).

Write path, snapshots and recovery are the driver's, :mod:`permindex.storage.durable`, as
for a SimHash collection: under the store's write lock, decide, log one record (appended and
fdatasynced under ``--fsync always``), then apply. A write the log cannot take changes nothing.
CheckAndAdd checks and adds under that lock: atomic. This module gives the driver what is
Jaccard's own: the record codec, the snapshot format and the index.

Record body (after the framing of :mod:`permindex.storage.wal_records`: u32 length, u32 CRC;
n changes, K key bytes, V sketch values; little-endian)::

    u64 sequence | u32 n | u8[n] op (1 add, 2 replace, 3 remove) | u32[n] time (Unix s)
    | u32[n] key length | u32[n] sketch values | key section (K + n: each key then NUL)
    | sketch values: u64 shingle hashes (verify=exact) or u32 signature values (signature)

Snapshot ``jaccard.snapshot`` (temporary name, fsync, rename, directory fsync)::

    8s magic 89 50 4D 4A 0D 0A 1A 0A | u32 version 1 | u32 verify (0 exact, 1 signature)
    | u32 permutations | u32 bands | u64 generation | u64 log sequence | u64 n | u64 V
    | f64 created (Unix s) | u32[n] time | u32[n] key length | u32[n] sketch values
    | u64[n * bands] band keys | key section | sketch values (u64 or u32, as the log)
    | u32 CRC-32 of every byte before it

Recovery: load the snapshot (band keys as stored: no signature recomputed), replay the log after
its sequence. A snapshot whose options (verify, permutations, bands) differ from the
collection's is refused (CorruptFileError): options are fixed at creation.
"""

from __future__ import annotations

import logging
import os
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, TypeVar

import numpy as np
from numpy.typing import NDArray

from permindex.errors import CorruptFileError, InvalidArgumentError
from permindex.index.expiry import AddedAt, stamps
from permindex.index.jaccard import JaccardIndex, JaccardMatch, MinHashSketch, Verify
from permindex.index.keys.rule import validate_key
from permindex.near.minhash import band_keys, signatures
from permindex.storage.datadir import (
    DirectoryLock,
    fsync_directory,
    remove_stale,
    temporary_name,
)
from permindex.storage.durable import DurableStore, recover, set_ops
from permindex.storage.key_section import (
    KeySectionError,
    check_section,
    decode_section,
    encode_section,
    section_lengths,
)
from permindex.storage.snapshot import SnapshotInfo
from permindex.storage.wal import FsyncPolicy
from permindex.storage.wal_records import ADD, REMOVE, BadRecord, Record

__all__ = ["CheckOutcome", "JaccardStore", "SketchRecord"]

log = logging.getLogger(__name__)

SNAPSHOT_NAME: Final = "jaccard.snapshot"
MAGIC: Final = b"\x89PMJ\r\n\x1a\n"
VERSION: Final = 1
_HEAD = struct.Struct("<8sIIIIQQQQd")
_BODY_HEAD = struct.Struct("<QI")
_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]
_T = TypeVar("_T")


@dataclass(frozen=True)
class SketchRecord(Record):
    """A Jaccard collection's log record: a :class:`~permindex.storage.wal_records.Record`
    (fingerprints all 0) with each change's sketch, ``sizes[i]`` of the concatenated
    ``values`` (uint64; signature values widened)."""

    sizes: _I64 = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    values: _U64 = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))


@dataclass(frozen=True)
class CheckOutcome:
    """One document of a CheckAndAdd: ``added``; the ``matches`` that blocked it (empty when
    added); ``replaced``: its key was stored before."""

    added: bool
    matches: list[JaccardMatch]
    replaced: bool


def _width(verify: Verify) -> str:
    return "<u8" if verify == "exact" else "<u4"


def encode_sketch_record(
    sequence: int,
    ops: NDArray[np.uint8],
    keys: Sequence[str],
    times: NDArray[np.uint32],
    sizes: _I64,
    values: _U64,
    verify: Verify,
) -> bytes:
    """One record (layout in the module docstring), framed as the log's records are."""
    n = len(keys)
    section, ends = encode_section(keys)
    lengths = section_lengths(ends)
    parts = (
        _BODY_HEAD.pack(sequence, n),
        ops.astype(np.uint8).tobytes(),
        times.astype("<u4").tobytes(),
        lengths.tobytes(),
        sizes.astype("<u4").tobytes(),
        section,
        values.astype(_width(verify)).tobytes(),
    )
    body_length = sum(len(part) for part in parts)
    length_bytes = struct.pack("<I", body_length)
    crc = zlib.crc32(length_bytes)
    for part in parts:
        crc = zlib.crc32(part, crc)
    return b"".join((length_bytes, struct.pack("<I", crc), *parts))


def sketch_decoder(verify: Verify) -> Callable[[bytes, int, int, int], Record]:
    """The body decoder of this collection's records, for
    :func:`~permindex.storage.wal_recovery.read_log`."""
    width = np.dtype(_width(verify))

    def decode(data: bytes, start: int, end: int, version: int) -> Record:
        sequence, n = _BODY_HEAD.unpack_from(data, start)
        at = start + _BODY_HEAD.size
        if n < 1 or at + 13 * n > end:
            raise BadRecord(f"change count {n} does not fit the record")
        ops = np.frombuffer(data, dtype=np.uint8, count=n, offset=at).copy()
        times = np.frombuffer(data, dtype="<u4", count=n, offset=at + n).astype(np.uint32)
        lengths = np.frombuffer(data, dtype="<u4", count=n, offset=at + 5 * n).astype(np.int64)
        sizes = np.frombuffer(data, dtype="<u4", count=n, offset=at + 9 * n).astype(np.int64)
        key_start = at + 13 * n
        key_end = key_start + int(lengths.sum()) + n
        if key_end + int(sizes.sum()) * width.itemsize != end:
            raise BadRecord("key and sketch sizes do not add up to the record")
        section = data[key_start:key_end]
        try:
            check_section(np.frombuffer(section, dtype=np.uint8), lengths, utf8=False)
            keys = decode_section(section, lengths)
        except KeySectionError as error:
            raise BadRecord(f"bad key section ({error})") from None
        if not bool(((ops >= ADD) & (ops <= REMOVE)).all()):
            raise BadRecord("unknown op")
        values = np.frombuffer(data, dtype=width, count=int(sizes.sum()), offset=key_end)
        return SketchRecord(
            sequence=int(sequence), ops=ops, fingerprints=np.zeros(n, dtype=np.uint64),
            keys=keys, times=times, sizes=sizes, values=values.astype(np.uint64),
        )  # fmt: skip

    return decode


class JaccardDataDir:
    """A Jaccard collection's directory: its lock, its snapshot (:data:`SNAPSHOT_NAME`) and
    the generation and log sequence of the last one."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.snapshot_path = path / SNAPSHOT_NAME
        self._lock = DirectoryLock(path)
        self.sequence = 0
        self.log_sequence = 0
        remove_stale(path, f".{SNAPSHOT_NAME}.*.tmp", "snapshot", log)

    def close(self) -> None:
        """Release the lock; idempotent."""
        self._lock.close()


def _corrupt(path: Path, what: str) -> CorruptFileError:
    return CorruptFileError(f"{path}: {what}", path=str(path))


class _JaccardFormat:
    """A Jaccard collection's :class:`~permindex.storage.durable.CollectionFormat`: a
    :class:`~permindex.index.jaccard.JaccardIndex`, the snapshot and records of the module
    docstring."""

    def __init__(self, index: JaccardIndex, data_dir: JaccardDataDir) -> None:
        self.index = index
        self.data_dir = data_dir
        self.decode = sketch_decoder(index.verify)

    def load(self) -> SnapshotInfo | None:
        return _load_snapshot(self.index, self.data_dir)

    def replay(self, records: Sequence[Record]) -> None:
        for record in records:
            if not isinstance(record, SketchRecord):
                raise TypeError(f"not a Jaccard collection's record: {type(record).__name__}")
            _replay(self.index, record)

    def encode_removes(self, sequence: int, keys: list[str]) -> bytes:
        n = len(keys)
        return encode_sketch_record(
            sequence, np.full(n, REMOVE, dtype=np.uint8), keys, np.zeros(n, np.uint32),
            np.zeros(n, np.int64), np.zeros(0, np.uint64), self.index.verify,
        )  # fmt: skip

    def hold(self) -> Callable[[int], SnapshotInfo]:
        # One consistent copy, taken under the write lock; written without it.
        columns = self.index.export_columns()
        return lambda log_sequence: _write_snapshot(
            self.index, self.data_dir, columns, log_sequence
        )


class JaccardStore(DurableStore[JaccardIndex]):
    """A Jaccard collection's index and data directory (see the module docstring; the logging,
    snapshots, removes and closing are :class:`~permindex.storage.durable.DurableStore`'s). Open
    one with :meth:`open`. Read :attr:`index` freely; change it only through the store.

    Examples:
        >>> import tempfile
        >>> from permindex.index.jaccard import MinHashSketch
        >>> hashes = np.arange(1, 9, dtype=np.uint64)  # a document's shingle hashes
        >>> sketch = MinHashSketch(hashes, signatures(hashes, np.array([0, 8]), 128)[0])
        >>> with tempfile.TemporaryDirectory() as path:
        ...     with JaccardStore.open(path) as store:
        ...         store.add_many(["a"], [sketch]).tolist()
        ...     with JaccardStore.open(path) as store:  # recovered from the log
        ...         "a" in store.index
        [True]
        True
    """

    @classmethod
    def open(
        cls,
        path: str | os.PathLike[str],
        *,
        threshold: float = 0.8,
        permutations: int = 128,
        verify: Verify = "exact",
        expire_after: int | None = None,
        fsync: FsyncPolicy = "always",
        fsync_interval: float = 0.1,
        truncate_corrupt_log: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> JaccardStore:
        """Lock ``path`` (created if missing), load its snapshot, replay its log, continue it
        (:func:`~permindex.storage.durable.recover`).

        Raises:
            DataDirLockedError: another process owns the directory.
            CorruptFileError: a corrupt or foreign snapshot or log (as
                :meth:`permindex.storage.store.Store.open`).
            InvalidArgumentError: bad options.
        """
        index = JaccardIndex(
            threshold, permutations, verify, expire_after=expire_after, clock=clock
        )
        format = _JaccardFormat(index, JaccardDataDir(Path(path)))
        writer, recovery = recover(
            format, fsync=fsync, fsync_interval=fsync_interval,
            truncate_corrupt_log=truncate_corrupt_log,
        )  # fmt: skip
        return cls(format, writer, recovery)

    # ---- writes

    def _columns(self, sketches: Sequence[MinHashSketch]) -> tuple[_I64, _U64]:
        if self.index.verify == "exact":
            sizes = np.array([s.shingle_hashes.size for s in sketches], dtype=np.int64)
            parts = [s.shingle_hashes for s in sketches]
        else:
            sizes = np.array([s.signature.size for s in sketches], dtype=np.int64)
            parts = [s.signature.astype(np.uint64) for s in sketches]
        values = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint64)
        return sizes, values.astype(np.uint64)

    def _log_sketches(
        self,
        ops: NDArray[np.uint8],
        keys: list[str],
        times: NDArray[np.uint32],
        sketches: Sequence[MinHashSketch],
        apply: Callable[[], _T],
    ) -> _T:
        """Log the record of storing ``keys`` with ``sketches`` (holding the write lock), then
        ``apply`` it; StorageError (nothing applied) when the append fails."""
        sizes, values = self._columns(sketches)
        verify = self.index.verify
        return self._log_then_apply(
            lambda sequence: encode_sketch_record(
                sequence, ops, keys, times, sizes, values, verify
            ),
            apply,
        )

    def _checked(
        self, keys: Sequence[str], sketches: Sequence[MinHashSketch], added_at: AddedAt
    ) -> tuple[list[str], NDArray[np.uint32]]:
        """A write's keys, checked, and its times (:func:`~permindex.index.expiry.stamps`);
        TypeError or InvalidArgumentError for a bad key, sketch or time, or lengths that
        differ."""
        key_list = [validate_key(key, name=f"keys[{i}]") for i, key in enumerate(keys)]
        if len(sketches) != len(key_list):
            raise InvalidArgumentError(f"got {len(key_list)} keys and {len(sketches)} sketches")
        for i, sketch in enumerate(sketches):
            self.index.check_sketch(sketch, f"sketches[{i}]")
        return key_list, stamps(added_at, len(key_list), self.index.clock())

    def add_many(
        self, keys: Sequence[str], sketches: Sequence[MinHashSketch], *, added_at: AddedAt = None
    ) -> NDArray[np.bool_]:
        """Log, then store, each (key, sketch) (a repeated key takes its last sketch).

        Returns:
            (n,) bool: True where the key was not stored before the call.

        Raises:
            InvalidArgumentError: a bad key or sketch, lengths differ.
            StorageError: the log could not be written; nothing stored.
        """
        key_list, times = self._checked(keys, sketches, added_at)
        if not key_list:
            return np.zeros(0, dtype=bool)
        with self._write_lock:
            ops = set_ops(self.index, key_list)
            return self._log_sketches(
                ops, key_list, times, sketches,
                lambda: self.index.add_many(key_list, sketches, times),
            )  # fmt: skip

    def check_and_add_many(
        self, keys: Sequence[str], sketches: Sequence[MinHashSketch], *, added_at: AddedAt = None
    ) -> list[CheckOutcome]:
        """For each (key, sketch) in order: add it only if no *other* key (counting the ones
        this call added before it) has Jaccard >= the threshold with it; one record, one step
        (the write lock held throughout: atomic).

        Raises:
            InvalidArgumentError: a bad key or sketch.
            StorageError: the log could not be written; nothing added.
        """
        key_list, times = self._checked(keys, sketches, added_at)
        index = self.index
        outcomes: list[CheckOutcome] = []
        if not key_list:
            return outcomes
        bands = index.band_keys(sketches)  # once for the call
        with self._write_lock:
            found = index.query_many(sketches, exclude=key_list, bands=bands)
            seen: set[str] = set()
            for key, matches in zip(
                key_list, index.check_in_order(key_list, sketches, found, times, bands=bands),
                strict=True,
            ):  # fmt: skip
                if matches is not None:
                    outcomes.append(CheckOutcome(False, matches, False))
                    continue
                outcomes.append(CheckOutcome(True, [], key in seen or key in index))
                seen.add(key)
            chosen = [i for i, outcome in enumerate(outcomes) if outcome.added]
            if chosen:
                add_keys = [key_list[i] for i in chosen]
                add_sketches = [sketches[i] for i in chosen]
                add_times = times[chosen]
                add_bands = bands[chosen]
                ops = set_ops(index, add_keys)
                self._log_sketches(
                    ops, add_keys, add_times, add_sketches,
                    lambda: index.add_many(add_keys, add_sketches, add_times, bands=add_bands),
                )  # fmt: skip
        return outcomes


def _replay(index: JaccardIndex, record: SketchRecord) -> None:
    """Apply one record's changes in order (runs of adds as one call)."""
    offsets = np.concatenate([[0], np.cumsum(record.sizes)]).astype(np.int64)
    ops = record.ops
    i = 0
    n = ops.size
    while i < n:
        if ops[i] == REMOVE:
            index.discard(record.keys[i])
            i += 1
            continue
        j = i
        while j < n and ops[j] != REMOVE:
            j += 1
        values = record.values[offsets[i] : offsets[j]]
        sizes = record.sizes[i:j]
        if index.verify == "exact":
            local = (offsets[i : j + 1] - offsets[i]).astype(np.int64)
            signature = signatures(values, local, index.permutations)
        else:
            signature = values.astype(np.uint32).reshape(j - i, index.permutations)
        index.add_columns(
            record.keys[i:j], band_keys(signature, index.shape), sizes, values, record.times[i:j]
        )
        i = j


def _write_snapshot(
    index: JaccardIndex,
    data_dir: JaccardDataDir,
    columns: tuple[list[str], NDArray[np.uint32], _U64, _I64, _U64],
    log_sequence: int,
) -> SnapshotInfo:
    started = time.perf_counter()
    keys, times, bands, sizes, values = columns
    n = len(keys)
    section, ends = encode_section(keys) if keys else (b"", np.zeros(0, dtype=np.int64))
    lengths = section_lengths(ends) if keys else np.zeros(0, dtype="<u4")
    created = time.time()
    generation = data_dir.sequence + 1
    head = _HEAD.pack(
        MAGIC, VERSION, 0 if index.verify == "exact" else 1, index.permutations,
        index.shape.bands, generation, log_sequence, n, int(values.size), created,
    )  # fmt: skip
    parts = [
        head,
        times.astype("<u4").tobytes(),
        lengths.astype("<u4").tobytes(),
        sizes.astype("<u4").tobytes(),
        bands.astype("<u8").tobytes(),
        section,
        values.astype(_width(index.verify)).tobytes(),
    ]
    crc = 0
    for part in parts:
        crc = zlib.crc32(part, crc)
    path = data_dir.snapshot_path
    temporary = temporary_name(path, "snapshot")
    try:
        with open(temporary, "xb") as out:
            for part in parts:
                out.write(part)
            out.write(struct.pack("<I", crc))
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    fsync_directory(data_dir.path)
    data_dir.sequence = generation
    data_dir.log_sequence = log_sequence
    return SnapshotInfo(
        path=path, count=n, bytes=path.stat().st_size, seconds=time.perf_counter() - started,
        created_unix_seconds=created, sequence=generation, k=0, blocks=0, leading=0,
        log_sequence=log_sequence, version=VERSION,
    )  # fmt: skip


def _load_snapshot(index: JaccardIndex, data_dir: JaccardDataDir) -> SnapshotInfo | None:
    path = data_dir.snapshot_path
    if not path.exists():
        return None
    started = time.perf_counter()
    data = path.read_bytes()
    if len(data) < _HEAD.size + 4 or data[:8] != MAGIC:
        raise _corrupt(path, "not a permindex Jaccard snapshot (bad magic or too short)")
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    if zlib.crc32(memoryview(data)[:-4]) != crc:
        raise _corrupt(path, "checksum mismatch (the file is damaged)")
    _magic, version, mode, permutations, bands, generation, sequence, n, total, created = (
        _HEAD.unpack_from(data)
    )
    if version != VERSION:
        raise _corrupt(path, f"snapshot version {version} is not supported")
    if (mode, permutations, bands) != (
        0 if index.verify == "exact" else 1, index.permutations, index.shape.bands,
    ):  # fmt: skip
        raise _corrupt(
            path,
            f"written for verify={'exact' if mode == 0 else 'signature'}, {permutations} "
            f"permutations, {bands} bands; this collection has verify={index.verify}, "
            f"{index.permutations} permutations, {index.shape.bands} bands",
        )
    width = np.dtype(_width(index.verify))
    at = _HEAD.size
    times = np.frombuffer(data, "<u4", n, at).astype(np.uint32)
    lengths = np.frombuffer(data, "<u4", n, at + 4 * n).astype(np.int64)
    sizes = np.frombuffer(data, "<u4", n, at + 8 * n).astype(np.int64)
    at += 12 * n
    band_keys_ = np.frombuffer(data, "<u8", n * bands, at).astype(np.uint64).reshape(n, bands)
    at += 8 * n * bands
    key_bytes = int(lengths.sum()) + n
    if int(sizes.sum()) != total or at + key_bytes + total * width.itemsize + 4 != len(data):
        raise _corrupt(path, "section sizes do not add up to the file")
    section = data[at : at + key_bytes]
    try:
        check_section(np.frombuffer(section, dtype=np.uint8), lengths)
        keys = decode_section(section, lengths)
    except KeySectionError as error:
        raise _corrupt(path, f"bad key section ({error})") from None
    values = np.frombuffer(data, width, total, at + key_bytes).astype(np.uint64)
    if len(set(keys)) != n:
        raise _corrupt(path, "holds a key twice")
    index.add_columns(keys, band_keys_, sizes, values, times)
    data_dir.sequence = int(generation)
    data_dir.log_sequence = int(sequence)
    return SnapshotInfo(
        path=path, count=int(n), bytes=len(data), seconds=time.perf_counter() - started,
        created_unix_seconds=float(created), sequence=int(generation), k=0, blocks=0,
        leading=0, log_sequence=int(sequence), version=VERSION,
    )  # fmt: skip
