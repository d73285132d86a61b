"""The Python client of a permindex server.

Importing this package imports neither grpc nor protobuf: :class:`Client` and :class:`Security`
are loaded on first use (the results and the batching rule are plain Python).

- :mod:`~permindex.client.client` — :class:`Client`, the facade: one typed method per RPC;
- :mod:`~permindex.client.streams` — the streaming calls (ingest, query_columns, export);
- :mod:`~permindex.client.base` — options, the call wrapper (errors, retries), chunking;
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
    DocumentLike,
    DocumentResult,
    IngestResult,
    RemoveResult,
    ServerStats,
    SnapshotResult,
    ingest_result_of,
)

if TYPE_CHECKING:
    from permindex.client.channel import Security
    from permindex.client.client import Client

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_SIZE",
    "AddResult",
    "CheckResult",
    "Client",
    "CollectionInfo",
    "ColumnMatches",
    "Content",
    "DocumentLike",
    "DocumentResult",
    "IngestResult",
    "RemoveResult",
    "Security",
    "ServerStats",
    "SnapshotResult",
    "batches",
    "ingest_result_of",
]


def __getattr__(name: str) -> object:
    """``Client`` and ``Security`` are imported on first use: they pull in grpc."""
    if name == "Client":
        from permindex.client.client import Client

        return Client
    if name == "Security":
        from permindex.client.channel import Security

        return Security
    raise AttributeError(f"module 'permindex.client' has no attribute {name!r}")
