"""A Python client of the permindex server: :class:`Client`, one typed method per RPC.

Importing ``permindex`` does not import this module (nor grpc): ``permindex.Client`` loads it on
first use.

- Results are the package's own types (:class:`~permindex.index.Match`, lists, small frozen
  dataclasses of :mod:`permindex.client.results`), never protobuf messages. Fingerprints are
  Python ints in [0, 2^64).
- A document is ``(key, content)``, its content an ``int`` (its fingerprint) or a ``str`` (its
  text, fingerprinted by the server); or ``(key, content, added_at)``, a
  :class:`~permindex.client.Document`, with the time it was crawled (Unix seconds) for a
  collection with ``expire_after``.
- :meth:`Client.ingest` streams any iterable of documents in batches bounded by count
  (``batch_size``) and bytes (``batch_bytes``), one message each, and waits for every batch's
  acknowledgement; if the stream fails, the batches acknowledged before stay applied and nothing
  else is (see the .proto). :meth:`Client.ingest_batches` streams batches the caller made.
- Errors are :class:`~permindex.errors.ServerError` instances carrying the gRPC status code
  (``.code``) that also subclass the matching permindex error or built-in (a too-large batch is a
  :class:`~permindex.errors.LimitExceededError`, an unreachable server a ``ConnectionError``...).
- Retries: only calls that change nothing (query, query_columns, get, stats, pairs, clusters, flags,
  exact_duplicates, list and describe collections) are retried, and only on UNAVAILABLE, with
  exponential backoff (``retries`` attempts after the first, waits of ``backoff`` seconds doubling
  up to ``max_backoff``). Writes are never retried: an UNAVAILABLE write may or may not have been
  applied.
- TLS: ``root_certificates`` (PEM bytes or a path) turns TLS on; ``certificate_chain`` and
  ``private_key`` add a client certificate. ``token`` is sent as ``authorization: Bearer TOKEN``
  (:mod:`permindex.client.channel`).

- Shards: given several addresses, the Client spreads the keys over them (see ``address``
  below and docs/guides/client.md, "Several servers"); the answers equal one server's,
  except that CheckAndAdd is not atomic across shards.

Thread-safe: one Client (one channel per server) can serve many threads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar

from permindex.client import operations
from permindex.client.results import (
    AddResult,
    CheckResult,
    CollectionInfo,
    Content,
    DocumentLike,
    RemoveResult,
    ServerStats,
    SketchHex,
    SnapshotResult,
)
from permindex.client.streams import StreamingClient
from permindex.errors import ServerError
from permindex.index import Match
from permindex.index.jaccard import JaccardMatch, MinHashSketch
from permindex.index.join.clusters import ExactGroup, Flag
from permindex.text.fingerprint import Vote

__all__ = ["Client"]

_T = TypeVar("_T")


class Client(StreamingClient):
    """A connection to a permindex server (see the module docstring for errors, retries, TLS).

    Args:
        address: ``HOST:PORT`` of the server; or several, as a sequence or comma-separated
            (``"h1:50051,h2:50051"``): the shards of one index, each key on shard
            ``XXH3-64(key) mod n`` (:mod:`permindex.client.sharding`: lookups go to every shard
            and are merged, ``pairs``/``clusters``/``flags``/``exact_duplicates`` are refused).
        timeout: deadline of each one-request call and of :meth:`query_columns`, seconds (None:
            none); a call past it raises a ``TimeoutError`` (DEADLINE_EXCEEDED). The streamed
            reads (pairs, clusters, flags, exact duplicates, export, and their ``iter_`` forms)
            and :meth:`ingest` have no deadline unless their own ``timeout`` is given.
        retries: extra attempts of a read-only call answered UNAVAILABLE.
        backoff: the first wait before a retry, seconds; doubled each time up to ``max_backoff``.
        root_certificates: PEM (bytes, or a path) of the CA that signed the server's certificate;
            turns TLS on.
        certificate_chain: PEM (bytes, or a path) of a client certificate, for servers that
            require one.
        private_key: PEM (bytes, or a path) of that certificate's key.
        server_name: the name to check the server's certificate against, when it differs from the
            address's host.
        token: a bearer token (``authorization: Bearer TOKEN`` on every call).
        batch_size: most documents per message of :meth:`ingest` (and per request of the
            batch methods).
        batch_bytes: about most bytes per message of :meth:`ingest` (and per request of the
            batch methods).
        collection: the collection the calls name (default: the server's ``default``); see
            :meth:`use` for another one on the same connection.

    Examples:
        ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

        >>> import permindex
        >>> client = permindex.Client(address)
        >>> page = permindex.simhash("the quick brown fox jumps over the lazy dog")
        >>> client.check_and_add("https://example.com/a", page).status
        'added'
        >>> client.check_and_add("https://example.com/b", page).status
        'near_duplicate'
        >>> client.close()
    """

    # ---- writes (never retried)

    def add(self, documents: Iterable[DocumentLike]) -> AddResult:
        """Add (or replace) ``(key, fingerprint or text)`` documents, or ``(key, content,
        added_at)`` ones (:class:`~permindex.client.Document`: the time of a crawl, Unix
        seconds, for a collection with expiry; so in every method that takes documents): one
        request per ``batch_size`` documents (and about ``batch_bytes`` bytes) per shard, each
        applied as one step; every document is checked before anything is sent. One result per
        document, in order. For a stream read lazily, use :meth:`ingest`.

        Raises:
            InvalidArgumentError: a content neither an int in [0, 2^64) nor a str, a key or
                text UTF-8 cannot encode (a lone surrogate), or an ``added_at`` that is not a
                number >= 0 (nothing sent), or the server's
                INVALID_ARGUMENT (a bad key: the batches before it are stored).
            ServerError: any other refusal; never retried.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> result = client.add([("a", 0b0000), ("b", 0b0111), ("c", "too short")])
            >>> result.added, result.too_short
            (2, 1)
        """
        return self._run(operations.add(self._target(), documents))

    def check_and_add(
        self, key: str, content: Content, *, k: int | None = None, added_at: float | None = None
    ) -> CheckResult:
        """Add the document only if no *other* key is within ``k`` (on a Jaccard collection: at
        Jaccard similarity >= its threshold, ``k`` unset; the matches are then
        :class:`~permindex.JaccardMatch` items) (atomically on one server; over shards see
        :meth:`check_and_add_many`), at ``added_at`` (Unix seconds, as
        :class:`~permindex.client.Document`'s; None: the server's clock).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> client.check_and_add("a", 0b0000).added
            True
            >>> result = client.check_and_add("b", 0b0111)
            >>> result.status, result.matches
            ('near_duplicate', [Match(key='a', fingerprint=0, distance=3)])
        """
        return self.check_and_add_many([(key, content, added_at)], k=k)[0]

    def check_and_add_many(
        self, documents: Iterable[DocumentLike], *, k: int | None = None
    ) -> list[CheckResult]:
        """:meth:`check_and_add` for each document in order, one request per ``batch_size``
        documents (so two near-duplicates among them can never both be added; a key already
        stored never blocks itself: it is ``replaced``).

        Over several shards the client reads the collection's options (one DescribeCollection
        a call), computes what the server would (fingerprints of the texts; for a Jaccard
        collection their sketches, and the sketches sent checked), queries every shard, then
        sends each document that no other key matches (within ``k``, or at Jaccard >= the
        threshold by the server's own rule, :meth:`permindex.JaccardIndex.check_in_order`; on
        any shard, nor among the documents before it) to its key's shard, which checks again
        atomically: the results one server holding every key would give. Not atomic across
        shards: two near-duplicates sent at the same moment by two clients, whose keys live on
        different shards, may both be added; a periodic ``permindex dedup`` of a ``permindex
        export`` finds them.

        Raises:
            InvalidArgumentError: a malformed document, before anything is sent; over shards
                also, for a Jaccard collection, a ``k``, a fingerprint or a bad sketch, before
                anything of the call is added (one server refuses them as INVALID_ARGUMENT,
                with the batches before stored); over shards, shards whose collection has
                other options (another method, k, design, threshold, ...), naming the shard.
            ServerError: a refusal of the server(s).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> results = client.check_and_add_many([("a", 0), ("b", 1), ("c", 2**64 - 1)])
            >>> [result.status for result in results]
            ['added', 'near_duplicate', 'added']
        """
        return self._run(operations.check_and_add(self._target(), documents, k))

    def remove(self, keys: str | Iterable[str]) -> RemoveResult:
        """Remove a key or keys (one request per ``batch_size`` keys per shard); the ones not
        stored are listed in the result, not an error.

        Raises:
            InvalidArgumentError: a malformed key (empty, or longer than the server's limit):
                the server's INVALID_ARGUMENT; the batches before it are applied.
            NotFoundError: the client's collection does not exist (a
                :class:`~permindex.errors.ServerNotFoundError`, NOT_FOUND).
            ServerError: any other refusal; never retried.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0)])
            >>> client.remove(["a", "b"])
            RemoveResult(removed=1, not_found=['b'])
        """
        return self._run(operations.remove(self._target(), keys))

    def snapshot(self) -> SnapshotResult:
        """Ask the server (every shard) to write a snapshot now; returns when it is durable,
        with its path, entries, bytes and seconds (over shards, merged).

        Raises:
            ServerError: the server could not write it (its data directory's error); never
                retried.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0), ("b", 1)])
            >>> client.snapshot().count
            2
        """
        return self._run(operations.snapshot(self._target()))

    # ---- reads (retried on UNAVAILABLE)

    def query(
        self, fingerprint: int, *, k: int | None = None, limit: int | None = None
    ) -> list[Match]:
        """Every stored key within ``k`` bits of ``fingerprint`` (an int in [0, 2^64)), by
        distance then key: :class:`~permindex.index.Match` items ``(key, fingerprint,
        distance)``, at most ``limit`` of them (None or 0: all). ``k``: None, the collection's.

        Raises:
            InvalidArgumentError: a fingerprint that is not an int in [0, 2^64) (nothing sent),
                or the server's INVALID_ARGUMENT for a ``k`` above the collection's design.
            NotFoundError: the client's collection does not exist (a
                :class:`~permindex.errors.ServerNotFoundError`, NOT_FOUND).
            ServerError: any other failure; retried on UNAVAILABLE.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0000), ("b", 0b0111), ("c", 2**64 - 1)])
            >>> client.query(0b0001)
            [Match(key='a', fingerprint=0, distance=1), Match(key='b', fingerprint=7, distance=2)]
        """
        return self.query_many([fingerprint], k=k, limit=limit)[0]

    def query_many(
        self, fingerprints: Iterable[int], *, k: int | None = None, limit: int | None = None
    ) -> list[list[Match]]:
        """:meth:`query` for each fingerprint (one list each, in order), ``batch_size`` a
        request (to every shard, merged: by distance, then key, ``limit`` after the merge).
        Errors as :meth:`query` (a bad fingerprint is named by its position).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0000), ("b", 0b0111), ("c", 2**64 - 1)])
            >>> client.query_many([0, 2**64 - 1], k=0)
            [[Match(key='a', fingerprint=0, distance=0)],
             [Match(key='c', fingerprint=18446744073709551615, distance=0)]]
        """
        return self._run(operations.query_many(self._target(), fingerprints, k, limit))

    def query_jaccard(
        self,
        items: Iterable[str | MinHashSketch],
        *,
        by: str = "text",
        limit: int | None = None,
    ) -> list[list[JaccardMatch]]:
        """For each item, the stored documents of a Jaccard collection (``method="minhash"``)
        whose Jaccard similarity with it is at least the collection's threshold: one list of
        :class:`~permindex.JaccardMatch` ``(key, jaccard)`` per item, most similar first, then
        by key, at most ``limit`` (None or 0: all). ``by``: ``"text"`` (items are texts, shingled
        by the server), ``"key"`` (stored keys: each key's stored document, itself left out; a
        key not stored gets an empty list) or ``"sketch"`` (items are
        :func:`permindex.minhash_sketch` results made with the collection's permutations).
        ``batch_size`` items a request.

        Raises:
            InvalidArgumentError: a bad ``by`` or item (nothing sent); the server's
                INVALID_ARGUMENT on a SimHash collection or for a bad sketch.
            ServerError: any other failure; retried on UNAVAILABLE.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.create_collection("pages", method="minhash", threshold=0.8)
            >>> pages = client.use("pages")
            >>> text = "the quick brown fox jumps over the lazy dog"
            >>> _ = pages.add([("a", text), ("b", permindex.minhash_sketch(text + " again"))])
            >>> pages.query_jaccard(["a"], by="key")
            [[JaccardMatch(key='b', jaccard=0.875)]]
            >>> pages.query_jaccard([permindex.minhash_sketch(text)], by="sketch")
            [[JaccardMatch(key='a', jaccard=1.0), JaccardMatch(key='b', jaccard=0.875)]]
        """
        return self._run(operations.query_jaccard(self._target(), items, by, limit))

    def get(self, key: str) -> int | SketchHex | None:
        """The stored fingerprint of ``key`` (an int in [0, 2^64)), or None when it is not
        stored; in a Jaccard collection its stored sketch, a
        :class:`~permindex.client.SketchHex` (as :meth:`iter_export` yields it). Errors as
        :meth:`get_many`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0111)])
            >>> client.get("a"), client.get("b")
            (7, None)
        """
        return self.get_many([key])[0]

    def get_many(self, keys: Iterable[str]) -> list[int | SketchHex | None]:
        """The stored fingerprint of each key (None where not stored), in order; one request per
        ``batch_size`` keys (to the key's shard). In a Jaccard collection each stored key's
        sketch, a :class:`~permindex.client.SketchHex` with its ``kind`` (never a fingerprint:
        such a collection has none).

        Raises:
            InvalidArgumentError: a malformed key (empty, or longer than the server's limit):
                the server's INVALID_ARGUMENT.
            NotFoundError: the client's collection does not exist (a
                :class:`~permindex.errors.ServerNotFoundError`, NOT_FOUND).
            ServerError: any other failure; retried on UNAVAILABLE.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0111)])
            >>> client.get_many(["a", "b"])
            [7, None]
        """
        return self._run(operations.get_many(self._target(), keys))

    def pairs(
        self, *, k: int | None = None, collection: str | None = None, timeout: float | None = None
    ) -> list[tuple[str, str, int | float]]:
        """Every pair of stored keys within ``k``: ``(key_a, key_b, distance)``, key_a < key_b,
        sorted (by key_a, then key_b: the server's order). The list of :meth:`iter_pairs`, whose
        arguments and errors it takes; retried as a whole on UNAVAILABLE.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0000), ("b", 0b0111), ("c", 2**64 - 1)])
            >>> client.pairs(), client.pairs(k=2)
            ([('a', 'b', 3)], [])
        """
        return self._collect(lambda: self.iter_pairs(k, collection=collection, timeout=timeout))

    def clusters(
        self, *, k: int | None = None, collection: str | None = None, timeout: float | None = None
    ) -> list[list[str]]:
        """The clusters within ``k`` (connected components of the pairs), largest first: the
        list of :meth:`iter_clusters`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0000), ("b", 0b0111), ("c", 0b1111), ("d", 2**64 - 1)])
            >>> client.clusters(), client.clusters(k=1)
            ([['a', 'b', 'c']], [['b', 'c']])
        """
        return self._collect(lambda: self.iter_clusters(k, collection=collection, timeout=timeout))

    def flags(
        self, *, k: int | None = None, collection: str | None = None, timeout: float | None = None
    ) -> list[Flag]:
        """Every key with another key within ``k``, with its nearest one, sorted by key: the
        list of :meth:`iter_flags`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0b0000), ("b", 0b0111), ("c", 2**64 - 1)])
            >>> client.flags()
            [Flag(key='a', nearest='b', distance=3, neighbors=1),
             Flag(key='b', nearest='a', distance=3, neighbors=1)]
        """
        return self._collect(lambda: self.iter_flags(k, collection=collection, timeout=timeout))

    def exact_duplicates(
        self, *, collection: str | None = None, timeout: float | None = None
    ) -> list[ExactGroup]:
        """The groups of keys sharing one fingerprint, largest first: the list of
        :meth:`iter_exact_duplicates`.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 7), ("b", 7), ("c", 0)])
            >>> client.exact_duplicates()
            [ExactGroup(fingerprint=7, keys=['a', 'b'])]
        """
        return self._collect(
            lambda: self.iter_exact_duplicates(collection=collection, timeout=timeout)
        )

    def _collect(self, stream: Callable[[], Iterator[_T]]) -> list[_T]:
        """``list(stream())``; a stream broken off by UNAVAILABLE after some items is read again
        from the start (the iterator itself retries a failure before its first reply), as the
        one-request reads are retried."""
        attempt = 0
        while True:
            items: list[_T] = []
            try:
                items.extend(stream())
                return items
            except ServerError as error:
                wait = self._retry_wait(error, True, attempt) if items else None
                if wait is None:
                    raise
            attempt += 1
            time.sleep(wait)

    # ---- collections (on every shard)

    def create_collection(
        self,
        name: str,
        *,
        k: int | None = None,
        blocks: int | None = None,
        leading: int | None = None,
        shingle_size: int | None = None,
        min_words: int | None = None,
        expire_after: int | None = None,
        vote: Vote | None = None,
        method: str | None = None,
        threshold: float | None = None,
        permutations: int | None = None,
        verify: str | None = None,
    ) -> CollectionInfo:
        """Create an empty collection (absent options: the server's own; ``expire_after``,
        seconds after which an entry not added again expires: None, never; ``vote``, how
        shingles vote when the server fingerprints a text: ``"multiset"`` or ``"set"``, as
        :func:`permindex.simhash`, None: the server's ``--vote``). ``method="minhash"`` makes a
        Jaccard collection: near-duplicates at Jaccard similarity >= ``threshold`` (default
        0.8) of word-shingle sets, shingled as ``permindex dedup --method minhash``, with
        ``permutations`` signature values (default 128) and ``verify`` ``"exact"`` (default:
        exact Jaccard, precision 1.0) or ``"signature"`` (estimated, standard deviation
        ``sqrt(J (1 - J) / permutations)``, far less memory); it takes texts or
        :func:`permindex.minhash_sketch` sketches, and :meth:`query_jaccard` asks it. Raises
        :class:`~permindex.errors.CollectionExistsError` (ALREADY_EXISTS) if the name is taken,
        :class:`~permindex.errors.InvalidArgumentError` for bad options (another vote, a k the
        design cannot answer, a threshold outside (0, 1], permutations outside 1..4,096,
        another verify, k or vote with ``method="minhash"``).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> client.create_collection("crawl-2024", k=3).name
            'crawl-2024'
            >>> _ = client.use("crawl-2024").add([("a", 0)])
            >>> client.get("a"), client.use("crawl-2024").get("a")
            (None, 0)
        """
        plan = operations.create_collection(
            self._target(),
            name,
            k=k,
            blocks=blocks,
            leading=leading,
            shingle_size=shingle_size,
            min_words=min_words,
            expire_after=expire_after,
            vote=vote,
            method=method,
            threshold=threshold,
            permutations=permutations,
            verify=verify,
        )
        return self._run(plan)

    def list_collections(self) -> list[CollectionInfo]:
        """Every collection of the server (of every shard, merged), by name, with its options
        and counts. Raises ServerError when the call fails (retried on UNAVAILABLE).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.create_collection("crawl-2024")
            >>> [collection.name for collection in client.list_collections()]
            ['crawl-2024', 'default']
        """
        return self._run(operations.list_collections(self._target()))

    def describe_collection(self, name: str) -> CollectionInfo:
        """One collection's options and counts (NOT_FOUND: a ``KeyError``).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> info = client.describe_collection("default")
            >>> info.count, info.k, (info.blocks, info.leading)
            (0, 3, (4, 1))
            >>> client.describe_collection("no-such-collection")
            Traceback (most recent call last):
            ...
            permindex.errors.ServerNotFoundError: ...
        """
        return self._run(operations.describe_collection(self._target(), name))

    def drop_collection(self, name: str) -> int:
        """Drop a collection (keys, memory, files) on every shard; returns the number of keys
        it held (summed over shards). Never retried.

        Raises:
            NotFoundError: no such collection (a
                :class:`~permindex.errors.ServerNotFoundError`).
            InvalidArgumentError: the ``default`` collection, which cannot be dropped.

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.create_collection("old-crawl")
            >>> _ = client.use("old-crawl").add([("a", 0), ("b", 1)])
            >>> client.drop_collection("old-crawl")
            2
        """
        return self._run(operations.drop_collection(self._target(), name))

    def stats(self) -> ServerStats:
        """The server's counts, memory, design, uptime and last snapshot (over shards: counts,
        memory and snapshot sizes summed, the oldest snapshot, the shortest uptime).

        Examples:
            ``address`` is a running server's ``HOST:PORT`` (what ``permindex serve`` prints).

            >>> import permindex
            >>> client = permindex.Client(address)
            >>> _ = client.add([("a", 0), ("b", 1)])
            >>> stats = client.stats()
            >>> stats.count, stats.k, stats.tables
            (2, 3, 4)
        """
        return self._run(operations.stats(self._target()))
