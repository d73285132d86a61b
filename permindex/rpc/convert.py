"""Conversions between permindex.v1 messages and the domain (keys, fingerprints, matches), and the
per-request validation that runs before anything is changed.

Every check here raises a domain error (:class:`~permindex.errors.InvalidArgumentError`,
:class:`~permindex.errors.LimitExceededError`); the servicer turns it into a status code in one
place. Messages name the offending element by its position in the request, e.g.
``documents[3]: key is empty``, so that a client can find and fix it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError, InvalidKeyError, LimitExceededError
from permindex.index import ExpiringIndex, Index, Match
from permindex.index.hamming import MAX_FINGERPRINT
from permindex.index.join.clusters import NearDuplicates
from permindex.index.keys.rule import MAX_KEY_BYTES, validate_key
from permindex.index.search.batch_queries import QueryColumns
from permindex.index.tables.permutation import Design, query_k
from permindex.rpc.wire import PairEncoder
from permindex.text.fingerprint import Vote, simhash_many
from permindex.v1 import index_pb2 as pb

__all__ = [
    "KEYS_PER_MESSAGE",
    "MAX_KEY_BYTES",
    "PAIRS_PER_MESSAGE",
    "PAIR_MESSAGE_BYTES",
    "DocumentBatch",
    "check_batch_length",
    "check_k",
    "check_key",
    "check_keys",
    "check_reply_size",
    "check_text",
    "clusters_to_proto",
    "columns_part_wire_bytes",
    "columns_to_proto",
    "design_to_proto",
    "documents_from_proto",
    "exact_groups_to_proto",
    "export_to_proto",
    "fingerprint_from_hex",
    "fingerprints_from_bytes",
    "flags_to_proto",
    "items_per_message",
    "key_refusal",
    "limit_from",
    "matches_to_proto",
    "pair_chunks_to_proto",
    "query_fingerprints",
    "query_wire_bytes",
    "reply_room",
]

#: Most pairs in one PairsResponse message.
PAIRS_PER_MESSAGE: Final = 10_000
#: About how many bytes a PairsResponse message holds (:func:`pair_chunks_to_proto`).
PAIR_MESSAGE_BYTES: Final = 1 << 20
_SHOWN_KEY_CHARS: Final = 60  # a key quoted in an error message is cut to this many characters


def _shown(key: str) -> str:
    """``key`` quoted for an error message, shortened when long."""
    if len(key) <= _SHOWN_KEY_CHARS:
        return repr(key)
    return repr(key[:_SHOWN_KEY_CHARS]) + f"... ({len(key)} characters)"


#: A fingerprint in hex as the requests' ``fingerprint_hex`` fields take it: exactly 16 hex
#: digits, either case, nothing else (``int(value, 16)`` alone would also take a sign, a ``0x``
#: prefix, ``_`` and spaces).
_HEX_FINGERPRINT: Final = re.compile(r"[0-9a-fA-F]{16}")
_HEX_DIGITS: Final = frozenset("0123456789abcdefABCDEF")


def fingerprint_from_hex(value: str, where: str) -> int:
    """A fingerprint sent in hex (``Document.fingerprint_hex``, ``QueryRequest.fingerprints_hex``)
    as an int in [0, 2^64): ``value`` must be exactly 16 hex digits, either case, the form every
    permindex output writes. O(len(value)).

    Raises:
        InvalidArgumentError: anything else (fewer or more digits, a ``0x`` prefix, a sign,
            spaces, a decimal number); the message starts with ``where`` (e.g.
            ``documents[3].fingerprint_hex``), quotes the value and says how to write it.
    """
    if _HEX_FINGERPRINT.fullmatch(value):
        return int(value, 16)
    prefixed = value[:2] in ("0x", "0X")
    digits = value[2:] if prefixed else value
    is_hex = digits != "" and all(c in _HEX_DIGITS for c in digits)
    if is_hex and len(digits) > 16:
        problem = f"has {len(digits)} hex digits, more than 64 bits"
        if digits.isdigit() and int(digits) <= MAX_FINGERPRINT:
            problem += f" (if it is decimal, its hex is {int(digits):016x})"
    elif is_hex and prefixed:
        problem = f"has a 0x prefix; write it as {int(digits, 16):016x}"
    elif is_hex:
        problem = f"has {len(digits)} hex digits, not 16; zero-padded: {int(digits, 16):016x}"
    elif value == "":
        problem = "is empty"
    else:
        problem = "is not hex"
    raise InvalidArgumentError(
        f"{where}: {_shown(value)} {problem}: a fingerprint in hex is exactly 16 hex digits "
        "(e.g. 7bdb22cf023304c1)",
        value,
    )


def query_fingerprints(
    fingerprints: Sequence[int], fingerprints_hex: Sequence[str], max_batch: int
) -> Sequence[int]:
    """The fingerprints of a QueryRequest, from ``fingerprints`` (fixed64) or from
    ``fingerprints_hex`` (each checked by :func:`fingerprint_from_hex`), in request order.

    Returns:
        ``fingerprints`` itself when the hex field is empty, else a new list of ints.

    Raises:
        InvalidArgumentError: both fields non-empty, or a malformed hex value (named
            ``fingerprints_hex[i]``).
        LimitExceededError: more than ``max_batch`` fingerprints.
    """
    if not fingerprints_hex:
        check_batch_length(len(fingerprints), max_batch, "fingerprints")
        return fingerprints
    if fingerprints:
        raise InvalidArgumentError(
            f"both fingerprints ({len(fingerprints):,}) and fingerprints_hex "
            f"({len(fingerprints_hex):,}) are set: send the query's fingerprints in one of them",
            len(fingerprints),
        )
    check_batch_length(len(fingerprints_hex), max_batch, "fingerprints")
    return [
        fingerprint_from_hex(value, f"fingerprints_hex[{i}]")
        for i, value in enumerate(fingerprints_hex)
    ]


def check_batch_length(n: int, limit: int, what: str) -> None:
    """Refuse a request of more than ``limit`` elements.

    Raises:
        LimitExceededError: ``n > limit``; the message names the count, the limit and the remedy.
    """
    if n > limit:
        raise LimitExceededError(
            f"{n:,} {what} in one request; the server's limit is {limit:,} (max_batch): "
            "split the request (permindex ingest --batch-size, the Client's batch_size)",
            limit=limit,
            actual=n,
        )


def check_key(key: str, where: str, max_bytes: int = MAX_KEY_BYTES) -> None:
    """Refuse a key that breaks the key rule (:func:`permindex.index.keys.rule.validate_key`) with
    the server's limit ``max_bytes`` (``max_key_bytes``, at most :data:`MAX_KEY_BYTES`), in the
    server's wording (:func:`key_refusal`).

    Raises:
        InvalidKeyError: (an :class:`~permindex.errors.InvalidArgumentError`) an empty key, or
            one of more than ``max_bytes`` UTF-8 bytes.
    """
    try:
        validate_key(key, max_bytes=max_bytes)
    except InvalidKeyError as error:
        raise key_refusal(error, where) from None


def key_refusal(error: InvalidKeyError, where: str) -> InvalidKeyError:
    """The server's wording of a refused key: ``where`` (e.g. ``documents[3]``) first, then
    what to fix; the same reason, size and limit as ``error``."""
    key = str(error.value)
    if error.reason == "empty":
        message = f"{where}: key is empty; every document needs a key"
    elif error.reason == "encoding":
        message = f"{where}: key {_shown(key)} is not valid UTF-8 text"
    else:
        message = (
            f"{where}: key {_shown(key)} is {error.size:,} UTF-8 bytes; the limit is "
            f"{error.limit:,} (max_key_bytes)"
        )
    return InvalidKeyError(message, key, error.reason, error.size, error.limit)


def check_text(text: str, where: str, max_bytes: int) -> None:
    """Refuse a text of more than ``max_bytes`` UTF-8 bytes.

    Raises:
        LimitExceededError: with ``where`` (e.g. ``documents[3]``) in the message.
    """
    if len(text) * 4 > max_bytes:
        size = len(text) if len(text) > max_bytes else len(text.encode("utf-8", "surrogatepass"))
        if size > max_bytes:
            raise LimitExceededError(
                f"{where}: text of {size:,}+ UTF-8 bytes; the server's limit is {max_bytes:,} "
                "(max_text_bytes)",
                limit=max_bytes,
                actual=size,
            )


def check_keys(
    keys: Sequence[str], *, max_batch: int, what: str = "keys", max_key_bytes: int = MAX_KEY_BYTES
) -> list[str]:
    """Check the length of a batch of keys and every key in it; the keys as a list.

    Raises:
        LimitExceededError: more than ``max_batch`` keys.
        InvalidArgumentError: an empty or over-long key (named ``keys[i]``).
    """
    check_batch_length(len(keys), max_batch, what)
    result = list(keys)
    for i, key in enumerate(result):
        try:
            validate_key(key, max_bytes=max_key_bytes)
        except InvalidKeyError as error:
            raise key_refusal(error, f"keys[{i}]") from None
    return result


def check_k(k: int | None, index_k: int, design: Design) -> int | None:
    """``k`` checked by the index's rule (:func:`permindex.index.tables.permutation.query_k`); None
    (the proto's absent k: the index's own) is passed on as None, which keeps the index's
    fast path for a query without options.

    Raises:
        InvalidArgumentError: ``k > index_k``; the message gives the largest k allowed.
    """
    return k if k is None else query_k(k, index_k, design)


def limit_from(limit: int | None) -> int | None:
    """The proto's ``limit`` (absent or 0: no limit) as the index's (None: no limit)."""
    return limit if limit else None


@dataclass(frozen=True)
class DocumentBatch:
    """A validated batch of documents, fingerprints computed.

    Attributes:
        keys: the documents' keys, in request order.
        fingerprints: the fingerprint of each document (sent or computed from its text), or
            None for a text that is too short.
        added_at: each document's ``added_at``, Unix seconds (0: the server's clock), >= 0.
    """

    keys: list[str]
    fingerprints: list[int | None]
    added_at: list[int]

    def stored_added_at(self) -> NDArray[np.int64]:
        """The (m,) ``added_at`` of the documents that have a fingerprint, in order."""
        return np.array(
            [t for t, fp in zip(self.added_at, self.fingerprints, strict=True) if fp is not None],
            dtype=np.int64,
        )

    @property
    def too_short(self) -> int:
        """Documents with no fingerprint."""
        return sum(1 for fp in self.fingerprints if fp is None)


def documents_from_proto(
    documents: Sequence[pb.Document],
    *,
    max_batch: int,
    shingle_size: int,
    min_words: int = 0,
    max_key_bytes: int = MAX_KEY_BYTES,
    max_text_bytes: int | None = None,
    vote: Vote = "multiset",
) -> DocumentBatch:
    """Validate every document of a request, then fingerprint the texts (server-side SimHash
    with ``shingle_size`` and ``vote``; a text of fewer than ``min_words`` words has no
    fingerprint).

    All documents are checked before any text is fingerprinted, so a malformed request costs
    little. Call this outside the index's lock: fingerprinting a large batch takes a while.

    A document's content is its ``fingerprint``, its ``fingerprint_hex`` (checked by
    :func:`fingerprint_from_hex`) or its ``text``.

    Raises:
        LimitExceededError: more than ``max_batch`` documents.
        InvalidArgumentError: a document with an empty or over-long key, with no content,
            with a fingerprint_hex that is not 16 hex digits, or with a negative
            ``added_at`` (named ``documents[i]``).
        LimitExceededError: a text of more than ``max_text_bytes`` UTF-8 bytes.
    """
    check_batch_length(len(documents), max_batch, "documents")
    keys: list[str] = []
    kinds: list[str] = []
    fingerprints: list[int | None] = []
    for i, document in enumerate(documents):
        key = document.key
        try:
            validate_key(key, max_bytes=max_key_bytes)
        except InvalidKeyError as error:
            raise key_refusal(error, f"documents[{i}]") from None
        content = document.WhichOneof("content")
        if content is None:
            raise InvalidArgumentError(
                f"documents[{i}] (key {_shown(key)}): no content; set its fingerprint, its "
                "fingerprint_hex or its text",
                key,
            )
        if document.added_at < 0:
            raise InvalidArgumentError(
                f"documents[{i}] (key {_shown(key)}): added_at {document.added_at} is negative; "
                "it is Unix seconds (0: the server's clock)",
                document.added_at,
            )
        if content == "fingerprint":
            fingerprints.append(document.fingerprint)
        elif content == "fingerprint_hex":
            where = f"documents[{i}].fingerprint_hex (key {_shown(key)})"
            fingerprints.append(fingerprint_from_hex(document.fingerprint_hex, where))
        elif content in ("sketch", "sketch_hex"):
            raise InvalidArgumentError(
                f"documents[{i}] (key {_shown(key)}) sends a MinHash {content}: sketches are for "
                "Jaccard collections (method minhash); this collection is SimHash: send a "
                "fingerprint or the text",
                key,
            )
        else:
            if max_text_bytes is not None:
                check_text(document.text, f"documents[{i}] (key {_shown(key)})", max_text_bytes)
            fingerprints.append(None)
        keys.append(key)
        kinds.append(content)
    rows = [i for i, kind in enumerate(kinds) if kind == "text"]
    if rows:  # every text of the request in one kernel call
        found, valid = simhash_many(
            [documents[i].text for i in rows],
            shingle_size=shingle_size,
            min_words=min_words,
            vote=vote,
        )
        for i, fp, ok in zip(rows, found.tolist(), valid.tolist(), strict=True):
            if ok:
                fingerprints[i] = fp
    added_at = [document.added_at for document in documents]
    return DocumentBatch(keys=keys, fingerprints=fingerprints, added_at=added_at)


def matches_to_proto(matches: Iterable[Match]) -> list[pb.Match]:
    """Domain matches as ``permindex.v1.Match`` messages, order kept."""
    return [pb.Match(key=m.key, fingerprint=m.fingerprint, distance=m.distance) for m in matches]


def fingerprints_from_bytes(data: bytes, max_batch: int) -> NDArray[np.uint64]:
    """The packed fingerprints of a QueryColumnsRequest (n x 8 bytes, little-endian unsigned
    64-bit) as a read-only (n,) uint64 array over ``data`` (no copy on little-endian machines).

    Raises:
        InvalidArgumentError: ``len(data)`` is not a multiple of 8 (the message gives it).
        LimitExceededError: more than ``max_batch`` fingerprints.
    """
    if len(data) % 8:
        raise InvalidArgumentError(
            f"fingerprints is {len(data):,} bytes, not a multiple of 8: send n fingerprints as "
            "n x 8 bytes, little-endian unsigned 64-bit",
            len(data),
        )
    check_batch_length(len(data) // 8, max_batch, "fingerprints")
    return np.frombuffer(data, dtype="<u8").astype(np.uint64, copy=False)


#: Wire bytes of one match in a QueryColumnsResponse besides its key: 4 (position) + 8
#: (fingerprint) + 1 (distance).
COLUMN_MATCH_WIRE_BYTES: Final = 4 + 8 + 1
#: Upper bound of the framing of a QueryColumnsResponse's three packed columns (tag and length).
COLUMNS_WIRE_BYTES: Final = 3 * 6


#: Upper bound of one Match on the wire besides its key and the key's tag and length: the
#: Match's own tag and length (3), the fingerprint (9) and the distance (2).
MATCH_WIRE_BYTES: Final = 3 + 9 + 2
#: Upper bound of one QueryResult on the wire besides its matches: its tag and length.
RESULT_WIRE_BYTES: Final = 6


def _key_bytes(found: Sequence[Sequence[Match]]) -> tuple[int, int]:
    """(matches, UTF-8 bytes of their keys with each key's tag and length) over ``found``."""
    keys = [match.key for matches in found for match in matches]
    return len(keys), _keys_wire_bytes(keys)


def query_wire_bytes(found: Sequence[Sequence[Match]]) -> int:
    """An upper bound of the wire size, bytes, of the QueryResults of ``found`` (the matches
    of each query): :data:`RESULT_WIRE_BYTES` per query, :data:`MATCH_WIRE_BYTES` per match,
    plus each key with its tag and length. Loose by up to 5 bytes a query and 4 a match."""
    matches, key_bytes = _key_bytes(found)
    return len(found) * RESULT_WIRE_BYTES + matches * MATCH_WIRE_BYTES + key_bytes


def _keys_wire_bytes(keys: Sequence[str]) -> int:
    """UTF-8 bytes of ``keys`` with each key's tag and length: in one pass over their
    concatenation when every key is under 128 bytes (each then has a 1-byte tag and a 1-byte
    length; a key of fewer than 32 characters, or ASCII of fewer than 128, is), else key by
    key. Exact. O(total characters)."""
    if not keys:
        return 0
    joined = "".join(keys)
    ascii_only = joined.isascii()
    longest = max(map(len, keys))
    if longest < 32 or (ascii_only and longest < 128):
        utf8 = len(joined) if ascii_only else len(joined.encode("utf-8", "surrogatepass"))
        return utf8 + 2 * len(keys)
    size = 0
    for key in keys:
        length = len(key) if key.isascii() else len(key.encode("utf-8", "surrogatepass"))
        size += length + (2 if length < 128 else 3)  # keys are at most MAX_KEY_BYTES (< 2^14)
    return size


def columns_part_wire_bytes(part: QueryColumns) -> int:
    """The wire size, bytes, of one slice's part of a QueryColumnsResponse (its answer in
    columns, ``Index.query_many(..., columns=True)``), exact but for the framing of the three
    packed columns (counted as :data:`COLUMNS_WIRE_BYTES` per part):
    :data:`COLUMN_MATCH_WIRE_BYTES` per match plus each key with its tag and length."""
    return (
        COLUMNS_WIRE_BYTES + len(part.keys) * COLUMN_MATCH_WIRE_BYTES + _keys_wire_bytes(part.keys)
    )


def columns_to_proto(parts: Sequence[tuple[int, QueryColumns]]) -> pb.QueryColumnsResponse:
    """The answers of consecutive slices of a request's fingerprints, each ``(position of its
    first fingerprint, its QueryColumns)``, as one ``QueryColumnsResponse`` (wire format in the
    .proto): query positions as (m,) little-endian uint32 bytes, fingerprints as (m,)
    little-endian uint64 bytes, distances as (m,) uint8 bytes, and the m keys, all grouped by
    query position in ascending order. numpy builds the three packed columns; no object is
    made per match but its key. O(n + m)."""
    positions: list[NDArray[np.uint32]] = []
    fingerprints: list[NDArray[np.uint64]] = []
    distances: list[NDArray[np.uint8]] = []
    keys: list[str] = []
    for start, part in parts:
        if not part.keys:  # no match: nothing of it on the wire
            continue
        counts = np.diff(part.offsets)
        positions.append(np.repeat(np.arange(start, start + counts.size, dtype="<u4"), counts))
        fingerprints.append(part.fingerprints)
        distances.append(part.distances)
        keys.extend(part.keys)
    if not keys:
        return pb.QueryColumnsResponse()
    return pb.QueryColumnsResponse(
        query_positions=np.concatenate(positions).astype("<u4", copy=False).tobytes(),
        fingerprints=np.concatenate(fingerprints).astype("<u8", copy=False).tobytes(),
        distances=np.concatenate(distances).astype(np.uint8, copy=False).tobytes(),
        keys=keys,
    )


def pair_chunks_to_proto(
    found: NearDuplicates, chunk: int, should_stop: Callable[[], bool] | None = None
) -> Iterator[bytes]:
    """The pairs of ``found`` in their documented order (key_a, then key_b) as serialized
    PairsResponse messages (wire bytes, :class:`permindex.rpc.wire.PairEncoder`) of at most
    ``chunk`` pairs and about :data:`PAIR_MESSAGE_BYTES` each (fewer pairs when keys are long:
    what a client that stops reading leaves buffered is a few such messages), each produced
    only when asked for (:meth:`NearDuplicates.pair_chunks`: memory bounded by one key's
    neighbourhood and one chunk, not by the number of pairs)."""
    if len(found) == 0:
        return
    encoder = PairEncoder(found.keys, chunk)
    per_message = encoder.pairs_per_message(PAIR_MESSAGE_BYTES)
    for a, b, distance in found.pair_chunks(max_pairs=per_message, should_stop=should_stop):
        yield encoder.encode(a, b, distance)


#: One consistent export: the compact form of :meth:`Index.export_compact` and, for an
#: index with expiry, the (n,) uint32 times of its keys (None without).
ExportCopy = tuple[
    NDArray[np.int64], NDArray[np.uint8], NDArray[np.uint64], NDArray[np.uint32] | None
]


def export_copy(index: Index) -> ExportCopy:
    """One consistent copy of ``index`` for Export, with its times when it has expiry
    (:meth:`ExpiringIndex.export_timed_compact`). O(n + key bytes), under the index's lock."""
    if isinstance(index, ExpiringIndex):
        return index.export_timed_compact()
    return (*index.export_compact(), None)


def export_to_proto(
    lengths: NDArray[np.int64],
    blob: NDArray[np.uint8],
    fingerprints: NDArray[np.uint64],
    times: NDArray[np.uint32] | None = None,
    *,
    chunk: int = 10_000,
) -> Iterator[pb.ExportResponse]:
    """An export in the compact form of :meth:`Index.export_compact` (and the keys' ``times``,
    Unix seconds, as each entry's ``added_at``; None: 0) as ExportResponse messages of at most
    ``chunk`` entries, each built only when asked for."""
    ends = np.cumsum(lengths + 1)  # each key is followed by a NUL in blob
    for start in range(0, len(fingerprints), chunk):
        stop = min(start + chunk, len(fingerprints))
        first = int(ends[start - 1]) if start else 0
        data = blob[first : int(ends[stop - 1])].tobytes()
        response = pb.ExportResponse()
        offset = 0
        added = times[start:stop].tolist() if times is not None else [0] * (stop - start)
        for length, fingerprint, added_at in zip(
            lengths[start:stop].tolist(), fingerprints[start:stop].tolist(), added, strict=True
        ):
            key = data[offset : offset + length].decode("utf-8", "surrogatepass")
            response.entries.add(key=key, fingerprint=fingerprint, added_at=added_at)
            offset += length + 1
        yield response


#: Bytes of a reply message left for gRPC's framing: a reply is kept under the message limit
#: less this.
REPLY_FRAMING_BYTES: Final = 1024


def reply_room(max_message_bytes: int) -> int:
    """The most bytes a reply's message may take under a ``max_message_bytes`` limit:
    the limit less :data:`REPLY_FRAMING_BYTES`."""
    return max_message_bytes - REPLY_FRAMING_BYTES


def check_reply_size(size: int, max_message_bytes: int, done: int, n: int) -> None:
    """Refuse a reply of ``size`` bytes (after ``done`` of ``n`` fingerprints) that would not
    fit the message limit.

    Raises:
        LimitExceededError: ``size`` is over :func:`reply_room` of the limit; the message says
            how to ask for less.
    """
    if size > reply_room(max_message_bytes):
        raise LimitExceededError(
            f"the answer is over the {max_message_bytes}-byte message limit "
            f"(after {done} of {n} fingerprints): ask with a limit, a smaller k, or fewer "
            "fingerprints per request",
            limit=max_message_bytes,
            actual=size,
        )


def items_per_message(max_message_bytes: int, item_bytes: int, most: int) -> int:
    """How many items of at most ``item_bytes`` bytes each (on the wire, framing included) a
    streamed reply may put in one message so that it never exceeds ``max_message_bytes``: at most
    ``most``, at least 1."""
    return max(1, min(most, reply_room(max_message_bytes) // item_bytes))


#: Upper bound of one Pair on the wire, bytes: two keys of MAX_KEY_BYTES and their framing.
PAIR_WIRE_BYTES: Final = 2 * (MAX_KEY_BYTES + 3) + 8
#: Upper bound of one key in a Clusters/Flags/ExactDuplicates message, bytes; a flag carries two.
KEY_WIRE_BYTES: Final = 2 * (MAX_KEY_BYTES + 3) + 32


def design_to_proto(design: Design, k: int) -> pb.Design:
    """The table design and the index's k as a ``permindex.v1.Design``."""
    return pb.Design(blocks=design.blocks, leading=design.leading, tables=design.num_tables, k=k)


#: Most keys in one ClustersResponse or ExactDuplicatesResponse message, and most flags in one
#: FlagsResponse.
KEYS_PER_MESSAGE: Final = 10_000


def _key_groups_in_parts(
    groups: Sequence[Sequence[str]], chunk: int
) -> Iterator[list[tuple[int, int, Sequence[str]]]]:
    """Groups of keys packed into messages of at most ``chunk`` keys: per message a list of
    (group id, group size, keys of this part); a group larger than the room left is split into
    consecutive parts that share its id."""
    message: list[tuple[int, int, Sequence[str]]] = []
    room = chunk
    for gid, keys in enumerate(groups):
        start = 0
        while start < len(keys):
            if room == 0:
                yield message
                message, room = [], chunk
            part = keys[start : start + room]
            message.append((gid, len(keys), part))
            room -= len(part)
            start += len(part)
    if message:
        yield message


def clusters_to_proto(
    clusters: Sequence[Sequence[str]], chunk: int = KEYS_PER_MESSAGE
) -> Iterator[pb.ClustersResponse]:
    """Clusters (lists of keys, in answer order) as ClustersResponse messages of at most
    ``chunk`` keys each; none when there are no clusters."""
    for message in _key_groups_in_parts(clusters, chunk):
        yield pb.ClustersResponse(
            clusters=[pb.Cluster(id=gid, size=size, keys=part) for gid, size, part in message]
        )


def exact_groups_to_proto(
    groups: Sequence[tuple[int, Sequence[str]]], chunk: int = KEYS_PER_MESSAGE
) -> Iterator[pb.ExactDuplicatesResponse]:
    """(fingerprint, keys) groups as ExactDuplicatesResponse messages of at most ``chunk`` keys
    each; none when there are no groups."""
    fingerprints = [fingerprint for fingerprint, _ in groups]
    for message in _key_groups_in_parts([keys for _, keys in groups], chunk):
        yield pb.ExactDuplicatesResponse(
            groups=[
                pb.ExactDuplicateGroup(id=gid, fingerprint=fingerprints[gid], size=size, keys=part)
                for gid, size, part in message
            ]
        )


def flags_to_proto(
    flags: Sequence[tuple[str, str, int, int]], chunk: int = KEYS_PER_MESSAGE
) -> Iterator[pb.FlagsResponse]:
    """(key, nearest key, distance, neighbors) flags as FlagsResponse messages of at most
    ``chunk`` flags each; none when there are no flags."""
    for start in range(0, len(flags), chunk):
        yield pb.FlagsResponse(
            flags=[
                pb.Flag(key=key, nearest_key=nearest, distance=distance, neighbors=neighbors)
                for key, nearest, distance, neighbors in flags[start : start + chunk]
            ]
        )
