"""The one gRPC channel set-up of every caller of a permindex server: TLS material, the bearer
token, the message-size options, the generated stub, and the translation of a failed call into a
:class:`~permindex.errors.ServerError`.

:class:`~permindex.client.Client` (and through it the ``permindex`` command line and
``permindex bench``) opens its connection here; nothing else builds a channel. The collection a
call names travels in each request message (the ``collection`` field), set by the Client.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import grpc

from permindex.errors import InvalidArgumentError, ServerError, server_error
from permindex.v1 import index_pb2_grpc

__all__ = ["CHANNEL_OPTIONS", "Channel", "Security"]

#: Client channel options: the server enforces its own message limit; the client takes any size.
CHANNEL_OPTIONS: Final[tuple[tuple[str, Any], ...]] = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
)

Pem = bytes | str | Path | None


def _pem(value: Pem) -> bytes | None:
    """PEM bytes, or the content of the file a ``str`` / ``Path`` names."""
    if value is None or isinstance(value, bytes):
        return value
    return Path(value).read_bytes()


@dataclass(frozen=True)
class Security:
    """TLS material and token of a connection (each PEM as bytes, or a path to read).

    ``root_certificates`` (the CA that signed the server's certificate) turns TLS on;
    ``certificate_chain`` and ``private_key`` add a client certificate (mutual TLS);
    ``server_name`` is the name to check the server's certificate against when it differs from
    the address's host; ``token`` is sent as ``authorization: Bearer TOKEN`` on every call.
    """

    root_certificates: Pem = None
    certificate_chain: Pem = None
    private_key: Pem = None
    server_name: str | None = None
    token: str | None = None

    def metadata(self) -> tuple[tuple[str, str], ...]:
        """The call metadata: the bearer token's header, or nothing."""
        return (("authorization", f"Bearer {self.token.strip()}"),) if self.token else ()


class Channel:
    """One gRPC channel to ``address`` with the TLS and token of ``security``, and its stub.

    Raises:
        InvalidArgumentError: a client certificate or key without ``root_certificates``.
        OSError: a PEM path that cannot be read.
    """

    def __init__(self, address: str, security: Security) -> None:
        self.address = address
        #: The metadata of every call (the bearer token).
        self.metadata = security.metadata()
        options: list[tuple[str, Any]] = list(CHANNEL_OPTIONS)
        if security.server_name:
            options.append(("grpc.ssl_target_name_override", security.server_name))
        if security.root_certificates is None and (
            security.certificate_chain or security.private_key
        ):
            raise InvalidArgumentError("a client certificate needs root_certificates (TLS)")
        if security.root_certificates is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_pem(security.root_certificates),
                private_key=_pem(security.private_key),
                certificate_chain=_pem(security.certificate_chain),
            )
            self.channel = grpc.secure_channel(address, credentials, options=options)
        else:
            self.channel = grpc.insecure_channel(address, options=options)
        #: The generated PermIndex stub (typed Any: the generated module has no type stubs).
        self.stub: Any = index_pb2_grpc.PermIndexStub(self.channel)  # type: ignore[no-untyped-call]

    def error(self, error: grpc.RpcError) -> ServerError:
        """The :class:`ServerError` of a failed call: its status code name and details."""
        code = error.code() if isinstance(error, grpc.Call) else None
        details = (error.details() if isinstance(error, grpc.Call) else None) or str(error)
        return server_error(code.name if code is not None else "UNKNOWN", details, self.address)

    def wait_ready(self, timeout: float) -> None:
        """Block until the channel is connected, at most ``timeout`` seconds.

        Raises:
            ServerError: UNAVAILABLE (a ``ConnectionError``) when it is not connected in time.
        """
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise server_error(
                "UNAVAILABLE", f"not connected within {timeout:g} s", self.address
            ) from None

    def close(self) -> None:
        """Close the channel; calls in flight are cancelled."""
        self.channel.close()
