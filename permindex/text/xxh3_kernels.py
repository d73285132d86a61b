"""XXH3-64 (seed 0, the default secret) as numba kernels over byte arrays, bit-exact with
``xxhash.xxh3_64_intdigest`` (xxHash 0.8) for every input length: 0, 1-3, 4-8, 9-16, 17-128,
129-240 and the long form above 240 bytes (stripes of 64 bytes, blocks of 16 stripes with a
scramble after each, the last stripe read from the end).

Source: the XXH3 specification, Yann Collet, ``doc/xxhash_spec.md`` and ``xxhash.h`` of
github.com/Cyan4973/xxHash: the constants and the 192-byte default secret below are that
specification's. The code is a scalar transcription written for this project: every value is a
``uint64`` with wrap-around arithmetic, and the 64 x 64 -> 128-bit product is computed from
32-bit halves. Bytes are read through their addresses (numba intrinsics: one unaligned
little-endian load, byte-swapped on a big-endian machine), so that the helpers take scalars only
and a call costs no reference counting; every array read that way is an argument of the entry
kernel, kept alive by its caller for the whole call.

Import this module only where a kernel is needed: it imports numba (see :mod:`permindex.jit`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final, cast

import numpy as np
from numpy.typing import NDArray

from permindex.jit_numba import njit

from llvmlite import ir  # type: ignore[import-untyped]  # isort: skip  (numba's dependency)
from numba import types  # isort: skip
from numba.extending import intrinsic  # isort: skip

__all__ = ["SECRET", "address", "xxh3_64", "xxh3_64_many"]

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
assert SECRET.size == 192

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

_U8 = np.uint64(8)
_U16 = np.uint64(16)
_U24 = np.uint64(24)
_U28 = np.uint64(28)
_U29 = np.uint64(29)
_U32 = np.uint64(32)
_U33 = np.uint64(33)
_U35 = np.uint64(35)
_U37 = np.uint64(37)
_U47 = np.uint64(47)

_BIG_ENDIAN: Final = sys.byteorder == "big"
_STRIPE: Final = 64  # bytes per stripe of the long form
_STRIPES_PER_BLOCK: Final = (192 - 64) // 8  # 16
_BLOCK: Final = _STRIPE * _STRIPES_PER_BLOCK  # 1024 bytes


@intrinsic
def _load64_ir(typingctx: Any, address: Any) -> Any:
    """The little-endian 64-bit word at the (unaligned) byte ``address``."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        value = builder.load(pointer, align=1)
        if _BIG_ENDIAN:
            value = builder.bswap(value)
        return value

    return types.uint64(address), codegen


def _load32_codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
    """IR of a little-endian 32-bit load at an (unaligned) byte address, zero-extended to 64
    bits (the two intrinsics below differ only in the signedness of their result type)."""
    pointer = builder.inttoptr(args[0], ir.IntType(32).as_pointer())
    value = builder.load(pointer, align=1)
    if _BIG_ENDIAN:
        value = builder.bswap(value)
    return builder.zext(value, ir.IntType(64))


@intrinsic
def _load32_ir(typingctx: Any, address: Any) -> Any:
    """The little-endian 32-bit word at the (unaligned) byte ``address``, as a uint64."""
    return types.uint64(address), _load32_codegen


@intrinsic
def _load32i_ir(typingctx: Any, address: Any) -> Any:
    """The little-endian 32-bit word at the (unaligned) byte ``address``, as an int64."""
    return types.int64(address), _load32_codegen


@intrinsic
def _load8_ir(typingctx: Any, address: Any) -> Any:
    """The byte at ``address``, as an int64."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        return builder.zext(builder.load(pointer), ir.IntType(64))

    return types.int64(address), codegen


@intrinsic
def _store8_ir(typingctx: Any, address: Any, value: Any) -> Any:
    """Store the low byte of ``value`` at ``address``."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = builder.inttoptr(args[0], ir.IntType(8).as_pointer())
        builder.store(builder.trunc(args[1], ir.IntType(8)), pointer)
        return context.get_dummy_value()

    return types.void(address, value), codegen


@intrinsic
def _store64_ir(typingctx: Any, address: Any, value: Any) -> Any:
    """Store the 64-bit word ``value`` at the (unaligned) ``address``, in the machine's order
    (a copy of what :func:`_load64` read from there, whatever the byte order)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        pointer = builder.inttoptr(args[0], ir.IntType(64).as_pointer())
        value = args[1]
        if _BIG_ENDIAN:
            value = builder.bswap(value)
        builder.store(value, pointer, align=1)
        return context.get_dummy_value()

    return types.void(address, types.uint64), codegen


@intrinsic
def _fold_ir(typingctx: Any, a: Any, b: Any) -> Any:
    """Low 64 bits XOR high 64 bits of the 128-bit product ``a * b`` (one 64 x 64 -> 128-bit
    multiply instruction where the machine has one)."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        wide = ir.IntType(128)
        product = builder.mul(builder.zext(args[0], wide), builder.zext(args[1], wide))
        low = builder.trunc(product, ir.IntType(64))
        high = builder.trunc(builder.lshr(product, ir.Constant(wide, 64)), ir.IntType(64))
        return builder.xor(low, high)

    return types.uint64(types.uint64, types.uint64), codegen


@intrinsic
def _trailing_zeros_ir(typingctx: Any, value: Any) -> Any:
    """The number of trailing zero bits of a uint64 (64 for 0), as an int64."""

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.cttz(args[0], ir.Constant(ir.IntType(1), 0))

    return types.int64(types.uint64), codegen


# The intrinsics as mypy sees them (numba compiles the same objects). Addresses are int64.
_load64 = cast("Callable[[int], np.uint64]", _load64_ir)
_load32 = cast("Callable[[int], np.uint64]", _load32_ir)
_load32i = cast("Callable[[int], int]", _load32i_ir)
_load8 = cast("Callable[[int], int]", _load8_ir)
_store8 = cast("Callable[[int, int], None]", _store8_ir)
_store64 = cast("Callable[[int, np.uint64], None]", _store64_ir)
_fold = cast("Callable[[np.uint64, np.uint64], np.uint64]", _fold_ir)
trailing_zeros = cast("Callable[[np.uint64], int]", _trailing_zeros_ir)


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
def _swap64(x: np.uint64) -> np.uint64:
    out = np.uint64(0)
    for _ in range(8):
        out = (out << _U8) | (x & np.uint64(0xFF))
        x >>= _U8
    return out


@njit(inline=True)
def _mix16(p: int, k: int) -> np.uint64:
    """mix16B: 16 input bytes at address ``p`` with 16 secret bytes at ``k``."""
    return _fold(_load64(p) ^ _load64(k), _load64(p + 8) ^ _load64(k + 8))


@njit()
def _long(p: int, n: int, k: int) -> np.uint64:
    """XXH3-64 of the ``n > 240`` bytes at address ``p``, secret at ``k``."""
    a0, a1, a2, a3 = _P32_3, _P64_1, _P64_2, _P64_3
    a4, a5, a6, a7 = _P64_4, _P32_2, _P64_5, _P32_1
    blocks = (n - 1) // _BLOCK
    stripes_last = ((n - 1) - blocks * _BLOCK) // _STRIPE
    for b in range(blocks + 1):
        stripes = _STRIPES_PER_BLOCK if b < blocks else stripes_last + 1
        for stripe in range(stripes):
            if b == blocks and stripe == stripes_last:  # the last stripe, read from the end
                q = p + n - _STRIPE
                s = k + 192 - _STRIPE - 7
            else:
                q = p + b * _BLOCK + stripe * _STRIPE
                s = k + stripe * 8
            v0, v1, v2, v3 = _load64(q), _load64(q + 8), _load64(q + 16), _load64(q + 24)
            v4, v5, v6, v7 = _load64(q + 32), _load64(q + 40), _load64(q + 48), _load64(q + 56)
            x0, x1 = v0 ^ _load64(s), v1 ^ _load64(s + 8)
            x2, x3 = v2 ^ _load64(s + 16), v3 ^ _load64(s + 24)
            x4, x5 = v4 ^ _load64(s + 32), v5 ^ _load64(s + 40)
            x6, x7 = v6 ^ _load64(s + 48), v7 ^ _load64(s + 56)
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
            s = k + 192 - _STRIPE
            a0 = ((a0 ^ (a0 >> _U47)) ^ _load64(s)) * _P32_1
            a1 = ((a1 ^ (a1 >> _U47)) ^ _load64(s + 8)) * _P32_1
            a2 = ((a2 ^ (a2 >> _U47)) ^ _load64(s + 16)) * _P32_1
            a3 = ((a3 ^ (a3 >> _U47)) ^ _load64(s + 24)) * _P32_1
            a4 = ((a4 ^ (a4 >> _U47)) ^ _load64(s + 32)) * _P32_1
            a5 = ((a5 ^ (a5 >> _U47)) ^ _load64(s + 40)) * _P32_1
            a6 = ((a6 ^ (a6 >> _U47)) ^ _load64(s + 48)) * _P32_1
            a7 = ((a7 ^ (a7 >> _U47)) ^ _load64(s + 56)) * _P32_1
    m = k + 11  # mergeAccs
    result = np.uint64(n) * _P64_1
    result += _fold(a0 ^ _load64(m), a1 ^ _load64(m + 8))
    result += _fold(a2 ^ _load64(m + 16), a3 ^ _load64(m + 24))
    result += _fold(a4 ^ _load64(m + 32), a5 ^ _load64(m + 40))
    result += _fold(a6 ^ _load64(m + 48), a7 ^ _load64(m + 56))
    return _avalanche(result)


@njit(inline=True)
def _hash(p: int, n: int, k: int) -> np.uint64:
    """XXH3-64 (seed 0) of the ``n`` bytes at address ``p``, with the secret at address ``k``
    (the default one: :data:`SECRET`). Addresses are int64; the caller keeps the arrays alive.
    """
    length = np.uint64(n)
    if n <= 16:
        if n > 8:
            lo = _load64(p) ^ (_load64(k + 24) ^ _load64(k + 32))
            hi = _load64(p + n - 8) ^ (_load64(k + 40) ^ _load64(k + 48))
            return _avalanche(length + _swap64(lo) + hi + _fold(lo, hi))
        if n >= 4:
            first = _load32(p)
            last = _load32(p + n - 4)
            keyed = (last + (first << _U32)) ^ (_load64(k + 8) ^ _load64(k + 16))
            # rrmxmx
            keyed ^= _rotl(keyed, np.uint64(49)) ^ _rotl(keyed, _U24)
            keyed *= _MX2
            keyed ^= (keyed >> _U35) + length
            keyed *= _MX2
            return keyed ^ (keyed >> _U28)
        if n > 0:
            c1 = np.uint64(_load8(p))
            c2 = np.uint64(_load8(p + (n >> 1)))
            c3 = np.uint64(_load8(p + n - 1))
            combined = (c1 << _U16) | (c2 << _U24) | c3 | (length << _U8)
            return _avalanche64(combined ^ (_load32(k) ^ _load32(k + 4)))
        return _avalanche64(_load64(k + 56) ^ _load64(k + 64))
    if n <= 128:
        acc = length * _P64_1
        if n > 32:
            if n > 64:
                if n > 96:
                    acc += _mix16(p + 48, k + 96)
                    acc += _mix16(p + n - 64, k + 112)
                acc += _mix16(p + 32, k + 64)
                acc += _mix16(p + n - 48, k + 80)
            acc += _mix16(p + 16, k + 32)
            acc += _mix16(p + n - 32, k + 48)
        acc += _mix16(p, k)
        acc += _mix16(p + n - 16, k + 16)
        return _avalanche(acc)
    if n <= 240:
        acc = length * _P64_1
        for i in range(8):
            acc += _mix16(p + 16 * i, k + 16 * i)
        acc = _avalanche(acc)
        for i in range(8, n // 16):
            acc += _mix16(p + 16 * i, k + 16 * (i - 8) + 3)
        acc += _mix16(p + n - 16, k + 136 - 17)
        return _avalanche(acc)
    return _long(p, n, k)


@njit()
def address(array: NDArray[Any]) -> int:
    """The address of ``array``'s first byte, as an int64 (for :func:`_hash`)."""
    return int(array.ctypes.data)


@njit()
def _hash_many(
    data: NDArray[np.uint8], offsets: NDArray[np.int64], secret: NDArray[np.uint8]
) -> NDArray[np.uint64]:
    n = offsets.size - 1
    out = np.empty(n, dtype=np.uint64)
    p = address(data)
    k = address(secret)
    for i in range(n):
        out[i] = _hash(p + offsets[i], offsets[i + 1] - offsets[i], k)
    return out


@njit()
def _hash_one(data: NDArray[np.uint8], secret: NDArray[np.uint8]) -> np.uint64:
    return _hash(address(data), data.size, address(secret))


def xxh3_64(data: bytes | NDArray[np.uint8]) -> int:
    """XXH3-64 (seed 0) of ``data``: equal to ``xxhash.xxh3_64_intdigest(data)``. O(len(data))
    (one kernel call: for many small inputs use :func:`xxh3_64_many`)."""
    array = np.frombuffer(data, dtype=np.uint8) if isinstance(data, bytes) else data
    return int(_hash_one(array, SECRET))


def xxh3_64_many(data: NDArray[np.uint8], offsets: NDArray[np.int64]) -> NDArray[np.uint64]:
    """XXH3-64 (seed 0) of each ``data[offsets[i] : offsets[i + 1]]``: an (n,) uint64 array for
    (n + 1,) int64 ``offsets`` (non-decreasing, within ``data``; not checked)."""
    return _hash_many(data, offsets, SECRET)
