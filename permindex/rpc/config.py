"""Server options: :class:`ServerConfig`, and the one declaration of each option.

Every field of :class:`ServerConfig` is declared with :func:`declare`: its default, its help
text, how a text value is parsed and checked, its metavar and choices.
:func:`declared_options` reads them back as :class:`Option` records, from which ``permindex
serve`` derives its flag (``--name``), its TOML key (``name``) and its environment variable
(``PERMINDEX_NAME``) (:mod:`permindex.cli.serve`). Importing this module does not import grpc or
argparse.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Final

from permindex.addresses import DEFAULT_ADDRESS, parse_address
from permindex.errors import InvalidArgumentError
from permindex.index.expiry import parse_duration
from permindex.index.keys.rule import MAX_KEY_BYTES
from permindex.storage.wal import FSYNC_POLICIES, FsyncPolicy
from permindex.text.fingerprint import MAX_MIN_WORDS, MAX_SHINGLE_SIZE, VOTES, Vote

__all__ = [
    "ENV_PREFIX",
    "EVENT_LOOPS",
    "Option",
    "ServerConfig",
    "declare",
    "declared_options",
    "memory_size",
    "non_negative",
    "non_negative_float",
    "positive",
    "positive_float",
]

#: The choices of ``serve --event-loop`` (see :func:`permindex.rpc.server.new_event_loop`).
EVENT_LOOPS = ("auto", "uvloop", "asyncio")

#: Prefix of the environment variable of every option: ``--max-batch`` is ``PERMINDEX_MAX_BATCH``.
ENV_PREFIX: Final = "PERMINDEX_"
_MIB: Final = 1024 * 1024
_METADATA_KEY: Final = "permindex.option"


@dataclass(frozen=True)
class _Declaration:
    help: str
    parse: Callable[[str], Any] | None
    metavar: str | None
    choices: tuple[Any, ...] | None
    name: str | None
    shown: Callable[[Any], object] | None
    is_switch: bool


@dataclass(frozen=True)
class Option:
    """One declared option, as :func:`declared_options` reads it from a dataclass field.

    Attributes:
        dest: the field's name (``max_message_bytes``): the attribute that holds the value.
        name: the option's name (``max-message-mb``); the flag is ``--name``, the TOML key and
            the environment variable are derived from it (:attr:`key`, :attr:`env`).
        default: the field's default, in the field's type and unit.
        shown: the default as the flag takes it (``64.0`` MiB for ``--max-message-mb``).
        help: the help text, ``{default}`` (:attr:`shown`) and ``{env}`` filled in.
        parse: text to value (the field's type and unit); raises ValueError with a message
            that names no source. None: the text itself.
        metavar: the flag's metavar, or None (a switch, or an option with choices).
        choices: the values allowed, or None.
        is_switch: a flag without a value that sets True (the default is False).
    """

    dest: str
    name: str
    default: Any
    shown: object
    help: str
    parse: Callable[[str], Any] | None
    metavar: str | None
    choices: tuple[Any, ...] | None
    is_switch: bool

    @property
    def flag(self) -> str:
        """``--name``."""
        return f"--{self.name}"

    @property
    def key(self) -> str:
        """The TOML key, ``name`` with ``_`` for ``-`` (a file may also spell it with ``-``)."""
        return self.name.replace("-", "_")

    @property
    def env(self) -> str:
        """The environment variable, ``PERMINDEX_`` and the key in upper case."""
        return ENV_PREFIX + self.key.upper()


def declare(
    help: str,
    *,
    parse: Callable[[str], Any] | None = None,
    metavar: str | None = None,
    choices: tuple[Any, ...] | None = None,
    name: str | None = None,
    shown: Callable[[Any], object] | None = None,
    switch: bool = False,
) -> dict[str, Any]:
    """The metadata of a dataclass field that declares an option: ``field(default=...,
    metadata=declare(...))`` (see :class:`Option` for each argument; ``name`` defaults to the
    field's name with ``-`` for ``_``, ``shown`` to the default itself; a ``switch`` has the
    default False and takes no value)."""
    return {_METADATA_KEY: _Declaration(help, parse, metavar, choices, name, shown, switch)}


def declared_options(cls: type) -> tuple[Option, ...]:
    """The options declared by the fields of the dataclass ``cls``, in field order.

    Raises:
        TypeError: ``cls`` is not a dataclass, has a field not declared by :func:`declare`, or
            a switch whose default is not False.
    """
    options = []
    for item in fields(cls):
        declaration = item.metadata.get(_METADATA_KEY)
        if not isinstance(declaration, _Declaration):
            raise TypeError(f"{cls.__name__}.{item.name} is not declared with declare()")
        if declaration.is_switch and item.default is not False:
            raise TypeError(f"{cls.__name__}.{item.name}: a switch has the default False")
        name = declaration.name or item.name.replace("_", "-")
        shown = item.default if declaration.shown is None else declaration.shown(item.default)
        env = ENV_PREFIX + name.replace("-", "_").upper()
        options.append(
            Option(
                dest=item.name,
                name=name,
                default=item.default,
                shown=shown,
                help=declaration.help.format(default=shown, env=env),
                parse=declaration.parse,
                metavar=declaration.metavar,
                choices=declaration.choices,
                is_switch=declaration.is_switch,
            )
        )
    return tuple(options)


# --------------------------------------------------------------------------------------------
# Value parsers: text to value, ValueError with the message a user sees after the option's name


def expire_duration(text: str) -> int:
    """Seconds of a duration such as ``30d`` (:func:`permindex.index.expiry.parse_duration`)."""
    try:
        return parse_duration(text)
    except InvalidArgumentError as error:
        raise ValueError(str(error)) from None


def non_negative(text: str) -> int:
    """An integer, 0 or more (ValueError otherwise)."""
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"not an integer: {text!r}") from None
    if value < 0:
        raise ValueError(f"must be 0 or more, got {value}")
    return value


def positive(text: str) -> int:
    """An integer, 1 or more (ValueError otherwise)."""
    value = non_negative(text)
    if value == 0:
        raise ValueError("must be 1 or more, got 0")
    return value


def shingle_size_value(text: str) -> int:
    """A shingle size: an integer from 1 to :data:`~permindex.text.fingerprint.MAX_SHINGLE_SIZE`
    (ValueError otherwise)."""
    return _at_most(positive(text), MAX_SHINGLE_SIZE)


def min_words_value(text: str) -> int:
    """A minimum of words: an integer from 0 to :data:`~permindex.text.fingerprint.MAX_MIN_WORDS`
    (ValueError otherwise)."""
    return _at_most(non_negative(text), MAX_MIN_WORDS)


def _at_most(value: int, high: int) -> int:
    if value > high:
        raise ValueError(f"must be at most {high:,}, got {value}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number, 0 or more (ValueError otherwise; nan and inf refused)."""
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"not a number: {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise ValueError(f"must be 0 or more, got {text}")
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {text}")
    return value


def positive_float(text: str) -> float:
    """A finite number, more than 0 (ValueError otherwise)."""
    value = non_negative_float(text)
    if value == 0:
        raise ValueError("must be more than 0")
    return value


def _message_bytes(text: str) -> int:
    """A size in MiB, more than 0 and at most 2047 (gRPC's limit is a 32-bit int), as bytes."""
    value = non_negative_float(text)
    if not 0 < value <= 2047:
        raise ValueError(f"must be more than 0 and at most 2047 MiB, got {text}")
    return int(value * _MIB)


#: The units of a size (:func:`memory_size`), case-insensitive: powers of 1000 and of 1024.
SIZE_UNITS: Final = {
    "": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
    "t": 10**12, "tb": 10**12, "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}  # fmt: skip
_SIZE: Final = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*", re.IGNORECASE)


def memory_size(text: str) -> int:
    """A size in bytes from a number and an optional unit (:data:`SIZE_UNITS`, the units of
    ``dedup --worker-memory``): ``8GiB``, ``500MB``, ``1.5 GB``, ``1048576``; at least 1 MiB
    (ValueError otherwise)."""
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in SIZE_UNITS:
        raise ValueError(
            f"not a size: {text!r} (a number and a unit: B, kB, MB, GB, TB or KiB, MiB, GiB, "
            "TiB; e.g. 8GiB)"
        )
    value = int(float(match.group(1)) * SIZE_UNITS[unit])
    if value < _MIB:
        raise ValueError(f"must be at least 1 MiB, got {text!r} ({value} bytes)")
    return value


def _listen_address(text: str) -> str:
    """``HOST:PORT`` with an ASCII port in [0, 65535]."""
    parse_address(text)
    return text


def _directory(text: str) -> Path:
    if not text:
        raise ValueError("must not be empty (use . for the current directory)")
    return Path(text)


# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServerConfig:
    """Options of one server process: one field per option, each declared with its default,
    unit and meaning (the ``help`` of its :func:`declare`, also printed by
    ``permindex serve --help``). Sizes are bytes, durations seconds, ``k`` bits. Paths that
    are None turn the feature off (TLS, tokens). What each ``fsync`` policy can lose:
    :mod:`permindex.storage.wal`; the token file format: :mod:`permindex.rpc.auth`.
    """

    address: str = field(
        default=DEFAULT_ADDRESS,
        metadata=declare(
            "listen here; port 0 picks a free port (default {default})",
            parse=_listen_address,
            metavar="HOST:PORT",
        ),
    )
    data_dir: Path = field(
        default=Path("permindex-data"),
        metadata=declare(
            "directory of the snapshots and the write-ahead log, created if missing "
            "(default ./{default})",
            parse=_directory,
            metavar="DIR",
        ),
    )
    k: int = field(
        default=3,
        metadata=declare(
            "largest Hamming distance the index answers, bits (default {default}, "
            "at most 3 for the 4-table design)",
            parse=non_negative,
            metavar="N",
        ),
    )
    expire_after: int | None = field(
        default=None,
        metadata=declare(
            "the default collection's entries expire when not added again within this\n"
            "duration: digits and s, m, h or d (30d, 12h, 90m, 45s; default: never)",
            parse=expire_duration,
            metavar="DURATION",
        ),
    )
    snapshot_interval: float = field(
        default=60.0,
        metadata=declare(
            "seconds between periodic snapshots; 0 turns them off (default {default:g})",
            parse=non_negative_float,
            metavar="SECONDS",
        ),
    )
    max_message_bytes: int = field(
        default=16 * _MIB,
        metadata=declare(
            "largest request or response message, MiB (default {default:g})",
            parse=_message_bytes,
            metavar="N",
            name="max-message-mb",
            shown=lambda size: size / _MIB,
        ),
    )
    max_batch: int = field(
        default=100_000,
        metadata=declare(
            "most documents, fingerprints or keys in one request (default {default})",
            parse=positive,
            metavar="N",
        ),
    )
    shingle_size: int = field(
        default=3,
        metadata=declare(
            f"words per shingle when the server fingerprints a text (1 to {MAX_SHINGLE_SIZE:,};\n"
            "default {default})",
            parse=shingle_size_value,
            metavar="N",
        ),
    )
    min_words: int = field(
        default=0,
        metadata=declare(
            "a text of fewer words is too short: not indexed, reported as TOO_SHORT\n"
            "(default {default}: only texts shorter than a shingle; the article behind\n"
            "SimHash deduplication uses 20)",
            parse=min_words_value,
            metavar="N",
        ),
    )
    vote: Vote = field(
        default="multiset",
        metadata=declare(
            "how shingles vote when the server fingerprints a text: multiset (default: each\n"
            "time it occurs) or set (each distinct shingle once); for the default collection\n"
            "and the collections created on this server (kept in their collection.json)",
            choices=VOTES,
        ),
    )
    grace_seconds: float = field(
        default=30.0,
        metadata=declare(
            "on SIGTERM/SIGINT/SIGHUP, how long in-flight calls may take to finish; idle\n"
            "streams and health watches are closed at once (default {default:g})",
            parse=non_negative_float,
            metavar="SECONDS",
        ),
    )
    workers: int = field(
        default=4,
        metadata=declare(
            "threads of the executor that runs index work (lookups, writes, joins); calls\n"
            "and open streams are served on one asyncio event loop and hold no thread\n"
            "(default {default})",
            parse=positive,
            metavar="N",
        ),
    )
    event_loop: str = field(
        default="auto",
        metadata=declare(
            "the event loop the server runs on: uvloop (libuv; the faster, see the docs'\n"
            "Performance page), asyncio (the standard library's), auto: uvloop where it is\n"
            "installed (every platform but Windows), else asyncio (default {default})",
            choices=EVENT_LOOPS,
        ),
    )
    fsync: FsyncPolicy = field(
        default="always",
        metadata=declare(
            "when the write-ahead log is fsynced (default {default}; what each can lose: above)",
            choices=FSYNC_POLICIES,
        ),
    )
    fsync_interval: float = field(
        default=0.1,
        metadata=declare(
            "seconds between log fsyncs under --fsync interval (default {default:g})",
            parse=positive_float,
            metavar="SECONDS",
        ),
    )
    truncate_corrupt_log: bool = field(
        default=False,
        metadata=declare(
            "at the start, cut the log at a damaged record found before its end instead of "
            "refusing to start; the changes logged from there on are lost (the bytes cut off are "
            "kept as .dropped files beside the log)",
            switch=True,
        ),
    )
    tls_cert: Path | None = field(
        default=None,
        metadata=declare(
            "serve TLS with this certificate chain (with --tls-key)", parse=Path, metavar="PEM"
        ),
    )
    tls_key: Path | None = field(
        default=None,
        metadata=declare("private key of --tls-cert", parse=Path, metavar="PEM"),
    )
    tls_client_ca: Path | None = field(
        default=None,
        metadata=declare(
            "require client certificates signed by this CA (mutual TLS)",
            parse=Path,
            metavar="PEM",
        ),
    )
    token_file: Path | None = field(
        default=None,
        metadata=declare(
            "require a bearer token: one `TOKEN ROLE [COLLECTIONS]` a line, ROLE read,\n"
            "write or admin, COLLECTIONS names or patterns, comma-separated (default *);\n"
            "tokens of 16 characters or more; read again when the file changes; health\n"
            "checks stay open",
            parse=Path,
            metavar="FILE",
        ),
    )
    insecure: bool = field(
        default=False,
        metadata=declare(
            "allow an address other than loopback without both TLS and tokens (warns)", switch=True
        ),
    )
    max_key_bytes: int = field(
        default=MAX_KEY_BYTES,
        metadata=declare(
            f"longest key, UTF-8 bytes, at most {MAX_KEY_BYTES} (default {{default}})",
            parse=positive,
            metavar="N",
        ),
    )
    max_text_bytes: int = field(
        default=32 * _MIB,
        metadata=declare(
            "longest document text, UTF-8 bytes (default {default})",
            parse=positive,
            metavar="N",
        ),
    )
    max_concurrent_rpcs: int = field(
        default=256,
        metadata=declare(
            "unary calls served at once; more are refused with RESOURCE_EXHAUSTED; streams\n"
            "are not counted here (--max-streams) and health checks are always answered\n"
            "(default {default})",
            parse=positive,
            metavar="N",
        ),
    )
    max_streams: int = field(
        default=1024,
        metadata=declare(
            "streams open at once (Ingest, QueryColumns, Pairs, Clusters, Flags,\n"
            "ExactDuplicates, Export, reflection); one more is refused with\n"
            "RESOURCE_EXHAUSTED; health watches have a pool of this many of their own\n"
            "(default {default})",
            parse=positive,
            metavar="N",
        ),
    )
    max_streams_per_address: int = field(
        default=256,
        metadata=declare(
            "streams open at once from one client IP address (any port) (default {default})",
            parse=positive,
            metavar="N",
        ),
    )
    max_connections: int = field(
        default=2048,
        metadata=declare(
            "TCP connections open at once; one more is closed at once (the server also\n"
            "raises its open-file limit to the system's hard limit at the start)\n"
            "(default {default})",
            parse=positive,
            metavar="N",
        ),
    )
    stream_idle_seconds: float = field(
        default=300.0,
        metadata=declare(
            "a stream whose client sends no message (or reads none) for this long is closed\n"
            "with DEADLINE_EXCEEDED; health watches are exempt; 0 turns it off\n"
            "(default {default:g})",
            parse=non_negative_float,
            metavar="SECONDS",
        ),
    )
    keepalive_seconds: float = field(
        default=60.0,
        metadata=declare(
            "ping a connection idle this long; a peer that does not answer within\n"
            "--keepalive-timeout-seconds is dropped with its calls (default {default:g})",
            parse=positive_float,
            metavar="SECONDS",
        ),
    )
    keepalive_timeout_seconds: float = field(
        default=20.0,
        metadata=declare(
            "how long a keepalive ping may go unanswered (default {default:g})",
            parse=positive_float,
            metavar="SECONDS",
        ),
    )
    max_memory: int | None = field(
        default=None,
        metadata=declare(
            "refuse a write (Add, Ingest, CheckAndAdd, CreateCollection) that would take the\n"
            "index memory of all collections past this size, with RESOURCE_EXHAUSTED and\n"
            "nothing applied; reads and removes are always served. A number and a unit: B,\n"
            "kB, MB, GB, TB or KiB, MiB, GiB, TiB (8GiB). The accounted memory (Stats'\n"
            "memory_bytes) is not the process's resident memory, which is larger: see the\n"
            "docs' Limits page (default: no limit)",
            parse=memory_size,
            metavar="SIZE",
        ),
    )
    max_join_work: int = field(
        default=1_000_000_000,
        metadata=declare(
            "largest work estimate of one Pairs, Clusters, Flags or ExactDuplicates call:\n"
            "candidate pairs to verify plus pairs of identical fingerprints (Jaccard\n"
            "collections: of identical shingle sets); a call above it is refused with\n"
            "RESOURCE_EXHAUSTED before any work (default {default})",
            parse=positive,
            metavar="N",
        ),
    )
    metrics_address: str | None = field(
        default=None,
        metadata=declare(
            "serve Prometheus metrics on http://HOST:PORT/metrics (default: off;\n"
            "e.g. 127.0.0.1:9464; port 0 picks a free port, named in the serving line)",
            parse=_listen_address,
            metavar="HOST:PORT",
        ),
    )
    metrics_hide_collections: bool = field(
        default=False,
        metadata=declare(
            "leave the collections' names out of the metrics: each gauge summed over\n"
            'every collection under collection="all"',
            switch=True,
        ),
    )
