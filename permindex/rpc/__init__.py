"""The gRPC side of permindex: the permindex.v1.PermIndex servicer, the server factory and the
proto <-> domain conversions. This is the only package besides the client that imports grpc;
``import permindex`` alone does not, nor does :mod:`permindex.rpc.config`.

- :mod:`permindex.rpc.convert`: request validation and message conversion.
- :mod:`permindex.rpc.state`: what one collection's calls share (:class:`ServerState`).
- :mod:`permindex.rpc.catalog`: the collections of a server, on disk and in memory.
- :mod:`permindex.rpc.service`: the servicer; domain errors become status codes in one place.
- :mod:`permindex.rpc.auth`: TLS, bearer tokens, the exposure rule.
- :mod:`permindex.rpc.metrics`: the Prometheus endpoint and the RPC metrics layer.
- :mod:`permindex.rpc.handlers`: the servicer's method handlers, from the service descriptor,
  with a request parser that answers malformed bytes INVALID_ARGUMENT instead of INTERNAL.
- :mod:`permindex.rpc.server`: :func:`create_server` (in-process) and :func:`run_server` (the
  ``permindex serve`` command).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from permindex.rpc.server import RunningServer, create_server, run_server
    from permindex.rpc.service import SERVICE_NAME

__all__ = ["SERVICE_NAME", "RunningServer", "create_server", "run_server"]


def __getattr__(name: str) -> object:
    """The server's names are imported on first use, so that :mod:`permindex.rpc.config` (the
    server's options, read by the command line) does not pull in grpc."""
    if name == "SERVICE_NAME":
        from permindex.rpc.service import SERVICE_NAME

        return SERVICE_NAME
    if name in __all__:
        from permindex.rpc import server

        return getattr(server, name)
    raise AttributeError(f"module 'permindex.rpc' has no attribute {name!r}")
