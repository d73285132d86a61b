#!/usr/bin/env python3
"""SimHash throughput: the per-shingle Python hashing floor, ``permindex.simhash`` one text at a
time, and ``permindex.simhash_many`` on the whole batch, measured in the same run; and the first
call's cost of the compiled kernel (compiling without a cache, loading with it), each in a fresh
subprocess.

    python benchmarks/bench_simhash.py                 # 2,000 texts of 300 words, 5 rounds
    python benchmarks/bench_simhash.py --docs 5000 --rounds 7 --json out.json

The texts: 300-word windows of the visible text of the PostgreSQL 15 manual
(``../shared/corpora/postgresql-doc-15.jsonl.gz``: its words in page order, cut every 300 words,
so every text is real prose with real word lengths and punctuation); where that file is missing,
300 words drawn uniformly from a random vocabulary of 20,000 lower-case words of 2 to 10 letters
(seed 7). The result says which.

What is timed, per round (the three in turn, medians over rounds):

(a) the floor: for each text ``lower().split()``, every 3 consecutive words joined with a space,
    ``xxhash.xxh3_64_intdigest`` of each shingle's UTF-8 bytes; nothing else (no vote);
(b) ``permindex.simhash(text)`` for each text;
(c) ``permindex.simhash_many(texts)`` on the batch.

The fingerprints of (b) and (c) of the first 500 texts are compared with the definition in plain
Python (``tests/oracles.py``) before timing. :func:`run` returns the figures as a dict (for
``benchmarks/run.py``). Not a test: nothing here runs under pytest.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = ROOT.parent / "shared" / "corpora" / "postgresql-doc-15.jsonl.gz"
WORDS_PER_TEXT = 300
SEED = 7

_FIRST_CALL = """
import json, sys, time
t0 = time.perf_counter()
import permindex
t1 = time.perf_counter()
import numba
t2 = time.perf_counter()
fps, valid = permindex.simhash_many(["one two three four five six"])
t3 = time.perf_counter()
permindex.simhash_many(["one two three four five six seven"])
t4 = time.perf_counter()
print(json.dumps({"import_permindex_s": t1 - t0, "import_numba_s": t2 - t1,
                  "first_call_s": t3 - t2, "second_call_s": t4 - t3}))
"""


def make_texts(docs: int, corpus: Path = CORPUS) -> tuple[list[str], str]:
    """``docs`` texts of 300 words and a line saying where they come from."""
    if corpus.exists():
        words: list[str] = []
        with gzip.open(corpus, "rt", encoding="utf-8") as lines:
            for line in lines:
                words.extend(json.loads(line)["text"].split())
                if len(words) >= docs * WORDS_PER_TEXT:
                    break
        if len(words) >= WORDS_PER_TEXT:
            texts = [
                " ".join(words[i : i + WORDS_PER_TEXT])
                for i in range(0, len(words) - WORDS_PER_TEXT + 1, WORDS_PER_TEXT)
            ]
            while len(texts) < docs:  # a short corpus: use its windows again
                texts += texts[: docs - len(texts)]
            return texts[:docs], f"300-word windows of {corpus.name}"
    rng = np.random.default_rng(SEED)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, size=int(rng.integers(2, 11)))) for _ in range(20_000)]
    texts = [
        " ".join(vocab[i] for i in rng.integers(0, len(vocab), size=WORDS_PER_TEXT))
        for _ in range(docs)
    ]
    return texts, "300 words drawn from a random vocabulary of 20,000 (seed 7)"


def floor(texts: list[str]) -> None:
    """(a): the per-shingle Python hashing floor."""
    import xxhash

    hash_ = xxhash.xxh3_64_intdigest
    for text in texts:
        words = text.lower().split()
        for i in range(len(words) - 2):
            hash_(" ".join(words[i : i + 3]).encode("utf-8"))


def _per_text(texts: list[str]) -> None:
    import permindex

    simhash = permindex.simhash
    for text in texts:
        simhash(text)


def _batch(texts: list[str]) -> None:
    import permindex

    permindex.simhash_many(texts)


def _check(texts: list[str]) -> None:
    """Kernel == the definition in plain Python (tests/oracles.py), for simhash and
    simhash_many, on every text."""
    import permindex

    sys.path.insert(0, str(ROOT / "tests"))
    import oracles

    fps, valid = permindex.simhash_many(texts)
    one = [permindex.simhash(t) for t in texts]
    reference = [oracles.simhash(t) for t in texts]
    many = [int(f) if v else None for f, v in zip(fps.tolist(), valid.tolist(), strict=True)]
    if many != reference or one != reference:
        raise SystemExit("bench_simhash: the kernel disagrees with the definition")


def first_call() -> dict[str, Any]:
    """The first call's cost in fresh processes: with an empty numba cache (compiles), then
    with the cache the first one wrote (loads)."""
    out: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="permindex-bench-cache-") as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        for label in ("compile", "cached"):
            done = subprocess.run(
                [sys.executable, "-c", _FIRST_CALL],
                env=env,
                capture_output=True,
                text=True,
                check=True,
                timeout=600,
            )
            out[label] = json.loads(done.stdout)
    return out


def run(docs: int = 2000, rounds: int = 5, cold: bool = True) -> dict[str, Any]:
    """Measure (a), (b), (c) on ``docs`` texts, ``rounds`` rounds each (medians), and, with
    ``cold``, the first call's cost in subprocesses. Returns the figures as a dict."""
    import permindex

    texts, source = make_texts(docs)
    _check(texts[: min(len(texts), 500)])
    permindex.simhash_many(texts[:4])  # loaded (or compiled) before timing
    shingles = sum(max(0, len(t.split()) - 2) for t in texts)
    timed: dict[str, list[float]] = {"floor": [], "simhash": [], "simhash_many": []}
    runs: dict[str, Callable[[list[str]], None]] = {
        "floor": floor,
        "simhash": _per_text,
        "simhash_many": _batch,
    }
    for _ in range(rounds):
        for name, function in runs.items():
            start = time.perf_counter()
            function(texts)
            timed[name].append(time.perf_counter() - start)
    seconds = {name: statistics.median(values) for name, values in timed.items()}
    rate = {name: docs / s for name, s in seconds.items()}
    result: dict[str, Any] = {
        "texts": source,
        "docs": docs,
        "words_per_text": WORDS_PER_TEXT,
        "shingles": shingles,
        "rounds": rounds,
        "docs_per_s": rate,
        "rounds_s": timed,
        "many_over_floor": rate["simhash_many"] / rate["floor"],
        "many_over_simhash": rate["simhash_many"] / rate["simhash"],
        "simhash_over_floor": rate["simhash"] / rate["floor"],
    }
    if cold:
        result["first_call"] = first_call()
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--docs", type=int, default=2000, help="texts in the batch (2000)")
    parser.add_argument("--rounds", type=int, default=5, help="rounds per measure (5)")
    parser.add_argument("--no-cold", action="store_true", help="skip the first-call subprocesses")
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    args = parser.parse_args()
    result = run(args.docs, args.rounds, cold=not args.no_cold)
    rate = result["docs_per_s"]
    print(f"texts: {result['docs']:,} x {result['words_per_text']} words ({result['texts']})")
    print(f"rounds: {result['rounds']} (medians); load average {os.getloadavg()[0]:.2f}")
    print(f"(a) floor (lower/split/join/xxh3 per shingle) {rate['floor']:>12,.0f} docs/s")
    print(f"(b) permindex.simhash, one text a call        {rate['simhash']:>12,.0f} docs/s")
    print(f"(c) permindex.simhash_many, the batch         {rate['simhash_many']:>12,.0f} docs/s")
    print(f"c/a = {result['many_over_floor']:.2f}x   c/b = {result['many_over_simhash']:.2f}x")
    cold = result.get("first_call")
    if cold:
        for label in ("compile", "cached"):
            c = cold[label]
            print(
                f"first call, {label:>7}: {c['first_call_s']:.2f} s (then {c['second_call_s']:.4f}"
                f" s); import permindex {c['import_permindex_s']:.2f} s, numba"
                f" {c['import_numba_s']:.2f} s"
            )
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
