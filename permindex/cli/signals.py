"""How ``permindex dedup`` stops on SIGINT (Ctrl-C) and SIGTERM (a service manager's stop),
and ``permindex ingest`` and ``import`` on SIGINT.

The handler, :func:`stop`, unwinds the command as Ctrl-C does (its worker processes stopped,
its ring file of inflated blocks removed): it raises ``KeyboardInterrupt`` (SIGINT) or
:class:`Terminated` (SIGTERM) in the main thread and ignores further signals while the
clean-up runs. Python runs a signal handler between any two bytecodes of the main thread,
and some places drop what a handler raises there: a finaliser or weakref callback (printed as
"Exception ignored in ..."), a ctypes callback (numba's compiler hooks), a library's bare
``except``. So the handler also records the signal, and the command checks the record at
its checkpoints (:func:`raise_if_stopped`: between its stages, and when it returns): a signal
whose exception was lost still ends the run with the signal's line and code (130, 143),
never with exit 0 and a report as if no one had asked it to stop. Where the loss is known
ahead (a finaliser, ``multiprocessing``'s and ``weakref``'s finalisers, numba's and
llvmlite's code, the import system), and where an exception
would leave a lock held (a context manager's ``__enter__``/``__exit__``, the ``threading``
module: grpc's call condition held for ever deadlocked an ingest's ``cancel()``), the handler
does not raise but asks again 20 ms later; the command's own checkpoints (dedup after its
pass, ingest at each acknowledged batch) raise it meanwhile. Where it is not known ahead (a
weakref callback of any code), Python hands the dropped exception to ``sys.unraisablehook``:
:func:`install` puts one in place that, for the handler's own interrupt, prints nothing and
asks again 20 ms later (the stop handler back in place), so the run stops soon after
without the "Exception ignored in ..." traceback.

One more trap, CPython's: a KeyboardInterrupt that ends code run by a string ``exec`` or
``eval`` (numba and the standard library generate code that way) sets a process-wide flag,
kept even when the exception is caught later, that makes ``python -m permindex`` die of
SIGINT at its exit after printing its line and choosing its code;
:func:`clear_unhandled_interrupt` clears it.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, NoReturn

__all__ = [
    "Terminated",
    "clear_unhandled_interrupt",
    "ignore_stop_signals",
    "ignore_until_exit",
    "install",
    "interrupted_code",
    "interruption",
    "raise_if_stopped",
    "raise_noted",
    "restore_default_handlers",
    "stop",
]


class Terminated(KeyboardInterrupt):
    """SIGTERM during ``dedup``: unwinds as Ctrl-C does (exit 143)."""


#: The first stop signal :func:`stop` received (``SIGINT`` or ``SIGTERM``), 0 before any.
_received = 0
#: Consecutive times :func:`stop` waited because the main thread was inside a lock's code.
_waits = 0
#: How many times (20 ms apart) :func:`stop` waits for the main thread to leave a lock's code
#: before it raises there anyway: a thread blocked in ``Condition.wait`` for good (a server
#: that stopped answering) must still stop, and raising inside ``wait`` itself is safe.
_MOST_LOCK_WAITS = 50


def _interrupt_for(signum: int) -> KeyboardInterrupt:
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def stop(signum: int, frame: object) -> None:
    """The commands' handler of SIGINT and SIGTERM: the first one unwinds the command (raises
    ``KeyboardInterrupt`` or :class:`Terminated`, and is recorded for
    :func:`raise_if_stopped`); while that clean-up runs, further ones are ignored, so a second
    Ctrl-C cannot cut it short and leave a traceback or files.

    It does not raise where the exception would be dropped or leave something half done
    (:func:`_unsafe`): it asks again 20 ms later instead (within a lock's code, at most
    :data:`_MOST_LOCK_WAITS` times in a row)."""
    global _received, _waits
    _received = _received or signum  # seen by the checkpoints even if the raise waits
    unsafe = _unsafe(frame)
    if unsafe == "dropped" or (unsafe == "lock" and _waits < _MOST_LOCK_WAITS):
        _waits += 1
        threading.Timer(0.02, os.kill, (os.getpid(), signum)).start()
        return
    _waits = 0
    ignore_stop_signals()
    raise _interrupt_for(_received)


#: Callers under which :func:`stop` does not raise: numba's and llvmlite's code (LLVM's ctypes
#: callbacks into numba's hooks drop what they raise, and a compile or cache load cut half
#: way can leave numba's state broken) and the import system's (its weakref callback of a
#: module lock prints and drops it: "Exception ignored in ... _get_module_lock.<locals>.cb").
_DEFERRED_PATHS = (f"{os.sep}numba{os.sep}", f"{os.sep}llvmlite{os.sep}")
#: The standard library's finalisers, run as weakref callbacks that drop what they raise:
#: ``multiprocessing.util.Finalize`` (a pool's semaphores unregistered from the resource
#: tracker while dedup's workers stop: "Exception ignored in: <Finalize object, dead>") and
#: ``weakref.finalize``.
_FINALISER_FILES = (
    f"{os.sep}multiprocessing{os.sep}util.py",
    f"{os.sep}multiprocessing{os.sep}resource_tracker.py",
    f"{os.sep}weakref.py",
)
#: The signals :func:`install` handles with :func:`stop`.
_installed: tuple[signal.Signals, ...] = ()
#: The standard library's module of locks and conditions.
_THREADING = f"{os.sep}threading.py"


def _unsafe(frame: object, depth: int = 100) -> str | None:
    """Why a signal's handler called in ``frame`` must not raise now, or None:

    - ``"dropped"``: ``frame`` or one of its ``depth`` nearest callers is a finaliser
      (``__del__``: Python prints and drops what it raises, e.g. llvmlite's
      ``ObjectRef.__del__``; one of :data:`_FINALISER_FILES`), the import system's or one of
      :data:`_DEFERRED_PATHS`;
    - ``"lock"``: ``frame`` is a context manager's ``__enter__`` or ``__exit__`` or the
      standard library's ``threading`` code: an exception raised between a lock's acquire and
      the ``with`` block that releases it leaves the lock held for ever (seen: grpc's call
      condition, and an ingest deadlocked in ``cancel()`` after its Ctrl-C).

    O(depth)."""
    code = getattr(frame, "f_code", None)
    lock = code is not None and (
        code.co_name in ("__enter__", "__exit__") or code.co_filename.endswith(_THREADING)
    )
    while frame is not None and depth > 0:
        code = getattr(frame, "f_code", None)
        if code is None:
            break
        path = code.co_filename
        if (
            code.co_name == "__del__"
            or path.startswith("<frozen importlib")
            or path.endswith(_FINALISER_FILES)
            or any(part in path for part in _DEFERRED_PATHS)
        ):
            return "dropped"
        frame = getattr(frame, "f_back", None)
        depth -= 1
    return "lock" if lock else None


def install(
    signals: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM),
) -> dict[signal.Signals, Any]:
    """:func:`stop` as the handler of ``signals`` (main thread only), and
    :func:`_unraisable` as ``sys.unraisablehook`` (the one it replaces still reports every
    other exception Python drops); returns the handlers it replaced, by signal."""
    global _received, _waits, _installed, _next_unraisablehook
    _received = _waits = 0
    _installed = tuple(signals)
    if sys.unraisablehook is not _unraisable:
        _next_unraisablehook = sys.unraisablehook
        sys.unraisablehook = _unraisable
    return {signum: signal.signal(signum, stop) for signum in signals}


#: The ``sys.unraisablehook`` :func:`install` replaced.
_next_unraisablehook = sys.unraisablehook


def _unraisable(unraisable: Any) -> None:
    """``sys.unraisablehook`` while a command handles its stop signals: the interrupt
    :func:`stop` raised, dropped by Python where it could not tell ahead (a weakref callback),
    is not printed; the handler is put back and the signal sent again 20 ms later, so the
    command stops soon after, as if the first had landed there. Anything else goes to the hook
    in place before."""
    if (
        _received
        and isinstance(unraisable.exc_value, KeyboardInterrupt)
        and threading.current_thread() is threading.main_thread()
    ):
        for signum in _installed:
            signal.signal(signum, stop)
        threading.Timer(0.02, os.kill, (os.getpid(), _received)).start()
        return
    _next_unraisablehook(unraisable)


def _ignore(signum: int, frame: object) -> None:
    """A handler that does nothing."""


def ignore_stop_signals() -> None:
    """SIGINT and SIGTERM ignored from now on (dedup's clean-up, then its exit), by a handler
    that does nothing rather than ``SIG_IGN``: a second signal already pending when the first
    one's handler ran (the two of a SIGTERM then a Ctrl-C, or a deferred one re-sent) would
    otherwise meet ``SIG_IGN`` in CPython's handler loop, which prints "OSError: Signal 15
    ignored due to race condition" with a traceback. Outside the main thread (where no
    handler can be set, and none of these was installed) it does nothing."""
    if threading.current_thread() is not threading.main_thread():
        return
    signal.signal(signal.SIGINT, _ignore)
    signal.signal(signal.SIGTERM, _ignore)


def ignore_until_exit() -> None:
    """SIGINT and SIGTERM ignored (``SIG_IGN``) until the process ends: called once the
    command has returned. Not a Python handler, which the interpreter's finalization puts back
    to the default (a signal then kills the process: -2, -15); and ``signal.signal`` runs any
    handler already pending first, so none meets ``SIG_IGN`` (see
    :func:`ignore_stop_signals`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def raise_noted(signum: int) -> NoReturn:
    """Act on a stop signal ``signum`` noted before the command's handlers were installed
    (while its modules loaded): as :func:`stop` would have (recorded, SIGINT and SIGTERM
    ignored from then on, its interrupt raised)."""
    global _received
    _received = signum
    ignore_stop_signals()
    raise _interrupt_for(signum)


def restore_default_handlers() -> None:
    """Python's own handling of SIGINT (``KeyboardInterrupt``) and SIGTERM (the default: the
    process ends) back in place."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def raise_if_stopped() -> None:
    """A checkpoint: raise the interrupt of the stop signal :func:`stop` received, if any (its
    first exception may have been swallowed on its way up, or its raise be waiting), SIGINT
    and SIGTERM ignored from then on. O(1); a no-op before any."""
    if _received:
        ignore_stop_signals()
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


def clear_unhandled_interrupt() -> None:
    """Clear CPython's record of a KeyboardInterrupt "unhandled" by string-evaluated code
    (``_PyRuntime.signals.unhandled_keyboard_interrupt``, set by ``run_eval_code_obj`` when
    such code ends with one even if a caller catches it, and read by ``Py_RunMain``, which then
    kills the process with SIGINT instead of exiting with its code under ``python -m``). Every
    string evaluation resets it first, so evaluating ``"None"`` clears it. O(1)."""
    eval("None")  # a constant: only the evaluation's side effect is wanted
