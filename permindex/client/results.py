"""The results of :class:`~permindex.client.Client` calls: small frozen dataclasses and the
documents' types (no grpc, no protobuf), in the package's own terms.

Fingerprints are Python ints in [0, 2^64); a document's content is an ``int`` (its fingerprint)
or a ``str`` (its text, fingerprinted by the server), and it may carry the time it was crawled
(:class:`Document`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index import Match
from permindex.index.jaccard import JaccardMatch, MinHashSketch
from permindex.index.jaccard.sketch import SketchKind
from permindex.index.memory import MemoryBreakdown
from permindex.text.fingerprint import Vote

__all__ = [
    "AddResult",
    "CheckResult",
    "CollectionInfo",
    "ColumnMatches",
    "Content",
    "Document",
    "DocumentLike",
    "DocumentResult",
    "IngestResult",
    "RemoveResult",
    "ServerStats",
    "SketchHex",
    "SnapshotResult",
    "ingest_result_of",
]


class SketchHex(NamedTuple):
    """A Jaccard collection's stored sketch in hex, as an export carries it
    (``ExportEntry.sketch_hex`` and ``sketch_kind``): what :meth:`Client.iter_export
    <permindex.client.Client.iter_export>` yields for a Jaccard collection's entry (and
    :meth:`Client.get <permindex.client.Client.get>` for a stored key), and what
    ``add``/``ingest`` send back as ``Document.sketch_hex`` with its ``sketch_kind`` (an import
    restores the sketch exactly).

    Attributes:
        hex: the sketch, lower-case hex, back to back: 16 hex digits a shingle hash (``kind``
            ``"shingle_hashes"``, from a ``verify="exact"`` collection) or 8 a signature value
            (``"signature"``, from a ``verify="signature"`` collection).
        kind: ``"shingle_hashes"``, ``"signature"`` or None (not said: sent without a kind, the
            server reads the hex as the kind its collection keeps; from a server older than
            the kind, None). A server refuses a signature sent to a ``verify="exact"``
            collection; shingle hashes sent to a ``verify="signature"`` one are signed there.

    >>> from permindex.client import SketchHex
    >>> sketch = SketchHex("00000000000000ff", "shingle_hashes")
    >>> sketch.hex, sketch.kind
    ('00000000000000ff', 'shingle_hashes')
    """

    hex: str
    kind: SketchKind | None = None


#: A document's content: its fingerprint (int in [0, 2^64)), its text (str), or for a Jaccard
#: collection its sketch (:func:`permindex.minhash_sketch`, or a :class:`SketchHex` of an
#: export).
Content = int | str | MinHashSketch | SketchHex


class Document(NamedTuple):
    """A document with the time it was crawled: ``Document(key, content, added_at=None)``, a
    3-tuple ``(key, content, added_at)``.

    ``added_at`` is Unix seconds (an int, or a float, floored), for a collection with
    ``expire_after``: the entry expires ``expire_after`` seconds after it (an import of an
    earlier crawl). None or 0: the server's clock at the write; a time in the future counts as
    the server's clock. A collection without expiry ignores it. Checked before anything is
    sent (:func:`~permindex.index.expiry.added_at_seconds`): a negative, non-finite or
    non-number time is an :class:`~permindex.errors.InvalidArgumentError`.
    """

    key: str
    content: Content
    added_at: float | None = None


#: A document: ``(key, content)``, or ``(key, content, added_at)`` (a :class:`Document`).
DocumentLike = tuple[str, Content] | tuple[str, Content, float | None]


@dataclass(frozen=True)
class DocumentResult:
    """One document of an add: ``status`` is ``"added"``, ``"replaced"`` or ``"too_short"``;
    ``fingerprint`` the one stored (None when too short)."""

    key: str
    status: str
    fingerprint: int | None


@dataclass(frozen=True)
class AddResult:
    """The reply to :meth:`Client.add`: one result per document, in order, and the counts."""

    results: list[DocumentResult]
    added: int
    replaced: int
    too_short: int


@dataclass(frozen=True)
class IngestResult:
    """The counts of :meth:`Client.ingest` over every acknowledged batch, and what was in flight.

    ``documents``, ``added``, ``replaced``, ``too_short`` and ``batches`` count what the server
    acknowledged: stored for sure. ``in_flight`` documents (in ``in_flight_batches`` batches)
    were sent, or handed to grpc to send, and not acknowledged when the stream ended: each of
    those batches may or may not be stored (delivery is at-least-once; re-sending them is safe,
    as adding a key again replaces it). Both are 0 after an ingest that completed.
    """

    documents: int
    added: int
    replaced: int
    too_short: int
    batches: int
    in_flight: int = 0
    in_flight_batches: int = 0


@dataclass(frozen=True)
class CheckResult:
    """One document of a check-and-add: ``status`` is ``"added"``, ``"replaced"``,
    ``"near_duplicate"`` or ``"too_short"``; ``matches`` the other keys within k at the time of
    the check (the document was stored only if there were none)."""

    key: str
    status: str
    fingerprint: int | None
    matches: list[Match] | list[JaccardMatch]

    @property
    def added(self) -> bool:
        """Whether the document is now stored."""
        return self.status in ("added", "replaced")


@dataclass(frozen=True, eq=False)
class ColumnMatches:
    """The matches of :meth:`Client.query_columns` as columns: entry j of each describes match j.

    Matches are grouped by query position (ascending), and within one query ordered by
    distance, then key (as :meth:`Client.query_many`).

    Attributes:
        query_positions: (m,) int64, the position in the fingerprints asked of the query each
            match answers; non-decreasing.
        fingerprints: (m,) uint64, each match's stored fingerprint.
        distances: (m,) uint8, each match's Hamming distance to its query, bits.
        keys: m keys (str).
    """

    query_positions: NDArray[np.int64]
    fingerprints: NDArray[np.uint64]
    distances: NDArray[np.uint8]
    keys: list[str]

    def __len__(self) -> int:
        """m, the number of matches."""
        return len(self.keys)

    def to_lists(self, n: int) -> list[list[Match]]:
        """The matches as :meth:`Client.query_many` returns them: one list per query of the
        ``n`` asked, in order.

        Raises:
            InvalidArgumentError: a query position is ``n`` or more.
        """
        if len(self) and int(self.query_positions[-1]) >= n:
            raise InvalidArgumentError(
                f"a match answers query {int(self.query_positions[-1])}; only {n} were asked", n
            )
        found: list[list[Match]] = [[] for _ in range(n)]
        for q, key, fingerprint, distance in zip(
            self.query_positions.tolist(),
            self.keys,
            self.fingerprints.tolist(),
            self.distances.tolist(),
            strict=True,
        ):
            found[q].append(Match(key, fingerprint, distance))
        return found


@dataclass(frozen=True)
class RemoveResult:
    """How many keys were removed, and the keys that were not stored."""

    removed: int
    not_found: list[str]


#: The breakdown of a server older than the field.
_NO_BREAKDOWN: Final = MemoryBreakdown(0, 0, 0, 0, 0, 0, 0, 0)


@dataclass(frozen=True)
class ServerStats:
    """The Stats RPC (units in the .proto): counts, memory, design, uptime, last snapshot.

    A Jaccard collection has no table design and none of a SimHash index's memory parts: there
    ``blocks``, ``leading``, ``tables``, ``k`` and ``memory_breakdown`` are 0
    (:meth:`Client.describe_collection <permindex.client.Client.describe_collection>` gives its
    threshold, permutations, bands, rows and verify)."""

    count: int
    memory_bytes: int
    resident_memory_bytes: int
    blocks: int
    leading: int
    tables: int
    k: int
    uptime_seconds: float
    last_snapshot_unix_seconds: float | None
    last_snapshot_count: int
    last_snapshot_bytes: int
    version: str
    collection: str = "default"
    #: Seconds after which an entry not added again expires; 0: never.
    expire_after: int = 0
    #: Expired entries whose memory awaits the next compaction.
    expired_pending: int = 0
    #: ``memory_bytes`` by part (zeros from a server older than the field).
    memory_breakdown: MemoryBreakdown = _NO_BREAKDOWN
    #: The write-ahead log record being written, bytes (0 at rest).
    log_buffer_bytes: int = 0
    #: The server's memory limit (``serve --max-memory``), bytes; 0: none.
    max_memory_bytes: int = 0
    #: What that limit is checked against, server-wide, bytes (0 for a token without admin).
    server_memory_bytes: int = 0


@dataclass(frozen=True)
class CollectionInfo:
    """A collection: its name, keys, index memory (bytes), design, k, text options
    (``shingle_size``, ``min_words``, ``vote``: how shingles vote when the server fingerprints
    a text, ``"multiset"`` or ``"set"``) and ``expire_after`` (seconds; 0: never)."""

    name: str
    count: int
    memory_bytes: int
    blocks: int
    leading: int
    tables: int
    k: int
    shingle_size: int
    min_words: int
    expire_after: int = 0
    vote: Vote = "multiset"
    #: "simhash", or "minhash" for a Jaccard collection, whose threshold, permutations, LSH
    #: shape (bands x rows) and verify ("exact" or "signature") follow (0 and "" otherwise).
    method: str = "simhash"
    threshold: float = 0.0
    permutations: int = 0
    bands: int = 0
    rows: int = 0
    verify: str = ""


@dataclass(frozen=True)
class SnapshotResult:
    """A snapshot written by the server: its path on the server, keys, bytes and seconds."""

    path: str
    count: int
    bytes: int
    seconds: float


#: The attribute under which an interrupted ingest leaves its counts on the exception it raised.
_INGEST_RESULT_ATTRIBUTE = "permindex_ingest_result"


def attach_ingest_result(error: BaseException, result: IngestResult) -> None:
    """Leave ``result`` on ``error`` for :func:`ingest_result_of` (used by the Client)."""
    setattr(error, _INGEST_RESULT_ATTRIBUTE, result)


def ingest_result_of(error: BaseException) -> IngestResult | None:
    """The counts of the ingest that ``error`` interrupted (acknowledged and in flight), or None
    when ``error`` was not raised by :meth:`Client.ingest` / :meth:`Client.ingest_batches`.

    Every exception those methods raise carries them: a :class:`~permindex.errors.ServerError`
    (the server refused a batch, stopped, or the connection was lost), the input's own error,
    and ``KeyboardInterrupt``. The server stored every acknowledged batch, and of the
    ``in_flight`` documents some leading batches, all or none of each.
    """
    found = getattr(error, _INGEST_RESULT_ATTRIBUTE, None)
    return found if isinstance(found, IngestResult) else None
