"""What a Jaccard collection keeps of a document: its :class:`MinHashSketch` -- the set of its
shingle hashes and its MinHash signature (:mod:`permindex.near.minhash`) -- checked, and written
as hex for Export and Import.

A collection that verifies exactly (``verify="exact"``) keeps the shingle-hash *set* of each
document (sorted, distinct uint64: 8 bytes a distinct shingle) and derives the signature from
it; one that verifies by signature (``verify="signature"``) keeps only the signature
(``permutations`` uint32). :func:`checked_sketch` makes either from what a client sent.
No I/O; importing this module does not import numba.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any, Final, Literal, NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError

__all__ = [
    "KIND_NUMBERS",
    "SKETCH_KINDS",
    "VERIFY_MODES",
    "MinHashSketch",
    "SketchKind",
    "Verify",
    "check_verify",
    "checked_sketch",
    "distinct_sorted",
    "kind_of",
    "sketch_from_hex",
    "sketch_from_sent_hex",
    "sketch_to_hex",
]

#: How a Jaccard collection checks a candidate: ``"exact"`` (the shingle sets' Jaccard,
#: precision 1.0) or ``"signature"`` (the share of equal signature values, an estimate).
Verify = Literal["exact", "signature"]
VERIFY_MODES: Final[tuple[Verify, ...]] = ("exact", "signature")

#: What a sketch in hex holds (the names of :class:`MinHashSketch`'s fields): the shingle hashes
#: (16 hex digits each: what a ``verify="exact"`` collection keeps) or the signature (8 hex
#: digits a value: what a ``verify="signature"`` collection keeps).
SketchKind = Literal["shingle_hashes", "signature"]
SKETCH_KINDS: Final[tuple[SketchKind, ...]] = ("shingle_hashes", "signature")
#: The wire's ``SketchKind`` numbers (protos/permindex/v1/index.proto) -> the kind a
#: ``sketch_hex`` is read as; 0 (unspecified, an older client): the collection's own.
KIND_NUMBERS: Final[dict[int, SketchKind | None]] = {0: None, 1: "shingle_hashes", 2: "signature"}

_HEX: Final = re.compile(r"[0-9a-fA-F]*")


class _SketchFields(NamedTuple):
    shingle_hashes: NDArray[np.uint64]
    signature: NDArray[np.uint32]


class MinHashSketch(_SketchFields):
    """A document as a Jaccard collection sees it: ``MinHashSketch(shingle_hashes,
    signature)``, a named tuple of two arrays.

    Attributes:
        shingle_hashes: ``(m,) uint64``, the XXH3-64 hashes of its word shingles
            (:func:`permindex.minhash_sketch` gives them sorted and distinct; a server takes
            any order and repeats); empty when only the signature is known.
        signature: ``(permutations,) uint32``, its MinHash signature
            (:func:`permindex.near.minhash.signatures`; empty when only the set is known).

    Each field is given as a one-dimensional numpy array of integers or a sequence of ints
    (an empty one for a field not known) and kept as a uint64 (uint32) array: an array of that
    dtype as it is (no copy), anything else checked, then converted, so that no value wraps
    into another on its way to a server. O(m + permutations).

    Raises:
        TypeError: a field that is not a sequence or one-dimensional array of integers (a
            float, a bool, a string, None; a float, bool or object array), naming the field and
            the value.
        ValueError: a shingle hash outside [0, 2^64) or a signature value outside [0, 2^32)
            (a negative one included), or an array that is not one-dimensional, naming the
            field, the position and the value.

    >>> from permindex import MinHashSketch, minhash_sketch
    >>> sketch = minhash_sketch("one two three four", permutations=16)
    >>> sketch.shingle_hashes.size, sketch.signature.size
    (2, 16)
    >>> MinHashSketch([3, 1, 2], []).shingle_hashes
    array([3, 1, 2], dtype=uint64)
    >>> MinHashSketch([-1], [])
    Traceback (most recent call last):
    ...
    ValueError: MinHashSketch shingle_hashes[0] = -1 is outside [0, 2^64)
    >>> MinHashSketch([1.5], [])
    Traceback (most recent call last):
    ...
    TypeError: MinHashSketch shingle_hashes[0] is float 1.5; give ints
    """

    __slots__ = ()

    def __new__(
        cls,
        shingle_hashes: Sequence[int] | NDArray[Any],
        signature: Sequence[int] | NDArray[Any],
    ) -> MinHashSketch:
        return super().__new__(
            cls,
            _unsigned(shingle_hashes, np.dtype(np.uint64), "shingle_hashes", 64),
            _unsigned(signature, np.dtype(np.uint32), "signature", 32),
        )


def _unsigned(values: object, dtype: np.dtype[Any], name: str, bits: int) -> NDArray[Any]:
    """``values`` as a one-dimensional array of ``dtype`` (unsigned, ``bits`` wide), refused
    rather than wrapped (see :class:`MinHashSketch`)."""
    where = f"MinHashSketch {name}"
    if isinstance(values, np.ndarray) and values.dtype == dtype:
        if values.ndim != 1:
            raise ValueError(f"{where} has shape {values.shape}; give a one-dimensional array")
        return values
    if isinstance(values, np.ndarray) and values.dtype.kind in "iu":
        if values.ndim != 1:
            raise ValueError(f"{where} has shape {values.shape}; give a one-dimensional array")
        bad = np.flatnonzero(
            (values < 0) | (values > (1 << bits) - 1)
            if values.dtype.kind == "i" or values.dtype.itemsize * 8 > bits
            else np.zeros(values.size, dtype=bool)
        )
        if bad.size:
            i = int(bad[0])
            raise ValueError(f"{where}[{i}] = {values[i]} is outside [0, 2^{bits})")
        return values.astype(dtype)
    if isinstance(values, np.ndarray) and values.dtype.kind != "O":
        raise TypeError(f"{where} is an array of dtype {values.dtype}; give integers")
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"{where} is {type(values).__name__}; give a sequence or array of integers")
    items = list(values)
    for i, value in enumerate(items):
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"{where}[{i}] is {type(value).__name__} {str(value)[:40]}; give ints")
        if not 0 <= int(value) < 1 << bits:
            raise ValueError(f"{where}[{i}] = {value} is outside [0, 2^{bits})")
    return np.array([int(value) for value in items], dtype=dtype)


def check_verify(verify: object) -> Verify:
    """``verify`` checked: one of :data:`VERIFY_MODES`.

    Raises:
        InvalidArgumentError: naming the value.
    """
    if verify not in VERIFY_MODES:
        raise InvalidArgumentError(
            f"verify must be one of {', '.join(VERIFY_MODES)}, got {str(verify)[:80]!r}", verify
        )
    return verify


def kind_of(verify: Verify) -> SketchKind:
    """The kind of sketch a collection of ``verify`` keeps (and exports).

    >>> from permindex.index.jaccard.sketch import kind_of
    >>> kind_of("exact"), kind_of("signature")
    ('shingle_hashes', 'signature')
    """
    return "shingle_hashes" if verify == "exact" else "signature"


def distinct_sorted(hashes: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """The distinct values of ``hashes``, ascending, as uint64. O(m log m)."""
    ordered = np.sort(np.asarray(hashes, dtype=np.uint64))
    if ordered.size < 2:
        return ordered
    keep = np.empty(ordered.size, dtype=bool)
    keep[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=keep[1:])
    return ordered[keep]


def checked_sketch(
    shingle_hashes: Sequence[int] | NDArray[np.uint64],
    signature: Sequence[int] | NDArray[np.uint32],
    *,
    verify: Verify,
    permutations: int,
    name: str = "sketch",
) -> MinHashSketch:
    """The sketch a collection keeps from what a client sent: for ``verify="exact"`` the
    shingle hashes are required (the signature is computed from them, one implementation,
    whatever was sent); for ``"signature"`` a signature of ``permutations`` values, or the
    shingle hashes to compute it from.

    Raises:
        InvalidArgumentError: nothing usable (naming ``name`` and what is missing), a signature
            of another length, a hash out of range.
    """
    from permindex.near.minhash import signatures

    try:
        hashes = np.asarray(shingle_hashes, dtype=np.uint64).reshape(-1)
        values = np.asarray(signature, dtype=np.int64).reshape(-1)
    except (OverflowError, ValueError, TypeError) as error:
        raise InvalidArgumentError(f"{name}: not arrays of integers: {error}", name) from None
    if hashes.size:
        hashes = distinct_sorted(hashes)
        offsets = np.array([0, hashes.size], dtype=np.int64)
        computed = signatures(hashes, offsets, permutations)[0]
        if verify == "exact":
            return MinHashSketch(hashes, computed)
        return MinHashSketch(np.zeros(0, dtype=np.uint64), computed)
    if verify == "exact":
        raise InvalidArgumentError(
            f"{name} has no shingle hashes: this collection verifies exactly (verify=exact) "
            "and needs the set of shingle hashes (permindex.minhash_sketch gives it), not only "
            "a signature",
            name,
        )
    if values.size != permutations:
        raise InvalidArgumentError(
            f"{name} has a signature of {values.size} values; this collection's signatures "
            f"have {permutations} (its permutations)",
            name,
        )
    if bool(((values < 0) | (values > 0xFFFFFFFF)).any()):
        raise InvalidArgumentError(f"{name}: signature values must be in [0, 2^32)", name)
    return MinHashSketch(np.zeros(0, dtype=np.uint64), values.astype(np.uint32))


def sketch_to_hex(sketch: MinHashSketch, verify: Verify) -> str:
    """The sketch as the hex an Export carries: for ``"exact"`` the shingle hashes, 16 hex
    digits each (sorted), for ``"signature"`` the signature, 8 hex digits each, back to back,
    lower case. :func:`sketch_from_hex` reads it back exactly.

    >>> import numpy as np
    >>> from permindex.index.jaccard.sketch import MinHashSketch, sketch_to_hex
    >>> s = MinHashSketch(np.array([1, 255], dtype=np.uint64), np.zeros(0, dtype=np.uint32))
    >>> sketch_to_hex(s, "exact")
    '000000000000000100000000000000ff'
    """
    if verify == "exact":
        return sketch.shingle_hashes.astype(">u8").tobytes().hex()
    return sketch.signature.astype(">u4").tobytes().hex()


def sketch_from_hex(
    text: str,
    *,
    verify: Verify,
    permutations: int,
    name: str,
    kind: SketchKind | None = None,
) -> MinHashSketch:
    """The sketch of :func:`sketch_to_hex`'s hex, of ``kind`` (None: the kind the collection
    keeps, :func:`kind_of` ``verify``, as read before the kind travelled with the hex), checked
    as :func:`checked_sketch` checks: shingle hashes make either collection's sketch (a
    ``"signature"`` collection computes the signature from them); a signature only a
    ``"signature"`` collection's.

    Raises:
        InvalidArgumentError: a signature for a ``verify="exact"`` collection; not hex, a
            length that is not whole values, a signature of another length, shingle hashes not
            strictly increasing (as a signature's hex read as shingle hashes is) (naming
            ``name``).

    >>> from permindex.index.jaccard.sketch import sketch_from_hex
    >>> sketch_from_hex("00000000000000ff", verify="exact", permutations=4, name="x").shingle_hashes
    array([255], dtype=uint64)
    >>> sketch_from_hex("00000000000000ff", verify="signature", permutations=2, name="x",
    ...                 kind="shingle_hashes").shingle_hashes.size  # only the signature is kept
    0
    """
    if kind is None:
        kind = kind_of(verify)
    if kind == "signature" and verify == "exact":
        raise InvalidArgumentError(
            f"{name} is a signature (sketch_kind SIGNATURE, an export of a verify=signature "
            "collection): this collection verifies exactly (verify=exact) and takes shingle "
            "hashes (sketch_kind SHINGLE_HASHES, 16 hex digits a hash); import a signature "
            "into a verify=signature collection of the same permutations",
            name,
        )
    width = 16 if kind == "shingle_hashes" else 8
    what = "shingle hashes" if kind == "shingle_hashes" else "a signature"
    if not _HEX.fullmatch(text) or len(text) % width or not text:
        raise InvalidArgumentError(
            f"{name} is not {what} in hex ({width} hex digits a value, at least one)", name
        )
    raw = bytes.fromhex(text)
    if kind == "shingle_hashes":
        hashes = np.frombuffer(raw, dtype=">u8").astype(np.uint64)
        if hashes.size > 1 and not bool((hashes[1:] > hashes[:-1]).all()):
            # Export writes shingle hashes sorted and distinct; a signature's hex (8 digits a
            # value) read 16 digits at a time is not, but for 1 chance in size!
            raise InvalidArgumentError(
                f"{name} is not shingle hashes in hex: its values (16 hex digits each) are not "
                "in increasing order, as an export of a verify=exact collection writes them; a "
                "verify=signature collection's export (8 hex digits a signature value, "
                "sketch_kind SIGNATURE) cannot be imported into a verify=exact collection",
                name,
            )
        return checked_sketch(
            hashes, [],
            verify=verify, permutations=permutations, name=name,
        )  # fmt: skip
    return checked_sketch(
        [], np.frombuffer(raw, dtype=">u4").astype(np.uint32),
        verify=verify, permutations=permutations, name=name,
    )  # fmt: skip


def sketch_from_sent_hex(
    text: str, kind: int, *, verify: Verify, permutations: int, where: str, key: str
) -> MinHashSketch:
    """A sent document's ``sketch_hex`` with its ``sketch_kind`` number, read as a server reads
    it (the server, and the sharded client before it decides for the shards): the kind checked
    against :data:`KIND_NUMBERS`, then :func:`sketch_from_hex`. ``where`` names the document
    (``documents[i]``) and ``key`` its key in the errors.

    Raises:
        InvalidArgumentError: an unknown kind number, or what :func:`sketch_from_hex` refuses.

    >>> from permindex.index.jaccard.sketch import sketch_from_sent_hex
    >>> read = sketch_from_sent_hex(
    ...     "000000000000000100000000000000ff", 1,
    ...     verify="exact", permutations=128, where="documents[0]", key="a",
    ... )
    >>> read.shingle_hashes.tolist()
    [1, 255]
    """
    if kind not in KIND_NUMBERS:
        raise InvalidArgumentError(
            f"{where} (key {key[:80]!r}): sketch_kind {kind} is not a SketchKind "
            "(SHINGLE_HASHES = 1, SIGNATURE = 2, or 0: unspecified)",
            kind,
        )
    return sketch_from_hex(
        text,
        verify=verify,
        permutations=permutations,
        name=f"{where}.sketch_hex (key {key[:80]!r})",
        kind=KIND_NUMBERS[kind],
    )
