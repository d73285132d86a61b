"""The Jaccard mode's exact verification from family deltas (issue 42, point 4) against brute
force: :func:`permindex.near.jaccard.self_join` and :func:`~permindex.near.jaccard.
verified_tasks` with and without :class:`~permindex.near.jaccard.FamilyDeltas`, on families of
sets made from a reference by removing and adding elements (empty differences, identical sets,
sets far from their family, unrelated sets), with band keys that make them candidates; the
deltas themselves against their definition (Python sets); and the pair files, whose lines a
compiled kernel copies as bytes, against the definitions of their escapes."""

from __future__ import annotations

import json
from fractions import Fraction
from itertools import combinations
from pathlib import Path

import numpy as np
import oracles
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from permindex.cli import main
from permindex.near.jaccard import (
    SCALE,
    FamilyDeltas,
    ShingleSets,
    family_deltas,
    self_join,
    verified_tasks,
)
from permindex.text.documents import tsv_field

# values from a small range, so that removals and additions of different sets overlap
ELEMENT = st.integers(min_value=0, max_value=300)


@st.composite
def families(draw: st.DrawFn) -> tuple[list[set[int]], np.ndarray]:
    """Sets in families (each a base set with some members removed and others added: none,
    a few, or most, so that some rows are far from their family) plus unrelated sets, and
    their band keys: ``(d, bands) uint64``, the members of a family sharing a key in a band
    drawn for each, other keys distinct or drawn from a few values."""
    sets: list[set[int]] = []
    groups: list[int] = []
    for group in range(draw(st.integers(min_value=0, max_value=4))):
        base = draw(st.sets(ELEMENT, min_size=1, max_size=60))
        # additions from a few values per family, so that members share some
        extra = sorted(draw(st.sets(ELEMENT, min_size=1, max_size=8)) - base) or [1000]
        # removals from a few values per family too, and now and then most of the base
        few = sorted(draw(st.sets(st.sampled_from(sorted(base)), max_size=6)))
        for _ in range(draw(st.integers(min_value=1, max_value=8))):
            removed = draw(st.sets(st.sampled_from(few), max_size=len(few))) if few else set()
            if draw(st.integers(min_value=0, max_value=5)) == 0:
                removed |= draw(st.sets(st.sampled_from(sorted(base)), max_size=len(base)))
            added = draw(st.sets(st.sampled_from(extra), max_size=len(extra)))
            member = (base - removed) | added
            sets.append(member if member else {draw(ELEMENT)})
            groups.append(group)
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        sets.append(draw(st.sets(ELEMENT, min_size=1, max_size=40)))
        groups.append(-1)
    if not sets:
        sets.append({1})
        groups.append(-1)
    d, bands = len(sets), draw(st.integers(min_value=1, max_value=4))
    keys = np.zeros((d, bands), dtype=np.uint64)
    for band in range(bands):
        for x in range(d):
            shared = groups[x] >= 0 and draw(st.booleans())
            if shared:
                keys[x, band] = 1000 + groups[x]
            elif draw(st.booleans()):
                keys[x, band] = draw(st.integers(min_value=0, max_value=3))  # chance collisions
            else:
                keys[x, band] = 10**6 + x
    return sets, keys


def brute_force(
    sets: list[set[int]], keys: np.ndarray, threshold: float
) -> tuple[dict[tuple[int, int], int], int]:
    """Every pair u < v equal in at least one band with J >= threshold (``inter / union >=
    threshold`` in floats, the contract's comparison): its distance ``round((1 - J) *
    SCALE)``, ties up, in exact fractions; and the candidates."""
    found: dict[tuple[int, int], int] = {}
    candidates = 0
    for u, v in combinations(range(len(sets)), 2):
        if not (keys[u] == keys[v]).any():
            continue
        candidates += 1
        inter = len(sets[u] & sets[v])
        union = len(sets[u] | sets[v])
        if inter / union >= threshold:
            distance = Fraction(union - inter, union) * SCALE + Fraction(1, 2)
            found[(u, v)] = distance.numerator // distance.denominator
    return found, candidates


def as_sets(sets: list[set[int]]) -> ShingleSets:
    return ShingleSets.of([np.array(sorted(s), dtype=np.uint64) for s in sets])


@settings(max_examples=100, deadline=None)
@given(families(), st.sampled_from([0.1, 0.5, 0.7, 0.8, 0.9, 1.0]), st.integers(1, 40))
def test_self_join_against_brute_force(
    made: tuple[list[set[int]], np.ndarray], threshold: float, batch: int
) -> None:
    sets, keys = made
    data = as_sets(sets)
    representative = np.arange(len(sets), dtype=np.int64)
    (u, v, distance), candidates, merged = self_join(data, representative, keys, threshold, batch)
    got = dict(zip(zip(u.tolist(), v.tolist(), strict=True), distance.tolist(), strict=True))
    assert len(got) == u.size  # each pair once
    want, want_candidates = brute_force(sets, keys, threshold)
    assert got == want
    assert candidates == want_candidates and merged <= candidates


@settings(max_examples=100, deadline=None)
@given(families())
def test_family_deltas_against_the_definition(made: tuple[list[set[int]], np.ndarray]) -> None:
    sets, keys = made
    data = as_sets(sets)
    # a permuted representative: row x is set representative[x]
    representative = np.arange(len(sets), dtype=np.int64)[::-1].copy()
    deltas = family_deltas(data, representative, keys[::-1].copy())
    assert isinstance(deltas, FamilyDeltas)
    family = deltas.family.tolist()
    assert len(family) == len(sets)
    for x, f in enumerate(family):
        a = sets[int(representative[x])]
        if f < 0:
            assert deltas.removed.set(x).size == deltas.added.set(x).size == 0
            continue
        reference = set(deltas.references.set(f).tolist())
        removed, added = deltas.removed.set(x).tolist(), deltas.added.set(x).tolist()
        assert removed == sorted(reference - a) and added == sorted(a - reference)
        assert 2 * (len(removed) + len(added)) <= len(a)  # the rule for joining a family
    # the rows of a family lie in one component of the rows that share a band key
    rows_keys = keys[::-1]
    edges = [
        (u, v) for u, v in combinations(range(len(sets)), 2) if (rows_keys[u] == rows_keys[v]).any()
    ]
    component = oracles.union_find_components(
        len(sets), [u for u, _ in edges], [v for _, v in edges]
    )
    for f in set(family) - {-1}:
        assert len({component[x] for x, g in enumerate(family) if g == f}) == 1
    # references: sorted, distinct
    for f in range(len(deltas.references)):
        listed = deltas.references.set(f).tolist()
        assert listed == sorted(set(listed))


def test_identical_sets_and_empty_differences() -> None:
    """Rows equal to their family's reference (empty deltas), identical rows, a row whose
    whole difference is additions and one whose whole difference is removals: every pair J
    exact."""
    base = set(range(100))
    sets = [base, set(base), base - {1, 2}, base | {500, 501}, base - {3} | {502}, base - {1}]
    keys = np.zeros((len(sets), 2), dtype=np.uint64)  # one bucket in both bands
    data = as_sets(sets)
    representative = np.arange(len(sets), dtype=np.int64)
    deltas = family_deltas(data, representative, keys)
    assert (deltas.family == 0).all()  # one family, every row close to it
    assert deltas.references.set(0).tolist() == sorted(base)  # the majority is the base
    assert deltas.removed.set(0).size == deltas.added.set(0).size == 0
    (u, v, distance), candidates, merged = self_join(data, representative, keys, 0.5)
    want, want_candidates = brute_force(sets, keys, 0.5)
    got = dict(zip(zip(u.tolist(), v.tolist(), strict=True), distance.tolist(), strict=True))
    assert got == want and candidates == merged == want_candidates == 15
    assert got[(0, 1)] == 0  # identical sets: J = 1


@settings(max_examples=60, deadline=None)
@given(families(), st.sampled_from([0.5, 0.8]))
def test_verified_tasks_with_and_without_deltas(
    made: tuple[list[set[int]], np.ndarray], threshold: float
) -> None:
    """The Dask engine's call (no deltas: every pair merged) and the local one (deltas) keep
    the same pairs with the same distances and counts."""
    sets, keys = made
    data = as_sets(sets)
    d = len(sets)
    representative = np.arange(d, dtype=np.int64)
    deltas = family_deltas(data, representative, keys)
    for band in range(keys.shape[1]):
        order = np.argsort(keys[:, band], kind="stable").astype(np.int64)
        ordered = keys[order, band]
        first = np.flatnonzero(np.append(ordered[1:] == ordered[:-1], False)).astype(np.int64)
        high = np.array(
            [np.searchsorted(ordered, ordered[i], side="right") for i in first.tolist()],
            dtype=np.int64,
        )
        args = (order, first, first + 1, high, keys, band, representative, data, threshold, 7)
        plain = verified_tasks(*args)
        with_deltas = verified_tasks(*args, deltas)
        assert plain[:2] == with_deltas[:2]
        flat = [
            [
                np.concatenate(column).tolist() if parts else []
                for column in zip(*parts, strict=True)
            ]
            for parts in (plain[2], with_deltas[2])
        ]
        assert flat[0] == flat[1]


# --- the pair files, written as bytes by a compiled kernel --------------------------------

ODD_KEYS = ["tab\there", "line\nbreak", "back\\slash", 'quo"te', "é/ü", "中文", "emoji 🎉", "cr\rx"]


@pytest.mark.parametrize("method", ["minhash", "simhash"])
def test_pair_files_escape_keys_as_defined(tmp_path: Path, method: str) -> None:
    """pairs.tsv, pairs.json and pairs.parquet of keys holding TAB, LF, CR, backslash,
    quotes and non-ASCII: every line is the definition's (``tsv_field`` of each key, and
    ``json.dumps(key, ensure_ascii=False)``), the three files list the same pairs."""
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in rng.integers(0, 500, size=300).tolist()]
    rows = []
    for i, key in enumerate(ODD_KEYS * 3):
        copy = list(words)
        if i % 2 or method == "minhash":  # the SimHash mode: half of them the same text
            copy[i * 7] = f"edit{i}"
        rows.append({"id": f"{key}{i}", "text": " ".join(copy)})
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), "utf-8")
    out = tmp_path / "out"
    argv = ["dedup", "--no-progress", str(path), "--out", str(out)]
    argv += ["--method", "minhash"] if method == "minhash" else []
    assert main(argv) == 0
    measure = "jaccard" if method == "minhash" else "distance"
    listed = json.loads((out / "pairs.json").read_text("utf-8"))
    assert len(listed) >= 60
    tsv = (out / "pairs.tsv").read_bytes().decode("utf-8").split("\n")
    assert tsv[-1] == "" and len(tsv) == len(listed) + 1
    text = (out / "pairs.json").read_text("utf-8").split("\n")
    assert text[0] == "[" and text[-2:] == ["]", ""]
    for i, (pair, line, json_line) in enumerate(zip(listed, tsv[:-1], text[1:-2], strict=True)):
        a, b = pair["key_a"], pair["key_b"]
        assert a < b
        value = line.split("\t")[-1]
        assert line == f"{tsv_field(a)}\t{tsv_field(b)}\t{value}"
        want = (
            f'{{"key_a": {json.dumps(a, ensure_ascii=False)}, '
            f'"key_b": {json.dumps(b, ensure_ascii=False)}, "{measure}": {value}}}'
        )
        assert json_line == want + ("," if i < len(listed) - 1 else "")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pq.read_table(out / "pairs.parquet")
    assert table.column("key_a").to_pylist() == [p["key_a"] for p in listed]
    assert table.column("key_b").to_pylist() == [p["key_b"] for p in listed]
    assert table.column(measure).to_pylist() == [p[measure] for p in listed]
