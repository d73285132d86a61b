"""``permindex dedup NEW --method minhash --against CORPUS``: the Jaccard mode's batch query,
against brute force (the exact Jaccard of every new x corpus pair with Python sets of shingle
strings, tests/oracles.py), the LSH look-up's batches and each-pair-once rule, the unmatched
file, and the options it refuses."""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import oracles
import pytest

from permindex.cli import main
from permindex.near.against import against_pairs
from permindex.near.dedup import run_dedup
from permindex.near.jaccard import JaccardDuplicates, ShingleSets, jaccard_text, lookup_batches
from permindex.near.minhash import band_keys, choose_bands, signatures
from permindex.near.result import DedupOptions
from permindex.text.fingerprint import shingle_hashes


def words(rng: np.random.Generator, n: int) -> list[str]:
    return [f"w{i}" for i in rng.integers(0, 3000, size=n).tolist()]


def edited(rng: np.random.Generator, text: list[str], edits: int) -> str:
    out = list(text)
    for _ in range(edits):
        at = int(rng.integers(0, len(out)))
        kind = int(rng.integers(0, 3))
        if kind == 0:
            out[at] = f"x{int(rng.integers(0, 10**6))}"
        elif kind == 1:
            out.insert(at, f"y{int(rng.integers(0, 10**6))}")
        else:
            del out[at]
    return " ".join(out)


def planted(seed: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(new, corpus): corpus bases with edited copies in both collections at a spread of
    Jaccard similarities, an exact copy, a new document twice in NEW (a new-vs-new pair, not
    an against pair), a corpus template copied 40 times (one hot band bucket), unrelated
    documents on both sides, and a too-short text."""
    rng = np.random.default_rng(seed)
    new: list[dict[str, Any]] = []
    corpus: list[dict[str, Any]] = []
    for base in range(10):
        text = words(rng, int(rng.integers(60, 300)))
        corpus.append({"id": f"c{base:02d}", "text": " ".join(text)})
        for copy in range(3):
            corpus.append({"id": f"c{base:02d}/{copy}", "text": edited(rng, text, copy * 3)})
        for copy in range(4):
            new.append(
                {"id": f"n{base:02d}/{copy}", "text": edited(rng, text, int(rng.integers(0, 14)))}
            )
    new.append({"id": "n-exact", "text": corpus[0]["text"]})
    twice = " ".join(words(rng, 80))
    new += [{"id": "n-twice-a", "text": twice}, {"id": "n-twice-b", "text": twice}]
    template = words(rng, 150)
    corpus += [{"id": f"t{i:02d}", "text": edited(rng, template, i % 3)} for i in range(40)]
    new.append({"id": "n-template", "text": edited(rng, template, 2)})
    new += [{"id": f"n-other{i}", "text": " ".join(words(rng, 100))} for i in range(8)]
    corpus += [{"id": f"c-other{i}", "text": " ".join(words(rng, 100))} for i in range(8)]
    new.append({"id": "n-short", "text": "two words"})
    return new, corpus


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["dedup", "--no-progress", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def truth(
    new: list[dict[str, Any]], corpus: list[dict[str, Any]], threshold: float, permutations: int
) -> tuple[dict[tuple[str, str], Fraction], set[tuple[str, str]]]:
    """The exact Jaccard of every new x corpus pair at or above ``threshold`` (shingle strings,
    Python sets), and of those the pairs whose signatures agree on a whole band of the shape
    the mode uses (the pairs the bands must find)."""
    shape = choose_bands(threshold, permutations)
    strings = {r["id"]: set(oracles.shingle_strings(r["text"])) for r in new + corpus}
    hashes = {r["id"]: np.array(shingle_hashes(r["text"]), dtype=np.uint64) for r in new + corpus}
    usable = [key for key in strings if strings[key]]
    sets = ShingleSets.of([hashes[key] for key in usable])
    keys = dict(
        zip(
            usable,
            band_keys(signatures(sets.values, sets.offsets, permutations), shape),
            strict=True,
        )
    )
    above: dict[tuple[str, str], Fraction] = {}
    must: set[tuple[str, str]] = set()
    for n in (r["id"] for r in new):
        for c in (r["id"] for r in corpus):
            if not strings[n] or not strings[c]:
                continue
            j = Fraction(len(strings[n] & strings[c]), len(strings[n] | strings[c]))
            assert float(j) == pytest.approx(oracles.jaccard(strings[n], strings[c]))
            if j >= Fraction(str(threshold)):  # the decimal threshold
                above[(n, c)] = j
                if (keys[n] == keys[c]).any():
                    must.add((n, c))
    return above, must


@pytest.mark.parametrize(("seed", "threshold"), [(1, 0.8), (2, 0.7), (3, 0.9)])
def test_against_brute_force(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, seed: int, threshold: float
) -> None:
    new, corpus = planted(seed)
    new_path = write_jsonl(tmp_path / "new.jsonl", new)
    corpus_path = write_jsonl(tmp_path / "corpus.jsonl", corpus)
    out = tmp_path / "out"
    code, stdout, stderr = run_cli(
        capsys, str(new_path), "--against", str(corpus_path), "--method", "minhash",
        "--threshold", str(threshold), "--out", str(out), "--jobs", "1",
    )  # fmt: skip
    assert code == 0, stderr
    lines = [line.split("\t") for line in stdout.splitlines()]
    printed = {(n, c): value for n, c, value in lines}
    assert len(printed) == len(lines)  # each pair once
    assert [(n, c) for n, c, _ in lines] == sorted(printed)
    above, must = truth(new, corpus, threshold, 128)
    for pair, value in printed.items():  # precision 1.0, the exact value
        assert pair in above, pair
        assert abs(float(value) - float(above[pair])) <= 0.00005 + 1e-12
        # 4 decimals of the exact fraction, half a unit rounded toward the lower similarity
        assert value == jaccard_text(math.floor((1 - above[pair]) * 10_000 + Fraction(1, 2)))
    assert must <= set(printed)  # every pair the bands see is verified and printed
    assert len(above) >= 40 and len(printed) >= 0.95 * len(above)
    assert {("n-exact", "c00")} <= set(printed) and printed[("n-exact", "c00")] == "1.0000"
    template = {pair for pair in above if pair[0] == "n-template"}  # the hot bucket
    assert len(template) >= 10 and template <= set(printed)
    assert not any(n == "n-twice-a" and c == "n-twice-b" for n, c in printed)
    # new-vs-new pairs are the new batch's own report, as with SimHash
    assert "n-twice-a\tn-twice-b\t1.0000" in (out / "pairs.tsv").read_text().splitlines()
    matched = {n for n, _ in printed}
    report = json.loads((out / "exact_duplicates.json").read_text())
    digest = {key: group["fingerprint"] for group in report for key in group["keys"]}
    unmatched = (out / "new_unmatched.tsv").read_text().splitlines()
    expected = sorted(r["id"] for r in new if r["id"] not in matched and r["id"] != "n-short")
    assert [line.split("\t")[0] for line in unmatched] == expected
    assert all(len(line.split("\t")[1]) == 16 for line in unmatched)
    for line in unmatched:  # the set digest, as exact_duplicates gives it
        key, value = line.split("\t")
        assert digest.get(key, value) == value
    assert f"{len(lines)} pairs with {corpus_path}" in stderr


def test_library_matches_the_cli_and_repeats_count_once(tmp_path: Path) -> None:
    """against_pairs gives the CLI's pairs; a corpus read twice (the same keys, the same
    texts) gives each pair once; a corpus document repeated under a second key matches too."""
    new, corpus = planted(4)
    new_path = write_jsonl(tmp_path / "new.jsonl", new)
    once = write_jsonl(tmp_path / "corpus.jsonl", corpus)
    twice = write_jsonl(
        tmp_path / "twice.jsonl", corpus + corpus + [{"id": "z-copy", "text": corpus[0]["text"]}]
    )
    options = DedupOptions(source=str(new_path), out_dir=tmp_path / "o", method="minhash", jobs=1)
    result = run_dedup(options)
    assert isinstance(result.near, JaccardDuplicates)
    first = against_pairs(result, str(once))
    second = against_pairs(result, str(twice))
    assert first and first == sorted(set(first))
    copies = [p for p in second if p[1] == "z-copy"]
    assert sorted(p for p in second if p[1] != "z-copy") == first
    assert copies == [(n, "z-copy", d) for n, c, d in first if c == "c00"]


def test_lookup_batches_each_pair_once_however_small_the_batch() -> None:
    rng = np.random.default_rng(11)
    indexed = rng.integers(0, 3, size=(60, 5), dtype=np.uint64)  # crowded buckets
    queries = rng.integers(0, 3, size=(25, 5), dtype=np.uint64)
    expected = sorted(
        (q, r) for q in range(25) for r in range(60) if (queries[q] == indexed[r]).any()
    )
    for batch in (1, 7, 100, 10**6):
        got: list[tuple[int, int]] = []
        for rows, found in lookup_batches(queries, indexed, batch):
            assert rows.size <= batch
            got += zip(rows.tolist(), found.tolist(), strict=True)
        assert sorted(got) == expected and len(got) == len(expected)
    assert list(lookup_batches(queries[:0], indexed)) == []
    assert list(lookup_batches(queries, indexed[:0])) == []


def test_against_the_simhash_vote_reaches_the_corpus(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The corpus is fingerprinted with NEW's options: ``--vote set`` too (it was read with
    the default vote, so a text of repeated words missed its own copy)."""
    text = " ".join(["alpha beta gamma"] * 30 + [f"w{i}" for i in range(16)])
    new_path = write_jsonl(tmp_path / "n.jsonl", [{"id": "n", "text": text}])
    corpus_path = write_jsonl(tmp_path / "c.jsonl", [{"id": "c", "text": text}])
    argv = (str(new_path), "--against", str(corpus_path), "--out", str(tmp_path / "o"))
    for vote in ("set", "multiset"):
        code, stdout, _ = run_cli(capsys, *argv, "--vote", vote)
        assert (code, stdout) == (0, "n\tc\t0\n")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--threshold", "0"], "--threshold: must be in (0, 1], got 0"),
        (["--k", "3"], "--k is a SimHash option: --method minhash takes --threshold"),
        (["--permutations", "0"], "--permutations: must be 1 or more, got 0"),
    ],
)
def test_bad_options_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], message: str
) -> None:
    new, corpus = planted(1)
    new_path = write_jsonl(tmp_path / "new.jsonl", new[:3])
    corpus_path = write_jsonl(tmp_path / "corpus.jsonl", corpus[:3])
    with pytest.raises(SystemExit) as exit_info:
        code = main(
            ["dedup", str(new_path), "--against", str(corpus_path), "--method", "minhash",
             "--out", str(tmp_path / "o"), *argv]
        )  # fmt: skip
        raise SystemExit(code)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
