"""Jaccard collections in the server (issue 42, point 1), through the public surface: real
servers on 127.0.0.1 port 0 (in-process, and a ``permindex serve`` process for kill -9), the
Client, the CLI, and the offline ``permindex dedup --method minhash`` as the reference. The
oracle of Jaccard values is independent of the package: word 3-shingles of
``text.lower().split()`` hashed by the ``xxhash`` package, as Python sets."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np
import pytest
import xxhash
from conftest import make_stub, server_config
from serverproc import ServeProcess

import permindex
from permindex.errors import EXIT_CODES
from permindex.rpc.server import RunningServer, create_server
from permindex.v1 import index_pb2 as pb

REPO = Path(__file__).resolve().parent.parent
CORPORA = REPO.parent / "shared" / "corpora"
LIBSTDCXX = CORPORA / "libstdc++-12-doc.jsonl.gz"
POSTGRES = CORPORA / "postgresql-doc-15.jsonl.gz"
THRESHOLD = 0.8


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path} (expected <repo>/../shared/corpora)")
    return path


def _read(path: Path) -> list[tuple[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [(d["id"], d["text"]) for d in map(json.loads, lines)]


def shingle_set(text: str) -> frozenset[int]:
    """The oracle: the set of XXH3-64 hashes of the word 3-shingles of ``text``."""
    words = text.lower().split()
    return frozenset(
        xxhash.xxh3_64_intdigest(" ".join(words[i : i + 3]).encode("utf-8"))
        for i in range(len(words) - 2)
    )


def exact_jaccard(a: frozenset[int], b: frozenset[int]) -> float:
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def four_decimals(a: frozenset[int], b: frozenset[int]) -> str:
    """J to 4 decimals, (1 - J) * 10^4 rounded half up, as the offline mode prints it."""
    inter = len(a & b)
    union = len(a) + len(b) - inter
    distance = ((union - inter) * 2 * 10_000 + union) // (2 * union)
    whole, part = divmod(10_000 - distance, 10_000)
    return f"{whole}.{part:04d}"


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "permindex", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def libstdcxx() -> list[tuple[str, str]]:
    return _read(_need(LIBSTDCXX))


@pytest.fixture(scope="module")
def sets(libstdcxx: list[tuple[str, str]]) -> dict[str, frozenset[int]]:
    return {key: shingle_set(text) for key, text in libstdcxx}


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """``permindex dedup LIBSTDCXX --method minhash --threshold 0.8``'s standard output, and
    its report folder."""
    report = tmp_path_factory.mktemp("offline")
    done = cli(
        "dedup", str(_need(LIBSTDCXX)), "--method", "minhash", "--threshold", str(THRESHOLD),
        "--out", str(report), "--no-progress", "--jobs", "2",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout, report


@pytest.fixture(scope="module")
def offline(offline_run: tuple[str, Path]) -> str:
    return offline_run[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """One in-process server for the module's tests (each uses its own collections)."""
    running = create_server(server_config(tmp_path_factory.mktemp("jaccard") / "data"))
    yield running
    running.stop(grace=0)


@pytest.fixture(scope="module")
def client(server: RunningServer) -> Iterator[permindex.Client]:
    with permindex.Client(server.address) as connected:
        yield connected


def test_online_pairs_equal_offline_through_kill_9_and_a_snapshot(
    tmp_path: Path,
    libstdcxx: list[tuple[str, str]],
    sets: dict[str, frozenset[int]],
    offline: str,
    offline_run: tuple[str, Path],
) -> None:
    lines = offline.splitlines()
    assert len(lines) >= 580  # 582 on this corpus today
    for line in lines:  # the oracle: exact values, none below the threshold
        a, b, shown = line.split("\t")
        assert a < b and float(shown) >= THRESHOLD
        assert shown == four_decimals(sets[a], sets[b])
    process = ServeProcess(tmp_path / "data", "--fsync", "always")
    try:
        address = process.address()
        assert address is not None, process.text
        made = cli("collections", "create", "lib", "--method", "minhash", "--threshold", "0.8",
                   "--address", address)  # fmt: skip
        assert made.returncode == 0, made.stderr
        assert "method\tminhash" in made.stdout and "bands\t18" in made.stdout
        ingested = cli("ingest", str(LIBSTDCXX), "--collection", "lib", "--address", address,
                       "--no-progress")  # fmt: skip
        assert ingested.returncode == 0, ingested.stderr

        def pairs(address: str) -> str:
            done = cli("pairs", "--collection", "lib", "--address", address)
            assert done.returncode == 0, done.stderr
            return done.stdout

        assert pairs(address) == offline
        # flags: the nearest key's Jaccard, as the offline report's flags.tsv has it
        flags = cli("flags", "--collection", "lib", "--address", address)
        assert flags.returncode == 0, flags.stderr
        assert flags.stdout == (offline_run[1] / "flags.tsv").read_text()
        assert len(flags.stdout.splitlines()) >= 270  # 275 on this corpus today
        process.kill()  # kill -9: every acknowledged write is in the log
        process = ServeProcess(tmp_path / "data", "--fsync", "always")
        address = process.address()
        assert address is not None, process.text
        assert pairs(address) == offline
        with permindex.Client(address, collection="lib") as lib:
            # Client.pairs: the offline lines' values, as the doubles nearest their text
            assert [(a, b, str(j)) for a, b, j in lib.pairs()] == [
                (a, b, str(float(shown))) for a, b, shown in (x.split("\t") for x in lines)
            ]
            assert lib.snapshot().count == len(libstdcxx)
            lib.remove([lines[0].split("\t")[0]])  # after the snapshot: in the log only
        process.kill()
        assert (tmp_path / "data" / "collections" / "lib" / "jaccard.snapshot").exists()
        process = ServeProcess(tmp_path / "data", "--fsync", "always")
        address = process.address()
        assert address is not None, process.text
        removed = lines[0].split("\t")[0]
        assert pairs(address) == "".join(
            line + "\n" for line in lines if removed not in line.split("\t")[:2]
        )
        listed = cli("collections", "list", "--address", address).stdout
        assert f"lib\t{len(libstdcxx) - 1}\tminhash\t0.8\t128\t18x7\texact\n" in listed
    finally:
        process.kill()


def test_postgresql_has_no_pairs(client: permindex.Client) -> None:
    documents = _read(_need(POSTGRES))
    client.create_collection("pg", method="minhash")
    pg = client.use("pg")
    assert pg.ingest(documents).added == len(documents)
    assert pg.pairs() == []


def similar_pairs(sets: dict[str, frozenset[int]], threshold: float) -> dict[str, set[str]]:
    """The oracle of every pair at exact Jaccard >= ``threshold``, by prefix filtering
    (Chaudhuri et al. 2006; Xiao et al. 2008): with the tokens ordered rarest first, two sets
    with J >= t share a token among the first ``|A| - ceil(t |A|) + 1`` of each; each
    candidate is then checked with Python sets. Exact, and independent of the package."""
    arrays = {key: np.fromiter(s, dtype=np.uint64, count=len(s)) for key, s in sets.items()}
    tokens, counts = np.unique(np.concatenate(list(arrays.values())), return_counts=True)
    index: dict[int, list[str]] = {}
    partners: dict[str, set[str]] = {key: set() for key in sets}
    for key, mine in sets.items():
        values = arrays[key]
        frequency = counts[np.searchsorted(tokens, values)]
        ordered = values[np.lexsort((values, frequency))].tolist()
        prefix = ordered[: len(ordered) - int(np.ceil(threshold * len(ordered) - 1e-9)) + 1]
        seen: set[str] = set()
        for h in prefix:
            for other in index.get(h, ()):
                if other not in seen:
                    seen.add(other)
                    small, large = sorted((len(mine), len(sets[other])))
                    if small < threshold * large:  # J <= small / large: out of reach
                        continue
                    if exact_jaccard(mine, sets[other]) >= threshold:
                        partners[key].add(other)
                        partners[other].add(key)
            index.setdefault(h, []).append(key)
    return partners


def test_crawler_check_and_add_keeps_every_new_page_and_drops_near_copies(
    client: permindex.Client, libstdcxx: list[tuple[str, str]], sets: dict[str, frozenset[int]]
) -> None:
    """One pass of check-and-add over the corpus, in order, batches of 100: never drops a page
    with no earlier kept page at exact J >= 0.8, drops >= 95 % of those with one."""
    partners = similar_pairs(sets, THRESHOLD)
    assert sum(map(len, partners.values())) // 2 >= 580  # 584 pairs on this corpus
    client.create_collection("crawl", method="minhash", threshold=THRESHOLD)
    crawl = client.use("crawl")
    kept: set[str] = set()
    dropped_with = with_earlier = 0
    for start in range(0, len(libstdcxx), 100):
        batch = libstdcxx[start : start + 100]
        for (key, _text), result in zip(batch, crawl.check_and_add_many(batch), strict=True):
            if partners[key] & kept:
                with_earlier += 1
                dropped_with += result.status == "near_duplicate"
            else:
                assert result.status == "added", (key, result)
            for match in result.matches:  # every match reported is one, at its exact value
                assert isinstance(match, permindex.JaccardMatch)
                assert match.key in partners[key] and match.key in kept
                assert match.jaccard == pytest.approx(exact_jaccard(sets[key], sets[match.key]))
            if result.added:
                kept.add(key)
    assert with_earlier > 100
    assert dropped_with >= 0.95 * with_earlier, (dropped_with, with_earlier)
    assert crawl.stats().count == len(kept)


def test_check_and_add_is_atomic(server: RunningServer, client: permindex.Client) -> None:
    client.create_collection("atomic", method="minhash", threshold=0.5)
    text = " ".join(f"word{i}" for i in range(60))
    near = text + " and one more"
    with permindex.Client(server.address, collection="atomic") as one:
        results = one.check_and_add_many([("a", text), ("b", near)])  # one batch
        assert [r.status for r in results] == ["added", "near_duplicate"]
        for round_ in range(10):
            barrier = threading.Barrier(2)
            outcomes: list[str] = []

            def send(
                key: str, content: str, barrier: threading.Barrier, outcomes: list[str]
            ) -> None:
                with permindex.Client(server.address, collection="atomic") as other:
                    barrier.wait()
                    outcomes.append(other.check_and_add(key, content).status)

            fresh = " ".join(f"round{round_}x{i}" for i in range(60))
            threads = [
                threading.Thread(target=send, args=(f"r{round_}a", fresh, barrier, outcomes)),
                threading.Thread(
                    target=send, args=(f"r{round_}b", fresh + " tail", barrier, outcomes)
                ),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
            assert sorted(outcomes) == ["added", "near_duplicate"]


def test_signature_estimates_within_the_documented_error(client: permindex.Client) -> None:
    """verify="signature": the estimate of J has the documented standard deviation
    sqrt(J (1 - J) / P). 300 independent planted pairs (fresh words each) with exact J in
    0.75..0.95, queried at threshold 0.5 (so no estimate is cut off): at least 90 % within 2
    standard deviations (95 % for a normal estimate), none beyond 5, mean error about 0."""
    permutations = 128
    client.create_collection("sig", method="minhash", verify="signature", threshold=0.5)
    sig = client.use("sig")
    rng = np.random.default_rng(42)
    stored: list[tuple[str, str]] = []
    probes: list[str] = []
    for i in range(300):
        words = [f"p{i}w{j}" for j in range(int(rng.integers(100, 200)))]
        changed = list(words)
        for j in rng.choice(len(words), size=int(rng.integers(1, 5)), replace=False):
            changed[j] = f"p{i}x{j}"
        stored.append((f"d{i:03d}", " ".join(words)))
        probes.append(" ".join(changed))
    sig.add(stored)
    found = sig.query_jaccard(probes)
    z = []
    for (key, text), probe, matches in zip(stored, probes, found, strict=True):
        exact = exact_jaccard(shingle_set(text), shingle_set(probe))
        assert 0.75 <= exact < 1
        assert [m.key for m in matches] == [key]
        z.append((matches[0].jaccard - exact) / np.sqrt(exact * (1 - exact) / permutations))
    errors = np.array(z)
    assert np.mean(np.abs(errors) <= 2) >= 0.9
    assert np.abs(errors).max() <= 5
    assert abs(errors.mean()) <= 0.3
    info = client.describe_collection("sig")
    assert (info.method, info.verify, info.permutations) == ("minhash", "signature", 128)


def test_bad_options_and_contents_are_refused_before_anything_is_done(
    server: RunningServer, client: permindex.Client
) -> None:
    channel, stub = make_stub(server.address)
    try:
        before = stub.ListCollections(pb.ListCollectionsRequest())
        for options in (
            pb.CollectionOptions(method="minhash", threshold=0),
            pb.CollectionOptions(method="minhash", threshold=1.5),
            pb.CollectionOptions(method="minhash", permutations=0),
            pb.CollectionOptions(method="minhash", permutations=5000),
            pb.CollectionOptions(method="minhash", verify="sometimes"),
            pb.CollectionOptions(method="minhash", k=3),
            pb.CollectionOptions(method="jaccard"),
            pb.CollectionOptions(threshold=0.8),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                stub.CreateCollection(pb.CreateCollectionRequest(name="bad", options=options))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT, options
        assert stub.ListCollections(pb.ListCollectionsRequest()) == before
        stub.CreateCollection(
            pb.CreateCollectionRequest(
                name="refuse", options=pb.CollectionOptions(method="minhash")
            )
        )
        sketch = permindex.minhash_sketch("one two three four five")
        for not_text in (b"one two three four", None, 3):
            with pytest.raises(TypeError, match="must be a str"):
                permindex.minhash_sketch(not_text)  # type: ignore[arg-type]
        assert sketch is not None
        for request, collection, why in (
            (pb.Document(key="x", fingerprint=7), "refuse", "Jaccard collection"),
            (pb.Document(key="x", fingerprint_hex="7bdb22cf023304c1"), "refuse", "Jaccard"),
            (pb.Document(key="x", sketch=pb.MinHashSketch(shingle_hashes=[1, 2])), "", "SimHash"),
            (pb.Document(key="x", sketch_hex="00000000000000ff"), "", "SimHash"),
            (pb.Document(key="x", sketch=pb.MinHashSketch(signature=[1, 2, 3])), "refuse",
             "no shingle hashes"),
            (pb.Document(key="x", sketch_hex="12zz"), "refuse", "not shingle hashes in hex"),
            # a signature's hex (8 digits a value, in no order) sent to an exact collection
            (pb.Document(key="x", sketch_hex=sketch.signature.astype(">u4").tobytes().hex()),
             "refuse", "not in increasing order"),
        ):  # fmt: skip
            with pytest.raises(grpc.RpcError) as refused:
                stub.Add(pb.AddRequest(collection=collection, documents=[request]))
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert why in (refused.value.details() or "")
        for query in (
            pb.QueryRequest(collection="refuse", fingerprints=[1]),
            pb.QueryRequest(collection="refuse", texts=["a b c"], k=3),
            pb.QueryRequest(texts=["a b c d"]),
        ):
            with pytest.raises(grpc.RpcError) as refused:
                stub.Query(query)
            assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.QueryColumns(iter([
                pb.QueryColumnsRequest(collection="refuse", fingerprints=bytes(8))
            ])))  # fmt: skip
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.Pairs(pb.PairsRequest(collection="refuse", k=3)))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as refused:
            list(stub.Flags(pb.FlagsRequest(collection="refuse", k=3)))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert stub.DescribeCollection(pb.DescribeCollectionRequest(name="refuse")).count == 0
    finally:
        channel.close()
    usage = EXIT_CODES["usage"]
    assert cli("collections", "create", "c1", "--method", "minhash", "--threshold", "0",
               "--address", server.address).returncode == usage  # fmt: skip
    assert cli("collections", "create", "c1", "--method", "minhash", "--k", "3",
               "--address", server.address).returncode == usage  # fmt: skip
    assert cli("collections", "create", "c1", "--method", "minhash", "--verify", "maybe",
               "--address", server.address).returncode == usage  # fmt: skip
    assert cli("pairs", "--collection", "refuse", "--k", "3",
               "--address", server.address).returncode == usage  # fmt: skip
    assert "c1" not in [info.name for info in client.list_collections()]


def test_sketches_keys_export_import_and_expiry(
    server: RunningServer, client: permindex.Client
) -> None:
    client.create_collection("sk", method="minhash", threshold=0.5)
    sk = client.use("sk")
    text = " ".join(f"w{i}" for i in range(40))
    sketch = permindex.minhash_sketch(text)
    assert sketch is not None
    added = sk.add([("a", sketch), ("b", text + " w40 w41"), ("c", "too short")])
    assert (added.added, added.too_short) == (2, 1)
    assert sk.query_jaccard([sketch], by="sketch") == [
        [permindex.JaccardMatch("a", 1.0), permindex.JaccardMatch("b", 38 / 40)]
    ]
    assert sk.query_jaccard(["a", "nope"], by="key") == [[("b", 38 / 40)], []]
    assert sk.query_jaccard([text], limit=1) == [[permindex.JaccardMatch("a", 1.0)]]
    assert sk.pairs() == [("a", "b", 0.95)]
    assert sk.clusters() == [["a", "b"]]
    assert sk.flags() == [("a", "b", 500, 1), ("b", "a", 500, 1)]  # 1 - 0.95, 10^-4 units
    at = ("--collection", "sk", "--address", server.address)
    assert cli("query", "--key", "a", *at).stdout == "b\t0.9500\n"
    assert cli("query", "--text", text, *at).stdout == "a\t1.0000\nb\t0.9500\n"
    assert cli("query", "--key", "zz", *at).returncode == EXIT_CODES["not_found"]
    assert cli("query", "--fingerprint", "0x1", *at).returncode == EXIT_CODES["usage"]
    # Export carries each key with its sketch in hex; an import restores them exactly
    channel, stub = make_stub(server.address)
    try:
        exported = [e for m in stub.Export(pb.ExportRequest(collection="sk")) for e in m.entries]
        client.create_collection("sk2", method="minhash", threshold=0.5)
        stub.Add(pb.AddRequest(collection="sk2", documents=[
            pb.Document(key=e.key, sketch_hex=e.sketch_hex) for e in exported
        ]))  # fmt: skip
        again = [e for m in stub.Export(pb.ExportRequest(collection="sk2")) for e in m.entries]
        assert [(e.key, e.sketch_hex) for e in again] == [(e.key, e.sketch_hex) for e in exported]
        assert len(exported) == 2 and len(exported[0].sketch_hex) == 16 * 38
    finally:
        channel.close()
    # the client's export and ingest copy a Jaccard collection, as the CLI's export and import
    # do (tests/test_jaccard_export.py)
    client.create_collection("sk3", method="minhash", threshold=0.5)
    copied = client.use("sk3")
    copied.ingest(sk.iter_export(with_times=True))
    assert sorted(copied.iter_export()) == sorted(sk.iter_export())
    assert isinstance(next(iter(sk.iter_export()))[1], permindex.client.SketchHex)
    exported_lines = cli("export", "--collection", "sk", "--address", server.address).stdout
    assert [json.loads(line)["shingle_hashes"] for line in exported_lines.splitlines()] == [
        e.sketch_hex for e in exported
    ]
    # expiry: an entry older than expire_after matches nothing
    client.create_collection("exp", method="minhash", expire_after=60)
    exp = client.use("exp")
    exp.add([permindex.client.Document("old", text, time.time() - 3600), ("new", text)])
    assert exp.query_jaccard([text]) == [[permindex.JaccardMatch("new", 1.0)]]
    assert exp.pairs() == []


def test_a_write_past_the_memory_limit_is_refused_and_applies_nothing(
    tmp_path: Path, libstdcxx: list[tuple[str, str]]
) -> None:
    limit = 4 << 20
    running = create_server(
        server_config(tmp_path / "data", max_memory=limit, metrics_address="127.0.0.1:0")
    )
    try:
        with permindex.Client(running.address) as client:
            client.create_collection("full", method="minhash")
            full = client.use("full")
            refused = None
            for start in range(0, len(libstdcxx), 50):
                before = full.stats().count
                try:
                    full.add(libstdcxx[start : start + 50])
                except permindex.ServerLimitExceededError as error:
                    refused = error
                    break
            assert refused is not None and "max-memory" in str(refused)
            assert full.stats().count == before  # nothing of the refused write applied
            assert full.stats().server_memory_bytes <= limit
            # the metrics count a Jaccard collection as a SimHash one
            assert running.metrics is not None
            url = f"http://{running.metrics.address}/metrics"
            with urllib.request.urlopen(url, timeout=10) as reply:
                text = reply.read().decode()
            assert f'permindex_fingerprints{{collection="full"}} {float(before)}' in text
            assert 'permindex_wal_sequence{collection="full"}' in text
    finally:
        running.stop(grace=0)


def test_async_client_and_index_invariants(server: RunningServer) -> None:
    import asyncio

    async def main() -> list[list[permindex.JaccardMatch]]:
        async with permindex.AsyncClient(server.address) as aclient:
            await aclient.create_collection("async", method="minhash", threshold=0.6)
            pages = aclient.use("async")
            text = " ".join(f"v{i}" for i in range(30))
            await pages.add([("p", text), ("q", text + " v30")])
            outcome = await pages.check_and_add("r", text + " v31")
            assert outcome.status == "near_duplicate"
            return await pages.query_jaccard([text])

    assert asyncio.run(main()) == [[("p", 1.0), ("q", 28 / 29)]]
    # the index alone: a random model of adds, replaces and removes against brute force
    rng = np.random.default_rng(7)
    index = permindex.JaccardIndex(threshold=0.5)
    model: dict[str, frozenset[int]] = {}
    base = [f"t{i}" for i in range(50)]
    for step in range(300):
        key = f"k{rng.integers(40)}"
        if rng.random() < 0.2:
            index.discard(key)
            model.pop(key, None)
        else:
            words = base[: int(rng.integers(10, 50))] + [f"x{step}"] * int(rng.integers(0, 3))
            text = " ".join(words)
            sketch = permindex.minhash_sketch(text)
            assert sketch is not None
            index.add_many([key], [sketch])
            model[key] = shingle_set(text)
        index._check()
    probe = " ".join(base[:30])
    sketch = permindex.minhash_sketch(probe)
    assert sketch is not None
    found = index.query_many([sketch])[0]
    truth = {k: exact_jaccard(shingle_set(probe), s) for k, s in model.items()}
    assert {m.key for m in found} <= {k for k, j in truth.items() if j >= 0.5}
    for match in found:
        assert match.jaccard == pytest.approx(truth[match.key])
    assert len(found) >= 0.9 * sum(j >= 0.6 for j in truth.values())


def test_over_two_shards(tmp_path: Path, server: RunningServer) -> None:
    """A sharded client adds to and queries a Jaccard collection on every shard (merged as one
    server's answer) and checks-and-adds against both (tests/test_sharded_jaccard.py compares
    that with one server)."""
    other = create_server(server_config(tmp_path / "other"))
    try:
        with permindex.Client([server.address, other.address]) as both:
            both.create_collection("sharded", method="minhash", threshold=0.5)
            pages = both.use("sharded")
            text = " ".join(f"s{i}" for i in range(40))
            keys = [f"k{i}" for i in range(8)]
            pages.add([(key, f"{text} extra{i}") for i, key in enumerate(keys)])
            for address in (server.address, other.address):  # both shards hold some
                with permindex.Client(address, collection="sharded") as one:
                    assert 0 < one.stats().count < len(keys)
            (found,) = pages.query_jaccard([text])
            assert sorted(m.key for m in found) == keys  # from both shards
            assert all(m.jaccard == pytest.approx(38 / 39) for m in found)
            result = pages.check_and_add("new", text)  # near the keys of both shards
            assert result.status == "near_duplicate"
            assert [m.key for m in result.matches] == keys  # Jaccard equal: by key
    finally:
        other.stop(grace=0)


def test_a_torn_log_tail_is_cut_and_a_damaged_snapshot_refused(tmp_path: Path) -> None:
    """The Jaccard collection's store recovers as a SimHash one: a record cut short by a
    crash is cut off with a warning (the acknowledged ones stay), a damaged snapshot stops the
    start with CorruptFileError naming the file."""
    from permindex.storage.jaccard_store import JaccardStore

    text = " ".join(f"t{i}" for i in range(30))
    sketches = [permindex.minhash_sketch(f"{text} n{i}") for i in range(3)]
    assert all(s is not None for s in sketches)
    store = JaccardStore.open(tmp_path / "c", threshold=0.5)
    for i, sketch in enumerate(sketches):
        assert sketch is not None
        store.add_many([f"k{i}"], [sketch])
    store.abandon()
    (segment,) = sorted((tmp_path / "c").glob("wal-*.log"))
    data = segment.read_bytes()
    segment.write_bytes(data[:-5])  # the last record torn
    store = JaccardStore.open(tmp_path / "c", threshold=0.5)
    assert "torn tail" in " ".join(store.recovery.warnings)
    assert sorted(store.index.export()[0]) == ["k0", "k1"]
    store.index._check()
    store.snapshot()
    store.close()
    snapshot = tmp_path / "c" / "jaccard.snapshot"
    damaged = bytearray(snapshot.read_bytes())
    damaged[100] ^= 0xFF
    snapshot.write_bytes(bytes(damaged))
    with pytest.raises(permindex.CorruptFileError, match=r"jaccard\.snapshot"):
        JaccardStore.open(tmp_path / "c", threshold=0.5)


def test_a_log_record_that_does_not_apply_stops_the_start(tmp_path: Path) -> None:
    """A Jaccard collection's log is recovered by the same driver as a SimHash one's: a record
    that passes its CRC check but does not apply (here a signature of 5 values in a collection
    of 128 permutations) stops the start with CorruptFileError naming the directory, and the
    directory is released (a second try fails the same way, not on the lock)."""
    from permindex.storage.jaccard_store import JaccardStore, encode_sketch_record

    sketch = permindex.minhash_sketch(" ".join(f"t{i}" for i in range(30)))
    assert sketch is not None
    folder = tmp_path / "c"
    store = JaccardStore.open(folder, threshold=0.5, verify="signature")
    store.add_many(["k0"], [sketch])
    store.abandon()
    (segment,) = sorted(folder.glob("wal-*.log"))
    record = encode_sketch_record(
        2, np.array([1], np.uint8), ["bad"], np.zeros(1, np.uint32), np.array([5], np.int64),
        np.arange(5, dtype=np.uint64), "signature",
    )  # fmt: skip
    with open(segment, "ab") as out:
        out.write(record)
    for _ in range(2):
        with pytest.raises(permindex.CorruptFileError, match="a log record does not apply"):
            JaccardStore.open(folder, threshold=0.5, verify="signature")


def test_lookups_and_writes_at_once() -> None:
    """Readers verify without the index's lock while writers add, replace and compact: every
    answer is one a stored document gives (its exact Jaccard), and the index stays whole."""
    from permindex.index.jaccard.index import COMPACT_MIN

    index = permindex.JaccardIndex(threshold=0.5)
    base = " ".join(f"c{i}" for i in range(40))
    probe = permindex.minhash_sketch(base)
    assert probe is not None
    texts = {f"k{i}": f"{base} v{i} w{i}" for i in range(50)}
    sketches = {key: permindex.minhash_sketch(text) for key, text in texts.items()}
    truth = {key: exact_jaccard(shingle_set(base), shingle_set(t)) for key, t in texts.items()}
    failures: list[BaseException] = []
    stop = threading.Event()

    def write() -> None:
        try:
            for round_ in range(2 * COMPACT_MIN // len(texts) + 2):  # enough to compact
                keys = list(sketches)
                index.add_many(keys, [sketches[k] for k in keys])  # type: ignore[misc]
                if round_ % 7 == 0:
                    index.discard(keys[round_ % len(keys)])
        except BaseException as error:
            failures.append(error)
        finally:
            stop.set()

    def read() -> None:
        try:
            while not stop.is_set():
                for match in index.query_many([probe])[0]:
                    assert match.jaccard == pytest.approx(truth[match.key])
        except BaseException as error:
            failures.append(error)

    threads = [threading.Thread(target=write), *(threading.Thread(target=read) for _ in range(2))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    index._check()
    assert index._n < COMPACT_MIN + 2 * len(texts)  # the writes compacted meanwhile
    assert {m.key for m in index.query_many([probe])[0]} <= set(texts)


def test_a_key_twice_in_one_write_is_stored_once(tmp_path: Path) -> None:
    """A crawler batch holding the same URL twice: the second replaces the first (as on a
    SimHash collection): one live row, one match, pairs and export of one entry, remove removes
    it, and the log replay and the snapshot both load (the snapshot of a collection that held
    the key twice once stopped the server's start)."""
    from permindex.storage.jaccard_store import JaccardStore

    text = " ".join(f"w{i}" for i in range(50))
    first, second = permindex.minhash_sketch(text), permindex.minhash_sketch(text + " extra")
    other = permindex.minhash_sketch(text + " other")
    assert first is not None and second is not None and other is not None
    store = JaccardStore.open(tmp_path / "c", threshold=0.8)
    added = store.add_many(["https://a", "https://a", "https://b"], [first, second, other])
    assert added.tolist() == [True, False, True]
    index = store.index
    index._check()
    assert len(index) == 2 and len(index.export()[0]) == 2
    (matches,) = index.query_many([other])
    assert sorted(m.key for m in matches) == ["https://a", "https://b"]  # once each
    pairs = index.near_duplicates()
    assert pairs is not None
    store.abandon()  # kill -9: the log replays the write
    store = JaccardStore.open(tmp_path / "c", threshold=0.8)
    store.index._check()
    assert sorted(store.index.export()[0]) == ["https://a", "https://b"]
    store.snapshot()
    store.close()
    store = JaccardStore.open(tmp_path / "c", threshold=0.8)
    store.index._check()
    assert store.index.discard("https://a") and "https://a" not in store.index
    (matches,) = store.index.query_many([other])
    assert [m.key for m in matches] == ["https://b"]
    store.close()


def test_a_join_over_the_work_budget_is_refused_on_a_jaccard_collection(tmp_path: Path) -> None:
    """--max-join-work holds for a Jaccard collection as for a SimHash one: 300 pages of one
    template edited (all in one band bucket: 44,850 candidate pairs) are refused by Pairs,
    Clusters and Flags with RESOURCE_EXHAUSTED naming the option, before any work; 2,000
    copies of one page need no candidate verified (identical sets are collapsed first): their
    Clusters and ExactDuplicates are answered, their Pairs (1,999,000 to send) refused; a small
    collection is answered."""
    running = create_server(server_config(tmp_path / "data", max_join_work=10_000))
    page = [f"w{i}" for i in range(60)]
    try:
        with permindex.Client(running.address, retries=0) as client:
            client.create_collection("j", method="minhash", threshold=0.8)
            j = client.use("j")
            j.add([(f"near/{i:03d}", " ".join([*page, f"edit{i}"])) for i in range(300)])
            for call in (j.pairs, j.clusters, j.flags):
                with pytest.raises(permindex.ServerLimitExceededError) as refused:
                    call()
                assert "--max-join-work" in str(refused.value) and "10,000" in str(refused.value)
            j.remove([f"near/{i:03d}" for i in range(300)])
            j.add([(f"copy/{i:04d}", " ".join(page)) for i in range(2000)])
            assert [len(cluster) for cluster in j.clusters()] == [2000]
            assert [len(group.keys) for group in j.exact_duplicates()] == [2000]
            with pytest.raises(permindex.ServerLimitExceededError) as refused:
                j.pairs()
            assert "1,999,000" in str(refused.value)
            j.remove([f"copy/{i:04d}" for i in range(2000)])
            j.add([("a", " ".join(page)), ("b", " ".join([*page, "x"]))])
            assert j.pairs() == [("a", "b", 0.9831)]  # 58 / 59
    finally:
        running.stop(grace=0)
