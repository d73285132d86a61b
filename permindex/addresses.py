"""``HOST:PORT`` addresses of servers: the default and the one parser, for the server and the
client.

Importing this module does not import grpc.
"""

from __future__ import annotations

from typing import Final

from permindex.errors import InvalidArgumentError

__all__ = ["DEFAULT_ADDRESS", "parse_address"]

#: Where ``permindex serve`` listens and where clients connect unless told otherwise (loopback).
DEFAULT_ADDRESS: Final = "127.0.0.1:50051"


def parse_address(address: str) -> tuple[str, int]:
    """``HOST:PORT`` (IPv6 hosts in brackets: ``[::1]:50051``) as ``(host, port)``.

    Raises:
        InvalidArgumentError: no port, a port that is not an ASCII integer in [0, 65535], no host.
    """
    host, sep, port_text = address.rpartition(":")
    if (
        not sep
        or not host
        or not (port_text.isascii() and port_text.isdigit())
        or int(port_text) > 65535
    ):
        raise InvalidArgumentError(
            f"address {address!r} is not HOST:PORT (e.g. 127.0.0.1:50051; port 0 picks one)",
            address,
        )
    return host, int(port_text)
