"""The batch query (permindex.index.search.batch_queries): a limit makes only the kept matches, and
the answers
equal brute force with and without it."""

from __future__ import annotations

import random
from typing import Any

import pytest

import permindex.index.search.batch_queries as query_module
import permindex.index.search.matches as match_module
from permindex import Index, Match


def test_query_many_limit_makes_only_the_kept_matches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A limit cuts each query's matches in (distance, key) order before any Match is made:
    200 queries of a fingerprint stored under 600 keys (ties at every distance, keys not in
    row order), limit 2, make 400 Match objects, and equal brute force cut to 2; without a
    limit every match is made, and also equals brute force."""
    rng = random.Random(4)
    base = 0x1234_5678_9ABC_DEF0
    names = [f"key-{rng.randrange(10**9):09d}-{i}" for i in range(600)]
    fps = [base if i % 3 else base ^ (1 << (i % 64)) for i in range(600)]
    noise = [rng.getrandbits(64) for _ in range(100)]
    index = Index()
    index.add_many(names + [f"noise-{i}" for i in range(100)], fps + noise)
    index.remove(names[5])  # a dead row among the matches
    stored = {k: v for k, v in zip(names, fps, strict=True) if k != names[5]}
    stored.update({f"noise-{i}": v for i, v in enumerate(noise)})
    queries = [base] * 150 + [base ^ 0b111] * 50
    made = [0]

    def brute(query: int) -> list[Match]:
        near = [Match(key, value, bin(value ^ query).count("1")) for key, value in stored.items()]
        return sorted((m for m in near if m.distance <= 3), key=lambda m: (m.distance, m.key))

    real_lists = match_module.match_lists

    def counting_lists(n: int, *found: Any) -> list[list[Match]]:  # where every Match is made
        made[0] += len(found[1])
        return real_lists(n, *found)

    monkeypatch.setattr(query_module, "match_lists", counting_lists)
    limited = index.query_many(queries, limit=2)
    assert made[0] == 2 * len(queries)
    for query, got in zip(queries, limited, strict=True):
        assert got == brute(query)[:2]
    made[0] = 0
    everything = index.query_many(queries[:20])
    assert made[0] == sum(len(matches) for matches in everything) > 20 * 400
    assert everything[0] == brute(base)
