"""The write-ahead log (permindex.storage.wal) on real files: the byte layout of the module
docstring, and every kind of damage -- torn tails cut at every offset of the last record, flipped
bytes at the tail and in the middle (refused; accepted with truncate_corrupt), a missing segment, a
foreign file, an unknown format version -- with the documented behaviour and message; failed writes
cut back so that the log stays valid."""

from __future__ import annotations

import errno
import logging
import os
import struct
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from permindex.errors import CorruptFileError, StorageError, StorageFullError
from permindex.storage.wal import LogWriter
from permindex.storage.wal_records import (
    ADD,
    HEADER_SIZE,
    MAGIC,
    REMOVE,
    REPLACE,
    encode_record,
    list_segments,
    segment_name,
)
from permindex.storage.wal_recovery import read_log


def _write_log(directory: Path, batches: list[list[tuple[int, str, int]]]) -> list[int]:
    """A log of one record per batch of (op, key, fingerprint); the end offset of each record."""
    writer = LogWriter(directory, segment=None, offset=0, last_sequence=0)
    ends = []
    for sequence, batch in enumerate(batches, start=1):
        ops = [op for op, _, _ in batch]
        keys = [key for _, key, _ in batch]
        fps = [fp for _, _, fp in batch]
        writer.append(encode_record(sequence, ops, keys, fps), sequence)
        ends.append(writer.offset)
    writer.close()
    return ends


BATCHES: list[list[tuple[int, str, int]]] = [
    [(ADD, "a", 1), (ADD, "ключ", 2**64 - 1)],
    [(REPLACE, "a", 5)],
    [(ADD, "with\x00nul", 0), (REMOVE, "ключ", 0)],
    [(ADD, "x" * 1024, 7), (ADD, "b", 8), (ADD, "c", 9)],
]


@pytest.fixture
def logdir(tmp_path: Path) -> tuple[Path, Path, list[int]]:
    """A directory with one segment of the four BATCHES: (dir, segment, record ends)."""
    ends = _write_log(tmp_path, BATCHES)
    return tmp_path, tmp_path / segment_name(1), ends


def _as_tuples(records: Any) -> list[list[tuple[int, str, int]]]:
    return [
        list(zip(r.ops.tolist(), r.keys, r.fingerprints.tolist(), strict=True)) for r in records
    ]


# --------------------------------------------------------------------------------- the format


def test_byte_layout_matches_the_docstring(tmp_path: Path) -> None:
    _write_log(tmp_path, [[(ADD, "ab", 3), (REMOVE, "é", 0)]])
    data = (tmp_path / segment_name(1)).read_bytes()
    head = MAGIC + struct.pack("<IIQI", 2, 32, 1, 0)
    assert data[:32] == head + struct.pack("<I", zlib.crc32(head))
    body = struct.pack("<QI", 1, 2) + bytes([1, 3]) + struct.pack("<QQ", 3, 0)
    body += struct.pack("<II", 0, 0)  # the times (none given)
    body += struct.pack("<II", 2, 2) + b"ab\x00" + "é".encode() + b"\x00"
    length = struct.pack("<I", len(body))
    assert len(body) == 12 + 18 * 2 + 4  # L = 12 + 18n + K
    assert data[32:] == length + struct.pack("<I", zlib.crc32(body, zlib.crc32(length))) + body


def test_round_trip_and_continuation(logdir: tuple[Path, Path, list[int]]) -> None:
    directory, segment, ends = logdir
    found = read_log(directory, 0)
    assert _as_tuples(found.records) == BATCHES
    assert [r.sequence for r in found.records] == [1, 2, 3, 4]
    assert found.last_sequence == 4 and found.warnings == []
    assert found.tail is not None and found.tail[1] == ends[-1] == segment.stat().st_size
    assert [r.sequence for r in read_log(directory, 2).records] == [3, 4]  # after a snapshot
    writer = LogWriter(
        directory, segment=found.tail[0], offset=found.tail[1], last_sequence=found.last_sequence
    )
    writer.append(encode_record(5, [ADD], ["d"], [4]), 5)
    writer.close()
    assert [r.sequence for r in read_log(directory, 0).records] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (([ADD], ["a", "b"], [1, 2]), "n >= 1 changes"),
        (([], [], []), "n >= 1 changes"),
        (([7], ["a"], [1]), "ops must be"),
        (([REMOVE], ["a"], [1]), "a remove must carry fingerprint 0"),
        (([ADD], [""], [1]), "keys are 1 to 1024"),
        (([ADD], ["é" * 513], [1]), "keys are 1 to 1024"),
        (([ADD], ["\ud800"], [1]), "not encodable"),
        (([ADD], ["a"], [-1]), "fingerprints must be integers"),
    ],
)
def test_nothing_invalid_is_ever_encoded(args: tuple[Any, Any, Any], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        encode_record(1, *args)


# -------------------------------------------------------------------------------- torn tails


def test_torn_tail_cut_at_every_offset_of_the_last_record(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A crash can stop the last write anywhere: every prefix of the last record is cut off
    with a warning giving bytes and records, and the three records before it survive."""
    source = tmp_path / "source"
    source.mkdir()
    ends = _write_log(source, BATCHES)
    data = (source / segment_name(1)).read_bytes()
    for keep in range(ends[-2] + 1, ends[-1]):
        directory = tmp_path / f"cut{keep}"
        directory.mkdir()
        (directory / segment_name(1)).write_bytes(data[:keep])
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="permindex.storage.wal"):
            found = read_log(directory, 0)
        cut = keep - ends[-2]
        assert _as_tuples(found.records) == BATCHES[:3]
        assert found.last_sequence == 3
        assert found.tail is not None and found.tail[1] == ends[-2]
        assert len(found.warnings) == 1
        message = found.warnings[0]
        assert f"cut off a torn tail of {cut} bytes (1 record) at byte offset {ends[-2]}" in message
        assert message in caplog.text
        assert (directory / segment_name(1)).stat().st_size == ends[-2]  # cut on disk
        assert read_log(directory, 0).warnings == []  # and for good


@pytest.mark.parametrize("position", [0, 3, 4, 7, 8, 15, 16, 20, 25, 40, -20, -2, -1])
def test_flipped_byte_in_the_last_record_is_cut_as_a_torn_tail(
    logdir: tuple[Path, Path, list[int]], position: int
) -> None:
    directory, segment, ends = logdir
    data = bytearray(segment.read_bytes())
    data[position % (ends[-1] - ends[-2]) + ends[-2]] ^= 0x10
    segment.write_bytes(bytes(data))
    found = read_log(directory, 0)
    assert _as_tuples(found.records) == BATCHES[:3]
    assert len(found.warnings) == 1 and "torn tail" in found.warnings[0]
    assert "(1 record)" in found.warnings[0] or "records)" in found.warnings[0]


def test_zeros_after_the_last_record_are_a_torn_tail(
    logdir: tuple[Path, Path, list[int]],
) -> None:
    """A file extended but not written (a crash of the machine) reads as zeros."""
    directory, segment, ends = logdir
    with open(segment, "ab") as out:
        out.write(bytes(4096))
    found = read_log(directory, 0)
    assert len(found.records) == 4
    assert "torn tail of 4096 bytes" in found.warnings[0]
    assert segment.stat().st_size == ends[-1]


# ----------------------------------------------------------------------- corruption in the middle


@pytest.mark.parametrize("record", [0, 1, 2])
@pytest.mark.parametrize("position", [0, 5, 9, 17, -1])
def test_corrupt_record_in_the_middle_is_refused(
    logdir: tuple[Path, Path, list[int]], record: int, position: int
) -> None:
    directory, segment, ends = logdir
    start = HEADER_SIZE if record == 0 else ends[record - 1]
    data = bytearray(segment.read_bytes())
    data[position % (ends[record] - start) + start] ^= 0x01
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError) as caught:
        read_log(directory, 0)
    message = str(caught.value)
    assert str(segment) in message and caught.value.path == str(segment)
    assert f"bad record at byte offset {start} (sequence {record + 1} expected)" in message
    assert "a valid record follows" in message
    assert "--truncate-corrupt-log" in message
    assert segment.read_bytes() == bytes(data)  # nothing changed on disk


def test_corrupt_record_in_the_middle_is_cut_with_the_flag(
    logdir: tuple[Path, Path, list[int]], caplog: pytest.LogCaptureFixture
) -> None:
    directory, segment, ends = logdir
    original = segment.read_bytes()
    data = bytearray(original)
    data[ends[0] + 12] ^= 0xFF  # record 2
    segment.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="permindex.storage.wal"):
        found = read_log(directory, 0, truncate_corrupt=True)
    assert _as_tuples(found.records) == BATCHES[:1]
    assert found.last_sequence == 1 and found.tail == (list_segments(directory)[0], ends[0])
    cut = ends[-1] - ends[0]
    assert f"cut {cut} bytes (3 records) off at byte offset {ends[0]}" in found.warnings[0]
    assert "the changes from sequence 2 on are dropped" in caplog.text
    assert segment.stat().st_size == ends[0]
    dropped = segment.with_name(segment.name + ".dropped")
    assert dropped.read_bytes() == bytes(data[ends[0] :])  # kept for inspection
    assert read_log(directory, 0).warnings == []


def _two_segments(directory: Path) -> tuple[Path, Path]:
    """Records 1-2 in the first segment, 3-4 in the second (as a snapshot's rotation leaves)."""
    writer = LogWriter(directory, segment=None, offset=0, last_sequence=0)
    for sequence, batch in enumerate(BATCHES, start=1):
        if sequence == 3:
            writer.rotate()
        ops, keys, fps = zip(*batch, strict=True)
        writer.append(encode_record(sequence, ops, keys, fps), sequence)
    writer.close()
    return directory / segment_name(1), directory / segment_name(3)


def test_damaged_end_of_a_segment_that_is_not_the_last_is_refused(tmp_path: Path) -> None:
    """A sealed segment was fsynced before the next one existed: a crash cannot tear it."""
    first, second = _two_segments(tmp_path)
    data = first.read_bytes()
    first.write_bytes(data[:-3])
    with pytest.raises(CorruptFileError, match="later segments follow") as caught:
        read_log(tmp_path, 0)
    assert second.name in str(caught.value)
    found = read_log(tmp_path, 0, truncate_corrupt=True)
    assert _as_tuples(found.records) == BATCHES[:1]
    assert not second.exists() and second.with_name(second.name + ".dropped").exists()
    assert [s.first_sequence for s in list_segments(tmp_path)] == [1]


def test_missing_segment_is_refused(tmp_path: Path) -> None:
    first, second = _two_segments(tmp_path)
    first.unlink()
    with pytest.raises(CorruptFileError, match=r"no record of sequence numbers 1\.\.2") as caught:
        read_log(tmp_path, 0)
    assert "is missing" in str(caught.value) and "--truncate-corrupt-log" in str(caught.value)
    assert read_log(tmp_path, 2).records[0].sequence == 3  # a snapshot holding 1..2: fine
    found = read_log(tmp_path, 0, truncate_corrupt=True)
    assert found.records == [] and found.last_sequence == 0 and found.tail is None
    assert "set aside" in found.warnings[0] and not second.exists()


def test_segments_covered_by_the_snapshot_are_not_read(tmp_path: Path) -> None:
    first, _second = _two_segments(tmp_path)
    first.write_bytes(b"garbage")  # never read: every record in it is <= 2
    found = read_log(tmp_path, 2)
    assert [r.sequence for r in found.records] == [3, 4]
    assert [s.path for s in found.skipped_segments] == [first]


def test_a_log_behind_its_snapshot_continues_in_a_new_segment(tmp_path: Path) -> None:
    """The snapshot holds more than the log (the log's tail was lost in a machine crash under
    --fsync never): the next record must not reuse a sequence number the snapshot holds."""
    _write_log(tmp_path, BATCHES[:2])
    found = read_log(tmp_path, 9)
    assert found.records == [] and found.last_sequence == 9 and found.tail is None


# ------------------------------------------------------------------- foreign files, versions


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (b"", "empty file, not a permindex log segment"),
        (b"hello, world\n", "not a permindex log segment"),
        (b"\x89PMX\r\n\x1a\n" + bytes(64), "not a permindex log segment"),  # a snapshot
        (MAGIC + b"\x01\x00", "truncated: 10 bytes"),
    ],
)
def test_foreign_or_empty_file_named_like_a_segment_is_refused(
    tmp_path: Path, content: bytes, match: str
) -> None:
    path = tmp_path / segment_name(1)
    path.write_bytes(content)
    with pytest.raises(CorruptFileError, match=match):
        read_log(tmp_path, 0)
    assert path.read_bytes() == content
    (tmp_path / "notes.txt").write_text("not a segment name: ignored")
    path.unlink()
    assert read_log(tmp_path, 0).records == []


@pytest.mark.parametrize("version", [0, 3, 255])
def test_unknown_log_version_is_refused(logdir: tuple[Path, Path, list[int]], version: int) -> None:
    directory, segment, _ends = logdir
    data = bytearray(segment.read_bytes())
    struct.pack_into("<I", data, 8, version)
    struct.pack_into("<I", data, 28, zlib.crc32(bytes(data[:28])))
    segment.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError, match=f"log format version {version} is not supported"):
        read_log(directory, 0)


def test_header_that_disagrees_with_the_name_is_refused(
    logdir: tuple[Path, Path, list[int]],
) -> None:
    directory, segment, _ends = logdir
    segment.rename(directory / segment_name(7))
    with pytest.raises(CorruptFileError, match="header says it starts at sequence 1, its name 7"):
        read_log(directory, 6)


def test_interrupted_segment_creation_is_cleaned_up(tmp_path: Path) -> None:
    stale = tmp_path / f".{segment_name(1)}.123.0.tmp"
    stale.write_bytes(MAGIC)
    assert read_log(tmp_path, 0).records == []
    assert not stale.exists()


# ------------------------------------------------------------------------------ failed writes


def test_failed_write_is_cut_back_and_writes_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails half way (the disk fills up) leaves no partial record: the file is
    cut back, the sequence number is not used, and the next append succeeds."""
    writer = LogWriter(tmp_path, segment=None, offset=0, last_sequence=0)
    writer.append(encode_record(1, [ADD], ["a"], [1]), 1)
    good = writer.offset
    real_pwrite = os.pwrite

    def half_then_full(fd: int, data: Any, offset: int) -> int:
        if len(data) > 10:
            return real_pwrite(fd, bytes(data)[:10], offset)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", half_then_full)
    with pytest.raises(StorageFullError, match="No space left on device") as caught:
        writer.append(encode_record(2, [ADD], ["b" * 50], [2]), 2)
    assert caught.value.errno == errno.ENOSPC
    assert "nothing was changed" in str(caught.value)
    monkeypatch.undo()
    assert writer.last_sequence == 1 and writer.offset == good
    assert (tmp_path / segment_name(1)).stat().st_size == good
    writer.append(encode_record(2, [ADD], ["c"], [3]), 2)
    writer.close()
    found = read_log(tmp_path, 0)
    assert [r.keys for r in found.records] == [["a"], ["c"]] and found.warnings == []


def test_failed_fsync_is_refused_and_cut_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = LogWriter(tmp_path, segment=None, offset=0, last_sequence=0)
    good = writer.offset

    def failing(fd: int) -> None:
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(os, "fdatasync", failing)
    with pytest.raises(StorageError) as caught:
        writer.append(encode_record(1, [ADD], ["a"], [1]), 1)
    assert not isinstance(caught.value, StorageFullError)
    monkeypatch.undo()
    assert writer.last_sequence == 0
    assert (tmp_path / segment_name(1)).stat().st_size == good
    writer.close()


def test_retract_takes_the_last_record_back(tmp_path: Path) -> None:
    writer = LogWriter(tmp_path, segment=None, offset=0, last_sequence=0)
    writer.append(encode_record(1, [ADD], ["a"], [1]), 1)
    writer.append(encode_record(2, [ADD], ["b"], [2]), 2)
    writer.retract(2)
    writer.append(encode_record(2, [ADD], ["c"], [3]), 2)
    writer.close()
    assert [r.keys for r in read_log(tmp_path, 0).records] == [["a"], ["c"]]


@pytest.mark.parametrize("policy", ["always", "interval", "never"])
def test_every_policy_writes_before_append_returns(tmp_path: Path, policy: Any) -> None:
    """What a killed process leaves (the page cache) holds every appended record, whatever the
    fsync policy: read back without closing the writer."""
    writer = LogWriter(tmp_path, segment=None, offset=0, last_sequence=0, policy=policy)
    for sequence in range(1, 6):
        writer.append(encode_record(sequence, [ADD], [f"k{sequence}"], [sequence]), sequence)
    assert len(read_log(tmp_path, 0).records) == 5
    writer.abandon()


def test_large_record_round_trip(tmp_path: Path) -> None:
    n = 50_000
    keys = [f"https://example.org/{i}" for i in range(n)]
    fps = np.arange(n, dtype=np.uint64) * np.uint64(2**44 + 7)
    writer = LogWriter(tmp_path, segment=None, offset=0, last_sequence=0)
    writer.append(encode_record(1, np.full(n, ADD), keys, fps), 1)
    writer.close()
    (record,) = read_log(tmp_path, 0).records
    assert record.keys == keys and np.array_equal(record.fingerprints, fps)
