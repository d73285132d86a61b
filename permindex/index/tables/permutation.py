"""Table designs of the permutation index (Manku, Jain & Das Sarma 2007, "Detecting
Near-Duplicates for Web Crawling", section 3): :class:`Design` (blocks, tables, the pigeonhole
guarantee in its docstring), each table's :class:`Permutation`, the k rule of a query
(:func:`query_k`), and the choice of a design for ``design="auto"`` (:func:`choose_design`).
Bit i has value ``1 << i``; bit 63 is the most significant.
"""

from __future__ import annotations

import functools
import math
import sys
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations
from typing import TypeVar

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.keys.rule import check_int

__all__ = [
    "AUTO_DESIGNS",
    "DEFAULT_DESIGN",
    "FILTER_BITS",
    "MAX_TABLES",
    "Design",
    "Permutation",
    "argsort_prefixes",
    "check_design_k",
    "choose_design",
    "design_bytes_per_fingerprint",
    "design_for_k",
    "design_query_cost",
    "directory_bits",
    "query_k",
]

_BITS = 64
_LITTLE_ENDIAN = sys.byteorder == "little"
#: Most tables a design may have (C(blocks, leading)); beyond this the memory is unreasonable.
MAX_TABLES = 1024
#: Width of a run's filter (:meth:`Permutation.filter`): the 16 bits of the permuted value right
#: after the bits its directory resolves (``benchmarks/README.md``, "Table layout", has the
#: measurements behind 16 rather than 32).
FILTER_BITS = 16


def directory_bits(size: int, prefix_bits: int) -> int:
    """Bits r of the directory of a run of ``size`` entries in a table of ``prefix_bits``-bit
    prefixes: the top r bits of the permuted value index it. The largest r with 2^r <= size / 8
    (8 to 16 entries per bucket, at most half a byte of directory per entry), at least 1, at
    most the prefix width. Below the prefix width a bucket holds several prefixes, which the
    filter's leading bits tell apart. (A directory past the prefix width, whose extra bits a
    query compares bucket by bucket, gave the filter those bits for free but ran the batch
    kernel slower: ``benchmarks/README.md``, "Table layout".) O(1).

    >>> directory_bits(10**6, 16), directory_bits(10**7, 16), directory_bits(10**6, 26)
    (16, 16, 16)
    """
    return max(1, min(prefix_bits, size.bit_length() - 4))


@dataclass(frozen=True)
class _Segment:
    """A run of bits moved together: ``width`` bits starting at bit ``source`` of the fingerprint
    go to bit ``target`` of the result."""

    source: int
    width: int
    target: int

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1


def _window(moves: list[tuple[int, int, int]], low: int, high: int) -> tuple[_Segment, ...]:
    """The (source, width, target) moves restricted to target bits [low, high), re-based so the
    window's lowest bit lands at bit 0."""
    out: list[tuple[int, int, int]] = []
    for source, width, target in moves:
        a, b = max(target, low), min(target + width, high)
        if a < b:
            out.append((source + a - target, b - a, a - low))
    return _segments(out)


def _segments(moves: list[tuple[int, int, int]]) -> tuple[_Segment, ...]:
    """Merge (source, width, target) moves that are contiguous in both source and target, so
    that e.g. the identity permutation is one shift-and-mask instead of one per block."""
    merged: list[_Segment] = []
    for source, width, target in moves:
        if merged:
            last = merged[-1]
            if last.source == source + width and last.target == target + width:
                merged[-1] = _Segment(source, last.width + width, target)
                continue
        merged.append(_Segment(source, width, target))
    return tuple(merged)


class Permutation:
    """The bit permutation and prefix of one table of a :class:`Design`.

    Attributes:
        table: the table's number in the design, 0 .. C(blocks, leading) - 1.
        leading_blocks: the blocks (0 = most significant) whose bits form the prefix.
        order: all blocks in their order after the permutation (leading blocks first).
        prefix_bits: width of the prefix, bits (the sum of the leading blocks' sizes).
        leading_mask: the leading blocks' bits, in the fingerprint's own bit positions. Two
            fingerprints have the same prefix in this table iff ``(a ^ b) & leading_mask == 0``.
    """

    __slots__ = (
        "_np_prefix",
        "_np_segments",
        "_np_unsegments",
        "_prefix_segments",
        "_segments",
        "_unsegments",
        "leading_blocks",
        "leading_mask",
        "order",
        "permute_ops",
        "prefix_bits",
        "prefix_ops",
        "simple",
        "table",
    )

    def __init__(
        self,
        table: int,
        leading_blocks: tuple[int, ...],
        block_sizes: tuple[int, ...],
        block_shifts: tuple[int, ...],
    ) -> None:
        self.table = table
        self.leading_blocks = leading_blocks
        rest = tuple(b for b in range(len(block_sizes)) if b not in leading_blocks)
        self.order: tuple[int, ...] = leading_blocks + rest
        self.prefix_bits = sum(block_sizes[b] for b in leading_blocks)
        self.leading_mask = 0
        for b in leading_blocks:
            self.leading_mask |= ((1 << block_sizes[b]) - 1) << block_shifts[b]
        moves: list[tuple[int, int, int]] = []
        top = _BITS
        for b in self.order:
            top -= block_sizes[b]
            moves.append((block_shifts[b], block_sizes[b], top))
        self._segments = _segments(moves)
        self._unsegments = _segments(sorted(((t, w, s) for s, w, t in moves), key=lambda m: -m[0]))
        low = _BITS - self.prefix_bits
        self._prefix_segments = _window(moves, low, _BITS)
        # (shift, mask, target) as plain ints, for the per-query Python path and the kernels.
        self.prefix_ops = tuple((g.source, g.mask, g.target) for g in self._prefix_segments)
        self.permute_ops = tuple((g.source, g.mask, g.target) for g in self._segments)

        def as_np(segs: tuple[_Segment, ...]) -> tuple[tuple[np.uint64, np.uint64, np.uint64], ...]:
            return tuple(
                (np.uint64(s.source), np.uint64(s.mask), np.uint64(s.target)) for s in segs
            )

        self._np_segments = as_np(self._segments)
        self._np_unsegments = as_np(self._unsegments)
        self._np_prefix = as_np(self._prefix_segments)

    def __repr__(self) -> str:
        return (
            f"Permutation(table={self.table}, leading_blocks={self.leading_blocks}, "
            f"prefix_bits={self.prefix_bits})"
        )

    @staticmethod
    def _apply(value: int, segments: tuple[_Segment, ...]) -> int:
        out = 0
        for seg in segments:
            out |= ((value >> seg.source) & seg.mask) << seg.target
        return out

    @staticmethod
    def _apply_array(
        values: NDArray[np.uint64],
        segments: tuple[tuple[np.uint64, np.uint64, np.uint64], ...],
    ) -> NDArray[np.uint64]:
        out: NDArray[np.uint64] | None = None
        for source, mask, target in segments:
            part = (values >> source) & mask
            if target:
                part <<= target
            if out is None:
                out = part
            else:
                out |= part
        assert out is not None  # every permutation has at least one segment
        return out

    def permute(self, fingerprint: int) -> int:
        """The permuted value of ``fingerprint`` (a Python int in [0, 2^64), not validated):
        leading blocks moved to the most significant bits, the other blocks after them."""
        return self._apply(fingerprint, self._segments)

    def unpermute(self, permuted: int) -> int:
        """Inverse of :meth:`permute`."""
        return self._apply(permuted, self._unsegments)

    def prefix(self, fingerprint: int) -> int:
        """The prefix of ``fingerprint`` in this table: ``permute(fingerprint) >> (64 -
        prefix_bits)``, an int in [0, 2^prefix_bits), computed without the full permutation."""
        return self._apply(fingerprint, self._prefix_segments)

    def permute_array(self, fingerprints: NDArray[np.uint64]) -> NDArray[np.uint64]:
        """:meth:`permute` of each element of a (n,) uint64 array; returns a new (n,) uint64."""
        return self._apply_array(np.asarray(fingerprints, dtype=np.uint64), self._np_segments)

    def unpermute_array(self, permuted: NDArray[np.uint64]) -> NDArray[np.uint64]:
        """Inverse of :meth:`permute_array`; (n,) uint64 in and out."""
        return self._apply_array(np.asarray(permuted, dtype=np.uint64), self._np_unsegments)

    def prefix_array(self, fingerprints: NDArray[np.uint64]) -> NDArray[np.uint64]:
        """:meth:`prefix` of each element of a (n,) uint64 array; returns a new (n,) uint64."""
        return self._apply_array(np.asarray(fingerprints, dtype=np.uint64), self._np_prefix)

    def filter(self, fingerprint: int, directory_bits: int) -> int:
        """The filter of ``fingerprint`` in a run whose directory resolves the top
        ``directory_bits`` (1 to 48) bits of the permuted value: the :data:`FILTER_BITS` (16)
        bits right after them, ``(permute(fingerprint) >> (48 - directory_bits)) & 0xFFFF``.
        Two fingerprints within Hamming distance k have filters within k (a subset of the
        bits), and those of the prefix equal, so a run keeps each entry's filter beside its row
        and rejects most candidates without reading the fingerprint."""
        return (self.permute(fingerprint) >> (64 - FILTER_BITS - directory_bits)) & 0xFFFF

    def filter_array(
        self, fingerprints: NDArray[np.uint64], directory_bits: int
    ) -> NDArray[np.uint16]:
        """:meth:`filter` of each element of a (n,) uint64 array, as a new (n,) uint16. O(n)."""
        permuted = self.permute_array(fingerprints)
        permuted >>= np.uint64(64 - FILTER_BITS - directory_bits)
        return permuted.astype(np.uint16)  # truncation: the low 16 bits

    def prefix_array16(self, fingerprints: NDArray[np.uint64]) -> NDArray[np.uint16]:
        """:meth:`prefix` of each element of a (n,) uint64 array as (n,) uint16, for a prefix of
        at most 16 bits. When the prefix is one aligned 16-bit block (every table of (4, 1)) this
        is a strided view of ``fingerprints`` (no copy, no arithmetic): read it, do not write it.
        O(n) otherwise.

        Raises:
            ValueError: the prefix has more than 16 bits.
        """
        if self.prefix_bits > 16:
            raise ValueError(f"a {self.prefix_bits}-bit prefix does not fit 16 bits")
        values = np.asarray(fingerprints, dtype=np.uint64)
        column = _column(values, self._np_prefix, np.uint16)
        if column is not None:
            return column
        return self._apply_array(values, self._np_prefix).astype(np.uint16)


_Word = TypeVar("_Word", np.uint16, np.uint32)


def _column(
    values: NDArray[np.uint64],
    segments: tuple[tuple[np.uint64, np.uint64, np.uint64], ...],
    word: type[_Word],
) -> NDArray[_Word] | None:
    """When ``segments`` is one move of a whole ``word`` (16 or 32 bits) from a bit position
    multiple of its width to bit 0, the moved bits of each of the (n,) uint64 ``values`` as a
    strided (n,) view of them (the word that holds them; little-endian machines, contiguous
    arrays); else None."""
    if len(segments) != 1 or not values.flags.c_contiguous or not _LITTLE_ENDIAN:
        return None
    width = 8 * np.dtype(word).itemsize
    source, mask, target = (int(x) for x in segments[0])
    if mask != (1 << width) - 1 or target != 0 or source % width:
        return None
    if values.dtype.byteorder not in "=<|":
        return None
    column: NDArray[_Word] = values.view(word)[source // width :: 64 // width]
    return column


@dataclass(frozen=True)
class Design:
    """A table design: 64 bits split into ``blocks`` blocks, ``leading`` of them form each
    table's prefix; C(blocks, leading) tables (Manku et al. 2007, section 3).

    Exact (no false negatives) for Hamming distance k <= :attr:`max_k` = blocks - leading.
    Examples from the paper for k = 3: (4, 1) with 4 tables of 16-bit prefixes (the default),
    (5, 2) with 10 tables of 25- or 26-bit prefixes, (6, 3) with 20 tables of 31- to 33-bit
    prefixes. More leading bits mean fewer candidates per query and more tables (memory).

    Raises:
        TypeError: ``blocks`` or ``leading`` is not an int (bool refused).
        InvalidArgumentError: not 1 <= leading < blocks <= 64, or more than :data:`MAX_TABLES`
            tables.

    A design ``(blocks, leading)`` splits the 64 bits of a fingerprint into ``blocks`` contiguous
    blocks. Block 0 holds the most significant bits; sizes are as equal as possible with the larger
    blocks first (6 blocks: 11, 11, 11, 11, 10, 10 bits). There is one table per combination of
    ``leading`` blocks, C(blocks, leading) tables in all. A table's permutation moves its leading
    blocks, in block order, to the most significant bits and keeps the other blocks after them in
    block order; its prefix is the permuted value's leading bits (the leading blocks' bits).

    Guarantee (pigeonhole): two fingerprints at Hamming distance k <= blocks - leading differ in at
    most k blocks, so at least ``leading`` blocks are equal and some table's prefix is the same for
    both. Every table has to be searched; a pair within k is found in at least one of them.
    """

    blocks: int
    leading: int

    def __post_init__(self) -> None:
        for name, value in (("blocks", self.blocks), ("leading", self.leading)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"design {name} must be an int, not {type(value).__name__}")
        if not 1 <= self.leading < self.blocks <= _BITS:
            raise InvalidArgumentError(
                f"design ({self.blocks} blocks, {self.leading} leading) is invalid: need "
                f"1 <= leading < blocks <= {_BITS}",
                value=(self.blocks, self.leading),
            )
        tables = math.comb(self.blocks, self.leading)
        if tables > MAX_TABLES:
            raise InvalidArgumentError(
                f"design ({self.blocks} blocks, {self.leading} leading) needs {tables} tables; "
                f"at most {MAX_TABLES} are supported",
                value=(self.blocks, self.leading),
            )

    @classmethod
    def of(cls, value: Design | tuple[int, int]) -> Design:
        """``value`` as a :class:`Design`: a Design, or a ``(blocks, leading)`` pair.

        Raises TypeError for anything else, InvalidArgumentError for an invalid pair."""
        if isinstance(value, Design):
            return value
        if isinstance(value, tuple) and len(value) == 2:
            return cls(value[0], value[1])
        raise TypeError(
            f"design must be a Design or a (blocks, leading) tuple, not {type(value).__name__} "
            f"{value!r}"
        )

    def __str__(self) -> str:
        return f"design ({self.blocks} blocks, {self.leading} leading)"

    def as_tuple(self) -> tuple[int, int]:
        """``(blocks, leading)``."""
        return (self.blocks, self.leading)

    @property
    def max_k(self) -> int:
        """Largest Hamming distance (bits) the design finds exactly: blocks - leading."""
        return self.blocks - self.leading

    @property
    def num_tables(self) -> int:
        """C(blocks, leading)."""
        return math.comb(self.blocks, self.leading)

    @cached_property
    def block_sizes(self) -> tuple[int, ...]:
        """Bits per block, block 0 (most significant) first; larger blocks first."""
        size, extra = divmod(_BITS, self.blocks)
        return tuple(size + 1 if b < extra else size for b in range(self.blocks))

    @cached_property
    def block_shifts(self) -> tuple[int, ...]:
        """Bit position of each block's least significant bit (block 0 ends at bit 63)."""
        shifts: list[int] = []
        top = _BITS
        for size in self.block_sizes:
            top -= size
            shifts.append(top)
        return tuple(shifts)

    def tables_for(self, k: int) -> tuple[int, ...]:
        """The tables a query within Hamming distance ``k`` (0 <= k <= :attr:`max_k`) has to
        search, in table order: all of them for k = max_k, fewer for a smaller k.

        Two fingerprints within k differ in at most k blocks D, and share the prefix of every table
        whose leading blocks avoid D. So a set of tables is exact for k when every k-set of blocks
        is avoided by one of them. The set is chosen greedily (most k-sets newly covered first) and
        that property is verified over all C(blocks, k) k-sets, so it is exact by construction,
        not by assumption; when there are more than 2 * 10^5 k-sets every table is searched.

        Examples: (4, 1) searches 4, 3, 2, 1 tables for k = 3, 2, 1, 0; (6, 3) 20, 10, 4, 1 (of 20).
        """
        return _tables_for(self, k)

    @cached_property
    def permutations(self) -> tuple[Permutation, ...]:
        """One :class:`Permutation` per table, in the order of
        ``itertools.combinations(range(blocks), leading)``."""
        return tuple(
            Permutation(t, lead, self.block_sizes, self.block_shifts)
            for t, lead in enumerate(combinations(range(self.blocks), self.leading))
        )


#: The default design: 4 blocks of 16 bits, 1 leading block, 4 tables, k <= 3.
DEFAULT_DESIGN = Design(4, 1)


def query_k(k: object, index_k: int, design: Design) -> int:
    """The k of one query of an index built for ``index_k`` with ``design`` (``index_k <=
    design.max_k``): ``index_k`` when ``k`` is None, else ``k`` checked. The one k rule of a
    query, for the index and the server: a query may ask for less than the index's k, never
    more, since the design answers exactly only up to it (the pigeonhole guarantee of the module
    docstring; Manku et al. 2007, section 3). O(1).

    Raises:
        TypeError: ``k`` is not an int (bool refused; numpy integers are accepted).
        InvalidArgumentError: ``k < 0``, or ``k > index_k`` (the message gives the design's
            guarantee, the index's k, and the largest k to use).
    """
    if k is None:
        return index_k
    value = check_int(k, "k")
    if value < 0:
        raise InvalidArgumentError(f"k must be >= 0, got {value}", value=value)
    if value > index_k:
        raise InvalidArgumentError(
            f"k={value} is above the index's k={index_k} ({design} guarantees "
            f"k <= {design.max_k}; the index was built for k <= {index_k}): use k <= {index_k}",
            value=value,
        )
    return value


def design_for_k(k: int) -> Design | None:
    """A design that finds ``k`` exactly, to suggest in messages: ``(k + 2, 2)`` where it is
    valid (more leading bits than ``(k + 1, 1)``), else ``(k + 1, 1)``; None for k > 63 (no
    design). O(1)."""
    if k + 2 <= _BITS and math.comb(k + 2, 2) <= MAX_TABLES:
        return Design(k + 2, 2)
    return Design(k + 1, 1) if 0 <= k < _BITS else None


def check_design_k(k: int, design: Design) -> int:
    """``k`` when ``design`` finds it exactly (``0 <= k <= design.max_k``); the one message of a
    k above a design, for the index, the server and ``permindex serve``. O(1).

    Raises:
        InvalidArgumentError: ``k < 0``, or ``k > design.max_k``: one sentence that names k,
            the design and its largest k, and a design that would find k.
    """
    if k < 0:
        raise InvalidArgumentError(f"k must be >= 0, got {k}", value=k)
    if k <= design.max_k:
        return k
    other = design_for_k(k)
    if other is None:
        instead = f"use k <= {design.max_k} (no design answers more than k={_BITS - 1})"
    else:
        instead = (
            f"use k <= {design.max_k}, or a design with blocks - leading >= {k} such as "
            f"({other.blocks} blocks, {other.leading} leading)"
        )
    raise InvalidArgumentError(
        f"{design} guarantees k <= {design.max_k} (blocks - leading), not k={k}: {instead}",
        value=k,
    )


_COVER_LIMIT = 200_000  # most k-sets of blocks enumerated by Design.tables_for


@functools.cache
def _tables_for(design: Design, k: int) -> tuple[int, ...]:
    if not 0 <= k <= design.max_k:
        raise InvalidArgumentError(f"{design} guarantees k <= {design.max_k}; got k={k}", value=k)
    everything = tuple(range(design.num_tables))
    if k == design.max_k or math.comb(design.blocks, k) > _COVER_LIMIT:
        return everything
    leading = [frozenset(p.leading_blocks) for p in design.permutations]
    uncovered = {frozenset(d) for d in combinations(range(design.blocks), k)}
    chosen: list[int] = []
    while uncovered:
        best = max(everything, key=lambda t: sum(1 for d in uncovered if not d & leading[t]))
        chosen.append(best)
        uncovered = {d for d in uncovered if d & leading[best]}
    # Exactness check: every k-set of blocks leaves one chosen table's leading blocks intact.
    for d in combinations(range(design.blocks), k):
        if not any(not leading[t] & set(d) for t in chosen):  # pragma: no cover - greedy covers
            return everything
    return tuple(sorted(chosen))


#: Candidate designs of :func:`choose_design`, (blocks, leading), for 64-bit fingerprints.
AUTO_DESIGNS: tuple[tuple[int, int], ...] = (
    (2, 1), (3, 1), (4, 1), (4, 2), (5, 1), (5, 2), (6, 2), (6, 3), (7, 3), (7, 4), (8, 4),
)  # fmt: skip


def design_bytes_per_fingerprint(design: Design, n: int) -> float:
    """Estimated bytes per stored fingerprint of an index of ``n`` fingerprints with ``design``,
    keys excluded: the fingerprint (8) by row, and per table a row number (3 bytes below 2^24
    rows, else 4), a 16-bit filter (2) and the run directory (4 bytes per 8 to 16 entries or
    per prefix, :func:`directory_bits`). A liveness byte per row is added only while removed
    or replaced rows await a compaction. O(tables)."""
    n = max(n, 1)
    total = 8.0
    row_bytes = 3.0 if n < 1 << 24 else 4.0
    for perm in design.permutations:
        directory = 4.0 * ((1 << directory_bits(n, perm.prefix_bits)) + 1) / n
        total += row_bytes + FILTER_BITS / 8 + directory
    return total


def design_query_cost(design: Design, k: int, n: int) -> float:
    """A model of the time of one lookup, in arbitrary units (only comparisons between designs
    mean anything): per searched table a fixed cost (prefix, filter, directory) plus one per
    candidate, where a table's candidates are about n / 2^prefix_bits but never fewer than the
    2 to 4 rows of a directory bucket. O(tables) time."""
    n = max(n, 1)
    cost = 0.0
    for t in design.tables_for(k):
        prefix_bits = design.permutations[t].prefix_bits
        candidates = max(n / (1 << prefix_bits), min(3.0, n / 4))
        cost += _TABLE_COST + _CANDIDATE_COST * candidates
    return cost


# The model's two weights: a table searched, a candidate verified (their origin: the notes in
# benchmarks/README.md).
_TABLE_COST = 78.0
_CANDIDATE_COST = 5.2


def choose_design(n: int, k: int, memory_budget: int | None = None) -> Design:
    """The design for ``design="auto"``: among :data:`AUTO_DESIGNS` that answer ``k``, the one of
    least :func:`design_query_cost` for ``n`` fingerprints whose
    :func:`design_bytes_per_fingerprint` * n fits ``memory_budget`` bytes (None: no limit); when
    none fits, the smallest. Raises InvalidArgumentError when no candidate design answers k."""
    candidates = [Design(b, t) for b, t in AUTO_DESIGNS if b - t >= k]
    if not candidates:
        raise InvalidArgumentError(
            f"no automatic design answers k={k} (at most {max(b - t for b, t in AUTO_DESIGNS)}); "
            "pass design=(blocks, leading) with blocks - leading >= k",
            value=k,
        )
    fits = [
        d
        for d in candidates
        if memory_budget is None or design_bytes_per_fingerprint(d, n) * n <= memory_budget
    ]
    if not fits:
        return min(candidates, key=lambda d: design_bytes_per_fingerprint(d, n))
    return min(fits, key=lambda d: (design_query_cost(d, k, n), d.num_tables))


def argsort_prefixes(
    prefixes: NDArray[np.uint64] | NDArray[np.uint16], prefix_bits: int
) -> NDArray[np.intp]:
    """Stable argsort of (n,) uint64 ``prefixes`` that are below 2^prefix_bits (or (n,) uint16
    ones, for prefix_bits <= 16), as (n,) intp.

    A least-significant-digit radix sort on 16-bit digits (numpy sorts uint16 with a radix sort
    when asked for a stable sort), so a 16-bit prefix costs one counting pass and a 33-bit one
    three, instead of a comparison sort of uint64."""
    if prefix_bits <= 16:
        return np.argsort(prefixes.astype(np.uint16, copy=False), kind="stable")
    order: NDArray[np.intp] | None = None
    for shift in range(0, prefix_bits, 16):
        digits = ((prefixes >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.uint16)
        if order is None:
            order = np.argsort(digits, kind="stable")
        else:
            order = order[np.argsort(digits[order], kind="stable")]
    assert order is not None
    return order
