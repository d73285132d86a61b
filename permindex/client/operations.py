"""The one-request calls of both clients, written once as *plans*: generators that build the
request messages, yield the calls to make (a list of :class:`Call`, made concurrently), receive
the replies in the same order, and return the method's result. No I/O: the blocking
:class:`~permindex.client.Client` and the asyncio :class:`~permindex.client.AsyncClient` each run
a plan with their own transport (``_run``), which also translates errors and retries idempotent
calls. A failed call is thrown into the plan (``generator.throw``), so a plan can leave its
counts on the exception.

Every argument check runs before the first call is yielded. Every plan works over ``n`` shards
(:mod:`permindex.client.sharding`; one shard: the requests of a single server).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any, Final, TypeVar, cast

import numpy as np

from permindex.client.batching import batches
from permindex.client.messages import (
    check_counts,
    check_fingerprints,
    check_result,
    check_utf8,
    collection_info,
    document_messages,
    document_result,
    get_value,
    jaccard_matches,
    matches,
    server_stats,
    sketch_message,
)
from permindex.client.results import (
    AddResult,
    CheckResult,
    CollectionInfo,
    DocumentLike,
    DocumentResult,
    IngestResult,
    RemoveResult,
    ServerStats,
    SketchHex,
    SnapshotResult,
    attach_ingest_result,
)
from permindex.client.sharding import (
    merge_collection_infos,
    merge_collection_lists,
    merge_matches,
    merge_snapshots,
    merge_stats,
    route,
)
from permindex.errors import InvalidArgumentError, ServerInvalidArgumentError
from permindex.index import Match
from permindex.index.expiry import stamps
from permindex.index.hamming import hamming
from permindex.index.jaccard import JaccardIndex, JaccardMatch, MinHashSketch
from permindex.index.jaccard.sketch import check_verify, checked_sketch, sketch_from_sent_hex
from permindex.v1 import index_pb2 as pb

__all__ = [
    "Call",
    "Plan",
    "Target",
    "add",
    "check_and_add",
    "create_collection",
    "describe_collection",
    "drop_collection",
    "get_many",
    "ingest_by_add",
    "list_collections",
    "query_many",
    "remove",
    "snapshot",
    "stats",
]

_T = TypeVar("_T")


@dataclass(frozen=True)
class Call:
    """One unary call: ``rpc`` (the method name of the PermIndex service) with ``request`` on
    shard ``shard``; ``idempotent`` calls (reads) may be retried on UNAVAILABLE."""

    shard: int
    rpc: str
    request: Any
    idempotent: bool


#: A plan: yields the calls of one step, receives their replies (same order), returns the result.
Plan = Generator[list[Call], list[Any], _T]


@dataclass(frozen=True)
class Target:
    """What a plan needs of its client: the number of shards, the collection named in every
    request, and the batch bounds (most items, about most bytes, per request)."""

    shards: int
    collection: str
    batch_size: int
    batch_bytes: int


def _everywhere(target: Target, rpc: str, request: Any, idempotent: bool) -> list[Call]:
    return [Call(shard, rpc, request, idempotent) for shard in range(target.shards)]


def _chunks(items: Sequence[_T], size: int) -> list[Sequence[_T]]:
    return [items[start : start + size] for start in range(0, len(items), size)]


def _document_batches(target: Target, documents: Iterable[DocumentLike]) -> list[list[pb.Document]]:
    """Every document checked (all before anything is sent), then cut into batches of at most
    ``batch_size`` documents and about ``batch_bytes`` bytes."""
    checked = list(document_messages(documents))
    cut = batches(checked, target.batch_size, target.batch_bytes, itemgetter(1))
    return [[message for message, _ in batch] for batch in cut]


def _add_batch(target: Target, messages: list[pb.Document]) -> Plan[AddResult]:
    """One batch added: one Add per shard that holds some of its keys."""
    groups = route([m.key for m in messages], target.shards)
    replies = yield [
        Call(
            shard,
            "Add",
            pb.AddRequest(collection=target.collection, documents=[messages[i] for i in at]),
            False,
        )
        for shard, at in groups
    ]
    results: list[DocumentResult | None] = [None] * len(messages)
    for (_, at), reply in zip(groups, replies, strict=True):
        for i, result in zip(at, reply.results, strict=True):
            results[i] = document_result(result)
    return AddResult(
        [r for r in results if r is not None],
        sum(r.added for r in replies),
        sum(r.replaced for r in replies),
        sum(r.too_short for r in replies),
    )


def add(target: Target, documents: Iterable[DocumentLike]) -> Plan[AddResult]:
    """:meth:`Client.add`: batches of ``batch_size`` / ``batch_bytes``, each one step on each
    shard; one result per document, in order, and the counts summed."""
    results: list[DocumentResult] = []
    counts = [0, 0, 0]
    for messages in _document_batches(target, documents):
        part = yield from _add_batch(target, messages)
        results.extend(part.results)
        counts = [counts[0] + part.added, counts[1] + part.replaced, counts[2] + part.too_short]
    return AddResult(results, *counts)


def ingest_by_add(
    target: Target,
    messages: Iterable[list[pb.Document]],
    progress: Callable[[IngestResult], None] | None,
) -> Plan[IngestResult]:
    """:meth:`Client.ingest_batches` as one Add step per batch (the ingest of several shards, and
    of the AsyncClient): each batch is acknowledged once every shard's part of it is; on an
    error the batch in flight is counted in ``in_flight`` (some shards may hold their part) and
    the counts are left on the exception (:func:`~permindex.client.ingest_result_of`), as the
    Ingest stream's are. An exception of the input comes after the batches before it."""
    done = IngestResult(0, 0, 0, 0, 0)
    batch: list[pb.Document] = []
    try:
        for batch in messages:
            part = yield from _add_batch(target, batch)
            done = IngestResult(
                done.documents + len(batch),
                done.added + part.added,
                done.replaced + part.replaced,
                done.too_short + part.too_short,
                done.batches + 1,
            )
            batch = []
            if progress is not None:
                progress(done)
    except BaseException as error:
        in_flight = len(batch)
        attach_ingest_result(
            error,
            IngestResult(
                done.documents,
                done.added,
                done.replaced,
                done.too_short,
                done.batches,
                in_flight,
                1 if in_flight else 0,
            ),
        )
        raise
    return done


def check_and_add(
    target: Target, documents: Iterable[DocumentLike], k: int | None
) -> Plan[list[CheckResult]]:
    """:meth:`Client.check_and_add_many`, ``batch_size`` documents per step, in order.

    One shard: one CheckAndAdd per batch, atomic on the server. Several: the collection's
    options are read once (one DescribeCollection of every shard: options that differ between
    shards are refused with InvalidArgumentError); then, per batch, each
    document is checked here as one server would check it, and the rest go in one CheckAndAdd
    per shard, which checks its own shard again, atomically:

    - SimHash collection: the fingerprints of the texts are computed here with the
      collection's shingle options and vote, every shard is queried, and each document, in
      order, is a near-duplicate when another key is within k on any shard or among the
      batch's documents before it that are to be added.
    - Jaccard collection (method minhash): the sketches of the texts are computed here with
      the collection's permutations, shingle options and verify
      (:func:`permindex.text.minhash.minhash_sketches`; sketches sent are checked as the server
      checks them), every shard is queried by sketch, and each document, in order, is decided
      by the server's own rule (:meth:`permindex.index.jaccard.JaccardIndex.check_in_order`):
      the same bands x rows, the same verification, the same matches.

    A key's own stored entry never blocks it (a re-add is ``replaced``); a text too short goes
    to its shard, which answers ``too_short``. Not atomic across shards: two near-duplicates
    sent at the same moment by two clients, with keys on two shards, may both be added (a later
    ``dedup`` of an ``export`` finds them).
    """
    check_counts(k=k)
    results: list[CheckResult] = []
    batches = _document_batches(target, documents)
    if target.shards == 1:
        for messages in batches:
            request = pb.CheckAndAddRequest(collection=target.collection, documents=messages, k=k)
            (reply,) = yield [Call(0, "CheckAndAdd", request, False)]
            results.extend(check_result(r) for r in reply.results)
        return results
    if not batches:
        return results
    describe = pb.DescribeCollectionRequest(name=target.collection)
    replies = yield _everywhere(target, "DescribeCollection", describe, True)
    info = _same_options(target, [collection_info(r) for r in replies])  # once a call
    if info.method == "minhash":
        index = _jaccard_index(target, info, k)
        given: list[list[MinHashSketch | None]] = []
        start = 0
        for messages in batches:  # every sketch sent checked before anything is added
            given.append(_given_sketches(target, index, messages, start))
            start += len(messages)
        for messages, sketches in zip(batches, given, strict=True):
            part = yield from _check_and_add_jaccard(target, index, info, messages, sketches)
            results.extend(part)
        return results
    for messages in batches:
        results.extend((yield from _check_and_add_sharded(target, messages, k, info)))
    return results


#: The options of a collection that decide a check-and-add: every shard must have the same.
_DECIDING_OPTIONS: Final = (
    "method", "k", "blocks", "leading", "shingle_size", "min_words", "vote", "expire_after",
    "threshold", "permutations", "bands", "rows", "verify",
)  # fmt: skip


def _same_options(target: Target, infos: list[CollectionInfo]) -> CollectionInfo:
    """The first shard's collection info, once every shard's options that decide a
    check-and-add equal it.

    Raises:
        InvalidArgumentError: a shard whose collection has other options (created shard by
            shard with others), naming the shard, the option and both values.
    """
    first = infos[0]
    for shard, info in enumerate(infos[1:], start=1):
        for option in _DECIDING_OPTIONS:
            mine, theirs = getattr(first, option), getattr(info, option)
            if mine != theirs:
                raise InvalidArgumentError(
                    f"check_and_add over {target.shards} shards: collection "
                    f"{target.collection!r} has {option} {theirs!r} on shard {shard} (address "
                    f"{shard + 1} of the list) but {mine!r} on shard 0: the shards would decide "
                    "by other rules; create the collection with the same options on every "
                    "shard (`collections create` through the sharded client does)",
                    option,
                )
    return first


def _check_and_add_sharded(
    target: Target, messages: list[pb.Document], k: int | None, info: CollectionInfo
) -> Plan[list[CheckResult]]:
    """One batch over shards, SimHash collection (:func:`check_and_add`)."""
    from permindex.text.fingerprint import simhash_many

    fingerprints: list[int | None] = [
        m.fingerprint if m.WhichOneof("content") == "fingerprint" else None for m in messages
    ]
    texts = [i for i, m in enumerate(messages) if m.WhichOneof("content") == "text"]
    largest = info.k if k is None else k
    if texts:
        values, valid = simhash_many(
            [messages[i].text for i in texts],
            shingle_size=info.shingle_size,
            min_words=info.min_words,
            vote=info.vote,
        )
        for i, fp, ok in zip(texts, values.tolist(), valid.tolist(), strict=True):
            fingerprints[i] = fp if ok else None
    asked = [i for i, fp in enumerate(fingerprints) if fp is not None]
    stored: list[list[Match]] = [[] for _ in messages]
    if asked:
        request = pb.QueryRequest(
            collection=target.collection,
            fingerprints=[fp for fp in fingerprints if fp is not None],
            k=k,
        )
        replies = yield _everywhere(target, "Query", request, True)
        for j, i in enumerate(asked):
            stored[i] = merge_matches([matches(r.results[j].matches) for r in replies], None)
    outcome: list[CheckResult | None] = [None] * len(messages)
    added: dict[str, int] = {}  # the batch's keys to be added before this one, their fingerprints
    for i, (message, fp) in enumerate(zip(messages, fingerprints, strict=True)):
        if fp is None:
            continue  # too short: the server says so
        key = message.key
        found = [m for m in stored[i] if m.key != key and m.key not in added]
        for other, value in added.items():
            distance = hamming(value, fp)
            if other != key and distance <= largest:
                found.append(Match(other, value, distance))
        if found:
            found.sort(key=lambda m: (m.distance, m.key))
            outcome[i] = CheckResult(key, "near_duplicate", fp, found)
        else:
            added[key] = fp
    return (yield from _check_and_add_rest(target, messages, outcome, k))


def _jaccard_index(target: Target, info: CollectionInfo, k: int | None) -> JaccardIndex:
    """An empty :class:`JaccardIndex` of the collection's options: its bands x rows,
    verification and expiry rule, for the sharded check-and-add.

    Raises:
        InvalidArgumentError: a ``k`` (as the server refuses it), or servers whose bands x rows
            this client would not choose (another version).
    """
    if k is not None:
        raise InvalidArgumentError(
            f"check_and_add: k is a Hamming distance of SimHash collections; collection "
            f"{target.collection!r} is a Jaccard collection (method minhash), whose threshold "
            "is fixed at creation: leave k unset",
            "k",
        )
    index = JaccardIndex(
        info.threshold,
        info.permutations,
        check_verify(info.verify),
        expire_after=info.expire_after or None,
    )
    if tuple(index.shape) != (info.bands, info.rows):
        raise InvalidArgumentError(
            f"check_and_add over {target.shards} shards: collection {target.collection!r} "
            f"has {info.bands} bands x {info.rows} rows, where this client chooses "
            f"{index.shape.bands} x {index.shape.rows} for its threshold and permutations (a "
            "server of another version); use one address, or the same version everywhere",
            target.collection,
        )
    return index


def _given_sketches(
    target: Target, index: JaccardIndex, messages: list[pb.Document], start: int
) -> list[MinHashSketch | None]:
    """The sketches of a batch's documents sent as sketches (``sketch``, ``sketch_hex``),
    checked as the server checks them; None for a text. ``start``: the position of the batch's
    first document in the call (errors name ``documents[start + i]``).

    Raises:
        InvalidArgumentError: a fingerprint, a sketch without what the collection keeps, of
            another length, or bad hex.
    """
    sketches: list[MinHashSketch | None] = []
    for i, message in enumerate(messages):
        where = f"documents[{start + i}]"
        content = message.WhichOneof("content")
        if content == "text":
            sketches.append(None)
        elif content == "sketch":
            sketches.append(
                checked_sketch(
                    np.array(message.sketch.shingle_hashes, dtype=np.uint64),
                    np.array(message.sketch.signature, dtype=np.uint32),
                    verify=index.verify,
                    permutations=index.permutations,
                    name=f"{where}.sketch",
                )
            )
        elif content == "sketch_hex":
            sketches.append(  # read as the kind sent says, as a server reads it
                sketch_from_sent_hex(
                    message.sketch_hex,
                    message.sketch_kind,
                    verify=index.verify,
                    permutations=index.permutations,
                    where=where,
                    key=message.key,
                )
            )
        else:
            raise InvalidArgumentError(
                f"{where} (key {message.key[:80]!r}) sends a fingerprint: collection "
                f"{target.collection!r} is a Jaccard collection (method minhash) and compares "
                "shingle sets, which a fingerprint does not carry; send the text, or its "
                "sketch (permindex.minhash_sketch)",
                message.key,
            )
    return sketches


def _check_and_add_jaccard(
    target: Target,
    index: JaccardIndex,
    info: CollectionInfo,
    messages: list[pb.Document],
    given: list[MinHashSketch | None],
) -> Plan[list[CheckResult]]:
    """One batch over shards, Jaccard collection (:func:`check_and_add`): ``given``, the
    checked sketches of the documents sent as sketches (None for a text)."""
    from permindex.text.minhash import minhash_sketches

    verify = index.verify
    sketches = list(given)
    texts = [i for i, message in enumerate(messages) if message.WhichOneof("content") == "text"]
    if texts:
        found = minhash_sketches(
            [messages[i].text for i in texts], permutations=index.permutations,
            shingle_size=info.shingle_size, min_words=info.min_words,
        )  # fmt: skip
        for i, sketch in zip(texts, found, strict=True):
            sketches[i] = sketch  # None: too short
    # what the collection keeps of a document: the set (exact) or the signature
    for i, sketch in enumerate(sketches):
        if sketch is not None and verify == "signature" and sketch.shingle_hashes.size:
            sketches[i] = MinHashSketch(np.zeros(0, dtype=np.uint64), sketch.signature)
    asked = [i for i, sketch in enumerate(sketches) if sketch is not None]
    kept = [cast(MinHashSketch, sketches[i]) for i in asked]
    outcome: list[CheckResult | None] = [None] * len(messages)
    if asked:
        sent = [  # the set alone for exact (the server computes the signature), else the signature
            sketch_message(
                MinHashSketch(s.shingle_hashes, np.zeros(0, dtype=np.uint32))
                if verify == "exact"
                else s
            )
            for s in kept
        ]
        request = pb.QueryRequest(collection=target.collection, sketches=sent)
        replies = yield _everywhere(target, "Query", request, True)
        keys = [messages[i].key for i in asked]
        stored = [
            sorted(
                (
                    m
                    for r in replies
                    for m in jaccard_matches(r.results[j].matches)
                    if m.key != keys[j]
                ),
                key=lambda m: (-m.jaccard, m.key),
            )
            for j in range(len(asked))
        ]
        times = stamps(
            np.array([messages[i].added_at for i in asked], dtype=np.float64),
            len(asked),
            index.clock(),
        )
        decided = index.check_in_order(keys, kept, stored, times)
        for i, key, found_matches in zip(asked, keys, decided, strict=True):
            if found_matches is not None:
                outcome[i] = CheckResult(key, "near_duplicate", None, found_matches)
    return (yield from _check_and_add_rest(target, messages, outcome, None))


def _check_and_add_rest(
    target: Target, messages: list[pb.Document], outcome: list[CheckResult | None], k: int | None
) -> Plan[list[CheckResult]]:
    """The documents of a batch not decided here (``outcome[i]`` None: to be added, or too
    short) sent as they came, in one CheckAndAdd per shard that holds some of their keys; the
    results in the batch's order."""
    sent = [i for i, result in enumerate(outcome) if result is None]
    groups = route([messages[i].key for i in sent], target.shards)
    replies = yield [
        Call(
            shard,
            "CheckAndAdd",
            pb.CheckAndAddRequest(
                collection=target.collection, documents=[messages[sent[j]] for j in at], k=k
            ),
            False,
        )
        for shard, at in groups
    ]
    for (_, at), reply in zip(groups, replies, strict=True):
        for j, result in zip(at, reply.results, strict=True):
            outcome[sent[j]] = check_result(result)
    return [result for result in outcome if result is not None]


def remove(target: Target, keys: str | Iterable[str]) -> Plan[RemoveResult]:
    """:meth:`Client.remove`: each key's shard, ``batch_size`` keys a request; the keys not
    stored in the order given."""
    names = [keys] if isinstance(keys, str) else list(keys)
    for i, name in enumerate(names):
        check_utf8(name, f"keys[{i}]")
    calls: list[Call] = []
    for shard, at in route(names, target.shards):
        for chunk in _chunks(at, target.batch_size):
            request = pb.RemoveRequest(collection=target.collection, keys=[names[i] for i in chunk])
            calls.append(Call(shard, "Remove", request, False))
    replies = yield calls
    missing = {key for reply in replies for key in reply.not_found}
    return RemoveResult(sum(r.removed for r in replies), [k for k in names if k in missing])


def query_many(
    target: Target, fingerprints: Iterable[int], k: int | None, limit: int | None
) -> Plan[list[list[Match]]]:
    """:meth:`Client.query_many`: ``batch_size`` fingerprints a request, every shard, merged."""
    check_counts(k=k, limit=limit)
    values = check_fingerprints(fingerprints)
    found: list[list[Match]] = []
    for chunk in _chunks(values, target.batch_size):
        request = pb.QueryRequest(
            collection=target.collection, fingerprints=chunk, k=k, limit=limit
        )
        replies = yield _everywhere(target, "Query", request, True)
        for j in range(len(chunk)):
            found.append(merge_matches([matches(r.results[j].matches) for r in replies], limit))
    return found


def query_jaccard(
    target: Target, items: Iterable[str | MinHashSketch], by: str, limit: int | None
) -> Plan[list[list[JaccardMatch]]]:
    """:meth:`Client.query_jaccard`: ``batch_size`` items a request (texts, keys or sketches,
    as ``by`` says), every shard, merged by Jaccard descending, then key."""
    check_counts(limit=limit)
    values = list(items)
    field = {"text": "texts", "key": "keys", "sketch": "sketches"}.get(by)
    if field is None:
        raise InvalidArgumentError(f"by must be text, key or sketch, got {by!r}", by)
    for i, value in enumerate(values):
        if not isinstance(value, MinHashSketch if by == "sketch" else str):
            raise InvalidArgumentError(
                f"items[{i}] is {type(value).__name__}; by={by!r} takes "
                f"{'MinHashSketch' if by == 'sketch' else 'str'} items",
                value,
            )
    found: list[list[JaccardMatch]] = []
    for chunk in _chunks(values, target.batch_size):
        given: list[Any] = (
            [sketch_message(cast(MinHashSketch, v)) for v in chunk]
            if by == "sketch"
            else list(chunk)
        )
        request = pb.QueryRequest(collection=target.collection, limit=limit)
        getattr(request, field).extend(given)
        try:
            replies = yield _everywhere(target, "Query", request, True)
        except ServerInvalidArgumentError as error:
            # the server's refusal names the gRPC fields (permindex.rpc.service.Query); here,
            # the Python calls to make instead
            if "this collection is SimHash" not in error.details:
                raise
            raise ServerInvalidArgumentError(
                f"query_jaccard is for a Jaccard collection (method minhash); collection "
                f"{target.collection or 'default'!r} is SimHash: call query(fingerprint) or "
                "query_many(fingerprints) instead (a text's fingerprint: permindex.simhash(text))",
                error.code,
                error.details,
            ) from None
        for j in range(len(chunk)):
            merged = sorted(
                (m for r in replies for m in jaccard_matches(r.results[j].matches)),
                key=lambda m: (-m.jaccard, m.key),
            )
            found.append(merged[:limit] if limit else merged)
    return found


def get_many(target: Target, keys: Iterable[str]) -> Plan[list[int | SketchHex | None]]:
    """:meth:`Client.get_many`: each key's shard, ``batch_size`` keys a request."""
    names = list(keys)
    for i, name in enumerate(names):
        check_utf8(name, f"keys[{i}]")
    parts: list[Sequence[int]] = []
    calls: list[Call] = []
    for shard, at in route(names, target.shards):
        for chunk in _chunks(at, target.batch_size):
            parts.append(chunk)
            request = pb.GetRequest(collection=target.collection, keys=[names[i] for i in chunk])
            calls.append(Call(shard, "Get", request, True))
    replies = yield calls
    found: list[int | SketchHex | None] = [None] * len(names)
    for chunk, reply in zip(parts, replies, strict=True):
        for i, result in zip(chunk, reply.results, strict=True):
            found[i] = get_value(result)
    return found


def snapshot(target: Target) -> Plan[SnapshotResult]:
    """:meth:`Client.snapshot` on every shard."""
    replies = yield _everywhere(
        target, "Snapshot", pb.SnapshotRequest(collection=target.collection), False
    )
    return merge_snapshots([SnapshotResult(r.path, r.count, r.bytes, r.seconds) for r in replies])


def stats(target: Target) -> Plan[ServerStats]:
    """:meth:`Client.stats` of every shard, summed."""
    request = pb.StatsRequest(collection=target.collection)
    replies = yield _everywhere(target, "Stats", request, True)
    return merge_stats([server_stats(r) for r in replies])


def create_collection(
    target: Target, name: str, **options: float | str | None
) -> Plan[CollectionInfo]:
    """:meth:`Client.create_collection` on every shard; ``options`` are the fields of
    ``CollectionOptions`` (k, blocks, leading, shingle_size, min_words, expire_after, vote),
    None for the server's own (the server checks them: INVALID_ARGUMENT)."""
    given: dict[str, Any] = {field: value for field, value in options.items() if value is not None}
    request = pb.CreateCollectionRequest(name=name, options=pb.CollectionOptions(**given))
    replies = yield _everywhere(target, "CreateCollection", request, False)
    return merge_collection_infos([collection_info(r) for r in replies])


def list_collections(target: Target) -> Plan[list[CollectionInfo]]:
    """:meth:`Client.list_collections` of every shard, merged by name."""
    replies = yield _everywhere(target, "ListCollections", pb.ListCollectionsRequest(), True)
    return merge_collection_lists([[collection_info(i) for i in r.collections] for r in replies])


def describe_collection(target: Target, name: str) -> Plan[CollectionInfo]:
    """:meth:`Client.describe_collection` of every shard, merged."""
    request = pb.DescribeCollectionRequest(name=name)
    replies = yield _everywhere(target, "DescribeCollection", request, True)
    return merge_collection_infos([collection_info(r) for r in replies])


def drop_collection(target: Target, name: str) -> Plan[int]:
    """:meth:`Client.drop_collection` on every shard: the keys dropped, summed."""
    replies = yield _everywhere(
        target, "DropCollection", pb.DropCollectionRequest(name=name), False
    )
    return sum(int(r.count) for r in replies)
