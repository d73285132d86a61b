"""Single queries (Index.query): the compiled kernel over the frozen runs, the memtables beside
it. The answers equal brute force through adds, removals, compactions and memtables, with no
match, one, several and more than the kernel's output holds at first."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import brute_force_matches as brute_force

from permindex import Index, Match

KEYS = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=5)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(KEYS, min_size=1, max_size=60, unique=True),
    seed=st.integers(0, 2**32 - 1),
    removed=st.integers(0, 59),
    k=st.integers(0, 3),
)
def test_single_queries_answer_as_brute_force(
    keys: list[str], seed: int, removed: int, k: int
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
    index.merge_all_runs(min_share=0.0)  # frozen runs only: the kernel alone
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


def test_single_queries_at_scale_answer_as_brute_force() -> None:
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


def test_a_fingerprint_of_an_int_subclass_is_its_value() -> None:
    """An int subclass as the query is taken as its value, in the memtables and in the runs."""

    class Fingerprint(int):
        def __int__(self) -> int:
            return 0

    index = Index(3)
    index.add_many(["one", "two"], [1, 3])  # in the memtables
    expected = [Match("one", 1, 0), Match("two", 3, 1)]
    assert index.query(Fingerprint(1), k=1) == expected
    index.merge_all_runs(min_share=0.0)
    assert index.query(Fingerprint(1), k=1) == expected
