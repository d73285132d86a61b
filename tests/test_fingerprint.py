"""SimHash fingerprints: the shared reference vectors, the plain-Python definition
(tests/oracles.py), golden values across processes, edge cases and invalid input."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import oracles
import pytest
from hypothesis import given
from hypothesis import strategies as st

import permindex
from permindex import InvalidArgumentError, simhash, validate_fingerprint
from permindex.text.fingerprint import shingles

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"
REFERENCE = SHARED / "vectors" / "simhash_reference.jsonl"


def _reference_lines() -> list[dict[str, object]]:
    if not REFERENCE.exists():
        pytest.skip(f"shared reference vectors not found at {REFERENCE}")
    return [json.loads(line) for line in REFERENCE.read_text(encoding="utf-8").splitlines()]


@pytest.mark.parametrize("bits", [63, 64])
def test_reference_vectors(bits: int) -> None:
    lines = _reference_lines()
    assert len(lines) == 212
    mismatches = []
    for line in lines:
        expected = line[f"fingerprint_{bits}"]
        want = None if expected is None else int(str(expected))
        got = simhash(str(line["text"]), shingle_size=int(str(line["shingle_size"])), bits=bits)
        if got != want:
            mismatches.append((line["id"], got, want))
    assert mismatches == []


def test_reference_vectors_include_too_short_texts() -> None:
    lines = _reference_lines()
    assert any(line["fingerprint_64"] is None for line in lines)


def _naive_simhash(text: str, shingle_size: int = 3) -> int | None:
    return oracles.simhash(text, shingle_size)


@given(st.lists(st.sampled_from(["a", "b", "c", "dé", "x y", "Ω", "\u00a0", "z"]), max_size=80))
def test_matches_naive_definition_small_vocabulary(words: list[str]) -> None:
    text = " ".join(words)
    assert simhash(text) == _naive_simhash(text)


def test_matches_naive_definition_long_text() -> None:
    # Long enough for the kernel to spill its 8-bit counters hundreds of times.
    rng = np.random.default_rng(7)
    vocab = [f"w{i}" for i in range(50)]
    text = " ".join(vocab[i] for i in rng.integers(0, 50, size=140_000))
    assert simhash(text) == _naive_simhash(text)


def test_too_short_is_none_never_zero() -> None:
    assert simhash("") is None
    assert simhash("   \n\t ") is None
    assert simhash("two words") is None
    assert simhash("three words here") is not None
    assert simhash("one", shingle_size=1) is not None
    assert simhash("one two", shingle_size=3) is None


def test_unicode_whitespace_separates_words() -> None:
    # NBSP (U+00A0) and the ideographic space (U+3000) split words, as str.split() does.
    assert simhash("alpha\u00a0beta\u3000gamma") == simhash("alpha beta gamma")
    assert shingles("A\u00a0B\u3000c d") == ["a b c", "b c d"]


def test_case_and_whitespace_runs_do_not_matter() -> None:
    assert simhash("Alpha  BETA\n\ngamma\tdelta") == simhash("alpha beta gamma delta")


def test_repeated_shingles_vote_each_time() -> None:
    once = shingles("a b c a b c")
    assert once == ["a b c", "b c a", "c a b", "a b c"]
    assert simhash("a b c a b c") == _naive_simhash("a b c a b c")


def test_bits_63_clears_only_bit_63() -> None:
    text = "some text with enough words to have a fingerprint of its own"
    full = simhash(text)
    assert full is not None
    assert simhash(text, bits=63) == full & ~(1 << 63)


def test_one_word_changed_in_300_is_close_and_unrelated_texts_are_far() -> None:
    rng = np.random.default_rng(1)
    vocab = [f"word{i}" for i in range(5000)]
    words = [vocab[i] for i in rng.integers(0, 5000, size=300)]
    base = simhash(" ".join(words))
    changed = list(words)
    changed[150] = "different"
    near = simhash(" ".join(changed))
    other = simhash(" ".join(vocab[i] for i in rng.integers(0, 5000, size=300)))
    assert base is not None and near is not None and other is not None
    assert permindex.hamming(base, near) <= 8
    assert 16 <= permindex.hamming(base, other) <= 48


@pytest.mark.parametrize("bad", [0, -1, 65, True, 1.5, "3"])
def test_bad_options_raise(bad: object) -> None:
    with pytest.raises((InvalidArgumentError, TypeError)):
        simhash("a b c d", bits=bad)  # type: ignore[arg-type]
    if bad not in (65,):
        with pytest.raises((InvalidArgumentError, TypeError)):
            simhash("a b c d", shingle_size=bad)  # type: ignore[arg-type]


def test_text_must_be_str() -> None:
    with pytest.raises(TypeError, match="str"):
        simhash(b"a b c")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "error"),
    [
        (-1, ValueError),
        (1 << 64, ValueError),
        (2**70, ValueError),
        (True, TypeError),
        (1.0, TypeError),
        ("17", TypeError),
        (None, TypeError),
    ],
)
def test_validate_fingerprint_refuses(value: object, error: type[Exception]) -> None:
    # The message names the offending value.
    with pytest.raises(error, match=re.escape(repr(value))):
        validate_fingerprint(value)


def test_validate_fingerprint_accepts_bounds_and_numpy() -> None:
    assert validate_fingerprint(0) == 0
    assert validate_fingerprint((1 << 64) - 1) == (1 << 64) - 1
    assert validate_fingerprint(np.uint64(2**63 + 5)) == 2**63 + 5
    with pytest.raises(ValueError):
        validate_fingerprint(np.int64(-3))


_GOLDEN_SCRIPT = """
import permindex
texts = ["the quick brown fox jumps over the lazy dog",
         "Détecter les pages qui se ressemblent avec SimHash",
         "近似 重複 検出 の ため の テキスト"]
print([permindex.simhash(t) for t in texts])
"""


def test_golden_values_stable_across_processes() -> None:
    expected = [
        permindex.simhash("the quick brown fox jumps over the lazy dog"),
        permindex.simhash("Détecter les pages qui se ressemblent avec SimHash"),
        permindex.simhash("近似 重複 検出 の ため の テキスト"),
    ]
    assert all(v is not None for v in expected)
    outputs = set()
    for seed in ("0", "1", "12345", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", _GOLDEN_SCRIPT],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        outputs.add(done.stdout.strip())
    assert outputs == {str(expected)}


def test_import_permindex_pulls_in_no_grpc() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, permindex; "
            "bad = sorted(m for m in sys.modules if m == 'grpc' or m.startswith('grpc.')); "
            "print(bad)",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.strip() == "[]"


# Greek sigma (capital, small, final), dotted capital I, sharp s, and whitespace of several kinds.
_PIECE_ALPHABET = st.sampled_from(
    [
        *("a", "b", "x", "\u03a3", "\u03c3", "\u03c2", "\u0130", "\u00df"),
        *(" ", "  ", "\n", "\t", "\u00a0", "\u3000", "\u2003"),
    ]
)


@given(st.lists(_PIECE_ALPHABET, max_size=200), st.integers(1, 4), st.sampled_from([63, 64]))
def test_context_dependent_lower_case_matches_the_definition(
    parts: list[str], shingle_size: int, bits: int
) -> None:
    """The Greek final sigma (its lower case depends on the letters around it) and the dotted
    capital I (it lowers to two code points) among whitespace of several kinds: the kernel's
    fingerprint is the definition's, with and without ``min_words``."""
    text = "".join(parts)
    for min_words in (0, 5):
        want = oracles.simhash(text, shingle_size, bits, min_words=min_words)
        assert simhash(text, shingle_size=shingle_size, bits=bits, min_words=min_words) == want


def test_a_long_text_matches_the_naive_definition() -> None:
    rng = np.random.default_rng(11)
    vocab = [f"w{i}" for i in range(300)] + ["ΟΔΟΣ", "İz", "straße"]
    separators = [" ", "\n", "\u00a0", "\u3000", "\t\t"]
    picks = rng.integers(0, len(vocab), size=260_000)
    text = "".join(vocab[p] + separators[i % 5] for i, p in enumerate(picks.tolist()))
    assert len(text) > (1 << 20)
    assert simhash(text) == _naive_simhash(text)
