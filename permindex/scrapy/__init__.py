"""Scrapy integration (``pip install '.[scrapy]'``):
:class:`~permindex.scrapy.middleware.NearDuplicateMiddleware`, a downloader middleware that
drops near-duplicate pages as they are crawled::

    DOWNLOADER_MIDDLEWARES = {"permindex.scrapy.NearDuplicateMiddleware": 500}
    PERMINDEX_ADDRESS = "127.0.0.1:50051"

Importing this package imports Scrapy and Twisted (an ``ImportError`` saying what to install
when Scrapy 2.14 or later is not there); ``import permindex`` does not import it.
"""

from __future__ import annotations

_NEEDS = (
    "permindex.scrapy needs Scrapy 2.14 or later: pip install '.[scrapy]' in the permindex clone"
)

try:
    import scrapy
except ImportError as error:
    raise ImportError(_NEEDS) from error
if tuple(int(part) for part in scrapy.__version__.split(".")[:2] if part.isdigit()) < (2, 14):
    raise ImportError(f"{_NEEDS} (this is Scrapy {scrapy.__version__})")

from permindex.scrapy.middleware import META_KEY, NearDuplicateMiddleware  # noqa: E402

__all__ = ["META_KEY", "NearDuplicateMiddleware"]
