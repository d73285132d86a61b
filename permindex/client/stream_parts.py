"""The transport-free parts of the streaming calls, shared by the blocking and the asyncio client:
the server-streaming reads as :class:`StreamRead` (RPC, request, how a reply becomes items,
whether items are parts of whole groups), the assembly of whole groups from their parts
(:class:`Groups`), and the packed requests and replies of QueryColumns (:class:`ColumnRequests`,
:class:`ColumnParts`). No I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from permindex.client.messages import check_counts, sketch_hex
from permindex.client.results import ColumnMatches
from permindex.client.sharding import refuse_fan_out
from permindex.errors import InvalidArgumentError
from permindex.index.hamming import as_fingerprint_array
from permindex.index.join.clusters import ExactGroup, Flag
from permindex.v1 import index_pb2 as pb

__all__ = [
    "ColumnParts",
    "ColumnRequests",
    "Groups",
    "StreamRead",
    "clusters_read",
    "exact_duplicates_read",
    "export_read",
    "flags_read",
    "pairs_read",
]


@dataclass(frozen=True)
class StreamRead:
    """A server-streaming read: ``rpc`` with ``request``; ``items(reply)`` are the items of one
    reply; with ``group`` they are parts of whole groups, each made by ``group(keys, first)``
    (:class:`Groups`)."""

    rpc: str
    request: Any
    items: Callable[[Any], Iterable[Any]]
    group: Callable[[list[str], Any], Any] | None = None


def export_read(collection: str, with_times: bool = False) -> StreamRead:
    """Export: ``(key, fingerprint)`` items, or ``(key, fingerprint, added_at)`` with
    ``with_times`` (Unix seconds; 0 in a collection without expiry); from a Jaccard collection
    a :class:`~permindex.client.results.SketchHex` in place of the fingerprint."""

    def items(reply: Any) -> Iterable[Any]:
        def content(e: Any) -> Any:  # a Jaccard collection's entry: its sketch in hex
            return sketch_hex(e) if e.sketch_hex else e.fingerprint

        if with_times:
            return ((e.key, content(e), e.added_at) for e in reply.entries)
        return ((e.key, content(e)) for e in reply.entries)

    return StreamRead("Export", pb.ExportRequest(collection=collection), items)


def pairs_read(collection: str, k: int | None, shards: int) -> StreamRead:
    """Pairs: ``(key_a, key_b, distance)`` items (``(key_a, key_b, jaccard)`` from a Jaccard
    collection).

    Raises:
        TypeError, InvalidArgumentError: a bad ``k`` (:func:`check_counts`), or several shards
            (:func:`~permindex.client.sharding.refuse_fan_out`).
    """
    check_counts(k=k)
    refuse_fan_out("pairs", shards)
    return StreamRead(
        "Pairs",
        pb.PairsRequest(collection=collection, k=k),
        lambda r: ((p.key_a, p.key_b, p.jaccard or p.distance) for p in r.pairs),
    )


def clusters_read(collection: str, k: int | None, shards: int) -> StreamRead:
    """Clusters: whole clusters (lists of keys). Errors as :func:`pairs_read`."""
    check_counts(k=k)
    refuse_fan_out("clusters", shards)
    return StreamRead(
        "Clusters",
        pb.ClustersRequest(collection=collection, k=k),
        lambda r: r.clusters,
        lambda keys, _first: keys,
    )


def _flag_distance(flag: Any) -> int:
    """A flag's distance: bits, or from a Jaccard collection (``jaccard`` set) the offline
    Jaccard mode's units, ``round((1 - J) * 10^4)`` (0: identical sets)."""
    if flag.HasField("jaccard"):
        return round((1.0 - float(flag.jaccard)) * 10_000)
    return int(flag.distance)


def flags_read(collection: str, k: int | None, shards: int) -> StreamRead:
    """Flags: :class:`~permindex.Flag` items. Errors as :func:`pairs_read`."""
    check_counts(k=k)
    refuse_fan_out("flags", shards)
    return StreamRead(
        "Flags",
        pb.FlagsRequest(collection=collection, k=k),
        lambda r: (Flag(f.key, f.nearest_key, _flag_distance(f), f.neighbors) for f in r.flags),
    )


def exact_duplicates_read(collection: str, shards: int) -> StreamRead:
    """ExactDuplicates: whole :class:`~permindex.ExactGroup` items. Several shards: refused
    (copies of one fingerprint may be on two shards)."""
    refuse_fan_out("exact duplicates", shards)
    return StreamRead(
        "ExactDuplicates",
        pb.ExactDuplicatesRequest(collection=collection),
        lambda r: r.groups,
        lambda keys, first: ExactGroup(first.fingerprint, keys),
    )


class Groups:
    """Whole groups from the streamed parts of Clusters or ExactDuplicates messages (a group's
    parts share its ``id`` and come in order; ``size`` is the whole group's key count): each
    group as ``make(keys, first_part)``, once its last part is fed (or the next group starts).
    Holds one group's keys at a time."""

    def __init__(self, make: Callable[[list[str], Any], Any]) -> None:
        self._make = make
        self._keys: list[str] = []
        self._first: Any = None

    def feed(self, part: Any) -> list[Any]:
        """The groups completed by ``part`` (none, one or two)."""
        done: list[Any] = []
        if self._first is not None and part.id != self._first.id:
            done.append(self._make(self._keys, self._first))
            self._keys, self._first = [], None
        if self._first is None:
            self._first = part
        self._keys.extend(part.keys)
        if len(self._keys) >= self._first.size:
            done.append(self._make(self._keys, self._first))
            self._keys, self._first = [], None
        return done

    def finish(self) -> list[Any]:
        """The last group when its parts ended short of its size (none otherwise)."""
        if self._first is None:
            return []
        done = [self._make(self._keys, self._first)]
        self._keys, self._first = [], None
        return done


@dataclass(frozen=True)
class ColumnRequests:
    """The QueryColumns requests of one call: the fingerprints checked and packed, ``batch`` a
    message.

    Raises:
        InvalidArgumentError: a fingerprint outside [0, 2^64), ``k`` or ``limit`` outside
            [0, 2^32), ``batch`` or ``window`` below 1.
        TypeError: a non-integer fingerprint, ``k`` or ``limit``.
    """

    fingerprints: Iterable[int] | NDArray[np.unsignedinteger[Any]]
    k: int | None
    limit: int | None
    batch: int
    window: int
    collection: str
    values: NDArray[Any] = field(init=False)

    def __post_init__(self) -> None:
        check_counts(k=self.k, limit=self.limit)
        if self.batch < 1 or self.window < 1:
            raise InvalidArgumentError(
                f"batch and window must be at least 1 ({self.batch}, {self.window})"
            )
        values = as_fingerprint_array(self.fingerprints).astype("<u8", copy=False)
        object.__setattr__(self, "values", values)

    @property
    def starts(self) -> range:
        """The first position of each message."""
        return range(0, len(self.values), self.batch)

    def request(self, start: int) -> pb.QueryColumnsRequest:
        """The message of the fingerprints from ``start``."""
        return pb.QueryColumnsRequest(
            fingerprints=self.values[start : start + self.batch].tobytes(),
            k=self.k,
            limit=self.limit,
            collection=self.collection,
        )


class ColumnParts:
    """The QueryColumns replies of one call (one per request, in order) as
    :class:`ColumnMatches`."""

    def __init__(self) -> None:
        self._positions: list[NDArray[np.int64]] = []
        self._found: list[NDArray[np.uint64]] = []
        self._distances: list[NDArray[np.uint8]] = []
        self._keys: list[str] = []

    def add(self, start: int, reply: Any) -> None:
        """The reply to the request of the fingerprints from ``start``."""
        at = np.frombuffer(reply.query_positions, dtype="<u4")
        self._positions.append(at.astype(np.int64) + start)
        self._found.append(np.frombuffer(reply.fingerprints, "<u8").astype(np.uint64))
        self._distances.append(np.frombuffer(reply.distances, dtype=np.uint8).copy())
        self._keys.extend(reply.keys)

    def result(self) -> ColumnMatches:
        """Every match added, positions over the whole call."""
        return ColumnMatches(
            np.concatenate(self._positions) if self._positions else np.zeros(0, np.int64),
            np.concatenate(self._found) if self._found else np.zeros(0, np.uint64),
            np.concatenate(self._distances) if self._distances else np.zeros(0, np.uint8),
            self._keys,
        )
