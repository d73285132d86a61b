"""The write-ahead log's file format: segment files, their header, and records -- encoded,
checked and decoded in this module (the writer is :mod:`permindex.storage.wal`, recovery
:mod:`permindex.storage.wal_recovery`).

Each change request (one Add batch, one CheckAndAdd batch, one Remove batch) becomes one
*record*, numbered by a *sequence number*: 1 for the first record a data directory ever logged,
+1 per record, never reused. Every integer is little-endian; no pickle.

Segment file ``DIR/wal-<first sequence, 20 digits>.log``::

    offset  size  field
    ------  ----  ----------------------------------------------------------------------------
    0       8     magic  89 50 4D 4C 0D 0A 1A 0A  (b"\\x89PML\\r\\n\\x1a\\n", PNG-style)
    8       4     u32  format version = 2 (1: records without times, still read)
    12      4     u32  header size in bytes = 32
    16      8     u64  sequence number of the segment's first record (also in its name)
    24      4     u32  flags, 0 (reserved; a reader refuses other values)
    28      4     u32  CRC-32 (zlib / ISO-HDLC) of bytes 0..27
    32      ...   records, back to back, sequence numbers consecutive

A segment is created complete with its header (temporary file, fsync, rename, directory fsync),
so a segment file never has a torn header.

Record of a version 2 segment (n changes, K = total UTF-8 bytes of the n keys;
L = 12 + 18n + K)::

    offset       size  field
    -----------  ----  -----------------------------------------------------------------------
    0            4     u32  L, bytes of the body (everything after the CRC)
    4            4     u32  CRC-32 of the 4 length bytes followed by the L body bytes
    8            8     u64  sequence number
    16           4     u32  n, changes in the record (>= 1)
    20           n     u8[n]   op of each change: 1 add (the key was not stored), 2 replace (it
                               was; its fingerprint is replaced), 3 remove
    20+n         8n    u64[n]  fingerprint of each change (0 for a remove)
    20+9n        4n    u32[n]  time of each change, Unix seconds: when the key was added (the
                               server's clock at the write, or the client's ``added_at``), the
                               time an index with expiry keeps (:mod:`permindex.index.expiry`);
                               0 for a remove
    20+13n       4n    u32[n]  UTF-8 byte length of each key (1..1,024; the NUL excluded)
    20+17n       K+n   key section: each key's UTF-8 bytes followed by one NUL (the lengths are
                       authoritative: a key may contain U+0000)

A version 1 segment (before expiry) holds the same records without the times (L = 12 + 14n + K);
it is read (its times as 0: unknown, the time of the start to an index with expiry) but never
appended to: a server continuing a version 1 log starts a new segment.

Replaying a record applies its changes in order: add and replace store the fingerprint under the
key, remove removes the key if stored. Replay is idempotent over any state at least as new as the
record's predecessor, which is what lets a snapshot be exported while writes go on (see
:mod:`permindex.storage.store`).
"""

from __future__ import annotations

import re
import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np
import numpy.typing as npt

from permindex.errors import CorruptFileError, InvalidArgumentError, LimitExceededError
from permindex.index.keys.rule import MAX_KEY_BYTES
from permindex.storage.key_section import (
    KeySectionError,
    check_section,
    decode_section,
    encode_keys,
)

__all__ = [
    "ADD",
    "FORMAT_VERSION",
    "HEADER_SIZE",
    "MAGIC",
    "MIN_BODY",
    "PREFIX",
    "READABLE_VERSIONS",
    "REMOVE",
    "REPLACE",
    "BadRecord",
    "Record",
    "Segment",
    "check_header",
    "count_pieces",
    "decode_body",
    "encode_record",
    "list_segments",
    "record_at",
    "segment_header",
    "segment_name",
    "valid_record_after",
]

MAGIC: Final = b"\x89PML\r\n\x1a\n"
FORMAT_VERSION: Final = 2
#: Segment format versions read (1: records without times).
READABLE_VERSIONS: Final = (1, 2)
ADD: Final = 1
REPLACE: Final = 2
REMOVE: Final = 3

_HEADER = struct.Struct("<8sIIQI")  # everything before the header CRC
HEADER_SIZE: Final = _HEADER.size + 4  # 32
PREFIX: Final = struct.Struct("<II")  # body length, CRC
_BODY_HEAD = struct.Struct("<QI")  # sequence, n
MIN_BODY: Final = _BODY_HEAD.size + 14 + 1  # one change with a 1-byte key
_MAX_BODY: Final = (1 << 32) - 1
_NAME = re.compile(r"wal-(\d{20})\.log")

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
    :data:`REMOVE`) of ``keys[i]`` to ``fingerprints[i]`` ((n,) uint64; 0 for a remove) at
    ``times[i]`` ((n,) uint32 Unix seconds; 0 for a remove or a version 1 record)."""

    sequence: int
    ops: _U8
    fingerprints: _U64
    keys: list[str]
    times: npt.NDArray[np.uint32]


def encode_record(
    sequence: int,
    ops: npt.ArrayLike,
    keys: Sequence[str],
    fingerprints: npt.ArrayLike,
    times: npt.ArrayLike | None = None,
) -> bytes:
    """One record of the current version (layout in the module docstring) as bytes, ready for
    one write; ``times`` None: all 0.

    Everything is validated by this function, so that nothing invalid is ever logged: ops in
    {1, 2, 3}, keys non-empty str of at most 1,024 UTF-8 bytes, fingerprints in [0, 2^64), 0 for
    removes, times in [0, 2^32).

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
    try:
        time_array = np.zeros(n, dtype="<u4") if times is None else np.asarray(times, dtype="<u4")
    except (OverflowError, ValueError, TypeError) as error:
        raise InvalidArgumentError(f"times must be integers in [0, 2**32): {error}") from None
    time_array = time_array.reshape(-1)
    if n == 0 or op_array.size != n or fp_array.size != n or time_array.size != n:
        raise InvalidArgumentError(
            f"a record needs n >= 1 changes with one op, key, fingerprint and time each "
            f"(got {op_array.size} ops, {n} keys, {fp_array.size} fingerprints, "
            f"{time_array.size} times)"
        )
    if not bool(((op_array >= ADD) & (op_array <= REMOVE)).all()):
        raise InvalidArgumentError(f"ops must be 1 (add), 2 (replace) or 3 (remove): {op_array}")
    if bool((fp_array[op_array == REMOVE] != 0).any()):
        raise InvalidArgumentError("a remove must carry fingerprint 0")
    lengths, section = encode_keys(keys)
    shortest, longest = int(lengths.min()), int(lengths.max())
    if shortest < 1 or longest > MAX_KEY_BYTES:
        bad = int(np.flatnonzero((lengths < 1) | (lengths > MAX_KEY_BYTES))[0])
        raise InvalidArgumentError(
            f"keys[{bad}] is {int(lengths[bad])} UTF-8 bytes; keys are 1 to {MAX_KEY_BYTES}",
            keys[bad],
        )
    body_length = _BODY_HEAD.size + 17 * n + len(section)
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
        time_array.tobytes(),
        lengths.tobytes(),
        section,
    )
    length_bytes = struct.pack("<I", body_length)
    crc = zlib.crc32(length_bytes)
    for part in parts:
        crc = zlib.crc32(part, crc)
    return b"".join((length_bytes, struct.pack("<I", crc), *parts))


#: The reason a record gives for each problem of its key section.
_SECTION_PROBLEMS: Final = {
    "length": f"a key length outside 1..{MAX_KEY_BYTES}",
    "size": "key lengths do not add up to the record's key section",
    "nul": "a key is not NUL-terminated",
}


class BadRecord(Exception):
    """A record that does not decode; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def record_at(data: bytes, offset: int) -> tuple[int, int]:
    """(sequence, end offset) of the well-formed record at ``offset`` (length and CRC checked,
    nothing decoded); BadRecord otherwise."""
    size = len(data)
    if size - offset < PREFIX.size:
        raise BadRecord(f"{size - offset} bytes, shorter than a record's length and CRC")
    body_length, crc = PREFIX.unpack_from(data, offset)
    end = offset + PREFIX.size + body_length
    if body_length < MIN_BODY:
        raise BadRecord(f"record length {body_length} is below the minimum {MIN_BODY}")
    if end > size:
        raise BadRecord(f"record of {body_length} bytes runs past the end of the file")
    view = memoryview(data)
    actual = zlib.crc32(view[offset + PREFIX.size : end], zlib.crc32(view[offset : offset + 4]))
    if actual != crc:
        raise BadRecord(f"checksum mismatch (CRC-32 {actual:#010x}, stored {crc:#010x})")
    (sequence,) = struct.unpack_from("<Q", data, offset + PREFIX.size)
    return int(sequence), end


def decode_body(data: bytes, start: int, end: int, version: int = FORMAT_VERSION) -> Record:
    """Decode a body of a segment of format ``version`` whose CRC matched; BadRecord when it is
    malformed all the same."""
    sequence, n = _BODY_HEAD.unpack_from(data, start)
    timed = 4 * n if version >= 2 else 0  # bytes of the times
    if n < 1 or _BODY_HEAD.size + 14 * n + timed > end - start:
        raise BadRecord(f"change count {n} does not fit the record")
    at = start + _BODY_HEAD.size
    ops = np.frombuffer(data, dtype=np.uint8, count=n, offset=at).copy()
    fps = np.frombuffer(data, dtype="<u8", count=n, offset=at + n).astype(np.uint64)
    if timed:
        times = np.frombuffer(data, dtype="<u4", count=n, offset=at + 9 * n).astype(np.uint32)
    else:
        times = np.zeros(n, dtype=np.uint32)
    lengths = np.frombuffer(data, dtype="<u4", count=n, offset=at + 9 * n + timed)
    lengths = lengths.astype(np.int64)
    section_start = at + 13 * n + timed
    section = data[section_start:end]
    try:
        check_section(np.frombuffer(section, dtype=np.uint8), lengths, utf8=False)
    except KeySectionError as error:
        raise BadRecord(_SECTION_PROBLEMS[error.kind]) from None
    if not bool(((ops >= ADD) & (ops <= REMOVE)).all()):
        raise BadRecord("unknown op")
    try:
        keys = decode_section(section, lengths)
    except KeySectionError as error:
        raise BadRecord(f"a key is not valid UTF-8 ({error.reason})") from None
    return Record(sequence=int(sequence), ops=ops, fingerprints=fps, keys=keys, times=times)


def valid_record_after(data: bytes, offset: int, first_sequence: int) -> int:
    """Offset of the first well-formed record after ``offset`` (exclusive) whose sequence
    number is at least ``first_sequence``, or -1. Candidates (a plausible length and sequence
    number at some byte offset) are found with numpy over overlapping unaligned views of the
    bytes, then checked with their CRC."""
    start = offset + 1
    room = len(data) - start - PREFIX.size - MIN_BODY
    if room < 0:
        return -1
    count = room + 1  # candidate record starts: start .. start + room
    buffer = memoryview(data)
    lengths = np.ndarray((count,), dtype="<u4", buffer=buffer, offset=start, strides=(1,))
    sequences = np.ndarray(
        (count,), dtype="<u8", buffer=buffer, offset=start + PREFIX.size, strides=(1,)
    )
    most = first_sequence + (len(data) - offset) // (PREFIX.size + MIN_BODY) + 1
    positions = np.arange(start, start + count, dtype=np.int64)
    plausible = (
        (lengths >= MIN_BODY)
        & (positions + PREFIX.size + lengths <= len(data))
        & (sequences >= first_sequence)
        & (sequences <= most)
    )
    for candidate in np.flatnonzero(plausible).tolist():
        try:
            record_at(data, start + candidate)
        except BadRecord:
            continue
        return start + candidate
    return -1


def count_pieces(data: bytes, offset: int) -> int:
    """How many records the bytes from ``offset`` hold, walking their length fields (a piece
    cut short counts as one); at least 1 when there is any byte."""
    pieces = 0
    while offset < len(data):
        pieces += 1
        if len(data) - offset < PREFIX.size:
            break
        (body_length,) = struct.unpack_from("<I", data, offset)
        offset += PREFIX.size + max(body_length, 1)
    return pieces


def segment_header(first_sequence: int) -> bytes:
    head = _HEADER.pack(MAGIC, FORMAT_VERSION, HEADER_SIZE, first_sequence, 0)
    return head + struct.pack("<I", zlib.crc32(head))


def check_header(data: bytes, segment: Segment) -> int:
    """The format version of the segment whose bytes are ``data``; CorruptFileError (naming
    the file) for a foreign, damaged or unknown-version header."""
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
    if version not in READABLE_VERSIONS:
        raise corrupt(
            f"log format version {version} is not supported (this permindex reads versions "
            f"{', '.join(map(str, READABLE_VERSIONS))}); use the permindex that wrote it"
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
    return int(version)
