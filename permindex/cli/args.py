"""The command-line vocabulary every ``permindex`` command shares: the parser class, argparse
value types, the fingerprint syntax of the command line, the client options (``--address``,
TLS, token, ``--collection``), the input field options (``--text-field``...) with the hint a
line without those fields gets, and the type of the subcommand factory that command modules
register with.
"""

from __future__ import annotations

import argparse
import difflib
import gzip
import json
import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, overload

from permindex.addresses import DEFAULT_ADDRESS, address_argument
from permindex.errors import InvalidArgumentError
from permindex.index.hamming import parse_fingerprint
from permindex.rpc import config
from permindex.text.documents import MalformedInputError

__all__ = [
    "CommandFactory",
    "Parser",
    "add_field_arguments",
    "bounded",
    "client_options_parser",
    "duration",
    "flag_type",
    "min_words_value",
    "non_negative",
    "positive",
    "shingle_size_value",
    "with_field_hint",
]

_T = TypeVar("_T")
_N = TypeVar("_N")

#: What argparse takes for a negative number (a value, not an option) where no option looks like
#: one, as none of permindex's does.
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class Parser(argparse.ArgumentParser):
    """The argument parser of ``permindex`` and of each of its commands (the subparsers that
    :meth:`add_subparsers` makes are Parsers too). Built with ``allow_abbrev=False``, as every
    parser of the command is, so that an option is taken only as written (``--tex`` is not
    ``--text``). An unknown option is reported first, before a missing required argument, with
    the closest option of the same command when one is close (``unknown option --txt; did you
    mean --text?``): a usage error (exit 2)."""

    @overload
    def parse_known_args(
        self, args: Iterable[str] | None = None, namespace: None = None
    ) -> tuple[argparse.Namespace, list[str]]: ...
    @overload
    def parse_known_args(
        self, args: Iterable[str] | None, namespace: _N
    ) -> tuple[_N, list[str]]: ...
    @overload
    def parse_known_args(self, *, namespace: _N) -> tuple[_N, list[str]]: ...

    def parse_known_args(self, args: Iterable[str] | None = None, namespace: Any = None) -> Any:
        """argparse's, after :meth:`unknown_option_error` found no unknown option in ``args``
        (default ``sys.argv[1:]``)."""
        arguments = list(sys.argv[1:] if args is None else args)
        problem = self.unknown_option_error(arguments)
        if problem is not None:
            self.error(problem)
        return super().parse_known_args(arguments, namespace)

    def unknown_option_error(self, arguments: list[str]) -> str | None:
        """The message for the first option of ``arguments`` that this parser does not know
        (``unknown option --txt; did you mean --text?``, the suggestion only when one of its
        options is close), or None. An argument is an option as argparse reads one: it starts
        with ``-`` and is not ``-`` alone, a negative number or text with a space (before any
        ``=``); ``--NAME=VALUE`` is ``--NAME``. Nothing after ``--`` is an option; a parser of
        commands reads the options before its command only (the command's parser, the rest)."""
        known = self._option_string_actions
        commands = self._subparsers is not None
        for argument in arguments:
            if argument == "--":
                return None
            if not argument.startswith(self.prefix_chars[0]) or argument == "-":
                if commands:
                    return None
                continue
            name = argument.split("=", 1)[0]
            if (
                name in known
                or argument[:2] in known  # -h and any one-letter option with its value joined
                or _NEGATIVE_NUMBER.match(argument)
                or " " in name
            ):
                continue
            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            return f"unknown option {name}{hint}"
        return None


class CommandFactory(Protocol):
    """``command(name, help, description, parents=True)``: a new subparser of ``permindex``
    (``parents``: with the client options), made by :func:`permindex.cli.build_parser`."""

    def __call__(self, name: str, help_: str, description: str, *, parents: bool = True) -> Any: ...


def flag_type(parse: Callable[[str], _T]) -> Callable[[str], _T]:
    """``parse`` (text to value, ValueError with the message a user reads) as an argparse type:
    the ValueError's message becomes argparse's."""

    def convert(text: str) -> _T:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    convert.__name__ = getattr(parse, "__name__", "value")
    return convert


#: An argparse type: an integer, 0 or more.
non_negative = flag_type(config.non_negative)
#: An argparse type: an integer, 1 or more.
positive = flag_type(config.positive)
#: An argparse type: a shingle size, 1 to MAX_SHINGLE_SIZE (1,024).
shingle_size_value = flag_type(config.shingle_size_value)
#: An argparse type: a minimum of words, 0 to MAX_MIN_WORDS (1,000,000).
min_words_value = flag_type(config.min_words_value)
#: An argparse type: a duration (``30d``, ``12h``, ``90m``, ``45s``), in seconds.
duration = flag_type(config.expire_duration)


def bounded(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        value = non_negative(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {value}")
        return value

    return parse


def add_field_arguments(parser: argparse.ArgumentParser, *, added_at: bool = False) -> None:
    """``--id-field``, ``--text-field`` and ``--fingerprint-field``: the JSONL fields (Parquet
    columns) of the key, the text and the fingerprint, as ``args.id_field``, ``args.text_field``
    and ``args.fingerprint_field``; with ``added_at``, also ``--added-at-field``
    (``args.added_at_field``), that of the optional crawl time."""
    fields = [
        ("--id-field", "id", "key"),
        ("--text-field", "text", "text"),
        ("--fingerprint-field", "fingerprint", "fingerprint"),
    ]
    if added_at:
        fields.append(("--added-at-field", "added_at", "optional crawl time, Unix seconds"))
    for flag, default, what in fields:
        parser.add_argument(
            flag,
            default=default,
            metavar="NAME",
            help=f"JSONL field (Parquet column) of the {what} (default {default})",
        )


#: The most bytes read again to find the line (a line far into a huge file goes without its
#: fields: the hint still names the option).
_MAX_BYTES_READ: Final = 64 * 1024 * 1024
_GZIP_MAGIC: Final = b"\x1f\x8b"


def with_field_hint(
    error: MalformedInputError, *, id_field: str, text_field: str, fingerprint_field: str
) -> MalformedInputError:
    """``error`` with a hint appended when its line has neither ``text_field`` nor
    ``fingerprint_field``: the line's fields and the option to name the right one
    (``(its fields: id, body, url); name the text's field with --text-field body``). The
    guess is the field of the longest string other than the key's; a field that holds only a
    fingerprint (16 hex digits, a number) is named for ``--fingerprint-field``; with no guess
    (or a line that cannot be read again, as from standard input) both options are named. Any
    A line without ``id_field`` gets its fields and ``name the key's field with --id-field
    NAME``. Any other error is returned as it is; the hinted one keeps its class, path and
    line."""
    message = str(error).removeprefix(f"{error.path}, line {error.line}: ")
    no_key = message == f'no "{id_field}"'
    if not no_key and not message.startswith(f'neither "{text_field}" nor "{fingerprint_field}"'):
        return error
    fields = _line_fields(error.path, error.line)
    shown = "" if fields is None else f" (its fields: {', '.join(fields)})"
    if no_key:
        hint = "name the key's field with --id-field NAME"
        return MalformedInputError(f"{message}{shown}; {hint}", error.path, error.line)
    texts: dict[str, str] = {}
    fingerprints: list[str] = []
    for name, value in (fields or {}).items():
        if name == id_field:
            continue
        try:
            parse_fingerprint(value)
            fingerprints.append(name)
        except InvalidArgumentError:
            if isinstance(value, str):
                texts[name] = value
    if texts:
        guess = max(texts, key=lambda name: len(texts[name]))
        hint = f"name the text's field with --text-field {guess}"
    elif fingerprints:
        hint = f"name the fingerprint's field with --fingerprint-field {fingerprints[0]}"
    else:
        hint = "name the text's field with --text-field NAME or a fingerprint's with "
        hint += "--fingerprint-field NAME"
    return MalformedInputError(f"{message}{shown}; {hint}", error.path, error.line, error.value)


def _line_fields(path: str, line: int) -> dict[str, object] | None:
    """The JSON object of line ``line`` (1-based) of the JSONL file ``path`` (gzip or not), or
    None: not a file (standard input), not within the first 64 MiB, not an object."""
    file = Path(path)
    found: bytes | None = None
    try:
        if not file.is_file():
            return None
        with open(file, "rb") as raw:
            gzipped = raw.read(2) == _GZIP_MAGIC
            raw.seek(0)
            stream: Iterable[bytes] = gzip.GzipFile(fileobj=raw) if gzipped else raw
            read = 0
            for number, text in enumerate(stream, start=1):
                if number == line:
                    found = text
                    break
                read += len(text)
                if read > _MAX_BYTES_READ:
                    break
    except (OSError, EOFError):  # gzip.BadGzipFile is an OSError
        return None
    if found is None:
        return None
    try:
        obj = json.loads(found.decode("utf-8"))
    except (ValueError, RecursionError):
        return None
    return obj if isinstance(obj, dict) else None


def client_options_parser() -> Parser:
    """The parent parser of every client command: ``--address``, ``--tls-ca``, ``--tls-cert``,
    ``--tls-key``, ``--tls-server-name``, ``--collection``, ``--token-file``."""
    client = Parser(add_help=False, allow_abbrev=False)
    client.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        type=flag_type(address_argument),
        metavar="HOST:PORT",
        help=f"the server (default {DEFAULT_ADDRESS}; IPv6 as [::1]:50051); several,\n"
        "comma-separated: the shards of one index, keys spread by a hash (docs: the Python\n"
        "client guide)",
    )
    client.add_argument(
        "--tls-ca",
        metavar="PEM",
        help="connect with TLS, trusting the server certificates this CA file signed",
    )
    client.add_argument("--tls-cert", metavar="PEM", help="client certificate (mutual TLS)")
    client.add_argument("--tls-key", metavar="PEM", help="private key of --tls-cert")
    client.add_argument(
        "--tls-server-name",
        metavar="NAME",
        help="check the server certificate against NAME instead of the address's host",
    )
    client.add_argument(
        "--collection",
        metavar="NAME",
        help="the collection the command works on (default: the server's `default`)",
    )
    client.add_argument(
        "--token-file",
        metavar="FILE",
        help="send the token on the first line of FILE as `authorization: Bearer TOKEN`\n"
        "(default: the PERMINDEX_TOKEN environment variable, when set)",
    )
    return client
