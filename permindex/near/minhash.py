"""MinHash signatures of shingle sets and the LSH bands over them: the candidate step of the
Jaccard mode of ``permindex dedup`` (``--method minhash``; the verification is in
:mod:`permindex.near.jaccard`).

A document is the *set* of its shingles, each named by the XXH3-64 hash (seed 0) of its UTF-8
bytes, the hashes :func:`permindex.text.fingerprint.shingle_hashes` gives (the fingerprint's
tokenization), repeats removed. Its signature has one uint32 value per permutation p: the
smallest ``h_p(x) = ((a_p * x + b_p) mod 2^64) >> 32`` over its shingle hashes x
(multiply-add-shift hashing, Dietzfelbinger 1996: a universal family on 64-bit keys), so that
two sets agree in position p with probability (about) their Jaccard similarity (Broder 1997,
*On the resemblance and containment of documents*). The x are already XXH3 outputs, so the
family needs no more mixing than this.

Stable across processes, machines and versions: the constants (a_p odd, b_p) are
:data:`MINHASH_SEED` run through SplitMix64 (Steele et al. 2014) in Python integers, never
Python's ``hash()`` nor a numpy generator whose stream may change; every operation is exact
64-bit integer arithmetic, wrapping modulo 2^64 (the numba kernel's).

LSH (Indyk & Motwani 1998; Leskovec, Rajaraman & Ullman, *Mining of Massive Datasets*, ch. 3.4):
the signature is cut into ``bands`` bands of ``rows`` values; two documents are a *candidate*
when they agree on every value of at least one band, with probability
``P(J) = 1 - (1 - J^rows)^bands`` (the S-curve). :func:`choose_bands` picks the shape.
Importing this module does not import numba.
"""

from __future__ import annotations

import functools
from typing import Final, NamedTuple

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError

__all__ = [
    "DEFAULT_PERMUTATIONS",
    "MAX_PERMUTATIONS",
    "MINHASH_SEED",
    "MISS_AT_THRESHOLD",
    "Bands",
    "band_keys",
    "choose_bands",
    "hash_constants",
    "signatures",
]

#: Permutations (signature values per document) by default.
DEFAULT_PERMUTATIONS: Final = 128
#: The most permutations accepted.
MAX_PERMUTATIONS: Final = 4096
#: The seed of the SplitMix64 stream that gives the constants of the hash family.
MINHASH_SEED: Final = 0x5EED_2007
#: :func:`choose_bands`: the largest share of pairs at exactly the threshold the bands may miss.
MISS_AT_THRESHOLD: Final = 0.02

_MASK: Final = (1 << 64) - 1
_EMPTY: Final = np.uint32(0xFFFFFFFF)  # the signature value of no shingle (never a minimum)


def _splitmix64(state: int) -> tuple[int, int]:
    """One SplitMix64 step: (new state, output), Python ints below 2^64."""
    state = (state + 0x9E3779B97F4A7C15) & _MASK
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return state, z ^ (z >> 31)


@functools.cache
def _constants(permutations: int) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    state = MINHASH_SEED
    a = np.zeros(permutations, dtype=np.uint64)
    b = np.zeros(permutations, dtype=np.uint64)
    for p in range(permutations):
        state, x = _splitmix64(state)
        state, y = _splitmix64(state)
        a[p] = x | 1
        b[p] = y
    a.flags.writeable = False
    b.flags.writeable = False
    return a, b


def check_permutations(permutations: object) -> int:
    """``permutations`` checked: an int in 1..:data:`MAX_PERMUTATIONS` (bool refused).

    Raises:
        InvalidArgumentError: naming the value.
    """
    if (
        isinstance(permutations, bool)
        or not isinstance(permutations, int)
        or not 1 <= permutations <= MAX_PERMUTATIONS
    ):
        raise InvalidArgumentError(
            f"permutations must be an integer in 1..{MAX_PERMUTATIONS}, got {permutations!r}",
            value=permutations,
        )
    return permutations


def hash_constants(
    permutations: int = DEFAULT_PERMUTATIONS,
) -> tuple[NDArray[np.uint64], NDArray[np.uint64]]:
    """The constants (a, b) of the hash family, ``(permutations,) uint64`` each (read-only;
    every a odd): the first ``permutations`` pairs of the fixed SplitMix64 stream, so a
    signature of 64 values is the first half of one of 128.

    Raises:
        InvalidArgumentError: ``permutations`` outside 1..:data:`MAX_PERMUTATIONS`.
    """
    return _constants(check_permutations(permutations))


def signatures(
    values: NDArray[np.uint64],
    offsets: NDArray[np.int64],
    permutations: int = DEFAULT_PERMUTATIONS,
) -> NDArray[np.uint32]:
    """MinHash signatures of n shingle sets given as one CSR array: set i is
    ``values[offsets[i]:offsets[i + 1]]`` (its (m,) uint64 shingle hashes; repeats allowed,
    they change nothing).

    Returns:
        ``(n, permutations) uint32``: row i holds, for each permutation p, the smallest
        ``((a_p * x + b_p) mod 2^64) >> 32`` over the x of set i (0xFFFFFFFF for an empty set).

    Raises:
        InvalidArgumentError: ``permutations`` outside 1..:data:`MAX_PERMUTATIONS`.

    O(total shingles x permutations) time, in a compiled kernel
    (:func:`permindex.near.minhash_kernels.signatures_of`); memory: the output.
    """
    a, b = hash_constants(permutations)
    n = int(offsets.size) - 1
    out = np.full((max(n, 0), permutations), _EMPTY, dtype=np.uint32)
    if n <= 0:
        return out
    from permindex.near import minhash_kernels

    minhash_kernels.signatures_of(values, offsets, a, b, out)
    return out


class Bands(NamedTuple):
    """An LSH shape: ``bands`` bands of ``rows`` signature values (``bands * rows`` of the
    permutations used)."""

    bands: int
    rows: int

    def probability(self, jaccard: float) -> float:
        """The S-curve: the chance that two sets of this Jaccard similarity agree on at least
        one band, ``1 - (1 - J^rows)^bands``."""
        return 1.0 - (1.0 - jaccard**self.rows) ** self.bands


def choose_bands(
    threshold: float, permutations: int = DEFAULT_PERMUTATIONS, miss: float = MISS_AT_THRESHOLD
) -> Bands:
    """The LSH shape for pairs at Jaccard >= ``threshold``: among every ``rows`` in
    1..permutations (with ``bands = permutations // rows``), those whose S-curve finds at
    least ``1 - miss`` of the pairs at exactly the threshold; of those, the one with the least
    area under the S-curve below the threshold (the fewest candidates to verify from
    dissimilar pairs; ties: more rows). When none reaches ``1 - miss``, the shape that misses
    least.

    Why not the usual optimum: datasketch's ``MinHashLSH(threshold=0.8, num_perm=128)`` minimises
    the *sum* of the areas of false positives (below the threshold) and false negatives (above
    it), which puts the S-curve's steep part at the threshold itself: it chooses 9 bands of 13
    rows, whose P(0.8) is 0.40, so it misses 60 % of the pairs at exactly 0.8 (and most
    near-duplicate pairs of a real corpus lie just above the threshold). Here every candidate is
    verified by exact Jaccard, so a false positive costs one check and a false negative is
    lost: the S-curve must pass 0.5 well below the threshold. For 128 permutations and 0.8 the
    rule gives 18 bands of 7 rows: P(0.8) = 0.986, P = 0.5 at J = 0.63 (21 x 6, which a miss
    of 1 % would choose, verifies half as many candidates again for 0.3 % more pairs).

    Raises:
        InvalidArgumentError: ``threshold`` outside (0, 1], ``permutations`` out of range.
    """
    check_threshold(threshold)
    check_permutations(permutations)
    grid = np.linspace(0.0, threshold, 401)
    best: tuple[float, int] | None = None
    fallback: tuple[float, int] | None = None
    for rows in range(1, permutations + 1):
        shape = Bands(permutations // rows, rows)
        found = shape.probability(threshold)
        if fallback is None or found > fallback[0]:
            fallback = (found, rows)
        if found < 1.0 - miss:
            continue
        curve = 1.0 - (1.0 - grid**rows) ** shape.bands
        area = float(np.sum((curve[1:] + curve[:-1]) * 0.5 * np.diff(grid)))
        if best is None or area <= best[0]:
            best = (area, rows)
    rows = best[1] if best is not None else fallback[1] if fallback is not None else 1
    return Bands(permutations // rows, rows)


def check_threshold(threshold: object) -> float:
    """``threshold`` checked: a real number in (0, 1] (bool refused).

    Raises:
        InvalidArgumentError: naming the value.
    """
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not 0.0 < float(threshold) <= 1.0
    ):
        raise InvalidArgumentError(
            f"threshold must be a Jaccard similarity in (0, 1], got {threshold!r}",
            value=threshold,
        )
    return float(threshold)


_BAND_MULTIPLIER: Final = np.uint64(0x9E3779B97F4A7C15)


def band_keys(signature: NDArray[np.uint32], shape: Bands) -> NDArray[np.uint64]:
    """``(n, bands) uint64``: for each set and band, one key of the band's ``rows`` values
    (two sets with equal values in a band have equal keys; unequal values give equal keys only
    by a 64-bit collision, which makes one more candidate, never a lost one). O(n x bands x
    rows) numpy."""
    n = signature.shape[0]
    keys = np.zeros((n, shape.bands), dtype=np.uint64)
    for band in range(shape.bands):
        key = np.zeros(n, dtype=np.uint64)
        for column in range(band * shape.rows, (band + 1) * shape.rows):
            key = (key ^ signature[:, column].astype(np.uint64)) * _BAND_MULTIPLIER
            key ^= key >> np.uint64(29)
        keys[:, band] = key
    return keys
