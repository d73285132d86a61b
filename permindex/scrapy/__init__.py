"""Scrapy integration (``pip install 'permindex[scrapy]'``):
:class:`~permindex.scrapy.middleware.NearDuplicateMiddleware`, a downloader middleware that
drops near-duplicate pages as they are crawled::

    DOWNLOADER_MIDDLEWARES = {"permindex.scrapy.NearDuplicateMiddleware": 500}
    PERMINDEX_ADDRESS = "127.0.0.1:50051"

Importing this package imports Scrapy and Twisted; ``import permindex`` does not import it.
"""

from __future__ import annotations

from permindex.scrapy.middleware import META_KEY, NearDuplicateMiddleware

__all__ = ["META_KEY", "NearDuplicateMiddleware"]
