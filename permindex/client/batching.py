"""Batching of a document stream by count and bytes: the one rule that both
:meth:`permindex.client.Client.ingest` and ``permindex ingest`` use to cut a stream into request
messages. No grpc, no protobuf.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Final, TypeVar

__all__ = [
    "DEFAULT_BATCH_BYTES",
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_FLUSH_SECONDS",
    "batches",
    "document_size",
    "timed_batches",
]

_T = TypeVar("_T")

#: Default most documents per batch (of :meth:`Client.ingest`, the batch methods and the CLI).
DEFAULT_BATCH_SIZE: Final = 1000
#: Default most bytes, about, per batch (4 MiB).
DEFAULT_BATCH_BYTES: Final = 4 * 1024 * 1024
#: Default longest wait of a read document for its batch to fill, seconds (:func:`timed_batches`).
DEFAULT_FLUSH_SECONDS: Final = 1.0

_END = object()


def document_size(key: str, text: str | None) -> int:
    """Approximate size of one document in a request message, bytes: its UTF-8 key and text plus
    16 bytes of framing (the rule of :meth:`permindex.text.documents.Document.size_bytes`)."""
    size = len(key.encode("utf-8", "surrogatepass")) + 16
    if text is not None:
        size += len(text.encode("utf-8", "surrogatepass"))
    return size


def batches(
    items: Iterable[_T], max_count: int, max_bytes: int, size: Callable[[_T], int]
) -> Iterator[list[_T]]:
    """Consecutive batches of ``items``, each of at most ``max_count`` items and about at most
    ``max_bytes`` bytes (``size(item)`` each, bytes); an item larger than ``max_bytes`` travels
    alone. O(1) work per item; ``items`` is read lazily, one item ahead of the batch yielded.

    When reading ``items`` raises (a malformed input line), the items read before it are still
    yielded as a last batch, then the exception is raised: everything before the bad item can be
    stored.
    """
    batch: list[_T] = []
    total = 0
    try:
        for item in items:
            item_size = size(item)
            if batch and (len(batch) >= max_count or total + item_size > max_bytes):
                yield batch
                batch, total = [], 0
            batch.append(item)
            total += item_size
    except Exception as error:
        failure = error
    else:
        if batch:
            yield batch
        return
    if batch:
        yield batch
    raise failure


def timed_batches(
    items: Iterable[_T],
    max_count: int,
    max_bytes: int,
    size: Callable[[_T], int],
    flush_seconds: float,
) -> Iterator[list[_T]]:
    """As :func:`batches`, and a batch is also cut once its first item has waited
    ``flush_seconds`` for the batch to fill: a slow producer (``tail -f log | permindex ingest
    -``) has its documents sent within about that time instead of when 1,000 have come, and its
    stream never sits idle while documents wait.

    ``items`` is read on a thread of its own (a daemon, since it may block on a pipe), at most
    ``max_count`` items ahead; an exception of the reader is raised after the items read before
    it, as :func:`batches` does. Closing the generator stops the thread at its next item.
    """
    ahead: queue.Queue[object] = queue.Queue(maxsize=max(1, max_count))
    closed = threading.Event()
    failure: list[BaseException] = []

    def read() -> None:
        try:
            for item in items:
                while not closed.is_set():
                    try:
                        ahead.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if closed.is_set():
                    return
        except Exception as error:
            failure.append(error)
        while not closed.is_set():
            try:
                ahead.put(_END, timeout=0.1)
                return
            except queue.Full:
                continue

    threading.Thread(target=read, name="permindex-read", daemon=True).start()
    batch: list[_T] = []
    total = 0
    deadline = 0.0
    try:
        while True:
            try:
                timeout = None if not batch else max(0.0, deadline - time.monotonic())
                item = ahead.get(timeout=timeout)
            except queue.Empty:  # the first item of the batch has waited long enough
                yield batch
                batch, total = [], 0
                continue
            if item is _END:
                break
            value: _T = item  # type: ignore[assignment]
            item_size = size(value)
            if batch and (len(batch) >= max_count or total + item_size > max_bytes):
                yield batch
                batch, total = [], 0
            if not batch:
                deadline = time.monotonic() + flush_seconds
            batch.append(value)
            total += item_size
        if batch:
            yield batch
        if failure:
            raise failure[0]
    finally:
        closed.set()
