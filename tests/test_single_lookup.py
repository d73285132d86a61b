"""Single queries (Index.query) through the C extension's SingleLookup
(permindex/index/_match_lists.c): the kernel called through its C entry point
(lookup_kernels.lookup_packed_c) and its one match made in C. The answers equal brute force
and those of the path without the extension (numba's dispatch, the Match made in Python),
through adds, removals, compactions and memtables; bad arguments are refused."""

from __future__ import annotations

import ctypes
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from permindex import Index, Match
from permindex.index import lookup, match

needs_compiled = pytest.mark.skipif(
    not match.COMPILED_MATCH_LISTS,
    reason="the C extension permindex.index._match_lists was not built (no C compiler at "
    "install): single queries take the numba path alone, tested everywhere else",
)
#: Single queries with the extension (where built), and without it.
PATHS: list[Any] = [
    pytest.param(True, id="c-entry-point", marks=needs_compiled),
    pytest.param(False, id="numba-dispatch"),
]
KEYS = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=5)


def brute_force(stored: dict[str, int], query: int, k: int) -> list[Match]:
    """Every stored key within k of ``query``, sorted by (distance, key)."""
    found = [
        Match(key, fp, (fp ^ query).bit_count())
        for key, fp in stored.items()
        if (fp ^ query).bit_count() <= k
    ]
    return sorted(found, key=lambda m: (m.distance, m.key))


@pytest.fixture
def single_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    compiled: bool = request.param
    if not compiled:
        monkeypatch.setattr(lookup, "SingleLookup", None)
    return compiled


@pytest.mark.parametrize("single_path", PATHS, indirect=True)
# the fixture's choice of path holds for every example (nothing in it to reset)
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keys=st.lists(KEYS, min_size=1, max_size=60, unique=True),
    seed=st.integers(0, 2**32 - 1),
    removed=st.integers(0, 59),
    k=st.integers(0, 3),
)
def test_single_queries_answer_as_brute_force(
    single_path: bool, keys: list[str], seed: int, removed: int, k: int
) -> None:
    """Single queries with no, one and several matches (near-duplicate groups), any text as
    keys, some keys removed (a liveness mask, then a compaction), some added after the
    build (memtables), each k: the answers of brute force."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**64 - 1, 4, dtype=np.uint64, endpoint=True)
    flips = rng.integers(0, 64, (len(keys), 2))
    fps = [int(base[i % 4]) ^ (1 << int(a)) ^ (1 << int(b)) for i, (a, b) in enumerate(flips)]
    half = len(keys) // 2 + 1
    index = Index(3, memtable_limit=4, compaction_min=2)
    index.add_many(keys[:half], np.array(fps[:half], dtype=np.uint64))
    index.merge_all_runs(min_share=0.0)  # frozen runs, no memtable: the C path's case
    stored = dict(zip(keys[:half], fps[:half], strict=True))
    queries = [*(int(v) for v in base), *(fps[i] ^ 1 for i in range(0, len(keys), 3))]
    queries.append(int(rng.integers(0, 2**64 - 1, dtype=np.uint64, endpoint=True)))
    for q in queries:
        assert index.query(q, k) == brute_force(stored, q, k)
    for key in keys[: removed % half]:
        index.remove(key)
        del stored[key]
    for q in queries:
        assert index.query(q, k) == brute_force(stored, q, k)
    for key, fp in zip(keys[half:], fps[half:], strict=True):
        index.add(key, fp)
        stored[key] = fp
    for q in queries:
        assert index.query(q, k) == brute_force(stored, q, k)
        assert index.query(q, k, limit=1) == brute_force(stored, q, k)[:1]
    index.merge_all_runs(min_share=0.0)
    for q in queries:
        assert index.query(q, k) == brute_force(stored, q, k)
    index._check()


@pytest.mark.parametrize("single_path", PATHS, indirect=True)
def test_single_queries_at_scale_answer_as_brute_force(single_path: bool) -> None:
    """10^5 random fingerprints with planted near-duplicates: queries with no match, one,
    two, and more than the kernel's output holds at first; one non-ASCII key in ten."""
    rng = np.random.default_rng(11)
    n = 100_000
    fps = rng.integers(0, 2**64 - 1, n, dtype=np.uint64, endpoint=True)
    fps[:1000] = fps[1000:2000] ^ np.uint64(0b11)
    fps[2000:2300] = fps[5000] ^ (np.uint64(1) << rng.integers(0, 64, 300).astype(np.uint64))
    keys = [f"clé-{i}-ü" if i % 10 == 0 else f"k{i}" for i in range(n)]
    index = Index.from_arrays(keys, fps)
    queries = [
        *fps[:200].tolist(),  # two matches
        *(fps[3000:3200] ^ np.uint64(1 << 40)).tolist(),  # one match, at distance 1
        int(fps[5000]),  # 301 matches
        *rng.integers(0, 2**63, 200).tolist(),  # none
    ]
    for q in queries:
        near = np.flatnonzero(np.bitwise_count(fps ^ np.uint64(q)) <= 3).tolist()
        expected = sorted(
            (Match(keys[i], int(fps[i]), int(fps[i] ^ np.uint64(q)).bit_count()) for i in near),
            key=lambda m: (m.distance, m.key),
        )
        assert index.query(q) == expected
    assert len(index.query(int(fps[5000]))) > 256  # past the output's first capacity


def _capsule(name: bytes) -> object:
    """A capsule of a C pointer (to nothing callable) under ``name``."""
    new_capsule = ctypes.pythonapi.PyCapsule_New
    new_capsule.restype = ctypes.py_object
    new_capsule.argtypes = (ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p)
    return new_capsule(ctypes.addressof(_NOT_A_KERNEL), name, None)


_NOT_A_KERNEL = ctypes.c_int64(0)
_OTHER_NAME = b"another.capsule"


@needs_compiled
def test_single_lookup_checks_its_arguments() -> None:
    from permindex.index._match_lists import SingleLookup
    from permindex.index.key_rows import KeyRows

    kernel = lookup.packed_kernel_capsule()
    fps = np.zeros(8, dtype=np.uint64)
    packed = np.zeros(10, dtype=np.int64)
    packed[3], packed[5] = fps.ctypes.data, fps.size  # an empty plan over fps
    keys = KeyRows()
    SingleLookup(kernel, packed, fps, keys, Match)  # accepted
    with pytest.raises(TypeError, match="capsule"):
        SingleLookup(object(), packed, fps, keys, Match)
    with pytest.raises(TypeError, match="capsule"):
        SingleLookup(_capsule(_OTHER_NAME), packed, fps, keys, Match)
    with pytest.raises(TypeError, match="class defined in Python over it"):
        SingleLookup(kernel, packed, fps, keys, list)  # type: ignore[arg-type]
    # a C subclass of tuple frees its instances by a layout of its own (a struct sequence
    # reads its field count past the three items): refused, as a Python class over one is
    with pytest.raises(TypeError, match="class defined in Python over it"):
        SingleLookup(kernel, packed, fps, keys, time.struct_time)
    SingleLookup(kernel, packed, fps, keys, tuple)  # accepted, as classes over tuple are
    with pytest.raises(TypeError, match="8-byte integers"):
        SingleLookup(kernel, packed.astype(np.float64), fps, keys, Match)
    with pytest.raises(TypeError, match="8-byte integers"):
        SingleLookup(kernel, packed, fps.astype(np.int32), keys, Match)
    with pytest.raises(ValueError, match="not a writable plan"):
        SingleLookup(kernel, packed[:9].copy(), fps, keys, Match)  # shorter than its header
    other = np.zeros(8, dtype=np.uint64)
    with pytest.raises(ValueError, match="not a writable plan"):
        SingleLookup(kernel, packed, other, keys, Match)  # a plan over other fingerprints
    wrong_size = packed.copy()
    wrong_size[1] = 2  # two runs the array does not hold
    with pytest.raises(ValueError, match="not a writable plan"):
        SingleLookup(kernel, wrong_size, fps, keys, Match)
    frozen = packed.copy()
    frozen.flags.writeable = False
    with pytest.raises((ValueError, BufferError)):
        SingleLookup(kernel, frozen, fps, keys, Match)
    searcher = SingleLookup(kernel, packed, fps, keys, Match)
    assert searcher.lookup(2**64 - 1) == []  # no run to search
    with pytest.raises(OverflowError):
        searcher.lookup(2**64)
    with pytest.raises((OverflowError, TypeError)):
        searcher.lookup(-1)
    with pytest.raises(TypeError):
        searcher.lookup("1")  # type: ignore[arg-type]


@needs_compiled
def test_single_lookup_refuses_released_key_arrays() -> None:
    """The key store's arrays are read as buffers at each lookup that finds one match: a
    released memoryview (or a missing attribute) raises instead of reading freed memory."""
    from permindex.index._match_lists import SingleLookup

    class Keys:
        _off_mv: memoryview
        _data_mv: memoryview

    keys = Keys()
    keys._off_mv = np.array([0, 2, 4], dtype=np.int64).data
    keys._data_mv = memoryview(b"x\x00y\x00")
    fps = np.array([1, 0xFFFF_FFFF_0000_0000], dtype=np.uint64)
    rebuilt = Index.from_arrays(["a", "b"], fps)
    rebuilt.merge_all_runs(min_share=0.0)  # frozen runs only: what the plan searches
    assert rebuilt.query(1) == [Match("a", 1, 0)]
    plan = _plan_of(rebuilt)
    searcher = SingleLookup(lookup.packed_kernel_capsule(), plan, _fps_of(rebuilt), keys, Match)
    assert searcher.lookup(1) == [Match("x", 1, 0)]  # the keys object's arrays, as given
    keys._data_mv.release()
    with pytest.raises(ValueError, match="released"):
        searcher.lookup(1)
    del keys._data_mv
    with pytest.raises(AttributeError):
        searcher.lookup(1)
    keys._data_mv = np.zeros(4, dtype=np.int64).data
    with pytest.raises(TypeError, match="1-byte integers"):
        searcher.lookup(1)
    assert searcher.lookup(0x0000_FFFF_0000_FF00) == []  # no match: no key array read


def _plan_of(index: Index) -> np.ndarray:
    """The packed plan the index's single queries at its k use (a private probe of this
    private type's test: the plan's run addresses are trusted, so only the index makes one)."""
    fast = index._lookups._refresh_fast(index.k)
    return fast[1]


def _fps_of(index: Index) -> np.ndarray:
    return index._lookups.rows.fps


def test_a_fingerprint_of_an_int_subclass_is_its_value() -> None:
    """An int subclass as the query is taken as its value on every path (it failed an
    assertion where the Python path verified candidates: memtables, PERMINDEX_JIT=0)."""

    class Fingerprint(int):
        def __int__(self) -> int:
            return 0

    index = Index(3)
    index.add_many(["one", "two"], [1, 3])  # in the memtables
    expected = [Match("one", 1, 0), Match("two", 3, 1)]
    assert index.query(Fingerprint(1), k=1) == expected
    index.merge_all_runs(min_share=0.0)
    assert index.query(Fingerprint(1), k=1) == expected
