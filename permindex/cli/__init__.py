"""The ``permindex`` command: :func:`main`, :func:`build_parser`, and the ``serve`` command.

The other commands live one module per group: :mod:`permindex.cli.ingest` (``ingest``,
``import``), :mod:`permindex.cli.queries` (``query``, ``fingerprint``, ``pairs``, ``get``,
``remove``, ``stats``, ``snapshot``), :mod:`permindex.cli.manage` (``collections``, ``export``),
:mod:`permindex.cli.near` (``clusters``, ``flags``, ``dedup``) and :mod:`permindex.cli.bench`. Every
client command takes ``--address HOST:PORT`` after the subcommand (default
:data:`~permindex.addresses.DEFAULT_ADDRESS`) and talks to the server only through
:class:`permindex.Client` (:mod:`permindex.cli.connection`); grpc is imported only inside the
commands that talk to a server, so ``import permindex.cli`` and ``permindex fingerprint`` stay
light.

Errors are turned into one line on stderr and an exit code here, in :func:`main`, and nowhere
else: permindex's own exceptions through :func:`permindex.errors.exit_code_for`, a server's
refusal through :func:`permindex.cli.output.command_error` (gRPC status codes read through the same
table, :data:`permindex.errors.ERROR_TABLE`), and an unreachable server (``UNAVAILABLE``,
``DEADLINE_EXCEEDED``) as ``unavailable``. The codes are listed in ``permindex --help``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Final

from permindex.addresses import DEFAULT_ADDRESS
from permindex.cli.args import client_options_parser
from permindex.cli.args import directory_name as _directory_name
from permindex.cli.args import listen_address as _listen_address
from permindex.cli.args import message_mb as _message_mb
from permindex.cli.args import non_negative as _non_negative
from permindex.cli.args import non_negative_float as _non_negative_float
from permindex.cli.args import positive as _positive
from permindex.cli.args import positive_float as _positive_float
from permindex.cli.connection import ClientOptions
from permindex.cli.ingest import IngestSummary, ingest
from permindex.cli.output import CommandError
from permindex.cli.output import err as _err
from permindex.cli.output import exit_codes_epilog as _exit_codes_epilog
from permindex.errors import EXIT_CODES, exit_code_for
from permindex.rpc.config import ServerConfig
from permindex.storage.wal import FSYNC_POLICIES

__all__ = ["CommandError", "IngestSummary", "build_parser", "ingest", "main"]

_MIB: Final = 1024 * 1024
_DEFAULTS: Final = ServerConfig()
# --------------------------------------------------------------------------------------------
# Commands


def _limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's malloc arenas (M_ARENA_MAX) before the server starts its threads.

    glibc gives threads that allocate at once arenas of their own (up to 8 per core); the RPC
    threads of a server then keep freed memory spread over many arenas, and the resident size
    creeps up under a steady load: +20 % in 40 s of tests/test_soak.py with the default, +1.5 %
    with 2 arenas, at the same latency (the GIL serializes most allocations anyway). Skipped when
    MALLOC_ARENA_MAX is set in the environment, or where libc is not glibc."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, arenas)  # M_ARENA_MAX = -8 in malloc.h
    except (OSError, AttributeError):  # not glibc
        pass


def _cmd_serve(args: argparse.Namespace) -> int:
    from permindex.index.keys import MAX_KEY_BYTES
    from permindex.rpc.server import run_server

    if args.max_key_bytes > MAX_KEY_BYTES:
        args.parser.error(f"--max-key-bytes: at most {MAX_KEY_BYTES} (the index's limit)")

    config = ServerConfig(
        address=args.address,
        data_dir=Path(args.data_dir),
        k=args.k,
        snapshot_interval=args.snapshot_interval,
        max_message_bytes=int(args.max_message_mb * _MIB),
        max_batch=args.max_batch,
        shingle_size=args.shingle_size,
        min_words=args.min_words,
        grace_seconds=args.grace_seconds,
        workers=args.workers,
        fsync=args.fsync,
        fsync_interval=args.fsync_interval,
        truncate_corrupt_log=args.truncate_corrupt_log,
        tls_cert=None if args.tls_cert is None else Path(args.tls_cert),
        tls_key=None if args.tls_key is None else Path(args.tls_key),
        tls_client_ca=None if args.tls_client_ca is None else Path(args.tls_client_ca),
        token_file=None if args.token_file is None else Path(args.token_file),
        insecure=args.insecure,
        max_key_bytes=args.max_key_bytes,
        max_text_bytes=args.max_text_bytes,
        max_concurrent_rpcs=args.max_concurrent_rpcs,
        metrics_address=args.metrics_address,
    )
    from permindex.rpc.auth import exposure_problem

    exposed = exposure_problem(config)
    if exposed is not None and not config.insecure:
        _err(
            f"permindex serve: refusing to start: {exposed}.\n  Serve TLS and tokens, listen on "
            "127.0.0.1, or pass --insecure to accept this."
        )
        return EXIT_CODES["usage"]
    if exposed is not None:
        _err(f"permindex serve: WARNING: {exposed} (--insecure)")
    if args.log_format != "text" or args.log_level != "warning":
        from permindex.cli.logs import configure_logging

        configure_logging(args.log_format, args.log_level)
    _limit_malloc_arenas()
    return run_server(config)


# --------------------------------------------------------------------------------------------
# Parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``permindex`` (every subcommand)."""
    from permindex import __version__

    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(
        prog="permindex",
        description="A near-duplicate index server of 64-bit SimHash fingerprints, and its "
        "client.\nStart a server with `permindex serve`; the other commands talk to it\n"
        f"(--address HOST:PORT after the command, default {DEFAULT_ADDRESS}), except\n"
        "`fingerprint`, which needs no server.",
        epilog=_exit_codes_epilog(),
        formatter_class=formatter,
    )
    parser.add_argument("--version", action="version", version=f"permindex {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    client = client_options_parser()

    def command(name: str, help_: str, description: str, *, parents: bool = True) -> Any:
        sub = commands.add_parser(
            name,
            help=help_,
            description=description,
            epilog=_exit_codes_epilog(),
            formatter_class=formatter,
            parents=[client] if parents else [],
        )
        sub.set_defaults(parser=sub)
        return sub

    serve = command(
        "serve",
        "run the index server",
        "Run the server in the foreground until SIGTERM, SIGINT or SIGHUP.\n\n"
        "Durability: every write request (Add, an Ingest batch, CheckAndAdd, Remove) is appended\n"
        "to a write-ahead log in the data directory before it is applied and acknowledged. At the\n"
        "start the server loads the snapshot and replays the log after it, before it listens.\n"
        "  --fsync always    (default) one fsync per write request, before it is acknowledged:\n"
        "                    a machine crash or power cut loses nothing acknowledged\n"
        f"  --fsync interval  an fsync every --fsync-interval seconds "
        f"(default {_DEFAULTS.fsync_interval:g}):\n"
        "                    a machine crash loses at most the last interval's writes\n"
        "  --fsync never     the kernel writes the log back (about 30 s on Linux): a machine\n"
        "                    crash loses what it had not written yet\n"
        "Under every policy a killed server process (even kill -9) loses nothing acknowledged.\n"
        f"A snapshot is written every --snapshot-interval seconds "
        f"(default {_DEFAULTS.snapshot_interval:g}) when anything\n"
        "changed, on the Snapshot RPC and at a graceful stop; queries and writes go on while\n"
        "it is written, then the log older than the snapshot before it is deleted. A write the\n"
        "disk refuses (full, read-only) fails with RESOURCE_EXHAUSTED or UNAVAILABLE and\n"
        "changes nothing; lookups go on, writes resume once the disk can be written again.\n"
        "Graceful stop (SIGTERM/SIGINT/SIGHUP): new calls are refused, in-flight calls get\n"
        "--grace-seconds to finish, a final snapshot is written, the log is fsynced.\n"
        "A torn last log record (a write cut short by a crash) is cut off at the start with a\n"
        "warning; damage before it stops the start (exit 7) unless --truncate-corrupt-log.",
        parents=False,
    )
    serve.add_argument(
        "--address",
        type=_listen_address,
        default=_DEFAULTS.address,
        metavar="HOST:PORT",
        help=f"listen here; port 0 picks a free port (default {_DEFAULTS.address})",
    )
    serve.add_argument(
        "--data-dir",
        type=_directory_name,
        default=str(_DEFAULTS.data_dir),
        metavar="DIR",
        help=f"directory of the snapshots and the write-ahead log, created if missing "
        f"(default ./{_DEFAULTS.data_dir})",
    )
    serve.add_argument(
        "--k",
        type=_non_negative,
        default=_DEFAULTS.k,
        metavar="N",
        help=f"largest Hamming distance the index answers, bits (default {_DEFAULTS.k}, "
        "at most 3 for the 4-table design)",
    )
    serve.add_argument(
        "--snapshot-interval",
        type=_non_negative_float,
        default=_DEFAULTS.snapshot_interval,
        metavar="SECONDS",
        help=f"seconds between periodic snapshots; 0 turns them off "
        f"(default {_DEFAULTS.snapshot_interval:g})",
    )
    serve.add_argument(
        "--max-message-mb",
        type=_message_mb,
        default=_DEFAULTS.max_message_bytes / _MIB,
        metavar="N",
        help=f"largest request or response message, MiB "
        f"(default {_DEFAULTS.max_message_bytes / _MIB:g})",
    )
    serve.add_argument(
        "--max-batch",
        type=_positive,
        default=_DEFAULTS.max_batch,
        metavar="N",
        help=f"most documents, fingerprints or keys in one request (default {_DEFAULTS.max_batch})",
    )
    serve.add_argument(
        "--shingle-size",
        type=_positive,
        default=_DEFAULTS.shingle_size,
        metavar="N",
        help=f"words per shingle when the server fingerprints a text "
        f"(default {_DEFAULTS.shingle_size})",
    )
    serve.add_argument(
        "--min-words",
        type=_non_negative,
        default=_DEFAULTS.min_words,
        metavar="N",
        help="a text of fewer words is too short: not indexed, reported as TOO_SHORT\n"
        f"(default {_DEFAULTS.min_words}: only texts shorter than a shingle; the article behind\n"
        "SimHash deduplication uses 20)",
    )
    serve.add_argument(
        "--grace-seconds",
        type=_non_negative_float,
        default=_DEFAULTS.grace_seconds,
        metavar="SECONDS",
        help=f"on SIGTERM/SIGINT, how long in-flight calls may take to finish "
        f"(default {_DEFAULTS.grace_seconds:g})",
    )
    serve.add_argument(
        "--workers",
        type=_positive,
        default=_DEFAULTS.workers,
        metavar="N",
        help=f"threads serving RPCs (default {_DEFAULTS.workers})",
    )
    serve.add_argument(
        "--fsync",
        choices=FSYNC_POLICIES,
        default=_DEFAULTS.fsync,
        help=f"when the write-ahead log is fsynced (default {_DEFAULTS.fsync}; what each can "
        "lose: above)",
    )
    serve.add_argument(
        "--fsync-interval",
        type=_positive_float,
        default=_DEFAULTS.fsync_interval,
        metavar="SECONDS",
        help=f"seconds between log fsyncs under --fsync interval "
        f"(default {_DEFAULTS.fsync_interval:g})",
    )
    serve.add_argument(
        "--truncate-corrupt-log",
        action="store_true",
        help="at the start, cut the log at a damaged record found before its end instead of "
        "refusing to start; the changes logged from there on are lost (the bytes cut off are "
        "kept as .dropped files beside the log)",
    )
    serve.add_argument(
        "--tls-cert", metavar="PEM", help="serve TLS with this certificate chain (with --tls-key)"
    )
    serve.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    serve.add_argument(
        "--tls-client-ca",
        metavar="PEM",
        help="require client certificates signed by this CA (mutual TLS)",
    )
    serve.add_argument(
        "--token-file",
        metavar="FILE",
        help="require a bearer token: one `TOKEN ROLE` a line, ROLE read-write or read-only\n"
        "(tokens of 16 characters or more; health checks stay open)",
    )
    serve.add_argument(
        "--insecure",
        action="store_true",
        help="allow an address other than loopback without both TLS and tokens (warns)",
    )
    serve.add_argument(
        "--max-key-bytes",
        type=_positive,
        default=_DEFAULTS.max_key_bytes,
        metavar="N",
        help=f"longest key, UTF-8 bytes, at most 1024 (default {_DEFAULTS.max_key_bytes})",
    )
    serve.add_argument(
        "--max-text-bytes",
        type=_positive,
        default=_DEFAULTS.max_text_bytes,
        metavar="N",
        help=f"longest document text, UTF-8 bytes (default {_DEFAULTS.max_text_bytes})",
    )
    serve.add_argument(
        "--max-concurrent-rpcs",
        type=_positive,
        default=_DEFAULTS.max_concurrent_rpcs,
        metavar="N",
        help="calls served or queued at once; more are refused with RESOURCE_EXHAUSTED\n"
        f"(default {_DEFAULTS.max_concurrent_rpcs})",
    )
    serve.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (default: off;\n"
        "e.g. 127.0.0.1:9464)",
    )
    serve.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="log lines on stderr as text or one JSON object each (default text)",
    )
    serve.add_argument(
        "--log-level",
        choices=("debug", "info", "warning", "error"),
        default="warning",
        help="least severe log level shown (default warning; info adds snapshots and stops;\n"
        "keys and texts are never logged at info or above)",
    )
    serve.add_argument(
        "--config",
        metavar="FILE",
        help="read options from this TOML file (default: $PERMINDEX_CONFIG, else none);\n"
        "see the table below",
    )
    from permindex.cli.serve_config import describe

    serve.epilog = f"{describe(serve)}\n\n{serve.epilog}"
    serve.set_defaults(func=_cmd_serve)

    from permindex.cli import bench, manage, near, queries
    from permindex.cli.ingest import add_import_command, add_ingest_command

    add_ingest_command(command)
    queries.add_commands(command)  # query, fingerprint, pairs, get, remove, stats, snapshot
    manage.add_collections_command(command)
    manage.add_export_command(command)
    add_import_command(command)
    near.add_commands(command)  # clusters, flags, dedup
    bench.add_command(command)  # load generator
    return parser


# --------------------------------------------------------------------------------------------
# Entry point


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``permindex`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code.
    Never raises (except SystemExit for --help/--version/usage errors being turned into their
    code) and never prints a traceback unless PERMINDEX_DEBUG is set."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command == "serve":  # options also from --config FILE and PERMINDEX_* variables
            from permindex.cli.serve_config import ConfigError, apply_defaults, config_path

            arguments = list(sys.argv[1:] if argv is None else argv)
            try:
                apply_defaults(args.parser, config_path(arguments), os.environ)
            except ConfigError as error:
                _err(f"permindex serve: {error}")
                return EXIT_CODES["usage"]
            args = parser.parse_args(arguments)
    except SystemExit as exit_:  # --help, --version, usage errors (argparse printed them)
        return exit_.code if isinstance(exit_.code, int) else EXIT_CODES["usage"]
    prefix = f"permindex {args.command}"
    try:
        if hasattr(args, "tls_server_name"):  # a client command: its TLS, token, collection
            args.connection = ClientOptions.from_args(args)
        code: int = args.func(args)
        sys.stdout.flush()
        return code
    except SystemExit as exit_:  # parser.error() inside a command
        return exit_.code if isinstance(exit_.code, int) else EXIT_CODES["usage"]
    except BrokenPipeError:
        # stdout was closed early (`permindex pairs | head`): stop quietly.
        # Point stdout at /dev/null so that the interpreter's final flush does not fail again.
        try:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):  # no real file descriptor (captured output)
            pass
        return EXIT_CODES["error"]
    except KeyboardInterrupt:
        _err(f"{prefix}: interrupted")
        return 130
    except CommandError as error:
        _err(f"{prefix}: {error}")
        return error.exit_code
    except Exception as error:
        if os.environ.get("PERMINDEX_DEBUG"):
            raise
        message = str(error) or type(error).__name__
        if exit_code_for(error) == EXIT_CODES["error"]:
            message = f"{type(error).__name__}: {message}"
        _err(f"{prefix}: {message}")
        return exit_code_for(error)
