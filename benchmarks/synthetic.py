"""A synthetic collection with planted near-duplicates, for measuring ``permindex dedup`` at scale.

Run from the repository root::

    .venv/bin/python benchmarks/synthetic.py --documents 1000000 --out /tmp/synthetic-1m.jsonl.gz
    /usr/bin/time -v .venv/bin/permindex dedup /tmp/synthetic-1m.jsonl.gz --out /tmp/report \\
        > /tmp/pairs.tsv

Writes JSONL (gzip, level 1) of ``{"id": "doc/0000042", "text": ...}``. Texts are 50 to 300
words drawn from a Zipf-like law over a 30,000-word vocabulary of pronounceable made-up words.
A share of the documents (``--near-share``, default 10%) are planted near-duplicates: a copy of
an earlier document with 0 to 3 words replaced (0: an exact copy), so that clusters of two or
more form. The ids of the planted documents and of their sources go to ``--truth`` (TSV:
``copy<TAB>source<TAB>words changed``) for whoever wants to check recall.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import numpy as np

VOCABULARY = 30_000
CHUNK = 10_000


def vocabulary(rng: np.random.Generator) -> np.ndarray:
    consonants = list("bcdfghjklmnprstvz")
    vowels = list("aeiou")
    words: set[str] = set()
    while len(words) < VOCABULARY:
        syllables = int(rng.integers(1, 4))
        words.add(
            "".join(
                consonants[int(rng.integers(0, len(consonants)))]
                + vowels[int(rng.integers(0, len(vowels)))]
                for _ in range(syllables)
            )
        )
    return np.array(sorted(words), dtype=object)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--documents", type=int, default=1_000_000)
    parser.add_argument("--out", type=Path, default=Path("/tmp/permindex-synthetic.jsonl.gz"))
    parser.add_argument("--truth", type=Path, default=None)
    parser.add_argument("--near-share", type=float, default=0.10)
    parser.add_argument("--seed", type=int, default=2002)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    words = vocabulary(rng)
    # Zipf-like frequencies: rank r has weight 1 / (r + 10)
    weights = 1.0 / (np.arange(VOCABULARY) + 10.0)
    cdf = np.cumsum(weights / weights.sum())

    def draw(size: int) -> np.ndarray:
        return np.minimum(np.searchsorted(cdf, rng.random(size)), VOCABULARY - 1)

    kept: list[tuple[str, np.ndarray]] = []  # a reservoir of earlier documents to copy from
    truth_path = args.truth or args.out.with_suffix(".truth.tsv")
    started = time.monotonic()
    planted = 0
    with (
        gzip.open(args.out, "wt", encoding="utf-8", compresslevel=1) as out,
        open(truth_path, "w", encoding="utf-8") as truth,
    ):
        for start in range(0, args.documents, CHUNK):
            lines = []
            for number in range(start, min(start + CHUNK, args.documents)):
                key = f"doc/{number:07d}"
                if kept and rng.random() < args.near_share:
                    source_number = int(rng.integers(0, len(kept)))
                    source_key, source = kept[source_number]
                    ids = source.copy()
                    changed = int(rng.integers(0, 4))
                    positions = rng.integers(0, ids.size, size=changed)
                    ids[positions] = draw(changed)
                    truth.write(f"{key}\t{source_key}\t{changed}\n")
                    planted += 1
                else:
                    ids = draw(int(rng.integers(50, 301)))
                    if len(kept) < 200_000:
                        kept.append((key, ids))
                    else:
                        kept[int(rng.integers(0, len(kept)))] = (key, ids)
                lines.append(json.dumps({"id": key, "text": " ".join(words[ids])}) + "\n")
            out.write("".join(lines))
            print(
                f"\r{start + len(lines):,} documents, {planted:,} planted, "
                f"{time.monotonic() - started:.0f} s",
                end="",
                file=sys.stderr,
            )
    print(f"\nwrote {args.out} and {truth_path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
