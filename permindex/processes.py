"""Child processes and threads of permindex (dedup's workers, the process that decompresses its
input): how they start, what they do with Ctrl-C, and how many CPUs they may use. Importing it
imports only the standard library.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import select
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = [
    "end_with_parent",
    "ignore_interrupts",
    "process_context",
    "signals_held",
    "usable_cpus",
]


def process_context() -> Any:
    """The multiprocessing context for permindex's child processes: forkserver where the
    platform has it (a forked copy of a process that runs threads, such as tqdm's monitor or
    a reader thread, can deadlock), else spawn.

    Called from the main thread while this process has no fork server yet, it starts the fork
    server with SIGINT and SIGTERM ignored, which the server and every process it forks then
    inherit from their first instruction: a Ctrl-C or a SIGTERM to the process group can then
    neither print a child's traceback nor kill a pool worker while it holds the pool's queue
    lock or is half-way through sending its result (either hangs the other workers and the
    parent's shutdown for ever). The parent ignores both only for those few milliseconds, and
    holds them meanwhile (blocked): one that comes then is acted on when they end.
    Started earlier by other code, the fork server is used as it is."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return _Killing(multiprocessing.get_context("spawn"))
    if threading.current_thread() is threading.main_thread():
        from multiprocessing import forkserver, resource_tracker

        # the resource tracker first, outside the window below: starting it unblocks SIGINT
        # and SIGTERM, which inside the window would discard one pending while ignored
        resource_tracker.ensure_running()
        # blocked as well as ignored: a blocked signal is kept pending even while ignored
        # (Linux), so a Ctrl-C or SIGTERM of these milliseconds reaches the parent's handler
        # once it is back, instead of being lost (the fork server inherits both, harmlessly)
        signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            previous = {signum: signal.signal(signum, signal.SIG_IGN) for signum in _STOP_SIGNALS}
            try:
                forkserver.ensure_running()  # returns at once when it runs already
            finally:
                for signum, handler in previous.items():
                    signal.signal(signum, handler)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)
    return _Killing(multiprocessing.get_context("forkserver"))


class _Killing:
    """A multiprocessing context whose processes' ``terminate()`` sends SIGKILL: the children
    ignore SIGTERM (:func:`ignore_interrupts`), so the SIGTERM with which a process pool stops
    its other workers after one died (``BrokenProcessPool``), and with which multiprocessing
    ends daemonic children at exit, would leave the parent waiting for them for ever."""

    def __init__(self, context: Any) -> None:
        self._context = context
        self.Process = _KILLING[context.get_start_method()]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)


class _KillingSpawnProcess(multiprocessing.context.SpawnProcess):
    def terminate(self) -> None:
        self.kill()


_KILLING: dict[str, type[Any]] = {"spawn": _KillingSpawnProcess}

if hasattr(multiprocessing.context, "ForkServerProcess"):

    class _KillingForkServerProcess(multiprocessing.context.ForkServerProcess):
        def terminate(self) -> None:
            self.kill()

    _KILLING["forkserver"] = _KillingForkServerProcess


def ignore_interrupts() -> None:
    """Called first in a child process: SIGINT (Ctrl-C, which a terminal sends to the whole
    process group) and SIGTERM (which ``kill -- -PGID``, ``timeout`` and service managers send
    to the whole group) are ignored there, so only the parent turns either into its one line
    and stops its children itself: pool workers when they finish their task, a decompressing
    child with SIGKILL. The child of a parent that is killed outright ends when it next reads
    from or writes to the parent (the pipe is closed)."""
    for signum in _STOP_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)


_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

#: Seconds between two looks at the parent where the platform has no pidfd.
_PARENT_POLL_SECONDS = 0.5


def end_with_parent(parent: int) -> None:
    """Called first in a child process: a daemon thread ends this process (``os._exit(1)``, no
    clean-up: there is nobody left to hand results to) within ~0.5 s of the end of the process
    ``parent`` (its pid, taken by the parent before it starts the child).

    Needed because a forkserver child is the fork server's child, not the parent's (so
    ``PR_SET_PDEATHSIG`` would watch the wrong process), and the fork server outlives a parent
    killed with SIGKILL (every child holds its liveness pipe open): without it a pool worker
    waits for work, and a decompressing child for a ring slot, for ever. Watches a pidfd where
    the platform has one (Linux >= 5.3: no polling, no pid reuse), else looks every 0.5 s."""
    try:
        pidfd = os.pidfd_open(parent)
    except (AttributeError, OSError):
        pidfd = -1
    if pidfd < 0 and not _alive(parent):
        os._exit(1)

    def watch() -> None:
        if pidfd >= 0:
            select.select([pidfd], [], [])  # readable when the parent has ended
        else:
            while _alive(parent):
                threading.Event().wait(_PARENT_POLL_SECONDS)
        os._exit(1)

    threading.Thread(target=watch, name="permindex-parent-watch", daemon=True).start()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process took the pid: the parent is gone
        return False
    return True


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) and SIGTERM for the duration of the block, then act on the one
    that came (the handler that was installed before runs at the end of the block): for
    starting a child process, which a KeyboardInterrupt in the middle of can leave running
    unknown to its parent (it then waits forever for work, or for a semaphore, and keeps the
    parent's standard error open). Outside the main thread, where signal handlers cannot be
    set, it holds nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    held: list[signal.Signals] = []

    def hold(signum: int, frame: object) -> None:
        held.append(signal.Signals(signum))

    previous = {signum: signal.signal(signum, hold) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        if held:
            handler = previous[held[0]]
            if callable(handler):
                handler(held[0], None)  # raises KeyboardInterrupt, as it would have
            elif handler == signal.SIG_DFL:
                os.kill(os.getpid(), held[0])  # SIGTERM's default: end the process


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity where the platform gives it, else
    ``os.cpu_count()``; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)
