# The optional C extension of permindex.index.match (permindex/index/_match_lists.c).
from typing import Any

def match_lists(
    match_type: type[tuple[Any, ...]],
    n: int,
    queries: Any,
    keys: list[str],
    fingerprints: Any,
    distances: Any,
) -> list[list[Any]]: ...
