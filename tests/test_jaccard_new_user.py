"""What a new user of a Jaccard collection meets first (issue 42's walkthrough): a text too
short to sketch, a sketch sent to the fingerprint query, advice that must work when followed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import permindex
from permindex.cli import main
from permindex.client.sharding import shard_of
from permindex.errors import EXIT_CODES, InvalidArgumentError, ServerInvalidArgumentError
from permindex.rpc.server import RunningServer

TEXT = "the quick brown fox jumps over the lazy dog"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``permindex ARGS`` in this process: (exit code, stdout, stderr)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_query_text_too_short_exits_6_on_a_jaccard_collection(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with permindex.Client(server.address) as client:
        client.create_collection("j", method="minhash", threshold=0.8)
        client.use("j").add([("a", TEXT)])
    at = ("--address", server.address, "--collection", "j")
    code, out, err = run(capsys, "query", "--text", "two words", *at)
    assert (code, out) == (EXIT_CODES["too_short"], "")
    assert "fewer than 3 words: it has no sketch" in err
    # the SimHash collection says it alike
    code, out, err = run(capsys, "query", "--text", "two words", "--address", server.address)
    assert (code, out) == (EXIT_CODES["too_short"], "")
    assert "fewer than 3 words: it has no fingerprint" in err
    # three words are enough, and the stored page is found
    code, out, _ = run(capsys, "query", "--text", TEXT, *at)
    assert (code, out) == (0, "a\t1.0000\n")


def test_query_given_a_sketch_says_in_one_line_to_call_query_jaccard(
    server: RunningServer,
) -> None:
    sketch = permindex.minhash_sketch(TEXT)
    assert sketch is not None
    with permindex.Client(server.address) as client:
        with pytest.raises(InvalidArgumentError) as raised:
            client.query(sketch)  # type: ignore[arg-type]
        message = str(raised.value)
        assert "\n" not in message and len(message) < 200
        assert "MinHashSketch" in message and 'query_jaccard([...], by="sketch")' in message
        with pytest.raises(InvalidArgumentError, match=r'by="text"'):
            client.query(TEXT)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError) as raised:
            client.query_many([np.arange(1000)])  # type: ignore[list-item]
        assert str(raised.value) == "fingerprints[0] = a ndarray is not an int in [0, 2**64)"


def test_the_advice_for_pairs_over_shards_works_when_followed(
    start_server: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Pairs, clusters and flags over two shards of a Jaccard collection are refused with advice;
    doing what it says (export, import into one server's collection, ask there) gives the pair."""
    shards = [start_server(data_dir=tmp_path / f"s{i}") for i in range(2)]
    one = start_server(data_dir=tmp_path / "one")
    both = ",".join(s.address for s in shards)
    # two near-copies whose keys land on different shards, and an unrelated page
    first = next(f"a{i}" for i in range(100) if shard_of(f"a{i}", 2) == 0)
    second = next(f"b{i}" for i in range(100) if shard_of(f"b{i}", 2) == 1)
    docs = [(first, TEXT + " again and again"), (second, TEXT + " again and again!"),
            ("other", "one two three four five six seven eight")]  # fmt: skip
    for address in (both, one.address):
        assert run(capsys, "collections", "create", "j", "--method", "minhash",
                   "--threshold", "0.8", "--address", address)[0] == 0  # fmt: skip
    with permindex.Client(both, collection="j") as sharded:
        sharded.add(docs)
    for command in ("pairs", "clusters", "flags"):
        code, out, err = run(capsys, command, "--collection", "j", "--address", both)
        assert code == EXIT_CODES["invalid"] and out == ""
        assert "`permindex import FILE`" in err and "same options" in err, err
        with permindex.Client(both, collection="j") as sharded:
            with pytest.raises(InvalidArgumentError, match="permindex import"):
                getattr(sharded, command)()
    # followed: export from the shards, import into one server's collection, ask there
    exported = tmp_path / "j.jsonl"
    assert run(capsys, "export", "--collection", "j", "--address", both,
               "--out", str(exported))[0] == 0  # fmt: skip
    assert run(capsys, "import", str(exported), "--collection", "j",
               "--address", one.address, "--no-progress")[0] == 0  # fmt: skip
    code, out, _ = run(capsys, "pairs", "--collection", "j", "--address", one.address)
    assert code == 0 and out.startswith(f"{first}\t{second}\t0.")
    assert out.count("\n") == 1


def test_help_says_only_serve_refuses_an_unknown_variable(
    server: RunningServer, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, out, _ = run(capsys, "--help")
    shown = " ".join(out.split())
    assert code == 0
    assert "for serve also an unknown PERMINDEX_* variable" in shown
    assert "PERMINDEX_ADDRESS, the Scrapy setting's name, is not read; pass --address" in shown
    # what the help says: a client command ignores it (and an unknown one), asks --address
    monkeypatch.setenv("PERMINDEX_ADDRESS", "127.0.0.1:1")
    monkeypatch.setenv("PERMINDEX_NO_SUCH_OPTION", "1")
    code, out, _ = run(capsys, "stats", "--address", server.address)
    assert code == 0 and out
    code, _, err = run(capsys, "serve", "--check-config", "--data-dir", str(server.data_dir))
    assert code == EXIT_CODES["usage"] and "PERMINDEX_NO_SUCH_OPTION" in err


def test_messages_agree_in_number_and_name_the_python_call(
    server: RunningServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # dedup's summary: one candidate verified
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(
        json.dumps({"id": "a", "text": TEXT + " again and again"}) + "\n"
        + json.dumps({"id": "b", "text": TEXT + " again and again!"}) + "\n",
        encoding="utf-8",
    )  # fmt: skip
    code, out, err = run(capsys, "dedup", str(corpus), "--method", "minhash",
                         "--out", str(tmp_path / "report"))  # fmt: skip
    assert (code, out) == (0, "a\tb\t0.8182\n")
    assert "(1 candidate verified)" in err
    # one SimHash option given with --method minhash
    code, _, err = run(capsys, "collections", "create", "j", "--method", "minhash",
                       "--k", "3", "--address", server.address)  # fmt: skip
    assert code == EXIT_CODES["usage"] and "--k: SimHash option; --method minhash" in err
    code, _, err = run(capsys, "collections", "create", "j", "--method", "minhash",
                       "--k", "3", "--vote", "set", "--address", server.address)  # fmt: skip
    assert code == EXIT_CODES["usage"] and "--k, --vote: SimHash options;" in err
    # query_jaccard on a SimHash collection: the Python call to make, not gRPC field names
    with permindex.Client(server.address) as client:
        client.add([("a", TEXT)])
        for by, item in (("text", TEXT), ("key", "a")):
            with pytest.raises(ServerInvalidArgumentError) as raised:
                client.query_jaccard([item], by=by)
            message = str(raised.value)
            assert "'default' is SimHash: call query(fingerprint) or query_many" in message
            assert "permindex.simhash(text)" in message and "fingerprints_hex" not in message
            assert raised.value.code == "INVALID_ARGUMENT"
