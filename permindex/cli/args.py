"""The command-line vocabulary every ``permindex`` command shares: argparse value types, the
fingerprint syntax of the command line, the client options (``--address``, TLS, token,
``--collection``) and the type of the subcommand factory that command modules register with.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from typing import Any, Protocol

from permindex.addresses import DEFAULT_ADDRESS, parse_address
from permindex.errors import InvalidArgumentError
from permindex.text.documents import parse_fingerprint

__all__ = [
    "CommandFactory",
    "bounded",
    "client_options_parser",
    "directory_name",
    "listen_address",
    "message_mb",
    "non_negative",
    "non_negative_float",
    "parse_cli_fingerprint",
    "positive",
    "positive_float",
]


class CommandFactory(Protocol):
    """``command(name, help, description, parents=True)``: a new subparser of ``permindex``
    (``parents``: with the client options), made by :func:`permindex.cli.build_parser`."""

    def __call__(self, name: str, help_: str, description: str, *, parents: bool = True) -> Any: ...


def non_negative(text: str) -> int:
    """An argparse type: an integer, 0 or more."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive(text: str) -> int:
    """An argparse type: an integer, 1 or more."""
    value = non_negative(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be 1 or more, got 0")
    return value


def non_negative_float(text: str) -> float:
    """An argparse type: a finite number, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite number, got {text}")
    return value


def positive_float(text: str) -> float:
    """An argparse type: a finite number, more than 0."""
    value = non_negative_float(text)
    if value == 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def bounded(low: int, high: int) -> Callable[[str], int]:
    """An argparse type: an integer in [low, high]."""

    def parse(text: str) -> int:
        value = non_negative(text)
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in [{low}, {high}], got {value}")
        return value

    return parse


def message_mb(text: str) -> float:
    """--max-message-mb: more than 0 and at most 2047 MiB (gRPC's limit is a 32-bit int)."""
    value = non_negative_float(text)
    if not 0 < value <= 2047:
        raise argparse.ArgumentTypeError(f"must be more than 0 and at most 2047 MiB, got {text}")
    return value


def listen_address(text: str) -> str:
    """--address: HOST:PORT with an ASCII port in [0, 65535]."""
    try:
        parse_address(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None
    return text


def directory_name(text: str) -> str:
    """A directory name: not empty."""
    if not text:
        raise argparse.ArgumentTypeError("must not be empty (use . for the current directory)")
    return text


def parse_cli_fingerprint(value: str) -> int:
    """A fingerprint given on the command line: 16 hex digits or ``0x`` hex (as in JSON), or a
    decimal number of any other length.

    Raises:
        InvalidArgumentError: none of these, or outside [0, 2^64).
    """
    if value.isascii() and value.isdigit() and len(value) != 16:
        return parse_fingerprint(int(value))
    try:
        return parse_fingerprint(value)
    except InvalidArgumentError:
        raise InvalidArgumentError(
            f"fingerprint {value!r} is not 16 hex digits, 0x-prefixed hex, or a decimal number",
            value=value,
        ) from None


def client_options_parser() -> argparse.ArgumentParser:
    """The parent parser of every client command: ``--address``, ``--tls-ca``, ``--tls-cert``,
    ``--tls-key``, ``--tls-server-name``, ``--collection``, ``--token-file``."""
    client = argparse.ArgumentParser(add_help=False)
    client.add_argument(
        "--address",
        default=DEFAULT_ADDRESS,
        metavar="HOST:PORT",
        help=f"the server (default {DEFAULT_ADDRESS})",
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
