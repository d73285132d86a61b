"""``permindex dedup NEW --against CORPUS --engine dask``: the new batch's documents are sent
once to every worker (:meth:`distributed.Client.scatter`, ``broadcast=True``), each worker builds
its :class:`permindex.Index` of them on first use and keeps it, and the corpus tasks (as
:func:`permindex.near.dedup.fingerprint_tasks` cuts them) are fingerprinted and looked up there
(:func:`permindex.near.against.block_pairs`): no shuffle.

The Jaccard mode (``--method minhash``, :func:`jaccard_against_pairs_dask`) is a join instead:
the corpus tasks are shingled on the workers, where their sets stay, and the new batch's
distinct sets (left there by its own run, :class:`~permindex.distributed.jaccard.HeldSets`)
are joined with them by :func:`permindex.distributed.jaccard.jaccard_pairs` in its cross
mode: the band keys are the shuffle's keys, only buckets holding sets of both sides go on,
every candidate is verified exactly on a worker, and a hot bucket is cut into blocks. Only the
pairs, and the keys of the corpus documents in them, come back.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import pandas as pd
from numpy.typing import NDArray

from permindex.distributed.jaccard import HeldSets, JaccardPart, Selection, jaccard_pairs, part_of
from permindex.index.join.pair_stream import distinct_values
from permindex.near.against import AgainstPair, block_pairs, corpus_options
from permindex.near.dedup import TaskDocuments, fingerprint_tasks, has_work, raise_failure, run_task
from permindex.near.minhash import choose_bands
from permindex.near.result import DedupResult

if TYPE_CHECKING:
    from distributed import Client

    from permindex.index import Index

__all__ = ["against_pairs_dask", "jaccard_against_pairs_dask"]

_INDEXES: dict[str, Index] = {}  # a worker's index of each new batch, by token


def _query(done: Any, batch: tuple[str, list[str], Any, int]) -> Any:
    """A corpus task's pairs against the new batch (its index built here on first use), or
    the task's failure."""
    from permindex.index import Index
    from permindex.index.join.clusters import design_for
    from permindex.near.dedup import TaskDocuments

    if not isinstance(done, TaskDocuments):
        return done
    token, keys, fingerprints, k = batch
    index = _INDEXES.get(token)
    if index is None:
        _INDEXES.clear()  # one batch at a time per worker
        index = Index(k=k, design=design_for(k), expected_size=max(1, len(keys)))
        index.add_many(keys, fingerprints)
        _INDEXES[token] = index
    pairs = block_pairs(index, done.documents, k)
    # one frame, not a list of tuples (which Dask would serialize element by element)
    return pd.DataFrame(pairs, columns=["new", "corpus", "distance"])


def against_pairs_dask(
    result: DedupResult, corpus: str, client: Client, *, progress: bool = False
) -> list[AgainstPair]:
    """:func:`permindex.near.against.against_pairs` on the cluster of ``client``: the same
    pairs, sorted, each once."""
    from permindex.distributed.join import show_progress
    from permindex.io.parquet import open_documents

    options = corpus_options(result.options, corpus)
    reader = open_documents(
        corpus,
        id_field=options.id_field,
        text_field=options.text_field,
        fingerprint_field=options.fingerprint_field,
    )
    batch = (uuid.uuid4().hex, list(result.near.keys), result.near.fingerprints, options.k)
    [shared] = client.scatter([batch], broadcast=True)
    done = [
        client.submit(run_task, *task, pure=False) for task in fingerprint_tasks(reader, options)
    ]
    queried = [client.submit(_query, d, shared, pure=False) for d in done]
    if progress and queried:
        show_progress(queried)
    found: set[AgainstPair] = set()
    for future in queried:  # in input order: the first malformed line is the one raised
        value = future.result()
        if not isinstance(value, pd.DataFrame):
            raise_failure(value)
            continue
        found.update(
            zip(
                value["new"].tolist(),
                value["corpus"].tolist(),
                value["distance"].tolist(),
                strict=True,
            )
        )
    return sorted(found)


# ------------------------------------------------------------------------ the Jaccard mode


class _CorpusPart(NamedTuple):
    """What a corpus task leaves on its worker: its sets and band keys, and the keys of its
    documents that have a set (in the sets' order)."""

    part: JaccardPart | None
    keys: list[str]


def _corpus_part(done: Any, shape: Any) -> Any:
    """The :class:`_CorpusPart` of a corpus task's result, or the task's failure."""
    if not isinstance(done, TaskDocuments):
        return done
    documents = done.documents
    valid = np.flatnonzero(documents.has_fingerprint).tolist()
    return _CorpusPart(part_of(done, shape), [documents.keys[i] for i in valid])


def _sizes(held: Any) -> Any:
    """The set sizes ((m,) int64) of a corpus part, or the task's failure."""
    if not isinstance(held, _CorpusPart):
        return held
    if held.part is None:
        return np.zeros(0, dtype=np.int64)
    return held.part.sets.sizes


def _part(held: Any) -> JaccardPart | None:
    return held.part if isinstance(held, _CorpusPart) else None


def _keys_at(held: _CorpusPart, local: NDArray[np.int64]) -> list[str]:
    return [held.keys[i] for i in local.tolist()]


def _run_sent(task: tuple[Any, ...]) -> Any:
    return run_task(*task)


def jaccard_against_pairs_dask(
    result: DedupResult,
    corpus: str,
    client: Client,
    held: HeldSets,
    *,
    progress: bool = False,
) -> list[AgainstPair]:
    """:func:`permindex.near.against.against_pairs` in the Jaccard mode on the cluster of
    ``client``: every (new key, corpus key, distance) with J >= the threshold (distance in
    :data:`~permindex.near.jaccard.SCALE` units, exact), sorted, each once, for the new batch
    ``result`` of :func:`~permindex.distributed.engine.run_dedup_dask` whose distinct sets
    ``held`` keeps (``keep_sets``).

    The corpus is read here task by task (lines are sent to the workers, as the dedup sends
    them) and shingled there; its sets stay there. The new and corpus sets are joined by
    :func:`~permindex.distributed.jaccard.jaccard_pairs` with ``boundary`` the number of new
    keys (new rows are positions into ``result.near.keys``, corpus rows follow): a pair met in
    several bands is verified and kept in the first only. A new set held by several keys
    (identical shingle sets) is matched once and reported for each of its keys. Memory here:
    the corpus's set sizes (8 bytes a document), the memberships of the buckets shared by both
    sides (18 bytes each) and the pairs.

    Raises:
        InvalidArgumentError: as :func:`~permindex.near.dedup.run_dedup` for the corpus (the
            first malformed line in input order).
    """
    from permindex.distributed.join import show_progress
    from permindex.io.parquet import open_documents

    options = corpus_options(result.options, corpus)
    shape = choose_bands(options.threshold, options.permutations)
    reader = open_documents(
        corpus,
        id_field=options.id_field,
        text_field=options.text_field,
        fingerprint_field=options.fingerprint_field,
    )
    parts: list[Any] = []  # per corpus task: its _CorpusPart's future, or the value itself
    for task in fingerprint_tasks(reader, options):
        if has_work(task):
            [sent] = client.scatter([task], hash=False)
            done = client.submit(_run_sent, sent, pure=False)
            parts.append(client.submit(_corpus_part, done, shape, pure=False))
        else:  # every document came with a fingerprint: refused, as the local engine does
            parts.append(_corpus_part(run_task(*task), shape))
    sizes = [client.submit(_sizes, p, pure=False) if _remote(p) else _sizes(p) for p in parts]
    if progress and sizes:
        show_progress([s for s in sizes if _remote(s)])
    boundary = len(result.near.keys)
    corpus_selections: list[Selection] = []
    corpus_parts: list[Any] = []
    corpus_starts: list[int] = []  # each part's first row
    start = boundary
    for part, size in zip(parts, sizes, strict=True):  # in input order: the first failure
        value = size.result() if _remote(size) else size
        if not isinstance(value, np.ndarray):
            raise_failure(value)
            continue
        local = np.arange(value.size, dtype=np.int64)
        corpus_selections.append(Selection(local, local + start, value))
        corpus_starts.append(start)
        corpus_parts.append(client.submit(_part, part, pure=False) if _remote(part) else None)
        start += value.size
    joined = jaccard_pairs(
        client,
        [*held.parts, *corpus_parts],
        [*held.selections, *corpus_selections],
        options.threshold,
        shape.bands,
        boundary=boundary,
        progress=progress,
    )
    del corpus_parts
    new_rows, corpus_rows, distance = joined.pairs
    # the corpus keys of the pairs, from the workers that hold them, part by part
    starts = np.array(corpus_starts, dtype=np.int64)
    owner = np.searchsorted(starts, corpus_rows, side="right") - 1
    order = np.argsort(owner, kind="stable")
    corpus_keys = np.empty(corpus_rows.size, dtype=object)
    bounds = np.searchsorted(owner[order], np.arange(len(parts) + 1))
    asked = []
    for i in range(len(parts)):
        at = order[bounds[i] : bounds[i + 1]]
        if at.size:
            local = corpus_rows[at] - starts[i]
            asked.append((at, client.submit(_keys_at, parts[i], local, pure=False)))
    for at, future in asked:
        corpus_keys[at] = future.result()
    del parts
    # each new set's pairs, for every key that has it
    values = distinct_values(result.near.fingerprints)
    which = values.value_of[new_rows]
    counts = values.counts[which]
    firsts = np.repeat(values.first[which] - np.cumsum(counts) + counts, counts)
    positions = values.by_value[firsts + np.arange(int(counts.sum()))]
    new_keys = result.near.keys
    found = set(
        zip(
            [new_keys[p] for p in positions.tolist()],
            np.repeat(corpus_keys, counts).tolist(),
            np.repeat(distance, counts).tolist(),
            strict=True,
        )
    )
    return sorted(found)


def _remote(value: Any) -> bool:
    from distributed import Future

    return isinstance(value, Future)
