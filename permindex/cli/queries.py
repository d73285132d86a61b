"""The one-request commands of ``permindex``: ``query``, ``fingerprint`` (no server), ``pairs``,
``get``, ``remove``, ``stats`` and ``snapshot``, each a call of :class:`permindex.Client`.

Output formats (stdout, UTF-8, ``\\n`` line ends):

- a fingerprint is always 16 lower-case hex digits, zero-padded (in JSON too, as a string);
- ``query``: ``key<TAB>fingerprint<TAB>distance`` per match, sorted by distance then key (a
  Jaccard collection: ``key<TAB>jaccard``, most similar first);
- ``get``: ``key<TAB>fingerprint`` per stored key (a Jaccard collection, which stores
  sketches: ``key<TAB>kind<TAB>size``);
- ``pairs``: ``key_a<TAB>key_b<TAB>distance`` per pair, ``key_a < key_b``, lines sorted by
  ``(key_a, key_b)`` in code point order (the order of ``sorted()`` on the two keys; for the shared
  corpora it equals ``LC_ALL=C sort``), no header.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

from permindex.cli.args import CommandFactory, bounded, shingle_size_value
from permindex.cli.connection import connect
from permindex.cli.output import CommandError, compile_notice, counted, err, out
from permindex.errors import EXIT_CODES, NotFoundError
from permindex.index.hamming import parse_fingerprint
from permindex.text.documents import format_fingerprint, read_file_text, tsv_field

if TYPE_CHECKING:
    from permindex.client import Client
    from permindex.client.results import CollectionInfo, ServerStats, SketchHex

__all__ = ["add_commands"]


def _cmd_query_jaccard(args: argparse.Namespace, client: Client, info: CollectionInfo) -> int:
    """``query`` on a Jaccard collection: ``key<TAB>jaccard`` lines (4 decimals), most
    similar first, then by key; --text is shingled by the server, --key is the stored
    document (itself left out); --fingerprint and --k are refused (exit 2); a --text with
    fewer words than the collection's shingle size (or min words) has no sketch (exit 6, as
    on a SimHash collection)."""
    from permindex.text.fingerprint import tokens

    if args.fingerprint is not None or args.k is not None:
        raise CommandError(
            f"{'--fingerprint' if args.fingerprint is not None else '--k'} is for SimHash "
            f"collections: collection {args.collection} is a Jaccard collection (method "
            "minhash); query it with --text or --key",
            "usage",
        )
    if args.text is not None:
        needed = max(info.shingle_size, info.min_words)
        if len(tokens(args.text)) < needed:
            raise CommandError(
                f"the text has fewer than {needed} words: it has no sketch "
                f"(collection {args.collection} shingles {info.shingle_size} words"
                + (f", min words {info.min_words}" if info.min_words else "")
                + ")",
                "too_short",
            )
    limit = args.limit or None
    if args.key is not None:
        if client.get(args.key) is None:
            raise NotFoundError(f"key {args.key!r} is not stored", key=args.key)
        (matches,) = client.query_jaccard([args.key], by="key", limit=limit)
    else:
        (matches,) = client.query_jaccard([args.text], limit=limit)
    if args.json:
        rows = [{"key": m.key, "jaccard": m.jaccard} for m in matches]
        out(json.dumps(rows, ensure_ascii=False) + "\n")
    else:
        out(f"{tsv_field(m.key)}\t{m.jaccard:.4f}\n" for m in matches)
    return EXIT_CODES["ok"]


def _cmd_query(args: argparse.Namespace) -> int:
    from permindex.text.fingerprint import simhash

    if args.collection is not None:  # a Jaccard collection is asked otherwise
        with connect(args.address, args.connection) as client:
            info = client.describe_collection(args.collection)
            if info.method == "minhash":
                return _cmd_query_jaccard(args, client, info)
    own_key: str | None = None
    fingerprint: int | None
    if args.text is not None:
        with compile_notice("query", "fingerprint"):  # a first run after an install
            fingerprint = simhash(args.text, shingle_size=args.shingle_size, vote=args.vote)
        if fingerprint is None:
            raise CommandError(
                f"the text has fewer than {args.shingle_size} words: it has no fingerprint",
                "too_short",
            )
    elif args.fingerprint is not None:
        fingerprint = parse_fingerprint(args.fingerprint)
    else:
        fingerprint = None
        own_key = args.key
    limit = args.limit or 0
    with connect(args.address, args.connection) as client:
        if own_key is not None:
            stored = client.get(own_key)
            if stored is None:
                raise NotFoundError(f"key {own_key!r} is not stored", key=own_key)
            fingerprint = stored if isinstance(stored, int) else None
        assert fingerprint is not None  # a Jaccard collection is answered above
        # One more, in case the key's own entry is among the nearest and is left out.
        asked = (limit + 1 if own_key is not None else limit) if limit else None
        matches = client.query(fingerprint, k=args.k, limit=asked)
    matches = [m for m in matches if m.key != own_key]
    if limit:
        matches = matches[:limit]
    if args.json:
        rows = [
            {"key": m.key, "fingerprint": format_fingerprint(m.fingerprint), "distance": m.distance}
            for m in matches
        ]
        out(json.dumps(rows, ensure_ascii=False) + "\n")
    else:
        out(
            f"{tsv_field(m.key)}\t{format_fingerprint(m.fingerprint)}\t{m.distance}\n"
            for m in matches
        )
    return EXIT_CODES["ok"]


def _cmd_fingerprint(args: argparse.Namespace) -> int:
    from permindex.text.fingerprint import simhash

    if (args.text is None) == (args.file is None):
        args.parser.error("give exactly one of TEXT, --file PATH or - (standard input)")
    if args.file is not None:
        text = read_file_text(args.file)
        source = args.file
    elif args.text == "-":
        try:
            text = sys.stdin.buffer.read().decode("utf-8-sig")
        except UnicodeDecodeError as error:
            raise CommandError(f"standard input is not valid UTF-8: {error}", "invalid") from None
        source = "standard input"
    else:
        text = args.text
        source = "the text"
    with compile_notice("fingerprint", "fingerprint"):  # a first run after an install
        fingerprint = simhash(text, shingle_size=args.shingle_size, bits=args.bits, vote=args.vote)
    if fingerprint is None:
        raise CommandError(
            f"{source} has fewer than {args.shingle_size} words: it has no fingerprint",
            "too_short",
        )
    out(format_fingerprint(fingerprint) + "\n")
    return EXIT_CODES["ok"]


def _pair_measure(value: int | float) -> str:
    """The third field of a pair line: bits, or (a float from a Jaccard collection) the
    Jaccard similarity to 4 decimals exactly as ``dedup --method minhash`` prints it."""
    if isinstance(value, float):
        from permindex.near.jaccard import SCALE, jaccard_text

        return jaccard_text(round((1.0 - value) * SCALE))
    return str(value)


def _cmd_pairs(args: argparse.Namespace) -> int:
    # printed as the server streams them, already in order (key_a, then key_b): nothing is
    # held or sorted here, so any number of pairs prints in bounded memory
    with connect(args.address, args.connection) as client:
        if (
            args.k is not None
            and client.describe_collection(args.collection or "default").method == "minhash"
        ):
            raise CommandError(
                f"--k is a SimHash option: collection {args.collection} is a Jaccard "
                "collection (method minhash), whose pairs are those at Jaccard >= its threshold",
                "usage",
            )
        pairs = client.iter_pairs(k=args.k)
        out(f"{tsv_field(a)}\t{tsv_field(b)}\t{_pair_measure(d)}\n" for a, b, d in pairs)
    return EXIT_CODES["ok"]


def _get_fields(key: str, stored: int | SketchHex) -> dict[str, object]:
    """One stored key as ``get --json`` prints it: ``{"key", "fingerprint"}`` (16 hex digits),
    or from a Jaccard collection ``{"key", "kind", "size", "sketch"}`` (the sketch in hex as
    ``export`` writes it, ``size`` values of its ``kind``)."""
    if isinstance(stored, int):
        return {"key": key, "fingerprint": format_fingerprint(stored)}
    kind = stored.kind or "sketch"
    width = 16 if stored.kind == "shingle_hashes" else 8
    return {"key": key, "kind": kind, "size": len(stored.hex) // width, "sketch": stored.hex}


def _get_line(fields: dict[str, object]) -> str:
    """One stored key as ``get`` prints it: ``key<TAB>fingerprint``, or from a Jaccard
    collection ``key<TAB>kind<TAB>size``."""
    if "fingerprint" in fields:
        return f"{tsv_field(str(fields['key']))}\t{fields['fingerprint']}\n"
    return f"{tsv_field(str(fields['key']))}\t{fields['kind']}\t{fields['size']}\n"


def _cmd_get(args: argparse.Namespace) -> int:
    keys: list[str] = args.keys
    with connect(args.address, args.connection) as client:
        found = client.get_many(keys)
    rows = [
        _get_fields(key, stored) for key, stored in zip(keys, found, strict=True)
        if stored is not None
    ]  # fmt: skip
    if args.json:
        out(json.dumps(rows, ensure_ascii=False) + "\n")
    else:
        out("".join(_get_line(row) for row in rows))
    missing = [key for key, stored in zip(keys, found, strict=True) if stored is None]
    if missing:
        raise NotFoundError(f"not stored: {', '.join(missing)}", key=missing[0])
    return EXIT_CODES["ok"]


def _cmd_remove(args: argparse.Namespace) -> int:
    with connect(args.address, args.connection) as client:
        result = client.remove(args.keys)
    err(f"permindex remove: removed {result.removed} of {counted(len(args.keys), 'key')}")
    if result.not_found:
        missing = list(result.not_found)
        raise NotFoundError(f"not stored: {', '.join(missing)}", key=missing[0])
    return EXIT_CODES["ok"]


def _duration(seconds: int) -> str:
    """``never`` for 0, else the seconds and, when whole, the largest unit (``2592000 s (30d)``)."""
    if not seconds:
        return "never"
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds} s ({seconds // size}{unit})"
    return f"{seconds} s"


def _parts(stats: ServerStats) -> dict[str, int]:
    """The parts of ``stats.memory_bytes`` by name (``fingerprints``, ..., ``key_map``)."""
    return stats.memory_breakdown._asdict()


def _jaccard_design(client: Client, collection: str | None) -> dict[str, object] | None:
    """What ``stats`` prints of a Jaccard collection in place of the table design (which it
    has not): its threshold, permutations, bands, rows and verify; None for a SimHash
    collection ("default" always is one)."""
    if collection is None or collection == "default":
        return None
    info = client.describe_collection(collection)
    if info.method != "minhash":
        return None
    return {
        "threshold": info.threshold,
        "permutations": info.permutations,
        "bands": info.bands,
        "rows": info.rows,
        "verify": info.verify,
    }


def _cmd_stats(args: argparse.Namespace) -> int:
    with connect(args.address, args.connection) as client:
        stats = client.stats()
        jaccard = _jaccard_design(client, args.collection)
    last = stats.last_snapshot_unix_seconds
    design: dict[str, object] = {
        "blocks": stats.blocks,
        "leading": stats.leading,
        "tables": stats.tables,
        "k": stats.k,
    }
    fields: dict[str, object] = {
        "count": stats.count,
        "memory_bytes": stats.memory_bytes,
        "resident_memory_bytes": stats.resident_memory_bytes,
        **({"design": design} if jaccard is None else {"method": "minhash", "jaccard": jaccard}),
        "uptime_seconds": stats.uptime_seconds,
        "last_snapshot_unix_seconds": last,
        "last_snapshot_count": stats.last_snapshot_count,
        "last_snapshot_bytes": stats.last_snapshot_bytes,
        "version": stats.version,
        "expire_after": stats.expire_after,
        "expired_pending": stats.expired_pending,
        "memory_breakdown": {
            **{f"{name}_bytes": value for name, value in _parts(stats).items()},
            "log_buffer_bytes": stats.log_buffer_bytes,
        },
        "max_memory_bytes": stats.max_memory_bytes,
        "server_memory_bytes": stats.server_memory_bytes,
    }
    if jaccard is not None:  # the parts of a SimHash index's memory: none of them is there
        del fields["memory_breakdown"]
    if args.json:
        out(json.dumps(fields) + "\n")
        return EXIT_CODES["ok"]
    when = "never" if last is None else time.strftime("%Y-%m-%d %H:%M:%S %z", time.localtime(last))
    if jaccard is None:
        shape = [
            f"design\t{stats.blocks} blocks, {stats.leading} leading, {stats.tables} tables, "
            f"k = {stats.k}"
        ]
        parts = [f"memory.{name}_bytes\t{value}" for name, value in _parts(stats).items()]
        parts.append(f"memory.log_buffer_bytes\t{stats.log_buffer_bytes}")
    else:
        shape = [
            "method\tminhash",
            f"jaccard\tthreshold {jaccard['threshold']!r}, {jaccard['permutations']} "
            f"permutations, {jaccard['bands']}x{jaccard['rows']} bands x rows, verify "
            f"{jaccard['verify']}",
        ]
        parts = []
    lines = [
        f"count\t{stats.count}",
        f"memory_bytes\t{stats.memory_bytes}",
        f"resident_memory_bytes\t{stats.resident_memory_bytes or 'n/a (an admin token sees it)'}",
        *shape,
        f"uptime_seconds\t{stats.uptime_seconds:.1f}",
        f"last_snapshot\t{when} ({stats.last_snapshot_count} keys, "
        f"{stats.last_snapshot_bytes} bytes)",
        f"version\t{stats.version}",
        f"expire_after\t{_duration(stats.expire_after)}",
        f"expired_pending\t{stats.expired_pending}",
        *parts,
        f"max_memory_bytes\t{stats.max_memory_bytes or 'none (serve --max-memory)'}",
        f"server_memory_bytes\t{stats.server_memory_bytes or 'n/a (an admin token sees it)'}",
    ]
    out("".join(line + "\n" for line in lines))
    return EXIT_CODES["ok"]


def _cmd_snapshot(args: argparse.Namespace) -> int:
    with connect(args.address, args.connection) as client:
        result = client.snapshot()
    out(
        f"{result.path}\t{counted(result.count, 'key')}\t{counted(result.bytes, 'byte')}\t"
        f"{result.seconds:.3f} s\n"
    )
    return EXIT_CODES["ok"]


def add_commands(command: CommandFactory) -> None:
    """Register ``query``, ``fingerprint``, ``pairs``, ``get``, ``remove``, ``stats`` and
    ``snapshot``, in that order."""
    from permindex.text.fingerprint import VOTES

    query = command(
        "query",
        "find the stored keys near a text, fingerprint or key",
        "Print the stored keys within Hamming distance k, nearest first (then by key), one\n"
        "`key<TAB>fingerprint<TAB>distance` line each (fingerprint: 16 hex digits). --text is\n"
        "fingerprinted here, with the default SimHash; --key looks up the key's fingerprint and\n"
        "leaves the key itself out of the answer.\n"
        "A fingerprint F is hex, as everywhere: exactly 16 hex digits, or 0x and 1 to 16 hex\n"
        "digits (decimal 123 is 0x7b); anything else is refused (exit 4).\n"
        "In a Jaccard collection (--collection NAME made with --method minhash): the stored\n"
        "keys at Jaccard >= its threshold with --text (shingled by the server) or --key, one\n"
        "`key<TAB>jaccard` line each (4 decimals), most similar first; --fingerprint and --k\n"
        "are refused there (exit 2).\n"
        "A --text with fewer words than a shingle (the collection's, in a Jaccard collection)\n"
        f"has no fingerprint or sketch: nothing is printed, exit {EXIT_CODES['too_short']}.",
    )
    what = query.add_mutually_exclusive_group(required=True)
    what.add_argument("--text", metavar="T", help="a text (at least --shingle-size words)")
    what.add_argument("--fingerprint", metavar="F", help="a fingerprint")
    what.add_argument("--key", metavar="K", help="a stored key")
    query.add_argument(
        "--k", type=bounded(0, 64), metavar="N", help="largest distance (default: the server's k)"
    )
    query.add_argument(
        "--limit",
        type=bounded(0, 2**32 - 1),
        metavar="N",
        help="at most N matches, the nearest (default, or 0: all)",
    )
    query.add_argument(
        "--shingle-size",
        type=shingle_size_value,
        default=3,
        metavar="N",
        help="words per shingle for --text (default 3; use the server's)",
    )
    query.add_argument(
        "--vote",
        choices=VOTES,
        default="multiset",
        help="how shingles vote for --text (default multiset; use the collection's, which\n"
        "`collections describe` shows, or set for keys ingested with --vote set)",
    )
    query.add_argument(
        "--json",
        action="store_true",
        help='print a JSON array of {"key", "fingerprint" (16 hex digits), "distance"}',
    )
    query.set_defaults(func=_cmd_query)

    fingerprint = command(
        "fingerprint",
        "print the SimHash fingerprint of a text (no server)",
        "Print the SimHash fingerprint of a text as 16 lower-case hex digits. --file reads a\n"
        "file as `ingest` of a folder would (.gz decompressed, HTML reduced to visible text);\n"
        "- reads standard input. A text with fewer words than a shingle has no fingerprint:\n"
        f"nothing is printed and the exit code is {EXIT_CODES['too_short']}.",
        parents=False,
    )
    fingerprint.add_argument("text", nargs="?", metavar="TEXT", help="the text, or - for stdin")
    fingerprint.add_argument("--file", metavar="PATH", help="read the text from a file")
    fingerprint.add_argument(
        "--shingle-size",
        type=shingle_size_value,
        default=3,
        metavar="N",
        help="words per shingle (3)",
    )
    fingerprint.add_argument(
        "--vote",
        choices=VOTES,
        default="multiset",
        help="multiset (default: a shingle votes each time it occurs) or set (once)",
    )
    fingerprint.add_argument(
        "--bits",
        type=int,
        choices=(63, 64),
        default=64,
        help="64 (default), or 63: bit 63 left clear, for a signed BIGINT column",
    )
    fingerprint.set_defaults(func=_cmd_fingerprint)

    pairs = command(
        "pairs",
        "list every near-duplicate pair in the server",
        "Print every unordered pair of stored keys within Hamming distance k, one\n"
        "`key_a<TAB>key_b<TAB>distance` line each, key_a < key_b, lines sorted by (key_a,\n"
        "key_b) in code point order, no header. In a Jaccard collection (collections create\n"
        "--method minhash): every pair at Jaccard >= its threshold, one\n"
        "`key_a<TAB>key_b<TAB>jaccard` line each (4 decimals), exactly as `dedup --method\n"
        "minhash` prints them; --k is refused there (exit 2).",
    )
    pairs.add_argument(
        "--k", type=bounded(0, 64), metavar="N", help="largest distance (default: the server's k)"
    )
    pairs.set_defaults(func=_cmd_pairs)

    get = command(
        "get",
        "print the stored fingerprint (or sketch) of keys",
        "Print `key<TAB>fingerprint` for each stored key; keys not stored are named on\n"
        f"stderr (exit code {EXIT_CODES['not_found']}). In a Jaccard collection (collections\n"
        "create --method minhash), which stores sketches, not fingerprints:\n"
        "`key<TAB>kind<TAB>size`, kind shingle_hashes (--verify exact: size distinct shingle\n"
        "hashes) or signature (--verify signature: size values, its permutations).\n"
        '--json: one array, {"key", "fingerprint"} objects (16 hex digits), or from a Jaccard\n'
        'collection {"key", "kind", "size", "sketch"}, sketch in hex as export writes it.',
    )
    get.add_argument("keys", nargs="+", metavar="KEY")
    get.add_argument("--json", action="store_true", help="print one JSON array")
    get.set_defaults(func=_cmd_get)

    remove = command(
        "remove",
        "remove keys",
        "Remove keys; keys not stored are named on stderr "
        f"(exit code {EXIT_CODES['not_found']}), the others are removed.",
    )
    remove.add_argument("keys", nargs="+", metavar="KEY")
    remove.set_defaults(func=_cmd_remove)

    stats = command(
        "stats",
        "print the server's counts, memory, design and last snapshot",
        "Print the server's statistics, one `name<TAB>value` line each. A Jaccard collection\n"
        "(collections create --method minhash) has no table design and no memory.* parts:\n"
        "`method<TAB>minhash` and `jaccard<TAB>threshold J, N permutations, BxR bands x rows,\n"
        'verify V` lines take their place (in JSON "method" and a "jaccard" object replace\n'
        '"design", and "memory_breakdown" is left out).',
    )
    stats.add_argument("--json", action="store_true", help="print one JSON object")
    stats.set_defaults(func=_cmd_stats)

    snapshot = command(
        "snapshot",
        "write a snapshot now",
        "Ask the server to write a snapshot now; prints its path, keys, bytes and seconds.",
    )
    snapshot.set_defaults(func=_cmd_snapshot)
