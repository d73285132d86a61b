"""permindex.jit: where numba's cache goes (never into site-packages; a directory that cannot be
written falls back to the temporary folder), and what ``serve`` says while it loads the
kernels."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from permindex import jit


def test_cache_dir_order(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.delenv("PERMINDEX_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert jit.cache_dir() == tmp_path / "xdg" / "permindex" / "numba"
    assert (tmp_path / "xdg" / "permindex" / "numba").is_dir()
    monkeypatch.setenv("PERMINDEX_CACHE_DIR", str(tmp_path / "own"))
    assert jit.cache_dir() == tmp_path / "own"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert jit.cache_dir() == tmp_path / "numba"


def test_unwritable_cache_dir_falls_back(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A cache directory that cannot be created (here: below a regular file, which fails even
    for root) gives way to one under the temporary folder."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PERMINDEX_CACHE_DIR", str(blocker / "cache"))
    chosen = jit.cache_dir()
    assert chosen.parent == Path(tempfile.gettempdir()) and chosen.is_dir()
    assert os.access(chosen, os.W_OK)


def test_fallback_refuses_a_directory_others_can_write(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The temporary fallback is used only when it is this user's and nobody else can write it
    (numba's cache files are pickles); otherwise a new private directory is made."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("PERMINDEX_CACHE_DIR", str(blocker / "cache"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    shared = tmp_path / f"permindex-numba-{os.getuid()}"
    shared.mkdir()
    shared.chmod(0o777)
    chosen = jit.cache_dir()
    assert chosen != shared and chosen.parent == tmp_path
    assert chosen.stat().st_mode & 0o077 == 0  # private
    shared.chmod(0o700)
    assert jit.cache_dir() == shared


def test_serve_accepts_the_cache_variable_and_refuses_the_old_switch(tmp_path: Path) -> None:
    """``permindex serve`` refuses unknown PERMINDEX_* variables, but PERMINDEX_CACHE_DIR is
    permindex's own: a server started with it answers lookups. PERMINDEX_JIT, the switch to
    the reference paths that no longer exist, is refused like any unknown variable."""
    from serverproc import ServeProcess

    import permindex

    env = {"PERMINDEX_CACHE_DIR": str(tmp_path / "cache")}
    proc = ServeProcess(tmp_path / "data", env=env)
    try:
        address = proc.address()
        assert address is not None, proc.text
        with permindex.Client(address) as client:
            client.add([("a", 0), ("b", 7), ("c", 2**64 - 1)])
            assert [m.key for m in client.query(1)] == ["a", "b"]
            assert [[m.key for m in ms] for ms in client.query_many([1] * 20)] == [["a", "b"]] * 20
    finally:
        proc.stop()
    assert "unknown variable" not in proc.text
    done = subprocess.run(
        [sys.executable, "-m", "permindex", "serve", "--data-dir", str(tmp_path / "other")],
        env={**os.environ, "PERMINDEX_JIT": "0"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0 and "PERMINDEX_JIT" in done.stderr, done.stderr


def test_serve_says_when_it_compiles_the_kernels(tmp_path: Path) -> None:
    """The first start with an empty kernel cache compiles for seconds: ``serve`` says so on
    stderr (naming the cache directory) instead of staying silent, compiles the lookup kernels
    into that directory (nothing into the package's folders), then answers lookups. The next
    start loads them from there: it says nothing of kernels and writes no cache file."""
    from serverproc import ServeProcess

    import permindex

    cache = tmp_path / "cache"
    env = {"PERMINDEX_CACHE_DIR": str(cache), "NUMBA_CACHE_DIR": str(cache)}
    proc = ServeProcess(tmp_path / "data", env=env)
    try:
        address = proc.address(timeout=300)
        assert address is not None, proc.text
        with permindex.Client(address) as client:
            client.add([("a", 0), ("b", 7)])
            assert [m.key for m in client.query(1)] == ["a", "b"]
            assert [[m.key for m in ms] for ms in client.query_many([1] * 20)] == [["a", "b"]] * 20
    finally:
        proc.stop()
    assert "loading the lookup and fingerprint kernels" in proc.text, proc.text
    assert "compiles them into" in proc.text, proc.text
    assert str(cache) in proc.text
    cached = list(cache.rglob("*.nbi"))
    assert any("lookup_kernels" in path.name for path in cached), cached
    package = Path(jit.__file__).parent
    assert not list(package.rglob("*.nbi")), "numba wrote its cache into the package"
    written = {path: path.stat().st_mtime_ns for path in cache.rglob("*") if path.is_file()}
    again = ServeProcess(tmp_path / "data", env=env)
    try:
        address = again.address(timeout=120)
        assert address is not None, again.text
        with permindex.Client(address) as client:
            assert [m.key for m in client.query(1)] == ["a", "b"]
    finally:
        again.stop()
    assert "kernels" not in again.text, again.text
    assert {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()} == written


def test_unowned_views_the_same_memory_without_taking_a_reference() -> None:
    """jit_numba.unowned: the same data, shape and strides (writes reach the array, a strided
    view stays strided), and no reference to the array is taken or left behind."""
    import numpy as np

    from permindex import jit_numba

    # numba types the kernel, not mypy (as for the kernel modules: pyproject.toml)
    njit: Any = jit_numba.njit
    unowned: Any = jit_numba.unowned

    def body(array: Any) -> Any:
        view = unowned(array)
        view[1] = 7
        total = 0
        for i in range(view.shape[0]):
            total += view[i]
        return total, view.shape[0], view.strides[0]

    touch = njit()(body)
    base = np.arange(10, dtype=np.int64)
    strided = base[::2]
    before = sys.getrefcount(strided)
    for _ in range(1000):
        total, size, stride = touch(strided)
    assert (total, size, stride) == (0 + 7 + 4 + 6 + 8, 5, 16)
    assert base[2] == 7 and base[1] == 1  # view[1] of base[::2] is base[2]
    assert sys.getrefcount(strided) == before
