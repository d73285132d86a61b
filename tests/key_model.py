"""A dict model of the key store for the randomized tests of its parts (test_keys_store,
test_growth): keys with chosen hashes, and one change applied to a store and to
{key: live row} alike."""

from __future__ import annotations

import numpy as np

from permindex.index.keys.hash_table import EncodedKeys
from permindex.index.keys.store import KeyStore, encode_keys


def with_hashes(keys: list[str], hashes: list[int]) -> EncodedKeys:
    """encode_keys(keys) with chosen hashes instead of XXH3 (the store takes them as given)."""
    encoded = encode_keys(keys)
    return EncodedKeys(encoded.blob, encoded.ends, np.array(hashes, dtype=np.uint64))


def apply_op(
    store: KeyStore, model: dict[str, int], hashes: dict[str, int], op: str, keys: list[str]
) -> None:
    """Apply one change to ``store`` and to ``model`` ({key: live row}): ``put`` keys[0] (a new
    row; a stored key moves, its old row unlinked first), ``remove`` the keys, or ``batch``, one
    append_many of the distinct keys (stored ones moved from their rows, still linked, which
    find_many must report as the model has them)."""
    if op == "put":
        key = keys[0]
        old = model.get(key, -1)
        if old >= 0:
            store.unlink(old)
        model[key] = store.append(key.encode(), moved_from=old)
    elif op == "remove":
        for key in dict.fromkeys(keys):
            if key in model:
                store.unlink(model.pop(key))
    else:
        distinct = list(dict.fromkeys(keys))
        batch = with_hashes(distinct, [hashes[k] for k in distinct])
        old_rows = store.find_many(batch)
        assert old_rows.tolist() == [model.get(k, -1) for k in distinct]
        first = store.append_many(batch, old_rows)
        model.update({k: first + i for i, k in enumerate(distinct)})
