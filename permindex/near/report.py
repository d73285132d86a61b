"""The HTML report of ``permindex dedup``: one self-contained page (inline CSS and SVG, no script,
no external asset) with the counts, the number of pairs at each distance as a histogram, the
largest clusters, and example pairs with a short word diff (:mod:`difflib`).

Example pairs are chosen so that their texts can be read again cheaply: for each distance, the
pairs whose later document comes first in the input (a re-read of a JSONL input stops there).
"""

from __future__ import annotations

import difflib
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from permindex.near.result import DedupResult

__all__ = ["Example", "ReportCluster", "render_report", "select_examples", "word_diff"]

_DIFF_WORDS: Final = 5000  # words of each text compared at most
_CONTEXT: Final = 6  # words shown around a change
_CHANGES: Final = 8  # changes shown per example


@dataclass(frozen=True)
class ReportCluster:
    """A cluster as the report shows it: its number (1 = largest), size, span (largest distance
    inside it, None when not computed), the key kept, and its first keys."""

    number: int
    size: int
    span: int | None
    kept: str
    keys: list[str]


@dataclass(frozen=True)
class Example:
    """An example pair: keys, distance, and the word diff as HTML (or a note)."""

    key_a: str
    key_b: str
    distance: int
    diff_html: str


def word_diff(
    a: str, b: str, *, context: int = _CONTEXT, changes: int = _CHANGES, limit: int = _DIFF_WORDS
) -> str:
    """A short word diff of two texts as HTML: the changed words (``<del>`` from ``a``,
    ``<ins>`` from ``b``) with ``context`` words either side, runs of unchanged words elided
    (``…``), at most ``changes`` changes (the number of the others is given). Texts are split
    on whitespace; the first ``limit`` words of each are compared."""
    words_a = a.split()
    words_b = b.split()
    truncated = len(words_a) > limit or len(words_b) > limit
    words_a, words_b = words_a[:limit], words_b[:limit]
    opcodes = difflib.SequenceMatcher(None, words_a, words_b, autojunk=False).get_opcodes()
    changed = [op for op in opcodes if op[0] != "equal"]
    if not changed:
        note = "the same words" + (f" (first {limit} compared)" if truncated else "")
        return f'<p class="same">{note}</p>'
    parts: list[str] = []
    shown = 0
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "equal":
            run = words_a[i1:i2]
            first = i1 == 0
            last = i2 == len(words_a)
            if len(run) <= 2 * context:
                parts.append(html.escape(" ".join(run)))
            else:
                head = [] if first else run[:context]
                tail = [] if last else run[-context:]
                parts.append(html.escape(" ".join(head)) + " <span class=gap>…</span> ")
                parts.append(html.escape(" ".join(tail)))
            continue
        if shown == changes:
            break
        shown += 1
        if i2 > i1:
            parts.append(f"<del>{html.escape(' '.join(words_a[i1:i2][:60]))}</del>")
        if j2 > j1:
            parts.append(f"<ins>{html.escape(' '.join(words_b[j1:j2][:60]))}</ins>")
    more = len(changed) - shown
    extra = f' <span class="more">(+{more} more changes)</span>' if more > 0 else ""
    if truncated:
        extra += f' <span class="more">(first {limit} words compared)</span>'
    return f'<p class="diff">{" ".join(p for p in parts if p)}{extra}</p>'


def select_examples(
    result: DedupResult,
    per_distance: int,
    read_texts: Callable[[Sequence[int]], dict[int, str]],
) -> list[Example]:
    """Up to ``per_distance`` example pairs at each distance 0..k: the pairs whose later
    document comes first in the input (chosen while the pairs stream, in O(chunk + examples)
    memory); their texts read with ``read_texts`` (input ordinals to texts) in one call, and
    diffed."""
    near = result.near
    if per_distance == 0:
        return []
    # chosen while the pairs stream by (NearDuplicates.sample_pairs), never all held at once
    a, b, d = near.sample_pairs(per_distance, result.ordinals)
    if a.size == 0:
        return []
    ordinal_a = result.ordinals[a]
    ordinal_b = result.ordinals[b]
    chosen = list(range(a.size))
    needed = sorted({int(ordinal_a[i]) for i in chosen} | {int(ordinal_b[i]) for i in chosen})
    texts = read_texts(needed)
    examples: list[Example] = []
    for i in chosen:
        text_a = texts.get(int(ordinal_a[i]))
        text_b = texts.get(int(ordinal_b[i]))
        if text_a is None or text_b is None:
            diff = '<p class="same">(no text: the input gave a fingerprint)</p>'
        else:
            diff = word_diff(text_a, text_b)
        examples.append(Example(near.keys[a[i]], near.keys[b[i]], int(d[i]), diff))
    return examples


_STYLE: Final = """
body{font:15px/1.45 system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#222}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ddd}
table{border-collapse:collapse}td,th{padding:.2em .8em;text-align:left;vertical-align:top}
th{background:#f3f3f3}tr:nth-child(even) td{background:#fafafa}td.n{text-align:right}
code{font-size:.92em;word-break:break-all}del{background:#fdd;text-decoration:line-through}
ins{background:#dfd;text-decoration:none}.gap,.more{color:#888}.same{color:#666}
.diff{font-size:.92em;background:#fcfcfc;border-left:3px solid #ccc;padding:.3em .6em}
svg text{font:12px system-ui,sans-serif}
"""


def _histogram_svg(histogram: Sequence[tuple[str, int]], what: str) -> str:
    """Bars of pairs per (label, count), inline SVG, with the counts written above the bars."""
    wide = max((len(label) for label, _ in histogram), default=1) > 2
    bar, gap = (36, 12) if wide else (28, 12)
    width, height = (bar + gap) * len(histogram) + 40, 180
    peak = max(max((c for _, c in histogram), default=0), 1)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height + 40}" '
        f'role="img" aria-label="pairs per {what}">'
    ]
    for i, (label, count) in enumerate(histogram):
        x = 20 + i * (bar + gap)
        h = round(height * count / peak)
        y = height - h + 16
        parts.append(f'<rect x="{x}" y="{y}" width="{bar}" height="{h}" fill="#4a7bd0"/>')
        parts.append(f'<text x="{x + bar / 2}" y="{y - 3}" text-anchor="middle">{count}</text>')
        parts.append(
            f'<text x="{x + bar / 2}" y="{height + 32}" text-anchor="middle">{label}</text>'
        )
    parts.append("</svg>")
    return "".join(parts)


def _row(*cells: object, numeric: Sequence[int] = ()) -> str:
    out = []
    for i, cell in enumerate(cells):
        cls = ' class="n"' if i in numeric else ""
        out.append(f"<td{cls}>{cell}</td>")
    return "<tr>" + "".join(out) + "</tr>"


def render_report(
    summary: dict[str, Any],
    histogram: Sequence[tuple[str, int]],
    clusters: Sequence[ReportCluster],
    examples: Sequence[Example],
    *,
    measure: Callable[[int], str] | None = None,
) -> str:
    """The report page (HTML5, UTF-8, self-contained). Every key and text is escaped.
    ``histogram``: pairs per (distance, or Jaccard bin in the Jaccard mode: ``summary`` has a
    ``"threshold"``); ``measure``: how an example's distance is written (default: bits)."""
    e = html.escape
    jaccard = "threshold" in summary
    counts = [
        ("documents read", summary["documents"]),
        ("with a fingerprint", summary["fingerprinted"]),
        ("too short (no fingerprint)", summary["too_short"]),
        ("skipped (not documents)", summary["skipped"]),
        ("repeated keys (last one counts)", summary["repeated_keys"]),
        (f"pairs {summary['within']}", summary["pairs"]),
        ("clusters", summary["clusters"]),
        ("keys in clusters", summary["keys_in_clusters"]),
        ("largest cluster", summary["largest_cluster"]),
        ("keys with a near-duplicate (flagged)", summary["flagged"]),
        (
            "exact-duplicate groups ("
            + ("same shingle set" if "candidates_verified" in summary else "same fingerprint")
            + ")",
            summary["exact_duplicate_groups"],
        ),
        ("keys in exact-duplicate groups", summary["keys_in_exact_groups"]),
        (f"to keep (one per cluster, --keep {summary['keep']})", summary["kept"]),
        ("to drop", summary["dropped"]),
    ]
    shingling = (
        f"tokenizer = {summary['tokenizer']}, shingle size = {summary['shingle_size']}, "
        f"min words = {summary['min_words']}"
    )
    if jaccard:
        counts.insert(
            6, ("candidate pairs verified (exact Jaccard)", summary["candidates_verified"])
        )
        options = (
            f"Jaccard >= {summary['threshold']:g} of shingle sets (MinHash-LSH, "
            f"{summary['permutations']} permutations, {summary['bands']} bands of "
            f"{summary['rows']} rows, every candidate verified), {shingling}"
        )
    else:
        options = (
            f"k = {summary['k']}, weights = {summary['weights']}, {shingling}, design = "
            f"({summary['design']['blocks']} blocks, {summary['design']['leading']} leading)"
        )
    what = "Jaccard similarity" if jaccard else "Hamming distance"
    column = "Jaccard (bin from)" if jaccard else "distance (bits)"
    show = measure if measure is not None else str
    seconds = ", ".join(f"{e(k)} {v:.2f} s" for k, v in summary["seconds"].items())
    page = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        "<title>permindex dedup report</title>",
        f"<style>{_STYLE}</style></head><body>",
        f"<h1>Near-duplicates in <code>{e(str(summary['input']))}</code></h1>",
        f"<p>{e(options)}. Time: {seconds}.</p>",
        "<table>",
        *(_row(e(name), f"{value:,}", numeric=(1,)) for name, value in counts),
        "</table>",
        f"<h2>Pairs per {what}</h2>",
        _histogram_svg(histogram, what),
        f"<table><tr><th>{column}</th><th>pairs</th></tr>",
        *(_row(label, f"{c:,}", numeric=(0, 1)) for label, c in histogram),
        "</table>",
        "<h2>Largest clusters</h2>",
        "<p>A cluster is a connected component of the pairs: near-duplication is not "
        "transitive, so a cluster can chain"
        + (
            ", and two of its members can be less similar than the threshold."
            if "candidates_verified" in summary
            else ", and its span (the largest distance between two of its members) can exceed k."
        )
        + " One key per cluster is kept.</p>",
    ]
    if clusters:
        page.append(
            "<table><tr><th>cluster</th><th>keys</th><th>span</th><th>kept</th>"
            "<th>members</th></tr>"
        )
        for cluster in clusters:
            shown = "<br>".join(f"<code>{e(k)}</code>" for k in cluster.keys)
            if cluster.size > len(cluster.keys):
                shown += f"<br>… and {cluster.size - len(cluster.keys):,} more"
            span = "n/a" if cluster.span is None else cluster.span
            page.append(
                _row(
                    cluster.number,
                    cluster.size,
                    span,
                    f"<code>{e(cluster.kept)}</code>",
                    shown,
                    numeric=(0, 1, 2),
                )
            )
        page.append("</table>")
    else:
        page.append("<p>No clusters.</p>")
    page.append("<h2>Example pairs</h2>")
    if examples:
        page.append(
            "<p>At each distance, the pairs met first in the input; words only in the first "
            "document are <del>struck out</del>, words only in the second <ins>marked</ins>.</p>"
        )
        for example in examples:
            page.append(
                f"<h3><code>{e(example.key_a)}</code> and <code>{e(example.key_b)}</code>: "
                + (
                    f"Jaccard {show(example.distance)}</h3>"
                    if jaccard
                    else f"{example.distance} bit{'' if example.distance == 1 else 's'}</h3>"
                )
                + example.diff_html
            )
    else:
        page.append("<p>No pairs.</p>")
    page.append("</body></html>\n")
    return "\n".join(page)
