"""The report folder of ``permindex dedup`` (:func:`write_outputs`, whose docstring lists the
files): pairs, clusters, flags, exact duplicates and keep/drop lists as TSV and JSON, the summary
and the HTML report, streamed from a :class:`~permindex.near.result.DedupResult`; and the example
texts read again from the input (:func:`texts_reader`). Importing it does not import grpc.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import ExitStack
from json.encoder import encode_basestring
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from permindex.errors import InvalidArgumentError
from permindex.index.join.clusters import NearDuplicates
from permindex.index.keys.column import KeyColumn
from permindex.io.arrow import require_pyarrow
from permindex.io.parquet import ParquetTableWriter, open_documents
from permindex.near.jaccard import SCALE, JaccardDuplicates, jaccard_text
from permindex.near.report import ReportCluster, render_report, select_examples
from permindex.near.result import DedupResult
from permindex.text.documents import folder_file_text, format_fingerprint, tsv_field

__all__ = ["measure_of", "texts_reader", "write_outputs"]


def measure_of(result: DedupResult) -> tuple[str, Callable[[int], str]]:
    """What the third column of a pair is called and how its value is written: ``("distance",
    str)`` (bits), or ``("jaccard", jaccard_text)`` in the Jaccard mode."""
    if isinstance(result.near, JaccardDuplicates):
        return "jaccard", jaccard_text
    return "distance", str


class _KeyNames(dict[int, str]):
    """The keys of the report's positions, decoded once: ``names[p]`` is a dict lookup (a
    position not decoded ahead, if any, is decoded on first use)."""

    column: Sequence[str]

    @classmethod
    def of(cls, near: NearDuplicates, clusters: Sequence[NDArray[np.int64]]) -> _KeyNames:
        """The keys of every position in ``clusters`` (every key with a near-duplicate: those
        of the pairs, flags and exact-duplicate groups too)."""
        names = cls()
        names.column = column = near.keys
        if clusters:
            positions = np.concatenate(clusters)
            if isinstance(column, KeyColumn):
                decoded = column.strings(positions)
            else:
                decoded = [column[p] for p in positions.tolist()]
            names.update(zip(positions.tolist(), decoded, strict=True))
        return names

    def __missing__(self, position: int) -> str:
        key = self.column[position]
        self[position] = key
        return key


def _write_lines(path: Path, lines: Iterable[str]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as out:
        batch: list[str] = []
        for line in lines:
            batch.append(line)
            if len(batch) >= 10_000:
                out.write("".join(batch))
                batch.clear()
        out.write("".join(batch))


def _write_json_array(path: Path, items: Iterable[object], *, encoded: bool = False) -> None:
    """A JSON array of ``items`` (or of items already encoded, ``encoded``), one a line, as
    ``json.dumps(item, ensure_ascii=False)`` writes each."""
    encode = json.JSONEncoder(ensure_ascii=False).encode

    def lines() -> Iterator[str]:
        first = True
        yield "["
        for item in items:
            text = item if encoded and isinstance(item, str) else encode(item)
            yield ("\n" if first else ",\n") + text
            first = False
        yield "\n]\n"

    _write_lines(path, lines())


class _KeyBytes:
    """The keys of the report's positions encoded once, three ways (as ``pairs.tsv`` writes
    them, :func:`~permindex.text.documents.tsv_field`; as ``pairs.json`` does,
    ``json.dumps``; and plain, for Parquet), each as one UTF-8 buffer with offsets, and
    ``slot[p]`` the index of position p in them (-1: not encoded yet, see :meth:`cover`):
    the buffers :func:`permindex.near.line_kernels.pair_lines` reads."""

    def __init__(self, names: _KeyNames) -> None:
        self.names = names
        self.slot = np.full(len(names.column), -1, dtype=np.int64)
        self.positions: list[int] = []
        self.tsv = self.json = self.plain = (np.zeros(0, np.uint8), np.zeros(1, np.int64))
        self.cover(np.fromiter(names.keys(), dtype=np.int64, count=len(names)))

    def cover(self, positions: NDArray[np.int64]) -> None:
        """Encode the keys of ``positions`` not encoded yet (the buffers are made again when
        there are any: every position of a pair is encoded ahead, so this is rare)."""
        missing = positions[self.slot[positions] < 0]
        if missing.size == 0 and self.positions:
            return
        missing = np.unique(missing)
        self.slot[missing] = np.arange(len(self.positions), len(self.positions) + missing.size)
        self.positions.extend(missing.tolist())
        keys = [self.names[p] for p in self.positions]
        self.tsv = _buffer([tsv_field(key).encode("utf-8") for key in keys])
        self.json = _buffer([encode_basestring(key).encode("utf-8") for key in keys])
        self.plain = _buffer([key.encode("utf-8") for key in keys])


def _buffer(items: Sequence[bytes]) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    """``items`` as one uint8 buffer and (len + 1,) int64 offsets."""
    offsets = np.zeros(len(items) + 1, dtype=np.int64)
    np.cumsum([len(item) for item in items], out=offsets[1:])
    return np.frombuffer(b"".join(items), dtype=np.uint8), offsets


def _pieces(*parts: str) -> tuple[NDArray[np.uint8], NDArray[np.int64]]:
    return _buffer([part.encode("utf-8") for part in parts])


def _write_pairs(
    folder: Path, near: NearDuplicates, keys: _KeyNames, measure: str, m: Callable[[int], str]
) -> None:
    """``pairs.tsv``, ``pairs.json`` and, with pyarrow, ``pairs.parquet`` in one pass over
    :meth:`~permindex.index.join.clusters.NearDuplicates.pair_chunks` (one chunk in memory):
    each key encoded and each distance written once, not once a pair, and each chunk's
    lines copied into one buffer by a compiled kernel
    (:func:`permindex.near.line_kernels.pair_lines`), so that the pairs of a templated corpus
    (10^6 and more over a few thousand keys) cost no Python object each. Without pyarrow an
    earlier run's ``pairs.parquet`` is removed."""
    from permindex.near import line_kernels

    encoded = _KeyBytes(keys)
    jaccard = isinstance(near, JaccardDuplicates)
    measures: list[bytes] = []
    measure_table = _buffer(measures)
    tsv_pieces = _pieces("", "\t", "\t", "\n")
    json_pieces = _pieces(',\n{"key_a": ', ', "key_b": ', f', "{measure}": ', "}")
    parquet: Path | None = folder / "pairs.parquet"
    try:
        pa = require_pyarrow()
    except InvalidArgumentError:
        (folder / "pairs.parquet").unlink(missing_ok=True)
        parquet = None
    with ExitStack() as stack:
        tsv_file = stack.enter_context(open(folder / "pairs.tsv", "wb"))
        json_file = stack.enter_context(open(folder / "pairs.json", "wb"))
        writer = None
        if parquet is not None:
            # the third column as the TSV file has it: bits, or the Jaccard similarity (float64,
            # (SCALE - distance) / SCALE: the value pairs.tsv prints with 4 decimals)
            third = ("jaccard", "float64") if jaccard else ("distance", "int64")
            writer = stack.enter_context(
                ParquetTableWriter(parquet, [("key_a", "string"), ("key_b", "string"), third])
            )
        json_file.write(b"[")
        first = True
        for a, b, d in near.pair_chunks():
            if a.size == 0:
                continue
            a, b, d = (np.ascontiguousarray(x, dtype=np.int64) for x in (a, b, d))
            encoded.cover(np.concatenate((a, b)))
            top = int(d.max())
            if top >= len(measures):  # each distance's text made once
                measures.extend(m(x).encode("utf-8") for x in range(len(measures), top + 1))
                measure_table = _buffer(measures)
            slot = encoded.slot
            lines = line_kernels.pair_lines(
                a, b, d, slot, *encoded.tsv, *measure_table, *tsv_pieces
            )
            tsv_file.write(lines.data)
            lines = line_kernels.pair_lines(
                a, b, d, slot, *encoded.json, *measure_table, *json_pieces
            )
            json_file.write(lines.data[1:] if first else lines.data)
            first = False
            if writer is not None:
                third_column = (SCALE - d.astype(np.float64)) / SCALE if jaccard else d
                writer.write_columns(
                    [_string_column(pa, x, encoded) for x in (a, b)] + [third_column]
                )
        json_file.write(b"\n]\n")


def _string_column(pa: Any, positions: NDArray[np.int64], encoded: _KeyBytes) -> Any:
    """The keys of ``positions`` as an Arrow string array, made from the encoded keys
    (:func:`permindex.near.line_kernels.string_column`), or from a list of str when their
    bytes pass the 32-bit offsets of Arrow's string type."""
    from permindex.near import line_kernels

    values, offsets = encoded.plain
    slot = encoded.slot[positions]
    if int((offsets[slot + 1] - offsets[slot]).sum()) >= 2**31:
        return [encoded.names[p] for p in positions.tolist()]
    at, data = line_kernels.string_column(positions, encoded.slot, values, offsets)
    return pa.Array.from_buffers(
        pa.string(), positions.size, [None, pa.py_buffer(at), pa.py_buffer(data)]
    )


def _write_parquet_tables(
    folder: Path,
    near: NearDuplicates,
    keys: _KeyNames,
    clusters: Sequence[NDArray[np.int64]],
    exact: Sequence[NDArray[np.int64]],
    decisions: Sequence[tuple[int, str, str, str]],
) -> None:
    """``clusters``, ``exact_duplicates`` and ``keep_drop`` as Parquet (``pairs``:
    :func:`_write_pairs`), the columns of the TSV files (fingerprints as uint64, counts as
    int64), when pyarrow is installed; otherwise those of an earlier run are removed (they
    would be out of date). Written a column at a time
    (:meth:`ParquetTableWriter.write_columns`), not a row at a time."""
    names = ("clusters", "exact_duplicates", "keep_drop")
    try:
        require_pyarrow()
    except InvalidArgumentError:
        for name in names:
            (folder / f"{name}.parquet").unlink(missing_ok=True)
        return
    name_of = keys.__getitem__

    def numbered(
        groups: Sequence[NDArray[np.int64]],
    ) -> tuple[NDArray[np.int64], list[int], NDArray[np.int64]]:
        """Each group's number (1, 2, ...) once per member, the members in order, and the
        groups' sizes."""
        sizes = np.array([group.size for group in groups], dtype=np.int64)
        members = np.concatenate(groups).tolist() if groups else []
        return np.repeat(np.arange(1, sizes.size + 1, dtype=np.int64), sizes), members, sizes

    number, members, _ = numbered(clusters)
    with ParquetTableWriter(
        folder / "clusters.parquet", [("cluster", "int64"), ("key", "string")]
    ) as writer:
        writer.write_columns([number, list(map(name_of, members))])
    number, members, sizes = numbered(exact)
    firsts = np.array([group[0] for group in exact], dtype=np.int64)
    with ParquetTableWriter(
        folder / "exact_duplicates.parquet",
        [("group", "int64"), ("fingerprint", "uint64"), ("key", "string")],
    ) as writer:
        fingerprints = np.repeat(np.asarray(near.fingerprints)[firsts], sizes)
        writer.write_columns([number, fingerprints, list(map(name_of, members))])
    with ParquetTableWriter(
        folder / "keep_drop.parquet",
        [("cluster", "int64"), ("action", "string"), ("key", "string"), ("kept_key", "string")],
    ) as writer:
        if decisions:
            writer.write_columns([list(column) for column in zip(*decisions, strict=True)])


def texts_reader(result: DedupResult) -> Callable[[Sequence[int]], dict[int, str]]:
    """A function from input ordinals to the texts of those documents, read again from the
    input (a folder's files directly; a JSONL file, or the copy of standard input, up to the
    largest ordinal asked for). Documents that came as fingerprints have no text."""
    options = result.options

    def read(ordinals: Sequence[int]) -> dict[int, str]:
        wanted = set(ordinals)
        found: dict[int, str] = {}
        if not wanted:
            return found
        source: str | Path | None = (
            result.spool if result.reread_source is None else result.reread_source
        )
        if source is None or not Path(source).exists():
            return found
        reader = open_documents(
            source,
            id_field=options.id_field,
            text_field=options.text_field,
            fingerprint_field=options.fingerprint_field,
        )
        if reader.kind == "folder":
            by_ordinal = {int(o): p for p, o in enumerate(result.ordinals.tolist()) if o in wanted}
            for ordinal, position in by_ordinal.items():
                path = Path(source) / result.near.keys[position]
                text, _ = folder_file_text(path, options.extract)
                if text is not None:
                    found[ordinal] = text
            return found
        last = max(wanted)
        for ordinal, document in enumerate(reader):
            if ordinal in wanted and document.text is not None:
                found[ordinal] = document.text
            if ordinal >= last:
                break
        return found

    return read


def write_outputs(result: DedupResult, out_dir: Path | None = None) -> dict[str, Any]:
    """Write the report folder (default ``result.options.out_dir``) and return the summary
    (also written as ``summary.json``). Files (TSV: tab-separated, no header, one record a line;
    fingerprints as 16 hex digits):

    - ``pairs.tsv`` (``key_a, key_b, distance``: what stdout carries) and ``pairs.json``;
      in the Jaccard mode (``method="minhash"``) ``jaccard`` (4 decimals) in place of
      ``distance`` here and in flags, and the set digest in place of the fingerprint in the
      exact-duplicate groups (sets of identical shingles);
    - ``clusters.tsv`` (``cluster, key``; cluster 1 is the largest) and ``clusters.json``
      (``cluster, size, span, kept, keys``; span: the largest distance inside the cluster);
    - ``flags.tsv`` (``key, nearest_key, distance, neighbors``) and ``flags.json``;
    - ``exact_duplicates.tsv`` (``group, fingerprint, key``) and ``exact_duplicates.json``;
    - ``keep_drop.tsv`` (``cluster, keep|drop, key, kept_key``) for every key in a cluster,
      ``drop.txt`` (the keys to drop, one a line) and ``keep_drop.json``;
    - ``too_short.tsv`` (``key, tokens``);
    - ``summary.json`` and ``report.html`` (self-contained);
    - when pyarrow is installed (the ``parquet`` extra), ``pairs.parquet``,
      ``clusters.parquet``, ``exact_duplicates.parquet`` and ``keep_drop.parquet``: the columns
      of the TSV files of those names (fingerprints as uint64; the Jaccard mode's ``jaccard``
      as float64); without it, the rest only (and
      those of an earlier run in the folder are removed).
    """
    started = time.monotonic()
    options = result.options
    folder = Path(out_dir if out_dir is not None else options.out_dir)
    folder.mkdir(parents=True, exist_ok=True)
    near = result.near
    clusters = near.cluster_positions()
    keys = _KeyNames.of(near, clusters)  # keys[p]: a dict lookup, not a call per line
    fps = near.fingerprints
    t = tsv_field  # keys in TSV and text lines: backslash, TAB, LF, CR escaped
    measure, m = measure_of(result)

    _write_pairs(folder, near, keys, measure, m)
    j = encode_basestring  # a str as json.dumps(..., ensure_ascii=False) writes it

    spans = near.spans(clusters)
    _write_lines(
        folder / "clusters.tsv",
        (
            f"{number}\t{t(keys[p])}\n"
            for number, members in enumerate(clusters, start=1)
            for p in members.tolist()
        ),
    )
    _write_json_array(
        folder / "clusters.json",
        (
            {
                "cluster": number,
                "size": int(members.size),
                "span": span,
                "kept": keys[kept],
                "keys": [keys[p] for p in members.tolist()],
            }
            for number, (members, span, kept) in enumerate(
                zip(clusters, spans, result.kept, strict=True), start=1
            )
        ),
    )

    node, other, distance, neighbors = near.flag_arrays()
    flag_rows = list(
        zip(node.tolist(), other.tolist(), distance.tolist(), neighbors.tolist(), strict=True)
    )
    _write_lines(
        folder / "flags.tsv",
        (f"{t(keys[p])}\t{t(keys[q])}\t{m(dd)}\t{c}\n" for p, q, dd, c in flag_rows),
    )
    _write_json_array(
        folder / "flags.json",
        (
            f'{{"key": {j(keys[p])}, "nearest_key": {j(keys[q])}, "{measure}": {m(dd)}, '
            f'"neighbors": {c}}}'
            for p, q, dd, c in flag_rows
        ),
        encoded=True,
    )

    exact = near.exact_positions()
    _write_lines(
        folder / "exact_duplicates.tsv",
        (
            f"{number}\t{format_fingerprint(int(fps[members[0]]))}\t{t(keys[p])}\n"
            for number, members in enumerate(exact, start=1)
            for p in members.tolist()
        ),
    )
    _write_json_array(
        folder / "exact_duplicates.json",
        (
            {
                "group": number,
                "fingerprint": format_fingerprint(int(fps[members[0]])),
                "size": int(members.size),
                "keys": [keys[p] for p in members.tolist()],
            }
            for number, members in enumerate(exact, start=1)
        ),
    )

    decisions = [
        (number, "keep" if p == kept else "drop", keys[p], keys[kept])
        for number, (members, kept) in enumerate(zip(clusters, result.kept, strict=True), start=1)
        for p in members.tolist()
    ]
    _write_lines(
        folder / "keep_drop.tsv", (f"{c}\t{x}\t{t(k)}\t{t(kk)}\n" for c, x, k, kk in decisions)
    )
    _write_lines(folder / "drop.txt", (f"{t(k)}\n" for _, x, k, _ in decisions if x == "drop"))
    _write_json_array(
        folder / "keep_drop.json",
        (
            f'{{"cluster": {c}, "action": "{x}", "key": {j(k)}, "kept_key": {j(kk)}}}'
            for c, x, k, kk in decisions
        ),
        encoded=True,
    )
    _write_lines(folder / "too_short.tsv", (f"{t(k)}\t{n}\n" for k, n in result.too_short))
    _write_parquet_tables(folder, near, keys, clusters, exact, decisions)

    if isinstance(near, JaccardDuplicates):
        labelled = near.jaccard_counts()
    else:
        labelled = [(str(d), c) for d, c in enumerate(near.distance_counts().tolist())]
    dropped = sum(1 for _, x, _, _ in decisions if x == "drop")
    summary: dict[str, Any] = {
        "input": options.source,
        "documents": result.documents,
        "fingerprinted": len(near.keys) + result.repeated_keys,
        "distinct_keys": len(near.keys),
        "repeated_keys": result.repeated_keys,
        "too_short": len(result.too_short),
        "skipped": sum(result.skipped_by_reason.values()),
        "skipped_by_reason": result.skipped_by_reason,
        "k": options.k,
        "design": {"blocks": result.design[0], "leading": result.design[1]},
        "weights": options.weights,
        "tokenizer": options.tokenizer,
        "shingle_size": options.shingle_size,
        "min_words": options.min_words,
        "keep": options.keep,
        "pairs": len(near),
        "pairs_by_distance": dict(labelled),
        "clusters": len(clusters),
        "largest_cluster": int(clusters[0].size) if clusters else 0,
        "keys_in_clusters": int(sum(int(m.size) for m in clusters)),
        "flagged": len(flag_rows),
        "exact_duplicate_groups": len(exact),
        "keys_in_exact_groups": int(sum(int(m.size) for m in exact)),
        "kept": len(clusters),
        "dropped": dropped,
        "jobs": options.jobs,
        "seconds": {name: round(value, 3) for name, value in result.seconds.items()},
        "cpu_seconds": {name: round(value, 3) for name, value in result.cpu_seconds.items()},
        "method": options.method,
        "vote": options.vote,
        "extract": options.extract,
        "within": f"within {options.k} bits",
    }
    if isinstance(near, JaccardDuplicates):
        del summary["pairs_by_distance"], summary["k"], summary["design"], summary["weights"]
        del summary["vote"]  # a SimHash option (refused with --method minhash)
        summary["pairs_by_jaccard"] = dict(labelled)  # bins of 0.01 by their lower end
        summary["within"] = f"with Jaccard >= {options.threshold:g}"
        summary.update(
            threshold=options.threshold,
            permutations=options.permutations,
            bands=near.shape.bands,
            rows=near.shape.rows,
            # the share of pairs at exactly the threshold that the bands find (the S-curve's
            # P(threshold)); below 1 - MISS_AT_THRESHOLD when the permutations are too few
            recall_at_threshold=round(near.shape.probability(options.threshold), 4),
            candidates=near.candidates,
            candidates_verified=near.candidates_verified,
        )

    read_texts = texts_reader(result)
    examples = select_examples(result, options.examples, read_texts)
    top = [
        ReportCluster(
            number=number,
            size=int(members.size),
            span=span,
            kept=keys[kept],
            keys=[keys[p] for p in members[:20].tolist()],
        )
        for number, (members, span, kept) in enumerate(
            zip(clusters[:10], spans[:10], result.kept[:10], strict=True), start=1
        )
    ]
    stages = summary["seconds"]
    stages["write"] = round(time.monotonic() - started, 3)
    if "read" in stages and "fingerprint" in stages:  # the step's name before it was split
        stages["read and fingerprint"] = round(stages["read"] + stages["fingerprint"], 3)
    (folder / "report.html").write_text(
        render_report(summary, labelled, top, examples, measure=m), encoding="utf-8"
    )
    (folder / "summary.json").write_text(
        json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return summary
