"""The Jaccard mode of ``permindex dedup`` (``--method minhash``): MinHash signatures (against the
definition in Python integers, tests/oracles.py; stable across processes), intersections of
shingle sets (against Python sets), the LSH shape, exact verification (against brute
force over every pair, on random and edited documents), bounded batches on a huge bucket, the
report folder, bad options, and the figures on the shared corpora."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import sys
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np
import oracles
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from permindex.cli import main
from permindex.errors import InvalidArgumentError
from permindex.near.dedup import run_dedup
from permindex.near.jaccard import JaccardDuplicates, ShingleSets, intersection_sizes
from permindex.near.minhash import (
    Bands,
    band_keys,
    choose_bands,
    hash_constants,
    signatures,
)
from permindex.near.result import DedupOptions
from permindex.text.fingerprint import shingle_hashes, shingles

REPO = Path(__file__).resolve().parent.parent
CORPORA = REPO.parent / "shared" / "corpora"


def reference_signature(hashes: list[int], permutations: int) -> list[int]:
    """The definition, in Python integers (tests/oracles.py)."""
    a, b = hash_constants(permutations)
    return oracles.minhash_signature(hashes, a.tolist(), b.tolist())


def csr(sets: list[list[int]]) -> ShingleSets:
    return ShingleSets.of([np.array(s, dtype=np.uint64) for s in sets])


def test_signatures_equal_the_reference() -> None:
    rng = np.random.default_rng(7)
    sets = [rng.integers(0, 2**64, size=n, dtype=np.uint64).tolist() for n in (1, 2, 5, 40, 300)]
    sets.append([0, 2**64 - 1])
    data = csr(sets)
    got = signatures(data.values, data.offsets, 64)
    assert got.dtype == np.uint32 and got.shape == (len(sets), 64)
    for i, s in enumerate(sets):
        assert got[i].tolist() == reference_signature(sorted(set(s)), 64)
    # a prefix of the permutations is the signature with fewer permutations
    assert np.array_equal(signatures(data.values, data.offsets, 16), got[:, :16])


_STABLE = """
import sys
import numpy as np
from permindex.near.minhash import signatures
from permindex.text.fingerprint import shingle_hashes
h = np.unique(shingle_hashes("the quick brown fox jumps over the lazy dog and runs away"))
print(signatures(h, np.array([0, h.size]), 8)[0].tolist())
"""


def test_signatures_are_stable_across_processes() -> None:
    # fixed constants and XXH3 of the shingles: no hash(), no generator whose stream may change.
    # The values are the ones this code gives on any machine (they are part of the contract).
    expected = None
    for seed in ("0", "4242", "1"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run(
            [sys.executable, "-c", _STABLE], env=env, capture_output=True, text=True, check=True
        )
        values = json.loads(done.stdout)
        expected = expected or values
        assert values == expected
    text = "the quick brown fox jumps over the lazy dog and runs away"
    hashes = sorted(set(oracles.shingle_hashes(text)))
    assert expected == reference_signature(hashes, 8)
    golden = [131293097, 795612327, 1249435711, 161649329, 9421824, 63660140, 346597497, 563767518]
    assert expected == golden  # the same on every machine and version: the contract


def test_choose_bands() -> None:
    shape = choose_bands(0.8)
    assert shape == Bands(18, 7)
    assert shape.probability(0.8) >= 0.98
    assert shape.probability(0.6) < 0.5  # the S-curve's middle lies well below 0.8
    assert abs(Bands(9, 13).probability(0.8) - 0.40) < 0.01  # datasketch's choice for 0.8
    for threshold in (0.5, 0.7, 0.9, 0.95, 1.0):
        assert choose_bands(threshold).probability(threshold) >= 0.98
    for bad in (0.0, -0.1, 1.01, float("nan"), True):
        with pytest.raises(InvalidArgumentError):
            choose_bands(bad)
    with pytest.raises(InvalidArgumentError):
        choose_bands(0.8, 0)


def test_intersection_sizes() -> None:
    rng = np.random.default_rng(3)
    sets = [rng.integers(0, 60, size=int(rng.integers(1, 40))).tolist() for _ in range(30)]
    data = csr(sets)
    pairs = np.array(list(combinations(range(30), 2)), dtype=np.int64)
    left, right = pairs[:, 0], pairs[:, 1]
    got = intersection_sizes(data, left, right)
    want = [oracles.intersection_size(sets[i], sets[j]) for i, j in zip(left, right, strict=True)]
    assert got.tolist() == want


_HASHES = st.lists(st.integers(0, 2**64 - 1), max_size=60)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(_HASHES, st.lists(st.integers(0, 40), max_size=30)), max_size=8))
def test_hypothesis_signatures_and_intersections(sets: list[list[int]]) -> None:
    """Sets of any 64-bit hashes (repeats, 0 and 2^64 - 1, the empty set, small values that
    collide often) through the public kernels: signatures against the definition,
    intersection sizes of every pair (each set with itself too) against Python sets."""
    data = csr(sets)
    got = signatures(data.values, data.offsets, 16)
    for i, s in enumerate(sets):
        assert got[i].tolist() == reference_signature(s, 16)
    pairs = [(i, j) for i in range(len(sets)) for j in range(i, len(sets))]
    left = np.array([i for i, _ in pairs], dtype=np.int64)
    right = np.array([j for _, j in pairs], dtype=np.int64)
    sizes = intersection_sizes(data, left, right)
    assert sizes.tolist() == [oracles.intersection_size(sets[i], sets[j]) for i, j in pairs]


def test_shingle_sets_of_texts_against_the_definition() -> None:
    """The sets of the Jaccard mode (shingle_hashes, repeats removed) and their exact Jaccard
    against the definition's shingle strings and Python sets (no two shingles of these texts
    share a 64-bit hash)."""
    rng = np.random.default_rng(17)
    texts = [" ".join(vocabulary_words(rng, int(rng.integers(0, 120)))) for _ in range(12)]
    texts += ["", "one two", "Ünïcode Straße ΣΑΣ " * 4, texts[1] + " tail words here"]
    data = ShingleSets.of([shingle_hashes(t) for t in texts])
    for i, text in enumerate(texts):
        assert data.set(i).tolist() == sorted(set(oracles.shingle_hashes(text)))
    pairs = [(i, j) for i, j in combinations(range(len(texts)), 2)]
    left = np.array([i for i, _ in pairs], dtype=np.int64)
    right = np.array([j for _, j in pairs], dtype=np.int64)
    inter = intersection_sizes(data, left, right)
    for (i, j), common in zip(pairs, inter.tolist(), strict=True):
        a, b = oracles.shingle_strings(texts[i]), oracles.shingle_strings(texts[j])
        union = len(data.set(i)) + len(data.set(j)) - common
        assert (common / union if union else 0.0) == oracles.jaccard(a, b)


# --- the Jaccard mode against brute force ----------------------------------------------------


def vocabulary_words(rng: np.random.Generator, n: int) -> list[str]:
    return [f"w{i}" for i in rng.integers(0, 3000, size=n).tolist()]


def edited_collection(seed: int) -> list[dict[str, Any]]:
    """Base documents, each with edited copies at a spread of Jaccard similarities (a few words
    replaced, inserted or deleted), plus unrelated documents."""
    rng = np.random.default_rng(seed)
    rows: list[dict[str, Any]] = []
    for base in range(12):
        text = vocabulary_words(rng, int(rng.integers(60, 400)))
        rows.append({"id": f"b{base:02d}", "text": " ".join(text)})
        for copy in range(5):
            words = list(text)
            for _ in range(int(rng.integers(0, 12))):
                at = int(rng.integers(0, len(words)))
                kind = int(rng.integers(0, 3))
                if kind == 0:
                    words[at] = f"x{int(rng.integers(0, 10**6))}"
                elif kind == 1:
                    words.insert(at, f"y{int(rng.integers(0, 10**6))}")
                else:
                    del words[at]
            rows.append({"id": f"b{base:02d}/c{copy}", "text": " ".join(words)})
    for other in range(20):
        rows.append({"id": f"u{other:02d}", "text": " ".join(vocabulary_words(rng, 100))})
    rows.append({"id": "b00/exact", "text": rows[0]["text"]})
    return rows


def exact_pairs(rows: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    """Every pair's exact word-3-shingle Jaccard (shingle strings, no hash), key_a < key_b."""
    sets = {row["id"]: set(shingles(row["text"])) for row in rows}
    out = {}
    for a, b in combinations(sorted(sets), 2):
        union = len(sets[a] | sets[b])
        out[(a, b)] = len(sets[a] & sets[b]) / union if union else 0.0
    return out


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["dedup", "--no-progress", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("threshold", [0.8, 0.9])
def test_jaccard_mode_against_brute_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, seed: int, threshold: float
) -> None:
    rows = edited_collection(seed)
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    code, out, _ = run_cli(
        capsys, str(path), "--method", "minhash", "--threshold", str(threshold), "--out",
        str(tmp_path / "out"), "--jobs", "1",
    )  # fmt: skip
    assert code == 0
    lines = [line.split("\t") for line in out.splitlines()]
    truth = exact_pairs(rows)
    printed = {(a, b): value for a, b, value in lines}
    assert [(a, b) for a, b, _ in lines] == sorted(printed) and all(a < b for a, b in printed)
    for pair, value in printed.items():  # precision 1.0: every pair verified, value exact
        assert truth[pair] >= threshold
        assert value == f"{truth[pair]:.4f}" or abs(float(value) - truth[pair]) <= 0.00005
    wanted = {pair for pair, j in truth.items() if j >= threshold}
    assert len(wanted) >= 30  # the collection has pairs in every band above the threshold
    found = wanted & set(printed)
    # recall per band, as documented: P(J) = 1 - (1 - J^7)^18 at 0.8, >= 0.986 at the threshold
    high = {p for p in wanted if truth[p] >= min(1.0, threshold + 0.05)}
    assert high <= found
    assert len(found) >= 0.95 * len(wanted)
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["method"] == "minhash" and summary["pairs"] == len(printed)
    assert 0 < summary["candidates_verified"] <= summary["candidates"]
    assert sum(summary["pairs_by_jaccard"].values()) == len(printed)


def test_jaccard_mode_report_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = edited_collection(5)
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    out_dir = tmp_path / "out"
    code, out, err = run_cli(capsys, str(path), "--method", "minhash", "--out", str(out_dir))
    assert code == 0 and "with Jaccard >= 0.8" in err and "candidates verified" in err
    assert (out_dir / "pairs.tsv").read_text() == out
    pairs = json.loads((out_dir / "pairs.json").read_text())
    assert pairs and set(pairs[0]) == {"key_a", "key_b", "jaccard"}
    assert [f"{p['key_a']}\t{p['key_b']}\t{p['jaccard']:.4f}" for p in pairs] == out.splitlines()
    # the exact copy of b00: one group of identical shingle sets, J 1.0000
    exact = json.loads((out_dir / "exact_duplicates.json").read_text())
    by_set: dict[frozenset[str], list[str]] = {}
    for row in rows:
        by_set.setdefault(frozenset(shingles(row["text"])), []).append(row["id"])
    groups = sorted((sorted(g) for g in by_set.values() if len(g) > 1), key=lambda g: (-len(g), g))
    assert ["b00", "b00/exact"] in groups
    assert [g["keys"] for g in exact] == groups
    assert "b00\tb00/exact\t1.0000" in out.splitlines()
    flags = (out_dir / "flags.tsv").read_text().splitlines()
    assert "b00\tb00/exact\t1.0000\t" in "\n".join(flags)
    decisions = (out_dir / "keep_drop.tsv").read_text().splitlines()
    assert any(line.split("\t")[1] == "drop" for line in decisions)
    html = (out_dir / "report.html").read_text()
    assert "Pairs per Jaccard similarity" in html and "candidate pairs verified" in html


def test_jaccard_mode_parquet_pairs_carry_the_similarity(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """pairs.parquet says what pairs.tsv says: a ``jaccard`` column (float64) whose values print
    as the TSV's 4 decimals, not the mode's internal distance (1 - J) x 10^4."""
    pq = pytest.importorskip("pyarrow.parquet")
    rows = edited_collection(5)
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    out_dir = tmp_path / "out"
    code, out, _ = run_cli(capsys, str(path), "--method", "minhash", "--out", str(out_dir))
    assert code == 0 and out
    table = pq.read_table(out_dir / "pairs.parquet")
    assert table.schema.names == ["key_a", "key_b", "jaccard"]
    assert str(table.schema.field("jaccard").type) == "double"
    got = [
        f"{a}\t{b}\t{j:.4f}"
        for a, b, j in zip(*(table.column(n).to_pylist() for n in table.schema.names), strict=True)
    ]
    assert got == out.splitlines()
    assert all(0.0 < j <= 1.0 for j in table.column("jaccard").to_pylist())


def test_huge_bucket_in_bounded_batches() -> None:
    # 120 documents that differ by one word each: one band bucket holds nearly all of them;
    # batches of 500 pairs give the same pairs as one batch, each candidate once.
    rng = np.random.default_rng(9)
    base = vocabulary_words(rng, 600)
    texts = []
    for i in range(120):
        words = list(base)
        words[i * 5] = f"z{i}"
        texts.append(" ".join(words))
    texts += [texts[0]] * 30  # and identical copies, joined once
    keys = [f"d{i:03d}" for i in range(len(texts))]
    sets = ShingleSets.of([shingle_hashes(t) for t in texts])
    sig = signatures(sets.values, sets.offsets, 128)
    bands = band_keys(sig, Bands(18, 7))
    whole = JaccardDuplicates(keys, sets, bands, 0.8, Bands(18, 7), batch=10**7)
    small = JaccardDuplicates(keys, sets, bands, 0.8, Bands(18, 7), batch=500)
    assert list(whole.iter_pairs()) == list(small.iter_pairs())
    assert whole.candidates == small.candidates == 120 * 119 // 2  # distinct sets only
    assert len(whole) == len(texts) * (len(texts) - 1) // 2  # every pair is above 0.8
    assert [len(g) for g in whole.exact_positions()] == [31]


@pytest.mark.parametrize(
    "argv",
    [
        ["--method", "minhash", "--threshold", "0"],
        ["--method", "minhash", "--threshold", "1.5"],
        ["--method", "minhash", "--threshold", "-0.2"],
        ["--method", "minhash", "--threshold", "high"],
        ["--method", "minhash", "--k", "3"],
        ["--method", "minhash", "--permutations", "0"],
        ["--method", "minhash", "--permutations", "5000"],
        ["--method", "minhash", "--weights", "idf"],
        ["--threshold", "0.8"],  # a Jaccard option without --method minhash
        ["--method", "jaccard"],
    ],
)
def test_bad_options_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str]
) -> None:
    path = write_jsonl(tmp_path / "docs.jsonl", edited_collection(1)[:3])
    with pytest.raises(SystemExit) as exit_info:
        code = main(["dedup", str(path), "--out", str(tmp_path / "o"), *argv])
        raise SystemExit(code)
    assert exit_info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "o" / "summary.json").exists()


def test_fingerprints_without_texts_are_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rows: list[dict[str, Any]] = [*edited_collection(1)[:3], {"id": "fp", "fingerprint": 7}]
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    code, out, err = run_cli(capsys, str(path), "--method", "minhash", "--out", str(tmp_path))
    assert (code, out) == (4, "")
    assert "'fp' comes as a fingerprint" in err and "Traceback" not in err


def test_options_checked_in_the_library() -> None:
    bad: list[dict[str, Any]] = [
        {"threshold": 0.0},
        {"threshold": 1.5},
        {"permutations": 0},
        {"method": "x"},
    ]
    for fields in bad:
        with pytest.raises(InvalidArgumentError):
            DedupOptions(source="-", **fields).check()


# --- the shared corpora ----------------------------------------------------------------------


def corpus(name: str) -> Path:
    path = CORPORA / name
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path} (expected <repo>/../shared/corpora)")
    return path


def corpus_sets(path: Path) -> dict[str, set[str]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return {row["id"]: set(shingles(row["text"])) for row in map(json.loads, lines)}


@pytest.mark.slow
def test_libstdcxx_figures(tmp_path: Path) -> None:
    path = corpus("libstdc++-12-doc.jsonl.gz")
    options = DedupOptions(
        source=str(path), out_dir=tmp_path, method="minhash", threshold=0.8, jobs=2
    )
    result = run_dedup(options)
    near = result.near
    assert isinstance(near, JaccardDuplicates)
    sets = corpus_sets(path)
    pairs = list(near.iter_pairs())
    for a, b, _ in pairs:  # precision 1.0, checked on the shingle strings
        assert len(sets[a] & sets[b]) / len(sets[a] | sets[b]) >= 0.8
    # 584 pairs have J >= 0.8 (benchmarks/quality.py, exact over all 7.6 million pairs)
    assert len(pairs) >= 0.95 * 584
    assert near.candidates_verified <= 2 * result.documents


@pytest.mark.slow
def test_postgresql_has_no_pair(tmp_path: Path) -> None:
    path = corpus("postgresql-doc-15.jsonl.gz")
    result = run_dedup(DedupOptions(source=str(path), out_dir=tmp_path, method="minhash", jobs=2))
    assert len(result.near) == 0


def test_inputs_and_workers_give_the_same_pairs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = edited_collection(3)
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    folder = tmp_path / "folder"
    for row in rows:
        file = folder / f"{row['id']}.txt"
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(row["text"], encoding="utf-8")
    jaccard = ("--method", "minhash", "--threshold", "0.85")
    _, one, _ = run_cli(capsys, str(path), *jaccard, "--jobs", "1", "--out", str(tmp_path / "1"))
    _, two, _ = run_cli(capsys, str(path), *jaccard, "--jobs", "2", "--out", str(tmp_path / "2"))
    _, files, _ = run_cli(capsys, str(folder), *jaccard, "--out", str(tmp_path / "3"))
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(path.read_bytes())))
    _, piped, _ = run_cli(capsys, "-", *jaccard, "--out", str(tmp_path / "4"))
    assert one and one == two == piped
    named = [line.split("\t") for line in files.splitlines()]
    plain = [line.split("\t") for line in one.splitlines()]
    stripped = sorted((a.removesuffix(".txt"), b.removesuffix(".txt"), j) for a, b, j in named)
    assert stripped == sorted((a, b, j) for a, b, j in plain)


def test_too_few_permutations_are_warned_about(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "docs.jsonl", edited_collection(5))
    out_dir = tmp_path / "out"
    args = (str(path), "--method", "minhash", "--out", str(out_dir))
    code, _, err = run_cli(capsys, *args, "--permutations", "2")
    summary = json.loads((out_dir / "summary.json").read_text())
    assert code == 0 and summary["recall_at_threshold"] < 0.98
    assert "warning: 2 permutations find only" in err and "raise --permutations" in err
    code, _, err = run_cli(capsys, *args)
    summary = json.loads((out_dir / "summary.json").read_text())
    assert code == 0 and summary["recall_at_threshold"] >= 0.98 and "warning" not in err


def test_band_keys_of_another_shape_refused() -> None:
    # One row of band keys per set and one column per band: anything else is refused before
    # any join work, naming the shapes.
    sets = ShingleSets.of([shingle_hashes(f"one two three four {i}") for i in range(4)])
    sig = signatures(sets.values, sets.offsets, 128)
    shape = choose_bands(0.8, 128)
    keys = [f"d{i}" for i in range(4)]
    with pytest.raises(InvalidArgumentError, match="band keys of shape"):
        JaccardDuplicates(keys, sets, band_keys(sig, shape)[:3], 0.8, shape)
    with pytest.raises(InvalidArgumentError, match="18 bands"):
        JaccardDuplicates(keys, sets, band_keys(sig, Bands(9, 14)), 0.8, shape)
    assert len(JaccardDuplicates(keys, sets, band_keys(sig, shape), 0.8, shape).keys) == 4
