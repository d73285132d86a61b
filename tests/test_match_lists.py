"""The result lists of a batch lookup (permindex.index.match.match_lists): the optional C
extension (permindex/index/_match_lists.c) makes the same lists of the same objects as the
Python reference (match_lists_python), which is also the path where the extension was not
built; both refuse bad input with the same errors, and query_many gives the same answers either
way and against brute force."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import time
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from permindex import Index, Match
from permindex.index import match

Maker = Callable[..., list[list[Match]]]
#: The cases of the C extension skip where it was not built (.ci/run requires it where a C
#: compiler is at hand).
needs_compiled = pytest.mark.skipif(
    not match.COMPILED_MATCH_LISTS,
    reason="the C extension permindex.index._match_lists was not built (no C compiler at "
    "install): the Python path is tested alone",
)
IMPLEMENTATIONS: list[Any] = [
    pytest.param(match.match_lists_python, id="python"),
    pytest.param(match.match_lists, id="compiled", marks=needs_compiled),
]
#: query_many's makers: those, and (None) the keys decoded from the store's arrays as the
#: Matches are made, its path where the extension was built.
QUERY_MAKERS: list[Any] = [
    *IMPLEMENTATIONS,
    pytest.param(None, id="compiled-decoding", marks=needs_compiled),
]
#: Keys as a store may hold them: any text UTF-8 can encode (no lone surrogates), NUL too.
STORED_KEYS = st.text(alphabet=st.characters(exclude_categories=["Cs"]), max_size=6)


def stored(keys: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(offsets (r + 1,) int64, data (b,) uint8) of ``keys`` as KeyRows keeps them: each key's
    UTF-8 bytes and a NUL."""
    encoded = [key.encode("utf-8") + b"\x00" for key in keys]
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum([len(e) for e in encoded], out=offsets[1:])
    return offsets, np.frombuffer(b"".join(encoded), dtype=np.uint8).copy()


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, np.ndarray, list[str], np.ndarray, np.ndarray]:
    n = draw(st.integers(0, 40))
    m = draw(st.integers(0, 120)) if n else 0
    queries = np.sort(draw(hnp.arrays(np.int64, m, elements=st.integers(0, max(n - 1, 0)))))
    keys = draw(st.lists(st.text(max_size=6), min_size=m, max_size=m))
    fps = draw(hnp.arrays(np.uint64, m))
    distances = draw(hnp.arrays(np.uint8, m, elements=st.integers(0, 64)))
    return n, queries, keys, fps, distances


@needs_compiled
@settings(max_examples=150, deadline=None)
@given(batch=batches())
def test_compiled_lists_equal_the_reference(
    batch: tuple[int, np.ndarray, list[str], np.ndarray, np.ndarray],
) -> None:
    expected = match.match_lists_python(*batch)
    got = match.match_lists(*batch)
    assert got == expected
    assert type(got) is list and all(type(lst) is list for lst in got)
    assert all(type(m) is Match and type(m.fingerprint) is int for lst in got for m in lst)
    assert all(type(m.distance) is int for lst in got for m in lst)
    # fresh objects: a caller may change one list without changing another
    if len(got) > 1:
        got[0].append(Match("x", 1, 1))
        assert len(got[1]) == len(expected[1])


@pytest.mark.parametrize("make", IMPLEMENTATIONS)
def test_the_objects_are_counted_right(make: Maker) -> None:
    """Reference counts: the keys gain one reference per Match, lose them with the lists."""
    key = "".join(["refcounted-", "key"])  # not interned
    before = sys.getrefcount(key)
    queries = np.array([0, 0, 2], dtype=np.int64)
    lists = make(
        3,
        queries,
        [key, key, key],
        np.array([1, 2**64 - 1, 3], np.uint64),
        np.array([0, 1, 64], np.uint8),
    )
    assert lists == [[Match(key, 1, 0), Match(key, 2**64 - 1, 1)], [], [Match(key, 3, 64)]]
    assert sys.getrefcount(key) == before + 3
    del lists
    gc.collect()
    assert sys.getrefcount(key) == before


@needs_compiled
def test_a_match_of_a_str_key_is_left_to_reference_counting() -> None:
    """The C lists' Match of a str key is not tracked by the cyclic collector (a str and two
    ints cannot be in a cycle), nor a list of such Matches only (an empty one too); a Match
    whose key is a container stays tracked (it could be in a cycle), and so do its list and
    the outer list. The objects are freed alike."""
    cyclic: list[Any] = []
    keys: Any = ["str key", cyclic]  # a key that is not a str (no caller passes one)
    lists = match.match_lists(
        3,
        np.array([0, 1], np.int64),
        keys,
        np.array([1, 2], np.uint64),
        np.array([0, 1], np.uint8),
    )
    assert not gc.is_tracked(lists[0][0]) and gc.is_tracked(lists[1][0])
    assert not gc.is_tracked(lists[0]) and not gc.is_tracked(lists[2])  # str Matches; empty
    assert gc.is_tracked(lists[1]) and gc.is_tracked(lists)

    class Marker:
        pass

    marker = Marker()
    freed = weakref.ref(marker)
    cyclic.extend([lists, marker])  # a cycle through the tracked Match: the collector frees it
    del lists, cyclic, keys, marker
    gc.collect()
    assert freed() is None


@needs_compiled
def test_query_many_results_are_left_to_reference_counting() -> None:
    """A batch's lists and Matches are not tracked by the cyclic collector (Index.query_many's
    docstring): holding them, the collector has nothing of theirs to walk or promote, and a
    full collection finds none of them. Freed by reference counting when dropped."""
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64, 200, dtype=np.uint64, endpoint=False)
    index = Index.from_arrays([f"k{i}" for i in range(fps.size)], fps, k=3)
    queries = np.concatenate(
        [fps[:50], fps[:50] ^ np.uint64(1), rng.integers(0, 2**64, 20, dtype=np.uint64)]
    )
    results = index.query_many(queries)
    expected = [
        sorted((int(d), f"k{i}") for i, d in enumerate(np.bitwise_count(fps ^ q)) if d <= 3)
        for q in queries
    ]
    assert [[(m.distance, m.key) for m in lst] for lst in results] == expected
    assert sum(map(len, results)) >= 100 and results[0][0] == Match("k0", int(fps[0]), 0)
    assert not gc.is_tracked(results)
    assert not any(gc.is_tracked(lst) or any(map(gc.is_tracked, lst)) for lst in results)
    tracked = {id(obj) for obj in gc.get_objects()}
    assert id(results) not in tracked and id(results[0]) not in tracked
    # still ordinary lists: a caller may change them
    results[0].append(Match("x", 1, 1))
    assert len(results[0]) == 2 and len(results[1]) == 1

    class Marker:
        pass

    marker = Marker()
    freed = weakref.ref(marker)
    results[5].append(marker)  # type: ignore[arg-type]
    del results, marker
    assert freed() is None  # reference counting alone freed it, no collection ran


@needs_compiled
@settings(max_examples=150, deadline=None)
@given(batch=batches(), data=st.data())
def test_compiled_lists_decode_keys_as_the_reference(
    batch: tuple[int, np.ndarray, list[str], np.ndarray, np.ndarray], data: st.DataObject
) -> None:
    """The keys read from a store's arrays by row (match_lists_of_rows): the lists of the
    reference given the same keys decoded."""
    n, queries, keys, fps, distances = batch
    store = data.draw(st.lists(STORED_KEYS, min_size=1, max_size=20))
    picks = st.lists(st.integers(0, len(store) - 1), min_size=len(keys), max_size=len(keys))
    rows = np.array(data.draw(picks), dtype=np.int64)
    assert match.match_lists_of_rows is not None
    got = match.match_lists_of_rows(n, queries, (rows, *stored(store)), fps, distances)
    expected = match.match_lists_python(
        n, queries, [store[r] for r in rows.tolist()], fps, distances
    )
    assert got == expected
    assert all(type(m) is Match and type(m.key) is str for lst in got for m in lst)


@needs_compiled
def test_compiled_lists_refuse_keys_outside_the_store() -> None:
    make = match.match_lists_of_rows
    assert make is not None
    offsets, data = stored(["a", "bé", ""])
    for rows in ([0, 1, 3], [0, -1, 1], [0, 1, 2**40], [0, 1, 2**63 - 1], [-(2**63), 0, 1]):
        with pytest.raises(ValueError, match="outside"):
            make(*_args(keys=(np.array(rows, np.int64), offsets, data)))
    with pytest.raises(ValueError, match="outside"):  # offsets past the data
        make(*_args(keys=(np.array([0, 1, 1], np.int64), offsets, data[:3])))
    with pytest.raises(ValueError, match="differ in length"):
        make(*_args(keys=(np.array([0, 1], np.int64), offsets, data)))
    with pytest.raises(TypeError, match="8-byte integers"):
        make(*_args(keys=(np.array([0, 1, 1], np.int32), offsets, data)))
    with pytest.raises(UnicodeDecodeError):
        bad = data.copy()
        bad[0] = 0xFF  # "a" no longer UTF-8
        make(*_args(keys=(np.array([0, 1, 1], np.int64), offsets, bad)))
    got = make(*_args(keys=(np.array([2, 1, 0], np.int64), offsets, data)))
    assert got == [[Match("", 1, 0)], [Match("bé", 2, 1), Match("a", 3, 2)], []]


@needs_compiled
def test_compiled_lists_share_the_key_of_a_row_matched_many_times() -> None:
    """A row matched by many queries is decoded once, its str shared by its Matches (as
    KeyRows.keys shares it): one key of 1 KiB matched by 10,000 queries makes one str."""
    make = match.match_lists_of_rows
    assert make is not None
    offsets, data = stored(["x" * 1024, "other"])
    n = 10_000
    rows = np.zeros(n, dtype=np.int64)
    rows[::7] = 1
    lists = make(
        n,
        np.arange(n, dtype=np.int64),
        (rows, offsets, data),
        np.zeros(n, np.uint64),
        np.zeros(n, np.uint8),
    )
    keys = {id(m.key) for lst in lists for m in lst}
    assert len(keys) == 2 and lists[1][0].key == "x" * 1024 and lists[0][0].key == "other"


@needs_compiled
def test_compiled_lists_recheck_offsets_a_finaliser_changed() -> None:
    """A finaliser run by an allocation during the call changes the offsets after they were
    checked: the key is refused (ValueError), not read past the data. In a subprocess, so
    that a crash is a failure, not the end of the tests."""
    code = textwrap.dedent(
        """
        import gc
        import numpy as np
        from permindex.index import match
        data = np.frombuffer(b"a\\0b\\0", np.uint8).copy()
        offsets = np.array([0, 2, 4], np.int64)
        class Changer:
            def __del__(self):
                offsets[1] = 1 << 30
        a, b = Changer(), Changer()
        a.other, b.other = b, a
        del a, b
        gc.set_threshold(1)
        try:
            match.match_lists_of_rows(1, np.zeros(2, np.int64),
                (np.array([0, 1], np.int64), offsets, data),
                np.zeros(2, np.uint64), np.zeros(2, np.uint8))
        except ValueError as error:
            print("refused:", error)
        """
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "refused:" in done.stdout and "changed while read" in done.stdout


def _args(**change: Any) -> list[Any]:
    args: dict[str, Any] = {
        "n": 3,
        "queries": np.array([0, 1, 1], np.int64),
        "keys": ["a", "b", "c"],
        "fingerprints": np.array([1, 2, 3], np.uint64),
        "distances": np.array([0, 1, 2], np.uint8),
    }
    args.update(change)
    return list(args.values())


@pytest.mark.parametrize("make", IMPLEMENTATIONS)
@pytest.mark.parametrize(
    "change",
    [
        {"queries": np.array([1, 0, 1], np.int64)},  # not non-decreasing
        {"queries": np.array([0, 1, 3], np.int64)},  # beyond n
        {"queries": np.array([-1, 0, 1], np.int64)},  # negative
        {"keys": ["a", "b"]},  # lengths differ
        {"fingerprints": np.array([1, 2], np.uint64)},
        {"distances": np.array([0, 1, 2, 3], np.uint8)},
        {"n": 0},
    ],
)
def test_bad_input_is_refused(make: Maker, change: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="match_lists"):
        make(*_args(**change))


@needs_compiled
def test_the_extension_checks_its_arguments() -> None:
    from permindex.index._match_lists import match_lists

    with pytest.raises(TypeError, match="class defined in Python over it"):
        match_lists(list, *_args())  # type: ignore[arg-type]
    # a struct sequence frees its instances by its own field count, past the three items
    with pytest.raises(TypeError, match="class defined in Python over it"):
        match_lists(time.struct_time, *_args())
    with pytest.raises(TypeError, match="6 arguments"):
        match_lists(Match, 3)  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="keys must be a list"):
        match_lists(Match, *_args(keys=("a", "b", "c")))
    with pytest.raises(TypeError, match="8-byte integers"):
        match_lists(Match, *_args(queries=np.array([0, 1, 1], np.int32)))
    with pytest.raises(TypeError, match="8-byte integers"):
        match_lists(Match, *_args(queries=np.array([0, 1, 1], np.float64)))
    with pytest.raises(TypeError, match="8-byte integers"):
        match_lists(Match, *_args(fingerprints=np.array([1, 2, 3], np.int64)))
    with pytest.raises(TypeError, match="1-byte integers"):
        match_lists(Match, *_args(distances=np.array([0, 1, 2], np.int64)))
    with pytest.raises(TypeError, match="1-byte integers"):
        match_lists(Match, *_args(distances=np.array([0, 1, 2], np.int8)))
    # the byte order as numpy states it, and bytes-like objects, are accepted
    lists = match_lists(
        Match, *_args(queries=np.array([0, 1, 1], "<i8"), distances=b"\x00\x01\x02")
    )
    assert lists == [[Match("a", 1, 0)], [Match("b", 2, 1), Match("c", 3, 2)], []]
    with pytest.raises(ValueError, match="n must be >= 0"):
        match_lists(Match, *_args(n=-1))
    with pytest.raises((BufferError, ValueError), match="contiguous"):
        match_lists(Match, *_args(queries=np.array([0, 0, 1, 1, 1, 1], np.int64)[::2]))


@pytest.mark.parametrize("make", QUERY_MAKERS)
def test_query_many_answers_alike_and_as_brute_force(
    make: Maker | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """query_many on the kernels with each maker: the answers of brute force, sorted."""
    from permindex.index import query

    if make is not None:  # else the store's keys decoded in C as the Matches are made
        monkeypatch.setattr(query, "match_lists", make)
        monkeypatch.setattr(query, "match_lists_of_rows", None)
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64 - 1, 5_000, dtype=np.uint64, endpoint=True)
    fps[:500] = fps[500:1000] ^ np.uint64(0b101)  # near-duplicates at distance 2
    keys = [f"k{i}" for i in range(fps.size)]
    index = Index.from_arrays(keys, fps)
    queries = np.concatenate([fps[:300] ^ np.uint64(1), rng.integers(0, 2**63, 300, np.uint64)])
    got = index.query_many(queries)
    for q, matches in zip(queries.tolist(), got, strict=True):
        near = np.flatnonzero(np.bitwise_count(fps ^ np.uint64(q)) <= 3)
        expected = sorted(
            (
                Match(keys[i], int(fps[i]), int(np.bitwise_count(fps[i] ^ np.uint64(q))))
                for i in near.tolist()
            ),
            key=lambda m: (m.distance, m.key),
        )
        assert matches == expected
