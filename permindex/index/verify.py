"""Where a candidate is verified: the one exact check of the table-permutation index (Manku, Jain
& Das Sarma 2007, section 3) that turns the candidates a table's prefix range gives into matches,
for the single and the batch query path alike.

A candidate row is a match of a query when its fingerprint is within Hamming distance k of the
query (popcount of the XOR) and the row is live. A fingerprint within k of the query shares the
prefix of at least one searched table (pigeonhole, k <= blocks - leading), so checking every
candidate of every searched table finds every match, and only matches.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np
from numpy.typing import NDArray

from permindex.index.rows import RowStore

__all__ = ["verify"]

_U64 = NDArray[np.uint64]
_NO_MASK = np.uint64(0)


@overload
def verify(
    query: int, candidates: list[int], k: int, rows: RowStore
) -> dict[int, tuple[int, int]]: ...


@overload
def verify(
    query: _U64,
    candidates: NDArray[np.uint32],
    k: int,
    rows: RowStore,
    leading: np.uint64 = ...,
    earlier: Sequence[np.uint64] = ...,
) -> tuple[NDArray[np.intp], NDArray[np.uint8]]: ...


def verify(
    query: int | _U64,
    candidates: list[int] | NDArray[np.uint32],
    k: int,
    rows: RowStore,
    leading: np.uint64 = _NO_MASK,
    earlier: Sequence[np.uint64] = (),
) -> dict[int, tuple[int, int]] | tuple[NDArray[np.intp], NDArray[np.uint8]]:
    """Verify candidates exactly: which lie within Hamming distance ``k`` (bits, inclusive) of
    their query and are live. Two strategies of the same check:

    * one query (``query`` an int in [0, 2^64), ``candidates`` a list of rows, repeats allowed:
      a row is a candidate in each table whose prefix it shares): Python ints, read through
      ``rows.fps_view``; returns ``{row: (fingerprint, distance)}`` of the live matches, each
      row once. O(len(candidates)), no numpy call: the single-query path.
    * a batch (``query`` a (t,) uint64 array, the query of each candidate; ``candidates`` (t,)
      uint32 rows): numpy over all of them; returns (the (s,) intp positions in ``candidates``
      of the live matches, their (s,) uint8 distances). With ``leading``, the leading-block
      mask of the table that gave the candidates, and ``earlier``, the masks of the tables
      searched before it, a match is kept only if its XOR is zero under ``leading`` and
      non-zero under each of ``earlier``: reported by the first table whose prefix it shares,
      so no set is needed across tables (a candidate of a coarse directory bucket that does
      not share the prefix is dropped too). O(t) numpy work.

    ``rows`` is the index's :class:`~permindex.index.rows.RowStore` (fingerprints and
    liveness by row); the caller holds the index's lock.
    """
    if type(query) is int:
        fps = rows.fps_view
        live = rows.live_view
        hits: dict[int, tuple[int, int]] = {}
        for row in candidates:
            value = fps[row]
            distance = (value ^ query).bit_count()
            if distance <= k and (live is None or live[row]):
                hits[row] = (value, distance)
        return hits
    assert isinstance(query, np.ndarray) and isinstance(candidates, np.ndarray)
    x = rows.fps[candidates] ^ query
    distance = np.bitwise_count(x)
    selected = np.flatnonzero(distance <= k)
    if selected.size:
        x = x[selected]
        keep = (x & leading) == 0
        for other in earlier:
            keep &= (x & other) != 0
        live_mask = rows.live
        if live_mask is not None:
            keep &= live_mask[candidates[selected]]
        selected = selected[keep]
    return selected, distance[selected]
