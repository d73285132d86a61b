"""permindex: an in-memory near-duplicate index of 64-bit SimHash fingerprints.

Fingerprints (Charikar 2002) are computed by :func:`simhash` (many texts at once:
:func:`simhash_many`); :class:`Index` stores (key, fingerprint) pairs in the table-permutation
index of Manku, Jain & Das Sarma 2007 (section 3) and answers, exactly, which keys lie within
Hamming distance k of a fingerprint. For pipelines: :func:`html_to_text` (the visible text of
a page, as ``permindex ingest`` takes it) and :func:`html_to_main_text` (its main content, as
``ingest --extract main`` takes it), :func:`format_fingerprint` and
:func:`parse_fingerprint` (the 16-hex-digit form of every output), :func:`dedup_dataset` (the
near-duplicate rows of a ``datasets.Dataset``, a DataFrame or an Arrow table); for crawlers,
:mod:`permindex.scrapy`. The gRPC server and the command line live in
:mod:`permindex.rpc` and :mod:`permindex.cli`. Each public name is imported from its module on
first use (``permindex.Index`` loads the index, ``permindex.Client`` grpc), so that importing
this package alone takes a few milliseconds and loads neither numpy, grpc nor numba (the
compiled kernels are loaded on first use too).
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING

from permindex.errors import (
    AccessDeniedError,
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
    TokenRevokedError,
    WorkBudgetExceededError,
)

if TYPE_CHECKING:
    from permindex.client import AsyncClient, Client
    from permindex.index import CheckAndAddResult, ExpiringIndex, Index, Match
    from permindex.index.hamming import hamming, parse_fingerprint, validate_fingerprint
    from permindex.index.jaccard import JaccardIndex, JaccardMatch, MinHashSketch
    from permindex.index.join.clusters import (
        ExactGroup,
        Flag,
        NearDuplicates,
        clusters,
        exact_duplicates,
        flags,
    )
    from permindex.index.search.batch_queries import QueryColumns
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
    from permindex.text.html import html_to_main_text
    from permindex.text.minhash import minhash_sketch

__version__ = "0.1.0"

__all__ = [
    "AccessDeniedError",
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
    "JaccardIndex",
    "JaccardMatch",
    "LimitExceededError",
    "Match",
    "MinHashSketch",
    "NearDuplicates",
    "NotFoundError",
    "PermindexError",
    "QueryColumns",
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
    "TokenRevokedError",
    "WorkBudgetExceededError",
    "__version__",
    "clusters",
    "dedup_dataset",
    "exact_duplicates",
    "flags",
    "format_fingerprint",
    "hamming",
    "html_to_main_text",
    "html_to_text",
    "minhash_sketch",
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


#: Where each public name lives: imported on first use (:func:`__getattr__`), so that
#: ``import permindex`` (and so the ``permindex`` command's start) loads neither numpy nor grpc.
_LAZY = {
    "AsyncClient": "permindex.client",
    "CheckAndAddResult": "permindex.index",
    "Client": "permindex.client",
    "DatasetDedup": "permindex.near.dataset",
    "ExactGroup": "permindex.index.join.clusters",
    "ExpiringIndex": "permindex.index",
    "Flag": "permindex.index.join.clusters",
    "Index": "permindex.index",
    "JaccardIndex": "permindex.index.jaccard",
    "JaccardMatch": "permindex.index.jaccard",
    "Match": "permindex.index",
    "MinHashSketch": "permindex.index.jaccard",
    "NearDuplicates": "permindex.index.join.clusters",
    "QueryColumns": "permindex.index.search.batch_queries",
    "clusters": "permindex.index.join.clusters",
    "dedup_dataset": "permindex.near.dataset",
    "exact_duplicates": "permindex.index.join.clusters",
    "flags": "permindex.index.join.clusters",
    "format_fingerprint": "permindex.text.documents",
    "hamming": "permindex.index.hamming",
    "html_to_main_text": "permindex.text.html",
    "html_to_text": "permindex.text.documents",
    "minhash_sketch": "permindex.text.minhash",
    "parse_fingerprint": "permindex.index.hamming",
    "read_file_text": "permindex.text.documents",
    "shingles": "permindex.text.fingerprint",
    "simhash": "permindex.text.fingerprint",
    "simhash_features": "permindex.text.fingerprint",
    "simhash_many": "permindex.text.fingerprint",
    "simhash_vectors": "permindex.text.fingerprint",
    "simhash_weighted": "permindex.text.fingerprint",
    "tokens": "permindex.text.fingerprint",
    "validate_fingerprint": "permindex.index.hamming",
}


#: One thread at a time imports the modules behind the public names: their imports are
#: circular (permindex.index -> index.expiry -> index.batches -> index.hamming), and two
#: threads importing different ones at once could meet the import system's deadlock
#: detection (``_DeadlockError``) or a half-made module (``ImportError: cannot import name``).
_LAZY_LOCK = threading.RLock()


def __getattr__(name: str) -> object:
    """A public name, imported from its module on first use and kept (:data:`_LAZY`);
    thread-safe (:data:`_LAZY_LOCK`)."""
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'permindex' has no attribute {name!r}")
    with _LAZY_LOCK:
        value = getattr(importlib.import_module(module), name)
        globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
