"""The near-duplicate commands: ``permindex clusters`` and ``flags`` against a real server, and
``permindex dedup`` (offline) on the shared corpora, folders of HTML, standard input, other JSONL
schemas, and bad inputs; its report folder and keep/drop rules."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from permindex import simhash
from permindex.cli import main
from permindex.errors import EXIT_CODES
from permindex.near.dedup import run_dedup, write_outputs
from permindex.near.result import DedupOptions
from permindex.text.documents import read_file_text
from permindex.v1 import index_pb2 as pb

if TYPE_CHECKING:
    from permindex.rpc.server import RunningServer
    from permindex.v1.index_pb2_grpc import PermIndexStub

REPO = Path(__file__).resolve().parent.parent
CORPORA = REPO.parent / "shared" / "corpora"
LIBSTDCXX = CORPORA / "libstdc++-12-doc.jsonl.gz"
POSTGRESQL = CORPORA / "postgresql-doc-15.jsonl.gz"
OK, INVALID, USAGE = EXIT_CODES["ok"], EXIT_CODES["invalid"], EXIT_CODES["usage"]


def add(stub: PermIndexStub, entries: dict[str, int]) -> None:
    stub.Add(
        pb.AddRequest(documents=[pb.Document(key=k, fingerprint=f) for k, f in entries.items()])
    )


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_clusters_and_flags_commands(
    capsys: pytest.CaptureFixture[str], server: RunningServer, stub: PermIndexStub
) -> None:
    base = 0xF0F0F0F0F0F0F0F0
    entries = {"b": base, "a": base ^ 8, "é": base ^ 8 ^ 512, "中": base, "x": ~base & (2**64 - 1)}
    add(stub, entries)
    address = ("--address", server.address)
    code, out, err = run(capsys, "clusters", *address)
    assert (code, err) == (0, "")
    assert out == "1\ta\n1\tb\n1\té\n1\t中\n"
    code, out, _ = run(capsys, "clusters", "--k", "0", *address)
    assert out == "1\tb\n1\t中\n"
    code, out, _ = run(capsys, "clusters", "--exact", *address)
    assert out == f"1\t{base:016x}\tb\n1\t{base:016x}\t中\n"
    code, out, _ = run(capsys, "clusters", "--json", *address)
    assert json.loads(out) == [{"cluster": 1, "size": 4, "keys": ["a", "b", "é", "中"]}]
    code, out, _ = run(capsys, "clusters", "--exact", "--json", *address)
    assert json.loads(out) == [
        {"group": 1, "fingerprint": f"{base:016x}", "size": 2, "keys": ["b", "中"]}
    ]
    code, out, _ = run(capsys, "flags", *address)
    assert out == "a\tb\t1\t3\nb\t中\t0\t3\né\ta\t1\t3\n中\tb\t0\t3\n"
    code, out, _ = run(capsys, "flags", "--k", "1", "--json", *address)
    assert json.loads(out) == [
        {"key": "a", "nearest_key": "b", "distance": 1, "neighbors": 3},
        {"key": "b", "nearest_key": "中", "distance": 0, "neighbors": 2},
        {"key": "é", "nearest_key": "a", "distance": 1, "neighbors": 1},
        {"key": "中", "nearest_key": "b", "distance": 0, "neighbors": 2},
    ]
    code, out, err = run(capsys, "clusters", "--k", "5", *address)
    assert code == EXIT_CODES["invalid"] and out == "" and "k=5" in err
    code, _, err = run(capsys, "clusters", "--k", "1", "--exact", *address)
    assert code == EXIT_CODES["usage"]


def test_commands_without_a_server(capsys: pytest.CaptureFixture[str]) -> None:
    for command in ("clusters", "flags"):
        code, out, err = run(capsys, command, "--address", "127.0.0.1:1")
        assert code == EXIT_CODES["unavailable"] and out == ""
        assert "cannot reach" in err


# --- dedup ---------------------------------------------------------------------------------------


def words(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    vocab = [f"w{i}" for i in range(5000)]
    return [vocab[i] for i in rng.integers(0, 5000, size=n).tolist()]


def edited(text_words: list[str], *positions: int) -> str:
    out = list(text_words)
    for p in positions:
        out[p] = f"edit{p}"
    return " ".join(out)


def write_jsonl(path: Path, rows: list[dict[str, Any]], *, compress: bool = False) -> Path:
    data = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode("utf-8")
    path.write_bytes(gzip.compress(data, compresslevel=1) if compress else data)
    return path


def small_collection() -> list[dict[str, Any]]:
    """Six documents: a cluster of three (base, one word changed, two words changed), an exact
    copy pair, and one unrelated document."""
    base = words(1, 400)
    other = words(2, 300)
    return [
        {"id": "c/base", "text": " ".join(base)},
        {"id": "a/one-edit", "text": edited(base, 200) + " and a longer tail of words"},
        {"id": "b/two-edits", "text": edited(base, 100, 300)},
        {"id": "x/copy1", "text": " ".join(other)},
        {"id": "x/copy2", "text": " ".join(other)},
        {"id": "z/unrelated", "text": " ".join(words(3, 300))},
    ]


def dedup(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return run(capsys, "dedup", "--no-progress", *argv)


def report(out: Path, name: str) -> Any:
    return json.loads((out / name).read_text(encoding="utf-8"))


def test_dedup_small_collection_writes_every_report_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write_jsonl(tmp_path / "docs.jsonl", small_collection())
    out = tmp_path / "report"
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(out), "--jobs", "1")
    assert code == OK, stderr
    lines = [line.split("\t") for line in stdout.splitlines()]
    keys = {(a, b) for a, b, _ in lines}
    assert {("a/one-edit", "c/base"), ("b/two-edits", "c/base"), ("x/copy1", "x/copy2")} <= keys
    assert all(a < b for a, b, _ in lines) and lines == sorted(lines, key=lambda r: (r[0], r[1]))
    assert (out / "pairs.tsv").read_text(encoding="utf-8") == stdout
    assert report(out, "pairs.json") == [
        {"key_a": a, "key_b": b, "distance": int(d)} for a, b, d in lines
    ]
    clusters = report(out, "clusters.json")
    assert [c["keys"] for c in clusters] == [
        ["a/one-edit", "b/two-edits", "c/base"],
        ["x/copy1", "x/copy2"],
    ]
    assert [c["kept"] for c in clusters] == ["c/base", "x/copy1"]  # --keep first
    assert (out / "clusters.tsv").read_text(encoding="utf-8") == (
        "1\ta/one-edit\n1\tb/two-edits\n1\tc/base\n2\tx/copy1\n2\tx/copy2\n"
    )
    assert (out / "drop.txt").read_text(encoding="utf-8") == "a/one-edit\nb/two-edits\nx/copy2\n"
    assert (out / "keep_drop.tsv").read_text(encoding="utf-8").splitlines()[:3] == [
        "1\tdrop\ta/one-edit\tc/base",
        "1\tdrop\tb/two-edits\tc/base",
        "1\tkeep\tc/base\tc/base",
    ]
    exact = report(out, "exact_duplicates.json")
    assert [(g["size"], g["keys"]) for g in exact] == [(2, ["x/copy1", "x/copy2"])]
    assert re.fullmatch(
        r"1\t[0-9a-f]{16}\tx/copy1\n1\t[0-9a-f]{16}\tx/copy2\n",
        (out / "exact_duplicates.tsv").read_text(encoding="utf-8"),
    )
    flags = report(out, "flags.json")
    assert [f["key"] for f in flags] == [
        "a/one-edit",
        "b/two-edits",
        "c/base",
        "x/copy1",
        "x/copy2",
    ]
    assert flags[3] == {"key": "x/copy1", "nearest_key": "x/copy2", "distance": 0, "neighbors": 1}
    summary = report(out, "summary.json")
    assert summary["documents"] == 6 and summary["pairs"] == len(lines)
    assert (summary["clusters"], summary["largest_cluster"], summary["dropped"]) == (2, 3, 3)
    assert sum(summary["pairs_by_distance"].values()) == len(lines)
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<svg" in html and "<del>edit300</del> <ins>w" in html  # b/two-edits against c/base
    assert not re.search(r"<script|<link|src=|url\(", html)  # self-contained
    assert (out / "too_short.tsv").read_text(encoding="utf-8") == ""
    assert re.search(r"permindex dedup: 6 documents in .* s: 0 too short, 0 skipped; ", stderr)


@pytest.mark.parametrize(
    ("rule", "kept"),
    [("first", "c/base"), ("longest", "a/one-edit"), ("smallest-key", "a/one-edit")],
)
def test_dedup_keep_rules(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, rule: str, kept: str
) -> None:
    rows = small_collection()
    rows[2]["id"] = "0/two-edits"  # now the smallest key of the cluster... for smallest-key
    if rule == "smallest-key":
        kept = "0/two-edits"
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    out = tmp_path / "r"
    code, _, stderr = dedup(capsys, str(path), "--out", str(out), "--keep", rule, "--jobs", "1")
    assert code == OK, stderr
    clusters = report(out, "clusters.json")
    assert clusters[0]["kept"] == kept
    dropped = set((out / "drop.txt").read_text(encoding="utf-8").split())
    assert kept not in dropped and len(dropped) == 3
    assert f"--keep {rule}" in stderr


def test_dedup_folder_of_html(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "site"
    (folder / "docs" / "deep").mkdir(parents=True)
    base = words(5, 2000)  # long: a word or two changed moves a few bits at most

    def page(text: str, title: str) -> str:
        return (
            f"<!DOCTYPE html><html><head><title>{title}</title><style>p {{ x: y }}</style>"
            f"<script>var tracking = 'words words words';</script></head><body><nav>Home</nav>"
            f"<p>{text}</p><!-- a comment --></body></html>"
        )

    (folder / "docs" / "a.html").write_text(page(" ".join(base), "A"), encoding="utf-8")
    (folder / "docs" / "deep" / "b.htm").write_text(page(edited(base, 150), "B"), encoding="utf-8")
    (folder / "c.html.gz").write_bytes(gzip.compress(page(edited(base, 1000), "C").encode()))
    (folder / "other.txt").write_text(" ".join(words(6, 200)), encoding="utf-8")
    (folder / "tiny.txt").write_text("three words only", encoding="utf-8")
    (folder / "binary.bin").write_bytes(b"\x00\x01\x02")
    os.symlink(folder / "other.txt", folder / "link.txt")
    out = tmp_path / "report"
    code, stdout, stderr = dedup(
        capsys, str(folder), "--out", str(out), "--min-words", "20", "--jobs", "1"
    )
    assert code == OK, stderr
    pairs = {tuple(line.split("\t")[:2]) for line in stdout.splitlines()}
    assert pairs == {
        ("c.html.gz", "docs/a.html"),
        ("c.html.gz", "docs/deep/b.htm"),
        ("docs/a.html", "docs/deep/b.htm"),
    }
    assert (out / "too_short.tsv").read_text(encoding="utf-8") == "tiny.txt\t3\n"
    summary = report(out, "summary.json")
    assert summary["documents"] == 5
    assert summary["skipped_by_reason"] == {"not text": 1, "symlink": 1}
    assert "1 too short, 2 skipped (1 not text, 1 symlink)" in stderr
    html = (out / "report.html").read_text(encoding="utf-8")
    assert "<ins>edit150</ins>" in html or "<ins>edit1000</ins>" in html
    assert "tracking" not in html  # scripts are not visible text


def test_dedup_folder_in_parallel_matches_one_process(tmp_path: Path) -> None:
    folder = tmp_path / "many"
    folder.mkdir()
    for i in range(200):  # more than the chunks done before the pool starts
        text = edited(words(i // 2, 120), 60) if i % 2 else " ".join(words(i // 2, 120))
        (folder / f"p{i:03d}.html").write_text(f"<p>{text}</p>", encoding="utf-8")
    (folder / "junk.html").write_bytes(b"\xff\xfe not utf-8")
    results = []
    for jobs in (1, 2):
        options = DedupOptions(source=str(folder), out_dir=tmp_path / f"r{jobs}", jobs=jobs)
        result = run_dedup(options)
        write_outputs(result)
        results.append(result)
        assert result.documents == 200 and result.skipped_by_reason == {"not text": 1}
    one, two = results
    assert list(one.near.iter_pairs()) == list(two.near.iter_pairs())
    assert np.array_equal(one.near.fingerprints, two.near.fingerprints)
    # the same fingerprints as simhash of each page's visible text, in the folder's order
    texts = [read_file_text(folder / f"p{i:03d}.html") for i in range(200)]
    assert one.near.fingerprints.tolist() == [simhash(t) for t in texts]
    assert one.near.keys == [f"p{i:03d}.html" for i in range(200)]
    assert len(one.near) >= 20  # some of the planted pairs (p000, p001), (p002, p003)...


def test_dedup_from_stdin(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = small_collection()
    data = gzip.compress("".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    out = tmp_path / "report"
    code, stdout, stderr = dedup(capsys, "-", "--out", str(out), "--jobs", "1")
    assert code == OK, stderr
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    code, from_file, _ = dedup(capsys, str(path), "--out", str(tmp_path / "r2"), "--jobs", "1")
    assert stdout == from_file and stdout.count("\n") == 3
    # the examples' texts were read again from the copy of standard input
    assert "<del>edit" in (out / "report.html").read_text(encoding="utf-8")


def test_dedup_idf_weights_from_stdin_reads_it_twice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = small_collection()
    data = "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, stdout, stderr = dedup(
        capsys, "-", "--out", str(tmp_path / "r"), "--weights", "idf", "--jobs", "1"
    )
    assert code == OK, stderr
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    code, from_file, _ = dedup(
        capsys, str(path), "--out", str(tmp_path / "r2"), "--weights", "idf", "--jobs", "1"
    )
    assert stdout == from_file
    assert "x/copy1\tx/copy2\t0" in stdout
    assert report(tmp_path / "r", "summary.json")["weights"] == "idf"


def test_dedup_other_schema_and_fingerprints(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    rows = [{"url": r["id"], "content": r["text"], "lang": "en"} for r in small_collection()]
    rows.append({"url": "given/fp", "fingerprint": "0x0"})
    rows.append({"url": "given/fp2", "fingerprint": 1})
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    out = tmp_path / "r"
    code, stdout, stderr = dedup(
        capsys, str(path), "--out", str(out), "--id-field", "url", "--text-field", "content"
    )
    assert code == OK, stderr
    assert "given/fp\tgiven/fp2\t1\n" in stdout
    assert "x/copy1\tx/copy2\t0\n" in stdout
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(out))
    assert code == INVALID and stdout == ""
    assert 'line 1: no "id"' in stderr


def test_dedup_streams_the_pairs_of_many_copies_in_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """500 documents of one fingerprint and 20 one bit away (keys interleaved): pairs.tsv and
    stdout carry every pair (streamed from the join, not listed first), in (key_a, key_b)
    order."""
    base = 0x1234_5678_9ABC_DEF0
    rows: list[dict[str, Any]] = [{"id": f"copy/{i:04d}", "fingerprint": base} for i in range(500)]
    rows += [{"id": f"copy/{i:04d}x", "fingerprint": base ^ (1 << i)} for i in range(20)]
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    out = tmp_path / "r"
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(out), "--k", "3")
    assert code == OK, stderr
    lines = [tuple(line.split("\t")) for line in stdout.splitlines()]
    fps = {r["id"]: r["fingerprint"] for r in rows}
    names = sorted(fps)
    expected = [
        (a, b, str((fps[a] ^ fps[b]).bit_count()))
        for i, a in enumerate(names)
        for b in names[i + 1 :]
        if (fps[a] ^ fps[b]).bit_count() <= 3
    ]
    assert lines == expected  # 500 * 499 / 2 + 500 * 20 + 190 pairs, sorted
    assert len(lines) == 500 * 499 // 2 + 500 * 20 + 190
    assert (out / "pairs.tsv").read_text(encoding="utf-8") == stdout
    assert report(out, "summary.json")["pairs"] == len(lines)


def test_dedup_repeated_keys_count_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = small_collection()
    rows.insert(0, {"id": "x/copy2", "text": " ".join(words(9, 300))})  # replaced later
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(tmp_path / "r"))
    assert code == OK
    assert "x/copy1\tx/copy2\t0\n" in stdout
    assert ", 1 repeated key;" in stderr
    assert report(tmp_path / "r", "summary.json")["repeated_keys"] == 1


def test_dedup_chinese_with_character_shingles(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    park = "今天下午我们在公园里散步看见很多孩子在草地上放风筝天空中飘着各种颜色的风筝" * 3
    sales = "这家公司去年的销售额增长了百分之二十主要来自海外市场和新推出的电子产品" * 3
    rows = [
        {"id": "park", "text": park},
        {"id": "park2", "text": park[:50] + "雪" + park[51:]},
        {"id": "sales", "text": sales},
    ]
    path = write_jsonl(tmp_path / "zh.jsonl", rows)
    code, stdout, _ = dedup(capsys, str(path), "--out", str(tmp_path / "w"))
    assert (code, stdout) == (OK, "")  # one "word" each: all too short
    assert report(tmp_path / "w", "summary.json")["too_short"] == 3
    for tokenizer in ("chars", "auto"):
        code, stdout, _ = dedup(
            capsys, str(path), "--out", str(tmp_path / tokenizer), "--tokenizer", tokenizer
        )
        assert code == OK
        assert [line.split("\t")[:2] for line in stdout.splitlines()] == [["park", "park2"]]


def test_dedup_larger_k(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = [{"id": f"k{i}", "fingerprint": (0xFF << i) & (2**64 - 1)} for i in range(8)]
    path = write_jsonl(tmp_path / "fp.jsonl", rows)
    code, stdout, _ = dedup(capsys, str(path), "--out", str(tmp_path / "r"), "--k", "6")
    assert code == OK
    assert stdout.splitlines()[0] == "k0\tk1\t2"
    assert report(tmp_path / "r", "summary.json")["design"] == {"blocks": 8, "leading": 2}
    code, _, stderr = dedup(capsys, str(path), "--k", "9")
    assert code == USAGE and "at most 8" in stderr


def test_dedup_malformed_line_names_it(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    rows = small_collection()
    text = "".join(json.dumps(r) + "\n" for r in rows[:3]) + '{"id": "broken", "text": \n'
    path = tmp_path / "bad.jsonl"
    path.write_text(text, encoding="utf-8")
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(tmp_path / "r"))
    assert code == INVALID and stdout == ""
    assert f"{path}, line 4: bad JSON" in stderr
    path.write_text(json.dumps(rows[0]) + '\n{"id": "no text"}\n', encoding="utf-8")
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(tmp_path / "r"))
    assert code == INVALID and "line 2: neither" in stderr


def test_a_failed_dedup_leaves_no_empty_report_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A run refused for its input removes the report folders it made (still empty), and
    leaves a folder that was there before, with what it held, as it was."""
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "text": \n', encoding="utf-8")
    made = tmp_path / "new" / "report"
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(made))
    assert code == INVALID and stdout == "" and "line 1: bad JSON" in stderr
    assert not (tmp_path / "new").exists()
    code, _, _ = dedup(capsys, str(tmp_path / "missing.jsonl"), "--out", str(made))
    assert code == INVALID and not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine", encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    for folder in (kept, empty):
        code, _, _ = dedup(capsys, str(path), "--out", str(folder))
        assert code == INVALID and folder.is_dir()
    assert [p.name for p in kept.iterdir()] == ["notes.txt"]
    assert list(empty.iterdir()) == []


def many_rows(n: int, words: int = 150) -> list[dict[str, Any]]:
    """n documents of ``words`` words (about 6 bytes each), every tenth a copy of the one before
    it. 8,000 of 150 words are 7 MB: more than the chunks dedup does in its own process (4 of
    1 MiB), so the last blocks go to the workers."""
    rng = np.random.default_rng(8)
    rows: list[dict[str, Any]] = []
    for i in range(n):
        if i % 10 == 9:
            text = rows[-1]["text"]
        else:
            text = " ".join(f"w{int(x)}" for x in rng.integers(0, 5000, words))
        rows.append({"id": f"doc/{i:05d}", "text": text})
    return rows


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_dedup_malformed_line_in_a_worker_names_it_in_input_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, jobs: str
) -> None:
    """Lines are parsed by the workers, past the first chunks done in this process: a
    malformed line there is reported as reading would (its line number, the first one in
    input order), and a plain line and its fallback give the same documents."""
    rows = many_rows(8000)
    lines = [json.dumps(r) for r in rows]
    lines[7000] = '{"id": "broken", "text": '
    lines[7500] = '{"id": "no text"}'
    path = tmp_path / "bad.jsonl.gz"
    # level 1: the same lines, compressed in a tenth of level 9's time (3 s here)
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode("utf-8"), compresslevel=1))
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(tmp_path / "r"), "--jobs", jobs)
    assert code == INVALID and stdout == ""
    assert f"{path}, line 7001: bad JSON" in stderr and "7501" not in stderr


def test_dedup_reads_odd_lines_as_the_reader_does(tmp_path: Path) -> None:
    """Lines off the plain path (blank lines, CRLF, other spacing and key order, escapes,
    non-ASCII, a given fingerprint, no final newline) give the documents the reader gives."""
    rows = many_rows(8000)
    lines = [json.dumps(r) for r in rows]
    lines[6500] = ""
    lines[6501] = "   "
    lines[7000] = json.dumps({"text": rows[7000]["text"], "id": "é/unicode"}, ensure_ascii=False)
    lines[7001] = json.dumps({"id": "esc\tape", "text": rows[7001]["text"] + " \u00e9"})
    lines[7002] = '{"id":"tight","text":"' + rows[7002]["text"] + '"}\r'
    lines[7003] = json.dumps({"id": "given", "fingerprint": "00000000000000ff"})
    path = tmp_path / "odd.jsonl"
    path.write_bytes("\n".join(lines).encode("utf-8"))  # no final newline
    result = run_dedup(DedupOptions(source=str(path), out_dir=tmp_path / "r", jobs=2))
    from permindex.text.documents import read_documents

    documents = [d for d in read_documents(path) if d.key not in {"given"}]
    assert result.documents == len(documents) + 1
    expected = {d.key: simhash(d.text or "") for d in documents}
    expected["given"] = 0xFF
    got = dict(zip(result.near.keys, result.near.fingerprints.tolist(), strict=True))
    assert got == expected


@pytest.mark.parametrize("elsewhere", [False, True])
@pytest.mark.parametrize("block", [1, 7, 100, 1 << 20])
@pytest.mark.parametrize("ending", ["\n", ""])
def test_text_blocks_parse_to_the_documents_of_reading(
    tmp_path: Path, block: int, ending: str, elsewhere: bool
) -> None:
    """Blocks of whole lines (smaller than a line, a few lines, all), parsed, give the
    documents of reading line by line, with or without a final newline, gzip or not."""
    from permindex.text.documents import read_documents

    rows = many_rows(40, words=5)
    lines = [json.dumps(r) for r in rows]
    lines[3] = ""
    lines[4] = json.dumps({"id": "given", "fingerprint": "00000000000000ff"})
    data = ("\n".join(lines) + ending).encode("utf-8")
    for name, content in (("a.jsonl", data), ("a.jsonl.gz", gzip.compress(data))):
        path = tmp_path / name
        path.write_bytes(content)
        reader = read_documents(path)
        parser = reader.parser()
        blocks = reader.text_blocks(block, inflate_elsewhere=elsewhere)
        got = [d for first, b in blocks for d in parser.block_columns(b, first).documents()]
        assert got == list(read_documents(path))
        assert reader.position_bytes() == len(content)


@pytest.mark.parametrize("block", [1, 50, 1 << 20])
def test_text_blocks_name_the_malformed_line(tmp_path: Path, block: int) -> None:
    from permindex.text.documents import MalformedInputError, read_documents

    lines = [json.dumps(r) for r in many_rows(30, words=5)]
    lines[2] = ""
    lines[21] = '{"id": "x", "text": 5}'
    path = tmp_path / "bad.jsonl"
    path.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    reader = read_documents(path)
    parser = reader.parser()
    with pytest.raises(MalformedInputError) as caught:
        for first, b in reader.text_blocks(block):
            parser.block_columns(b, first)
    with pytest.raises(MalformedInputError) as expected:
        list(read_documents(path))
    assert (caught.value.line, str(caught.value)) == (22, str(expected.value))


@pytest.mark.parametrize("elsewhere", [False, True])
def test_text_blocks_of_a_truncated_or_corrupt_gzip_stream(tmp_path: Path, elsewhere: bool) -> None:
    """The error of reading line by line, decompressed here or by a child process."""
    from permindex.errors import InvalidArgumentError
    from permindex.text.documents import read_documents

    data = gzip.compress(("\n".join(json.dumps(r) for r in many_rows(300)) + "\n").encode())
    for name, content in (("cut.gz", data[: len(data) // 2]), ("bad.gz", data[:50] + b"x" * 99)):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(InvalidArgumentError) as expected:
            list(read_documents(path))
        with pytest.raises(InvalidArgumentError) as caught:
            list(read_documents(path).text_blocks(1000, inflate_elsewhere=elsewhere))
        assert str(caught.value) == str(expected.value)
        assert "cannot read" in str(caught.value)


def test_dedup_summary_times_every_stage(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "docs.jsonl", many_rows(5000), compress=True)
    result = run_dedup(DedupOptions(source=str(path), out_dir=tmp_path / "r", jobs=2))
    summary = write_outputs(result)
    assert summary == report(tmp_path / "r", "summary.json")
    stages = summary["seconds"]
    assert set(stages) == {"read", "fingerprint", "join", "cluster", "write"} | {
        "read and fingerprint"  # the name of read + fingerprint before they were split
    }
    assert all(v >= 0 for v in stages.values())
    assert stages["read and fingerprint"] == pytest.approx(stages["read"] + stages["fingerprint"])
    assert set(summary["cpu_seconds"]) == {"parse", "fingerprint"}
    assert summary["cpu_seconds"]["fingerprint"] > 0 and summary["cpu_seconds"]["parse"] > 0
    html = (tmp_path / "r" / "report.html").read_text(encoding="utf-8")
    assert "read " in html and "cluster " in html


def test_dedup_empty_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    out = tmp_path / "r"
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(out))
    assert (code, stdout) == (OK, "")
    assert "0 documents" in stderr
    assert report(out, "summary.json")["documents"] == 0
    assert "No pairs" in (out / "report.html").read_text(encoding="utf-8")


def test_dedup_missing_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, stdout, stderr = dedup(capsys, str(tmp_path / "nowhere.jsonl"))
    assert code == INVALID and stdout == ""
    assert "nowhere.jsonl: no such file or folder" in stderr


def corpus(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path} (expected <repo>/../shared/corpora)")
    return path


@pytest.mark.slow
def test_dedup_libstdcxx_prints_the_82_pairs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = corpus(LIBSTDCXX)
    out = tmp_path / "report"
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(out), "--jobs", "2")
    assert code == OK, stderr
    expected = (CORPORA / "libstdc++-12-doc.pairs_le3.tsv").read_text(encoding="utf-8")
    assert stdout == expected and stdout.count("\n") == 82
    summary = report(out, "summary.json")
    assert (summary["documents"], summary["pairs"], summary["largest_cluster"]) == (3906, 82, 14)
    assert summary["pairs_by_distance"] == {"0": 2, "1": 5, "2": 30, "3": 45}
    assert summary["exact_duplicate_groups"] == 2
    assert summary["dropped"] == summary["keys_in_clusters"] - summary["clusters"]
    assert report(out, "clusters.json")[0]["size"] == 14


@pytest.mark.slow
def test_dedup_postgresql_has_no_pairs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = corpus(POSTGRESQL)
    code, stdout, stderr = dedup(capsys, str(path), "--out", str(tmp_path / "r"), "--jobs", "1")
    assert (code, stdout) == (OK, "")
    assert "1169 documents" in stderr and "0 pairs within 3 bits" in stderr


# --- min_words in ingest and serve -------------------------------------------------------------


def test_ingest_min_words_counts_short_texts_and_sends_the_rest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer, stub: PermIndexStub
) -> None:
    rows: list[dict[str, Any]] = [
        {"id": "short", "text": "only four words here"},
        {"id": "long", "text": " ".join(words(1, 30))},
        {"id": "given", "fingerprint": 5},
    ]
    path = write_jsonl(tmp_path / "docs.jsonl", rows)
    code, _, stderr = run(
        capsys, "ingest", str(path), "--min-words", "5", "--address", server.address
    )
    assert code == OK
    assert "3 documents in" in stderr and "2 added, 0 replaced, 1 too short" in stderr
    found = stub.Get(pb.GetRequest(keys=["short", "long", "given"])).results
    assert [r.found for r in found] == [False, True, True]


def test_serve_min_words_option() -> None:
    from permindex.cli import build_parser

    args = build_parser().parse_args(["serve", "--min-words", "20"])
    assert args.min_words == 20
    assert build_parser().parse_args(["serve"]).min_words == 0


def test_dedup_summary_line_counts_one_in_the_singular(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """One cluster of one pair: "1 pair", "1 cluster", "1 exact-duplicate group", "1 repeated
    key" (not "1 clusters"); more than one in the plural."""
    rows = [
        {"id": "a", "fingerprint": "00000000000000ff"},
        {"id": "b", "fingerprint": "00000000000000ff"},
        {"id": "b", "fingerprint": "00000000000000ff"},
        {"id": "c", "fingerprint": "ffffffff00000000"},
    ]
    path = write_jsonl(tmp_path / "one.jsonl", rows)
    code, _, stderr = dedup(capsys, str(path), "--out", str(tmp_path / "report"))
    assert code == OK, stderr
    assert "4 documents in" in stderr and ", 1 repeated key;" in stderr
    assert "; 1 pair within 3 bits, 1 cluster (largest 2)" in stderr
    assert "1 exact-duplicate group;" in stderr


def test_dedup_without_against_removes_an_earlier_unmatched_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """new_unmatched.tsv belongs to a --against run: a later plain dedup into the same --out
    removes it instead of leaving a stale one beside its own report."""
    new = write_jsonl(
        tmp_path / "new.jsonl",
        [{"id": "n1", "fingerprint": "00000000000000ff"}, {"id": "n2", "fingerprint": "ff" * 8}],
    )
    corpus = write_jsonl(
        tmp_path / "corpus.jsonl", [{"id": "c1", "fingerprint": "00000000000000fe"}]
    )
    out = tmp_path / "r"
    code, stdout, stderr = dedup(capsys, str(new), "--against", str(corpus), "--out", str(out))
    assert code == OK, stderr
    assert stdout == "n1\tc1\t1\n"
    assert (out / "new_unmatched.tsv").read_text(encoding="utf-8") == "n2\tffffffffffffffff\n"
    code, _, stderr = dedup(capsys, str(new), "--out", str(out))
    assert code == OK, stderr
    assert not (out / "new_unmatched.tsv").exists() and (out / "pairs.tsv").exists()
