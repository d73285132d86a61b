"""``python -m permindex`` and the ``permindex`` console script: the same command (see
:mod:`permindex.cli`)."""

from __future__ import annotations

import signal
import sys
from typing import NoReturn


def run() -> NoReturn:
    """The ``permindex`` command: :func:`permindex.cli.entry`.

    While the command's modules load (numpy, the command's own; a few tenths of a second), a
    Ctrl-C (and, for ``dedup``, which promises exit 143 on SIGTERM, a SIGTERM) is noted, not
    raised: an exception raised inside the import system can be swallowed by it (its weakref
    callback of a module lock prints and drops it) or leave a module half made. Once they are
    loaded, a noted signal ends the command as it would later (``permindex: interrupted``,
    exit 130; ``permindex: terminated (SIGTERM)``, exit 143), with no traceback."""
    noted: list[int] = []

    def note(signum: int, frame: object) -> None:
        noted.append(signum)

    stops = (signal.SIGINT, signal.SIGTERM) if sys.argv[1:2] == ["dedup"] else (signal.SIGINT,)
    previous = {signum: signal.signal(signum, note) for signum in stops}
    try:
        from permindex.cli import entry
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if noted:
        sigterm = noted[0] == signal.SIGTERM
        sys.stderr.write(f"permindex: {'terminated (SIGTERM)' if sigterm else 'interrupted'}\n")
        raise SystemExit(143 if sigterm else 130)
    entry()


if __name__ == "__main__":
    run()
