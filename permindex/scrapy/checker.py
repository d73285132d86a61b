"""The check-and-add of pages off the crawler's event loop: :class:`BatchChecker`, one worker
thread that owns a :class:`permindex.Client`, takes pages from a queue, extracts their text and
sends them to the server in batches (:meth:`permindex.Client.check_and_add_many`: one request for
every page that arrived while the previous request was in flight, or within ``linger`` seconds
of the first), and hands each page's :class:`PageOutcome` to the callback it came with.

Nothing here knows Scrapy: the callbacks are what bring an outcome back to the event loop's
thread (:mod:`permindex.scrapy.middleware`).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Literal

from permindex.client.batching import DEFAULT_BATCH_BYTES, batches, document_size
from permindex.errors import LimitExceededError
from permindex.index import Match
from permindex.index.jaccard import JaccardMatch
from permindex.index.keys.rule import validate_key

if TYPE_CHECKING:
    from permindex.client import Client

__all__ = [
    "DEFAULT_LINGER",
    "DEFAULT_MAX_PAGES",
    "DEFAULT_MAX_TEXT_BYTES",
    "BatchChecker",
    "PageOutcome",
    "Status",
]

Status = Literal["added", "replaced", "near_duplicate", "too_short", "error"]

#: Most pages per CheckAndAdd request.
DEFAULT_MAX_PAGES: Final = 256
#: Longest wait for more pages once one is queued and no request is in flight, seconds.
DEFAULT_LINGER: Final = 0.005
#: Longest text sent, UTF-8 bytes: the server's default ``--max-text-bytes`` (a longer text
#: would make the server refuse the whole request).
DEFAULT_MAX_TEXT_BYTES: Final = 32 * 1024 * 1024


@dataclass(frozen=True)
class PageOutcome:
    """What became of one page.

    Attributes:
        key: the page's key (its URL).
        status: the server's answer (``"added"``, ``"replaced"``, ``"near_duplicate"``,
            ``"too_short"``), or ``"error"``: the page was not checked.
        fingerprint: its fingerprint (None when too short or not checked).
        matches: the *other* keys within k when the check ran (nearest first); the page was
            stored only if there are none. In a Jaccard collection (method minhash),
            :class:`~permindex.JaccardMatch` items: the keys at Jaccard >= its threshold, most
            similar first.
        error: why the page was not checked (status ``"error"``): a
            :class:`~permindex.errors.ServerError` of the request (a ``ConnectionError`` when the
            server is unreachable), or the page's own problem (a key over the key limit, a body
            that cannot be decoded or parsed).
        batch: how many pages the request carried (0: none was sent for this page).
    """

    key: str
    status: Status
    fingerprint: int | None = None
    matches: tuple[Match | JaccardMatch, ...] = ()
    error: Exception | None = None
    batch: int = 0


@dataclass(frozen=True, slots=True)
class _Page:
    key: str
    text: Callable[[], str]
    settle: Callable[[PageOutcome], None]


_STOP: Final = object()


def _settle(page: _Page, outcome: PageOutcome) -> None:
    """Hand ``outcome`` to the page's callback; a callback that fails (its event loop closed
    meanwhile) does not stop the worker."""
    try:
        page.settle(outcome)
    except Exception:  # nothing left to tell: the waiting side is gone
        pass


class BatchChecker:
    """Check-and-add pages on one worker thread (see the module docstring).

    Args:
        client: the connection; used by the worker thread only, and closed by it when it stops.
        k: the largest distance that makes a page a near-duplicate (None: the collection's k).
        max_pages: most pages per request.
        max_bytes: about most bytes (keys and texts) per request.
        linger: longest wait for more pages after the first of a batch, seconds.
        max_text_bytes: longest text sent, UTF-8 bytes; a longer page is not checked (its
            outcome an error), so that it cannot make the server refuse the pages sent with it.

    :meth:`submit` never blocks (the queue is unbounded: Scrapy bounds the pages in flight by its
    concurrency settings). Each page's ``settle`` is called exactly once, on the worker thread.
    """

    def __init__(
        self,
        client: Client,
        *,
        k: int | None = None,
        max_pages: int = DEFAULT_MAX_PAGES,
        max_bytes: int = DEFAULT_BATCH_BYTES,
        linger: float = DEFAULT_LINGER,
        max_text_bytes: int = DEFAULT_MAX_TEXT_BYTES,
    ) -> None:
        self._client = client
        self._k = k
        self._max_pages = max_pages
        self._max_bytes = max_bytes
        self._linger = linger
        self._max_text_bytes = max_text_bytes
        self._queue: queue.SimpleQueue[_Page | object] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="permindex-checker", daemon=True)
        self._started = False
        #: CheckAndAdd requests sent so far (written by the worker thread).
        self.requests = 0

    def start(self) -> None:
        """Start the worker thread (once)."""
        if not self._started:
            self._started = True
            self._thread.start()

    def submit(
        self, key: str, text: Callable[[], str], settle: Callable[[PageOutcome], None]
    ) -> None:
        """Queue a page: ``text()`` is called on the worker thread (extracting text is CPU work
        that must not run on the event loop), then the page is checked and ``settle(outcome)``
        called. O(1), never blocks."""
        self._queue.put(_Page(key, text, settle))

    def stop(self, timeout: float | None = None) -> None:
        """Let the worker finish the pages already queued, close the client and end; wait for it
        up to ``timeout`` seconds (0: do not wait)."""
        self._queue.put(_STOP)
        if self._started and timeout != 0:
            self._thread.join(timeout)

    # ---- the worker thread

    def _next_pages(self) -> tuple[list[_Page], bool]:
        """The next batch: the first page (waiting for it), then what else is queued or arrives
        within ``linger`` seconds, up to ``max_pages``; and whether to stop after it."""
        first = self._queue.get()
        if first is _STOP:
            return [], True
        assert isinstance(first, _Page)
        pages = [first]
        deadline = time.monotonic() + self._linger
        while len(pages) < self._max_pages:
            try:
                wait = deadline - time.monotonic()
                item = self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()
            except queue.Empty:
                break
            if item is _STOP:
                return pages, True
            assert isinstance(item, _Page)
            pages.append(item)
        return pages, False

    def _run(self) -> None:
        try:
            stop = False
            while not stop:
                pages, stop = self._next_pages()
                try:
                    self._check(pages)
                except Exception as error:  # a defect: answer every page rather than hang it
                    for page in pages:  # (a page settled already ignores a second outcome)
                        _settle(page, PageOutcome(page.key, "error", error=error))
        finally:
            self._client.close()

    def _check(self, pages: list[_Page]) -> None:
        ready: list[tuple[_Page, str]] = []
        for page in pages:
            try:
                validate_key(page.key)
                text = page.text()
                length = len(text.encode("utf-8", "surrogatepass"))
                if length > self._max_text_bytes:
                    raise LimitExceededError(
                        f"its text of {length:,} UTF-8 bytes is over the limit of "
                        f"{self._max_text_bytes:,} (PERMINDEX_MAX_TEXT_BYTES, the server's "
                        "--max-text-bytes)"
                    )
                ready.append((page, text))
            except Exception as error:  # the page's own problem: reported with it
                _settle(page, PageOutcome(page.key, "error", error=error))

        def size(item: tuple[_Page, str]) -> int:
            return document_size(item[0].key, item[1])

        for batch in batches(ready, self._max_pages, self._max_bytes, size):
            self.requests += 1
            try:
                results = self._client.check_and_add_many(
                    [(page.key, text) for page, text in batch], k=self._k
                )
            except Exception as error:  # the request failed: every page of it is unchecked
                for page, _ in batch:
                    _settle(page, PageOutcome(page.key, "error", error=error, batch=len(batch)))
                continue
            for (page, _), result in zip(batch, results, strict=True):
                # The server leaves the key itself out of its matches (a re-crawl is
                # "replaced"); the filter keeps that true whatever the server.
                others = tuple(m for m in result.matches if m.key != page.key)
                status: Status = result.status  # type: ignore[assignment]
                outcome = PageOutcome(
                    page.key, status, result.fingerprint, others, batch=len(batch)
                )
                _settle(page, outcome)
