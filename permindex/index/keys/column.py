"""Many keys in two numpy arrays instead of one Python ``str`` each: the keys of an offline
``dedup`` (10^8 documents hold 7 GB as Python strings, 2 GB here).

Layout (Apache Arrow's string layout): ``data`` ((bytes,) uint8), every key's UTF-8 bytes in
order, and ``offsets`` ((n + 1,) int64, ``offsets[0] == 0``, non-decreasing): key i is
``data[offsets[i] : offsets[i + 1]]``. A :class:`KeyColumn` is immutable and reads as a
``Sequence[str]``: a key is decoded when it is read.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import Final, overload

import numpy as np
from numpy.typing import NDArray

from permindex.index.keys.rows import ragged_positions

__all__ = ["KeyColumn", "keys_distinct", "last_positions"]

_I64 = NDArray[np.int64]
_U8 = NDArray[np.uint8]
_U64 = NDArray[np.uint64]

#: Keys decoded per step when a column is iterated.
_DECODE_STEP: Final = 1 << 16


class KeyColumn(Sequence[str]):
    """n keys as one UTF-8 buffer and its offsets (the module docstring's layout).

    Reading one key (``column[i]``) is O(its length); :meth:`take`, :meth:`concat` and
    :meth:`of_strings` are O(n + bytes); equality with another sequence compares the keys in
    order. Memory: the key bytes plus 8 bytes a key.
    """

    __slots__ = ("_decoded", "_distinct", "data", "offsets")

    def __init__(self, data: _U8, offsets: _I64) -> None:
        """``data`` (uint8) and ``offsets`` ((n + 1,) int64) as in the module docstring; not
        copied, not checked beyond their dtypes and ``offsets``' first and last values.

        Raises:
            ValueError: wrong dtypes, or offsets that do not start at 0 and end within data.
        """
        if data.dtype != np.uint8 or offsets.dtype != np.int64 or offsets.ndim != 1:
            raise ValueError("a KeyColumn takes uint8 data and (n + 1,) int64 offsets")
        if offsets.size == 0 or offsets[0] != 0 or offsets[-1] > data.size:
            raise ValueError("offsets must start at 0 and end within the data")
        self.data = data
        self.offsets = offsets
        self._decoded: dict[int, str] = {}  # see remember()
        self._distinct = False  # True once last_positions found no key repeated

    @classmethod
    def of_strings(cls, keys: Iterable[str]) -> KeyColumn:
        """The column of ``keys`` (str, encodable as UTF-8: validated keys). O(n + bytes).

        Raises:
            UnicodeEncodeError: a key that cannot be encoded (a lone surrogate).
        """
        encoded = [key.encode("utf-8") for key in keys]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum(np.fromiter(map(len, encoded), np.int64, len(encoded)), out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), dtype=np.uint8).copy(), offsets)

    @classmethod
    def concat(cls, columns: Sequence[KeyColumn]) -> KeyColumn:
        """The keys of ``columns`` one after the other, in one new column. O(n + bytes)."""
        if len(columns) == 1:
            return columns[0]
        parts = [c.data[: c.offsets[-1]] for c in columns]
        data = np.concatenate(parts) if parts else np.zeros(0, dtype=np.uint8)
        offsets = np.zeros(sum(len(c) for c in columns) + 1, dtype=np.int64)
        at, base = 1, 0
        for c in columns:
            offsets[at : at + len(c)] = c.offsets[1:] + base
            at += len(c)
            base += int(c.offsets[-1])
        return cls(data, offsets)

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if type(index) is int:
            found = self._decoded.get(index)
            if found is not None:
                return found
        if isinstance(index, slice):
            return [self._key(i) for i in range(*index.indices(len(self)))]
        i = int(index)
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"key position {index} out of range for {n} keys")
        return self._key(i)

    def _key(self, i: int) -> str:
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes().decode("utf-8")

    def __iter__(self) -> Iterator[str]:
        data, offsets = self.data, self.offsets
        for start in range(0, len(self), _DECODE_STEP):
            stop = min(len(self), start + _DECODE_STEP)
            bounds = offsets[start : stop + 1].tolist()
            blob = data[bounds[0] : bounds[-1]].tobytes()
            base = bounds[0]
            for a, b in itertools.pairwise(bounds):
                yield blob[a - base : b - base].decode("utf-8")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KeyColumn):
            return (
                len(self) == len(other)
                and np.array_equal(self.offsets, other.offsets)
                and np.array_equal(self.data[: self.offsets[-1]], other.data[: other.offsets[-1]])
            )
        if isinstance(other, Sequence) and not isinstance(other, str):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"KeyColumn({len(self)} keys, {int(self.offsets[-1])} bytes)"

    @property
    def nbytes(self) -> int:
        """Bytes held: the key bytes and the offsets."""
        return int(self.data.nbytes + self.offsets.nbytes)

    def take(self, positions: _I64) -> KeyColumn:
        """The keys at ``positions`` ((m,) int64 into this column, any order), as a new column;
        this column itself when ``positions`` is every position in order. O(m + their bytes)."""
        n = len(self)
        if positions.size == n and (n == 0 or (positions[0] == 0 and positions[-1] == n - 1)):
            if n < 2 or bool((np.diff(positions) == 1).all()):
                return self
        starts = self.offsets[positions]
        sizes = self.offsets[positions + 1] - starts
        offsets = np.zeros(positions.size + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        data = self.data[:0]
        if offsets[-1]:
            some = sizes > 0  # ragged_positions takes lengths >= 1
            data = self.data[ragged_positions(starts[some], sizes[some])]
        return KeyColumn(np.ascontiguousarray(data), offsets)

    def strings(self, positions: _I64) -> list[str]:
        """The keys at ``positions`` ((m,) int64 into this column) as Python strings, decoded
        together (one decode when they are all ASCII). O(m + their bytes)."""
        starts = self.offsets[positions]
        sizes = self.offsets[positions + 1] - starts
        some = sizes > 0  # ragged_positions takes lengths >= 1
        blob = (
            self.data[ragged_positions(starts[some], sizes[some])].tobytes() if some.any() else b""
        )
        bounds = [0, *np.cumsum(sizes).tolist()]
        if blob.isascii():
            text = blob.decode("ascii")
            return [text[a:b] for a, b in itertools.pairwise(bounds)]
        return [blob[a:b].decode("utf-8") for a, b in itertools.pairwise(bounds)]

    def remember(self, positions: _I64) -> None:
        """Decode the keys at ``positions`` once (:meth:`strings`) and keep them, so that each
        later ``column[i]`` of one of them is a dict lookup: for keys read many times, such as
        those of a report's pairs and clusters. Memory: one str per position."""
        self._decoded.update(zip(positions.tolist(), self.strings(positions), strict=True))

    def hashes(self) -> _U64:
        """(n,) uint64: XXH3-64 (seed 0) of each key's UTF-8 bytes, by the compiled kernel
        :func:`permindex.text.xxh3_kernels.xxh3_64_many`. O(n + bytes)."""
        from permindex.text.xxh3_kernels import xxh3_64_many

        return xxh3_64_many(np.ascontiguousarray(self.data), self.offsets)


def _collision_positions(keys: KeyColumn) -> _I64 | None:
    """Positions (ascending) of the keys whose hash another key shares, or None when every hash
    is distinct (then so is every key). One sort of (n,) uint64; an argsort only when some
    hashes repeat."""
    hashes = keys.hashes()
    ordered = np.sort(hashes)
    if not bool((ordered[1:] == ordered[:-1]).any()):
        return None
    del ordered
    order = np.argsort(hashes, kind="stable")
    ordered = hashes[order]
    same = ordered[1:] == ordered[:-1]
    shared = np.zeros(order.size, dtype=bool)
    shared[1:] |= same
    shared[:-1] |= same
    return np.sort(order[shared])


def last_positions(keys: Sequence[str]) -> _I64:
    """The positions ((m,) int64, ascending) of each distinct key's last occurrence in
    ``keys``. For a :class:`KeyColumn` without building a Python object per key (hashes
    sorted; the keys of equal hashes compared), else with a dict. O(n log n)."""
    n = len(keys)
    if isinstance(keys, KeyColumn):
        candidates = None if keys._distinct else _collision_positions(keys)
        if candidates is None:
            keys._distinct = True  # immutable: later checks of this column need no hashing
            return np.arange(n, dtype=np.int64)
        last = {keys[p]: p for p in candidates.tolist()}
        keep = np.ones(n, dtype=bool)
        keep[candidates] = False
        keep[np.fromiter(last.values(), np.int64, len(last))] = True
        return np.flatnonzero(keep).astype(np.int64)
    if len(set(keys)) == n:
        return np.arange(n, dtype=np.int64)
    latest = dict(zip(keys, range(n), strict=True))
    return np.fromiter(sorted(latest.values()), dtype=np.int64, count=len(latest))


def keys_distinct(keys: Sequence[str]) -> bool:
    """Whether no key of ``keys`` repeats (for a :class:`KeyColumn`, as
    :func:`last_positions` decides it, once per column: the answer is kept). O(n log n)."""
    if isinstance(keys, KeyColumn):
        return keys._distinct or last_positions(keys).size == len(keys)
    return len(set(keys)) == len(keys)
