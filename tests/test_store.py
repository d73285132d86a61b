"""The durable index in process: Index.export_slices (the fuzzy export snapshots are made of),
and the Store (log before apply, snapshots that rotate and drop the log, recovery)."""

from __future__ import annotations

import random
import threading
from typing import Any

import numpy as np

from permindex.index import Index


def _decoded(parts: list[tuple[Any, Any, Any]]) -> dict[str, int]:
    """{key: fingerprint} of export slices; asserts every key appears once."""
    out: dict[str, int] = {}
    for lengths, blob, fps in parts:
        raw = bytes(blob)
        ends = np.cumsum(np.asarray(lengths, dtype=np.int64) + 1)
        starts = (ends - np.asarray(lengths, dtype=np.int64) - 1).tolist()
        for a, m, fp in zip(starts, np.asarray(lengths).tolist(), fps.tolist(), strict=True):
            key = raw[a : a + m].decode("utf-8")
            assert raw[a + m] == 0
            assert key not in out, f"{key!r} exported twice"
            out[key] = fp
    return out


def _contents(index: Index) -> dict[str, int]:
    keys, fps = index.export()
    return dict(zip(keys, fps.tolist(), strict=True))


def test_export_slices_equals_export_when_nothing_changes() -> None:
    index = Index(compaction_min=10**9)
    rng = random.Random(3)
    index.add_many([f"k/{i}" for i in range(2000)], [rng.getrandbits(64) for _ in range(2000)])
    index.add_many(["k/5", "ключ\x00nul", "k/7"], [1, 2, 3])  # replaced rows, a non-ASCII key
    for i in range(0, 2000, 9):
        index.discard(f"k/{i}")
    for rows in (1, 7, 1 << 14):
        assert _decoded(index.export_slices(rows)) == _contents(index)
    assert Index().export_slices() == []


def test_export_slices_restarts_after_a_compaction_mid_way() -> None:
    """A compaction renumbers the rows; the slices read before it are thrown away."""
    index = Index(compaction_min=0)
    index.add_many([f"k/{i}" for i in range(100)], list(range(100)))
    real = index._store
    calls = 0

    class Hook:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def __len__(self) -> int:
            return len(real)

        def export(self, rows: Any) -> Any:
            nonlocal calls
            calls += 1
            result = real.export(rows)
            if calls == 3:  # in the middle of the first pass: remove most keys (compaction)
                for i in range(10, 100):
                    index.discard(f"k/{i}")
                index.add("late", 7)
            return result

    index._store = Hook()  # type: ignore[assignment]
    before = index._compactions
    parts = index.export_slices(rows_per_slice=10)
    assert index._compactions > before
    index._store = real
    exported = _decoded(parts)
    assert exported == _contents(index)  # the second pass saw the state after the changes


def test_export_slices_under_concurrent_writes_is_fuzzy_but_unique() -> None:
    """Keys untouched during the export appear with their value; touched keys appear at most
    once, with a value they held during the export, or not at all; keys first added during it
    do not appear."""
    index = Index(compaction_min=10**9)
    n = 3000
    index.add_many([f"k/{i}" for i in range(n)], list(range(n)))
    history: dict[str, set[int | None]] = {f"k/{i}": {i} for i in range(n)}
    started = threading.Event()
    stop = threading.Event()
    touched: set[str] = set()
    real = index._store

    class Hook:  # the writer starts once the export has begun (its first slice)
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def __len__(self) -> int:
            return len(real)

        def export(self, rows: Any) -> Any:
            started.set()
            return real.export(rows)

    index._store = Hook()  # type: ignore[assignment]

    def write() -> None:
        rng = random.Random(5)
        started.wait()
        while not stop.is_set():
            key = f"k/{rng.randrange(n)}"
            touched.add(key)
            if rng.random() < 0.3:
                index.discard(key)
                history[key].add(None)
            else:
                value = rng.getrandbits(64)
                history[key].add(value)
                index.add(key, value)
            index.add(f"new/{rng.getrandbits(32)}", 1)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        parts = index.export_slices(rows_per_slice=3)
    finally:
        stop.set()
        writer.join()
    index._store = real
    exported = _decoded(parts)
    assert not any(key.startswith("new/") for key in exported)
    for key, values in history.items():
        if key not in touched:
            assert exported[key] == int(key[2:])
        elif key in exported:  # absent when removed, or replaced (its new row is past the end)
            assert exported[key] in values
