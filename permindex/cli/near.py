"""The near-duplicate commands of ``permindex``: ``clusters`` and ``flags`` (client commands,
answered by the server through :class:`permindex.Client`) and ``dedup`` (offline, no server).
Registered by :func:`permindex.cli.build_parser` through :func:`add_commands`; errors and exit
codes are handled by :func:`permindex.cli.main` like every other command's.

Output formats (stdout, UTF-8, no header):

- ``clusters``: ``cluster<TAB>key`` per key, cluster 1 the largest (then by smallest key), keys of
  a cluster sorted; ``clusters --exact``: ``group<TAB>fingerprint<TAB>key`` per key of each group
  of equal fingerprints;
- ``flags``: ``key<TAB>nearest_key<TAB>distance<TAB>neighbors`` per key that has a near-duplicate,
  sorted by key;
- ``dedup``: the pairs only, exactly as ``pairs`` prints them; everything else goes to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from permindex.cli.args import (
    CommandFactory,
    add_field_arguments,
    min_words_value,
    non_negative,
    positive,
    shingle_size_value,
    with_field_hint,
)
from permindex.cli.connection import connect
from permindex.cli.output import (
    CommandError,
    compile_notice,
    err,
    nothing_read_warning,
    out,
)
from permindex.errors import EXIT_CODES, InvalidArgumentError
from permindex.text.documents import MalformedInputError, format_fingerprint, tsv_field

__all__ = ["add_commands"]


def _refuse_k(args: argparse.Namespace, jaccard: bool) -> None:
    """--k on a Jaccard collection: refused before anything is asked (exit 2), as ``pairs``
    refuses it."""
    if jaccard and args.k is not None:
        raise CommandError(
            f"--k is a SimHash option: collection {args.collection} is a Jaccard collection "
            "(method minhash), whose near-duplicates are those at Jaccard >= its threshold",
            "usage",
        )


def _cmd_clusters(args: argparse.Namespace) -> int:
    # TSV lines are written as the server's messages arrive (no deadline, nothing held but one
    # group); --json needs the whole answer first.
    with connect(args.address, args.connection) as client:
        if args.k is not None and args.collection not in (None, "default"):
            _refuse_k(args, client.describe_collection(args.collection).method == "minhash")
        if args.json:
            if args.exact:
                rows: list[dict[str, object]] = [
                    {
                        "group": n,
                        "fingerprint": format_fingerprint(group.fingerprint),
                        "size": len(group.keys),
                        "keys": group.keys,
                    }
                    for n, group in enumerate(client.iter_exact_duplicates(), start=1)
                ]
            else:
                rows = [
                    {"cluster": n, "size": len(keys), "keys": keys}
                    for n, keys in enumerate(client.iter_clusters(args.k), start=1)
                ]
            out(json.dumps(rows, ensure_ascii=False) + "\n")
        elif args.exact:
            out(
                f"{n}\t{format_fingerprint(group.fingerprint)}\t{tsv_field(key)}\n"
                for n, group in enumerate(client.iter_exact_duplicates(), start=1)
                for key in group.keys
            )
        else:
            out(
                f"{n}\t{tsv_field(key)}\n"
                for n, keys in enumerate(client.iter_clusters(args.k), start=1)
                for key in keys
            )
    return EXIT_CODES["ok"]


def _cmd_flags(args: argparse.Namespace) -> int:
    from permindex.near.jaccard import SCALE, jaccard_text

    with connect(args.address, args.connection) as client:
        collection = getattr(args, "collection", None) or "default"
        jaccard = client.describe_collection(collection).method == "minhash"
        _refuse_k(args, jaccard)
        flags = client.iter_flags(args.k)  # (key, nearest, distance, neighbors), by key
        # A Jaccard collection's flag carries its Jaccard, in the client as the offline
        # mode's distance units round((1 - J) * 10^4): printed back as J, as flags.tsv has it
        if args.json:
            measure = "jaccard" if jaccard else "distance"
            rows = [
                {
                    "key": k,
                    "nearest_key": n,
                    measure: round(1.0 - d / SCALE, 4) if jaccard else d,
                    "neighbors": c,
                }
                for k, n, d, c in flags
            ]
            out(json.dumps(rows, ensure_ascii=False) + "\n")
        elif jaccard:
            out(f"{tsv_field(k)}\t{tsv_field(n)}\t{jaccard_text(d)}\t{c}\n" for k, n, d, c in flags)
        else:  # written as the server's messages arrive
            out(f"{tsv_field(k)}\t{tsv_field(n)}\t{d}\t{c}\n" for k, n, d, c in flags)
    return EXIT_CODES["ok"]


def _check_out_dir(out_dir: Path) -> list[Path]:
    """Refuse an ``--out`` that cannot become a folder of the report (a file, a path under a
    file, a place that cannot be written), before any work is done. Returns the folders it
    created (``out_dir`` and any missing parents, deepest first), for
    :func:`_remove_if_empty` when the run fails.

    Raises:
        CommandError: exit 4, naming the folder and the reason.
    """
    created = [folder for folder in (out_dir, *out_dir.parents) if not folder.exists()]
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".permindex-write-check"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as error:
        raise CommandError(
            f"--out {out_dir}: cannot write the report there: {error.strerror or error}",
            "invalid",
        ) from None
    return created


def _remove_if_empty(folders: list[Path]) -> None:
    """Remove each of ``folders`` (deepest first) that is still empty: a failed or stopped
    run leaves no empty report folder it made behind; a folder holding anything stays."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            return


def _cmd_dedup(args: argparse.Namespace) -> int:
    from permindex.cli.near_engine import check_engine_arguments, run_engine
    from permindex.cli.signals import ignore_stop_signals, raise_if_stopped
    from permindex.near.dedup import default_jobs, summary_line, write_outputs
    from permindex.near.result import DedupOptions

    check_engine_arguments(args)  # usage errors first (exit 2)
    started = time.monotonic()
    options = DedupOptions(
        source=args.input,
        out_dir=Path(args.out),
        k=3 if args.k is None else args.k,
        keep=args.keep,
        jobs=args.jobs or default_jobs(),
        weights=args.weights,
        tokenizer=args.tokenizer,
        shingle_size=args.shingle_size,
        min_words=args.min_words,
        id_field=args.id_field,
        text_field=args.text_field,
        fingerprint_field=args.fingerprint_field,
        examples=args.examples,
        **_jaccard_options(args),
    )
    created = _check_out_dir(options.out_dir)  # before any work: exit 4 naming it
    progress = not args.no_progress and sys.stderr.isatty()
    with tempfile.TemporaryDirectory(prefix="permindex-dedup-") as work:
        try:
            # a notice if this run compiles the kernels (the first after an install)
            with compile_notice("dedup", "fingerprint and join"):
                result, against = run_engine(args, options, progress=progress, workdir=Path(work))
            raise_if_stopped()  # no report for a run asked to stop (its exception swallowed)
        except MalformedInputError as error:
            _remove_if_empty(created)  # bad input: no empty report folder
            raise with_field_hint(
                error,
                id_field=args.id_field,
                text_field=args.text_field,
                fingerprint_field=args.fingerprint_field,
            ) from None
        except BaseException:
            _remove_if_empty(created)  # bad input, a stop signal: no empty report folder
            raise
        try:
            summary = write_outputs(result)
            from permindex.near.against import UNMATCHED_FILE, unmatched, write_unmatched

            if against is not None:
                write_unmatched(result, unmatched(result, against), options.out_dir)
            else:  # not one of this run's files: an earlier --against run's is removed
                (options.out_dir / UNMATCHED_FILE).unlink(missing_ok=True)
        except OSError as error:
            raise CommandError(
                f"--out {options.out_dir}: cannot write the report: {error.strerror or error}",
                "invalid",
            ) from None
    if against is None:  # stdout carries pairs.tsv, written above: copied, not made again
        with open(options.out_dir / "pairs.tsv", encoding="utf-8", newline="") as pairs:
            out(iter(lambda: pairs.read(1 << 20), ""))
    else:
        from permindex.near.outputs import measure_of

        _, m = measure_of(result)
        out(f"{tsv_field(a)}\t{tsv_field(b)}\t{m(d)}\n" for a, b, d in against)
    seconds = time.monotonic() - started
    raise_if_stopped()  # the last checkpoint: from here on the run is done, signals ignored
    ignore_stop_signals()
    if against is not None:
        err(f"permindex dedup: {len(against)} pairs with {args.against}")
    err(f"permindex dedup: {summary_line(summary, seconds)}; report in {options.out_dir}/")
    warning = nothing_read_warning(
        "dedup",
        args.input,
        documents=summary["documents"],
        too_short=summary["too_short"],
        skipped=summary["skipped"],
        kept=summary["documents"] - summary["too_short"],
        verb="fingerprinted",
    )
    if warning is not None:
        err(warning)
    return EXIT_CODES["ok"]


def add_commands(command: CommandFactory) -> None:
    """Register ``clusters``, ``flags`` and ``dedup`` with the subcommand factory of
    :func:`permindex.cli.build_parser`."""
    from permindex.cli.near_engine import add_engine_arguments
    from permindex.index.join.clusters import KEEP_RULES
    from permindex.near.result import MAX_K, WEIGHTS
    from permindex.text.fingerprint import TOKENIZERS

    clusters = command(
        "clusters",
        "list the clusters of near-duplicates in the server",
        "Print the clusters within k: connected components of the graph whose edges are the\n"
        "pairs of `pairs`, one `cluster<TAB>key` line per key; cluster 1 is the largest (ties:\n"
        "smallest key first), keys sorted. Near-duplication is not transitive: a cluster can\n"
        "chain, two of its keys being more than k bits apart.\n"
        "--exact prints the groups of keys that share one fingerprint instead, one\n"
        "`group<TAB>fingerprint<TAB>key` line per key.\n"
        "A Jaccard collection (collections create --method minhash): the clusters of the\n"
        "pairs at Jaccard >= its threshold; --k is refused there (exit 2); --exact groups the\n"
        "keys of identical sketches, its fingerprint column the sketch's digest (XXH3-64 of\n"
        "its sorted values), which no SimHash fingerprint is.",
    )
    which = clusters.add_mutually_exclusive_group()
    which.add_argument(
        "--k", type=non_negative, metavar="N", help="largest distance (default: the server's k)"
    )
    which.add_argument("--exact", action="store_true", help="groups of equal fingerprints")
    clusters.add_argument(
        "--json",
        action="store_true",
        help='a JSON array of {"cluster", "size", "keys"} ({"group", "fingerprint", "size",\n'
        '"keys"} with --exact)',
    )
    clusters.set_defaults(func=_cmd_clusters)

    flags = command(
        "flags",
        "list every key that has a near-duplicate in the server",
        "Print every stored key with at least one other key within k, sorted by key, one\n"
        "`key<TAB>nearest_key<TAB>distance<TAB>neighbors` line each: its nearest other key\n"
        "(smallest distance, then smallest key), their distance in bits, and how many keys are\n"
        "within k. In a Jaccard collection (--method minhash) the third field is their Jaccard\n"
        "similarity to 4 decimals (the highest, then smallest key) and the fourth the keys at\n"
        "Jaccard >= its threshold, as `dedup --method minhash` writes flags.tsv; --json gives\n"
        "a `jaccard` field instead of `distance`; --k is refused there (exit 2).",
    )
    flags.add_argument(
        "--k", type=non_negative, metavar="N", help="largest distance (default: the server's k)"
    )
    flags.add_argument(
        "--json",
        action="store_true",
        help='a JSON array of {"key", "nearest_key", "distance", "neighbors"}',
    )
    flags.set_defaults(func=_cmd_flags)

    dedup = command(
        "dedup",
        "find the near-duplicates of a collection, offline (no server)",
        "Fingerprint every document of INPUT in parallel and find every pair within k.\n"
        "INPUT is what `ingest` reads: a JSONL file (.gz or not), a folder (HTML reduced to its\n"
        "visible text), a Parquet file or dataset folder (columns id and text or fingerprint;\n"
        "needs pip install '.[parquet]'), or - for JSONL on standard input.\n"
        "Standard output: the pairs only, `key_a<TAB>key_b<TAB>distance`, key_a < key_b, sorted,\n"
        "no header (as `permindex pairs`). The report folder (--out) gets pairs, clusters, flags\n"
        "and exact-duplicate groups as TSV and JSON, keep_drop.tsv and drop.txt (one key kept\n"
        "per cluster by --keep, the others to drop), too_short.tsv, summary.json and a\n"
        "self-contained report.html; with pyarrow installed also pairs, clusters,\n"
        "exact_duplicates and keep_drop as .parquet. A summary line goes to stderr, with a\n"
        "progress bar when stderr is a terminal.\n"
        "--keep: first = the document read first (what a crawler checking each page against\n"
        "the earlier ones keeps); longest = the longest visible text, ties to the first;\n"
        "smallest-key = the smallest key in code point order.",
        parents=False,
    )
    dedup.add_argument(
        "input",
        metavar="INPUT",
        help="JSONL file (.gz or not), folder, Parquet file or dataset, or -",
    )
    dedup.add_argument(
        "--out",
        default="permindex-report",
        metavar="DIR",
        help="report folder, created if missing (and removed again, if still empty, when "
        "the run fails or is stopped); its files are overwritten (default ./permindex-report)",
    )

    def k_value(text: str) -> int:
        value = non_negative(text)
        if value > MAX_K:
            raise argparse.ArgumentTypeError(f"must be at most {MAX_K}, got {value}")
        return value

    dedup.add_argument(
        "--k",
        type=k_value,
        metavar="N",
        help=f"largest Hamming distance of a near-duplicate, bits (default 3, at most {MAX_K};\n"
        "simhash only)",
    )
    dedup.add_argument(
        "--keep", choices=KEEP_RULES, default="first", help="which document of a cluster to keep"
    )
    dedup.add_argument(
        "--jobs",
        type=positive,
        metavar="N",
        help="worker processes that fingerprint (default: one per CPU)",
    )
    dedup.add_argument(
        "--weights",
        choices=WEIGHTS,
        default="none",
        help="none: plain SimHash (the default fingerprint); idf: each shingle votes with its\n"
        "inverse document frequency over INPUT (two passes over the input)",
    )
    dedup.add_argument(
        "--tokenizer",
        choices=TOKENIZERS,
        default="words",
        help="words (default); chars: character shingles, for text without spaces (Chinese,\n"
        "Japanese, Thai); auto: chars for a document mostly in such scripts",
    )
    dedup.add_argument(
        "--shingle-size",
        type=shingle_size_value,
        default=3,
        metavar="N",
        help="tokens per shingle (3)",
    )
    dedup.add_argument(
        "--min-words",
        type=min_words_value,
        default=0,
        metavar="N",
        help="texts with fewer tokens are too short: no fingerprint, listed in too_short.tsv\n"
        "(default 0: only texts shorter than a shingle; the article behind SimHash\n"
        "deduplication uses 20)",
    )
    add_field_arguments(dedup)
    dedup.add_argument(
        "--examples",
        type=non_negative,
        default=3,
        metavar="N",
        help="example pairs per distance in report.html (default 3)",
    )
    dedup.add_argument("--no-progress", action="store_true", help="no progress bar")
    _add_jaccard_arguments(dedup)
    add_engine_arguments(dedup)
    dedup.set_defaults(func=_cmd_dedup)


def _add_jaccard_arguments(dedup: argparse.ArgumentParser) -> None:
    """The options of the Jaccard mode of ``dedup`` (``--method minhash``), in one group, and
    ``--vote``."""
    from permindex.near.minhash import DEFAULT_PERMUTATIONS, MAX_PERMUTATIONS
    from permindex.near.result import METHODS
    from permindex.text.extract import EXTRACTS, MIN_MAIN_WORDS
    from permindex.text.fingerprint import VOTES

    def threshold(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not 0.0 < value <= 1.0:
            raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
        return value

    def permutations(text: str) -> int:
        value = positive(text)
        if value > MAX_PERMUTATIONS:
            raise argparse.ArgumentTypeError(f"must be at most {MAX_PERMUTATIONS}, got {value}")
        return value

    group = dedup.add_argument_group(
        "Jaccard mode",
        "--method minhash: pairs whose word-shingle sets (the fingerprint's tokenization,\n"
        "--tokenizer and --shingle-size apply) have Jaccard similarity >= --threshold.\n"
        "Candidates come from MinHash-LSH bands chosen from the threshold; each is verified by\n"
        "the exact Jaccard of the two sets, so every pair printed has J >= the threshold.\n"
        "Standard output: `key_a<TAB>key_b<TAB>jaccard` (4 decimals), sorted.",
    )
    group.add_argument(
        "--method",
        choices=METHODS,
        default="simhash",
        help="simhash: pairs within --k bits (default); minhash: Jaccard >= --threshold",
    )
    group.add_argument(
        "--threshold",
        type=threshold,
        metavar="J",
        help="least Jaccard similarity of a pair, in (0, 1] (default 0.8; minhash only)",
    )
    group.add_argument(
        "--permutations",
        type=permutations,
        metavar="N",
        help=f"MinHash values per document (default {DEFAULT_PERMUTATIONS}; minhash only)",
    )
    dedup.add_argument(
        "--vote",
        choices=VOTES,
        default="multiset",
        help="how shingles vote in the SimHash fingerprint: multiset (default: each time it\n"
        "occurs) or set (each distinct shingle once: a repeated word no longer drowns the\n"
        "shared text; see the quality table of the docs' corpus dedup guide)",
    )
    dedup.add_argument(
        "--extract",
        choices=EXTRACTS,
        default="visible",
        help="the text of an HTML file of a folder: visible (default: all its visible text) or\n"
        "main (boilerplate removed by trafilatura, pip install '.[extract]'; the\n"
        f"visible text when the main text has fewer than {MIN_MAIN_WORDS} words)",
    )


def _jaccard_options(args: argparse.Namespace) -> dict[str, Any]:
    """The DedupOptions fields of the Jaccard mode from ``args``; options of one method
    given with the other are refused (exit 2)."""
    if args.method == "minhash":
        if args.k is not None:
            raise CommandError(
                "--k is a SimHash option: --method minhash takes --threshold", "usage"
            )
        if args.weights != "none":
            raise CommandError("--weights is a SimHash option, not for --method minhash", "usage")
        if args.vote != "multiset":
            raise CommandError("--vote is a SimHash option, not for --method minhash", "usage")
    elif args.threshold is not None or args.permutations is not None:
        raise CommandError("--threshold and --permutations need --method minhash", "usage")
    fields: dict[str, Any] = {"method": args.method, "vote": args.vote, "extract": args.extract}
    if args.extract == "main":
        from permindex.text.extract import check_extract

        try:
            check_extract("main")
        except InvalidArgumentError as error:
            raise CommandError(f"--extract main: {error}", "usage") from None
    if args.threshold is not None:
        fields["threshold"] = args.threshold
    if args.permutations is not None:
        fields["permutations"] = args.permutations
    return fields
