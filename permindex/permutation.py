"""Table designs of the permutation index (Manku, Jain & Das Sarma 2007, "Detecting
Near-Duplicates for Web Crawling", section 3).

A design ``(blocks, leading)`` splits the 64 bits of a fingerprint into ``blocks`` contiguous
blocks. Block 0 holds the most significant bits; sizes are as equal as possible with the larger
blocks first (6 blocks: 11, 11, 11, 11, 10, 10 bits). There is one table per combination of
``leading`` blocks, C(blocks, leading) tables in all. A table's permutation moves its leading
blocks, in block order, to the most significant bits and keeps the other blocks after them in
block order; its prefix is the permuted value's leading bits (the leading blocks' bits).

Guarantee (pigeonhole): two fingerprints at Hamming distance k <= blocks - leading differ in at
most k blocks, so at least ``leading`` blocks are equal and some table's prefix is the same for
both. Every table has to be searched; a pair within k is found in at least one of them.

Bit positions are the usual ones: bit i has value ``1 << i``; bit 63 is the most significant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from itertools import combinations

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError

__all__ = ["DEFAULT_DESIGN", "MAX_TABLES", "Design", "Permutation", "argsort_prefixes"]

_BITS = 64
_ALL = (1 << _BITS) - 1
#: Most tables a design may have (C(blocks, leading)); beyond this the memory is unreasonable.
MAX_TABLES = 1024


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
        "prefix_bits",
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
        self._prefix_segments = _segments(
            [(s, w, t - low) for s, w, t in moves[: len(leading_blocks)]]
        )

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


def argsort_prefixes(prefixes: NDArray[np.uint64], prefix_bits: int) -> NDArray[np.intp]:
    """Stable argsort of (n,) uint64 ``prefixes`` that are below 2^prefix_bits.

    A least-significant-digit radix sort on 16-bit digits (numpy sorts uint16 with a radix sort
    when asked for a stable sort), so a 16-bit prefix costs one counting pass and a 33-bit one
    three, instead of a comparison sort of uint64."""
    if prefix_bits <= 16:
        return np.argsort(prefixes.astype(np.uint16), kind="stable")
    order: NDArray[np.intp] | None = None
    for shift in range(0, prefix_bits, 16):
        digits = ((prefixes >> np.uint64(shift)) & np.uint64(0xFFFF)).astype(np.uint16)
        if order is None:
            order = np.argsort(digits, kind="stable")
        else:
            order = order[np.argsort(digits[order], kind="stable")]
    assert order is not None
    return order
