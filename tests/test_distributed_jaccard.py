"""The Jaccard mode on Dask (``dedup --method minhash --engine dask``,
permindex.distributed.jaccard) on a real two-process cluster: the same pairs, Jaccard values,
clusters, keep/drop and report files as the local engine; the join against the local
self-join with hot band buckets split; a worker killed mid-join; ``--against`` against the
local engine and brute force; bad options refused."""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("dask.dataframe")
pd = pytest.importorskip("pandas")
pytest.importorskip("pyarrow")

from oracles import jaccard, shingle_strings  # noqa: E402

import permindex.distributed.jaccard as distributed_jaccard  # noqa: E402
from permindex.cli import main  # noqa: E402
from permindex.distributed.jaccard import (  # noqa: E402
    JaccardPart,
    Selection,
    band_rows,
    jaccard_pairs,
    shared_memberships,
)
from permindex.errors import EXIT_CODES  # noqa: E402
from permindex.near.jaccard import ShingleSets, jaccard_text, self_join  # noqa: E402
from permindex.near.minhash import band_keys, choose_bands, signatures  # noqa: E402
from permindex.text.fingerprint import shingle_hashes  # noqa: E402

USAGE = EXIT_CODES["usage"]
SHAPE = choose_bands(0.8, 128)


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": ":0"},
        # a worker started again after the kill below imports these before its first task:
        # two of its threads importing dask.dataframe at once failed once ("partially
        # initialized module")
        preload=["dask.dataframe", "permindex.distributed.jaccard"],
    ) as local:
        yield local


@pytest.fixture(scope="module")
def client(cluster: Any) -> Iterator[Any]:
    with distributed.Client(cluster) as connected:
        yield connected


# ----------------------------------------------------------------------------- planted data


def planted_texts(seed: int = 5) -> list[tuple[str, str]]:
    """(key, text) documents: one template held by 1,000 documents word for word; template
    families of edited copies; near-copy pairs; 300 pages sharing most of one long passage
    (J about 0.7 between any two: hot band buckets, few true pairs) with 20 near copies among
    them; unrelated pages; too-short texts; a repeated key. Shuffled."""
    rng = np.random.default_rng(seed)

    def words(n: int) -> list[str]:
        return [f"w{x}" for x in rng.integers(0, 50_000, n).tolist()]

    def edited(template: list[str], edits: int) -> str:
        copy = list(template)
        for _ in range(edits):
            at = int(rng.integers(0, len(copy)))
            kind = int(rng.integers(0, 3))
            if kind == 0:
                copy[at] = f"e{int(rng.integers(0, 10**9))}"
            elif kind == 1:
                copy.insert(at, f"e{int(rng.integers(0, 10**9))}")
            else:
                del copy[at]
        return " ".join(copy)

    docs: list[tuple[str, str]] = []
    same = " ".join(words(120))
    docs += [(f"same/{i:04d}", same) for i in range(1_000)]
    for family in range(12):
        template = words(int(rng.integers(80, 200)))
        docs += [
            (f"family{family:02d}/{i:03d}", edited(template, int(rng.integers(0, 5))))
            for i in range(int(rng.integers(3, 40)))
        ]
    for pair in range(60):
        text = words(int(rng.integers(60, 150)))
        docs.append((f"pair{pair:02d}/a", " ".join(text)))
        docs.append((f"pair{pair:02d}/b", edited(text, int(rng.integers(1, 8)))))
    passage = words(420)
    hot = []
    for i in range(300):
        own = words(35)
        cut = int(rng.integers(0, 35))
        hot.append(own[:cut] + passage + own[cut:])
        docs.append((f"hot/{i:03d}", " ".join(hot[-1])))
    for i in range(20):
        docs.append((f"hot/copy{i:02d}", edited(hot[i * 7], 2)))
    docs += [(f"other/{i:04d}", " ".join(words(int(rng.integers(20, 300))))) for i in range(400)]
    docs += [("short/1", "two words"), ("short/2", ""), ("other/0001", " ".join(words(50)))]
    order = rng.permutation(len(docs))
    return [docs[i] for i in order.tolist()]


def write_jsonl(path: Path, docs: list[tuple[str, str]]) -> Path:
    with open(path, "w", encoding="utf-8") as out:
        out.writelines(json.dumps({"id": k, "text": t}) + "\n" for k, t in docs)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


REPORT_FILES = (
    "pairs.tsv",
    "clusters.tsv",
    "exact_duplicates.tsv",
    "keep_drop.tsv",
    "drop.txt",
    "flags.tsv",
    "too_short.tsv",
)


@pytest.mark.parametrize("keep", ["first", "longest"])
def test_cli_dask_equals_local_and_exact_jaccard(
    capsys: pytest.CaptureFixture[str], cluster: Any, tmp_path: Path, keep: str
) -> None:
    docs = planted_texts()
    source = write_jsonl(tmp_path / "in.jsonl", docs)
    common = ["--method", "minhash", "--keep", keep, "--no-progress"]
    code, local_out, err = run(
        capsys, "dedup", str(source), *common, "--jobs", "1", "--out", str(tmp_path / "l")
    )
    assert code == 0, err
    code, dask_out, err = run(
        capsys,
        "dedup",
        str(source),
        *common,
        "--engine",
        "dask",
        "--scheduler",
        cluster.scheduler_address,
        "--out",
        str(tmp_path / "d"),
    )
    assert code == 0, err
    assert dask_out == local_out
    for name in REPORT_FILES:
        assert (tmp_path / "d" / name).read_bytes() == (tmp_path / "l" / name).read_bytes(), name
    local = json.loads((tmp_path / "l" / "summary.json").read_text())
    remote = json.loads((tmp_path / "d" / "summary.json").read_text())
    for summary in (local, remote):
        for field in ("seconds", "cpu_seconds", "jobs"):
            summary.pop(field)
    assert remote == local
    # every pair printed has the exact Jaccard of its shingles (strings: an independent
    # count), >= 0.8, to 4 decimals (the last text of a key)
    texts = dict(docs)
    lines = [line.split("\t") for line in dask_out.splitlines()]
    assert len(lines) > 1_000 * 999 // 2  # the 1,000 copies' pairs at least
    sets = {key: set(shingle_strings(text)) for key, text in texts.items()}
    printed = {}
    for a, b, value in lines:
        if a.startswith("same/") and b.startswith("same/"):  # one text: J = 1
            assert value == "1.0000"
            continue
        assert jaccard(sets[a], sets[b]) >= 0.8
        assert value == exact_jaccard(sets[a], sets[b])
        printed[(a, b)] = value
    groups = (tmp_path / "d" / "exact_duplicates.tsv").read_text().splitlines()
    assert sum(1 for g in groups if "same/" in g) == 1_000
    # recall against every pair inside each planted group with J >= 0.8 (pages of different
    # groups draw their words at random: they share almost no shingle)
    if keep == "first":
        planted: dict[str, list[str]] = {}
        for key in texts:
            if not key.startswith(("same/", "other/", "short/")):
                planted.setdefault(key.split("/")[0], []).append(key)
        truth = {
            (a, b): exact_jaccard(sets[a], sets[b])
            for keys in planted.values()
            for a, b in itertools.combinations(sorted(keys), 2)
            if jaccard(sets[a], sets[b]) >= 0.8
        }
        assert len(truth) > 300
        found = sum(printed.get(pair) == value for pair, value in truth.items())
        assert found >= 0.95 * len(truth)


@pytest.mark.parametrize("method", ["minhash", "simhash"])
def test_cli_worker_killed_mid_run_same_report_as_local(
    capsys: pytest.CaptureFixture[str],
    cluster: Any,
    client: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
) -> None:
    """A worker killed (SIGKILL) while the cluster works: the run still gives the local
    engine's report, the 1,000-copy template one exact group, the hot bucket cut (the lines
    it scattered to the lost worker cannot be made again there: the run starts again, or
    the join recomputes what it lost). The SimHash mode too."""
    docs = planted_texts(seed=6)
    source = write_jsonl(tmp_path / "in.jsonl", docs)
    common = ["--method", method, "--no-progress"]
    code, local_out, err = run(
        capsys, "dedup", str(source), *common, "--jobs", "1", "--out", str(tmp_path / "l")
    )
    assert code == 0, err
    # the 300 pages' buckets are cut, their component (about 1 MB) sent bucket by bucket
    monkeypatch.setattr(distributed_jaccard, "HOT_BAND_BUCKET", 32)
    monkeypatch.setattr(distributed_jaccard, "PARTITION_BYTES", 400_000)
    pids = client.run(os.getpid)
    killed: list[int] = []

    def kill_when_busy() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(client.processing().values()):
                victim = next(iter(pids.values()))
                os.kill(victim, signal.SIGKILL)  # the nanny starts a new worker
                killed.append(victim)
                return
            time.sleep(0.01)

    import threading

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    code, dask_out, err = run(
        capsys, "dedup", str(source), *common, "--engine", "dask",
        "--scheduler", cluster.scheduler_address, "--out", str(tmp_path / "d"),
    )  # fmt: skip
    killer.join()
    assert killed
    assert code == 0, err
    assert dask_out == local_out
    for name in REPORT_FILES:
        assert (tmp_path / "d" / name).read_bytes() == (tmp_path / "l" / name).read_bytes(), name
    groups = (tmp_path / "d" / "exact_duplicates.tsv").read_text().splitlines()
    assert sum(1 for g in groups if "same/" in g) == 1_000
    client.wait_for_workers(2, timeout=180)  # a loaded machine: slow restarts


# ----------------------------------------------------------------------------- the join


def sets_of(texts: list[str]) -> ShingleSets:
    return ShingleSets.of([np.array(shingle_hashes(t), dtype=np.uint64) for t in texts])


def make_part(values: np.ndarray, offsets: np.ndarray) -> JaccardPart:
    sets = ShingleSets(values, offsets)
    return JaccardPart(sets, band_keys(signatures(sets.values, sets.offsets, 128), SHAPE))


def parts_on(client: Any, sets: ShingleSets, cuts: list[int]) -> tuple[list[Any], list[Selection]]:
    """The sets cut into parts at ``cuts``, each made by a task of the cluster from data in
    the graph (so that a lost worker's part is made again)."""
    parts, selections = [], []
    bounds = [0, *cuts, len(sets)]
    for lo, hi in itertools.pairwise(bounds):
        sub = sets.take(np.arange(lo, hi, dtype=np.int64))
        parts.append(client.submit(make_part, sub.values, sub.offsets, pure=False))
        local = np.arange(hi - lo, dtype=np.int64)
        selections.append(Selection(local, local + lo, sub.sizes))
    return parts, selections


def local_join(sets: ShingleSets) -> tuple[set[tuple[int, int, int]], int, int]:
    keys = band_keys(signatures(sets.values, sets.offsets, 128), SHAPE)
    (u, v, d), candidates, merged = self_join(sets, np.arange(len(sets), dtype=np.int64), keys, 0.8)
    return set(zip(u.tolist(), v.tolist(), d.tolist(), strict=True)), candidates, merged


@pytest.fixture(scope="module")
def planted_sets() -> ShingleSets:
    docs = [text for key, text in planted_texts(seed=8) if not key.startswith("same/")]
    return sets_of([t for t in docs if len(t.split()) >= 3])


def test_hot_band_buckets_split_same_pairs_and_counts(
    client: Any, planted_sets: ShingleSets
) -> None:
    sets = planted_sets
    expected, candidates, merged = local_join(sets)
    assert len(expected) > 100
    # the planted passage makes band buckets of more than 32 of the 300 pages: hot below
    keys = band_keys(signatures(sets.values, sets.offsets, 128), SHAPE)
    rows = np.arange(len(sets), dtype=np.int64)
    part = JaccardPart(sets, keys)
    members = shared_memberships(band_rows(part, rows, rows), 32)
    assert int(members["blocks"].max()) >= 3
    parts, selections = parts_on(client, sets, [100, 101, 700])
    # components of the bucket graph up to 32 MiB travel whole (all here); up to 200 kB: the
    # 300 pages' component (about 1 MB) goes bucket by bucket, cut into blocks, the others
    # whole; none: every bucket by itself
    for hot, size in ((10_000, None), (32, None), (32, 200_000), (32, 0), (10_000, 0)):
        got = jaccard_pairs(
            client, parts, selections, 0.8, SHAPE.bands, hot_threshold=hot, component_bytes=size
        )
        found = set(
            zip(
                got.pairs.a.tolist(), got.pairs.b.tolist(), got.pairs.distance.tolist(), strict=True
            )
        )
        assert len(found) == got.pairs.a.size  # each pair once
        assert found == expected
        assert (got.candidates, got.merged) == (candidates, merged)


def test_worker_killed_mid_join_result_still_exact(
    client: Any, cluster: Any, planted_sets: ShingleSets
) -> None:
    sets = planted_sets
    expected, _, _ = local_join(sets)
    parts, selections = parts_on(client, sets, [200, 400, 600, 800])
    pids = client.run(os.getpid)
    killed: list[int] = []

    def kill_when_busy() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if any(client.processing().values()):
                victim = next(iter(pids.values()))
                os.kill(victim, signal.SIGKILL)  # the nanny starts a new worker
                killed.append(victim)
                return
            time.sleep(0.02)

    import threading

    killer = threading.Thread(target=kill_when_busy)
    killer.start()
    got = jaccard_pairs(
        client, parts, selections, 0.8, SHAPE.bands, hot_threshold=32, component_bytes=200_000
    )
    killer.join()
    assert killed
    found = set(
        zip(got.pairs.a.tolist(), got.pairs.b.tolist(), got.pairs.distance.tolist(), strict=True)
    )
    assert found == expected
    client.wait_for_workers(2, timeout=180)  # a loaded machine: slow restarts


# ----------------------------------------------------------------------------- --against


def against_texts(seed: int = 11) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(new, corpus): corpus bases with edited copies on both sides at a spread of Jaccard
    similarities; one text held by 200 new keys (one set, expanded to each key) and by a
    corpus page; a template edited 150 times in the corpus and 30 times in the new batch (hot
    band buckets holding sets of both sides); pairs within the new batch; unrelated pages on
    both sides; a too-short text; shuffled."""
    rng = np.random.default_rng(seed)

    def words(n: int) -> list[str]:
        return [f"w{x}" for x in rng.integers(0, 5_000, n).tolist()]

    def edited(text: list[str], edits: int) -> str:
        out = list(text)
        for _ in range(edits):
            at = int(rng.integers(0, len(out)))
            kind = int(rng.integers(0, 3))
            if kind == 0:
                out[at] = f"x{int(rng.integers(0, 10**9))}"
            elif kind == 1:
                out.insert(at, f"y{int(rng.integers(0, 10**9))}")
            else:
                del out[at]
        return " ".join(out)

    new: list[tuple[str, str]] = []
    corpus: list[tuple[str, str]] = []
    for base in range(25):
        text = words(int(rng.integers(60, 250)))
        corpus.append((f"c{base:02d}", " ".join(text)))
        corpus += [(f"c{base:02d}/{i}", edited(text, i * 3)) for i in range(1, 3)]
        new += [(f"n{base:02d}/{i}", edited(text, int(rng.integers(0, 14)))) for i in range(3)]
    same = " ".join(words(150))
    new += [(f"same/{i:03d}", same) for i in range(200)]
    corpus += [("c-same", same), ("c-same/edited", edited(same.split(), 3))]
    template = words(200)
    corpus += [(f"t{i:03d}", edited(template, int(rng.integers(1, 6)))) for i in range(150)]
    new += [(f"n-template/{i:02d}", edited(template, int(rng.integers(1, 6)))) for i in range(30)]
    inner = words(90)
    new += [("n-inner/a", " ".join(inner)), ("n-inner/b", edited(inner, 2))]
    new += [(f"n-other/{i}", " ".join(words(100))) for i in range(30)]
    corpus += [(f"c-other/{i}", " ".join(words(100))) for i in range(60)]
    new.append(("n-short", "two words"))
    shuffled = []
    for side in (new, corpus):
        order = rng.permutation(len(side))
        shuffled.append([side[i] for i in order.tolist()])
    return shuffled[0], shuffled[1]


def exact_jaccard(a: set[str], b: set[str]) -> str:
    """The Jaccard of two sets of shingle strings to 4 decimals, as the mode prints it:
    distance round((1 - J) * 10^4), half up, counted with integers."""
    inter, union = len(a & b), len(a | b)
    return jaccard_text(((union - inter) * 2 * 10_000 + union) // (2 * union))


def test_cli_against_dask_equals_local_and_brute_force(
    capsys: pytest.CaptureFixture[str],
    cluster: Any,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    new, corpus = against_texts()
    new_path = write_jsonl(tmp_path / "new.jsonl", new)
    corpus_path = write_jsonl(tmp_path / "corpus.jsonl", corpus)
    common = ["--method", "minhash", "--against", str(corpus_path), "--no-progress"]
    code, local_out, local_err = run(
        capsys, "dedup", str(new_path), *common, "--jobs", "1", "--out", str(tmp_path / "l")
    )
    assert code == 0, local_err
    # buckets above 24 sets are cut into blocks: the template's (150 corpus and 30 new
    # sets), whose component (about 300 kB) goes bucket by bucket in partitions of 100 kB
    monkeypatch.setattr(distributed_jaccard, "HOT_BAND_BUCKET", 24)
    monkeypatch.setattr(distributed_jaccard, "PARTITION_BYTES", 100_000)
    code, dask_out, dask_err = run(
        capsys, "dedup", str(new_path), *common, "--engine", "dask",
        "--scheduler", cluster.scheduler_address, "--out", str(tmp_path / "d"),
    )  # fmt: skip
    assert code == 0, dask_err
    assert dask_out == local_out
    said = [line for line in dask_err.splitlines() if line.endswith(f"with {corpus_path}")]
    assert said and said == [x for x in local_err.splitlines() if x.endswith(f"with {corpus_path}")]
    for name in (*REPORT_FILES, "new_unmatched.tsv"):
        assert (tmp_path / "d" / name).read_bytes() == (tmp_path / "l" / name).read_bytes(), name
    # against brute force: every new x corpus pair's exact Jaccard from shingle strings
    sets = {key: set(shingle_strings(text)) for key, text in new + corpus}
    above = {}
    for n, _ in new:
        for c, _ in corpus:
            if sets[n] and sets[c] and jaccard(sets[n], sets[c]) >= 0.8:
                above[(n, c)] = exact_jaccard(sets[n], sets[c])
    lines = [line.split("\t") for line in dask_out.splitlines()]
    printed = {(n, c): value for n, c, value in lines}
    assert len(printed) == len(lines) and [(n, c) for n, c, _ in lines] == sorted(printed)
    for pair, value in printed.items():  # none below 0.8, each value exact
        assert pair in above and value == above[pair], pair
    assert len(above) > 400 and len(printed) >= 0.95 * len(above)
    assert all((f"same/{i:03d}", "c-same") in printed for i in range(200))
    template = [p for p in above if p[0].startswith("n-template/")]
    assert len(template) > 1_000 and sum(p in printed for p in template) >= 0.95 * len(template)
    assert not any(c.startswith("n") for _, c in printed)  # new-vs-new: the batch's report
    assert "n-inner/a\tn-inner/b" in (tmp_path / "d" / "pairs.tsv").read_text()
    matched = {n for n, _ in printed}
    unmatched = (tmp_path / "d" / "new_unmatched.tsv").read_text().splitlines()
    expected = sorted(key for key, _ in new if key not in matched and key != "n-short")
    assert [line.split("\t")[0] for line in unmatched] == expected


def test_cross_join_hot_buckets_split_same_pairs(client: Any) -> None:
    """The cross join alone (jaccard_pairs with a boundary) against every new x corpus
    candidate verified here, hot buckets cut into blocks of 4 down to no cut."""
    new, corpus = against_texts(seed=12)
    texts = [t for _, t in new if len(t.split()) >= 3]
    new_sets = sets_of(sorted(set(texts)))
    corpus_sets = sets_of([t for _, t in corpus])
    both = ShingleSets.concat([new_sets, corpus_sets])
    keys = band_keys(signatures(both.values, both.offsets, 128), SHAPE)
    boundary = len(new_sets)
    expected = set()
    for i in range(boundary):
        agree = np.flatnonzero((keys[boundary:] == keys[i]).any(axis=1)) + boundary
        for j in agree.tolist():
            a, b = set(both.set(i).tolist()), set(both.set(j).tolist())
            inter, union = len(a & b), len(a | b)
            if inter * 10 >= 8 * union:
                expected.add((i, j, ((union - inter) * 2 * 10_000 + union) // (2 * union)))
    assert len(expected) > 400
    rows = np.arange(len(both), dtype=np.int64)
    members = shared_memberships(band_rows(JaccardPart(both, keys), rows, rows), 8, boundary)
    assert int(members["blocks"].max()) >= 3  # the template's buckets: cut on both sides
    assert int(members["block"].max()) >= 3
    parts, selections = parts_on(client, both, [boundary // 2, boundary, boundary + 100])
    for hot, size in ((10_000, None), (8, 0), (8, 50_000), (10_000, 0)):
        got = jaccard_pairs(
            client, parts, selections, 0.8, SHAPE.bands,
            hot_threshold=hot, component_bytes=size, boundary=boundary,
        )  # fmt: skip
        found = set(
            zip(
                got.pairs.a.tolist(), got.pairs.b.tolist(), got.pairs.distance.tolist(), strict=True
            )
        )
        assert len(found) == got.pairs.a.size  # each pair once
        assert found == expected


# ----------------------------------------------------------------------------- bad options


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--k", "3"], "--k is a SimHash option"),
        (["--threshold", "0"], "must be in (0, 1]"),
        (["--weights", "idf"], "--weights"),
        (["--jobs", "2"], "--jobs"),
    ],
)
def test_cli_bad_options_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], words: str
) -> None:
    source = write_jsonl(tmp_path / "in.jsonl", [("a", "one two three four")])
    code, out, err = run(
        capsys,
        "dedup",
        str(source),
        "--method",
        "minhash",
        "--engine",
        "dask",
        "--out",
        str(tmp_path / "o"),
        *argv,
    )
    assert (code, out) == (USAGE, "")
    assert words in err and "Traceback" not in err
    assert not (tmp_path / "o").exists()
