"""The per-document columns of an offline ``dedup`` (:class:`Documents`, built by both
engines) and which documents take part in its join (:func:`last_occurrences`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from permindex.index.keys.column import KeyColumn, last_positions

__all__ = [
    "Documents",
    "concat_parts",
    "documents_of",
    "drain_parts",
    "join_columns",
    "last_occurrences",
]


@dataclass
class Documents:
    """Every document read, in input order: ``keys`` (n str; a
    :class:`~permindex.index.keys.column.KeyColumn` as the engines build it), ``fingerprints``
    ((n,) uint64, 0 where there is none), ``has_fingerprint`` ((n,) bool), ``tokens`` ((n,)
    int64, the tokens of a too-short text, else 0) and ``lengths`` ((n,) int64, characters of
    each text)."""

    keys: Sequence[str]
    fingerprints: NDArray[np.uint64]
    has_fingerprint: NDArray[np.bool_]
    tokens: NDArray[np.int64]
    lengths: NDArray[np.int64]


def last_occurrences(documents: Documents) -> NDArray[np.int64]:
    """The input positions ((m,) int64, ascending) of the documents that take part in the join:
    those with a fingerprint, each key once with its last such occurrence (as ``ingest`` would
    leave it in a server)."""
    keys = documents.keys
    valid = np.flatnonzero(documents.has_fingerprint)
    if valid.size == len(keys):
        return last_positions(keys)
    if isinstance(keys, KeyColumn):
        return valid[last_positions(keys.take(valid))]
    return valid[last_positions([keys[i] for i in valid.tolist()])]


def concat_parts(parts: list[NDArray[Any]], dtype: Any) -> NDArray[Any]:
    """The parts (arrays of ``dtype``) end to end; an empty array when there are none."""
    return np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)


def drain_parts(parts: list[NDArray[Any]], dtype: Any) -> NDArray[Any]:
    """:func:`concat_parts`, then ``parts`` emptied: a caller that holds the parts of several
    columns this way holds each column twice only while it is joined."""
    joined = concat_parts(parts, dtype)
    parts.clear()
    return joined


def join_columns(
    keys: list[KeyColumn],
    fingerprints: list[NDArray[Any]],
    has_fingerprint: list[NDArray[Any]],
    tokens: list[NDArray[Any]],
    lengths: list[NDArray[Any]],
) -> Documents:
    """One :class:`Documents` from the per-task parts of each column (in order); each list is
    emptied as its column is joined (see :func:`drain_parts`)."""
    joined = KeyColumn.concat(keys)
    keys.clear()
    return Documents(
        joined,
        drain_parts(fingerprints, np.uint64),
        drain_parts(has_fingerprint, np.bool_),
        drain_parts(tokens, np.int64),
        drain_parts(lengths, np.int64),
    )


def documents_of(pieces: list[Documents]) -> Documents:
    """The documents of ``pieces`` (in order) in one :class:`Documents`
    (:func:`join_columns`); ``pieces`` is emptied first."""
    keys = [
        p.keys if isinstance(p.keys, KeyColumn) else KeyColumn.of_strings(p.keys) for p in pieces
    ]
    columns = (
        [p.fingerprints for p in pieces],
        [p.has_fingerprint for p in pieces],
        [p.tokens for p in pieces],
        [p.lengths for p in pieces],
    )
    pieces.clear()
    return join_columns(keys, *columns)
