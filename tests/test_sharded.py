"""The sharded Client (several addresses, keys routed by XXH3-64 of the key) against three real
``permindex serve`` processes, compared with one server holding everything; the command line
with a comma-separated ``--address``. Each test works in a collection of its own."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import StartServer
from serverproc import ServeProcess
from xxhash import xxh3_64_intdigest

import permindex
from permindex import simhash
from permindex.cli import main
from permindex.client.sharding import merge_columns, shard_of
from permindex.errors import InvalidArgumentError
from permindex.rpc.server import RunningServer

TEXT = "the quick brown fox jumps over the lazy dog near the river bank at dawn"


@pytest.fixture(scope="module")
def addresses(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], str]]:
    """Three shard servers and one single server: (shard addresses, single address)."""
    root = tmp_path_factory.mktemp("shards")
    procs = [ServeProcess(root / f"data{i}") for i in range(4)]
    try:
        found = [proc.address() for proc in procs]
        assert all(found), [proc.text for proc in procs]
        yield [a for a in found[:3] if a], found[3] or ""
    finally:
        for proc in procs:
            proc.stop()


@pytest.fixture
def pair(
    addresses: tuple[list[str], str], request: pytest.FixtureRequest
) -> Iterator[tuple[permindex.Client, permindex.Client]]:
    """(sharded client, single client), both on a fresh collection named after the test."""
    shards, single = addresses
    name = request.node.name.replace("[", "_").replace("]", "")[:60]
    with permindex.Client(shards, timeout=30) as sharded, permindex.Client(single) as one:
        sharded.create_collection(name)
        one.create_collection(name)
        yield sharded.use(name), one.use(name)
        sharded.drop_collection(name)
        one.drop_collection(name)


def planted(seed: int, n: int = 60) -> dict[str, int]:
    """``n`` random fingerprints and, for each, a copy 0..3 bits away under another key."""
    rng = random.Random(seed)
    stored: dict[str, int] = {}
    for i in range(n):
        fp = rng.getrandbits(64)
        stored[f"base/{i}"] = fp
        for bit in rng.sample(range(64), rng.randint(0, 3)):
            fp ^= 1 << bit
        stored[f"near/{i}"] = fp
    return stored


def test_shard_of_is_xxh3_of_the_utf8_key_mod_n() -> None:
    for key in ("a", "https://example.com/é", "日本", ""):
        for n in (1, 2, 3, 7):
            assert shard_of(key, n) == xxh3_64_intdigest(key.encode("utf-8")) % n
    counts = [0, 0, 0]
    for i in range(3000):
        counts[shard_of(f"k{i}", 3)] += 1
    assert min(counts) > 900  # spread evenly enough


def test_every_read_and_write_equals_one_server(
    pair: tuple[permindex.Client, permindex.Client], addresses: tuple[list[str], str]
) -> None:
    sharded, one = pair
    stored = planted(1)
    items = list(stored.items())
    first, second = sharded.add(items[:50]), one.add(items[:50])
    assert first == second
    assert sharded.ingest(items).documents == one.ingest(items).documents == len(items)
    # each key is on its shard, and only there
    shards, _ = addresses
    for i, address in enumerate(shards):
        with permindex.Client(address).use(sharded.collection) as alone:
            keys = dict(alone.export())
            assert keys and all(shard_of(key, 3) == i for key in keys)
    rng = random.Random(2)
    queries = list(stored.values())[:40] + [rng.getrandbits(64) for _ in range(10)]
    assert sharded.query_many(queries) == one.query_many(queries)
    assert sharded.query_many(queries, k=1, limit=1) == one.query_many(queries, k=1, limit=1)
    assert sharded.query(queries[0], limit=2) == one.query(queries[0], limit=2)
    columns = sharded.query_columns(queries, batch=7, limit=2)
    assert columns.to_lists(len(queries)) == one.query_many(queries, limit=2)
    names = [*list(stored)[::7], "absent"]
    assert sharded.get_many(names) == one.get_many(names)
    assert sharded.get("absent") is None
    assert sorted(sharded.export()) == sorted(one.export())
    assert sharded.stats().count == one.stats().count == len(stored)
    removed = [*list(stored)[:5], "absent"]
    assert sharded.remove(removed) == one.remove(removed)
    assert sharded.query_many(queries) == one.query_many(queries)
    assert sharded.describe_collection(sharded.collection).count == len(stored) - 5


def test_check_and_add_many_equals_one_server(
    pair: tuple[permindex.Client, permindex.Client],
) -> None:
    sharded, one = pair
    stored = planted(3, 40)
    old = list(stored.items())[::2]  # the bases
    assert sharded.add(old).added == one.add(old).added
    rng = random.Random(4)
    batch: list[tuple[str, int | str]] = [
        (key.replace("base", "new"), fp ^ (1 << rng.randrange(64))) for key, fp in old[:10]
    ]
    batch += list(stored.items())[1::2][:10]  # near copies of stored keys
    batch += [(f"fresh/{i}", rng.getrandbits(64)) for i in range(10)]
    stored_fresh = batch[-3][1]  # fresh/7
    assert isinstance(stored_fresh, int)
    twin = stored_fresh ^ 1
    batch += [("twin", twin), ("twin2", twin ^ 2)]  # near a batch-mate that is added
    # the three near each other on different shards: only the first is added
    assert len({shard_of(key, 3) for key in ("twin", "twin2", "fresh/7")}) == 3
    batch += [(old[0][0], old[0][1] ^ 4)]  # a re-add of a stored key: replaced, not blocked
    batch += [("text/a", TEXT), ("text/b", TEXT + " again"), ("short", "two words")]
    expected = one.check_and_add_many(batch)
    found = sharded.check_and_add_many(batch)
    assert found == expected
    statuses = {r.status for r in found}
    assert statuses == {"added", "replaced", "near_duplicate", "too_short"}
    assert sorted(sharded.export()) == sorted(one.export())
    again = sharded.check_and_add_many(batch[:3], k=0)
    assert again == one.check_and_add_many(batch[:3], k=0)


def test_check_and_add_over_shards_uses_the_collections_vote(
    addresses: tuple[list[str], str],
) -> None:
    """Over shards the client fingerprints the texts itself: with the collection's vote (set),
    as the one server does, not the multiset default."""
    shards, single = addresses
    repeated = "numeric limits " * 200 + "of a type and the rest of its page"
    copy = "numeric limits " * 300 + "of a type and the rest of its page"  # the same shingle set
    texts = (repeated, copy, TEXT, repeated + " more")
    batch: list[tuple[str, int | str]] = list(zip(("a", "b", "c", "d"), texts, strict=True))
    assert len({shard_of(key, 3) for key, _ in batch[:2]}) == 2  # the copy on another shard
    with permindex.Client(shards, timeout=30) as sharded, permindex.Client(single) as one:
        for client in (sharded, one):
            assert client.create_collection("set-vote", vote="set").vote == "set"
        try:
            found = sharded.use("set-vote").check_and_add_many(batch)
            assert found == one.use("set-vote").check_and_add_many(batch)
            assert [r.fingerprint for r in found] == [
                simhash(str(text), vote="set") for _, text in batch
            ]
            assert found[1].status == "near_duplicate" and found[1].matches[0].key == "a"
            assert simhash(repeated) != simhash(repeated, vote="set")
        finally:
            sharded.drop_collection("set-vote")
            one.drop_collection("set-vote")


def test_all_pairs_calls_are_refused_over_shards(
    pair: tuple[permindex.Client, permindex.Client],
) -> None:
    sharded, _ = pair
    for call in (
        sharded.pairs,
        sharded.clusters,
        sharded.flags,
        sharded.exact_duplicates,
        sharded.iter_pairs,
        sharded.iter_clusters,
    ):
        with pytest.raises(InvalidArgumentError, match=r"export.*dedup"):
            call()


def test_collection_commands_apply_to_every_shard(addresses: tuple[list[str], str]) -> None:
    shards, _ = addresses
    with permindex.Client(shards) as sharded:
        info = sharded.create_collection("everywhere", k=2)
        assert info.k == 2 and info.count == 0
        for address in shards:
            with permindex.Client(address) as alone:
                assert alone.describe_collection("everywhere").k == 2
        assert "everywhere" in [c.name for c in sharded.list_collections()]
        with pytest.raises(permindex.ServerCollectionExistsError):
            sharded.create_collection("everywhere")
        sharded.use("everywhere").add([(f"k{i}", i) for i in range(30)])
        assert sharded.describe_collection("everywhere").count == 30
        assert sharded.drop_collection("everywhere") == 30
        with pytest.raises(permindex.ServerNotFoundError):
            sharded.describe_collection("everywhere")


def test_merge_columns_orders_by_position_distance_key_and_limits() -> None:
    from permindex.client.results import ColumnMatches

    def part(rows: list[tuple[int, str, int]]) -> ColumnMatches:
        import numpy as np

        return ColumnMatches(
            np.array([r[0] for r in rows], np.int64),
            np.arange(len(rows), dtype=np.uint64),
            np.array([r[2] for r in rows], np.uint8),
            [r[1] for r in rows],
        )

    merged = merge_columns(
        [part([(0, "b", 1), (2, "x", 0)]), part([(0, "a", 1), (0, "c", 0), (1, "z", 3)])], 2
    )
    rows = list(
        zip(merged.query_positions.tolist(), merged.keys, merged.distances.tolist(), strict=True)
    )
    assert rows == [(0, "c", 0), (0, "a", 1), (1, "z", 3), (2, "x", 0)]


def test_addresses_are_checked() -> None:
    for bad in ("", "127.0.0.1:1,", "127.0.0.1:1,127.0.0.1:1", "127.0.0.1"):
        with pytest.raises(InvalidArgumentError):
            permindex.Client(bad)


def test_command_line_with_comma_separated_addresses(
    addresses: tuple[list[str], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    shards, single = addresses
    joined = ",".join(shards)
    source = tmp_path / "in.jsonl"
    stored = planted(5, 20)
    source.write_text(
        "".join(json.dumps({"id": k, "fingerprint": f"{v:016x}"}) + "\n" for k, v in stored.items())
    )
    common = ["--collection", "cli"]
    assert main(["collections", "create", "cli", "--address", joined]) == 0
    assert main(["collections", "create", "cli", "--address", single]) == 0
    for address in (joined, single):
        assert main(["import", str(source), "--address", address, *common]) == 0
    capsys.readouterr()
    outputs = []
    for address in (joined, single):
        fp = f"{stored['base/0']:016x}"
        assert main(["query", "--fingerprint", fp, "--address", address, *common]) == 0
        assert main(["get", "near/3", "base/4", "--address", address, *common]) == 0
        assert main(["stats", "--json", "--address", address, *common]) == 0
        out = capsys.readouterr().out.splitlines()
        stats = json.loads(out[-1])
        outputs.append((out[:-1], stats["count"]))
    assert outputs[0] == outputs[1] and outputs[0][1] == len(stored)
    assert main(["export", "--address", joined, *common]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert sorted(lines) == sorted(source.read_text().splitlines())
    assert main(["pairs", "--address", joined, *common]) == 4
    assert "permindex dedup" in capsys.readouterr().err
    assert main(["collections", "drop", "cli", "--address", joined]) == 0
    assert main(["collections", "drop", "cli", "--address", single]) == 0


def test_a_fan_out_read_is_retried_while_a_shard_is_down(start_server: StartServer) -> None:
    import socket
    import threading
    import time

    up = start_server()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{probe.getsockname()[1]}"
    later: list[RunningServer] = []

    def start_later() -> None:
        time.sleep(0.8)
        later.append(start_server(address=down, data_dir=up.data_dir.parent / "later"))

    with permindex.Client([up.address, down], retries=8, backoff=0.1, max_backoff=0.5) as client:
        key = next(f"k{i}" for i in range(100) if shard_of(f"k{i}", 2) == 1)
        with pytest.raises(permindex.ServerUnavailableError, match=down):
            client.add([(key, 1)])  # a write: never retried
        thread = threading.Thread(target=start_later)
        thread.start()
        assert client.stats().count == 0  # retried until the second shard came up
        thread.join()
        assert client.query_many([1, 2]) == [[], []]
    assert later
