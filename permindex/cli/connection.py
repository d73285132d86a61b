"""How a client command reaches its server: :class:`ClientOptions` (the TLS material, token and
collection the command line gave, read once by :func:`permindex.cli.main` and passed along on
``args.connection``) and :func:`connect`, a :class:`permindex.Client` whose failed calls become a
:class:`~permindex.cli.output.CommandError`. grpc is imported only when a command connects.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from permindex.cli.output import command_error
from permindex.client.batching import DEFAULT_BATCH_SIZE
from permindex.errors import InvalidArgumentError, ServerError

if TYPE_CHECKING:
    from permindex.client import Client

__all__ = ["ClientOptions", "connect"]


@dataclass(frozen=True)
class ClientOptions:
    """TLS material and token of the client commands (``--tls-ca``, ``--tls-cert``,
    ``--tls-key``, ``--tls-server-name``, ``--token-file`` or ``PERMINDEX_TOKEN``), PEM as bytes,
    and the collection every request names (``--collection``; "": the default one). Picklable:
    ``permindex bench`` passes it to its client processes."""

    root_certificates: bytes | None = None
    certificate_chain: bytes | None = None
    private_key: bytes | None = None
    server_name: str | None = None
    token: str | None = None
    collection: str = ""

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> ClientOptions:
        """Read the TLS files and the token named on the command line (or PERMINDEX_TOKEN).

        Raises:
            InvalidArgumentError: a token file without a token, ``--tls-cert`` /
                ``--tls-key`` without ``--tls-ca``, or a file that cannot be read (named with
                its option).
        """

        def read(option: str, path: str | None) -> bytes | None:
            if path is None:
                return None
            try:
                return Path(path).read_bytes()
            except OSError as error:  # named, not a traceback
                raise InvalidArgumentError(
                    f"{option} {path}: cannot read it: {error.strerror or error}"
                ) from None

        from permindex.client.channel import token_from_file

        token = os.environ.get("PERMINDEX_TOKEN") or None
        if args.token_file is not None:
            data = read("--token-file", args.token_file) or b""
            token = token_from_file(data.decode("utf-8", "replace"))
            if token is None:
                raise InvalidArgumentError(f"{args.token_file}: no token in the file")
        if args.tls_ca is None and (args.tls_cert or args.tls_key):
            raise InvalidArgumentError("--tls-cert and --tls-key need --tls-ca")
        return cls(
            read("--tls-ca", args.tls_ca),
            read("--tls-cert", args.tls_cert),
            read("--tls-key", args.tls_key),
            args.tls_server_name,
            token,
            args.collection or "",
        )

    def client(
        self, address: str, *, timeout: float | None = None, batch_size: int = DEFAULT_BATCH_SIZE
    ) -> Client:
        """A :class:`permindex.Client` to ``address`` with these options: a deadline of
        ``timeout`` seconds per call (None: none), no retries (a command reports the first
        failure), at most ``batch_size`` items per request of the batch methods."""
        from permindex.client import Client

        return Client(
            address,
            timeout=timeout,
            retries=0,
            root_certificates=self.root_certificates,
            certificate_chain=self.certificate_chain,
            private_key=self.private_key,
            server_name=self.server_name,
            token=self.token,
            collection=self.collection,
            batch_size=batch_size,
        )


@contextmanager
def connect(address: str, options: ClientOptions | None = None) -> Iterator[Client]:
    """A :class:`permindex.Client` to ``address`` (``HOST:PORT``, or the shards of one index
    comma-separated: ``--address h1:50051,h2:50051``; ``options``: plain, the default collection);
    a :class:`~permindex.errors.ServerError` inside the block becomes a CommandError naming the
    address, and the client is closed at the end."""
    client = (options or ClientOptions()).client(address)
    try:
        yield client
    except ServerError as error:
        raise command_error(error, address) from None
    finally:
        client.close()
