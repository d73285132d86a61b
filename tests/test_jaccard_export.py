"""`permindex export` and `permindex import` of a Jaccard collection (method minhash), through
the CLI against a real server: each key with its sketch in hex (shingle_hashes or signature;
JSONL and Parquet), restored exactly into a new Jaccard collection (the same export, pairs and
query answers), and a SimHash export into a Jaccard collection (and the reverse, and a signature
into an exact collection) refused before anything is stored."""

from __future__ import annotations

import io
import json
import random
import sys
import time
from pathlib import Path
from typing import Final

import pytest

import permindex
from permindex.cli import main
from permindex.client import Document, SketchHex
from permindex.errors import EXIT_CODES
from permindex.rpc.server import RunningServer


def corpus(seed: int, n: int) -> list[tuple[str, str]]:
    """``n`` texts of 30 to 60 words from a 400-word vocabulary, a third of them edited copies
    of an earlier one (a few words replaced), so that some pairs reach Jaccard 0.5."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(400)]
    texts: list[str] = []
    for i in range(n):
        if i % 3 == 2:
            words = texts[rng.randrange(len(texts))].split()
            for _ in range(rng.randrange(1, 4)):
                words[rng.randrange(len(words))] = rng.choice(vocabulary)
        else:
            words = rng.choices(vocabulary, k=rng.randrange(30, 61))
        texts.append(" ".join(words))
    return [(f"doc {i} é", text) for i, text in enumerate(texts)]


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``permindex ARGS`` in this process: (exit code, stdout, stderr)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_export_import_round_trips_a_jaccard_collection_exactly(
    server: RunningServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    at = ("--address", server.address)
    documents = corpus(3, 300)
    with permindex.Client(server.address) as client:
        client.create_collection("src", method="minhash", threshold=0.5)
        source = client.use("src")
        source.ingest(documents)
        stored: list[tuple[str, object]] = sorted(source.iter_export())  # SketchHex entries
        assert len(stored) == 300 and source.pairs()  # the test has pairs to compare

        out = tmp_path / "src.jsonl"
        assert run(capsys, "export", "--collection", "src", *at, "--out", str(out))[0] == 0
        lines = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
        assert set(lines[0]) == {"id", "shingle_hashes"}
        kind: Final = "shingle_hashes"
        assert sorted((line["id"], SketchHex(line[kind], kind)) for line in lines) == stored

        client.create_collection("dst", method="minhash", threshold=0.5)
        code, _, err = run(capsys, "import", str(out), "--collection", "dst", *at, "--no-progress")
        assert code == 0 and err.startswith("permindex import: 300 documents in "), err
        assert sorted(client.use("dst").iter_export()) == stored

    def answers(collection: str) -> list[str]:
        pairs = run(capsys, "pairs", "--collection", collection, *at)
        queries = [
            run(capsys, "query", "--collection", collection, *at, *how)
            for key, text in documents[:40:4]
            for how in (("--key", key), ("--text", text))
        ]
        return [pairs[1]] + [f"{code}\n{stdout}" for code, stdout, _ in queries]

    assert answers("dst") == answers("src")
    assert answers("src")[0].count("\n") >= 1  # some pairs are printed, as 4 decimals
    # the same through stdout, and back through stdin
    code, stdout, _ = run(capsys, "export", "--collection", "src", *at)
    assert code == 0 and stdout == out.read_text(encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdout.encode("utf-8"))))
    with permindex.Client(server.address) as client:
        client.create_collection("piped", method="minhash", threshold=0.5)
        assert run(capsys, "import", "-", "--collection", "piped", *at)[0] == 0
        assert sorted(client.use("piped").iter_export()) == stored


def test_parquet_export_of_a_signature_collection_with_expiry(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    at = ("--address", server.address)
    now = int(time.time())
    options = {"method": "minhash", "threshold": 0.5, "verify": "signature", "expire_after": 3600}
    with permindex.Client(server.address) as client:
        client.create_collection("sig", **options)  # type: ignore[arg-type]
        sig = client.use("sig")
        sig.ingest(Document(k, t, now - 60 * i) for i, (k, t) in enumerate(corpus(4, 60)))
        stored = sorted(sig.iter_export(with_times=True))
        out = tmp_path / "sig.parquet"
        assert run(capsys, "export", "--collection", "sig", *at, "--out", str(out))[0] == 0
        table = pq.read_table(out)
        assert table.column_names == ["id", "signature", "added_at"]
        assert len(table.column("signature")[0].as_py()) == 8 * 128  # 128 values
        client.create_collection("sig2", **options)  # type: ignore[arg-type]
        code, _, err = run(capsys, "import", str(out), "--collection", "sig2", *at)
        assert code == 0, err
        assert sorted(client.use("sig2").iter_export(with_times=True)) == stored
        assert client.use("sig2").pairs() == sig.pairs()
        # --fingerprint-type is for fingerprints: refused on a Jaccard collection
        int64 = ("--fingerprint-type", "int64", "--out", str(tmp_path / "x.parquet"))
        code, _, err = run(capsys, "export", "--collection", "sig", *at, *int64)
        assert code == EXIT_CODES["usage"] and "Jaccard collection" in err
        assert not list(tmp_path.glob("x.parquet*"))
        # a Parquet sketch export into a SimHash collection: refused, nothing stored
        code, _, err = run(capsys, "import", str(out), *at)
        assert code == EXIT_CODES["invalid"] and "SimHash collection" in err, err
        assert client.stats().count == 0
        # a signature cannot be verified exactly: refused by an exact collection
        client.create_collection("exact", method="minhash", threshold=0.5)
        code, _, err = run(capsys, "import", str(out), "--collection", "exact", *at)
        assert code == EXIT_CODES["invalid"] and "--verify signature" in err, err
        assert client.describe_collection("exact").count == 0


def test_an_export_into_the_other_kind_of_collection_is_refused(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    at = ("--address", server.address)
    documents = corpus(5, 30)
    simhash_file, jaccard_file = tmp_path / "simhash.jsonl", tmp_path / "jaccard.jsonl"
    with permindex.Client(server.address) as client:
        client.ingest(documents)  # the default collection: SimHash
        client.create_collection("j", method="minhash", threshold=0.5)
        client.use("j").ingest(documents)
        assert run(capsys, "export", *at, "--out", str(simhash_file))[0] == 0
        assert run(capsys, "export", "--collection", "j", *at, "--out", str(jaccard_file))[0] == 0
        client.create_collection("simhash2")
        client.create_collection("jaccard2", method="minhash", threshold=0.5)
        client.create_collection("signature2", method="minhash", verify="signature")

        code, _, err = run(capsys, "import", str(simhash_file), "--collection", "jaccard2", *at)
        assert code == EXIT_CODES["invalid"], err
        assert "has a fingerprint (an export of a SimHash collection)" in err
        assert "collection jaccard2 is a Jaccard collection" in err
        assert "0 documents before it were stored" in err
        code, _, err = run(capsys, "import", str(jaccard_file), "--collection", "simhash2", *at)
        assert code == EXIT_CODES["invalid"], err
        assert "has a sketch (an export of a Jaccard collection)" in err
        assert "--method minhash" in err
        # malformed sketches: the line named, nothing sent
        bad = tmp_path / "bad.jsonl"
        for line in (
            '{"id": "a", "shingle_hashes": "00000000000000ff0000"}',  # not whole hashes
            '{"id": "a", "signature": "xyz"}',
            '{"id": "a", "signature": "00000001", "shingle_hashes": "00000000000000ff"}',
        ):
            bad.write_text(line + "\n", encoding="utf-8")
            code, _, err = run(capsys, "import", str(bad), "--collection", "jaccard2", *at)
            assert code == EXIT_CODES["invalid"] and "line 1" in err, err
        for name in ("simhash2", "jaccard2", "signature2"):
            assert client.describe_collection(name).count == 0
        # shingle hashes into a signature collection: signed there, as the texts would be
        code, _, err = run(capsys, "import", str(jaccard_file), "--collection", "signature2", *at)
        assert code == 0, err
        client.create_collection("signature3", method="minhash", verify="signature")
        client.use("signature3").ingest(documents)
        assert sorted(client.use("signature2").iter_export()) == sorted(
            client.use("signature3").iter_export()
        )
        # each export still goes back where it belongs
        assert run(capsys, "import", str(simhash_file), "--collection", "simhash2", *at)[0] == 0
        assert sorted(client.use("simhash2").iter_export()) == sorted(client.iter_export())
