"""The near-duplicate join on Dask (permindex.distributed) and ``dedup --engine dask`` /
``--against``, on a real two-process cluster, against the local engine and brute force."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from numpy.typing import NDArray

dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")
pd = pytest.importorskip("pandas")
pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from planted import EXACT_COPIES, HOT_MEMBERS, keys, planted  # noqa: E402

from permindex.cli import main  # noqa: E402
from permindex.distributed import near_duplicates  # noqa: E402
from permindex.distributed.components import components, gathered_labels  # noqa: E402
from permindex.distributed.join import JoinPlan, hot_buckets  # noqa: E402
from permindex.errors import EXIT_CODES  # noqa: E402
from permindex.index.join.clusters import NearDuplicates, pairs_within  # noqa: E402

USAGE = EXIT_CODES["usage"]
HOT = 1_000  # hot threshold in these tests: the 5,000-member prefix is split


@pytest.fixture(scope="session")
def cluster() -> Iterator[Any]:
    with distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        scheduler_kwargs={"dashboard_address": ":0"},  # its HTTP routes: not on 8787
    ) as local:
        yield local


@pytest.fixture(scope="session")
def client(cluster: Any) -> Iterator[Any]:
    with distributed.Client(cluster) as connected:
        yield connected


def frame_of(fps: NDArray[np.uint64], partitions: int = 4) -> Any:
    table = pd.DataFrame(
        {
            "row": np.arange(fps.size, dtype=np.int64),
            "key": keys(0, fps.size),
            "fingerprint": fps,
        }
    )
    return dd.from_pandas(table, npartitions=partitions)


def pair_set(a: Any, b: Any, d: Any) -> set[tuple[int, int, int]]:
    a, b = np.asarray(a), np.asarray(b)
    return set(
        zip(
            np.minimum(a, b).tolist(),
            np.maximum(a, b).tolist(),
            np.asarray(d).tolist(),
            strict=True,
        )
    )


def brute_pairs(fps: NDArray[np.uint64], k: int) -> set[tuple[int, int, int]]:
    """Every pair within k by comparing all of them (blocks of rows)."""
    found: set[tuple[int, int, int]] = set()
    for start in range(0, fps.size, 512):
        block = fps[start : start + 512]
        d = np.bitwise_count(block[:, None] ^ fps[None, :])
        i, j = np.nonzero(d <= k)
        i = i + start
        keep = i < j
        found.update(
            zip(
                i[keep].tolist(),
                j[keep].tolist(),
                d[i[keep] - start, j[keep]].tolist(),
                strict=True,
            )
        )
    return found


@pytest.fixture(scope="module")
def planted_small() -> NDArray[np.uint64]:
    return planted(20_000, seed=11)


def test_pairs_equal_brute_force_with_hot_prefix_split(
    client: Any, planted_small: NDArray[np.uint64]
) -> None:
    fps = planted_small
    plan = JoinPlan.of(3)
    distinct = dd.from_pandas(
        pd.DataFrame({"row": np.arange(fps.size, dtype=np.int64), "fingerprint": fps}),
        npartitions=3,
    )
    every = np.concatenate([plan.bucket(plan.table_code(t), fps) for t in range(plan.tables)])
    ids, counts = np.unique(every, return_counts=True)
    hot = hot_buckets(distinct, plan, HOT)
    assert hot.tolist() == ids[counts > HOT].tolist() and hot.size >= 1  # the planted prefix
    near = near_duplicates(frame_of(fps), 3, hot_threshold=HOT)
    got = near.pairs().compute()
    expected = brute_pairs(fps, 3)
    assert len(got) == len(expected)  # each pair once
    assert pair_set(got["a"], got["b"], got["distance"]) == expected
    exact = EXACT_COPIES * (EXACT_COPIES - 1) // 2
    assert sum(1 for _, _, d in expected if d == 0) >= exact
    members = range(EXACT_COPIES, EXACT_COPIES + HOT_MEMBERS)
    assert sum(1 for a, b, _ in expected if a in members and b in members) >= 400


@pytest.mark.parametrize("k", [0, 1, 4])
def test_pairs_equal_brute_force_other_k(
    client: Any, planted_small: NDArray[np.uint64], k: int
) -> None:
    fps = planted_small[:6_000]
    got = near_duplicates(frame_of(fps, 3), k, hot_threshold=HOT).pairs().compute()
    assert len(got) == len(set(zip(got["a"], got["b"], strict=True)))
    assert pair_set(got["a"], got["b"], got["distance"]) == brute_pairs(fps, k)


def test_100k_pairs_clusters_groups_equal_local(client: Any) -> None:
    fps = planted(100_000, seed=5)
    near = near_duplicates(frame_of(fps, 4), 3, hot_threshold=HOT)
    local = NearDuplicates(keys(0, fps.size), fps, 3)
    got = near.pairs().compute()
    a, b, d = pairs_within(fps, 3)
    assert len(got) == len(local) == a.size
    assert pair_set(got["a"], got["b"], got["distance"]) == pair_set(a, b, d)

    def as_sets(groups: Any) -> set[frozenset[int]]:
        return {frozenset(g.tolist()) for g in groups}

    clusters = near.clusters().compute()
    by_cluster = clusters.groupby("cluster")["row"].apply(lambda r: frozenset(r.tolist()))
    assert set(by_cluster.tolist()) == as_sets(local.cluster_positions())
    assert all(name == min(rows) for name, rows in by_cluster.items())  # named by smallest row
    groups = near.exact_groups().compute().groupby("group")["row"]
    assert set(groups.apply(lambda r: frozenset(r.tolist())).tolist()) == as_sets(
        local.exact_positions()
    )
    kept = near.keep_drop("first").compute()
    assert set(kept["kept"]) == {int(g.min()) for g in local.cluster_positions()}
    smallest = near.keep_drop("smallest-key").compute()
    names = local.keys
    assert set(smallest["kept"]) == {
        min(g.tolist(), key=names.__getitem__) for g in local.cluster_positions()
    }


def test_label_propagation_shapes_equal_union_find(client: Any) -> None:
    """Label propagation (each round's frames persisted and waited for, hash merges) on one
    graph of four shapes at once (each its own nodes; the rounds run until the slowest is
    still): labels that travel far, meet in hubs, never move, or follow random edges."""
    # a reversed chain: the smallest node at the far end, one hop per round
    chain_a = np.arange(200, 0, -1, dtype=np.int64)
    chain_b = chain_a - 1
    # stars: two hubs of 300 leaves, joined through their largest leaves
    leaves = np.arange(1, 601, dtype=np.int64)
    stars_a = np.concatenate((np.where(leaves <= 300, 0, 10_000), [300])) + 100_000
    stars_b = np.concatenate((leaves, [600])) + 100_000
    # disjoint pairs
    pairs_a = np.arange(0, 2000, 2, dtype=np.int64) + 200_000
    pairs_b = pairs_a + 1
    # a long path in order (many rounds without jumping) and random edges among 2,000 nodes
    rng = np.random.default_rng(3)
    path = np.arange(0, 120, dtype=np.int64) + 300_000
    random_a = np.concatenate((path[:-1], rng.integers(1000, 3000, 800) + 300_000))
    random_b = np.concatenate((path[1:], rng.integers(1000, 3000, 800) + 300_000))
    a = np.concatenate((chain_a, stars_a, pairs_a, random_a))
    b = np.concatenate((chain_b, stars_b, pairs_b, random_b))
    edges = dd.from_pandas(pd.DataFrame({"a": a, "b": b}), npartitions=4)
    propagated = components(edges, gather_edges=0).compute().sort_values("node")
    gathered = gathered_labels(a, b).sort_values("node")
    assert propagated["node"].tolist() == gathered["node"].tolist()
    assert propagated["label"].tolist() == gathered["label"].tolist()


def test_merge_with_a_derived_frame_keeps_every_row(client: Any) -> None:
    """The prototype's failure: merging a frame with one derived from it (here the groups'
    smallest rows, from a shuffle of the same frame) lost rows silently until the derived frame
    was persisted. Both ways must give every row."""
    fps = planted(20_000, seed=2)
    frame = frame_of(fps, 5)
    derived = frame.groupby("fingerprint")["row"].min().rename("first").reset_index()
    expected = len(fps)
    for right in (derived, derived.persist()):
        merged = frame.merge(right, on="fingerprint", how="inner")
        assert int(merged.shape[0].compute()) == expected
    near = near_duplicates(frame, 3, hot_threshold=HOT)
    pairs = near.pairs()  # merges the representative pairs with the star twice
    assert int(pairs.shape[0].compute()) == len(NearDuplicates(keys(0, fps.size), fps, 3))


def test_worker_killed_mid_join_result_still_exact(client: Any, cluster: Any) -> None:
    fps = planted(60_000, seed=9)
    frame = frame_of(fps, 8)
    expected = pair_set(*pairs_within(fps, 3))
    future = client.compute(near_duplicates(frame, 3, hot_threshold=HOT).pairs())
    pids = client.run(os.getpid)
    deadline = time.monotonic() + 30
    while not client.processing() or not any(client.processing().values()):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    victim = next(iter(pids.values()))
    os.kill(victim, signal.SIGKILL)  # the nanny starts a new worker; Dask recomputes
    got = future.result(timeout=240)
    assert pair_set(got["a"], got["b"], got["distance"]) == expected
    client.wait_for_workers(2, timeout=60)


# ---------------------------------------------------------------------------- the command


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def on_cluster(cluster: Any) -> list[str]:
    """The dedup options that run it on the session's cluster."""
    return ["--engine", "dask", "--scheduler", cluster.scheduler_address]


def write_parquet(path: Path, fps: NDArray[np.uint64], names: list[str]) -> Path:
    pq.write_table(
        pa.table({"id": names, "fingerprint": pa.array(fps, type=pa.uint64())}),
        path,
        row_group_size=4_000,
    )
    return path


def test_cli_dask_engine_equals_local(
    capsys: pytest.CaptureFixture[str],
    cluster: Any,
    tmp_path: Path,
    planted_small: NDArray[np.uint64],
) -> None:
    source = write_parquet(tmp_path / "in.parquet", planted_small, keys(0, planted_small.size))
    code, local_out, _ = run(capsys, "dedup", str(source), "--out", str(tmp_path / "l"))
    assert code == 0
    code, dask_out, err = run(
        capsys, "dedup", str(source), *on_cluster(cluster), "--out", str(tmp_path / "d")
    )
    assert code == 0, err
    assert dask_out == local_out and local_out.count("\n") == len(brute_pairs(planted_small, 3))
    for name in ("pairs.tsv", "clusters.tsv", "exact_duplicates.tsv", "keep_drop.tsv"):
        assert (tmp_path / "d" / name).read_bytes() == (tmp_path / "l" / name).read_bytes()
    local = json.loads((tmp_path / "l" / "summary.json").read_text())
    remote = json.loads((tmp_path / "d" / "summary.json").read_text())
    for summary in (local, remote):
        summary.pop("seconds")
        summary.pop("cpu_seconds")
    assert remote == local
    assert (tmp_path / "d" / "report.html").exists()


def test_cli_against_equals_brute_force_on_both_engines(
    capsys: pytest.CaptureFixture[str], cluster: Any, tmp_path: Path
) -> None:
    corpus = planted(20_000, seed=4)
    rng = np.random.default_rng(8)
    new = corpus[rng.integers(0, corpus.size, 600)].copy()
    new[::2] ^= np.uint64(1) << rng.integers(0, 64, new[::2].size).astype(np.uint64)
    new[1::3] = rng.integers(0, 1 << 63, new[1::3].size, dtype=np.uint64)  # mostly unmatched
    new_keys = [f"new/{i:04d}" for i in range(new.size)]
    corpus_keys = keys(0, corpus.size)
    with open(tmp_path / "new.jsonl", "w") as batch:
        batch.writelines(
            json.dumps({"id": key, "fingerprint": int(fp)}) + "\n"
            for key, fp in zip(new_keys, new.tolist(), strict=True)
        )
    write_parquet(tmp_path / "corpus.parquet", corpus, corpus_keys)
    d = np.bitwise_count(new[:, None] ^ corpus[None, :])
    i, j = np.nonzero(d <= 3)
    expected = "".join(
        f"{a}\t{b}\t{x}\n"
        for a, b, x in sorted(
            (new_keys[p], corpus_keys[q], int(d[p, q])) for p, q in zip(i, j, strict=True)
        )
    )
    unmatched = sorted(set(new_keys) - {new_keys[p] for p in i.tolist()})
    engines = [[], on_cluster(cluster)]
    for n, engine in enumerate(engines):
        folder = tmp_path / f"r{n}"
        code, out, err = run(
            capsys,
            "dedup",
            str(tmp_path / "new.jsonl"),
            "--against",
            str(tmp_path / "corpus.parquet"),
            "--out",
            str(folder),
            *engine,
        )
        assert code == 0, err
        assert out == expected
        lines = (folder / "new_unmatched.tsv").read_text().splitlines()
        assert [line.split("\t")[0] for line in lines] == unmatched
        within = pairs_within(new, 3)
        assert (folder / "pairs.tsv").read_text().count("\n") == within.a.size


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--engine", "dask", "--jobs", "2"], "--jobs"),
        (["--workers", "2"], "--engine dask"),
        (["--engine", "dask", "--weights", "idf"], "--weights none"),
        (["--against", "-"], "not -"),
        (["--worker-memory", "4GiB"], "--engine dask"),
        (["--engine", "dask", "--workers", "2", "--worker-memory", "lots"], "not a size"),
        (
            ["--engine", "dask", "--scheduler", "tcp://127.0.0.1:1", "--worker-memory", "1GiB"],
            "--scheduler",
        ),
    ],
)
def test_cli_usage_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, argv: list[str], words: str
) -> None:
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "fingerprint": 1}\n')
    code, out, err = run(capsys, "dedup", str(source), "--out", str(tmp_path / "o"), *argv)
    assert (code, out) == (USAGE, "")
    assert words in err and "Traceback" not in err


def test_cli_workers_and_scheduler_exclusive(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    argv = ["dedup", "x.jsonl", "--engine", "dask", "--workers", "2", "--scheduler", "tcp://h:1"]
    code, out, err = run(capsys, *argv)
    assert (code, out) == (USAGE, "") and "not allowed with" in err


def test_cli_without_dask_says_what_to_install(tmp_path: Path) -> None:
    blocker = tmp_path / "blocker"
    (blocker / "dask").mkdir(parents=True)
    (blocker / "dask" / "__init__.py").write_text("raise ImportError('no dask here')\n")
    source = tmp_path / "in.jsonl"
    source.write_text('{"id": "a", "fingerprint": 1}\n')
    env = dict(os.environ, PYTHONPATH=str(blocker))
    done = subprocess.run(
        [sys.executable, "-m", "permindex", "dedup", str(source), "--engine", "dask"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert done.returncode == USAGE
    assert "pip install '.[dask]' in the permindex clone" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_peer_to_peer_shuffle_gives_the_same_pairs(
    client: Any, planted_small: NDArray[np.uint64]
) -> None:
    """Above TASK_SHUFFLE_PARTITIONS the shuffles are Dask's p2p ones: the same pairs."""
    from permindex.distributed.join import TASK_SHUFFLE_PARTITIONS

    fps = planted_small[:8_000]
    near = near_duplicates(frame_of(fps, 2), 3, npartitions=TASK_SHUFFLE_PARTITIONS + 1)
    got = near.pairs().compute()
    assert pair_set(got["a"], got["b"], got["distance"]) == brute_pairs(fps, 3)


def test_cli_dask_engine_texts_and_errors_as_local(
    capsys: pytest.CaptureFixture[str], cluster: Any, tmp_path: Path
) -> None:
    """Texts are fingerprinted on the workers (JSONL blocks parsed there): the same stdout and
    folder as the local engine, too-short texts and a repeated key included; a malformed line
    is the same error (exit 4, naming the line) on both."""
    rng = np.random.default_rng(1)
    words = [f"w{i}" for i in range(400)]
    lines = []
    for i in range(300):
        text = " ".join(rng.choice(words, 400).tolist())
        lines.append({"id": f"d{i:03d}", "text": text})
        if i % 10 == 0:  # a near copy: one word replaced
            lines.append({"id": f"d{i:03d}-copy", "text": text.replace(text.split()[5], "zzz", 1)})
    lines.append({"id": "short", "text": "two words"})
    lines.append({"id": "d001", "text": lines[0]["text"]})  # a repeated key
    source = tmp_path / "texts.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    dask = on_cluster(cluster)
    outputs = []
    for n, engine in enumerate([[], dask]):
        folder = tmp_path / f"t{n}"
        code, out, err = run(capsys, "dedup", str(source), "--out", str(folder), *engine)
        assert code == 0, err
        outputs.append(out)
    assert outputs[0] == outputs[1] and outputs[0].count("\n") >= 10
    for name in ("pairs.tsv", "clusters.tsv", "keep_drop.tsv", "too_short.tsv", "flags.tsv"):
        assert (tmp_path / "t0" / name).read_bytes() == (tmp_path / "t1" / name).read_bytes()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(source.read_text() + "{not json\n")
    errors = []
    for n, engine in enumerate([[], dask]):
        code, out, err = run(capsys, "dedup", str(bad), "--out", str(tmp_path / f"b{n}"), *engine)
        assert (code, out) == (EXIT_CODES["invalid"], "")
        errors.append(err)
    assert errors[0] == errors[1] and f"line {len(lines) + 1}" in errors[0]


def test_fingerprint_columns_of_each_type(client: Any, tmp_path: Path) -> None:
    """uint64, int64 (two's complement) and hex-string Parquet columns give the same
    fingerprints and pairs; a bad hex string is a clear error naming the column."""
    from permindex.distributed import fingerprint_column, with_row_ids
    from permindex.io.arrow import ColumnError

    fps = planted(20_000, seed=6)[:4_000]
    columns = {
        "uint64": pa.array(fps, type=pa.uint64()),
        "int64": pa.array(fps.view(np.int64), type=pa.int64()),
        "hex": pa.array([f"{x:016x}" for x in fps.tolist()]),
    }
    expected = brute_pairs(fps, 3)
    for kind, values in columns.items():
        path = tmp_path / f"{kind}.parquet"
        pq.write_table(
            pa.table({"key": keys(0, fps.size), "fp": values}), path, row_group_size=1000
        )
        frame = fingerprint_column(with_row_ids(dd.read_parquet(path)), "fp")
        got = frame["fingerprint"].compute().to_numpy()
        assert got.dtype == np.uint64 and np.array_equal(got, fps), kind
        pairs = near_duplicates(frame, 3).pairs().compute()
        assert pair_set(pairs["a"], pairs["b"], pairs["distance"]) == expected, kind
    bad = pd.DataFrame({"fp": ["00000000000000zz"]})
    with pytest.raises(ColumnError, match="fp"):
        fingerprint_column(dd.from_pandas(bad, npartitions=1), "fp").compute()


def test_cli_unreachable_scheduler_exits_3(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, planted_small: NDArray[np.uint64]
) -> None:
    """--scheduler where no scheduler listens: exit 3 (unavailable) with one line naming the
    address, after Dask's connect timeout (1 s here), not an OSError's exit 1."""
    import dask

    source = write_parquet(tmp_path / "in.parquet", planted_small, keys(0, planted_small.size))
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code, out, err = run(
            capsys, "dedup", str(source), "--engine", "dask", "--scheduler", "tcp://127.0.0.1:1"
        )
    assert (code, out) == (EXIT_CODES["unavailable"], "")
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:1" in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_parquet_texts_go_as_data_not_in_the_graph(
    capsys: pytest.CaptureFixture[str], cluster: Any, tmp_path: Path
) -> None:
    """A Parquet text batch of 1,024 pages of 12 KB (12 MB) is scattered to the workers, not
    put inside the task graph: no "Sending large graph" warning; the same pairs as local."""
    import warnings

    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(5)
    words = np.array([f"word{i}" for i in range(5_000)])
    texts = [" ".join(rng.choice(words, 1_500).tolist()) for _ in range(1_100)]
    texts[7] = texts[3]  # one exact copy
    ids = [f"page/{i:05d}" for i in range(len(texts))]
    source = tmp_path / "pages.parquet"
    pq.write_table(pa.table({"id": ids, "text": texts}), source)
    code, local_out, err = run(capsys, "dedup", str(source), "--out", str(tmp_path / "local"))
    assert code == 0, err
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code, dask_out, err = run(
            capsys, "dedup", str(source), "--out", str(tmp_path / "dask"), *on_cluster(cluster)
        )
    assert code == 0, err
    assert dask_out == local_out == "page/00003\tpage/00007\t0\n"
    assert not [w for w in caught if "large graph" in str(w.message)]


def test_cli_dask_refuses_standard_input_naming_it(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "dedup", "-", "--engine", "dask", "--workers", "1")
    assert (code, out) == (USAGE, "")
    assert "not standard input (-)" in err and "--weights" not in err
