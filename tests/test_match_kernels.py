"""The kernels that order a batch's matches and gather their keys
(permindex.index.search.match_kernels): equal to numpy (lexsort, unique, a ragged gather), and,
through ``Index.query_many``, the answers of brute force where rows repeat, keys tie and
buckets are large."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from oracles import brute_force_matches

from permindex import Index
from permindex.index.keys import kernels as key_kernels
from permindex.index.search import match_kernels
from permindex.index.search.lookup_kernels import BUCKET_LINES


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 50),
    data=st.data(),
)
def test_order_by_query_is_lexsort(n: int, data: st.DataObject) -> None:
    m = data.draw(st.integers(0, 300))
    queries = data.draw(hnp.arrays(np.int64, m, elements=st.integers(0, n - 1)))
    distances = data.draw(hnp.arrays(np.uint8, m, elements=st.integers(0, 64)))
    order = match_kernels.order_by_query(queries, distances, n)
    assert order.tolist() == np.lexsort((distances, queries)).tolist()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 50), data=st.data())
def test_arrange_matches_is_the_numpy_steps(n: int, data: st.DataObject) -> None:
    m = data.draw(st.integers(0, 300))
    queries = data.draw(hnp.arrays(np.int64, m, elements=st.integers(0, n - 1)))
    rows = data.draw(hnp.arrays(np.int64, m, elements=st.integers(0, 99)))
    distances = data.draw(hnp.arrays(np.int64, m, elements=st.integers(0, 64)))
    fps = data.draw(hnp.arrays(np.uint64, 100))
    found = np.ascontiguousarray(np.stack([queries, rows, distances], axis=1))
    q_out, rows_out, d_out, fps_out, ties = match_kernels.arrange_matches(found, n, fps)
    order = np.lexsort((distances, queries))
    assert q_out.tolist() == queries[order].tolist()
    assert rows_out.tolist() == rows[order].tolist()
    assert d_out.dtype == np.uint8 and d_out.tolist() == distances[order].tolist()
    assert fps_out.tolist() == fps[rows[order]].tolist()
    q, d = queries[order], distances[order]
    assert ties.tolist() == np.flatnonzero((q[1:] == q[:-1]) & (d[1:] == d[:-1])).tolist()


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 50), data=st.data())
def test_query_offsets_are_the_cumulative_counts(n: int, data: st.DataObject) -> None:
    m = data.draw(st.integers(0, 300))
    queries = np.sort(data.draw(hnp.arrays(np.int64, m, elements=st.integers(0, n - 1))))
    offsets = match_kernels.query_offsets(queries, n)
    assert offsets.tolist() == [0, *np.cumsum(np.bincount(queries, minlength=n)).tolist()]


@settings(max_examples=60, deadline=None)
@given(rows=hnp.arrays(np.int64, st.integers(0, 400), elements=st.integers(0, 2**40)))
def test_distinct_rows_in_first_appearance_order(rows: np.ndarray) -> None:
    distinct, inverse = key_kernels.distinct_rows(rows)
    _, first = np.unique(rows, return_index=True)
    assert distinct.tolist() == rows[np.sort(first)].tolist()
    assert distinct[inverse].tolist() == rows.tolist()


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=40),
    data=st.data(),
)
def test_gather_key_bytes_concatenates_the_rows(keys: list[bytes], data: st.DataObject) -> None:
    stored = [key + b"\x00" for key in keys]
    offsets = np.zeros(len(stored) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in stored], out=offsets[1:])
    blob = np.frombuffer(b"".join(stored), dtype=np.uint8).copy()
    rows = data.draw(
        hnp.arrays(np.int64, st.integers(0, 100), elements=st.integers(0, len(keys) - 1))
    )
    got, lengths = key_kernels.gather_key_bytes(offsets, blob, rows)
    assert got.tobytes() == b"".join(stored[r] for r in rows.tolist())
    assert lengths.tolist() == [len(keys[r]) for r in rows.tolist()]


def _loaded(keys: list[str], fps: np.ndarray) -> tuple[Index, dict[str, int]]:
    """An index of ``keys`` with ``fps`` and the same as a dict, for brute force."""
    return Index.from_arrays(keys, fps), dict(zip(keys, fps.tolist(), strict=True))


def test_one_key_matched_by_many_queries() -> None:
    """Rows that mostly repeat (each key decoded once, its str shared) and rows that do not;
    Unicode keys and keys holding NUL."""
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64 - 1, 500, dtype=np.uint64, endpoint=True)
    keys = [f"k\x00é-{i}" if i % 3 == 0 else f"键-{i}" for i in range(fps.size)]
    compiled, stored = _loaded(keys, fps)
    for queries in (
        np.repeat(fps[:3], 200),  # 600 queries, 3 distinct rows matched
        np.concatenate([fps[::2], fps[:40]]),  # a few repeats
    ):
        got = compiled.query_many(queries)
        assert got == [brute_force_matches(stored, q, 3) for q in queries.tolist()]
        assert sum(map(len, got)) >= queries.size
        columns = compiled.query_many(queries, columns=True)
        assert columns.keys == [m.key for ms in got for m in ms]
    compiled._check()


def test_ties_and_large_buckets_match_brute_force() -> None:
    """Thousands of fingerprints sharing table 0's prefix (a bucket far larger than the
    prefetched lines) and many matches per query at one distance (ordered by key)."""
    rng = np.random.default_rng(9)
    count = 40 * 16 * BUCKET_LINES
    low = rng.integers(0, 2**48, count, dtype=np.uint64)
    fps = (np.uint64(0xABCD) << np.uint64(48)) | low
    base = fps[:50]
    flips = np.uint64(1) << rng.integers(0, 64, (50, 30)).astype(np.uint64)
    near = (base[:, None] ^ flips).ravel()  # 30 neighbours at distance 1 of each of 50
    all_fps = np.concatenate([fps, near])
    keys = [f"doc-{i:06d}" for i in rng.permutation(all_fps.size)]
    compiled, stored = _loaded(keys, all_fps)
    queries = np.concatenate([base, rng.integers(0, 2**64 - 1, 200, dtype=np.uint64)])
    got = compiled.query_many(queries)
    assert got == [brute_force_matches(stored, q, 3) for q in queries.tolist()]
    assert max(len(m) for m in got) > 30
    assert [compiled.query(q) for q in queries[:60].tolist()] == got[:60]


_KEY_TEXT = st.text(
    alphabet=st.sampled_from(["a", "b", "é", "\uff5a", "😀", "\x00", "键", "A"]),
    min_size=0,
    max_size=6,
)


@settings(max_examples=80, deadline=None)
@given(keys=st.lists(_KEY_TEXT, min_size=1, max_size=30, unique=True), data=st.data())
def test_order_ties_by_key_is_the_code_point_order(keys: list[str], data: st.DataObject) -> None:
    """Runs of ties sorted by their keys' UTF-8 bytes give Python's str order (code points):
    prefixes first, 2-, 3- and 4-byte characters, NUL inside keys; positions outside the runs
    untouched; fingerprints moved with their rows."""
    stored = [key.encode("utf-8") + b"\x00" for key in keys]
    offsets = np.zeros(len(stored) + 1, dtype=np.int64)
    np.cumsum([len(s) for s in stored], out=offsets[1:])
    blob = np.frombuffer(b"".join(stored), dtype=np.uint8).copy()
    rows = np.array(data.draw(st.permutations(range(len(keys)))), dtype=np.int64)
    m = rows.size
    tied = data.draw(st.lists(st.booleans(), min_size=max(m - 1, 0), max_size=max(m - 1, 0)))
    ties = np.flatnonzero(np.array(tied, dtype=bool)).astype(np.int64)
    fps = (rows.astype(np.uint64) * np.uint64(1000003)) ^ np.uint64(0xFEED)
    expected = rows.tolist()
    start = 0
    for i in range(m):  # the runs: i and i + 1 in one run when i is a tie
        if i == m - 1 or not tied[i]:
            expected[start : i + 1] = sorted(expected[start : i + 1], key=keys.__getitem__)
            start = i + 1
    key_kernels.order_ties_by_key(ties, rows, fps, offsets, blob)
    assert rows.tolist() == expected
    assert fps.tolist() == [(r * 1000003) ^ 0xFEED for r in expected]


def test_a_few_ties_of_unicode_keys_match_brute_force() -> None:
    """Under Tuning.rank_ties ties (ordered by the kernel, not by ranking the keys): matches at
    one distance whose keys differ in 2- to 4-byte characters and by a prefix, in the code
    point order of brute force."""
    rng = np.random.default_rng(21)
    base = rng.integers(0, 2**64 - 1, 20, dtype=np.uint64, endpoint=True)
    bits = np.uint64(1) << rng.integers(0, 64, (20, 5)).astype(np.uint64)
    near = (base[:, None] ^ bits).ravel()  # 5 at distance 1 of each (or fewer if bits repeat)
    fps = np.concatenate([near, rng.integers(0, 2**64 - 1, 300, dtype=np.uint64, endpoint=True)])
    names = ["\uff5a", "😀", "é", "e", "ee", "e\x00", "键"]
    keys = [f"{names[i % len(names)]}{i % 11}" + "x" * (i % 3) for i in range(fps.size)]
    keys = [f"{key}/{i}" if i % 2 else key + "|" + str(i) for i, key in enumerate(keys)]
    compiled, stored = _loaded(keys, fps)
    got = compiled.query_many(base)
    assert got == [brute_force_matches(stored, q, 3) for q in base.tolist()]
    assert sum(len(m) for m in got) >= 60  # ties at distance 1 in most lists
    assert compiled.query_many(base, columns=True).keys == [m.key for ms in got for m in ms]
