"""``permindex.scrapy.NearDuplicateMiddleware``: a Scrapy downloader middleware that checks each
HTML page against a permindex server as it is downloaded and drops near-duplicates.

.. code-block:: python

    # settings.py
    DOWNLOADER_MIDDLEWARES = {"permindex.scrapy.NearDuplicateMiddleware": 500}
    PERMINDEX_ADDRESS = "127.0.0.1:50051"

See :class:`NearDuplicateMiddleware` for every setting. The check-and-add runs on a worker thread
(:class:`~permindex.scrapy.checker.BatchChecker`) with the synchronous
:class:`permindex.Client`, never on the thread of Scrapy's reactor; ``process_response`` is a
coroutine that awaits an :class:`asyncio.Future` under the asyncio reactor (Scrapy's default) and
a Twisted ``Deferred`` under any other reactor.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, cast

from scrapy import signals
from scrapy.exceptions import IgnoreRequest
from scrapy.http import HtmlResponse, Request, Response
from scrapy.utils.defer import deferred_from_coro
from twisted.internet.defer import Deferred

from permindex.addresses import DEFAULT_ADDRESS
from permindex.errors import InvalidArgumentError, NotFoundError, ServerError
from permindex.index.jaccard import JaccardMatch
from permindex.scrapy.bodies import response_text
from permindex.scrapy.checker import DEFAULT_MAX_TEXT_BYTES, BatchChecker, PageOutcome
from permindex.text.documents import format_fingerprint, html_page_text, html_to_text
from permindex.text.extract import EXTRACTS, check_extract

if TYPE_CHECKING:
    from scrapy import Spider
    from scrapy.crawler import Crawler
    from scrapy.statscollectors import StatsCollector

__all__ = ["META_KEY", "NearDuplicateMiddleware"]

logger = logging.getLogger(__name__)

#: The key of ``response.meta`` (``request.meta``) that holds what the middleware found.
META_KEY: Final = "permindex"
#: The ``finish_reason`` of a crawl stopped by the middleware.
STOP_REASON: Final = "permindex_error"


def _token(path: str | None) -> str | None:
    """The token of ``PERMINDEX_TOKEN_FILE`` (as ``--token-file`` reads it:
    :func:`permindex.client.channel.token_from_file`), else the ``PERMINDEX_TOKEN`` variable,
    else None."""
    from permindex.client.channel import token_from_file

    if not path:
        return os.environ.get("PERMINDEX_TOKEN") or None
    try:
        token = token_from_file(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError as error:
        raise InvalidArgumentError(
            f"PERMINDEX_TOKEN_FILE {path}: cannot read it: {error.strerror or error}", value=path
        ) from None
    if token is None:
        raise InvalidArgumentError(f"PERMINDEX_TOKEN_FILE {path}: no token in the file", value=path)
    return token


def _optional_k(value: object) -> int | None:
    if value is None or value == "":
        return None
    try:
        k = int(cast(Any, value))
    except (TypeError, ValueError):
        k = -1
    if k < 0 or isinstance(value, bool | float):
        raise InvalidArgumentError(f"PERMINDEX_K must be an integer >= 0, got {value!r}", value)
    return k


def _extractor(value: object) -> Callable[[str], str]:
    """The text of a page for ``PERMINDEX_EXTRACT`` (``visible``, the default, or ``main``)."""
    name = "visible" if value is None or value == "" else value
    if name not in EXTRACTS:
        raise InvalidArgumentError(
            f"PERMINDEX_EXTRACT must be one of {', '.join(EXTRACTS)}, got {value!r}", value
        )
    try:
        extract = check_extract(name)
    except InvalidArgumentError as error:  # main without trafilatura
        raise InvalidArgumentError(f"PERMINDEX_EXTRACT: {error}", value) from None
    if extract == "visible":
        return html_to_text
    return functools.partial(html_page_text, extract="main")


def _resolve(future: asyncio.Future[PageOutcome], outcome: PageOutcome) -> None:
    if not future.done():  # not cancelled meanwhile
        future.set_result(outcome)


def _fire(deferred: Deferred[PageOutcome], outcome: PageOutcome) -> None:
    if not deferred.called:  # not cancelled meanwhile
        deferred.callback(outcome)


def _waiter() -> tuple[Awaitable[PageOutcome], Callable[[PageOutcome], None]]:
    """Something the running coroutine can await, and a callback, safe to call from any
    thread, that completes it on the event loop's thread: an asyncio Future when an asyncio
    loop runs this coroutine (the asyncio reactor, or Scrapy without a reactor), else a Twisted
    Deferred fired through ``reactor.callFromThread`` (Scrapy's rule for what a coroutine may
    await: :func:`scrapy.utils.asyncio.is_asyncio_available`)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:
        future: asyncio.Future[PageOutcome] = loop.create_future()
        running = loop

        def settle(outcome: PageOutcome) -> None:
            running.call_soon_threadsafe(_resolve, future, outcome)

        return future, settle
    from twisted.internet import reactor
    from twisted.internet.interfaces import IReactorFromThreads

    threads = cast(IReactorFromThreads, reactor)
    deferred: Deferred[PageOutcome] = Deferred()
    return deferred, lambda outcome: threads.callFromThread(_fire, deferred, outcome)


class NearDuplicateMiddleware:
    """Check-and-add every 2xx HTML page against a permindex server; drop near-duplicates.

    Enable it at priority 500, after Scrapy's redirect (600) and decompression (590)
    middlewares, so that it sees the final URL and the decoded body (a body still compressed,
    at a priority above 590, is decoded for the check all the same; the response passed on is
    never changed)::

        DOWNLOADER_MIDDLEWARES = {"permindex.scrapy.NearDuplicateMiddleware": 500}

    For each response that is a 2xx :class:`~scrapy.http.HtmlResponse` (the others pass
    untouched), the page — key: ``response.url``; text: the text that ``permindex ingest``
    takes from an HTML file with the same ``--extract`` (``PERMINDEX_EXTRACT``: the visible
    text, :func:`permindex.html_to_text` of the decoded body, or its main content; the hook
    :attr:`extract`) — is checked and added in one step on the server
    (:meth:`permindex.Client.check_and_add_many`, the pages that arrive together in one request).
    The middleware sends the text, never a fingerprint: the server fingerprints it with the
    collection's shingle size, min words and vote (``collections create --vote set``; over
    several shards the client does, with the same options), so there is no vote setting here.
    A page with another key within k is a *near-duplicate*: it is not stored, and the response
    is dropped (:class:`~scrapy.exceptions.IgnoreRequest`, logged with the matched key and
    distance) or, with ``PERMINDEX_DROP = False``, passed on. A URL crawled again is
    ``replaced`` (the server never counts a key as a near-duplicate of itself).

    ``response.meta["permindex"]`` (:data:`META_KEY`; on the request's meta, so also on the
    ``IgnoreRequest`` failure's ``request.meta`` in an errback) is a dict: ``status``
    (``"added"``, ``"replaced"``, ``"near_duplicate"``, ``"too_short"`` or ``"error"``),
    ``fingerprint`` (16 hex digits, or None), ``matches`` (``[(key, distance), ...]``, nearest
    first) and, for a near-duplicate, ``duplicate_of`` and ``distance`` (the nearest match).

    Settings:

    - ``PERMINDEX_ADDRESS``: ``HOST:PORT`` of the server (default ``127.0.0.1:50051``), or
      several (``"HOST:PORT,HOST:PORT"`` or a list): the shards of a sharded
      :class:`permindex.Client`, whose check-and-add is atomic on each shard only.
    - ``PERMINDEX_COLLECTION``: the collection (default: the server's ``default``).
    - ``PERMINDEX_TOKEN_FILE``: a file whose first word is the bearer token (as
      ``--token-file``); without it, the ``PERMINDEX_TOKEN`` variable if set.
    - ``PERMINDEX_TLS_CA``: the PEM file of the CA that signed the server's certificate; turns
      TLS on (as ``--tls-ca``).
    - ``PERMINDEX_K``: the largest distance of a near-duplicate, bits (default: the
      collection's k; above it the server refuses every request: the crawl stops).
    - ``PERMINDEX_EXTRACT``: the text of a page, as ``ingest --extract``: ``"visible"`` (the
      default: every visible text node) or ``"main"`` (the main content, boilerplate removed by
      trafilatura, the extra ``.[extract]`` of the permindex clone:
      :func:`permindex.text.extract.main_text`; the visible text when the main content has
      fewer than :data:`~permindex.text.extract.MIN_MAIN_WORDS` words). Two pages of one site
      that share menus and footers are near-duplicates by their visible text when their own
      content is short; by their main content they are not.
    - ``PERMINDEX_DROP``: drop near-duplicates (default True) or only annotate them.
    - ``PERMINDEX_FAIL_OPEN``: what to do with a page the server could not check. True (the
      default): it passes, ``permindex/errors`` counts it, and the first failure after a
      success is logged (a warning) — a crawl goes on while the server is unreachable. False: a
      failed request stops the crawl (``finish_reason`` ``permindex_error``, the cause logged as
      an error) and the page is dropped. A page whose own body cannot be read (an encoding with
      no decoder, HTML nested too deep, a URL over the 1,024-byte key limit, a text over
      ``PERMINDEX_MAX_TEXT_BYTES``) passes whatever this setting, with a warning, counted in
      ``permindex/unchecked_pages`` (as ``ingest`` and ``dedup`` skip such a file). Either way,
      a refused token, a collection that does not exist or a request the server
      finds invalid (a ``PERMINDEX_K`` above the collection's k, or any ``PERMINDEX_K`` on a
      Jaccard collection: the error logged names ``PERMINDEX_K``) stops the crawl: no page
      could ever be checked.
    - ``PERMINDEX_TIMEOUT``: the deadline of each request, seconds (default 10): a server that
      does not answer holds the pages of one request that long.
    - ``PERMINDEX_MAX_TEXT_BYTES``: the longest text sent, UTF-8 bytes (default 32 MiB, the
      server's default ``--max-text-bytes``); a longer page passes unchecked (as above).

    Scrapy stats: ``permindex/added``, ``permindex/replaced``, ``permindex/near_duplicate``,
    ``permindex/too_short`` (a page of fewer than 3 words: stored nowhere, passed on),
    ``permindex/errors`` (pages the server did not check), ``permindex/unchecked_pages`` (pages
    whose own body could not be read or was too long), and ``permindex/requests``
    (``check_and_add_many`` calls — one CheckAndAdd request to one server — each carrying
    every page that arrived while the previous one was in flight).

    Raises (when the crawler builds it):
        InvalidArgumentError: a token file that cannot be read or holds no token, a bad
            ``PERMINDEX_K``, ``PERMINDEX_EXTRACT`` (or ``"main"`` without trafilatura) or
            ``PERMINDEX_ADDRESS``, a ``PERMINDEX_TLS_CA`` that cannot be read. Scrapy then stops
            before the first request, the message in its log.
    """

    def __init__(self, crawler: Crawler) -> None:
        from permindex.client import Client

        settings = crawler.settings
        self.crawler = crawler
        address = settings.get("PERMINDEX_ADDRESS") or DEFAULT_ADDRESS
        self.drop = settings.getbool("PERMINDEX_DROP", True)
        self.fail_open = settings.getbool("PERMINDEX_FAIL_OPEN", True)
        #: The hook from a page's decoded HTML (str) to the text that is fingerprinted; called on
        #: the worker thread. Default: the text of ``ingest`` with ``--extract`` as
        #: ``PERMINDEX_EXTRACT`` (:func:`permindex.html_to_text` for ``"visible"``).
        self.extract: Callable[[str], str] = _extractor(settings.get("PERMINDEX_EXTRACT"))
        client = Client(
            address,
            timeout=settings.getfloat("PERMINDEX_TIMEOUT", 10.0),
            retries=0,
            token=_token(settings.get("PERMINDEX_TOKEN_FILE")),
            root_certificates=settings.get("PERMINDEX_TLS_CA") or None,
            collection=settings.get("PERMINDEX_COLLECTION") or "",
        )
        #: The server's address (the shards', comma-separated).
        self.address: str = client.address
        self._k = _optional_k(settings.get("PERMINDEX_K"))
        self._checker = BatchChecker(
            client,
            k=self._k,
            max_text_bytes=settings.getint("PERMINDEX_MAX_TEXT_BYTES", DEFAULT_MAX_TEXT_BYTES),
        )
        self._failing = False  # the last request failed: the next success is logged
        self._unchecked = 0  # pages passed unchecked since the failure was logged
        self._stopping = False
        crawler.signals.connect(self._opened, signal=signals.spider_opened)
        crawler.signals.connect(self._closed, signal=signals.spider_closed)

    @classmethod
    def from_crawler(cls, crawler: Crawler) -> NearDuplicateMiddleware:
        """The middleware of ``crawler`` (Scrapy's constructor hook)."""
        return cls(crawler)

    def _opened(self) -> None:
        self._checker.start()

    def _closed(self) -> None:
        self._checker.stop(timeout=0)

    @property
    def _stats(self) -> StatsCollector:
        stats = self.crawler.stats
        assert stats is not None
        return stats

    @staticmethod
    def applies(response: Response) -> bool:
        """Whether ``response`` is checked: a 2xx :class:`~scrapy.http.HtmlResponse`."""
        return isinstance(response, HtmlResponse) and 200 <= response.status < 300

    async def process_response(
        self, request: Request, response: Response, spider: Spider | None = None
    ) -> Response:
        """Check ``response`` (see the class docstring); the response unchanged, or
        :class:`~scrapy.exceptions.IgnoreRequest` for a near-duplicate (or a page that could not
        be checked, with ``PERMINDEX_FAIL_OPEN = False``)."""
        if not self.applies(response):
            return response
        assert isinstance(response, HtmlResponse)
        page = response
        done, settle = _waiter()
        self._checker.submit(response.url, lambda: response_text(page, self.extract), settle)
        outcome = await done
        self._stats.set_value("permindex/requests", self._checker.requests)
        return self._decide(request, response, outcome)

    def _decide(self, request: Request, response: Response, outcome: PageOutcome) -> Response:
        fingerprint = outcome.fingerprint
        found: dict[str, Any] = {
            "status": outcome.status,
            "fingerprint": None if fingerprint is None else format_fingerprint(fingerprint),
            # (key, distance) pairs; (key, jaccard) in a Jaccard collection
            "matches": [
                (m.key, m.jaccard if isinstance(m, JaccardMatch) else m.distance)
                for m in outcome.matches
            ],
        }
        request.meta[META_KEY] = found
        if outcome.status == "error":
            return self._unchecked_page(response, outcome)
        if self._failing:
            self._failing = False
            logger.info(
                "permindex server %s reached again; %d pages passed unchecked meanwhile",
                self.address,
                self._unchecked,
            )
        self._stats.inc_value(f"permindex/{outcome.status}")
        if outcome.status != "near_duplicate" or not outcome.matches:
            return response
        nearest = outcome.matches[0]
        found["duplicate_of"] = nearest.key
        if isinstance(nearest, JaccardMatch):  # a Jaccard collection (method minhash)
            found["jaccard"] = nearest.jaccard
            how = f"Jaccard {nearest.jaccard:.4f}"
        else:
            found["distance"] = nearest.distance
            how = f"distance {nearest.distance}"
        if self.drop:
            logger.info("Dropped near-duplicate %s of %s (%s)", response.url, nearest.key, how)
            raise IgnoreRequest(f"near-duplicate of {nearest.key} ({how}): {response.url}")
        logger.info(
            "Near-duplicate %s of %s (%s), kept: PERMINDEX_DROP = False", response.url,
            nearest.key, how,
        )  # fmt: skip
        return response

    def _unchecked_page(self, response: Response, outcome: PageOutcome) -> Response:
        """A page the check did not reach (see ``PERMINDEX_FAIL_OPEN``)."""
        error = outcome.error
        if not isinstance(error, ServerError):  # the page's own problem, not the server's
            # As ingest and dedup skip such a file: the page passes whatever
            # PERMINDEX_FAIL_OPEN (which is about the server), counted on its own.
            self._stats.inc_value("permindex/unchecked_pages")
            logger.warning("permindex: %s passes unchecked: %s", response.url, error)
            return response
        self._stats.inc_value("permindex/errors")
        # Keys and texts are checked before they are sent: a refusal is the configuration's.
        configuration = isinstance(error, PermissionError | NotFoundError | InvalidArgumentError)
        if self.fail_open and not configuration:
            self._unchecked += 1
            if not self._failing:
                self._failing = True
                self._unchecked = 1
                logger.warning(
                    "permindex server %s: %s; pages pass unchecked until it answers "
                    "(PERMINDEX_FAIL_OPEN = True), counted in permindex/errors",
                    self.address,
                    error,
                )
            return response
        self._stop(error, configuration)
        raise IgnoreRequest(f"not checked, the crawl is stopping: {response.url}")

    def _stop(self, error: ServerError, configuration: bool) -> None:
        if self._stopping:
            return
        self._stopping = True
        why = "" if configuration else " (PERMINDEX_FAIL_OPEN = False)"
        if self._k is not None and isinstance(error, InvalidArgumentError):
            why += (
                f" (PERMINDEX_K = {self._k} is sent with every page: a SimHash collection "
                "refuses a k above its own, a Jaccard collection (method minhash) any k; "
                "lower PERMINDEX_K or remove it)"
            )
        logger.error("permindex server %s: %s; stopping the crawl%s", self.address, error, why)
        engine = self.crawler.engine
        assert engine is not None
        deferred_from_coro(engine.close_spider_async(reason=STOP_REASON))
