"""The Jaccard mode on Dask (``dedup --method minhash --engine dask``,
permindex.distributed.jaccard) on a real two-process cluster: the same pairs, Jaccard values,
clusters, keep/drop and report files as the local engine; the join against the local
self-join with hot band buckets split; a worker killed mid-join; bad options refused."""

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

from permindex.cli import main  # noqa: E402
from permindex.distributed.jaccard import (  # noqa: E402
    JaccardPart,
    Selection,
    band_rows,
    jaccard_pairs,
    shared_memberships,
)
from permindex.errors import EXIT_CODES  # noqa: E402
from permindex.near.jaccard import ShingleSets, self_join  # noqa: E402
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
    lines = dask_out.splitlines()
    assert len(lines) > 1_000 * 999 // 2  # the 1,000 copies' pairs at least
    sets = {key: set(shingle_strings(text)) for key, text in texts.items()}
    for line in lines[::37]:
        a, b, value = line.split("\t")
        inter, union = len(sets[a] & sets[b]), len(sets[a] | sets[b])
        assert jaccard(sets[a], sets[b]) >= 0.8
        distance = ((union - inter) * 2 * 10_000 + union) // (2 * union)  # rounded half up
        assert value == f"{(10_000 - distance) // 10_000}.{(10_000 - distance) % 10_000:04d}"
    groups = (tmp_path / "d" / "exact_duplicates.tsv").read_text().splitlines()
    assert sum(1 for g in groups if "same/" in g) == 1_000


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
    for hot in (10_000, 32):
        got = jaccard_pairs(client, parts, selections, 0.8, SHAPE.bands, hot_threshold=hot)
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
    got = jaccard_pairs(client, parts, selections, 0.8, SHAPE.bands, hot_threshold=32)
    killer.join()
    assert killed
    found = set(
        zip(got.pairs.a.tolist(), got.pairs.b.tolist(), got.pairs.distance.tolist(), strict=True)
    )
    assert found == expected
    client.wait_for_workers(2, timeout=60)


# ----------------------------------------------------------------------------- bad options


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--against", "corpus.jsonl"], "--against with --method minhash"),
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
