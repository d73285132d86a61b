"""Child processes of permindex (dedup's workers, the process that decompresses its input):
how they start and what they do with Ctrl-C. Importing it imports only the standard library.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

__all__ = ["ignore_interrupts", "process_context", "signals_held"]


def process_context() -> Any:
    """The multiprocessing context for permindex's child processes: forkserver where the
    platform has it (a forked copy of a process that runs threads, such as tqdm's monitor or
    a reader thread, can deadlock), else spawn.

    Called from the main thread while this process has no fork server yet, it starts the fork
    server with Ctrl-C ignored, which the server and every process it forks then inherit from
    their first instruction: a Ctrl-C to the process group can then neither print a child's
    traceback nor kill a pool worker while it holds the pool's queue lock (which hangs the
    other workers and the parent's shutdown). The parent ignores Ctrl-C only for those few
    milliseconds. Started earlier by other code, the fork server is used as it is."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    if threading.current_thread() is threading.main_thread():
        from multiprocessing import forkserver

        previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
        try:
            forkserver.ensure_running()  # returns at once when it runs already
        finally:
            signal.signal(signal.SIGINT, previous)
    return multiprocessing.get_context("forkserver")


def ignore_interrupts() -> None:
    """Called first in a child process: Ctrl-C (SIGINT, which a terminal sends to the whole
    process group) is ignored there, so only the parent turns it into its one ``interrupted``
    line and stops the child (SIGTERM, which the child keeps) instead of every child also
    printing a KeyboardInterrupt traceback."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


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
