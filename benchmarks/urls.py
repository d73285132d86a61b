"""The URLs of a synthetic web crawl: keys for measuring what a key store holds (issue 43).

Each URL is a pure function of ``(seed, i)`` for a document number ``i`` in [0, 10^10), so any
subset, in any order, is made without making the others (a crawl of 10^8 is made chunk by
chunk, in whatever order its keys are added)::

    https://<host>/<word>/<word>/.../<word>-<i><suffix>

- **hosts**: ``hosts`` (3,000 by default) made-up names, 12 to 25 bytes
  (``www.talopa.com``, ``news.kivarumesto.co.uk``), drawn with Zipf-like popularity (rank r
  weighs 1 / (r + 1)), so a few hosts hold many pages and every host some;
- **paths**: 3 to 6 segments. Segment j of a page on host h is a word of a ``vocabulary``
  (5,000 pronounceable made-up words of 3 to 10 letters) chosen by a Zipf-like rank (rank r
  weighs 1 / (r + 1)) from an offset of its own for (h, j): the pages of a host share their first
  segments (its sections) the way a site's pages do, and words recur across hosts;
- **the last segment** is a word, ``-``, the decimal document number and a suffix (``.html``,
  ``.htm``, ``.php`` or none): the number makes every URL unique (words hold no digit or ``-``);
- **length** 50 to 100 bytes (ASCII, so bytes = characters): the segment count drawn is kept
  when it gives a length in range, else the nearest count that does; a page for which no count
  does is drawn again (rare).

Vectorised with numpy in chunks of :data:`CHUNK` pages (about 2.5 s per 10^6 URLs here, their
str included); nothing per URL runs in Python but the final ``str.split``.
``python benchmarks/urls.py [N]`` prints N URLs of the default crawl.
"""

from __future__ import annotations

import sys
from typing import Final

import numpy as np
from numpy.typing import NDArray

SCHEME: Final = "https://"
SUFFIXES: Final = (".html", "", ".htm", ".php", ".html", ".html")
MIN_BYTES: Final = 50
MAX_BYTES: Final = 100
MIN_SEGMENTS: Final = 3
MAX_SEGMENTS: Final = 6
MAX_ID: Final = 10**10  # document numbers below this (at most 10 digits)
CHUNK: Final = 1 << 13  # pages assembled at once (a few MB of temporary arrays)
_DIGITS: Final = 10
_ATTEMPTS: Final = 64  # draws of one page before giving up (never reached in practice)
_GOLDEN: Final = np.uint64(0x9E3779B97F4A7C15)


def _mix(x: NDArray[np.uint64]) -> NDArray[np.uint64]:
    """splitmix64's finaliser, elementwise (wrapping uint64 arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _words(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` distinct pronounceable lower-case words of 3 to 10 letters."""
    consonants = "bcdfghjklmnprstvz"
    vowels = "aeiou"
    found: dict[str, None] = {}
    while len(found) < count:
        syllables = int(rng.integers(1, 5))
        word = "".join(
            consonants[int(rng.integers(len(consonants)))] + vowels[int(rng.integers(len(vowels)))]
            for _ in range(syllables)
        )
        if rng.random() < 0.3:
            word += consonants[int(rng.integers(len(consonants)))]
        if 3 <= len(word) <= 10:
            found[word] = None
    return list(found)


def _hosts(rng: np.random.Generator, words: list[str], count: int) -> list[str]:
    """``count`` distinct host names of 12 to 25 bytes."""
    prefixes = ("www.", "www.", "www.", "www.", "blog.", "news.", "shop.", "m.", "en.", "docs.")
    tlds = (".com", ".com", ".com", ".org", ".net", ".de", ".co.uk", ".fr", ".io", ".info")
    found: dict[str, None] = {}
    while len(found) < count:
        name = words[int(rng.integers(len(words)))]
        if rng.random() < 0.6:
            name += words[int(rng.integers(len(words)))]
        prefix = prefixes[int(rng.integers(len(prefixes)))]
        host = prefix + name + tlds[int(rng.integers(len(tlds)))]
        if 12 <= len(host) <= 25:
            found[host] = None
    return list(found)


def _zipf_cdf(count: int) -> NDArray[np.float64]:
    weights = 1.0 / (np.arange(count) + 1.0)
    cdf: NDArray[np.float64] = np.cumsum(weights)
    cdf /= cdf[-1]
    return cdf


class Crawl:
    """The URLs of one synthetic crawl (see the module docstring): :meth:`urls` and
    :meth:`url_bytes` of any document numbers, the same for the same ``seed`` and sizes.

    >>> crawl = Crawl(seed=1)
    >>> first = crawl.urls(np.arange(3))
    >>> first == crawl.urls(np.arange(3)) and all(50 <= len(u) <= 100 for u in first)
    True
    """

    def __init__(self, seed: int = 43, hosts: int = 3_000, vocabulary: int = 5_000) -> None:
        rng = np.random.default_rng(seed)
        self.seed = seed
        self.words = _words(rng, vocabulary)
        self.hosts = _hosts(rng, self.words, hosts)
        # token table: words, hosts, the fixed pieces, the ten digits, and an empty token
        fixed = [SCHEME, "/", "-", "", *SUFFIXES, *(str(d) for d in range(10))]
        tokens = [*self.words, *self.hosts, *fixed]
        encoded = [t.encode("ascii") for t in tokens]
        self._lengths = np.array([len(t) for t in encoded], dtype=np.int64)
        self._starts = np.concatenate(([0], np.cumsum(self._lengths)[:-1])).astype(np.int64)
        self._table = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        base = len(self.words) + len(self.hosts)
        self._scheme, self._slash, self._dash, self._empty = base, base + 1, base + 2, base + 3
        self._suffix0 = base + 4
        self._digit0 = base + 4 + len(SUFFIXES)
        self._host0 = len(self.words)
        self._host_cdf = _zipf_cdf(len(self.hosts))
        self._word_cdf = _zipf_cdf(len(self.words))
        # per (host, level) the offset of its words in the vocabulary
        self._offsets = rng.integers(0, len(self.words), (len(self.hosts), MAX_SEGMENTS))
        self._key = np.uint64(seed * int(_GOLDEN) % 2**64)

    # -- draws ---------------------------------------------------------------------------------

    def _uniform(self, ids: NDArray[np.uint64], attempt: int, stream: int) -> NDArray[np.float64]:
        """Uniform [0, 1) draws of ``ids`` for ``(attempt, stream)``."""
        salt = np.uint64((attempt * 64 + stream + 1) * 0x2545F4914F6CDD1D % 2**64)
        bits = _mix(_mix(ids ^ self._key) ^ salt)
        return (bits >> np.uint64(11)).astype(np.float64) * 2.0**-53

    def _tokens(self, ids: NDArray[np.uint64]) -> NDArray[np.int64]:
        """(m, 3 + 2 * MAX_SEGMENTS + _DIGITS + 1) token numbers of the pages ``ids``: scheme,
        host, the segments, the digits, the suffix, the empty token as padding."""
        m = ids.size
        host = np.empty(m, np.int64)
        words = np.empty((m, MAX_SEGMENTS), np.int64)
        suffix = np.empty(m, np.int64)
        count = np.empty(m, np.int64)
        digits = np.ones(m, np.int64)
        for j in range(1, _DIGITS):
            digits += ids >= np.uint64(10**j)
        todo = np.arange(m)
        for attempt in range(_ATTEMPTS):
            part = ids[todo]
            h = np.searchsorted(self._host_cdf, self._uniform(part, attempt, 0), side="right")
            h = np.minimum(h, len(self.hosts) - 1)
            ranks = np.stack(
                [
                    np.searchsorted(self._word_cdf, self._uniform(part, attempt, 1 + j), "right")
                    for j in range(MAX_SEGMENTS)
                ],
                axis=1,
            )
            w = (self._offsets[h] + ranks) % len(self.words)
            s = (self._uniform(part, attempt, 10) * len(SUFFIXES)).astype(np.int64)
            drawn = MIN_SEGMENTS + (
                self._uniform(part, attempt, 11) * (MAX_SEGMENTS - MIN_SEGMENTS + 1)
            ).astype(np.int64)
            # the length with c segments: the last segment is word w[:, c - 1]
            word_len = self._lengths[w]
            # scheme, host, the "/" before the last word, its "-" and number, the suffix
            fixed = len(SCHEME) + self._lengths[self._host0 + h] + 2 + digits[todo]
            fixed += self._lengths[self._suffix0 + s]
            middle = np.cumsum(word_len + 1, axis=1)  # "/" + word for the first j + 1 levels
            lengths = np.stack(
                [
                    fixed + middle[:, c - 2] + word_len[:, c - 1]
                    for c in range(MIN_SEGMENTS, MAX_SEGMENTS + 1)
                ],
                axis=1,
            )  # column c - MIN_SEGMENTS: the page with c segments
            valid = (lengths >= MIN_BYTES) & (lengths <= MAX_BYTES)
            counts = np.arange(MIN_SEGMENTS, MAX_SEGMENTS + 1)
            distance = np.abs(counts[None, :] - drawn[:, None]) + np.where(valid, 0, 100)
            best = np.argmin(distance, axis=1)
            ok = valid[np.arange(todo.size), best]
            done = todo[ok]
            host[done] = h[ok]
            words[done] = w[ok]
            suffix[done] = s[ok]
            count[done] = counts[best[ok]]
            todo = todo[~ok]
            if todo.size == 0:
                break
        else:
            raise RuntimeError(f"no URL of 50-100 bytes for pages {ids[todo][:5].tolist()}")
        width = 2 + 2 * MAX_SEGMENTS + 1 + _DIGITS + 1
        out = np.full((m, width), self._empty, dtype=np.int64)
        out[:, 0] = self._scheme
        out[:, 1] = self._host0 + host
        rows = np.arange(m)
        for j in range(MAX_SEGMENTS):
            use = j < count
            out[use, 2 + 2 * j] = self._slash
            out[use, 3 + 2 * j] = words[use, j]
        # the dash after the last segment's word, then the digits, then the suffix
        column = 2 + 2 * count  # the first column after the last word
        out[rows, column] = self._dash
        power = 10 ** (digits - 1).astype(np.uint64)
        rest = ids.copy()
        for j in range(_DIGITS):
            use = j < digits
            digit = (rest // np.maximum(power, np.uint64(1))).astype(np.int64)
            out[rows[use], column[use] + 1 + j] = self._digit0 + digit[use]
            rest = np.where(use, rest - digit.astype(np.uint64) * power, rest)
            power = power // np.uint64(10)
        out[rows, column + 1 + digits] = self._suffix0 + suffix
        return out

    # -- URLs ----------------------------------------------------------------------------------

    def url_bytes(self, ids: NDArray[np.integer]) -> tuple[NDArray[np.int64], NDArray[np.uint8]]:
        """The URLs of the document numbers ``ids`` (each in [0, 10^10)) in the compact form of
        :meth:`permindex.Index.export_compact`: ``(lengths, blob)``, (m,) int64 byte lengths
        and every URL's ASCII bytes followed by a NUL. O(m), in chunks of :data:`CHUNK`.

        Raises:
            ValueError: an id outside [0, 10^10).
        """
        values = np.asarray(ids)
        if values.size and (int(values.min()) < 0 or int(values.max()) >= MAX_ID):
            raise ValueError(f"document numbers must lie in [0, {MAX_ID})")
        values = values.astype(np.uint64).ravel()
        lengths: list[NDArray[np.int64]] = []
        blobs: list[NDArray[np.uint8]] = []
        for start in range(0, values.size, CHUNK):
            tokens = self._tokens(values[start : start + CHUNK])
            sizes = self._lengths[tokens]  # (m, width)
            per_url = sizes.sum(axis=1)
            flat_tokens = tokens.ravel()
            flat_sizes = sizes.ravel()
            total = int(flat_sizes.sum())
            out_starts = np.cumsum(flat_sizes) - flat_sizes
            # a NUL after each URL: every row's bytes shifted by its number of NULs before it
            row_shift = np.repeat(np.arange(tokens.shape[0]), tokens.shape[1])
            source = np.repeat(self._starts[flat_tokens] - out_starts, flat_sizes)
            source += np.arange(total)
            blob = np.zeros(total + tokens.shape[0], dtype=np.uint8)
            blob[np.arange(total) + np.repeat(row_shift, flat_sizes)] = self._table[source]
            lengths.append(per_url)
            blobs.append(blob)
        if not blobs:
            return np.zeros(0, np.int64), np.zeros(0, np.uint8)
        return np.concatenate(lengths), np.concatenate(blobs)

    def urls(self, ids: NDArray[np.integer]) -> list[str]:
        """The URLs of the document numbers ``ids``, as str. O(m).

        Raises:
            ValueError: an id outside [0, 10^10).
        """
        lengths, blob = self.url_bytes(ids)
        if lengths.size == 0:
            return []
        return blob[:-1].tobytes().decode("ascii").split("\x00")


if __name__ == "__main__":
    count = int(float(sys.argv[1])) if len(sys.argv) > 1 else 20
    for url in Crawl().urls(np.arange(count)):
        print(url)
