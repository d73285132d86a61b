"""Independent references the compiled kernels of ``permindex/text/`` and ``permindex/near/``
are checked against: SimHash and shingle hashes written from their definition in plain Python
(with the ``xxhash`` package's XXH3-64 for each shingle), MinHash signatures in Python integers,
and exact Jaccard similarities and intersections with Python sets.

Slow on purpose and obviously right: one Python operation per shingle, bit and permutation, no
numpy, no numba. Nothing here imports the kernels; ``tokenizer="auto"`` takes the package's
choice rule (:func:`permindex.text.fingerprint.no_space_share`, a Python function that the
kernels never re-implement: they are told the tokenizer of each text).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import xxhash

from permindex.text.fingerprint import AUTO_CHARS_SHARE, no_space_share

__all__ = [
    "intersection_size",
    "jaccard",
    "minhash_signature",
    "shingle_hashes",
    "shingle_strings",
    "simhash",
    "vote",
]

_BITS = 64
_MASK = (1 << 64) - 1


def _resolve(text: str, tokenizer: str) -> str:
    """``"words"`` or ``"chars"``; ``"auto"``: chars when at least 30 % of the non-whitespace
    characters of ``text`` are of a script written without spaces."""
    if tokenizer == "auto":
        return "chars" if no_space_share(text) >= AUTO_CHARS_SHARE else "words"
    return tokenizer


def _tokens(text: str, tokenizer: str) -> list[str]:
    """``text.lower().split()`` (words), or each non-whitespace character of ``text.lower()``
    (chars)."""
    words = text.lower().split()
    if _resolve(text, tokenizer) == "chars":
        return [c for word in words for c in word]
    return words


def shingle_strings(text: str, shingle_size: int = 3, tokenizer: str = "words") -> list[str]:
    """Every run of ``shingle_size`` consecutive tokens, joined by one space (words) or by
    nothing (chars), in order, repeats included."""
    tokens = _tokens(text, tokenizer)
    joiner = " " if _resolve(text, tokenizer) == "words" else ""
    return [
        joiner.join(tokens[i : i + shingle_size]) for i in range(len(tokens) - shingle_size + 1)
    ]


def shingle_hashes(text: str, shingle_size: int = 3, tokenizer: str = "words") -> list[int]:
    """XXH3-64 (seed 0, the ``xxhash`` package) of the UTF-8 bytes of each shingle, in order.
    Raises UnicodeEncodeError where a shingle holds a lone surrogate."""
    return [
        xxhash.xxh3_64_intdigest(s.encode("utf-8"))
        for s in shingle_strings(text, shingle_size, tokenizer)
    ]


def vote(hashes: Sequence[int]) -> int:
    """Charikar's vote: counter i gets +1 for each hash with bit i set and -1 for each without;
    bit i of the result is 1 where counter i > 0."""
    counters = [0] * _BITS
    for h in hashes:
        for bit in range(_BITS):
            counters[bit] += 1 if (h >> bit) & 1 else -1
    return sum(1 << bit for bit in range(_BITS) if counters[bit] > 0)


def simhash(
    text: str,
    shingle_size: int = 3,
    bits: int = 64,
    tokenizer: str = "words",
    min_words: int = 0,
    vote_: str = "multiset",
) -> int | None:
    """The SimHash of ``text`` by the definition (Charikar 2002, section 3): the vote of its
    shingle hashes (each occurrence, or each distinct hash once with ``vote_="set"``); None
    when it has fewer than ``shingle_size`` or ``min_words`` tokens; bit 63 cleared with
    ``bits=63``. Raises UnicodeEncodeError where a shingle holds a lone surrogate."""
    if len(_tokens(text, tokenizer)) < min_words:
        return None
    hashes = shingle_hashes(text, shingle_size, tokenizer)
    if not hashes:
        return None
    fingerprint = vote(sorted(set(hashes)) if vote_ == "set" else hashes)
    return fingerprint & ~(1 << 63) if bits == 63 else fingerprint


def minhash_signature(hashes: Iterable[int], a: Sequence[int], b: Sequence[int]) -> list[int]:
    """For each permutation p: the smallest ``((a[p] * x + b[p]) mod 2^64) >> 32`` over the
    shingle hashes x, in Python integers; 2^32 - 1 for no hash."""
    values = list(hashes)
    return [
        min(((ap * x + bp) & _MASK) >> 32 for x in values) if values else (1 << 32) - 1
        for ap, bp in zip(a, b, strict=True)
    ]


def intersection_size(left: Iterable[int], right: Iterable[int]) -> int:
    """|set(left) & set(right)|."""
    return len(set(left) & set(right))


def jaccard(left: Iterable[object], right: Iterable[object]) -> float:
    """|A & B| / |A | B| of the two sets (0.0 for two empty sets)."""
    a, b = set(left), set(right)
    union = len(a | b)
    return len(a & b) / union if union else 0.0
