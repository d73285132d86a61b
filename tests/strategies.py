"""Hypothesis strategies shared by the index tests: fingerprints, keys, designs, and neighbours of
a fingerprint at an exact Hamming distance with bits flipped preferably on block boundaries.

The tests use :data:`SETTINGS` (a bounded number of examples, no deadline) per test rather than a
global profile, so the whole core suite stays well under a minute.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from permindex.index.tables.permutation import Design

__all__ = [
    "DESIGNS",
    "SETTINGS",
    "boundary_bits",
    "designs",
    "fingerprints",
    "flip",
    "keys",
    "neighbours",
]

MAX_FINGERPRINT = (1 << 64) - 1

#: Designs under test with the largest k each guarantees: the default, the paper's other two
#: designs for k = 3, and smaller ones.
DESIGNS: list[tuple[tuple[int, int], int]] = [
    ((4, 1), 3),
    ((5, 2), 3),
    ((6, 3), 3),
    ((3, 1), 2),
    ((2, 1), 1),
    ((7, 3), 4),
]

#: Per-test settings: enough examples to find boundary cases, few enough to stay fast.
SETTINGS = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

fingerprints = st.integers(min_value=0, max_value=MAX_FINGERPRINT)

#: Valid keys: non-empty text (no surrogates), short enough to be far below 1,024 bytes.
keys = st.text(min_size=1, max_size=12)

designs = st.sampled_from(DESIGNS)


def boundary_bits(design: tuple[int, int]) -> list[int]:
    """Bit positions next to every block boundary of ``design`` (the lowest and highest bit of
    each block), which include bit 0 and bit 63."""
    d = Design(*design)
    out: set[int] = set()
    for shift, size in zip(d.block_shifts, d.block_sizes, strict=True):
        out.add(shift)
        out.add(shift + size - 1)
    return sorted(out)


def flip(value: int, bits: list[int]) -> int:
    """``value`` with the given (distinct) bit positions flipped."""
    for bit in bits:
        value ^= 1 << bit
    return value


@st.composite
def neighbours(
    draw: st.DrawFn, design: tuple[int, int], base: int, distance: int
) -> tuple[int, list[int]]:
    """A fingerprint at exactly ``distance`` bits from ``base``: returns (neighbour, flipped
    positions). Positions are drawn mostly from the block boundaries, bit 0 and bit 63."""
    candidates = st.one_of(
        st.sampled_from(boundary_bits(design)),
        st.sampled_from([0, 63]),
        st.integers(min_value=0, max_value=63),
    )
    bits = draw(st.lists(candidates, min_size=distance, max_size=distance, unique=True))
    return flip(base, bits), bits
