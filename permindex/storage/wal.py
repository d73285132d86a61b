"""The write-ahead log: every change to a server's index, appended and (by default) fsynced
before the change is applied and acknowledged.

A log is a sequence of segment files in the data directory. Each change request (one Add
batch, one CheckAndAdd batch, one Remove batch) becomes one *record*: its changes are written
with one ``write`` (and, under the default policy, one fsync) and are replayed together or not
at all, so a batch is atomic across a crash as well. Records are numbered by a *sequence
number*, 1 for the first record a data directory ever logged, +1 per record, never reused; a
snapshot records the sequence number it contains (see :mod:`permindex.storage.snapshot`), and
recovery replays the records after it. Every integer is little-endian; no pickle.

Segment file ``DIR/wal-<first sequence, 20 digits>.log``::

    offset  size  field
    ------  ----  ----------------------------------------------------------------------------
    0       8     magic  89 50 4D 4C 0D 0A 1A 0A  (b"\\x89PML\\r\\n\\x1a\\n", PNG-style)
    8       4     u32  format version = 1
    12      4     u32  header size in bytes = 32
    16      8     u64  sequence number of the segment's first record (also in its name)
    24      4     u32  flags, 0 (reserved; a reader of version 1 refuses other values)
    28      4     u32  CRC-32 (zlib / ISO-HDLC) of bytes 0..27
    32      ...   records, back to back, sequence numbers consecutive

A segment is created complete with its header (temporary file, fsync, rename, directory fsync),
so a segment file never has a torn header.

Record (n changes, K = total UTF-8 bytes of the n keys; L = 12 + 14n + K)::

    offset       size  field
    -----------  ----  -----------------------------------------------------------------------
    0            4     u32  L, bytes of the body (everything after the CRC)
    4            4     u32  CRC-32 of the 4 length bytes followed by the L body bytes
    8            8     u64  sequence number
    16           4     u32  n, changes in the record (>= 1)
    20           n     u8[n]   op of each change: 1 add (the key was not stored), 2 replace (it
                               was; its fingerprint is replaced), 3 remove
    20+n         8n    u64[n]  fingerprint of each change (0 for a remove)
    20+9n        4n    u32[n]  UTF-8 byte length of each key (1..1,024; the NUL excluded)
    20+13n       K+n   key section: each key's UTF-8 bytes followed by one NUL (the lengths are
                       authoritative: a key may contain U+0000)

Replaying a record applies its changes in order: add and replace store the fingerprint under the
key, remove removes the key if stored. Replay is idempotent over any state at least as new as the
record's predecessor, which is what lets a snapshot be exported while writes go on (see
:mod:`permindex.storage.store`).

fsync policies (:data:`FSYNC_POLICIES`; in every one the record is written to the file -- the
operating system's page cache -- before the change is applied and acknowledged, so killing the
server process, even with SIGKILL, loses nothing that was acknowledged):

* ``always`` (default): one fdatasync per record, before the acknowledgement. A crash of the
  machine or a power loss loses nothing acknowledged (on a disk that honours flushes).
* ``interval``: a background thread fdatasyncs every ``fsync_interval`` seconds (default 0.1)
  when something was written. A machine crash loses at most the last interval of acknowledged
  writes (plus the time one fsync takes).
* ``never``: permindex never fsyncs the log on its own (only when a segment is sealed at a
  snapshot, and on a graceful stop); the kernel writes it back when it chooses (Linux: dirty
  pages older than 30 s by default). A machine crash loses the acknowledged writes not yet
  written back.

Failures: a record that cannot be written or fsynced (disk full, a file size limit, a read-only
or failing file system) raises :class:`~permindex.errors.StorageError`
(:class:`~permindex.errors.StorageFullError` for ENOSPC, EDQUOT and EFBIG) after the file has been
cut back to the end of the last good record, so a half-written record never stays in the log;
the caller applies nothing and the next append tries again. If even the cut fails, every append
refuses until it succeeds.

Recovery (:func:`read_log`): segments whose records are all covered by the snapshot are skipped
unread. The damage a crash can do is a torn *tail*: the last record of the last segment cut
short or garbled (a write interrupted). It is cut off with a warning that says how many bytes and
records. A bad record anywhere else -- followed by a valid record, or in a segment that is not
the last -- is corruption, not a crash; so is a missing segment (a gap in the sequence numbers),
an unknown format version or a foreign file named like a segment. It stops the start with
:class:`~permindex.errors.CorruptFileError` naming the file, the offset and the remedy, unless
the operator asked to truncate there (``permindex serve --truncate-corrupt-log``): the log is
then cut at the first bad record, the bytes cut off are kept beside it as ``<segment>.dropped``
and the later segments renamed ``<segment>.dropped``, with a warning.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import re
import struct
import threading
import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

import numpy as np
import numpy.typing as npt

from permindex.errors import (
    CorruptFileError,
    InvalidArgumentError,
    LimitExceededError,
    StorageError,
    StorageFullError,
)
from permindex.index.keys import MAX_KEY_BYTES
from permindex.storage.snapshot import fsync_directory

__all__ = [
    "ADD",
    "FORMAT_VERSION",
    "FSYNC_POLICIES",
    "MAGIC",
    "REMOVE",
    "REPLACE",
    "FsyncPolicy",
    "LogWriter",
    "Record",
    "RecoveredLog",
    "Segment",
    "encode_record",
    "list_segments",
    "read_log",
    "segment_name",
]

log = logging.getLogger(__name__)

MAGIC: Final = b"\x89PML\r\n\x1a\n"
FORMAT_VERSION: Final = 1
ADD: Final = 1
REPLACE: Final = 2
REMOVE: Final = 3

_HEADER = struct.Struct("<8sIIQI")  # everything before the header CRC
HEADER_SIZE: Final = _HEADER.size + 4  # 32
_PREFIX = struct.Struct("<II")  # body length, CRC
_BODY_HEAD = struct.Struct("<QI")  # sequence, n
_MIN_BODY: Final = _BODY_HEAD.size + 14 + 1  # one change with a 1-byte key
_MAX_BODY: Final = (1 << 32) - 1
_NAME = re.compile(r"wal-(\d{20})\.log")
_TMP_GLOB: Final = ".wal-*.tmp"
_tmp_counter = itertools.count()

_U8 = npt.NDArray[np.uint8]
_U64 = npt.NDArray[np.uint64]


def segment_name(first_sequence: int) -> str:
    """File name of the segment whose first record has ``first_sequence``."""
    return f"wal-{first_sequence:020d}.log"


@dataclass(frozen=True)
class Segment:
    """A segment file: its path and the sequence number of its first record (from its name)."""

    path: Path
    first_sequence: int


def list_segments(directory: Path) -> list[Segment]:
    """The segment files in ``directory`` (named ``wal-<20 digits>.log``), by first sequence.
    Raises CorruptFileError for a directory of such a name."""
    found = []
    for path in directory.iterdir():
        match = _NAME.fullmatch(path.name)
        if match:
            if path.is_dir():
                raise CorruptFileError(
                    f"{path}: is a directory, not a log segment (move it away)", path=str(path)
                )
            found.append(Segment(path, int(match.group(1))))
    return sorted(found, key=lambda segment: segment.first_sequence)


# ----------------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Record:
    """One decoded record: change i is ``ops[i]`` (:data:`ADD`, :data:`REPLACE`,
    :data:`REMOVE`) of ``keys[i]`` to ``fingerprints[i]`` ((n,) uint64; 0 for a remove)."""

    sequence: int
    ops: _U8
    fingerprints: _U64
    keys: list[str]


def _encode_keys(keys: Sequence[str]) -> tuple[npt.NDArray[np.uint32], bytes]:
    """(n,) <u4 UTF-8 lengths and the key section (each key's bytes then a NUL): one join and
    one encode; lengths from the str lengths when all is ASCII, else from the NUL positions, else
    (a key holding NUL) one encode per key.

    Raises TypeError (not a str) or InvalidArgumentError (not encodable as UTF-8)."""
    n = len(keys)
    try:
        joined = "\x00".join(itertools.chain(keys, ("",)))
        section = joined.encode("utf-8")
    except TypeError as error:
        raise TypeError(f"keys must be str: {error}") from None
    except UnicodeEncodeError as error:
        raise InvalidArgumentError(f"a key is not encodable as UTF-8: {error.reason}") from None
    if len(section) == len(joined):
        return np.fromiter(map(len, keys), dtype="<u4", count=n), section
    ends = np.flatnonzero(np.frombuffer(section, dtype=np.uint8) == 0)
    if ends.size == n:
        return (np.diff(ends, prepend=-1) - 1).astype("<u4"), section
    encoded = [key.encode("utf-8") for key in keys]
    lengths = np.fromiter(map(len, encoded), dtype="<u4", count=n)
    return lengths, b"\x00".join(itertools.chain(encoded, (b"",)))


def encode_record(
    sequence: int, ops: npt.ArrayLike, keys: Sequence[str], fingerprints: npt.ArrayLike
) -> bytes:
    """One record (layout in the module docstring) as bytes, ready for one write.

    Everything is validated here, so that nothing invalid is ever logged: ops in {1, 2, 3},
    keys non-empty str of at most 1,024 UTF-8 bytes, fingerprints in [0, 2^64), 0 for removes.

    Raises:
        TypeError: a key is not a str.
        InvalidArgumentError: lengths differ, no change, a bad op, key or fingerprint.
        LimitExceededError: the record would exceed 4 GiB.
    """
    n = len(keys)
    op_array = np.asarray(ops, dtype=np.uint8).reshape(-1)
    try:
        fp_array = np.asarray(fingerprints, dtype="<u8").reshape(-1)
    except (OverflowError, ValueError, TypeError) as error:
        raise InvalidArgumentError(
            f"fingerprints must be integers in [0, 2**64): {error}"
        ) from None
    if n == 0 or op_array.size != n or fp_array.size != n:
        raise InvalidArgumentError(
            f"a record needs n >= 1 changes with one op, key and fingerprint each "
            f"(got {op_array.size} ops, {n} keys, {fp_array.size} fingerprints)"
        )
    if not bool(((op_array >= ADD) & (op_array <= REMOVE)).all()):
        raise InvalidArgumentError(f"ops must be 1 (add), 2 (replace) or 3 (remove): {op_array}")
    if bool((fp_array[op_array == REMOVE] != 0).any()):
        raise InvalidArgumentError("a remove must carry fingerprint 0")
    lengths, section = _encode_keys(keys)
    shortest, longest = int(lengths.min()), int(lengths.max())
    if shortest < 1 or longest > MAX_KEY_BYTES:
        bad = int(np.flatnonzero((lengths < 1) | (lengths > MAX_KEY_BYTES))[0])
        raise InvalidArgumentError(
            f"keys[{bad}] is {int(lengths[bad])} UTF-8 bytes; keys are 1 to {MAX_KEY_BYTES}",
            keys[bad],
        )
    body_length = _BODY_HEAD.size + 13 * n + len(section)
    if body_length > _MAX_BODY:
        raise LimitExceededError(
            f"a record of {body_length:,} bytes is over the 4 GiB limit: split the batch",
            limit=_MAX_BODY,
            actual=body_length,
        )
    parts = (
        _BODY_HEAD.pack(sequence, n),
        op_array.tobytes(),
        fp_array.tobytes(),
        lengths.tobytes(),
        section,
    )
    length_bytes = struct.pack("<I", body_length)
    crc = zlib.crc32(length_bytes)
    for part in parts:
        crc = zlib.crc32(part, crc)
    return b"".join((length_bytes, struct.pack("<I", crc), *parts))


#: When the write-ahead log is fsynced (what each can lose: the module docstring).
FsyncPolicy = Literal["always", "interval", "never"]
FSYNC_POLICIES: Final[tuple[FsyncPolicy, ...]] = ("always", "interval", "never")


class _BadRecord(Exception):
    """A record that does not decode; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _record_at(data: bytes, offset: int) -> tuple[int, int]:
    """(sequence, end offset) of the well-formed record at ``offset`` (length and CRC checked,
    nothing decoded); _BadRecord otherwise."""
    size = len(data)
    if size - offset < _PREFIX.size:
        raise _BadRecord(f"{size - offset} bytes, shorter than a record's length and CRC")
    body_length, crc = _PREFIX.unpack_from(data, offset)
    end = offset + _PREFIX.size + body_length
    if body_length < _MIN_BODY:
        raise _BadRecord(f"record length {body_length} is below the minimum {_MIN_BODY}")
    if end > size:
        raise _BadRecord(f"record of {body_length} bytes runs past the end of the file")
    view = memoryview(data)
    actual = zlib.crc32(view[offset + _PREFIX.size : end], zlib.crc32(view[offset : offset + 4]))
    if actual != crc:
        raise _BadRecord(f"checksum mismatch (CRC-32 {actual:#010x}, stored {crc:#010x})")
    (sequence,) = struct.unpack_from("<Q", data, offset + _PREFIX.size)
    return int(sequence), end


def _decode_body(data: bytes, start: int, end: int) -> Record:
    """Decode a body whose CRC matched; _BadRecord when it is malformed all the same."""
    sequence, n = _BODY_HEAD.unpack_from(data, start)
    if n < 1 or _BODY_HEAD.size + 14 * n > end - start:
        raise _BadRecord(f"change count {n} does not fit the record")
    at = start + _BODY_HEAD.size
    ops = np.frombuffer(data, dtype=np.uint8, count=n, offset=at).copy()
    fps = np.frombuffer(data, dtype="<u8", count=n, offset=at + n).astype(np.uint64)
    lengths = np.frombuffer(data, dtype="<u4", count=n, offset=at + 9 * n).astype(np.int64)
    section_start = at + 13 * n
    if int(lengths.sum()) + n != end - section_start:
        raise _BadRecord("key lengths do not add up to the record's key section")
    if not bool(((ops >= ADD) & (ops <= REMOVE)).all()):
        raise _BadRecord("unknown op")
    if int(lengths.min()) < 1 or int(lengths.max()) > MAX_KEY_BYTES:
        raise _BadRecord("a key length outside 1..1024")
    section = data[section_start:end]
    ends = np.cumsum(lengths + 1)
    raw = np.frombuffer(section, dtype=np.uint8)
    if not bool((raw[ends - 1] == 0).all()):
        raise _BadRecord("a key is not NUL-terminated")
    try:
        if section.count(0) == n:
            keys = section.decode("utf-8").split("\x00")
            keys.pop()
        else:
            starts = [0, *ends[:-1].tolist()]
            keys = [
                section[a : a + m].decode("utf-8")
                for a, m in zip(starts, lengths.tolist(), strict=True)
            ]
    except UnicodeDecodeError as error:
        raise _BadRecord(f"a key is not valid UTF-8 ({error.reason})") from None
    return Record(sequence=int(sequence), ops=ops, fingerprints=fps, keys=keys)


def _valid_record_after(data: bytes, offset: int, first_sequence: int) -> int:
    """Offset of the first well-formed record after ``offset`` (exclusive) whose sequence
    number is at least ``first_sequence``, or -1. Candidates (a plausible length and sequence
    number at some byte offset) are found with numpy over overlapping unaligned views of the
    bytes, then checked with their CRC."""
    start = offset + 1
    room = len(data) - start - _PREFIX.size - _MIN_BODY
    if room < 0:
        return -1
    count = room + 1  # candidate record starts: start .. start + room
    buffer = memoryview(data)
    lengths = np.ndarray((count,), dtype="<u4", buffer=buffer, offset=start, strides=(1,))
    sequences = np.ndarray(
        (count,), dtype="<u8", buffer=buffer, offset=start + _PREFIX.size, strides=(1,)
    )
    most = first_sequence + (len(data) - offset) // (_PREFIX.size + _MIN_BODY) + 1
    positions = np.arange(start, start + count, dtype=np.int64)
    plausible = (
        (lengths >= _MIN_BODY)
        & (positions + _PREFIX.size + lengths <= len(data))
        & (sequences >= first_sequence)
        & (sequences <= most)
    )
    for candidate in np.flatnonzero(plausible).tolist():
        try:
            _record_at(data, start + candidate)
        except _BadRecord:
            continue
        return start + candidate
    return -1


def _count_pieces(data: bytes, offset: int) -> int:
    """How many records the bytes from ``offset`` hold, walking their length fields (a piece
    cut short counts as one); at least 1 when there is any byte."""
    pieces = 0
    while offset < len(data):
        pieces += 1
        if len(data) - offset < _PREFIX.size:
            break
        (body_length,) = struct.unpack_from("<I", data, offset)
        offset += _PREFIX.size + max(body_length, 1)
    return pieces


# ----------------------------------------------------------------------------------- segments


def _header(first_sequence: int) -> bytes:
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, HEADER_SIZE, first_sequence, 0)
    return head + struct.pack("<I", zlib.crc32(head))


def _check_header(data: bytes, segment: Segment) -> None:
    path = segment.path

    def corrupt(what: str) -> CorruptFileError:
        return CorruptFileError(f"{path}: {what}", path=str(path))

    if not data:
        raise corrupt("empty file, not a permindex log segment")
    if data[: len(MAGIC)] != MAGIC[: len(data[: len(MAGIC)])]:
        raise corrupt(f"not a permindex log segment (starts with {data[:8]!r}, expected {MAGIC!r})")
    if len(data) < HEADER_SIZE:
        raise corrupt(f"truncated: {len(data)} bytes, shorter than the {HEADER_SIZE}-byte header")
    _magic, version, header_size, first, flags = _HEADER.unpack_from(data)
    if version != FORMAT_VERSION:
        raise corrupt(
            f"log format version {version} is not supported (this permindex reads version "
            f"{FORMAT_VERSION}); use the permindex that wrote it"
        )
    (crc,) = struct.unpack_from("<I", data, _HEADER.size)
    if zlib.crc32(data[: _HEADER.size]) != crc:
        raise corrupt("header checksum mismatch (the file is damaged)")
    if header_size != HEADER_SIZE or flags != 0:
        raise corrupt(f"unexpected header size {header_size} or flags {flags:#x}")
    if first != segment.first_sequence:
        raise corrupt(
            f"its header says it starts at sequence {first}, its name {segment.first_sequence}"
        )


def _storage_error(error: OSError, what: str) -> StorageError:
    """The StorageError (StorageFullError for a full disk or a size limit) for ``error``."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
    cls = StorageFullError if full else StorageError
    reason = error.strerror or str(error)
    hint = "free space" if full else "make it writable"
    message = (
        f"{what}: {reason} (errno {errno.errorcode.get(error.errno or 0, error.errno)}); "
        f"nothing was changed; writes resume once the data directory can be written ({hint})"
    )
    return cls(message, error.errno)


def create_segment(directory: Path, first_sequence: int) -> tuple[Segment, int]:
    """Create a segment durably (temporary file with its header, fsync, rename, directory
    fsync) and return it with a file descriptor open for writing, positioned after the header.

    Raises:
        StorageError: it could not be created; nothing is left behind.
    """
    final = directory / segment_name(first_sequence)
    temporary = directory / f".{final.name}.{os.getpid()}.{next(_tmp_counter)}.tmp"
    fd = -1
    try:
        fd = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, _header(first_sequence))
        os.fsync(fd)
        os.replace(temporary, final)
        fsync_directory(directory)
    except OSError as error:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise _storage_error(error, f"cannot create log segment {final}") from error
    return Segment(final, first_sequence), fd


# ----------------------------------------------------------------------------------- recovery


@dataclass
class RecoveredLog:
    """What :func:`read_log` found.

    Attributes:
        records: the records after the snapshot's sequence, in order, to replay.
        last_sequence: the last sequence number the data directory holds (the snapshot's when
            the log holds nothing after it).
        tail: where to append: the last segment and the end of its last good record, or None
            when the next record needs a new segment (none yet, or the last one does not end at
            ``last_sequence``).
        warnings: what was cut off or dropped, one sentence each (also logged).
        skipped_segments: segments entirely covered by the snapshot (not read).
    """

    records: list[Record] = field(default_factory=list)
    last_sequence: int = 0
    tail: tuple[Segment, int] | None = None
    warnings: list[str] = field(default_factory=list)
    skipped_segments: list[Segment] = field(default_factory=list)

    @property
    def changes(self) -> int:
        """Changes in the records to replay."""
        return sum(len(record.keys) for record in self.records)


def _drop_aside(path: Path, data: bytes | None = None) -> Path:
    """Keep ``data`` (or the whole file ``path``, renamed) as ``path.dropped`` (numbered if
    taken)."""
    target = path.with_name(path.name + ".dropped")
    number = 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.dropped.{number}")
    if data is None:
        os.replace(path, target)
    else:
        with open(target, "xb") as out:
            out.write(data)
            out.flush()
            os.fsync(out.fileno())
    return target


def _truncate_file(path: Path, offset: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_log(directory: Path, after: int, *, truncate_corrupt: bool = False) -> RecoveredLog:
    """Read the log in ``directory`` for recovery: every record with a sequence number above
    ``after`` (the snapshot's), checked, in order (rules in the module docstring).

    A torn tail is cut off the file (and fsynced) with a warning. With ``truncate_corrupt``,
    corruption elsewhere is cut off too (the bytes kept as ``.dropped`` files) with a warning;
    without it, it raises.

    Raises:
        CorruptFileError: a segment that is foreign, of an unknown version, has a bad header or
            a bad record before its tail, or a gap in the sequence numbers (a missing segment);
            the message names the file and the remedy. Nothing was changed on disk then.
        OSError: a segment cannot be read or cut.
    """
    for stale in directory.glob(_TMP_GLOB):
        log.warning("removing %s, left over by an interrupted segment creation", stale)
        with contextlib.suppress(OSError):
            stale.unlink()
    result = RecoveredLog(last_sequence=after)
    segments = list_segments(directory)
    needed: list[Segment] = []
    for i, segment in enumerate(segments):
        following = segments[i + 1] if i + 1 < len(segments) else None
        if following is not None and following.first_sequence <= after + 1:
            result.skipped_segments.append(segment)  # every record in it is <= after
        else:
            needed.append(segment)
    expected = after + 1  # the sequence number the next record must have
    tail: tuple[Segment, int] | None = None
    for position, segment in enumerate(needed):
        later = needed[position + 1 :]
        first = segment.first_sequence
        if first > expected or (position > 0 and first != expected):
            if first > expected:
                problem = (
                    f"{segment.path}: the log has no record of sequence numbers "
                    f"{expected}..{first - 1}: a log segment, or the snapshot holding them, is "
                    "missing"
                )
            else:
                problem = f"{segment.path}: starts at sequence {first}, expected {expected}"
            _refuse_or_drop(result, problem, segment.path, later=[segment, *later],
                            truncate=truncate_corrupt)  # fmt: skip
            break
        data = segment.path.read_bytes()
        try:
            _check_header(data, segment)
        except CorruptFileError as error:
            _refuse_or_drop(result, str(error), segment.path, later=[segment, *later],
                            truncate=truncate_corrupt)  # fmt: skip
            break
        expected = first
        offset = HEADER_SIZE
        damaged = False
        while offset < len(data):
            try:
                sequence, end = _record_at(data, offset)
                if sequence != expected:
                    raise _BadRecord(f"sequence number {sequence}, expected {expected}")
                record = _decode_body(data, offset + _PREFIX.size, end)
            except _BadRecord as bad:
                _damaged(result, segment, data, offset, expected, bad.reason, later,
                         truncate=truncate_corrupt)  # fmt: skip
                damaged = True
                break
            if sequence > after:
                result.records.append(record)
            expected = sequence + 1
            offset = end
        tail = (segment, offset)
        if damaged:
            break
    result.last_sequence = max(after, expected - 1)
    # Append to the last segment only if it ends exactly where the data directory does.
    result.tail = tail if tail is not None and expected - 1 >= after else None
    return result


def _refuse_or_drop(
    result: RecoveredLog,
    problem: str,
    path: Path,
    *,
    later: Sequence[Segment],
    truncate: bool,
) -> None:
    """Corruption that is not a torn tail: raise, or (``truncate``) set the segments from
    ``later`` aside and record a warning."""
    if not truncate:
        raise CorruptFileError(
            f"{problem}. This is damage, not a write cut short by a crash; refusing to start. "
            "To drop everything from there on and start with the changes before it, start "
            "once with --truncate-corrupt-log (the dropped bytes are kept as .dropped files)",
            path=str(path),
        )
    moved = [_drop_aside(segment.path) for segment in later]
    names = ", ".join(str(p) for p in moved) or "nothing"
    message = f"{problem}: --truncate-corrupt-log: the log ends here; set aside {names}"
    log.warning("%s", message)
    result.warnings.append(message)


def _damaged(
    result: RecoveredLog,
    segment: Segment,
    data: bytes,
    offset: int,
    expected: int,
    problem: str,
    later: Sequence[Segment],
    *,
    truncate: bool,
) -> None:
    """A bad record at ``offset``: cut a torn tail off, or refuse / drop corruption."""
    path = segment.path
    cut = len(data) - offset
    pieces = _count_pieces(data, offset)
    valid_after = _valid_record_after(data, offset, expected)
    where = f"{path}: bad record at byte offset {offset} (sequence {expected} expected): {problem}"
    if later or valid_after >= 0:
        if valid_after >= 0:
            context = f"a valid record follows at byte offset {valid_after}"
        else:
            context = f"later segments follow ({', '.join(s.path.name for s in later)})"
        if not truncate:
            _refuse_or_drop(result, f"{where}; {context}", path, later=later, truncate=False)
        kept = _drop_aside(path, data[offset:])
        _truncate_file(path, offset)
        moved = [_drop_aside(s.path) for s in later]
        names = ", ".join(str(p) for p in [kept, *moved])
        message = (
            f"{where}; {context}. --truncate-corrupt-log: cut {cut} bytes ({pieces} records) "
            f"off at byte offset {offset}; the changes from sequence {expected} on are dropped "
            f"(kept in {names})"
        )
        log.warning("%s", message)
        result.warnings.append(message)
        return
    _truncate_file(path, offset)
    message = (
        f"{path}: cut off a torn tail of {cut} bytes ({pieces} "
        f"{'record' if pieces == 1 else 'records'}) at byte offset {offset}: {problem} "
        "(a write cut short by a crash; it was never acknowledged)"
    )
    log.warning("%s", message)
    result.warnings.append(message)


# ----------------------------------------------------------------------------------- writing


class LogWriter:
    """Appends records to the newest segment of a data directory's log, with an fsync policy.

    Thread-safe: appends, rotations and syncs are serialized by an internal lock; under the
    ``interval`` policy a daemon thread fdatasyncs the file (holding only a separate lock, so
    appends do not wait for it).

    Args:
        directory: the data directory.
        segment: the segment to append to, and ``offset``, the end of its last good record;
            or None to create one starting at ``last_sequence + 1``.
        last_sequence: the sequence number of the last record logged (0: none yet).
        policy: ``always``, ``interval`` or ``never`` (see the module docstring).
        interval: seconds between background fsyncs under ``interval``.

    Raises (from the constructor):
        StorageError: the segment cannot be created or opened for writing.
    """

    def __init__(
        self,
        directory: Path,
        *,
        segment: Segment | None,
        offset: int,
        last_sequence: int,
        policy: FsyncPolicy = "always",
        interval: float = 0.1,
    ) -> None:
        if policy not in FSYNC_POLICIES:
            raise InvalidArgumentError(
                f"fsync policy {policy!r} is not one of {', '.join(FSYNC_POLICIES)}", policy
            )
        if policy == "interval" and not interval > 0:
            raise InvalidArgumentError(f"fsync interval must be > 0 seconds, got {interval}")
        self.directory = directory
        self.policy: FsyncPolicy = policy
        self.interval = interval
        self.last_sequence = last_sequence
        self._lock = threading.Lock()  # appends, rotation, close
        self._sync_lock = threading.Lock()  # the fd while a background fsync runs
        self._dirty = False  # written since the last fsync
        self._sync_failed: OSError | None = None
        self._cut_pending = False  # a failed append's bytes may still be past _offset
        self._closed = False
        if segment is None:
            segment, fd = create_segment(directory, last_sequence + 1)
            offset = HEADER_SIZE
        else:
            try:
                fd = os.open(segment.path, os.O_WRONLY)
            except OSError as error:
                raise _storage_error(error, f"cannot open log segment {segment.path}") from error
        self.segment = segment
        self._fd = fd
        self._offset = offset
        self._previous_offset = -1  # where the last record appended began (for retract)
        self._segment_records = (last_sequence + 1) - segment.first_sequence
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if policy == "interval":
            self._thread = threading.Thread(
                target=self._sync_periodically, name="permindex-wal-sync", daemon=True
            )
            self._thread.start()

    @property
    def offset(self) -> int:
        """End of the last good record in the current segment, bytes."""
        return self._offset

    def append(self, record: bytes, sequence: int) -> None:
        """Write ``record`` (from :func:`encode_record`, numbered ``sequence``, which must be
        :attr:`last_sequence` + 1) at the end of the log with one write, then fdatasync it under
        the ``always`` policy.

        Raises:
            StorageError: it could not be written or synced (StorageFullError: no space, or a
                file size limit); the file is cut back to the previous record, nothing is
                logged, :attr:`last_sequence` is unchanged.
        """
        with self._lock:
            if self._closed:
                raise StorageError("the log is closed (the server is stopping)")
            if sequence != self.last_sequence + 1:
                raise ValueError(f"record {sequence} after {self.last_sequence}")
            if self._cut_pending:
                self._cut_back("cannot cut the log back after a failed write")
            start = self._offset
            try:
                written = 0
                view = memoryview(record)
                while written < len(record):
                    written += os.pwrite(self._fd, view[written:], start + written)
                if self.policy == "always" or self._sync_failed is not None:
                    os.fdatasync(self._fd)
                    self._sync_failed = None
                else:
                    self._dirty = True
            except OSError as error:
                self._cut_pending = True
                with contextlib.suppress(StorageError):
                    self._cut_back("cannot cut the log back after a failed write")
                raise _storage_error(
                    error, f"cannot write to the log {self.segment.path}"
                ) from error
            self._previous_offset = start
            self._offset = start + len(record)
            self.last_sequence = sequence
            self._segment_records += 1

    def retract(self, sequence: int) -> None:
        """Take the last record (numbered ``sequence``) back out of the log: the caller could
        not apply it after all. The file is cut back to where the record began.

        Raises:
            StorageError: the cut failed; it is retried before the next append.
        """
        with self._lock:
            if sequence != self.last_sequence or self._previous_offset < 0:
                raise ValueError(f"record {sequence} is not the last one appended")
            self._offset = self._previous_offset
            self._previous_offset = -1
            self.last_sequence = sequence - 1
            self._segment_records -= 1
            self._cut_pending = True
            self._cut_back("cannot take a record back out of the log")

    def _cut_back(self, what: str) -> None:
        """Truncate the segment to the end of the last good record (holding ``_lock``)."""
        try:
            os.ftruncate(self._fd, self._offset)
            if self.policy == "always":
                os.fdatasync(self._fd)
        except OSError as error:
            raise _storage_error(error, f"{what} ({self.segment.path})") from error
        self._cut_pending = False

    def sync(self) -> None:
        """fdatasync the current segment now if anything was written since the last one.

        Raises:
            StorageError: the fsync failed.
        """
        with self._sync_lock:
            if self._closed or not self._dirty:
                return
            self._dirty = False
            try:
                os.fdatasync(self._fd)
            except OSError as error:
                self._dirty = True
                self._sync_failed = error
                raise _storage_error(error, f"cannot fsync the log {self.segment.path}") from error

    def _sync_periodically(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except StorageError as error:
                # Writes acknowledged since the last good fsync may not be durable; the next
                # append fsyncs itself (as under ``always``) until an fsync succeeds.
                log.error("background fsync failed: %s", error)

    def rotate(self) -> None:
        """Seal the current segment (fdatasync, close) and continue in a new one starting at
        :attr:`last_sequence` + 1 -- unless the current one holds no record yet. Called by a
        snapshot before it exports, so that the segments before it can be dropped once it is
        durable.

        Raises:
            StorageError: the current segment could not be synced or the new one created; the
                current one stays in use.
        """
        with self._lock:
            if self._closed:
                raise StorageError("the log is closed (the server is stopping)")
            if self._segment_records == 0:
                return
            with self._sync_lock:
                try:
                    if self._dirty or self._sync_failed is not None:
                        os.fdatasync(self._fd)
                        self._dirty = False
                        self._sync_failed = None
                except OSError as error:
                    raise _storage_error(error, f"cannot seal {self.segment.path}") from error
                segment, fd = create_segment(self.directory, self.last_sequence + 1)
                os.close(self._fd)
                self._fd, self.segment = fd, segment
                self._offset = HEADER_SIZE
                self._previous_offset = -1
                self._segment_records = 0
                self._dirty = False

    def drop_through(self, sequence: int) -> list[Path]:
        """Delete the segments (never the current one) whose records all have sequence numbers
        at most ``sequence``; the deleted paths. A file that cannot be deleted is logged and
        kept (it is skipped at the next start)."""
        with self._lock:
            current = self.segment.first_sequence
        segments = [s for s in list_segments(self.directory) if s.first_sequence < current]
        deleted = []
        for i, segment in enumerate(segments):
            following = segments[i + 1].first_sequence if i + 1 < len(segments) else current
            if following <= sequence + 1:
                try:
                    segment.path.unlink()
                except OSError as error:
                    log.warning("could not delete %s: %s", segment.path, error)
                    continue
                deleted.append(segment.path)
        if deleted:
            with contextlib.suppress(OSError):
                fsync_directory(self.directory)
        return deleted

    def close(self) -> None:
        """fdatasync (whatever the policy) and close; idempotent.

        Raises:
            StorageError: the final fsync failed (the file is closed all the same).
        """
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock, self._sync_lock:
            if self._closed:
                return
            self._closed = True
            try:
                if self._cut_pending:
                    os.ftruncate(self._fd, self._offset)
                os.fdatasync(self._fd)
            except OSError as error:
                raise _storage_error(error, f"cannot fsync the log {self.segment.path}") from error
            finally:
                os.close(self._fd)

    def abandon(self) -> None:
        """Close the file without syncing, as a crash would leave it (for tests)."""
        self._stop.set()
        with self._lock, self._sync_lock:
            if not self._closed:
                self._closed = True
                os.close(self._fd)
