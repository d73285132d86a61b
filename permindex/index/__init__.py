"""The index core: fingerprints, table designs, tables, keys, the :class:`Index` and the self-join.

Manku, Jain & Das Sarma 2007, section 3. Nothing here does I/O or imports grpc; the layers above
(:mod:`permindex.storage`, :mod:`permindex.rpc`, :mod:`permindex.near`) build on it.

The names below load on first use, so that importing one sub-module (the key rule, say) does
not import the whole index first: :mod:`permindex.storage.key_section` needs the key rule, and
the index's key store needs the key section.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

_HOMES = {
    "MAX_KEY_BYTES": "permindex.index.keys.rule",
    "CheckAndAddResult": "permindex.index.index",
    "ExpiringIndex": "permindex.index.expiry",
    "Index": "permindex.index.index",
    "Match": "permindex.index.index",
    "validate_key": "permindex.index.keys.rule",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'permindex.index' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value
