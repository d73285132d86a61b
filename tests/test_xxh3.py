"""The numba XXH3-64 against the xxhash library: every length from 0 to 1024 bytes (each branch
of the algorithm and its boundaries), long inputs over several blocks, random lengths up to
100,000 bytes, slices at unaligned offsets, and hypothesis inputs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from permindex.text.xxh3_kernels import xxh3_64, xxh3_64_many

# Lengths where the algorithm changes branch or block/stripe structure: 0, 1-3, 4-8, 9-16,
# 17-128 (32, 64, 96), 129-240, and the long form (stripes of 64, blocks of 1024, last stripe).
_EDGES = sorted(
    {
        n + d
        for n in (0, 3, 4, 8, 9, 16, 17, 32, 64, 96, 128, 129, 240, 241, 1024, 2048, 16384)
        for d in (-1, 0, 1)
        if n + d >= 0
    }
    | {1024 * m + 64 * j + d for m in (1, 2, 5) for j in (0, 1, 15) for d in (-1, 0, 1)}
)


def test_every_length_up_to_1024_random_bytes() -> None:
    rng = np.random.default_rng(20260)
    mismatches = []
    for n in range(1025):
        data = rng.bytes(n)
        if xxh3_64(data) != xxhash.xxh3_64_intdigest(data):
            mismatches.append(n)
    assert mismatches == []


@pytest.mark.parametrize("fill", [0x00, 0xFF, 0x61])
def test_every_length_up_to_1024_constant_bytes(fill: int) -> None:
    mismatches = []
    for n in range(1025):
        data = bytes([fill]) * n
        if xxh3_64(data) != xxhash.xxh3_64_intdigest(data):
            mismatches.append(n)
    assert mismatches == []


def test_branch_and_block_boundaries() -> None:
    rng = np.random.default_rng(3)
    for n in _EDGES:
        data = rng.bytes(n)
        assert xxh3_64(data) == xxhash.xxh3_64_intdigest(data), n


def test_random_lengths_up_to_100000() -> None:
    rng = np.random.default_rng(11)
    for n in [*rng.integers(241, 100_001, size=60).tolist(), 100_000]:
        data = rng.bytes(n)
        assert xxh3_64(data) == xxhash.xxh3_64_intdigest(data), n


def test_many_slices_of_one_buffer_at_unaligned_offsets() -> None:
    rng = np.random.default_rng(5)
    data = rng.bytes(300_000)
    cuts = np.sort(rng.integers(0, len(data), size=4000))
    cuts = np.concatenate([[0, 1, 1, 4, 7, 24, 263], cuts, [len(data)]]).astype(np.int64)
    cuts.sort()
    got = xxh3_64_many(np.frombuffer(data, dtype=np.uint8), cuts)
    assert got.dtype == np.uint64 and got.shape == (cuts.size - 1,)
    want = [xxhash.xxh3_64_intdigest(data[a:b]) for a, b in itertools.pairwise(cuts)]
    assert got.tolist() == want


def test_an_array_view_at_an_odd_offset() -> None:
    rng = np.random.default_rng(8)
    base = np.frombuffer(rng.bytes(5000), dtype=np.uint8)
    for start, stop in [(1, 4), (3, 20), (5, 200), (7, 4999)]:
        view = base[start:stop]
        assert xxh3_64(view) == xxhash.xxh3_64_intdigest(view.tobytes())


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000))
def test_hypothesis_bytes(data: bytes) -> None:
    assert xxh3_64(data) == xxhash.xxh3_64_intdigest(data)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.binary(max_size=400), max_size=40))
def test_hypothesis_batches(parts: list[bytes]) -> None:
    offsets = np.zeros(len(parts) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(p) for p in parts])
    got = xxh3_64_many(np.frombuffer(b"".join(parts), dtype=np.uint8), offsets)
    assert got.tolist() == [xxhash.xxh3_64_intdigest(p) for p in parts]
