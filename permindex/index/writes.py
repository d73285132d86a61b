"""The writes of the index: a key's row appended, killed or replaced in the row store
(:mod:`permindex.index.rows`) and in every table (:mod:`permindex.index.table_set`)
together, and the
upkeep around a write (growth ahead, merges) done outside the lock.

A write may carry times (Unix seconds, uint32: ``when`` for one key, ``times`` for a batch, in
the order of its keys): they are kept only by a row store with
:attr:`~permindex.index.rows.RowStore.times` (an index with expiry,
:mod:`permindex.index.expiry`), on the new rows and on the rows of keys re-added with the
fingerprint they hold (renewed).

The functions named ``*_locked`` run with the index's lock held (``rows.lock``); the others
take it themselves and must be called without it.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.hamming import as_fingerprint_array, validate_fingerprint
from permindex.index.keys.batches import (
    Section,
    distinct_keys,
    hash_section,
    section_ends,
    section_keys,
    validate_keys,
)
from permindex.index.keys.rule import validate_key
from permindex.index.keys.store import EncodedKeys, batch_subset
from permindex.index.rows import RowStore
from permindex.index.table_set import TableSet
from permindex.index.tables.table import Run

if TYPE_CHECKING:
    from permindex.index.keys.codec import Dictionary

__all__ = [
    "add_batch",
    "add_coded",
    "add_locked",
    "add_many_locked",
    "add_one",
    "add_section",
    "after_write",
    "discard_locked",
    "store_batch",
]

_U64 = NDArray[np.uint64]
_U32 = NDArray[np.uint32]


def add_locked(rows: RowStore, runs: TableSet, data: bytes, value: int, when: int = 0) -> bool:
    """Store the key ``data`` (UTF-8) with fingerprint ``value`` at time ``when``:
    a new row in the row store and every table, the key's old row (if any) a tombstone; when the
    key already holds ``value``, only its time is renewed. Returns whether the key was new.
    O(T log L) plus amortized freezing and compaction."""
    rows.reserve(1)
    old = rows.keys.find(data)
    if old >= 0:
        if int(rows.fps[old]) == value:
            if rows.times is not None:
                rows.times[old] = when
            return False
        rows.kill(np.array([old], dtype=np.int64))
        rows.keys.unlink(old)
    row = rows.append(data, value, old, when)
    runs.add(row, value)
    if rows.compaction_due():
        rows.compact()
    return old < 0


def add_one(rows: RowStore, runs: TableSet, key: str, fingerprint: int, when: int = 0) -> bool:
    """:meth:`permindex.index.Index.add` (its contract and errors) at time ``when``, called
    without the lock."""
    data = validate_key(key).encode("utf-8")
    value = validate_fingerprint(fingerprint)
    rows.await_growth(1, len(data) + 1)
    with rows.lock:
        added = add_locked(rows, runs, data, value, when)
    after_write(rows, runs)
    return added


def add_many_locked(
    rows: RowStore,
    runs: TableSet,
    batch: EncodedKeys,
    values: _U64,
    prepared: list[Run] | None,
    times: _U32 | None = None,
) -> NDArray[np.bool_]:
    """Store the n distinct keys of ``batch`` with the (n,) uint64 ``values`` and (n,) uint32
    ``times`` (``prepared``: the tables' runs of exactly ``values``, or None); returns (n,)
    bool, whether each key was new. Keys that already hold their value keep their row (their
    time renewed). O(n) numpy work per table."""
    rows.reserve(int(values.size))  # may compact (renumber rows): look rows up after it
    old = rows.keys.find_many(batch)
    new = old < 0
    replaced = np.flatnonzero(old >= 0)
    if replaced.size:
        same = rows.fps[old[replaced]] == values[replaced]
        if same.any():  # unchanged fingerprints: only their times renewed
            unchanged = replaced[same]
            if rows.times is not None:
                rows.times[old[unchanged]] = 0 if times is None else times[unchanged]
            apply = np.ones(old.size, dtype=bool)
            apply[unchanged] = False
            keep = np.flatnonzero(apply)
            if keep.size == 0:
                return new
            batch = batch_subset(batch, keep)
            values = values[keep]
            times = None if times is None else times[keep]
            old = old[keep]
            prepared = None
        rows.kill(old[old >= 0])
    start = rows.append_many(batch, values, old if replaced.size else None, times)
    runs.add_many(start, int(values.size), prepared)
    if rows.compaction_due():
        rows.compact()
    return new


def discard_locked(rows: RowStore, data: bytes) -> bool:
    """Kill the row of the key ``data`` (UTF-8) if it is stored (a tombstone, O(1), plus an
    amortized compaction); returns whether it was."""
    row = rows.keys.find(data)
    if row < 0:
        return False
    rows.kill(np.array([row], dtype=np.int64))
    rows.keys.unlink(row)
    if rows.compaction_due():
        rows.compact()
    return True


def after_write(rows: RowStore, runs: TableSet, count: int = 1) -> None:
    """Upkeep after a write of ``count`` rows, outside the lock: note the time (the idle test
    of :meth:`~permindex.index.table_set.TableSet.merge_all`), grow the arrays ahead
    (:meth:`~permindex.index.rows.RowStore.after_write`) and merge the tables' runs
    (:meth:`~permindex.index.table_set.TableSet.merge_pending`). The host's garbage collector
    is left alone."""
    runs.last_write = time.monotonic()
    rows.after_write(count)
    runs.merge_pending()


def store_batch(
    rows: RowStore,
    runs: TableSet,
    batch: EncodedKeys,
    values: _U64,
    prepared: list[Run] | None = None,
    times: _U32 | None = None,
) -> NDArray[np.bool_]:
    """Store the distinct, validated keys of ``batch`` with ``values`` and ``times`` (called
    without the lock): the tables' runs of a large batch sorted before the lock (unless
    ``prepared``, the tables' runs of exactly ``values``, is given), the arrays grown if needed,
    the rows stored
    under the lock (:func:`add_many_locked`), runs merged after. Returns (n,) bool, whether
    each key was new."""
    n = int(values.size)
    if prepared is None and runs.tables[0].direct_run(n):
        prepared = runs.prepare(values)
    rows.await_growth(n, int(batch.blob.size))
    with rows.lock:
        new = add_many_locked(rows, runs, batch, values, prepared, times)
    after_write(rows, runs, n)
    return new


def add_section(
    rows: RowStore,
    runs: TableSet,
    sizes: NDArray[np.integer],
    raw: Section,
    values: _U64,
    times: _U32 | None = None,
) -> list[str] | None:
    """Store the n keys of a compact key section (``sizes``: (n,) UTF-8 byte lengths;
    ``raw``: every key's bytes then a NUL, only read) with the (n,) uint64 ``values``, after
    validating it (InvalidArgumentError, see :func:`~permindex.index.keys.batches.section_ends`);
    called without the lock. The tables' runs (numpy sorts, which release the GIL) are built
    in other threads while this one hashes the keys. When two keys hash alike (maybe a repeated
    key) nothing is stored and the keys are returned as str, for the exact path
    (:meth:`permindex.index.Index.add_many`); else None. O(n + key bytes)."""
    if int(sizes.size) == 0:
        if len(raw):
            raise InvalidArgumentError("no key lengths but a non-empty key section")
        return None
    tuning = rows.tuning
    data, ends = section_ends(sizes, raw, tuning.utf8_slice)
    with runs.building(values) as building:
        batch = EncodedKeys(data, ends, hash_section(raw, ends, tuning.hash_chunk))
        ordered = np.sort(batch.hashes)
        repeated = bool((ordered[1:] == ordered[:-1]).any())
        del ordered
        prepared = None if building is None or repeated else building()
    if repeated:
        del prepared
        return section_keys(raw, sizes, ends)
    store_batch(rows, runs, batch, values, prepared, times)
    return None


def add_batch(
    rows: RowStore,
    runs: TableSet,
    keys: Iterable[str],
    fingerprints: Iterable[int] | _U64,
    times: _U32 | None = None,
) -> NDArray[np.bool_]:
    """:meth:`permindex.index.Index.add_many` (its contract and errors), called without the
    lock: the keys and fingerprints validated, a repeated key kept once with its last value,
    then :func:`store_batch`. Given a numpy array, the fingerprints are checked first so that
    a large batch's runs are built in other threads while this one checks and hashes the keys;
    a bad key is still reported the same. ``times``: (n,) uint32 in the order of ``keys``
    (checked by the caller to be of their length)."""
    if isinstance(fingerprints, np.ndarray):
        values = as_fingerprint_array(fingerprints)
        with runs.building(values) as building:
            key_list, batch = validate_keys(keys)
            key_list, batch, values, which = distinct_keys(key_list, batch, values)
            prepared = None if building is None or which is not None else building()
    else:
        key_list, batch = validate_keys(keys)
        values = as_fingerprint_array(fingerprints)
        key_list, batch, values, which = distinct_keys(key_list, batch, values)
        prepared = None
    if not key_list:
        return np.ones(0, dtype=bool)
    if times is not None and which is not None:  # each key's time from its last occurrence
        last = np.zeros(len(key_list), dtype=np.intp)
        np.maximum.at(last, which, np.arange(which.size, dtype=np.intp))
        times = times[last]
    new = store_batch(rows, runs, batch, values, prepared, times)
    return new if which is None else new[which]


def add_coded(
    rows: RowStore,
    runs: TableSet,
    words: Dictionary,
    lens: NDArray[np.uint8],
    spans: NDArray[np.uint8],
    bases: NDArray[np.int64],
    values: _U64,
) -> None:
    """Store n keys given in the key store's layout (:meth:`KeyStore.load_codes
    <permindex.index.keys.store.KeyStore.load_codes>`) with the (n,) uint64 ``values`` in the
    empty row store ``rows`` and its tables (their runs sorted before the lock); called without
    the lock. O(n + code bytes).

    Raises:
        ValueError: the store is not empty, or a key is stored twice (nothing is kept).
    """
    n = int(values.size)
    prepared = runs.prepare(values) if n and runs.tables[0].direct_run(n) else None
    with rows.lock:
        if rows.n:
            raise ValueError("codes load only into an empty index")
        rows.keys.load_codes(words, lens, spans, bases)
        rows.reserve(n)
        rows.fps[:n] = values
        rows.n = n
        runs.add_many(0, n, prepared)
    after_write(rows, runs, n)
