"""permindex.processes: the fork server started with the stop signals ignored, and held."""

from __future__ import annotations

import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    "forkserver" not in multiprocessing.get_all_start_methods()
    or not Path("/proc/self/status").exists(),
    reason="no fork server on this platform, or no /proc to read what it ignores",
)

_SIGNAL_WHILE_THE_FORK_SERVER_STARTS = """
import os, signal
from multiprocessing import forkserver
from permindex.processes import process_context

got = []
signal.signal(signal.SIGINT, lambda signum, frame: got.append(signum))
signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
start = forkserver.ensure_running


def ensure_running():
    # a Ctrl-C and a SIGTERM to the process group while the fork server starts
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGTERM)
    start()


forkserver.ensure_running = ensure_running
process_context()
server = forkserver._forkserver._forkserver_pid  # its children inherit what it ignores
with open(f"/proc/{server}/status") as status:
    ignored = int(next(line for line in status if line.startswith("SigIgn:")).split()[1], 16)
print(bool(ignored & (1 << (signal.SIGINT - 1))), bool(ignored & (1 << (signal.SIGTERM - 1))))
print(sorted(got), signal.getsignal(signal.SIGINT) is not signal.SIG_IGN)
"""


def test_a_signal_while_the_fork_server_starts_reaches_the_parent_after() -> None:
    """The parent ignores SIGINT and SIGTERM while it starts the fork server (so the server
    and its children inherit the ignoring) but holds them too: one that comes then reaches the
    parent's handler once the server runs (before: it was lost, and a dedup stopped then ran
    to its end and exited 0). The fork server (and so every child it forks) still ignores
    both."""
    done = subprocess.run(
        [sys.executable, "-c", _SIGNAL_WHILE_THE_FORK_SERVER_STARTS],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["True True", "[2, 15] True"], done.stderr
