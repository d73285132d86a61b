"""The power-loss tests' disk, from the tests' side: :class:`PowerLossDisk` mounts
``tests/power_loss_fs.py`` (a FUSE file system that drops at a cut everything not fsynced) in
a process of its own and sends it its commands. Not a test module.

Needs ``/dev/fuse``, libfuse 3 (Debian's ``fuse3``, which ``.ci/run`` installs) and the
``mfusepy`` binding (the ``dev`` extra); :func:`unavailable` says what is missing.
"""

from __future__ import annotations

import contextlib
import ctypes.util
import importlib.util
import os
import select
import shutil
import subprocess
import sys
import time
from pathlib import Path

FILE_SYSTEM = Path(__file__).resolve().parent / "power_loss_fs.py"


def unavailable() -> str | None:
    """Why no power-loss disk can be mounted here, or None when one can."""
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse on this machine (FUSE is not available)"
    if ctypes.util.find_library("fuse3") is None:
        return "libfuse 3 is not installed (Debian: apt-get install fuse3)"
    if importlib.util.find_spec("mfusepy") is None:
        return "the mfusepy package is not installed (pip install -e '.[dev]')"
    if os.geteuid() != 0 and shutil.which("fusermount3") is None:
        return "fusermount3 is missing (Debian: apt-get install fuse3)"
    return None


class PowerLossDisk:
    """A power-loss file system mounted at ``mountpoint`` (an empty directory) until
    :meth:`close`.

    Raises (from the constructor):
        RuntimeError: it could not be mounted (the file system's error output in the message).
    """

    def __init__(self, mountpoint: Path) -> None:
        self.mountpoint = mountpoint
        mountpoint.mkdir(parents=True, exist_ok=True)
        self._errors = (mountpoint.parent / f".{mountpoint.name}.fs-errors").open("w+")
        self.process = subprocess.Popen(
            [sys.executable, str(FILE_SYSTEM), str(mountpoint)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._errors,
            text=True,
        )
        ready = self._line(timeout=30)
        if ready != "ready":
            self.close()
            raise RuntimeError(f"the power-loss file system did not mount: {self.errors()}")

    def errors(self) -> str:
        """What the file system process wrote to stderr so far."""
        self._errors.seek(0)
        return self._errors.read()

    def _line(self, timeout: float) -> str:
        assert self.process.stdout is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                return ""
            ready, _, _ = select.select([self.process.stdout], [], [], 0.1)
            if ready:
                return self.process.stdout.readline().strip()
        return ""

    def command(self, line: str) -> str:
        """Send one command (``tests/power_loss_fs.py``'s docstring) and return its answer."""
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()
        answer = self._line(timeout=30)
        if not answer or answer.startswith("error"):
            raise RuntimeError(f"power-loss file system: {line!r} -> {answer!r}; {self.errors()}")
        return answer

    def cut(self) -> None:
        """The power is cut now: what is not durable is lost; operations fail until
        :meth:`restore`."""
        self.command("cut")

    def cut_on(self, pattern: str, count: int = 1) -> None:
        """Cut right after the ``count``-th creation of a name matching ``pattern``."""
        self.command(f"cut-on {pattern} {count}")

    @property
    def cut_time(self) -> float | None:
        """When the power was cut (by :meth:`cut` or a trigger of :meth:`cut_on`), on the
        machine's ``time.monotonic()`` clock; None while it is on."""
        answer = self.command("status").split()
        return float(answer[1]) if answer[0] == "cut" else None

    @property
    def is_cut(self) -> bool:
        """Whether the power is cut."""
        return self.cut_time is not None

    def restore(self) -> None:
        """The power is back: the file system holds what survived the cut."""
        self.command("restore")

    def fsyncs(self) -> tuple[int, int]:
        """(file fsyncs, directory fsyncs) seen so far."""
        _, files, directories = self.command("stats").split()
        return int(files), int(directories)

    def close(self) -> None:
        """Unmount and end the file system's process."""
        if self.process.poll() is None:
            unmount = ["fusermount3", "-u", "-z", str(self.mountpoint)]
            if shutil.which("fusermount3") is None:
                unmount = ["umount", "-l", str(self.mountpoint)]
            subprocess.run(unmount, capture_output=True, check=False)
            with contextlib.suppress(OSError):
                if self.process.stdin is not None:
                    self.process.stdin.close()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._errors.close()

    def __enter__(self) -> PowerLossDisk:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
