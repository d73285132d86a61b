"""Independent references the compiled kernels are checked against: brute force for lookups and
joins, plain Python or numpy for what the kernels compute faster. Each is written from the
definition, never from the kernel's method, and is slow on purpose-free grounds only (O(n) per
query, O(n^2) pairs): the tests keep their inputs small.
"""

from __future__ import annotations

from collections.abc import Mapping

from permindex import Match


def brute_force_matches(stored: Mapping[str, int], query: int, k: int) -> list[Match]:
    """Every stored (key, fingerprint) within Hamming distance ``k`` of ``query`` as a
    :class:`Match`, sorted by (distance, key): what ``Index.query`` answers. O(n)."""
    found = [
        Match(key, fp, (fp ^ query).bit_count())
        for key, fp in stored.items()
        if (fp ^ query).bit_count() <= k
    ]
    return sorted(found, key=lambda m: (m.distance, m.key))
