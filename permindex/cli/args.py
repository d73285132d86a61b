"""The command-line vocabulary every ``permindex`` command shares: argparse value types, the
fingerprint syntax of the command line, the client options (``--address``, TLS, token,
``--collection``) and the type of the subcommand factory that command modules register with.
"""

from __future__ import annotations

import argparse
import difflib
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar, overload

from permindex.addresses import DEFAULT_ADDRESS, address_argument
from permindex.rpc import config

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
        "comma-separated: the shards of one index, keys spread by a hash (README)",
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
