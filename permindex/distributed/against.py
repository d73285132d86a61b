"""``permindex dedup NEW --against CORPUS --engine dask``: the new batch's documents are sent
once to every worker (:meth:`distributed.Client.scatter`, ``broadcast=True``), each worker builds
its :class:`permindex.Index` of them on first use and keeps it, and the corpus tasks (as
:func:`permindex.near.dedup.fingerprint_tasks` cuts them) are fingerprinted and looked up there
(:func:`permindex.near.against.block_pairs`): no shuffle.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

import pandas as pd

from permindex.near.against import AgainstPair, block_pairs, corpus_options
from permindex.near.dedup import fingerprint_tasks, raise_failure, run_task
from permindex.near.result import DedupResult

if TYPE_CHECKING:
    from distributed import Client

    from permindex.index import Index

__all__ = ["against_pairs_dask"]

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
