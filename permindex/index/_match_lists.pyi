# The optional C extension of permindex.index.match and permindex.index.lookup
# (permindex/index/_match_lists.c).
from typing import Any

def match_lists(
    match_type: type[tuple[Any, ...]],
    n: int,
    queries: Any,
    keys: list[str] | tuple[Any, Any, Any],  # or (rows, offsets, data): decoded by row
    fingerprints: Any,
    distances: Any,
) -> list[list[Any]]: ...

class SingleLookup:
    def __new__(
        cls,
        kernel: object,  # permindex.index.lookup.packed_kernel_capsule()
        packed: Any,  # (p,) int64, a packed plan (lookup_kernels.lookup_packed)
        fingerprints: Any,  # (n,) uint64, the array the plan points to
        keys: Any,  # a KeyRows: its memoryviews _off_mv and _data_mv
        match_type: type[tuple[Any, ...]],
    ) -> SingleLookup: ...
    def lookup(self, query: int) -> list[Any] | int: ...
