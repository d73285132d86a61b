"""How ``permindex dedup`` stops on SIGINT (Ctrl-C) and SIGTERM (a service manager's stop).

The handler, :func:`stop`, unwinds the command as Ctrl-C does (its worker processes stopped,
its ring file of inflated blocks removed): it raises ``KeyboardInterrupt`` (SIGINT) or
:class:`Terminated` (SIGTERM) in the main thread and ignores further signals while the
clean-up runs. Python runs a signal handler between any two bytecodes of the main thread,
and some places drop what a handler raises there: a finaliser or weakref callback (printed as
"Exception ignored in ..."), a ctypes callback (numba's compiler hooks), a library's bare
``except``. So the handler also records the signal, and the command checks the record at
its checkpoints (:func:`raise_if_stopped`: between its stages, and when it returns): a signal
whose exception was lost still ends the run with the signal's line and code (130, 143),
never with exit 0 and a report as if no one had asked it to stop.
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

__all__ = [
    "Terminated",
    "ignore_stop_signals",
    "install",
    "interrupted_code",
    "interruption",
    "raise_if_stopped",
    "stop",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM during ``dedup``: unwinds as Ctrl-C does (exit 143)."""


#: The first stop signal :func:`stop` acted on (``SIGINT`` or ``SIGTERM``), 0 before any.
_received = 0


def _interrupt_for(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def stop(signum: int, frame: object) -> None:
    """``dedup``'s handler of SIGINT and SIGTERM: the first one unwinds the command (raises
    ``KeyboardInterrupt`` or :class:`Terminated`, and is recorded for
    :func:`raise_if_stopped`); while that clean-up runs, further ones are ignored, so a second
    Ctrl-C cannot cut it short and leave a traceback or files.

    A signal landing in frames known to swallow the exception (LLVM's ctypes callbacks into
    numba; the import system's weakref callback of a module lock) is asked again 20 ms
    later instead."""
    global _received
    code = getattr(frame, "f_code", None)
    if code is not None and (
        f"{os.sep}llvmlite{os.sep}" in code.co_filename
        or code.co_filename.startswith("<frozen importlib")
    ):
        threading.Timer(0.02, os.kill, (os.getpid(), signum)).start()
        return
    _received = _received or signum
    ignore_stop_signals()
    raise _interrupt_for(signum)


def install() -> dict[signal.Signals, Any]:
    """:func:`stop` as the handler of SIGINT and SIGTERM (main thread only); returns the
    handlers it replaced, by signal."""
    global _received
    _received = 0
    return {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}


def ignore_stop_signals() -> None:
    """SIGINT and SIGTERM ignored from now on (dedup's clean-up, then its exit)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def raise_if_stopped() -> None:
    """A checkpoint: raise the interrupt of the stop signal :func:`stop` received, if any (its
    first exception may have been swallowed on its way up). O(1); a no-op before any."""
    if _received:
        raise _interrupt_for(_received)


def interruption(error: BaseException) -> KeyboardInterrupt | None:
    """The KeyboardInterrupt (or SIGTERM's :class:`Terminated`) behind ``error``, if any: a
    signal whose handler ran inside a compiled kernel comes back as a SystemError ("returned
    a result with an exception set") caused by it."""
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, KeyboardInterrupt):
            return cause
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return None


def interrupted_code(interrupt: KeyboardInterrupt) -> tuple[str, int]:
    """The words and exit code of a command stopped by Ctrl-C (``interrupted``, 130) or
    SIGTERM (``terminated (SIGTERM)``, 143)."""
    if isinstance(interrupt, Terminated):
        return "terminated (SIGTERM)", 143
    return "interrupted", 130
