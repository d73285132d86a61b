"""Who may call the server: bearer tokens, their roles and the collections they cover
(:func:`load_tokens`, :class:`TokenFile`, :class:`Authorization`), TLS credentials
(:func:`server_credentials`, reloaded as their files change), and the rule for addresses
others can reach (:func:`exposure_problem`). Nothing here logs a token.

The token file (``serve --token-file FILE``) holds one token a line, ``TOKEN ROLE
[COLLECTIONS]``; blank lines and lines starting with ``#`` are ignored. A token has at least 16
characters (``openssl rand -hex 32`` makes a good one). COLLECTIONS is a comma-separated list of
collection names or shell-style patterns (``fnmatchcase``: case-sensitive; ``*``, ``?``,
``[...]``), ``*`` (every collection) when left out; ``default`` is a collection like any other.
Roles (:data:`ROLES`):

- ``read``: Query, QueryColumns, Get, Pairs, Clusters, Flags, ExactDuplicates, Export, Stats,
  DescribeCollection, ListCollections -- on its collections only;
- ``write``: ``read`` plus Add, Ingest, CheckAndAdd, Remove on its collections;
- ``admin``: ``write`` plus CreateCollection, DropCollection, Snapshot, and the server-wide
  figures (the resident memory in Stats).

The roles of earlier releases keep their meaning: ``read-only`` is ``read *``, ``read-write`` is
``admin *`` (they may carry COLLECTIONS too). A client sends ``authorization: Bearer TOKEN`` as
call metadata; the token is compared with every token of the file by
:func:`hmac.compare_digest` (constant time, no early exit). A call without a token, or with one
the file does not hold, gets UNAUTHENTICATED; a token whose role lacks the method gets
PERMISSION_DENIED -- both decided from the call's metadata alone, before its request message is
read (:class:`Authorization` serves them a handler that never reads it). A token without the
collection a request names gets PERMISSION_DENIED, naming the collection; ListCollections shows
a token only the collections it covers, and Stats only answers for those. Health checking
(``grpc.health.v1.Health``) stays open; reflection needs a token of any role.

The file is read again once a change (its modification time, size or inode) has stood for
:data:`RELOAD_SECONDS` (so within about a second, and never half-written), without a signal and
without dropping connections: a token removed from the file is refused from then on, by new calls
and by the next message of a stream already open (a stream whose requests are all sent, such as
Export, runs to its end); a lowered role likewise; a file with no token refuses every call; a file
that does not load, or a missing file, keeps the tokens in force, and the log says why. Replacing
the file by a rename is the safest way to change it.
Refused calls are logged at INFO with the method, the peer and the reason (never the token).
"""

from __future__ import annotations

import fnmatch
import hmac
import ipaddress
import logging
import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import grpc

from permindex.errors import InvalidArgumentError
from permindex.rpc.config import ServerConfig

__all__ = [
    "ADMIN",
    "READ",
    "ROLES",
    "WRITE",
    "Authorization",
    "AuthorizingHandler",
    "TlsFiles",
    "Token",
    "TokenFile",
    "exposure_problem",
    "is_loopback",
    "load_tokens",
    "method_role",
    "server_credentials",
]

log = logging.getLogger(__name__)

READ: Final = "read"
WRITE: Final = "write"
ADMIN: Final = "admin"
#: The roles, each allowed what the one before it is, and more.
ROLES: Final = (READ, WRITE, ADMIN)
#: The roles of earlier releases, and what they mean now.
LEGACY_ROLES: Final = {"read-only": READ, "read-write": ADMIN}
MIN_TOKEN_CHARS: Final = 16
#: How often the token file (and the TLS files) are checked for a change, seconds.
RELOAD_SECONDS: Final = 0.5
SERVICE: Final = "/permindex.v1.PermIndex/"
_RANK: Final = {role: rank for rank, role in enumerate(ROLES)}

#: The role each method of ``permindex.v1.PermIndex`` needs (a method not named: ``admin``).
METHOD_ROLES: Final = {
    **dict.fromkeys(
        (
            "Query",
            "QueryColumns",
            "Get",
            "Pairs",
            "Clusters",
            "Flags",
            "ExactDuplicates",
            "Export",
            "Stats",
            "DescribeCollection",
            "ListCollections",
        ),
        READ,
    ),
    **dict.fromkeys(("Add", "Ingest", "CheckAndAdd", "Remove"), WRITE),
    **dict.fromkeys(("CreateCollection", "DropCollection", "Snapshot"), ADMIN),
}
_OPEN_PREFIXES: Final = ("/grpc.health.v1.Health/",)

if TYPE_CHECKING:
    _Handler = grpc.RpcMethodHandler[Any, Any]
else:
    _Handler = Any


def method_role(method: str) -> str | None:
    """The role a full method name (``/permindex.v1.PermIndex/Query``) needs: None for the
    open health service, ``read`` for any other service (reflection), ``admin`` for a
    PermIndex method this table does not know."""
    if method.startswith(_OPEN_PREFIXES):
        return None
    if not method.startswith(SERVICE):
        return READ
    return METHOD_ROLES.get(method[len(SERVICE) :], ADMIN)


@dataclass(frozen=True)
class Token:
    """One line of the token file: the secret (bytes), its role (one of :data:`ROLES`) and the
    collection names or patterns it covers (``("*",)``: all)."""

    secret: bytes
    role: str
    collections: tuple[str, ...] = ("*",)

    def allows(self, role: str) -> bool:
        """Whether this token's role includes ``role``."""
        return _RANK[self.role] >= _RANK[role]

    def covers(self, collection: str) -> bool:
        """Whether ``collection`` (a name; empty: ``default``) is one of this token's."""
        name = collection or "default"
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.collections)

    def scope(self) -> str:
        """The token's role and collections, as a message names them (never the secret)."""
        article = "an" if self.role == ADMIN else "a"
        return f"{article} {self.role} token for {', '.join(self.collections)}"


def load_tokens(path: str | Path, *, allow_empty: bool = False) -> list[Token]:
    """The tokens of a token file (the format: the module docstring).

    Args:
        path: the token file.
        allow_empty: return no tokens for a file without any (a reload: every token revoked)
            instead of refusing it (the start: a server with tokens needs one).

    Raises:
        InvalidArgumentError: a malformed line (named by its number, never quoting the token), a
            token shorter than 16 characters, an unknown role, an empty collection pattern, a
            file with no token (unless ``allow_empty``).
        OSError: the file cannot be read.
    """
    tokens: list[Token] = []
    text = Path(path).read_text(encoding="utf-8")
    roles = (*ROLES, *LEGACY_ROLES)
    for number, line in enumerate(text.splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        if len(fields) not in (2, 3) or fields[1] not in roles:
            raise InvalidArgumentError(
                f"{path}, line {number}: expected `TOKEN ROLE [COLLECTIONS]` with ROLE one of "
                f"{', '.join(roles)} and COLLECTIONS a comma-separated list of names or patterns",
                number,
            )
        if len(fields[0]) < MIN_TOKEN_CHARS:
            raise InvalidArgumentError(
                f"{path}, line {number}: a token needs at least {MIN_TOKEN_CHARS} characters "
                "(e.g. `openssl rand -hex 32`)",
                number,
            )
        collections = tuple(fields[2].split(",")) if len(fields) == 3 else ("*",)
        if not all(collections):
            raise InvalidArgumentError(
                f"{path}, line {number}: an empty name in the collections list {fields[2]!r}",
                number,
            )
        role = LEGACY_ROLES.get(fields[1], fields[1])
        tokens.append(Token(fields[0].encode("utf-8"), role, collections))
    if not tokens and not allow_empty:
        raise InvalidArgumentError(
            f"{path}: no token (one `TOKEN ROLE [COLLECTIONS]` a line)", str(path)
        )
    return tokens


def _identity(path: Path) -> tuple[int, int, int] | None:
    """What tells a file's change: (modification time ns, size, inode); None if unreadable."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_mtime_ns, status.st_size, status.st_ino)


class TokenFile:
    """The tokens in force, read from ``path`` and read again by a daemon thread within
    :data:`RELOAD_SECONDS` of the file changing (:meth:`start`); thread-safe.

    Raises (from the constructor): what :func:`load_tokens` raises.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._seen = _identity(self.path)
        self._pending: tuple[int, int, int] | None = None
        self._tokens: tuple[Token, ...] = tuple(load_tokens(self.path))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def tokens(self) -> tuple[Token, ...]:
        """The tokens in force."""
        return self._tokens

    def find(self, presented: bytes) -> Token | None:
        """The token presented, comparing with every token in constant time; None if unknown."""
        found = None
        for token in self._tokens:
            if hmac.compare_digest(token.secret, presented):
                found = token
        return found

    def reload_if_changed(self) -> bool:
        """Read the file again if it changed and then stayed unchanged for one look (a file
        being written is not read half-way); whether the tokens in force changed. A file with
        no token revokes every token (logged at WARNING); a file that does not load, or that
        is gone, keeps the tokens in force (logged at ERROR, once a change)."""
        seen = _identity(self.path)
        if seen == self._seen:
            self._pending = None
            return False
        if seen != self._pending:  # changed since the last look: wait for it to settle
            self._pending = seen
            return False
        self._seen, self._pending = seen, None
        try:
            if seen is None:
                raise OSError(f"{self.path} is gone")
            tokens = tuple(load_tokens(self.path, allow_empty=True))
        except (InvalidArgumentError, OSError, UnicodeDecodeError) as error:
            log.error(
                "token file %s not reloaded, the %d tokens in force stay: %s",
                self.path,
                len(self._tokens),
                error,
            )
            return False
        self._tokens = tokens
        if tokens:
            log.info("token file %s reloaded: %d tokens", self.path, len(tokens))
        else:
            log.warning("token file %s holds no token: every call is refused", self.path)
        return True

    def start(self) -> None:
        """Watch the file in a daemon thread until :meth:`close`."""
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._watch, name="permindex-token-file", daemon=True
            )
            self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(RELOAD_SECONDS):
            try:
                self.reload_if_changed()
            except Exception:  # never let the watcher die
                log.exception("watching the token file %s", self.path)

    def close(self) -> None:
        """Stop watching."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def bearer(metadata: Iterable[tuple[str, Any]] | None) -> bytes | None:
    """The bearer token of a call's metadata, or None."""
    for name, value in metadata or ():
        if name == "authorization":
            text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip().encode("utf-8")
    return None


@dataclass(frozen=True)
class Refusal:
    """A call refused: its status and the message the client gets."""

    code: grpc.StatusCode
    message: str


#: The request field that names the collection, for the methods whose is not ``collection``.
_NAME_FIELD: Final = {
    "CreateCollection": "name",
    "DropCollection": "name",
    "DescribeCollection": "name",
}


class Authorization:
    """The token checks of a server with a token file.

    - :meth:`admit`: from a call's metadata alone (no request read): the token and its role.
    - :meth:`scope`: from the parsed request: the collection it names is one of the token's.
    - :meth:`filter`: a response narrowed to the token's collections (ListCollections) and
      role (Stats' server-wide figures).
    """

    def __init__(self, tokens: TokenFile) -> None:
        self.tokens = tokens

    def admit(self, method: str, metadata: Any) -> Token | Refusal | None:
        """The token of a call that may go on, a :class:`Refusal`, or None for a method open
        to all (health)."""
        role = method_role(method)
        if role is None:
            return None
        presented = bearer(metadata)
        token = None if presented is None else self.tokens.find(presented)
        if token is None:
            return Refusal(
                grpc.StatusCode.UNAUTHENTICATED,
                ("missing" if presented is None else "unknown")
                + " token: send `authorization: Bearer TOKEN` (permindex --token-file FILE, "
                "or PERMINDEX_TOKEN) with a token of the server's token file",
            )
        return self.role_refusal(method, token) or token

    def role_refusal(self, method: str, token: Token) -> Refusal | None:
        """PERMISSION_DENIED when ``token``'s role does not include what ``method`` needs."""
        role = method_role(method)
        if role is None or token.allows(role):
            return None
        name = method.rsplit("/", 1)[-1]
        article = "an" if role == ADMIN else "a"
        return Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{name} needs {article} {role} token; this is {token.scope()}",
        )

    def token_of(self, metadata: Any) -> Token | None:
        """The (known) token of a call's metadata."""
        presented = bearer(metadata)
        return None if presented is None else self.tokens.find(presented)

    def scope(self, method: str, request: Any, token: Token) -> Refusal | None:
        """PERMISSION_DENIED when ``request`` names a collection ``token`` does not cover."""
        name = method.rsplit("/", 1)[-1]
        field = _NAME_FIELD.get(name, "collection")
        collection = getattr(request, field, None)
        if not isinstance(collection, str) or token.covers(collection):
            return None
        return Refusal(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{name} on collection {(collection or 'default')[:80]!r}: this is {token.scope()}",
        )

    def filter(self, method: str, response: Any, token: Token) -> Any:
        """``response`` as ``token`` may see it: ListCollections' collections it covers; Stats
        without the server-wide resident and accounted memory unless admin."""
        name = method.rsplit("/", 1)[-1]
        if name == "ListCollections" and token.collections != ("*",):
            kept = [info for info in response.collections if token.covers(info.name)]
            del response.collections[:]
            response.collections.extend(kept)
        elif name == "Stats" and not token.allows(ADMIN):
            response.resident_memory_bytes = 0
            response.server_memory_bytes = 0
        return response


class AuthorizingHandler(grpc.GenericRpcHandler):  # type: ignore[type-arg]
    """The one generic handler of a server with tokens: for each call, from its method and
    metadata alone, the method's handler (``handlers``, by full method name) when the token
    may call it, else :func:`refusing_handler` (wrapped by ``refusal_layer``, the metrics).
    gRPC asks for the handler before it reads the request, so a refused call costs no more
    than its headers."""

    def __init__(
        self,
        handlers: dict[str, _Handler],
        authorization: Authorization,
        refusal_layer: Callable[[str, _Handler], _Handler] | None = None,
    ) -> None:
        self.handlers = handlers
        self.authorization = authorization
        self.refusal_layer = refusal_layer

    def service(self, handler_call_details: grpc.HandlerCallDetails) -> _Handler | None:
        method = handler_call_details.method
        handler = self.handlers.get(method)
        if handler is None:
            return None
        admitted = self.authorization.admit(method, handler_call_details.invocation_metadata)
        if isinstance(admitted, Refusal):
            return refusing_handler(admitted, method, self.refusal_layer)
        return handler


def refusing_handler(
    refusal: Refusal, method: str, wrap: Callable[[str, _Handler], _Handler] | None = None
) -> _Handler:
    """A handler that ends the call with ``refusal`` without reading its request: request
    streaming, so that gRPC does not receive (let alone parse) the message before the handler
    runs, whatever kind the method is -- on the wire every kind is a stream. Logged at INFO
    with the method, the peer and the reason. ``wrap``: a call layer to put around it (the
    metrics, which count it)."""

    async def refuse(requests: Any, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        log.info(
            "%s from %s refused: %s: %s", method, context.peer(), refusal.code.name, refusal.message
        )
        await context.abort(refusal.code, refusal.message)

    handler: _Handler = grpc.stream_stream_rpc_method_handler(refuse)
    return handler if wrap is None else wrap(method, handler)


class TlsFiles:
    """The server's TLS files -- certificate chain, private key, client CA (mutual TLS) -- read
    again when one changes: gRPC asks :meth:`fetch` at each new connection's handshake, so a
    new certificate is served from the first connection after the change, and connections
    already open keep theirs. A set that does not load (a file half written, a key that does
    not match the certificate) keeps the one in force, logged at ERROR."""

    def __init__(self, cert: Path, key: Path, client_ca: Path | None) -> None:
        self.paths = (cert, key, client_ca)
        self._seen = self._identities()
        self._lock = threading.Lock()

    def _identities(self) -> tuple[tuple[int, int, int] | None, ...]:
        return tuple(None if path is None else _identity(path) for path in self.paths)

    def configuration(self) -> Any:
        """The files as gRPC's certificate configuration.

        Raises:
            OSError: a file cannot be read.
            InvalidArgumentError: the key does not match the certificate, or a file is not PEM.
        """
        cert, key, client_ca = self.paths
        chain, secret = Path(cert).read_bytes(), Path(key).read_bytes()
        for option, data, kind in (("--tls-cert", chain, b"CERTIFICATE"),
                                   ("--tls-key", secret, b"PRIVATE KEY")):  # fmt: skip
            if b"-----BEGIN " not in data or kind not in data:
                raise InvalidArgumentError(
                    f"{option}: not a PEM file with a {kind.decode().lower()} in it (empty, "
                    "or written half-way?)"
                )
        check_key_pair(cert, key)
        authority = None if client_ca is None else Path(client_ca).read_bytes()
        return grpc.ssl_server_certificate_configuration(
            [(secret, chain)], root_certificates=authority
        )

    def fetch(self) -> Any:
        """A new configuration when a file changed since the last look and loads; else None
        (gRPC keeps the one it has)."""
        with self._lock:
            seen = self._identities()
            if seen == self._seen:
                return None
            self._seen = seen
            try:
                configuration = self.configuration()
            except (OSError, InvalidArgumentError) as error:
                log.error("TLS files not reloaded, the ones in force stay: %s", error)
                return None
        log.info("TLS files reloaded: %s", ", ".join(str(p) for p in self.paths if p))
        return configuration


def check_key_pair(cert: Path, key: Path) -> None:
    """Check that ``key`` is the private key of the certificate ``cert`` (both PEM files).

    Raises:
        InvalidArgumentError: they do not belong together, or one is not PEM.
        OSError: a file cannot be read.
    """
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(str(cert), str(key))
    except ssl.SSLError as error:
        raise InvalidArgumentError(
            f"--tls-cert {cert} and --tls-key {key} do not go together: {error.reason or error}",
            str(cert),
        ) from None


def server_credentials(config: ServerConfig) -> grpc.ServerCredentials | None:
    """TLS credentials from ``config`` (None when TLS is off), reloaded as their files change
    (:class:`TlsFiles`).

    ``--tls-cert`` and ``--tls-key`` (PEM files) serve TLS; ``--tls-client-ca`` also
    requires a client certificate signed by that CA (mutual TLS).

    Raises:
        InvalidArgumentError: a certificate without its key (or the reverse), a client CA
            without a certificate, a key that does not match the certificate.
        OSError: a file cannot be read.
    """
    if config.tls_cert is None and config.tls_key is None:
        if config.tls_client_ca is not None:
            raise InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key")
        return None
    if config.tls_cert is None or config.tls_key is None:
        raise InvalidArgumentError("TLS needs both --tls-cert and --tls-key")
    files = TlsFiles(
        Path(config.tls_cert),
        Path(config.tls_key),
        None if config.tls_client_ca is None else Path(config.tls_client_ca),
    )
    return grpc.dynamic_ssl_server_credentials(
        files.configuration(),
        files.fetch,
        require_client_authentication=config.tls_client_ca is not None,
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
