"""``permindex serve``: its parser, its options' layering, and the command that runs the server.

The options are declared once: the server's as the fields of
:class:`~permindex.rpc.config.ServerConfig`, the logging options and ``--config`` here, the same
way (:func:`~permindex.rpc.config.declare`). From each declaration come the flag ``--some-option``,
the key ``some_option = VALUE`` (or ``some-option``) of the TOML file named by ``--config FILE``
(top level, or under a ``[serve]`` table) and the environment variable ``PERMINDEX_SOME_OPTION``.
Precedence, highest first: command-line flags, environment variables, the file, the defaults.
Values are checked as the flag's would be (a misspelled key or a bad value is a
:class:`ConfigError` naming its source); a switch (``--insecure``) takes ``true``/``false`` in
TOML and ``1``/``0``, ``true``/``false``, ``yes``/``no``, ``on``/``off`` in the environment.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from permindex.cli.args import CommandFactory, flag_type
from permindex.cli.logs import LOG_FORMATS, LOG_LEVELS, configure_logging
from permindex.cli.output import compile_notice
from permindex.errors import EXIT_CODES, InvalidArgumentError
from permindex.rpc.config import ENV_PREFIX, Option, ServerConfig, declare, declared_options

__all__ = [
    "CONFIG_OPTION",
    "SERVE_OPTIONS",
    "ConfigError",
    "ServeLogging",
    "add_serve_command",
    "apply_defaults",
    "config_path",
]


@dataclass(frozen=True)
class ServeLogging:
    """The options of ``serve`` that are not the server's: how the process logs
    (:func:`permindex.cli.logs.configure_logging`)."""

    log_format: str = field(
        default="text",
        metadata=declare(
            "log lines on stderr as text or one JSON object each (default {default})",
            choices=LOG_FORMATS,
        ),
    )
    log_level: str = field(
        default="warning",
        metadata=declare(
            "least severe log level shown (default {default}; info adds snapshots and stops;\n"
            "keys and texts are never logged at info or above)",
            choices=LOG_LEVELS,
        ),
    )


@dataclass(frozen=True)
class _ConfigFile:
    config: str | None = field(
        default=None,
        metadata=declare(
            "read options from this TOML file (default: ${env}, else none);\nsee the table below",
            metavar="FILE",
        ),
    )


#: The options read from flags, the environment and the TOML file, in ``--help`` order.
SERVE_OPTIONS: Final = declared_options(ServerConfig) + declared_options(ServeLogging)
_SERVER_FIELDS: Final = tuple(item.name for item in fields(ServerConfig))
#: ``--config FILE``: a flag or its environment variable, never a key of the file itself.
CONFIG_OPTION: Final = declared_options(_ConfigFile)[0]
#: PERMINDEX_* variables that are not serve options: --config's, the client commands' token,
#: and the switch that lets tracebacks through (permindex.cli.main).
#: permindex's variables that are no serve option: the client's token, the debug switch, and
#: the compiled kernels' cache directory (permindex.jit).
_OTHER_VARIABLES: Final = frozenset(
    {CONFIG_OPTION.env, "PERMINDEX_TOKEN", "PERMINDEX_DEBUG", "PERMINDEX_CACHE_DIR"}
)
_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off", ""})

_DEFAULTS: Final = ServerConfig()
_DESCRIPTION: Final = (
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
    "--grace-seconds to finish, a final snapshot is written if anything changed since the\n"
    "last one, the log is fsynced.\n"
    "A torn last log record (a write cut short by a crash) is cut off at the start with a\n"
    "warning; damage before it stops the start (exit 7) unless --truncate-corrupt-log."
)


class ConfigError(ValueError):
    """A bad value or key in the file or the environment; the message names its source."""


# --------------------------------------------------------------------------------------------
# The parser


def _add_flag(parser: argparse.ArgumentParser, declared: Option) -> None:
    if declared.is_switch:
        parser.add_argument(
            declared.flag, action="store_true", dest=declared.dest, help=declared.help
        )
        return
    arguments: dict[str, Any] = {"default": declared.default, "dest": declared.dest}
    if declared.parse is not None:
        arguments["type"] = flag_type(declared.parse)
    if declared.choices is not None:
        arguments["choices"] = declared.choices
    if declared.metavar is not None:
        arguments["metavar"] = declared.metavar
    parser.add_argument(declared.flag, help=declared.help, **arguments)


def _describe() -> str:
    """The epilog of ``serve --help``: the file and environment names of every option."""
    lines = [
        "configuration: every option is also read from the TOML file of --config FILE",
        "(`option_name = value`, at the top or under [serve]) and from the environment",
        f"({ENV_PREFIX}OPTION_NAME); flags > environment > file > defaults.",
    ]
    flag_width = max(len(declared.flag) for declared in SERVE_OPTIONS)
    env_width = max(len(declared.env) for declared in SERVE_OPTIONS)
    for declared in SERVE_OPTIONS:
        default = declared.default
        shown = "off" if default is None or default is False else declared.shown
        lines.append(f"  {declared.flag:<{flag_width}}  {declared.env:<{env_width}}  {shown}")
    return "\n".join(lines)


def add_serve_command(command: CommandFactory) -> argparse.ArgumentParser:
    """Add the ``serve`` subparser (made by ``command``), a flag for every declared option."""
    serve: argparse.ArgumentParser = command(
        "serve", "run the index server", _DESCRIPTION, parents=False
    )
    for declared in (*SERVE_OPTIONS, CONFIG_OPTION):
        _add_flag(serve, declared)
    serve.add_argument(
        "--check-config",
        action="store_true",
        help="check the configuration (flags, environment, --config file), the token file and "
        "the TLS files, and the data directory, then exit: 0 and one line when all is well, "
        "2 and what is wrong otherwise; nothing is loaded or served",
    )
    serve.epilog = f"{_describe()}\n\n{serve.epilog}"
    serve.set_defaults(func=_cmd_serve)
    return serve


# --------------------------------------------------------------------------------------------
# The file and the environment


def _convert(declared: Option, value: object, source: str) -> Any:
    """A value from the file (any TOML value) or the environment (a string), checked as the
    flag's would be.

    Raises:
        ConfigError: a bad value; the message starts with ``source``.
    """
    flag = declared.flag
    if declared.is_switch:
        if isinstance(value, bool):
            return value
        text = str(value).strip().lower()
        if text in _TRUE or text in _FALSE:
            return text in _TRUE
        raise ConfigError(f"{source}: {flag} is a switch: true or false, not {value!r}")
    if isinstance(value, bool) or isinstance(value, dict | list):
        raise ConfigError(f"{source}: {flag} takes a value, not {value!r}")
    text = str(value)
    try:
        converted = text if declared.parse is None else declared.parse(text)
    except (ValueError, TypeError) as error:
        raise ConfigError(f"{source}: {flag} {text!r}: {error}") from None
    if declared.choices is not None and converted not in declared.choices:
        choices = ", ".join(map(str, declared.choices))
        raise ConfigError(f"{source}: {flag} {text!r}: choose from {choices}")
    return converted


def _file_values(config_file: str) -> dict[str, Any]:
    """The options set by the TOML file ``config_file``, by destination name.

    Raises:
        ConfigError: an unknown key, a bad value, an unreadable or malformed file.
    """
    try:
        with open(config_file, "rb") as file:
            table = tomllib.load(file)
    except OSError as error:
        raise ConfigError(
            f"{CONFIG_OPTION.flag} {config_file}: {error.strerror or error}"
        ) from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{CONFIG_OPTION.flag} {config_file}: not valid TOML: {error}") from None
    if isinstance(table.get("serve"), dict):
        table = table["serve"]
    by_key = {declared.key: declared for declared in SERVE_OPTIONS}
    values: dict[str, Any] = {}
    for key, value in table.items():
        declared = by_key.get(key.replace("-", "_"))
        if declared is None:
            known = ", ".join(sorted(by_key))
            raise ConfigError(f"{config_file}: unknown option {key!r} (known: {known})")
        source = f"{config_file}: {key}"
        _check_toml_type(declared, value, source)
        values[declared.dest] = _convert(declared, value, source)
    return values


def _check_toml_type(declared: Option, value: object, source: str) -> None:
    """Refuse a TOML value of the wrong kind: a string for a numeric option (``k = "3"``), a
    number for a text option (``data_dir = 5``), so that a quoting slip is not read as something
    else. Switches and values of the right kind pass (their content is checked by
    :func:`_convert`).

    Raises:
        ConfigError: the value's kind does not match the option's; the message names the source.
    """
    default = declared.default
    if declared.is_switch or isinstance(default, bool):
        return
    if isinstance(default, int | float) and isinstance(value, str):
        raise ConfigError(
            f"{source}: {declared.flag} takes a number, not the string {value!r} "
            f"(write {declared.key} = {value} without quotes)"
        )
    if isinstance(default, str | Path) and isinstance(value, int | float):
        raise ConfigError(
            f"{source}: {declared.flag} takes a string, not the number {value!r} "
            f'(write {declared.key} = "{value}")'
        )


def apply_defaults(
    parser: argparse.ArgumentParser, config_file: str | None, environ: Mapping[str, str]
) -> None:
    """Set the defaults of ``parser`` (the serve subparser) from ``config_file`` (TOML) and
    then from ``environ``, so that flags given on the command line still win.

    Raises:
        ConfigError: an unknown key, a bad value, an unreadable or malformed file.
    """
    values = {} if config_file is None else _file_values(config_file)
    _refuse_unknown_variables(environ)
    for declared in SERVE_OPTIONS:
        if declared.env in environ:
            source = f"environment {declared.env}"
            values[declared.dest] = _convert(declared, environ[declared.env], source)
    parser.set_defaults(**values)


def _refuse_unknown_variables(environ: Mapping[str, str]) -> None:
    """Refuse a ``PERMINDEX_*`` variable that names no option (a misspelling such as
    ``PERMINDEX_MAX_BATCHES`` would otherwise be ignored in silence), as the file refuses an
    unknown key. The client's ``PERMINDEX_TOKEN``, ``PERMINDEX_DEBUG`` and the kernels'
    ``PERMINDEX_CACHE_DIR`` are allowed.

    Raises:
        ConfigError: the first unknown variable, with the closest known name if there is one.
    """
    known = {declared.env for declared in SERVE_OPTIONS} | _OTHER_VARIABLES
    for name in sorted(environ):
        if name.startswith(ENV_PREFIX) and name not in known:
            suffixes = sorted(known_name[len(ENV_PREFIX) :] for known_name in known)
            close = difflib.get_close_matches(name[len(ENV_PREFIX) :], suffixes, n=1)
            hint = f"did you mean {ENV_PREFIX}{close[0]}? " if close else ""
            raise ConfigError(
                f"environment {name}: unknown variable ({hint}`permindex serve --help` lists "
                "every option's variable); unset it or fix its name"
            )


def config_path(argv: list[str]) -> str | None:
    """The value of ``--config`` in ``argv`` (``--config FILE`` or ``--config=FILE``), or
    ``PERMINDEX_CONFIG`` from the environment."""
    for i, arg in enumerate(argv):
        if arg == CONFIG_OPTION.flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(f"{CONFIG_OPTION.flag}="):
            return arg.split("=", 1)[1]
    return os.environ.get(CONFIG_OPTION.env) or None


# --------------------------------------------------------------------------------------------
# The command


def _limit_malloc_arenas(arenas: int = 2) -> None:
    """Cap glibc's malloc arenas (M_ARENA_MAX) before the server starts its threads.

    glibc gives threads that allocate at once arenas of their own (up to 8 per core); the RPC
    threads of a server then keep freed memory spread over many arenas, and the resident size
    creeps up under a steady load (tests/test_soak.py), at the same latency with 2 arenas (the
    GIL serializes most allocations anyway). Skipped when MALLOC_ARENA_MAX is set in the
    environment, or where libc is not glibc."""
    if "MALLOC_ARENA_MAX" in os.environ or not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        ctypes.CDLL("libc.so.6").mallopt(-8, arenas)  # M_ARENA_MAX = -8 in malloc.h
    except (OSError, AttributeError):  # not glibc
        pass


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _tls_problem(config: ServerConfig) -> str | None:
    """What is wrong with the TLS options, checked before the start: a certificate without its
    key (or the reverse, or a client CA without both), a file that cannot be read, or one that
    holds no PEM block of the kind its option takes. None when they are fine or off."""
    from permindex.rpc.auth import server_credentials

    for option, path, kind in (
        ("--tls-cert", config.tls_cert, "CERTIFICATE"),
        ("--tls-key", config.tls_key, "PRIVATE KEY"),
        ("--tls-client-ca", config.tls_client_ca, "CERTIFICATE"),
    ):
        if path is None:
            continue
        try:
            text = Path(path).read_bytes()
        except OSError as error:
            return f"{option} {path}: cannot read it: {error.strerror or error}"
        if b"-----BEGIN " not in text or kind.encode() not in text:
            return f"{option} {path}: not a PEM file with a {kind.lower()} in it"
    try:
        server_credentials(config)  # the options that go together (the files read above)
    except InvalidArgumentError as error:
        return str(error)
    return None


def _start_problem(config: ServerConfig) -> str | None:
    """What in ``config`` would stop the server's start for a bad command line, found before
    anything is loaded, by the same checks the server makes: a k above the default
    collection's design (:func:`permindex.index.tables.permutation.check_design_k`), TLS options
    that
    do not go together or files that are not PEM (:func:`_tls_problem`), a token file that
    :func:`permindex.rpc.auth.load_tokens` refuses or cannot read. None when none of these."""
    from permindex.index.tables.permutation import DEFAULT_DESIGN, check_design_k, design_for_k
    from permindex.rpc.auth import load_tokens

    try:
        check_design_k(config.k, DEFAULT_DESIGN)
    except InvalidArgumentError:
        most = DEFAULT_DESIGN.max_k
        other = design_for_k(config.k)
        collection = (
            f"no design answers k={config.k}"
            if other is None
            else f"a collection of another design answers k={config.k}: `permindex collections "
            f"create NAME --k {config.k} --blocks {other.blocks} --leading {other.leading}`"
        )
        return (
            f"--k {config.k} is above {most}, the largest k the server's {DEFAULT_DESIGN} "
            f"guarantees: serve with --k {most} or less ({collection})"
        )
    tls = _tls_problem(config)
    if tls is not None:
        return tls
    if config.token_file is not None:
        try:
            load_tokens(config.token_file)
        except InvalidArgumentError as error:
            return f"--token-file: {error}"
        except OSError as error:
            return f"--token-file {config.token_file}: cannot read it: {error.strerror or error}"
    return None


def _check_config(config: ServerConfig) -> int:
    """``serve --check-config`` once the options, TLS files and token file passed
    :func:`_start_problem`: the address's exposure and the data directory (a folder this user
    can write, or one it can create; not held by another server). One line on stderr; exit 0
    when all is well, 2 otherwise."""
    from permindex.rpc.auth import exposure_problem, is_loopback
    from permindex.rpc.server import refuse_in_use

    problems: list[str] = []
    exposed = exposure_problem(config)
    if exposed is not None and not config.insecure:
        problems.append(f"{exposed} (serve TLS and tokens, or pass --insecure)")
    if config.metrics_address is not None and not is_loopback(
        config.metrics_address.rpartition(":")[0]
    ):
        _err(
            f"permindex serve: note: --metrics-address {config.metrics_address} is reachable "
            "from other machines and needs no token: it shows every collection's name "
            "(--metrics-hide-collections leaves them out)"
        )
    data = Path(config.data_dir)
    existing = data
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if existing.exists() and not existing.is_dir():
        problems.append(f"--data-dir {data}: {existing} is not a directory")
    elif not os.access(existing, os.W_OK | os.X_OK):
        problems.append(f"--data-dir {data}: {existing} cannot be written by this user")
    elif not problems and refuse_in_use(config) is not None:
        problems.append("the address, the metrics address or the data directory is in use")
    if problems:
        _err("permindex serve: configuration not OK: " + "; ".join(problems))
        return EXIT_CODES["usage"]
    parts = [f"address {config.address}", f"data directory {data}"]
    if exposed is not None:
        parts.append("insecure: reachable without TLS and tokens (--insecure)")
    if config.tls_cert is not None:
        parts.append("TLS" + (" with client certificates" if config.tls_client_ca else ""))
    if config.token_file is not None:
        from permindex.rpc.auth import load_tokens

        parts.append(f"{len(load_tokens(config.token_file))} tokens")
    _err(f"permindex serve: configuration OK ({', '.join(parts)})")
    return 0


def _cmd_serve(args: argparse.Namespace) -> int:
    """Run the server with the options in ``args`` (flags over the layers of
    :func:`apply_defaults`) until it stops; its exit code.

    Exits 2 (``parser.error``) on ``--max-key-bytes`` above the index's limit, a ``--k`` above
    the design, a token file that is refused or unreadable (:func:`_start_problem`); returns 2
    on a non-loopback address without TLS and tokens unless ``--insecure``.
    """
    from permindex.index.keys.rule import MAX_KEY_BYTES
    from permindex.rpc.auth import exposure_problem
    from permindex.rpc.server import refuse_in_use, run_server

    if args.max_key_bytes > MAX_KEY_BYTES:
        args.parser.error(f"--max-key-bytes: at most {MAX_KEY_BYTES} (the index's limit)")
    config = ServerConfig(**{dest: getattr(args, dest) for dest in _SERVER_FIELDS})
    problem = _start_problem(config)
    if problem is not None:
        args.parser.error(problem)
    if args.check_config:
        return _check_config(config)
    exposed = exposure_problem(config)
    if exposed is not None and not config.insecure:
        _err(
            f"permindex serve: refusing to start: {exposed}.\n  Serve TLS and tokens, listen on "
            "127.0.0.1, or pass --insecure to accept this."
        )
        return EXIT_CODES["usage"]
    if exposed is not None:
        _err(f"permindex serve: WARNING: {exposed} (--insecure)")
    logging = ServeLogging(**{item.name: getattr(args, item.name) for item in fields(ServeLogging)})
    if logging != ServeLogging():
        configure_logging(logging.log_format, logging.log_level)
    in_use = refuse_in_use(config)  # at once, not after the kernels load
    if in_use is not None:
        return in_use
    _limit_malloc_arenas()
    _freeze_kernels()
    return run_server(config)


def _freeze_kernels() -> None:
    """Load the compiled kernels the server uses, then move every object made so far out of
    the garbage collector's view (``gc.freeze()``): numba's kernels bring about 10^5 objects
    that live as long as the process, and a full collection of them is a pause of the server
    (benchmarks/README.md); the server's own collections then look at the objects of requests
    only. Only the ``serve`` command does this: it owns its process.

    Loading from numba's cache is quick; the first start after an install (or an upgrade of
    numba or permindex) compiles instead, which takes longer: once it has compiled for a
    second, one line on stderr says what is loading and how long each case takes
    (:func:`~permindex.cli.output.compile_notice`: ``loading the lookup and fingerprint
    kernels``), so that a silent start does not look like a hang."""
    import gc

    from permindex.index.search.lookup import kernels
    from permindex.text.fingerprint import simhash_many

    with compile_notice("serve", "lookup and fingerprint", run="start"):
        kernels()
        simhash_many(["load the fingerprint kernel now"])
    gc.collect()
    gc.freeze()
