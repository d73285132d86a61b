"""The compiled kernel that builds a table's sorted run (numba, :mod:`permindex.jit`): a counting
sort of the entries by the top r bits of their permuted fingerprints (the run's directory
bits), which writes the directory, the entries' rows in two parts and their 16-bit filters in
one pass over the input after one pass that counts (Manku, Jain & Das Sarma 2007, section 3:
a table sorted by its permuted fingerprints). Imported on first use by
:mod:`permindex.index.tables.table` (``import permindex`` does not load numba); the tests
check what it builds with :meth:`Table._check <permindex.index.tables.table.Table._check>`
against numpy.

It replaced a numpy radix argsort of the prefixes followed by gathers of the rows and filters
in the order found: the same O(m) work without the (m,) intp order, and the sort key may now
be wider than the prefix (``benchmarks/README.md``, "Table layout", has the build times).
"""

from __future__ import annotations

import numpy as np

from permindex.jit_numba import njit, numba

__all__ = ["BUILD_SIGNATURE", "build_run"]

_types = numba.types
#: build_run(values, rows, first_row, moves, bits, offsets, low, high8, high16, filters).
BUILD_SIGNATURE = _types.void(
    _types.uint64[::1],
    _types.uint32[::1],
    _types.int64,
    _types.int64[:, ::1],
    _types.int64,
    _types.uint32[::1],
    _types.uint16[::1],
    _types.uint8[::1],
    _types.uint16[::1],
    _types.uint16[::1],
)


@njit(inline=True)
def _permute(value, moves):  # type: ignore[no-untyped-def]
    """The permuted value of ``value`` (uint64) under ``moves``."""
    out = np.uint64(0)
    for i in range(moves.shape[0]):
        out |= ((value >> np.uint64(moves[i, 0])) & np.uint64(moves[i, 1])) << np.uint64(
            moves[i, 2]
        )
    return out


@njit(BUILD_SIGNATURE)
def build_run(values, rows, first_row, moves, bits, offsets, low, high8, high16, filters):  # type: ignore[no-untyped-def]
    """Sort the m entries whose fingerprints are ``values`` ((m,) uint64) and rows ``rows``
    ((m,) uint32; (0,): the rows ``first_row + i``) by the top ``bits`` (1 to 48) bits of
    their permuted values (``moves`` (W, 3) int64: the permutation's ``(shift, mask,
    target)`` moves as int64 bits), stable. Writes the directory ``offsets`` ((2^bits + 1,)
    uint32, zeroed by the caller: entries with top bits b are ``offsets[b]:offsets[b + 1]``),
    each entry's row as its low 16 bits in ``low`` ((m,) uint16) and the rest in ``high8``
    ((m,) uint8) or, when ``high8`` is empty, ``high16`` ((m,) uint16), and its filter (the 16
    permuted bits after the top ``bits``) in ``filters`` ((m,) uint16). O(m + 2^bits) time; no
    memory but a (2^bits,) int64 of write positions."""
    m = values.size
    top = np.uint64(64 - bits)
    after = np.uint64(48 - bits)
    for i in range(m):
        offsets[np.int64(_permute(values[i], moves) >> top) + 1] += 1  # type: ignore[no-untyped-call]
    positions = np.empty(offsets.size - 1, dtype=np.int64)
    total = np.int64(0)
    for b in range(offsets.size - 1):
        total += np.int64(offsets[b + 1])
        positions[b] = total - np.int64(offsets[b + 1])
        offsets[b + 1] = np.uint32(total)
    given = rows.size > 0
    narrow = high8.size > 0
    for i in range(m):
        permuted = _permute(values[i], moves)  # type: ignore[no-untyped-call]
        bucket = np.int64(permuted >> top)
        p = positions[bucket]
        positions[bucket] = p + 1
        row = np.int64(rows[i]) if given else first_row + i
        low[p] = np.uint16(row & 0xFFFF)
        if narrow:
            high8[p] = np.uint8(row >> 16)
        else:
            high16[p] = np.uint16(row >> 16)
        filters[p] = np.uint16((permuted >> after) & np.uint64(0xFFFF))
