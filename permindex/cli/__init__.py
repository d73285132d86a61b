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
import gc
import os
import shlex
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

from permindex.addresses import DEFAULT_ADDRESS
from permindex.cli.args import Parser, client_options_parser
from permindex.cli.connection import ClientOptions
from permindex.cli.ingest import IngestSummary, ingest
from permindex.cli.output import CommandError
from permindex.cli.output import err as _err
from permindex.cli.output import exit_codes_epilog as _exit_codes_epilog
from permindex.cli.serve import add_serve_command
from permindex.cli.signals import (
    clear_unhandled_interrupt,
    ignore_stop_signals,
    ignore_until_exit,
    interrupted_code,
    interruption,
    raise_if_stopped,
    raise_noted,
    restore_default_handlers,
)
from permindex.cli.signals import install as install_stop_handler
from permindex.errors import EXIT_CODES, exit_code_for

__all__ = ["CommandError", "IngestSummary", "build_parser", "entry", "ingest", "main"]

_TOP_OPTIONS = ("-h", "--help", "--version")
#: The commands whose stop signals :mod:`permindex.cli.signals` handles while they run.
_STOP_HANDLED = ("dedup", "ingest", "import")

# --------------------------------------------------------------------------------------------
# Parser


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``permindex`` (every subcommand)."""
    from permindex import __version__

    formatter = argparse.RawDescriptionHelpFormatter
    parser = Parser(
        prog="permindex",
        description="A near-duplicate index server of 64-bit SimHash fingerprints, and its "
        "client.\nStart a server with `permindex serve`; the other commands talk to it\n"
        f"(--address HOST:PORT after the command, default {DEFAULT_ADDRESS}), except\n"
        "`fingerprint`, which needs no server.\n\n"
        "Fingerprints on input (query --fingerprint, JSONL for ingest and import): a string\n"
        "is hex, exactly 16 hex digits or 0x and 1 to 16 hex digits; a JSON number is its\n"
        "value (0 <= v < 2^64); anything else is refused (exit 4). Keys are strings.\n\n"
        "Options are written in full (--text, never --tex); an unknown one is refused (exit 2)\n"
        "with the command's closest option.",
        epilog=_exit_codes_epilog(),
        formatter_class=formatter,
        allow_abbrev=False,  # --tex is no --text (Parser)
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
            allow_abbrev=False,  # a Parser (the parser class of `commands`)
        )
        sub.set_defaults(parser=sub)
        return sub

    add_serve_command(command)

    from permindex.cli import bench, manage, near, queries
    from permindex.cli.ingest import add_import_command, add_ingest_command

    add_ingest_command(command)
    queries.add_commands(command)  # query, fingerprint, pairs, get, remove, stats, snapshot
    manage.add_collections_command(command)
    manage.add_export_command(command)
    add_import_command(command)
    near.add_commands(command)  # clusters, flags, dedup
    bench.add_command(command)  # load generator
    parser.set_defaults(command_names=tuple(commands.choices))
    return parser


def _options_before_command(parser: argparse.ArgumentParser, arguments: list[str]) -> str | None:
    """The message for options written before the command (``permindex --address X stats``),
    which argparse would report as an invalid command; None when ``arguments`` do not start
    with an option (other than ``--help`` and ``--version``)."""
    if not arguments or not arguments[0].startswith("-") or arguments[0] in _TOP_OPTIONS:
        return None
    names: tuple[str, ...] = parser.get_default("command_names")
    where = next((i for i, arg in enumerate(arguments) if arg in names), None)
    if where is None:
        return (
            f"{arguments[0]}: options go after the command, as in `permindex stats "
            f"{shlex.join(arguments)}` (commands: {', '.join(names)})"
        )
    before, command, rest = arguments[:where], arguments[where], arguments[where + 1 :]
    options = ", ".join(arg for arg in before if arg.startswith("-"))
    fixed = shlex.join([command, *rest, *before])
    return (
        f"options go after the command: write `permindex {fixed}` ({options} came before {command})"
    )


# --------------------------------------------------------------------------------------------
# Entry point


def entry(early: list[int] | None = None) -> NoReturn:
    """The ``permindex`` process: :func:`main`, then exit with its code. ``early``: the stop
    signals noted while the command's modules loaded (:func:`permindex.__main__.run`, whose
    noting handler stays in place until :func:`main` hands the signals to the command). After
    ``serve`` (whose data is written, synced and closed when :func:`main` returns) the process
    ends at once (``os._exit``, the output streams flushed first), without the interpreter's
    finalization: joining leftover threads and unloading numba's compiled code can otherwise
    outlast the promised exit within a second of the last in-flight call."""
    code = main(restore_signals=False, early=early)
    if sys.argv[1:2] and sys.argv[1] in _STOP_HANDLED:
        ignore_until_exit()  # done: a late Ctrl-C must not interrupt the exit itself
    clear_unhandled_interrupt()  # exit with ``code``, not by SIGINT (see its docstring)
    if sys.argv[1:2] == ["serve"]:
        import logging

        logging.shutdown()  # a --log-file's last lines written
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    # the command's garbage (a failed call and its traceback) finalised now, while grpc's
    # threads run: at the interpreter's exit a daemon thread can be stopped holding a call's
    # lock, and that call's finaliser then waits for it for ever
    gc.collect()
    sys.exit(code)


def main(
    argv: Sequence[str] | None = None,
    *,
    restore_signals: bool = True,
    early: list[int] | None = None,
) -> int:
    """Run ``permindex`` with ``argv`` (default ``sys.argv[1:]``) and return the exit code.
    Never raises (except SystemExit for --help/--version/usage errors being turned into their
    code) and never prints a traceback unless PERMINDEX_DEBUG is set. ``dedup`` handles SIGINT
    and SIGTERM itself while it runs, ``ingest`` and ``import`` SIGINT
    (:mod:`permindex.cli.signals`); ``restore_signals=False`` (:func:`entry`, which exits
    next) leaves its handlers in place instead of putting the previous ones back, so that a
    signal after the first one, once dedup has stopped and ignores them, cannot raise a
    KeyboardInterrupt past this function. ``early`` (from :func:`entry`): stop signals noted
    before the command started (by a handler that only notes them, left in place until now):
    the command's own handlers (or Python's defaults) are installed, then the first noted
    signal stops the command as one during its run would."""
    try:
        parser = build_parser()  # imports each group's module
    except KeyboardInterrupt as interrupt:
        return _interrupted("permindex", interrupt)
    arguments = list(sys.argv[1:] if argv is None else argv)
    misplaced = _options_before_command(parser, arguments)
    if misplaced is not None:
        _err(f"{parser.format_usage().rstrip()}\npermindex: error: {misplaced}")
        return EXIT_CODES["usage"]
    try:
        args = parser.parse_args(arguments)
        if args.command == "serve":  # options also from --config FILE and PERMINDEX_* variables
            from permindex.cli.serve import ConfigError, apply_defaults, config_path

            try:
                apply_defaults(args.parser, config_path(arguments), os.environ)
            except ConfigError as error:
                _err(f"permindex serve: {error}")
                return EXIT_CODES["usage"]
            args = parser.parse_args(arguments)
    except SystemExit as exit_:  # --help, --version, usage errors (argparse printed them)
        return exit_.code if isinstance(exit_.code, int) else EXIT_CODES["usage"]
    prefix = f"permindex {args.command}"
    previous: dict[signal.Signals, Any] = {}
    try:
        if hasattr(args, "tls_server_name"):  # a client command: its TLS, token, collection
            args.connection = ClientOptions.from_args(args)
        main_thread = threading.current_thread() is threading.main_thread()
        if early is not None and main_thread and args.command not in _STOP_HANDLED:
            restore_default_handlers()  # the noting handler of the imports' time goes
        if args.command in _STOP_HANDLED and main_thread:
            if args.command == "dedup":
                # SIGTERM stops dedup as Ctrl-C does: its worker processes and the ring file of
                # inflated blocks in /dev/shm are cleaned up instead of left behind
                previous = install_stop_handler()
            else:  # ingest, import: a Ctrl-C never lost (it prints what was stored)
                previous = install_stop_handler((signal.SIGINT,))
        if early:  # noted while the modules loaded: stops the command before it starts
            raise_noted(early[0])
        code: int = args.func(args)
        if previous:
            raise_if_stopped()  # a stop signal whose exception was swallowed on its way up
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
    except KeyboardInterrupt as interrupt:
        return _interrupted(prefix, interrupt)
    except CommandError as error:
        _err(f"{prefix}: {error}")
        return error.exit_code
    except Exception as error:
        behind = interruption(error)
        if behind is not None:
            return _interrupted(prefix, behind)
        if os.environ.get("PERMINDEX_DEBUG"):
            raise
        message = str(error) or type(error).__name__
        if exit_code_for(error) == EXIT_CODES["error"]:
            message = f"{type(error).__name__}: {message}"
        _err(f"{prefix}: {message}")
        return exit_code_for(error)
    finally:
        if previous and not restore_signals:  # done: nothing may interrupt the exit now
            ignore_stop_signals()
        for signum, handler in previous.items() if restore_signals else ():
            signal.signal(signum, handler)


def _interrupted(prefix: str, interrupt: KeyboardInterrupt) -> int:
    """The one line and the exit code of a command stopped by Ctrl-C (130) or SIGTERM (143)."""
    words, code = interrupted_code(interrupt)
    _err(f"{prefix}: {words}")
    return code
