"""Synthetic fingerprints with planted near-duplicates, for the distributed join's tests and
benchmarks/bench_distributed.py: random 64-bit fingerprints; near copies of earlier ones at 0 to 3
bits; one fingerprint held by 1,000 documents (an exact cluster); 5,000 distinct fingerprints
sharing the 16-bit prefix of the default design's first table (a hot prefix), with near copies
among them."""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from permindex.index.tables.permutation import DEFAULT_DESIGN

EXACT_COPIES = 1_000
HOT_MEMBERS = 5_000


def planted(n: int, seed: int = 7) -> NDArray[np.uint64]:
    """(n,) uint64 fingerprints (n >= 20,000): see the module docstring. Documents 0..999 share
    one fingerprint; documents 1,000..5,999 share table 0's prefix; about 1% of the others are
    near copies (0..3 bits) of a random earlier document."""
    if n < 20_000:
        raise ValueError("n must be >= 20,000")
    rng = np.random.default_rng(seed)
    fps = rng.integers(0, 1 << 63, n, dtype=np.uint64) << np.uint64(1)
    fps |= rng.integers(0, 2, n, dtype=np.uint64)
    fps[:EXACT_COPIES] = fps[n - 1]
    mask = np.uint64(DEFAULT_DESIGN.permutations[0].leading_mask)
    hot = slice(EXACT_COPIES, EXACT_COPIES + HOT_MEMBERS)
    fps[hot] = (fps[hot] & ~mask) | (np.uint64(0x5A5A5A5A5A5A5A5A) & mask)
    rest = n - EXACT_COPIES - HOT_MEMBERS
    copies = max(1, rest // 100)
    target = rng.choice(np.arange(EXACT_COPIES + HOT_MEMBERS, n), copies, replace=False)
    source = rng.integers(0, n, copies)
    flipped = fps[source].copy()
    for _ in range(3):
        flip = rng.integers(0, 2, copies).astype(bool)
        bits = rng.integers(0, 64, copies).astype(np.uint64)
        flipped[flip] ^= np.uint64(1) << bits[flip]
    fps[target] = flipped
    inner = rng.integers(EXACT_COPIES, EXACT_COPIES + HOT_MEMBERS, (2, 500))
    free = np.flatnonzero([not (int(mask) >> b) & 1 for b in range(64)]).astype(np.uint64)
    near = fps[inner[0]].copy()
    for _ in range(3):
        near ^= np.uint64(1) << free[rng.integers(0, free.size, 500)]
    fps[inner[1]] = near
    return fps


def keys(start: int, stop: int) -> list[str]:
    """The keys of documents start..stop - 1: ``doc/00000042``."""
    return [f"doc/{i:08d}" for i in range(start, stop)]
