"""``permindex dedup --engine dask``: the local ``dedup`` (:func:`permindex.near.dedup.run_dedup`)
with its fingerprinting and its join on a Dask cluster (:func:`run_dedup_dask`), and the cluster
it runs on (:func:`dask_client`).

The input is read and cut into tasks in this process exactly as the local engine does
(:func:`permindex.near.dedup.fingerprint_tasks`: JSONL blocks, Parquet row batches, folder
files), each task parsed and fingerprinted by a Dask worker (a batch whose fingerprints are given,
such as a Parquet fingerprint column, has no work: only its fingerprints are sent, scattered
over the workers); the documents' keys and per-document columns come back here (as the local
engine holds them), their fingerprints stay on the workers as a Dask dataframe, and the
self-join runs there (:func:`permindex.distributed.near_duplicates`:
exact duplicates collapsed, a shuffle by (table, prefix)). Only the pairs of distinct
fingerprints come back; the report (pairs, clusters, keep/drop, the folder) is then built by
the same code as the local engine's (:func:`permindex.near.dedup.assemble_result`,
:func:`permindex.near.outputs.write_outputs`), so both engines print and write the same.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from permindex.distributed.jaccard import HeldSets, Light, light_of, part_of
from permindex.distributed.join import show_progress
from permindex.index.join.pair_stream import PairArrays
from permindex.near.columns import Documents, documents_of
from permindex.near.dedup import (
    assemble_result,
    fingerprint_tasks,
    has_work,
    raise_failure,
    run_task,
)
from permindex.near.jaccard import JaccardDuplicates
from permindex.near.minhash import choose_bands
from permindex.near.result import DedupOptions, DedupResult

if TYPE_CHECKING:
    from distributed import Client

__all__ = ["DASK_EXTRA", "dask_client", "require_dask", "run_dedup_dask"]

#: What to install for the Dask engine.
DASK_EXTRA: Final = "pip install '.[dask]' in the permindex clone"

_PART_META: Final = {"row": np.int64, "fingerprint": np.uint64}

#: Given fingerprints are scattered to the workers in lots of about this many rows as they are
#: read, so that this process never holds a second copy of them all.
_SCATTER_ROWS: Final = 1 << 20


def require_dask() -> None:
    """Import dask.dataframe and distributed, or raise ImportError whose message says what to
    install (:data:`DASK_EXTRA`)."""
    try:
        import dask.dataframe  # noqa: F401
        import distributed  # noqa: F401
    except ImportError as error:
        raise ImportError(f"the Dask engine needs dask and distributed: {DASK_EXTRA}") from error


@contextlib.contextmanager
def dask_client(
    workers: int | None = None,
    scheduler: str | None = None,
    worker_memory: str | None = None,
) -> Iterator[Client]:
    """A :class:`distributed.Client`: of the cluster at ``scheduler`` (an address such as
    ``tcp://host:8786``), or of a :class:`distributed.LocalCluster` of ``workers`` worker
    processes (default 2), one thread each, no dashboard, each limited to ``worker_memory``
    (e.g. ``"4GiB"``; Dask spills to disk, then pauses, then restarts a worker above it),
    closed on exit."""
    from distributed import Client, LocalCluster

    if scheduler is not None:
        with Client(scheduler) as client:
            yield client
        return
    with (
        LocalCluster(
            n_workers=workers or 2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            # the scheduler's HTTP routes (health, metrics) on a free port, not 8787
            scheduler_kwargs={"dashboard_address": ":0"},
            memory_limit=worker_memory or "auto",
            # the workers' log lines below ERROR (a cancelled task after a bad input line,
            # spilling) are not shown: stderr carries permindex's own messages
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        yield client


def _fingerprints(done: Any) -> pd.DataFrame:
    """The (row placeholder, fingerprint) partition of a task's documents (those without a
    fingerprint as 0: they are filtered out before the join)."""
    if not hasattr(done, "documents"):
        return pd.DataFrame({n: np.zeros(0, t) for n, t in _PART_META.items()})
    fps = done.documents.fingerprints
    return pd.DataFrame({"row": np.zeros(fps.size, dtype=np.int64), "fingerprint": fps})


def _run_sent(task: tuple[Any, ...]) -> Any:
    """:func:`~permindex.near.dedup.run_task` of a task scattered to the workers."""
    return run_task(*task)


def _numbered(part: pd.DataFrame, start: int, keep: NDArray[np.int64] | None) -> pd.DataFrame:
    """A partition's rows numbered from ``start`` (input positions), only those in ``keep``
    (sorted input positions; None: every row)."""
    rows = np.arange(start, start + len(part), dtype=np.int64)
    fps = part["fingerprint"].to_numpy()
    if keep is None:
        return pd.DataFrame({"row": rows, "fingerprint": fps})
    chosen = np.isin(rows, keep, assume_unique=True)
    return pd.DataFrame({"row": rows[chosen], "fingerprint": fps[chosen]})


def run_dedup_dask(
    options: DedupOptions,
    client: Client,
    *,
    progress: bool = False,
    keep_sets: HeldSets | None = None,
) -> DedupResult:
    """:func:`permindex.near.dedup.run_dedup` (plain weights, a file or folder: not standard
    input) with the fingerprinting and the join on the cluster of ``client``: the same
    result. In the Jaccard mode, ``keep_sets`` (when given) is filled with the distinct
    shingle sets of the kept documents, left on the workers for ``--against``
    (:func:`permindex.distributed.against.jaccard_against_pairs_dask`).

    Raises:
        InvalidArgumentError: as :func:`~permindex.near.dedup.run_dedup` (a malformed line is
            raised in input order), and for ``weights="idf"`` or standard input.
    """
    import dask.dataframe as dd
    import distributed

    from permindex.distributed.dedup import near_duplicates
    from permindex.distributed.join import join_partitions
    from permindex.errors import InvalidArgumentError
    from permindex.io.parquet import open_documents

    options.check()
    if options.source == "-":
        raise InvalidArgumentError(
            "--engine dask reads a file or folder, not standard input (-)", value=options.source
        )
    if options.weights != "none":
        raise InvalidArgumentError(
            f"--engine dask weighs every shingle alike (weights 'none'), not {options.weights!r}",
            value=options.weights,
        )
    started = time.monotonic()
    reader = open_documents(
        options.source,
        id_field=options.id_field,
        text_field=options.text_field,
        fingerprint_field=options.fingerprint_field,
    )
    jaccard = options.method == "minhash"
    shape = choose_bands(options.threshold, options.permutations)
    held: list[Any] = []  # the Jaccard mode, per task with work: its JaccardPart's future
    done: list[Any] = []  # per task: its future, or its documents when it had no work
    parts: list[Any] = []  # per task: the future of its (row, fingerprint) partition
    waiting: list[pd.DataFrame] = []  # given fingerprints not sent yet: at most _SCATTER_ROWS

    def send() -> None:
        parts.extend(client.scatter(waiting))
        waiting.clear()

    for task in fingerprint_tasks(reader, options):
        if has_work(task):
            # the task's data (texts, lines) goes as data, not inside the task graph
            [sent] = client.scatter([task], hash=False)
            future = client.submit(_run_sent, sent, pure=False)
            if jaccard:  # the sets stay there (JaccardPart); only a Light comes back
                held.append(client.submit(part_of, future, shape, pure=False))
                done.append(client.submit(light_of, future, pure=False))
                continue
            done.append(future)
            if waiting:
                send()
            parts.append(client.submit(_fingerprints, future, pure=False))
        else:  # fingerprints given: nothing for a worker to do but receive them, as they come
            done.append(run_task(*task))
            waiting.append(_fingerprints(done[-1]))
            if sum(len(w) for w in waiting) >= _SCATTER_ROWS:
                send()
    if waiting:
        send()
    futures = [d for d in done if isinstance(d, distributed.Future)]
    if progress and futures:
        show_progress(futures)
    pieces = []
    skipped: dict[str, int] = {}
    lights: list[Light | None] = []  # the Jaccard mode: per task
    for item in done:  # in input order: the first malformed line is the one raised
        value = item.result() if isinstance(item, distributed.Future) else item
        lights.append(value if isinstance(value, Light) else None)
        read = raise_failure(value.read if isinstance(value, Light) else value)
        pieces.append(read.documents)
        for reason in read.skipped:
            skipped[reason] = skipped.get(reason, 0) + 1
    del done
    sizes = [len(p.keys) for p in pieces]
    documents = documents_of(pieces)
    seconds = {"read": 0.0, "fingerprint": time.monotonic() - started}
    starts = np.concatenate(([0], np.cumsum(sizes))).astype(np.int64)

    def join(ordinals: NDArray[np.int64]) -> PairArrays:
        bounds = np.searchsorted(ordinals, starts)
        numbered = []
        for i, part in enumerate(parts):
            keep: NDArray[np.int64] | None = ordinals[bounds[i] : bounds[i + 1]]
            if keep is not None and keep.size == starts[i + 1] - starts[i]:
                keep = None  # every row of the part (the usual case: nothing sent)
            numbered.append(client.submit(_numbered, part, int(starts[i]), keep, pure=False))
        if not numbered:
            empty = np.zeros(0, dtype=np.int64)
            return PairArrays(empty, empty.copy(), empty.copy())
        frame = dd.from_delayed(numbered, meta=_PART_META, verify_meta=False)
        partitions = join_partitions(int(ordinals.size), len(client.nthreads()))
        near = near_duplicates(frame, options.k, npartitions=partitions)
        del frame, numbered  # the collapse holds what the join needs
        parts.clear()
        if progress:
            show_progress(near.representative_pairs)
        pairs = near.representative_pairs.compute()
        return PairArrays(
            pairs["a"].to_numpy(dtype=np.int64),
            pairs["b"].to_numpy(dtype=np.int64),
            pairs["distance"].to_numpy(dtype=np.int64),
        )

    if jaccard:

        def near_of(keys: Sequence[str], ordinals: NDArray[np.int64]) -> JaccardDuplicates:
            return _jaccard_join(
                options,
                client,
                documents,
                lights,
                held,
                keys,
                ordinals,
                progress=progress,
                keep_sets=keep_sets,
            )

        return assemble_result(
            options,
            documents,
            seconds=seconds,
            near_of=near_of,
            skipped_by_reason=dict(sorted(skipped.items())),
            source_kind=reader.kind,
            cpu_seconds={},
        )
    return assemble_result(
        options,
        documents,
        seconds=seconds,
        joined=join,
        skipped_by_reason=dict(sorted(skipped.items())),
        source_kind=reader.kind,
        cpu_seconds={},
    )


def _jaccard_join(
    options: DedupOptions,
    client: Client,
    documents: Documents,
    lights: list[Light | None],
    held: list[Any],
    keys: Sequence[str],
    ordinals: NDArray[np.int64],
    *,
    progress: bool,
    keep_sets: HeldSets | None = None,
) -> JaccardDuplicates:
    """The Jaccard mode's join of the documents at ``ordinals`` (the kept ones) on the
    cluster (:func:`permindex.distributed.jaccard.jaccard_pairs`): their set digests checked
    (the seed is raised, as :meth:`permindex.near.jaccard.ShingleSets.digests` does, while two
    kept sets with one digest have different check digests), one representative row per
    distinct set, and the pairs of those as a
    :class:`~permindex.near.jaccard.JaccardDuplicates` (:meth:`~permindex.near.jaccard.
    JaccardDuplicates.joined_elsewhere`)."""
    from permindex.distributed.jaccard import Selection, digests_of, jaccard_pairs
    from permindex.index.join.pair_stream import distinct_values

    shape = choose_bands(options.threshold, options.permutations)
    has = documents.has_fingerprint
    with_set = [light for light in lights if light is not None]
    checks = np.concatenate([x.checks for x in with_set] or [np.zeros(0, np.uint64)])
    sizes = np.concatenate([x.sizes for x in with_set] or [np.zeros(0, np.int64)])
    set_of = (np.cumsum(has) - 1)[ordinals]  # each kept document's set, over all tasks
    digests = documents.fingerprints[ordinals]
    seed = 0
    while True:
        values = distinct_values(digests)
        grouped = checks[set_of[values.by_value]]
        leaders = np.repeat(grouped[values.first], values.counts)
        if np.array_equal(grouped, leaders):
            break
        seed += 1  # two different sets under one digest: every digest again, the next seed
        every = np.concatenate(
            [f.result() for f in [client.submit(digests_of, p, seed) for p in held]]
            or [np.zeros(0, np.uint64)]
        )
        digests = every[set_of]
    representative = np.sort(values.by_value[values.first])  # positions into ordinals
    rows = ordinals[representative]
    sets_of_rows = set_of[representative]
    # the parts' sets, in task order: where each part's sets start among all sets
    counts = [x.sizes.size for x in with_set]
    starts = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    bounds = np.searchsorted(sets_of_rows, starts)
    selections = [
        Selection(
            sets_of_rows[bounds[i] : bounds[i + 1]] - starts[i],
            rows[bounds[i] : bounds[i + 1]],
            sizes[sets_of_rows[bounds[i] : bounds[i + 1]]],
        )
        for i in range(len(with_set))
    ]
    if keep_sets is not None:  # the same sets, numbered by their positions among the keys
        keep_sets.parts = list(held)
        keep_sets.selections = [
            s._replace(rows=representative[bounds[i] : bounds[i + 1]])
            for i, s in enumerate(selections)
        ]
    joined = jaccard_pairs(
        client, held, selections, options.threshold, shape.bands, progress=progress
    )
    held.clear()  # the sets are no longer needed here (keep_sets may hold them)
    pairs = joined.pairs
    positions = PairArrays(
        np.searchsorted(ordinals, pairs.a), np.searchsorted(ordinals, pairs.b), pairs.distance
    )
    return JaccardDuplicates.joined_elsewhere(
        keys, digests, options.threshold, shape, positions, joined.candidates, joined.merged
    )
