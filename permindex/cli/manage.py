"""The commands that manage what a server holds as a whole: ``collections`` (list, create,
describe, drop) and ``export`` (every key and fingerprint, or a Jaccard collection's sketch in
hex, as JSONL or Parquet; ``import``, which loads it
back, is :mod:`permindex.cli.ingest`'s). Each goes through :class:`permindex.Client`.
"""

from __future__ import annotations

import argparse
import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from permindex.cli.args import (
    CommandFactory,
    duration,
    min_words_value,
    non_negative,
    shingle_size_value,
)
from permindex.cli.connection import connect
from permindex.cli.output import CommandError, counted, err, out
from permindex.client.results import SketchHex
from permindex.errors import EXIT_CODES
from permindex.text.documents import format_fingerprint
from permindex.text.fingerprint import MAX_MIN_WORDS, MAX_SHINGLE_SIZE, VOTES

if TYPE_CHECKING:
    from permindex.client import Client
    from permindex.client.results import CollectionInfo

__all__ = ["add_collections_command", "add_export_command"]


def _export_parquet(args: argparse.Namespace, target: Path, partial: Path) -> int:
    """``export --out FILE.parquet``: columns id (string) and fingerprint (uint64, or int64 by
    two's complement with ``--fingerprint-type int64``) or, for a Jaccard collection,
    shingle_hashes or signature (string, hex), and in a collection with expiry added_at (int64
    Unix seconds), written to ``partial``, renamed."""
    from permindex.io.arrow import require_pyarrow
    from permindex.io.parquet import ParquetTableWriter

    require_pyarrow()  # which extra to install, before anything else
    signed = args.fingerprint_type == "int64"
    try:
        partial.open("wb").close()  # a bad --out is refused before the server is asked
    except OSError as error:
        raise CommandError(
            f"--out {args.out}: cannot write {partial}: {error.strerror or error}", "invalid"
        ) from None
    try:
        with connect(args.address, args.connection) as client:
            field = _sketch_field(args, client)
            kind = (
                (field, "string") if field else ("fingerprint", args.fingerprint_type or "uint64")
            )
            columns = [("id", "string"), kind]
            timed = client.stats().expire_after > 0
            if timed:
                columns.append(("added_at", "int64"))
            with ParquetTableWriter(partial, columns) as writer:
                for key, content, added_at in _entries(client):
                    value: int | str
                    if isinstance(content, SketchHex):
                        value = content.hex
                    else:
                        value = content - (1 << 64) if signed and content >> 63 else content
                    writer.write([(key, value, added_at) if timed else (key, value)])
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    err(f"permindex export: {counted(writer.rows, 'key')} written to {args.out} (Parquet)")
    return EXIT_CODES["ok"]


def _entries(client: Client) -> Iterator[tuple[str, int | SketchHex, int]]:
    """Every (key, fingerprint or sketch, added_at) of ``client``'s collection: a Jaccard
    collection's entries carry a :class:`~permindex.client.SketchHex` (Client.iter_export)."""
    return cast(Iterator[tuple[str, int | SketchHex, int]], client.iter_export(with_times=True))


def _sketch_field(args: argparse.Namespace, client: Client) -> str | None:
    """The field (column) of a Jaccard collection's sketches (method minhash: a sketch, in hex,
    per key), ``shingle_hashes`` (verify exact) or ``signature`` (verify signature); None for
    a SimHash collection. Asked of the server (DescribeCollection).

    Raises:
        CommandError: (usage, exit 2) ``--fingerprint-type`` (either value) for a Jaccard
            collection, which has no fingerprints.
    """
    info = client.describe_collection(args.connection.collection or "default")
    if info.method != "minhash":
        return None
    if args.fingerprint_type is not None:
        raise CommandError(
            f"--fingerprint-type {args.fingerprint_type} is for a SimHash collection's "
            f"fingerprints; {args.connection.collection} is a Jaccard collection (method "
            "minhash), which has none: its export has a sketch field (hex strings); leave "
            "--fingerprint-type out",
            "usage",
        )
    return "signature" if info.verify == "signature" else "shingle_hashes"


def _export_target(out: str) -> Path:
    """The file ``export --out`` replaces: ``out`` itself, or the file a symbolic link there
    points to (written through the link, which stays a link).

    Raises:
        CommandError: (invalid input, exit 4) ``out`` is a folder, a path under /dev or /proc
            (such as /dev/stdout: whatever file descriptor it stands for, a pipe or a file the
            shell redirected to, export would rename a new file onto it), or something other
            than a regular file (a FIFO, a device, a socket): export writes FILE.partial and
            renames it onto FILE, which would replace it.
    """
    if os.path.abspath(out).startswith(("/dev/", "/proc/")):
        raise CommandError(
            f"--out {out} is a device or a process's file (under /dev or /proc): export writes "
            "a file through FILE.partial and renames it onto FILE; name a file, or --out - for "
            "stdout",
            "invalid",
        )
    target = Path(os.path.realpath(out))
    try:
        mode = os.stat(out).st_mode  # through links: what writing to ``out`` would reach
    except OSError:  # not there yet (or unreadable: the open below says why)
        return target
    if stat.S_ISDIR(mode):
        raise CommandError(f"--out {out} is a folder: name a file in it", "invalid")
    if not stat.S_ISREG(mode):
        raise CommandError(
            f"--out {out} is not a regular file (a FIFO, device or socket): export writes a "
            "file through FILE.partial and renames it onto FILE; name a file, or --out - for "
            "stdout",
            "invalid",
        )
    return target


def _cmd_export(args: argparse.Namespace) -> int:
    count = 0
    parquet = args.out.lower().endswith(".parquet")
    if args.fingerprint_type is not None and not parquet:
        raise CommandError(
            "--fingerprint-type is for a Parquet --out (FILE.parquet); JSONL writes hex", "usage"
        )

    def lines(client: Client) -> Iterator[str]:
        nonlocal count
        field = _sketch_field(args, client)
        for key, content, added_at in _entries(client):
            count += 1
            record: dict[str, object] = {"id": key}
            if field:
                record[field] = cast(SketchHex, content).hex
            else:
                record["fingerprint"] = format_fingerprint(cast(int, content))
            if added_at:
                record["added_at"] = added_at
            yield json.dumps(record, ensure_ascii=False) + "\n"

    if args.out == "-":
        with connect(args.address, args.connection) as client:
            out(lines(client))
        err(f"permindex export: {counted(count, 'key')} written to stdout")
        return EXIT_CODES["ok"]
    # Written beside, then renamed: an interrupted export leaves no half file. The file is
    # opened before the server is asked, so that a bad --out costs no export.
    target = _export_target(args.out)
    partial = target.with_name(target.name + ".partial")
    if parquet:
        return _export_parquet(args, target, partial)
    try:
        file = open(partial, "w", encoding="utf-8", newline="\n")  # closed by the with below
    except OSError as error:
        raise CommandError(
            f"--out {args.out}: cannot write {partial}: {error.strerror or error}", "invalid"
        ) from None
    try:
        with file, connect(args.address, args.connection) as client:
            file.writelines(lines(client))
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    err(f"permindex export: {counted(count, 'key')} written to {args.out}")
    return EXIT_CODES["ok"]


def _fields(info: CollectionInfo) -> dict[str, Any]:
    """A collection's fields in the order the command prints them: a Jaccard collection's
    method, threshold, permutations, bands, rows and verify in place of k and the design."""
    if info.method == "minhash":
        return {
            "name": info.name,
            "count": info.count,
            "memory_bytes": info.memory_bytes,
            "method": info.method,
            "threshold": info.threshold,
            "permutations": info.permutations,
            "bands": info.bands,
            "rows": info.rows,
            "verify": info.verify,
            "shingle_size": info.shingle_size,
            "min_words": info.min_words,
            "expire_after": info.expire_after,
        }
    return {
        "name": info.name,
        "count": info.count,
        "memory_bytes": info.memory_bytes,
        "k": info.k,
        "blocks": info.blocks,
        "leading": info.leading,
        "tables": info.tables,
        "shingle_size": info.shingle_size,
        "min_words": info.min_words,
        "expire_after": info.expire_after,
        "vote": info.vote,
        "method": info.method,
    }


def _list_line(i: dict[str, Any]) -> str:
    """One line of ``collections list``: ``name, keys, k, blocks/leading`` for a SimHash
    collection; ``name, keys, minhash, threshold, permutations, bandsxrows, verify`` for a
    Jaccard one, the threshold in Python's shortest form (``repr``: ``1.0``, ``0.85``), as
    ``describe`` (``str``) and JSON print it."""
    if i["method"] == "minhash":
        return (
            f"{i['name']}\t{i['count']}\tminhash\t{i['threshold']!r}\t{i['permutations']}\t"
            f"{i['bands']}x{i['rows']}\t{i['verify']}\n"
        )
    return f"{i['name']}\t{i['count']}\t{i['k']}\t{i['blocks']}/{i['leading']}\n"


def _check_method_options(args: argparse.Namespace) -> None:
    """Options of one method given with the other: refused before anything is sent (exit 2)."""
    if args.method == "minhash":
        given = [
            f"--{name}" for name in ("k", "blocks", "leading", "vote")
            if getattr(args, name) is not None
        ]  # fmt: skip
        if given:
            raise CommandError(
                f"{', '.join(given)}: SimHash option{'' if len(given) == 1 else 's'}; "
                "--method minhash takes --threshold, "
                "--permutations and --verify",
                "usage",
            )
    elif args.threshold is not None or args.permutations is not None or args.verify is not None:
        raise CommandError(
            "--threshold, --permutations and --verify need --method minhash", "usage"
        )


def _cmd_collections(args: argparse.Namespace) -> int:
    if args.collection is not None:
        usage = "collections list" if args.action == "list" else f"collections {args.action} NAME"
        args.parser.error(
            f"--collection {args.collection}: collections names its collection after the "
            f"action ({usage}), not with --collection"
        )
    if args.action != "list" and not args.name:
        args.parser.error(f"collections {args.action} needs a NAME")
    with connect(args.address, args.connection) as client:
        if args.action == "list":
            infos = [_fields(i) for i in client.list_collections()]
            if args.json:
                out(json.dumps(infos) + "\n")
            else:
                out(_list_line(i) for i in infos)
            return EXIT_CODES["ok"]
        if args.action == "drop":
            count = client.drop_collection(args.name)
            err(f"permindex collections: dropped {args.name} ({counted(count, 'key')})")
            return EXIT_CODES["ok"]
        if args.action == "create":
            _check_method_options(args)
            info = _fields(
                client.create_collection(
                    args.name,
                    k=args.k,
                    blocks=args.blocks,
                    leading=args.leading,
                    shingle_size=args.shingle_size,
                    min_words=args.min_words,
                    expire_after=args.expire_after,
                    vote=args.vote,
                    method=args.method,
                    threshold=args.threshold,
                    permutations=args.permutations,
                    verify=args.verify,
                )
            )
        else:
            info = _fields(client.describe_collection(args.name))
    out(json.dumps(info) + "\n" if args.json else "".join(f"{k}\t{v}\n" for k, v in info.items()))
    return EXIT_CODES["ok"]


def add_collections_command(command: CommandFactory) -> None:
    """Register ``permindex collections``."""
    collections = command(
        "collections",
        "list, create, describe or drop collections",
        "Collections are independent indexes in one server, each with its own k, table design,\n"
        "text options, snapshots and log; every other command works on the one of --collection\n"
        "(default: `default`, which always exists); this one takes NAME after the action.\n"
        "  list                 one `name<TAB>keys<TAB>k<TAB>blocks/leading` line each\n"
        "                       (a Jaccard collection: `name<TAB>keys<TAB>minhash<TAB>threshold\n"
        "                       <TAB>permutations<TAB>BANDSxROWS<TAB>verify`, the threshold\n"
        "                       as describe and --json print it: 1.0, 0.85)\n"
        "  create NAME [opts]   an empty collection (options default to the server's own,\n"
        "                       except --expire-after: never unless given)\n"
        "  describe NAME        its options and counts, `name<TAB>value` lines\n"
        "  drop NAME            its keys, memory and files (`default` cannot be dropped)",
    )
    collections.add_argument("action", choices=("list", "create", "describe", "drop"))
    collections.add_argument("name", nargs="?", metavar="NAME")
    for option, what, parse in (
        ("--k", "largest distance the collection answers, bits", non_negative),
        ("--blocks", "table design: blocks of the 64 bits", non_negative),
        ("--leading", "table design: leading blocks per table", non_negative),
        (
            "--shingle-size",
            f"words per shingle for texts (1 to {MAX_SHINGLE_SIZE:,})",
            shingle_size_value,
        ),
        (
            "--min-words",
            f"texts of fewer words are too short (0 to {MAX_MIN_WORDS:,})",
            min_words_value,
        ),
    ):
        collections.add_argument(option, type=parse, metavar="N", help=what)
    collections.add_argument(
        "--expire-after",
        type=duration,
        metavar="DURATION",
        help="entries not added again within this duration expire: digits and s, m, h or d\n"
        "(30d, 12h, 90m, 45s; default: never); expire_after is printed in seconds (0: never)",
    )
    collections.add_argument(
        "--vote",
        choices=VOTES,
        help="how shingles vote when the server fingerprints a text: multiset (each time it\n"
        "occurs) or set (each distinct shingle once; default: the server's --vote)",
    )
    collections.add_argument(
        "--method",
        choices=("simhash", "minhash"),
        help="simhash (default): fingerprints within k bits; minhash: a Jaccard collection,\n"
        "documents at Jaccard similarity >= --threshold of their word-shingle sets, shingled\n"
        "as `dedup --method minhash`",
    )
    collections.add_argument(
        "--threshold",
        type=_threshold,
        metavar="J",
        help="minhash: least Jaccard similarity of a near-duplicate, in (0, 1] (default 0.8)",
    )
    collections.add_argument(
        "--permutations",
        type=_permutations,
        metavar="N",
        help="minhash: MinHash values per document, 1 to 4,096 (default 128)",
    )
    collections.add_argument(
        "--verify",
        choices=("exact", "signature"),
        help="minhash: exact (default: the shingle sets' Jaccard, precision 1.0) or signature\n"
        "(the signature's estimate, std sqrt(J(1-J)/permutations); far less memory)",
    )
    collections.add_argument("--json", action="store_true", help="print JSON")
    collections.set_defaults(func=_cmd_collections)


def _threshold(text: str) -> float:
    """--threshold: a number in (0, 1] (else exit 2)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 < value <= 1.0:
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return value


def _permutations(text: str) -> int:
    """--permutations: an int in 1..4,096 (else exit 2)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if not 1 <= value <= 4096:
        raise argparse.ArgumentTypeError(f"must be in 1..4096, got {text}")
    return value


def add_export_command(command: CommandFactory) -> None:
    """Register ``permindex export``."""
    export = command(
        "export",
        "write every stored key and fingerprint (or sketch) as JSONL or Parquet",
        'Write every stored key as one JSON line, {"id": KEY, "fingerprint": "16 hex digits"},\n'
        "from one consistent copy of the index, in the order the keys were stored: a backup or\n"
        "a migration that `permindex import` (or ingest) loads back. In a collection with\n"
        'expiry each line also has "added_at": when the key was last added, Unix seconds, so\n'
        "that an import keeps each entry's age.\n"
        "An --out ending .parquet writes Parquet instead (needs pyarrow: pip install\n"
        "'.[parquet]'): columns id (string), fingerprint (uint64; for Spark or\n"
        "BigQuery, which have no unsigned 64-bit type, --fingerprint-type int64 stores the same\n"
        "64 bits as a signed integer, two's complement) and, with expiry, added_at (int64).\n"
        "import and ingest read both.\n"
        "A Jaccard collection (--collection NAME made with --method minhash) writes each key\n"
        "with its stored sketch in hex instead: with --verify exact its shingle hashes,\n"
        '{"id": KEY, "shingle_hashes": HEX} (16 hex digits a hash), with --verify signature\n'
        'its signature, {"id": KEY, "signature": HEX} (8 hex digits a value); in Parquet a\n'
        "string column of that name. `permindex import` restores each exactly into a Jaccard\n"
        "collection of the same --verify (and --permutations, for a signature).",
    )
    export.add_argument(
        "--out",
        default="-",
        metavar="FILE",
        help="write here (through FILE.partial, renamed when complete; through a symbolic\n"
        "link to the file it names; a FIFO or device is refused: use -); default - (stdout);\n"
        "FILE.parquet: Parquet",
    )
    export.add_argument(
        "--fingerprint-type",
        choices=("uint64", "int64"),
        help="Parquet fingerprint column: uint64 (default) or int64, the same bits in two's\n"
        "complement (Spark, BigQuery); refused (exit 2) with a JSONL --out and for a Jaccard\n"
        "collection, which has no fingerprints",
    )
    export.set_defaults(func=_cmd_export)
