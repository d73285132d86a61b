"""A document's MinHash sketch, computed where the document is (a crawler), so that only the
sketch travels to a Jaccard collection (:func:`minhash_sketch`). Shingled exactly as the
offline Jaccard mode (``permindex dedup --method minhash``) and the server shingle: lower-cased
``str.split()`` words, word shingles as a set, XXH3-64 hashes
(:func:`permindex.text.fingerprint.shingle_hashes`), signatures of
:func:`permindex.near.minhash.signatures`.
"""

from __future__ import annotations

import numpy as np

from permindex.index.jaccard.sketch import MinHashSketch, distinct_sorted
from permindex.near.minhash import DEFAULT_PERMUTATIONS, check_permutations, signatures
from permindex.text.fingerprint import Tokenizer, check_shingle_options, shingle_hashes, tokens

__all__ = ["minhash_sketch", "minhash_sketches"]


def minhash_sketch(
    text: str,
    *,
    permutations: int = DEFAULT_PERMUTATIONS,
    shingle_size: int = 3,
    min_words: int = 0,
    tokenizer: Tokenizer = "words",
) -> MinHashSketch | None:
    """The MinHash sketch of ``text``: its shingle-hash set (sorted, distinct ``(m,) uint64``)
    and its signature (``(permutations,) uint32``), or None when the text is too short (fewer
    words than ``shingle_size`` or ``min_words``: no sketch, as the offline mode and the server
    treat it). Send it to a Jaccard collection instead of the text (``Client.add``,
    ``check_and_add`` and ``query_jaccard(..., by="sketch")`` take it; ``Client.query``,
    for fingerprints, does not); ``permutations`` must be the collection's.

    Raises:
        TypeError: ``text`` is not a str (bytes included: decode them first).
        InvalidArgumentError: bad ``permutations``, ``shingle_size`` or ``min_words``.

    O(len(text) + m x permutations).

    >>> from permindex import minhash_sketch
    >>> sketch = minhash_sketch("the quick brown fox jumps over the lazy dog")
    >>> sketch.shingle_hashes.size, sketch.signature.shape
    (7, (128,))
    >>> minhash_sketch("too short") is None
    True
    """
    found = minhash_sketches(
        [text], permutations=permutations, shingle_size=shingle_size, min_words=min_words,
        tokenizer=tokenizer,
    )  # fmt: skip
    return found[0]


def minhash_sketches(
    texts: list[str],
    *,
    permutations: int = DEFAULT_PERMUTATIONS,
    shingle_size: int = 3,
    min_words: int = 0,
    tokenizer: Tokenizer = "words",
) -> list[MinHashSketch | None]:
    """:func:`minhash_sketch` of each text (the signatures in one compiled call).

    >>> from permindex.text.minhash import minhash_sketches
    >>> [s is None for s in minhash_sketches(["a b c", "a b"])]
    [False, True]
    """
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(
                f"texts[{i}] must be a str, not {type(text).__name__}"
                + (" (decode the bytes first)" if isinstance(text, (bytes, bytearray)) else "")
            )
    check_permutations(permutations)
    check_shingle_options(shingle_size, tokenizer, min_words=min_words)
    sets: list[np.ndarray] = []
    where: list[int] = []
    for i, text in enumerate(texts):
        if min_words and len(tokens(text, tokenizer)) < min_words:
            continue
        hashes = shingle_hashes(text, shingle_size=shingle_size, tokenizer=tokenizer)
        if hashes.size == 0:
            continue
        sets.append(distinct_sorted(hashes))
        where.append(i)
    out: list[MinHashSketch | None] = [None] * len(texts)
    if not sets:
        return out
    offsets = np.zeros(len(sets) + 1, dtype=np.int64)
    np.cumsum([s.size for s in sets], out=offsets[1:])
    signature = signatures(np.concatenate(sets), offsets, permutations)
    for j, i in enumerate(where):
        out[i] = MinHashSketch(sets[j], signature[j])
    return out
