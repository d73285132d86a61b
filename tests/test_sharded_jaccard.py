"""Check-and-add over several shards of a Jaccard collection (method minhash) against one server
holding everything: real servers on 127.0.0.1 (three shards and one single server, in this
process), the same document stream sent through a sharded Client (2 and 3 shards) and a
single-server one, results compared item by item (status, matches, Jaccard values, order), then
what each stored. Each test works in collections of its own."""

from __future__ import annotations

import asyncio
import gzip
import json
import random
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import server_config

import permindex
from permindex.client import CheckResult, Content, Document, SketchHex
from permindex.client.sharding import shard_of
from permindex.index.jaccard.sketch import sketch_to_hex
from permindex.rpc.server import RunningServer, create_server

THRESHOLD = 0.7
PERMUTATIONS = 64


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[list[str], str]]:
    """Three shard servers and one single server: (shard addresses, single address)."""
    root = tmp_path_factory.mktemp("jshards")
    running: list[RunningServer] = []
    try:
        for i in range(4):
            running.append(create_server(server_config(root / f"data{i}")))
        yield [r.address for r in running[:3]], running[3].address
    finally:
        for server in running:
            server.stop(grace=0)


_names = iter(range(10**6))


def _collections(
    servers: tuple[list[str], str], shards: int, **options: object
) -> tuple[str, list[str], str]:
    """A new Jaccard collection on the first ``shards`` shard servers and on the single one:
    (name, shard addresses, single address)."""
    addresses, single = servers
    name = f"j{next(_names)}"
    used = addresses[:shards]
    for address in (*used, single):
        with permindex.Client(address) as client:
            client.create_collection(name, method="minhash", **options)  # type: ignore[arg-type]
    return name, used, single


def _words(rng: random.Random, n: int) -> list[str]:
    return [f"w{rng.randrange(600)}" for _ in range(n)]


def _edited(rng: random.Random, words: list[str], edits: int) -> list[str]:
    """``words`` with ``edits`` words replaced, inserted or deleted at random places."""
    out = list(words)
    for _ in range(edits):
        at = rng.randrange(len(out))
        kind = rng.random()
        if kind < 0.5:
            out[at] = f"e{rng.randrange(10**6)}"
        elif kind < 0.8:
            out.insert(at, f"e{rng.randrange(10**6)}")
        elif len(out) > 10:
            del out[at]
    return out


def stream(seed: int, n: int, verify: str, old: int | None = None) -> list[Document]:
    """``n`` documents: new pages, planted near-duplicates of earlier ones (1 to 8 words edited:
    Jaccard from about 0.5 to 0.95, around the threshold), exact copies, a page after two
    edits of it that are not near each other (near both), re-adds of an earlier key (its own
    page edited, as a crawler sees it again; another page edited; a new one), too-short texts;
    about a third sent as sketches (:func:`permindex.minhash_sketch`, or its hex as an export
    carries it) instead of texts. ``old``: a share of the documents carry that ``added_at``
    (expired at their time in a collection with expiry)."""
    rng = random.Random(seed)
    pages: list[list[str]] = []
    keys: list[str] = []
    last: dict[str, list[str]] = {}  # each key's latest page
    docs: list[Document] = []
    planned: list[list[str]] = []  # a page edited at its start, at its end, then itself
    while len(docs) < n:
        roll = rng.random()
        key = f"doc/{seed}/{len(docs)}"
        if planned:
            words = planned.pop(0)
        elif roll < 0.05:
            middle = _words(rng, 60)
            start = _edited(rng, middle[:20], 4) + middle[20:]
            end = middle[:40] + _edited(rng, middle[40:], 4)
            planned = [end, middle]  # near both, which are not near each other
            words = start
        elif roll < 0.25 or not pages:
            words = _words(rng, rng.randint(25, 60))
        elif roll < 0.7:
            words = _edited(rng, rng.choice(pages), rng.randint(0, 8))
        elif roll < 0.85:
            key = rng.choice(keys)
            kind = rng.random()
            if kind < 0.5 and len(last[key]) >= 3:  # crawled again: its own page, edited
                words = _edited(rng, last[key], rng.randint(0, 3))
            elif kind < 0.8:
                words = _edited(rng, rng.choice(pages), rng.randint(0, 8))
            else:
                words = _words(rng, rng.randint(25, 60))
        else:
            words = _words(rng, rng.randint(0, 2))  # too short: no shingle of 3 words
        text = " ".join(words)
        if len(words) >= 3:
            pages.append(words)
        keys.append(key)
        last[key] = words
        content: str | permindex.MinHashSketch | SketchHex = text
        sketch = permindex.minhash_sketch(text, permutations=PERMUTATIONS)
        if sketch is not None:
            form = rng.random()
            if form < 0.2:
                content = sketch
            elif form < 0.35:
                content = SketchHex(sketch_to_hex(sketch, verify))  # type: ignore[arg-type]
        added_at = old if old is not None and rng.random() < 0.15 else None
        docs.append(Document(key, content, added_at))
    return docs


def _stored(client: permindex.Client) -> list[tuple[str, object]]:
    return sorted((key, sketch) for key, sketch in client.iter_export())


@pytest.mark.parametrize("shards", [2, 3])
@pytest.mark.parametrize(
    ("verify", "expire"), [("exact", False), ("signature", False), ("exact", True)]
)
def test_the_sharded_result_equals_one_servers(
    servers: tuple[list[str], str], shards: int, verify: str, expire: bool
) -> None:
    """A seeded stream of 400 documents in batches of 25 (texts, sketches and sketch hex;
    near-duplicates planted across shards and within batches; re-adds; too-short texts; with
    expiry, old times): the sharded client's results equal one server's, and so do the stored
    sketches and the answers of a lookup afterwards."""
    options: dict[str, object] = {
        "threshold": THRESHOLD, "permutations": PERMUTATIONS, "verify": verify,
    }  # fmt: skip
    if expire:
        options["expire_after"] = 3600
    name, addresses, single = _collections(servers, shards, **options)
    docs = stream(shards * 10 + len(verify) + expire, 400, verify, int(time.time()) - 7200)
    with (
        permindex.Client(addresses, collection=name, batch_size=25, timeout=60) as sharded,
        permindex.Client(single, collection=name, batch_size=25, timeout=60) as one,
    ):
        expected = one.check_and_add_many(docs)
        found = sharded.check_and_add_many(docs)
        assert found == expected
        assert _stored(sharded) == _stored(one)
        probes = [" ".join(_words(random.Random(i), 40)) for i in range(3)]
        probes += [d.content for d in docs[:40] if isinstance(d.content, str)]
        assert sharded.query_jaccard(probes) == one.query_jaccard(probes)
    # what the stream exercised, so that the equality above says something
    statuses = {r.status for r in expected}
    assert statuses == {"added", "replaced", "near_duplicate", "too_short"}
    position = {d.key: i for i, d in enumerate(docs)}
    across = [
        (r, m)
        for r in expected
        if r.status == "near_duplicate"
        for m in r.matches
        if shard_of(m.key, shards) != shard_of(r.key, shards)
    ]
    assert len(across) > 20  # blocked by a key on another shard
    in_batch = [  # blocked by a document of its own batch, on another shard
        (r, m)
        for i, r in enumerate(expected)
        for m in r.matches
        if shard_of(m.key, shards) != shard_of(r.key, shards)
        and any(d.key == m.key for d in docs[i - i % 25 : i])
    ]
    assert in_batch
    assert all(isinstance(m, permindex.JaccardMatch) for r in expected for m in r.matches)
    assert any(r.status == "near_duplicate" and len(r.matches) > 1 for r in expected)
    assert len(position) < len(docs)  # keys sent more than once
    assert any(  # a document sent as a sketch found near a stored one
        r.status == "near_duplicate"
        for d, r in zip(docs, expected, strict=True)
        if not isinstance(d.content, str)
    )
    values = [
        m.jaccard * PERMUTATIONS
        for r in expected
        for m in r.matches
        if isinstance(m, permindex.JaccardMatch)
    ]
    # the signature's estimates are whole shares of the permutations; exact values mostly not
    assert all(v == round(v) for v in values) == (verify == "signature")


@pytest.mark.parametrize("shards", [2, 3])
def test_two_near_duplicates_in_one_batch_on_two_shards_one_added(
    servers: tuple[list[str], str], shards: int
) -> None:
    """Two near-duplicates in one call, their keys on different shards: the first is added, the
    second is a near-duplicate of it (with the Jaccard one server gives), and only the first is
    stored; sent again, the first is ``replaced`` (its own entry never blocks it)."""
    name, addresses, single = _collections(servers, shards, threshold=0.8)
    text = " ".join(f"t{i}" for i in range(60))
    second = next(f"page/b{i}" for i in range(100) if shard_of(f"page/b{i}", shards) != 1)
    first = next(f"page/a{i}" for i in range(100) if shard_of(f"page/a{i}", shards) == 1)
    batch = [(first, text), (second, text + " one more")]
    with (
        permindex.Client(addresses, collection=name) as sharded,
        permindex.Client(single, collection=name) as one,
    ):
        found = sharded.check_and_add_many(batch)
        assert found == one.check_and_add_many(batch)
        assert [r.status for r in found] == ["added", "near_duplicate"]
        assert found[1].matches == [permindex.JaccardMatch(first, 58 / 60)]
        assert sorted(key for key, _ in sharded.iter_export()) == [first]
        again = sharded.check_and_add(first, text + " edited")
        assert again.status == "replaced" and again == one.check_and_add(first, text + " edited")
        late = sharded.check_and_add(second, text)  # against the stored one, on the other shard
        assert late.status == "near_duplicate" and late.matches[0].key == first


def test_the_async_client_over_shards(servers: tuple[list[str], str]) -> None:
    """The AsyncClient's check-and-add over three shards gives the results of one server."""
    name, addresses, single = _collections(servers, 3, threshold=THRESHOLD, permutations=64)
    docs = stream(99, 150, "exact")

    async def main() -> list[CheckResult]:
        async with permindex.AsyncClient(addresses, collection=name, batch_size=20) as client:
            return await client.check_and_add_many(docs)

    found = asyncio.run(main())
    with permindex.Client(single, collection=name, batch_size=20) as one:
        assert found == one.check_and_add_many(docs)
    assert sum(r.status == "near_duplicate" for r in found) > 20


def test_bad_input_is_refused_before_anything_is_added(servers: tuple[list[str], str]) -> None:
    """A k, a fingerprint or a signature without the shingle set (verify=exact), in any batch,
    is refused over shards as one server refuses it (InvalidArgumentError naming it), before
    anything of the call is added."""
    name, addresses, single = _collections(servers, 2, threshold=0.8)
    text = " ".join(f"t{i}" for i in range(30))
    sketch = permindex.minhash_sketch(text)
    assert sketch is not None
    signature_only = permindex.MinHashSketch(np.zeros(0, dtype=np.uint64), sketch.signature)
    with (
        permindex.Client(addresses, collection=name, batch_size=2) as sharded,
        permindex.Client(single, collection=name, batch_size=2) as one,
    ):
        with pytest.raises(permindex.InvalidArgumentError, match="leave k unset"):
            sharded.check_and_add("a", text, k=3)
        with pytest.raises(permindex.InvalidArgumentError, match="leave k unset"):
            one.check_and_add("a", text, k=3)
        for bad, says in ((12345, "fingerprint"), (signature_only, "no shingle hashes")):
            docs = [("a", text), ("b", text + " x"), ("c", bad)]
            with pytest.raises(permindex.InvalidArgumentError, match=says) as error:
                sharded.check_and_add_many(docs)
            assert "documents[2]" in str(error.value)
            with pytest.raises(permindex.InvalidArgumentError, match=says):
                one.check_and_add_many(docs[2:])
            assert sharded.stats().count == one.stats().count == 0


def test_a_sketch_hex_of_shingle_hashes_to_a_signature_collection(
    servers: tuple[list[str], str],
) -> None:
    """A ``SketchHex`` of kind ``"shingle_hashes"`` (an export of a verify=exact collection)
    sent to a verify=signature collection over shards is read as shingle hashes, as one server
    reads it (and signed): not refused as a signature of another length, and not compared
    within the batch as a signature it is not -- the results equal one server's."""
    name, addresses, single = _collections(servers, 2, verify="signature", permutations=64)
    texts = [" ".join(f"w{i}" for i in range(40)), " ".join(f"v{i}" for i in range(34))]
    hexes = []
    for text in texts:  # 38 hashes (76 signature-widths) and 32 (64: a signature's length)
        sketch = permindex.minhash_sketch(text, permutations=64)
        assert sketch is not None
        hexes.append(SketchHex(sketch_to_hex(sketch, "exact"), "shingle_hashes"))
    assert [len(h.hex) // 8 for h in hexes] == [76, 64]
    docs: list[tuple[str, Content]] = [
        ("a", hexes[0]), ("b", texts[0]), ("c", hexes[1]), ("d", texts[1] + " x"),
    ]  # fmt: skip
    with (
        permindex.Client(addresses, collection=name) as sharded,
        permindex.Client(single, collection=name) as one,
    ):
        expected = one.check_and_add_many(docs)
        assert [r.status for r in expected] == ["added", "near_duplicate"] * 2
        assert sharded.check_and_add_many(docs) == expected
        assert sorted(key for key, _ in sharded.iter_export()) == ["a", "c"]


def test_shards_created_with_other_options_are_refused(servers: tuple[list[str], str]) -> None:
    """A collection created shard by shard with other options (here the second shard's
    threshold 0.5, permutations 64, verify=signature, where the first has 0.8, 128, exact):
    the sharded check-and-add refuses with InvalidArgumentError naming the option and the
    shard, before anything is added, instead of deciding by the first shard's options while
    the second decides by its own (a page at J 0.6 to one on the second shard was a
    near-duplicate there, and would be added where the first shard holds its match)."""
    addresses, _ = servers
    name = f"j{next(_names)}"
    with permindex.Client(addresses[0]) as client:
        client.create_collection(name, method="minhash", threshold=0.8)
    with permindex.Client(addresses[1]) as client:
        client.create_collection(
            name, method="minhash", threshold=0.5, permutations=64, verify="signature"
        )
    docs = [(f"k{i}", " ".join(f"w{i}_{j}" for j in range(30))) for i in range(10)]
    with permindex.Client(addresses[:2], collection=name) as sharded:
        with pytest.raises(permindex.InvalidArgumentError, match="threshold") as error:
            sharded.check_and_add_many(docs)
        assert "on shard 1" in str(error.value)
        assert sharded.stats().count == 0


CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpora"


@pytest.mark.slow
@pytest.mark.parametrize("verify", ["exact", "signature"])
def test_a_crawl_of_a_real_corpus_over_three_shards(
    servers: tuple[list[str], str], verify: str
) -> None:
    """libstdc++-12-doc (3,906 pages) checked-and-added in one pass, as a crawler would, at
    threshold 0.8: three shards give one server's results, page for page."""
    path = CORPUS / "libstdc++-12-doc.jsonl.gz"
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path} (expected <repo>/../shared/corpora)")
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        docs = [(d["id"], d["text"]) for d in map(json.loads, lines)]
    name, addresses, single = _collections(servers, 3, threshold=0.8, verify=verify)
    with (
        permindex.Client(addresses, collection=name, timeout=300) as sharded,
        permindex.Client(single, collection=name, timeout=300) as one,
    ):
        expected = one.check_and_add_many(docs)
        assert sharded.check_and_add_many(docs) == expected
    assert sum(r.status == "near_duplicate" for r in expected) > 150  # 178 exact, 187 signature
