"""The Jaccard branch of the servicer: a collection created with ``method="minhash"``
(:class:`JaccardState`, over a :class:`~permindex.storage.jaccard_store.JaccardStore`) and the
conversions of its requests and answers (documents to sketches, matches with ``jaccard``,
pairs, flags, exports with ``sketch_hex``). The servicer (:mod:`permindex.rpc.service`) checks
a request's collection and hands a Jaccard one to these functions; every check happens before
anything is logged or applied, as for a SimHash collection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import numpy as np

from permindex.errors import InvalidArgumentError, InvalidKeyError
from permindex.index.jaccard import JaccardIndex, JaccardMatch, MinHashSketch
from permindex.index.jaccard.sketch import (
    SketchKind,
    checked_sketch,
    kind_of,
    sketch_from_sent_hex,
    sketch_to_hex,
)
from permindex.index.keys.rule import validate_key
from permindex.rpc import convert
from permindex.rpc.config import ServerConfig
from permindex.rpc.state import ServerState
from permindex.storage.jaccard_store import JaccardStore
from permindex.v1 import index_pb2 as pb

if TYPE_CHECKING:
    from permindex.near.jaccard import JaccardDuplicates

__all__ = [
    "KIND_MESSAGES",
    "JaccardBatch",
    "JaccardState",
    "add",
    "check_and_add",
    "export_messages",
    "flags_messages",
    "near_duplicates",
    "pair_messages",
    "query",
    "refuse_k",
]

_ADDED = pb.DOCUMENT_STATUS_ADDED
_REPLACED = pb.DOCUMENT_STATUS_REPLACED
_TOO_SHORT = pb.DOCUMENT_STATUS_TOO_SHORT
_NEAR_DUPLICATE = pb.DOCUMENT_STATUS_NEAR_DUPLICATE

#: A sketch's kind -> its ``SketchKind`` enum value (Export, Get).
KIND_MESSAGES: dict[SketchKind, pb.SketchKind.ValueType] = {
    "shingle_hashes": pb.SKETCH_KIND_SHINGLE_HASHES,
    "signature": pb.SKETCH_KIND_SIGNATURE,
}


class JaccardState(ServerState):
    """A Jaccard collection's state: a :class:`ServerState` whose store is a
    :class:`~permindex.storage.jaccard_store.JaccardStore` (:attr:`jaccard_store`) and whose
    index a :class:`~permindex.index.jaccard.JaccardIndex` (:attr:`jaccard`); what the server's
    loops use of a state (counts, memory, snapshots, the log's sequence, closing) works on
    both."""

    def __init__(self, store: JaccardStore, config: ServerConfig) -> None:
        super().__init__(cast(Any, store), config)
        self.jaccard_store = store
        self.jaccard: JaccardIndex = store.index


@dataclass(frozen=True)
class JaccardBatch:
    """A request's documents, checked and sketched: ``sketches[i]`` None for a text too short."""

    keys: list[str]
    sketches: list[MinHashSketch | None]
    added_at: list[int]

    def stored(self) -> tuple[list[str], list[MinHashSketch], np.ndarray[Any, Any]]:
        """The keys, sketches and times of the documents that have a sketch."""
        rows = [i for i, s in enumerate(self.sketches) if s is not None]
        return (
            [self.keys[i] for i in rows],
            [cast(MinHashSketch, self.sketches[i]) for i in rows],
            np.array([self.added_at[i] for i in rows], dtype=np.int64),
        )


def refuse_k(has_k: bool, what: str) -> None:
    """InvalidArgumentError when a request to a Jaccard collection sets ``k``."""
    if has_k:
        raise InvalidArgumentError(
            f"{what}: k is a Hamming distance of SimHash collections; this collection is a "
            "Jaccard collection (method minhash), whose threshold is fixed at creation: "
            "leave k unset",
            "k",
        )


def _fingerprint_refusal(i: int, key: str, kind: str) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"documents[{i}] (key {key[:80]!r}) sends a {kind}, a SimHash fingerprint: this "
        "collection is a Jaccard collection (method minhash) and compares shingle sets, which "
        "a fingerprint does not carry; send the text, or its sketch (permindex.minhash_sketch)",
        key,
    )


def _sketch(state: JaccardState, message: pb.MinHashSketch, where: str) -> MinHashSketch:
    index = state.jaccard
    return checked_sketch(
        np.array(message.shingle_hashes, dtype=np.uint64),
        np.array(message.signature, dtype=np.uint32),
        verify=index.verify, permutations=index.permutations, name=where,
    )  # fmt: skip


def _sketch_texts(state: JaccardState, texts: Sequence[str]) -> list[MinHashSketch | None]:
    """The collection's sketches of ``texts`` (shingled as the offline mode, with the
    collection's shingle size and min words); None for a text too short."""
    from permindex.text.minhash import minhash_sketches

    index = state.jaccard
    found = minhash_sketches(
        list(texts), permutations=index.permutations, shingle_size=state.config.shingle_size,
        min_words=state.config.min_words,
    )  # fmt: skip
    if index.verify == "signature":
        empty = np.zeros(0, dtype=np.uint64)
        return [None if s is None else MinHashSketch(empty, s.signature) for s in found]
    return found


def documents(state: JaccardState, documents: Sequence[pb.Document]) -> JaccardBatch:
    """Every document checked (key, content, time, limits), then texts sketched.

    Raises:
        LimitExceededError: too many documents, a text over the limit.
        InvalidArgumentError: a bad key, no content, a fingerprint (named ``documents[i]``), a
            bad sketch.
    """
    config = state.config
    convert.check_batch_length(len(documents), config.max_batch, "documents")
    keys: list[str] = []
    sketches: list[MinHashSketch | None] = []
    texts: list[int] = []
    for i, document in enumerate(documents):
        key = document.key
        try:
            validate_key(key, max_bytes=config.max_key_bytes)
        except InvalidKeyError as error:
            raise convert.key_refusal(error, f"documents[{i}]") from None
        content = document.WhichOneof("content")
        if content is None:
            raise InvalidArgumentError(
                f"documents[{i}] (key {key[:80]!r}): no content; set its text, its sketch or "
                "its sketch_hex",
                key,
            )
        if document.added_at < 0:
            raise InvalidArgumentError(
                f"documents[{i}] (key {key[:80]!r}): added_at {document.added_at} is negative",
                document.added_at,
            )
        if content in ("fingerprint", "fingerprint_hex"):
            raise _fingerprint_refusal(i, key, content)
        if content == "sketch":
            sketches.append(_sketch(state, document.sketch, f"documents[{i}].sketch"))
        elif content == "sketch_hex":
            index = state.jaccard
            sketches.append(
                sketch_from_sent_hex(
                    document.sketch_hex,
                    document.sketch_kind,
                    verify=index.verify,
                    permutations=index.permutations,
                    where=f"documents[{i}]",
                    key=key,
                )
            )
        else:
            if config.max_text_bytes is not None:
                convert.check_text(
                    document.text, f"documents[{i}] (key {key[:80]!r})", config.max_text_bytes
                )
            sketches.append(None)
            texts.append(i)
        keys.append(key)
    if texts:
        for i, sketch in zip(texts, _sketch_texts(state, [documents[i].text for i in texts]),
                             strict=True):  # fmt: skip
            sketches[i] = sketch
    return JaccardBatch(keys, sketches, [document.added_at for document in documents])


def _growth(state: JaccardState, keys: list[str], sketches: list[MinHashSketch]) -> int:
    values = sum(int(s.shingle_hashes.size) for s in sketches)
    key_bytes = sum(len(key.encode()) for key in keys)
    return state.jaccard.memory_growth(len(keys), key_bytes, values)


def _times(added_at: np.ndarray[Any, Any]) -> np.ndarray[Any, Any] | None:
    return None if not added_at.size or not bool(added_at.any()) else added_at


def matches_to_proto(matches: Sequence[JaccardMatch]) -> list[pb.Match]:
    """Jaccard matches as ``permindex.v1.Match`` (distance 0, jaccard set)."""
    return [pb.Match(key=m.key, jaccard=m.jaccard) for m in matches]


def add(
    state: JaccardState,
    request: pb.AddRequest,
    admit: Callable[[Callable[[], int], str], Any],
    what: str,
) -> pb.AddResponse:
    """One Add batch: checked, sketched, admitted under the memory limit, logged, applied."""
    batch = documents(state, request.documents)
    keys, sketches, added_at = batch.stored()
    store = state.jaccard_store
    with admit(lambda: _growth(state, keys, sketches), what):
        was_new = store.add_many(keys, sketches, added_at=_times(added_at))
    state.note_changes(len(keys))
    response = pb.AddResponse()
    flags = iter(was_new.tolist())
    for key, sketch in zip(batch.keys, batch.sketches, strict=True):
        if sketch is None:
            response.results.add(key=key, status=_TOO_SHORT)
            response.too_short += 1
            continue
        status = _ADDED if next(flags) else _REPLACED
        response.results.add(key=key, status=status)
        if status == _ADDED:
            response.added += 1
        else:
            response.replaced += 1
    return response


def check_and_add(
    state: JaccardState,
    request: pb.CheckAndAddRequest,
    admit: Callable[[Callable[[], int], str], Any],
) -> pb.CheckAndAddResponse:
    """CheckAndAdd on a Jaccard collection: atomic under the store's write lock."""
    refuse_k(request.HasField("k"), "CheckAndAdd")
    batch = documents(state, request.documents)
    keys, sketches, added_at = batch.stored()
    with admit(lambda: _growth(state, keys, sketches), "this CheckAndAdd"):
        outcomes = iter(
            state.jaccard_store.check_and_add_many(keys, sketches, added_at=_times(added_at))
        )
    response = pb.CheckAndAddResponse()
    changes = 0
    for key, sketch in zip(batch.keys, batch.sketches, strict=True):
        if sketch is None:
            response.results.add(key=key, status=_TOO_SHORT)
            continue
        outcome = next(outcomes)
        if outcome.added:
            changes += 1
            status = _REPLACED if outcome.replaced else _ADDED
        else:
            status = _NEAR_DUPLICATE
        response.results.add(key=key, status=status, matches=matches_to_proto(outcome.matches))
    state.note_changes(changes)
    return response


def query(state: JaccardState, request: pb.QueryRequest) -> pb.QueryResponse:
    """Query by texts, keys or sketches (exactly one kind); fingerprints are refused."""
    refuse_k(request.HasField("k"), "Query")
    if request.fingerprints or request.fingerprints_hex:
        raise InvalidArgumentError(
            "Query sends fingerprints: this collection is a Jaccard collection (method "
            "minhash); query by texts, keys or sketches",
            "fingerprints",
        )
    given = [name for name in ("texts", "keys", "sketches") if len(getattr(request, name))]
    if len(given) > 1:
        raise InvalidArgumentError(
            f"Query sets {' and '.join(given)}: set one of texts, keys, sketches", given[0]
        )
    limit = convert.limit_from(request.limit if request.HasField("limit") else None)
    config = state.config
    exclude: list[str | None] | None = None
    if request.texts:
        convert.check_batch_length(len(request.texts), config.max_batch, "texts")
        for i, text in enumerate(request.texts):
            if config.max_text_bytes is not None:
                convert.check_text(text, f"texts[{i}]", config.max_text_bytes)
        sketches = _sketch_texts(state, list(request.texts))
    elif request.keys:
        keys = convert.check_keys(
            request.keys, max_batch=config.max_batch, max_key_bytes=config.max_key_bytes
        )
        sketches = [_stored_sketch(state.jaccard, key) for key in keys]
        exclude = list(keys)
    else:
        convert.check_batch_length(len(request.sketches), config.max_batch, "sketches")
        sketches = [
            _sketch(state, message, f"sketches[{i}]") for i, message in enumerate(request.sketches)
        ]
    present = [i for i, s in enumerate(sketches) if s is not None]
    found = state.jaccard.query_many(
        [cast(MinHashSketch, sketches[i]) for i in present],
        limit=limit,
        exclude=None if exclude is None else [exclude[i] for i in present],
    )
    answers: list[list[JaccardMatch]] = [[] for _ in sketches]
    for i, matches in zip(present, found, strict=True):
        answers[i] = matches
    response = pb.QueryResponse()
    for matches in answers:
        response.results.add(matches=matches_to_proto(matches))
    size = response.ByteSize()
    convert.check_reply_size(size, config.max_message_bytes, len(answers), len(answers))
    return response


def _stored_sketch(index: JaccardIndex, key: str) -> MinHashSketch | None:
    """The sketch a key is stored with, ready to query (its signature restored: from the set
    for "exact"), or None when not stored."""
    stored = index.get(key)
    if stored is None:
        return None
    if index.verify == "exact":
        return checked_sketch(
            stored.shingle_hashes, [], verify="exact", permutations=index.permutations
        )
    return stored


def near_duplicates(
    state: JaccardState,
    has_k: bool,
    max_work: int | None = None,
    send_pairs: bool = True,
    should_stop: Callable[[], bool] | None = None,
) -> JaccardDuplicates:
    """Pairs, clusters, flags and exact groups of one consistent copy
    (:meth:`JaccardIndex.near_duplicates`: WorkBudgetExceededError when its work estimate is
    above ``max_work``, CallCancelledError once ``should_stop`` returns True)."""
    refuse_k(has_k, "this call")
    return state.jaccard.near_duplicates(max_work, send_pairs=send_pairs, should_stop=should_stop)


def _jaccard(distance: int) -> float:
    """A pair's Jaccard from its distance in 1/SCALE units, as the double nearest its 4-decimal
    text (0.8281, not 0.8281000000000001)."""
    from permindex.near.jaccard import SCALE

    return round(1.0 - distance / SCALE, 4)


def pair_messages(
    found: JaccardDuplicates, chunk: int, should_stop: Callable[[], bool] | None = None
) -> Iterator[pb.PairsResponse]:
    """The pairs (key_a < key_b, sorted) as PairsResponse messages of at most ``chunk`` pairs,
    ``jaccard`` to 4 decimals (``1 - distance / 10^4``), each built when asked for."""
    keys = found.keys
    for a, b, distance in found.pair_chunks(max_pairs=chunk, should_stop=should_stop):
        yield pb.PairsResponse(
            pairs=[
                pb.Pair(key_a=keys[x], key_b=keys[y], jaccard=_jaccard(d))
                for x, y, d in zip(a.tolist(), b.tolist(), distance.tolist(), strict=True)
            ]
        )


def flags_messages(found: JaccardDuplicates, chunk: int) -> Iterator[pb.FlagsResponse]:
    """Flags with ``jaccard`` (the nearest key's, 4 decimals) in messages of ``chunk``."""
    flags = found.flags()
    for start in range(0, len(flags), chunk):
        yield pb.FlagsResponse(
            flags=[
                pb.Flag(
                    key=f.key,
                    nearest_key=f.nearest,
                    neighbors=f.neighbors,
                    jaccard=_jaccard(f.distance),
                )
                for f in flags[start : start + chunk]
            ]
        )


def export_messages(
    state: JaccardState, chunk: int, max_bytes: int = 1 << 20
) -> Iterator[pb.ExportResponse]:
    """Every (key, sketch_hex, added_at) of one consistent copy, in messages of at most
    ``chunk`` entries and about ``max_bytes`` bytes (a sketch in hex is 16 characters a
    shingle: a message holds fewer entries than a SimHash export's)."""
    index = state.jaccard
    keys, sketches, times = index.export()
    timed = index.expire_after is not None
    kind = KIND_MESSAGES[kind_of(index.verify)]
    response = pb.ExportResponse()
    size = 0
    for i, key in enumerate(keys):
        text = sketch_to_hex(sketches[i], index.verify)
        response.entries.add(
            key=key, sketch_hex=text, sketch_kind=kind, added_at=int(times[i]) if timed else 0
        )
        size += len(text) + len(key) + 16
        if len(response.entries) >= chunk or size >= max_bytes:
            yield response
            response = pb.ExportResponse()
            size = 0
    if len(response.entries):
        yield response


def get(state: JaccardState, request: pb.GetRequest) -> pb.GetResponse:
    """Get on a Jaccard collection: whether each key is stored and, when it is, its stored
    sketch in hex (as Export writes it) and the sketch's kind (no fingerprint)."""
    config = state.config
    keys = convert.check_keys(
        request.keys, max_batch=config.max_batch, max_key_bytes=config.max_key_bytes
    )
    index = state.jaccard
    kind = KIND_MESSAGES[kind_of(index.verify)]
    response = pb.GetResponse()
    for key in keys:
        stored = index.get(key)
        if stored is None:
            response.results.add(key=key, found=False)
        else:
            text = sketch_to_hex(stored, index.verify)
            response.results.add(key=key, found=True, sketch_hex=text, sketch_kind=kind)
    return response
