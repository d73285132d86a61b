"""Set voting of SimHash (``vote="set"``: each distinct shingle votes once) against a reference
written from the definition, in :func:`simhash`, :func:`simhash_many`, ``dedup --vote``,
``ingest --vote``, ``serve --vote`` and a collection's own vote (``collections create --vote``,
``Client.create_collection(vote=)``) over a ``permindex serve`` process."""

from __future__ import annotations

import asyncio
import json
from itertools import combinations
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import oracles
import pytest
from serverproc import ServeProcess

import permindex
from permindex import simhash, simhash_many
from permindex.cli import main
from permindex.errors import InvalidArgumentError
from permindex.text.fingerprint import Tokenizer

if TYPE_CHECKING:
    from permindex.rpc.server import RunningServer


def reference(
    text: str, shingle_size: int = 3, tokenizer: Tokenizer = "words", bits: int = 64
) -> int:
    """The set vote by the definition (tests/oracles.py), for a text with a shingle."""
    fp = oracles.simhash(text, shingle_size, bits, tokenizer, vote_="set")
    assert fp is not None
    return fp


def texts() -> list[str]:
    rng = np.random.default_rng(11)
    out = []
    for n in (3, 4, 10, 30, 200, 2000):
        words = [f"w{i}" for i in rng.integers(0, 20, size=n).tolist()]  # many repeats
        out.append(" ".join(words))
    out.append("Numeric Limits " * 300 + "a page of its own text about numeric_limits")
    out.append("Ünïcode Straße ΣΑΣ straße " * 5)
    return out


def test_set_vote_equals_the_reference() -> None:
    items = texts()
    fps, valid = simhash_many(items, vote="set")
    assert valid.all()
    for i, text in enumerate(items):
        assert simhash(text, vote="set") == reference(text) == int(fps[i])
        assert simhash(text, vote="set", bits=63) == reference(text, bits=63)
        assert simhash(text, vote="set", shingle_size=2) == reference(text, 2)
        assert simhash(text, vote="set", tokenizer="chars") == reference(text, 3, "chars")
    # the default is the multiset vote, unchanged; the two differ where shingles repeat
    repeated = items[-2]
    assert simhash(repeated) == simhash(repeated, vote="multiset") != simhash(repeated, vote="set")
    # the set vote depends only on the shingle set
    assert simhash("a b c a b c", vote="set") == simhash("a b c a b c a b c a b c", vote="set")


def test_set_vote_short_texts_and_bad_vote() -> None:
    assert simhash("two words", vote="set") is None
    assert simhash("one two three four", vote="set", min_words=5) is None
    fps, valid = simhash_many(["one two", "one two three"], vote="set")
    assert valid.tolist() == [False, True] and fps[0] == 0
    for bad in ("sets", "", None):
        with pytest.raises(InvalidArgumentError):
            simhash("one two three", vote=bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError):
            simhash_many(["one two three"], vote=bad)  # type: ignore[arg-type]


def test_dedup_vote_set_against_brute_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rng = np.random.default_rng(4)
    rows = []
    base = [f"w{i}" for i in rng.integers(0, 500, size=300).tolist()]
    for i in range(30):
        words = list(base)
        for _ in range(i % 6):
            words[int(rng.integers(0, 300))] = f"e{int(rng.integers(0, 10**6))}"
        rows.append({"id": f"d{i:02d}", "text": " ".join(words * (1 + i % 3))})
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    code = main(["dedup", str(path), "--vote", "set", "--k", "4", "--out", str(tmp_path / "o")])
    out = capsys.readouterr().out
    assert code == 0
    fps = {r["id"]: reference(r["text"]) for r in rows}
    want = sorted(
        f"{a}\t{b}\t{(fps[a] ^ fps[b]).bit_count()}"
        for a, b in combinations(sorted(fps), 2)
        if (fps[a] ^ fps[b]).bit_count() <= 4
    )
    assert want and out.splitlines() == want
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["vote"] == "set"


def test_ingest_vote_set(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    repeated = "numeric limits " * 200 + "of a type and the rest of its page"
    plain = "one two three four five six"
    rows: list[dict[str, object]] = [
        {"id": "repeated", "text": repeated},
        {"id": "plain", "text": plain},
        {"id": "short", "text": "two words"},
        {"id": "given", "fingerprint": 42},
    ]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    address = ("--address", server.address)
    assert main(["ingest", str(path), "--vote", "set", "--no-progress", *address]) == 0
    err = capsys.readouterr().err
    assert "3 added" in err and "1 too short" in err
    for key, want in (("repeated", reference(repeated)), ("plain", reference(plain))):
        assert main(["get", key, *address]) == 0
        assert capsys.readouterr().out.split()[-1] == f"{want:016x}"
    assert reference(repeated) != simhash(repeated)  # the server's own vote would differ


def test_server_vote_set(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, start_server: Any
) -> None:
    # serve --vote set: the server fingerprints texts with the set vote, in the default
    # collection and in the collections created on it (kept in their collection.json)
    server = start_server(vote="set")
    repeated = "numeric limits " * 200 + "of a type and the rest of its page"
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"id": "repeated", "text": repeated}) + "\n")
    address = ("--address", server.address)
    assert main(["collections", "create", "pages", *address]) == 0
    for collection in ("default", "pages"):
        where = (*address, "--collection", collection)
        assert main(["ingest", str(path), "--no-progress", *where]) == 0
        capsys.readouterr()
        assert main(["get", "repeated", *where]) == 0
        assert capsys.readouterr().out.split()[-1] == f"{reference(repeated):016x}"
        assert main(["query", "--text", repeated, "--vote", "set", "--k", "0", *where]) == 0
        assert capsys.readouterr().out.split("\t")[0] == "repeated"
        assert main(["query", "--text", repeated, "--k", "0", *where]) == 0
        assert capsys.readouterr().out == ""  # the multiset fingerprint is another one
    stored = server.data_dir / "collections" / "pages" / "collection.json"
    assert json.loads(stored.read_text())["vote"] == "set"


REPEATED = "numeric limits " * 200 + "of a type and the rest of its page"


def test_collection_vote_over_a_server_process(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A collection's own vote (CreateCollection's CollectionOptions.vote) against the reference:
    the server fingerprints a text with a repeated word as simhash(text, vote=...) does, the
    collections without one take the server's --vote, describe and list show it, it survives a
    restart under another --vote, and a bad vote is refused."""
    data_dir = tmp_path / "data"
    proc = ServeProcess(data_dir)  # the server's --vote: multiset (the default)
    address = proc.address()
    assert address is not None, proc.text
    multiset, sets = simhash(REPEATED), simhash(REPEATED, vote="set")
    assert sets == reference(REPEATED) != multiset
    try:
        with permindex.Client(address) as client:
            assert client.create_collection("sets", vote="set").vote == "set"
            assert client.create_collection("plain").vote == "multiset"  # the server's
            assert client.create_collection("multi", vote="multiset").vote == "multiset"
            for bad in ("sets", "Set", "multiset "):
                with pytest.raises(InvalidArgumentError, match="vote must be one of"):
                    client.create_collection("bad", vote=bad)  # type: ignore[arg-type]
            for name in ("default", "sets", "plain", "multi"):
                client.use(name).add([("page", REPEATED)])
            stored = {n: client.use(n).get("page") for n in ("default", "sets", "plain", "multi")}
            assert stored == {
                "default": multiset,
                "sets": sets,
                "plain": multiset,
                "multi": multiset,
            }
            assert client.describe_collection("sets").vote == "set"
            votes = {c.name: c.vote for c in client.list_collections()}
            assert votes == {"default": "multiset", "multi": "multiset", "plain": "multiset",
                             "sets": "set"}  # fmt: skip
            copy = "numeric limits " * 300 + "of a type and the rest of its page"
            (found,) = client.use("sets").check_and_add_many([("copy", copy)])
            assert found.fingerprint == simhash(copy, vote="set") == sets  # the same shingle set
            nearest = found.matches[0]
            assert found.status == "near_duplicate" and isinstance(nearest, permindex.Match)
            assert nearest.distance == 0

        async def create(at: str) -> tuple[str, str]:
            async with permindex.AsyncClient(at) as aio:
                made = await aio.create_collection("async-set", vote="set")
                return made.vote, (await aio.describe_collection("async-set")).vote

        assert asyncio.run(create(address)) == ("set", "set")
    finally:
        proc.stop()
    proc = ServeProcess(data_dir, "--vote", "set")
    address = proc.address()
    assert address is not None, proc.text
    try:
        with permindex.Client(address) as client:
            votes = {c.name: c.vote for c in client.list_collections()}
            # the collections keep the vote they were created with; default is the server's
            assert votes == {"async-set": "set", "default": "set", "multi": "multiset",
                             "plain": "multiset", "sets": "set"}  # fmt: skip
            for name, want in (("default", sets), ("sets", sets), ("plain", multiset)):
                client.use(name).add([("again", REPEATED)])
                assert client.use(name).get("again") == want
            assert client.use("sets").get("page") == sets  # recovered from its log
            assert client.create_collection("later").vote == "set"  # the server's now
        at = ["--address", address]
        assert main(["collections", "create", "cli", "--vote", "multiset", *at]) == 0
        assert "vote\tmultiset\n" in capsys.readouterr().out
        assert main(["collections", "describe", "sets", "--json", *at]) == 0
        assert json.loads(capsys.readouterr().out)["vote"] == "set"
        assert main(["collections", "list", "--json", *at]) == 0
        listed = {c["name"]: c["vote"] for c in json.loads(capsys.readouterr().out)}
        assert listed["cli"] == "multiset" and listed["later"] == "set"
        assert main(["collections", "create", "x", "--vote", "sets", *at]) == 2
        assert "invalid choice: 'sets'" in capsys.readouterr().err
    finally:
        proc.stop()
    stored_options = json.loads((data_dir / "collections" / "sets" / "collection.json").read_text())
    assert stored_options["vote"] == "set"
