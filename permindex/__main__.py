"""``python -m permindex`` and the ``permindex`` console script: the same command (see
:mod:`permindex.cli`)."""

from __future__ import annotations

import sys
from typing import NoReturn


def run() -> NoReturn:
    """The ``permindex`` command: :func:`permindex.cli.entry`. A Ctrl-C while the command's
    modules are still loading ends it as a Ctrl-C later does (``permindex: interrupted``,
    exit 130), not with a traceback of the import."""
    try:
        from permindex.cli import entry
    except KeyboardInterrupt:
        sys.stderr.write("permindex: interrupted\n")
        raise SystemExit(130) from None
    entry()


if __name__ == "__main__":
    run()
