"""The Match lists of a batch lookup (Index.query_many): the answers of brute force, one fresh
list per query of Match objects with Python ints, whatever the keys (any text UTF-8 can encode,
NUL included) and however often one stored key is matched."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from oracles import brute_force_matches

from permindex import Index, Match

#: Keys as a store may hold them: any text UTF-8 can encode (no lone surrogates), NUL too.
STORED_KEYS = st.text(alphabet=st.characters(exclude_categories=["Cs"]), min_size=1, max_size=6)


@settings(max_examples=60, deadline=None)
@given(
    keys=st.lists(STORED_KEYS, min_size=1, max_size=40, unique=True),
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(0, 3),
)
def test_lists_of_any_keys_are_those_of_brute_force(keys: list[str], seed: int, k: int) -> None:
    """Near-duplicate groups of any keys, queried in a batch of more than the single-query
    path's 8 (queries near a group, exact copies, and random ones): brute force's lists, each
    a list of its own."""
    rng = np.random.default_rng(seed)
    base = rng.integers(0, 2**64 - 1, 3, dtype=np.uint64, endpoint=True)
    flips = np.uint64(1) << rng.integers(0, 64, len(keys)).astype(np.uint64)
    fps = base[np.arange(len(keys)) % 3] ^ flips
    index = Index.from_arrays(keys, fps)
    queries = np.concatenate(
        [base, fps, rng.integers(0, 2**64 - 1, 8, dtype=np.uint64, endpoint=True)]
    )
    got = index.query_many(queries, k)
    stored = dict(zip(keys, fps.tolist(), strict=True))
    assert got == [brute_force_matches(stored, q, k) for q in queries.tolist()]
    assert type(got) is list and all(type(lst) is list for lst in got)
    assert all(type(m) is Match and type(m.fingerprint) is int for lst in got for m in lst)
    assert all(type(m.distance) is int for lst in got for m in lst)
    # fresh objects: a caller may change one list without changing another
    got[0].append(Match("x", 1, 1))
    assert got[1:] == [brute_force_matches(stored, q, k) for q in queries[1:].tolist()]


def test_a_key_matched_by_many_queries_in_many_lists() -> None:
    """One stored key matched by 10^4 queries (and a second by none): every list holds it,
    each its own Match, all with the same key."""
    index = Index.from_arrays(["clé-ü", "other"], [0b1011, 2**64 - 1])
    queries = np.full(10_000, 0b1010, dtype=np.uint64)
    got = index.query_many(queries)
    assert got == [[Match("clé-ü", 0b1011, 1)]] * 10_000
    assert len({id(lst) for lst in got}) == 10_000


def test_query_many_answers_as_brute_force_at_scale() -> None:
    """5,000 fingerprints with near-duplicates planted at distance 2: the lists of brute force,
    sorted by (distance, key)."""
    rng = np.random.default_rng(5)
    fps = rng.integers(0, 2**64 - 1, 5_000, dtype=np.uint64, endpoint=True)
    fps[:500] = fps[500:1000] ^ np.uint64(0b101)
    keys = [f"k{i}" for i in range(fps.size)]
    index = Index.from_arrays(keys, fps)
    queries = np.concatenate([fps[:300] ^ np.uint64(1), rng.integers(0, 2**63, 300, np.uint64)])
    stored = dict(zip(keys, fps.tolist(), strict=True))
    got = index.query_many(queries)
    assert got == [brute_force_matches(stored, q, 3) for q in queries.tolist()]
    assert sum(map(len, got)) >= 600
