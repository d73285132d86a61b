"""The ``permindex`` command line: every command's output format and exit codes, against a real
server on 127.0.0.1 (port 0), with real files; and the walk-through on the shared corpora with the
server in a subprocess (SIGTERM, restart, same answers)."""

from __future__ import annotations

import gzip
import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import pytest

from permindex import simhash
from permindex.cli import build_parser, ingest, main
from permindex.client.batching import batches
from permindex.errors import EXIT_CODES
from permindex.text.documents import Document, read_documents

if TYPE_CHECKING:
    from conftest import StartServer

    from permindex.rpc.server import RunningServer

REPO = Path(__file__).resolve().parent.parent
CORPORA = REPO.parent / "shared" / "corpora"
LIBSTDCXX = CORPORA / "libstdc++-12-doc.jsonl.gz"
LIBSTDCXX_PAIRS = CORPORA / "libstdc++-12-doc.pairs_le3.tsv"
POSTGRESQL = CORPORA / "postgresql-doc-15.jsonl.gz"

OK, USAGE, UNAVAILABLE = EXIT_CODES["ok"], EXIT_CODES["usage"], EXIT_CODES["unavailable"]
INVALID, NOT_FOUND, TOO_SHORT = EXIT_CODES["invalid"], EXIT_CODES["not_found"], 6
HEX16 = re.compile(r"^[0-9a-f]{16}$")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """main(argv) in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def write_jsonl(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def flip(fingerprint: int, *bits: int) -> int:
    for bit in bits:
        fingerprint ^= 1 << bit
    return fingerprint


# --- no server -----------------------------------------------------------------------------


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print(' '.join(sorted(sys.modules)))"],
        check=True,
        capture_output=True,
        text=True,
        cwd=REPO,
    ).stdout
    return set(out.split())


def test_importing_the_cli_and_fingerprint_command_pull_no_grpc() -> None:
    modules = _modules_after("import permindex.cli")
    assert "grpc" not in modules
    assert "tqdm" not in modules
    assert "lxml" not in modules
    modules = _modules_after(
        "import contextlib, io, permindex.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert permindex.cli.main(['fingerprint', 'one two three']) == 0"
    )
    assert "grpc" not in modules


def test_help_documents_every_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "--help")
    assert code == OK
    assert "exit codes:" in out
    for exit_code in (*EXIT_CODES.values(), 130, 143):  # with Ctrl-C's and SIGTERM's
        assert re.search(rf"^  {exit_code}  \S", out, re.MULTILINE), exit_code
    for command in ("serve", "ingest", "query", "fingerprint", "pairs", "get", "remove", "stats"):
        assert command in out


def test_serve_help_states_the_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "serve", "--help")
    assert code == OK
    flat = " ".join(out.split())
    assert "./permindex-data" in flat
    assert "(default 60)" in flat
    assert "in-flight calls get --grace-seconds to finish, a final snapshot is written" in flat
    assert "(default 127.0.0.1:50051)" in flat
    assert "--fsync always (default) one fsync per write request" in flat
    assert "(default always;" in flat and "--fsync-interval seconds (default 0.1)" in flat
    assert "a killed server process (even kill -9) loses nothing acknowledged" in flat


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["no-such-command"],
        ["query"],
        ["query", "--text", "a b c", "--key", "k"],
        ["query", "--key", "k", "--k", "-1"],
        ["query", "--key", "k", "--limit", "x"],
        ["pairs", "--bogus"],
        ["fingerprint"],
        ["fingerprint", "a b c", "--file", "x"],
        ["fingerprint", "a b c", "--bits", "32"],
        ["ingest"],
        ["ingest", "x.jsonl", "--batch-size", "0"],
        ["get"],
        ["serve", "--snapshot-interval", "soon"],
        ["serve", "--snapshot-interval", "inf"],
        ["serve", "--grace-seconds", "nan"],
        ["serve", "--address", "127.0.0.1:abc"],
        ["serve", "--address", "127.0.0.1:70000"],
        ["serve", "--address", "127.0.0.1:\u0665\u0660"],  # Arabic-Indic digits
        ["serve", "--address", "no-port"],
        ["serve", "--max-message-mb", "0"],
        ["serve", "--max-message-mb", "100000"],
        ["serve", "--data-dir", ""],
        ["query", "--key", "k", "--limit", "99999999999"],
        ["query", "--key", "k", "--k", "65"],
        ["pairs", "--k", "99999999999"],
    ],
)
def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    code, out, err = run(capsys, *argv)
    assert code == USAGE
    assert out == ""
    assert "usage: permindex" in err


def test_address_comes_after_the_subcommand(capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["pairs", "--address", "10.0.0.1:1"])
    assert args.address == "10.0.0.1:1"
    assert build_parser().parse_args(["stats"]).address == "127.0.0.1:50051"
    code, _out, _err = run(capsys, "--address", "127.0.0.1:1", "pairs")
    assert code == USAGE


@pytest.mark.parametrize(
    "text",
    [
        "one two three",
        "The quick brown fox jumps over the lazy dog",
        "Ünïcödé 中文 words\u3000here",
    ],
)
@pytest.mark.parametrize("bits", [63, 64])
def test_fingerprint_golden_values(
    capsys: pytest.CaptureFixture[str], text: str, bits: int
) -> None:
    expected = simhash(text, bits=bits)
    assert expected is not None
    code, out, err = run(capsys, "fingerprint", text, "--bits", str(bits))
    assert (code, err) == (OK, "")
    assert out == f"{expected:016x}\n"
    assert HEX16.match(out.strip())


def test_fingerprint_fixed_values(capsys: pytest.CaptureFixture[str]) -> None:
    # Pinned: a change of the algorithm or its output format must show here.
    assert run(capsys, "fingerprint", "hello there world")[1] == "cbe244c94de8bbca\n"
    assert run(capsys, "fingerprint", "a b c d")[1] == "0580022442423acb\n"


def test_fingerprint_is_zero_padded(capsys: pytest.CaptureFixture[str]) -> None:
    text = next(
        t for t in (f"w{i} x y z" for i in range(10_000)) if (simhash(t) or 1 << 63) < 1 << 56
    )
    code, out, _err = run(capsys, "fingerprint", text)
    assert code == OK
    assert out.startswith("00") and len(out) == 17


def test_fingerprint_shingle_size(capsys: pytest.CaptureFixture[str]) -> None:
    expected = simhash("two words", shingle_size=2)
    assert run(capsys, "fingerprint", "two words", "--shingle-size", "2")[1] == f"{expected:016x}\n"


def test_fingerprint_too_short(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "fingerprint", "two words")
    assert code == TOO_SHORT
    assert out == ""
    assert "fewer than 3 words" in err
    assert "Traceback" not in err


def test_fingerprint_of_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    page = tmp_path / "page.html.gz"
    page.write_bytes(gzip.compress(b"<html><head><title>x</title></head><p>Some visible text</p>"))
    code, out, _err = run(capsys, "fingerprint", "--file", str(page))
    assert code == OK
    assert out == f"{simhash('Some visible text'):016x}\n"
    binary = tmp_path / "blob.bin"
    binary.write_bytes(b"\x00\x01\x02")
    code, out, err = run(capsys, "fingerprint", "--file", str(binary))
    assert (code, out) == (INVALID, "")
    assert "not text" in err
    code, out, err = run(capsys, "fingerprint", "--file", str(tmp_path / "missing.txt"))
    assert (code, out) == (INVALID, "")
    assert "missing.txt" in err


def test_fingerprint_from_stdin() -> None:
    text = "Standard input carries this text, ünïcode included."
    done = subprocess.run(
        [sys.executable, "-m", "permindex", "fingerprint", "-"],
        input=text.encode("utf-8"),
        capture_output=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == OK
    assert done.stdout == f"{simhash(text):016x}\n".encode()
    short = subprocess.run(
        [sys.executable, "-m", "permindex", "fingerprint", "-"],
        input=b"short",
        capture_output=True,
        check=False,
        cwd=REPO,
    )
    assert (short.returncode, short.stdout) == (TOO_SHORT, b"")
    assert short.stderr.startswith(b"permindex fingerprint: ")
    latin1 = subprocess.run(
        [sys.executable, "-m", "permindex", "fingerprint", "-"],
        input=b"caf\xe9 au lait",
        capture_output=True,
        check=False,
        cwd=REPO,
    )
    assert (latin1.returncode, latin1.stdout) == (INVALID, b"")
    assert b"not valid UTF-8" in latin1.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["pairs"],
        ["stats"],
        ["stats", "--json"],
        ["snapshot"],
        ["get", "k"],
        ["remove", "k"],
        ["query", "--fingerprint", "0x1"],
        ["query", "--key", "k"],
        ["query", "--text", "some words here"],
    ],
)
def test_unreachable_server_exits_3(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    address = f"127.0.0.1:{closed_port()}"
    code, out, err = run(capsys, *argv, "--address", address)
    assert code == UNAVAILABLE
    assert out == ""
    assert err.startswith(f"permindex {argv[0]}: cannot reach permindex server at {address}: ")
    assert err.count("\n") == 1
    assert "Traceback" not in err


def test_unreachable_server_ingest(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [{"id": "a", "text": "a b c"}])
    address = f"127.0.0.1:{closed_port()}"
    code, _out, err = run(capsys, "ingest", str(path), "--address", address)
    assert code == UNAVAILABLE
    assert f"cannot reach permindex server at {address}" in err


def test_ingest_missing_path(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, out, err = run(capsys, "ingest", str(tmp_path / "nope.jsonl"))
    assert (code, out) == (INVALID, "")
    assert "nope.jsonl: no such file or folder" in err


def _batches(documents: Any, max_docs: int, max_bytes: int) -> Iterator[list[Document]]:
    """The batching of ingest: the Client's rule, with the size of each Document."""
    return batches(documents, max_docs, max_bytes, Document.size_bytes)


def test_batches_bounded_by_count_and_bytes() -> None:
    docs = [Document(f"k{i}", text="x" * 100) for i in range(10)]  # 118 bytes each
    assert [len(b) for b in _batches(docs, 4, 10_000)] == [4, 4, 2]
    assert [len(b) for b in _batches(docs, 100, 300)] == [2, 2, 2, 2, 2]
    big = [Document("big", text="x" * 1000), *docs[:2]]
    assert [len(b) for b in _batches(big, 100, 300)] == [1, 2]  # a large one travels alone
    assert list(_batches([], 4, 100)) == []


def test_batches_flush_what_was_read_before_an_error() -> None:
    def documents() -> Iterator[Document]:
        yield from (Document(f"k{i}", fingerprint=i) for i in range(5))
        raise ValueError("line 6 is bad")

    batches = _batches(documents(), 2, 10_000)
    assert [len(next(batches)) for _ in range(3)] == [2, 2, 1]
    with pytest.raises(ValueError, match="line 6 is bad"):
        next(batches)


# --- against a real server -----------------------------------------------------------------

TEXTS = {
    "alpha": "the quick brown fox jumps over the lazy dog near the river bank today",
    "beta": "an entirely different sentence about databases and indexes of fingerprints",
    "gamma": "short",
}


def test_ingest_jsonl_texts_then_query(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    addr = ("--address", server.address)
    path = write_jsonl(tmp_path / "t.jsonl", [{"id": k, "text": t} for k, t in TEXTS.items()])
    code, out, err = run(capsys, "ingest", str(path), "--no-progress", *addr)
    assert (code, out) == (OK, "")
    assert re.fullmatch(
        r"permindex ingest: 3 documents in \d+\.\d s: 2 added, 0 replaced, 1 too short, "
        r"0 skipped\n",
        err,
    ), err
    alpha = simhash(TEXTS["alpha"])
    assert alpha is not None

    code, out, err = run(capsys, "query", "--text", TEXTS["alpha"], *addr)
    assert (code, out, err) == (OK, f"alpha\t{alpha:016x}\t0\n", "")
    for form in (f"{alpha:016x}", f"0x{alpha:x}", f"0X{alpha:X}"):
        assert run(capsys, "query", "--fingerprint", form, *addr)[1] == f"alpha\t{alpha:016x}\t0\n"
    near = flip(alpha, 0, 63)
    code, out, _err = run(capsys, "query", "--fingerprint", f"{near:016x}", "--json", *addr)
    assert code == OK
    assert json.loads(out) == [{"key": "alpha", "fingerprint": f"{alpha:016x}", "distance": 2}]
    assert '"fingerprint": "' in out  # a string, never a JSON number
    assert run(capsys, "query", "--fingerprint", f"{near:016x}", "--k", "1", *addr)[1] == ""
    code, out, _err = run(
        capsys, "query", "--fingerprint", f"{near:016x}", "--k", "1", "--json", *addr
    )
    assert (code, out) == (OK, "[]\n")

    # re-ingesting replaces
    code, _out, err = run(capsys, "ingest", str(path), "--no-progress", *addr)
    assert "0 added, 2 replaced, 1 too short" in err


def test_query_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    addr = ("--address", server.address)
    code, out, err = run(capsys, "query", "--text", "too short", *addr)
    assert (code, out) == (TOO_SHORT, "")
    assert "fewer than 3 words" in err
    code, out, err = run(capsys, "query", "--key", "unknown", *addr)
    assert (code, out) == (NOT_FOUND, "")
    assert "key 'unknown' is not stored" in err
    code, out, err = run(capsys, "query", "--fingerprint", "0x1", "--k", "9", *addr)
    assert (code, out) == (INVALID, "")
    assert "INVALID_ARGUMENT" in err and err.count("\n") == 1
    for bad in ("0x", "xyz", "-1", "18446744073709551616", "0x1ffffffffffffffff"):
        code, out, err = run(capsys, "query", "--fingerprint", bad, *addr)
        assert (code, out) == (INVALID, ""), bad
        assert repr(bad) in err or bad in err


def test_query_by_key_leaves_the_key_out(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    base = 0x0123456789ABCDEF
    rows: list[dict[str, object]] = [
        {"id": "self", "fingerprint": base},
        {"id": "twin", "fingerprint": base},
        {"id": "one", "fingerprint": flip(base, 5)},
        {"id": "three", "fingerprint": flip(base, 1, 20, 40)},
        {"id": "far", "fingerprint": flip(base, 1, 2, 3, 4)},
    ]
    path = write_jsonl(tmp_path / "fp.jsonl", rows)
    addr = ("--address", server.address)
    assert run(capsys, "ingest", str(path), *addr)[0] == OK
    code, out, _err = run(capsys, "query", "--key", "self", *addr)
    assert code == OK
    assert out == (
        f"twin\t{base:016x}\t0\n"
        f"one\t{flip(base, 5):016x}\t1\n"
        f"three\t{flip(base, 1, 20, 40):016x}\t3\n"
    )
    # the limit counts the other keys only
    assert run(capsys, "query", "--key", "self", "--limit", "1", *addr)[1] == (
        f"twin\t{base:016x}\t0\n"
    )
    code, out, _err = run(capsys, "query", "--key", "self", "--limit", "2", "--json", *addr)
    assert [m["key"] for m in json.loads(out)] == ["twin", "one"]
    assert run(capsys, "query", "--key", "one", "--k", "0", *addr)[1] == ""


def test_ingest_fingerprints_decimal_and_hex(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    rows: list[dict[str, object]] = [
        {"id": "dec", "fingerprint": 18446744073709551615},
        {"id": "zero", "fingerprint": 0},
        {"id": "hex16", "fingerprint": "00000000deadbeef"},
        {"id": "hex0x", "fingerprint": "0xDEADBEEF00"},
        {"id": "42", "fingerprint": 7},
    ]
    path = write_jsonl(tmp_path / "fp.jsonl", rows)
    addr = ("--address", server.address)
    code, _out, err = run(capsys, "ingest", str(path), *addr)
    assert code == OK
    assert "5 documents" in err and "5 added" in err
    code, out, err = run(capsys, "get", "dec", "zero", "hex16", "hex0x", "42", *addr)
    assert (code, err) == (OK, "")
    assert out == (
        "dec\tffffffffffffffff\n"
        "zero\t0000000000000000\n"
        "hex16\t00000000deadbeef\n"
        "hex0x\t000000deadbeef00\n"
        "42\t0000000000000007\n"
    )


@pytest.mark.parametrize(
    ("bad_line", "words"),
    [
        ("{oops", "bad JSON"),
        ('{"text": "no id at all"}', 'no "id"'),
        ('{"id": "x"}', 'neither "text" nor "fingerprint"'),
        ('{"id": "x", "text": "a b c", "fingerprint": 1}', 'both "text" and "fingerprint"'),
        ('{"id": "x", "fingerprint": -3}', "fingerprint -3 is outside"),
        ('{"id": "x", "fingerprint": 18446744073709551616}', "18446744073709551616"),
        ('{"id": "x", "fingerprint": "12345"}', "'12345'"),
    ],
)
def test_ingest_malformed_line_names_the_line(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    server: RunningServer,
    bad_line: str,
    words: str,
) -> None:
    good = [json.dumps({"id": f"g{i}", "fingerprint": i}) for i in range(3)]
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join([*good, bad_line, good[0]]) + "\n", encoding="utf-8")
    addr = ("--address", server.address)
    code, out, err = run(capsys, "ingest", str(path), "--batch-size", "2", *addr)
    assert (code, out) == (INVALID, "")
    assert err.startswith(f"permindex ingest: {path}, line 4: ")
    assert words in err
    assert err.count("\n") == 1
    # the batches before the bad line were stored
    assert "3 documents before it were stored" in err
    assert run(capsys, "get", "g0", "g1", "g2", *addr)[0] == OK


def test_ingest_from_stdin(
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    server: RunningServer,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    data = "".join(
        json.dumps(row) + "\n"
        for row in [{"id": "s1", "text": TEXTS["alpha"]}, {"id": "s2", "fingerprint": "0x10"}]
    ).encode("utf-8")
    for payload in (data, gzip.compress(data)):
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BufferedReader(io.BytesIO(payload))))
        code, _out, err = run(capsys, "ingest", "-", "--address", server.address)
        assert code == OK, err
        assert "2 documents" in err
    code, out, _err = run(capsys, "get", "s1", "s2", "--address", server.address)
    assert out == f"s1\t{simhash(TEXTS['alpha']):016x}\ns2\t0000000000000010\n"


def test_ingest_from_stdin_subprocess(tmp_path: Path, server: RunningServer) -> None:
    data = json.dumps({"id": "piped", "fingerprint": 99}) + "\n"
    done = subprocess.run(
        [sys.executable, "-m", "permindex", "ingest", "-", "--address", server.address],
        input=data.encode(),
        capture_output=True,
        check=False,
        cwd=REPO,
    )
    assert done.returncode == OK, done.stderr
    assert done.stdout == b""
    assert b"1 added" in done.stderr


def test_ingest_folder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    root = tmp_path / "docs"
    (root / "nested" / "deeper").mkdir(parents=True)
    words = "near duplicate detection of web pages with simhash fingerprints"
    (root / "top.txt").write_text(words, encoding="utf-8")
    (root / "nested" / "page.html").write_text(
        f"<html><head><title>Hidden title</title><script>var a = 1;</script></head>"
        f"<body><p>{words}</p><style>p {{}}</style></body></html>",
        encoding="utf-8",
    )
    (root / "nested" / "deeper" / "log.txt.gz").write_bytes(
        gzip.compress(b"a compressed changelog entry with several words")
    )
    (root / "nested" / "deeper" / "short.txt").write_text("tiny", encoding="utf-8")
    (root / "binary.dat").write_bytes(b"\x00\x01binary\x00")
    (root / "latin1.txt").write_bytes(b"caf\xe9 cr\xe8me br\xfbl\xe9e")
    (root / "alias.txt").symlink_to(root / "top.txt")
    (root / "alias-dir").symlink_to(root / "nested")
    addr = ("--address", server.address)
    code, out, err = run(capsys, "ingest", str(root), *addr)
    assert (code, out) == (OK, "")
    assert re.fullmatch(
        r"permindex ingest: 4 documents in \d+\.\d s: 3 added, 0 replaced, 1 too short, "
        r"4 skipped \(2 not text, 2 symlink\)\n",
        err,
    ), err
    fp = simhash(words)
    code, out, _err = run(capsys, "query", "--text", words, *addr)
    assert out == f"nested/page.html\t{fp:016x}\t0\ntop.txt\t{fp:016x}\t0\n"
    code, out, _err = run(capsys, "get", "nested/deeper/log.txt.gz", *addr)
    expected = simhash("a compressed changelog entry with several words")
    assert (code, out) == (OK, f"nested/deeper/log.txt.gz\t{expected:016x}\n")
    code, _out, err = run(
        capsys, "get", "alias.txt", "binary.dat", "nested/deeper/short.txt", *addr
    )
    assert code == NOT_FOUND
    assert "alias.txt, binary.dat, nested/deeper/short.txt" in err
    assert run(capsys, "pairs", *addr)[1] == "nested/page.html\ttop.txt\t0\n"


def test_ingest_skips_a_document_too_large_for_a_message(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    folder = tmp_path / "docs"
    folder.mkdir()
    (folder / "small.txt").write_text("three words here and more")
    (folder / "huge.txt").write_text("word " * 5000)  # 25,000 bytes
    (folder / "tail.txt").write_text("more words after the huge one")
    addr = ("--address", server.address)
    code, _out, err = run(capsys, "ingest", str(folder), "--max-document-bytes", "10000", *addr)
    assert code == OK
    assert "skipping 'huge.txt': 25024 bytes is more than --max-document-bytes 10000" in err
    assert "2 added" in err and "1 skipped (1 too large)" in err
    code, out, _err = run(capsys, "get", "small.txt", "tail.txt", *addr)
    assert code == OK and len(out.splitlines()) == 2
    assert run(capsys, "get", "huge.txt", *addr)[0] == EXIT_CODES["not_found"]


def test_ingest_empty_inputs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    folder = tmp_path / "empty-folder"
    folder.mkdir()
    for path in (empty, folder):
        code, out, err = run(capsys, "ingest", str(path), "--address", server.address)
        assert (code, out) == (OK, "")
        assert "0 documents" in err and "0 added" in err


def test_ingest_progress_bar_goes_to_stderr(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    rows: list[dict[str, object]] = [{"id": f"k{i}", "fingerprint": i} for i in range(50)]
    path = write_jsonl(tmp_path / "p.jsonl", rows)
    summary = ingest(read_documents(path), server.address, batch_size=7, progress=True)
    assert (summary.documents, summary.added) == (50, 50)
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "ingest" in captured.err
    folder = tmp_path / "f"
    folder.mkdir()
    (folder / "a.txt").write_text("x y z", encoding="utf-8")
    summary = ingest(read_documents(folder), server.address, progress=True)
    assert summary.added == 1
    assert "docs" in capsys.readouterr().err


def test_ingest_batch_refused_by_the_server(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, start_server: StartServer
) -> None:
    running = start_server(max_batch=5)
    rows: list[dict[str, object]] = [{"id": f"k{i}", "fingerprint": i} for i in range(20)]
    path = write_jsonl(tmp_path / "many.jsonl", rows)
    addr = ("--address", running.address)
    code, out, err = run(capsys, "ingest", str(path), "--batch-size", "10", *addr)
    assert (code, out) == (INVALID, "")
    assert "RESOURCE_EXHAUSTED" in err
    assert err.count("\n") == 1
    code, _out, err = run(capsys, "ingest", str(path), "--batch-size", "5", *addr)
    assert code == OK and "20 added" in err


def test_pairs_format_and_order(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    base = 0xF0F0F0F0F0F0F0F0
    keys = {
        "b": base,
        "a": flip(base, 3),
        "Z": flip(base, 3, 9),
        "é": flip(base, 3, 9, 30),
        "中": base,
        "lonely": ~base & (2**64 - 1),
    }
    rows: list[dict[str, object]] = [{"id": k, "fingerprint": f} for k, f in keys.items()]
    path = write_jsonl(tmp_path / "pairs.jsonl", rows)
    addr = ("--address", server.address)
    assert run(capsys, "ingest", str(path), *addr)[0] == OK
    code, out, err = run(capsys, "pairs", *addr)
    assert (code, err) == (OK, "")
    lines = out.splitlines()
    rows_out = [line.split("\t") for line in lines]
    assert all(a < b for a, b, _d in rows_out)
    assert rows_out == sorted(rows_out, key=lambda r: (r[0], r[1]))
    near = [k for k in keys if k != "lonely"]
    expected = sorted(
        (min(x, y), max(x, y), bin(keys[x] ^ keys[y]).count("1"))
        for i, x in enumerate(near)
        for y in near[i + 1 :]
        if bin(keys[x] ^ keys[y]).count("1") <= 3
    )
    assert out == "".join(f"{a}\t{b}\t{d}\n" for a, b, d in expected)
    assert lines[0] == "Z\ta\t1"  # code point order: "Z" < "a" < "b" < "é" < "中"
    assert "b\t中\t0" in lines
    code, out, _err = run(capsys, "pairs", "--k", "0", *addr)
    assert out == "b\t中\t0\n"


def test_keys_with_tabs_and_newlines_are_escaped_in_tsv_output(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    base = 0x0123456789ABCDEF
    keys = {"tab\there": base, "new\nline": flip(base, 1), "back\\slash": flip(base, 2)}
    rows: list[dict[str, object]] = [{"id": k, "fingerprint": f} for k, f in keys.items()]
    path = write_jsonl(tmp_path / "odd.jsonl", rows)
    addr = ("--address", server.address)
    assert run(capsys, "ingest", str(path), *addr)[0] == OK
    code, out, _err = run(capsys, "pairs", *addr)
    assert code == OK
    assert out == (
        "back\\\\slash\tnew\\nline\t2\nback\\\\slash\ttab\\there\t1\nnew\\nline\ttab\\there\t1\n"
    )
    code, out, _err = run(capsys, "query", "--fingerprint", hex(base), "--k", "1", *addr)
    assert out == (
        f"tab\\there\t{base:016x}\t0\n"
        f"back\\\\slash\t{flip(base, 2):016x}\t1\n"
        f"new\\nline\t{flip(base, 1):016x}\t1\n"
    )
    code, out, _err = run(capsys, "get", "new\nline", *addr)
    assert out == f"new\\nline\t{flip(base, 1):016x}\n"


def test_pairs_into_a_pipe_closed_early(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    rows: list[dict[str, object]] = [{"id": f"doc{i:04d}", "fingerprint": 7} for i in range(600)]
    path = write_jsonl(tmp_path / "same.jsonl", rows)
    assert run(capsys, "ingest", str(path), "--address", server.address)[0] == OK
    proc = subprocess.Popen(
        [sys.executable, "-m", "permindex", "pairs", "--address", server.address],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(18) == b"doc0000\tdoc0001\t0\n"  # 179,699 more lines follow
    proc.stdout.close()
    assert proc.wait(timeout=60) == EXIT_CODES["error"]
    assert proc.stderr.read() == b""  # quietly: no traceback, no message
    proc.stderr.close()


def test_get_remove_stats_snapshot(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    rows: list[dict[str, object]] = [{"id": f"k{i}", "fingerprint": i * 1000003} for i in range(4)]
    path = write_jsonl(tmp_path / "r.jsonl", rows)
    addr = ("--address", server.address)
    assert run(capsys, "ingest", str(path), *addr)[0] == OK

    code, out, err = run(capsys, "stats", *addr)
    assert (code, err) == (OK, "")
    fields = dict(line.split("\t", 1) for line in out.splitlines())
    assert fields["count"] == "4"
    assert fields["design"] == "4 blocks, 1 leading, 4 tables, k = 3"
    assert fields["last_snapshot"].startswith("never")
    code, out, _err = run(capsys, "stats", "--json", *addr)
    stats = json.loads(out)
    assert stats["count"] == 4 and stats["design"]["k"] == 3
    assert stats["last_snapshot_unix_seconds"] is None

    code, out, err = run(capsys, "snapshot", *addr)
    assert (code, err) == (OK, "")
    snapshot_path, count, size, seconds = out.rstrip("\n").split("\t")
    assert Path(snapshot_path).is_file() and Path(snapshot_path).parent == server.data_dir
    assert count == "4 keys" and size.endswith(" bytes") and seconds.endswith(" s")
    stats = json.loads(run(capsys, "stats", "--json", *addr)[1])
    assert stats["last_snapshot_count"] == 4
    assert isinstance(stats["last_snapshot_unix_seconds"], float)

    code, out, err = run(capsys, "remove", "k1", "k2", *addr)
    assert (code, out) == (OK, "")
    assert "removed 2 of 2 keys" in err
    code, out, err = run(capsys, "remove", "k1", "k3", *addr)
    assert (code, out) == (NOT_FOUND, "")
    assert "removed 1 of 2 keys" in err and "not stored: k1" in err
    code, out, err = run(capsys, "get", "k0", "k3", *addr)
    assert (code, out) == (NOT_FOUND, "k0\t0000000000000000\n")
    assert "not stored: k3" in err
    assert json.loads(run(capsys, "stats", "--json", *addr)[1])["count"] == 1


# --- the walk-through, on the shared corpora, server in a subprocess ------------------------


def _need(path: Path) -> Path:
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path} (expected <repo>/../shared/corpora)")
    return path


class ServeProcess:
    """``python -m permindex serve`` on 127.0.0.1:0 in a subprocess; ``address`` parsed from its
    "serving on HOST:PORT" line on stderr."""

    def __init__(self, data_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "permindex",
                "serve",
                "--address",
                "127.0.0.1:0",
                "--data-dir",
                str(data_dir),
            ],
            cwd=REPO,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        self.lines: list[str] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.lines.append(line)
            found = re.search(r"serving on (\S+:\d+)", line)
            if found:
                self.address = found.group(1)
                return
        self.proc.kill()
        raise AssertionError(f"server did not start: {''.join(self.lines)}")

    def rss_bytes(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        found = re.search(r"VmRSS:\s+(\d+) kB", status)
        return int(found.group(1)) * 1024 if found else 0

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=60)
        assert self.proc.stderr is not None
        self.lines.extend(self.proc.stderr.readlines())
        self.proc.stderr.close()
        return code


@pytest.fixture
def serve_process(tmp_path: Path) -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for served in started:
        if served.proc.poll() is None:
            served.proc.kill()
            served.proc.wait()
        if served.proc.stderr is not None:
            served.proc.stderr.close()


def _cli(*argv: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "permindex", *argv],
        capture_output=True,
        check=False,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.slow
def test_walk_through_libstdcxx_pairs_survive_a_restart(
    tmp_path: Path, serve_process: list[ServeProcess]
) -> None:
    corpus, expected = _need(LIBSTDCXX), _need(LIBSTDCXX_PAIRS).read_bytes()
    assert expected.count(b"\n") == 82
    data_dir = tmp_path / "data"
    first = ServeProcess(data_dir)
    serve_process.append(first)

    started = time.monotonic()
    done = _cli("ingest", str(corpus), "--address", first.address)
    seconds = time.monotonic() - started
    assert done.returncode == OK, done.stderr
    assert done.stdout == b""
    assert b"3906 documents" in done.stderr and b"3906 added" in done.stderr
    print(f"ingest of {corpus.name}: {seconds:.2f} s wall, server RSS {first.rss_bytes()} B")

    pairs = _cli("pairs", "--address", first.address)
    assert (pairs.returncode, pairs.stderr) == (OK, b"")
    assert pairs.stdout == expected

    assert first.terminate() == OK
    second = ServeProcess(data_dir)
    serve_process.append(second)
    assert "3906 keys" in second.lines[-1]
    again = _cli("pairs", "--address", second.address)
    assert (again.returncode, again.stdout) == (OK, expected)
    assert second.terminate() == OK


@pytest.mark.slow
def test_postgresql_corpus_has_no_pairs(
    capsys: pytest.CaptureFixture[str], server: RunningServer
) -> None:
    corpus = _need(POSTGRESQL)
    addr = ("--address", server.address)
    code, _out, err = run(capsys, "ingest", str(corpus), *addr)
    assert code == OK, err
    assert "1169 documents" in err
    assert run(capsys, "pairs", *addr) == (OK, "", "")
    code, out, _err = run(capsys, "pairs", "--k", "3", *addr)
    assert (code, out) == (OK, "")


def test_main_module_runs(tmp_path: Path) -> None:
    done = _cli("--version")
    assert done.returncode == OK
    assert done.stdout.startswith(b"permindex ")
    assert os.path.exists(REPO / "permindex" / "__main__.py")


class _FailedCall(grpc.RpcError, grpc.Call):
    """A finished call with a status, as grpc raises it."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def initial_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return ()

    def trailing_metadata(self) -> Any:  # grpc.RpcError and grpc.Call type it differently
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Any) -> bool:
        return False


@pytest.mark.parametrize(
    ("code", "details", "expected", "exit_name"),
    [
        (
            grpc.StatusCode.UNAVAILABLE,
            "failed to connect to all addresses; last error: Connection refused",
            "cannot reach permindex server at 127.0.0.1:9: failed to connect",
            "unavailable",
        ),
        (
            grpc.StatusCode.UNAVAILABLE,
            "the data directory cannot be written: Read-only file system",
            "permindex server at 127.0.0.1:9 is unavailable: the data directory cannot be written",
            "unavailable",
        ),
        (
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            "no space left on the device",
            "no space left on the device (RESOURCE_EXHAUSTED)",
            "invalid",
        ),
        (
            grpc.StatusCode.DEADLINE_EXCEEDED,
            "the stream was idle for 300 s (no message from the client); the server closed it "
            "(serve --stream-idle-seconds)",
            "permindex server at 127.0.0.1:9 closed the stream: the stream was idle",
            "unavailable",
        ),
    ],
)
def test_rpc_errors_say_whether_the_server_answered(
    code: grpc.StatusCode, details: str, expected: str, exit_name: str
) -> None:
    from permindex.cli.output import command_error
    from permindex.client.channel import Channel, Security

    channel = Channel("127.0.0.1:9", Security())
    try:
        failure = command_error(channel.error(_FailedCall(code, details)), "127.0.0.1:9")
    finally:
        channel.close()
    assert str(failure).startswith(expected)
    assert failure.exit_code == EXIT_CODES[exit_name]
