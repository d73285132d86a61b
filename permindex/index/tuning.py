"""The index's tuning knobs in one value, :class:`Tuning`: thresholds, budgets, thread counts and
chunk sizes that change how fast or in how much memory the index works, never what it answers.

An :class:`~permindex.index.Index` takes one (``Index(..., tuning=Tuning(...))``, default
:data:`DEFAULT_TUNING`) and hands it to its parts: the row store, the tables, the batch lookups,
the self-join of :meth:`~permindex.index.Index.pairs` and the clusters of an index; the join
functions of :mod:`permindex.index.join` take one too. Tests pass small values to reach the
paths a large input takes (a batch built in threads, a join in many kernel calls); users never
need to.

What each knob trades (the measurements behind the defaults are in ``benchmarks/README.md``,
"Measurements behind design choices"):

* Writes -- ``parallel_min`` and ``build_threads``: a batch of at least ``parallel_min``
  fingerprints has its tables' runs sorted in ``build_threads`` threads (starting threads costs
  more than it saves below it). ``direct_run_min``: a batch of at least this many rows (or the
  memtable limit, if smaller) becomes a sorted run directly instead of entering the memtable
  one by one. ``merge_ratio``: a run is merged into the previous one unless that one is more
  than this many times larger (few runs to probe against merge work). ``merge_all_min_share``:
  the default share of a table's entries outside its largest run from which
  :meth:`~permindex.index.Index.merge_all_runs` merges it. ``grow_ahead_rows``: from this
  capacity on the row arrays grow in a background thread (below it, inline under the lock).
  ``release_heap_rows``: after a batch write of at least this many rows (and after a
  compaction) the C heap's free pages go back to the operating system
  (:func:`~permindex.index.memory.release_free_heap`): a bulk load's freed buffers otherwise
  stay resident (glibc keeps them), about as much again as the index's own arrays at 10^6
  (benchmarks/README.md, "Resident memory after a bulk load"); 0 never.
* Key sections -- ``hash_chunk``: keys of a compact key section hashed per step (one C call
  splits a chunk at its NULs); ``utf8_slice``: bytes of it checked as UTF-8 per step (no str
  of the whole section).
* Batch lookups -- ``small_batch``: a batch of at most this many fingerprints runs the
  single-query kernel under the lock instead of taking a read view. ``overlap_pieces`` and
  ``overlap_piece``: a batch of at least their product that starts while another batch runs
  is looked up in ``overlap_pieces`` pieces, so that one's ordering overlaps the other's kernel.
  ``rank_ties``: above this many matches tied on (query, distance), their keys are ranked once
  instead of compared in a kernel.
* Self-join -- ``pair_budget``: pairs per chunk of a join's output, and a sixteenth of the
  candidates one kernel call verifies (``should_stop`` is checked between calls).
  ``join_threads``, ``join_threads_min_rows``, ``join_threads_max_rows``: a join of that many
  values runs its tables in that many threads (each thread holds a table's arrays, about 24
  bytes per value). ``byte_pairs_min_rows``: from this many values the byte-pair join keeps
  its 8 tables; below, (4, 1)'s 4 tables cost less. ``segment_budget``: slices of the pairs
  listed per window by :meth:`Index.iter_pairs <permindex.index.Index.iter_pairs>` (memory
  against calls).
* Expiry -- ``compact_after_expiring``: a sweep of :class:`~permindex.index.ExpiringIndex`
  that kills at least this many rows compacts at once.

Not here: the limits and formats of the data (64-bit fingerprints, ``MAX_KEY_BYTES``, the
2^32 - 1 rows of ``tables.table.MAX_ROWS``), the arguments of ``Index`` itself
(``memtable_limit``, ``compaction_min``), and the constants compiled into the numba kernels
(``search.lookup_kernels.DISTANCE``, ``RING``, ``LAG``, ``PENDING``, ``BUCKET_LINES``), which
numba freezes at compile time and caches per source file: they stay beside their kernels.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from permindex.errors import InvalidArgumentError
from permindex.processes import usable_cpus

__all__ = ["DEFAULT_TUNING", "Tuning"]

#: The knobs that may be 0 (a threshold that every input reaches); the others are >= 1.
_MAY_BE_ZERO: Final = frozenset(
    {
        "parallel_min",
        "direct_run_min",
        "join_threads_min_rows",
        "byte_pairs_min_rows",
        "release_heap_rows",
    }
)


def _threads() -> int:
    """One thread per CPU this process may use, at most 4."""
    return min(4, usable_cpus())


@dataclass(frozen=True)
class Tuning:
    """The tuning knobs of an index and its join (see the module docstring for what each
    trades). Every field is an int >= 1 (``merge_all_min_share`` a share in [0, 1];
    ``row_limit`` None or an int >= 1); none changes an answer.

    Examples:
        >>> from permindex.index.tuning import Tuning
        >>> Tuning(pair_budget=16).pair_budget
        16
    """

    # -- writes
    parallel_min: int = 1 << 17
    build_threads: int = field(default_factory=_threads)
    direct_run_min: int = 256
    merge_ratio: int = 4
    merge_all_min_share: float = 1 / 8
    grow_ahead_rows: int = 1 << 16
    release_heap_rows: int = 10_000
    #: Rows an index may hold, None for the row format's limit (``MAX_ROWS``, 2^32 - 1);
    #: tests lower it to reach the limit.
    row_limit: int | None = None
    # -- key sections
    hash_chunk: int = 1 << 16
    utf8_slice: int = 1 << 24
    # -- batch lookups
    small_batch: int = 8
    overlap_pieces: int = 2
    overlap_piece: int = 1024
    rank_ties: int = 256
    # -- self-join
    pair_budget: int = 1 << 18
    join_threads: int = field(default_factory=_threads)
    join_threads_min_rows: int = 1 << 18
    join_threads_max_rows: int = 1 << 26
    byte_pairs_min_rows: int = 2_000_000
    segment_budget: int = 1 << 16
    # -- expiry
    compact_after_expiring: int = 1 << 10

    def __post_init__(self) -> None:
        """Check every field: TypeError for a field of the wrong type, InvalidArgumentError for
        one out of range."""
        for name, value in vars(self).items():
            if name == "merge_all_min_share":
                if not isinstance(value, (int, float)) or isinstance(value, bool):
                    raise TypeError(f"Tuning.{name} must be a number, not {value!r}")
                if not 0 <= value <= 1:
                    raise InvalidArgumentError(f"Tuning.{name} must be in [0, 1], got {value}")
                continue
            if value is None and name == "row_limit":
                continue
            if type(value) is not int:
                raise TypeError(f"Tuning.{name} must be an int, not {value!r}")
            if value < (0 if name in _MAY_BE_ZERO else 1):
                raise InvalidArgumentError(f"Tuning.{name} is out of range: {value}")
            if value > _AT_MOST.get(name, value):
                raise InvalidArgumentError(
                    f"Tuning.{name} sizes buffers: at most {_AT_MOST[name]:,}, got {value:,}"
                )


#: Knobs that size buffers whatever the input's size, and their largest value (a pair is 17
#: bytes of buffer: 2^24 pairs are about 270 MiB).
_AT_MOST: Final = {"pair_budget": 1 << 24}

#: The defaults, shared by every index built without a ``tuning``.
DEFAULT_TUNING: Final = Tuning()
