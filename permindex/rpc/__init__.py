"""The gRPC side of permindex: the permindex.v1.PermIndex servicer, the server factory and the
proto <-> domain conversions. This is the only package that imports grpc; ``import permindex``
alone does not.

- :mod:`permindex.rpc.convert`: request validation and message conversion.
- :mod:`permindex.rpc.service`: the servicer; domain errors become status codes in one place.
- :mod:`permindex.rpc.handlers`: the servicer's method handlers, from the service descriptor,
  with a request parser that answers malformed bytes INVALID_ARGUMENT instead of INTERNAL.
- :mod:`permindex.rpc.server`: :func:`create_server` (in-process) and :func:`run_server` (the
  ``permindex serve`` command).
"""

from __future__ import annotations

from permindex.rpc.server import RunningServer, create_server, parse_address, run_server
from permindex.rpc.service import SERVICE_NAME

__all__ = ["SERVICE_NAME", "RunningServer", "create_server", "parse_address", "run_server"]
