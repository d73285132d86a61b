"""The key store's rows: every row's key bytes in one growing buffer, with offsets, hashes and
first-added ranks, all numpy arrays (no Python object per key), and the capacity rule by which
every array of the store grows.

Layout, by row (the index's row numbers: a key is stored once per row, and a row's key never
changes):

* ``data`` ((capacity,) uint8): the keys in row order as a key section
  (:mod:`permindex.storage.key_section`: each key's UTF-8 bytes then a NUL); a key may itself
  contain NUL (the offsets, not the terminators, delimit keys);
* ``offsets`` ((rows + 1,) int64): row r's key is ``data[offsets[r]:offsets[r + 1] - 1]``;
* ``hashes`` ((rows,) uint64): XXH3-64 (seed 0) of each row's key bytes;
* ``born`` ((rows,) uint32): the rank of the key's first addition, so that iteration gives keys in
  the order they were first added even after a replacement moved them to a new row.

Rows are append-only between compactions; dead rows keep their bytes until then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from permindex.storage.key_section import decode_section

__all__ = [
    "KeyRows",
    "ahead_capacity",
    "capacity_after",
    "grown",
    "nearly_full",
    "next_capacity",
    "ragged_positions",
]

_U8 = NDArray[np.uint8]
_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]
_A = TypeVar("_A", bound=np.generic)


class KeyRows:
    """The rows of a key store (layout in the module docstring): appended bytes, read back by
    row. The hash table over them is :class:`~permindex.index.keys.hash_table.KeyTable`'s.

    Not thread-safe: the index serializes access.
    """

    __slots__ = (
        "_born",
        "_data",
        "_data_mv",
        "_hash_mv",
        "_hashes",
        "_next_born",
        "_off_mv",
        "_offsets",
        "_rows",
    )

    def __init__(self) -> None:
        self._rows = 0  # rows appended (live and dead)
        self._next_born = 0
        self._data: _U8 = np.zeros(1024, dtype=np.uint8)
        self._offsets: _I64 = np.zeros(65, dtype=np.int64)
        self._hashes: _U64 = np.zeros(64, dtype=np.uint64)
        self._born: NDArray[np.uint32] = np.zeros(64, dtype=np.uint32)
        self._views()

    def _views(self) -> None:
        """Refresh the memoryviews of the arrays (after any array is replaced): indexing a
        memoryview gives a Python int, without numpy scalar overhead (single-key operations)."""
        self._data_mv = self._data.data
        self._off_mv = self._offsets.data
        self._hash_mv = self._hashes.data

    @property
    def rows(self) -> int:
        """Rows appended, dead ones included."""
        return self._rows

    def _rows_nbytes(self) -> int:
        """Bytes of the row arrays, by capacity."""
        return int(
            self._data.nbytes + self._offsets.nbytes + self._hashes.nbytes + self._born.nbytes
        )

    def _reserve(self, rows: int, data_bytes: int) -> None:
        """Room for ``rows`` more rows and ``data_bytes`` more key bytes (:func:`next_capacity`)."""
        need = self._rows + rows
        replaced = False
        if need > self._hashes.size:
            capacity = next_capacity(need, self._hashes.size)
            self._hashes = grown(self._hashes, capacity, self._rows)
            self._born = grown(self._born, capacity, self._rows)
            self._offsets = grown(self._offsets, capacity + 1, self._rows + 1)
            replaced = True
        used = self._offsets.item(self._rows)
        if used + data_bytes > self._data.size:
            capacity = next_capacity(used + data_bytes, self._data.size)
            self._data = grown(self._data, capacity, used)
            replaced = True
        if replaced:
            self._views()

    # -- reading keys -----------------------------------------------------------------------

    def key(self, row: int) -> str:
        """The key of ``row`` (live or dead), decoded."""
        offsets = self._off_mv
        return str(self._data_mv[offsets[row] : offsets[row + 1] - 1], "utf-8")

    def key_bytes(self, row: int) -> bytes:
        """The UTF-8 bytes of ``row``'s key."""
        offsets = self._off_mv
        return bytes(self._data_mv[offsets[row] : offsets[row + 1] - 1])

    def hash_of(self, row: int) -> int:
        """The stored XXH3-64 of ``row``'s key."""
        return int(self._hash_mv[row])

    def keys(self, rows: NDArray[np.integer] | Sequence[int]) -> list[str]:
        """The keys of ``rows`` (any order, repeats allowed), decoded, by the kernels of
        :mod:`permindex.index.keys.kernels`: the distinct rows found by hashing (O(n), no
        sort), the bytes of the rows (or, when they mostly repeat -- fewer than half
        distinct, one key matching many queries -- of the distinct rows, each decoded once and
        its str shared) gathered in one pass, decoded once and split at the NULs. O(n +
        bytes)."""
        from permindex.index.keys import kernels as key_kernels

        wanted: _I64 = np.ascontiguousarray(rows, dtype=np.int64)
        if wanted.size == 0:
            return []
        distinct, inverse = key_kernels.distinct_rows(wanted)
        repeats = 2 * distinct.size < wanted.size  # mostly repeats: decode each row once
        chosen = distinct if repeats else wanted
        data, lengths = key_kernels.gather_key_bytes(self._offsets, self._data, chosen)
        decoded = decode_section(data.tobytes(), lengths)
        return list(map(decoded.__getitem__, inverse.tolist())) if repeats else decoded

    def order_ties(self, ties: _I64, rows: _I64, fps: NDArray[np.uint64]) -> None:
        """Sort by key, in place, each run of tied matches of a batch (``ties``, ``rows`` (m,)
        int64 and their fingerprints ``fps`` (m,) uint64 as
        :func:`~permindex.index.search.match_kernels.arrange_matches` returns them), comparing the
        rows' stored UTF-8 bytes in the compiled kernel
        :func:`~permindex.index.keys.kernels.order_ties_by_key`. O(r^2) per run of r
        ties."""
        from permindex.index.keys import kernels as key_kernels

        key_kernels.order_ties_by_key(ties, rows, fps, self._offsets, self._data)

    def live_keys(self, live: NDArray[np.bool_]) -> list[str]:
        """The keys of the rows where ``live`` ((rows,) bool) is set, in row order, decoded in one
        pass (a boolean mask over the bytes, no per-byte index array). O(rows + bytes)."""
        n = self._rows
        count = int(live[:n].sum())
        if count == 0:
            return []
        used = int(self._offsets[n])
        sizes = np.diff(self._offsets[: n + 1])
        if count == n:
            return decode_section(self._data[:used].tobytes(), sizes - 1)
        chosen = self._data[:used][np.repeat(live[:n], sizes)]
        return decode_section(chosen.tobytes(), sizes[live[:n]] - 1)

    def export(self, rows: _I64) -> tuple[_I64, _U8]:
        """The keys of ``rows`` ((m,) int64) in compact form: ((m,) int64 UTF-8 lengths, their key
        section) -- the layout of a snapshot's key section. O(m + bytes)."""
        starts = self._offsets[rows]
        sizes = self._offsets[rows + 1] - starts
        if rows.size == self._rows and (rows.size == 0 or bool((np.diff(rows) == 1).all())):
            raw = self._data[: int(self._offsets[self._rows])].copy()
        else:
            raw = self._data[ragged_positions(starts, sizes)] if rows.size else self._data[:0]
        return sizes - 1, raw

    def iteration_order(self, rows: _I64) -> _I64:
        """``rows`` reordered by the first-added rank of their keys."""
        return rows[np.argsort(self._born[rows], kind="stable")]

    def _equal_bytes(self, blob: _U8, starts: _I64, sizes: _I64, rows: _I64) -> NDArray[np.bool_]:
        """For each i: whether ``blob[starts[i]:starts[i] + sizes[i]]`` equals row ``rows[i]``'s
        stored bytes (terminators included, so equal sizes are required)."""
        stored_starts = self._offsets[rows]
        stored_sizes = self._offsets[rows + 1] - stored_starts
        result = stored_sizes == sizes
        check = np.flatnonzero(result)
        if check.size:
            lengths = sizes[check]
            a = blob[ragged_positions(starts[check], lengths)]
            b = self._data[ragged_positions(stored_starts[check], lengths)]
            boundaries = np.concatenate(([0], np.cumsum(lengths)[:-1]))
            mismatches = np.add.reduceat((a != b).astype(np.int64), boundaries)
            result[check] = mismatches == 0
        return np.asarray(result, dtype=bool)

    # -- compaction and invariants ----------------------------------------------------------

    def _compact_rows(self, keep: _I64) -> None:
        """Keep only the rows ``keep`` (increasing), renumbered 0..m-1 in order, their ranks
        renumbered 0..m-1 in the same order; the arrays get a quarter of room. O(m + bytes)."""
        m = int(keep.size)
        starts = self._offsets[keep]
        sizes = self._offsets[keep + 1] - starts
        total = int(sizes.sum())
        data = np.zeros(max(1024, total + total // 4), dtype=np.uint8)
        if m:
            data[:total] = self._data[ragged_positions(starts, sizes)]
        capacity = max(64, m + m // 4)
        offsets = np.zeros(capacity + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1 : m + 1])
        hashes = np.zeros(capacity, dtype=np.uint64)
        hashes[:m] = self._hashes[keep]
        born = np.zeros(capacity, dtype=np.uint32)
        ranks = np.argsort(np.argsort(self._born[keep], kind="stable"), kind="stable")
        born[:m] = ranks.astype(np.uint32)
        self._data, self._offsets, self._hashes, self._born = data, offsets, hashes, born
        self._rows = m
        self._next_born = m
        self._views()

    def _check_rows(self) -> list[str]:
        """Problems of the rows (empty when none), O(rows): offsets increasing by at least 2
        (a key is at least one byte and its NUL), a NUL at each key's end."""
        n = self._rows
        offsets = self._offsets[: n + 1]
        if offsets[0] != 0 or not bool((np.diff(offsets) >= 2).all()):
            return ["key offsets are not increasing by at least 2"]
        if n and not bool((self._data[offsets[1:] - 1] == 0).all()):
            return ["a key is not NUL-terminated"]
        return []


def ragged_positions(starts: _I64, lengths: _I64) -> _I64:
    """Concatenated ``arange(starts[i], starts[i] + lengths[i])`` for every i (lengths >= 1),
    as (sum(lengths),) int64."""
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    out = np.ones(total, dtype=np.int64)
    out[0] = starts[0]
    if lengths.size > 1:
        # At each segment's first position jump from the previous segment's last position.
        out[ends[:-1]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return np.cumsum(out)


def grown(array: NDArray[_A], capacity: int, used: int) -> NDArray[_A]:
    """A zeroed array of ``capacity`` elements of ``array``'s dtype with its first ``used``."""
    out = np.zeros(capacity, dtype=array.dtype)
    out[:used] = array[:used]
    return out


def nearly_full(used: int, capacity: int) -> bool:
    """Whether an array of ``capacity`` elements with ``used`` in use is past 7/8 full: the
    point where a growth ahead of need starts (:class:`~permindex.index.keys.store.Growth`)."""
    return 8 * used > 7 * capacity


def ahead_capacity(used: int, extra: int, capacity: int) -> int:
    """The capacity a growth ahead of need gives an array of ``capacity`` elements with
    ``used`` in use: half as much again when it is :func:`nearly_full`, else the same, and in
    any case room for ``extra`` more."""
    grown_capacity = capacity + capacity // 2 if nearly_full(used, capacity) else capacity
    return max(grown_capacity, used + extra)


def next_capacity(need: int, capacity: int) -> int:
    """The capacity an array of ``capacity`` elements grows to when ``need`` must fit: half as
    much again (amortized O(1) appends), or ``need`` plus an eighth when a bulk write needs more
    than that, leaving room for the writes that follow it (so that the first small write after
    a bulk load starts a growth in the background, :class:`~permindex.index.keys.store.Growth`,
    instead of waiting for one)."""
    grown_capacity = capacity + capacity // 2
    return max(grown_capacity, need) if need <= grown_capacity else need + need // 8


def capacity_after(used: int, extra: int, capacity: int, *, large: bool, small: bool) -> int:
    """The most capacity an array of ``capacity`` elements with ``used`` in use can have after
    a write of ``extra`` more and the upkeep that follows it: grown when the write does not
    fit by :func:`next_capacity` inline, or, in a ``large`` store, by the growth ahead the
    write starts (:func:`ahead_capacity`; its thread may note the store before or after the
    write, and grows every array past 7/8 full, fitting or not); then, when the write
    was ``small`` beside the store (a growth ahead follows it), by half again when the write
    leaves it past 7/8 full (:func:`nearly_full`); the largest of these ways. For the memory
    a write may take (:meth:`KeyStore.growth_bytes
    <permindex.index.keys.store.KeyStore.growth_bytes>`)."""
    need = used + extra
    ways = [capacity if need <= capacity else next_capacity(need, capacity)]
    if large:  # a growth ahead started by the write, noting the store before or after it
        ways += [ahead_capacity(used, extra, capacity), ahead_capacity(need, extra, capacity)]
    return max(way + way // 2 if small and nearly_full(need, way) else way for way in ways)
