"""permindex.Client against a real server on 127.0.0.1 (port 0): every method, batching of
ingest by count and bytes, errors as permindex exceptions with their gRPC code, retries only on
read-only calls."""

from __future__ import annotations

import random
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import StartServer
from oracles import brute_force_pairs

import permindex
from permindex import Index, Match, hamming
from permindex.client import Content
from permindex.errors import LimitExceededError, ServerError
from permindex.index.join.clusters import clusters as clusters_of
from permindex.index.join.clusters import exact_duplicates as exact_duplicates_of
from permindex.index.join.clusters import flags as flags_of
from permindex.rpc.server import RunningServer

TEXT = "the quick brown fox jumps over the lazy dog near the river bank"


@pytest.fixture
def client(server: RunningServer) -> Iterator[permindex.Client]:
    with permindex.Client(server.address, timeout=30) as opened:
        yield opened


def test_client_is_exported_lazily() -> None:
    from permindex.client import Client

    assert permindex.Client is Client
    with pytest.raises(AttributeError):
        _ = permindex.NoSuchThing


def test_every_method_against_brute_force(client: permindex.Client) -> None:
    rng = random.Random(6)
    base = [rng.getrandbits(64) for _ in range(40)]
    stored: dict[str, int] = {}
    for i, fp in enumerate(base):
        stored[f"b{i}"] = fp
        stored[f"n{i}"] = fp ^ (1 << rng.randrange(64)) ^ (1 << rng.randrange(64))
    added = client.add(list(stored.items())[:10])
    assert added.added == 10 and added.replaced == 0
    assert [r.status for r in added.results] == ["added"] * 10
    result = client.ingest(list(stored.items()))
    assert (result.documents, result.added, result.replaced) == (80, 70, 10)

    index = Index(k=3)
    index.add_many(list(stored), list(stored.values()))
    for fp in base[:10]:
        assert client.query(fp) == index.query(fp)
        assert client.query(fp, k=1, limit=1) == index.query(fp, k=1, limit=1)
    assert client.query_many(base) == [index.query(fp) for fp in base]
    assert client.get("b3") == stored["b3"]
    assert client.get("missing") is None
    assert client.get_many(["n1", "x"]) == [stored["n1"], None]
    assert client.pairs() == sorted(index.pairs())
    assert client.pairs(k=0) == sorted(index.pairs(k=0))
    assert client.clusters() == clusters_of(index)
    assert client.flags() == flags_of(index)
    assert client.exact_duplicates() == exact_duplicates_of(index)

    near = client.check_and_add("new", base[0] ^ 1)
    assert near.status == "near_duplicate" and not near.added
    assert near.matches[0] == Match("b0", base[0], 1)
    free = client.check_and_add("free", (base[0] ^ ((1 << 64) - 1)))
    assert free.added == all(hamming(free.fingerprint or 0, v) > 3 for v in stored.values())
    text = client.check_and_add("text", TEXT)
    assert text.fingerprint == permindex.simhash(TEXT)
    short = client.add([("short", "two words")])
    assert short.results[0].status == "too_short" and short.too_short == 1

    removed = client.remove(["b0", "nope"])
    assert removed.removed == 1 and removed.not_found == ["nope"]
    assert client.get("b0") is None
    stats = client.stats()
    assert stats.count == len(stored) - 1 + 1 + int(free.added)
    assert (stats.blocks, stats.leading, stats.tables, stats.k) == (4, 1, 4, 3)
    snap = client.snapshot()
    assert snap.count == stats.count and Path(snap.path).exists()


def test_ingest_batches_by_count_and_bytes(client: permindex.Client) -> None:
    counted: list[int] = []
    client.batch_size = 7
    client.ingest(((f"k{i}", i) for i in range(30)), progress=lambda r: counted.append(r.documents))
    assert counted == [7, 14, 21, 28, 30]
    client.batch_size = 1000
    client.batch_bytes = 2500  # each text is about 1,000 bytes: 2 documents a message
    counted.clear()
    texts = ((f"t{i}", f"word{i} " + "lorem ipsum " * 80) for i in range(5))
    result = client.ingest(texts, progress=lambda r: counted.append(r.documents))
    assert counted == [2, 4, 5] and result.batches == 3 and result.added == 5


def test_errors_carry_the_grpc_code(start_server: StartServer) -> None:
    server = start_server(max_batch=5)
    with permindex.Client(server.address) as client:
        with pytest.raises(LimitExceededError) as too_many:
            client.add([(f"k{i}", i) for i in range(6)])
        assert isinstance(too_many.value, ServerError)
        assert too_many.value.code == "RESOURCE_EXHAUSTED"
        with pytest.raises(ValueError) as bad_k:
            client.query(1, k=9)
        assert isinstance(bad_k.value, ServerError) and bad_k.value.code == "INVALID_ARGUMENT"
        assert "k=9" in bad_k.value.details
        with pytest.raises(ServerError) as empty_key:
            client.add([("", 1)])
        assert empty_key.value.code == "INVALID_ARGUMENT"
        # an ingest refused at its second batch keeps the first
        client.batch_size = 5
        with pytest.raises(ServerError):
            client.ingest([(f"ok{i}", i) for i in range(5)] + [("", 9)])
        assert client.get_many([f"ok{i}" for i in range(5)]) == list(range(5))
        with pytest.raises(ValueError):
            client.query(-1)
        with pytest.raises(ValueError):
            client.add([("k", 1.5)])  # type: ignore[list-item]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_reads_are_retried_while_unavailable_writes_are_not(
    start_server: StartServer, tmp_path: Path
) -> None:
    port = _free_port()
    address = f"127.0.0.1:{port}"
    with permindex.Client(address, retries=0, timeout=5) as client:
        with pytest.raises(ConnectionError) as down:
            client.stats()
        assert isinstance(down.value, ServerError) and down.value.code == "UNAVAILABLE"
    started: list[RunningServer] = []

    def start_later() -> None:
        time.sleep(0.8)
        started.append(start_server(address=address))

    with permindex.Client(address, retries=8, backoff=0.1, max_backoff=0.5, timeout=5) as client:
        with pytest.raises(ConnectionError):
            client.add([("k", 1)])  # a write fails at once: never retried
        thread = threading.Thread(target=start_later)
        began = time.monotonic()
        thread.start()
        assert client.stats().count == 0  # retried until the server came up
        thread.join()
        assert time.monotonic() - began >= 0.7
        assert started


@pytest.mark.parametrize(
    ("k", "limit", "error"),
    [
        (-1, None, permindex.InvalidArgumentError),
        (None, -1, permindex.InvalidArgumentError),
        (None, 2**33, permindex.InvalidArgumentError),
        ("2", None, TypeError),
        (True, None, TypeError),
        (None, 1.5, TypeError),
    ],
)
def test_bad_k_or_limit_is_refused_before_anything_is_sent(
    client: permindex.Client, k: Any, limit: Any, error: type[Exception]
) -> None:
    """A k or limit that is not a uint32 is the caller's mistake: TypeError or
    InvalidArgumentError naming it, raised locally (not UNKNOWN from the server)."""
    client.add([("a", "one two three four"), ("b", "five six seven eight")])
    calls: list[Callable[[], object]] = [
        lambda: client.query(1, k=k, limit=limit),
        lambda: client.query_many([1, 2], k=k, limit=limit),
        lambda: client.query_columns([1, 2], k=k, limit=limit),
    ]
    if limit is None:
        calls += [
            lambda: client.pairs(k=k),
            lambda: client.clusters(k=k),
            lambda: client.flags(k=k),
            lambda: client.check_and_add("c", "nine ten eleven twelve", k=k),
        ]
    for call in calls:
        with pytest.raises(error, match=r"\b(k|limit)\b"):
            call()
    assert client.get("c") is None  # check_and_add sent nothing
    assert len(client.query_many([1])) == 1  # the connection is fine


def test_ingest_batches_sends_the_batches_as_given(client: permindex.Client) -> None:
    """One message per batch of the caller, one progress call per acknowledged batch."""
    given = [[(f"g{n}-{i}", i) for i in range(n)] for n in (3, 1, 5)]
    counted: list[tuple[int, int]] = []
    result = client.ingest_batches(
        iter(given), progress=lambda r: counted.append((r.documents, r.batches))
    )
    assert counted == [(3, 1), (4, 2), (9, 3)]
    assert (result.documents, result.added, result.batches) == (9, 9, 3)
    assert client.get_many(["g1-0", "g5-4"]) == [0, 4]


def test_ingest_input_error_comes_after_the_batches_before_it(client: permindex.Client) -> None:
    """An exception from the documents ends the stream cleanly: the batches read before it are
    acknowledged (and stored), then that exception is raised as it is."""

    def documents() -> Iterator[tuple[str, int]]:
        yield from ((f"e{i}", i) for i in range(7))
        raise OSError("the input broke off")

    client.batch_size = 3
    counted: list[int] = []
    with pytest.raises(OSError, match="broke off"):
        client.ingest(documents(), progress=lambda r: counted.append(r.documents))
    assert counted == [3, 6, 7]
    assert client.get_many([f"e{i}" for i in range(7)]) == list(range(7))
    # content the Client refuses is such an error too, after the documents before it
    with pytest.raises(permindex.InvalidArgumentError, match=r"documents\[4\]"):
        client.ingest([(f"v{i}", i) for i in range(4)] + [("bad", -1)])
    assert client.get("v3") == 3 and client.get("bad") is None


def test_wait_ready(client: permindex.Client) -> None:
    client.wait_ready(10)  # the server is up
    with permindex.Client(f"127.0.0.1:{_free_port()}") as down:
        with pytest.raises(ConnectionError) as failure:
            down.wait_ready(0.2)
        assert isinstance(failure.value, ServerError) and failure.value.code == "UNAVAILABLE"


def test_batching_rule_is_the_documents_size() -> None:
    """permindex ingest and Client.ingest cut their streams with one rule: batches() over the
    size of a document (UTF-8 key and text plus 16 bytes)."""
    from permindex.client.batching import batches, document_size
    from permindex.text.documents import Document

    for key, text in (("k", "x" * 100), ("ключ", "texte accentué"), ("fp", None)):
        document = Document(key, text=text) if text is not None else Document(key, fingerprint=1)
        assert document_size(key, text) == document.size_bytes()
    sizes = [5, 5, 20, 1, 1, 1]
    assert list(batches(sizes, 2, 12, lambda s: s)) == [[5, 5], [20], [1, 1], [1]]


def _brute_pairs(stored: dict[str, int], k: int) -> list[tuple[str, str, int]]:
    """Every pair of keys (in key order) within ``k``: tests/oracles.py's brute force."""
    keys = sorted(stored)
    a, b, d = brute_force_pairs(np.array([stored[key] for key in keys], dtype=np.uint64), k)
    triples = zip(a.tolist(), b.tolist(), d.tolist(), strict=True)
    return [(keys[i], keys[j], dist) for i, j, dist in triples]


def _components(keys: list[str], pairs: list[tuple[str, str, int]]) -> set[frozenset[str]]:
    parent = {key: key for key in keys}

    def root(key: str) -> str:
        while parent[key] != key:
            parent[key] = parent[parent[key]]
            key = parent[key]
        return key

    for a, b, _ in pairs:
        parent[root(a)] = root(b)
    groups: dict[str, set[str]] = {}
    for key in keys:
        groups.setdefault(root(key), set()).add(key)
    return {frozenset(group) for group in groups.values() if len(group) > 1}


def test_iterator_forms_against_brute_force(start_server: StartServer) -> None:
    """iter_pairs / iter_clusters / iter_flags / iter_exact_duplicates / iter_export against a
    brute force over every pair, with a 1 MiB message limit so that the answers span many
    messages and a group of 700 keys of one fingerprint comes in parts."""
    server = start_server(max_message_bytes=1 << 20)
    rng = random.Random(12)
    stored: dict[str, int] = {f"same{i:03d}": 0xABCDEF for i in range(700)}
    for i in range(150):
        base = rng.getrandbits(64)
        stored[f"r{i:03d}"] = base
        stored[f"r{i:03d}-near"] = base ^ (1 << rng.randrange(64)) ^ (1 << rng.randrange(64))
    with permindex.Client(server.address, timeout=1e-4) as client:  # not used by streamed reads
        client.timeout = 30
        client.ingest(list(stored.items()))
        client.timeout = 1e-4
        for k in (0, 2, 3):
            expected = _brute_pairs(stored, k)
            assert list(client.iter_pairs(k)) == expected  # the server's order: no sorting
            assert client.pairs(k=k) == expected
            clusters = list(client.iter_clusters(k))
            assert {frozenset(c) for c in clusters} == _components(list(stored), expected)
            assert all(c == sorted(c) for c in clusters)
            assert [len(c) for c in clusters] == sorted((len(c) for c in clusters), reverse=True)
            assert clusters == client.clusters(k=k)
            near = {a for a, _, _ in expected} | {b for _, b, _ in expected}
            flags = list(client.iter_flags(k))
            assert [f.key for f in flags] == sorted(near)
            names = list(stored)
            values = np.array(list(stored.values()), dtype=np.uint64)
            for flag in flags:
                distances = np.bitwise_count(values ^ np.uint64(stored[flag.key])).tolist()
                others = list(zip(distances, names, strict=True))
                others = [(d, key) for d, key in others if key != flag.key]
                assert (flag.distance, flag.nearest) == min(others)
                assert flag.neighbors == sum(1 for d, _ in others if d <= k)
            assert flags == client.flags(k=k)
        groups = list(client.iter_exact_duplicates())
        by_fingerprint: dict[int, list[str]] = {}
        for key, fp in sorted(stored.items()):
            by_fingerprint.setdefault(fp, []).append(key)
        assert sorted((g.fingerprint, g.keys) for g in groups) == sorted(
            (fp, keys) for fp, keys in by_fingerprint.items() if len(keys) > 1
        )
        assert len(groups[0].keys) == 700  # largest first, in parts of about 500 keys
        assert groups == client.exact_duplicates()
        assert dict(client.iter_export()) == stored
        assert client.use("other").collection == "other"
        with pytest.raises(KeyError):
            list(client.iter_pairs(collection="no-such-collection"))


def test_breaking_out_of_iter_pairs_cancels_the_call(start_server: StartServer) -> None:
    """A consumer that stops early (break, close) ends the call; the server goes on serving,
    and the same stream read to its end is whole."""
    server = start_server(max_message_bytes=1 << 20)
    with permindex.Client(server.address, timeout=30) as client:
        client.ingest((f"k{i:04d}", 7) for i in range(1000))  # 499,500 pairs, ~1,000 messages
        taken = []
        for pair in client.iter_pairs():
            taken.append(pair)
            if len(taken) == 11:
                break
        assert taken[-1] == ("k0000", "k0011", 0)
        pairs = client.iter_pairs(0)
        assert next(pairs) == ("k0000", "k0001", 0)
        began = time.monotonic()
        pairs.close()  # cancels the call
        assert time.monotonic() - began < 1
        with pytest.raises(StopIteration):
            next(pairs)
        assert client.stats().count == 1000
        assert sum(1 for _ in client.iter_pairs(0)) == 1000 * 999 // 2


def test_an_interrupted_ingest_leaves_its_counts_on_the_error(start_server: StartServer) -> None:
    """ingest_result_of: acknowledged and in-flight counts on every exception an ingest
    raises; 0 in flight after an input error (the stream ended cleanly)."""
    from permindex.client import ingest_result_of

    server = start_server(max_batch=5)
    with permindex.Client(server.address, batch_size=5) as client:

        def documents() -> Iterator[tuple[str, int]]:
            yield from ((f"e{i}", i) for i in range(7))
            raise OSError("the input broke off")

        with pytest.raises(OSError) as broke:
            client.ingest(documents())
        counts = ingest_result_of(broke.value)
        assert counts is not None
        assert (counts.documents, counts.batches, counts.in_flight) == (7, 2, 0)
        client.batch_size = 6  # over the server's max_batch: the first batch is refused
        with pytest.raises(LimitExceededError) as refused:
            client.ingest((f"x{i}", i) for i in range(12))
        counts = ingest_result_of(refused.value)
        assert counts is not None and counts.documents == 0
        assert 6 <= counts.in_flight <= 12 and counts.in_flight_batches in (1, 2)
        assert client.stats().count == 7
        assert ingest_result_of(ValueError()) is None
        result = client.ingest_batches([[("y", 1)]])
        assert (result.in_flight, result.in_flight_batches) == (0, 0)


@pytest.mark.parametrize(
    ("code", "details", "expected_code", "words"),
    [
        (
            "RESOURCE_EXHAUSTED",
            "Received message larger than max (75280177 vs. 67108864)",
            "RESOURCE_EXHAUSTED",
            ["75,280,177 bytes", "67,108,864 bytes (64 MiB)", "--batch-bytes", "--max-message-mb"],
        ),
        ("UNAVAILABLE", "Cancelling all calls", "UNAVAILABLE", ["shutting down"]),
        ("UNAVAILABLE", "Stream removed (Socket closed)", "UNAVAILABLE", ["connection", "lost"]),
        ("UNKNOWN", "Stream removed", "UNAVAILABLE", ["connection", "lost"]),
        (
            "UNAVAILABLE",
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:9: "
            "Failed to connect to remote host: Connection refused",
            "UNAVAILABLE",
            ["failed to connect", "refused", "server running"],
        ),
        ("DEADLINE_EXCEEDED", "Deadline Exceeded", "DEADLINE_EXCEEDED", ["deadline"]),
        # the server's own words are kept
        ("INVALID_ARGUMENT", "k=9 is above the design", "INVALID_ARGUMENT", ["k=9 is above"]),
    ],
)
def test_grpc_wording_is_translated(
    code: str, details: str, expected_code: str, words: list[str]
) -> None:
    from permindex.client.channel import translate

    new_code, message = translate(code, details)
    assert new_code == expected_code
    for word in words:
        assert word in message
    for raw in ("Cancelling all calls", "Stream removed", "Socket closed", "larger than max"):
        assert raw not in message


@pytest.mark.parametrize("shards", [1, 2])
def test_a_key_or_text_that_is_not_utf8_is_an_invalid_argument(
    start_server: StartServer, tmp_path: Path, shards: int
) -> None:
    """A lone surrogate (which UTF-8 cannot encode) in a key or a text: add, check_and_add,
    get and remove raise InvalidArgumentError naming the document or key, as for any other bad
    input (not protobuf's UnicodeEncodeError), before anything is sent: the valid document
    before it is not stored."""
    addresses = [start_server(data_dir=tmp_path / f"d{i}").address for i in range(shards)]
    with permindex.Client(addresses) as client:
        good: tuple[str, Content] = ("good", 5)
        cases: list[tuple[list[tuple[str, Content]], str]] = [
            ([good, ("bad\ud800", 7)], "documents[1]"),
            ([good, ("bad", "one two three \udfff four")], "documents[1]"),
        ]
        for docs, says in cases:
            for call in (client.add, client.check_and_add_many):
                with pytest.raises(permindex.InvalidArgumentError, match=re.escape(says)):
                    call(docs)
        for keys_call in (client.get_many, client.remove):
            with pytest.raises(permindex.InvalidArgumentError, match=re.escape("keys[1]")):
                keys_call(["good", "bad\ud800"])
        assert client.stats().count == 0
