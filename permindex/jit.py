"""How permindex compiles its kernels: numba, loaded lazily, with an on-disk cache that works
when site-packages is read-only and when several processes start at once.

Importing :mod:`permindex` does not import numba; the modules that hold kernels (named
``*_kernels.py``) import this module, and the code that calls a kernel imports its module on
first use, so the JIT is loaded only by a process that needs it.

The cache. numba writes compiled kernels next to their source (``__pycache__``) when it can, which
fails or pollutes a read-only or shared site-packages. Before numba is imported, this module
points ``NUMBA_CACHE_DIR`` at a per-user directory, unless the user set it:
``$PERMINDEX_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/permindex/numba`` (``~/.cache`` when
XDG_CACHE_HOME is unset). If the chosen directory cannot be created or written, the kernels are
cached in ``<tmp>/permindex-numba-<uid>`` instead (a directory of this user's, mode 0700: one
that another user could write is not used), or, failing that, in a new private temporary
directory: they then compile again in every process. numba writes each cache file to a
temporary name and renames it into place, so two processes compiling the same kernel at once
both succeed and one of the two identical files wins. numba keys its cache by the kernels'
source files, so each installation (a clone, a virtual environment) compiles once.

Every kernel is compiled with ``cache=True`` (compiled once per machine and numba version, then
loaded), ``nogil=True`` (threads run kernels in parallel: the server's executor, ``threads=N``
in :meth:`permindex.Index.query_many`; the short kernels that order a batch's matches keep the
GIL, see :mod:`permindex.index.search.match_kernels`) and no ``fastmath`` (results are bit-exact
with
the references of the tests).

The kernels are the one implementation of each job: there is no switch to another path (the
references they are checked against live in the tests).

This module imports no numba itself (:func:`cache_dir` is cheap): the
kernel tools -- ``njit``, ``numba``, ``popcount64``, ``prefetch``, ``unowned`` -- are in
:mod:`permindex.jit_numba`, which kernel modules import (``from permindex.jit_numba import
njit``) and which sets the cache directory before it imports numba.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

__all__ = ["cache_dir", "configure_cache"]


def _writable(path: Path) -> bool:
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".probe-", delete=True)
        probe.close()
    except OSError:
        return False
    return True


def cache_dir() -> Path:
    """The directory numba caches compiled kernels in (see the module docstring for the order
    of choices); created if missing."""
    explicit = os.environ.get("NUMBA_CACHE_DIR")
    if explicit:
        return Path(explicit)
    own = os.environ.get("PERMINDEX_CACHE_DIR")
    if own:
        chosen = Path(own)
    else:
        base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        chosen = Path(base) / "permindex" / "numba"
    if _writable(chosen):
        return chosen
    return _private_temporary()


def _private_temporary() -> Path:
    """``<tmp>/permindex-numba-<uid>``, created with mode 0700, if it is a directory owned by
    this user that nobody else can write (numba's cache files are pickles: a directory another
    user could write would let them plant code); else a new private directory (no cache kept
    across processes)."""
    path = Path(tempfile.gettempdir()) / f"permindex-numba-{os.getuid()}"
    try:
        path.mkdir(mode=0o700, exist_ok=True)
        status = path.lstat()
        if (
            stat.S_ISDIR(status.st_mode)
            and status.st_uid == os.getuid()
            and not status.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        ):
            return path
    except OSError:
        pass
    return Path(tempfile.mkdtemp(prefix="permindex-numba-"))


def configure_cache() -> None:
    """Set ``NUMBA_CACHE_DIR`` (unless set) to :func:`cache_dir`; called before numba is
    imported."""
    os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_dir()))
