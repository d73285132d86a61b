"""What every ``permindex`` command shares for its output and failures: :class:`CommandError`,
UTF-8 writes to stdout and stderr, the translation of a server's refusal
(:class:`~permindex.errors.ServerError`) into a message and an exit code, the exit-code table
of ``--help``, and the notice of a first run that compiles the kernels. No grpc.
"""

from __future__ import annotations

import contextlib
import errno
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import BinaryIO, Final

from permindex.errors import ERROR_TABLE, EXIT_CODES, ServerError

__all__ = [
    "EXIT_CODE_HELP",
    "CommandError",
    "command_error",
    "compile_notice",
    "counted",
    "err",
    "exit_code_for_status",
    "exit_codes_epilog",
    "nothing_read_warning",
    "out",
]

_MIB: Final = 1024 * 1024
#: Seconds of compiling kernels after which a command says that it is loading them.
_COMPILE_NOTICE_SECONDS: Final = 1.0

#: What each exit code means (keys of permindex.errors.EXIT_CODES), for ``permindex --help``.
EXIT_CODE_HELP: Final[dict[str, str]] = {
    "ok": "success",
    "error": "an unexpected error (or stdout closed early, e.g. by `head`)",
    "usage": "bad command line: an unknown (or abbreviated) or malformed option or --address,\n"
    "     options before the command, an option whose optional package is not installed\n"
    "     (dedup --extract main, --engine dask); for serve also an unknown PERMINDEX_*\n"
    "     variable (other commands read only PERMINDEX_TOKEN, PERMINDEX_DEBUG and\n"
    "     PERMINDEX_CACHE_DIR and ignore the rest: PERMINDEX_ADDRESS, the Scrapy setting's\n"
    "     name, is not read; pass --address), a --k, token file or config value refused\n"
    "     before start, an --address in use, a --metrics-address in use or not local, or a\n"
    "     non-loopback --address without TLS and tokens (no --insecure)",
    "unavailable": "the server cannot be reached, is starting up or shutting down, or cannot\n"
    "     write its data directory (read-only or failing disk: writes refused, lookups go on);\n"
    "     for dedup --engine dask, the --scheduler cannot be reached",
    "invalid": "invalid input (a malformed JSONL line or Parquet file, fingerprint, key or\n"
    "     path; Parquet without pyarrow), or a request the server refused as invalid, too\n"
    "     large, not permitted (token), or for lack of disk space, or a collection that\n"
    "     already exists",
    "not_found": "a key that is not stored, or a collection that does not exist",
    "too_short": "a text with fewer words than a shingle: it has no fingerprint (or sketch)",
    "data": "a corrupt snapshot or log, or a data directory owned by another process,\n"
    "     not a directory, or that cannot be opened or written",
}

#: Words of grpc's own status details when no connection could be made (as opposed to an
#: UNAVAILABLE status sent by the server itself).
_TRANSPORT_FAILURES: Final = (
    "failed to connect",
    "DNS resolution failed",
    "Connection refused",
    "Socket closed",
    "Connection reset",
    "connections to all backends failing",
)


class CommandError(Exception):
    """A command failed in a way the user can act on: ``message`` is printed after
    ``permindex COMMAND:`` and the process exits with ``EXIT_CODES[exit_name]``."""

    def __init__(self, message: str, exit_name: str) -> None:
        super().__init__(message)
        self.exit_code = EXIT_CODES[exit_name]


def exit_code_for_status(status_name: str) -> int:
    """Exit code for a gRPC status code name: UNAVAILABLE and DEADLINE_EXCEEDED (no server, or
    one starting or stopping) are ``unavailable``; UNAUTHENTICATED and PERMISSION_DENIED (a
    missing or read-only token) ``invalid``; the rest as ERROR_TABLE maps the error that produces
    that status on the server; anything else ``error``."""
    if status_name in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
        return EXIT_CODES["unavailable"]
    if status_name in ("UNAUTHENTICATED", "PERMISSION_DENIED"):
        return EXIT_CODES["invalid"]
    for _cls, status, exit_name in ERROR_TABLE:
        if status == status_name:
            return EXIT_CODES[exit_name]
    return EXIT_CODES["error"]


def command_error(error: ServerError, address: str) -> CommandError:
    """One CommandError for a failed call to the server at ``address``: its status details and
    mapped exit code; an unreachable server is named as such."""
    name, details = error.code, error.details
    exit_code = exit_code_for_status(name)
    if exit_code == EXIT_CODES["unavailable"]:
        if "--stream-idle-seconds" in details:  # the server closed a stream that sat idle
            message = f"permindex server at {address} closed the stream: {details}"
        elif any(sign in details for sign in _TRANSPORT_FAILURES) or name == "DEADLINE_EXCEEDED":
            message = f"cannot reach permindex server at {address}: {details}"
        else:  # the server answered: shutting down, or its data directory cannot be written
            message = f"permindex server at {address} is unavailable: {details}"
    else:
        message = f"{details} ({name})"
    failure = CommandError(message, "error")
    failure.exit_code = exit_code
    return failure


def out(text: str | Iterable[str]) -> None:
    """Write ``text`` (a string, or lines) to stdout as UTF-8, whatever the locale, in chunks of
    about 1 MiB (one huge write to a pipe closed early can fail without an error)."""
    stream = sys.stdout
    buffer = getattr(stream, "buffer", None)
    if buffer is None:
        stream.writelines([text] if isinstance(text, str) else text)
        return
    stream.flush()
    parts = [text] if isinstance(text, str) else text
    chunk: list[str] = []
    size = 0
    for part in parts:
        chunk.append(part)
        size += len(part)
        if size >= _MIB:
            _write_all(buffer, "".join(chunk).encode("utf-8"))
            chunk, size = [], 0
    _write_all(buffer, "".join(chunk).encode("utf-8"))
    buffer.flush()


def _write_all(buffer: BinaryIO, data: bytes) -> None:
    """Write every byte of ``data`` to ``buffer``. A buffered write larger than the buffer that
    a pipe takes only in part (its reader stopped: ``| head``) returns the count written instead
    of raising; writing the rest then raises the BrokenPipeError that
    :func:`permindex.cli.main` reports, instead of output cut short with exit 0."""
    view = memoryview(data)
    while view:
        written = buffer.write(view)
        if not written:  # a blocking stream that took nothing will take nothing more
            raise BrokenPipeError(errno.EPIPE, "standard output took no more bytes")
        view = view[written:]


def counted(count: int, noun: str, plural: str | None = None) -> str:
    """``count`` and ``noun`` in agreement: ``1 key``, ``2 keys``, ``0 keys`` (``plural``:
    when not ``noun + "s"``)."""
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def err(text: str) -> None:
    """Write one line to stderr, flushed, in one write (a signal cannot split the line from
    its newline)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def exit_codes_epilog() -> str:
    """The ``exit codes:`` table at the end of every ``--help``."""
    lines = ["exit codes:"]
    for name, code in sorted(EXIT_CODES.items(), key=lambda item: item[1]):
        lines.append(f"  {code}  {EXIT_CODE_HELP.get(name, name.replace('_', ' '))}")
    lines.append("  130  stopped by Ctrl-C (SIGINT)")
    lines.append("  143  stopped by SIGTERM (serve stops gracefully on either instead: exit 0)")
    return "\n".join(lines)


def nothing_read_warning(
    command: str, source: str, *, documents: int, too_short: int, skipped: int, kept: int, verb: str
) -> str | None:
    """The warning line of an ``ingest``, ``import`` or ``dedup`` of ``source`` (a path, ``-``
    for standard input) that kept nothing: ``documents`` read (those ``too_short`` among them)
    and inputs ``skipped``, of which ``kept`` were ``verb`` (``stored``, ``fingerprinted``).
    None when anything was kept. The command still succeeds (exit 0): an empty input is no
    error, but a run that did nothing says so instead of a quiet ``0 documents``."""
    if kept:
        return None
    name = "standard input" if source == "-" else source
    if not documents and not skipped:
        return f"permindex {command}: warning: {name} holds no documents"
    reasons = []
    if too_short:
        reasons.append(f"{too_short} too short (fewer words than a shingle or --min-words)")
    if skipped:
        reasons.append(f"{skipped} skipped")
    return f"permindex {command}: warning: no document of {name} was {verb}: {', '.join(reasons)}"


@contextlib.contextmanager
def compile_notice(command: str, kernels: str, *, run: str = "run") -> Iterator[None]:
    """While the block runs: when numba compiles kernels in this process for a second, one line
    on stderr, once, says so, so that a silent wait does not look like a hang::

        permindex COMMAND: loading the KERNELS kernels (the first run after an install or a
        numba upgrade compiles them into DIR, about 10 s; later runs load them in about a second)

    (``run``: ``start`` for serve). numba compiles only what its cache lacks (the first run
    after an install or an upgrade of permindex or numba, for the SimHash or the lookup
    kernels); a load from the cache compiles nothing and says nothing, however busy
    the machine. Its ``numba:compile`` events tell (:mod:`numba.core.event`). numba is imported
    here (the block is one that loads kernels anyway), through :mod:`permindex.jit_numba`, which
    points numba's cache at permindex's directory first."""
    import permindex.jit_numba  # noqa: F401  numba imported, its cache directory set first
    from permindex import jit

    from numba.core import event  # isort: skip

    class Watch(event.Listener):
        """The compiles under way (``depth``, nested ones included), their seconds so far, and
        the timer of the notice (started by the first compile, fired after a second)."""

        def __init__(self) -> None:
            self.lock = threading.Lock()
            self.depth = 0
            self.began = 0.0
            self.seconds = 0.0
            self.said = False
            self.timer: threading.Timer | None = None

        def on_start(self, ev: event.Event) -> None:
            with self.lock:
                self.depth += 1
                if self.depth == 1:
                    self.began = time.monotonic()
                if self.timer is None and not self.said:
                    self.timer = threading.Timer(_COMPILE_NOTICE_SECONDS, self.notice)
                    self.timer.daemon = True
                    self.timer.start()

        def on_end(self, ev: event.Event) -> None:
            with self.lock:
                self.depth -= 1
                if self.depth == 0:
                    self.seconds += time.monotonic() - self.began

        def notice(self) -> None:
            with self.lock:
                self.timer = None
                if self.said or (self.depth == 0 and self.seconds < _COMPILE_NOTICE_SECONDS):
                    return  # short compiles only, so far: the next one starts the timer again
                self.said = True
            err(
                f"permindex {command}: loading the {kernels} kernels (the first {run} after an "
                f"install or a numba upgrade compiles them into {jit.cache_dir()}, about 10 s; "
                f"later {run}s load them in about a second)"
            )

        def close(self) -> None:
            with self.lock:
                self.said = True
                if self.timer is not None:
                    self.timer.cancel()

    watch = Watch()
    event.register("numba:compile", watch)  # type: ignore[no-untyped-call]
    try:
        yield
    finally:
        event.unregister("numba:compile", watch)  # type: ignore[no-untyped-call]
        watch.close()
