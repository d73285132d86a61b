"""The Jaccard peers benchmark's instruments (issue 42, figures): benchmarks/bench_jaccard.py's
brute force is every pair >= the threshold by Python sets, its recall and precision are the
counts', and each installed peer lists pairs of distinct rows whose estimate passed."""

from __future__ import annotations

import gzip
import importlib.util
import itertools
import json
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_jaccard", BENCHMARKS / "bench_jaccard.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def corpus(bench: ModuleType, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("jaccard") / "templated.jsonl.gz"
    bench.templated(path, pages=150, families=6, unrelated_share=0.2, edits=6, seed=3)
    return path


def _rows(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        return [json.loads(line) for line in lines]


def test_brute_force_is_every_pair_by_python_sets(bench: ModuleType, corpus: Path) -> None:
    pytest.importorskip("scipy")
    rows = _rows(corpus)
    sets = {row["id"]: set(bench.word_shingles(row["text"])) for row in rows}
    expected = set()
    for a, b in itertools.combinations(sorted(sets), 2):
        x, y = sets[a], sets[b]
        if len(x & y) >= 0.8 * len(x | y):
            expected.add((a, b))
    found, sharing = bench.brute_force_pairs(corpus, 0.8)
    assert found == expected
    assert len(expected) > 100  # the families make many pairs
    assert sharing >= len(found)
    assert bench.check_sample(corpus, found, set(), 0.8)["checked_brute_force_pairs"] > 0


def test_compare_counts(bench: ModuleType) -> None:
    truth = {("a", "b"), ("a", "c"), ("b", "c"), ("c", "d")}
    scored = bench.compare([["a", "b"], ["c", "d"], ["a", "d"]], truth)
    assert scored == {"pairs": 3, "recall": 0.5, "precision": 2 / 3}


@pytest.mark.parametrize("name", ["permindex", "rensa", "datasketch"])
def test_peer_lists_distinct_rows_with_high_similarity(
    bench: ModuleType, corpus: Path, name: str
) -> None:
    pytest.importorskip(name)
    texts = [row["text"] for row in _rows(corpus)]
    pairs = bench.peer_pairs(name, texts, 0.8)
    assert pairs and all(0 <= i < j < len(texts) for i, j in pairs)
    sets = [set(bench.word_shingles(t)) for t in texts]
    exact = [len(sets[i] & sets[j]) / len(sets[i] | sets[j]) for i, j in pairs]
    assert sum(e >= 0.7 for e in exact) >= 0.95 * len(exact)  # estimates near the truth
