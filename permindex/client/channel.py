"""The one gRPC channel set-up of every caller of a permindex server: TLS material, the bearer
token, the message-size options, the generated stub, and the translation of a failed call into a
:class:`~permindex.errors.ServerError`.

:class:`~permindex.client.Client` (and through it the ``permindex`` command line and
``permindex bench``) opens its connection here; nothing else builds a channel. The collection a
call names travels in each request message (the ``collection`` field), set by the Client.
"""

from __future__ import annotations

import asyncio
import re
import socket
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import grpc
import grpc.aio

from permindex.errors import InvalidArgumentError, ServerError, server_error
from permindex.v1 import index_pb2_grpc

__all__ = [
    "CHANNEL_OPTIONS",
    "Channel",
    "Security",
    "speaks_tls",
    "token_from_file",
    "translate",
]

#: Client channel options: the server enforces its own message limit; the client takes any size.
CHANNEL_OPTIONS: Final[tuple[tuple[str, Any], ...]] = (
    ("grpc.max_receive_message_length", -1),
    ("grpc.max_send_message_length", -1),
)

Pem = bytes | str | Path | None

_MIB: Final = 1024 * 1024
#: grpc's words for a message over a size limit: "Received message larger than max (A vs. B)".
_TOO_LARGE: Final = re.compile(r"(Received|Sent) message larger than max \((\d+) vs\. (\d+)\)")
#: grpc's words for a server that stopped the call while shutting down.
_SHUTDOWN_WORDS: Final = ("Cancelling all calls", "Server is shutting down", "server shutdown")
#: grpc's words for a connection that broke during a call.
_LOST_WORDS: Final = (
    "Socket closed",
    "Stream removed",
    "Connection reset",
    "Broken pipe",
    "GOAWAY",
    "RST_STREAM",
    "keepalive",
    "Connection aborted",
    "Transport closed",
    "End of TCP stream",
)
#: grpc's words for a connection that could not be made, and what to say about each cause.
_CONNECT_CAUSES: Final = (
    ("Connection refused", "connection refused: is a server running at that address?"),
    (
        "Socket closed",
        "the server closed the connection at once: if it serves TLS, connect with TLS"
        " (--tls-ca, root_certificates)",
    ),
    ("DNS resolution failed", "the host name does not resolve"),
    (
        "Hostname Verification",
        "the server's certificate is not for the name this client checks: give the name it "
        "was issued for with --tls-server-name (server_name in permindex.Client)",
    ),
    ("Timeout occurred", "no answer: a firewall, or the wrong host?"),
    ("Deadline Exceeded", "no answer: a firewall, or the wrong host?"),
    ("No route to host", "no route to the host"),
    ("Network is unreachable", "the network is unreachable"),
    (
        "handshake",
        "the TLS handshake failed: check --tls-ca / --tls-server-name (root_certificates"
        " / server_name) and that the server serves TLS",
    ),
)
_CONNECT_WORDS: Final = ("failed to connect", "connections to all backends failing")


def token_from_file(text: str) -> str | None:
    """The bearer token of a client's token file: the first whitespace-separated field of its
    first line that is neither blank nor a comment (``#``), so that the server's token file
    (``TOKEN ROLE [COLLECTIONS]`` a line) can be given to a client as it is; None when there is
    none.

    Examples:
        >>> token_from_file("# the crawler's token\\nfa1c0n-0123456789abcdef write alpha\\n")
        'fa1c0n-0123456789abcdef'
    """
    for line in text.splitlines():
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            return fields[0]
    return None


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
    """One gRPC channel to ``address`` with the TLS and token of ``security``, and its stub: a
    blocking channel, or with ``aio`` an asyncio one (``grpc.aio``; then :meth:`close` and
    :meth:`wait_ready` are coroutines' work, see :meth:`aclose` and :meth:`await_ready`).

    Raises:
        InvalidArgumentError: a client certificate or key without ``root_certificates``.
        OSError: a PEM path that cannot be read.
    """

    def __init__(self, address: str, security: Security, *, aio: bool = False) -> None:
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
        kind: Any = grpc.aio if aio else grpc
        if aio:
            try:
                asyncio.get_running_loop()
            except RuntimeError:
                raise InvalidArgumentError(
                    "an AsyncClient is created inside the running event loop (in a coroutine, "
                    "e.g. `async with permindex.AsyncClient(...)` under asyncio.run), not "
                    "outside it"
                ) from None
        #: Whether the channel connects with TLS.
        self.tls = security.root_certificates is not None
        #: Whether it presents a client certificate (mutual TLS).
        self.client_certificate = security.certificate_chain is not None
        if security.root_certificates is not None:
            credentials = grpc.ssl_channel_credentials(
                root_certificates=_pem(security.root_certificates),
                private_key=_pem(security.private_key),
                certificate_chain=_pem(security.certificate_chain),
            )
            self.channel: Any = kind.secure_channel(address, credentials, options=options)
        else:
            self.channel = kind.insecure_channel(address, options=options)
        #: The generated PermIndex stub (typed Any: the generated module has no type stubs).
        self.stub: Any = index_pb2_grpc.PermIndexStub(self.channel)  # type: ignore[no-untyped-call]

    def error(self, error: grpc.RpcError) -> ServerError:
        """The :class:`ServerError` of a failed call (blocking or asyncio): its status code name
        and details, grpc's own wording translated by :func:`translate` (the server's own
        messages unchanged)."""
        code_of = getattr(error, "code", None)
        details_of = getattr(error, "details", None)
        code = code_of() if callable(code_of) else None
        details = (details_of() if callable(details_of) else None) or str(error)
        name, message = translate(code.name if code is not None else "UNKNOWN", details)
        if name == "UNAVAILABLE" and message.startswith("failed to connect"):
            message = self._tls_mismatch(details) or message
        return server_error(name, message, self.address)

    def _tls_mismatch(self, details: str) -> str | None:
        """What to change when the connection failed because one side speaks TLS and the other
        does not (:func:`speaks_tls` asked the server), or the server closed a TLS connection
        that presented no client certificate; None when that is not why (grpc's ``details``
        name a handshake failure of the client's own: a certificate it does not trust)."""
        tls = speaks_tls(self.address)
        if tls and self.tls and "Socket closed" in details:  # the server ended the handshake
            if not self.client_certificate:
                return (
                    "failed to connect: the server serves TLS and closed the connection during "
                    "the handshake: it requires a client certificate (--tls-cert and "
                    "--tls-key, certificate_chain= and private_key= in permindex.Client)"
                )
            return (
                "failed to connect: the server serves TLS and closed the connection during the "
                "handshake: it does not accept this client certificate (is it signed by the "
                "CA of the server's --tls-client-ca, and is --tls-key its key?)"
            )
        if tls is None or tls == self.tls:
            return None
        if tls:
            return (
                "failed to connect: the server serves TLS and this client connects in "
                "plaintext: connect with TLS (--tls-ca CA.pem on the command line, "
                "root_certificates= in permindex.Client, PERMINDEX_TLS_CA in Scrapy)"
            )
        return (
            "failed to connect: the server does not serve TLS (it answers in plaintext) and "
            "this client connects with TLS: leave out --tls-ca, --tls-cert and --tls-key "
            "(root_certificates=, certificate_chain=, private_key= in permindex.Client), or "
            "start the server with --tls-cert and --tls-key"
        )

    def not_ready(self, timeout: float) -> ServerError:
        """The UNAVAILABLE error of a channel not connected within ``timeout`` seconds."""
        return server_error("UNAVAILABLE", f"not connected within {timeout:g} s", self.address)

    def wait_ready(self, timeout: float) -> None:
        """Block until the (blocking) channel is connected, at most ``timeout`` seconds.

        Raises:
            ServerError: UNAVAILABLE (a ``ConnectionError``) when it is not connected in time.
        """
        try:
            grpc.channel_ready_future(self.channel).result(timeout=timeout)
        except grpc.FutureTimeoutError:
            raise self.not_ready(timeout) from None

    async def await_ready(self, timeout: float) -> None:
        """:meth:`wait_ready` of an asyncio channel."""
        try:
            await asyncio.wait_for(self.channel.channel_ready(), timeout)
        except TimeoutError:
            raise self.not_ready(timeout) from None

    def close(self) -> None:
        """Close the (blocking) channel; calls in flight are cancelled."""
        self.channel.close()

    async def aclose(self) -> None:
        """Close the asyncio channel; calls in flight are cancelled."""
        await self.channel.close()


def speaks_tls(address: str, timeout: float = 1.0) -> bool | None:
    """Whether the server at ``address`` (``HOST:PORT``, IPv6 in brackets) answers a TLS
    handshake: True when it completes or ends with a TLS alert (a server that wants a client
    certificate, or refuses the client's), False when the server answers with bytes that are
    not TLS or closes at once (a plaintext gRPC server), None when it cannot be told (no
    connection within ``timeout`` seconds). Verifies nothing: it only asks which protocol is
    spoken, on the failure path of a connection."""
    host, _, port = address.rpartition(":")
    host = host.removeprefix("dns:///").strip("[]")
    try:
        number = int(port)
        sock = socket.create_connection((host or "localhost", number), timeout=timeout)
    except (OSError, ValueError):
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    try:
        with context.wrap_socket(sock, server_hostname=host or None):
            return True
    except ssl.SSLEOFError:
        return False
    except ssl.SSLError as error:
        reason = str(error.reason or error).upper()
        if "ALERT" in reason:
            return True
        if any(word in reason for word in ("WRONG_VERSION", "RECORD_LAYER", "UNEXPECTED_RECORD")):
            return False
        return None
    except OSError:  # reset or timed out
        return None
    finally:
        sock.close()


def translate(code: str, details: str) -> tuple[str, str]:
    """``(code, details)`` of a failed call with grpc's own wording (transport failures, size
    limits, shutdown) replaced by a message a user can act on; the permindex server's own messages
    come back unchanged. The one place where the client reads grpc's status details.

    - a request over the server's message limit (``Received message larger than max (A vs.
      B)``): RESOURCE_EXHAUSTED naming both sizes and ``--batch-bytes`` (``batch_bytes``) and
      the server's ``--max-message-mb``; a reply over it likewise;
    - the server ending the call as it shuts down (``Cancelling all calls``): UNAVAILABLE,
      "the server is shutting down";
    - a connection broken during the call (``Stream removed (Socket closed)``, a reset):
      UNAVAILABLE, "the connection to the server was lost";
    - no connection at all (``failed to connect to all addresses; ...``): UNAVAILABLE, "failed
      to connect" and the cause (refused, no such host, TLS handshake...);
    - grpc's own deadline and cancellation texts: "no answer within the call's deadline",
      "the call was cancelled".
    """
    too_large = _TOO_LARGE.search(details)
    if too_large is not None:
        actual, limit = int(too_large.group(2)), int(too_large.group(3))
        sizes = f"{actual:,} bytes is over the server's message limit of {limit:,} bytes"
        sizes += f" ({limit / _MIB:g} MiB)"
        if too_large.group(1) == "Received":  # the server received our request
            return "RESOURCE_EXHAUSTED", (
                f"a request of {sizes}: send smaller batches (ingest --batch-bytes, the "
                "Client's batch_bytes; ingest --max-document-bytes for one large document) or "
                "raise the server's --max-message-mb"
            )
        return "RESOURCE_EXHAUSTED", (
            f"a reply of {sizes}: ask for less at a time (a smaller batch, a limit) or raise "
            "the server's --max-message-mb"
        )
    if any(words in details for words in _SHUTDOWN_WORDS):
        return "UNAVAILABLE", "the server is shutting down: it ended the call"
    if code in ("UNAVAILABLE", "UNKNOWN", "INTERNAL", "CANCELLED") and any(
        words in details for words in _CONNECT_WORDS
    ):
        cause = next((said for words, said in _CONNECT_CAUSES if words in details), None)
        return "UNAVAILABLE", f"failed to connect ({cause})" if cause else "failed to connect"
    if code in ("UNAVAILABLE", "UNKNOWN", "INTERNAL", "CANCELLED") and any(
        words in details for words in _LOST_WORDS
    ):
        return "UNAVAILABLE", (
            "the connection to the server was lost during the call (the server stopped or "
            "the network failed)"
        )
    if code == "DEADLINE_EXCEEDED" and details in ("Deadline Exceeded", ""):
        return code, "no answer within the call's deadline"
    if code == "CANCELLED" and ("Locally cancelled" in details or not details):
        return code, "the call was cancelled"
    return code, details
