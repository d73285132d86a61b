"""Compiled kernels of the index's lookups (numba, :mod:`permindex.jit`): the prefix-range search
of every searched table's runs and the exact check of each candidate, for a batch of queries and
for one query (Manku, Jain & Das Sarma 2007, "Detecting Near-Duplicates for Web Crawling",
section 3). Imported on first use (``import permindex`` does not load numba); the tests check
them against brute force (``tests/oracles.py``). They hold the index's one exact check of a
candidate (:func:`_within`: within k bits of the query, and live), which :func:`verify_rows`
also applies to the candidates a single query finds in the memtables.

What a kernel reads: a *plan* (:class:`permindex.index.search.lookup.LookupPlan`) of two int64
arrays
that describe the tables a query within k searches and their runs, and a typed list of the
runs' arrays:

* ``tables`` (S, 3 + 3 * W + S): per searched table, in search order, the leading-block mask
  (as int64 bits), the number of prefix moves p and of filter moves f, then p + f moves
  ``(shift, mask, target)``: ``prefix = OR ((q >> shift) & mask) << target`` over the prefix
  moves, the 32-bit filter likewise over the filter moves (:attr:`Permutation.kernel_ops`);
  the last S columns hold, for each earlier searched table e, the image of e's leading mask
  in this table's filter when it lies wholly in the filter (else 0).
* ``runs`` (R, 3): per run, the position s of its table in ``tables``, the directory shift,
  and whether the high row parts are uint16 (else uint8).
* ``arrays``: a numba typed list (:data:`RUN_ARRAYS`, made by :func:`new_run_arrays` and
  :func:`add_run_array`) of one tuple per run, in run order: the directory (2^r + 1,) uint32,
  the filters (m,) uint32, the low row parts (m,) uint16 and the high row parts as bytes ((m,)
  uint8, or (2m,) when they are uint16). Runs are immutable; the list keeps them alive.

For each query and run: the bucket ``prefix >> shift`` gives the range ``directory[b] :
directory[b + 1]``; each entry whose filter is within k bits of the query's, and equal to it on
no earlier table's filter image (that table reports it), is a candidate; a match is a candidate
whose row's fingerprint ``fps[row]`` is within k of the query, the row is live (``live[row]``
!= 0, or ``live`` empty: every row is), it shares the table's prefix (XOR zero under the
leading mask: a coarse directory bucket holds other prefixes too) and shares no earlier
searched table's prefix (so each match is reported once, by the first table whose prefix it
shares). The batch kernel
prefetches the directory entries and buckets (the first :data:`BUCKET_LINES` cache lines of
the filters, and the row parts) of the queries
:data:`DISTANCE` and twice that ahead of the one it scans, so the cache misses of several
queries overlap; both kernels queue each candidate, prefetch its fingerprint by row and verify
it :data:`LAG` candidates later (the end of a run's scan, or of a single query, verifies the
rest), so those reads overlap too.

Output: ``out`` (cap, 3) int64 rows (query position, row, distance) in table order, run order,
then query order within a group; the kernels return the number of matches, which may exceed
``cap`` (then only the first ``cap`` are written and the caller calls again with room for all).
Cost: O(q * (S * runs + candidates)); memory: the output only.
"""

from __future__ import annotations

import numpy as np

from permindex.jit_numba import njit, numba
from permindex.jit_numba import popcount64 as _popcount
from permindex.jit_numba import prefetch as _prefetch
from permindex.jit_numba import unowned as _unowned

__all__ = [
    "BATCH_SIGNATURE",
    "BUCKET_LINES",
    "DISTANCE",
    "ONE_SIGNATURE",
    "RING",
    "RUN",
    "RUN_ARRAYS",
    "VERIFY_SIGNATURE",
    "add_run_array",
    "lookup_batch",
    "lookup_one",
    "new_run_arrays",
    "verify_rows",
]

#: How many queries ahead the batch kernel prefetches: the directory entry of query i + 2D
#: and the bucket of query i + D while it scans query i (memory-level parallelism).
DISTANCE = 4
#: Ring buffer of the pipeline's per-query ranges (a power of two > 2 * DISTANCE).
RING = 32
#: Candidates queued (their fingerprints by row prefetched) before the oldest is verified.
LAG = 8
#: Room of the queue of candidates awaiting verification (a power of two > LAG): a bucket that
#: fills it verifies down to LAG before it queues more. (How DISTANCE and LAG were chosen:
#: benchmarks/README.md.)
PENDING = 64
#: Cache lines of a bucket's filters prefetched ahead of its scan (the first of them alone
#: left the scan of a large bucket waiting on each line: benchmarks/README.md).
BUCKET_LINES = 10

_types = numba.types
_PLAN = _types.int64[:, ::1]
#: One run's arrays in a plan: directory, filters, low row parts, high row parts as bytes.
RUN = _types.Tuple((_types.uint32[::1], _types.uint32[::1], _types.uint16[::1], _types.uint8[::1]))
#: The type of a plan's ``arrays``: a typed list of :data:`RUN` tuples (one item per run: an
#: item of a typed list costs a call and a reference count each, about a run's scan).
RUN_ARRAYS = _types.ListType(RUN)
#: lookup_batch(queries, k, tables, runs, arrays, fps, live, out) -> matches.
BATCH_SIGNATURE = _types.int64(
    _types.uint64[::1],
    _types.int64,
    _PLAN,
    _PLAN,
    RUN_ARRAYS,
    _types.uint64[::1],
    _types.uint8[::1],
    _PLAN,
)
#: lookup_one(query, k, tables, runs, arrays, fps, live, out) -> matches, or the one encoded.
ONE_SIGNATURE = _types.int64(
    _types.uint64,
    _types.int64,
    _PLAN,
    _PLAN,
    RUN_ARRAYS,
    _types.uint64[::1],
    _types.uint8[::1],
    _PLAN,
)


@njit(RUN_ARRAYS())
def new_run_arrays():  # type: ignore[no-untyped-def]
    """An empty :data:`RUN_ARRAYS` list (made by compiled code: numba's cache then holds the
    list's code, which a list made from Python would compile in every process)."""
    return numba.typed.List.empty_list(RUN)


@njit(
    _types.void(
        RUN_ARRAYS, _types.uint32[::1], _types.uint32[::1], _types.uint16[::1], _types.uint8[::1]
    )
)
def add_run_array(arrays, directory, filters, low, high):  # type: ignore[no-untyped-def]
    """Append a run's arrays to ``arrays`` (``high``: its high row parts as bytes)."""
    arrays.append((directory, filters, low, high))


@njit(inline=True)
def _prefetch_lines(filters, start, end):  # type: ignore[no-untyped-def]
    """Prefetch the filters ``start:end`` of a bucket, one cache line (16 filters) at a time,
    at most :data:`BUCKET_LINES` lines (the hardware's prefetcher follows the rest)."""
    for e in range(start, min(end, start + 16 * BUCKET_LINES), 16):
        _prefetch(filters, e)


@njit(inline=True)
def _moves(value, tables, s, first, count):  # type: ignore[no-untyped-def]
    out = np.uint64(0)
    for i in range(count):
        c = 3 + 3 * (first + i)
        shift = np.uint64(tables[s, c])
        mask = np.uint64(tables[s, c + 1])
        target = np.uint64(tables[s, c + 2])
        out |= ((value >> shift) & mask) << target
    return out


@njit(inline=True)
def _within(query, value, k, row, live):  # type: ignore[no-untyped-def]
    """The exact check of a candidate: the Hamming distance of its fingerprint ``value`` to
    ``query`` (popcount of the XOR) when it is at most ``k`` and its ``row`` is live
    (``live[row]`` != 0, or ``live`` empty: every row is), else -1."""
    d = np.int64(_popcount(value ^ query))  # int64: compared with k as integers, not float64
    if d > k:
        return -1
    if live.size and live[row] == 0:
        return -1
    return d


@njit(inline=True)
def _accept(query, value, k, tables, s, row, live):  # type: ignore[no-untyped-def]
    """The distance of a candidate, or -1 when it is not a match reported by table s: it must
    share table s's prefix and no earlier searched table's (that table reports it), and pass
    :func:`_within`."""
    x = value ^ query
    if (x & np.uint64(tables[s, 0])) != 0:
        return -1
    for e in range(s):
        if (x & np.uint64(tables[e, 0])) == 0:
            return -1
    return _within(query, value, k, row, live)


@njit(inline=True)
def _run_arrays(runs, arrays, r):  # type: ignore[no-untyped-def]
    """Run r's arrays (see the module docstring for ``runs`` and ``arrays``), as views without
    an owner (:func:`permindex.jit_numba.unowned`: the list keeps them alive): its directory
    (2^r + 1,) uint32, filters (m,) uint32, low row parts (m,) uint16, high row parts as bytes
    ((m,) uint8, or (2m,) when they are uint16) and as (m,) uint16 (empty when uint8)."""
    directory, filters, low, high = arrays[r]
    high = _unowned(high)
    return (
        _unowned(directory),
        _unowned(filters),
        _unowned(low),
        high,
        _unowned(high.view(np.uint16) if runs[r, 2] else high[:0].view(np.uint16)),
    )


@njit(inline=True)
def _bucket(
    value,
    j,
    start,
    end,
    f,
    k,
    tables,
    runs,
    r,
    fps,
    live,
    out,
    count,
    pending,
    filters,
    low,
    high8,
    high16,
):  # type: ignore[no-untyped-def]
    """Queue the candidates of query ``value`` (position ``j``) among entries ``start:end`` of
    run r (its ``filters`` (m,) uint32, ``low`` (m,) uint16 row parts and high parts:
    ``high16`` (m,) uint16, or, when ``high16`` is empty, ``high8`` (m,) uint8), whose filters
    are tested against the query's ``f``: a candidate that passes reads its row's two parts,
    is queued in ``pending`` and its fingerprint by row prefetched
    (:func:`_verify_pending` checks it :data:`LAG` candidates later); returns the new count
    of matches (a full queue is verified down to LAG first)."""
    s = runs[r, 0]
    earlier = tables.shape[1] - tables.shape[0]  # the column of table 0's filter image
    for e in range(start, end):
        fx = np.uint64(filters[e]) ^ f
        if np.int64(_popcount(fx)) <= k:
            reported = False  # by an earlier table whose prefix lies in this filter
            for t in range(s):
                image = np.uint64(tables[s, earlier + t])
                if image != 0 and (fx & image) == 0:
                    reported = True
                    break
            if reported:
                continue
            if high16.size:
                row = (np.int64(high16[e]) << 16) | np.int64(low[e])
            else:
                row = (np.int64(high8[e]) << 16) | np.int64(low[e])
            _prefetch(fps, row)
            if pending[0, 0] - pending[0, 1] == PENDING:
                count = _verify_pending(LAG, k, tables, fps, live, out, count, pending)
            p = pending[0, 0]
            slot = 1 + (p & (PENDING - 1))
            pending[slot, 0] = j
            pending[slot, 1] = row
            pending[slot, 2] = np.int64(value)
            pending[slot, 3] = s
            pending[0, 0] = p + 1
    return count


@njit(inline=True)
def _verify_pending(keep, k, tables, fps, live, out, count, pending):  # type: ignore[no-untyped-def]
    """Verify the oldest queued candidates until at most ``keep`` remain queued; each match is
    written to ``out`` (while it has room); returns the new count. ``pending`` (1 + PENDING, 4)
    int64: row 0 holds (queued, verified) counts, the others (query position, row, query as
    int64 bits, searched table) in a ring."""
    cap = out.shape[0]
    while pending[0, 0] - pending[0, 1] > keep:
        slot = 1 + (pending[0, 1] & (PENDING - 1))
        row = pending[slot, 1]
        d = _accept(np.uint64(pending[slot, 2]), fps[row], k, tables, pending[slot, 3], row, live)
        if d >= 0:
            if count < cap:
                out[count, 0] = pending[slot, 0]
                out[count, 1] = row
                out[count, 2] = d
            count += 1
        pending[0, 1] += 1
    return count


@njit()
def _scan(queries, k, tables, runs, arrays, r, fps, live, out, count, pending):  # type: ignore[no-untyped-def]
    """Every match of every query in run r; returns the new count (``pending``: the empty
    queue of candidates, kept alive by the caller). First every query's bucket and filter, one
    move at a time over all queries (a loop the compiler vectorizes); then a software pipeline
    over the queries: the directory entry of query i + 2D and the bucket (filters and row
    parts) of query i + D are prefetched while query i is scanned (D = :data:`DISTANCE`). The
    run's arrays are made once here, not per bucket, and every array the inlined helpers take
    is a view without an owner (:func:`permindex.jit_numba.unowned`), so that no call of a
    helper costs atomic reference counts."""
    tables = _unowned(tables)
    runs = _unowned(runs)
    fps = _unowned(fps)
    live = _unowned(live)
    out = _unowned(out)
    pending = _unowned(pending)
    s = runs[r, 0]
    shift = np.uint64(runs[r, 1])
    directory, filters, low, high, high16 = _run_arrays(runs, arrays, r)
    n_prefix = tables[s, 1]
    n_filter = tables[s, 2]
    q = queries.size
    ring = RING - 1
    lo = np.empty(RING, dtype=np.int64)
    hi = np.empty(RING, dtype=np.int64)
    # every query's bucket and filter first, one move at a time over all queries (a loop the
    # compiler vectorizes), then the pipeline
    buckets = np.zeros(q, dtype=np.uint64)
    wanted = np.zeros(q, dtype=np.uint64)
    for move in range(n_prefix + n_filter):
        c = 3 + 3 * move
        mshift = np.uint64(tables[s, c])
        mmask = np.uint64(tables[s, c + 1])
        mtarget = np.uint64(tables[s, c + 2])
        into = buckets if move < n_prefix else wanted
        for i in range(q):
            into[i] |= ((queries[i] >> mshift) & mmask) << mtarget
    for i in range(q):
        buckets[i] >>= shift
    for i in range(q + 2 * DISTANCE):
        if i < q:
            _prefetch(directory, np.int64(buckets[i]))
        j = i - DISTANCE
        if 0 <= j < q:
            b = np.int64(buckets[j])
            start = np.int64(directory[b])
            end = np.int64(directory[b + 1])
            lo[j & ring] = start
            hi[j & ring] = end
            _prefetch_lines(filters, start, end)
            _prefetch(low, start)
            _prefetch(high, start * (1 + runs[r, 2]))
        j = i - 2 * DISTANCE
        if 0 <= j < q:
            value = queries[j]
            f = wanted[j]
            count = _bucket(
                value,
                j,
                lo[j & ring],
                hi[j & ring],
                f,
                k,
                tables,
                runs,
                r,
                fps,
                live,
                out,
                count,
                pending,
                filters,
                low,
                high,
                high16,
            )
            count = _verify_pending(LAG, k, tables, fps, live, out, count, pending)
    return _verify_pending(0, k, tables, fps, live, out, count, pending)


@njit(BATCH_SIGNATURE)
def lookup_batch(queries, k, tables, runs, arrays, fps, live, out):  # type: ignore[no-untyped-def]
    """The matches of each of the (q,) uint64 ``queries`` within ``k`` (see the module
    docstring for the plan ``tables``/``runs``/``arrays``, ``fps`` (capacity,) uint64,
    ``live`` (capacity,) uint8 or (0,) and ``out`` (cap, 3) int64); returns the number of
    matches."""
    count = 0
    for r in range(runs.shape[0]):
        pending = np.zeros((1 + PENDING, 4), dtype=np.int64)
        count = _scan(queries, k, tables, runs, arrays, r, fps, live, out, count, pending)
    return count


@njit()
def _one(query, k, tables, runs, arrays, fps, live, out, pending):  # type: ignore[no-untyped-def]
    """:func:`lookup_one` on the queue ``pending``, which it keeps alive (the arrays are views
    without an owner here, as in :func:`_scan`)."""
    tables = _unowned(tables)
    runs = _unowned(runs)
    fps = _unowned(fps)
    live = _unowned(live)
    out = _unowned(out)
    pending = _unowned(pending)
    count = 0
    for r in range(runs.shape[0]):
        s = runs[r, 0]
        directory, filters, low, high, high16 = _run_arrays(runs, arrays, r)
        b = np.int64(_moves(query, tables, s, 0, tables[s, 1]) >> np.uint64(runs[r, 1]))
        start = np.int64(directory[b])
        end = np.int64(directory[b + 1])
        _prefetch_lines(filters, start, end)
        _prefetch(low, start)
        _prefetch(high, start * (1 + runs[r, 2]))
        f = _moves(query, tables, s, tables[s, 1], tables[s, 2])
        count = _bucket(
            query,
            0,
            start,
            end,
            f,
            k,
            tables,
            runs,
            r,
            fps,
            live,
            out,
            count,
            pending,
            filters,
            low,
            high,
            high16,
        )
    return _verify_pending(0, k, tables, fps, live, out, count, pending)


@njit(ONE_SIGNATURE)
def lookup_one(query, k, tables, runs, arrays, fps, live, out):  # type: ignore[no-untyped-def]
    """:func:`lookup_batch` of one uint64 ``query`` without a queries array: ``out`` (cap, 3)
    int64 gets (0, row, distance) per match; returns the number of matches written to the
    output, except for exactly one match: then ``-(row * 64 + distance) - 1`` (the common
    answer, nothing to read back from the output). One pass over the runs (each run's arrays
    taken from the list once: an item of a typed list costs about as much as a run's scan); the
    candidates' fingerprints are read :data:`LAG` candidates after they are found, so those
    misses overlap across runs."""
    pending = np.zeros((1 + PENDING, 4), dtype=np.int64)
    count = _one(query, k, tables, runs, arrays, fps, live, out, pending)
    if count == 1:
        return -(out[0, 1] * 64 + out[0, 2]) - 1
    return count


#: verify_rows(query, k, rows, fps, live, out) -> matches.
VERIFY_SIGNATURE = "int64(uint64, int64, int64[::1], uint64[::1], uint8[::1], int64[:, ::1])"


@njit(VERIFY_SIGNATURE)
def verify_rows(query, k, rows, fps, live, out):  # type: ignore[no-untyped-def]
    """The candidate ``rows`` ((c,) int64, distinct) of one uint64 ``query`` that pass the
    exact check (:func:`_within` against ``fps`` (capacity,) uint64 and ``live`` (capacity,)
    uint8 or (0,)): ``out`` (cap, 3) int64 gets (0, row, distance) per match, in the order of
    ``rows``; returns the number of matches (those past ``cap`` counted, not written). O(c)."""
    count = 0
    cap = out.shape[0]
    for i in range(rows.size):
        row = rows[i]
        d = _within(query, fps[row], k, row, live)
        if d >= 0:
            if count < cap:
                out[count, 0] = 0
                out[count, 1] = row
                out[count, 2] = d
            count += 1
    return count
