# The optional C extension of permindex.index.match (permindex/index/_match_lists.c).
from typing import Any

def match_lists(
    match_type: type[tuple[Any, ...]],
    n: int,
    queries: Any,
    keys: list[str] | tuple[Any, Any, Any],  # or (rows, offsets, data): decoded by row
    fingerprints: Any,
    distances: Any,
) -> list[list[Any]]: ...
