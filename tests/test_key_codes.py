"""Keys stored as codes (permindex.index.keys.codec): the key store through the Index against a
dict model (hypothesis: any UTF-8 keys, NUL inside and 1,024-byte ones, integer keys and their
near misses, URLs; adds, replacements, removals, compactions, growth, the dictionary trained
part-way), each key's code canonical (``_check``), integer and URL keys round-tripping exactly
through lookups, export, the write-ahead log, a snapshot and a restart of a Store, a version-3
snapshot made before the codes loading with the same keys, and the bytes a key takes."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from permindex import Index
from permindex.index.keys.codec import Dictionary, decode_codes, encode_section, train_dictionary
from permindex.index.keys.rows import TRAIN_ROWS
from permindex.storage.key_section import encode_section as key_section
from permindex.storage.snapshot import read_snapshot
from permindex.storage.store import Store

DATA = Path(__file__).parent / "data"

_near_integers = st.sampled_from(
    [
        "0",
        "7",
        "00",
        "01",
        "-1",
        "+1",
        "1.0",
        " 1",
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551615",
        "18446744073709551616",
        "123456789012345678901234567890",
        "\uff11\uff12\uff13",
        "k00000001",
        "k0000000\uff11",
    ]
)
_keys = st.one_of(
    _near_integers,
    st.integers(0, (1 << 63) - 1).map(str),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=12),
    st.text(st.characters(codec="utf-8"), min_size=1, max_size=12).map(
        lambda t: t[:1] + "\x00" + t
    ),
    st.sampled_from(
        ["x" * 1024, "é" * 512, "éA" * 341, "https://www.h1.org/a/b/c.html", "https://www.h1.org/"]
    ),
)
_ops = st.lists(
    st.tuples(
        st.sampled_from(["add", "add_many", "remove"]), st.lists(_keys, min_size=1, max_size=6)
    ),
    max_size=30,
)


def _url(rng: random.Random) -> str:
    words = ["news", "sport", "tech", "world", "2024", "2025", "page", "item"]
    path = "/".join(rng.choice(words) for _ in range(rng.randint(3, 6)))
    return f"https://www.host{rng.randrange(300)}.example.org/{path}/{rng.randrange(10**6)}.html"


def _fill(index: Index, model: dict[str, int], count: int, seed: int) -> None:
    rng = random.Random(seed)
    keys = [_url(rng) if i % 2 else str(rng.randrange(1 << 63)) for i in range(count)]
    fps = [rng.getrandbits(64) for _ in keys]
    index.add_many(keys, fps)
    model.update(zip(keys, fps, strict=True))


@settings(max_examples=60, deadline=None)
@given(_ops, st.integers(0, 3), st.booleans())
def test_the_store_against_a_dict(
    ops: list[tuple[str, list[str]]], seed: int, trained: bool
) -> None:
    """Every change applied to an Index (compaction at every occasion) and to a dict; lookups,
    gets, single lookups, iteration and export equal the dict's, and the store's invariants
    hold (every code canonical, every live key found). ``trained``: the dictionary is trained
    first (URLs)."""
    rng = random.Random(seed)
    index = Index(compaction_min=0)
    model: dict[str, int] = {}
    if trained:
        _fill(index, model, TRAIN_ROWS + 10, seed)
        assert index._store.dictionary.size > 0
    for op, keys in ops:
        if op == "add":
            fp = rng.getrandbits(64)
            index.add(keys[0], fp)
            model[keys[0]] = fp
        elif op == "add_many":
            fps = [rng.getrandbits(64) for _ in keys]
            index.add_many(keys, fps)
            model.update(zip(keys, fps, strict=True))
        else:
            for key in keys:
                index.discard(key)
                model.pop(key, None)
    index._check()
    assert len(index) == len(model)
    for key, fp in model.items():
        assert index.get(key) == fp
        # a single lookup decodes its match's key into the store's buffer: a 1,024-byte key
        # grows it, a shorter key after a longer one must not carry the longer one's bytes
        assert key in [m.key for m in index.query(fp, k=0)]
    assert set(index) == set(model)
    exported, values = index.export()
    assert dict(zip(exported, values.tolist(), strict=True)) == model
    probe = [*model, "never-stored", "01", "-1"]
    assert index.contains_many(probe).tolist() == [k in model for k in probe]


@settings(max_examples=40, deadline=None)
@given(st.lists(_keys, min_size=1, max_size=40), st.booleans())
def test_codes_decode_to_the_keys(keys: list[str], trained: bool) -> None:
    """encode_section then decode_codes gives the key section back, with or without a
    dictionary; a decimal integer's code is at most 9 bytes."""
    raw, ends = key_section(keys)
    blob = np.frombuffer(raw, dtype=np.uint8)
    words = train_dictionary([k.encode() for k in keys * 2]) if trained else Dictionary.empty()
    codes, sizes, _ = encode_section(blob, ends, words.data, words.offsets, words.slots)
    starts = np.concatenate(([0], np.cumsum(sizes)[:-1])).astype(np.int64)
    section, _lengths = decode_codes(codes, starts, sizes, words.data, words.offsets)
    assert section.tobytes() == raw
    for key, size in zip(keys, sizes.tolist(), strict=True):
        if key.isdigit() and key.isascii() and len(key) <= 19 and not trained:
            assert size <= 9


def test_integer_and_url_keys_round_trip_through_the_log_a_snapshot_and_restarts(
    tmp_path: Path,
) -> None:
    """A Store of integer, near-integer and URL keys (the dictionary trained): lookups, export,
    the log replayed at a restart, a snapshot and a second restart all give the exact keys."""
    model: dict[str, int] = {}
    rng = random.Random(5)
    keys = [str(rng.randrange(1 << 63)) for _ in range(3000)] + [_url(rng) for _ in range(3000)]
    keys += ["0", "01", "-1", "9223372036854775808", "k00000001", "a\x00b", "x" * 1024]
    fps = [rng.getrandbits(64) for _ in keys]
    model.update(zip(keys, fps, strict=True))
    with Store.open(tmp_path, fsync="never") as store:
        store.add_many(keys, fps)
        store.remove_many(keys[:10])
        for key in keys[:10]:
            del model[key]
        assert store.index._store.dictionary.size > 0

    def same(index: Index) -> None:
        assert len(index) == len(model)
        exported, values = index.export()
        assert dict(zip(exported, values.tolist(), strict=True)) == model
        sample = list(model)[::97]
        assert [index.get(k) for k in sample] == [model[k] for k in sample]
        for key in sample[:20]:
            assert any(m.key == key for m in index.query(model[key], k=0))
        index._check()

    with Store.open(tmp_path, fsync="never") as store:  # from the log
        same(store.index)
        store.snapshot()
    with Store.open(tmp_path, fsync="never") as store:  # from the snapshot
        same(store.index)


def _worst_keys(rng: random.Random) -> list[str]:
    """Keys whose codes are longest for their bytes: a 2-, 3- or 4-byte character between ASCII
    bytes (NUL among them) takes a run code byte each, up to 1,024 UTF-8 bytes a key."""
    keys = []
    for i in range(300):
        unit = rng.choice(["\u00e9A", "\u00e9\x00", "\u65e5A", "A\U0001f600", "\u00e9/"])
        count = rng.randrange(1, 1020 // len(unit.encode()))
        keys.append(f"{i}:" + unit * count)
    return keys


def test_keys_whose_codes_are_longest_for_their_bytes(tmp_path: Path) -> None:
    """A key with a non-ASCII character between ASCII bytes codes each as a run (3 code bytes
    for 2 of UTF-8): such keys, one at a time and in a batch, round-trip exactly through
    lookups, gets, single lookups, export, a restart from the log and from a snapshot. Their
    codes once overran the buffer sized for a run code per 16 bytes (corrupting the heap)."""
    rng = random.Random(11)
    keys = _worst_keys(rng)
    fps = [rng.getrandbits(64) for _ in keys]
    model = dict(zip(keys, fps, strict=True))
    with Store.open(tmp_path, fsync="never") as store:
        store.add_many(["\u00e9A" * 341], [1])  # 1,023 bytes, 1,364 code bytes
        model["\u00e9A" * 341] = 1
        store.add_many(keys, fps)

    def same(index: Index) -> None:
        index._check()
        assert index.contains_many(list(model)).tolist() == [True] * len(model)
        assert [index.get(k) for k in model] == list(model.values())
        for key, fp in model.items():
            assert key in [m.key for m in index.query(fp, k=0)]
        exported, values = index.export()
        assert dict(zip(exported, values.tolist(), strict=True)) == model

    with Store.open(tmp_path, fsync="never") as store:  # from the log
        same(store.index)
        store.snapshot()
    with Store.open(tmp_path, fsync="never") as store:  # from the snapshot
        same(store.index)


def test_a_version_3_snapshot_made_before_the_codes_loads(tmp_path: Path) -> None:
    """tests/data/snapshot-v3 was written by the key store before codes (FORMAT_VERSION 3):
    it loads with the same keys and lookups."""
    shutil.copytree(DATA / "snapshot-v3", tmp_path / "data")
    expected = json.loads((DATA / "snapshot-v3.json").read_text())
    assert read_snapshot(tmp_path / "data" / "snapshot.pmx").info.version == 3
    with Store.open(tmp_path / "data", fsync="never") as store:
        index = store.index
        assert len(index) == len(expected)
        keys, fps = index.export()
        assert dict(zip(keys, fps.tolist(), strict=True)) == expected
        for key, fp in expected.items():
            assert index.get(key) == fp
        index._check()


def test_bytes_a_key_takes() -> None:
    """A k-key's and an integer key's code bytes and the bytes a key takes in all (codes,
    lengths, block offsets and the map), on 20,000 keys."""
    n = 20_000
    rng = random.Random(1)
    for keys, most in (
        ([f"k{rng.randrange(10**8):08d}" for _ in range(n)], 15.5),
        ([str(rng.randrange(10**9)) for _ in range(n)], 14.5),
    ):
        index = Index()
        index.add_many(keys, np.arange(n, dtype=np.uint64))
        parts = index.memory_breakdown()
        per_key = (parts.key_bytes + parts.key_offsets + parts.key_hashes + parts.key_map) / n
        assert per_key <= most, per_key
