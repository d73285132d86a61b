"""The self-join (permindex.index.join.self_join): every join design against brute force on random,
clustered,
duplicated, tiny and adversarial inputs for every k it answers; the covers it searches; the
byte-pair join's pigeonhole over every placement of up to 3 differing bits."""

from __future__ import annotations

import time
from itertools import combinations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import brute_force_pairs
from strategies import SETTINGS

import permindex.index.join.self_join as join_module
from permindex import InvalidArgumentError
from permindex.index.join.self_join import (
    BYTE_PAIR_MASKS,
    BYTE_PAIRS,
    JoinDesign,
    join_design,
    join_tables,
    self_join,
)
from permindex.index.tables.permutation import Design

TOP = (1 << 64) - 1

#: Every way to join, with the largest k each answers: short prefixes, 17 to 24 bits, longer,
#: and the byte-pair join (joined on (4, 1) below its threshold of values).
JOINS: list[tuple[JoinDesign, int]] = [
    (Design(4, 1), 3),
    (Design(5, 2), 3),
    (Design(6, 2), 4),
    (Design(6, 3), 3),
    (Design(3, 1), 2),
    (Design(7, 2), 5),
    (Design(8, 2), 6),
    (BYTE_PAIRS, 3),
]
JOIN_IDS = [str(d) for d, _ in JOINS]


def as_pairs(a: np.ndarray, b: np.ndarray, d: np.ndarray) -> list[tuple[int, int, int]]:
    """Pairs as sorted (low position, high position, distance) tuples."""
    return sorted(
        zip(np.minimum(a, b).tolist(), np.maximum(a, b).tolist(), d.tolist(), strict=True)
    )


def expected(values: np.ndarray, k: int) -> list[tuple[int, int, int]]:
    i, j, d = brute_force_pairs(values, k)
    return as_pairs(i, j, d)


def check(values: np.ndarray, design: JoinDesign, k: int) -> None:
    a, b, d = self_join(values, k, design)
    assert a.dtype == b.dtype == d.dtype == np.int64
    assert (a != b).all()
    got = as_pairs(a, b, d)
    assert got == expected(values, k)  # no pair missed, none twice, distances right


def clustered(rng: np.random.Generator, n: int, centers: int, max_flips: int) -> np.ndarray:
    """n fingerprints around a few centers, 0..max_flips bits flipped, some exact copies."""
    base = rng.integers(0, TOP, centers, dtype=np.uint64, endpoint=True)
    out = base[rng.integers(0, centers, n)]
    for i in range(n):
        for bit in rng.choice(64, int(rng.integers(0, max_flips + 1)), replace=False):
            out[i] ^= np.uint64(1) << np.uint64(bit)
    return out


def mixed(seed: int, k: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate(
        [
            rng.integers(0, TOP, 500, dtype=np.uint64, endpoint=True),
            clustered(rng, 400, 8, k + 1),
            np.full(40, 0x0123_4567_89AB_CDEF, dtype=np.uint64),  # a big group of equal values
            np.array([0, TOP, 1, TOP - 1, 1 << 63], dtype=np.uint64),
        ]
    )


@pytest.mark.parametrize(("design", "kmax"), JOINS, ids=JOIN_IDS)
def test_every_join_design_against_brute_force(design: JoinDesign, kmax: int) -> None:
    values = mixed(kmax, kmax)
    for k in range(kmax + 1):
        check(values, design, k)


@pytest.mark.parametrize(("design", "kmax"), JOINS, ids=JOIN_IDS)
def test_tiny_inputs(design: JoinDesign, kmax: int) -> None:
    for values in ([], [5], [5, 5], [0, 7], [0, 15], [TOP, TOP, TOP], [1, 2, 4, 8]):
        check(np.array(values, dtype=np.uint64), design, kmax)


@pytest.mark.parametrize(("design", "kmax"), JOINS, ids=JOIN_IDS)
def test_bits_flipped_on_every_key_boundary(design: JoinDesign, kmax: int) -> None:
    """Neighbours of one base at every combination of up to min(kmax, 3) flipped bits among
    the first and last bit of every byte: pairs that differ exactly at key boundaries."""
    base = 0x5A5A_A5A5_0F0F_F0F0
    edges = sorted({8 * b for b in range(8)} | {8 * b + 7 for b in range(8)})
    values = [base]
    for r in range(1, min(kmax, 3) + 1):
        for bits in combinations(edges, r):
            value = base
            for bit in bits:
                value ^= 1 << bit
            values.append(value)
    array = np.array(values, dtype=np.uint64)
    check(array, design, min(kmax, 3))


@given(
    bases=st.lists(st.integers(0, TOP), min_size=1, max_size=4),
    flips=st.lists(
        st.tuples(st.integers(0, 3), st.lists(st.integers(0, 63), max_size=5)),
        min_size=0,
        max_size=40,
    ),
    join=st.sampled_from(range(len(JOINS))),
)
@SETTINGS
def test_hypothesis_near_copies(
    bases: list[int], flips: list[tuple[int, list[int]]], join: int
) -> None:
    design, kmax = JOINS[join]
    values = list(bases)
    for which, bits in flips:
        value = bases[which % len(bases)]
        for bit in bits:
            value ^= 1 << bit
        values.append(value)
    array = np.array(values, dtype=np.uint64)
    for k in range(kmax + 1):
        check(array, design, k)


def test_byte_pair_keys_cover_every_placement_of_three_bits() -> None:
    """The pigeonhole of the byte-pair join, exhaustively: for every set of at most 3 bit
    positions, some table's key bits avoid all of them."""
    masks = np.array(BYTE_PAIR_MASKS, dtype=np.uint64)
    for r in range(4):
        for bits in combinations(range(64), r):
            x = 0
            for bit in bits:
                x |= 1 << bit
            assert ((masks & np.uint64(x)) == 0).any(), bits
    # and it is tight: some 4 bits break every table
    four = np.uint64((1 << 0) | (1 << 16) | (1 << 32) | (1 << 48))
    assert not ((masks & four) == 0).any()


def test_byte_pairs_with_big_groups_of_equal_values() -> None:
    rng = np.random.default_rng(7)
    values = np.concatenate(
        [np.full(120, 42, dtype=np.uint64), clustered(rng, 300, 3, 3), np.full(50, TOP, np.uint64)]
    )
    for k in range(4):
        check(values, BYTE_PAIRS, k)


@pytest.mark.parametrize(
    "pair", [(4, 1), (5, 2), (6, 2), (6, 3), (3, 1), (7, 2), (7, 3), (8, 2), (2, 1), (9, 3)]
)
def test_join_tables_cover_every_k_set_and_are_no_larger(pair: tuple[int, int]) -> None:
    design = Design(*pair)
    for k in range(design.max_k + 1):
        tables = join_tables(design, k)
        assert list(tables) == sorted(set(tables))
        assert len(tables) <= len(design.tables_for(k))
        leading = [set(design.permutations[t].leading_blocks) for t in tables]
        for differing in combinations(range(design.blocks), k):
            assert any(not lead & set(differing) for lead in leading), (k, differing)


def test_join_tables_finds_the_two_triangles_of_6_2() -> None:
    design = Design(6, 2)
    assert len(design.tables_for(3)) == 7  # the greedy cover
    tables = join_tables(design, 3)
    assert len(tables) == 6
    with pytest.raises(InvalidArgumentError):
        join_tables(design, 5)


def test_join_design_choices() -> None:
    assert join_design(Design(4, 1), 3, 1_000_000) == BYTE_PAIRS
    assert join_design(Design(4, 1), 3, 100) == Design(4, 1)
    chosen = join_design(Design(6, 2), 4, 1_000_000)
    assert isinstance(chosen, Design) and chosen.max_k >= 4
    with pytest.raises(InvalidArgumentError):
        join_design(Design(4, 1), 4, 100)


def test_bad_arguments() -> None:
    values = np.arange(10, dtype=np.uint64)
    with pytest.raises(InvalidArgumentError, match="k <= 3"):
        self_join(values, 4, BYTE_PAIRS)
    with pytest.raises(InvalidArgumentError, match="k <= 3"):
        self_join(values, -1, BYTE_PAIRS)
    with pytest.raises(InvalidArgumentError):
        self_join(values, 4, Design(4, 1))
    with pytest.raises(InvalidArgumentError):
        self_join(values, -1, Design(4, 1))
    with pytest.raises(TypeError, match="Design"):
        self_join(values, 1, "pairs")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):  # checked before the empty input's answer
        self_join(values[:0], 4, Design(4, 1))


def test_join_tables_of_a_wide_design_are_found_without_listing_k_sets() -> None:
    """(64, 1) at k = 10 has 1.5 * 10^11 k-sets of blocks: join_tables falls back to
    Design.tables_for at once (listing them took the memory of the machine)."""
    started = time.monotonic()
    design = Design(64, 1)
    assert join_tables(design, 10) == design.tables_for(10)
    assert time.monotonic() - started < 5


def test_keyed_pairs_is_one_table_with_the_first_table_rule() -> None:
    """keyed_pairs over each table of (4, 1) in turn, with the earlier tables' masks, gives
    exactly brute force's pairs (each once)."""
    values = mixed(3, 3)
    design = Design(4, 1)
    masks = [design.permutations[t].leading_mask for t in join_tables(design, 3)]
    parts = [
        join_module.keyed_pairs(values & np.uint64(mask), values, 3, masks[:t])
        for t, mask in enumerate(masks)
    ]
    a, b, d = (np.concatenate(x) for x in zip(*parts, strict=True))
    assert as_pairs(a, b, d) == expected(values, 3)
    empty = join_module.keyed_pairs(values[:1], values[:1], 3)
    assert all(x.size == 0 for x in empty)
