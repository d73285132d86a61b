"""The Python client of a permindex server.

Importing this package imports neither grpc nor protobuf: :class:`Client` and :class:`Security`
are loaded on first use (the results and the batching rule are plain Python).

Both clients are thin transports over shared, I/O-free code:

- :mod:`~permindex.client.client` — :class:`Client`, the blocking facade: one typed method per RPC;
- :mod:`~permindex.client.streams` — its streaming calls (ingest, query_columns, export, pairs...);
- :mod:`~permindex.client.aio` — :class:`AsyncClient`, the same methods on ``grpc.aio``;
- :mod:`~permindex.client.base` — the options, channels and retry rule of both, and the blocking
  transport;
- :mod:`~permindex.client.operations` — every one-request call as a plan (requests, batching,
  shards, merged result), run by either transport;
- :mod:`~permindex.client.stream_parts` — the streaming calls' requests and reply assembly;
- :mod:`~permindex.client.sharding` — routing of keys to shards and merging of fanned-out replies;
- :mod:`~permindex.client.channel` — the one channel set-up (TLS, token, stub, error translation);
- :mod:`~permindex.client.messages` — request building, argument checks, reply conversion;
- :mod:`~permindex.client.batching` — batches of a document stream by count and bytes;
- :mod:`~permindex.client.results` — the result dataclasses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from permindex.client.batching import DEFAULT_BATCH_BYTES, DEFAULT_BATCH_SIZE, batches
from permindex.client.results import (
    AddResult,
    CheckResult,
    CollectionInfo,
    ColumnMatches,
    Content,
    Document,
    DocumentLike,
    DocumentResult,
    IngestResult,
    RemoveResult,
    ServerStats,
    SketchHex,
    SnapshotResult,
    ingest_result_of,
)

if TYPE_CHECKING:
    from permindex.client.aio import AsyncClient
    from permindex.client.channel import Security
    from permindex.client.client import Client

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_SIZE",
    "AddResult",
    "AsyncClient",
    "CheckResult",
    "Client",
    "CollectionInfo",
    "ColumnMatches",
    "Content",
    "Document",
    "DocumentLike",
    "DocumentResult",
    "IngestResult",
    "RemoveResult",
    "Security",
    "ServerStats",
    "SketchHex",
    "SnapshotResult",
    "batches",
    "ingest_result_of",
]


def __getattr__(name: str) -> object:
    """``Client``, ``AsyncClient`` and ``Security`` are imported on first use: they pull in
    grpc."""
    if name == "AsyncClient":
        from permindex.client.aio import AsyncClient

        return AsyncClient
    if name == "Client":
        from permindex.client.client import Client

        return Client
    if name == "Security":
        from permindex.client.channel import Security

        return Security
    raise AttributeError(f"module 'permindex.client' has no attribute {name!r}")
