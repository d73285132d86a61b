"""Snapshot files and the data directory: exact round trips (hypothesis, unicode, NUL in keys,
10^6 keys), the byte layout of the module docstring, atomic replacement, and every kind of
corruption refused with CorruptFileError naming the file."""

from __future__ import annotations

import os
import struct
import sys
import threading
import time
import zlib
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from permindex.errors import CorruptFileError, DataDirLockedError, InvalidArgumentError
from permindex.storage.snapshot import (
    FORMAT_VERSION,
    MAGIC,
    SNAPSHOT_NAME,
    DataDir,
    read_snapshot,
    write_snapshot,
)

KEYS = ["a", "https://example.com/ü", "漢字/页面", "with\x00nul", "x" * 1024, "🙂" * 256]


def _write(path: Path, keys: list[str], fps: list[int]) -> None:
    write_snapshot(path, keys, np.array(fps, dtype=np.uint64), k=3, design=(4, 1))


def _roundtrip(tmp_path: Path, keys: list[str], fps: np.ndarray) -> None:
    path = tmp_path / "s.pmx"
    info = write_snapshot(path, keys, fps, k=2, design=(5, 2), sequence=7)
    assert info.count == len(keys)
    assert info.bytes == path.stat().st_size
    snap = read_snapshot(path)
    assert snap.keys == keys
    assert snap.fingerprints.dtype == np.uint64
    assert np.array_equal(snap.fingerprints, fps)
    assert (snap.info.k, snap.info.blocks, snap.info.leading) == (2, 5, 2)
    assert snap.info.sequence == 7
    assert snap.info.bytes == info.bytes
    assert snap.info.created_unix_seconds == info.created_unix_seconds


def test_roundtrip_unicode_nul_and_extreme_values(tmp_path: Path) -> None:
    fps = np.array([0, 2**64 - 1, 1, 2**63, 12345, 2**32], dtype=np.uint64)
    _roundtrip(tmp_path, KEYS, fps)


@pytest.mark.parametrize("keys", [[], ["only"], ["ascii", "keys"], ["ключ", "b"]])
def test_roundtrip_small(tmp_path: Path, keys: list[str]) -> None:
    _roundtrip(tmp_path, keys, np.arange(len(keys), dtype=np.uint64))


@given(
    entries=st.dictionaries(
        st.text(min_size=1, max_size=40),
        st.integers(min_value=0, max_value=2**64 - 1),
        max_size=50,
    )
)
def test_roundtrip_hypothesis(
    tmp_path_factory: pytest.TempPathFactory, entries: dict[str, int]
) -> None:
    keys = list(entries)
    fps = np.array(list(entries.values()), dtype=np.uint64)
    _roundtrip(tmp_path_factory.mktemp("h"), keys, fps)


def test_roundtrip_one_million_keys(tmp_path: Path) -> None:
    n = 1_000_000
    rng = np.random.default_rng(20260101)
    fps = rng.integers(0, 2**64, size=n, dtype=np.uint64, endpoint=False)
    keys = [f"https://example.org/{i:07d}/page.html" for i in range(n)]
    keys[123] = "ünïcödé/路径"  # one non-ASCII key: the general path
    path = tmp_path / "big.pmx"
    started = time.perf_counter()
    info = write_snapshot(path, keys, fps, k=3, design=(4, 1))
    written = time.perf_counter() - started
    started = time.perf_counter()
    snap = read_snapshot(path)
    read = time.perf_counter() - started
    assert snap.keys == keys
    assert np.array_equal(snap.fingerprints, fps)
    assert info.bytes == path.stat().st_size
    # version 3 took 16 bytes a key and its UTF-8 bytes and NUL; the codes take far less
    assert info.bytes < (80 + 16 * n + sum(len(k.encode()) for k in keys) + n) // 2
    assert written < 20 and read < 20, (written, read)


def test_byte_layout_matches_the_docstring(tmp_path: Path) -> None:
    path = tmp_path / "layout.pmx"
    keys = ["ab", "é"]
    write_snapshot(
        path,
        keys,
        np.array([1, 2**64 - 2], dtype=np.uint64),
        k=3,
        design=(4, 1),
        sequence=9,
        log_sequence=2**40 + 5,
        times=np.array([1_700_000_000, 0], dtype=np.uint32),
    )
    data = path.read_bytes()
    created = struct.unpack_from("<d", data, 48)[0]
    assert abs(created - time.time()) < 60
    head = MAGIC + struct.pack(
        "<IIQQIHHQdQI", 4, 72, 2, 2 + 3, 3, 4, 1, 9, created, 2**40 + 5, 1
    )  # flags 1: the times are in the file
    body = (
        struct.pack("<QQ", 1, 2**64 - 2)
        + struct.pack("<II", 1_700_000_000, 0)
        + bytes([2, 3])  # code lengths
        + struct.pack("<II", 0, 0)  # an empty dictionary (no segment repeats)
        + b"ab"  # ASCII as itself
        + b"\xe1"  # a run of 2 bytes >= 0x80
        + "é".encode()
    )
    expected = head + struct.pack("<I", zlib.crc32(head)) + body
    expected += struct.pack("<I", zlib.crc32(body)) + b"PMXE"
    assert data == expected
    assert len(data) == 80 + 12 * 2 + 2 + 8 + 5
    assert read_snapshot(path).info.log_sequence == 2**40 + 5


def _version_1_bytes(keys: list[str], fps: list[int], sequence: int) -> bytes:
    """A snapshot as the first release wrote it (format version 1, a 64-byte header)."""
    head = MAGIC + struct.pack(
        "<IIQQIHHQdI",
        1,
        64,
        len(keys),
        sum(len(key.encode()) + 1 for key in keys),
        3,
        4,
        1,
        sequence,
        1.7e9,
        0,
    )
    body = struct.pack(f"<{len(fps)}Q", *fps)
    body += struct.pack(f"<{len(keys)}I", *(len(key.encode()) for key in keys))
    body += b"".join(key.encode() + b"\x00" for key in keys)
    return (
        head
        + struct.pack("<I", zlib.crc32(head))
        + body
        + struct.pack("<I", zlib.crc32(body))
        + b"PMXE"
    )


def test_version_1_snapshot_is_still_read(tmp_path: Path) -> None:
    """The first release's snapshots load (log sequence 0: nothing of the log in them), and
    a data directory holding one moves on to version 2 at its next snapshot."""
    root = tmp_path / "data"
    root.mkdir()
    (root / SNAPSHOT_NAME).write_bytes(_version_1_bytes(["a", "ключ"], [1, 2**64 - 1], 4))
    snap = read_snapshot(root / SNAPSHOT_NAME)
    assert snap.keys == ["a", "ключ"] and snap.fingerprints.tolist() == [1, 2**64 - 1]
    assert (snap.info.version, snap.info.sequence, snap.info.log_sequence) == (1, 4, 0)
    with DataDir(root) as data_dir:
        assert data_dir.load() is not None and data_dir.log_sequence == 0
        info = data_dir.save(["b"], [2], k=3, design=(4, 1), log_sequence=7)
    assert (info.sequence, info.log_sequence) == (5, 7)
    assert read_snapshot(root / SNAPSHOT_NAME).info.version == FORMAT_VERSION
    assert read_snapshot(root / "snapshot.pmx.prev").info.version == 1  # the older generation


def test_write_refuses_bad_input_and_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.pmx"
    with pytest.raises(InvalidArgumentError):
        write_snapshot(path, ["a", "b"], [1], k=3, design=(4, 1))
    with pytest.raises(InvalidArgumentError):
        write_snapshot(path, ["a"], [-1], k=3, design=(4, 1))
    with pytest.raises(TypeError):
        write_snapshot(path, ["a"], np.array([1.0]), k=3, design=(4, 1))
    with pytest.raises(TypeError):
        write_snapshot(path, ["a", 3], [1, 2], k=3, design=(4, 1))  # type: ignore[list-item]
    with pytest.raises(InvalidArgumentError):
        write_snapshot(path, ["\ud800"], [1], k=3, design=(4, 1))  # a lone surrogate
    assert list(tmp_path.iterdir()) == []


def test_replacement_is_atomic_and_keeps_the_previous_generation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.pmx"
    _write(path, ["old"], [1])
    _write(path, ["new"], [2])
    assert read_snapshot(path).keys == ["new"]
    assert read_snapshot(tmp_path / "s.pmx.prev").keys == ["old"]

    def failing_fsync(fd: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", failing_fsync)
    with pytest.raises(OSError, match="No space"):
        _write(path, ["newer"], [3])
    monkeypatch.undo()
    assert read_snapshot(path).keys == ["new"]  # untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.pmx", "s.pmx.prev"]  # no temp left


def test_the_generation_before_previous_is_deleted_gradually(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A third snapshot retires the first: it is truncated in _SYNC_BYTES steps (fsynced) and
    unlinked after the new one is in place; the second stays as .prev, no temporary is left."""
    import permindex.storage.snapshot as snapshot_module

    path = tmp_path / "s.pmx"
    keys = [f"key-{i:06d}" for i in range(20_000)]
    _write(path, keys, list(range(20_000)))
    first_size = path.stat().st_size
    _write(path, ["second"], [2])
    monkeypatch.setattr(snapshot_module, "_SYNC_BYTES", 64 << 10)
    sizes: list[int] = []
    real_ftruncate = os.ftruncate

    def recording_ftruncate(fd: int, length: int) -> None:
        sizes.append(length)
        real_ftruncate(fd, length)

    monkeypatch.setattr(os, "ftruncate", recording_ftruncate)
    _write(path, ["third"], [3])
    assert read_snapshot(path).keys == ["third"]
    assert read_snapshot(tmp_path / "s.pmx.prev").keys == ["second"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.pmx", "s.pmx.prev"]
    assert len(sizes) == -(-first_size // (64 << 10)) and sizes[-1] == 0
    assert sizes == sorted(sizes, reverse=True)


def test_a_retired_generation_left_by_a_crash_is_removed_at_open(tmp_path: Path) -> None:
    (tmp_path / f".{SNAPSHOT_NAME}.123.4.retired.tmp").write_bytes(b"x" * 100)
    with DataDir(tmp_path) as data_dir:
        assert data_dir.load() is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["LOCK"]


# ---------------------------------------------------------------------------------- corruption


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.pmx"
    _write(path, ["alpha", "beta", "gamma"], [1, 2, 3])
    return path


def _refused(path: Path, match: str) -> CorruptFileError:
    with pytest.raises(CorruptFileError, match=match) as caught:
        read_snapshot(path)
    assert str(path) in str(caught.value)
    assert caught.value.path == str(path)
    return caught.value


@pytest.mark.parametrize(
    ("offset", "match"),
    [
        (0, "not a permindex snapshot"),  # magic
        (8, "format version"),  # version
        (20, "header checksum mismatch"),  # n
        (50, "header checksum mismatch"),  # time
        (58, "header checksum mismatch"),  # log sequence
        (72, "checksum mismatch"),  # first fingerprint
        (72 + 8 * 3, "checksum mismatch"),  # first key length
        (72 + 8 * 3 + 3 + 8 + 1, "checksum mismatch"),  # a key byte
        (-6, "checksum mismatch"),  # the stored body CRC
        (-1, "end marker"),
    ],
)
def test_flipped_byte_is_refused(good: Path, offset: int, match: str) -> None:
    data = bytearray(good.read_bytes())
    data[offset] ^= 0x40
    good.write_bytes(bytes(data))
    _refused(good, match)


@pytest.mark.parametrize("keep", [0, 3, 8, 11, 12, 63, 64, 71, 72, 80, -9, -1])
def test_truncated_file_is_refused(good: Path, keep: int) -> None:
    data = good.read_bytes()
    good.write_bytes(data[:keep])
    _refused(good, "truncated|empty file")


def test_trailing_garbage_is_refused(good: Path) -> None:
    with open(good, "ab") as out:
        out.write(b"\x00")
    _refused(good, "unexpected bytes after the end")


@pytest.mark.parametrize(
    "content", [b"hello, world\n", b'{"id": 1}\n' * 20, b"PK\x03\x04" + bytes(100)]
)
def test_foreign_file_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "foreign.pmx"
    path.write_bytes(content)
    _refused(path, "not a permindex snapshot")


@pytest.mark.parametrize("version", [0, 5, 255])
def test_unknown_version_is_refused(good: Path, version: int) -> None:
    data = bytearray(good.read_bytes())
    struct.pack_into("<I", data, 8, version)
    struct.pack_into("<I", data, 68, zlib.crc32(bytes(data[:68])))  # a well-formed header
    good.write_bytes(bytes(data))
    err = _refused(good, f"format version {version} is not supported")
    assert f"writes version {FORMAT_VERSION}" in str(err)


def test_consistent_but_malformed_body_is_refused(tmp_path: Path) -> None:
    """A body whose checksum matches but whose key lengths are wrong (a writer bug, or a
    deliberate edit) is still refused, never split wrongly."""
    path = tmp_path / "bad.pmx"
    _write(path, ["ab", "cd"], [1, 2])
    data = bytearray(path.read_bytes())
    data[72 + 16 : 72 + 18] = bytes([1, 2])  # code lengths 1 and 2 instead of 2 and 2
    end = len(data) - 8
    struct.pack_into("<I", data, end, zlib.crc32(bytes(data[72:end])))
    path.write_bytes(bytes(data))
    _refused(path, "not well formed")


@given(position=st.integers(min_value=0, max_value=10_000), xor=st.integers(1, 255))
def test_any_flipped_byte_is_refused(
    tmp_path_factory: pytest.TempPathFactory, position: int, xor: int
) -> None:
    path = tmp_path_factory.mktemp("flip") / "s.pmx"
    _write(path, ["one", "two", "three"], [10, 20, 30])
    data = bytearray(path.read_bytes())
    data[position % len(data)] ^= xor
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptFileError):
        read_snapshot(path)


# ------------------------------------------------------------------------------- data directory


def test_data_dir_lifecycle(tmp_path: Path) -> None:
    root = tmp_path / "data"
    with DataDir(root) as data_dir:
        assert data_dir.load() is None
        first = data_dir.save(["a"], np.array([1], dtype=np.uint64), k=3, design=(4, 1))
        second = data_dir.save(["b"], np.array([2], dtype=np.uint64), k=3, design=(4, 1))
        assert (first.sequence, second.sequence) == (1, 2)
        assert second.path == root / SNAPSHOT_NAME
    assert sorted(p.name for p in root.iterdir()) == ["LOCK", "snapshot.pmx", "snapshot.pmx.prev"]
    (root / ".snapshot.pmx.999.0.write.tmp").write_bytes(b"half a snapshot")
    with DataDir(root) as data_dir:
        loaded = data_dir.load()
        assert loaded is not None and loaded.keys == ["b"]
        assert data_dir.save(["c"], [3], k=3, design=(4, 1)).sequence == 3
    assert not list(root.glob("*.tmp"))  # the left-over temporary file was removed


def test_data_dir_is_locked_while_open(tmp_path: Path) -> None:
    root = tmp_path / "data"
    with DataDir(root):
        with pytest.raises(DataDirLockedError, match=f"process {os.getpid()}") as caught:
            DataDir(root)
        assert caught.value.pid == os.getpid()
    DataDir(root).close()  # released


def test_data_dir_corrupt_snapshot_names_the_previous_generation(tmp_path: Path) -> None:
    root = tmp_path / "data"
    with DataDir(root) as data_dir:
        data_dir.save(["a"], [1], k=3, design=(4, 1))
        data_dir.save(["b"], [2], k=3, design=(4, 1))
    (root / SNAPSHOT_NAME).write_bytes(b"garbage")
    with DataDir(root) as data_dir, pytest.raises(CorruptFileError, match=r"snapshot\.pmx\.prev"):
        data_dir.load()


def test_data_dir_that_is_a_file_is_refused_clearly(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    with pytest.raises(NotADirectoryError, match="exists and is not a directory"):
        DataDir(not_a_dir)
    assert not_a_dir.read_text() == "x"


# ------------------------------------------------------------------------ the compact key section


def _rewrite_body(path: Path, edit: Callable[[bytearray], None]) -> None:
    """Apply ``edit`` to the file's bytes, then make its body CRC match again (a well-formed
    file with a bad body: what a writer bug or a deliberate edit would produce)."""
    data = bytearray(path.read_bytes())
    edit(data)
    end = len(data) - 8
    struct.pack_into("<I", data, end, zlib.crc32(bytes(data[72:end])))
    path.write_bytes(bytes(data))


def test_keys_are_kept_as_the_section_and_decoded_on_demand(tmp_path: Path) -> None:
    path = tmp_path / "s.pmx"
    keys = ["alpha", "é", "nul\x00in", "\U0001f600", *[f"k{i}" for i in range(100)]]
    _write(path, keys, list(range(len(keys))))
    snap = read_snapshot(path)
    assert "keys" not in snap.__dict__  # nothing decoded yet
    encoded = [key.encode("utf-8") for key in keys]
    assert bytes(snap.section) == b"".join(e + b"\x00" for e in encoded)
    assert snap.lengths.dtype == np.uint32 and snap.lengths.tolist() == [len(e) for e in encoded]
    assert snap.keys == keys and snap.keys is snap.keys  # decoded once
    empty = tmp_path / "empty.pmx"
    _write(empty, [], [])
    assert read_snapshot(empty).keys == [] and read_snapshot(empty).section.size == 0


def test_invalid_utf8_is_refused_at_its_offset_in_the_section(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """UTF-8 is checked a slice at a time (16 bytes here) before read_snapshot returns; the
    message gives the byte's offset in the whole key section."""
    import permindex.storage.snapshot as snapshot_module

    monkeypatch.setattr(snapshot_module, "_UTF8_SLICE", 16)
    path = tmp_path / "s.pmx"
    keys = ["é", *[f"q{i:02d}w{i}" for i in range(20)]]  # nothing repeats: no dictionary
    _write(path, keys, list(range(len(keys))))
    section = b"".join(key.encode("utf-8") + b"\x00" for key in keys)
    offset = section.index(b"q17w17")
    at = path.read_bytes().index(b"q17w17")  # its code: the bytes themselves

    def edit(data: bytearray) -> None:  # "q1" becomes a raw run of the one byte 0xFF
        data[at : at + 2] = b"\xe0\xff"

    _rewrite_body(path, edit)
    _refused(path, f"not valid UTF-8 \\(invalid start byte at byte {offset}\\)")


def test_empty_key_with_a_valid_checksum_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.pmx"
    _write(path, ["a", "b"], [1, 2])

    def edit(data: bytearray) -> None:  # key "a" gets a code of 0 bytes, "b" one of 2
        data[72 + 16 : 72 + 18] = bytes([0, 2])

    _rewrite_body(path, edit)
    _refused(path, "not well formed")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="I/O priority classes: Linux")
def test_snapshot_is_written_at_the_idle_io_priority_then_restored(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The thread writing a snapshot is in the idle I/O class while it writes (seen at the final
    fsync) and back in its own class afterwards; another thread is never changed."""
    import psutil

    seen: list[int] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        seen.append(int(psutil.Process(threading.get_native_id()).ionice().ioclass))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", recording_fsync)
    results: list[tuple[int, int]] = []

    def writer() -> None:
        me = psutil.Process(threading.get_native_id())
        me.ionice(psutil.IOPRIO_CLASS_BE, 5)
        write_snapshot(tmp_path / "s.pmx", ["a", "b"], [1, 2], k=3, design=(4, 1))
        after = me.ionice()
        results.append((int(after.ioclass), int(after.value)))

    main_before = psutil.Process(threading.get_native_id()).ionice()
    thread = threading.Thread(target=writer)
    thread.start()
    thread.join(timeout=60)
    assert int(psutil.IOPRIO_CLASS_IDLE) in seen
    assert results == [(int(psutil.IOPRIO_CLASS_BE), 5)]
    assert psutil.Process(threading.get_native_id()).ionice() == main_before
    assert read_snapshot(tmp_path / "s.pmx").keys == ["a", "b"]
