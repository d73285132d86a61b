"""numba and permindex's kernel tools (see :mod:`permindex.jit` for the options and the cache):
:func:`njit`, and the intrinsics :func:`popcount64`, :func:`address_pointer`, :func:`prefetch`
and :func:`unowned`. Importing this
module imports numba (after setting its cache directory)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from permindex.jit import configure_cache

__all__ = ["address_pointer", "njit", "numba", "popcount64", "prefetch", "unowned"]

F = TypeVar("F", bound=Callable[..., Any])

configure_cache()

# NUMBA_CACHE_DIR must be set before numba reads its configuration: kernel modules get numba
# from here (``from permindex.jit_numba import numba``), never by importing it first themselves.
import numba  # noqa: E402
from llvmlite import ir  # noqa: E402
from numba import types  # noqa: E402
from numba.core import cgutils  # noqa: E402
from numba.extending import intrinsic  # noqa: E402


def njit(
    signature: Any = None, *, inline: bool = False, keep_gil: bool = False
) -> Callable[[F], F]:
    """``numba.njit`` with permindex's options: ``cache=True, nogil=True``, no fastmath, no
    bounds checks. ``signature``: an explicit numba signature (or a list of them), compiled when
    the kernel's module is imported; None compiles on the first call for the argument types seen.
    ``inline=True``: a small helper that numba inlines into the kernels that call it
    (``inline="always"``), where a call would cost more than its body. ``keep_gil=True``
    (``nogil=False``): a kernel of a few microseconds called between others, for which letting
    the GIL go and taking it back costs more than it gains (see
    :mod:`permindex.index.match_kernels`).
    """

    def decorate(function: F) -> F:
        options: dict[str, Any] = {"cache": True, "nogil": not keep_gil, "boundscheck": False}
        if inline:
            options["inline"] = "always"
        if signature is None:
            compiled = numba.njit(**options)(function)
        else:
            compiled = numba.njit(signature, **options)(function)
        return compiled  # type: ignore[no-any-return]

    return decorate


@intrinsic
def popcount64(typingctx: Any, value: Any) -> Any:
    """In a kernel: the number of set bits of a uint64 (LLVM ``ctpop``, one instruction on
    x86-64 with POPCNT), as uint64."""
    sig = types.uint64(types.uint64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.ctpop(args[0])

    return sig, codegen


@intrinsic
def address_pointer(typingctx: Any, address: Any) -> Any:
    """In a kernel: an int64 memory address as a void pointer, for ``numba.carray(pointer,
    size, dtype)`` (views of arrays the caller keeps alive, passed as addresses in an int64
    plan instead of one argument each: each array argument costs about 0.1 us of dispatch)."""
    sig = types.voidptr(types.int64)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.inttoptr(args[0], cgutils.voidptr_t)

    return sig, codegen


@intrinsic
def prefetch(typingctx: Any, array: Any, index: Any) -> Any:
    """In a kernel: a hint to bring ``array[index]`` (a 1-D array) into the cache for a read
    soon (LLVM ``llvm.prefetch``, locality 3); no effect on results, no fault on a bad index."""
    if not isinstance(array, types.Array) or not isinstance(index, types.Integer):
        return None
    sig = types.void(array, index)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        array_type = signature.args[0]
        view = context.make_array(array_type)(context, builder, args[0])
        offset = builder.mul(
            args[1],
            context.get_constant(
                signature.args[1], context.get_abi_sizeof(context.get_data_type(array_type.dtype))
            ),
        )
        address = builder.add(builder.ptrtoint(view.data, offset.type), offset)
        pointer = builder.inttoptr(address, cgutils.voidptr_t)
        i32 = ir.IntType(32)
        function = cgutils.get_or_insert_function(  # type: ignore[no-untyped-call]
            builder.module,
            ir.FunctionType(ir.VoidType(), [cgutils.voidptr_t, i32, i32, i32]),
            "llvm.prefetch.p0",
        )
        builder.call(function, [pointer, i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def unowned(typingctx: Any, array: Any) -> Any:
    """In a kernel: the same array (data, shape, strides) without its owner (the NRT meminfo
    and the Python object it came from), for arrays the caller keeps alive while the kernel
    runs. numba takes and drops a reference to every array passed to a function, inlined
    helpers included, with an atomic increment and decrement of its meminfo (NRT_incref,
    NRT_decref): ten arrays passed to a helper per bucket cost more than the bucket's scan
    (the batch lookup kernel ran 1.7-1.8x as fast on views like these: benchmarks/README.md).
    A view without an owner costs a null check instead. Must not outlive the array: never
    return it, store it, or take it of an array the kernel made and may drop first."""
    if not isinstance(array, types.Array):
        return None
    sig = array(array)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        array_type = signature.args[0]
        source = context.make_array(array_type)(context, builder, args[0])
        view = context.make_array(array_type)(context, builder)
        context.populate_array(
            view,
            data=source.data,
            shape=source.shape,
            strides=source.strides,
            itemsize=source.itemsize,
            meminfo=None,
        )
        return view._getvalue()

    return sig, codegen
