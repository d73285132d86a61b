"""gzip decompression for the readers of :mod:`permindex.text.documents`: python-zlib-ng's
(``zlib_ng.gzip_ng``, zlib-ng's inflate: benchmarks/README.md has its speed against the
standard library's) where it is installed, else the standard library's :mod:`gzip`. Both give
the same bytes; a truncated or corrupt stream raises one of :func:`errors` with either.

zlib-ng is imported on first use, not with this module (its ``gzip_ng`` imports argparse for
its command line, which the server's configuration module must not load)."""

from __future__ import annotations

import functools
import zlib
from types import ModuleType
from typing import IO, cast

__all__ = ["decompress", "errors", "implementation", "open_stream"]


@functools.cache
def _chosen() -> tuple[ModuleType, tuple[type[BaseException], ...]]:
    """The gzip module used and what reading a bad stream with it raises."""
    try:
        from zlib_ng import gzip_ng, zlib_ng
    except ImportError:  # not installed (a platform without its wheels)
        import gzip

        return gzip, (OSError, EOFError, zlib.error)
    zlib_ng_error = cast("type[BaseException]", zlib_ng.error)  # its stub types an instance
    return gzip_ng, (OSError, EOFError, zlib.error, zlib_ng_error)


def implementation() -> str:
    """The module that decompresses: ``"zlib_ng"`` or ``"gzip"``."""
    return "zlib_ng" if _chosen()[0].__name__.startswith("zlib_ng") else "gzip"


def errors() -> tuple[type[BaseException], ...]:
    """What reading a truncated or corrupt gzip stream raises (to catch)."""
    return _chosen()[1]


def open_stream(raw: IO[bytes]) -> IO[bytes]:
    """A reader of the decompressed bytes of the gzip stream ``raw`` (a binary file), read as
    far as the caller reads; it raises one of :func:`errors` where the stream is bad."""
    stream: IO[bytes] = _chosen()[0].GzipFile(fileobj=raw, mode="rb")
    return stream


def decompress(data: bytes) -> bytes:
    """The decompressed bytes of the whole gzip stream ``data``; raises one of :func:`errors`
    when it is truncated or corrupt."""
    out: bytes = _chosen()[0].decompress(data)
    return out
