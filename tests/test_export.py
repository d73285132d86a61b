"""Export and import: the Export RPC, Client.export, `permindex export` and `permindex import`
between two real servers."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

import pytest
from conftest import StartServer

import permindex
from permindex.cli import main
from permindex.rpc.server import RunningServer


def test_export_then_import_into_another_server(
    start_server: StartServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = random.Random(5)
    stored = {f"k{i}": rng.getrandbits(64) for i in range(25_000)}  # three messages
    stored.update({"tab\there": 0, "line\nbreak": (1 << 64) - 1, "é 漢字 🙂": 1 << 63})
    source = start_server(data_dir=tmp_path / "a")
    with permindex.Client(source.address) as client:
        client.ingest(stored.items())
        client.remove("k7")
        del stored["k7"]
        assert dict(client.export()) == stored
        assert len(list(client.export())) == len(stored)  # each key once
    out = tmp_path / "export.jsonl"
    assert main(["export", "--address", source.address, "--out", str(out)]) == 0
    assert f"{len(stored)} keys written" in capsys.readouterr().err
    lines = out.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    assert set(first) == {"id", "fingerprint"} and len(first["fingerprint"]) == 16
    assert {json.loads(line)["id"]: int(json.loads(line)["fingerprint"], 16) for line in lines} == (
        stored
    )
    assert not (tmp_path / "export.jsonl.partial").exists()

    target = start_server(data_dir=tmp_path / "b")
    assert main(["import", str(out), "--address", target.address, "--no-progress"]) == 0
    assert capsys.readouterr().err.startswith(f"permindex import: {len(stored)} documents in ")
    with permindex.Client(target.address) as client, permindex.Client(source.address) as old:
        assert dict(client.export()) == stored
        assert client.pairs() == old.pairs()


def test_export_of_an_empty_server_to_stdout(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["export", "--address", server.address]) == 0
    captured = capsys.readouterr()
    assert captured.out == "" and "0 keys written to stdout" in captured.err


def to_signed(fingerprint: int) -> int:
    """The two's-complement rule of the docs (guides/fingerprints.md): a fingerprint in a signed
    BIGINT column."""
    return fingerprint - (1 << 64) if fingerprint >= 1 << 63 else fingerprint


def test_signed_bigint_storage_and_the_sql_self_join(server: RunningServer) -> None:
    rng = random.Random(9)
    stored: dict[str, int] = {}
    for i in range(300):
        base = rng.getrandbits(64)
        stored[f"p{i}"] = base
        if i % 3 == 0:  # a near-duplicate, bit 63 flipped half of the time
            stored[f"q{i}"] = base ^ (1 << rng.randrange(64)) ^ ((i % 2) << 63)
    with permindex.Client(server.address) as client:
        client.ingest(stored.items())
        exported = dict(client.export())
        expected = client.pairs()
    db = sqlite3.connect(":memory:")
    mask = (1 << 64) - 1
    db.create_function("hamming", 2, lambda a, b: ((a ^ b) & mask).bit_count(), deterministic=True)
    db.execute("CREATE TABLE page (url TEXT PRIMARY KEY, simhash BIGINT NOT NULL)")
    db.executemany(
        "INSERT INTO page VALUES (?, ?)", [(k, to_signed(fp)) for k, fp in exported.items()]
    )
    rows = db.execute(
        "SELECT a.url, b.url, hamming(a.simhash, b.simhash) FROM page a "
        "JOIN page b ON a.url < b.url WHERE hamming(a.simhash, b.simhash) <= 3 ORDER BY 1, 2"
    ).fetchall()
    assert rows == expected and len(expected) >= 100
    back = {url: value & mask for url, value in db.execute("SELECT url, simhash FROM page")}
    assert back == stored
    db.close()
