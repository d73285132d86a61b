"""permindex: an in-memory near-duplicate index of 64-bit SimHash fingerprints.

Fingerprints (Charikar 2002) are computed by :func:`simhash` (many texts at once:
:func:`simhash_many`); :class:`Index` stores (key, fingerprint) pairs in the table-permutation
index of Manku, Jain & Das Sarma 2007 (section 3) and answers, exactly, which keys lie within
Hamming distance k of a fingerprint. For pipelines: :func:`html_to_text` (the visible text of
a page, as ``permindex ingest`` takes it), :func:`format_fingerprint` and
:func:`parse_fingerprint` (the 16-hex-digit form of every output), :func:`dedup_dataset` (the
near-duplicate rows of a ``datasets.Dataset``, a DataFrame or an Arrow table); for crawlers,
:mod:`permindex.scrapy`. The gRPC server and the command line live in
:mod:`permindex.rpc` and :mod:`permindex.cli`; importing this package alone does not import grpc
(nor numba: the compiled kernels are loaded on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from permindex.errors import (
    CallCancelledError,
    CollectionExistsError,
    CorruptFileError,
    DataDirLockedError,
    InvalidArgumentError,
    InvalidKeyError,
    LimitExceededError,
    NotFoundError,
    PermindexError,
    ServerCollectionExistsError,
    ServerCorruptFileError,
    ServerError,
    ServerInvalidArgumentError,
    ServerLimitExceededError,
    ServerNotFoundError,
    ServerPermissionError,
    ServerTimeoutError,
    ServerUnavailableError,
    SnapshotWriteError,
    StorageError,
    StorageFullError,
    WorkBudgetExceededError,
)
from permindex.index import CheckAndAddResult, ExpiringIndex, Index, Match
from permindex.index.clusters import (
    ExactGroup,
    Flag,
    NearDuplicates,
    clusters,
    exact_duplicates,
    flags,
)
from permindex.index.hamming import hamming, parse_fingerprint, validate_fingerprint
from permindex.near.dataset import DatasetDedup, dedup_dataset
from permindex.text.documents import format_fingerprint, html_to_text, read_file_text
from permindex.text.fingerprint import (
    shingles,
    simhash,
    simhash_features,
    simhash_many,
    simhash_vectors,
    simhash_weighted,
    tokens,
)

if TYPE_CHECKING:
    from permindex.client import AsyncClient, Client

__version__ = "0.1.0"

__all__ = [
    "AsyncClient",
    "CallCancelledError",
    "CheckAndAddResult",
    "Client",
    "CollectionExistsError",
    "CorruptFileError",
    "DataDirLockedError",
    "DatasetDedup",
    "ExactGroup",
    "ExpiringIndex",
    "Flag",
    "Index",
    "InvalidArgumentError",
    "InvalidKeyError",
    "LimitExceededError",
    "Match",
    "NearDuplicates",
    "NotFoundError",
    "PermindexError",
    "ServerCollectionExistsError",
    "ServerCorruptFileError",
    "ServerError",
    "ServerInvalidArgumentError",
    "ServerLimitExceededError",
    "ServerNotFoundError",
    "ServerPermissionError",
    "ServerTimeoutError",
    "ServerUnavailableError",
    "SnapshotWriteError",
    "StorageError",
    "StorageFullError",
    "WorkBudgetExceededError",
    "__version__",
    "clusters",
    "dedup_dataset",
    "exact_duplicates",
    "flags",
    "format_fingerprint",
    "hamming",
    "html_to_text",
    "parse_fingerprint",
    "read_file_text",
    "shingles",
    "simhash",
    "simhash_features",
    "simhash_many",
    "simhash_vectors",
    "simhash_weighted",
    "tokens",
    "validate_fingerprint",
]


def __getattr__(name: str) -> object:
    """``permindex.Client`` and ``permindex.AsyncClient`` are imported on first use: they pull
    in grpc, the rest does not."""
    if name in ("Client", "AsyncClient"):
        import permindex.client

        return getattr(permindex.client, name)
    raise AttributeError(f"module 'permindex' has no attribute {name!r}")
