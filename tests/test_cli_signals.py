"""Ctrl-C and SIGTERM during ``permindex dedup``, sent as a terminal and a service manager send
them (to the whole process group): one line on stderr, the documented exit code (130, 143), no
traceback from the command or any of its child processes, no ring file or process left.

Each run is a real ``permindex`` process on a real gzip JSONL file, with the decompressing child
and the worker pool of ``--jobs 2``.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.skipif(
    not Path("/dev/shm").is_dir()
    or not hasattr(os, "killpg")
    or not Path("/proc/self/stat").exists(),
    reason="needs /dev/shm (to see the ring file), /proc (to see child processes) and process "
    "groups",
)

_DOCUMENTS = 200_000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """200,000 documents of 80 words, gzip JSONL (a dedup of it runs for about two seconds)."""
    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(3000)]
    path = tmp_path_factory.mktemp("signals") / "big.jsonl.gz"
    picks = rng.integers(0, len(words), size=(_DOCUMENTS, 80))
    with gzip.open(path, "wt", compresslevel=1) as out:
        for i, row in enumerate(picks.tolist()):  # Python ints: 2 s less than numpy indexing
            out.write(f'{{"id": "k{i}", "text": "{" ".join([words[j] for j in row])}"}}\n')
    return path


#: The dedup processes this module started: only their ring files are looked at, so that
#: another dedup running on the machine meanwhile (a second test run) cannot fail these tests.
_STARTED: set[int] = set()


def _rings() -> set[Path]:
    """The ring files (``permindex-blocks-<pid>-*``) of the dedup processes started here."""
    return {
        ring
        for ring in Path("/dev/shm").glob("permindex-blocks-*")
        if ring.name.split("-")[2] in {str(pid) for pid in _STARTED}
    }


def _start(corpus: Path, out: Path, jobs: int) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "permindex",
            "dedup",
            str(corpus),
            "--out",
            str(out),
            "--jobs",
            str(jobs),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group, as a shell's job has
    )
    _STARTED.add(process.pid)
    return process


def _wait_for_ring(process: subprocess.Popen[str], before: set[Path]) -> set[Path]:
    deadline = time.monotonic() + 60
    rings: set[Path] = set()
    while not rings and process.poll() is None and time.monotonic() < deadline:
        rings = _rings() - before
        time.sleep(0.01)
    return rings


def _opens(pid: int, path: Path) -> bool:
    try:
        return any(os.readlink(fd) == str(path) for fd in Path(f"/proc/{pid}/fd").iterdir())
    except OSError:  # ended, or a descriptor closed while being read
        return False


def _wait_for_input(process: subprocess.Popen[str], path: Path) -> bool:
    """Wait (up to 60 s) until ``process`` or a child of it has the input ``path`` open:
    dedup has started reading, past the interpreter's start and the command's imports. False
    if it ended first or took longer."""
    deadline = time.monotonic() + 60
    while process.poll() is None and time.monotonic() < deadline:
        if _opens(process.pid, path):
            return True
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    child = _parent_of(int(entry.name)) == process.pid
                except (OSError, IndexError, ValueError):  # ended while being read
                    continue
                if child and _opens(int(entry.name), path):
                    return True
        time.sleep(0.005)
    return False


def _group_gone(pgid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.05)
    return False


def _signal_group(pgid: int, signum: int) -> None:
    try:
        os.killpg(pgid, signum)
    except ProcessLookupError:  # it had already ended
        pass


def _assert_clean(stderr: str) -> None:
    assert "Traceback" not in stderr, stderr
    assert "Exception ignored" not in stderr, stderr
    assert "Error" not in stderr, stderr  # SystemError from a kernel, FileNotFoundError, ...


def test_ctrl_c_to_the_process_group_stops_a_parallel_dedup_with_one_line(
    corpus: Path, tmp_path: Path
) -> None:
    """SIGINT reaches the parent, the decompressing child and the workers at once: only the
    parent speaks (exit 130, one line); the ring file and every process of the group go."""
    before = _rings()
    process = _start(corpus, tmp_path / "r", jobs=2)
    assert _wait_for_input(process, corpus) or process.poll() is not None
    rings = _wait_for_ring(process, before)
    time.sleep(0.3)  # the child and the workers busy
    if process.poll() is not None:
        pytest.skip("dedup ended before it could be stopped (a machine too fast for the corpus)")
    _signal_group(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr
    assert stderr == "permindex dedup: interrupted\n"
    assert rings and not any(ring.exists() for ring in rings)
    assert _group_gone(process.pid)


#: Moments after dedup has its input open, in seconds: the default suite's few spread over the
#: start and the pass (9 dedup processes in all), and all of them behind the soak marker.
MOMENTS = (0.0, 0.45, 1.0)
SOAK_MOMENTS = (0.0, 0.05, 0.15, 0.3, 0.45, 0.6, 0.8, 1.0, 1.2)


@pytest.mark.slow  # a dedup process per moment
@pytest.mark.parametrize(
    "moments",
    [
        pytest.param(MOMENTS, id="moments"),
        pytest.param(SOAK_MOMENTS, id="soak", marks=pytest.mark.soak),
    ],
)
@pytest.mark.parametrize(
    ("signum", "jobs"),
    [(signal.SIGINT, 2), (signal.SIGTERM, 2), (signal.SIGINT, 1)],
    ids=["sigint-jobs-2", "sigterm-jobs-2", "sigint-jobs-1"],
)
def test_a_signal_at_any_moment_of_the_run_gives_its_line_and_code(
    corpus: Path, tmp_path: Path, signum: int, jobs: int, moments: tuple[float, ...]
) -> None:
    """Signals to the group at moments spread over the start and the pass, counted from the
    moment dedup has its input open (the interpreter's own start and imports are
    not dedup's: on a loaded machine they took over 0.5 s, and a signal there printed Python's
    traceback of runpy): while the child processes start, while numba kernels run (a signal
    there used to surface as a SystemError, exit 1), while blocks are written: each run ends
    with the signal's one line and code (or finishes normally, if it was faster than the
    signal), with no traceback anywhere."""
    before = _rings()
    line, code = (
        ("permindex dedup: interrupted", 130)
        if signum == signal.SIGINT
        else ("permindex dedup: terminated (SIGTERM)", 143)
    )
    # moments up to 1.2 s after that: a SIGTERM that killed a pool worker half-way through
    # sending its result hung the pool's shutdown (or crashed the parent) until the workers
    # ignored it
    for i, delay in enumerate(moments):
        process = _start(corpus, tmp_path / f"r{i}", jobs)
        started = _wait_for_input(process, corpus)
        time.sleep(delay)
        _signal_group(process.pid, signum)
        _, stderr = process.communicate(timeout=60)
        assert started, f"dedup never had its input open: {stderr}"
        _assert_clean(stderr)
        if process.returncode != 0:  # 0: it finished before the signal
            last = stderr.strip().splitlines()[-1] if stderr.strip() else ""
            assert (process.returncode, last) == (code, line), stderr
        assert _group_gone(process.pid)
    assert _rings() == before


def test_a_second_ctrl_c_during_the_clean_up_does_not_cut_it_short(
    corpus: Path, tmp_path: Path
) -> None:
    """A second Ctrl-C 30 ms after the first (an impatient user) is ignored while the workers
    stop and the ring file goes: no traceback ("Exception ignored in ... text_blocks"), no
    file left."""
    before = _rings()
    process = _start(corpus, tmp_path / "r", jobs=2)
    assert _wait_for_input(process, corpus) or process.poll() is not None
    rings = _wait_for_ring(process, before)
    time.sleep(0.3)
    if process.poll() is not None:
        pytest.skip("dedup ended before it could be stopped (a machine too fast for the corpus)")
    _signal_group(process.pid, signal.SIGINT)
    time.sleep(0.03)
    _signal_group(process.pid, signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    _assert_clean(stderr)
    assert "permindex dedup: interrupted" in stderr
    # 130: the second one is ignored (before: at times death by SIGINT, CPython's flag of a
    # KeyboardInterrupt in string-evaluated code; see permindex.cli.signals)
    assert process.returncode == 130, stderr
    assert rings and not any(ring.exists() for ring in rings)
    assert _group_gone(process.pid)


def test_a_parent_killed_outright_takes_its_child_processes_with_it(
    corpus: Path, tmp_path: Path
) -> None:
    """SIGKILL to the parent alone (the OOM killer, ``kill -9 PID``) while its workers and the
    decompressing child run: every process of the group ends within 5 s (before: the fork
    server, the workers and the decompressing child waited for ever)."""
    before = _rings()
    process = _start(corpus, tmp_path / "r", jobs=2)
    try:
        rings = _wait_for_ring(process, before)
        time.sleep(0.5)  # the child and the workers busy
        if process.poll() is not None:
            pytest.skip("dedup ended before it could be killed (a machine too fast for the corpus)")
        os.kill(process.pid, signal.SIGKILL)
        process.communicate(timeout=60)
        assert process.returncode == -signal.SIGKILL
        assert _group_gone(process.pid, within=5.0)
    finally:
        _signal_group(process.pid, signal.SIGKILL)
        for ring in _rings() - before:  # a parent killed outright leaves its ring file
            ring.unlink(missing_ok=True)
    assert rings


def _parent_of(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def _pool_worker(parent: int) -> int | None:
    """A pool worker of the dedup ``parent``: a child of its fork server without the input
    file open (that one is the decompressing child)."""
    procs = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    try:
        servers = {p for p in procs if _parent_of(p) == parent}
        for p in procs:
            if _parent_of(p) in servers:
                opened = [os.readlink(fd) for fd in Path(f"/proc/{p}/fd").iterdir()]
                if not any(name.endswith(".gz") for name in opened):
                    return p
    except OSError:  # a process ended while being read
        return None
    return None


def test_a_pool_worker_killed_outright_ends_the_run_with_an_error(
    corpus: Path, tmp_path: Path
) -> None:
    """SIGKILL to one pool worker (the OOM killer's pick): dedup exits 1 with one
    BrokenProcessPool line within 30 s and leaves no process (before the fix: it waited for
    ever on the other workers, which ignore the pool's SIGTERM)."""
    before = _rings()
    process = _start(corpus, tmp_path / "r", jobs=2)
    try:
        worker = None
        deadline = time.monotonic() + 30
        while worker is None and process.poll() is None and time.monotonic() < deadline:
            worker = _pool_worker(process.pid)
            time.sleep(0.02)
        if worker is None:
            pytest.skip("dedup ended before a pool worker could be found")
        time.sleep(0.2)
        os.kill(worker, signal.SIGKILL)
        _, stderr = process.communicate(timeout=30)
        if process.returncode != 0:  # 0: it had finished; 4: the pick was the decompressor
            last = stderr.strip().splitlines()[-1]
            assert (process.returncode, "BrokenProcessPool" in last) == (1, True) or (
                process.returncode,
                "the process decompressing it died" in last,
            ) == (4, True), stderr
        assert _group_gone(process.pid)
    finally:
        _signal_group(process.pid, signal.SIGKILL)
    assert _rings() == before


_SIGNAL_INSIDE = """
import multiprocessing.util, os, signal, sys, weakref
import permindex.cli
import permindex.cli.near_engine as engine

run_engine = engine.run_engine
WHERE, SIGNUM = sys.argv[1], getattr(signal, sys.argv[2])


def signal_and_wait() -> None:
    os.kill(os.getpid(), SIGNUM)  # its handler runs at the loop's next check
    for _ in range(100_000):
        pass


class Finaliser:
    def __del__(self) -> None:
        signal_and_wait()


class Referent:
    pass


def run_engine_then_signal(*args, **kwargs):
    result = run_engine(*args, **kwargs)
    if WHERE == "finaliser":  # Python prints and drops what __del__ raises
        Finaliser()
    elif WHERE == "weakref-callback":  # the same for a weakref's callback
        referent = Referent()
        reference = weakref.ref(referent, lambda _: signal_and_wait())
        del referent
    elif WHERE == "multiprocessing-finalize":  # a pool's semaphores unregistered (seen in CI)
        referent = Referent()
        multiprocessing.util.Finalize(referent, signal_and_wait)
        del referent
    elif WHERE == "weakref-finalize":
        referent = Referent()
        weakref.finalize(referent, signal_and_wait)
        del referent
    else:  # string-evaluated code, as numba and the standard library generate
        exec("signal_and_wait()")
    return result


engine.run_engine = run_engine_then_signal
sys.argv = ["permindex", *sys.argv[3:]]
permindex.cli.entry()
"""


@pytest.mark.parametrize(
    "where",
    [
        "finaliser",
        "weakref-callback",
        "multiprocessing-finalize",
        "weakref-finalize",
        "string-exec",
    ],
)
@pytest.mark.parametrize(
    ("name", "line", "code"),
    [("SIGINT", "interrupted", 130), ("SIGTERM", "terminated (SIGTERM)", 143)],
)
def test_a_signal_where_python_drops_exceptions_still_stops_dedup(
    tmp_path: Path, where: str, name: str, line: str, code: int
) -> None:
    """A signal whose handler runs where Python drops what it raises still ends dedup with its
    line and code, no traceback, and no report written. In a finaliser, ``multiprocessing``'s
    ``Finalize`` and ``weakref.finalize`` the handler waits (it asks again 20 ms later; before,
    CI saw "Exception ignored in: <Finalize object, dead>" with a traceback when a SIGTERM
    met a pool's semaphore clean-up); in a weakref callback (which it cannot tell) Python drops
    the exception, and the command's ``sys.unraisablehook`` prints nothing and asks again
    (before: the traceback, and the signal lost until the checkpoint; earlier still: exit 0
    and a full report); in string-evaluated code the KeyboardInterrupt set CPython's flag that
    made ``python -m`` die of SIGINT (-2) after printing the line (before: the exit code
    lost)."""
    module = tmp_path / "signal_inside.py"
    module.write_text(_SIGNAL_INSIDE)
    path = tmp_path / "docs.jsonl"
    path.write_text(
        "".join(f'{{"id": "d{i}", "text": "alpha beta gamma delta {i}"}}\n' for i in range(50))
    )
    done = subprocess.run(
        [sys.executable, "-m", "signal_inside", where, name, "dedup", str(path), "--out",
         str(tmp_path / "r"), "--jobs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
        start_new_session=True,
    )  # fmt: skip
    assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (
        code,
        f"permindex dedup: {line}",
    ), done.stderr
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr
    assert not (tmp_path / "r" / "summary.json").exists()


_SIGNAL_DURING_IMPORTS = """
import importlib.abc, os, signal, sys

SIGNUM = getattr(signal, os.environ["SIGNAL_DURING_IMPORTS"])
MODULE = os.environ["SIGNAL_AT_MODULE"]


class SignalOnImport(importlib.abc.MetaPathFinder):
    # the signal arrives as MODULE starts loading, as a Ctrl-C right after Enter would
    def find_spec(self, name, path=None, target=None):
        if name == MODULE:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), SIGNUM)
            for _ in range(100_000):
                pass
        return None


sys.meta_path.insert(0, SignalOnImport())
"""


@pytest.mark.parametrize("launch", ["module", "script"])
@pytest.mark.parametrize("module", ["numpy", "permindex.cli.near"])
@pytest.mark.parametrize(
    ("name", "line", "code"),
    [("SIGINT", "interrupted", 130), ("SIGTERM", "terminated (SIGTERM)", 143)],
)
def test_a_signal_while_the_command_loads_gives_its_line_and_code(
    tmp_path: Path, launch: str, module: str, name: str, line: str, code: int
) -> None:
    """Ctrl-C or SIGTERM while ``permindex dedup``'s modules are still loading (the first few
    tenths of a second): numpy (among the first, while ``permindex.cli`` loads) or the
    command's own module (while the command line is parsed, after that): its one line and
    code, no traceback (before: a KeyboardInterrupt traceback of the import and death by
    SIGINT, or a silent death by SIGTERM), through ``python -m permindex`` and through the
    ``permindex`` console script alike."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "sitecustomize.py").write_text(_SIGNAL_DURING_IMPORTS)
    path = tmp_path / "docs.jsonl"
    path.write_text('{"id": "a", "text": "alpha beta gamma delta"}\n')
    if launch == "module":
        command = [sys.executable, "-m", "permindex"]
    else:
        script = Path(sys.executable).with_name("permindex")
        if not script.exists():
            pytest.skip(f"no console script beside {sys.executable}")
        command = [str(script)]
    pythonpath = os.pathsep.join(filter(None, [str(hooks), os.environ.get("PYTHONPATH")]))
    env = {
        **os.environ,
        "PYTHONPATH": pythonpath,
        "SIGNAL_DURING_IMPORTS": name,
        "SIGNAL_AT_MODULE": module,
    }
    done = subprocess.run(
        [*command, "dedup", str(path), "--out", str(tmp_path / "r")],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        start_new_session=True,
    )
    assert (done.returncode, done.stderr) == (code, f"permindex dedup: {line}\n")
    assert not (tmp_path / "r").exists()


_TWO_SIGNALS_AT_ONCE = """
import os, signal, sys
import permindex.near.dedup as dedup

run_dedup = dedup.run_dedup


def run_dedup_after_two_signals(*args, **kwargs):
    # a SIGTERM then a Ctrl-C, both pending when the main thread next looks (as after one
    # long C call): CPython runs both handlers in one go
    both = {signal.SIGINT, signal.SIGTERM}
    signal.pthread_sigmask(signal.SIG_BLOCK, both)
    os.kill(os.getpid(), signal.SIGTERM)
    os.kill(os.getpid(), signal.SIGINT)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, both)
    return run_dedup(*args, **kwargs)


dedup.run_dedup = run_dedup_after_two_signals
from permindex.__main__ import run

sys.argv = ["permindex", *sys.argv[1:]]
run()
"""


def test_two_signals_at_once_give_one_line_and_no_traceback(tmp_path: Path) -> None:
    """A SIGTERM and a Ctrl-C pending at the same moment: the first handler stops the run,
    the second is ignored quietly (before: "OSError: Signal 15 ignored due to race condition"
    with a traceback, the first handler having set SIG_IGN). Whichever handler runs first
    gives the line and its code: CPython runs handlers pending together in signal-number
    order (the Ctrl-C's), but on a loaded machine the SIGTERM's can run before the Ctrl-C is
    delivered."""
    path = tmp_path / "docs.jsonl"
    path.write_text(
        "".join(f'{{"id": "d{i}", "text": "alpha beta gamma delta {i}"}}\n' for i in range(50))
    )
    done = subprocess.run(
        [sys.executable, "-c", _TWO_SIGNALS_AT_ONCE, "dedup", str(path), "--out",
         str(tmp_path / "r"), "--jobs", "1"],
        capture_output=True,
        text=True,
        timeout=120,
        start_new_session=True,
    )  # fmt: skip
    assert (done.returncode, done.stderr) in (
        (130, "permindex dedup: interrupted\n"),
        (143, "permindex dedup: terminated (SIGTERM)\n"),
    ), done.stderr
