"""Recovery of the write-ahead log at a start (:func:`read_log`): which segments to read, the
records to replay after the snapshot, and what to do with a torn tail or with corruption.

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

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from permindex.errors import CorruptFileError
from permindex.storage.datadir import fsync_directory, remove_stale
from permindex.storage.wal_records import (
    FORMAT_VERSION,
    HEADER_SIZE,
    PREFIX,
    BadRecord,
    Record,
    Segment,
    check_header,
    count_pieces,
    decode_body,
    list_segments,
    record_at,
    valid_record_after,
)

__all__ = ["RecoveredLog", "read_log"]

# The log's warnings keep the logger name they have always had.
log = logging.getLogger("permindex.storage.wal")

_TMP_GLOB: Final = ".wal-*.tmp"


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
    taken), durably: file and directory fsynced before the caller cuts anything."""
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
    fsync_directory(path.parent)
    return target


def _truncate_file(path: Path, offset: int) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.ftruncate(fd, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def read_log(
    directory: Path,
    after: int,
    *,
    truncate_corrupt: bool = False,
    decode: Callable[[bytes, int, int, int], Record] = decode_body,
) -> RecoveredLog:
    """Read the log in ``directory`` for recovery: every record with a sequence number above
    ``after`` (the snapshot's), checked, in order (rules in the module docstring).

    ``decode`` reads a record's body (bytes, start, end, format version) once its length,
    CRC and sequence number are checked: :func:`~permindex.storage.wal_records.decode_body`,
    or a Jaccard collection's (:mod:`permindex.storage.jaccard_store`).

    A torn tail is cut off the file (and fsynced) with a warning. With ``truncate_corrupt``,
    corruption elsewhere is cut off too (the bytes kept as ``.dropped`` files) with a warning;
    without it, it raises.

    Raises:
        CorruptFileError: a segment that is foreign, of an unknown version, has a bad header or
            a bad record before its tail, or a gap in the sequence numbers (a missing segment);
            the message names the file and the remedy. Nothing was changed on disk then.
        OSError: a segment cannot be read or cut.
    """
    remove_stale(directory, _TMP_GLOB, "segment creation", log)
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
            version = check_header(data, segment)
        except CorruptFileError as error:
            _refuse_or_drop(result, str(error), segment.path, later=[segment, *later],
                            truncate=truncate_corrupt)  # fmt: skip
            break
        expected = first
        offset = HEADER_SIZE
        damaged = False
        while offset < len(data):
            try:
                sequence, end = record_at(data, offset)
                if sequence != expected:
                    raise BadRecord(f"sequence number {sequence}, expected {expected}")
                record = decode(data, offset + PREFIX.size, end, version)
            except BadRecord as bad:
                _damaged(result, segment, data, offset, expected, bad.reason, later,
                         truncate=truncate_corrupt)  # fmt: skip
                damaged = True
                break
            if sequence > after:
                result.records.append(record)
            expected = sequence + 1
            offset = end
        # A segment of an older format is never appended to: the writer starts a new one.
        tail = (segment, offset) if version == FORMAT_VERSION else None
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
    pieces = count_pieces(data, offset)
    valid_after = valid_record_after(data, offset, expected)
    where = f"{path}: bad record at byte offset {offset} (sequence {expected} expected): {problem}"
    if later or valid_after >= 0:
        if valid_after >= 0:
            context = f"a valid record follows at byte offset {valid_after}"
        else:
            context = f"later segments follow ({', '.join(s.path.name for s in later)})"
        if not truncate:
            _refuse_or_drop(result, f"{where}; {context}", path, later=later, truncate=False)
        # the later segments first: a crash between the steps then leaves the damaged segment
        # last, as the next start expects to find it
        moved = [_drop_aside(s.path) for s in later]
        kept = _drop_aside(path, data[offset:])
        _truncate_file(path, offset)
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
