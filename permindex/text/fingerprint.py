"""SimHash fingerprints (Charikar 2002, "Similarity estimation techniques from rounding
algorithms", section 3; the 64-bit form of Manku, Jain & Das Sarma 2007, section 2) of texts
(:func:`simhash`, whose docstring gives the reference algorithm), of weighted features and of
dense vectors; the tokens and shingles texts are cut into; the one check of the shingle options
(:func:`check_shingle_options`).
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping
from typing import Final, Literal

import numpy as np
import xxhash
from numpy.typing import ArrayLike, NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.hamming import FINGERPRINT_BITS, MAX_FINGERPRINT

__all__ = [
    "AUTO_CHARS_SHARE",
    "MAX_WEIGHT",
    "TOKENIZERS",
    "VECTOR_SEED",
    "VOTES",
    "WEIGHT_SCALE",
    "Tokenizer",
    "Vote",
    "check_shingle_options",
    "hyperplanes",
    "no_space_share",
    "shingle_hashes",
    "shingles",
    "simhash",
    "simhash_features",
    "simhash_many",
    "simhash_vectors",
    "simhash_weighted",
    "tokens",
]

_BIT63 = 1 << 63
#: Largest ``shingle_size`` accepted (tokens per shingle; useful ones are 1 to a few dozen).
MAX_SHINGLE_SIZE: Final = 1024
#: Largest ``min_words`` accepted (tokens a text needs to be fingerprinted).
MAX_MIN_WORDS: Final = 1_000_000

Tokenizer = Literal["words", "chars", "auto"]
#: The tokenizers of :func:`tokens` (``"words"`` is the default and the reference algorithm).
TOKENIZERS: Final = ("words", "chars", "auto")
Vote = Literal["multiset", "set"]
#: How shingles vote in :func:`simhash`: each occurrence (``"multiset"``, the default and the
#: reference algorithm) or each distinct shingle once (``"set"``).
VOTES: Final = ("multiset", "set")
#: ``tokenizer="auto"`` tokenizes a text by characters when at least this share of its
#: non-whitespace characters belong to scripts written without spaces between words.
AUTO_CHARS_SHARE: Final = 0.3
#: Weighted SimHash: weights are rounded to multiples of 1 / WEIGHT_SCALE and summed as integers.
WEIGHT_SCALE: Final = 1 << 20
#: The largest absolute weight :func:`simhash_weighted` accepts.
MAX_WEIGHT: Final = float(1 << 31)
#: Seed of the PCG64 generator that draws the hyperplanes of :func:`simhash_vectors`.
VECTOR_SEED: Final = 2002


def shingles(text: str, shingle_size: int = 3, tokenizer: Tokenizer = "words") -> list[str]:
    """The shingles of ``text`` in order, repeats included. With the default word tokenizer:
    lower-cased, split on Unicode whitespace, ``shingle_size`` consecutive words joined by one
    space; with characters (see :func:`tokens`): ``shingle_size`` consecutive non-whitespace
    characters, joined with nothing. Empty when the text has fewer tokens than
    ``shingle_size``. O(len(text)) time; the list holds about ``shingle_size`` times the text.

    Raises:
        InvalidArgumentError: ``shingle_size`` is not an int >= 1, or an unknown tokenizer
            (the errors of :func:`simhash`, from :func:`check_shingle_options`).

    Examples:
        >>> import permindex
        >>> permindex.shingles("The quick brown fox jumps")
        ['the quick brown', 'quick brown fox', 'brown fox jumps']
        >>> permindex.shingles("東京都", shingle_size=2, tokenizer="chars")
        ['東京', '京都']
    """
    check_shingle_options(shingle_size, tokenizer)
    return _shingles(text, shingle_size, tokenizer)


def _shingles(text: str, shingle_size: int, tokenizer: Tokenizer) -> list[str]:
    """:func:`shingles` with options already checked."""
    kind = _resolve_tokenizer(text, tokenizer)
    if kind == "chars":
        chars = _chars(text)
        return [chars[i : i + shingle_size] for i in range(len(chars) - shingle_size + 1)]
    words = text.lower().split()
    n = len(words) - shingle_size + 1
    if n <= 0:
        return []
    if shingle_size == 1:
        return words
    return [" ".join(words[i : i + shingle_size]) for i in range(n)]


def check_shingle_options(
    shingle_size: object = 3, tokenizer: object = "words", min_words: object = 0, bits: object = 64
) -> None:
    """The one check of the options that say how a text becomes shingles and a fingerprint,
    used by :func:`simhash`, :func:`shingles`, :func:`tokens`, :func:`shingle_hashes`, the
    offline dedup's options and the server's collection options. Checked in this order:

    - ``shingle_size``: an int in [1, :data:`MAX_SHINGLE_SIZE`] (bool refused);
    - ``bits``: 64 or 63;
    - ``tokenizer``: one of :data:`TOKENIZERS`;
    - ``min_words``: an int in [0, :data:`MAX_MIN_WORDS`] (bool refused).

    Raises:
        InvalidArgumentError: (a ``ValueError``) naming the first bad option and its value.
    """
    if not _int_in(shingle_size, 1, MAX_SHINGLE_SIZE):
        raise InvalidArgumentError(
            f"shingle_size must be an integer in [1, {MAX_SHINGLE_SIZE:,}], got {shingle_size!r}",
            value=shingle_size,
        )
    _check_bits(bits)
    if tokenizer not in TOKENIZERS:
        raise InvalidArgumentError(
            f"tokenizer must be one of {', '.join(TOKENIZERS)}, got {tokenizer!r}", value=tokenizer
        )
    if not _int_in(min_words, 0, MAX_MIN_WORDS):
        raise InvalidArgumentError(
            f"min_words must be an integer in [0, {MAX_MIN_WORDS:,}], got {min_words!r}",
            value=min_words,
        )


def _int_in(value: object, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _check_bits(bits: object) -> None:
    if bits not in (63, 64) or isinstance(bits, bool):
        raise InvalidArgumentError(
            f"bits must be 64 (the default) or 63 (bit 63 left clear), got {bits!r}", value=bits
        )


def _check_vote(vote: object) -> Vote:
    if vote not in VOTES:
        raise InvalidArgumentError(
            f"vote must be one of {', '.join(VOTES)}, got {vote!r}", value=vote
        )
    return "set" if vote == "set" else "multiset"


def simhash(
    text: str,
    *,
    shingle_size: int = 3,
    bits: int = 64,
    tokenizer: Tokenizer = "words",
    min_words: int = 0,
    vote: Vote = "multiset",
) -> int | None:
    """The SimHash fingerprint of ``text`` (the algorithm is given at the end).

    Args:
        text: any ``str``.
        shingle_size: words (or characters) per shingle (default 3).
        bits: 64 (default) or 63; with 63, bit 63 is cleared so the value fits a signed BIGINT.
        tokenizer: ``"words"`` (default), ``"chars"`` or ``"auto"``: see :func:`tokens`.
        min_words: texts with fewer tokens than this (words, or characters when the text is
            tokenized by characters) have no fingerprint; 0 (default) keeps only the
            ``shingle_size`` rule. The article this project grew from refuses fewer than 20 words:
            below that, changing one word moves the fingerprint by more bits than the threshold.
        vote: ``"multiset"`` (default: a shingle votes each time it occurs, step 2 below) or
            ``"set"`` (each distinct shingle votes once: a word repeated all over a page, a
            table of one template, no longer drowns the text the pages share; the fingerprint
            then depends only on the page's shingle set, as its Jaccard similarity does).

    Returns:
        An int in [0, 2^64) (in [0, 2^63) with ``bits=63``), or ``None`` when the text has fewer
        than ``shingle_size`` (or ``min_words``) tokens.

    Raises:
        TypeError: ``text`` is not a ``str``.
        InvalidArgumentError: (a ``ValueError``) ``shingle_size`` < 1, ``bits`` not 63/64, an
            unknown tokenizer or a negative ``min_words``.

    Source: Charikar 2002, section 3 (random-hyperplane rounding, with one hash per shingle
    as the random vector); Manku et al. 2007, section 2, for 64-bit fingerprints of web pages.

    The default algorithm, which every stored fingerprint and the shared reference vectors assume:

    1. ``text.lower()``, then ``str.split()`` (runs of Unicode whitespace separate words, so NBSP
       and U+3000 do);
    2. every run of ``shingle_size`` consecutive words joined by one space is a *shingle*; a shingle
       that repeats votes each time it occurs;
    3. each shingle is hashed with XXH3-64 (seed 0) of its UTF-8 bytes;
    4. counter i gets +1 when bit i (value ``1 << i``) of the hash is set and -1 otherwise;
    5. bit i of the fingerprint is 1 where counter i > 0 (a tie gives 0).

    A text with fewer words than ``shingle_size`` has no fingerprint: :func:`simhash` returns
    ``None``, never 0. With ``bits=63`` bit 63 is cleared, so that the value fits a signed 64-bit
    integer column (the article's PHP implementation does the same).

    Options, none of which changes the default fingerprint:

    * ``tokenizer="chars"`` (character shingles, for text written without spaces) and ``"auto"``
      (chosen per document), see :func:`tokens`; ``min_words`` refuses short texts (the article
      refuses fewer than 20 words as too noisy);
    * :func:`simhash_features` / :func:`simhash_weighted`: weighted SimHash, each feature voting
      with its weight (Charikar 2002, section 3; Manku et al. 2007, section 2, weight e.g. IDF);
    * :func:`simhash_vectors`: dense vectors by random hyperplanes (Charikar 2002, section 3).

    Computed by the compiled kernel of :func:`simhash_many` (the first call in a process loads
    it, from numba's cache after the first run on a machine).

    Examples:
        >>> import permindex
        >>> permindex.simhash("The quick brown fox jumps over the lazy dog")
        6683844254051711237
        >>> permindex.format_fingerprint(6683844254051711237)
        '5cc1c8efc0c9b905'
        >>> permindex.simhash("too short") is None  # fewer words than shingle_size
        True
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be str, not {type(text).__name__}")
    check_shingle_options(shingle_size, tokenizer, min_words, bits)
    distinct = _check_vote(vote) == "set"
    fingerprints, valid = _simhash_kernel(
        [text], shingle_size, bits, tokenizer, min_words, distinct
    )
    return int(fingerprints[0]) if valid[0] else None


_BATCH_TEXTS: Final = 4096  # texts per kernel call of simhash_many
_BATCH_CHARS: Final = 1 << 23  # ... or about this many characters (bounds the encoded copy)


def simhash_many(
    texts: Iterable[str],
    *,
    shingle_size: int = 3,
    bits: int = 64,
    tokenizer: Tokenizer = "words",
    min_words: int = 0,
    vote: Vote = "multiset",
) -> tuple[NDArray[np.uint64], NDArray[np.bool_]]:
    """The SimHash fingerprints of many texts at once: for each text, exactly
    ``simhash(text, shingle_size=..., bits=..., tokenizer=..., min_words=...)`` (every option
    means what it means there), computed by one compiled kernel per batch of texts instead of
    a Python loop over shingles (see :mod:`permindex.text.simhash_kernels`).

    Args:
        texts: an iterable of ``str`` (consumed once).
        shingle_size: as :func:`simhash`.
        bits: as :func:`simhash`.
        tokenizer: as :func:`simhash`. All three tokenizers and both votes go through the
            kernel (``"auto"`` is resolved per text in Python first).
        min_words: as :func:`simhash`.
        vote: as :func:`simhash`.

    Returns:
        ``(fingerprints, valid)``: ``(n,) uint64`` and ``(n,) bool``, in the order of
        ``texts``; ``valid[i]`` is False where :func:`simhash` returns None (fewer than
        ``shingle_size`` or ``min_words`` tokens), and ``fingerprints[i]`` is then 0.

    Raises:
        TypeError: ``texts`` is a ``str`` or ``bytes`` itself (not a batch), or an element of
            ``texts`` is not a ``str`` (named ``texts[i]``).
        InvalidArgumentError: a bad option (the errors of :func:`simhash`).
        UnicodeEncodeError: a shingle holds a lone surrogate (as :func:`simhash`).

    O(total length) time (``vote="set"``: plus sorting each text's shingle hashes). Memory: the
    UTF-8 encoding of one batch of up to 4,096 texts (or about 8 M characters), a scratch
    buffer of twice its longest text (``vote="set"``: and 8 bytes a byte of it for its
    hashes), and once a non-ASCII text is seen a 4.4 MB table of ``str.lower`` (the kernel
    lower-cases as ``str.lower`` does). A text holding a lone surrogate is not encoded: it has
    no fingerprint when it is too short, else UnicodeEncodeError (as ``str.encode``). The weighted
    variants (:func:`simhash_features`, :func:`simhash_weighted`) do not go through this
    kernel: their input is features and weights, not texts, and their vote is already one
    numpy pass.

    Examples:
        >>> import permindex
        >>> fingerprints, valid = permindex.simhash_many(
        ...     ["The quick brown fox jumps over the lazy dog", "too short"])
        >>> fingerprints.tolist(), valid.tolist()
        ([6683844254051711237, 0], [True, False])
    """
    if isinstance(texts, (str, bytes)):
        raise TypeError(
            f"texts must be an iterable of str, not one {type(texts).__name__} "
            "(for one text: simhash(text), or simhash_many([text]))"
        )
    items = texts if isinstance(texts, list) else list(texts)
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise TypeError(f"texts[{i}] must be str, not {type(text).__name__}")
    check_shingle_options(shingle_size, tokenizer, min_words, bits)
    n = len(items)
    fingerprints = np.zeros(n, dtype=np.uint64)
    valid = np.zeros(n, dtype=bool)
    distinct = _check_vote(vote) == "set"
    start = 0
    while start < n:
        stop, chars = start, 0
        while stop < n and stop - start < _BATCH_TEXTS and (chars < _BATCH_CHARS or stop == start):
            chars += len(items[stop])
            stop += 1
        fps, ok = _simhash_kernel(
            items[start:stop], shingle_size, bits, tokenizer, min_words, distinct
        )
        fingerprints[start:stop] = fps
        valid[start:stop] = ok
        start = stop
    return fingerprints, valid


def _simhash_kernel(
    texts: list[str],
    shingle_size: int,
    bits: int,
    tokenizer: Tokenizer,
    min_words: int,
    distinct: bool,
) -> tuple[NDArray[np.uint64], NDArray[np.bool_]]:
    """One kernel call for ``texts`` (checked str, options checked); ``distinct``: the set
    vote."""
    from permindex.text import simhash_kernels as kernels

    if tokenizer == "auto":
        kinds = np.fromiter(
            (kernels.KIND_CHARS if _resolve_tokenizer(t, "auto") == "chars" else 0 for t in texts),
            dtype=np.uint8,
            count=len(texts),
        )
    else:
        code = kernels.KIND_CHARS if tokenizer == "chars" else kernels.KIND_WORDS
        kinds = np.full(len(texts), code, dtype=np.uint8)
    try:
        fingerprints, valid = kernels.simhash_of(texts, kinds, shingle_size, min_words, distinct)
    except UnicodeEncodeError:  # a lone surrogate: see _unencodable
        fingerprints = np.zeros(len(texts), dtype=np.uint64)
        valid = np.zeros(len(texts), dtype=bool)
        clean: list[int] = []
        for i, text in enumerate(texts):
            if _encodes(text):
                clean.append(i)
            else:
                _unencodable(text, shingle_size, tokenizer, min_words)
        if clean:
            rows = np.array(clean, dtype=np.intp)
            fingerprints[rows], valid[rows] = kernels.simhash_of(
                [texts[i] for i in clean], kinds[rows], shingle_size, min_words, distinct
            )
    if bits == 63:
        fingerprints &= np.uint64(MAX_FINGERPRINT >> 1)
    return fingerprints, valid


def _encodes(text: str) -> bool:
    """Whether ``text`` has a UTF-8 encoding (no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _unencodable(text: str, shingle_size: int, tokenizer: Tokenizer, min_words: int) -> None:
    """A text that holds a lone surrogate (it has no UTF-8 encoding, so its shingles no hash):
    returns (no fingerprint) when it has fewer than ``shingle_size`` or ``min_words`` tokens,
    so that no shingle needs hashing; else raises the UnicodeEncodeError of encoding its first
    shingle that holds the surrogate.

    Raises:
        UnicodeEncodeError: the text has a shingle to hash.
    """
    if min_words and len(_tokens(text, tokenizer)) < min_words:
        return
    for shingle in _shingles(text, shingle_size, tokenizer):
        shingle.encode("utf-8")


# ------------------------------------------------------------------------------ tokenizers

#: Scripts written without spaces between words: Thai, Lao, Tibetan, Myanmar, Khmer, Hiragana,
#: Katakana (and its half-width forms), the CJK ideographs (with extensions A to H and the
#: compatibility block). Hangul is not among them: Korean separates words with spaces.
_NO_SPACE_CHARS: Final = re.compile(
    "[\u0e00-\u0eff\u0f00-\u0fff\u1000-\u109f\u1780-\u17ff\u3040-\u30ff\u31f0-\u31ff"
    "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003ffff]"
)


def _chars(text: str) -> str:
    """``text`` lower-cased with every whitespace character removed."""
    return "".join(text.lower().split())


def no_space_share(text: str) -> float:
    """The share (0..1) of the non-whitespace characters of ``text`` that belong to a script
    written without spaces between words (Chinese, Japanese, Thai, Lao, Khmer, Myanmar,
    Tibetan); 0.0 for a text of whitespace only."""
    total = sum(map(len, text.split()))
    if not total:
        return 0.0
    return len(_NO_SPACE_CHARS.findall(text)) / total


def _resolve_tokenizer(text: str, tokenizer: Tokenizer) -> Literal["words", "chars"]:
    if tokenizer == "auto":
        return "chars" if no_space_share(text) >= AUTO_CHARS_SHARE else "words"
    return "chars" if tokenizer == "chars" else "words"


def tokens(text: str, tokenizer: Tokenizer = "words") -> list[str]:
    """The tokens of ``text`` that shingles are made of, lower-cased.

    * ``"words"`` (the default, the reference algorithm): ``text.lower().split()``, runs of
      Unicode whitespace separate words.
    * ``"chars"``: every non-whitespace character is a token (whitespace is dropped), so
      shingles are runs of ``shingle_size`` characters. For text written without spaces
      (Chinese, Japanese, Thai), where the word tokenizer sees one long word per sentence or
      paragraph: character n-grams are the usual shingles there (Broder 1997 shingles a
      document's tokens, whatever they are).
    * ``"auto"``: per document, ``"chars"`` when at least :data:`AUTO_CHARS_SHARE` (30%) of its
      non-whitespace characters belong to a script written without spaces (see
      :func:`no_space_share`), else ``"words"``. An English page quoting a Chinese sentence
      stays on words; a Chinese page with English product names goes to characters.

    Fingerprints made with different tokenizers are not comparable: index one collection with
    one tokenizer (``"auto"`` is one rule, so it is fine for a mixed collection).

    O(len(text)) time and memory.

    Raises:
        InvalidArgumentError: an unknown tokenizer (the error of :func:`simhash`, from
            :func:`check_shingle_options`).

    Examples:
        >>> import permindex
        >>> permindex.tokens("The quick  BROWN fox")
        ['the', 'quick', 'brown', 'fox']
        >>> permindex.tokens("東京 都", tokenizer="chars")
        ['東', '京', '都']
    """
    check_shingle_options(tokenizer=tokenizer)
    return _tokens(text, tokenizer)


def _tokens(text: str, tokenizer: Tokenizer) -> list[str]:
    """:func:`tokens` with the tokenizer already checked."""
    kind = _resolve_tokenizer(text, tokenizer)
    if kind == "chars":
        return list(_chars(text))
    return text.lower().split()


def shingle_hashes(
    text: str, *, shingle_size: int = 3, tokenizer: Tokenizer = "words"
) -> NDArray[np.uint64]:
    """XXH3-64 (seed 0) of the UTF-8 bytes of each shingle of ``text`` (:func:`shingles`), in
    order, repeats included, as a (m,) uint64 array: the votes of :func:`simhash`. Empty when
    the text is shorter than a shingle. Computed by the kernel of :func:`simhash_many`.
    O(len(text)); the array has room for one hash per UTF-8 byte while it is filled.

    Raises:
        InvalidArgumentError: a bad ``shingle_size`` or tokenizer (see :func:`simhash`).
        UnicodeEncodeError: a shingle holds a lone surrogate.
    """
    check_shingle_options(shingle_size, tokenizer)
    from permindex.text import simhash_kernels as kernels

    kind = kernels.KIND_CHARS if _resolve_tokenizer(text, tokenizer) == "chars" else 0
    try:
        return kernels.shingle_hashes_of(text, kind, shingle_size)
    except UnicodeEncodeError:  # a lone surrogate: raises if a shingle holds it
        _unencodable(text, shingle_size, tokenizer, 0)
    return np.zeros(0, dtype=np.uint64)


# ------------------------------------------------------------------------- weighted SimHash


def simhash_weighted(hashes: ArrayLike, weights: ArrayLike, *, bits: int = 64) -> int | None:
    """Weighted SimHash of features given by their 64-bit hashes: counter i adds the weight of
    every feature whose hash has bit i set and subtracts the others'; bit i of the fingerprint
    is 1 where counter i > 0 (Charikar 2002, section 3; Manku et al. 2007, section 2, where a
    feature's weight is e.g. its IDF). With every weight 1 and the shingle hashes of a text
    (:func:`shingle_hashes`) this is exactly :func:`simhash`.

    Determinism: weights are rounded to the nearest multiple of 1 / :data:`WEIGHT_SCALE` (2^-20)
    and the counters summed as exact integers, so the result never depends on the order of
    summation, the CPU or the numpy version (a float sum could flip a bit whose counter is
    within rounding error of 0 from one machine to another).

    Args:
        hashes: (m,) unsigned 64-bit feature hashes (a repeated hash votes each time).
        weights: (m,) finite real weights, ``|w| <=`` :data:`MAX_WEIGHT`; negative ones vote
            against their hash's bits.
        bits: 64 or 63 (bit 63 cleared).

    Returns:
        The fingerprint, or None when no feature has a weight that rounds to a non-zero value.

    Raises:
        InvalidArgumentError: shapes differ or are not 1-d, a weight is NaN, infinite or too
            large, ``bits`` not 63/64.

    Examples:
        >>> import numpy as np, permindex
        >>> hashes = np.array([0xFF00FF00FF00FF00, 0x0F0F0F0F0F0F0F0F], dtype=np.uint64)
        >>> import permindex
        >>> permindex.format_fingerprint(permindex.simhash_weighted(hashes, [2.0, 1.0]))
        'ff00ff00ff00ff00'
        >>> permindex.simhash_weighted(hashes, [0.0, 0.0]) is None  # no weight
        True
    """
    _check_bits(bits)
    h = np.asarray(hashes)
    if h.size == 0:
        h = h.astype(np.uint64)
    if h.ndim != 1 or h.dtype.kind not in "ui":
        raise InvalidArgumentError(
            f"hashes must be a 1-d array of unsigned 64-bit integers, got shape {h.shape} "
            f"dtype {h.dtype}",
            value=h.shape,
        )
    w = np.asarray(weights, dtype=np.float64)
    if w.shape != h.shape:
        raise InvalidArgumentError(
            f"got {h.size} hashes and weights of shape {w.shape}; give one weight per hash",
            value=w.shape,
        )
    bad = np.flatnonzero(~np.isfinite(w) | (np.abs(w) > MAX_WEIGHT))
    if bad.size:
        i = int(bad[0])
        raise InvalidArgumentError(
            f"weights[{i}] = {w[i]!r} is not a finite number of at most {MAX_WEIGHT:g} in "
            "absolute value",
            value=float(w[i]),
        )
    q = np.rint(w * WEIGHT_SCALE).astype(np.int64)
    nonzero = q != 0
    if not nonzero.any():
        return None
    q = q[nonzero]
    ones = np.unpackbits(
        h[nonzero].astype("<u8").view(np.uint8).reshape(-1, 8), axis=1, bitorder="little"
    )
    # counter_i = sum_j q_j * (+1 if bit i of hash j else -1) = 2 * (q @ ones)_i - sum(q)
    if float(np.abs(q).sum(dtype=np.float64)) < 2.0**61:
        counters = 2 * (q @ ones.astype(np.int64)) - int(q.sum())
        set_bits = np.flatnonzero(counters > 0).tolist()
    else:  # beyond int64: exact Python integers (slow, but never wrong)
        total = sum(q.tolist())
        qs = q.tolist()
        set_bits = [
            i
            for i in range(FINGERPRINT_BITS)
            if 2 * sum(x for x, b in zip(qs, ones[:, i].tolist(), strict=True) if b) > total
        ]
    fingerprint = sum(1 << int(i) for i in set_bits)
    if bits == 63:
        fingerprint &= ~_BIT63
    return fingerprint


def simhash_features(
    features: Mapping[str, float]
    | Mapping[bytes, float]
    | Mapping[str | bytes, float]
    | Iterable[tuple[str | bytes, float]],
    *,
    bits: int = 64,
) -> int | None:
    """Weighted SimHash of named features: ``{feature: weight}`` (or an iterable of
    ``(feature, weight)`` pairs, where a repeated feature votes each time). A feature is a
    ``str`` (hashed as its UTF-8 bytes) or ``bytes``, with XXH3-64 (seed 0) as for shingles; the
    vote is :func:`simhash_weighted` (Charikar 2002, section 3; Manku et al. 2007, section 2).

    ``simhash_features({shingle: count})`` over the shingles of a text and their counts equals
    ``simhash(text)``. Weights can be term frequencies, TF-IDF, or anything a user trusts more
    than plain counts (Manku et al. weight features by IDF).

    Returns None when there is no feature with a non-zero weight.

    Raises:
        TypeError: a feature is neither str nor bytes, or a weight is not a real number.
        InvalidArgumentError: a weight is NaN, infinite or larger than :data:`MAX_WEIGHT`.

    Examples:
        >>> import collections, permindex
        >>> text = "the quick brown fox jumps over the lazy dog"
        >>> import permindex
        >>> counts = collections.Counter(permindex.shingles(text))
        >>> permindex.simhash_features(counts) == permindex.simhash(text)
        True
        >>> permindex.simhash_features({"quick brown fox": 2.0, "lazy dog": 1.0})
        6527918712306898991
    """
    items: Iterable[tuple[object, object]] = (
        features.items() if isinstance(features, Mapping) else features
    )
    hash_ = xxhash.xxh3_64_intdigest
    hashes: list[int] = []
    weights: list[float] = []
    for feature, weight in items:
        if isinstance(feature, str):
            hashes.append(hash_(feature.encode("utf-8")))
        elif isinstance(feature, bytes):
            hashes.append(hash_(feature))
        else:
            raise TypeError(f"a feature must be str or bytes, not {type(feature).__name__}")
        if isinstance(weight, bool) or not isinstance(
            weight, (int, float, np.integer, np.floating)
        ):
            raise TypeError(
                f"the weight of feature {feature!r} must be a real number, not "
                f"{type(weight).__name__}"
            )
        weights.append(float(weight))
    return simhash_weighted(
        np.array(hashes, dtype=np.uint64), np.array(weights, dtype=np.float64), bits=bits
    )


# ---------------------------------------------------------------- dense vectors (hyperplanes)

_PLANE_SCALE: Final = 1 << 10  # hyperplane coordinates are multiples of 2^-10
_EXACT_BITS: Final = 52  # float64 holds every integer below 2^53
_PLANE_BITS: Final = 14  # |hyperplane coordinate| * 2^10 < 2^14 (Box-Muller gives |z| < 8.6)
_VECTOR_BITS: Final = 24  # at most this many bits per vector coordinate
_VECTOR_CHUNK: Final = 4096  # rows projected per matrix product


@functools.lru_cache(maxsize=16)
def _hyperplanes(d: int, seed: int) -> NDArray[np.float64]:
    n = FINGERPRINT_BITS * d
    pairs = (n + 1) // 2
    raw = np.random.PCG64(seed).random_raw(2 * pairs).reshape(pairs, 2)
    u1 = ((raw[:, 0] >> np.uint64(11)).astype(np.float64) + 1.0) * 2.0**-53  # (0, 1]
    u2 = (raw[:, 1] >> np.uint64(11)).astype(np.float64) * 2.0**-53  # [0, 1)
    radius = np.sqrt(-2.0 * np.log(u1))
    angle = 2.0 * math.pi * u2
    normal = np.empty((pairs, 2), dtype=np.float64)
    normal[:, 0] = radius * np.cos(angle)
    normal[:, 1] = radius * np.sin(angle)
    planes = np.rint(normal.reshape(-1)[:n] * _PLANE_SCALE).reshape(FINGERPRINT_BITS, d)
    planes.setflags(write=False)
    return planes


def hyperplanes(d: int, *, seed: int = VECTOR_SEED) -> NDArray[np.float64]:
    """The 64 random hyperplanes (normal vectors) of :func:`simhash_vectors` in dimension ``d``:
    a read-only (64, d) array whose row i decides bit i, in units of 2^-10 (integer values).

    Drawn from standard normal coordinates (so that their directions are uniform on the sphere,
    as the lemma behind Charikar 2002, section 3, needs): NumPy's PCG64 bit generator seeded
    with ``seed`` (default :data:`VECTOR_SEED`) gives raw 64-bit words — whose stream NumPy
    keeps fixed, unlike the ``Generator`` methods' — turned into normal values by the
    Box-Muller transform, then rounded to multiples of 2^-10. The normal values fill the
    (64, d) array row by row: plane 0's d coordinates first.

    The only platform-dependent step is ``log``/``cos``/``sin`` (correct to an ulp or so
    everywhere); a coordinate would change only if such an error crossed a rounding boundary,
    about one chance in 2^40 per coordinate. O(64 d) time and memory, cached per (d, seed).

    Raises:
        InvalidArgumentError: ``d`` is not an int >= 1, or ``seed`` not an int >= 0.
    """
    if isinstance(d, bool) or not isinstance(d, int) or d < 1:
        raise InvalidArgumentError(f"dimension must be a positive integer, got {d!r}", value=d)
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise InvalidArgumentError(f"seed must be an integer >= 0, got {seed!r}", value=seed)
    return _hyperplanes(d, seed)


def simhash_vectors(X: ArrayLike, *, seed: int = VECTOR_SEED, bits: int = 64) -> NDArray[np.uint64]:
    """SimHash of dense vectors by random hyperplanes (Charikar 2002, section 3): bit i of a
    vector's fingerprint is 1 when its dot product with hyperplane i (:func:`hyperplanes`) is
    > 0 (0 gives 0). Two vectors at angle theta differ in each bit with probability theta / pi,
    so their expected Hamming distance is 64 * theta / pi: cosine similarity becomes Hamming
    distance. Only directions count: scaling a vector by a positive number keeps its
    fingerprint.

    Args:
        X: (n, d) real array (embeddings, TF-IDF rows...), every row finite and not all zero.
        seed: chooses the hyperplanes (default :data:`VECTOR_SEED`); fingerprints made with
            different seeds or dimensions are not comparable.
        bits: 64, or 63 to clear bit 63.

    Returns:
        (n,) uint64 fingerprints, the same in every process and on every machine.

    Exactness: each row is scaled by a power of two (exact) so that its largest coordinate has
    ``b = min(24, 52 - 14 - ceil(log2 d))`` bits, and rounded to integers; hyperplane
    coordinates are integers below 2^14. Every product and partial sum of a projection is then
    an integer below 2^53, which float64 represents exactly, so the BLAS matrix product gives the
    same exact value in any summation order, with or without FMA, on any CPU: no sign can flip
    between machines. Rounding the coordinates moves the vector by at most 2^-b of its largest
    coordinate (``b = 24`` up to d = 16,384; d is limited to 2^22).

    Raises:
        InvalidArgumentError: X is not 2-d or is empty in d, holds NaN or infinity, a row is all
            zeros (no direction), d > 2^22, or a bad seed or ``bits``.

    Examples:
        >>> import permindex
        >>> vectors = [[1.0, 0.0, 0.0], [2.0, 0.0, 0.0], [0.9, 0.1, 0.0]]
        >>> fingerprints = permindex.simhash_vectors(vectors)
        >>> fingerprints.dtype
        dtype('uint64')
        >>> a, b, c = fingerprints.tolist()
        >>> a == b, permindex.hamming(a, c)  # only directions count; a small angle, a few bits
        (True, 3)
    """
    _check_bits(bits)
    x = np.asarray(X, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] == 0:
        raise InvalidArgumentError(
            f"X must be a 2-d array of shape (n, d) with d >= 1, got shape {x.shape} (one "
            "vector: X[None, :])",
            value=x.shape,
        )
    n, d = x.shape
    if d > 1 << 22:
        raise InvalidArgumentError(f"dimension {d} is above the limit of 2^22", value=d)
    planes = hyperplanes(d, seed=seed).T  # (d, 64)
    vector_bits = min(_VECTOR_BITS, _EXACT_BITS - _PLANE_BITS - max(1, math.ceil(math.log2(d))))
    out = np.empty(n, dtype=np.uint64)
    powers = np.left_shift(np.uint64(1), np.arange(FINGERPRINT_BITS, dtype=np.uint64))
    for start in range(0, n, _VECTOR_CHUNK):
        rows = x[start : start + _VECTOR_CHUNK]
        bad = ~np.isfinite(rows).all(axis=1)
        peak = np.abs(rows).max(axis=1) if rows.size else np.zeros(0)
        bad |= peak == 0
        if bad.any():
            i = start + int(np.flatnonzero(bad)[0])
            what = "holds NaN or infinity" if not np.isfinite(x[i]).all() else "is all zeros"
            raise InvalidArgumentError(f"X[{i}] {what}: it has no direction", value=i)
        _, exponent = np.frexp(peak)  # peak in [2^(e-1), 2^e)
        scaled = np.rint(np.ldexp(rows, (vector_bits - exponent)[:, None]))
        signs = (scaled @ planes) > 0  # (m, 64), exact integers
        out[start : start + rows.shape[0]] = (signs.astype(np.uint64) * powers).sum(
            axis=1, dtype=np.uint64
        )
    if bits == 63:
        out &= np.uint64(MAX_FINGERPRINT >> 1)
    return out
