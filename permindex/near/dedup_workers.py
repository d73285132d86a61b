"""The worker side of ``permindex dedup`` (:mod:`permindex.near.dedup`): what a worker process
does with one task (a block of JSONL lines, or texts and folder files) and returns, and the
pool of such workers. Importing it does not import grpc.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.near.jaccard import ShingleSets
from permindex.near.minhash import signatures
from permindex.processes import end_with_parent, ignore_interrupts, process_context
from permindex.text.documents import JsonlParser, folder_file_text
from permindex.text.extract import Extract
from permindex.text.fingerprint import (
    Tokenizer,
    Vote,
    shingle_hashes,
    simhash_many,
    simhash_weighted,
    tokens,
)
from permindex.text.inflated_blocks import SharedBlock
from permindex.text.weights import DocumentFrequency, chunk_bucket_counts

__all__ = [
    "Chunk",
    "Done",
    "Failure",
    "init_idf_worker",
    "reset_worker",
    "work",
    "work_items",
    "work_lines",
    "worker_pool",
]

_DF: DocumentFrequency | None = None  # a worker's document frequencies (IDF pass)


def init_idf_worker(path: str, documents: int, bucket_bits: int) -> None:
    """Pool initializer of the IDF pass: map the document frequencies saved by the parent."""
    global _DF
    df = DocumentFrequency.__new__(DocumentFrequency)
    df.bucket_bits = bucket_bits
    df.documents = documents
    df.counts = np.load(path, mmap_mode="r")
    _DF = df


@dataclass
class Chunk:
    """What a worker returns for a chunk of n documents, in order."""

    fingerprints: NDArray[np.uint64]  # 0 where there is none
    has_fingerprint: NDArray[np.bool_]
    tokens: NDArray[np.int64]  # tokens of a too-short text; 0 otherwise
    lengths: NDArray[np.int64]  # characters of each text (folder files: -1 when skipped)
    skipped: list[str | None]  # folder files only: the reason a file was skipped
    buckets: NDArray[np.uint32] | None = None  # DF pass: bucket counts of the chunk
    bucket_counts: NDArray[np.uint32] | None = None
    counted: int = 0  # DF pass: documents counted
    sets: ShingleSets | None = None  # minhash: the shingle sets of the rows that have one
    signatures: NDArray[np.uint32] | None = None  # ... and their MinHash signatures


def work(
    items: Sequence[str | Path | None],
    task: str,
    shingle_size: int,
    tokenizer: Tokenizer,
    min_words: int,
    bucket_bits: int,
    permutations: int = 0,
    vote: Vote = "multiset",
    extract: Extract = "visible",
) -> Chunk:
    """Fingerprint (``task="plain"`` or ``"idf"``), count shingles (``"df"``) or make shingle
    sets and their MinHash signatures of ``permutations`` values (``"minhash"``) for a chunk:
    each item is a text, a folder file's path (read here), or None (a document that came with
    its fingerprint: nothing to do)."""
    n = len(items)
    fps = np.zeros(n, dtype=np.uint64)
    has = np.zeros(n, dtype=bool)
    short = np.zeros(n, dtype=np.int64)
    lengths = np.zeros(n, dtype=np.int64)
    skipped: list[str | None] = [None] * n
    per_document: list[NDArray[np.uint64]] = []
    plain: list[str] = []  # task "plain": the texts, fingerprinted in one simhash_many call
    plain_rows: list[int] = []
    for i, item in enumerate(items):
        if item is None:
            continue
        if isinstance(item, Path):
            text, reason = folder_file_text(item, extract)
            if text is None:
                skipped[i] = reason or "not text"
                lengths[i] = -1
                continue
        else:
            text = item
        lengths[i] = len(text)
        if task == "plain":
            plain.append(text)
            plain_rows.append(i)
            continue
        count = len(tokens(text, tokenizer)) if min_words else -1
        if 0 <= count < min_words:
            short[i] = count
            continue
        hashes = shingle_hashes(text, shingle_size=shingle_size, tokenizer=tokenizer)
        if hashes.size == 0:
            short[i] = len(tokens(text, tokenizer))
            continue
        if task in ("df", "minhash"):
            per_document.append(hashes)
            has[i] = True
            continue
        assert _DF is not None, "the IDF pass runs in workers started by init_idf_worker"
        if vote == "set":
            hashes = np.unique(hashes)
        weighted = simhash_weighted(hashes, _DF.idf(hashes))
        if weighted is not None:  # IDF weights are >= 1: never None with a shingle
            fps[i] = weighted
            has[i] = True
    if plain:
        rows = np.array(plain_rows, dtype=np.intp)
        found, valid = simhash_many(
            plain, shingle_size=shingle_size, tokenizer=tokenizer, min_words=min_words, vote=vote
        )
        fps[rows] = found
        has[rows] = valid
        for j in np.flatnonzero(~valid).tolist():  # too short: its number of tokens
            short[plain_rows[j]] = len(tokens(plain[j], tokenizer))
    chunk = Chunk(fps, has, short, lengths, skipped)
    if task == "minhash":
        chunk.sets = ShingleSets.of(per_document)
        chunk.signatures = signatures(chunk.sets.values, chunk.sets.offsets, permutations)
    if task == "df":
        chunk.buckets, chunk.bucket_counts = chunk_bucket_counts(per_document, bucket_bits)
        chunk.counted = len(per_document)
    return chunk


@dataclass
class Failure:
    """An input error raised in a worker (a malformed line), re-raised by the parent when it
    reaches that task, so in input order: the exception's class, args and attributes."""

    kind: type[BaseException]
    args: tuple[Any, ...]
    state: dict[str, Any]

    def exception(self) -> BaseException:
        error = self.kind.__new__(self.kind)
        error.args = self.args
        error.__dict__.update(self.state)
        return error


@dataclass
class Done:
    """What a worker returns for one task: the documents' keys and given fingerprints (None
    where a text was fingerprinted), the chunk, and the worker's CPU seconds (parse,
    fingerprint)."""

    keys: list[str] | None  # None: the parent knows them (folder files)
    given: list[int | None] | None
    chunk: Chunk
    parse_seconds: float
    fingerprint_seconds: float


def work_lines(
    parser: JsonlParser, first: int, block: bytes | SharedBlock, *args: Any
) -> Done | Failure:
    """Parse a block of whole JSONL lines (the first being line ``first``; a SharedBlock is
    read from its ring file first), then :func:`work` on their texts (``args`` as for
    :func:`work`)."""
    started = time.process_time()
    try:
        keys, texts, given = parser.block_columns(block, first)
    except InvalidArgumentError as error:
        return Failure(type(error), error.args, dict(error.__dict__))
    parsed = time.process_time()
    items: list[str | Path | None] = list(texts)
    chunk = work(items, *args)
    return Done(
        keys,
        given,
        chunk,
        parsed - started,
        time.process_time() - parsed,
    )


def work_items(items: Sequence[str | Path | None], *args: Any) -> Done:
    """:func:`work` on a chunk whose keys the parent holds (folder files), timed."""
    started = time.process_time()
    chunk = work(items, *args)
    return Done(None, None, chunk, 0.0, time.process_time() - started)


def reset_worker() -> None:
    """Forget what :func:`init_idf_worker` set up (the parent, after doing chunks itself)."""
    global _DF
    _DF = None


def _start_worker(
    parent: int, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]
) -> None:
    """A pool worker's start: SIGINT and SIGTERM are the parent's to handle
    (:func:`ignore_interrupts`), the worker ends with its parent (:func:`end_with_parent`),
    then ``initializer(*initargs)``."""
    ignore_interrupts()
    end_with_parent(parent)
    if initializer is not None:
        initializer(*initargs)


def worker_pool(
    jobs: int, initializer: Callable[..., None] | None, initargs: tuple[Any, ...]
) -> ProcessPoolExecutor:
    """A process pool of ``jobs`` workers (:func:`~permindex.processes.process_context`: forkserver
    where there is one, else spawn), each ignoring SIGINT and SIGTERM, ending with this process,
    and set up by ``initializer(*initargs)`` when given."""
    return ProcessPoolExecutor(
        max_workers=jobs,
        mp_context=process_context(),
        initializer=_start_worker,
        initargs=(os.getpid(), initializer, initargs),
    )
