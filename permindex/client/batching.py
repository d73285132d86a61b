"""Batching of a document stream by count and bytes: the one rule that both
:meth:`permindex.client.Client.ingest` and ``permindex ingest`` use to cut a stream into request
messages. No grpc, no protobuf.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Final, TypeVar

__all__ = ["DEFAULT_BATCH_BYTES", "DEFAULT_BATCH_SIZE", "batches", "document_size"]

_T = TypeVar("_T")

#: Default most documents per batch (of :meth:`Client.ingest`, the batch methods and the CLI).
DEFAULT_BATCH_SIZE: Final = 1000
#: Default most bytes, about, per batch (4 MiB).
DEFAULT_BATCH_BYTES: Final = 4 * 1024 * 1024


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
