"""Who may call the server: bearer tokens and their roles (:func:`load_tokens`,
:class:`TokenAuthInterceptor`), TLS credentials (:func:`server_credentials`), and the rule for
addresses others can reach (:func:`exposure_problem`). Nothing here logs a token.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import grpc

from permindex.errors import InvalidArgumentError
from permindex.rpc.behaviors import Behavior, Send, rewrap
from permindex.rpc.config import ServerConfig

__all__ = [
    "READ_ONLY",
    "READ_WRITE",
    "WRITE_METHODS",
    "TokenCheck",
    "exposure_problem",
    "is_loopback",
    "load_tokens",
    "server_credentials",
]

log = logging.getLogger(__name__)

READ_WRITE: Final = "read-write"
READ_ONLY: Final = "read-only"
ROLES: Final = (READ_WRITE, READ_ONLY)
MIN_TOKEN_CHARS: Final = 16

#: The RPCs that change the index or the data directory: refused to read-only tokens.
WRITE_METHODS: Final = frozenset(
    f"/permindex.v1.PermIndex/{name}"
    for name in (
        "Add",
        "Ingest",
        "CheckAndAdd",
        "Remove",
        "Snapshot",
        "CreateCollection",
        "DropCollection",
    )
)
_OPEN_PREFIXES: Final = ("/grpc.health.v1.Health/",)

if TYPE_CHECKING:
    _Handler = grpc.RpcMethodHandler[Any, Any]
else:
    _Handler = Any


@dataclass(frozen=True)
class _Token:
    secret: bytes
    role: str


def load_tokens(path: str | Path) -> list[_Token]:
    """The tokens of a token file.

    ``serve --token-file FILE`` turns authentication on. The file holds one token a line
    with its role, ``TOKEN ROLE``, where ROLE is ``read-write`` or ``read-only``; blank lines and
    lines starting with ``#`` are ignored; a token has at least 16 characters (``openssl rand -hex
    32`` makes a good one). A client sends ``authorization: Bearer TOKEN`` as call metadata. A call
    without a token, or with one the file does not hold, gets UNAUTHENTICATED; a read-only token on
    a write RPC (Add, Ingest, CheckAndAdd, Remove, Snapshot, CreateCollection, DropCollection) gets
    PERMISSION_DENIED. The token sent is compared with every token of the file by
    :func:`hmac.compare_digest` (constant time, no early exit), so the time of a refusal says
    nothing about how much of a token was right. Health checking (``grpc.health.v1.Health``) stays
    open so that load balancers and orchestrators can probe the server; reflection needs a token
    like the rest.

    Raises:
        InvalidArgumentError: a malformed line (named by its number, never quoting the token), a
            token shorter than 16 characters, an unknown role, a file with no token.
        OSError: the file cannot be read.
    """
    tokens: list[_Token] = []
    text = Path(path).read_text(encoding="utf-8")
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) != 2 or fields[1] not in ROLES:
            raise InvalidArgumentError(
                f"{path}, line {number}: expected `TOKEN ROLE` with ROLE read-write or read-only",
                number,
            )
        if len(fields[0]) < MIN_TOKEN_CHARS:
            raise InvalidArgumentError(
                f"{path}, line {number}: a token needs at least {MIN_TOKEN_CHARS} characters "
                "(e.g. `openssl rand -hex 32`)",
                number,
            )
        tokens.append(_Token(fields[0].encode("utf-8"), fields[1]))
    if not tokens:
        raise InvalidArgumentError(f"{path}: no token (one `TOKEN ROLE` a line)", str(path))
    return tokens


def _role_of(tokens: list[_Token], presented: bytes) -> str | None:
    """The role of the token presented, comparing with every token in constant time."""
    role = None
    for token in tokens:
        if hmac.compare_digest(token.secret, presented):
            role = token.role
    return role


def _bearer(metadata: Any) -> bytes | None:
    for name, value in metadata or ():
        if name == "authorization":
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip().encode("utf-8")
    return None


class TokenCheck:
    """Checks the bearer token of every call except health checks (the rules:
    :func:`load_tokens`), as a call layer (:meth:`wrap`). Nothing here logs a token; refusals are
    logged at DEBUG without it."""

    def __init__(self, tokens: list[_Token]) -> None:
        self._tokens = list(tokens)

    def _refusal(self, method: str, metadata: Any) -> tuple[grpc.StatusCode, str] | None:
        presented = _bearer(metadata)
        role = None if presented is None else _role_of(self._tokens, presented)
        if role is None:
            log.debug("%s refused: %s token", method, "no" if presented is None else "unknown")
            return (
                grpc.StatusCode.UNAUTHENTICATED,
                "missing or unknown token: send `authorization: Bearer TOKEN` "
                "(permindex --token-file FILE, or PERMINDEX_TOKEN)",
            )
        if role == READ_ONLY and method in WRITE_METHODS:
            log.debug("%s refused: read-only token", method)
            return (
                grpc.StatusCode.PERMISSION_DENIED,
                f"{method.rsplit('/', 1)[-1]} changes the index; this token is read-only",
            )
        return None

    def wrap(self, method: str, handler: _Handler) -> _Handler:
        """``handler`` of ``method`` behind the token check (a call layer)."""
        if method.startswith(_OPEN_PREFIXES):
            return handler

        def layer(inner: Behavior) -> Behavior:
            async def checked(request: Any, context: Any, send: Send) -> Any:
                refused = self._refusal(method, context.invocation_metadata())
                if refused is not None:
                    await context.abort(*refused)
                return await inner(request, context, send)

            return checked

        return rewrap(handler, layer)


def server_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    """TLS credentials from ``config`` (None when TLS is off).

    ``--tls-cert`` and ``--tls-key`` (PEM files) serve TLS; ``--tls-client-ca`` also
    requires a client certificate signed by that CA (mutual TLS).

    Raises:
        InvalidArgumentError: a certificate without its key (or the reverse), or a client CA
            without a certificate.
        OSError: a file cannot be read.
    """
    if config.tls_cert is None and config.tls_key is None:
        if config.tls_client_ca is not None:
            raise InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if config.tls_cert is None or config.tls_key is None:
        raise InvalidArgumentError("TLS needs both --tls-cert and --tls-key")
    chain = Path(config.tls_cert).read_bytes()
    key = Path(config.tls_key).read_bytes()
    client_ca = None if config.tls_client_ca is None else Path(config.tls_client_ca).read_bytes()
    return grpc.ssl_server_credentials(
        [(key, chain)], root_certificates=client_ca, require_client_auth=client_ca is not None
    )


def is_loopback(host: str) -> bool:
    """Whether ``host`` (as in ``HOST:PORT``; IPv6 in brackets) names this machine only."""
    bare = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if bare.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(bare).is_loopback
    except ValueError:  # a host name: it may resolve to anything
        return False


def exposure_problem(config: ServerConfig) -> str | None:
    """What is missing for ``config`` to listen where others can reach it: None when the address
    is loopback, or when TLS and tokens are both on; otherwise a sentence naming the address and
    what is missing (``--insecure`` accepts it, with a warning).

    A server on a loopback address (127.0.0.0/8, ::1, ``localhost``) is reachable from
    this machine only. Any other address without both TLS and tokens is refused unless the operator
    passes ``--insecure`` (:func:`exposure_problem`); the refusal and the warning say what is
    missing.
    """
    host = config.address.rpartition(":")[0]
    if is_loopback(host):
        return None
    missing = [
        what
        for what, present in (
            ("TLS (--tls-cert, --tls-key)", config.tls_cert is not None),
            ("tokens (--token-file)", config.token_file is not None),
        )
        if not present
    ]
    if not missing:
        return None
    return (
        f"{config.address} is not a loopback address and the server has no "
        f"{' and no '.join(missing)}: anyone who can reach it could read and change the index"
    )
