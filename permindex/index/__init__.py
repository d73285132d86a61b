"""The index core: fingerprints, table designs, tables, keys, the :class:`Index` and the self-join.

Manku, Jain & Das Sarma 2007, section 3. Nothing here does I/O or imports grpc; the layers above
(:mod:`permindex.storage`, :mod:`permindex.rpc`, :mod:`permindex.near`) build on it.
"""

from __future__ import annotations

from permindex.index.expiry import ExpiringIndex
from permindex.index.index import CheckAndAddResult, Index, Match
from permindex.index.keys.rule import MAX_KEY_BYTES, validate_key

__all__ = [
    "MAX_KEY_BYTES",
    "CheckAndAddResult",
    "ExpiringIndex",
    "Index",
    "Match",
    "validate_key",
]
