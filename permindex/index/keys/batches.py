"""The input batches of the index's bulk writes, validated before the lock is taken: a batch of
str keys (:meth:`permindex.index.Index.add_many`), a compact key section
(:meth:`permindex.index.Index.from_compact`: every key's UTF-8 bytes then a NUL), and a key
repeated in one batch (the last occurrence wins).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Any

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.hamming import as_fingerprint_array
from permindex.index.keys.rule import MAX_KEY_BYTES, validate_key
from permindex.index.keys.store import EncodedKeys, encode_keys, hash_many
from permindex.index.tuning import DEFAULT_TUNING
from permindex.storage.key_section import batch_repeats, check_section

__all__ = [
    "Section",
    "byte_view",
    "compact_inputs",
    "distinct_keys",
    "hash_section",
    "key_list",
    "section_ends",
    "section_keys",
    "validate_keys",
]

_U64 = NDArray[np.uint64]
_I64 = NDArray[np.int64]
#: A compact key section: every key's UTF-8 bytes then a NUL, as bytes or (m,) uint8.
Section = bytes | bytearray | NDArray[np.uint8]


def key_list(keys: object) -> list[Any]:
    """``keys`` as a list (itself when it is one), its elements not checked yet.

    Raises:
        TypeError: ``keys`` is a str, bytes or not iterable.
    """
    if isinstance(keys, (str, bytes)) or not isinstance(keys, Iterable):
        raise TypeError(f"keys must be an iterable of str, not {type(keys).__name__}")
    return keys if type(keys) is list else list(keys)


def validate_keys(keys: object) -> tuple[list[str], EncodedKeys]:
    """The keys as a list and encoded for the key store, every key validated (as
    :func:`~permindex.index.keys.rule.validate_key`; the error names the first bad position).

    Raises:
        TypeError: ``keys`` is a str, bytes or not iterable, or a key is not a str.
        InvalidArgumentError: a key is empty, above MAX_KEY_BYTES UTF-8 bytes or not
            encodable.
    """
    out = key_list(keys)
    # Fast path, C loops only: one join and encode; sizes checked on the encoded lengths.
    try:
        batch: EncodedKeys | None = encode_keys(out)
    except (TypeError, UnicodeEncodeError):
        batch = None
    if batch is not None:
        lengths = batch.lengths
        if not out or (int(lengths.min()) >= 1 and int(lengths.max()) <= MAX_KEY_BYTES):
            return out, batch
    out = [validate_key(key, name=f"keys[{i}]") for i, key in enumerate(out)]
    return out, encode_keys(out)  # only reached if the fast path was too strict


def distinct_keys(
    key_list: list[str], batch: EncodedKeys, values: _U64
) -> tuple[list[str], EncodedKeys, _U64, NDArray[np.intp] | None]:
    """The validated keys ``key_list`` (and their encoded ``batch``, from
    :func:`validate_keys`) with their (n,) uint64 ``values``, a repeated key kept once with its
    last value (:func:`~permindex.storage.key_section.batch_repeats`, the one rule): (keys, their
    encoded batch, their values, and which: None when no key repeats, else the (n,) intp
    position of each input key's entry). O(n log n) numpy work on the hashes; a dict over the
    keys only when two hashes are equal.

    Raises:
        InvalidArgumentError: ``len(key_list) != values.size``.
    """
    n = len(key_list)
    if values.size != n:
        raise InvalidArgumentError(
            f"got {n} keys and {values.size} fingerprints; the lengths must match",
            value=(n, int(values.size)),
        )
    repeats = batch_repeats(key_list, batch.hashes)  # None: no key repeats (the common case)
    if repeats is None:
        return key_list, batch, values, None
    key_list = [key_list[i] for i in repeats.last.tolist()]  # the last occurrence wins
    return key_list, encode_keys(key_list), values[repeats.last], repeats.which


def compact_inputs(
    lengths: NDArray[np.integer] | Iterable[int],
    blob: NDArray[np.uint8] | bytes | bytearray,
    fingerprints: Iterable[int] | _U64,
) -> tuple[NDArray[np.integer], Section, _U64]:
    """The arguments of :meth:`permindex.index.Index.from_compact` as (n,) integer lengths, the
    section (a contiguous (m,) uint8 array or bytes, not copied when it already is one) and
    (n,) uint64 fingerprints; the section itself is validated later (:func:`section_ends`).

    Raises:
        TypeError: ``lengths`` is not 1-dimensional integers; a bad fingerprint type.
        InvalidArgumentError: a bad fingerprint, or n lengths and a different number of
            fingerprints.
    """
    sizes = np.asarray(lengths if isinstance(lengths, np.ndarray) else list(lengths))
    if sizes.ndim != 1 or (sizes.size and sizes.dtype.kind not in "iu"):
        raise TypeError("lengths must be a 1-dimensional array of integers")
    if isinstance(blob, np.ndarray):
        raw: Section = (
            blob
            if blob.dtype == np.uint8 and blob.ndim == 1 and blob.flags.c_contiguous
            else np.frombuffer(blob.tobytes(), dtype=np.uint8)
        )
    else:
        raw = blob if isinstance(blob, (bytes, bytearray)) else bytes(blob)
    values = as_fingerprint_array(fingerprints)
    n = int(sizes.size)
    if values.size != n:
        raise InvalidArgumentError(
            f"got {n} key lengths and {values.size} fingerprints; the lengths must match",
            value=(n, int(values.size)),
        )
    return sizes, raw, values


def byte_view(raw: Section) -> memoryview:
    """A memoryview of the bytes of ``raw`` (a 1-dimensional contiguous uint8 array or a bytes
    object), no copy."""
    return raw.data if isinstance(raw, np.ndarray) else memoryview(raw)


def section_ends(
    sizes: NDArray[np.integer], raw: Section, utf8_slice: int = DEFAULT_TUNING.utf8_slice
) -> tuple[NDArray[np.uint8], _I64]:
    """Validate the compact key section ``raw`` of n >= 1 keys with (n,) UTF-8 byte lengths
    ``sizes``: (the section as (m,) uint8, no copy; (n,) int64 one past each key's NUL).

    Raises:
        KeySectionError: (an InvalidArgumentError) a length outside 1 to MAX_KEY_BYTES, the
            NULs not where the lengths say, or a key not valid UTF-8 (the message gives the
            byte offset; :func:`~permindex.storage.key_section.check_section`, the one codec,
            checking ``utf8_slice`` bytes at a time, so no str of the whole section).
    """
    data = raw if isinstance(raw, np.ndarray) else np.frombuffer(raw, dtype=np.uint8)
    ends = check_section(data, sizes, utf8_slice=utf8_slice)  # KeySectionError: the first fault
    return data, ends


def hash_section(raw: Section, ends: _I64, chunk_size: int = DEFAULT_TUNING.hash_chunk) -> _U64:
    """XXH3-64 (:func:`~permindex.index.keys.store.hash_key`) of each key of a compact key section
    (``raw``: every key's UTF-8 bytes then a NUL; ``ends``: (n,) int64, one past each key's
    NUL), as (n,) uint64. O(key bytes). A slice of ``chunk_size`` keys at a time is split
    at its NULs (one C call making the chunk's bytes objects, which stay in the CPU cache while
    they are hashed); a chunk whose keys hold NUL themselves is cut by the lengths instead."""
    n = int(ends.size)
    out = np.empty(n, dtype=np.uint64)
    view = byte_view(raw)
    bounds = [0, *ends[chunk_size - 1 :: chunk_size].tolist()]
    if bounds[-1] != int(ends[-1]):
        bounds.append(int(ends[-1]))
    for chunk, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        first = chunk * chunk_size
        count = min(chunk_size, n - first)
        parts: list[bytes] | list[memoryview] = bytes(view[lo : hi - 1]).split(b"\x00")
        if len(parts) != count:  # a key holds NUL
            cuts = ends[first : first + count].tolist()
            parts = [view[a : b - 1] for a, b in zip([lo, *cuts[:-1]], cuts, strict=True)]
        out[first : first + count] = hash_many(parts, count)
    return out


def section_keys(raw: Section, sizes: NDArray[np.integer], ends: _I64) -> list[str]:
    """The keys of a validated compact key section as str, in order (O(n) Python objects: the
    exact path for a section that may repeat a key)."""
    view = byte_view(raw)
    starts = ends - sizes.astype(np.int64) - 1
    pieces = zip(starts.tolist(), sizes.tolist(), strict=True)
    return [str(view[a : a + m], "utf-8") for a, m in pieces]
