"""Offline near-duplicate detection over a whole collection, no server (``permindex dedup``):
read, fingerprint in worker processes (:mod:`permindex.near.dedup_workers`: what a worker does
with a task), join, cluster (:func:`run_dedup`, whose docstring gives the steps and their memory
bounds); the report folder is written by
:func:`permindex.near.outputs.write_outputs` (re-exported here).
Importing it does not import grpc.
"""

from __future__ import annotations

import io
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.join.clusters import NearDuplicates, design_for, keep_per_cluster
from permindex.index.join.pair_stream import PairArrays
from permindex.index.keys.column import KeyColumn
from permindex.io.parquet import ParquetReader, open_documents
from permindex.near.columns import Documents, join_columns, last_occurrences
from permindex.near.dedup_workers import (
    Done,
    Failure,
    init_idf_worker,
    reset_worker,
    work_items,
    work_lines,
    worker_pool,
)
from permindex.near.jaccard import JaccardDuplicates, ShingleSets
from permindex.near.minhash import MISS_AT_THRESHOLD, band_keys, choose_bands
from permindex.near.outputs import write_outputs  # re-exported: the report folder
from permindex.near.result import DedupOptions, DedupResult
from permindex.processes import signals_held, usable_cpus
from permindex.text.documents import DocumentReader, ReadProgress
from permindex.text.inflated_blocks import BLOCKS_AHEAD
from permindex.text.weights import DEFAULT_BUCKET_BITS, DocumentFrequency

__all__ = [
    "Documents",
    "TaskDocuments",
    "assemble_result",
    "fingerprint_tasks",
    "has_work",
    "last_occurrences",
    "raise_failure",
    "run_dedup",
    "run_task",
    "task_documents",
    "write_outputs",
]

_CHUNK_BYTES: Final = 1 << 20  # bytes of JSONL lines per worker task (whole lines)
_CHUNK_FILES: Final = 32  # folder files per worker task (each is read and parsed there)
_IN_FLIGHT: Final = 3  # tasks per worker submitted ahead of the one being collected
_INLINE_CHUNKS: Final = 4  # chunks fingerprinted in this process before starting the pool


# ------------------------------------------------------------------------- parent side


class _Tee(io.RawIOBase):
    """A readable stream that copies what it reads from ``source`` into ``copy``."""

    def __init__(self, source: IO[bytes], copy: IO[bytes]) -> None:
        self._source = source
        self._copy = copy

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        read = getattr(self._source, "read1", self._source.read)  # what is there, no waiting
        data = read(len(buffer))
        n = len(data)
        buffer[:n] = data
        self._copy.write(data)
        return n


@dataclass
class _Collected:
    """The per-document record of a pass, in input order."""

    keys: list[KeyColumn] = field(default_factory=list)  # per task
    fingerprints: list[NDArray[np.uint64]] = field(default_factory=list)
    has_fingerprint: list[NDArray[np.bool_]] = field(default_factory=list)
    tokens: list[NDArray[np.int64]] = field(default_factory=list)
    lengths: list[NDArray[np.int64]] = field(default_factory=list)
    df: DocumentFrequency | None = None
    seconds: float = 0.0  # wall time of the pass
    read_seconds: float = 0.0  # of which waiting for the input (decompressing it, or the child)
    cpu_seconds: dict[str, float] = field(
        default_factory=lambda: {"parse": 0.0, "fingerprint": 0.0}
    )  # CPU time of the workers (and of this process for its inline chunks)
    sets: list[ShingleSets] = field(default_factory=list)  # minhash: of the documents with one
    #: minhash: their LSH band keys ((m, bands) uint64 a task; not the signatures, 3.6x larger
    #: at 128 permutations and threshold 0.8)
    band_keys: list[NDArray[np.uint64]] = field(default_factory=list)

    def documents(self) -> Documents:
        """The documents of the pass in one :class:`Documents`, the per-task parts let go as
        each column is joined (:func:`~permindex.near.columns.join_columns`)."""
        return join_columns(
            self.keys, self.fingerprints, self.has_fingerprint, self.tokens, self.lengths
        )


_Known = tuple[list[str], list[int | None]] | None  # a task's keys and given fingerprints


def _tasks(
    reader: DocumentReader, args: tuple[Any, ...], jobs: int, shared_slots: int = 0
) -> Iterator[tuple[_Known, Callable[..., Any], tuple[Any, ...]]]:
    """The tasks of one pass, in input order: (the keys and given fingerprints when this
    process has them, else None; the worker function; its arguments). A JSONL input is read
    in blocks of whole lines (:meth:`DocumentReader.text_blocks`: here only cut, decompressed
    by a child process when there is a pool), parsed and fingerprinted by the workers; a
    folder's files are listed here, read and parsed by the workers; a Parquet source is read
    here in batches of rows (:meth:`ParquetReader.column_batches`), fingerprinted by the
    workers. ``shared_slots``: a gzip JSONL input's blocks reach the workers through a ring
    file of that many slots (each :func:`work_lines` task must then be followed, once done,
    by ``reader.release_block()``)."""
    if isinstance(reader, ParquetReader):
        for keys_, texts, given in reader.column_batches():
            yield (keys_, given), work_items, (texts, *args)
        return
    if reader.kind == "folder":
        keys: list[str] = []
        items: list[str | Path | None] = []
        for key, path in reader.folder_files():
            keys.append(key)
            items.append(path)
            if len(keys) >= _CHUNK_FILES:
                yield (keys, [None] * len(keys)), work_items, (items, *args)
                keys, items = [], []
        if keys:
            yield (keys, [None] * len(keys)), work_items, (items, *args)
        return
    parser = reader.parser()
    # a pool shares the work: decompressing elsewhere lets this process keep the pool fed
    blocks = reader.text_blocks(
        _CHUNK_BYTES, inflate_elsewhere=jobs > 1, shared_slots=shared_slots if jobs > 1 else 0
    )
    for first, block in blocks:
        yield None, work_lines, (parser, first, block, *args)


@dataclass
class TaskDocuments:
    """The documents of one task of a pass (:func:`task_documents`) and the reasons of the
    folder files it skipped (one per file)."""

    documents: Documents
    skipped: list[str]
    sets: ShingleSets | None = None  # the Jaccard mode: rows with a fingerprint, in order
    signatures: NDArray[np.uint32] | None = None  # and their MinHash signatures


def task_documents(known: _Known, done: Done) -> TaskDocuments:
    """The documents of a finished task, in input order: the given fingerprints applied, the
    skipped folder files left out."""
    if known is None:
        assert done.keys is not None and done.given is not None
        keys, given = done.keys, done.given
    else:
        keys, given = known
    result = done.chunk
    for i, fingerprint in enumerate(given):
        if fingerprint is not None and result.sets is not None:
            raise InvalidArgumentError(
                f"{keys[i]!r} comes as a fingerprint: the Jaccard mode (--method minhash) "
                "needs the texts",
                value=keys[i],
            )
        if fingerprint is not None:  # given in the input: no text to fingerprint
            result.fingerprints[i] = fingerprint
            result.has_fingerprint[i] = True
    read = np.ones(len(keys), dtype=bool)  # folder files: those that are documents
    skipped: list[str] = []
    for i, reason in enumerate(result.skipped):
        if reason is not None:
            skipped.append(reason)
            read[i] = False
    if not read.all():
        keys = [key for key, ok in zip(keys, read.tolist(), strict=True) if ok]
    documents = Documents(
        KeyColumn.of_strings(keys),
        result.fingerprints[read],
        result.has_fingerprint[read],
        result.tokens[read],
        result.lengths[read],
    )
    return TaskDocuments(documents, skipped, result.sets, result.signatures)


def run_task(known: _Known, function: Callable[..., Any], arguments: tuple[Any, ...]) -> Any:
    """Run one task of :func:`fingerprint_tasks` (anywhere: a worker process, a Dask worker):
    its :class:`TaskDocuments`, or the input error it met, picklable, to be raised by
    :func:`raise_failure` in the caller."""
    done = function(*arguments)
    if isinstance(done, Failure):
        return done
    return task_documents(known, done)


def has_work(task: tuple[_Known, Callable[..., Any], tuple[Any, ...]]) -> bool:
    """Whether a task of :func:`fingerprint_tasks` has anything to parse or fingerprint (False
    for a batch whose documents all came with their fingerprint, e.g. a Parquet fingerprint
    column: :func:`run_task` on it is a copy)."""
    _, function, arguments = task
    return function is not work_items or any(item is not None for item in arguments[0])


def raise_failure(done: Any) -> TaskDocuments:
    """``done`` (what :func:`run_task` returned) as documents, or its input error raised."""
    if isinstance(done, Failure):
        raise done.exception()
    assert isinstance(done, TaskDocuments)
    return done


def fingerprint_tasks(
    reader: DocumentReader, options: DedupOptions
) -> Iterator[tuple[_Known, Callable[..., Any], tuple[Any, ...]]]:
    """The tasks of the fingerprint pass of ``reader`` (as :func:`run_dedup` runs them,
    blocks of JSONL lines, Parquet row batches, folder files; plain SimHash with the options'
    vote and extract, or, for ``method="minhash"``, shingle sets and signatures), each to be run
    by :func:`run_task`, in input order."""
    return _tasks(
        reader, _task_args("minhash" if options.method == "minhash" else "plain", options), 2
    )


def _task_args(task: str, options: DedupOptions) -> tuple[Any, ...]:
    """The arguments of a pass's workers (``work_items``, ``work_lines``) after their chunk
    (:func:`_tasks`): ``task`` ("plain", "minhash", "idf" or "df") and the options they need,
    in the order they take them."""
    return (
        task,
        options.shingle_size,
        options.tokenizer,
        options.min_words,
        DEFAULT_BUCKET_BITS,
        options.permutations,
        options.vote,
        options.extract,
    )


def _run_pass(
    reader: DocumentReader,
    task: str,
    options: DedupOptions,
    *,
    progress: bool,
    label: str,
    df: DocumentFrequency | None = None,
    spool: Path | None = None,
) -> _Collected:
    """One pass over the input: fingerprints (``task`` "plain" or "idf") or document
    frequencies ("df"), computed by workers in input order."""
    collected = _Collected()
    if task == "df":
        collected.df = DocumentFrequency(DEFAULT_BUCKET_BITS)
    bar = ReadProgress(reader, label, enabled=progress)
    args = _task_args(task, options)
    initializer: Callable[..., None] | None = None
    initargs: tuple[Any, ...] = ()
    if task == "idf":
        assert df is not None and spool is not None
        np.save(spool, df.counts)
        initializer, initargs = init_idf_worker, (str(spool), df.documents, df.bucket_bits)
    pool: Any = None
    waiting: deque[tuple[_Known, bool, Future[Any]]] = deque()

    def collect(known: _Known, lines: bool, done: Done | Failure) -> None:
        if lines:  # its block has been read: the ring file's slot is free again
            reader.release_block()
        if isinstance(done, Failure):
            raise done.exception()
        read = task_documents(known, done)
        for reason in read.skipped:
            reader.stats.skip(reason)
        result = done.chunk
        collected.cpu_seconds["parse"] += done.parse_seconds
        collected.cpu_seconds["fingerprint"] += done.fingerprint_seconds
        keys = read.documents.keys
        reader.stats.documents += len(keys)
        collected.keys.append(keys if isinstance(keys, KeyColumn) else KeyColumn.of_strings(keys))
        collected.fingerprints.append(read.documents.fingerprints)
        collected.has_fingerprint.append(read.documents.has_fingerprint)
        collected.tokens.append(read.documents.tokens)
        collected.lengths.append(read.documents.lengths)
        if read.sets is not None and read.signatures is not None:
            collected.sets.append(read.sets)  # rows with has_fingerprint, in order
            shape = choose_bands(options.threshold, options.permutations)
            collected.band_keys.append(band_keys(read.signatures, shape))
        if collected.df is not None and result.buckets is not None:
            assert result.bucket_counts is not None
            collected.df.add_counts(result.buckets, result.bucket_counts, documents=result.counted)
        bar.advance(reader.position_bytes(), len(keys))

    inline = _INLINE_CHUNKS  # a small input is done before a pool would have started
    started = time.monotonic()
    tasks: Iterator[tuple[_Known, Callable[..., Any], tuple[Any, ...]]] | None = None
    try:
        if initializer is not None:
            initializer(*initargs)  # chunks done here: set this process up as a worker
        slots = BLOCKS_AHEAD + (_IN_FLIGHT + 1) * options.jobs + 4  # > blocks held at once
        tasks = _tasks(reader, args, options.jobs, slots)
        while True:
            reading = time.monotonic()
            next_task = next(tasks, None)
            collected.read_seconds += time.monotonic() - reading
            if next_task is None:
                break
            known, function, arguments = next_task
            lines = function is work_lines
            if pool is None and (options.jobs == 1 or inline > 0):
                inline -= 1
                collect(known, lines, function(*arguments))
                continue
            if pool is None:
                pool = worker_pool(options.jobs, initializer, initargs)
            with signals_held():  # a worker it starts is known to the pool, or not started
                future = pool.submit(function, *arguments)
            waiting.append((known, lines, future))
            while len(waiting) > _IN_FLIGHT * options.jobs:
                done_known, done_lines, future = waiting.popleft()
                collect(done_known, done_lines, future.result())
        while waiting:
            done_known, done_lines, future = waiting.popleft()
            collect(done_known, done_lines, future.result())
    finally:
        bar.close()
        reset_worker()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        if tasks is not None and hasattr(tasks, "close"):
            tasks.close()  # stops a decompressing child
        if not isinstance(reader, ParquetReader):
            reader.close_blocks()  # removes its ring file
    collected.seconds = time.monotonic() - started
    return collected


def run_dedup(
    options: DedupOptions,
    *,
    stdin: IO[bytes] | None = None,
    progress: bool = False,
    workdir: Path | None = None,
) -> DedupResult:
    """Read, fingerprint and join (steps 1 to 3 below). ``stdin`` is read for
    source ``"-"`` (default ``sys.stdin.buffer``); ``workdir`` holds the temporary files (the
    copy of standard input, the IDF table) and must outlive the result when the input is
    standard input, for :func:`write_outputs` to read example texts again.

    Raises:
        InvalidArgumentError: a bad option, a missing input, a malformed JSONL line (naming it).

    Steps, each bounded in memory so that 10^6 documents fit:

    1. **Read** the input as ``ingest`` does (:func:`permindex.io.parquet.open_documents`:
       JSONL, gzip or not, a folder, Parquet, or ``-`` for JSONL on standard input; Parquet in
       batches of rows, only the two columns needed), streaming, in blocks
       of whole lines of about 1 MiB (:meth:`~permindex.text.documents.DocumentReader.text_blocks`;
       with a pool, a gzip file is decompressed by a child process, so this process only cuts
       blocks and feeds the workers). Only each document's key, text length and fingerprint are
       kept (O(1) memory per document); texts are dropped as soon as they are fingerprinted.
       Standard input is copied to a temporary file as it is read, because a second pass (IDF
       weights, the report's examples) reads it again.
    2. **Parse and fingerprint** in parallel: the blocks (32 files of a folder) go to a pool of
       worker processes (:class:`concurrent.futures.ProcessPoolExecutor`, ``jobs`` of them,
       started by forkserver; three blocks per worker in flight, results taken in input order),
       which parse the lines (:meth:`~permindex.text.documents.JsonlParser.block_columns`: the
       documents and errors of reading line by line; a malformed line's error is raised here
       when its block's turn comes, so the first one in input order) and fingerprint the texts.
       The first 4 blocks are done in this process, so that a small input does not pay for
       starting the pool. For a folder the workers also read the files and reduce HTML to its
       visible text (the costly part). With ``weights="idf"`` a first pass counts the document
       frequency of shingles (:mod:`permindex.text.weights`) and the second computes weighted
       SimHash.
    3. **Join**: every pair within k (:class:`permindex.index.join.clusters.NearDuplicates`, exact:
       the self-join on the distinct fingerprints, so documents that share a fingerprint cost no
       candidate), clusters, flags, exact-duplicate groups, and the keep/drop decision per
       cluster.
    4. **Write** the report folder (:func:`write_outputs`); the command prints the pairs on stdout.
       Pairs are written as they are streamed in key order from the join
       (:meth:`~permindex.index.join.clusters.NearDuplicates.pair_chunks`), one chunk in memory at a
       time, however many documents share a fingerprint.

    A key that occurs more than once counts once, with its last occurrence that has a fingerprint
    (as ``ingest`` would leave it in a server); the repeats are counted. A text with fewer words
    than a shingle or than ``min_words`` is *too short*: it gets no fingerprint, takes no part in
    pairs, and is listed in ``too_short.tsv``.
    """
    options.check()
    started = time.monotonic()
    with ExitStack() as stack:
        if workdir is None:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="permindex-")))
        fields: dict[str, Any] = {
            "id_field": options.id_field,
            "text_field": options.text_field,
            "fingerprint_field": options.fingerprint_field,
        }
        spool: Path | None = None
        if options.source == "-":
            spool = workdir / "stdin.jsonl"
            copy = stack.enter_context(open(spool, "wb"))
            tee = io.BufferedReader(_Tee(stdin if stdin is not None else sys.stdin.buffer, copy))
            reader = open_documents("-", stdin=tee, **fields)
        else:
            reader = open_documents(options.source, **fields)
        if options.weights == "idf":
            counted = _run_pass(
                reader, "df", options, progress=progress, label="document frequency"
            )
            if spool is not None:
                copy.close()
            again = open_documents(spool if spool is not None else options.source, **fields)
            collected = _run_pass(
                again,
                "idf",
                options,
                progress=progress,
                label="fingerprint",
                df=counted.df,
                spool=workdir / "df.npy",
            )
            stats = again.stats
        else:
            task = "minhash" if options.method == "minhash" else "plain"
            label = "shingle sets" if task == "minhash" else "fingerprint"
            collected = _run_pass(reader, task, options, progress=progress, label=label)
            stats = reader.stats
        if spool is not None:
            copy.close()
        passes = [collected] if options.weights != "idf" else [counted, collected]
        read_seconds = sum(p.read_seconds for p in passes)
        seconds = {
            "read": read_seconds,
            "fingerprint": time.monotonic() - started - read_seconds,
        }
        cpu_seconds = {
            what: sum(p.cpu_seconds[what] for p in passes) for what in ("parse", "fingerprint")
        }

        documents = collected.documents()
        has = documents.has_fingerprint
    return assemble_result(
        options,
        documents,
        seconds=seconds,
        cpu_seconds=cpu_seconds,
        skipped_by_reason=dict(sorted(stats.skipped_by_reason.items())),
        source_kind=reader.kind,
        spool=spool,
        near_of=(
            (lambda kept, ordinals: _jaccard(kept, has, ordinals, collected, options))
            if options.method == "minhash"
            else None
        ),
    )


def assemble_result(
    options: DedupOptions,
    documents: Documents,
    *,
    seconds: dict[str, float],
    joined: Callable[[NDArray[np.int64]], PairArrays] | None = None,
    near_of: Callable[[Sequence[str], NDArray[np.int64]], NearDuplicates] | None = None,
    **fields: Any,
) -> DedupResult:
    """Step 3 of :func:`run_dedup` on the documents read: the join (by
    :class:`~permindex.index.join.clusters.NearDuplicates`, or, given ``joined``, from the pairs it
    returns for the input positions of :func:`last_occurrences`: pairs of those positions with
    distinct fingerprints within k, each once, e.g. computed on a cluster; given ``near_of``,
    the join it returns for the kept keys and their input positions: the Jaccard mode), the
    clusters and the keep rule. ``seconds`` gets "join" and "cluster"; ``fields`` are the other
    fields of :class:`DedupResult`."""
    joined_started = time.monotonic()
    keys = documents.keys
    fps, has = documents.fingerprints, documents.has_fingerprint
    too_short = [(keys[i], int(documents.tokens[i])) for i in np.flatnonzero(~has).tolist()]
    ordinals = last_occurrences(documents)
    repeated = int(np.count_nonzero(has)) - int(ordinals.size)
    design = design_for(options.k)
    kept_keys: Sequence[str] = (
        keys.take(ordinals) if isinstance(keys, KeyColumn) else [keys[i] for i in ordinals.tolist()]
    )
    near: NearDuplicates
    if near_of is not None:
        near = near_of(kept_keys, ordinals)
    else:
        given = None
        if joined is not None:
            a, b, d = joined(ordinals)
            given = PairArrays(np.searchsorted(ordinals, a), np.searchsorted(ordinals, b), d)
        kept_fps = fps if kept_keys is keys else fps[ordinals]  # every document: no copy
        near = NearDuplicates(kept_keys, kept_fps, options.k, design=design, joined=given)
    clustered_started = time.monotonic()
    seconds["join"] = clustered_started - joined_started
    lengths = documents.lengths[ordinals]
    kept = keep_per_cluster(
        near.cluster_positions(),
        options.keep,
        order=ordinals,
        lengths=lengths,
        rank=near.key_rank,
    )
    seconds["cluster"] = time.monotonic() - clustered_started
    source = fields.pop("source_kind", "jsonl")
    return DedupResult(
        options=options,
        near=near,
        ordinals=ordinals,
        lengths=lengths,
        kept=kept,
        documents=len(keys),
        too_short=too_short,
        skipped_by_reason=fields.pop("skipped_by_reason", {}),
        repeated_keys=repeated,
        seconds=seconds,
        source_kind=source,
        reread_source=None if options.source == "-" else options.source,
        design=design.as_tuple(),
        **fields,
    )


def _jaccard(
    keys: Sequence[str],
    has: NDArray[np.bool_],
    ordinals: NDArray[np.int64],
    collected: _Collected,
    options: DedupOptions,
) -> JaccardDuplicates:
    """The Jaccard mode's join (:class:`permindex.near.jaccard.JaccardDuplicates`) of the
    documents at ``ordinals``, from the shingle sets and band keys of a "minhash" pass (held
    for the documents with ``has``, in input order)."""
    row = np.cumsum(has) - 1  # input position -> row among the documents with a set
    chosen = row[ordinals].astype(np.int64)
    shape = choose_bands(options.threshold, options.permutations)
    sets = ShingleSets.concat(collected.sets)
    collected.sets.clear()
    parts = collected.band_keys or [np.zeros((0, shape.bands), dtype=np.uint64)]
    keys_of_bands = np.concatenate(parts)
    collected.band_keys.clear()
    if chosen.size != len(sets):  # repeated keys: only the last occurrence
        sets = sets.take(chosen)
        keys_of_bands = keys_of_bands[chosen]
    return JaccardDuplicates(keys, sets, keys_of_bands, options.threshold, shape)


def default_jobs() -> int:
    """Worker processes by default: the CPUs this process may run on."""
    return usable_cpus()


def summary_line(summary: dict[str, Any], seconds: float) -> str:
    """The one-line summary ``permindex dedup`` prints on stderr."""
    skipped = summary["skipped"]
    reasons = ""
    if skipped:
        reasons = (
            " (" + ", ".join(f"{n} {r}" for r, n in summary["skipped_by_reason"].items()) + ")"
        )
    repeated = summary["repeated_keys"]
    repeated = f", {repeated} repeated key{'' if repeated == 1 else 's'}" if repeated else ""
    verified = ""
    if "candidates_verified" in summary:
        verifications = summary["candidates_verified"]
        verified = f" ({verifications} candidate{'' if verifications == 1 else 's'} verified)"
        if summary["recall_at_threshold"] < 1.0 - MISS_AT_THRESHOLD:
            verified += (
                f" [warning: {summary['permutations']} permutations find only "
                f"{summary['recall_at_threshold']:.0%} of the pairs at exactly the threshold "
                f"({summary['bands']} bands x {summary['rows']} rows): raise --permutations]"
            )

    def n(name: str, noun: str) -> str:
        return f"{summary[name]} {noun}{'' if summary[name] == 1 else 's'}"

    return (
        f"{n('documents', 'document')} in {seconds:.1f} s: {summary['too_short']} too short, "
        f"{skipped} skipped{reasons}{repeated}; {n('pairs', 'pair')} {summary['within']}"
        f"{verified}, {n('clusters', 'cluster')} (largest "
        f"{summary['largest_cluster']}), {summary['flagged']} flagged, "
        f"{n('exact_duplicate_groups', 'exact-duplicate group')}; keep "
        f"{summary['kept']}, drop {summary['dropped']} (--keep {summary['keep']})"
    )
