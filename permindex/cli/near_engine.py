"""The engine flags of ``permindex dedup`` (``--engine``, ``--workers``, ``--scheduler``,
``--worker-memory``, ``--against``): their registration (:func:`add_engine_arguments`), their
checks (:func:`check_engine_arguments`, usage errors before any work) and the run on the chosen
engine (:func:`run_engine`). The Dask engine is :mod:`permindex.distributed.engine`; without
dask installed, ``--engine dask`` says what to install (exit 2), no traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

from permindex.cli.args import positive
from permindex.cli.output import CommandError, err

__all__ = ["DASK_RUNS", "ENGINES", "add_engine_arguments", "check_engine_arguments", "run_engine"]

#: The values of ``--engine``.
ENGINES: Final = ("local", "dask")
#: Runs of a ``--engine dask`` dedup, at most, when workers are lost with input only they held.
DASK_RUNS: Final = 3
_DASK_EXTRA: Final = "pip install '.[dask]' in the permindex clone"


def add_engine_arguments(dedup: argparse.ArgumentParser) -> None:
    """Register the engine flags on the ``dedup`` parser."""
    dedup.add_argument(
        "--engine",
        choices=ENGINES,
        default="local",
        help="local (default): worker processes on this machine (--jobs); dask: fingerprint\n"
        "(or shingle) and join on a Dask cluster (pip install '.[dask]'), either --method;\n"
        "same output",
    )
    where = dedup.add_mutually_exclusive_group()
    where.add_argument(
        "--workers",
        type=positive,
        metavar="N",
        help="--engine dask: start a local cluster of N worker processes, one thread each\n"
        "(default 2)",
    )
    where.add_argument(
        "--scheduler",
        metavar="ADDRESS",
        help="--engine dask: join the cluster whose scheduler is at ADDRESS (tcp://host:8786)",
    )
    dedup.add_argument(
        "--worker-memory",
        metavar="SIZE",
        help="--engine dask with --workers: memory limit of each worker (e.g. 4GiB)",
    )
    dedup.add_argument(
        "--against",
        metavar="CORPUS",
        help="batch query: print every pair new_key<TAB>corpus_key<TAB>distance within k\n"
        "(--method minhash: new_key<TAB>corpus_key<TAB>jaccard, J >= --threshold, exact)\n"
        "between INPUT (the new batch) and CORPUS (read as INPUT is), sorted; the report\n"
        "folder gets INPUT's own report and new_unmatched.tsv (INPUT's documents with no\n"
        "match in CORPUS: key<TAB>fingerprint, or the shingle set's digest)",
    )


def _usage(message: str) -> CommandError:
    return CommandError(message, "usage")


def check_engine_arguments(args: argparse.Namespace) -> None:
    """Refuse what the engine flags cannot mean together, before any work.

    Raises:
        CommandError: exit 2 (usage): ``--against -``; ``--jobs``, ``-`` or ``--weights idf``
            with ``--engine dask``; a Dask flag with ``--engine local``; ``--worker-memory``
            with ``--scheduler`` or not a size; dask not installed (the message says
            ``pip install '.[dask]'``).
    """
    dask_flags = [
        name
        for name, value in (
            ("--workers", args.workers),
            ("--scheduler", args.scheduler),
            ("--worker-memory", args.worker_memory),
        )
        if value is not None
    ]
    if args.against == "-":
        raise _usage("--against reads a file or folder, not -")
    if args.engine == "local":
        if dask_flags:
            raise _usage(f"{dask_flags[0]} needs --engine dask")
        return
    if args.jobs is not None:
        raise _usage(
            "--jobs is the local engine's processes; with --engine dask use --workers N "
            "or --scheduler ADDRESS"
        )
    if args.input == "-":
        raise _usage(
            "--engine dask reads a file or folder, not standard input (-): save it to a file, "
            "or use the local engine"
        )
    if args.weights != "none":
        raise _usage(
            f"--engine dask weighs every shingle alike (--weights none), not --weights "
            f"{args.weights}: use the local engine for IDF weights"
        )
    if args.worker_memory is not None and args.scheduler is not None:
        raise _usage("--worker-memory applies to the cluster --workers starts, not to --scheduler")
    try:
        importlib.import_module("dask.dataframe")
        importlib.import_module("distributed")
        importlib.import_module("pyarrow")
    except ImportError:
        raise _usage(f"--engine dask needs Dask: {_DASK_EXTRA}") from None
    if args.worker_memory is not None:
        from dask.utils import parse_bytes

        try:
            parse_bytes(args.worker_memory)
        except (ValueError, TypeError):
            raise _usage(
                f"--worker-memory {args.worker_memory!r} is not a size (e.g. 4GiB, 500MB)"
            ) from None


@contextlib.contextmanager
def _cluster(args: argparse.Namespace) -> Iterator[Any]:
    """The Dask client of ``--engine dask`` (None for the local engine), closed on exit; the
    cluster's log lines below ERROR are not shown (stderr carries the summary).

    Raises:
        CommandError: exit 3 (unavailable): ``--scheduler`` cannot be reached.
    """
    if args.engine != "dask":
        yield None
        return
    import logging

    from permindex.distributed.engine import dask_client

    for name in ("distributed", "distributed.shuffle"):
        logging.getLogger(name).setLevel(logging.ERROR)
    with contextlib.ExitStack() as stack:
        try:
            client = stack.enter_context(
                dask_client(args.workers, args.scheduler, args.worker_memory)
            )
        except OSError as error:  # no scheduler there, or it did not answer in time
            raise CommandError(
                f"cannot reach the Dask scheduler at {args.scheduler}: {error}", "unavailable"
            ) from None
        yield client


def run_engine(
    args: argparse.Namespace, options: Any, *, progress: bool, workdir: Path
) -> tuple[Any, list[tuple[str, str, int]] | None]:
    """Run the dedup of ``options`` on the engine of ``args``, and with ``--against`` the
    batch query: (the :class:`~permindex.near.result.DedupResult`, the against pairs or
    None).

    On Dask, the input's lines (or rows) are read here and sent to one worker each, once
    (:meth:`distributed.Client.scatter`: this process keeps no copy), so a worker lost
    mid-run takes with it data the cluster cannot make again: the run is then started again
    from the input, with a line on stderr, up to :data:`DASK_RUNS` runs in all.

    Raises:
        CommandError: exit 3 (unavailable): workers were lost in each of the
            :data:`DASK_RUNS` runs.
    """
    from concurrent.futures import CancelledError

    with _cluster(args) as client:
        if client is None:
            return _run(args, options, None, progress=progress, workdir=workdir)
        from distributed.comm.core import CommClosedError

        for run in range(1, DASK_RUNS + 1):
            try:
                return _run(args, options, client, progress=progress, workdir=workdir)
            # the data of a lost worker, needed and gone; or lines sent to a worker just lost
            except (CancelledError, CommClosedError) as error:
                if run == DASK_RUNS:
                    raise CommandError(
                        f"Dask workers were lost in each of {DASK_RUNS} runs, with input only "
                        f"they held ({error})",
                        "unavailable",
                    ) from None
                err(
                    f"permindex dedup: a Dask worker was lost with input only it held: "
                    f"starting again from the input (run {run + 1} of at most {DASK_RUNS})"
                )
    raise AssertionError("unreachable")


def _run(
    args: argparse.Namespace, options: Any, client: Any, *, progress: bool, workdir: Path
) -> tuple[Any, list[tuple[str, str, int]] | None]:
    """One run of :func:`run_engine` on ``client`` (None: the local engine)."""
    from permindex.near.dedup import run_dedup

    jaccard = getattr(args, "method", "simhash") == "minhash"
    held = None
    if client is None:
        result = run_dedup(options, progress=progress, workdir=workdir)
    else:
        from permindex.distributed.engine import run_dedup_dask
        from permindex.distributed.jaccard import HeldSets

        # the Jaccard --against joins the new batch's sets, left on the workers
        held = HeldSets() if jaccard and args.against is not None else None
        result = run_dedup_dask(options, client, progress=progress, keep_sets=held)
    if args.against is None:
        return result, None
    if client is None:
        from permindex.near.against import against_pairs

        return result, against_pairs(result, args.against)
    if held is not None:
        from permindex.distributed.against import jaccard_against_pairs_dask

        pairs = jaccard_against_pairs_dask(result, args.against, client, held, progress=progress)
        return result, pairs
    from permindex.distributed.against import against_pairs_dask

    return result, against_pairs_dask(result, args.against, client, progress=progress)
