"""Collections: named indexes served by one server, each with its own options, snapshots and
write-ahead log (:class:`Catalog`, whose docstring gives the layout on disk and the life of a
collection; :class:`CollectionOptions`; :func:`check_name`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from permindex.errors import CollectionExistsError, InvalidArgumentError, NotFoundError
from permindex.index import ExpiringIndex, Index
from permindex.index.expiry import check_expire_after
from permindex.index.jaccard.sketch import check_verify
from permindex.index.tables.permutation import DEFAULT_DESIGN
from permindex.near.minhash import check_permutations, check_threshold
from permindex.rpc.config import ServerConfig
from permindex.rpc.jaccard import JaccardState
from permindex.rpc.memory import MemoryBudget
from permindex.rpc.state import DEFAULT_COLLECTION, ServerState
from permindex.storage.datadir import fsync_directory, make_directories
from permindex.storage.jaccard_store import JaccardStore
from permindex.storage.store import Store
from permindex.text.fingerprint import VOTES, Vote, check_shingle_options

__all__ = [
    "DEFAULT_COLLECTION",
    "Catalog",
    "CollectionExistsError",
    "CollectionOptions",
    "check_name",
]

log = logging.getLogger(__name__)

COLLECTIONS_DIR: Final = "collections"
OPTIONS_FILE: Final = "collection.json"
#: What a collection compares: SimHash fingerprints within k, or Jaccard similarity of shingle
#: sets (MinHash-LSH, :mod:`permindex.rpc.jaccard`).
METHODS: Final = ("simhash", "minhash")
_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_name(name: str) -> str:
    """``name`` if it is a valid collection name.

    Raises:
        InvalidArgumentError: it is not (the message gives the rule).
    """
    if not _NAME.fullmatch(name):
        raise InvalidArgumentError(
            f"collection name {name[:80]!r} is not valid: 1 to 64 ASCII letters, digits, '_', "
            "'-' or '.', starting with a letter or a digit",
            name,
        )
    return name


@dataclass(frozen=True)
class CollectionOptions:
    """What a collection is created with: its index's ``k`` and table design
    (``blocks``, ``leading``), how the server fingerprints its texts (``shingle_size``,
    ``min_words``, ``vote``), and ``expire_after`` (seconds after which an entry not added again
    expires; 0: never)."""

    k: int = 3
    blocks: int = DEFAULT_DESIGN.blocks
    leading: int = DEFAULT_DESIGN.leading
    shingle_size: int = 3
    min_words: int = 0
    expire_after: int = 0
    vote: Vote = "multiset"  # absent from a collection.json written before it: multiset
    # a Jaccard collection (method "minhash"); absent from an older collection.json: simhash
    method: str = "simhash"
    threshold: float = 0.8
    permutations: int = 128
    verify: str = "exact"

    def check(self) -> CollectionOptions:
        """Self, after checking that the design answers k exactly (a "simhash" collection) or
        the threshold, permutations and verify (a "minhash" one).

        Raises:
            InvalidArgumentError: a method not in :data:`METHODS`; a threshold outside (0, 1],
                permutations outside 1..4,096, a verify not in ``exact``, ``signature``.
            InvalidArgumentError: a bad shingle size or min words (the check of
                :func:`permindex.text.fingerprint.check_shingle_options`), a k the design cannot
                guarantee, a bad design, an ``expire_after`` above
                :data:`~permindex.index.expiry.MAX_EXPIRE_AFTER`, a vote not in
                :data:`~permindex.text.fingerprint.VOTES`.
        """
        check_shingle_options(self.shingle_size, min_words=self.min_words)
        if self.expire_after:
            try:
                check_expire_after(self.expire_after)
            except TypeError as error:
                raise InvalidArgumentError(str(error), self.expire_after) from None
        if self.method not in METHODS:
            raise InvalidArgumentError(
                f"method must be one of {', '.join(METHODS)}, got {str(self.method)[:80]!r}",
                self.method,
            )
        if self.method == "minhash":
            check_threshold(self.threshold)
            check_permutations(self.permutations)
            check_verify(self.verify)
            return self
        if self.vote not in VOTES:
            raise InvalidArgumentError(
                f"vote must be one of {', '.join(VOTES)}, got {str(self.vote)[:80]!r}", self.vote
            )
        try:
            Index(k=self.k, design=(self.blocks, self.leading))
        except (ValueError, TypeError) as error:
            raise InvalidArgumentError(str(error), (self.blocks, self.leading)) from None
        return self


def _write_options(folder: Path, options: CollectionOptions) -> None:
    """``collection.json`` written durably into the new folder (write, fsync, directory
    fsync)."""
    with open(folder / OPTIONS_FILE, "x", encoding="utf-8") as file:
        json.dump(dataclasses.asdict(options), file)
        file.flush()
        os.fsync(file.fileno())
    fsync_directory(folder)


def _read_options(folder: Path) -> CollectionOptions:
    try:
        values = json.loads((folder / OPTIONS_FILE).read_text(encoding="utf-8"))
        return CollectionOptions(**values).check()
    except (OSError, ValueError, TypeError) as error:
        raise InvalidArgumentError(
            f"collection {folder.name!r}: {folder / OPTIONS_FILE} cannot be read: {error}",
            str(folder),
        ) from None


class Catalog:
    """The collections of a server: name -> :class:`ServerState`.

    Thread-safe: the map is guarded by a lock; creating and dropping are serialized.

    The collection ``default`` is the data directory itself (its snapshot and log files, as before
    collections existed); it always exists and cannot be dropped. Every other collection ``NAME``
    lives in ``DATA_DIR/collections/NAME/``: ``collection.json`` (its options: k, design, shingle
    size, min words, expire_after -- absent in a file written before expiry: 0 --, vote --
    absent in a file written before it: multiset; written
    atomically before anything else) beside its own snapshot and log, under its own lock file.
    At the start every collection directory is opened and recovered before the server listens.

    Names are durable before a change is acknowledged, under every fsync policy (POSIX makes a
    name durable only with an fsync of the directory holding it). Creating a collection makes
    ``collections/`` durable in the data directory, writes ``collection.json`` into
    ``collections/.creating-NAME-<ns>/`` (file and folder fsynced), renames that to
    ``collections/NAME`` and fsyncs ``collections/``: a power cut leaves either no collection
    or a complete one. Dropping a collection removes it from the catalog (new calls naming it
    get NOT_FOUND), closes its log, renames its directory to ``collections/.dropped-NAME-<ns>``
    and fsyncs ``collections/`` (from then on no crash brings the collection back), then deletes
    that; its memory is freed once the calls still running on it end. The start deletes the
    ``.creating-*`` and ``.dropped-*`` folders an interrupted create or drop left.

    Names: 1 to 64 characters, ASCII letters, digits, ``_``, ``-`` and ``.``, starting with a letter
    or a digit.
    """

    def __init__(self, config: ServerConfig, default: ServerState) -> None:
        self._config = config
        self._states: dict[str, ServerState] = {DEFAULT_COLLECTION: default}
        self._options: dict[str, CollectionOptions] = {}
        self._lock = threading.Lock()
        self._changes = threading.Lock()  # create and drop, one at a time
        self.root = Path(config.data_dir) / COLLECTIONS_DIR
        #: The writes' admission under ``config.max_memory``, over every collection.
        self.memory = MemoryBudget(config.max_memory, self.items)

    # ---- opening

    def _open(self, name: str, options: CollectionOptions) -> ServerState:
        folder = self.root / name
        if options.method == "minhash":
            jaccard = JaccardStore.open(
                folder,
                threshold=options.threshold,
                permutations=options.permutations,
                verify=check_verify(options.verify),
                expire_after=options.expire_after or None,
                fsync=self._config.fsync,
                fsync_interval=self._config.fsync_interval,
                truncate_corrupt_log=self._config.truncate_corrupt_log,
            )
            config = dataclasses.replace(
                self._config,
                data_dir=folder,
                shingle_size=options.shingle_size,
                min_words=options.min_words,
            )
            return JaccardState(jaccard, config)
        store = Store.open(
            folder,
            k=options.k,
            expire_after=options.expire_after or None,
            design=(options.blocks, options.leading),
            fsync=self._config.fsync,
            fsync_interval=self._config.fsync_interval,
            truncate_corrupt_log=self._config.truncate_corrupt_log,
        )
        config = dataclasses.replace(
            self._config,
            data_dir=folder,
            k=options.k,
            shingle_size=options.shingle_size,
            min_words=options.min_words,
            vote=options.vote,
        )
        return ServerState(store, config)

    def load(self) -> None:
        """Open and recover every collection directory (at the start, before serving); the
        ``.creating-*`` and ``.dropped-*`` directories of an interrupted create or drop are
        deleted.

        Raises:
            the errors of :meth:`permindex.storage.store.Store.open`, InvalidArgumentError for an
            unreadable ``collection.json``; collections opened before are closed again.
        """
        if not self.root.is_dir():
            return
        try:
            for folder in sorted(self.root.iterdir()):
                if folder.name.startswith((".dropped-", ".creating-")):
                    shutil.rmtree(folder, ignore_errors=True)
                    continue
                if not folder.is_dir() or not _NAME.fullmatch(folder.name):
                    continue
                options = _read_options(folder)
                self._states[folder.name] = self._open(folder.name, options)
                self._options[folder.name] = options
                log.info(
                    "collection %s: %d keys", folder.name, len(self._states[folder.name].index)
                )
        except BaseException:
            self.close(skip_default=True)
            raise

    # ---- lookups

    def get(self, name: str) -> ServerState:
        """The collection ``name`` (``""``: the default one).

        Raises:
            NotFoundError: no such collection.
        """
        name = name or DEFAULT_COLLECTION
        with self._lock:
            state = self._states.get(name)
        if state is None:
            raise NotFoundError(
                f"collection {name[:80]!r} does not exist (create it first: CreateCollection, "
                "`permindex collections create NAME`)",
                name,
            )
        return state

    def options(self, name: str) -> CollectionOptions:
        """The options of ``name`` (the server's own for the default collection)."""
        state = self.get(name)
        found = self._options.get(name or DEFAULT_COLLECTION)
        if found is not None:
            return found
        index = state.index
        design = index.design
        return CollectionOptions(
            index.k, design.blocks, design.leading, state.config.shingle_size,
            state.config.min_words,
            index.expire_after if isinstance(index, ExpiringIndex) else 0, state.config.vote,
        )  # fmt: skip

    def items(self) -> list[tuple[str, ServerState]]:
        """Every collection, by name."""
        with self._lock:
            return sorted(self._states.items())

    # ---- changes

    def create(self, name: str, options: CollectionOptions) -> ServerState:
        """Create an empty collection.

        Raises:
            InvalidArgumentError: a bad name or options.
            CollectionExistsError: the name is taken.
            StorageError / OSError: its directory cannot be written.
        """
        check_name(name)
        options.check()
        with self._changes:
            with self._lock:
                if name in self._states:
                    raise CollectionExistsError(f"collection {name!r} exists already")
            folder = self.root / name
            make_directories(self.root)
            staging = self.root / f".creating-{name}-{time.monotonic_ns()}"
            renamed = False
            try:
                staging.mkdir()
                _write_options(staging, options)
                os.rename(staging, folder)
                renamed = True
                fsync_directory(self.root)
            except BaseException:
                shutil.rmtree(folder if renamed else staging, ignore_errors=True)
                raise
            state = self._open(name, options)
            with self._lock:
                self._states[name] = state
                self._options[name] = options
        log.info("collection %s created", name)
        return state

    def drop(self, name: str) -> int:
        """Drop a collection: its keys, snapshots and log. Returns the keys it held.

        Raises:
            InvalidArgumentError: ``default`` (it cannot be dropped).
            NotFoundError: no such collection.
        """
        if (name or DEFAULT_COLLECTION) == DEFAULT_COLLECTION:
            raise InvalidArgumentError("the default collection cannot be dropped", name)
        with self._changes:
            state = self.get(name)
            with self._lock:
                del self._states[name]
                self._options.pop(name, None)
            count = len(state.index)
            try:
                state.store.close()
            finally:
                folder = self.root / name
                trash = self.root / f".dropped-{name}-{time.monotonic_ns()}"
                os.replace(folder, trash)
                fsync_directory(self.root)
                shutil.rmtree(trash, ignore_errors=True)
        log.info("collection %s dropped", name)
        return count

    # ---- lifecycle

    def each(self, action: Callable[[str, ServerState], object]) -> None:
        """Call ``action(name, state)`` for every collection, logging (not raising) failures of
        all but the default one, whose failure is raised after the others ran."""
        failure: BaseException | None = None
        for name, state in self.items():
            try:
                action(name, state)
            except Exception as error:
                if name == DEFAULT_COLLECTION:
                    failure = error
                else:
                    log.error("collection %s: %s", name, error)
        if failure is not None:
            raise failure

    def close(self, *, skip_default: bool = False) -> None:
        """Close the log of every collection (but the default one's with ``skip_default``)."""
        for name, state in self.items():
            if skip_default and name == DEFAULT_COLLECTION:
                continue
            try:
                state.store.close()
            except Exception as error:
                log.error("collection %s: closing its log failed: %s", name, error)
