"""How permindex compiles its kernels: numba, loaded lazily, with an on-disk cache that works
when site-packages is read-only and when several processes start at once.

Importing :mod:`permindex` does not import numba; the modules that hold kernels (named
``*_kernels.py``) import this module, and the code that calls a kernel imports its module on
first use, so the JIT is loaded only by a process that needs it.

The cache. numba writes compiled kernels next to their source (``__pycache__``) when it can, which
fails or pollutes a read-only or shared site-packages. Before numba is imported, this module
points ``NUMBA_CACHE_DIR`` at a per-user directory, unless the user set it:
``$PERMINDEX_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/permindex/numba`` (``~/.cache`` when
XDG_CACHE_HOME is unset). If that directory cannot be created or written, a directory under the
system's temporary folder is used instead. numba writes each cache file to a temporary name and
renames it into place, so two processes compiling the same kernel at once both succeed and one
of the two identical files wins.

Every kernel is compiled with ``cache=True`` (compiled once per machine and numba version, then
loaded), ``nogil=True`` (threads run kernels in parallel: the server's executor, ``threads=N``
in :meth:`permindex.Index.query_many`) and no ``fastmath`` (results are bit-exact with the
numpy and Python paths).

``PERMINDEX_JIT=0`` in the environment makes :func:`enabled` False: callers then take their
numpy or Python path (the reference the kernels are tested against).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["cache_dir", "enabled", "njit"]

F = TypeVar("F", bound=Callable[..., Any])


def enabled() -> bool:
    """Whether compiled kernels are used: False when ``PERMINDEX_JIT`` is ``0``, ``false`` or
    ``no`` (case-insensitive), True otherwise."""
    return os.environ.get("PERMINDEX_JIT", "1").strip().lower() not in {"0", "false", "no"}


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
    fallback = Path(tempfile.gettempdir()) / f"permindex-numba-{os.getuid()}"
    fallback.mkdir(parents=True, exist_ok=True)
    return fallback


os.environ.setdefault("NUMBA_CACHE_DIR", str(cache_dir()))

import numba  # noqa: E402  (NUMBA_CACHE_DIR must be set before numba reads its configuration)


def njit(signature: Any = None, *, inline: bool = False) -> Callable[[F], F]:
    """``numba.njit`` with permindex's options: ``cache=True, nogil=True``, no fastmath, no
    bounds checks. ``signature``: an explicit numba signature (or a list of them), compiled when
    the kernel's module is imported; None compiles on the first call for the argument types seen.
    ``inline=True``: a small helper that numba inlines into the kernels that call it
    (``inline="always"``), where a call would cost more than its body.
    """

    def decorate(function: F) -> F:
        options: dict[str, Any] = {"cache": True, "nogil": True, "boundscheck": False}
        if inline:
            options["inline"] = "always"
        if signature is None:
            compiled = numba.njit(**options)(function)
        else:
            compiled = numba.njit(signature, **options)(function)
        return compiled  # type: ignore[no-any-return]

    return decorate
