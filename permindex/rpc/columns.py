"""The QueryColumns requests of the server: checked as Query checks its own, then looked up in
slices in the executor (:func:`in_slices`) or, within bounds, on the event loop itself
(:func:`on_loop`), and answered in columns (:func:`~permindex.rpc.convert.columns_to_proto`).
"""

from __future__ import annotations

import threading

import numpy as np
from numpy.typing import NDArray

from permindex.index.search.batch_queries import QueryColumns
from permindex.rpc import convert
from permindex.rpc.slices import SliceSize, column_slices
from permindex.rpc.state import ServerState
from permindex.v1 import index_pb2 as pb

__all__ = [
    "LOOP_CANDIDATES",
    "LOOP_FINGERPRINTS",
    "LOOP_MATCHES",
    "LOOP_PAUSE",
    "NO_MATCHES",
    "checked",
    "in_slices",
    "on_loop",
]

#: Bounds of a QueryColumns message looked up on the event loop (``Index.query_columns_within``;
#: benchmarks/README.md gives the worst such message's time): fingerprints, candidates in all
#: (the fingerprints times ``Index.max_candidates``) and matches.
LOOP_FINGERPRINTS = 1024
LOOP_CANDIDATES = 1 << 18
LOOP_MATCHES = 1024
#: Messages of a QueryColumns stream sent to the executor after one past those bounds.
LOOP_PAUSE = 16
#: A QueryColumnsResponse without a match, encoded (the handlers send bytes as they are): most
#: answers of a stream of new pages.
NO_MATCHES = pb.QueryColumnsResponse().SerializeToString()


def checked(
    state: ServerState, request: pb.QueryColumnsRequest
) -> tuple[NDArray[np.uint64], int | None, int | None]:
    """A QueryColumns request of collection ``state`` checked as Query checks its own: its
    fingerprints ((n,) uint64), k and limit.

    Raises:
        InvalidArgumentError: bytes not a multiple of 8, a bad k or limit.
        LimitExceededError: more fingerprints than the collection's ``max_batch``.
    """
    fingerprints = convert.fingerprints_from_bytes(request.fingerprints, state.config.max_batch)
    k = convert.check_k(
        request.k if request.HasField("k") else None, state.index.k, state.index.design
    )
    limit = convert.limit_from(request.limit if request.HasField("limit") else None)
    return fingerprints, k, limit


def in_slices(
    state: ServerState,
    request: pb.QueryColumnsRequest,
    stop: threading.Event,
    sizing: SliceSize | None = None,
) -> pb.QueryColumnsResponse:
    """One QueryColumns request, :func:`checked`, looked up in slices
    (:func:`~permindex.rpc.slices.column_slices`: the index lock let go between them, ``stop``
    checked before each), answered in columns. Runs in the executor.

    Raises:
        As :func:`checked`; LimitExceededError for an answer over the message limit (as soon
        as the slices so far are over it); CallCancelledError once ``stop`` is set.
    """
    fingerprints, k, limit = checked(state, request)
    n = len(fingerprints)
    found: list[tuple[int, QueryColumns]] = []
    size = 0
    start = 0
    for part, done in column_slices(state, fingerprints, k, limit, stop, sizing):
        size += convert.columns_part_wire_bytes(part)
        convert.check_reply_size(size, state.config.max_message_bytes, done, n)
        found.append((start, part))
        start = done
    return convert.columns_to_proto(found)


def on_loop(
    state: ServerState, request: pb.QueryColumnsRequest, sizing: SliceSize
) -> pb.QueryColumnsResponse | bytes | None:
    """The answer to a QueryColumns request looked up on the event loop itself when its lookup's
    cost is bounded (``Index.query_columns_within``: at most :data:`LOOP_FINGERPRINTS`
    fingerprints, :data:`LOOP_CANDIDATES` candidates and :data:`LOOP_MATCHES` matches, a read
    view made after the last write), work for
    which the hop to the executor and back costs more than it saves; else None, and the request
    goes to the executor (:func:`in_slices`). After a message past those bounds, the next
    :data:`LOOP_PAUSE` of its stream (``sizing.loop_pause``) go to the executor at once. A
    request that will be refused is refused here (errors as :func:`in_slices`). An answer
    without a match is :data:`NO_MATCHES`, already encoded."""
    if sizing.loop_pause:
        sizing.loop_pause -= 1
        return None
    if len(request.fingerprints) > 8 * LOOP_FINGERPRINTS:
        return None
    fingerprints, k, limit = checked(state, request)
    part = state.index.query_columns_within(
        fingerprints, k, limit, max_candidates=LOOP_CANDIDATES, max_matches=LOOP_MATCHES
    )
    if part is None:
        sizing.loop_pause = LOOP_PAUSE
        return None
    if not part.keys:
        return NO_MATCHES
    n = len(fingerprints)
    convert.check_reply_size(
        convert.columns_part_wire_bytes(part), state.config.max_message_bytes, n, n
    )
    return convert.columns_to_proto([(0, part)])
