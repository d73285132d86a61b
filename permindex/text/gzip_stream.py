"""gzip decompression for the readers of :mod:`permindex.text.documents`: python-zlib-ng's
(``zlib_ng.gzip_ng``, zlib-ng's inflate: benchmarks/README.md has its speed against the
standard library's) where it is installed, else the standard library's :mod:`gzip`. Both give
the same bytes; a truncated or corrupt stream raises one of :data:`ERRORS` with either."""

from __future__ import annotations

import zlib
from types import ModuleType
from typing import IO, cast

__all__ = ["ERRORS", "IMPLEMENTATION", "decompress", "open_stream"]

_module: ModuleType
try:
    from zlib_ng import gzip_ng as _module
    from zlib_ng import zlib_ng as _zlib_ng

    #: What reading a truncated or corrupt gzip stream raises.
    _ZLIB_NG_ERROR = cast("type[BaseException]", _zlib_ng.error)  # its stub types an instance
    ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, zlib.error, _ZLIB_NG_ERROR)
    #: The module that decompresses: "zlib_ng" or "gzip".
    IMPLEMENTATION = "zlib_ng"
except ImportError:  # not installed (a platform without its wheels)
    import gzip as _module

    ERRORS = (OSError, EOFError, zlib.error)
    IMPLEMENTATION = "gzip"


def open_stream(raw: IO[bytes]) -> IO[bytes]:
    """A reader of the decompressed bytes of the gzip stream ``raw`` (a binary file), read as
    far as the caller reads; it raises one of :data:`ERRORS` where the stream is bad."""
    stream: IO[bytes] = _module.GzipFile(fileobj=raw, mode="rb")
    return stream


def decompress(data: bytes) -> bytes:
    """The decompressed bytes of the whole gzip stream ``data``; raises one of
    :data:`ERRORS` when it is truncated or corrupt."""
    out: bytes = _module.decompress(data)
    return out
