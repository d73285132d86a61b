"""Expiry for re-crawls (permindex.index.expiry): entries not added again within expire_after
seconds stop matching at once and are reclaimed; the times survive snapshots, the log, restarts
and kill -9; data directories of the formats before expiry load unchanged; the options on the
command line, in the .proto and in the Python API.

Clocks are injected (Index and Store level) or entries carry an ``added_at`` in the past (real
servers), so no test waits for a duration to pass.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import grpc
import numpy as np
import pytest
from conftest import StartServer, make_stub
from serverproc import ServeProcess

import permindex
from permindex.cli import main
from permindex.errors import InvalidArgumentError
from permindex.index import ExpiringIndex, Index
from permindex.index.expiry import MAX_EXPIRE_AFTER, parse_duration, stamps
from permindex.index.hamming import hamming
from permindex.storage.snapshot import MAGIC as SNAPSHOT_MAGIC
from permindex.storage.snapshot import SNAPSHOT_NAME, read_snapshot
from permindex.storage.store import Store
from permindex.storage.wal_records import HEADER_SIZE, list_segments, segment_name
from permindex.storage.wal_records import MAGIC as LOG_MAGIC
from permindex.v1 import index_pb2 as pb

T0 = 1_800_000_000  # the injected clocks start here (2027-01-15)
DAY = 86400


class Clock:
    """A wall clock the test moves by hand (Unix seconds)."""

    def __init__(self, now: float = T0) -> None:
        self.now = float(now)

    def __call__(self) -> float:
        return self.now


def _index(clock: Clock, expire_after: int = 100, **options: Any) -> ExpiringIndex:
    return ExpiringIndex(expire_after=expire_after, clock=clock, **options)


def _brute(model: dict[str, tuple[int, int]], now: float, after: int) -> dict[str, int]:
    """The (key -> fingerprint) of the model's entries not expired at ``now``."""
    return {key: fp for key, (fp, t) in model.items() if int(now) - after < t}


# ---------------------------------------------------------------------- the index, a clock


def test_an_entry_stops_matching_everywhere_once_expired() -> None:
    clock = Clock()
    index = _index(clock, expire_after=100)
    index.add("a", 0b1111)
    index.add("b", 0b1110)  # a near-duplicate of a
    clock.now = T0 + 50
    index.add("c", 0b0111)  # the only one left after T0 + 100
    assert [m.key for m in index.query(0b1111)] == ["a", "b", "c"]
    assert len(index.pairs()) == 3
    clock.now = T0 + 99.9  # not yet: expired when now >= added + expire_after
    assert len(index) == 3
    clock.now = T0 + 100
    assert [m.key for m in index.query(0b1111)] == ["c"]
    assert [[m.key for m in ms] for ms in index.query_many([0b1111, 0b1110])] == [["c"], ["c"]]
    columns = index.query_many(np.array([0b1110] * 300, dtype=np.uint64), columns=True)
    assert set(columns.keys) == {"c"} and columns.offsets[-1] == 300  # the batch path
    assert index.pairs() == [] and list(index.iter_pairs()) == []
    assert index.get("a") is None and "a" not in index and len(index) == 1
    assert list(index) == ["c"] and index.contains_many(["a", "b", "c"]).tolist() == [0, 0, 1]
    keys, fps = index.export()
    assert keys == ["c"] and fps.tolist() == [0b0111]
    lengths, blob, fps = index.export_compact()
    assert lengths.tolist() == [1] and bytes(blob) == b"c\x00"
    [(_, _, part_fps, part_times)] = index.export_timed_slices()
    assert part_fps.tolist() == [0b0111] and part_times.tolist() == [T0 + 50]
    index._check()


def test_a_bounded_lookup_leaves_due_expiry_to_query_many() -> None:
    """``query_columns_within`` answers None while entries are due to expire (expiring them
    is O(n), not bounded work); once ``query_many`` expired them, it answers without them."""
    clock = Clock()
    index = _index(clock, expire_after=100)
    index.add("a", 0b1111)
    clock.now = T0 + 50
    index.add("c", 0b0111)
    queries = np.array([0b1111] * 20, dtype=np.uint64)
    roomy = {"max_candidates": 1 << 30, "max_matches": 1 << 30}
    index.query_many(queries, columns=True)  # a read view after the writes
    got = index.query_columns_within(queries, **roomy)
    assert got is not None and got.keys == ["a", "c"] * 20
    clock.now = T0 + 100
    assert index.query_columns_within(queries, **roomy) is None  # "a" is due
    assert set(index.query_many(queries, columns=True).keys) == {"c"}
    got = index.query_columns_within(queries, **roomy)
    assert got is not None and got.keys == ["c"] * 20
    index._check()


def test_check_and_add_ignores_an_expired_near_duplicate() -> None:
    clock = Clock()
    index = _index(clock, expire_after=10)
    assert index.check_and_add("a", 0xFF00).added
    result = index.check_and_add("b", 0xFF01)
    assert not result.added and [m.key for m in result.matches] == ["a"]
    clock.now = T0 + 10
    result = index.check_and_add("b", 0xFF01)
    assert result.added and result.matches == [] and not result.replaced
    assert index.check_and_add("b", 0xFF01).replaced  # its own entry never blocks
    index._check()


def test_adding_again_renews_with_the_same_or_a_new_fingerprint() -> None:
    clock = Clock()
    index = _index(clock, expire_after=100)
    index.add_many(["same", "new", "batch"], [1, 2, 3])
    clock.now = T0 + 60
    assert not index.add("same", 1)  # unchanged fingerprint: renewed all the same
    assert not index.add("new", 20)  # replaced
    index.add_many(["batch"], [3])  # unchanged, in a batch
    assert index.times(["same", "new", "batch", "gone"]) == [T0 + 60] * 3 + [None]
    clock.now = T0 + 159
    assert len(index) == 3 and index.get("new") == 20
    clock.now = T0 + 160
    assert index.times(["same", "new"]) == [None, None]  # expired: as if removed
    assert len(index) == 0
    index._check()


def test_added_at_rules() -> None:
    clock = Clock()
    index = _index(clock, expire_after=100)
    index.add("past", 1, added_at=T0 - 40)
    index.add("float", 2, added_at=T0 - 10.9)  # floored: T0 - 11
    index.add("future", 3, added_at=T0 + 10 * DAY)  # counts as now: never outlives its duration
    index.add("zero", 4, added_at=0)  # 0: now
    index.add("old", 5, added_at=T0 - 100)  # expired at once
    assert "old" not in index
    assert index.times(["past", "float", "future", "zero"]) == [T0 - 40, T0 - 11, T0, T0]
    index.add_many(["x", "y", "x"], [6, 7, 8], added_at=[T0 - 1, T0 - 2, T0 - 3])
    assert index.get("x") == 8 and index.times(["x", "y"]) == [T0 - 3, T0 - 2]  # the last x
    index.add_many(["n1", "n2"], [9, 10], added_at=np.array([T0 - 5, T0 - 6], dtype=np.int64))
    assert index.times(["n1", "n2"]) == [T0 - 5, T0 - 6]
    before = index.export()
    for bad, error in [
        (-1, InvalidArgumentError),
        (float("nan"), InvalidArgumentError),
        (float("inf"), InvalidArgumentError),
        (True, TypeError),
        ("1800000000", TypeError),
    ]:
        with pytest.raises(error):
            index.add("refused", 11, added_at=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="iterable of str, not str"):
        index.add_many("ab", [1, 2])
    with pytest.raises(InvalidArgumentError, match="2 entries but 1 added_at"):
        index.add_many(["r1", "r2"], [1, 2], added_at=[T0])
    with pytest.raises(InvalidArgumentError, match=r">= 0, got -5 \(entry 1\)$"):
        index.add_many(["r1", "r2"], [1, 2], added_at=[T0, -5])
    with pytest.raises(InvalidArgumentError, match=r">= 0, got -1$"):  # as given: not -1.0
        index.add("refused", 11, added_at=-1)
    after = index.export()
    assert before[0] == after[0] and before[1].tolist() == after[1].tolist()
    index._check()


def test_stamps_of_a_write() -> None:
    assert stamps(None, 2, T0 + 0.7).tolist() == [T0, T0]
    assert stamps(T0 - 5, 2, T0).tolist() == [T0 - 5, T0 - 5]
    assert stamps([0, T0 + 1, 3.5], 3, T0).tolist() == [T0, T0, 3]
    assert stamps(np.zeros(0), 0, T0).size == 0


def test_options_are_checked() -> None:
    for bad in (0, -1, MAX_EXPIRE_AFTER + 1):
        with pytest.raises(InvalidArgumentError, match="expire_after"):
            ExpiringIndex(expire_after=bad)
    with pytest.raises(TypeError, match="expire_after must be an int"):
        ExpiringIndex(expire_after=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expire_after"):  # from_arrays cannot give it
        ExpiringIndex.from_arrays(["a"], [1])
    index = ExpiringIndex(k=2, design=(4, 2), expire_after=30 * DAY)
    assert index.expire_after == 30 * DAY and index.k == 2
    assert repr(index).endswith(f"expire_after={30 * DAY})")
    assert isinstance(index, Index) and permindex.ExpiringIndex is ExpiringIndex


def test_expired_rows_await_compaction_and_are_reclaimed() -> None:
    clock = Clock()
    index = _index(clock, expire_after=10, compaction_min=50)
    index.add_many([f"k{i}" for i in range(60)], np.arange(60, dtype=np.uint64) << 20)
    clock.now = T0 + 5
    index.add_many([f"n{i}" for i in range(40)], (np.arange(40, dtype=np.uint64) << 20) + 1)
    assert index.expired_pending == 0
    clock.now = T0 + 10  # the first 60 expire
    assert len(index) == 40 and index.compactions == 1  # 60 dead > max(50, 40 live)
    assert index.expired_pending == 0  # compacted: nothing awaits
    index.add_many([f"m{i}" for i in range(5)], (np.arange(5, dtype=np.uint64) << 20) + 2)
    clock.now = T0 + 15  # the 40 expire: 40 dead <= max(50, 5): they await the compaction
    assert len(index) == 5 and index.expired_pending == 40 and index.compactions == 1
    index._check()
    many = _index(clock, expire_after=10)
    many.add_many([f"k{i}" for i in range(5000)], np.arange(5000, dtype=np.uint64))
    clock.now = T0 + 30  # a large sweep compacts at once
    assert len(many) == 0 and many.compactions == 1 and many.expired_pending == 0
    many._check()


@pytest.mark.parametrize("seed", range(4))
def test_random_steps_against_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    clock = Clock()
    after = 20
    index = _index(clock, expire_after=after, memtable_limit=8, compaction_min=4)
    model: dict[str, tuple[int, int]] = {}
    base = [rng.getrandbits(64) for _ in range(8)]
    for _step in range(150):
        action = rng.random()
        key = f"key{rng.randrange(40)}"
        fp = rng.choice(base) ^ (1 << rng.randrange(64)) * rng.randrange(2)
        now = int(clock.now)
        if action < 0.35:
            when = rng.choice([None, now - rng.randrange(30)])
            index.add(key, fp, added_at=when)
            model[key] = (fp, now if not when else when)
        elif action < 0.55:
            keys = [f"key{rng.randrange(40)}" for _ in range(rng.randrange(1, 6))]
            fps = [rng.choice(base) for _ in keys]
            times = [now - rng.randrange(25) for _ in keys]
            index.add_many(keys, fps, added_at=times)
            for k, f, t in zip(keys, fps, times, strict=True):
                model[k] = (f, t)
        elif action < 0.65:
            live = _brute(model, clock.now, after)
            assert index.discard(key) == (key in live)
            model.pop(key, None)
        elif action < 0.75:
            live = _brute(model, clock.now, after)
            result = index.check_and_add(key, fp)
            near = sorted(
                (hamming(f, fp), k) for k, f in live.items() if k != key and hamming(f, fp) <= 3
            )
            assert [(m.distance, m.key) for m in result.matches] == near
            if result.added:
                model[key] = (fp, now)
        else:
            clock.now += rng.choice([0.5, 1, 3, 7])
        live = _brute(model, clock.now, after)
        stored, values = index.export()
        assert dict(zip(stored, values.tolist(), strict=True)) == live
        probe = rng.choice(base)
        expected = sorted((hamming(f, probe), k) for k, f in live.items() if hamming(f, probe) <= 3)
        assert [(m.distance, m.key) for m in index.query(probe)] == expected
        index._check()


# ------------------------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("30d", 30 * DAY), ("12h", 12 * 3600), ("90m", 5400), ("45s", 45), ("7", 7), (" 2d ", 172800)],
)
def test_durations(text: str, seconds: int) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize(
    "text", ["", "0", "0d", "30x", "d", "1.5h", "-3d", "30 d", "1e3", "50000d"]
)
def test_bad_durations_are_refused(text: str) -> None:
    with pytest.raises(InvalidArgumentError):
        parse_duration(text)


@pytest.mark.parametrize("text", ["30x", "0", "-1d", "1.5h"])
def test_serve_refuses_a_bad_expire_after(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, text: str
) -> None:
    assert main(["serve", "--data-dir", str(tmp_path / "d"), "--expire-after", text]) == 2
    assert "--expire-after" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()


# ------------------------------------------------------------------------- storage, a clock


def _store(path: Path, clock: Clock, expire_after: int | None = 100) -> Store:
    return Store.open(path, expire_after=expire_after, clock=clock, fsync="never")


def test_times_survive_the_log_and_snapshots(tmp_path: Path) -> None:
    clock = Clock()
    root = tmp_path / "data"
    store = _store(root, clock)
    store.add_many(["a", "b"], [1, 2], added_at=[T0 - 50, T0 - 10])
    assert store.check_and_add_many(["c"], [0xFFFF_FFFF << 32], added_at=T0 - 30)[0].added
    store.snapshot()
    store.add_many(["d"], [3 << 30])  # at T0, in the log only
    store.add_many(["b"], [2])  # renewed at T0 (same fingerprint), in the log only
    store.abandon()  # a crash: the snapshot and the log
    store = _store(root, clock)
    index = store.index
    assert isinstance(index, ExpiringIndex)
    assert index.times(["a", "b", "c", "d"]) == [T0 - 50, T0, T0 - 30, T0]
    store.snapshot()
    store.close()
    times = read_snapshot(root / SNAPSHOT_NAME).times
    assert times is not None and sorted(times.tolist()) == [T0 - 50, T0 - 30, T0, T0]
    clock.now = T0 + 75  # a and c (added at T0 - 50 and T0 - 30) have expired
    store = _store(root, clock)
    assert sorted(store.index) == ["b", "d"]
    store.close()
    store = _store(root, clock, expire_after=None)  # the same directory without expiry
    assert sorted(store.index) == ["a", "b", "c", "d"]
    store.close()


def test_check_and_add_many_skips_a_document_expired_on_arrival(tmp_path: Path) -> None:
    clock = Clock()
    store = _store(tmp_path / "data", clock, expire_after=100)
    results = store.check_and_add_many(["old", "new"], [0xF0, 0xF1], added_at=[T0 - 200, T0])
    assert [r.added for r in results] == [True, True]  # old is stored and expired at once
    assert list(store.index) == ["new"]
    store.close()


def test_store_refuses_bad_times_and_logs_nothing(tmp_path: Path) -> None:
    store = _store(tmp_path / "data", Clock())
    with pytest.raises(InvalidArgumentError):
        store.add_many(["a"], [1], added_at=-3)
    assert store.sequence == 0
    store.close()


# ----------------------------------------------------- data directories of the older formats


def _version_1_segment(records: list[tuple[int, list[tuple[int, str, int]]]]) -> bytes:
    """A log segment of format version 1 (no times), as the release before expiry wrote it."""
    head = LOG_MAGIC + struct.pack("<IIQI", 1, HEADER_SIZE, records[0][0], 0)
    data = head + struct.pack("<I", zlib.crc32(head))
    for sequence, changes in records:
        n = len(changes)
        keys = [key.encode() for _, key, _ in changes]
        body = struct.pack("<QI", sequence, n) + bytes(op for op, _, _ in changes)
        body += struct.pack(f"<{n}Q", *(fp for _, _, fp in changes))
        body += struct.pack(f"<{n}I", *(len(key) for key in keys))
        body += b"".join(key + b"\x00" for key in keys)
        length = struct.pack("<I", len(body))
        data += length + struct.pack("<I", zlib.crc32(body, zlib.crc32(length))) + body
    return data


def _version_2_snapshot(keys: list[str], fps: list[int], log_sequence: int) -> bytes:
    """A snapshot of format version 2 (no times), as the release before expiry wrote it."""
    encoded = [key.encode() for key in keys]
    section = b"".join(key + b"\x00" for key in encoded)
    n = len(keys)
    head = SNAPSHOT_MAGIC + struct.pack(
        "<IIQQIHHQdQI", 2, 72, n, len(section), 3, 4, 1, 1, time.time(), log_sequence, 0
    )
    body = struct.pack(f"<{n}Q", *fps) + struct.pack(f"<{n}I", *map(len, encoded)) + section
    return (
        head
        + struct.pack("<I", zlib.crc32(head))
        + body
        + struct.pack("<I", zlib.crc32(body))
        + b"PMXE"
    )


def _old_data_dir(root: Path) -> None:
    """A data directory of the release before expiry: a version 2 snapshot through log sequence
    2, then a version 1 log segment starting at sequence 1 (records 1-2 in the snapshot, 3-4
    after it)."""
    root.mkdir()
    (root / SNAPSHOT_NAME).write_bytes(_version_2_snapshot(["a", "b"], [1, 2], 2))
    records = [
        (1, [(1, "a", 1)]),
        (2, [(1, "b", 2)]),
        (3, [(1, "c", 3), (2, "a", 10)]),
        (4, [(3, "b", 0)]),
    ]
    (root / segment_name(1)).write_bytes(_version_1_segment(records))


@pytest.mark.parametrize("expire_after", [None, 100])
def test_a_data_directory_of_the_older_formats_loads(
    tmp_path: Path, expire_after: int | None
) -> None:
    root = tmp_path / "data"
    _old_data_dir(root)
    clock = Clock()
    store = _store(root, clock, expire_after)
    assert {key: store.index.get(key) for key in store.index} == {"a": 10, "c": 3}
    if isinstance(store.index, ExpiringIndex):  # no times on disk: the time of the start
        assert store.index.times(["a", "c"]) == [T0, T0]
    store.add_many(["d"], [4], added_at=T0 - 5)
    store.close()
    segments = [s.first_sequence for s in list_segments(root)]
    assert segments == [1, 5]  # the version 1 segment was not appended to
    clock.now = T0 + 97  # 100 s after d's time, 97 after the start
    store = _store(root, clock, expire_after)
    expected = {"a", "c"} if expire_after else {"a", "c", "d"}
    assert set(store.index) == expected and store.sequence == 5
    assert store.snapshot().version == 4
    store.close()


#: The data directory the release before expiry wrote (its README says how).
PRE_EXPIRY = Path(__file__).resolve().parent / "data" / "pre-expiry"
PRE_EXPIRY_CONTENTS = {
    "page-0": 0xABCDEF,
    "page-1": 0x2222,
    "page-2": 0x3333,
    "page-4": 0x5555,
    "page-5": 0x6666,
    "page-new": 0x7BDB22CF023304C1,
    "ключ": 2**64 - 1,
}


@pytest.mark.parametrize("expire_after", [None, DAY])
def test_the_committed_pre_expiry_data_directory_loads(
    tmp_path: Path, expire_after: int | None
) -> None:
    root = tmp_path / "data"
    shutil.copytree(PRE_EXPIRY, root, ignore=shutil.ignore_patterns("README.md"))
    assert read_snapshot(root / SNAPSHOT_NAME).info.version == 2
    clock = Clock()
    store = _store(root, clock, expire_after)
    assert {key: store.index.get(key) for key in store.index} == PRE_EXPIRY_CONTENTS
    assert store.sequence == 3
    if isinstance(store.index, ExpiringIndex):
        assert store.index.times(list(PRE_EXPIRY_CONTENTS)) == [T0] * 7
    # With expiry the open recorded those times in a snapshot (which retired segment 1).
    assert read_snapshot(root / SNAPSHOT_NAME).info.version == (4 if expire_after else 2)
    store.add_many(["later"], [1])
    store.close()
    segments = [s.first_sequence for s in list_segments(root)]
    assert segments == ([2, 4] if expire_after else [1, 2, 4])  # version 1: not appended to
    clock.now = T0 + DAY  # a day after the start: all expired in the collection with expiry
    store = _store(root, clock, expire_after)
    assert len(store.index) == (0 if expire_after else 8)
    store.close()


# ------------------------------------------------------------------ a server, in this process


def _doc(key: str, fp: int, added_at: int = 0) -> pb.Document:
    return pb.Document(key=key, fingerprint=fp, added_at=added_at)


def test_server_expires_the_default_collection(start_server: StartServer) -> None:
    server = start_server(expire_after=3600)
    channel, stub = make_stub(server.address)
    now = int(time.time())
    try:
        stub.Add(
            pb.AddRequest(
                documents=[
                    _doc("fresh", 0xABC0),
                    _doc("old", 0xABC1, now - 3700),
                    _doc("t", 7, now - 60),
                ]
            )
        )
        found = stub.Query(pb.QueryRequest(fingerprints=[0xABC0]))
        assert [m.key for m in found.results[0].matches] == ["fresh"]
        reply = stub.CheckAndAdd(
            pb.CheckAndAddRequest(documents=[_doc("old2", 0xABC1, now - 4000)])
        )
        assert reply.results[0].status == pb.DOCUMENT_STATUS_NEAR_DUPLICATE  # fresh, not old
        stats = stub.Stats(pb.StatsRequest())
        assert (stats.count, stats.expire_after) == (2, 3600)
        assert stats.expired_pending == 1  # "old": expired at once, its row awaits compaction
        with pytest.raises(grpc.RpcError) as caught:
            stub.Add(pb.AddRequest(documents=[_doc("neg", 1, -5)]))
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "documents[0] (key 'neg'): added_at -5 is negative" in str(caught.value.details())
        pairs = list(stub.Pairs(pb.PairsRequest()))
        assert sum(len(p.pairs) for p in pairs) == 0
        exported = [e.key for r in stub.Export(pb.ExportRequest()) for e in r.entries]
        assert sorted(exported) == ["fresh", "t"]
    finally:
        channel.close()


def test_collections_with_and_without_expiry(start_server: StartServer) -> None:
    server = start_server()
    now = int(time.time())
    with permindex.Client(server.address) as client:
        info = client.create_collection("crawl", expire_after=DAY)
        assert info.expire_after == DAY
        assert client.describe_collection("crawl").expire_after == DAY
        assert client.describe_collection("default").expire_after == 0
        assert client.stats().expire_after == 0
        with pytest.raises(InvalidArgumentError, match="expire_after"):
            client.create_collection("huge", expire_after=MAX_EXPIRE_AFTER + 1)
    channel, stub = make_stub(server.address)
    try:
        for collection in ("crawl", "default"):
            stub.Add(
                pb.AddRequest(
                    collection=collection, documents=[_doc("a", 1, now - 2 * DAY), _doc("b", 2)]
                )
            )
        counts = {
            name: stub.Stats(pb.StatsRequest(collection=name)).count
            for name in ("crawl", "default")
        }
        assert counts == {"crawl": 1, "default": 2}
    finally:
        channel.close()
    options = json.loads(
        (server.data_dir / "collections" / "crawl" / "collection.json").read_text()
    )
    assert options["expire_after"] == DAY


def test_cli_collections_create_and_stats(
    start_server: StartServer, capsys: pytest.CaptureFixture[str]
) -> None:
    server = start_server(expire_after=12 * 3600)
    address = ["--address", server.address]
    assert main(["collections", "create", "c", "--expire-after", "90m", "--json", *address]) == 0
    assert json.loads(capsys.readouterr().out)["expire_after"] == 5400
    assert main(["stats", *address]) == 0
    out = capsys.readouterr().out
    assert "expire_after\t43200 s (12h)\n" in out and "expired_pending\t0\n" in out
    assert main(["stats", "--collection", "c", "--json", *address]) == 0
    assert json.loads(capsys.readouterr().out)["expire_after"] == 5400
    assert main(["collections", "create", "d", "--expire-after", "5w", *address]) == 2
    assert "--expire-after" in capsys.readouterr().err


# ---------------------------------------------------------------- restarts of a real process


def _serve(data_dir: Path, expire_after: str) -> tuple[ServeProcess, Any, Any]:
    server = ServeProcess(data_dir, "--snapshot-interval", "0", "--expire-after", expire_after)
    address = server.address()
    assert address is not None, server.text
    channel, stub = make_stub(address)
    return server, channel, stub


def _keys(stub: Any) -> list[str]:
    return sorted(e.key for r in stub.Export(pb.ExportRequest()) for e in r.entries)


@pytest.mark.parametrize("stop", ["kill -9", "SIGTERM"])
def test_times_survive_a_restart(tmp_path: Path, stop: str) -> None:
    """Entries 40 and 10 minutes old under --expire-after 1h; restarted with 30m, only the
    10-minute-old one is left -- it would be both if the times were lost (the log replayed
    after kill -9, the snapshot written at SIGTERM)."""
    data_dir = tmp_path / "data"
    now = int(time.time())
    server, channel, stub = _serve(data_dir, "1h")
    try:
        stub.Add(
            pb.AddRequest(
                documents=[_doc("forty", 1 << 50, now - 2400), _doc("ten", 1 << 20, now - 600)]
            )
        )
        stub.Add(pb.AddRequest(documents=[_doc("gone", 1, now - 3700)]))
        assert _keys(stub) == ["forty", "ten"]
    finally:
        channel.close()
        if stop == "kill -9":
            server.kill()
        else:
            assert server.stop() == 0
    assert (data_dir / SNAPSHOT_NAME).exists() == (stop == "SIGTERM")
    server, channel, stub = _serve(data_dir, "30m")
    try:
        assert _keys(stub) == ["ten"]
        assert stub.Stats(pb.StatsRequest()).expire_after == 1800
    finally:
        channel.close()
        assert server.stop() == 0


def test_times_follow_the_rows_through_growth_ahead_and_compaction() -> None:
    """Past Tuning.grow_ahead_rows the row arrays grow in a background thread: the times grow with
    them (a renewed row's time included), and a compaction renumbers them with the rows."""
    clock = Clock()
    index = _index(clock, expire_after=10 * DAY, compaction_min=1000)
    rng = np.random.default_rng(5)
    model: dict[str, int] = {}
    for batch in range(90):
        keys = [f"k{batch}-{i}" for i in range(1000)]
        when = T0 - int(rng.integers(0, DAY))
        index.add_many(keys, rng.integers(0, 2**63, 1000, dtype=np.uint64), added_at=when)
        model.update(dict.fromkeys(keys, when))
        renewed = f"k{batch // 2}-7"
        index.add(renewed, index.get(renewed) or 0, added_at=T0 - batch)  # same fingerprint
        model[renewed] = T0 - batch
    for batch in (b for b in range(90) if b % 3):  # two thirds removed: a compaction
        for i in range(1000):
            index.discard(f"k{batch}-{i}")
            model.pop(f"k{batch}-{i}")
    assert index.compactions >= 1
    keys = list(model)
    assert index.times(keys) == [model[key] for key in keys]
    index._check()


def test_a_log_record_refuses_times_out_of_range() -> None:
    from permindex.storage.wal_records import ADD, encode_record

    with pytest.raises(InvalidArgumentError, match="times"):
        encode_record(1, [ADD], ["a"], [1], [2**32])
    with pytest.raises(InvalidArgumentError, match="time each"):
        encode_record(1, [ADD, ADD], ["a", "b"], [1, 2], [5])


def test_times_are_read_under_the_hold_that_found_their_rows() -> None:
    """times() racing writes that compact (renumber the rows): each answer is its own key's
    time. It found the rows, let the lock go, then read the times, so a compaction between
    the two gave other keys' times or 0 (found by the breaker)."""
    import threading

    now = int(time.time())
    index = ExpiringIndex(expire_after=10**6, compaction_min=0)
    stable = [f"stable-{i}" for i in range(4)]  # few: a compaction every 5 writes
    expected = [now - 1000 - i for i in range(4)]
    for key, when in zip(stable, expected, strict=True):
        index.add(key, 7, added_at=when)
    stop = threading.Event()

    def churn() -> None:  # each stable key moved to a new row (a new fingerprint, the same
        j = 0  # time), its old row dead: compactions renumber the rows
        while not stop.is_set():
            i = j % 4
            index.add(stable[i], 8 + j, added_at=expected[i])
            j += 1

    import sys

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch often: the race is met within the test's time
    writer = threading.Thread(target=churn)
    writer.start()
    try:
        deadline = time.monotonic() + 3.0  # the old code failed ~7 times in 3 s
        while time.monotonic() < deadline:
            assert index.times(stable) == expected
    finally:
        stop.set()
        writer.join()
        sys.setswitchinterval(interval)
    index._check()


def test_a_sweep_racing_a_write_does_not_hide_its_rows_from_the_next_sweep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another thread's call sweeps while a write is between taking its times and storing its
    rows: the rows stored after that sweep still expire on time (the sweep set its oldest time
    no later than the write's in flight), not an ``expire_after`` later."""
    import threading

    import permindex.index.expiry as expiry_module

    now = [1_000_000.0]
    index = ExpiringIndex(expire_after=3600, clock=lambda: now[0])
    index.add("due", 1, added_at=now[0] - 3600 + 1)  # due at t0 + 1
    index.add("fresh", 2)  # due at t0 + 3600
    real = expiry_module.add_batch  # type: ignore[attr-defined]

    def sweep_in_the_window(*args: object, **kwargs: object) -> object:
        now[0] += 1  # the clock ticks while the batch is checked outside the lock
        sweeper = threading.Thread(target=len, args=(index,))  # another call sweeps "due"
        sweeper.start()
        sweeper.join()
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(expiry_module, "add_batch", sweep_in_the_window)
    index.add_many(["older"], [3], added_at=[now[0] - 3600 + 10])  # due at t0 + 10
    monkeypatch.setattr(expiry_module, "add_batch", real)
    now[0] = 1_000_000.0 + 20
    assert "older" not in index
    assert index.query(3, k=0) == []
    assert len(index) == 1
    index._check()


def test_memory_and_table_figures_leave_out_expired_entries() -> None:
    """memory_bytes, table_bytes, table_runs and max_candidates run the expiry hook first, as
    every other public call does: after the entries expire, they count none of them."""
    now = [1_000.0]
    index = ExpiringIndex(expire_after=60, clock=lambda: now[0])
    index.add_many([f"k{i}" for i in range(5_000)], list(range(5_000)))
    before = index.memory_bytes(), index.table_bytes(), index.max_candidates()
    now[0] += 100
    after = index.memory_bytes(), index.table_bytes(), index.max_candidates()
    assert all(a < b for a, b in zip(after, before, strict=True))
    assert index.max_candidates() == 0
    assert all(sum(runs) == 0 and memtable == 0 for runs, memtable in index.table_runs())
