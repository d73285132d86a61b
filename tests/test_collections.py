"""Collections over a real server: isolation (the same key in two collections), options of their
own, errors, persistence across a restart, drop (memory and files), tokens."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import StartServer

import permindex
from permindex import Index
from permindex.errors import CollectionExistsError, InvalidArgumentError, ServerError

TEXT = "the quick brown fox jumps over the lazy dog near the river bank today"


def test_the_same_key_in_two_collections(start_server: StartServer) -> None:
    server = start_server()
    with permindex.Client(server.address) as client:
        created = client.create_collection("crawl-1")
        assert (created.name, created.count, created.k, created.tables) == ("crawl-1", 0, 3, 4)
        client.create_collection("crawl-2")
        one, two = client.use("crawl-1"), client.use("crawl-2")
        rng = random.Random(4)
        data = {
            name: {f"k{i}": rng.getrandbits(64) for i in range(300)} for name in ("a", "b", "c")
        }
        client.ingest(data["a"].items())
        one.ingest(data["b"].items())
        two.ingest(data["c"].items())
        two.add([("only-in-2", 5)])
        for collection, stored in ((client, data["a"]), (one, data["b"])):
            index = Index(k=3)
            index.add_many(list(stored), list(stored.values()))
            assert collection.get_many(list(stored)) == list(stored.values())
            for fp in list(stored.values())[:20]:
                assert collection.query(fp) == index.query(fp)
            assert collection.pairs() == sorted(index.pairs())
            assert dict(collection.export()) == stored
        assert one.get("only-in-2") is None and client.get("only-in-2") is None
        assert two.get("only-in-2") == 5
        assert two.stats().count == 301 and two.stats().collection == "crawl-2"
        assert client.stats().count == 300 and client.stats().collection == "default"
        one.remove("k1")
        assert client.get("k1") == data["a"]["k1"] and two.get("k1") == data["c"]["k1"]
        listed = {info.name: info.count for info in client.list_collections()}
        assert listed == {"default": 300, "crawl-1": 299, "crawl-2": 301}
        assert client.describe_collection("crawl-2").count == 301


def test_options_of_their_own(start_server: StartServer) -> None:
    server = start_server()
    with permindex.Client(server.address) as client:
        wide = client.create_collection("wide", k=4, blocks=6, leading=2, shingle_size=2)
        assert (wide.k, wide.blocks, wide.leading, wide.tables, wide.shingle_size) == (
            4, 6, 2, 15, 2
        )  # fmt: skip
        fp = 0
        far = (1 << 4) - 1  # 4 bits away
        client.use("wide").add([("a", fp), ("t", TEXT)])
        assert [m.key for m in client.use("wide").query(far, k=4)] == ["a"]
        with pytest.raises(InvalidArgumentError):
            client.query(far, k=4)  # the default collection answers k <= 3
        assert client.use("wide").get("t") == permindex.simhash(TEXT, shingle_size=2)
        with pytest.raises(InvalidArgumentError):
            client.create_collection("bad", k=4)  # 4 blocks, 1 leading: k <= 3


def test_errors(start_server: StartServer) -> None:
    server = start_server()
    with permindex.Client(server.address) as client:
        client.create_collection("c")
        with pytest.raises(CollectionExistsError) as exists:
            client.create_collection("c")
        assert isinstance(exists.value, ServerError) and exists.value.code == "ALREADY_EXISTS"
        for bad in ("", "-x", "a/b", "x" * 65, "..", "é"):
            with pytest.raises(InvalidArgumentError):
                client.create_collection(bad)
        with pytest.raises(KeyError) as missing:
            client.use("nope").get("k")
        assert isinstance(missing.value, ServerError) and missing.value.code == "NOT_FOUND"
        with pytest.raises(KeyError):
            client.drop_collection("nope")
        with pytest.raises(InvalidArgumentError):
            client.drop_collection("default")
        with pytest.raises(CollectionExistsError):
            client.create_collection("default")


def test_text_options_out_of_range_are_refused_by_the_server(start_server: StartServer) -> None:
    """A shingle size above 1,024 or a min_words above 10^6 (values a client may send, up to
    2^32 - 1) is INVALID_ARGUMENT naming the option; nothing is created, and a collection at
    the largest values works."""
    server = start_server()
    with permindex.Client(server.address) as client:
        cases: list[tuple[Callable[[], object], str]] = [
            (
                lambda: client.create_collection("big", shingle_size=1025),
                "shingle_size in [1, 1,024]",
            ),
            (
                lambda: client.create_collection("big", shingle_size=2**32 - 1),
                "shingle_size in [1, 1,024]",
            ),
            (
                lambda: client.create_collection("big", min_words=1_000_001),
                "min_words in [0, 1,000,000]",
            ),
        ]
        for create, named in cases:
            with pytest.raises(InvalidArgumentError) as refused:
                create()
            assert isinstance(refused.value, ServerError)
            assert named.split(" in ")[0] in str(refused.value)
            assert f"an integer in {named.split(' in ')[1]}" in str(refused.value)
        assert [info.name for info in client.list_collections()] == ["default"]
        client.create_collection("widest", shingle_size=1024, min_words=1_000_000)
        widest = client.use("widest")
        widest.ingest([("t", TEXT)])
        assert widest.stats().count == 0  # too short for those options: reported, not stored
        assert [info.name for info in client.list_collections()] == ["default", "widest"]


def test_collections_survive_a_restart_and_drop_frees_them(
    start_server: StartServer, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    server = start_server(data_dir=data_dir)
    with permindex.Client(server.address) as client:
        client.create_collection("kept", k=2)
        client.create_collection("gone")
        client.use("kept").ingest((f"k{i}", i << 20) for i in range(1000))
        client.use("gone").ingest((f"k{i}", i) for i in range(1000))
        client.use("kept").snapshot()
        client.use("kept").add([("after-snapshot", 7)])  # only in its log
        client.add([("in-default", 9)])
    server.stop()
    server = start_server(data_dir=data_dir)
    with permindex.Client(server.address) as client:
        kept = client.use("kept")
        assert kept.stats().count == 1001 and kept.describe_collection("kept").k == 2
        assert kept.get("after-snapshot") == 7 and kept.get("k999") == 999 << 20
        assert client.get("in-default") == 9 and client.use("gone").stats().count == 1000
        assert (data_dir / "collections" / "gone").is_dir()
        assert client.drop_collection("gone") == 1000
        assert not (data_dir / "collections" / "gone").exists()
        assert list((data_dir / "collections").iterdir()) == [data_dir / "collections" / "kept"]
        with pytest.raises(KeyError):
            client.use("gone").stats()
        assert [c.name for c in client.list_collections()] == ["default", "kept"]
        client.create_collection("gone")
        assert client.use("gone").stats().count == 0
    server.stop()
    server = start_server(data_dir=data_dir)
    with permindex.Client(server.address) as client:
        assert {c.name: c.count for c in client.list_collections()} == {
            "default": 1, "gone": 0, "kept": 1001,
        }  # fmt: skip


def test_read_only_tokens_cannot_create_or_drop(start_server: StartServer, tmp_path: Path) -> None:
    tokens = tmp_path / "tokens"
    tokens.write_text("writer-0123456789abcdef read-write\nreader-0123456789abcdef read-only\n")
    server = start_server(token_file=tokens)
    with permindex.Client(server.address, token="writer-0123456789abcdef") as writer:
        writer.create_collection("c")
    with permindex.Client(server.address, token="reader-0123456789abcdef") as reader:
        assert [c.name for c in reader.list_collections()] == ["c", "default"]
        for call in (lambda: reader.create_collection("d"), lambda: reader.drop_collection("c")):
            with pytest.raises(PermissionError):
                call()


def test_command_line(
    start_server: StartServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from permindex.cli import main

    server = start_server()
    at = ["--address", server.address]
    assert main(["collections", "create", "docs", "--k", "2", *at]) == 0
    assert "k\t2" in capsys.readouterr().out
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "a", "fingerprint": 1}\n{"id": "b", "fingerprint": 3}\n')
    assert main(["ingest", str(source), "--no-progress", "--collection", "docs", *at]) == 0
    capsys.readouterr()
    assert main(["pairs", "--collection", "docs", *at]) == 0
    assert capsys.readouterr().out == "a\tb\t1\n"
    assert main(["pairs", *at]) == 0
    assert capsys.readouterr().out == ""  # the default collection is empty
    assert main(["collections", "list", *at]) == 0
    assert capsys.readouterr().out == "default\t0\t3\t4/1\ndocs\t2\t2\t4/1\n"
    assert main(["get", "a", "--collection", "nope", *at]) == 5  # NOT_FOUND
    assert "does not exist" in capsys.readouterr().err
    assert main(["collections", "drop", "docs", *at]) == 0
    assert "2 keys" in capsys.readouterr().err
    assert main(["collections", "describe", *at]) == 2
    capsys.readouterr()
    # the collection is the NAME after the action: --collection there is refused, not ignored
    assert main(["collections", "describe", "--collection", "default", *at]) == 2
    assert "not with --collection" in capsys.readouterr().err


def test_drop_frees_the_index(start_server: StartServer) -> None:
    import gc
    import weakref

    server = start_server()
    assert server.catalog is not None
    with permindex.Client(server.address) as client:
        client.create_collection("big")
        client.use("big").ingest(
            (f"k{i}", i * 0x9E3779B97F4A7C15 % (1 << 64)) for i in range(50_000)
        )
        index = weakref.ref(server.catalog.get("big").index)
        assert index() is not None and len(index()) == 50_000  # type: ignore[arg-type]
        client.drop_collection("big")
    gc.collect()
    assert index() is None  # nothing holds the dropped index any more
