"""numba and permindex's kernel tools (see :mod:`permindex.jit` for the options and the cache):
:func:`njit`, :func:`popcount64` (plain numba code), and the package's only hand-written
intrinsics, :func:`prefetch`, :func:`unowned` and :func:`call_void_function`. Importing this module
imports numba (after
setting its cache directory).

Why the three intrinsics stay (issue 40: an intrinsic only where a batch figure a user sees falls
by more than 1.3x without it; the figures of the A/B, one process, alternating rounds, are in
benchmarks/README.md, "Intrinsics: what stays and why"):

* :func:`prefetch` -- the batch lookup kernel overlaps the cache misses of several queries'
  directory entries, buckets and candidates' fingerprints; without it ``query_many`` (columns
  and Match lists) fell by more than 1.3x. It is used by the lookup kernels only: the key
  gather of :mod:`permindex.index.search.match_kernels` prefetched too, and without it the batches
  kept their speed, so it no longer does.
* :func:`unowned` -- numba takes and drops a reference to every array passed to a helper it
  inlines; the lookup kernel's helpers run per bucket and per candidate, and without views
  without an owner ``query_many`` fell by more than 1.3x (columns and Match lists). No way was
  found to write the scan without passing arrays to those helpers: a kernel compiled without
  numba's reference counting (``_nrt=False``) cannot make the run's array views it needs.
* :func:`call_void_function` -- calls CPython's ``PyObject_GC_UnTrack`` on the lists and
  :class:`~permindex.index.search.matches.Match` objects a batch returns
  (:func:`permindex.index.search.match_kernels.untrack_objects`), which hold only str and int:
  the cycle collector then never walks them, and a batch of Match lists no longer brings on the
  full collections (over every object of the host process) that made ``query_many`` more than
  1.3x slower without it. Only those objects change; the host's collector is left as it is.
  Python has no call for it, and a C extension is what issue 40 took out.

Gone: ``popcount64`` as LLVM's ``ctpop`` (the SWAR count compiles to the same ``popcnt``), and
``address_pointer`` (an int64 address as a pointer, for views of the runs' arrays made from
their addresses in an int64 plan): the runs' arrays now travel in one numba typed list, and the
batches kept their speed without it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from permindex.jit import configure_cache

__all__ = [
    "call_void_function",
    "entry_point",
    "njit",
    "numba",
    "popcount64",
    "prefetch",
    "unowned",
]

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
    :mod:`permindex.index.search.match_kernels`).
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


def entry_point(dispatcher: Any) -> Any:
    """The compiled function of a kernel with exactly one explicit signature, called without
    the dispatcher's type resolution (a fixed cost on every call): the caller must pass exactly
    the signature's types. The dispatcher itself when numba does not expose it."""
    try:
        (signature,) = dispatcher.signatures
        return dispatcher.overloads[signature].entry_point
    except (AttributeError, KeyError, ValueError):
        return dispatcher


_M1 = numba.uint64(0x5555555555555555)
_M2 = numba.uint64(0x3333333333333333)
_M4 = numba.uint64(0x0F0F0F0F0F0F0F0F)
_H01 = numba.uint64(0x0101010101010101)


@njit(inline=True)
def popcount64(x: Any) -> Any:
    """In a kernel: the number of set bits of a uint64, as uint64: the SWAR count (pairs,
    nibbles, bytes, then one multiply to add the bytes), which LLVM compiles to one ``popcnt``
    on x86-64 with POPCNT (numba compiles for the host CPU). No intrinsic: the A/B is in
    benchmarks/README.md."""
    x = x - ((x >> numba.uint64(1)) & _M1)
    x = (x & _M2) + ((x >> numba.uint64(2)) & _M2)
    x = (x + (x >> numba.uint64(4))) & _M4
    return (x * _H01) >> numba.uint64(56)


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
    (benchmarks/README.md has the A/B).
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


@intrinsic
def call_void_function(typingctx: Any, function: Any, argument: Any) -> Any:
    """In a kernel: call the C function ``void f(void *)`` whose address is the integer
    ``function``, with the integer address ``argument`` as its pointer. The caller guarantees
    both (the address from :mod:`ctypes`, an object's ``id()``) and holds the GIL when ``f``
    needs it (a ``keep_gil`` kernel)."""
    if not isinstance(function, types.Integer) or not isinstance(argument, types.Integer):
        return None
    sig = types.void(function, argument)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        kind = ir.FunctionType(ir.VoidType(), [cgutils.voidptr_t])
        target = builder.inttoptr(args[0], kind.as_pointer())
        builder.call(target, [builder.inttoptr(args[1], cgutils.voidptr_t)])
        return context.get_dummy_value()

    return sig, codegen
