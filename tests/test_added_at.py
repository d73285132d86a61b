"""Times sent with documents (``added_at``, Unix seconds) over a real server process: the
Client and the AsyncClient (``permindex.client.Document`` and 3-tuples on every write), the
client-side checks, ``ingest``/``import`` of JSONL fields and Parquet columns, and ``export``
carrying the times so that an export -> import between two servers keeps every entry's age.

Collections expire after an hour (or 20 minutes); entries are sent 2 hours or 30 minutes old
(expired at once) and a minute old (kept), so nothing waits for the clock."""

from __future__ import annotations

import asyncio
import datetime
import json
import math
import random
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serverproc import ServeProcess

import permindex
from permindex.cli import main
from permindex.client import Document
from permindex.errors import EXIT_CODES, InvalidArgumentError

HOUR = 3600
#: Fingerprints far apart (no two within k = 3 of each other, nor of a flip of 1 or 2 bits).
FPS = [random.Random(i).getrandbits(64) for i in range(8)]
assert min(permindex.hamming(a, b) for a in FPS for b in FPS if a != b) > 10
TEXT = "the quick brown fox jumps over the lazy dog again and again {}"


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """Two real server processes (default collections without expiry)."""
    started = [
        ServeProcess(tmp_path_factory.mktemp(name), "--snapshot-interval", "0")
        for name in ("a", "b")
    ]
    try:
        addresses = [server.address() for server in started]
        for server, address in zip(started, addresses, strict=True):
            assert address is not None, server.text
        yield addresses[0] or "", addresses[1] or ""
    finally:
        for server in started:
            server.stop()


_names = iter(range(1000))


def _collection(address: str, expire_after: int | None = HOUR) -> str:
    """A new collection on ``address``, expiring after ``expire_after`` seconds (None: never)."""
    name = f"c{next(_names)}"
    with permindex.Client(address) as client:
        client.create_collection(name, expire_after=expire_after)
    return name


def _times(address: str, collection: str) -> dict[str, tuple[int, int]]:
    """key -> (fingerprint, added_at) of an export."""
    with permindex.Client(address, collection=collection) as client:
        return {k: (fp, t) for k, fp, t in client.iter_export(with_times=True)}


def test_client_writes_carry_their_times(servers: tuple[str, str]) -> None:
    address, _ = servers
    name = _collection(address)
    now = int(time.time())
    with permindex.Client(address, collection=name) as client:
        added = client.add(
            [
                Document("old", FPS[0], added_at=now - 2 * HOUR),
                ("recent", FPS[1], now - 60),
                Document("fraction", FPS[2], added_at=now - 100.7),
                ["now", FPS[3]],  # type: ignore[list-item]  # a list too (JSON arrays)
                Document("zero", FPS[4], added_at=0),
            ]
        )
        assert added.added == 5  # "old" is stored and expired at once, as the SQL row deleted
        assert client.get("old") is None and client.query(FPS[0]) == []
        assert [m.key for m in client.query(FPS[1])] == ["recent"]
        assert client.stats().expired_pending == 1
        # an expired entry blocks no near-duplicate; a check_and_add keeps its own time
        result = client.check_and_add("old-again", FPS[0] ^ 1, added_at=now - 120)
        assert result.status == "added"
        checked = client.check_and_add_many(
            [("near-old-again", FPS[0] ^ 3, now - 30), Document("late", FPS[5], now - 2 * HOUR)]
        )
        assert [c.status for c in checked] == ["near_duplicate", "added"]
        streamed = client.ingest(iter([("ingested", FPS[6], now - 300), ("gone", 7, 1)]))
        assert streamed.documents == 2
        client.ingest_batches([[Document("batched", TEXT.format(1), added_at=now - 400)]])
    found = _times(address, name)
    after = int(time.time())
    assert set(found) == {"recent", "fraction", "now", "zero", "old-again", "ingested", "batched"}
    assert found["recent"] == (FPS[1], now - 60)
    assert found["fraction"][1] == math.floor(now - 100.7)
    assert found["old-again"][1] == now - 120
    assert found["ingested"][1] == now - 300 and found["batched"][1] == now - 400
    for key in ("now", "zero"):  # none given, or 0: the server's clock at the write
        assert now <= found[key][1] <= after


def test_a_collection_without_expiry_keeps_every_entry_and_exports_no_time(
    servers: tuple[str, str],
) -> None:
    address, _ = servers
    name = _collection(address, None)
    with permindex.Client(address, collection=name) as client:
        client.add([Document("old", FPS[0], added_at=1), ("plain", FPS[1], None)])
    assert _times(address, name) == {"old": (FPS[0], 0), "plain": (FPS[1], 0)}


@pytest.mark.parametrize(
    ("added_at", "said"),
    [
        (-1, "added_at -1 is not Unix seconds"),
        (-0.5, "added_at -0.5 is not Unix seconds"),
        (float("nan"), "added_at nan is not Unix seconds"),
        (float("inf"), "added_at inf is not Unix seconds"),
        (1 << 63, "must be 0 to 2**63 - 1"),
        ("1700000000", "added_at '1700000000' is not Unix seconds"),
        (True, "added_at True is not Unix seconds"),
    ],
)
def test_bad_times_are_refused_before_anything_is_sent(
    servers: tuple[str, str], added_at: Any, said: str
) -> None:
    address, _ = servers
    name = _collection(address)
    now = int(time.time())
    with permindex.Client(address, collection=name) as client:
        for write in (
            lambda docs: client.add(docs),
            lambda docs: client.check_and_add_many(docs),
        ):
            with pytest.raises(InvalidArgumentError) as caught:
                write([("good", FPS[0], now), ("bad", FPS[1], added_at)])
            assert "documents[1] (key 'bad')" in str(caught.value) and said in str(caught.value)
        with pytest.raises(InvalidArgumentError, match="give \\(key, content\\) or"):
            client.add([("k",)])  # type: ignore[list-item]
        assert client.stats().count == 0  # all checked before anything was sent
        # ingest reads lazily: the documents before the bad one are sent first (as documented)
        with pytest.raises(InvalidArgumentError, match="documents\\[1\\] \\(key 'bad'\\)"):
            client.ingest([("good", FPS[0], now), ("bad", FPS[1], added_at)])
        assert client.get_many(["good", "bad"]) == [FPS[0], None]


def test_async_client_writes_carry_their_times(servers: tuple[str, str]) -> None:
    address, _ = servers
    name = _collection(address)
    now = int(time.time())

    async def run() -> dict[str, tuple[int, int]]:
        async with permindex.AsyncClient(address, collection=name) as client:
            await client.add([Document("old", FPS[0], now - 2 * HOUR), ("recent", FPS[1], now)])
            result = await client.check_and_add("checked", FPS[2], added_at=now - 10)
            assert result.status == "added"
            await client.check_and_add_many([("many", FPS[3], now - 20)])
            await client.ingest([Document("ingested", FPS[4], now - 30)])
            await client.ingest_batches([[("batched", FPS[5], now - 2 * HOUR)]])
            with pytest.raises(InvalidArgumentError, match="documents\\[0\\]"):
                await client.add([("neg", FPS[6], -5)])
            assert await client.get("old") is None
            return {k: (fp, t) async for k, fp, t in client.iter_export(with_times=True)}

    found = asyncio.run(run())
    assert found == {
        "recent": (FPS[1], now),
        "checked": (FPS[2], now - 10),
        "many": (FPS[3], now - 20),
        "ingested": (FPS[4], now - 30),
    }


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _jsonl(path: Path, records: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def test_ingest_reads_the_times_of_a_jsonl_file(
    servers: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    address, _ = servers
    name = _collection(address)
    now = int(time.time())
    source = _jsonl(
        tmp_path / "crawl.jsonl",
        [
            {"id": "old", "text": TEXT.format(1), "crawled": now - 2 * HOUR},
            {"id": "recent", "text": TEXT.format(2), "crawled": now - 60.5},
            {"id": "fp", "fingerprint": f"{FPS[0]:016x}", "crawled": now - 90},
            {"id": "untimed", "fingerprint": FPS[1]},
        ],
    )
    argv = ["--address", address, "--collection", name, "--no-progress"]
    code, _, err = _run(["ingest", str(source), "--added-at-field", "crawled", *argv], capsys)
    assert code == 0, err
    found = _times(address, name)
    assert sorted(found) == ["fp", "recent", "untimed"]
    assert found["recent"][1] == now - 61 and found["fp"] == (FPS[0], now - 90)
    assert found["untimed"][1] >= now
    # the default field is added_at; another field of that name is not read then
    again = _collection(address)
    code, _, err = _run(
        ["import", str(source), "--address", address, "--collection", again, "--no-progress"],
        capsys,
    )
    assert code == 0, err
    assert sorted(_times(address, again)) == ["fp", "old", "recent", "untimed"]


@pytest.mark.parametrize(
    ("value", "said"),
    [
        (-5, '"added_at" -5 is not Unix seconds'),
        (None, '"added_at" null is not Unix seconds'),
        ("yesterday", "\"added_at\" 'yesterday' is not Unix seconds"),
        (True, '"added_at" True is not Unix seconds'),
    ],
)
def test_ingest_refuses_a_bad_time_naming_the_line(
    servers: tuple[str, str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    value: Any,
    said: str,
) -> None:
    address, _ = servers
    name = _collection(address)
    source = _jsonl(
        tmp_path / "bad.jsonl",
        [
            {"id": "a", "fingerprint": FPS[0], "added_at": 10},
            {"id": "b", "text": "x y z", "added_at": value},
        ],
    )
    code, _, err = _run(
        ["ingest", str(source), "--address", address, "--collection", name, "--no-progress"],
        capsys,
    )
    assert code == EXIT_CODES["invalid"], err
    assert f"{source}, line 2: {said}" in err


def test_export_then_import_keeps_the_times(
    servers: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source, target = servers
    name = _collection(source)
    now = int(time.time())
    with permindex.Client(source, collection=name) as client:
        client.add([("thirty", FPS[0], now - 1800), ("one", FPS[1], now - 60), ("new", FPS[2])])
    written = _times(source, name)
    out = tmp_path / "export.jsonl"
    code, _, err = _run(
        ["export", "--address", source, "--collection", name, "--out", str(out)], capsys
    )
    assert code == 0, err
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["id"]: r["added_at"] for r in lines} == {k: t for k, (_, t) in written.items()}
    # into a collection of the same duration: the same entries at the same times
    same = _collection(target)
    shorter = _collection(target, 1200)  # 20 minutes: the 30-minute-old entry has expired
    for collection in (same, shorter):
        argv = ["import", str(out), "--address", target, "--collection", collection]
        code, _, err = _run([*argv, "--no-progress"], capsys)
        assert code == 0, err
    assert _times(target, same) == written
    assert _times(target, shorter) == {k: v for k, v in written.items() if k != "thirty"}
    # a collection without expiry exports no added_at
    plain = _collection(source, None)
    with permindex.Client(source, collection=plain) as client:
        client.add([("p", FPS[3], now - 1800)])
    code, out_text, err = _run(["export", "--address", source, "--collection", plain], capsys)
    assert code == 0, err
    assert json.loads(out_text) == {"id": "p", "fingerprint": f"{FPS[3]:016x}"}


def test_parquet_export_then_import_keeps_the_times(
    servers: tuple[str, str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    source, target = servers
    name = _collection(source)
    now = int(time.time())
    with permindex.Client(source, collection=name) as client:
        client.add([("thirty", FPS[0], now - 1800), ("one", TEXT.format(3), now - 60)])
    written = _times(source, name)
    out = tmp_path / "export.parquet"
    argv = ["export", "--address", source, "--collection", name, "--out", str(out)]
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    table = pq.read_table(out)
    assert table.schema.names == ["id", "fingerprint", "added_at"]
    assert dict(zip(table["id"].to_pylist(), table["added_at"].to_pylist(), strict=True)) == {
        k: t for k, (_, t) in written.items()
    }
    shorter = _collection(target, 1200)
    argv = ["import", str(out), "--address", target, "--collection", shorter, "--no-progress"]
    code, _, err = _run(argv, capsys)
    assert code == 0, err
    assert _times(target, shorter) == {"one": written["one"]}
    # a bad value in a Parquet column is refused naming the file, the column and the row
    bad = tmp_path / "bad.parquet"
    pq.write_table(
        pa.table({"id": ["a", "b"], "fingerprint": pa.array([1, 2], pa.uint64()), "t": [5, -5]}),
        bad,
    )
    argv = ["import", str(bad), "--added-at-field", "t", "--address", target, "--no-progress"]
    code, _, err = _run([*argv, "--collection", shorter], capsys)
    assert code == EXIT_CODES["invalid"], err
    assert f"{bad}, column 't', row 2: added_at -5 is not Unix seconds" in err


def test_sharded_client_routes_the_times(servers: tuple[str, str]) -> None:
    name = f"c{next(_names)}"
    now = int(time.time())
    with permindex.Client(list(servers), collection=name) as client:
        client.create_collection(name, expire_after=HOUR)
        documents = [Document(f"k{i}", FPS[i], now - 60 * i) for i in range(6)]
        client.add([*documents, ("old", FPS[6], now - 2 * HOUR)])
        checked = client.check_and_add_many([("near-k1", FPS[1] ^ 1, now), ("x", FPS[7], now - 5)])
        assert [c.status for c in checked] == ["near_duplicate", "added"]
        found = {k: (fp, t) for k, fp, t in client.iter_export(with_times=True)}
    assert found == {**{d.key: (d.content, d.added_at) for d in documents}, "x": (FPS[7], now - 5)}
    on_each = [_times(address, name) for address in servers]
    assert all(on_each) and sum(len(part) for part in on_each) == len(found)  # spread


def test_parquet_times_column_rule() -> None:
    pa = pytest.importorskip("pyarrow")
    from permindex.io.arrow import ColumnError, added_at_array

    def read(values: Any) -> list[int]:
        return added_at_array(values, source="f.parquet", column="t")

    assert read(pa.array([0, 1, 1700000000], pa.uint32())) == [0, 1, 1700000000]
    assert read(pa.array([(1 << 63) - 1], pa.uint64())) == [(1 << 63) - 1]
    assert read(pa.array([1.9, 0.0, 1700000000.5])) == [1, 0, 1700000000]
    assert read(pa.chunked_array([[1, 2], [3]], pa.int16())) == [1, 2, 3]
    instant = datetime.datetime(2026, 1, 1, 0, 0, 1, 900000, tzinfo=datetime.UTC)
    for unit in ("s", "ms", "us", "ns"):  # a timestamp: its instant, floored to seconds
        stamps = pa.array([instant], pa.timestamp(unit, tz="Europe/Paris"))
        assert read(stamps) == [1767225601]
    for values, said in (
        (pa.chunked_array([[1, 2], [3, -4]], pa.int8()), ", row 4: added_at -4 is not"),
        (pa.array([1 << 63], pa.uint64()), ", row 1: added_at 9223372036854775808 is not"),
        (pa.array([1.0, float("nan")]), ", row 2: added_at nan is not"),
        (pa.array([1, None]), ", row 2: null value"),
        (pa.array(["1"]), ": has type string"),
        (pa.array([True]), ": has type bool"),
        (pa.array([datetime.datetime(1969, 12, 31)], pa.timestamp("ms")), ", row 1: added_at"),
    ):
        with pytest.raises(ColumnError, match=re.escape(f"f.parquet, column 't'{said}")):
            read(values)


def test_the_parser_reads_times_only_when_asked() -> None:
    from permindex.text.documents import Document as Read
    from permindex.text.documents import JsonlParser, MalformedInputError

    good = b'{"id": "a", "text": "x y z", "t": 5.5}\n{"id": "b", "fingerprint": 7, "t": 6}\n'
    bad = b'{"id": "a", "text": "x y z", "t": "2026-01-01"}\n{"id": "b", "text": "u v", "t": -1}\n'
    plain = JsonlParser("in.jsonl")  # as dedup reads: the field is any other field
    assert plain.block_columns(good, 1) == (["a", "b"], ["x y z", None], [None, 7])
    assert plain.block_columns(bad, 1) == (["a", "b"], ["x y z", "u v"], [None, None])
    timed = JsonlParser("in.jsonl", added_at_field="t")
    assert timed.block_columns(good, 1) == (["a", "b"], ["x y z", None], [None, 7])
    assert timed.parse_line(good.split(b"\n")[0], 1) == Read("a", text="x y z", added_at=5)
    with pytest.raises(
        MalformedInputError, match=re.escape("in.jsonl, line 1: \"t\" '2026-01-01'")
    ):
        timed.block_columns(bad, 1)


def test_an_expiring_index_exports_its_times_in_one_copy() -> None:
    from permindex.rpc.convert import export_copy, export_to_proto

    now = [1_700_000_000.0]
    index = permindex.ExpiringIndex(expire_after=HOUR, clock=lambda: now[0])
    index.add_many(["a", "b", "c"], FPS[:3], added_at=[now[0] - 10, now[0] - 3000, 0])
    now[0] += 1000  # "b" (3000 s old) has expired
    lengths, blob, fps, times = index.export_timed_compact()
    assert lengths.tolist() == [1, 1] and blob.tobytes() == b"a\0c\0"
    assert fps.tolist() == [FPS[0], FPS[2]] and times.dtype.name == "uint32"
    assert times.tolist() == [1_700_000_000 - 10, 1_700_000_000] == index.times(["a", "c"])
    entries = [e for m in export_to_proto(*export_copy(index), chunk=1) for e in m.entries]
    assert [(e.key, e.fingerprint, e.added_at) for e in entries] == [
        ("a", FPS[0], 1_700_000_000 - 10),
        ("c", FPS[2], 1_700_000_000),
    ]
    plain = permindex.Index()
    plain.add_many(["a"], FPS[:1])
    (entry,) = next(export_to_proto(*export_copy(plain))).entries
    assert (entry.key, entry.added_at) == ("a", 0)
