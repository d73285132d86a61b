"""Exception hierarchy of permindex and the one table that maps each error to a gRPC status code
and a command-line exit code.

Every exception subclasses the matching built-in (``ValueError``, ``KeyError``, ``OSError``), so
callers that already catch those keep working, and carries the offending value where there is one.
The servicer (:mod:`permindex.rpc.service`) and the CLI (:mod:`permindex.cli`) translate errors in
exactly one place each, using :data:`ERROR_TABLE`; nothing else in the package knows about status
codes or exit codes.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "ERROR_TABLE",
    "EXIT_CODES",
    "AccessDeniedError",
    "CallCancelledError",
    "CollectionExistsError",
    "CorruptFileError",
    "DataDirLockedError",
    "InvalidArgumentError",
    "InvalidKeyError",
    "LimitExceededError",
    "NotFoundError",
    "PermindexError",
    "ServerCollectionExistsError",
    "ServerCorruptFileError",
    "ServerError",
    "ServerInvalidArgumentError",
    "ServerLimitExceededError",
    "ServerNotFoundError",
    "ServerPermissionError",
    "ServerTimeoutError",
    "ServerUnavailableError",
    "SnapshotWriteError",
    "StorageError",
    "StorageFullError",
    "TokenRevokedError",
    "WorkBudgetExceededError",
    "exit_code_for",
    "server_error",
    "status_name_for",
]


class PermindexError(Exception):
    """Base class of every error raised on purpose by permindex."""


class InvalidArgumentError(PermindexError, ValueError):
    """A value is malformed: a wrong-width or negative fingerprint, an empty or over-long key,
    a k above what the table design guarantees, a bad option. Nothing was changed."""

    def __init__(self, message: str, value: object = None) -> None:
        super().__init__(message)
        self.value = value


class InvalidKeyError(InvalidArgumentError):
    """A key breaks the key rule (:func:`permindex.index.keys.rule.validate_key`). ``reason`` is
    ``"empty"``, ``"encoding"`` (not encodable as UTF-8) or ``"size"`` (too long); ``size`` is its
    length in UTF-8 bytes (None when it cannot be encoded) and ``limit`` the largest allowed."""

    def __init__(
        self, message: str, value: object, reason: str, size: int | None, limit: int
    ) -> None:
        super().__init__(message, value=value)
        self.reason = reason
        self.size = size
        self.limit = limit


class LimitExceededError(PermindexError, ValueError):
    """A request is larger than a configured limit (batch length, message size, text length).
    Nothing was changed; split the request and retry."""

    def __init__(self, message: str, limit: int | None = None, actual: int | None = None) -> None:
        super().__init__(message)
        self.limit = limit
        self.actual = actual


class WorkBudgetExceededError(LimitExceededError):
    """A call's estimated work (candidate pairs to verify, pairs to send) is above the budget it
    was given; nothing was done. ``estimate`` and ``budget`` are counts of the same unit, which
    ``what`` names (e.g. ``"candidate pairs"``)."""

    def __init__(self, message: str, estimate: int, budget: int, what: str) -> None:
        super().__init__(message, limit=budget, actual=estimate)
        self.estimate = estimate
        self.budget = budget
        self.what = what


class CallCancelledError(PermindexError):
    """Long work (a join, a batch lookup) was stopped because its caller cancelled it or its
    deadline passed (the ``should_stop`` callable it was given returned True). Nothing was
    changed."""


class NotFoundError(PermindexError, KeyError):
    """A key (or other named object) is not stored. Nothing was changed."""

    def __init__(self, message: str, key: object = None) -> None:
        super().__init__(message)
        self.key = key

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else ""


class CollectionExistsError(PermindexError, ValueError):
    """A collection of that name exists already; nothing was changed."""


class CorruptFileError(PermindexError, ValueError):
    """A file on disk (snapshot, log) is corrupt, truncated, foreign or of an unknown format
    version. Nothing was loaded from it."""

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class DataDirLockedError(PermindexError, OSError):
    """Another process owns the data directory."""

    def __init__(self, message: str, path: str | None = None, pid: int | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.pid = pid


class StorageError(PermindexError, OSError):
    """The data directory cannot be written (the write-ahead log, a snapshot): a read-only or
    failing file system. The write was refused and nothing was changed; writes resume once the
    directory can be written again. ``errno`` is the operating system's error number."""

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.errno = code


class StorageFullError(StorageError):
    """A :class:`StorageError` for lack of room: no space left on the device (ENOSPC), a quota
    (EDQUOT) or a file size limit (EFBIG). Writes resume once space is freed."""


class SnapshotWriteError(PermindexError, RuntimeError):
    """A snapshot could not be written (disk full, permissions); the index and the previous
    snapshot are unchanged. Not in :data:`ERROR_TABLE`: reported as INTERNAL (with its message)
    by the server, exit code 1 (``error``) by the command line."""


class AccessDeniedError(PermindexError, PermissionError):
    """A call the caller's token does not allow: its role lacks the method, or the collection
    the request names is not one of the token's (gRPC PERMISSION_DENIED)."""


class TokenRevokedError(AccessDeniedError):
    """A call whose token was removed from the token file while the call ran (gRPC
    UNAUTHENTICATED, as a new call with it would get)."""


class ServerError(PermindexError):
    """A permindex server refused or failed a call (raised by :class:`permindex.Client`).

    ``code`` is the gRPC status code name (``"INVALID_ARGUMENT"``, ``"UNAVAILABLE"``...) and
    ``details`` the server's message. :func:`server_error` returns an instance that also subclasses
    the matching error, so that one ``except`` serves the in-process index and the server alike:
    INVALID_ARGUMENT is an :class:`InvalidArgumentError` (a ``ValueError``), RESOURCE_EXHAUSTED a
    :class:`LimitExceededError`, NOT_FOUND a :class:`NotFoundError` (a ``KeyError``), DATA_LOSS a
    :class:`CorruptFileError`, UNAVAILABLE a ``ConnectionError``, DEADLINE_EXCEEDED a
    ``TimeoutError``, UNAUTHENTICATED and PERMISSION_DENIED a ``PermissionError``. Those
    classes are public (:class:`ServerInvalidArgumentError`, :class:`ServerLimitExceededError`,
    :class:`ServerNotFoundError`, :class:`ServerCorruptFileError`,
    :class:`ServerCollectionExistsError`, :class:`ServerUnavailableError`,
    :class:`ServerTimeoutError`, :class:`ServerPermissionError`); any other code is a plain
    :class:`ServerError`.
    """

    def __init__(self, message: str, code: str = "UNKNOWN", details: str = "") -> None:
        Exception.__init__(self, message)
        self.code = code
        self.details = details or message
        # the attributes of the classes a remote error may also subclass
        self.value: object = None
        self.key: object = None
        self.path: str | None = None
        self.limit: int | None = None
        self.actual: int | None = None

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class ServerInvalidArgumentError(ServerError, InvalidArgumentError):
    """The server's INVALID_ARGUMENT (or OUT_OF_RANGE): a :class:`ServerError` and an
    :class:`InvalidArgumentError` (a ``ValueError``)."""


class ServerLimitExceededError(ServerError, LimitExceededError):
    """The server's RESOURCE_EXHAUSTED (a batch, message or work budget over its limit): a
    :class:`ServerError` and a :class:`LimitExceededError` (a ``ValueError``)."""


class ServerNotFoundError(ServerError, NotFoundError):
    """The server's NOT_FOUND (a collection that does not exist): a :class:`ServerError` and a
    :class:`NotFoundError` (a ``KeyError``)."""


class ServerCorruptFileError(ServerError, CorruptFileError):
    """The server's DATA_LOSS: a :class:`ServerError` and a :class:`CorruptFileError`."""


class ServerCollectionExistsError(ServerError, CollectionExistsError):
    """The server's ALREADY_EXISTS: a :class:`ServerError` and a
    :class:`CollectionExistsError` (a ``ValueError``)."""


class ServerUnavailableError(ServerError, ConnectionError):
    """UNAVAILABLE: the server could not be reached, is shutting down, or the connection was lost
    during the call (a ``ConnectionError``). A write answered so may or may not be applied."""


class ServerTimeoutError(ServerError, TimeoutError):
    """DEADLINE_EXCEEDED: no answer within the call's deadline (a ``TimeoutError``)."""


class ServerPermissionError(ServerError, PermissionError):
    """UNAUTHENTICATED or PERMISSION_DENIED: a missing, wrong or read-only token (a
    ``PermissionError``)."""


_REMOTE_CLASSES: Final[dict[str, type[ServerError]]] = {
    "INVALID_ARGUMENT": ServerInvalidArgumentError,
    "OUT_OF_RANGE": ServerInvalidArgumentError,
    "RESOURCE_EXHAUSTED": ServerLimitExceededError,
    "NOT_FOUND": ServerNotFoundError,
    "DATA_LOSS": ServerCorruptFileError,
    "ALREADY_EXISTS": ServerCollectionExistsError,
    "UNAVAILABLE": ServerUnavailableError,
    "DEADLINE_EXCEEDED": ServerTimeoutError,
    "UNAUTHENTICATED": ServerPermissionError,
    "PERMISSION_DENIED": ServerPermissionError,
}


def server_error(code: str, details: str, address: str | None = None) -> ServerError:
    """The :class:`ServerError` for a gRPC status ``code`` (its name) and message ``details``."""
    where = f" from {address}" if address else ""
    cls = _REMOTE_CLASSES.get(code, ServerError)
    return cls(f"{details} ({code}{where})", code, details)


#: Exit codes of the ``permindex`` command (documented in ``permindex --help``).
EXIT_CODES: Final[dict[str, int]] = {
    "ok": 0,
    "error": 1,  # an unexpected error
    "usage": 2,  # bad command line (argparse)
    "unavailable": 3,  # the server could not be reached, or is shutting down
    "invalid": 4,  # invalid input: a malformed file, fingerprint, key, or a request refused
    "not_found": 5,  # a key that is not stored
    "too_short": 6,  # a text with fewer words than a shingle: no fingerprint
    "data": 7,  # a corrupt snapshot or log; a data directory in use or not writable
}

#: error class -> (gRPC status code name, exit code name). The first matching class wins.
ERROR_TABLE: Final[list[tuple[type[BaseException], str, str]]] = [
    (LimitExceededError, "RESOURCE_EXHAUSTED", "invalid"),
    (CallCancelledError, "CANCELLED", "error"),
    (InvalidArgumentError, "INVALID_ARGUMENT", "invalid"),
    (NotFoundError, "NOT_FOUND", "not_found"),
    (CollectionExistsError, "ALREADY_EXISTS", "invalid"),
    (CorruptFileError, "DATA_LOSS", "data"),
    (DataDirLockedError, "FAILED_PRECONDITION", "data"),
    (StorageFullError, "RESOURCE_EXHAUSTED", "data"),
    (StorageError, "UNAVAILABLE", "data"),
    (TokenRevokedError, "UNAUTHENTICATED", "invalid"),
    (AccessDeniedError, "PERMISSION_DENIED", "invalid"),
    (KeyError, "NOT_FOUND", "not_found"),
    (TypeError, "INVALID_ARGUMENT", "invalid"),
    (ValueError, "INVALID_ARGUMENT", "invalid"),
    (OSError, "UNAVAILABLE", "error"),
]


def status_name_for(error: BaseException) -> str:
    """Name of the gRPC status code (``grpc.StatusCode`` member) for ``error``; ``INTERNAL``
    when the error is not one of ours or a built-in we expect."""
    for cls, status, _exit in ERROR_TABLE:
        if isinstance(error, cls):
            return status
    return "INTERNAL"


def exit_code_for(error: BaseException) -> int:
    """Exit code of the ``permindex`` command for ``error`` (see :data:`EXIT_CODES`)."""
    for cls, _status, exit_name in ERROR_TABLE:
        if isinstance(error, cls):
            return EXIT_CODES[exit_name]
    return EXIT_CODES["error"]
