"""``HOST:PORT`` addresses of servers: the default and the one parser, for the server and the
client.

Importing this module does not import grpc.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from permindex.errors import InvalidArgumentError

__all__ = ["DEFAULT_ADDRESS", "address_argument", "parse_address", "parse_addresses"]

#: Where ``permindex serve`` listens and where clients connect unless told otherwise (loopback).
DEFAULT_ADDRESS: Final = "127.0.0.1:50051"


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 hosts in brackets: ``[::1]:50051``) as ``(host, port)``. The one
    address rule of the server (``serve --address``, ``--metrics-address``) and of every client
    command (``--address``). O(len(address)).

    Raises:
        InvalidArgumentError: no port (gRPC would pick 443 in silence), a port that is not an
            ASCII integer in [0, 65535], no host, an IPv6 host without brackets; the message
            names the address and what is wrong with it.
    """
    if address.startswith("["):  # [IPv6]:PORT
        close = address.find("]")
        host, rest = (address[: close + 1], address[close + 1 :]) if close > 0 else (address, "")
        sep, port_text = rest[:1] == ":", rest[1:]
        if close < 0:
            problem: str | None = "has no closing bracket"
        elif host == "[]":
            problem = "has no host"
        elif rest and not sep:
            problem = f"has {rest!r} after the host, not :PORT"
        else:
            problem = _port_problem(port_text) if sep else "has no port"
    else:
        host, colon, port_text = address.rpartition(":")
        if not colon:
            problem = "has no port"
        elif ":" in host:
            problem = "has an IPv6 host without brackets (write [::1]:50051)"
        elif not host:
            problem = "has no host"
        else:
            problem = _port_problem(port_text)
    if problem is not None:
        raise InvalidArgumentError(
            f"address {address!r} {problem}: write HOST:PORT (e.g. 127.0.0.1:50051; "
            "port 0 picks a free port when serving)",
            address,
        )
    return host, int(port_text)


def _port_problem(text: str) -> str | None:
    """What is wrong with the PORT of ``HOST:PORT``, or None: an ASCII integer in [0, 65535]."""
    if not text:
        return "has no port"
    if not (text.isascii() and text.isdigit()):
        return f"has port {text!r}, not a number"
    if int(text) > 65535:
        return f"has port {int(text)}, above 65535"
    return None


def parse_addresses(address: str | Sequence[str]) -> list[str]:
    """The server addresses of a client: ``"HOST:PORT"``, ``"HOST:PORT,HOST:PORT,..."`` (the
    client commands' ``--address``: the shards of a sharded index) or a sequence of
    ``HOST:PORT``, each checked by :func:`parse_address`, spaces around each stripped. Their order
    is the shard order. O(len(address)).

    Raises:
        InvalidArgumentError: no address (or an empty one between commas), a malformed one, or
            the same address twice.
    """
    parts = address.split(",") if isinstance(address, str) else list(address)
    addresses = [part.strip() for part in parts]
    if not addresses or not all(addresses):
        raise InvalidArgumentError(
            f"address {address!r} names no server (or an empty one between commas): write "
            "HOST:PORT, or HOST:PORT,HOST:PORT,... for shards",
            address,
        )
    seen: set[str] = set()
    for one in addresses:
        parse_address(one)
        if one in seen:
            raise InvalidArgumentError(
                f"address {one} is given twice: name each shard once", address
            )
        seen.add(one)
    return addresses


def address_argument(text: str) -> str:
    """``text`` unchanged once :func:`parse_addresses` accepts it: the value type of every
    client command's ``--address`` option (one server, or shards separated by commas).

    Raises:
        InvalidArgumentError: (a ValueError) what :func:`parse_addresses` refuses.
    """
    parse_addresses(text)
    return text
