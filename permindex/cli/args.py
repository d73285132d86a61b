"""The command-line vocabulary every ``permindex`` command shares: argparse value types, the
fingerprint syntax of the command line, the client options (``--address``, TLS, token,
``--collection``) and the type of the subcommand factory that command modules register with.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from permindex.addresses import DEFAULT_ADDRESS, address_argument
from permindex.rpc import config

__all__ = [
    "CommandFactory",
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


def client_options_parser() -> argparse.ArgumentParser:
    """The parent parser of every client command: ``--address``, ``--tls-ca``, ``--tls-cert``,
    ``--tls-key``, ``--tls-server-name``, ``--collection``, ``--token-file``."""
    client = argparse.ArgumentParser(add_help=False)
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
