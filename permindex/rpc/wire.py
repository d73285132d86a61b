"""PairsResponse messages encoded straight to protobuf wire bytes with numpy
(:class:`PairEncoder`), for the answers whose size is the number of pairs: building one
``Pair`` message object per pair costs microseconds each, which for the 12,497,500 pairs of
5,000 copies of one page is minutes; the bytes are built here in O(bytes) numpy work and parse
as the same message (checked against protobuf's own encoding in the tests).

Wire format (protobuf encoding, ``protos/permindex/v1/index.proto``)::

    PairsResponse: repeated (0x0A, varint length, Pair)
    Pair:          0x0A varint(len) key_a UTF-8, 0x12 varint(len) key_b UTF-8,
                   0x18 varint(distance) (left out when 0, proto3's default)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

import numpy as np
from numpy.typing import NDArray

__all__ = ["PairEncoder"]

_U8 = NDArray[np.uint8]
_I64 = NDArray[np.int64]

_KEY_A: Final = 0x0A  # field 1, length-delimited
_KEY_B: Final = 0x12  # field 2, length-delimited
_DISTANCE: Final = 0x18  # field 3, varint
_PAIR: Final = 0x0A  # PairsResponse.pairs, field 1, length-delimited


def _varint_bytes(values: _I64) -> tuple[_U8, _I64]:
    """Varints of ``values`` (each < 2^21) as an (n, 3) uint8 array and their lengths (n,)."""
    out = np.zeros((values.size, 3), dtype=np.uint8)
    lengths = 1 + (values >= 1 << 7) + (values >= 1 << 14)
    out[:, 0] = (values & 0x7F) | np.where(lengths > 1, 0x80, 0)
    out[:, 1] = ((values >> 7) & 0x7F) | np.where(lengths > 2, 0x80, 0)
    out[:, 2] = (values >> 14) & 0x7F
    return out, lengths.astype(np.int64)


def _gather(source: _U8, starts: _I64, lengths: _I64) -> _U8:
    """The concatenation of ``source[starts[i] : starts[i] + lengths[i]]`` for every i."""
    present = lengths > 0
    starts, lengths = starts[present], lengths[present]
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, dtype=np.uint8)
    begins = np.cumsum(lengths) - lengths  # where each piece goes in the output
    jump = starts - begins  # source index minus output index, constant within a piece
    step = np.zeros(total, dtype=np.int64)
    step[begins] = np.diff(jump, prepend=0)
    index = np.cumsum(step)
    index += np.arange(total, dtype=np.int64)
    return source[index]


class PairEncoder:
    """Encodes chunks of pairs of ``keys`` (positions into it) as PairsResponse bytes.

    Args:
        keys: every key the pairs name (valid UTF-8 strings, at most 1,024 bytes each).
        max_pairs: the most pairs :meth:`encode` is given at once, >= 1.

    Building it encodes each key once for each field: O(n + key bytes + max_pairs) memory and
    time. One encoder serves one call: :meth:`encode` reuses a scratch area (not thread-safe).
    """

    def __init__(self, keys: Sequence[str], max_pairs: int) -> None:
        encoded = [key.encode("utf-8") for key in keys]
        lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
        prefix, prefix_lengths = _varint_bytes(lengths)
        # one field each for key_a and key_b: tag, varint length, the bytes
        field_lengths = 1 + prefix_lengths + lengths
        self._field_lengths = field_lengths
        starts = np.cumsum(field_lengths) - field_lengths
        blob = np.zeros(int(field_lengths.sum()), dtype=np.uint8)
        key_bytes = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        # tag at starts, the varint after it, the key bytes after that
        blob_index = np.arange(blob.size, dtype=np.int64)
        owner = np.repeat(np.arange(len(encoded), dtype=np.int64), field_lengths)
        offset = blob_index - starts[owner]
        is_prefix = (offset >= 1) & (offset <= prefix_lengths[owner])
        blob[is_prefix] = prefix[owner[is_prefix], offset[is_prefix] - 1]
        is_key = offset > prefix_lengths[owner]
        blob[is_key] = key_bytes
        blob_a = blob.copy()
        blob_a[starts] = _KEY_A
        blob[starts] = _KEY_B
        self._max_pairs = max_pairs
        self._blob_b_size = blob.size
        self._scratch = blob_a.size + blob.size  # where the pairs' headers and tails go
        self._source = np.concatenate([blob_a, blob, np.zeros(6 * max_pairs, dtype=np.uint8)])
        self._starts = starts

    def pairs_per_message(self, target_bytes: int) -> int:
        """How many pairs of average keys make a message of about ``target_bytes``: at least
        100, at most the encoder's ``max_pairs``."""
        n = self._field_lengths.size
        mean = float(self._field_lengths.sum()) / n if n else 1.0
        return max(1, min(self._max_pairs, max(100, int(target_bytes // (2 * mean + 6)))))

    def encode(self, a: _I64, b: _I64, distance: _I64) -> bytes:
        """One PairsResponse of the pairs ``(keys[a[i]], keys[b[i]], distance[i])``, in order,
        as wire bytes: (m,) int64 positions and distances in [0, 64]. O(bytes) numpy work."""
        m = int(a.size)
        if m == 0:
            return b""
        distance = distance.astype(np.int64)
        has_distance = distance > 0
        body = self._field_lengths[a] + self._field_lengths[b] + 2 * has_distance
        header, header_lengths = _varint_bytes(body)
        if m > self._max_pairs:
            raise ValueError(f"{m} pairs in one message; this encoder takes {self._max_pairs}")
        # each pair's bytes: 0x0A, varint(body), field a, field b, [0x18, distance]
        scratch = self._scratch
        head = self._source[scratch : scratch + 4 * m].reshape(m, 4)
        head[:, 0] = _PAIR
        head[:, 1:] = header
        tail = self._source[scratch + 4 * m : scratch + 6 * m].reshape(m, 2)
        tail[:, 0] = _DISTANCE
        tail[:, 1] = distance
        row = np.arange(m, dtype=np.int64)
        b_offset = scratch - self._blob_b_size
        starts = np.stack(
            [scratch + 4 * row, self._starts[a], b_offset + self._starts[b],
             scratch + 4 * m + 2 * row],
            axis=1,
        )  # fmt: skip
        lengths = np.stack(
            [
                1 + header_lengths,
                self._field_lengths[a],
                self._field_lengths[b],
                2 * has_distance.astype(np.int64),
            ],
            axis=1,
        )
        source = self._source
        return _gather(source, starts.ravel(), lengths.ravel()).tobytes()
