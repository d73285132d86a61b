"""``python -m permindex`` and the ``permindex`` console script: the same command (see
:mod:`permindex.cli`)."""

from __future__ import annotations

import signal
import sys
from typing import NoReturn


def run() -> NoReturn:
    """The ``permindex`` command: :func:`permindex.cli.entry`.

    From here until the command installs its own handlers, a Ctrl-C (and, for ``dedup``, which
    promises exit 143 on SIGTERM, a SIGTERM) is noted, not raised: while the command's modules
    load (numpy, the command's own; a few tenths of a second) an exception raised inside the
    import system can be swallowed by it (its weakref callback of a module lock prints and
    drops it) or leave a module half made. The command then stops on the noted signal before
    it starts, with its one line and code (``permindex dedup: interrupted``, exit 130;
    ``permindex dedup: terminated (SIGTERM)``, exit 143), no traceback. The interpreter's own
    start, before this function, keeps Python's defaults (a few tens of milliseconds)."""
    noted: list[int] = []

    def note(signum: int, frame: object) -> None:
        noted.append(signum)

    stops = (signal.SIGINT, signal.SIGTERM) if sys.argv[1:2] == ["dedup"] else (signal.SIGINT,)
    previous = {signum: signal.signal(signum, note) for signum in stops}
    try:
        from permindex.cli import entry
    except BaseException:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        raise
    entry(noted)  # main() hands the signals to the command's handlers, then acts on ``noted``


if __name__ == "__main__":
    run()
