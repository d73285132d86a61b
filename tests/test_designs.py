"""Table designs (Manku, Jain & Das Sarma 2007, section 3): blocks, permutations, prefixes, the
pigeonhole guarantee (every fingerprint within k of a query shares a table's prefix with it),
the design chosen for each k and size."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from strategies import DESIGNS, SETTINGS, designs, fingerprints, neighbours

from permindex.errors import InvalidArgumentError
from permindex.index.tables.permutation import (
    DEFAULT_DESIGN,
    MAX_TABLES,
    Design,
    Permutation,
    argsort_prefixes,
    choose_design,
    design_bytes_per_fingerprint,
    design_query_cost,
    directory_bits,
    query_k,
)


def blocks_of(design: Design, value: int) -> list[int]:
    return [
        (value >> shift) & ((1 << size) - 1)
        for shift, size in zip(design.block_shifts, design.block_sizes, strict=True)
    ]


@pytest.mark.parametrize(
    ("blocks", "sizes"),
    [
        (4, (16, 16, 16, 16)),
        (5, (13, 13, 13, 13, 12)),
        (6, (11, 11, 11, 11, 10, 10)),
        (3, (22, 21, 21)),
        (2, (32, 32)),
        (7, (10, 9, 9, 9, 9, 9, 9)),
    ],
)
def test_block_sizes_larger_first(blocks: int, sizes: tuple[int, ...]) -> None:
    design = Design(blocks, 1)
    assert design.block_sizes == sizes
    assert design.block_shifts[0] + sizes[0] == 64
    assert design.block_shifts[-1] == 0
    for b in range(blocks - 1):
        assert design.block_shifts[b] == design.block_shifts[b + 1] + sizes[b + 1]


@pytest.mark.parametrize(("pair", "max_k"), DESIGNS)
def test_tables_one_per_combination(pair: tuple[int, int], max_k: int) -> None:
    design = Design(*pair)
    assert design.max_k == max_k
    assert design.num_tables == math.comb(*pair) == len(design.permutations)
    leading = [p.leading_blocks for p in design.permutations]
    assert len(set(leading)) == len(leading)
    for t, perm in enumerate(design.permutations):
        assert perm.table == t
        assert len(perm.leading_blocks) == design.leading
        assert perm.prefix_bits == sum(design.block_sizes[b] for b in perm.leading_blocks)
        assert sorted(perm.order) == list(range(design.blocks))
        assert perm.order[: design.leading] == perm.leading_blocks
        rest = perm.order[design.leading :]
        assert list(rest) == sorted(rest)


def test_default_design() -> None:
    assert DEFAULT_DESIGN == Design(4, 1)
    assert [p.prefix_bits for p in DEFAULT_DESIGN.permutations] == [16, 16, 16, 16]
    assert str(DEFAULT_DESIGN) == "design (4 blocks, 1 leading)"
    assert DEFAULT_DESIGN.as_tuple() == (4, 1)
    assert Design.of((4, 1)) == DEFAULT_DESIGN
    assert Design.of(DEFAULT_DESIGN) is DEFAULT_DESIGN


def test_known_permutation_of_the_default_design() -> None:
    x = 0xAAAA_BBBB_CCCC_DDDD
    perms = DEFAULT_DESIGN.permutations
    assert perms[0].permute(x) == x
    assert perms[2].permute(x) == 0xCCCC_AAAA_BBBB_DDDD
    assert perms[3].permute(x) == 0xDDDD_AAAA_BBBB_CCCC
    assert [p.prefix(x) for p in perms] == [0xAAAA, 0xBBBB, 0xCCCC, 0xDDDD]
    assert perms[1].leading_mask == 0x0000_FFFF_0000_0000


@SETTINGS
@given(designs, st.lists(fingerprints, min_size=1, max_size=20))
def test_permutation_moves_leading_blocks_first(
    design_k: tuple[tuple[int, int], int], values: list[int]
) -> None:
    design = Design(*design_k[0])
    array = np.array(values, dtype=np.uint64)
    for perm in design.permutations:
        permuted = perm.permute_array(array).tolist()
        prefixes = perm.prefix_array(array).tolist()
        back = perm.unpermute_array(perm.permute_array(array)).tolist()
        assert back == values
        for value, p_value, prefix in zip(values, permuted, prefixes, strict=True):
            assert perm.permute(value) == p_value
            assert perm.unpermute(p_value) == value
            blocks = blocks_of(design, value)
            expected = 0
            for b in perm.order:
                expected = (expected << design.block_sizes[b]) | blocks[b]
            assert p_value == expected
            assert perm.prefix(value) == prefix == p_value >> (64 - perm.prefix_bits)


@SETTINGS
@given(designs, fingerprints, fingerprints)
def test_leading_mask_decides_equal_prefix(
    design_k: tuple[tuple[int, int], int], a: int, b: int
) -> None:
    design = Design(*design_k[0])
    for perm in design.permutations:
        for other in (b, a ^ (b & perm.leading_mask), a ^ (b & ~perm.leading_mask)):
            same = perm.prefix(a) == perm.prefix(other)
            assert same == ((a ^ other) & perm.leading_mask == 0)


@SETTINGS
@given(st.data(), designs, fingerprints)
def test_pigeonhole_guarantee(
    data: st.DataObject, design_k: tuple[tuple[int, int], int], base: int
) -> None:
    pair, max_k = design_k
    design = Design(*pair)
    distance = data.draw(st.integers(min_value=0, max_value=max_k))
    other, _bits = data.draw(neighbours(pair, base, distance))
    shared = [p.table for p in design.permutations if p.prefix(base) == p.prefix(other)]
    assert shared, f"no table shares a prefix at distance {distance} <= {max_k}"


def test_guarantee_is_tight() -> None:
    # One bit flipped in each block: no table of (4, 1) shares a prefix at distance 4.
    design = DEFAULT_DESIGN
    other = sum(1 << shift for shift in design.block_shifts)
    assert all(p.prefix(0) != p.prefix(other) for p in design.permutations)


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((4, 4), InvalidArgumentError),
        ((4, 0), InvalidArgumentError),
        ((1, 1), InvalidArgumentError),
        ((65, 1), InvalidArgumentError),
        ((0, 0), InvalidArgumentError),
        ((20, 10), InvalidArgumentError),  # C(20, 10) tables
        ((True, 1), TypeError),
        ((4.0, 1), TypeError),
        (("4", 1), TypeError),
    ],
)
def test_invalid_designs(args: tuple[object, object], error: type[Exception]) -> None:
    with pytest.raises(error):
        Design(*args)  # type: ignore[arg-type]


def test_design_of_refuses_other_values() -> None:
    with pytest.raises(TypeError):
        Design.of([4, 1])  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Design.of((4, 1, 0))  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match=str(MAX_TABLES)):
        Design.of((64, 32))


def test_design_is_hashable_and_compares_by_value() -> None:
    assert Design(5, 2) == Design(5, 2) != Design(5, 1)
    assert len({Design(5, 2), Design(5, 2)}) == 1
    assert isinstance(Design(5, 2).permutations[0], Permutation)


@pytest.mark.parametrize("bits", [1, 12, 16, 17, 26, 33, 48, 63])
def test_argsort_prefixes_is_a_stable_sort(bits: int) -> None:
    rng = np.random.default_rng(bits)
    prefixes = rng.integers(0, 1 << min(bits, 8), 5000, dtype=np.uint64)  # many ties
    prefixes <<= np.uint64(bits - min(bits, 8))
    wide = rng.integers(0, 1 << bits, 5000, dtype=np.uint64)
    for values in (prefixes, wide):
        order = argsort_prefixes(values, bits)
        assert np.array_equal(order, np.argsort(values, kind="stable"))


@SETTINGS
@given(st.data(), designs, fingerprints)
def test_smaller_k_searches_fewer_tables_and_stays_exact(
    data: st.DataObject, design_k: tuple[tuple[int, int], int], base: int
) -> None:
    pair, max_k = design_k
    design = Design(*pair)
    assert design.tables_for(max_k) == tuple(range(design.num_tables))
    kk = data.draw(st.integers(min_value=0, max_value=max_k))
    tables = design.tables_for(kk)
    assert len(tables) <= design.num_tables
    for distance in range(kk + 1):
        other, _bits = data.draw(neighbours(pair, base, distance))
        perms = design.permutations
        assert any(perms[t].prefix(base) == perms[t].prefix(other) for t in tables)


@pytest.mark.parametrize(
    ("pair", "counts"),
    [((4, 1), [1, 2, 3, 4]), ((5, 2), [1, 2, 4, 10]), ((6, 3), [1, 2, 7, 20])],
)
def test_tables_for_each_k(pair: tuple[int, int], counts: list[int]) -> None:
    design = Design(*pair)
    assert [len(design.tables_for(k)) for k in range(design.max_k + 1)] == counts
    with pytest.raises(InvalidArgumentError):
        design.tables_for(design.max_k + 1)


@SETTINGS
@given(designs, fingerprints, st.integers(1, 48))
def test_filter_is_the_16_bits_after_the_directory_bits(
    design_k: tuple[tuple[int, int], int], value: int, bits: int
) -> None:
    """A run's filter is the 16 permuted bits after its top ``bits`` directory bits, for one
    value and an array alike."""
    design = Design(*design_k[0])
    for perm in design.permutations:
        expected = (perm.permute(value) >> (48 - bits)) & 0xFFFF
        assert perm.filter(value, bits) == expected
        array = perm.filter_array(np.array([value, value ^ 1], dtype=np.uint64), bits)
        assert array.dtype == np.uint16 and int(array[0]) == expected


def test_directory_bits_give_8_to_16_entries_a_bucket_up_to_the_prefix() -> None:
    """Up to the prefix width a bucket holds 8 to 16 entries; the directory never passes it."""
    for size in (1, 8, 15, 16, 63, 64, 1000, 10**6, 10**7, 10**9, 2**32 - 1):
        for prefix_bits in (4, 16, 26, 33):
            r = directory_bits(size, prefix_bits)
            assert 1 <= r <= prefix_bits
            if r < prefix_bits and size >= 16:
                assert 8 <= size / (1 << r) < 16
            if size >= 8 << prefix_bits:
                assert r == prefix_bits


def test_choose_design() -> None:
    assert choose_design(10_000, 3) == Design(4, 1)
    big = choose_design(10**8, 3)
    assert big.max_k >= 3 and big.num_tables > 4  # long prefixes pay off at 10^8
    budget = 42 * 10**8
    assert design_bytes_per_fingerprint(choose_design(10**8, 3, budget), 10**8) * 10**8 <= budget
    assert choose_design(10**8, 3, 1).max_k >= 3  # nothing fits: the smallest that answers k
    assert choose_design(10**6, 4).max_k >= 4
    with pytest.raises(InvalidArgumentError, match="no automatic design"):
        choose_design(10**6, 40)
    for n in (10**3, 10**6, 10**9):
        assert design_query_cost(Design(4, 1), 3, n) > 0


@pytest.mark.parametrize("pair", [(4, 1), (4, 2), (5, 1), (6, 1), (3, 1), (8, 2), (5, 2)])
def test_prefix_array16_and_filter_array_match_the_general_path(pair: tuple[int, int]) -> None:
    """The 16-bit prefix (a strided view of the fingerprints when the prefix is one aligned
    16-bit block) and the filters equal the per-value results, on contiguous and strided
    input; a prefix wider than 16 bits is refused."""
    rng = np.random.default_rng(16)
    values = rng.integers(0, 2**64 - 1, 4001, dtype=np.uint64, endpoint=True)
    for perm in Design(*pair).permutations:
        for array in (values, values[::3]):
            filters = perm.filter_array(array, 7)
            assert filters.dtype == np.uint16
            assert [int(f) for f in filters[:50]] == [
                perm.filter(v, 7) for v in array[:50].tolist()
            ]
            assert not np.shares_memory(filters, values)  # a copy: safe to keep
            if perm.prefix_bits > 16:
                with pytest.raises(ValueError, match="16 bits"):
                    perm.prefix_array16(array)
                continue
            prefixes = perm.prefix_array16(array)
            assert prefixes.dtype == np.uint16
            assert np.array_equal(prefixes, perm.prefix_array(array))
            assert [int(p) for p in prefixes[:50]] == [perm.prefix(v) for v in array[:50].tolist()]
            order = argsort_prefixes(prefixes, perm.prefix_bits)
            assert np.array_equal(order, np.argsort(perm.prefix_array(array), kind="stable"))


def test_query_k_is_the_one_k_rule_of_a_query() -> None:
    design = Design(4, 1)
    assert query_k(None, 3, design) == 3
    assert query_k(None, 2, design) == 2
    assert query_k(0, 3, design) == 0
    assert query_k(np.int64(2), 3, design) == 2
    with pytest.raises(InvalidArgumentError, match="k must be >= 0"):
        query_k(-1, 3, design)
    with pytest.raises(InvalidArgumentError, match=r"guarantees k <= 3.*use k <= 2"):
        query_k(3, 2, design)
    with pytest.raises(TypeError, match="k must be an int"):
        query_k(True, 3, design)
    with pytest.raises(TypeError, match="k must be an int"):
        query_k(1.0, 3, design)
