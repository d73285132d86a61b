"""Compiled kernels of the index's lookups (numba, :mod:`permindex.jit`): the prefix-range search
of every searched table's runs and the exact check of each candidate, for a batch of queries and
for one query (Manku, Jain & Das Sarma 2007, "Detecting Near-Duplicates for Web Crawling",
section 3). Imported on first use (``import permindex`` does not load numba); the tests check
them against brute force (``tests/oracles.py``). They hold the index's one exact check of a
candidate (:func:`_within`: within k bits of the query, and live), which :func:`verify_rows`
also applies to the candidates a single query finds in the memtables.

What a kernel reads: a *plan* (:class:`permindex.index.search.lookup.LookupPlan`) of two int64
arrays that describe the tables a query within k searches and their runs, and a typed list of
the runs' arrays:

* ``tables`` (S, 3 + 3 * W): per searched table, in search order, the leading-block mask (as
  int64 bits), the number of moves w of its permutation, its prefix width P in bits, then w
  moves ``(shift, mask, target)``: ``permuted = OR ((q >> shift) & mask) << target``
  (:attr:`Permutation.permute_ops`).
* ``runs`` (R, 3 + S): per run, the position s of its table in ``tables``, its directory bits
  r, whether the high row parts are uint16 (else uint8), then, for each earlier searched table
  e, the image of e's leading mask in this run's *window* when it lies wholly in it (else 0).
  The window of a permuted value is its 16 filter bits (the 16 after the top r) under the
  X = max(0, r - P) bits between the prefix and the filter.
* ``arrays``: a numba typed list (:data:`RUN_ARRAYS`, made by :func:`new_run_arrays` and
  :func:`add_run_array`) of one tuple per run, in run order: the directory (2^r + 1,) uint32,
  the filters (m,) uint16, the low row parts (m,) uint16 and the high row parts as bytes ((m,)
  uint8, or (2m,) when they are uint16). Runs are immutable; the list keeps them alive.

For each query and run: when r >= P, the query's prefix spans the 2^X buckets from ``prefix <<
X``, and each bucket's X bits are compared with the query's as a whole (a bucket more than k
bits away is skipped, the others leave k minus that distance to the filter); when r < P, the
one bucket ``permuted >> (64 - r)`` holds 2^(P - r) prefixes, and the filter's leading P - r
bits (prefix bits) must equal the query's. In a bucket, ``directory[b] : directory[b + 1]``,
each entry whose filter passes, and whose window equals the query's on no earlier table's
image (that table reports it), is a candidate; a match is a candidate whose row's fingerprint
``fps[row]`` is within k of the query, the row is live (``live[row]`` != 0, or ``live`` empty:
every row is), it shares the table's prefix (XOR zero under the leading mask) and shares no
earlier searched table's prefix (so each match is reported once, by the first table whose
prefix it shares). The batch kernel prefetches the directory entries and buckets (the first
:data:`BUCKET_LINES` cache lines of the filters, and the row parts) of the queries
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
#: Cache lines of a prefix range's filters prefetched ahead of its scan (the first of them
#: alone left the scan of a large range waiting on each line: benchmarks/README.md).
BUCKET_LINES = 5

_types = numba.types
_PLAN = _types.int64[:, ::1]
# Row parts of no run (lookup_one reads each candidate's row when it queues it).
_NO_LOW = np.zeros(0, dtype=np.uint16)
_NO_HIGH = np.zeros(0, dtype=np.uint8)
#: One run's arrays in a plan: directory, filters, low row parts, high row parts as bytes.
RUN = _types.Tuple((_types.uint32[::1], _types.uint16[::1], _types.uint16[::1], _types.uint8[::1]))
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
        RUN_ARRAYS, _types.uint32[::1], _types.uint16[::1], _types.uint16[::1], _types.uint8[::1]
    )
)
def add_run_array(arrays, directory, filters, low, high):  # type: ignore[no-untyped-def]
    """Append a run's arrays to ``arrays`` (``high``: its high row parts as bytes)."""
    arrays.append((directory, filters, low, high))


@njit(inline=True)
def _prefetch_lines(filters, start, end):  # type: ignore[no-untyped-def]
    """Prefetch the filters ``start:end`` of a range, one cache line (32 filters) at a time,
    at most :data:`BUCKET_LINES` lines (the hardware's prefetcher follows the rest)."""
    for e in range(start, min(end, start + 32 * BUCKET_LINES), 32):
        _prefetch(filters, e)


@njit(inline=True)
def _permute(value, tables, s):  # type: ignore[no-untyped-def]
    """The permuted value of ``value`` in searched table s."""
    out = np.uint64(0)
    for i in range(tables[s, 1]):
        c = 3 + 3 * i
        shift = np.uint64(tables[s, c])
        mask = np.uint64(tables[s, c + 1])
        target = np.uint64(tables[s, c + 2])
        out |= ((value >> shift) & mask) << target
    return out


@njit(inline=True)
def _geometry(tables, runs, r):  # type: ignore[no-untyped-def]
    """Run r's directory bits, its X (bits between prefix and filter, 0 when r < P), the shift
    that gives a query's first bucket from its permuted value, and the number of the filter's
    low bits that are not prefix bits (16 when r >= P; the bits above them must be equal)."""
    s = runs[r, 0]
    bits = runs[r, 1]
    prefix_bits = tables[s, 2]
    if bits >= prefix_bits:
        return bits, bits - prefix_bits, 64 - prefix_bits, np.uint64(16)
    return bits, 0, 64 - bits, np.uint64(16 - min(prefix_bits - bits, 16))


@njit(inline=True)
def _first(permuted, sub, first_shift):  # type: ignore[no-untyped-def]
    """A query's first bucket from its permuted value."""
    return np.int64((permuted >> np.uint64(first_shift)) << np.uint64(sub))


@njit(inline=True)
def _window(permuted, bits, sub):  # type: ignore[no-untyped-def]
    """A permuted value's window in a run of ``bits`` directory bits: its ``sub`` bits after
    the prefix over its 16 filter bits."""
    return (permuted >> np.uint64(48 - bits)) & np.uint64((1 << (16 + sub)) - 1)


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
    (2^r + 1,) uint32, filters (m,) uint16, low row parts (m,) uint16, high row parts as bytes
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
    first,
    sub,
    window,
    exact,
    k,
    tables,
    runs,
    r,
    fps,
    live,
    out,
    count,
    pending,
    directory,
    filters,
    low,
    high8,
    high16,
    deferred,
):  # type: ignore[no-untyped-def]
    """Queue the candidates of query ``value`` (position ``j``) in run r: the 2^``sub``
    buckets from ``first`` (its ``directory``; ``filters`` (m,) uint16, ``low`` (m,) uint16 row
    parts and high parts: ``high16`` (m,) uint16, or, when ``high16`` is empty, ``high8`` (m,)
    uint8), against the query's ``window``; ``exact``: the filter's low bits that are not
    prefix bits (the bits above them must be equal; tested only for an entry whose popcount
    passes: folding the test into the popcount's, without a branch, ran the scan at 0.8x). A
    candidate that passes is queued in ``pending``: ``deferred``, as its entry, its row parts
    prefetched (:func:`_verify_pending` reads its row :data:`LAG` candidates later, or
    :func:`_one` at the end of the run's scan, then prefetches its fingerprint and checks it
    LAG candidates after that); else its row read now and its fingerprint prefetched. Returns
    the new count of matches (a full queue is verified down to LAG first)."""
    s = runs[r, 0]
    f = window & np.uint64(0xFFFF)
    high_bits = window >> np.uint64(16)
    prefixed = exact < 16
    for t in range(1 << sub):
        tx = np.uint64(t) ^ high_bits
        budget = k - np.int64(_popcount(tx))
        if budget < 0:
            continue
        tx <<= np.uint64(16)
        for e in range(np.int64(directory[first + t]), np.int64(directory[first + t + 1])):
            fx = np.uint64(filters[e]) ^ f
            if np.int64(_popcount(fx)) > budget:
                continue
            if prefixed and (fx >> exact) != 0:
                continue
            wx = tx | fx
            reported = False  # by an earlier table whose prefix lies in this window
            for u in range(s):
                image = np.uint64(runs[r, 3 + u])
                if image != 0 and (wx & image) == 0:
                    reported = True
                    break
            if reported:
                continue
            if pending[0, 0] - pending[0, 1] == PENDING:
                count = _verify_pending(
                    LAG, k, tables, fps, live, out, count, pending, low, high8, high16
                )
            p = pending[0, 0]
            slot = 1 + (p & (PENDING - 1))
            pending[slot, 0] = j
            pending[slot, 2] = np.int64(value)
            pending[slot, 3] = s
            if deferred:
                pending[slot, 1] = e
                _prefetch(low, e)
                if high16.size:
                    _prefetch(high16, e)
                else:
                    _prefetch(high8, e)
            else:
                pending[slot, 1] = _row(e, low, high8, high16)
                _prefetch(fps, pending[slot, 1])
                pending[0, 2] = p + 1  # resolved already
            pending[0, 0] = p + 1
    return count


@njit(inline=True)
def _row(e, low, high8, high16):  # type: ignore[no-untyped-def]
    """The row of entry ``e`` from its two parts."""
    if high16.size:
        return (np.int64(high16[e]) << 16) | np.int64(low[e])
    return (np.int64(high8[e]) << 16) | np.int64(low[e])


@njit(inline=True)
def _verify_pending(keep, k, tables, fps, live, out, count, pending, low, high8, high16):  # type: ignore[no-untyped-def]
    """Read the rows of the oldest queued entries until at most ``keep`` remain unread
    (prefetching each one's fingerprint; ``low``, ``high8``, ``high16``: the run's row parts),
    then verify the oldest read candidates until at most ``keep`` remain unverified; each
    match is written to ``out`` (while it has room); returns the new count. ``pending`` (1 +
    PENDING, 4) int64: row 0 holds (queued, verified, read) counts, the others (query
    position, entry or row, query as int64 bits, searched table) in a ring."""
    while pending[0, 0] - pending[0, 2] > keep:
        slot = 1 + (pending[0, 2] & (PENDING - 1))
        row = _row(pending[slot, 1], low, high8, high16)
        pending[slot, 1] = row
        _prefetch(fps, row)
        pending[0, 2] += 1
    cap = out.shape[0]
    while pending[0, 2] - pending[0, 1] > keep:
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
    queue of candidates, kept alive by the caller). First every query's permuted value, one
    move at a time over all queries (a loop the compiler vectorizes), then its first bucket and
    window; then a software pipeline over the queries: the directory entries of query i + 2D
    and the range (filters and row parts) of query i + D are prefetched while query i is
    scanned (D = :data:`DISTANCE`). The run's arrays are made once here, not per bucket, and
    every array the inlined helpers take is a view without an owner
    (:func:`permindex.jit_numba.unowned`), so that no call of a helper costs atomic reference
    counts."""
    tables = _unowned(tables)
    runs = _unowned(runs)
    fps = _unowned(fps)
    live = _unowned(live)
    out = _unowned(out)
    pending = _unowned(pending)
    s = runs[r, 0]
    bits, sub, first_shift, exact = _geometry(tables, runs, r)
    directory, filters, low, high, high16 = _run_arrays(runs, arrays, r)
    span = 1 << sub
    q = queries.size
    permuted = np.zeros(q, dtype=np.uint64)
    for move in range(tables[s, 1]):
        c = 3 + 3 * move
        mshift = np.uint64(tables[s, c])
        mmask = np.uint64(tables[s, c + 1])
        mtarget = np.uint64(tables[s, c + 2])
        for i in range(q):
            permuted[i] |= ((queries[i] >> mshift) & mmask) << mtarget
    firsts = np.empty(q, dtype=np.int64)
    for i in range(q):
        firsts[i] = _first(permuted[i], sub, first_shift)
        permuted[i] = _window(permuted[i], bits, sub)
    for i in range(q + 2 * DISTANCE):
        if i < q:
            _prefetch(directory, firsts[i])
            _prefetch(directory, firsts[i] + span)  # the range's end: maybe the next line
        j = i - DISTANCE
        if 0 <= j < q:
            b = firsts[j]
            start = np.int64(directory[b])
            end = np.int64(directory[b + span])
            _prefetch_lines(filters, start, end)
            _prefetch(low, start)
            _prefetch(high, start * (1 + runs[r, 2]))
        j = i - 2 * DISTANCE
        if 0 <= j < q:
            count = _bucket(
                queries[j],
                j,
                firsts[j],
                sub,
                permuted[j],
                exact,
                k,
                tables,
                runs,
                r,
                fps,
                live,
                out,
                count,
                pending,
                directory,
                filters,
                low,
                high,
                high16,
                True,
            )
            count = _verify_pending(
                LAG, k, tables, fps, live, out, count, pending, low, high, high16
            )
    return _verify_pending(0, k, tables, fps, live, out, count, pending, low, high, high16)


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
        bits, sub, first_shift, exact = _geometry(tables, runs, r)
        directory, filters, low, high, high16 = _run_arrays(runs, arrays, r)
        permuted = _permute(query, tables, s)
        b = _first(permuted, sub, first_shift)
        start = np.int64(directory[b])
        _prefetch_lines(filters, start, np.int64(directory[b + (1 << sub)]))
        _prefetch(low, start)
        _prefetch(high, start * (1 + runs[r, 2]))
        count = _bucket(
            query,
            0,
            b,
            sub,
            _window(permuted, bits, sub),
            exact,
            k,
            tables,
            runs,
            r,
            fps,
            live,
            out,
            count,
            pending,
            directory,
            filters,
            low,
            high,
            high16,
            True,
        )
        # this run's queued entries: their rows read now (their parts were prefetched when
        # they were queued), their fingerprints prefetched; verified across runs
        while pending[0, 0] - pending[0, 2] > 0:
            slot = 1 + (pending[0, 2] & (PENDING - 1))
            row = _row(pending[slot, 1], low, high, high16)
            pending[slot, 1] = row
            _prefetch(fps, row)
            pending[0, 2] += 1
    # every queued candidate's row was read at the end of its run: no row parts needed here
    return _verify_pending(0, k, tables, fps, live, out, count, pending, _NO_LOW, _NO_HIGH, _NO_LOW)


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
