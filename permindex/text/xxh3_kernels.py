"""XXH3-64 (seed 0, the default secret) as numba kernels over byte arrays, bit-exact with
``xxhash.xxh3_64_intdigest`` (xxHash 0.8) for every input length: 0, 1-3, 4-8, 9-16, 17-128,
129-240 and the long form above 240 bytes (stripes of 64 bytes, blocks of 16 stripes with a
scramble after each, the last stripe read from the end).

Source: the XXH3 specification, Yann Collet, ``doc/xxhash_spec.md`` and ``xxhash.h`` of
github.com/Cyan4973/xxHash: the constants and the 192-byte default secret below are that
specification's. The code is a scalar transcription written for this project: every value is a
``uint64`` with wrap-around arithmetic, and the 64 x 64 -> 128-bit product is computed from
32-bit halves (``XXH_mult64to128``'s portable form).

Reading words. XXH3 reads little-endian 32- and 64-bit words at any byte offset: :func:`le64`
and :func:`le32` combine the bytes of a uint8 array with shifts, indexed as unsigned integers
(no negative-index wrap-around to test), a pattern LLVM compiles to one unaligned load (and a
byte swap on a big-endian machine); :func:`store64` is the same for a store. A kernel passes its
arrays to :func:`hash_at` and the helpers it inlines as views without an owner
(:func:`permindex.jit_numba.unowned`), so that no call touches a reference count. Plain numba
code throughout, no intrinsic of its own (``benchmarks/README.md``, "XXH3 intrinsics: what stays
and why", has the A/B that retired them).

Import this module only where a kernel is needed: it imports numba (see :mod:`permindex.jit`).
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
from numpy.typing import NDArray

from permindex.jit_numba import njit, unowned

__all__ = ["SECRET", "hash_at", "le32", "le64", "store64", "xxh3_64", "xxh3_64_many"]

#: The default secret of XXH3 (``XXH3_kSecret``), 192 bytes.
SECRET: Final = np.frombuffer(
    bytes.fromhex(
        "b8fe6c3923a44bbe7c01812cf721ad1cded46de9839097db7240a4a4b7b3671f"
        "cb79e64eccc0e578825ad07dccff7221b8084674f743248ee03590e6813a264c"
        "3c2852bb91c300cb88d0658b1b532ea371644897a20df94e3819ef46a9deacd8"
        "a8fa763fe39c343ff9dcbbc7c70b4f1d8a51e04bcdb45931c89f7ec9d9787364"
        "eac5ac8334d3ebc3c581a0fffa1363eb170ddd51b7f0da49d316552629d4689e"
        "2b16be587d47a1fc8ff8b8d17ad031ce45cb3a8f95160428afd7fbcabb4b407e"
    ),
    dtype=np.uint8,
)

_P32_1 = np.uint64(0x9E3779B1)
_P32_2 = np.uint64(0x85EBCA77)
_P32_3 = np.uint64(0xC2B2AE3D)
_P64_1 = np.uint64(0x9E3779B185EBCA87)
_P64_2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P64_3 = np.uint64(0x165667B19E3779F9)
_P64_4 = np.uint64(0x85EBCA77C2B2AE63)
_P64_5 = np.uint64(0x27D4EB2F165667C5)
_MX1 = np.uint64(0x165667919E3779F9)
_MX2 = np.uint64(0x9FB21C651E98DF25)
_LO32 = np.uint64(0xFFFFFFFF)
_FF = np.uint64(0xFF)

_U1 = np.uint64(1)
_U2 = np.uint64(2)
_U3 = np.uint64(3)
_U4 = np.uint64(4)
_U5 = np.uint64(5)
_U6 = np.uint64(6)
_U7 = np.uint64(7)
_U8 = np.uint64(8)
_U16 = np.uint64(16)
_U24 = np.uint64(24)
_U28 = np.uint64(28)
_U29 = np.uint64(29)
_U32 = np.uint64(32)
_U33 = np.uint64(33)
_U35 = np.uint64(35)
_U37 = np.uint64(37)
_U40 = np.uint64(40)
_U47 = np.uint64(47)
_U48 = np.uint64(48)
_U56 = np.uint64(56)

_STRIPE: Final = 64  # bytes per stripe of the long form
_STRIPES_PER_BLOCK: Final = (192 - 64) // 8  # 16
_BLOCK: Final = _STRIPE * _STRIPES_PER_BLOCK  # 1024 bytes


@njit(inline=True)
def le64(b: Any, i: int) -> np.uint64:
    """The little-endian 64-bit word at ``b[i : i + 8]`` (a uint8 array; one load)."""
    j = np.uint64(i)
    return (
        np.uint64(b[j])
        | (np.uint64(b[j + _U1]) << _U8)
        | (np.uint64(b[j + _U2]) << _U16)
        | (np.uint64(b[j + _U3]) << _U24)
        | (np.uint64(b[j + _U4]) << _U32)
        | (np.uint64(b[j + _U5]) << _U40)
        | (np.uint64(b[j + _U6]) << _U48)
        | (np.uint64(b[j + _U7]) << _U56)
    )


@njit(inline=True)
def le32(b: Any, i: int) -> np.uint64:
    """The little-endian 32-bit word at ``b[i : i + 4]`` (a uint8 array; one load), as a
    uint64."""
    j = np.uint64(i)
    return (
        np.uint64(b[j])
        | (np.uint64(b[j + _U1]) << _U8)
        | (np.uint64(b[j + _U2]) << _U16)
        | (np.uint64(b[j + _U3]) << _U24)
    )


@njit(inline=True)
def store64(b: Any, i: int, x: np.uint64) -> None:
    """Store ``x`` little-endian at ``b[i : i + 8]`` (a uint8 array; one store)."""
    j = np.uint64(i)
    b[j] = x & _FF
    b[j + _U1] = (x >> _U8) & _FF
    b[j + _U2] = (x >> _U16) & _FF
    b[j + _U3] = (x >> _U24) & _FF
    b[j + _U4] = (x >> _U32) & _FF
    b[j + _U5] = (x >> _U40) & _FF
    b[j + _U6] = (x >> _U48) & _FF
    b[j + _U7] = (x >> _U56) & _FF


@njit(inline=True)
def _swap64(x: np.uint64) -> np.uint64:
    out = np.uint64(0)
    for _ in range(8):
        out = (out << _U8) | (x & _FF)
        x >>= _U8
    return out


@njit(inline=True)
def _fold(a: np.uint64, b: np.uint64) -> np.uint64:
    """Low 64 bits XOR high 64 bits of the 128-bit product ``a * b``, from the four products
    of 32-bit halves (``XXH_mult64to128``, portable form)."""
    lo_lo = (a & _LO32) * (b & _LO32)
    hi_lo = (a >> _U32) * (b & _LO32)
    lo_hi = (a & _LO32) * (b >> _U32)
    hi_hi = (a >> _U32) * (b >> _U32)
    cross = (lo_lo >> _U32) + (hi_lo & _LO32) + lo_hi
    upper = (hi_lo >> _U32) + (cross >> _U32) + hi_hi
    lower = (cross << _U32) | (lo_lo & _LO32)
    return lower ^ upper


@njit(inline=True)
def _avalanche(h: np.uint64) -> np.uint64:
    h ^= h >> _U37
    h *= _MX1
    return h ^ (h >> _U32)


@njit(inline=True)
def _avalanche64(h: np.uint64) -> np.uint64:
    """The final mix of XXH64, used by XXH3 for inputs of 0 to 3 bytes."""
    h ^= h >> _U33
    h *= _P64_2
    h ^= h >> _U29
    h *= _P64_3
    return h ^ (h >> _U32)


@njit(inline=True)
def _rotl(x: np.uint64, r: np.uint64) -> np.uint64:
    return (x << r) | (x >> (np.uint64(64) - r))


@njit(inline=True)
def _mix16(d: Any, p: int, k: Any, s: int) -> np.uint64:
    """mix16B: the 16 input bytes at ``d[p]`` with the 16 secret bytes at ``k[s]``."""
    return _fold(le64(d, p) ^ le64(k, s), le64(d, p + 8) ^ le64(k, s + 8))


@njit()
def _long(d: Any, p: int, n: int, k: Any) -> np.uint64:
    """XXH3-64 of the ``n > 240`` bytes ``d[p : p + n]``, secret ``k``."""
    a0, a1, a2, a3 = _P32_3, _P64_1, _P64_2, _P64_3
    a4, a5, a6, a7 = _P64_4, _P32_2, _P64_5, _P32_1
    blocks = (n - 1) // _BLOCK
    stripes_last = ((n - 1) - blocks * _BLOCK) // _STRIPE
    for b in range(blocks + 1):
        stripes = _STRIPES_PER_BLOCK if b < blocks else stripes_last + 1
        for stripe in range(stripes):
            if b == blocks and stripe == stripes_last:  # the last stripe, read from the end
                q = p + n - _STRIPE
                s = 192 - _STRIPE - 7
            else:
                q = p + b * _BLOCK + stripe * _STRIPE
                s = stripe * 8
            v0, v1, v2, v3 = le64(d, q), le64(d, q + 8), le64(d, q + 16), le64(d, q + 24)
            v4, v5, v6, v7 = le64(d, q + 32), le64(d, q + 40), le64(d, q + 48), le64(d, q + 56)
            x0, x1 = v0 ^ le64(k, s), v1 ^ le64(k, s + 8)
            x2, x3 = v2 ^ le64(k, s + 16), v3 ^ le64(k, s + 24)
            x4, x5 = v4 ^ le64(k, s + 32), v5 ^ le64(k, s + 40)
            x6, x7 = v6 ^ le64(k, s + 48), v7 ^ le64(k, s + 56)
            # acc[i ^ 1] += value[i]; acc[i] += lo32(key[i]) * hi32(key[i])
            a0 += v1 + (x0 & _LO32) * (x0 >> _U32)
            a1 += v0 + (x1 & _LO32) * (x1 >> _U32)
            a2 += v3 + (x2 & _LO32) * (x2 >> _U32)
            a3 += v2 + (x3 & _LO32) * (x3 >> _U32)
            a4 += v5 + (x4 & _LO32) * (x4 >> _U32)
            a5 += v4 + (x5 & _LO32) * (x5 >> _U32)
            a6 += v7 + (x6 & _LO32) * (x6 >> _U32)
            a7 += v6 + (x7 & _LO32) * (x7 >> _U32)
        if b < blocks:  # scramble after every full block
            s = 192 - _STRIPE
            a0 = ((a0 ^ (a0 >> _U47)) ^ le64(k, s)) * _P32_1
            a1 = ((a1 ^ (a1 >> _U47)) ^ le64(k, s + 8)) * _P32_1
            a2 = ((a2 ^ (a2 >> _U47)) ^ le64(k, s + 16)) * _P32_1
            a3 = ((a3 ^ (a3 >> _U47)) ^ le64(k, s + 24)) * _P32_1
            a4 = ((a4 ^ (a4 >> _U47)) ^ le64(k, s + 32)) * _P32_1
            a5 = ((a5 ^ (a5 >> _U47)) ^ le64(k, s + 40)) * _P32_1
            a6 = ((a6 ^ (a6 >> _U47)) ^ le64(k, s + 48)) * _P32_1
            a7 = ((a7 ^ (a7 >> _U47)) ^ le64(k, s + 56)) * _P32_1
    m = 11  # mergeAccs
    result = np.uint64(n) * _P64_1
    result += _fold(a0 ^ le64(k, m), a1 ^ le64(k, m + 8))
    result += _fold(a2 ^ le64(k, m + 16), a3 ^ le64(k, m + 24))
    result += _fold(a4 ^ le64(k, m + 32), a5 ^ le64(k, m + 40))
    result += _fold(a6 ^ le64(k, m + 48), a7 ^ le64(k, m + 56))
    return _avalanche(result)


@njit(inline=True)
def hash_at(d: Any, p: int, n: int, k: Any) -> np.uint64:
    """XXH3-64 (seed 0) of the ``n`` bytes ``d[p : p + n]`` (a uint8 array), with the secret
    ``k`` (:data:`SECRET`). Reads only those ``n`` bytes."""
    length = np.uint64(n)
    if n <= 16:
        if n > 8:
            lo = le64(d, p) ^ (le64(k, 24) ^ le64(k, 32))
            hi = le64(d, p + n - 8) ^ (le64(k, 40) ^ le64(k, 48))
            return _avalanche(length + _swap64(lo) + hi + _fold(lo, hi))
        if n >= 4:
            first = le32(d, p)
            last = le32(d, p + n - 4)
            keyed = (last + (first << _U32)) ^ (le64(k, 8) ^ le64(k, 16))
            # rrmxmx
            keyed ^= _rotl(keyed, np.uint64(49)) ^ _rotl(keyed, _U24)
            keyed *= _MX2
            keyed ^= (keyed >> _U35) + length
            keyed *= _MX2
            return keyed ^ (keyed >> _U28)
        if n > 0:
            c1 = np.uint64(d[p])
            c2 = np.uint64(d[p + (n >> 1)])
            c3 = np.uint64(d[p + n - 1])
            combined = (c1 << _U16) | (c2 << _U24) | c3 | (length << _U8)
            return _avalanche64(combined ^ (le32(k, 0) ^ le32(k, 4)))
        return _avalanche64(le64(k, 56) ^ le64(k, 64))
    if n <= 128:
        acc = length * _P64_1
        if n > 32:
            if n > 64:
                if n > 96:
                    acc += _mix16(d, p + 48, k, 96)
                    acc += _mix16(d, p + n - 64, k, 112)
                acc += _mix16(d, p + 32, k, 64)
                acc += _mix16(d, p + n - 48, k, 80)
            acc += _mix16(d, p + 16, k, 32)
            acc += _mix16(d, p + n - 32, k, 48)
        acc += _mix16(d, p, k, 0)
        acc += _mix16(d, p + n - 16, k, 16)
        return _avalanche(acc)
    if n <= 240:
        acc = length * _P64_1
        for i in range(8):
            acc += _mix16(d, p + 16 * i, k, 16 * i)
        acc = _avalanche(acc)
        for i in range(8, n // 16):
            acc += _mix16(d, p + 16 * i, k, 16 * (i - 8) + 3)
        acc += _mix16(d, p + n - 16, k, 136 - 17)
        return _avalanche(acc)
    return _long(d, p, n, k)


@njit()
def _hash_many(
    data: NDArray[np.uint8], offsets: NDArray[np.int64], secret: NDArray[np.uint8]
) -> NDArray[np.uint64]:
    n = offsets.size - 1
    out = np.empty(n, dtype=np.uint64)
    data = unowned(data)  # for hash_at: see permindex.jit_numba.unowned
    secret = unowned(secret)
    for i in range(n):
        out[i] = hash_at(data, offsets[i], offsets[i + 1] - offsets[i], secret)
    return out


def xxh3_64(data: bytes | NDArray[np.uint8]) -> int:
    """XXH3-64 (seed 0) of ``data``: equal to ``xxhash.xxh3_64_intdigest(data)``. O(len(data))
    (one kernel call: for many small inputs use :func:`xxh3_64_many`)."""
    array = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    return int(_hash_many(array, np.array([0, array.size], dtype=np.int64), SECRET)[0])


def xxh3_64_many(data: NDArray[np.uint8], offsets: NDArray[np.int64]) -> NDArray[np.uint64]:
    """XXH3-64 (seed 0) of each ``data[offsets[i] : offsets[i + 1]]``: an (n,) uint64 array for
    (n + 1,) int64 ``offsets`` (non-decreasing, within ``data``; not checked). O(n + bytes)."""
    return _hash_many(data, offsets, SECRET)  # type: ignore[no-any-return]
