"""Batch lookups of the server in slices (:func:`slices`, :func:`column_slices`): the index lock
is let go between slices, a cancelled call stops within one, and a slice is sized by the matches
the one before returned, so that a slice of fingerprints with thousands of matches each takes
about as long as one of ordinary fingerprints.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from permindex.errors import CallCancelledError
from permindex.index import Match
from permindex.index.search.batch_queries import QueryColumns
from permindex.rpc.state import ServerState

__all__ = [
    "QUERY_SLICE",
    "SLICE_MATCHES",
    "SliceSize",
    "check_stop",
    "column_slices",
    "sliced",
    "slices",
]

_T = TypeVar("_T")

#: The most fingerprints looked up per acquisition of the index lock (:func:`sliced`).
QUERY_SLICE = 1024
#: Matches per slice of a batch lookup that :func:`sliced` aims below: it bounds the work done
#: between two checks of ``stop`` and two takes of the index lock.
SLICE_MATCHES = 50_000


class SliceSize:
    """The size of the next slice of a batch lookup (:func:`slices`), kept for a whole stream
    so that a QueryColumns stream of ordinary fingerprints soon looks up whole messages at once;
    a new one (a unary Query) starts small. ``loop_pause``: messages of the stream still to be
    sent to the executor after one went over the event loop's bounds."""

    def __init__(self) -> None:
        self.size = 16
        self.loop_pause = 0


def slices(
    state: ServerState,
    fingerprints: NDArray[np.uint64],
    k: int | None,
    limit: int | None,
    stop: threading.Event,
    sizing: SliceSize | None = None,
) -> Iterator[tuple[list[list[Match]], int]]:
    """The matches of ``fingerprints`` ((n,) uint64) looked up slice by slice with
    ``Index.query_many``, each with the number of fingerprints done so far (see
    :func:`sliced`)."""
    return sliced(
        lambda part: state.index.query_many(part, k=k, limit=limit),
        lambda found: sum(map(len, found)),
        fingerprints,
        stop,
        sizing,
    )


def column_slices(
    state: ServerState,
    fingerprints: NDArray[np.uint64],
    k: int | None,
    limit: int | None,
    stop: threading.Event,
    sizing: SliceSize | None = None,
) -> Iterator[tuple[QueryColumns, int]]:
    """:func:`slices` in the columnar form (``Index.query_many(..., columns=True)``)."""
    return sliced(
        lambda part: state.index.query_many(part, k=k, limit=limit, columns=True),
        lambda found: len(found.keys),
        fingerprints,
        stop,
        sizing,
    )


def sliced(
    lookup: Callable[[NDArray[np.uint64]], _T],
    matches_of: Callable[[_T], int],
    fingerprints: NDArray[np.uint64],
    stop: threading.Event,
    sizing: SliceSize | None,
) -> Iterator[tuple[_T, int]]:
    """``lookup`` of ``fingerprints`` slice by slice, each answer with the number of
    fingerprints done so far.

    A slice holds at most :data:`QUERY_SLICE` fingerprints and is sized by the matches the last
    one returned (``matches_of``; halved above :data:`SLICE_MATCHES`, doubled below a tenth of
    it), so that a slice of fingerprints with thousands of matches each (5,000 copies of a
    template page) takes about as long as one of ordinary fingerprints; before each slice
    ``stop`` is checked (CallCancelledError) and the index lock is let go.
    """
    n = len(fingerprints)
    sizing = sizing or SliceSize()
    start = 0
    while start < n:
        check_stop(stop)
        end = min(n, start + sizing.size)
        part = lookup(fingerprints[start:end])
        yield part, end
        matches = matches_of(part)
        if matches > SLICE_MATCHES:
            sizing.size = max(1, sizing.size // 2)
        elif matches < SLICE_MATCHES // 10:
            sizing.size = min(QUERY_SLICE, sizing.size * 2)
        start = end


def check_stop(stop: threading.Event) -> None:
    """Raise CallCancelledError once the call that owns ``stop`` has ended."""
    if stop.is_set():
        raise CallCancelledError("the call was cancelled or its deadline passed")
