"""simhash_many and simhash (the compiled kernel) against the plain-Python definition
(tests/oracles.py, XXH3 by the xxhash package) and the shared reference vectors: Unicode
whitespace as str.split() has it, non-BMP characters, combining marks, lower() that changes
lengths, every tokenizer and option, both votes, hypothesis texts (any Unicode, lone surrogates,
empty, one or two words, long words), bad input, batches larger than one kernel call; numba's
cache across processes; import cost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import oracles
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fingerprint import _reference_lines

import permindex
from permindex import InvalidArgumentError, shingles, simhash, simhash_many
from permindex.text.fingerprint import shingle_hashes

#: Every character str.split() splits on (str.isspace).
WHITESPACE = [chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace()]
#: Characters that are not whitespace but share a UTF-8 lead byte (and often the next byte) with
#: one that is, or are invisible: U+0084, U+0086, U+00A1, U+167F, U+1681, U+180E, U+200B,
#: U+2027, U+202A, U+2030, U+205E, U+2060, U+3001, U+FEFF, and the controls ESC, BS, DEL.
NEAR_WHITESPACE = list(
    "\u0084\u0086\u00a1\u167f\u1681\u180e\u200b\u2027\u202a\u2030\u205e\u2060\u3001\ufeff"
    "\x1b\x08\x7f"
)
OTHER = list("aAzZ09.,-'") + list("éÉİıΣσςßẞǅﬁ") + ["e\u0301", "\u0301", "\U0001f600", "\U00020000"]
OTHER += [*"中文日本語ไทย", "\x00", "\x7f", "\u00ff"]
ALPHABET = WHITESPACE + NEAR_WHITESPACE + OTHER


def _oracle(text: str, options: dict[str, object]) -> int | type[UnicodeEncodeError] | None:
    """The definition's fingerprint of ``text`` (UnicodeEncodeError: where it raises that)."""
    try:
        return oracles.simhash(
            text,
            shingle_size=int(options.get("shingle_size", 3)),  # type: ignore[call-overload]
            bits=int(options.get("bits", 64)),  # type: ignore[call-overload]
            tokenizer=str(options.get("tokenizer", "words")),
            min_words=int(options.get("min_words", 0)),  # type: ignore[call-overload]
            vote_=str(options.get("vote", "multiset")),
        )
    except UnicodeEncodeError:
        return UnicodeEncodeError


def _reference(texts: list[str], **options: object) -> list[int | None]:
    """The definition's fingerprints of ``texts`` (none holding an unencodable shingle)."""
    want = [_oracle(t, options) for t in texts]
    assert UnicodeEncodeError not in want
    return want  # type: ignore[return-value]


def _kernel(texts: list[str], **options: object) -> list[int | None]:
    fps, valid = simhash_many(texts, **options)  # type: ignore[arg-type]
    assert fps.dtype == np.uint64 and fps.shape == (len(texts),)
    assert valid.dtype == np.bool_ and valid.shape == (len(texts),)
    assert not fps[~valid].any()  # 0 where there is no fingerprint
    return [int(f) if v else None for f, v in zip(fps, valid, strict=True)]


def _same(texts: list[str], **options: object) -> None:
    """simhash_many and simhash give the definition's fingerprints, for both votes unless
    ``options`` names one; a text whose shingle holds a lone surrogate raises
    UnicodeEncodeError in both, as in the definition."""
    votes = [options.pop("vote")] if "vote" in options else ["multiset", "set"]
    for vote in votes:
        want = [_oracle(t, {**options, "vote": vote}) for t in texts]
        for text, expected in zip(texts, want, strict=True):
            if expected is UnicodeEncodeError:
                with pytest.raises(UnicodeEncodeError):
                    simhash(text, vote=vote, **options)  # type: ignore[arg-type]
                with pytest.raises(UnicodeEncodeError):
                    simhash_many(texts, vote=vote, **options)  # type: ignore[arg-type]
            else:
                assert simhash(text, vote=vote, **options) == expected  # type: ignore[arg-type]
        if UnicodeEncodeError not in want:
            assert _kernel(texts, vote=vote, **options) == want


@pytest.mark.parametrize("bits", [63, 64])
def test_reference_vectors(bits: int) -> None:
    lines = _reference_lines()
    for size in sorted({int(str(line["shingle_size"])) for line in lines}):
        group = [line for line in lines if int(str(line["shingle_size"])) == size]
        got = _kernel([str(line["text"]) for line in group], shingle_size=size, bits=bits)
        want = [
            None if line[f"fingerprint_{bits}"] is None else int(str(line[f"fingerprint_{bits}"]))
            for line in group
        ]
        assert got == want


def _random_texts(seed: int, count: int, alphabet: list[str], max_len: int) -> list[str]:
    rng = np.random.default_rng(seed)
    weights = np.ones(len(alphabet))
    weights[alphabet.index("a")] = 30.0  # mostly words, some whitespace of every kind
    weights /= weights.sum()
    return [
        "".join(rng.choice(alphabet, size=int(rng.integers(0, max_len)), p=weights))
        for _ in range(count)
    ]


@pytest.mark.parametrize("tokenizer", ["words", "chars", "auto"])
@pytest.mark.parametrize("shingle_size", [1, 2, 3, 5])
def test_unicode_texts_match_the_reference(tokenizer: str, shingle_size: int) -> None:
    texts = _random_texts(shingle_size, 400, ALPHABET, 120)
    _same(texts, shingle_size=shingle_size, tokenizer=tokenizer)


@pytest.mark.parametrize("separator", WHITESPACE)
def test_every_whitespace_character_separates_words(separator: str) -> None:
    text = separator.join(["alpha", "beta", "gamma", "delta", "alpha", "beta"])
    assert simhash_many([text])[0][0] == simhash("alpha beta gamma delta alpha beta")
    _same([text, separator * 3 + text + separator, text.replace(separator, separator * 2)])


@pytest.mark.parametrize("lookalike", NEAR_WHITESPACE)
def test_characters_that_are_not_whitespace_join_words(lookalike: str) -> None:
    text = lookalike.join(["one", "two", "three", "four"]) + " five six"
    _same([text], shingle_size=2)
    assert _kernel([text], shingle_size=4) == [None]  # three words: one joined, five, six


def test_lower_changes_lengths_and_context() -> None:
    texts = [
        "İstanbul İzmir İİİ ankara",  # U+0130 lowers to two code points
        "ΟΔΟΣ ΟΔΟΣ. ΣΑΣ Σ ΑΣ ΑΣΑ",  # final sigma depends on context
        "Straße STRASSE ẞ ǅ ǆ ﬁne",
        "e\u0301 \u0301\u0301 a\u0301b \U0001f600\U0001f600 \U00020000 x",
    ]
    for tokenizer in ("words", "chars", "auto"):
        for size in (1, 2, 3):
            _same(texts, shingle_size=size, tokenizer=tokenizer)


def _changed_by_lower() -> list[str]:
    """Every character that str.lower() changes (all scripts, the astral planes too)."""
    return [chr(c) for c in range(sys.maxunicode + 1) if chr(c).lower() != chr(c)]


@pytest.mark.parametrize("tokenizer", ["words", "chars"])
def test_every_character_that_lower_changes(tokenizer: str) -> None:
    changed = _changed_by_lower()
    assert "\u023a" in changed and "\U00010400" in changed  # 2 -> 3 bytes; astral
    rng = np.random.default_rng(len(changed))
    order = rng.permutation(len(changed))
    words = ["".join(changed[j] for j in order[i : i + 5]) for i in range(0, len(order), 5)]
    mixed = [w + "Ab" + w[:1] for w in words[:200]]
    texts = [" ".join(words[i : i + 40]) for i in range(0, len(words), 40)]
    texts += [" ".join(mixed), "\u03a3\u0130 " + texts[0], texts[1] + " ΟΔΟΣ"]
    for size in (1, 3):
        _same(texts, shingle_size=size, tokenizer=tokenizer)


def test_ascii_upper_case_at_every_position_of_a_word() -> None:
    letters = "@AZ[`az{09"  # the bytes around "A"-"Z" and "a"-"z"
    rng = np.random.default_rng(12)
    words = ["".join(rng.choice(list(letters), size=n)) for n in range(1, 25) for _ in range(6)]
    texts = [" ".join(words), "\n".join(words), " ".join(words) + " é", "\t".join(words) + "Σ"]
    for tokenizer in ("words", "chars"):
        _same(texts, tokenizer=tokenizer)


@pytest.mark.parametrize("min_words", [0, 1, 3, 4, 20])
@pytest.mark.parametrize("bits", [63, 64])
def test_min_words_and_bits(min_words: int, bits: int) -> None:
    texts = [*_random_texts(min_words + bits, 200, ALPHABET, 60), "", " ", "a b", "a b c"]
    for tokenizer in ("words", "chars"):
        _same(texts, min_words=min_words, bits=bits, tokenizer=tokenizer)
    fps, _ = simhash_many(texts, bits=bits)
    if bits == 63:
        assert not (fps >> np.uint64(63)).any()


def test_auto_mixes_tokenizers_in_one_batch() -> None:
    texts = [
        "这是一个没有空格的中文句子。",
        "an english sentence of words here",
        "ภาษาไทยไม่มีช่องว่าง ok",
    ]
    _same(texts * 3, tokenizer="auto")
    fps, _ = simhash_many(texts, tokenizer="auto")
    assert int(fps[0]) == simhash(texts[0], tokenizer="chars")
    assert int(fps[1]) == simhash(texts[1], tokenizer="words")


def test_repeated_shingles_and_ties() -> None:
    texts = ["a b c " * 500, "x y " * 300, ("w " * 1000).strip(), "a b c a b c d"]
    _same(texts)
    _same(texts, shingle_size=1)


def test_long_texts_and_the_spill_of_the_counters() -> None:
    rng = np.random.default_rng(4)
    vocab = [f"w{i}" for i in range(300)]
    long_text = " ".join(vocab[i] for i in rng.integers(0, 300, size=400_000))
    texts = [long_text[: 255 * 3], long_text[: 256 * 3 + 1], long_text]
    _same(texts, vote="multiset")
    _same(texts[:2], vote="set")


def test_batches_larger_than_one_kernel_call() -> None:
    texts = _random_texts(9, 9000, ["a", "b", "c", " ", "\u3000"], 30)
    want = _reference(texts)
    assert _kernel(texts) == want
    fps, valid = simhash_many(iter(texts))  # any iterable
    assert [int(f) if v else None for f, v in zip(fps, valid, strict=True)] == want


@pytest.mark.parametrize("tokenizer", ["words", "chars", "auto"])
@pytest.mark.parametrize("shingle_size", [1, 3])
def test_shingle_hashes_match_the_reference(tokenizer: str, shingle_size: int) -> None:
    texts = [*_random_texts(50 + shingle_size, 150, ALPHABET, 100), "", "a", "İİ x\u3000y z"]
    for text in texts:
        got = shingle_hashes(text, shingle_size=shingle_size, tokenizer=tokenizer)  # type: ignore[arg-type]
        assert got.dtype == np.uint64
        want = [
            xxhash.xxh3_64_intdigest(part.encode("utf-8"))
            for part in shingles(text, shingle_size, tokenizer)  # type: ignore[arg-type]
        ]
        assert got.tolist() == want == oracles.shingle_hashes(text, shingle_size, tokenizer)


def test_empty_input() -> None:
    fps, valid = simhash_many([])
    assert fps.shape == (0,) and fps.dtype == np.uint64
    assert valid.shape == (0,) and valid.dtype == np.bool_


def test_str_subclass_is_a_text() -> None:
    class Page(str):
        pass

    assert _kernel([Page("one two three four")]) == [simhash("one two three four")]


def test_lone_surrogates_behave_as_in_simhash() -> None:
    short = "a \ud800"  # two words: no shingle to hash, no fingerprint
    assert _kernel([short, "x y z"]) == [None, simhash("x y z")]
    assert _kernel(["one two three", short, "a b c d", "\udfff"]) == [
        simhash("one two three"),
        None,
        simhash("a b c d"),
        None,
    ]
    with pytest.raises(UnicodeEncodeError):
        simhash_many(["one two \ud800 three"])
    with pytest.raises(UnicodeEncodeError):
        simhash("one two \ud800 three")


def _error(call: object) -> tuple[type[BaseException], str]:
    try:
        call()  # type: ignore[operator]
    except (TypeError, ValueError) as error:
        return type(error), str(error)
    raise AssertionError("no error")


@pytest.mark.parametrize(
    "options",
    [
        {"shingle_size": 0},
        {"shingle_size": True},
        {"shingle_size": "3"},
        {"shingle_size": 2.0},
        {"bits": 32},
        {"bits": True},
        {"tokenizer": "letters"},
        {"min_words": -1},
        {"min_words": False},
        {"shingle_size": 1025},
        {"shingle_size": 2**64},
        {"min_words": 1_000_001},
        {"min_words": 10**20},
    ],
)
def test_bad_options_raise_what_simhash_raises(options: dict[str, object]) -> None:
    many = _error(lambda: simhash_many(["a b c"], **options))  # type: ignore[arg-type]
    one = _error(lambda: simhash("a b c", **options))  # type: ignore[arg-type]
    assert many == one
    assert issubclass(many[0], InvalidArgumentError)


@pytest.mark.parametrize("bad", [None, b"bytes", 3, ["a"]])
def test_a_text_that_is_not_str_is_a_type_error(bad: object) -> None:
    with pytest.raises(TypeError, match=r"texts\[1\] must be str"):
        simhash_many(["fine text here", bad])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        simhash(bad)  # type: ignore[arg-type]


_TEXT = st.lists(st.sampled_from(ALPHABET), max_size=80).map("".join)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(_TEXT, max_size=12),
    st.integers(1, 4),
    st.sampled_from(["words", "chars", "auto"]),
    st.integers(0, 6),
)
def test_hypothesis_texts(
    texts: list[str], shingle_size: int, tokenizer: str, min_words: int
) -> None:
    _same(texts, shingle_size=shingle_size, tokenizer=tokenizer, min_words=min_words)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(max_size=60), max_size=8), st.integers(1, 3))
def test_hypothesis_any_unicode(texts: list[str], shingle_size: int) -> None:
    _same(texts, shingle_size=shingle_size)


#: Any code point, lone surrogates (category Cs) included.
_ANY_CHAR = st.characters(exclude_categories=())


@settings(max_examples=150, deadline=None)
@given(st.lists(st.text(_ANY_CHAR, max_size=30), max_size=6), st.integers(1, 3))
def test_hypothesis_lone_surrogates(texts: list[str], shingle_size: int) -> None:
    """A text whose shingle holds a lone surrogate raises UnicodeEncodeError, as encoding the
    shingle does in the definition; one too short to have such a shingle has no fingerprint."""
    _same(texts, shingle_size=shingle_size)
    _same(texts, shingle_size=shingle_size, tokenizer="chars", min_words=4)


_WORD = st.lists(st.sampled_from(OTHER), min_size=1, max_size=6).map("".join)


@settings(max_examples=150, deadline=None)
@given(st.lists(_WORD, max_size=2), st.sampled_from(WHITESPACE), st.integers(1, 3))
def test_hypothesis_empty_and_one_or_two_words(
    words: list[str], separator: str, shingle_size: int
) -> None:
    text = separator.join(words)
    _same([text, separator + text + separator], shingle_size=shingle_size)
    _same([text], shingle_size=shingle_size, min_words=len(words) + 1)


#: Words long enough for every XXH3 branch of a shingle (up to 240 bytes and the long form
#: above) and for the 8-byte scan of a word and its copy, in one to four bytes a character.
_LONG_WORD = st.text(st.sampled_from([*"aZq0éΣİ中", "\U0001f600"]), max_size=400)


@settings(max_examples=100, deadline=None)
@given(st.lists(_LONG_WORD, min_size=1, max_size=5), st.integers(1, 3))
def test_hypothesis_long_words(words: list[str], shingle_size: int) -> None:
    _same([" ".join(words), "\u3000".join(words).upper()], shingle_size=shingle_size)
    _same(["".join(words)], shingle_size=shingle_size, tokenizer="chars")


# ------------------------------------------------------------------ processes: cache, import

_CHILD = textwrap.dedent(
    """
    import json, sys, time
    t0 = time.perf_counter()
    import permindex
    texts = json.loads(sys.stdin.read())
    fps, valid = permindex.simhash_many(texts)
    first = time.perf_counter() - t0
    print(json.dumps({"fps": [int(f) if v else None for f, v in zip(fps, valid)],
                      "first_call_s": first}))
    """
)


def _children(env: dict[str, str], count: int, texts: list[str]) -> Iterator[dict[str, object]]:
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", _CHILD],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )
        for _ in range(count)
    ]
    payload = json.dumps(texts)
    outputs = [p.communicate(payload, timeout=240) for p in processes]
    for process, (out, err) in zip(processes, outputs, strict=True):
        assert process.returncode == 0, err
        yield json.loads(out)


@pytest.mark.soak
def test_cache_two_processes_at_once_then_a_third_loads_it(tmp_path: Path) -> None:
    """Two processes compile the SimHash kernels at once into one empty cache, a third loads
    them without writing. Two real compiles (a minute of CPU on a busy machine), so behind
    ``-m soak``; the default suite compiles into an empty cache once and starts again from it
    (tests/test_jit.py)."""
    texts = [
        "The quick brown fox jumps over the lazy dog",
        "a b",
        "UNICODE\u3000words\u00a0here ok",
    ]
    want = _reference(texts)
    env = {k: v for k, v in os.environ.items() if k != "PERMINDEX_CACHE_DIR"}
    env["NUMBA_CACHE_DIR"] = str(tmp_path / "numba-cache")
    first, second = _children(env, 2, texts)
    assert first["fps"] == want and second["fps"] == want
    cache = tmp_path / "numba-cache"
    assert list(cache.rglob("*.nbi")), "numba wrote no cache index"
    before = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    (third,) = _children(env, 1, texts)
    assert third["fps"] == want
    after = {p: p.stat().st_mtime_ns for p in cache.rglob("*") if p.is_file()}
    assert after == before  # loaded, not compiled and written again
    print(
        f"first call: compiling {first['first_call_s']:.2f} s and {second['first_call_s']:.2f} s "
        f"(two processes at once), loading from the cache {third['first_call_s']:.2f} s"
    )


def test_import_permindex_does_not_import_numba() -> None:
    code = (
        "import sys, permindex, permindex.text.fingerprint, permindex.near.dedup\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in {'numba', 'llvmlite'}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"


def test_simhash_many_is_exported() -> None:
    assert "simhash_many" in permindex.__all__
    assert permindex.simhash_many is simhash_many


def test_one_string_is_refused_not_split_into_characters() -> None:
    """A bare str (or bytes) is not a batch: iterating it would fingerprint each character."""
    for value in ("a text of several words", b"a text of several words"):
        with pytest.raises(TypeError, match="texts must be an iterable of str, not one"):
            permindex.simhash_many(value)  # type: ignore[arg-type]
