"""The durable index in process: Index.export_slices (the fuzzy export snapshots are made of),
and the Store (log before apply, snapshots that rotate and drop the log, recovery)."""

from __future__ import annotations

import errno
import os
import random
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from permindex.errors import CorruptFileError, InvalidArgumentError, StorageFullError
from permindex.index import Index
from permindex.index.keys.store import KeyStore
from permindex.storage.snapshot import DataDir
from permindex.storage.store import Store
from permindex.storage.wal_records import ADD, REMOVE, REPLACE, list_segments
from permindex.storage.wal_recovery import read_log


def _decoded(parts: list[tuple[Any, Any, Any]]) -> dict[str, int]:
    """{key: fingerprint} of export slices; asserts every key appears once."""
    out: dict[str, int] = {}
    for lengths, blob, fps in parts:
        raw = bytes(blob)
        ends = np.cumsum(np.asarray(lengths, dtype=np.int64) + 1)
        starts = (ends - np.asarray(lengths, dtype=np.int64) - 1).tolist()
        for a, m, fp in zip(starts, np.asarray(lengths).tolist(), fps.tolist(), strict=True):
            key = raw[a : a + m].decode("utf-8")
            assert raw[a + m] == 0
            assert key not in out, f"{key!r} exported twice"
            out[key] = fp
    return out


def _contents(index: Index) -> dict[str, int]:
    keys, fps = index.export()
    return dict(zip(keys, fps.tolist(), strict=True))


def test_export_slices_equals_export_when_nothing_changes() -> None:
    index = Index(compaction_min=10**9)
    rng = random.Random(3)
    index.add_many([f"k/{i}" for i in range(2000)], [rng.getrandbits(64) for _ in range(2000)])
    index.add_many(["k/5", "ключ\x00nul", "k/7"], [1, 2, 3])  # replaced rows, a non-ASCII key
    for i in range(0, 2000, 9):
        index.discard(f"k/{i}")
    for rows in (1, 7, 1 << 14):
        assert _decoded(index.export_slices(rows)) == _contents(index)
    assert Index().export_slices() == []


def test_export_slices_restarts_after_a_compaction_mid_way(monkeypatch: pytest.MonkeyPatch) -> None:
    """A compaction renumbers the rows; the slices read before it are thrown away."""
    index = Index(compaction_min=0)
    index.add_many([f"k/{i}" for i in range(100)], list(range(100)))
    real = KeyStore.export
    calls = 0

    def export(self: KeyStore, rows: Any) -> Any:  # the key store's export of one slice
        nonlocal calls
        calls += 1
        result = real(self, rows)
        if calls == 3:  # in the middle of the first pass: remove most keys (compaction)
            for i in range(10, 100):
                index.discard(f"k/{i}")
            index.add("late", 7)
        return result

    monkeypatch.setattr(KeyStore, "export", export)
    before = index.compactions
    parts = index.export_slices(rows_per_slice=10)
    assert index.compactions > before
    monkeypatch.undo()
    exported = _decoded(parts)
    assert exported == _contents(index)  # the second pass saw the state after the changes


def test_export_slices_under_concurrent_writes_is_fuzzy_but_unique(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Keys untouched during the export appear with their value; touched keys appear at most
    once, with a value they held during the export, or not at all; keys first added during it
    do not appear."""
    index = Index(compaction_min=10**9)
    n = 3000
    index.add_many([f"k/{i}" for i in range(n)], list(range(n)))
    history: dict[str, set[int | None]] = {f"k/{i}": {i} for i in range(n)}
    started = threading.Event()
    stop = threading.Event()
    touched: set[str] = set()
    real = KeyStore.export

    def export(self: KeyStore, rows: Any) -> Any:  # the writer starts with the first slice
        started.set()
        return real(self, rows)

    monkeypatch.setattr(KeyStore, "export", export)

    def write() -> None:
        rng = random.Random(5)
        started.wait()
        while not stop.is_set():
            key = f"k/{rng.randrange(n)}"
            touched.add(key)
            if rng.random() < 0.3:
                index.discard(key)
                history[key].add(None)
            else:
                value = rng.getrandbits(64)
                history[key].add(value)
                index.add(key, value)
            index.add(f"new/{rng.getrandbits(32)}", 1)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        parts = index.export_slices(rows_per_slice=3)
    finally:
        stop.set()
        writer.join()
    monkeypatch.undo()
    exported = _decoded(parts)
    assert not any(key.startswith("new/") for key in exported)
    for key, values in history.items():
        if key not in touched:
            assert exported[key] == int(key[2:])
        elif key in exported:  # absent when removed, or replaced (its new row is past the end)
            assert exported[key] in values


# ------------------------------------------------------------------------------------ the store


def _open(path: Path, **options: Any) -> Store:
    return Store.open(path, **options)


def _random_changes(store: Store, model: dict[str, int], rng: random.Random, n: int) -> None:
    """``n`` random requests through the store, mirrored in ``model`` (key -> fingerprint)."""
    for _ in range(n):
        roll = rng.random()
        if roll < 0.5:
            keys = [f"k/{rng.randrange(300)}" for _ in range(rng.randrange(1, 6))]
            values = [rng.getrandbits(64) for _ in keys]
            store.add_many(keys, values)
            model.update(zip(keys, values, strict=True))
        elif roll < 0.75:
            keys = [f"k/{rng.randrange(300)}" for _ in range(rng.randrange(1, 4))]
            store.remove_many(keys)
            for key in keys:
                model.pop(key, None)
        else:
            base = rng.choice(list(model.values())) if model else rng.getrandbits(64)
            keys = [f"c/{rng.randrange(100)}" for _ in range(3)]
            values = [base ^ (1 << rng.randrange(64)) if rng.random() < 0.5 else rng.getrandbits(64)
                      for _ in keys]  # fmt: skip
            for key, value, result in zip(
                keys, values, store.check_and_add_many(keys, values), strict=True
            ):
                if result.added:
                    model[key] = value


def test_recovery_is_the_snapshot_plus_the_log_after_it(tmp_path: Path) -> None:
    root = tmp_path / "data"
    rng = random.Random(11)
    model: dict[str, int] = {}
    store = _open(root)
    _random_changes(store, model, rng, 60)
    info = store.snapshot()
    assert info.log_sequence == store.sequence
    _random_changes(store, model, rng, 60)
    after_snapshot = store.sequence - info.log_sequence
    store.abandon()  # as kill -9 leaves it: no final snapshot, no final fsync
    store = _open(root)
    assert _contents(store.index) == model
    assert store.recovery.snapshot is not None
    assert store.recovery.snapshot.log_sequence == info.log_sequence
    assert store.recovery.records == after_snapshot and store.recovery.warnings == []
    store.index._check()
    store.close()


def test_snapshots_taken_during_writes_then_a_crash_lose_nothing(tmp_path: Path) -> None:
    """Fuzzy snapshots (slices of 7 rows) taken while another thread writes; after a crash,
    snapshot + log replay equals every acknowledged change."""
    root = tmp_path / "data"
    store = _open(root, export_slice_rows=7)
    model: dict[str, int] = {}
    _random_changes(store, model, random.Random(1), 100)
    stop = threading.Event()

    def write() -> None:
        rng = random.Random(2)
        while not stop.is_set():
            _random_changes(store, model, rng, 1)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        for _ in range(15):
            store.snapshot()
    finally:
        stop.set()
        writer.join()
    store.abandon()
    store = _open(root)
    assert _contents(store.index) == model
    assert len(list_segments(root)) <= 3  # the log before the previous generation is gone
    store.close()


def test_previous_generation_plus_the_log_is_a_complete_fallback(tmp_path: Path) -> None:
    root = tmp_path / "data"
    store = _open(root)
    model: dict[str, int] = {}
    rng = random.Random(4)
    for _ in range(3):
        _random_changes(store, model, rng, 30)
        store.snapshot()
    _random_changes(store, model, rng, 30)
    store.close()
    os.replace(root / "snapshot.pmx.prev", root / "snapshot.pmx")
    store = _open(root)
    assert _contents(store.index) == model
    assert store.recovery.records > 0
    store.close()


def test_segments_are_dropped_once_no_snapshot_generation_needs_them(tmp_path: Path) -> None:
    root = tmp_path / "data"
    store = _open(root)
    firsts = []
    for i in range(4):
        store.add_many([f"k{i}"], [i])
        store.snapshot()
        firsts.append([s.first_sequence for s in list_segments(root)])
    # After snapshot i (log sequence i + 1): the segment of record i + 1, kept for the previous
    # generation, and the new current one.
    assert firsts == [[1, 2], [2, 3], [3, 4], [4, 5]]
    store.close()
    (root / "snapshot.pmx").unlink()  # the segments before 4 are gone: the log cannot stand alone
    with pytest.raises(CorruptFileError, match=r"no record of sequence numbers 1\.\.3"):
        _open(root)


def test_a_refused_append_applies_nothing_and_writes_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(tmp_path / "data")
    store.add_many(["a", "b"], [1, 2])

    def full(fd: int, data: Any, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(StorageFullError):
        store.add_many(["a", "new"], [5, 6])
    with pytest.raises(StorageFullError):
        store.remove_many(["a"])
    with pytest.raises(StorageFullError):
        store.check_and_add_many(["far"], [2**64 - 1])
    assert _contents(store.index) == {"a": 1, "b": 2} and store.sequence == 1
    assert store.index.query(1) and store.remove_many(["zz"]) == [False]  # reads, no-ops work
    monkeypatch.undo()
    store.add_many(["new"], [6])
    assert store.sequence == 2
    store.abandon()
    store = _open(tmp_path / "data")
    assert _contents(store.index) == {"a": 1, "b": 2, "new": 6}
    store.close()


def test_a_change_the_index_refuses_after_logging_is_taken_back_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = _open(tmp_path / "data")

    def broken(*args: Any) -> Any:
        raise MemoryError

    monkeypatch.setattr(store.index, "add_many", broken)
    with pytest.raises(MemoryError):
        store.add_many(["a"], [1])
    monkeypatch.undo()
    store.add_many(["b"], [2])
    store.abandon()
    store = _open(tmp_path / "data")
    assert _contents(store.index) == {"b": 2} and store.sequence == 1
    store.close()


def test_check_and_add_many_is_sequential_check_and_add(tmp_path: Path) -> None:
    """One batch, logged as one record, gives exactly what check_and_add one document at a
    time gives: later documents see the earlier ones of the batch (and their replacements)."""
    store = _open(tmp_path / "data")
    reference = Index()
    rng = random.Random(8)
    for round_ in range(40):
        base = rng.getrandbits(64)
        keys = [f"d/{rng.randrange(12)}" for _ in range(rng.randrange(1, 8))]
        values = [base ^ (1 << rng.randrange(64)) ^ (1 << rng.randrange(64)) for _ in keys]
        if round_ % 3 == 0:
            values[0] = rng.getrandbits(64)
        k = rng.choice([None, 0, 1, 3])
        got = store.check_and_add_many(keys, values, k=k)
        want = [reference.check_and_add(key, v, k=k) for key, v in zip(keys, values, strict=True)]
        assert got == want
        assert _contents(store.index) == _contents(reference)
    store.close()
    store = _open(tmp_path / "data")
    assert _contents(store.index) == _contents(reference)
    store.close()


def test_a_first_release_data_directory_is_upgraded(tmp_path: Path) -> None:
    """A version 1 snapshot (no log) loads; the log starts after it; the next snapshot is
    the current version."""
    from test_snapshot import _version_1_bytes

    root = tmp_path / "data"
    root.mkdir()
    (root / "snapshot.pmx").write_bytes(_version_1_bytes(["old"], [42], 3))
    store = _open(root)
    assert _contents(store.index) == {"old": 42} and store.sequence == 0
    store.add_many(["new"], [1])
    store.abandon()
    store = _open(root)
    assert _contents(store.index) == {"old": 42, "new": 1}
    assert store.snapshot().version == 4
    store.close()


def test_bad_options_are_refused_before_the_directory_is_touched(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="fsync policy 'sometimes'"):
        _open(tmp_path / "a", fsync="sometimes")
    with pytest.raises(InvalidArgumentError, match="guarantees k <= 3"):
        _open(tmp_path / "b", k=4)
    assert not (tmp_path / "b").exists()
    DataDir(tmp_path / "a").close()  # the refused open released its lock


def test_log_records_say_add_replace_or_remove(tmp_path: Path) -> None:
    root = tmp_path / "data"
    store = _open(root)
    store.add_many(["b"], [1])
    store.add_many(["a", "b", "a"], [2, 3, 4])
    store.check_and_add_many(["c", "c"], [2**64 - 1, 2**64 - 1])
    store.remove_many(["a", "zz", "a"])
    assert store.index.contains_many(["b", "a", "c"]).tolist() == [True, False, True]
    store.close()
    records = read_log(root, 0).records
    assert [(r.ops.tolist(), r.keys) for r in records] == [
        ([ADD], ["b"]),
        ([ADD, REPLACE, REPLACE], ["a", "b", "a"]),
        ([ADD, REPLACE], ["c", "c"]),
        ([REMOVE], ["a"]),
    ]


def test_a_snapshot_loads_from_its_key_section_without_str_keys(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Recovery builds the index from the snapshot's key section as it is on disk
    (Index.from_compact): no key is decoded into a str (decoding is made to fail here), the
    contents are those saved, queries equal brute force, then the log is replayed over them."""
    import permindex.storage.snapshot as snapshot_module
    from permindex.storage.snapshot import SNAPSHOT_NAME, write_snapshot

    rng = np.random.default_rng(21)
    n = 5000
    keys = [f"doc/{i}" for i in range(n)]
    keys[7], keys[8] = "ключ", "nul\x00in"
    centers = rng.integers(0, 2**64 - 1, 50, dtype=np.uint64, endpoint=True)
    values = centers[rng.integers(0, 50, n)]
    values ^= np.uint64(1) << rng.integers(0, 64, n).astype(np.uint64)
    root = tmp_path / "data"
    root.mkdir()
    write_snapshot(root / SNAPSHOT_NAME, keys, values, k=3, design=(4, 1), sequence=1)

    def no_decoding(*args: object) -> list[str]:
        raise AssertionError("a snapshot's keys were decoded")

    monkeypatch.setattr(snapshot_module, "_decode_keys", no_decoding)
    store = _open(root)
    monkeypatch.undo()
    assert _contents(store.index) == dict(zip(keys, values.tolist(), strict=True))
    store.index._check()
    for q in values[::97]:
        expected = {keys[i] for i in np.flatnonzero(np.bitwise_count(values ^ q) <= 3)}
        assert {m.key for m in store.index.query(int(q))} == expected
    store.add_many(["doc/1", "new"], [5, 6])
    store.close()
    store = _open(root)
    assert store.index.get("doc/1") == 5 and store.index.get("new") == 6
    assert store.index.get("ключ") == int(values[7]) and len(store.index) == n + 1
    store.close()


@pytest.mark.parametrize(
    ("keys", "match"),
    [(["a", "b", "a"], "holds 3 entries but only 2 distinct keys|the key of row 2 is stored twice"),
     (["a", "x" * 1025], "holds an invalid entry: key lengths must be 1 to 1024")],
)  # fmt: skip
def test_a_snapshot_with_repeated_or_too_long_keys_is_refused(
    tmp_path: Path, keys: list[str], match: str
) -> None:
    from permindex.storage.snapshot import SNAPSHOT_NAME, write_snapshot

    root = tmp_path / "data"
    root.mkdir()
    write_snapshot(root / SNAPSHOT_NAME, keys, list(range(len(keys))), k=3, design=(4, 1))
    with pytest.raises(CorruptFileError, match=match):
        _open(root)
    with pytest.raises(CorruptFileError, match=match):
        _open(root)


@pytest.mark.parametrize(
    ("name", "what"),
    [
        ("snapshot.pmx", "not a snapshot file"),
        ("wal-00000000000000000001.log", "not a log segment"),
    ],
)
def test_a_directory_in_place_of_a_file_is_refused_naming_it(
    tmp_path: Path, name: str, what: str
) -> None:
    """A directory where the snapshot or a log segment should be: CorruptFileError naming it
    (the server's exit 7), not a bare IsADirectoryError."""
    (tmp_path / name).mkdir()
    with pytest.raises(CorruptFileError, match=f"{name}: is a directory, {what}"):
        Store.open(tmp_path)
