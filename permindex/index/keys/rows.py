"""The key store's rows: every row's key as its code (:mod:`permindex.index.keys.codec`) in one
growing buffer, found through a length byte a row and an offset a block of rows, all numpy
arrays (no Python object per key), and the capacity rule by which every array of the store
grows.

Layout, by row (the index's row numbers: a key is stored once per row, and a row's key never
changes):

* ``codes`` ((capacity,) uint8): the rows' codes in row order; a code of 255 bytes or more is
  preceded by its size as 2 little-endian bytes;
* ``lens`` ((rows,) uint8): each row's code size, or 255 for one preceded by its size;
* ``bases`` ((rows / 16 + 1,) int64): where the span of rows 16b.. starts in ``codes``; a row's
  code is found by adding the sizes of the rows before it in its block (at most 15);
* the store's dictionary (:class:`~permindex.index.keys.codec.Dictionary`), trained once from
  the first :data:`TRAIN_ROWS` keys or more (a sample of at most :data:`SAMPLE_ROWS`), every code
  made again with it; an empty one when no segment repeats (keys such as ``k00000001``).

Bytes per row: its code, 1 + 8/16. Rows are append-only between compactions; dead rows keep
their codes until then. Iteration gives rows in row order: a key in the order it was last added.
"""

from __future__ import annotations

import mmap
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Final, TypeVar

import numpy as np
from numpy.typing import NDArray

from permindex.storage.key_section import decode_section

if TYPE_CHECKING:
    from permindex.index.keys.codec import Dictionary

__all__ = [
    "SAMPLE_ROWS",
    "TRAIN_ROWS",
    "KeyRows",
    "ahead_capacity",
    "capacity_after",
    "grown",
    "nearly_full",
    "next_capacity",
    "ragged_positions",
    "zeroed",
]

_U8 = NDArray[np.uint8]
_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]
_A = TypeVar("_A", bound=np.generic)

#: Rows stored when the dictionary is trained (:mod:`permindex.index.keys.codec`).
TRAIN_ROWS: Final = 1 << 12
#: Most keys the dictionary is trained on.
SAMPLE_ROWS: Final = 1 << 16
_BLOCK: Final = 16  # rows a block of ``bases`` (kernels.BLOCK_SHIFT)


def _decode_row_entry() -> Callable[..., int]:
    """The compiled entry point of :func:`~permindex.index.keys.kernels.decode_row`, called
    without the dispatcher's type resolution (the store passes exactly its signature's types:
    its own contiguous arrays, the dictionary's, an int row)."""
    from permindex.index.keys import kernels  # loads numba
    from permindex.jit_numba import entry_point

    entry: Callable[..., int] = entry_point(kernels.decode_row)
    return entry


def code_room(rows: int, data_bytes: int) -> int:
    """The most code bytes ``rows`` keys of ``data_bytes`` UTF-8 bytes (their NULs included)
    may take: a code byte per run of non-ASCII bytes (2 or more in valid UTF-8, each followed by
    an ASCII byte or the NUL unless 16 bytes long: ``é`` between ASCII bytes takes 3 bytes for
    2), 2 length bytes for a long one (:func:`~permindex.index.keys.codec.code_bound`)."""
    return data_bytes + data_bytes // 3 + 2 * rows


class KeyRows:
    """The rows of a key store (layout in the module docstring): appended codes, read back by
    row. The hash table over them is :class:`~permindex.index.keys.hash_table.KeyTable`'s.

    Not thread-safe: the index serializes access.
    """

    __slots__ = (
        "_bases",
        "_codes",
        "_decode_one",
        "_key_out",
        "_key_view",
        "_lens",
        "_rows",
        "_trained",
        "_used",
        "_words",
    )

    def __init__(self) -> None:
        self._rows = 0  # rows appended (live and dead)
        self._used = 0  # code bytes used
        self._codes: _U8 = np.zeros(1024, dtype=np.uint8)
        self._lens: _U8 = np.zeros(64, dtype=np.uint8)
        self._bases: _I64 = np.zeros(64 // _BLOCK + 1, dtype=np.int64)
        from permindex.index.keys.codec import Dictionary  # its module loads numba

        self._words = Dictionary.empty()
        self._trained = False
        # key(): the compiled decoder (bound on first use) and the buffer it decodes into.
        self._decode_one: Callable[..., int] | None = None
        self._key_out: _U8 = np.zeros(256, dtype=np.uint8)
        self._key_view = self._key_out.data

    def _views(self) -> None:
        """Refresh what depends on the arrays' identity (after any array is replaced)."""

    @property
    def rows(self) -> int:
        """Rows appended, dead ones included."""
        return self._rows

    @property
    def dictionary(self) -> Dictionary:
        """The store's dictionary (empty until trained)."""
        return self._words

    def _rows_nbytes(self) -> int:
        """Bytes of the row arrays and the dictionary, by capacity."""
        return int(self._codes.nbytes + self._lens.nbytes + self._bases.nbytes + self._words.nbytes)

    def _reserve(self, rows: int, code_bytes: int) -> None:
        """Room for ``rows`` more rows and ``code_bytes`` more code bytes
        (:func:`next_capacity`)."""
        need = self._rows + rows
        if need > self._lens.size:
            capacity = next_capacity(need, self._lens.size)
            self._lens = grown(self._lens, capacity, self._rows)
            self._bases = grown(self._bases, capacity // _BLOCK + 1, self._rows // _BLOCK + 1)
        if self._used + code_bytes > self._codes.size:
            capacity = next_capacity(self._used + code_bytes, self._codes.size)
            self._codes = grown(self._codes, capacity, self._used)

    def _write(self, codes: _U8, sizes: _I64) -> int:
        """Append the codes ``codes`` of (n,) ``sizes`` as new rows (making room); the first."""
        from permindex.index.keys import kernels

        n = int(sizes.size)
        first = self._rows
        self._reserve(n, int(codes.size) + 2 * int(np.count_nonzero(sizes >= 255)))
        self._used = int(
            kernels.write_codes(
                self._codes, self._lens, self._bases, first, self._used, codes, sizes
            )
        )
        self._rows = first + n
        return first

    # -- reading keys -----------------------------------------------------------------------

    def _decode(self, rows: _I64) -> tuple[_U8, _I64]:
        from permindex.index.keys import kernels

        section: _U8
        lengths: _I64
        section, lengths = kernels.decode_rows(
            self._codes, self._lens, self._bases, rows, self._words.data, self._words.offsets
        )
        return section, lengths

    def key(self, row: int) -> str:
        """The key of ``row`` (live or dead), decoded: a single lookup's match. One call of the
        compiled :func:`~permindex.index.keys.kernels.decode_row` into the store's own buffer
        (grown for a longer key), no array made: the caller holds the index's lock, as for
        every method of the store. O(16 + B)."""
        decode = self._decode_one
        if decode is None:
            decode = self._decode_one = _decode_row_entry()
        words = self._words
        out = self._key_out
        length = decode(self._codes, self._lens, self._bases, row, words.data, words.offsets, out)
        if length < 0:  # longer than any key decoded so far
            out = self._key_out = np.zeros(-length, dtype=np.uint8)
            self._key_view = out.data
            length = decode(
                self._codes, self._lens, self._bases, row, words.data, words.offsets, out
            )
        return str(self._key_view[:length], "utf-8")

    def key_bytes(self, row: int) -> bytes:
        """The UTF-8 bytes of ``row``'s key."""
        section, _ = self._decode(np.array([row], dtype=np.int64))
        return section[:-1].tobytes()

    def keys(self, rows: NDArray[np.integer] | Sequence[int]) -> list[str]:
        """The keys of ``rows`` (any order, repeats allowed), decoded, by the kernels of
        :mod:`permindex.index.keys.kernels`: the distinct rows found by hashing (O(n), no
        sort), the rows (or, when they mostly repeat -- fewer than half distinct, one key
        matching many queries -- the distinct rows, each decoded once and its str shared)
        decoded in one pass into one key section, made str once and split at the NULs.
        O(n + bytes)."""
        from permindex.index.keys import kernels as key_kernels

        wanted: _I64 = np.ascontiguousarray(rows, dtype=np.int64)
        if wanted.size == 0:
            return []
        distinct, inverse = key_kernels.distinct_rows(wanted)
        repeats = 2 * distinct.size < wanted.size  # mostly repeats: decode each row once
        chosen = distinct if repeats else wanted
        data, lengths = self._decode(chosen)
        decoded = decode_section(data.tobytes(), lengths)
        return list(map(decoded.__getitem__, inverse.tolist())) if repeats else decoded

    def order_ties(self, ties: _I64, rows: _I64, fps: NDArray[np.uint64]) -> None:
        """Sort by key, in place, each run of tied matches of a batch (``ties``, ``rows`` (m,)
        int64 and their fingerprints ``fps`` (m,) uint64 as
        :func:`~permindex.index.search.match_kernels.arrange_matches` returns them), each
        run's keys decoded and compared in the compiled kernel
        :func:`~permindex.index.keys.kernels.order_ties_by_key`. O(r^2) per run of r ties."""
        from permindex.index.keys import kernels as key_kernels

        key_kernels.order_ties_by_key(
            ties,
            rows,
            fps,
            self._codes,
            self._lens,
            self._bases,
            self._words.data,
            self._words.offsets,
        )

    def live_keys(self, live: NDArray[np.bool_]) -> list[str]:
        """The keys of the rows where ``live`` ((rows,) bool) is set, in row order, decoded in one
        pass. O(rows + bytes)."""
        chosen = np.flatnonzero(live[: self._rows]).astype(np.int64)
        if chosen.size == 0:
            return []
        data, lengths = self._decode(chosen)
        return decode_section(data.tobytes(), lengths)

    def export(self, rows: _I64) -> tuple[_I64, _U8]:
        """The keys of ``rows`` ((m,) int64) in compact form: ((m,) int64 UTF-8 lengths, their key
        section) -- the layout of a snapshot's key section. O(m + bytes)."""
        if rows.size == 0:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.uint8)
        data, lengths = self._decode(np.ascontiguousarray(rows, dtype=np.int64))
        return lengths, data

    def iteration_order(self, rows: _I64) -> _I64:
        """``rows`` in the order of iteration: row order (the order the keys were last added)."""
        return rows

    def _spans(self, rows: _I64) -> tuple[_I64, _I64, _I64]:
        from permindex.index.keys import kernels

        return kernels.row_spans(self._codes, self._lens, self._bases, rows)

    def _row_codes(self, rows: _I64) -> tuple[_U8, _I64]:
        """The codes of ``rows`` concatenated, and their (m,) int64 sizes."""
        _, starts, sizes = self._spans(rows)
        if rows.size == 0 or int(sizes.sum()) == 0:
            return self._codes[:0].copy(), sizes
        return self._codes[ragged_positions(starts, sizes)], sizes

    # -- compaction and invariants ----------------------------------------------------------

    def _compact_rows(self, keep: _I64) -> None:
        """Keep only the rows ``keep`` (increasing), renumbered 0..m-1 in order; the arrays get
        a quarter of room. O(m + bytes)."""
        codes, sizes = self._row_codes(keep)
        self._replace_rows(codes, sizes)

    def _replace_rows(self, codes: _U8, sizes: _I64, *, keep_capacity: bool = False) -> None:
        """Make the rows exactly the codes ``codes`` of (m,) ``sizes``, with a quarter of room
        (``keep_capacity``: in arrays of the capacities the store has, when they fit)."""
        m = int(sizes.size)
        total = int(codes.size) + 2 * int(np.count_nonzero(sizes >= 255))
        code_capacity = max(1024, total + total // 4)
        capacity = max(64, m + m // 4)
        if keep_capacity:
            code_capacity = max(total, self._codes.size)
            capacity = max(m, self._lens.size)
        self._codes = zeroed(code_capacity, np.uint8)
        self._lens = zeroed(capacity, np.uint8)
        self._bases = zeroed(capacity // _BLOCK + 1, np.int64)
        self._rows = 0
        self._used = 0
        self._write(codes, sizes)

    def _check_rows(self) -> list[str]:
        """Problems of the rows (empty when none), O(rows + bytes): the block offsets where
        the row lengths put them, every code decoding to valid UTF-8 and coded again to
        itself (the code is canonical)."""
        from permindex.index.keys.codec import encode_section

        n = self._rows
        if n == 0:
            return []
        rows = np.arange(n, dtype=np.int64)
        spans, starts, sizes = self._spans(rows)
        ends = starts + sizes
        if spans[0] != 0 or not bool((spans[1:] == ends[:-1]).all()) or int(ends[-1]) != self._used:
            return ["code spans are not contiguous"]
        section, lengths = self._decode(rows)
        try:
            decode_section(section.tobytes(), lengths)
        except ValueError:
            return ["a code does not decode to UTF-8"]
        again, again_sizes, _ = encode_section(
            section,
            np.cumsum(lengths + 1),
            self._words.data,
            self._words.offsets,
            self._words.slots,
        )
        codes, _ = self._row_codes(rows)
        if not (np.array_equal(again_sizes, sizes) and np.array_equal(again, codes)):
            return ["a code is not the key's canonical code"]
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


#: Arrays of at least this many bytes get a mapping of their own (:func:`zeroed`).
OWN_MAPPING_BYTES: Final = 1 << 22
#: A private anonymous mapping (None where the platform's mmap has no such flags: Windows).
_MAP_FLAGS: Final = (
    mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
    if hasattr(mmap, "MAP_PRIVATE") and hasattr(mmap, "MAP_ANONYMOUS")
    else None
)


def zeroed(size: int, dtype: Any) -> NDArray[Any]:
    """A zeroed (size,) array of ``dtype``: how every growable array of an index is made (its
    fingerprints, liveness, times, the key store's codes, offsets and hash table). One of at
    least :data:`OWN_MAPPING_BYTES` bytes is given a private anonymous mapping of its own
    (``mmap``) rather than taken from the C allocator: its pages become resident only when
    written (the capacity not used yet costs nothing), and they return to the system when the
    array is freed, whichever thread made it. From glibc's allocator, an array that the
    growth-ahead thread made, once freed, stayed resident at the top of that thread's arena,
    where ``malloc_trim`` does not reach: one load of 10^7 keys in four held about 5 bytes a
    fingerprint more (benchmarks/README.md, "Resident memory after a load: the growth
    thread's arena"). Smaller arrays come from ``np.zeros``. O(size) at most.

    >>> from permindex.index.keys.rows import zeroed
    >>> big = zeroed(1 << 20, "uint64")
    >>> big.dtype.name, big.size, int(big.sum()), big.flags.writeable
    ('uint64', 1048576, 0, True)
    """
    kind = np.dtype(dtype)
    nbytes = size * kind.itemsize
    if nbytes < OWN_MAPPING_BYTES or _MAP_FLAGS is None:
        return np.zeros(size, dtype=kind)
    region = mmap.mmap(-1, nbytes, flags=_MAP_FLAGS)
    return np.frombuffer(region, dtype=kind, count=size)


def grown(array: NDArray[_A], capacity: int, used: int) -> NDArray[_A]:
    """A zeroed array (:func:`zeroed`) of ``capacity`` elements of ``array``'s dtype with its
    first ``used``."""
    out: NDArray[_A] = zeroed(capacity, array.dtype)
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
