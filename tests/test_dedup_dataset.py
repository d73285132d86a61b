"""permindex.dedup_dataset on a datasets.Dataset, a pandas DataFrame and a pyarrow Table (and a
Dataset read from a local Parquet file): against brute force (every pair's
Hamming distance, components by a plain union-find, the keep rules written out) and against
``permindex dedup`` on a JSONL file of the same ids and texts."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("pandas")
pytest.importorskip("pyarrow")
pytest.importorskip("datasets")

import datasets
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from oracles import brute_force_pairs

import permindex
from permindex import DatasetDedup, InvalidArgumentError, dedup_dataset, simhash
from permindex.index.join.clusters import KeepRule

KEEP_RULES: tuple[KeepRule, ...] = ("first", "longest", "smallest-key")


def _corpus(seed: int = 15, n: int = 240) -> tuple[list[str], list[str]]:
    """Texts with planted near-duplicates (an earlier text with 0 to 2 words replaced or one
    appended), exact copies, chains, and texts too short to fingerprint; ids in shuffled order
    so that id order differs from row order."""
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(3000)]
    texts: list[str] = []
    for _ in range(n):
        roll = rng.random()
        if texts and roll < 0.35:
            words = rng.choice(texts).split()
            for _ in range(rng.randrange(3)):
                if words:
                    words[rng.randrange(len(words))] = rng.choice(vocabulary)
            if rng.random() < 0.3:
                words.append(rng.choice(vocabulary))
            texts.append(" ".join(words))
        elif roll < 0.4:
            texts.append(" ".join(rng.choice(vocabulary) for _ in range(rng.randrange(3))))
        else:
            texts.append(" ".join(rng.choice(vocabulary) for _ in range(rng.randrange(30, 120))))
    ids = [f"doc-{i:04d}" for i in range(n)]
    rng.shuffle(ids)
    return ids, texts


def _brute_force(
    ids: list[str], texts: list[str], k: int, keep: str
) -> tuple[list[bool], list[set[int]]]:
    """(keep per row, clusters as sets of rows) from every pair's distance."""
    fps = [simhash(t) for t in texts]
    rows = [i for i, fp in enumerate(fps) if fp is not None]
    values = np.array([fps[i] for i in rows], dtype=np.uint64)
    parent = list(range(len(texts)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    a, b = brute_force_pairs(values, k)[:2]
    for i, j in zip(a.tolist(), b.tolist(), strict=True):
        parent[root(rows[i])] = root(rows[j])
    groups: dict[int, set[int]] = {}
    for i in rows:
        groups.setdefault(root(i), set()).add(i)
    clusters = [g for g in groups.values() if len(g) > 1]
    kept = [True] * len(texts)
    rule: dict[str, Callable[[int], tuple[object, ...]]] = {
        "first": lambda i: (i,),
        "longest": lambda i: (-len(texts[i]), i),
        "smallest-key": lambda i: (ids[i],),
    }
    for members in clusters:
        best = min(members, key=rule[keep])
        for i in members:
            kept[i] = i == best
    return kept, clusters


def _check(result: DatasetDedup, ids: list[str], texts: list[str], k: int, keep: str) -> None:
    expected_keep, clusters = _brute_force(ids, texts, k, keep)
    assert result.keep.dtype == np.bool_ and result.keep.shape == (len(texts),)
    assert result.cluster.dtype == np.int64 and result.cluster.shape == (len(texts),)
    assert result.keep.tolist() == expected_keep
    found: dict[int, set[int]] = {}
    for row, number in enumerate(result.cluster.tolist()):
        if number >= 0:
            found.setdefault(number, set()).add(row)
    assert sorted(map(sorted, found.values())) == sorted(map(sorted, clusters))
    assert sorted(found) == list(range(result.clusters))
    for members in clusters:  # the kept row of each cluster
        (kept,) = [i for i in members if expected_keep[i]]
        assert {int(result.kept_row[i]) for i in members} == {kept}
    assert (result.kept_row[result.cluster < 0] == -1).all()
    short = [simhash(t) is None for t in texts]
    assert (~result.has_fingerprint).tolist() == short
    assert all(result.keep[i] and result.cluster[i] == -1 for i, s in enumerate(short) if s)


def test_the_corpus_has_clusters_chains_and_short_texts() -> None:
    ids, texts = _corpus()
    _, clusters = _brute_force(ids, texts, 3, "first")
    assert len(clusters) >= 10 and max(map(len, clusters)) >= 3
    assert sum(simhash(t) is None for t in texts) >= 5


@pytest.mark.parametrize("keep", KEEP_RULES)
@pytest.mark.parametrize("kind", ["dataset", "iterable", "pandas", "arrow", "mapping"])
def test_against_brute_force(kind: str, keep: KeepRule) -> None:
    ids, texts = _corpus()
    columns = {"id": ids, "text": texts}
    data: object = {
        "dataset": lambda: datasets.Dataset.from_dict(columns),  # type: ignore[no-untyped-call]
        "iterable": lambda: datasets.Dataset.from_dict(columns).to_iterable_dataset(),
        "pandas": lambda: pd.DataFrame(columns),
        "arrow": lambda: pa.table(columns),
        "mapping": lambda: columns,
    }[kind]()
    result = dedup_dataset(data, id_column="id", keep=keep)
    _check(result, ids, texts, 3, keep)


@pytest.mark.parametrize("k", [0, 1, 5])
def test_other_k_without_ids(k: int) -> None:
    """No id column: the row positions are the ids (smallest-key is then first)."""
    _, texts = _corpus(seed=2)
    result = dedup_dataset(pd.DataFrame({"body": texts}), text_column="body", k=k)
    _check(result, [f"{i:04d}" for i in range(len(texts))], texts, k, "first")
    assert result.k == k and result.keep_rule == "first"


def test_a_shuffled_dataset_in_its_own_row_order() -> None:
    """After select/shuffle a Dataset reads through its indices: the rows are its rows."""
    ids, texts = _corpus(seed=3)
    shuffled = datasets.Dataset.from_dict({"id": ids, "text": texts}).shuffle(seed=1)
    result = dedup_dataset(shuffled, id_column="id")
    _check(result, list(shuffled["id"]), list(shuffled["text"]), 3, "first")


def test_integer_ids_in_their_numeric_order() -> None:
    texts = ["one two three four five six"] * 3
    result = dedup_dataset(pd.DataFrame({"id": [10, 9, 100], "text": texts}), id_column="id",
                           keep="smallest-key")  # fmt: skip
    assert result.keep.tolist() == [False, True, False]  # 9, not "10" < "100" < "9"


@pytest.mark.parametrize("keep", KEEP_RULES)
def test_the_same_decision_as_permindex_dedup(tmp_path: Path, keep: KeepRule) -> None:
    ids, texts = _corpus(seed=4)
    source = tmp_path / "docs.jsonl"
    source.write_text(
        "".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in zip(ids, texts, strict=True)),
        encoding="utf-8",
    )
    out = tmp_path / "report"
    argv = [sys.executable, "-m", "permindex", "dedup", str(source), "--out", str(out)]
    subprocess.run([*argv, "--keep", keep, "--jobs", "1"], check=True, capture_output=True)
    result = dedup_dataset(pa.table({"id": ids, "text": texts}), id_column="id", keep=keep)
    position = {key: i for i, key in enumerate(ids)}
    decided: dict[str, tuple[int, bool, str]] = {}
    for line in (out / "keep_drop.tsv").read_text(encoding="utf-8").splitlines():
        cluster, verdict, key, kept_key = line.split("\t")
        decided[key] = (int(cluster) - 1, verdict == "keep", kept_key)
    assert len(decided) == int((result.cluster >= 0).sum())
    for key, (number, kept, kept_key) in decided.items():
        i = position[key]
        assert (int(result.cluster[i]), bool(result.keep[i])) == (number, kept)
        assert ids[int(result.kept_row[i])] == kept_key
    dropped = (out / "drop.txt").read_text(encoding="utf-8").split()
    assert sorted(dropped) == sorted(ids[i] for i in np.flatnonzero(~result.keep).tolist())


def test_a_dataset_read_from_a_parquet_file(tmp_path: Path) -> None:
    ids, texts = _corpus(seed=5)
    path = tmp_path / "pages.parquet"
    pq.write_table(pa.table({"url": ids, "text": texts}), path)
    data = datasets.Dataset.from_parquet(str(path), cache_dir=str(tmp_path / "cache"))
    assert isinstance(data, datasets.Dataset)
    found = permindex.dedup_dataset(data, text_column="text", id_column="url", k=3, keep="first")
    _check(found, ids, texts, 3, "first")
    unique = data.select(found.keep.nonzero()[0])
    assert len(unique) == len(data) - found.dropped and found.dropped > 0
    kept = [ids[i] for i in np.flatnonzero(found.keep).tolist()]
    assert list(unique["url"]) == kept
    table = pq.read_table(path)
    assert table.filter(found.keep).column("url").to_pylist() == kept
    assert table.to_pandas()[found.keep]["url"].tolist() == kept


def test_bad_input_is_refused_clearly() -> None:
    good = {"id": ["a", "b"], "text": ["x y z w", "x y z w"]}
    with pytest.raises(InvalidArgumentError, match=r"'body' is not a column.*id, text"):
        dedup_dataset(good, text_column="body")
    with pytest.raises(InvalidArgumentError, match="row 1: the text is missing"):
        dedup_dataset(pd.DataFrame({"text": ["x y z", None]}))
    with pytest.raises(InvalidArgumentError, match="row 0: the text is a int, not str"):
        dedup_dataset({"text": [3]})
    with pytest.raises(InvalidArgumentError, match="'a' is in rows 0 and 2; ids must be distinct"):
        dedup_dataset({"id": ["a", "b", "a"], "text": ["p q r"] * 3}, id_column="id")
    with pytest.raises(InvalidArgumentError, match="cannot be ordered"):
        dedup_dataset({"id": ["a", 1], "text": ["p q r"] * 2}, id_column="id")
    with pytest.raises(InvalidArgumentError, match=r"k must be an integer in 0\.\.8"):
        dedup_dataset(good, k=9)
    with pytest.raises(InvalidArgumentError, match="keep must be one of"):
        dedup_dataset(good, keep="last")  # type: ignore[arg-type]
    splits = datasets.DatasetDict({"train": datasets.Dataset.from_dict(good)})
    with pytest.raises(InvalidArgumentError, match=r"splits \(train\).*data\['train'\]"):
        dedup_dataset(splits)
    with pytest.raises(InvalidArgumentError, match="not int"):
        dedup_dataset(5)


def test_an_empty_table() -> None:
    result = dedup_dataset({"text": []})
    assert result.keep.shape == (0,) and result.clusters == 0 and result.dropped == 0


def test_the_libstdcxx_corpus() -> None:
    """The shared corpus as a DataFrame: its clusters are the connected components of the
    corpus's exact pairs within 3 bits (the file beside it), each keeping its first row."""
    corpora = Path(__file__).resolve().parent.parent.parent / "shared" / "corpora"
    path = corpora / "libstdc++-12-doc.jsonl.gz"
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path} (expected <repo>/../shared/corpora)")
    frame = pd.read_json(path, lines=True, dtype={"id": str, "text": str})
    found = dedup_dataset(frame, id_column="id")
    ids = frame["id"].tolist()
    position = {key: i for i, key in enumerate(ids)}
    parent = list(range(len(ids)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    expected = (corpora / "libstdc++-12-doc.pairs_le3.tsv").read_text(encoding="utf-8")
    linked: set[int] = set()
    for line in expected.splitlines():
        a, b, _ = line.split("\t")
        parent[root(position[a])] = root(position[b])
        linked |= {position[a], position[b]}
    components: dict[int, list[int]] = {}
    for i in sorted(linked):
        components.setdefault(root(i), []).append(i)
    clusters = {frozenset(rows) for rows in components.values()}
    found_clusters: dict[int, set[int]] = {}
    for i, number in enumerate(found.cluster.tolist()):
        if number >= 0:
            found_clusters.setdefault(number, set()).add(i)
    assert {frozenset(rows) for rows in found_clusters.values()} == clusters
    assert found.clusters == len(clusters)
    assert found.dropped == sum(len(rows) - 1 for rows in clusters)
    for rows in clusters:  # keep="first": the first row of each cluster is kept
        assert [i for i in sorted(rows) if found.keep[i]] == [min(rows)]


def test_the_pipeline_helpers_are_public() -> None:
    helpers = "html_to_text format_fingerprint parse_fingerprint read_file_text simhash"
    for name in (*helpers.split(), "simhash_many", "hamming", "dedup_dataset", "DatasetDedup"):
        assert name in permindex.__all__ and getattr(permindex, name).__doc__
    assert permindex.html_to_text("<p>one <b>two</b></p><script>x</script><p>three</p>") == (
        "one two\nthree"
    )
    fp = permindex.simhash("the quick brown fox jumps")
    assert fp is not None
    assert permindex.parse_fingerprint(permindex.format_fingerprint(fp)) == fp
    assert permindex.format_fingerprint(0x7B) == "000000000000007b"
    with pytest.raises(InvalidArgumentError):
        permindex.format_fingerprint(-1)


def test_a_column_name_shared_by_two_columns_is_refused() -> None:
    pd = pytest.importorskip("pandas")
    text = "the quick brown fox jumps over the lazy dog number one again and again"
    frame = pd.DataFrame([[text, text]], columns=["text", "text"])
    with pytest.raises(permindex.InvalidArgumentError, match="names 2 columns"):
        permindex.dedup_dataset(frame, text_column="text")


@pytest.mark.parametrize("ids", [["a", "b"], ["a"]])
def test_columns_of_different_lengths_are_refused(ids: list[str]) -> None:
    text = "the quick brown fox jumps over the lazy dog number one again and again"
    texts = [text] * (3 if len(ids) == 2 else 2)
    with pytest.raises(permindex.InvalidArgumentError, match="one length"):
        permindex.dedup_dataset({"text": texts, "id": ids}, text_column="text", id_column="id")
