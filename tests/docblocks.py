"""The code blocks of README.md and docs/**/*.md, and the runner that executes them (for
tests/test_docs.py). Not a test module (pytest collects ``test_*.py`` only).

The conventions a page follows (docs/design.md, "The docs", says the same for writers):

- A fenced block whose language is ``python`` runs as written, each in a fresh interpreter
  (this one, ``python FILE``); one whose language is ``sh`` runs as written under
  ``bash -e -o pipefail``, the virtual environment's ``bin`` first on ``PATH`` (as after
  ``source .venv/bin/activate``). Other languages (``text``, ``toml``, ``sql``, ``js``...) are
  not run.
- The blocks of one page run in page order in one fresh working directory, so a block may use
  the files an earlier block of the page made.
- An HTML comment on the line right before a block changes how it runs (the page's text says
  so too, for a reader, since the comment is not shown):

  - ``<!-- not run: REASON -->``: not run (a cluster, the internet, a browser, a setup that is
    the test run itself, minutes of work); the test reports it skipped with REASON.
  - ``<!-- needs: server -->``: a ``permindex serve`` is listening on the default address
    (127.0.0.1:50051), data in ``permindex-data`` of the working directory; started by the
    runner before the first such block of the page and stopped (SIGTERM) after the page.
  - ``<!-- background -->``: the block starts a server in the foreground (as a reader does in a
    second shell): the runner starts it in the background, waits for its output to say
    ``serving`` (any case: ``permindex serve``'s ``serving on``, ``python -m http.server``'s
    ``Serving HTTP on``), and stops it (SIGTERM) after the page.

Every page runs in a network namespace of its own (``unshare --net``, with
``--map-root-user`` where the caller is not root) whose only interface is its loopback: the
default address is the page's own, whatever else listens on this machine, and a block can
reach no other host.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
#: The languages whose blocks are run, and how.
PYTHON = "python"
SHELL = "sh"
#: Fence languages that would be shell or Python under another name: refused by the tests,
#: so that no block escapes the runner by its spelling.
ALIASES = {"bash", "shell", "console", "zsh", "py", "python3", "pycon"}
MARKER = re.compile(r"^<!--\s*(not run:\s*(?P<reason>\S.*?)|needs:\s*server|background)\s*-->$")
_MARKER_WORDS = ("not run", "needs:", "background")
#: An opening fence: the whole line is the fence, its language, perhaps attributes in braces.
FENCE = re.compile(
    r"^(?P<indent> *)(?P<fence>```+|~~~+)[ \t]*(?P<lang>[\w+-]*)[ \t]*(\{.*\})?[ \t]*$"
)
#: Seconds a block may take, and a server to start.
BLOCK_SECONDS = 180
START_SECONDS = 120


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: str  # relative to the repository
    line: int  # of the opening fence, from 1
    lang: str
    code: str
    marker: str  # "", "not run", "needs server" or "background"
    reason: str  # for "not run"

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"

    @property
    def runs(self) -> bool:
        return self.lang in {PYTHON, SHELL} and self.marker != "not run"


def pages() -> list[Path]:
    """README.md and every Markdown page of docs/, in a stable order."""
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def stray_markers(path: Path) -> list[str]:
    """``page:line`` of each marker that is malformed (a ``not run`` without its reason) or not
    on the line right before a fence."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found = []
    for number, line in enumerate(lines):
        text = line.strip()
        if text.startswith("<!--") and any(word in text for word in _MARKER_WORDS):
            following = lines[number + 1] if number + 1 < len(lines) else ""
            if not MARKER.match(text) or not FENCE.match(following):
                found.append(f"{path.relative_to(REPO)}:{number + 1}")
    return found


def blocks(path: Path, root: Path = REPO) -> list[Block]:
    """The fenced blocks of ``path``, with the marker on the line before each; each named by
    its path relative to ``root``."""
    lines = path.read_text(encoding="utf-8").splitlines()
    page = str(path.relative_to(root))
    found: list[Block] = []
    number = 0
    while number < len(lines):
        opened = FENCE.match(lines[number])
        if not opened:
            number += 1
            continue
        fence, indent = opened.group("fence"), len(opened.group("indent"))
        body: list[str] = []
        end = number + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            body.append(lines[end][indent:] if lines[end][:indent].isspace() else lines[end])
            end += 1
        previous = lines[number - 1].strip() if number else ""
        marked = MARKER.match(previous)
        marker, reason = "", ""
        if marked:
            reason = (marked.group("reason") or "").strip()
            word = marked.group(1)
            marker = (
                "not run" if word.startswith("not run")
                else "background" if word == "background"
                else "needs server"
            )  # fmt: skip
        found.append(
            Block(page, number + 1, opened.group("lang").lower(), "\n".join(body) + "\n",
                  marker, reason)
        )  # fmt: skip
        number = end + 1
    return found


# --------------------------------------------------------------------------------------------
# The runner: `python tests/docblocks.py SPEC RESULT`, inside the page's network namespace


def namespace_command() -> list[str] | None:
    """The ``unshare`` prefix that gives a process a network namespace of its own here, or None
    where none can be made (no ``unshare``, or neither root nor user namespaces)."""
    for prefix in (["unshare", "--net"], ["unshare", "--net", "--map-root-user"]):
        try:
            done = subprocess.run([*prefix, "true"], capture_output=True, timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode == 0:
            return prefix
    return None


def _loopback_up() -> None:
    """Bring ``lo`` up in this (new) network namespace: SIOCGIFFLAGS, then SIOCSIFFLAGS."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sH", b"lo", 0)
        flags = struct.unpack("16sH", fcntl.ioctl(sock, 0x8913, request)[:18])[1]
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH", b"lo", flags | 0x1))


def block_environment(scratch: Path) -> dict[str, str]:
    """The environment of the blocks: this one without the PERMINDEX_* settings (but the
    kernels' cache directory), the virtual environment's ``bin`` first on PATH, and the caches
    of Hugging Face ``datasets`` in ``scratch`` (not the user's)."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("PERMINDEX_") or name == "PERMINDEX_CACHE_DIR"
    }
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")
    env["PYTHONUNBUFFERED"] = "1"
    env["HF_HOME"] = str(scratch / "huggingface")
    env["HF_HUB_OFFLINE"] = "1"
    return env


def _die_with_runner() -> None:
    """In a child, before it runs: SIGTERM when the runner dies (``PR_SET_PDEATHSIG``), so that
    a runner stopped by the test's timeout leaves no server behind in the namespace."""
    import ctypes

    ctypes.CDLL(None).prctl(1, signal.SIGTERM)


class _Server:
    """A process started for the page (the runner's server, or a ``background`` block)."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                argv, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_runner,
            )  # fmt: skip

    def wait_serving(self) -> str | None:
        """None once the log says ``serving``; else what went wrong."""
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if "serving" in self.log.read_text(encoding="utf-8", errors="replace").lower():
                return None
            if self.process.poll() is not None:
                return f"exited {self.process.returncode} before serving"
            time.sleep(0.1)
        return f"not serving after {START_SECONDS} s"

    def stop(self) -> None:
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


def run_page(spec: dict[str, Any]) -> dict[str, Any]:
    """Run the blocks of ``spec`` (``{"cwd": DIR, "blocks": [Block as a dict, ...]}``) in
    order; stop at the first failure. The result: ``{"ran": N}`` plus, on a failure,
    ``"failed"`` (the block's ``page:line``), ``"why"`` and ``"output"``."""
    cwd = Path(spec["cwd"])
    env = block_environment(cwd.parent)
    started: list[_Server] = []
    server: _Server | None = None
    ran = 0
    try:
        for number, data in enumerate(spec["blocks"]):
            block = Block(**data)
            log = cwd.parent / f"{cwd.name}-block-{number}.log"
            if block.marker == "needs server" and server is None:
                server = _Server(
                    [sys.executable, "-m", "permindex", "serve", "--data-dir", "permindex-data"],
                    cwd, env, cwd.parent / f"{cwd.name}-server.log",
                )  # fmt: skip
                started.append(server)
                problem = server.wait_serving()
                if problem:
                    return {"ran": ran, "failed": block.where, "why": f"the server {problem}",
                            "output": server.log.read_text(errors="replace")}  # fmt: skip
            if block.lang == PYTHON:
                script = cwd.parent / f"{cwd.name}-block-{number}.py"
                script.write_text(block.code, encoding="utf-8")
                argv = [sys.executable, str(script)]
            else:
                argv = ["bash", "-e", "-o", "pipefail", "-c", block.code]
            if block.marker == "background":
                process = _Server(argv, cwd, env, log)
                started.append(process)
                problem = process.wait_serving()
                if problem:
                    return {"ran": ran, "failed": block.where, "why": problem,
                            "output": log.read_text(errors="replace")}  # fmt: skip
                ran += 1
                continue
            try:
                done = subprocess.run(
                    argv, cwd=cwd, env=env, capture_output=True, text=True,
                    stdin=subprocess.DEVNULL, timeout=BLOCK_SECONDS, start_new_session=True,
                    preexec_fn=_die_with_runner,
                )  # fmt: skip
            except subprocess.TimeoutExpired as error:
                return {"ran": ran, "failed": block.where,
                        "why": f"still running after {BLOCK_SECONDS} s",
                        "output": str(error.stdout or "") + str(error.stderr or "")}  # fmt: skip
            if done.returncode != 0:
                return {"ran": ran, "failed": block.where,
                        "why": f"exit code {done.returncode}",
                        "output": done.stdout[-4000:] + done.stderr[-4000:]}  # fmt: skip
            ran += 1
    finally:
        for process in reversed(started):
            process.stop()
    return {"ran": ran}


def main(argv: list[str]) -> int:
    spec_path, result_path = Path(argv[0]), Path(argv[1])
    spec = json.loads(spec_path.read_text(encoding="utf-8"))
    if spec.get("namespace"):
        _loopback_up()
    result = run_page(spec)
    result_path.write_text(json.dumps(result), encoding="utf-8")
    return 0


def spec_of(page_blocks: list[Block], cwd: Path, namespace: bool) -> dict[str, Any]:
    return {
        "cwd": str(cwd),
        "namespace": namespace,
        "blocks": [asdict(block) for block in page_blocks if block.runs],
    }


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
