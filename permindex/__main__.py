"""``python -m permindex``: the same as the ``permindex`` command (see :mod:`permindex.cli`)."""

from __future__ import annotations

from permindex.cli import entry

if __name__ == "__main__":
    entry()
