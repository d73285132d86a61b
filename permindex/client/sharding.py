"""Keys spread over several servers (shards), the simple way: routing by a stable hash of the key
and the merging of fanned-out answers into the answer one server holding everything would give.
Pure Python and numpy: no grpc, no protobuf.

- A key lives on shard ``xxh3_64(key as UTF-8) mod n`` (:func:`shard_of`): stable across
  processes, machines and Python versions (never Python's ``hash()``, which is salted per process).
  Changing ``n`` moves most keys: resharding is ``permindex export`` from the old shards and
  ``permindex import`` into the new ones.
- Writes and reads of a key (add, get, remove) go to its shard; lookups by fingerprint (query,
  query_many, query_columns) go to every shard and are merged in one server's order (by distance,
  then key, ``limit`` applied after the merge); counts are summed.
- The all-pairs calls (pairs, clusters, flags, exact duplicates) cannot come from a fan-out: a pair
  may have one key on each shard (:func:`refuse_fan_out`).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Final

import numpy as np
from xxhash import xxh3_64_intdigest

from permindex.addresses import parse_addresses
from permindex.client.results import CollectionInfo, ColumnMatches, ServerStats, SnapshotResult
from permindex.errors import InvalidArgumentError
from permindex.index import Match
from permindex.index.memory import MemoryBreakdown

__all__ = [
    "merge_collection_infos",
    "merge_collection_lists",
    "merge_columns",
    "merge_matches",
    "merge_snapshots",
    "merge_stats",
    "refuse_fan_out",
    "route",
    "shard_addresses",
    "shard_of",
]

#: What to do instead of an all-pairs call over shards.
_INSTEAD: Final = (
    "a pair may have one key on each shard, so it cannot come from a fan-out: run `permindex "
    "export --out FILE` against the shards (one JSONL file of every key), then either "
    "`permindex import FILE` into a collection of one server created with the same options "
    "and ask that server (any collection), or `permindex dedup FILE` (a SimHash collection "
    "only: dedup does not read a Jaccard export's sketches)"
)


def shard_addresses(address: str | Sequence[str]) -> list[str]:
    """The shard addresses of a client, in shard order (shard i is the i-th address, so every
    client of one set of shards must list them in the same order):
    :func:`permindex.addresses.parse_addresses`, whose errors it raises."""
    return parse_addresses(address)


def shard_of(key: str, shards: int) -> int:
    """The shard of ``key`` among ``shards``: XXH3-64 (seed 0) of its UTF-8 bytes mod ``shards``.
    O(len(key)). A key that cannot be encoded (a lone surrogate) goes to shard 0, whose server
    refuses it as any server would."""
    if shards == 1:
        return 0
    try:
        data = key.encode("utf-8")
    except UnicodeEncodeError:
        return 0
    return int(xxh3_64_intdigest(data)) % shards


def route(keys: Iterable[str], shards: int) -> list[tuple[int, list[int]]]:
    """The positions of ``keys`` grouped by shard: ``(shard, positions)`` for each shard with at
    least one key, by shard, positions ascending (so each shard's request keeps the caller's
    order). O(total key length)."""
    groups: dict[int, list[int]] = {}
    for position, key in enumerate(keys):
        groups.setdefault(shard_of(key, shards), []).append(position)
    return sorted(groups.items())


def refuse_fan_out(what: str, shards: int) -> None:
    """Refuse an all-pairs call (``what``: pairs, clusters, flags, exact duplicates) over more
    than one shard.

    Raises:
        InvalidArgumentError: ``shards`` > 1, saying what to do instead: export, then import
            into one server (either method) or dedup (SimHash only).
    """
    if shards > 1:
        raise InvalidArgumentError(f"{what} over {shards} shards: {_INSTEAD}", what)


def _order(match: Match) -> tuple[int, str]:
    return match.distance, match.key


def merge_matches(lists: Sequence[list[Match]], limit: int | None) -> list[Match]:
    """The matches of one query from every shard (each list sorted by distance, then key) as one
    server would answer it: merged in that order, the first ``limit`` kept (None or 0: all).
    O(m log s) for m matches over s shards."""
    if len(lists) == 1:
        merged = lists[0]
    else:
        merged = list(heapq.merge(*lists, key=_order))
    return merged[:limit] if limit else merged


def merge_columns(parts: Sequence[ColumnMatches], limit: int | None) -> ColumnMatches:
    """The :class:`ColumnMatches` of one query batch from every shard (positions over the same
    batch) as one server's: grouped by query position, then by distance, then key; at most
    ``limit`` per position (None or 0: all). O(m log m) for m matches."""
    if len(parts) == 1:
        return parts[0]
    positions = np.concatenate([p.query_positions for p in parts])
    found = np.concatenate([p.fingerprints for p in parts])
    distances = np.concatenate([p.distances for p in parts])
    keys = [key for p in parts for key in p.keys]
    # key order is code point order, as the server's; ranks from a sort of the Python strings
    rank = np.empty(len(keys), np.int64)
    rank[sorted(range(len(keys)), key=keys.__getitem__)] = np.arange(len(keys))
    order = np.lexsort((rank, distances, positions))
    if limit and len(order):
        sorted_positions = positions[order]
        starts = np.r_[0, np.flatnonzero(np.diff(sorted_positions)) + 1]
        sizes = np.diff(np.r_[starts, len(order)])
        index_in_group = np.arange(len(order)) - np.repeat(starts, sizes)
        order = order[index_in_group < limit]
    return ColumnMatches(
        positions[order], found[order], distances[order], [keys[i] for i in order.tolist()]
    )


def merge_stats(parts: Sequence[ServerStats]) -> ServerStats:
    """The Stats of every shard as one: counts, memory (and its parts, the limits and the
    servers' accounted memory), expired entries awaiting compaction and the last snapshot's
    keys and bytes summed; the design, version and collection of the first
    shard; the shortest uptime; the oldest last snapshot (None when a shard has none)."""
    first = parts[0]
    times = [p.last_snapshot_unix_seconds for p in parts]
    oldest = None if None in times else min(t for t in times if t is not None)
    return replace(
        first,
        count=sum(p.count for p in parts),
        memory_bytes=sum(p.memory_bytes for p in parts),
        resident_memory_bytes=sum(p.resident_memory_bytes for p in parts),
        uptime_seconds=min(p.uptime_seconds for p in parts),
        last_snapshot_unix_seconds=oldest,
        last_snapshot_count=sum(p.last_snapshot_count for p in parts),
        last_snapshot_bytes=sum(p.last_snapshot_bytes for p in parts),
        expired_pending=sum(p.expired_pending for p in parts),
        memory_breakdown=MemoryBreakdown(
            *(sum(column) for column in zip(*(p.memory_breakdown for p in parts), strict=True))
        ),
        log_buffer_bytes=sum(p.log_buffer_bytes for p in parts),
        max_memory_bytes=sum(p.max_memory_bytes for p in parts),
        server_memory_bytes=sum(p.server_memory_bytes for p in parts),
    )


def merge_collection_infos(parts: Sequence[CollectionInfo]) -> CollectionInfo:
    """One collection on every shard as one: keys and memory summed, options of the first."""
    return replace(
        parts[0],
        count=sum(p.count for p in parts),
        memory_bytes=sum(p.memory_bytes for p in parts),
    )


def merge_collection_lists(parts: Sequence[list[CollectionInfo]]) -> list[CollectionInfo]:
    """The collection lists of every shard as one list by name, each collection merged over the
    shards that hold it (:func:`merge_collection_infos`)."""
    named: dict[str, list[CollectionInfo]] = {}
    for infos in parts:
        for info in infos:
            named.setdefault(info.name, []).append(info)
    return [merge_collection_infos(named[name]) for name in sorted(named)]


def merge_snapshots(parts: Sequence[SnapshotResult]) -> SnapshotResult:
    """The snapshots of every shard as one result: the paths joined by ``", "`` (in shard order),
    keys and bytes summed, the longest time."""
    return SnapshotResult(
        ", ".join(p.path for p in parts),
        sum(p.count for p in parts),
        sum(p.bytes for p in parts),
        max(p.seconds for p in parts),
    )
