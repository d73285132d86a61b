"""A real ``python -m permindex serve`` process for the durability tests (crash, disk faults,
two servers): its stderr read by a thread, its address parsed from the "serving on HOST:PORT"
line. Not a test module (pytest collects ``test_*.py`` only)."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
#: Words of the one notice ``serve`` prints when loading the kernels takes over a second (a
#: first start, or a busy machine): tests that count the lines of stderr leave it out.
LOADING_NOTICE = "loading the lookup and fingerprint kernels"


def without_loading_notice(text: str) -> list[str]:
    """The lines of a ``serve`` process's stderr ``text`` but the kernels' loading notice."""
    return [line for line in text.splitlines() if LOADING_NOTICE not in line]


class ServeProcess:
    """``python -m permindex serve --address 127.0.0.1:0 --data-dir DIR [extra...]``."""

    def __init__(
        self,
        data_dir: Path,
        *extra: str,
        preexec_fn: Callable[[], None] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        self.data_dir = data_dir
        argv: Sequence[str] = [
            sys.executable, "-m", "permindex", "serve", "--address", "127.0.0.1:0",
            "--data-dir", str(data_dir), *extra,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})},
            preexec_fn=preexec_fn,
        )
        self.pid = self.process.pid
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line)
            self.lines.put(line)

    @property
    def text(self) -> str:
        """Everything written to stderr so far."""
        return "".join(self.stderr)

    def address(self, timeout: float = 60) -> str | None:
        """HOST:PORT once serving; None if the process ended first (or ``timeout`` passed)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.1)
            except queue.Empty:
                if self.process.poll() is not None and self.lines.empty():
                    return None
                continue
            found = re.search(r"serving on (\S+:\d+)", line)
            if found:
                return found.group(1)
        return None

    def kill(self) -> None:
        """SIGKILL (a crash) and reap."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.wait()

    def wait(self, timeout: float = 60) -> int:
        """Exit code (killed after ``timeout``); stderr fully read."""
        try:
            code = self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(timeout=10)
        if self.process.stderr is not None and not self._reader.is_alive():
            self.process.stderr.close()
        return code

    def stop(self) -> int:
        """SIGTERM (graceful stop) and the exit code."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait()


# -- readings of a process's /proc files (the load suite) ------------------------------------------


def status_bytes(pid: int, name: str) -> int:
    """A ``kB`` line of /proc/PID/status in bytes: ``VmRSS`` (resident now), ``VmHWM`` (the
    resident peak since the start or since :func:`reset_peak_rss`)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith(name + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(name)


def reset_peak_rss(pid: int) -> bool:
    """Resets the process's VmHWM to its VmRSS (``5`` into /proc/PID/clear_refs); False when
    the kernel refuses it (then VmHWM is the peak since the start)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5", encoding="ascii")
    except OSError:
        return False
    return True


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of the process (all its threads) so far, seconds."""
    text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii")
    fields = text.rsplit(")", 1)[1].split()  # after the command name, which may hold spaces
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class RssSampler:
    """VmRSS of ``pid`` read every ``interval`` s in a thread while in the ``with`` block:
    ``peak`` (bytes, the largest reading) and ``samples`` ((monotonic time, bytes) pairs)."""

    def __init__(self, pid: int, interval: float = 0.02) -> None:
        self.pid = pid
        self.interval = interval
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    @property
    def peak(self) -> int:
        return max((rss for _, rss in self.samples), default=0)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append((time.monotonic(), status_bytes(self.pid, "VmRSS")))
            except (OSError, KeyError):
                return  # the process ended
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
