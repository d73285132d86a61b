"""Snapshots: the on-disk image of an index (the file format, its writer and its checking
reader), and the snapshot generations of a data directory (:class:`DataDir`).

A snapshot holds every stored (key, fingerprint) pair plus the options it was written with. It is
written atomically (temporary file in the same directory, write, flush, fsync, rename, fsync of the
directory), so the file under its final name is always either the previous complete snapshot or
the new complete one. :func:`read_snapshot` checks everything before it returns anything: a
foreign, truncated, corrupt or unknown-version file raises
:class:`~permindex.errors.CorruptFileError` naming the file and what is wrong; it never returns
part of an index. No pickle, no native byte order.

File format, version 4 (every integer little-endian; n = number of keys; B = bytes of the codes;
H = header size = 72)::

    offset        size  field
    ------------  ----  ---------------------------------------------------------------------
    0             8     magic  89 50 4D 58 0D 0A 1A 0A  (b"\\x89PMX\\r\\n\\x1a\\n", PNG-style: the
                        high byte catches 7-bit transfers, CR LF / LF / ^Z catch text-mode ones)
    8             4     u32  format version = 4
    12            4     u32  header size in bytes = 72
    16            8     u64  n, number of keys
    24            8     u64  B, bytes of the codes
    32            4     u32  k the index answered when written (bits)
    36            2     u16  design: blocks
    38            2     u16  design: leading blocks per table
    40            8     u64  sequence: generation number, +1 for every snapshot of a data directory
    48            8     f64  time written, Unix seconds (IEEE 754 binary64)
    56            8     u64  log sequence: every record of the write-ahead log
                        (:mod:`permindex.storage.wal`) with a sequence number up to this one is in
                        the snapshot; recovery replays the records after it. 0: no log record.
    64            4     u32  flags: 1 = the times are in the file (a reader refuses other bits)
    68            4     u32  CRC-32 (zlib / ISO-HDLC) of bytes 0..67
    H             8n    u64[n]  fingerprints, in key order
    (flag 1)      4n    u32[n]  time of each key, Unix seconds: when it was last added, for a
                        collection with expiry (:mod:`permindex.index.expiry`); absent: all 0
    then          n     u8[n]  each key's code length, or 255: a u16 length precedes its code
    then          8     u32  t, segments of the dictionary; u32  D, their bytes
    then          2t+D  u16[t]  each segment's length, then the segments' bytes
    then          B     the codes (:mod:`permindex.index.keys.codec`: each key's canonical code
                        with that dictionary), in key order, a long one after its u16 length
    then          4     u32  CRC-32 of everything from H to here
    then          4     end marker b"PMXE"

The key store holds its keys in exactly this layout (:mod:`permindex.index.keys.rows`), so an
empty index loads the codes as they are (no key decoded, coded or hashed with XXH3 again);
the reader checks every code's form first (:func:`~permindex.index.keys.kernels.scan_codes`:
token ids, digit-run values, bounds) and, when a code holds a raw run or the dictionary non-ASCII
bytes, that the keys decode to valid UTF-8. Keys are unique (the loader checks that the index it
builds has n keys). Version 4 takes 9 bytes a key (13 with times) and its code, where version 3
took 16 and the key's UTF-8 bytes and a NUL.

Older versions are still read; only version 4 is written. Version 3 (before the codes) has the
times always, u32 UTF-8 key lengths and a key section (each key's UTF-8 bytes then a NUL) in
place of the lengths, dictionary and codes (H + 8 + 16n + B bytes). Version 2 (before expiry)
is version 3 without the times (H + 8 + 12n + B bytes; read with no times). Version 1 (the first
release, written before the write-ahead log existed) is version 2 without the log sequence: the
header is 64 bytes, flags at 56, its CRC at 60 over bytes 0..59 (read as log sequence 0).

A snapshot the server writes is *fuzzy* (see :meth:`permindex.index.Index.export_slices`): it is
read from the index in slices while writes go on, so a key changed during the write may appear
with a value newer than the log sequence; replaying the log after the log sequence, which
recovery always does, gives the exact state. That is why the log is kept until a newer snapshot
is durable, and why a snapshot is never loaded without its log.

The data directory's layout, lock and file-system steps are :mod:`permindex.storage.datadir`'s;
:class:`DataDir` (in this module) reads and writes its snapshot generations.

Options that differ from the server's: the snapshot stores only (key, fingerprint) pairs plus the
k and design it was written with, for information. The tables are always rebuilt from the pairs
when a snapshot is loaded, so a snapshot loads into an index of any k or design; the server logs
a warning when they differ (see :mod:`permindex.rpc.server`).

Writing and reading are linear in n + B; reading keeps the keys as codes (or, before version 4,
as the section) and decodes them only on demand (:attr:`Snapshot.section`,
:attr:`Snapshot.keys`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import itertools
import logging
import os
import struct
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

import numpy as np
import numpy.typing as npt

from permindex.errors import CorruptFileError, InvalidArgumentError

if TYPE_CHECKING:
    from permindex.index.keys.codec import Dictionary
from permindex.storage.datadir import (
    PREVIOUS_SUFFIX,
    SNAPSHOT_NAME,
    DirectoryLock,
    delete_gradually,
    fsync_directory,
    idle_io_priority,
    link_previous,
    remove_stale,
    temporary_name,
)
from permindex.storage.key_section import (
    KeySectionError,
    check_section,
    decode_section,
    encode_keys,
)

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "READABLE_VERSIONS",
    "SNAPSHOT_NAME",
    "DataDir",
    "Part",
    "Snapshot",
    "SnapshotInfo",
    "fsync_directory",
    "read_snapshot",
    "write_snapshot",
    "write_snapshot_parts",
]

log = logging.getLogger(__name__)

MAGIC: Final = b"\x89PMX\r\n\x1a\n"
END_MARKER: Final = b"PMXE"
FORMAT_VERSION: Final = 4
#: Versions :func:`read_snapshot` reads (1: the first release, without a log sequence; 2:
#: without times; 3: UTF-8 keys).
READABLE_VERSIONS: Final = (1, 2, 3, 4)
#: Version 4's header flag: the times are in the file (else every time is 0).
FLAG_TIMES: Final = 1

_HEADER = struct.Struct("<8sIIQQIHHQdQI")  # everything before the header CRC (versions 2, 3)
_HEADER_SIZE: Final = _HEADER.size + 4  # 72
_HEADER_V1 = struct.Struct("<8sIIQQIHHQdI")  # version 1: no log sequence
_HEADER_V1_SIZE: Final = _HEADER_V1.size + 4  # 64
_KEYS_PER_CHUNK: Final = 1 << 16  # keys encoded per step (no long call holding the GIL)
_SYNC_BYTES: Final = 1 << 25  # a snapshot being written is fdatasynced every 32 MiB
_TRAILER = struct.Struct("<I4s")
_READ_CHUNK: Final = 1 << 26  # bytes per read() of a large section (64 MiB)
_UTF8_SLICE: Final = 1 << 24  # bytes of a non-ASCII key section checked as UTF-8 per step


@dataclass(frozen=True)
class SnapshotInfo:
    """What one snapshot file holds, without its contents.

    Attributes:
        path: the file.
        count: keys in it.
        bytes: file size, bytes.
        seconds: wall time the write or read took, seconds.
        created_unix_seconds: when it was written, Unix seconds.
        sequence: its generation number in its data directory.
        k: the k (bits) of the index it was written from.
        blocks: design of that index: blocks of the 64 bits.
        leading: design of that index: leading blocks per table.
        log_sequence: the last write-ahead log record it holds (0: none; version 1: 0).
        version: its format version.
    """

    path: Path
    count: int
    bytes: int
    seconds: float
    created_unix_seconds: float
    sequence: int
    k: int
    blocks: int
    leading: int
    log_sequence: int = 0
    version: int = FORMAT_VERSION


@dataclass(frozen=True)
class KeyCodes:
    """The keys of a version-4 snapshot as the key store holds them
    (:mod:`permindex.index.keys.rows`): ``lens`` (n,) uint8, ``spans`` (the codes), their
    ``bases`` ((n / 16 + 1,) int64, checked by
    :func:`~permindex.index.keys.kernels.scan_codes`), the ``words`` they are coded with, and
    the ``longest`` key's UTF-8 bytes."""

    words: Dictionary
    lens: npt.NDArray[np.uint8]
    spans: npt.NDArray[np.uint8]
    bases: npt.NDArray[np.int64]
    longest: int = 0


@dataclass(frozen=True)
class Snapshot:
    """A snapshot read back (every check of :func:`read_snapshot` passed): ``keys[i]`` has
    fingerprint ``fingerprints[i]``. Keys are as written (unique when written from an index).

    Attributes:
        fingerprints: (n,) uint64.
        info: what the file holds.
        times: (n,) uint32, when each key was last added (Unix seconds; 0: not kept), or None
            (a version 1 or 2 file, or a version 4 file written without times).
        codes: the keys as coded in a version-4 file (:class:`KeyCodes`), which an empty
            index loads as they are; None for older versions.
        lengths: (n,) uint32, each key's UTF-8 byte length (the NUL excluded), each >= 1
            (of a version-4 file: decoded on first access).
        section: (B,) uint8, the key section: each key's UTF-8 bytes then a NUL (valid UTF-8,
            the NULs where ``lengths`` say), the compact form
            :meth:`permindex.index.Index.from_compact` loads without a str per key.
        keys: the keys as a list of str, decoded on first access (and then kept).
    """

    fingerprints: npt.NDArray[np.uint64]
    info: SnapshotInfo
    utf8: tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint8]] | None = None
    times: npt.NDArray[np.uint32] | None = None
    codes: KeyCodes | None = None

    @functools.cached_property
    def _decoded(self) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint8]]:
        if self.utf8 is not None:
            return self.utf8
        assert self.codes is not None
        return _decode_codes(self.codes, self.info.path)

    @property
    def lengths(self) -> npt.NDArray[np.uint32]:
        """(n,) uint32 UTF-8 key lengths (see the class)."""
        return self._decoded[0]

    @property
    def section(self) -> npt.NDArray[np.uint8]:
        """(B,) uint8 key section (see the class)."""
        return self._decoded[1]

    @functools.cached_property
    def keys(self) -> list[str]:
        """The n keys, in file order (decoded from ``section`` once, then cached)."""
        return _decode_keys(self.section, self.lengths, self.info.path)


# ----------------------------------------------------------------------------------- writing


def _as_fingerprints(fingerprints: npt.ArrayLike, n: int) -> npt.NDArray[np.uint64]:
    if isinstance(fingerprints, np.ndarray):
        if fingerprints.dtype != np.uint64:
            raise TypeError(f"fingerprints must be a uint64 array, not {fingerprints.dtype}")
        array = fingerprints
    else:
        try:
            array = np.array(fingerprints, dtype=np.uint64)
        except (OverflowError, ValueError) as error:
            raise InvalidArgumentError(
                f"fingerprints must be integers in [0, 2**64): {error}"
            ) from error
    if array.shape != (n,):
        raise InvalidArgumentError(
            f"{n} keys but fingerprints of shape {array.shape}: one fingerprint per key"
        )
    return np.ascontiguousarray(array, dtype="<u8")


#: One slice of a snapshot's contents: (m,) UTF-8 key lengths (NUL excluded), the key section of
#: those m keys (each key's bytes then a NUL), (m,) uint64 fingerprints -- the form of
#: :meth:`permindex.index.Index.export_slices` -- and optionally (m,) uint32 times (else 0),
#: the form of :meth:`permindex.index.ExpiringIndex.export_timed_slices`.
Part = (
    tuple[npt.NDArray[np.integer], "npt.NDArray[np.uint8] | bytes", npt.NDArray[np.uint64]]
    | tuple[
        npt.NDArray[np.integer],
        "npt.NDArray[np.uint8] | bytes",
        npt.NDArray[np.uint64],
        npt.NDArray[np.uint32],
    ]
)


def write_snapshot(
    path: str | os.PathLike[str],
    keys: Sequence[str],
    fingerprints: npt.ArrayLike,
    *,
    k: int,
    design: tuple[int, int],
    sequence: int = 0,
    log_sequence: int = 0,
    keep_previous: bool = True,
    times: npt.NDArray[np.uint32] | None = None,
) -> SnapshotInfo:
    """Write ``keys`` and their ``fingerprints`` (and (n,) uint32 ``times``; None: 0) to
    ``path`` atomically (format in the module docstring); :func:`write_snapshot_parts` does the
    writing.

    Args:
        path: the snapshot file.
        keys: unique, non-empty str keys (the caller's index guarantees both; not re-checked).
        fingerprints: (n,) uint64 array or a sequence of ints in [0, 2^64), one per key.
        k: the index's k, bits (recorded for information).
        design: the index's (blocks, leading) (recorded for information).
        sequence: generation number to record.
        log_sequence: the last write-ahead log record the contents include.
        keep_previous: keep the replaced file as ``path.prev``.

    Returns:
        The :class:`SnapshotInfo` of the file written (``seconds`` = wall time of the write).

    Raises:
        TypeError: a key is not a str, or ``fingerprints`` is an array of another dtype.
        InvalidArgumentError: lengths differ, a fingerprint is out of range, a key cannot be
            encoded as UTF-8. Nothing is written.
        OSError: the file could not be written (disk full, permissions); the temporary file is
            removed and ``path`` is unchanged.
    """
    started = time.perf_counter()
    n = len(keys)
    fps = _as_fingerprints(fingerprints, n)
    all_times = np.zeros(n, dtype=np.uint32) if times is None else np.asarray(times, np.uint32)
    if all_times.shape != (n,):
        raise InvalidArgumentError(f"{n} keys but times of shape {all_times.shape}")
    parts: list[Part] = []
    for start in range(0, n, _KEYS_PER_CHUNK):
        lengths, blob = encode_keys(keys[start : start + _KEYS_PER_CHUNK])
        chunk = slice(start, start + _KEYS_PER_CHUNK)
        parts.append((lengths, blob, fps[chunk], all_times[chunk]))
    info = write_snapshot_parts(
        path,
        parts,
        k=k,
        design=design,
        sequence=sequence,
        log_sequence=log_sequence,
        keep_previous=keep_previous,
    )
    return dataclasses.replace(info, seconds=time.perf_counter() - started)


def _train_on(parts: Sequence[Part]) -> Dictionary:
    """A dictionary trained on the first keys of ``parts`` (at most 65,536)."""
    from permindex.index.keys.codec import train_dictionary

    sample: list[bytes] = []
    for part in parts:
        lengths, blob = part[0], part[1]
        if len(lengths):
            raw = bytes(blob)[:-1]
            sample += raw.split(b"\x00")
        if len(sample) >= 1 << 16:
            break
    return train_dictionary(sample[: 1 << 16])


def write_snapshot_parts(
    path: str | os.PathLike[str],
    parts: Sequence[Part],
    *,
    k: int,
    design: tuple[int, int],
    sequence: int = 0,
    log_sequence: int = 0,
    keep_previous: bool = True,
    words: Dictionary | None = None,
) -> SnapshotInfo:
    """Write a snapshot whose contents are the concatenation of ``parts`` (see :data:`Part`) to
    ``path`` atomically, the keys coded with ``words`` (None: a dictionary trained on the first
    keys, :func:`~permindex.index.keys.codec.train_dictionary`).

    The data goes to a temporary file in the same directory, which is flushed, fsynced and
    renamed over ``path``; then the directory is fsynced. A crash at any point leaves ``path``
    either as it was or complete and new. With ``keep_previous``, the file ``path`` held before is
    kept as ``path`` + ``.prev`` (a hard link made before the rename). Sections are written part
    by part (no concatenation of the whole), each write and checksum releasing the GIL, at the
    idle I/O priority class (Linux; :func:`~permindex.storage.datadir.idle_io_priority`), and
    fdatasynced every 32 MiB as the file grows (not all at the final fsync), so that the
    write-ahead log's fsyncs do not wait behind it. O(n + B).

    Raises:
        InvalidArgumentError: a part whose three arrays disagree (nothing is written).
        OSError: as :func:`write_snapshot`.
    """
    started = time.perf_counter()
    path = Path(path)
    from permindex.index.keys.store import encode_codes, layout_codes

    checked: list[tuple[memoryview, memoryview, memoryview, memoryview]] = []
    n = 0
    section_bytes = 0
    timed = False
    if words is None:
        words = _train_on(parts)
    for part in parts:
        lengths, blob, fps = part[:3]
        m = len(lengths)
        times = part[3] if len(part) == 4 else np.zeros(m, dtype=np.uint32)
        blob_view = (memoryview(blob) if isinstance(blob, bytes) else blob.data).cast("B")
        if (
            len(fps) != m
            or len(times) != m
            or int(np.sum(lengths, dtype=np.int64)) + m != len(blob_view)
        ):
            raise InvalidArgumentError(
                f"a snapshot part of {m} key lengths, {len(fps)} fingerprints, {len(times)} "
                f"times and {len(blob_view)} key bytes does not add up"
            )
        fps_le = np.ascontiguousarray(fps, dtype="<u8")
        times_le = np.ascontiguousarray(times, dtype="<u4")
        timed = timed or bool(times_le.any())
        section = np.frombuffer(blob_view, dtype=np.uint8)
        ends = np.cumsum(np.asarray(lengths, dtype=np.int64) + 1)
        coded = encode_codes(section, ends, words)
        lens, spans = layout_codes(coded.codes, coded.sizes)
        checked.append((fps_le.data.cast("B"), times_le.data.cast("B"), lens.data, spans.data))
        n += m
        section_bytes += len(spans)
    blocks, leading = (int(x) for x in design)
    created = time.time()
    flags = FLAG_TIMES if timed else 0
    head = _HEADER.pack(
        MAGIC, FORMAT_VERSION, _HEADER_SIZE, n, section_bytes, k, blocks, leading, sequence,
        created, log_sequence, flags,
    )  # fmt: skip
    token_lengths = np.diff(words.offsets).astype("<u2")
    dictionary = (
        struct.pack("<II", words.size, int(words.data.size))
        + token_lengths.tobytes()
        + words.data.tobytes()
    )
    header = head + struct.pack("<I", zlib.crc32(head))
    temporary = temporary_name(path, "write")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        with idle_io_priority(), open(fd, "wb", closefd=True) as out:
            out.write(header)
            crc = 0
            unsynced = 0
            for column in range(4):  # fingerprints, times, code lengths, dictionary, codes
                if column == 1 and not timed:
                    continue
                if column == 3:
                    out.write(dictionary)
                    crc = zlib.crc32(dictionary, crc)
                for columns in checked:
                    out.write(columns[column])
                    crc = zlib.crc32(columns[column], crc)
                    unsynced += len(columns[column])
                    if unsynced >= _SYNC_BYTES:
                        out.flush()
                        os.fdatasync(out.fileno())
                        unsynced = 0
            out.write(_TRAILER.pack(crc, END_MARKER))
            out.flush()
            os.fsync(out.fileno())
        retired = link_previous(path) if keep_previous and path.exists() else None
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    fsync_directory(path.parent)
    if retired is not None:
        delete_gradually(retired, _SYNC_BYTES)
    return SnapshotInfo(
        path=path,
        count=n,
        bytes=len(header)
        + (13 if timed else 9) * n
        + len(dictionary)
        + section_bytes
        + _TRAILER.size,
        seconds=time.perf_counter() - started,
        created_unix_seconds=created,
        sequence=sequence,
        k=k,
        blocks=blocks,
        leading=leading,
        log_sequence=log_sequence,
    )


# ----------------------------------------------------------------------------------- reading


def _read_exactly(source: io.BufferedReader, into: memoryview, path: Path, what: str) -> None:
    view = into.cast("B")
    done = 0
    while done < len(view):
        got = source.readinto(view[done : done + _READ_CHUNK])
        if not got:
            raise CorruptFileError(f"{path}: truncated in the {what}", path=str(path))
        done += got


_SECTION_PROBLEMS: Final = {
    "length": "an empty key",
    "size": "key lengths do not add up to the key section",
    "nul": "a key is not NUL-terminated",
}


def _corrupt_section(error: KeySectionError, path: Path) -> CorruptFileError:
    """The CorruptFileError naming ``path`` for a key section's ``error``."""
    if error.kind == "utf8":
        what = f"a key is not valid UTF-8 ({error.reason} at byte {error.offset})"
    else:
        what = _SECTION_PROBLEMS[error.kind]
    return CorruptFileError(f"{path}: {what}", path=str(path))


def _check_key_section(
    section: npt.NDArray[np.uint8], lengths: npt.NDArray[np.uint32], path: Path
) -> None:
    """CorruptFileError unless the key section is well formed
    (:func:`~permindex.storage.key_section.check_section`: no empty key, lengths that add up, a
    NUL ending every key, valid UTF-8, checked :data:`_UTF8_SLICE` bytes at a time when not
    ASCII). Key lengths above MAX_KEY_BYTES pass this check; loading refuses them."""
    try:
        check_section(section, lengths, max_bytes=None, utf8_slice=_UTF8_SLICE)
    except KeySectionError as error:
        raise _corrupt_section(error, path) from None


def _decode_keys(
    section: npt.NDArray[np.uint8], lengths: npt.NDArray[np.uint32], path: Path
) -> list[str]:
    """The keys of the key section (``lengths`` exclude the NUL), decoded
    (:func:`~permindex.storage.key_section.decode_section`); CorruptFileError when it is not
    well formed."""
    try:
        check_section(section, lengths, max_bytes=None, utf8=False)
        return decode_section(section.tobytes(), lengths)
    except KeySectionError as error:
        raise _corrupt_section(error, path) from error


def _decode_codes(
    codes: KeyCodes, path: Path
) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint8]]:
    """The key section of a version-4 file's codes (checked: valid UTF-8 keys, none empty)."""
    from permindex.index.keys import kernels

    rows = np.arange(codes.lens.size, dtype=np.int64)
    section, lengths = kernels.decode_rows(
        codes.spans, codes.lens, codes.bases, rows, codes.words.data, codes.words.offsets
    )
    lengths32 = lengths.astype(np.uint32)
    _check_key_section(section, lengths32, path)
    return lengths32, section


def _read_codes(
    source: io.BufferedReader, path: Path, n: int, spans_bytes: int, rest: int, crc: int
) -> tuple[_Unchecked, int]:
    """Read a version-4 file's code lengths, dictionary and codes (``rest``: the file's bytes
    left before the trailer): (the codes, not checked yet, the CRC-32 continued from ``crc``
    over what was read)."""

    def corrupt(what: str) -> CorruptFileError:
        return CorruptFileError(f"{path}: {what}", path=str(path))

    lens = np.empty(n, dtype=np.uint8)
    _read_exactly(source, lens.data, path, "key lengths")
    head = source.read(8)
    if len(head) != 8:
        raise corrupt("truncated in the dictionary")
    tokens, data_bytes = struct.unpack("<II", head)
    wanted = n + 8 + 2 * tokens + data_bytes + spans_bytes
    if wanted > rest:
        raise corrupt(f"truncated: {rest} bytes of keys, the header announces {wanted}")
    if wanted < rest:
        raise corrupt(f"{rest - wanted} unexpected bytes after the end")
    token_lengths = np.empty(tokens, dtype="<u2")
    data = np.empty(data_bytes, dtype=np.uint8)
    spans = np.empty(spans_bytes, dtype=np.uint8)
    crc = zlib.crc32(lens.data, crc)
    crc = zlib.crc32(head, crc)
    for array, what in ((token_lengths, "dictionary"), (data, "dictionary"), (spans, "keys")):
        view = array.data.cast("B")
        _read_exactly(source, view, path, what)
        crc = zlib.crc32(view, crc)
    return _Unchecked(lens, token_lengths, data, spans), crc


@dataclass(frozen=True)
class _Unchecked:
    lens: npt.NDArray[np.uint8]
    token_lengths: npt.NDArray[np.uint16]
    data: npt.NDArray[np.uint8]
    spans: npt.NDArray[np.uint8]


def _check_codes(read: _Unchecked, path: Path) -> KeyCodes:
    """The codes read, with their dictionary and block offsets, checked (CorruptFileError)."""
    from permindex.index.keys import kernels

    def corrupt(what: str) -> CorruptFileError:
        return CorruptFileError(f"{path}: {what}", path=str(path))

    from permindex.index.keys.codec import Dictionary

    token_lengths, data = read.token_lengths, read.data
    if int(token_lengths.sum(dtype=np.int64)) != data.size:
        raise corrupt("the dictionary's lengths do not add up")
    segments = data.tobytes()
    bounds = [0, *np.cumsum(token_lengths, dtype=np.int64).tolist()]
    try:
        words = Dictionary.of_segments(segments[a:b] for a, b in itertools.pairwise(bounds))
    except ValueError as error:
        raise corrupt(f"a bad dictionary ({error})") from None
    bases, bad, raw, longest = kernels.scan_codes(read.lens, read.spans, words.offsets)
    if bad >= 0:
        raise corrupt(f"the code of key {bad} is not well formed")
    codes = KeyCodes(words, read.lens, read.spans, bases, int(longest))
    if raw or (words.data.size and int(words.data.max()) >= 0x80):
        _decode_codes(codes, path)  # bytes that may not be UTF-8: checked now
    return codes


def read_snapshot(path: str | os.PathLike[str]) -> Snapshot:
    """Read and check a snapshot written by :func:`write_snapshot`.

    Every byte is checked (magic number, format version, header CRC, file length, section
    lengths, body CRC, end marker, NUL terminators, UTF-8 keys) before anything is returned.

    Returns:
        The :class:`Snapshot` (``info.seconds`` = wall time of the read).

    Raises:
        CorruptFileError: the file is not a permindex snapshot, is of an unknown format version,
            is truncated or longer than its header says, or fails a checksum; the message names
            the file and what is wrong.
        OSError: the file cannot be opened or read (missing, permissions).
    """
    started = time.perf_counter()
    path = Path(path)

    def corrupt(what: str) -> CorruptFileError:
        return CorruptFileError(f"{path}: {what}", path=str(path))

    if path.is_dir():  # open() would say only "Is a directory"
        raise corrupt("is a directory, not a snapshot file (move it away to start afresh)")
    with open(path, "rb") as source:
        size = os.fstat(source.fileno()).st_size
        header = source.read(_HEADER_V1_SIZE)
        if not header:
            raise corrupt("empty file, not a permindex snapshot")
        if header[: len(MAGIC)] != MAGIC[: len(header)]:
            raise corrupt(
                f"not a permindex snapshot (starts with {header[:8]!r}, expected {MAGIC!r})"
            )
        if len(header) < _HEADER_V1_SIZE:  # the shortest header (version 1)
            raise corrupt(f"truncated: {size} bytes, shorter than the header")
        (version,) = struct.unpack_from("<I", header, 8)
        if version not in READABLE_VERSIONS:
            raise corrupt(
                f"snapshot format version {version} is not supported (this permindex reads "
                f"versions {', '.join(map(str, READABLE_VERSIONS))}, writes version "
                f"{FORMAT_VERSION}); use the permindex that wrote it"
            )
        layout, wanted = (_HEADER_V1, _HEADER_V1_SIZE) if version == 1 else (_HEADER, _HEADER_SIZE)
        header += source.read(wanted - len(header))
        if len(header) < wanted:
            raise corrupt(f"truncated: {size} bytes, shorter than the {wanted}-byte header")
        fields = layout.unpack_from(header)
        header_size, n, section_bytes, k, blocks, leading, sequence, created = fields[2:10]
        log_sequence = fields[10] if version != 1 else 0
        flags = fields[-1]
        (header_crc,) = struct.unpack_from("<I", header, layout.size)
        if zlib.crc32(header[: layout.size]) != header_crc:
            raise corrupt("header checksum mismatch (the file is damaged)")
        if header_size != wanted or flags & ~(FLAG_TIMES if version >= 4 else 0):
            raise corrupt(f"unexpected header size {header_size} or flags {flags:#x}")
        timed = version == 3 or (version >= 4 and bool(flags & FLAG_TIMES))
        if version >= 4:  # fingerprints, times, code lengths; the dictionary's size is inside
            fixed = wanted + (12 if timed else 8) * n
            expected = fixed + n + 8 + section_bytes + _TRAILER.size
            if size < expected:
                raise corrupt(
                    f"truncated: {size} bytes, the header announces at least {expected} ({n} keys)"
                )
            fps = np.empty(n, dtype="<u8")
            times = np.empty(n if timed else 0, dtype="<u4")
            crc = 0
            for array, what in ((fps, "fingerprints"), (times, "times")):
                view = array.data.cast("B")
                _read_exactly(source, view, path, what)
                crc = zlib.crc32(view, crc)
            read, crc = _read_codes(
                source, path, n, section_bytes, size - fixed - _TRAILER.size, crc
            )
            _check_trailer(source, crc, corrupt)
            codes = _check_codes(read, path)
            info = SnapshotInfo(
                path=path,
                count=n,
                bytes=size,
                seconds=time.perf_counter() - started,
                created_unix_seconds=created,
                sequence=sequence,
                k=k,
                blocks=blocks,
                leading=leading,
                log_sequence=log_sequence,
                version=version,
            )
            return Snapshot(
                fingerprints=fps.astype(np.uint64, copy=False),
                info=info,
                times=times.astype(np.uint32, copy=False) if timed else None,
                codes=codes,
            )
        per_key = 16 if version >= 3 else 12  # version 3 has the times
        expected = wanted + per_key * n + section_bytes + _TRAILER.size
        if size < expected:
            raise corrupt(f"truncated: {size} bytes, the header announces {expected} ({n} keys)")
        if size > expected:
            raise corrupt(f"{size - expected} unexpected bytes after the end ({expected} bytes)")
        fps = np.empty(n, dtype="<u8")
        times = np.empty(n if version >= 3 else 0, dtype="<u4")
        lengths = np.empty(n, dtype="<u4")
        blob = np.empty(section_bytes, dtype=np.uint8)  # not zeroed: read into at once
        crc = 0
        sections = (
            (fps, "fingerprints"),
            (times, "times"),
            (lengths, "key lengths"),
            (blob, "keys"),
        )
        for section, what in sections:
            view = section.data.cast("B")
            _read_exactly(source, view, path, what)
            crc = zlib.crc32(view, crc)
        _check_trailer(source, crc, corrupt)
    _check_key_section(blob, lengths, path)
    info = SnapshotInfo(
        path=path,
        count=n,
        bytes=size,
        seconds=time.perf_counter() - started,
        created_unix_seconds=created,
        sequence=sequence,
        k=k,
        blocks=blocks,
        leading=leading,
        log_sequence=log_sequence,
        version=version,
    )
    return Snapshot(
        fingerprints=fps.astype(np.uint64, copy=False),
        info=info,
        utf8=(lengths.astype(np.uint32, copy=False), blob),
        times=times.astype(np.uint32, copy=False) if version >= 3 else None,
    )


def _check_trailer(
    source: io.BufferedReader, crc: int, corrupt: Callable[[str], CorruptFileError]
) -> None:
    """CorruptFileError unless the trailer follows: the body's CRC-32 ``crc`` and the end
    marker."""
    trailer = source.read(_TRAILER.size)
    if len(trailer) != _TRAILER.size:
        raise corrupt("truncated in the trailer")
    stored_crc, end = _TRAILER.unpack(trailer)
    if end != END_MARKER:
        raise corrupt(f"bad end marker {end!r} (expected {END_MARKER!r})")
    if crc != stored_crc:
        raise corrupt(
            f"checksum mismatch (CRC-32 {crc:#010x}, stored {stored_crc:#010x}): "
            "the file is damaged"
        )


# ------------------------------------------------------------------------------- data directory


class DataDir:
    """A server's data directory (layout: :mod:`permindex.storage.datadir`), owned by one
    process at a time, and its snapshot generations.

    Opening it creates it if missing, takes the exclusive lock
    (:class:`~permindex.storage.datadir.DirectoryLock`) and removes temporary files a crash left
    behind. :meth:`close` releases the lock (so does process exit).

    Attributes:
        path: the directory.
        snapshot_path: its current snapshot's file.
        sequence: the generation number of the current snapshot (0: none).
        log_sequence: the log sequence of the current snapshot (0 when none).

    Raises (from the constructor):
        DataDirLockedError: another process (or another DataDir in this one) holds the lock.
        NotADirectoryError: ``path`` exists and is not a directory.
        OSError: the directory cannot be created or the lock file opened.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.snapshot_path = self.path / SNAPSHOT_NAME
        self._lock = DirectoryLock(self.path)
        self.sequence = 0
        self.log_sequence = 0
        remove_stale(self.path, f".{SNAPSHOT_NAME}.*.tmp", "snapshot", log)

    def load(self) -> Snapshot | None:
        """Read the current snapshot; None when there is none yet.

        Raises:
            CorruptFileError: the snapshot is corrupt (see :func:`read_snapshot`); the message
                also names the previous generation when one exists.
            OSError: it cannot be read.
        """
        if not self.snapshot_path.exists():
            return None
        try:
            snapshot = read_snapshot(self.snapshot_path)
        except CorruptFileError as error:
            previous = self.snapshot_path.with_name(SNAPSHOT_NAME + PREVIOUS_SUFFIX)
            if previous.exists():
                hint = f"; the previous generation {previous} may be restored by hand"
                raise CorruptFileError(str(error) + hint, path=error.path) from error
            raise
        self.sequence = snapshot.info.sequence
        self.log_sequence = snapshot.info.log_sequence
        return snapshot

    def save(
        self,
        keys: Sequence[str],
        fingerprints: npt.ArrayLike,
        *,
        k: int,
        design: tuple[int, int],
        log_sequence: int = 0,
    ) -> SnapshotInfo:
        """Write a new snapshot generation with :func:`write_snapshot` (the one it replaces is
        kept as ``snapshot.pmx.prev``). Not thread-safe: callers serialize saves.

        Raises:
            The errors of :func:`write_snapshot`; the current snapshot is then unchanged.
        """
        return self._write(
            functools.partial(write_snapshot, keys=keys, fingerprints=fingerprints),
            k=k,
            design=design,
            log_sequence=log_sequence,
        )

    def save_parts(
        self, parts: Sequence[Part], *, k: int, design: tuple[int, int], log_sequence: int
    ) -> SnapshotInfo:
        """As :meth:`save`, from slices (:func:`write_snapshot_parts`)."""
        return self._write(
            functools.partial(write_snapshot_parts, parts=parts),
            k=k,
            design=design,
            log_sequence=log_sequence,
        )

    def _write(
        self, write: Callable[..., SnapshotInfo], *, k: int, design: tuple[int, int],
        log_sequence: int,
    ) -> SnapshotInfo:  # fmt: skip
        """Write the next generation with ``write`` (a writer of this module, its contents
        bound) and note its sequence numbers. RuntimeError when the directory is closed."""
        if not self._lock.held:
            raise RuntimeError(f"data directory {self.path} is closed")
        info = write(
            self.snapshot_path,
            k=k,
            design=design,
            sequence=self.sequence + 1,
            log_sequence=log_sequence,
        )
        self.sequence = info.sequence
        self.log_sequence = info.log_sequence
        return info

    def close(self) -> None:
        """Release the lock; idempotent."""
        self._lock.close()

    def __enter__(self) -> DataDir:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
