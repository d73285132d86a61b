"""Fingerprint options that leave the default unchanged: weighted SimHash, IDF weights, dense
vectors by random hyperplanes (with the 64 * theta / pi statistics), character shingles for text
without spaces, and min_words."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from permindex import InvalidArgumentError, hamming, simhash
from permindex.index.hamming import MAX_FINGERPRINT
from permindex.text.fingerprint import (
    hyperplanes,
    no_space_share,
    shingle_hashes,
    shingles,
    simhash_features,
    simhash_vectors,
    simhash_weighted,
    tokens,
)
from permindex.text.weights import DocumentFrequency, chunk_bucket_counts

REPO = Path(__file__).resolve().parent.parent
SEED_CARD = REPO.parent / "shared" / "seeds" / "simhash-card-zh.txt"

ENGLISH = (
    "The crawler fetched the product page twice this week, and the second copy differed from "
    "the first only by a promotional banner at the top and the date in the footer."
)

# Unrelated sentences written for these tests (Chinese, Japanese, Thai: no spaces between words).
ZH_PARK = "今天下午我们在公园里散步，看见很多孩子在草地上放风筝，天空中飘着各种颜色的风筝。"  # noqa: RUF001
ZH_SALES = "这家公司去年的销售额增长了百分之二十，主要来自海外市场和新推出的电子产品。"  # noqa: RUF001
JA_RAIN = "昨日は一日中雨が降っていたので、家で紅茶を飲みながら古い小説を読んで過ごしました。"
TH_BEACH = "วันนี้อากาศดีมากเราจึงไปเดินเล่นที่ชายหาดและกินอาหารทะเลที่ร้านเล็กๆริมทะเล"


# --- weighted SimHash -------------------------------------------------------------------------


@given(st.lists(st.sampled_from(["a", "b", "c", "dé", "x", "Ω", "z"]), min_size=3, max_size=60))
def test_features_with_counts_equal_the_default_simhash(words: list[str]) -> None:
    text = " ".join(words)
    counts = Counter(shingles(text))
    assert simhash_features(counts) == simhash(text)
    assert simhash_features(counts, bits=63) == simhash(text, bits=63)
    assert simhash_weighted(shingle_hashes(text), np.ones(len(shingles(text)))) == simhash(text)


def test_features_on_a_real_text_equal_the_default_simhash() -> None:
    text = ENGLISH * 5
    assert simhash_features(Counter(shingles(text))) == simhash(text)


def test_repeated_pairs_vote_like_summed_weights() -> None:
    pairs = [("alpha", 1.0), ("beta", 0.5), ("alpha", 2.0), ("gamma", 0.25)]
    assert simhash_features(pairs) == simhash_features({"alpha": 3.0, "beta": 0.5, "gamma": 0.25})


def test_bytes_and_str_features_hash_alike() -> None:
    assert simhash_features({"clé": 2.0, "x": 1.0}) == simhash_features(
        {"clé".encode(): 2.0, b"x": 1.0}
    )


def test_a_heavy_feature_decides_every_bit() -> None:
    heavy = shingle_hashes("one two three")[0]
    others = {f"feature {i}": 1.0 for i in range(50)}
    assert simhash_features({**others, "one two three": 1000.0}) == int(heavy)


def test_weights_are_summed_exactly_whatever_their_order() -> None:
    rng = np.random.default_rng(5)
    hashes = rng.integers(0, 2**64, size=400, dtype=np.uint64)
    weights = rng.random(400) * 10 - 5  # fractional, both signs: float sums would depend on order
    reference = simhash_weighted(hashes, weights)
    for _ in range(5):
        order = rng.permutation(400)
        assert simhash_weighted(hashes[order], weights[order]) == reference
    # scaling every weight by a power of two changes nothing
    assert simhash_weighted(hashes, weights * 8) == reference


def test_negative_weights_vote_against() -> None:
    h = np.array([0b1011, 0b0001], dtype=np.uint64)
    # counters: bit 0: +2 +1; bit 1: +2 -1; bit 3: +2 -1; others negative
    assert simhash_weighted(h, [2.0, 1.0]) == 0b1011
    # -1 on the second hash: bit 0: 2 - 1 = 1 > 0; bit 1: 2 + 1; bit 3: 2 + 1
    assert simhash_weighted(h, [2.0, -1.0]) == 0b1011
    # weight -2 on the first: bits 0, 1 and 3 get -2 + 1, -2 - 1, -2 - 1; the others +2 - 1
    assert simhash_weighted(h, [-2.0, 1.0]) == MAX_FINGERPRINT & ~0b1011


def test_no_weight_no_fingerprint() -> None:
    assert simhash_features({}) is None
    assert simhash_features({"a": 0.0, "b": 1e-9}) is None  # rounds to 0 at 2^-20
    assert simhash_weighted(np.zeros(0, dtype=np.uint64), np.zeros(0)) is None


@pytest.mark.parametrize("weight", [math.nan, math.inf, -math.inf, 2.0**32])
def test_bad_weights_are_refused(weight: float) -> None:
    with pytest.raises(InvalidArgumentError, match=r"weights\[1\]"):
        simhash_features({"a": 1.0, "b": weight})


def test_bad_features_and_shapes_are_refused() -> None:
    with pytest.raises(TypeError, match="str or bytes"):
        simhash_features({3: 1.0})  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="real number"):
        simhash_features({"a": True})
    with pytest.raises(TypeError, match="real number"):
        simhash_features({"a": "1"})  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="one weight per hash"):
        simhash_weighted(np.ones(3, dtype=np.uint64), np.ones(2))
    with pytest.raises(InvalidArgumentError, match="1-d array"):
        simhash_weighted(np.ones((2, 2), dtype=np.uint64), np.ones((2, 2)))


def test_golden_weighted_value() -> None:
    value = simhash_features({"alpha": 1.5, "beta": -0.25, "gamma": 2.0, "delta": 0.1})
    assert value == 0x0070F7BF6F9D29F6


# --- IDF over a collection --------------------------------------------------------------------


def test_document_frequency_counts_documents_not_occurrences() -> None:
    df = DocumentFrequency(bucket_bits=20)
    texts = ["a b c a b c a b c", "a b c d e f", "x y z w"]
    for text in texts:
        df.add_document(shingle_hashes(text))
    assert df.documents == 3
    abc, xyz = shingle_hashes("a b c")[0], shingle_hashes("x y z")[0]
    # "a b c" is in two documents (three times in the first), "x y z" in one
    weights = df.idf(np.array([abc, xyz], dtype=np.uint64))
    assert weights.tolist() == pytest.approx([math.log(4 / 3) + 1, math.log(4 / 2) + 1])
    unseen = df.idf(shingle_hashes("never seen here"))
    assert unseen.tolist() == pytest.approx([math.log(4) + 1])


def test_chunk_counts_add_up_to_per_document_counts() -> None:
    texts = [f"w{i % 7} w{i % 5} w{i % 3} common words here" for i in range(40)]
    hashes = [shingle_hashes(t) for t in texts]
    one = DocumentFrequency(bucket_bits=16)
    for h in hashes:
        one.add_document(h)
    chunked = DocumentFrequency(bucket_bits=16)
    for start in range(0, 40, 16):
        buckets, counts = chunk_bucket_counts(hashes[start : start + 16], 16)
        chunked.add_counts(buckets, counts, documents=len(hashes[start : start + 16]))
    assert np.array_equal(one.counts, chunked.counts)
    assert chunked.documents == 40
    common = shingle_hashes("common words here")[0]
    assert chunked.counts[int(common >> np.uint64(48))] == 40


def test_idf_weights_make_boilerplate_vote_less() -> None:
    # Two pages share a long boilerplate and differ in their content: IDF weights (the
    # boilerplate is in every page of the collection) move them further apart.
    rng = np.random.default_rng(2)
    vocab = [f"w{i}" for i in range(3000)]
    boiler = " ".join(vocab[i] for i in rng.integers(0, 3000, 400))
    pages = [
        boiler + " " + " ".join(vocab[i] for i in rng.integers(0, 3000, 150)) for _ in range(30)
    ]
    df = DocumentFrequency(bucket_bits=20)
    for page in pages:
        df.add_document(shingle_hashes(page))

    def weighted(text: str) -> int:
        h = shingle_hashes(text)
        value = simhash_weighted(h, df.idf(h))
        assert value is not None
        return value

    plain = [simhash(p) for p in pages[:10]]
    idf = [weighted(p) for p in pages[:10]]
    plain_mean = np.mean([hamming(plain[0], x) for x in plain[1:]])
    idf_mean = np.mean([hamming(idf[0], x) for x in idf[1:]])
    assert idf_mean > plain_mean + 3


# --- dense vectors: random hyperplanes --------------------------------------------------------


def _pairs_at_angle(
    rng: np.random.Generator, m: int, d: int, theta: float
) -> tuple[np.ndarray, np.ndarray]:
    """m pairs of unit vectors in R^d at angle theta, uniformly oriented."""
    u = rng.standard_normal((m, d))
    u /= np.linalg.norm(u, axis=1)[:, None]
    w = rng.standard_normal((m, d))
    w -= (w * u).sum(axis=1)[:, None] * u
    w /= np.linalg.norm(w, axis=1)[:, None]
    return u, math.cos(theta) * u + math.sin(theta) * w


@pytest.mark.parametrize("theta", [0.1, 0.3, 0.7, 1.2, math.pi / 2, 2.2, 3.0])
def test_expected_hamming_distance_is_64_theta_over_pi(theta: float) -> None:
    rng = np.random.default_rng(int(theta * 1000))
    m = 3000
    u, v = _pairs_at_angle(rng, m, 96, theta)
    distances = np.bitwise_count(simhash_vectors(u) ^ simhash_vectors(v)).astype(np.float64)
    p = theta / math.pi
    expected = 64 * p
    # the 64 bits of one pair are independent Bernoulli(p) (rotation invariance): sd of the mean
    sd = math.sqrt(64 * p * (1 - p) / m)
    assert abs(distances.mean() - expected) < 5 * sd + 0.05
    # and each hyperplane separates a pair with probability theta / pi
    flips = np.unpackbits(
        (simhash_vectors(u) ^ simhash_vectors(v)).view(np.uint8).reshape(-1, 8), axis=1
    ).mean(axis=0)
    assert np.all(np.abs(flips - p) < 5 * math.sqrt(p * (1 - p) / m) + 0.01)


def test_identical_and_opposite_vectors() -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal((50, 32))
    fps = simhash_vectors(x)
    assert np.array_equal(simhash_vectors(x.copy()), fps)
    assert np.array_equal(simhash_vectors(-x), ~fps)  # every projection changes sign
    assert np.array_equal(simhash_vectors(x * 2.0**-30), fps)  # only the direction counts
    assert np.array_equal(simhash_vectors(x * 1024.0), fps)
    assert np.array_equal(simhash_vectors(x, bits=63), fps & np.uint64(2**63 - 1))


def test_seed_chooses_the_hyperplanes() -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((200, 16))
    a = simhash_vectors(x)
    b = simhash_vectors(x, seed=7)
    assert np.bitwise_count(a ^ b).mean() > 20
    assert np.array_equal(hyperplanes(16, seed=7), hyperplanes(16, seed=7))


def test_hyperplanes_are_integers_in_units_of_2_to_the_minus_10() -> None:
    planes = hyperplanes(500)
    assert planes.shape == (64, 500)
    assert np.array_equal(planes, np.rint(planes))
    assert np.abs(planes).max() < 2**14
    values = planes.ravel() / 1024
    assert abs(values.mean()) < 0.02 and abs(values.std() - 1) < 0.02
    assert not planes.flags.writeable


_GOLDEN_VECTORS = """
import numpy as np
from permindex.text.fingerprint import simhash_vectors, hyperplanes
x = np.arange(1, 13, dtype=float).reshape(3, 4) - 6.5
print([int(v) for v in simhash_vectors(x)], hyperplanes(4)[0].tolist(), hyperplanes(4)[63].tolist())
"""


@pytest.mark.parametrize("hash_seed", ["0", "1", "random"])
def test_vector_fingerprints_are_stable_across_processes(hash_seed: str) -> None:
    env = {**os.environ, "PYTHONHASHSEED": hash_seed}
    out = subprocess.run(
        [sys.executable, "-c", _GOLDEN_VECTORS],
        check=True,
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO,
    ).stdout
    fps, first, last = json.loads("[" + out.strip().replace("] [", "], [") + "]")
    assert fps == [0x8C74B402D62700F8, 0x4FFEF54D09190C9F, 0x73AA4BFD29D81E1F]
    assert first == [482.0, -122.0, 545.0, 762.0]
    assert last == [1164.0, -84.0, -542.0, -1658.0]


@pytest.mark.parametrize(
    ("x", "message"),
    [
        (np.zeros((2, 3)), r"X\[0\] is all zeros"),
        (np.array([[1.0, math.nan]]), r"X\[0\] holds NaN"),
        (np.array([[1.0, 2.0], [math.inf, 0.0]]), r"X\[1\] holds NaN or infinity"),
        (np.ones(3), "2-d array"),
        (np.ones((2, 0)), "2-d array"),
    ],
)
def test_vectors_without_direction_are_refused(x: np.ndarray, message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        simhash_vectors(x)


def test_no_vectors_no_fingerprints() -> None:
    assert simhash_vectors(np.zeros((0, 8))).shape == (0,)


# --- text without spaces: character shingles --------------------------------------------------


def test_the_word_tokenizer_sees_one_word_in_a_chinese_sentence() -> None:
    assert tokens(ZH_PARK) == [ZH_PARK]
    assert simhash(ZH_PARK) is None  # one word: too short, whatever its length


@pytest.mark.parametrize("tokenizer", ["chars", "auto"])
def test_unrelated_cjk_and_thai_sentences_are_far_apart(tokenizer: str) -> None:
    texts = [ZH_PARK, ZH_SALES, JA_RAIN, TH_BEACH]
    fps = [simhash(t, tokenizer=tokenizer) for t in texts]  # type: ignore[arg-type]
    for fp in fps:
        assert fp is not None and fp not in (0, MAX_FINGERPRINT)
    assert len(set(fps)) == 4
    for i in range(4):
        for j in range(i + 1, 4):
            assert hamming(fps[i], fps[j]) >= 16, (i, j)


def test_sentences_of_the_shared_seed_card() -> None:
    if not SEED_CARD.exists():
        pytest.skip(f"shared seed documents not found at {SEED_CARD}")
    lines = [line for line in SEED_CARD.read_text(encoding="utf-8").splitlines() if line]
    chinese = [line for line in lines if no_space_share(line) > 0.6 and len(line) > 30][:6]
    assert len(chinese) >= 4
    fps = [simhash(line, tokenizer="auto") for line in chinese]
    assert all(fp is not None and fp not in (0, MAX_FINGERPRINT) for fp in fps)
    assert len(set(fps)) == len(fps)
    distances = [hamming(a, b) for i, a in enumerate(fps) for b in fps[i + 1 :]]
    assert min(distances) > 3  # no two different sentences are near-duplicates
    assert 24 <= float(np.mean(distances)) <= 40  # about 32: unrelated


def test_one_character_changed_in_a_paragraph_is_near() -> None:
    paragraph = ZH_PARK + ZH_SALES + ZH_PARK.replace("公园", "湖边") + ZH_SALES[::-1]
    edited = paragraph[:40] + "雪" + paragraph[41:]
    a = simhash(paragraph, tokenizer="chars")
    b = simhash(edited, tokenizer="chars")
    assert a is not None and b is not None and a != b
    assert hamming(a, b) <= 8


def test_chars_tokenizer_ignores_whitespace_and_case() -> None:
    assert tokens("Ab c\u3000D", "chars") == ["a", "b", "c", "d"]
    assert shingles("ab cd", 3, "chars") == ["abc", "bcd"]
    assert simhash("今天 天气\u3000很好啊", tokenizer="chars") == simhash(
        "今天天气很好啊", tokenizer="chars"
    )


def test_auto_keeps_words_for_spaced_text_and_the_default_fingerprint() -> None:
    assert no_space_share(ENGLISH) == 0.0
    assert simhash(ENGLISH, tokenizer="auto") == simhash(ENGLISH)
    # a mostly English page quoting a Chinese sentence stays on words
    quoted = ENGLISH * 3 + " " + ZH_SALES
    assert no_space_share(quoted) < 0.3
    assert simhash(quoted, tokenizer="auto") == simhash(quoted)
    # a Chinese page with an English product name goes to characters
    mixed = ZH_SALES + " PermIndex Pro " + ZH_PARK
    assert no_space_share(mixed) >= 0.3
    assert simhash(mixed, tokenizer="auto") == simhash(mixed, tokenizer="chars")
    assert no_space_share("   ") == 0.0


def test_too_short_in_characters() -> None:
    assert simhash("好", tokenizer="chars") is None
    assert simhash("很好", tokenizer="chars") is None
    assert simhash("非常好", tokenizer="chars") is not None
    assert simhash(ZH_PARK, tokenizer="chars", min_words=len(ZH_PARK) + 1) is None
    assert simhash(ZH_PARK, tokenizer="chars", min_words=len(ZH_PARK)) is not None


# --- min_words --------------------------------------------------------------------------------


def test_min_words_refuses_short_texts_and_keeps_the_rest_unchanged() -> None:
    nineteen = " ".join(f"word{i}" for i in range(19))
    twenty = nineteen + " word19"
    assert simhash(nineteen, min_words=20) is None
    assert simhash(twenty, min_words=20) == simhash(twenty)
    assert simhash(twenty, min_words=0) == simhash(twenty)
    assert simhash("a b", min_words=1) is None  # the shingle rule still holds


@pytest.mark.parametrize("bad", [-1, 1.5, True, "3"])
def test_bad_min_words_and_tokenizers_are_refused(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="min_words"):
        simhash(ENGLISH, min_words=bad)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="tokenizer"):
        simhash(ENGLISH, tokenizer=str(bad))  # type: ignore[arg-type]


# --- the shingle options, one check for every public function ----------------------------------


def _error(call: object) -> tuple[type[BaseException], str]:
    """The class and message of the error ``call()`` raises."""
    assert callable(call)
    with pytest.raises(InvalidArgumentError) as refused:
        call()
    return type(refused.value), str(refused.value)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "3", None])
def test_shingles_refuse_a_bad_shingle_size_as_simhash_does(bad: object) -> None:
    expected = _error(lambda: simhash(ENGLISH, shingle_size=bad))  # type: ignore[arg-type]
    assert "shingle_size" in expected[1]
    assert _error(lambda: shingles(ENGLISH, bad)) == expected  # type: ignore[arg-type]
    assert _error(lambda: shingles(ENGLISH, shingle_size=bad)) == expected  # type: ignore[arg-type]
    assert _error(lambda: shingle_hashes(ENGLISH, shingle_size=bad)) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", ["word", "Words", "", "none", 3])
def test_shingles_and_tokens_refuse_an_unknown_tokenizer_as_simhash_does(bad: object) -> None:
    expected = _error(lambda: simhash(ENGLISH, tokenizer=bad))  # type: ignore[arg-type]
    assert "tokenizer" in expected[1]
    assert _error(lambda: shingles(ENGLISH, tokenizer=bad)) == expected  # type: ignore[arg-type]
    assert _error(lambda: shingles(ENGLISH, 3, bad)) == expected  # type: ignore[arg-type]
    assert _error(lambda: tokens(ENGLISH, bad)) == expected  # type: ignore[arg-type]
    assert _error(lambda: tokens(ENGLISH, tokenizer=bad)) == expected  # type: ignore[arg-type]
    assert _error(lambda: shingle_hashes(ENGLISH, tokenizer=bad)) == expected  # type: ignore[arg-type]


def test_shingles_and_tokens_refuse_even_a_text_without_a_word() -> None:
    # an empty text used to give [] whatever the options
    for text in ("", "   "):
        with pytest.raises(InvalidArgumentError, match="shingle_size"):
            shingles(text, 0)
        with pytest.raises(InvalidArgumentError, match="shingle_size"):
            shingles(text, -1)
        with pytest.raises(InvalidArgumentError, match="tokenizer"):
            shingles(text, tokenizer="bogus")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError, match="tokenizer"):
            tokens(text, "bogus")  # type: ignore[arg-type]


@pytest.mark.parametrize("tokenizer", ["words", "chars", "auto"])
def test_good_options_keep_shingles_and_tokens_unchanged(tokenizer: str) -> None:
    assert tokens(ENGLISH, tokenizer)[:3] == tokens(ENGLISH, tokenizer=tokenizer)[:3]  # type: ignore[arg-type]
    assert shingles("a b c d", 1) == ["a", "b", "c", "d"]
    assert shingles("a b c d", 4) == ["a b c d"]
    assert shingles("a b c", 4) == []
    assert len(shingle_hashes(ENGLISH, shingle_size=2)) == len(shingles(ENGLISH, 2))
