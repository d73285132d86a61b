"""The compiled kernel that writes the report's pair lines as bytes
(:func:`permindex.near.outputs.write_outputs`: ``pairs.tsv`` and ``pairs.json``, and the key
columns of ``pairs.parquet``): each line is a few fixed pieces around two keys and a measure,
all already encoded as UTF-8, copied into one buffer per chunk of pairs, so that 10^6 pairs
cost no Python object each. The one implementation of that formatting; the tests compare the
files with the keys written by :func:`~permindex.text.documents.tsv_field` and
``json.dumps``. Import only where the kernel is needed: it imports numba.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from permindex.jit_numba import njit


@njit()
def pair_lines(
    a: NDArray[np.int64],
    b: NDArray[np.int64],
    d: NDArray[np.int64],
    slot: NDArray[np.int64],
    key_bytes: NDArray[np.uint8],
    key_offsets: NDArray[np.int64],
    measure_bytes: NDArray[np.uint8],
    measure_offsets: NDArray[np.int64],
    pieces: NDArray[np.uint8],
    piece_offsets: NDArray[np.int64],
) -> NDArray[np.uint8]:
    """The lines of the m pairs (a[i], b[i], d[i]) as one (bytes,) uint8 buffer: for each
    pair, piece 0, the key of a[i], piece 1, the key of b[i], piece 2, the measure d[i],
    piece 3 (the 4 pieces are ``pieces[piece_offsets[j]:piece_offsets[j + 1]]``). The key of
    position p is ``key_bytes[key_offsets[s]:key_offsets[s + 1]]`` with s = slot[p]; the
    measure of distance x is ``measure_bytes[measure_offsets[x]:measure_offsets[x + 1]]``.
    Two passes (the length, then the copy): O(m + bytes written)."""
    fixed = piece_offsets[4] - piece_offsets[0]
    total = 0
    for i in range(a.size):
        sa = slot[a[i]]
        sb = slot[b[i]]
        total += (
            fixed
            + key_offsets[sa + 1]
            - key_offsets[sa]
            + key_offsets[sb + 1]
            - key_offsets[sb]
            + measure_offsets[d[i] + 1]
            - measure_offsets[d[i]]
        )
    out = np.empty(total, dtype=np.uint8)
    p0 = pieces[piece_offsets[0] : piece_offsets[1]]
    p1 = pieces[piece_offsets[1] : piece_offsets[2]]
    p2 = pieces[piece_offsets[2] : piece_offsets[3]]
    p3 = pieces[piece_offsets[3] : piece_offsets[4]]
    at = 0
    for i in range(a.size):
        at = _put(out, at, p0, 0, p0.size)
        s = slot[a[i]]
        at = _put(out, at, key_bytes, key_offsets[s], key_offsets[s + 1])
        at = _put(out, at, p1, 0, p1.size)
        s = slot[b[i]]
        at = _put(out, at, key_bytes, key_offsets[s], key_offsets[s + 1])
        at = _put(out, at, p2, 0, p2.size)
        at = _put(out, at, measure_bytes, measure_offsets[d[i]], measure_offsets[d[i] + 1])
        at = _put(out, at, p3, 0, p3.size)
    return out


@njit(inline=True)
def _put(out: NDArray[np.uint8], at: int, source: NDArray[np.uint8], lo: int, hi: int) -> int:
    """source[lo:hi] copied to out[at:]; returns the end."""
    for j in range(lo, hi):
        out[at] = source[j]
        at += 1
    return at


@njit()
def string_column(
    positions: NDArray[np.int64],
    slot: NDArray[np.int64],
    key_bytes: NDArray[np.uint8],
    key_offsets: NDArray[np.int64],
) -> tuple[NDArray[np.int32], NDArray[np.uint8]]:
    """The keys of ``positions`` as an Arrow string column's buffers: (offsets (m + 1,)
    int32, the UTF-8 bytes), key of position p as :func:`pair_lines` has it. O(m + bytes)."""
    offsets = np.zeros(positions.size + 1, dtype=np.int32)
    total = 0
    for i in range(positions.size):
        s = slot[positions[i]]
        total += key_offsets[s + 1] - key_offsets[s]
        offsets[i + 1] = total
    out = np.empty(total, dtype=np.uint8)
    for i in range(positions.size):
        s = slot[positions[i]]
        out[offsets[i] : offsets[i + 1]] = key_bytes[key_offsets[s] : key_offsets[s + 1]]
    return offsets, out
