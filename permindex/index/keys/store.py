"""The index's key store: each row's key, and the key -> live row lookup, in numpy arrays (no
Python object per key), growable without holding the index's lock.

:class:`KeyStore` is the public face the index uses; its parts are the codec
(:mod:`permindex.index.keys.codec`: each key's short canonical code, a decimal integer as its
value, crawl URLs through a dictionary of their hosts and path segments), the rows
(:mod:`permindex.index.keys.rows`: the codes, a length byte a row, an offset a block), the hash
table (:mod:`permindex.index.keys.hash_table`: a row number and a tag byte a slot) and the growth
off the lock (:mod:`permindex.index.keys.growth`). Batches arrive as key sections
(:mod:`permindex.storage.key_section`) with their XXH3-64 hashes (for a batch's repeated keys).

Bytes per key: its code (``k00000001``: 6, an 8-digit integer: 5, a 75-byte crawl URL about 15),
1 + 8/16 to find it by row, 5 bytes a slot of the map (at most 7/8 full: about 6 to 7 a key).
Not thread-safe: the index serializes access.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final, NamedTuple

import numpy as np
from numpy.typing import NDArray
from xxhash import xxh3_64_intdigest

from permindex.index.keys.growth import LINK, RELINK, UNLINK, Growth, prepare_growth
from permindex.index.keys.hash_table import Codes, EncodedKeys, KeyTable, fits_load, slots_for
from permindex.index.keys.rows import (
    SAMPLE_ROWS,
    TRAIN_ROWS,
    ahead_capacity,
    capacity_after,
    code_room,
    nearly_full,
    next_capacity,
    ragged_positions,
    zeroed,
)
from permindex.storage.key_section import encode_section, first_utf8_error

if TYPE_CHECKING:
    from permindex.index.keys.codec import Dictionary

__all__ = [
    "EncodedKeys",
    "Growth",
    "KeyMemory",
    "KeyStore",
    "ahead_capacity",
    "batch_subset",
    "encode_keys",
    "first_utf8_error",
    "hash_key",
    "hash_many",
    "nearly_full",
    "next_capacity",
]

_U8 = NDArray[np.uint8]
_I64 = NDArray[np.int64]
_U64 = NDArray[np.uint64]

#: The map's load after a growth ahead of need (it starts above 4/5).
AHEAD_LOAD: Final = 0.7


def hash_key(data: bytes) -> int:
    """XXH3-64 (seed 0) of a key's UTF-8 bytes, the hash a batch's repeated keys are found by."""
    return int(xxh3_64_intdigest(data))


def hash_many(keys: Iterable[bytes | memoryview], count: int) -> _U64:
    """:func:`hash_key` of each of the ``count`` UTF-8 encoded ``keys``, as (n,) uint64."""
    return np.fromiter(map(xxh3_64_intdigest, keys), np.uint64, count)


def encode_keys(keys: Sequence[str]) -> EncodedKeys:
    """Encode str keys for the store: their key section and ends
    (:func:`~permindex.storage.key_section.encode_section`) and one XXH3 call per key. O(n + bytes).

    Raises TypeError when an element is not a str and UnicodeEncodeError when one is not
    encodable; the caller validates first to name the offending position."""
    n = len(keys)
    raw, ends = encode_section(keys)
    hashes = np.fromiter(map(xxh3_64_intdigest, map(str.encode, keys)), np.uint64, n)
    return EncodedKeys(np.frombuffer(raw, dtype=np.uint8), ends, hashes)


def one_key(data: bytes) -> EncodedKeys:
    """The batch of the one key ``data`` (UTF-8 bytes)."""
    blob = np.frombuffer(data + b"\x00", dtype=np.uint8)
    return EncodedKeys(blob, np.array([blob.size], dtype=np.int64), np.zeros(1, dtype=np.uint64))


def encode_codes(section: _U8, ends: _I64, words: Dictionary) -> Codes:
    """The keys of a key section (``section``, its (n,) ``ends``) coded with ``words``."""
    from permindex.index.keys.codec import encode_section as code_section

    if ends.size == 0:
        return Codes(np.zeros(0, np.uint8), np.zeros(0, np.int64), np.zeros(0, np.uint64))
    return Codes(*code_section(section, ends, words.data, words.offsets, words.slots))


def layout_codes(codes: _U8, sizes: _I64) -> tuple[_U8, _U8]:
    """Codes of (n,) ``sizes`` in the store's layout: ((n,) uint8 lengths, 255 for a code of 255
    bytes or more; the codes, each long one after its 2-byte little-endian size)."""
    from permindex.index.keys import kernels

    n = int(sizes.size)
    lens = np.zeros(n, dtype=np.uint8)
    spans = np.zeros(int(codes.size) + 2 * int(np.count_nonzero(sizes >= 255)), dtype=np.uint8)
    bases = np.zeros(n // 16 + 1, dtype=np.int64)
    used = kernels.write_codes(spans, lens, bases, 0, 0, codes, sizes)
    assert used == spans.size
    return lens, spans


def batch_subset(batch: EncodedKeys, positions: _I64) -> EncodedKeys:
    """The keys of ``batch`` at ``positions`` ((m,) int64, increasing), as a new batch."""
    starts = np.concatenate(([0], batch.ends[:-1])).astype(np.int64)[positions]
    sizes = batch.ends[positions] - starts
    blob = batch.blob[ragged_positions(starts, sizes)] if positions.size else batch.blob[:0]
    return EncodedKeys(blob, np.cumsum(sizes), batch.hashes[positions])


class KeyMemory(NamedTuple):
    """The bytes of a key store's arrays, by capacity (:meth:`KeyStore.memory`)."""

    #: The keys' codes (and the dictionary they are coded with).
    key_bytes: int
    #: Where each row's code is: a length byte a row and an offset (8 bytes) a block of 16.
    key_offsets: int
    #: The map's tags: the low byte of each slot's code hash (1 byte a slot).
    key_hashes: int
    #: The key -> row hash table's row numbers (4 bytes a slot, load at most 7/8).
    key_map: int


class KeyStore(KeyTable):
    """Keys by row with a key -> row hash table: the index appends a row for every stored
    fingerprint and the store holds that row's key; a key is *linked* (findable) on one live row
    at a time. Layout: :mod:`permindex.index.keys.rows` and :mod:`permindex.index.keys.hash_table`.

    Costs: :meth:`find` / :meth:`append` / :meth:`unlink` O(1) expected compiled steps (a
    kernel call each); :meth:`find_many` / :meth:`append_many` O(n + bytes) compiled;
    :meth:`compact` and growth O(rows + bytes). The dictionary is trained once, when the store
    first reaches :data:`~permindex.index.keys.rows.TRAIN_ROWS` rows: O(rows + bytes) then.
    """

    __slots__ = ("_coded", "_growth")

    def __init__(self) -> None:
        self._growth: Growth | None = None  # a growth being prepared off the lock
        self._coded: tuple[EncodedKeys, Dictionary, Codes] | None = None  # the last batch coded
        super().__init__()

    def nbytes(self) -> int:
        """Bytes of every array, by capacity."""
        return self._rows_nbytes() + self._map_nbytes()

    def memory(self) -> KeyMemory:
        """:meth:`nbytes` by part (:class:`KeyMemory`). O(1)."""
        return KeyMemory(
            key_bytes=int(self._codes.nbytes + self._words.nbytes),
            key_offsets=int(self._lens.nbytes + self._bases.nbytes),
            key_hashes=int(self._tags.nbytes),
            key_map=int(self._slots.nbytes),
        )

    def _code_estimate(self, rows: int, data_bytes: int) -> int:
        """Code bytes ``rows`` keys of ``data_bytes`` UTF-8 bytes (NULs included) will likely
        take: at the store's bytes a row so far and a quarter more, never more than
        :func:`~permindex.index.keys.rows.code_room` (for a store of 1,024 rows or more)."""
        bound = code_room(rows, data_bytes)
        if self._rows < 1024:
            return bound
        return min(bound, rows * (self._used + self._used // 4) // self._rows + 64)

    def growth_bytes(self, rows: int, data_bytes: int, *, large: bool, small: bool) -> int:
        """How much :meth:`nbytes` may grow when ``rows`` more rows, each a new key, with
        ``data_bytes`` more key bytes (terminators included) are appended: each array at the
        capacity it may have after the write and its upkeep (:func:`capacity_after`; ``large``:
        the store grows ahead of need; ``small``: the write is small beside it, so a growth
        ahead follows it), the codes counted at their most
        (:func:`~permindex.index.keys.rows.code_room`), the hash table grown to a load of 3/4
        when it would pass 7/8 (and to 7/10 when a growth ahead would find it past 4/5), and the
        dictionary at its most when the write trains it (the codes made again with it fit in
        the arrays as they are). An array
        that fits counts nothing (:meth:`nbytes` counts capacity); the copies alive while an
        array grows are not counted. O(1)."""
        size = int(self._lens.size)
        grown = capacity_after(self._rows, rows, size, large=large, small=small)
        extra = (grown - size) + 8 * (grown // 16 - size // 16)
        codes = int(self._codes.size)
        room = code_room(rows, data_bytes)
        extra += capacity_after(self._used, room, codes, large=large, small=small) - codes
        slots = int(self._slots.size)
        live = self._live + rows
        noted_ways = [self._live, live] if large else []
        grown_slots = slots
        for noted in [None, *noted_ways]:
            way = slots
            if noted is not None and (5 * noted > 4 * way or not fits_load(noted + rows, way)):
                way = slots_for(noted + rows, AHEAD_LOAD)
            if not fits_load(live, way):
                way = slots_for(live)
            if small and 5 * live > 4 * way:  # grown ahead after it
                way = slots_for(live, AHEAD_LOAD)
            grown_slots = max(grown_slots, way)
        extra += (grown_slots - slots) * 5
        if not self._trained and self._rows + rows >= TRAIN_ROWS:  # the dictionary, at most
            from permindex.index.keys.codec import MAX_DICTIONARY_BYTES, MAX_TOKENS

            extra += MAX_DICTIONARY_BYTES + 8 * (MAX_TOKENS + 1) + 4 * 2 * MAX_TOKENS
        return extra

    # -- coding -----------------------------------------------------------------------------

    def _code_batch(self, batch: EncodedKeys) -> Codes:
        """``batch`` coded with the dictionary, kept until the next call with the same batch
        (a write looks its keys up, then stores them) or until a write stores a batch."""
        last = self._coded
        if last is not None and last[0] is batch and last[1] is self._words:
            return last[2]
        coded = self._code(batch)
        self._coded = (batch, self._words, coded)
        return coded

    def _train(self, sample: list[bytes]) -> None:
        """Train the dictionary once (on the stored keys and ``sample``, at most
        :data:`~permindex.index.keys.rows.SAMPLE_ROWS` in all) and code every row again with
        it; the rows keep their numbers and links. A growth being prepared is abandoned."""
        self._trained = True
        stored = min(self._rows, SAMPLE_ROWS)
        keys: list[bytes] = []
        if stored:  # one decode; a key holding NUL is cut there (a worse sample, no more)
            section, _ = self._decode(np.arange(stored, dtype=np.int64))
            keys = section[:-1].tobytes().split(b"\x00")
        keys += sample[: SAMPLE_ROWS - len(keys)]
        from permindex.index.keys.codec import train_dictionary

        words = train_dictionary(keys)
        if words.size == 0:
            return
        if self._growth is not None:
            self._growth.abandoned = True
            self._growth = None
        linked = self.linked_rows()
        section, lengths = self._decode(np.arange(self._rows, dtype=np.int64))
        self._words = words
        self._coded = None
        coded = self._code(EncodedKeys(section, np.cumsum(lengths + 1), np.zeros(0, np.uint64)))
        self._replace_rows(coded.codes, coded.sizes, keep_capacity=True)  # no code grows
        self._slots, self._tags = self._new_table(self._slots.size, linked)

    def _sample(self, batch: EncodedKeys) -> list[bytes]:
        """The first keys of ``batch`` (a training sample; a key holding NUL is cut there)."""
        count = min(int(batch.ends.size), SAMPLE_ROWS)
        if count == 0:
            return []
        raw = batch.blob[: int(batch.ends[count - 1]) - 1].tobytes()
        return raw.split(b"\x00")

    # -- reading ----------------------------------------------------------------------------

    def find(self, key: bytes) -> int:
        """The live row holding ``key`` (UTF-8 bytes), or -1."""
        if self._live == 0:
            return -1
        batch = one_key(key)
        return int(self.find_codes(self._code_batch(batch))[0])

    def find_many(self, batch: EncodedKeys) -> _I64:
        """(n,) int64: the live row holding each key of ``batch``, or -1."""
        if self._live == 0:
            return np.full(batch.ends.size, -1, dtype=np.int64)
        return self.find_codes(self._code_batch(batch))

    # -- writing ----------------------------------------------------------------------------

    def append(self, key: bytes, *, moved_from: int = -1) -> int:
        """Store ``key`` (UTF-8 bytes, not linked now) on a new row and link it; returns the
        row. ``moved_from``: the key's previous row, already unlinked."""
        del moved_from  # a replacement is a new row like any other
        batch = self._coded[0] if self._coded is not None else None
        if batch is None or batch.ends.size != 1 or batch.blob[:-1].tobytes() != key:
            batch = one_key(key)
        return self.append_many(batch)

    def unlink(self, row: int) -> None:
        """Make the live ``row``'s key unfindable (removal, or before a replacement's append):
        backward-shift deletion from its slot. O(cluster) compiled steps."""
        self._unlink_slot(row)
        self._live -= 1
        if self._growth is not None:
            self._growth.journal.append((UNLINK, np.array([row], dtype=np.int64), None))

    def append_many(self, batch: EncodedKeys, moved_from: _I64 | None = None) -> int:
        """Store the keys of ``batch`` (distinct, none linked now) on consecutive new rows and link
        them; returns the first row. ``moved_from`` ((n,) int64, -1 for new keys): each key's
        previous row, still linked: its slot is pointed at the new row.

        Raises:
            KeyError: a row of ``moved_from`` is not linked (a caller's error, raised instead
                of probing forever; the store is then left part-way, as ``_check`` reports).
        """
        n = int(batch.ends.size)
        first = self._rows
        if n == 0:
            return first
        if not self._trained and self._rows + n >= TRAIN_ROWS:
            self._train(self._sample(batch))
        coded = self._code_batch(batch)
        new = np.ones(n, dtype=bool) if moved_from is None else moved_from < 0
        count = int(new.sum())
        self._ensure_slots(count)
        self._write(coded.codes, coded.sizes)
        rows = np.arange(first, first + n, dtype=np.int64)
        if moved_from is None:
            self._link_many(rows, coded.hashes)
        else:
            self._relink_many(moved_from[~new], rows[~new])
            self._link_many(rows[new], coded.hashes[new])
        if self._growth is not None:
            journal = self._growth.journal
            if moved_from is None:
                journal.append((LINK, rows, None))
            else:
                journal.append((RELINK, moved_from[~new], rows[~new]))
                journal.append((LINK, rows[new], None))
        self._live += count
        self._coded = None  # the batch is stored: not kept alive by the cache
        return first

    def compact(self, keep: _I64) -> None:
        """Keep only the rows ``keep`` ((m,) int64, increasing, all linked), renumbered 0..m-1 in
        order. A growth being prepared is abandoned (:meth:`finish_growth` then returns False).
        O(rows + bytes)."""
        if self._growth is not None:
            self._growth.abandoned = True
            self._growth = None
        self._coded = None
        self._compact_rows(keep)
        self._relink_all(int(keep.size))

    def load_codes(self, words: Dictionary, lens: _U8, spans: _U8, bases: _I64) -> None:
        """Make this empty store hold the rows of a version-4 snapshot: ``lens`` (n,) uint8 and
        ``spans`` as :meth:`export_codes` gives them, coded with ``words``, their ``bases``
        (:func:`~permindex.index.keys.kernels.scan_codes`, which checked them); all linked.
        The dictionary is the store's from now on (not trained again). O(n + bytes).

        Raises:
            ValueError: the store is not empty, or two rows hold one key (nothing is kept).
        """
        from permindex.index.keys import kernels

        if self._rows:
            raise ValueError("codes load only into an empty key store")
        n = int(lens.size)
        capacity = max(64, n + n // 8)
        codes = zeroed(max(1024, spans.size + spans.size // 8), np.uint8)
        codes[: spans.size] = spans
        self._lens = zeroed(capacity, np.uint8)
        self._lens[:n] = lens
        self._bases = zeroed(capacity // 16 + 1, np.int64)
        self._bases[: bases.size] = bases
        self._codes, self._words, self._trained, self._coded = codes, words, True, None
        rows = np.arange(n, dtype=np.int64)
        hashes = kernels.row_hashes(self._codes, self._lens, self._bases, rows)
        slots = zeroed(slots_for(n), np.uint32)
        tags = zeroed(slots.size, np.uint8)
        repeated = kernels.link_distinct(
            slots, tags, rows, hashes, self._codes, self._lens, self._bases
        )
        if repeated >= 0:
            self.__init__()  # type: ignore[misc]
            raise ValueError(f"the key of row {repeated} is stored twice")
        self._slots, self._tags = slots, tags
        self._rows, self._used, self._live = n, int(spans.size), n

    # -- growth off the lock ------------------------------------------------------------------

    def fits(self, rows: int, data_bytes: int) -> bool:
        """Whether ``rows`` more rows with ``data_bytes`` more key bytes likely fit without
        growing any array (the hash table included, counting each row as a new key; the codes
        as :meth:`_code_estimate` has them). A hint unless the caller holds the index's lock."""
        return (
            self._rows + rows <= self._lens.size
            and self._used + self._code_estimate(rows, data_bytes) <= self._codes.size
            and fits_load(self._live + rows, self._slots.size)
        )

    def growth_wanted(self) -> bool:
        """Whether growing ahead is due: rows or code bytes above 7/8 of their capacity, or
        live keys above 4/5 of the hash table's slots (it grows inline above 7/8)."""
        return (
            nearly_full(self._rows, self._lens.size)
            or nearly_full(self._used, self._codes.size)
            or 5 * self._live > 4 * self._slots.size
        )

    def begin_growth(self, rows: int = 0, data_bytes: int = 0) -> Growth:
        """Begin growing (the caller holds the index's lock; O(1)) so that ``rows`` more rows
        (new keys) with ``data_bytes`` more key bytes likely fit, and ahead of that: arrays past
        7/8 of their capacity grow by half, the hash table past a load of 4/5 grows to 7/10.
        Record every change to the hash table from now until :meth:`finish_growth`. Replaces a
        growth begun earlier and not finished (which is then abandoned)."""
        if self._growth is not None:
            self._growth.abandoned = True
        row_capacity = ahead_capacity(self._rows, rows, self._lens.size)
        estimate = self._code_estimate(rows, data_bytes)
        data_capacity = ahead_capacity(self._used, estimate, self._codes.size)
        slot_count = 0
        size = self._slots.size
        if 5 * self._live > 4 * size or not fits_load(self._live + rows, size):
            slot_count = slots_for(self._live + rows, AHEAD_LOAD)
        growth = Growth(
            rows=self._rows,
            used=self._used,
            row_capacity=row_capacity,
            data_capacity=data_capacity,
            slot_count=slot_count,
            sources=(self._lens, self._bases, self._codes),
        )
        self._growth = growth
        return growth

    @staticmethod
    def prepare_growth(growth: Growth, linked: _I64) -> None:
        """:func:`~permindex.index.keys.growth.prepare_growth`: fill ``growth``'s arrays without
        the index's lock."""
        prepare_growth(growth, linked)

    def finish_growth(self, growth: Growth) -> bool:
        """Swap in ``growth``'s arrays (the caller holds the index's lock): copy the rows
        appended since it began and replay the hash table's changes since then on the new
        table. An array the store already outgrew inline meanwhile is left as it is. Returns
        False (nothing changes) when the growth was abandoned (a compaction, a training, or a
        newer growth) or not prepared. O(rows and bytes appended meanwhile + changes
        meanwhile)."""
        if growth.abandoned or not growth.prepared or self._growth is not growth:
            return False
        self._growth = None
        rows, used = growth.rows, growth.used
        now_rows, now_used = self._rows, self._used
        if growth.row_arrays is not None and growth.row_capacity > self._lens.size:
            lens, bases = growth.row_arrays
            lens[rows:now_rows] = self._lens[rows:now_rows]
            lo, hi = rows // 16, now_rows // 16 + 1
            bases[lo:hi] = self._bases[lo:hi]
            self._lens, self._bases = lens, bases
        if growth.data is not None and growth.data_capacity > self._codes.size:
            growth.data[used:now_used] = self._codes[used:now_used]
            self._codes = growth.data
        if growth.slots is not None and growth.slots.size > self._slots.size:
            assert growth.tags is not None
            self._slots, self._tags = growth.slots, growth.tags
            for change, first, second in growth.journal:
                if change == LINK:
                    self._link_many(first)
                elif change == UNLINK:
                    self._unlink_slot(int(first[0]))
                else:
                    assert second is not None
                    self._relink_many(first, second)
        return True

    # -- invariants -----------------------------------------------------------------------------

    def _check(self) -> list[str]:
        """Problems found in O(rows + bytes) (empty when every invariant holds): of the rows
        (:meth:`_check_rows`: spans, canonical codes) and of the table (:meth:`_check_table`)."""
        problems = self._check_rows()
        if problems:
            return problems
        return self._check_table()
