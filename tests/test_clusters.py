"""Pairs, clusters, flags and exact-duplicate groups (permindex.index.join.clusters) against brute
force
on random data and on the shared corpora; the components against a plain union-find; keep/drop
rules."""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from oracles import brute_force_pairs, union_find_components

from permindex import Index, InvalidArgumentError, simhash
from permindex.index.join.clusters import (
    ExactGroup,
    Flag,
    NearDuplicates,
    clusters,
    components,
    design_for,
    exact_duplicates,
    flags,
    keep_per_cluster,
    pairs_within,
    value_pairs,
)
from permindex.index.tuning import Tuning

REPO = Path(__file__).resolve().parent.parent
CORPORA = REPO.parent / "shared" / "corpora"
LIBSTDCXX = CORPORA / "libstdc++-12-doc.jsonl.gz"
POSTGRESQL = CORPORA / "postgresql-doc-15.jsonl.gz"

Pair = tuple[str, str, int]


def brute_force(
    keys: Sequence[str], fps: np.ndarray, k: int
) -> tuple[list[Pair], list[list[str]], list[Flag], list[ExactGroup]]:
    """The four answers computed the slow, obvious way: all pairs by brute force, clusters by a
    depth-first search, flags and exact groups by looking at every pair."""
    i, j, d = brute_force_pairs(fps, k)
    pairs = sorted(
        (min(keys[x], keys[y]), max(keys[x], keys[y]), int(z))
        for x, y, z in zip(i.tolist(), j.tolist(), d.tolist(), strict=True)
    )
    adjacent: dict[str, list[tuple[int, str]]] = {}
    for a, b, z in pairs:
        adjacent.setdefault(a, []).append((z, b))
        adjacent.setdefault(b, []).append((z, a))
    seen: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(adjacent):
        if start in seen:
            continue
        seen.add(start)
        stack, component = [start], []
        while stack:
            node = stack.pop()
            component.append(node)
            for _, other in adjacent[node]:
                if other not in seen:
                    seen.add(other)
                    stack.append(other)
        found.append(sorted(component))
    found.sort(key=lambda c: (-len(c), c[0]))
    flagged = [
        Flag(key, min(adjacent[key])[1], min(adjacent[key])[0], len(adjacent[key]))
        for key in sorted(adjacent)
    ]
    by_value: dict[int, list[str]] = {}
    for key, fp in zip(keys, fps.tolist(), strict=True):
        by_value.setdefault(fp, []).append(key)
    groups = [ExactGroup(fp, sorted(g)) for fp, g in by_value.items() if len(g) > 1]
    groups.sort(key=lambda g: (-len(g.keys), g.keys[0]))
    return pairs, found, flagged, groups


def planted(seed: int, n: int, flips: int = 3) -> tuple[list[str], np.ndarray]:
    """n keys (in random order) whose fingerprints are a few random bases, each with up to
    ``flips`` random bits flipped: many near-duplicates at every distance, equal ones too."""
    rng = np.random.default_rng(seed)
    bases = rng.integers(0, 2**64, size=max(1, n // 4), dtype=np.uint64)
    fps = bases[rng.integers(0, bases.size, size=n)]
    for i in range(n):
        for bit in rng.integers(0, 64, size=int(rng.integers(0, flips + 1))).tolist():
            fps[i] ^= np.uint64(1 << bit)
    keys = [f"https://example.com/{x:04d}" for x in rng.permutation(n).tolist()]
    return keys, fps


def check_against_brute_force(keys: list[str], fps: np.ndarray, k: int) -> None:
    near = NearDuplicates(keys, fps, k)
    pairs, found, flagged, groups = brute_force(keys, fps, k)
    assert list(near.iter_pairs()) == pairs
    assert len(near) == len(pairs)
    assert (
        near.distance_counts().tolist()
        == np.bincount(np.array([d for _, _, d in pairs], dtype=np.int64), minlength=k + 1).tolist()
    )
    assert near.clusters() == found
    assert near.flags() == flagged
    assert near.exact_duplicates() == groups


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("k", [0, 1, 3, 4, 6])
def test_random_collections_against_brute_force(seed: int, k: int) -> None:
    keys, fps = planted(seed, 50 + 60 * seed)
    check_against_brute_force(keys, fps, k)


@given(
    st.lists(st.integers(0, 2**64 - 1), max_size=40),
    st.lists(st.tuples(st.integers(0, 39), st.integers(0, 63)), max_size=40),
    st.integers(0, 5),
)
def test_hypothesis_collections_against_brute_force(
    values: list[int], edits: list[tuple[int, int]], k: int
) -> None:
    # neighbours of drawn values: copies with one bit flipped, on block boundaries and bit 63 too
    fps = list(values)
    for position, bit in edits:
        if position < len(values):
            fps.append(values[position] ^ (1 << bit))
    keys = [f"k{i}" for i in range(len(fps))]
    check_against_brute_force(keys, np.array(fps, dtype=np.uint64), k)


def test_three_keys_of_one_fingerprint() -> None:
    keys = ["c", "a", "b", "lonely"]
    fps = np.array([7, 7, 7, 7 ^ (0xFFFF << 20)], dtype=np.uint64)
    near = NearDuplicates(keys, fps, 3)
    assert list(near.iter_pairs()) == [("a", "b", 0), ("a", "c", 0), ("b", "c", 0)]
    assert near.clusters() == [["a", "b", "c"]]
    assert near.exact_duplicates() == [ExactGroup(7, ["a", "b", "c"])]
    assert near.flags() == [Flag("a", "b", 0, 2), Flag("b", "a", 0, 2), Flag("c", "a", 0, 2)]


def test_a_cluster_can_chain_beyond_k() -> None:
    # a -> b -> c -> d, each 2 bits from the previous one: one cluster, a and d 6 bits apart
    a = 0
    fps = np.array([a, a ^ 0b11, a ^ 0b1111, a ^ 0b111111], dtype=np.uint64)
    near = NearDuplicates(["a", "b", "c", "d"], fps, 3)
    assert near.clusters() == [["a", "b", "c", "d"]]
    assert [(x, y) for x, y, _ in near.iter_pairs()] == [("a", "b"), ("b", "c"), ("c", "d")]
    assert near.span(near.cluster_positions()[0]) == 6
    assert near.flags()[0] == Flag("a", "b", 2, 1)


def test_equal_fingerprints_are_nearest_and_neighbours_count_everyone() -> None:
    fps = np.array([0, 0, 1, 3], dtype=np.uint64)  # x, y equal; z 1 bit away; w 2 bits
    near = NearDuplicates(["x", "y", "z", "w"], fps, 3)
    assert near.flags() == [
        Flag("w", "z", 1, 3),
        Flag("x", "y", 0, 3),
        Flag("y", "x", 0, 3),
        Flag("z", "w", 1, 3),  # w and x both 1 bit away: the smaller key
    ]


def test_ten_thousand_copies_cost_no_pair_list() -> None:
    n = 20_000
    keys = [f"page{i:05d}" for i in range(n)]
    fps = np.full(n, 0xDEADBEEF, dtype=np.uint64)
    near = NearDuplicates(keys, fps, 3)
    assert len(near) == n * (n - 1) // 2  # counted, not listed
    assert near._pairs is None
    assert [len(c) for c in near.clusters()] == [n]
    assert near.flags()[0] == Flag("page00000", "page00001", 0, n - 1)
    assert near.flags()[1] == Flag("page00001", "page00000", 0, n - 1)
    assert near._pairs is None


def test_no_keys_and_one_key() -> None:
    for keys in ([], ["only"]):
        near = NearDuplicates(keys, np.zeros(len(keys), dtype=np.uint64), 3)
        assert list(near.iter_pairs()) == []
        assert near.clusters() == near.flags() == near.exact_duplicates() == []  # type: ignore[comparison-overlap]
        assert near.distance_counts().tolist() == [0, 0, 0, 0]


def test_bad_arguments() -> None:
    with pytest.raises(InvalidArgumentError, match="distinct"):
        NearDuplicates(["a", "a"], [1, 2], 3)
    with pytest.raises(InvalidArgumentError, match="lengths"):
        NearDuplicates(["a"], [1, 2], 3)
    with pytest.raises(InvalidArgumentError, match="k=4"):
        pairs_within([1, 2], 4, design=(4, 1))
    with pytest.raises(InvalidArgumentError):
        design_for(-1)


def test_designs_for_larger_k_find_every_pair() -> None:
    assert design_for(3).as_tuple() == (4, 1)
    assert design_for(6).as_tuple() == (8, 2)
    _, fps = planted(11, 300, flips=6)
    values = np.unique(fps)
    for k in range(9):
        u, v, d = value_pairs(values, k)
        i, j, dd = brute_force_pairs(values, k)
        got = sorted(
            zip(np.minimum(u, v).tolist(), np.maximum(u, v).tolist(), d.tolist(), strict=True)
        )
        assert got == list(zip(i.tolist(), j.tolist(), dd.tolist(), strict=True))


def test_components_against_a_path_a_star_and_a_plain_union_find() -> None:
    """A long path whose edges come in a shuffled order, a star, random sparse graphs (a giant
    component and small ones): the labels of a plain union-find."""
    n = 2000
    rng = np.random.default_rng(1)
    order = rng.permutation(n)
    a, b = order[:-1].astype(np.int64), order[1:].astype(np.int64)
    assert (components(n, a, b) == 0).all()
    labels = components(6, np.array([5, 4], dtype=np.int64), np.array([3, 1], dtype=np.int64))
    assert labels.tolist() == [0, 1, 2, 3, 1, 3]
    assert components(3, a[:0], b[:0]).tolist() == [0, 1, 2]
    graphs = [
        (rng.integers(0, n, 2400), rng.integers(0, n, 2400)),
        (np.zeros(n - 1, dtype=np.int64) + int(rng.integers(0, n)), rng.permutation(n)[:-1]),
    ]
    for x, y in graphs:
        x, y = x.astype(np.int64), y.astype(np.int64)
        expected = union_find_components(n, x.tolist(), y.tolist())
        assert components(n, x, y).tolist() == expected


def test_keep_rules() -> None:
    clusters_ = [np.array([3, 1, 2], dtype=np.int64), np.array([0, 4], dtype=np.int64)]
    order = np.array([10, 4, 2, 7, 1], dtype=np.int64)  # input positions
    lengths = np.array([50, 90, 90, 10, 5], dtype=np.int64)
    rank = np.array([4, 0, 3, 2, 1], dtype=np.int64)  # keys' order
    assert keep_per_cluster(clusters_, "first", order=order) == [2, 4]
    # longest: 1 and 2 tie at 90 characters, 2 was read first
    assert keep_per_cluster(clusters_, "longest", order=order, lengths=lengths) == [2, 0]
    assert keep_per_cluster(clusters_, "smallest-key", order=order, rank=rank) == [1, 4]
    with pytest.raises(InvalidArgumentError, match="keep rule"):
        keep_per_cluster(clusters_, "newest", order=order)  # type: ignore[arg-type]


# --- over an Index ----------------------------------------------------------------------------


def test_functions_over_an_index_agree_with_its_pairs() -> None:
    keys, fps = planted(3, 400)
    index = Index.from_arrays(keys, fps)
    near = NearDuplicates.of_index(index)
    assert list(near.iter_pairs()) == index.pairs()
    assert list(NearDuplicates.of_index(index, 1).iter_pairs()) == index.pairs(k=1)
    _, found, flagged, groups = brute_force(keys, fps, 3)
    assert clusters(index) == found
    assert flags(index) == flagged
    assert exact_duplicates(index) == groups
    assert clusters(index, k=0) == [g.keys for g in groups]
    with pytest.raises(InvalidArgumentError, match="k=4"):
        clusters(index, k=4)
    with pytest.raises(TypeError):
        flags(index, k="1")  # type: ignore[arg-type]


# --- the shared corpora -----------------------------------------------------------------------


def corpus(path: Path) -> tuple[list[str], np.ndarray]:
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path} (expected <repo>/../shared/corpora)")
    keys: list[str] = []
    values: list[int] = []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            row = json.loads(line)
            fp = simhash(row["text"])
            assert fp is not None
            keys.append(row["id"])
            values.append(fp)
    return keys, np.array(values, dtype=np.uint64)


@pytest.mark.slow
def test_libstdcxx_corpus_82_pairs_largest_cluster_14() -> None:
    keys, fps = corpus(LIBSTDCXX)
    near = NearDuplicates(keys, fps, 3)
    expected = (CORPORA / "libstdc++-12-doc.pairs_le3.tsv").read_text(encoding="utf-8")
    assert "".join(f"{a}\t{b}\t{d}\n" for a, b, d in near.iter_pairs()) == expected
    assert len(near) == 82
    found = near.clusters()
    assert len(found[0]) == 14
    assert near.distance_counts().tolist() == [2, 5, 30, 45]
    pairs, brute_clusters, brute_flags, brute_groups = brute_force(keys, fps, 3)
    assert len(pairs) == 82
    assert found == brute_clusters
    assert near.flags() == brute_flags
    assert near.exact_duplicates() == brute_groups
    assert len(brute_groups) == 2
    # at k = 4 and 5 (designs (6, 2) and (7, 2)) the join still equals brute force
    for k in (4, 5):
        assert list(NearDuplicates(keys, fps, k).iter_pairs()) == brute_force(keys, fps, k)[0]


@pytest.mark.slow
def test_postgresql_corpus_has_no_pairs() -> None:
    keys, fps = corpus(POSTGRESQL)
    near = NearDuplicates(keys, fps, 3)
    assert len(near) == 0
    assert near.clusters() == near.flags() == near.exact_duplicates() == []  # type: ignore[comparison-overlap]
    # its 7 pairs at 4 to 10 bits
    assert len(NearDuplicates(keys, fps, 8)) == len(brute_force(keys, fps, 8)[0])


@pytest.mark.parametrize("design", [(4, 1), (5, 2), (6, 2), (6, 3), (3, 1), (8, 2)])
def test_value_pairs_on_every_explicit_design(design: tuple[int, int]) -> None:
    """An explicit design is joined on as given (short prefixes grouped, long ones sorted), for
    every k it answers, against brute force; also with tiny chunks and every row sorted."""
    rng = np.random.default_rng(design[0] * 10 + design[1])
    _, planted_fps = planted(design[0], 200, flips=design[0] - design[1])
    fps = np.concatenate([planted_fps, rng.integers(0, 2**63, 300, dtype=np.uint64) << 1])
    values = np.unique(fps)
    for k in range(design[0] - design[1] + 1):
        u, v, d = value_pairs(values, k, design)
        i, j, dd = brute_force_pairs(values, k)
        got = sorted(
            zip(np.minimum(u, v).tolist(), np.maximum(u, v).tolist(), d.tolist(), strict=True)
        )
        assert got == list(zip(i.tolist(), j.tolist(), dd.tolist(), strict=True))
    kmax = design[0] - design[1]
    names = [f"k{i}" for i in range(fps.size)]
    near = NearDuplicates(names, fps, kmax, design=design, tuning=Tuning(pair_budget=3))
    expected = brute_force(names, fps, kmax)[0]
    assert list(near.iter_pairs()) == expected


def test_spans_of_many_groups_equal_span_of_each() -> None:
    """spans (groups of up to 64 together, larger ones one by one) == span of each group,
    including a limit below a group's distinct fingerprints (None)."""
    keys, fps = planted(12, 3000, flips=6)
    near = NearDuplicates(keys, fps, 6)
    rng = np.random.default_rng(2)
    groups = [rng.choice(3000, size=int(s), replace=False) for s in rng.integers(2, 100, 300)]
    groups += near.cluster_positions()
    assert near.spans(groups) == [near.span(g) for g in groups]
    assert near.spans(groups, limit=50) == [near.span(g, limit=50) for g in groups]
    assert None in near.spans(groups, limit=50)
