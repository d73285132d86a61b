"""Request building, argument checks and reply conversion of the client: protobuf messages in,
the results of :mod:`permindex.client.results` out. Every check runs before anything is sent.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Final

import numpy as np

from permindex.client.batching import document_size
from permindex.client.results import (
    CheckResult,
    CollectionInfo,
    Content,
    DocumentLike,
    DocumentResult,
    ServerStats,
    SketchHex,
)
from permindex.errors import InvalidArgumentError
from permindex.index import Match
from permindex.index.expiry import added_at_seconds
from permindex.index.jaccard import JaccardMatch, MinHashSketch
from permindex.index.jaccard.sketch import SketchKind
from permindex.index.memory import MemoryBreakdown
from permindex.v1 import index_pb2 as pb

__all__ = [
    "STATUS_NAMES",
    "check_counts",
    "check_fingerprints",
    "check_result",
    "check_utf8",
    "collection_info",
    "document_message",
    "document_messages",
    "document_result",
    "get_value",
    "matches",
    "server_stats",
    "sketch_hex",
]

#: A :class:`SketchHex`'s kind -> its ``SketchKind`` enum value.
SKETCH_KINDS: Final[dict[SketchKind, pb.SketchKind.ValueType]] = {
    "shingle_hashes": pb.SKETCH_KIND_SHINGLE_HASHES,
    "signature": pb.SKETCH_KIND_SIGNATURE,
}
_KIND_NAMES: Final[dict[int, SketchKind]] = {value: name for name, value in SKETCH_KINDS.items()}


def sketch_hex(message: Any) -> SketchHex:
    """The :class:`SketchHex` of a message with ``sketch_hex`` and ``sketch_kind``
    (``ExportEntry``, ``GetResult``); kind None when unspecified (an older server)."""
    return SketchHex(message.sketch_hex, _KIND_NAMES.get(message.sketch_kind))


def get_value(result: Any) -> int | SketchHex | None:
    """What :meth:`Client.get <permindex.client.Client.get>` gives for a ``GetResult``: the
    fingerprint (a SimHash collection), the stored sketch (a Jaccard collection, whose reply
    has ``sketch_hex``), or None when the key is not stored."""
    if not result.found:
        return None
    return sketch_hex(result) if result.sketch_hex else int(result.fingerprint)


#: Document status of a reply -> its name in the results.
STATUS_NAMES: Final = {
    pb.DOCUMENT_STATUS_ADDED: "added",
    pb.DOCUMENT_STATUS_REPLACED: "replaced",
    pb.DOCUMENT_STATUS_TOO_SHORT: "too_short",
    pb.DOCUMENT_STATUS_NEAR_DUPLICATE: "near_duplicate",
}


def check_utf8(value: object, what: str) -> None:
    """InvalidArgumentError naming ``what`` when ``value`` is a str UTF-8 cannot encode (a lone
    surrogate), which no message can carry; anything else passes (the server checks keys).
    O(1) for ASCII, else O(len)."""
    if not isinstance(value, str) or value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        raise InvalidArgumentError(
            f"{what} {value[:60]!r} cannot be encoded as UTF-8: {error.reason} (at position "
            f"{error.start}); keys and texts travel as UTF-8",
            value,
        ) from None


def document_message(
    key: str, content: Content, where: str, added_at: float | None = None
) -> pb.Document:
    """The message of one document (``where`` names it in an error), with its ``added_at``
    (Unix seconds, floored; None: unset, the server's clock).

    Raises:
        InvalidArgumentError: content neither an int (bool excluded) nor a str, a fingerprint
            outside [0, 2^64), or an ``added_at`` that is not a number >= 0
            (:func:`~permindex.index.expiry.added_at_seconds`).
    """
    if isinstance(content, bool) or not isinstance(content, int | str | MinHashSketch | SketchHex):
        raise InvalidArgumentError(
            f"{where}: content of key {key!r} is {type(content).__name__}; give an int "
            "(fingerprint), a str (text) or a MinHashSketch (permindex.minhash_sketch, for a "
            "Jaccard collection)",
            content,
        )
    seconds = 0
    if added_at is not None:
        try:
            seconds = added_at_seconds(added_at)
        except InvalidArgumentError as error:
            raise InvalidArgumentError(f"{where} (key {key!r}): {error}", added_at) from None
    check_utf8(key, f"{where}: key")
    if isinstance(content, str):
        check_utf8(content, f"{where}: the text of key {key!r}")
        return pb.Document(key=key, text=content, added_at=seconds)
    if isinstance(content, MinHashSketch):
        return pb.Document(key=key, sketch=sketch_message(content), added_at=seconds)
    if isinstance(content, SketchHex):
        unspecified = pb.SKETCH_KIND_UNSPECIFIED
        kind = unspecified if content.kind is None else SKETCH_KINDS.get(content.kind)
        if kind is None:
            raise InvalidArgumentError(
                f"{where}: the SketchHex of key {key!r} has kind {content.kind!r}; give "
                "'shingle_hashes', 'signature' or None",
                content.kind,
            )
        return pb.Document(key=key, sketch_hex=content.hex, sketch_kind=kind, added_at=seconds)
    if not 0 <= content < 1 << 64:
        raise InvalidArgumentError(
            f"{where}: fingerprint {content} of key {key!r} is not in [0, 2**64)", content
        )
    return pb.Document(key=key, fingerprint=content, added_at=seconds)


def document_messages(
    documents: Iterable[DocumentLike], start: int = 0
) -> Iterator[tuple[pb.Document, int]]:
    """(message, approximate size in bytes as :func:`~permindex.client.batching.document_size`)
    per document, read lazily; errors name the document as ``documents[start + i]``.

    Raises:
        InvalidArgumentError: a document that is not a ``(key, content)`` or ``(key, content,
            added_at)`` tuple (or list), or as :func:`document_message`.
    """
    for i, document in enumerate(documents, start):
        where = f"documents[{i}]"
        if not isinstance(document, tuple | list) or len(document) not in (2, 3):
            raise InvalidArgumentError(
                f"{where} is {type(document).__name__} {str(document)[:40]}; give (key, "
                "content) or (key, content, added_at)",
                document,
            )
        key, content = document[0], document[1]
        message = document_message(key, content, where, document[2] if len(document) == 3 else None)
        yield message, document_size(key, content if isinstance(content, str) else None)


def check_counts(**values: object) -> None:
    """Refuse, before anything is sent, an option the server takes as a uint32 (``k``, ``limit``)
    that is neither None nor an int in [0, 2^32).

    Raises:
        TypeError: a non-int (bool included).
        InvalidArgumentError: an int outside [0, 2^32), naming the option.
    """
    for name, value in values.items():
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise TypeError(f"{name} must be an int or None, not {type(value).__name__}")
        if not 0 <= int(value) < 1 << 32:
            raise InvalidArgumentError(f"{name} = {value} is outside 0 to 2**32 - 1", value)


def check_fingerprints(fingerprints: Iterable[int]) -> list[int]:
    """The fingerprints as a list.

    Raises:
        InvalidArgumentError: one is not an int (bool excluded) in [0, 2^64); a
            :class:`~permindex.MinHashSketch` or a str is told to go to ``query_jaccard`` (one
            line: the type, never the value's repr).
    """
    values = list(fingerprints)
    for i, value in enumerate(values):
        if isinstance(value, (MinHashSketch, str)):
            kind = "sketch" if isinstance(value, MinHashSketch) else "text"
            raise InvalidArgumentError(
                f"fingerprints[{i}] is a {type(value).__name__}, not a fingerprint (an int in "
                f"[0, 2**64)); to query a Jaccard collection with it, call "
                f'query_jaccard([...], by="{kind}")'
                + ("; for a SimHash collection, query(permindex.simhash(text))" if kind == "text"
                   else ""),
                value,
            )  # fmt: skip
        if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 1 << 64:
            shown = repr(value)
            if len(shown) > 80 or "\n" in shown:  # an array: its type, not 400 lines
                shown = f"a {type(value).__name__}"
            raise InvalidArgumentError(
                f"fingerprints[{i}] = {shown} is not an int in [0, 2**64)", value
            )
    return values


def sketch_message(sketch: MinHashSketch) -> pb.MinHashSketch:
    """The ``MinHashSketch`` message of a sketch (:func:`permindex.minhash_sketch`)."""
    return pb.MinHashSketch(
        shingle_hashes=np.asarray(sketch.shingle_hashes, dtype=np.uint64).tolist(),
        signature=np.asarray(sketch.signature, dtype=np.uint32).tolist(),
    )


def matches(message: Any) -> list[Match]:
    """The :class:`~permindex.index.Match` list of a repeated ``Match`` field."""
    return [Match(m.key, m.fingerprint, m.distance) for m in message]


def any_matches(message: Any) -> list[Match] | list[JaccardMatch]:
    """The matches of a repeated ``Match`` field: :class:`~permindex.index.Match` items, or
    :class:`~permindex.JaccardMatch` items from a Jaccard collection (``jaccard`` set: always
    above 0 there, as it is at least the threshold)."""
    if any(m.jaccard for m in message):
        return jaccard_matches(message)
    return matches(message)


def jaccard_matches(message: Any) -> list[JaccardMatch]:
    """The :class:`~permindex.JaccardMatch` list of a repeated ``Match`` field."""
    return [JaccardMatch(m.key, m.jaccard) for m in message]


def document_result(message: Any) -> DocumentResult:
    """The :class:`DocumentResult` of an ``AddResult`` message."""
    fingerprint = message.fingerprint if message.HasField("fingerprint") else None
    return DocumentResult(message.key, STATUS_NAMES[message.status], fingerprint)


def check_result(message: Any) -> CheckResult:
    """The :class:`CheckResult` of a ``CheckAndAddResult`` message."""
    fingerprint = message.fingerprint if message.HasField("fingerprint") else None
    return CheckResult(
        message.key, STATUS_NAMES[message.status], fingerprint, any_matches(message.matches)
    )


def collection_info(message: Any) -> CollectionInfo:
    """The :class:`CollectionInfo` of a ``CollectionInfo`` message."""
    design = message.design
    return CollectionInfo(
        message.name,
        message.count,
        message.memory_bytes,
        design.blocks,
        design.leading,
        design.tables,
        design.k,
        message.shingle_size,
        message.min_words,
        message.expire_after,
        # empty from a server older than the field: it voted multiset unless run with --vote set
        "set" if message.vote == "set" else "multiset",
        message.method or "simhash",
        message.threshold,
        message.permutations,
        message.bands,
        message.rows,
        message.verify,
    )


def server_stats(reply: Any) -> ServerStats:
    """The :class:`ServerStats` of a ``StatsResponse``."""
    parts = reply.memory_breakdown
    return ServerStats(
        count=reply.count,
        memory_bytes=reply.memory_bytes,
        resident_memory_bytes=reply.resident_memory_bytes,
        blocks=reply.design.blocks,
        leading=reply.design.leading,
        tables=reply.design.tables,
        k=reply.design.k,
        uptime_seconds=reply.uptime_seconds,
        last_snapshot_unix_seconds=(
            reply.last_snapshot_unix_seconds
            if reply.HasField("last_snapshot_unix_seconds")
            else None
        ),
        last_snapshot_count=reply.last_snapshot_count,
        last_snapshot_bytes=reply.last_snapshot_bytes,
        version=reply.version,
        collection=reply.collection or "default",
        expire_after=reply.expire_after,
        expired_pending=reply.expired_pending,
        memory_breakdown=MemoryBreakdown(
            fingerprints=parts.fingerprint_bytes,
            liveness=parts.liveness_bytes,
            times=parts.time_bytes,
            tables=parts.table_bytes,
            key_bytes=parts.key_bytes,
            key_offsets=parts.key_offset_bytes,
            key_hashes=parts.key_hash_bytes,
            key_map=parts.key_map_bytes,
        ),
        log_buffer_bytes=parts.log_buffer_bytes,
        max_memory_bytes=reply.max_memory_bytes,
        server_memory_bytes=reply.server_memory_bytes,
    )
