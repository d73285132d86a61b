"""The optional fast parsers of the input readers -- orjson for JSONL lines, zlib-ng for gzip --
give the same documents and the same errors as the standard library's json and gzip, which
read when they are not installed (run here in a subprocess where importing them fails)."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from permindex.text import gzip_stream
from permindex.text.documents import read_documents

LINES = [
    b'{"id": "plain", "text": "a b c d"}',
    '{"id": "é/中", "text": "café 中文 x y"}'.encode(),
    b'{"id": "nan", "text": "a b c", "score": NaN}',  # orjson refuses NaN: json reads it
    b'{"id": "inf", "text": "a b c", "score": 1e400}',
    b'{"id": "lone", "text": "a \\ud800 b"}',  # a lone surrogate in the text
    b'{"id": "k\\udc00", "text": "a b c"}',  # and in the key
    b'{"id": 123456789012345678901234567890, "text": "a b c"}',
    b'{"id": "twice", "id": "second", "text": "a b c"}',
    b'{"id": "latin", "text": "caf\xe9 x y"}',  # not UTF-8
    b'\xef\xbb\xbf{"id": "bom", "text": "a b c"}',
    b'{"id": "fp", "fingerprint": "00000000000000ff"}',
    b'{"id": "both", "text": "a b c", "fingerprint": 5}',
    b'["not", "an", "object"]',
    b"[" * 5000 + b"]" * 5000,
    b'{"id": "deep", "text": "a b c", "x": ' + b"[" * 3000 + b"]" * 3000 + b"}",
    b"   ",
    b'{"id": "' + b"k" * 3000 + b'", "text": "a b c"}',
    b'{"id": "trailing", "text": "a b c"} x',
]

SCRIPT = """
import json, sys
from pathlib import Path
from permindex.text import gzip_stream
from permindex.text.documents import read_documents

def outcome(path):
    try:
        return ["ok", [[d.key, d.text, d.fingerprint] for d in read_documents(Path(path))]]
    except Exception as error:
        return ["error", type(error).__name__, str(error)]

print(json.dumps([gzip_stream.implementation()] + [outcome(p) for p in sys.argv[1:]]))
"""


def outcome(path: Path) -> list[Any]:
    try:
        return ["ok", [[d.key, d.text, d.fingerprint] for d in read_documents(path)]]
    except Exception as error:
        return ["error", type(error).__name__, str(error)]


def without_fast_parsers(tmp_path: Path, paths: list[Path]) -> list[Any]:
    """The outcomes of reading ``paths`` in a Python where orjson and zlib_ng cannot be
    imported (a sitecustomize that blocks them), and the gzip implementation it used."""
    blocker = tmp_path / "blocker"
    blocker.mkdir()
    (blocker / "sitecustomize.py").write_text(
        "import sys\nsys.modules['orjson'] = None\nsys.modules['zlib_ng'] = None\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, *map(str, paths)],
        env={"PYTHONPATH": str(blocker), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result: list[Any] = json.loads(done.stdout)
    return result


def test_the_fast_parsers_are_installed() -> None:
    pytest.importorskip("orjson")
    pytest.importorskip("zlib_ng")
    assert gzip_stream.implementation() == "zlib_ng"


def test_each_line_reads_the_same_without_orjson(tmp_path: Path) -> None:
    paths = []
    for i, line in enumerate(LINES):
        path = tmp_path / f"line-{i}.jsonl"
        path.write_bytes(b'{"id": "first", "text": "x y z"}\n' + line + b"\n")
        paths.append(path)
    here = [outcome(path) for path in paths]
    implementation, *there = without_fast_parsers(tmp_path, paths)
    assert implementation == "gzip"
    for line, mine, theirs in zip(LINES, here, there, strict=True):
        assert mine == theirs, line[:60]
    assert {o[0] for o in here} == {"ok", "error"}  # both kinds of line are covered


def test_gzip_reads_the_same_without_zlib_ng(tmp_path: Path) -> None:
    data = "".join(
        json.dumps({"id": f"doc-{i}", "text": f"word{i} é x y z {i}"}) + "\n" for i in range(20000)
    ).encode()
    whole = tmp_path / "whole.jsonl.gz"
    whole.write_bytes(gzip.compress(data))
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    corrupt = tmp_path / "corrupt.jsonl.gz"
    raw = bytearray(whole.read_bytes())
    raw[len(raw) // 3 : len(raw) // 3 + 64] = bytes(64)
    corrupt.write_bytes(bytes(raw))
    paths = [whole, cut, corrupt]
    here = [outcome(path) for path in paths]
    _, *there = without_fast_parsers(tmp_path, paths)
    assert here[0] == there[0]
    assert len(here[0][1]) == 20000
    assert here[1] == there[1]  # truncated: the same error where the stream ends
    assert here[1][0] == "error" and "cannot read" in here[1][2]
    # Corrupt in the middle: an error either way, though zlib-ng may notice it later than
    # zlib (at the checksum, after a malformed line of the garbage it inflated).
    assert here[2][0] == there[2][0] == "error"
    assert here[2][1] in {"InvalidArgumentError", "MalformedInputError"}, here[2]
    assert there[2][1] in {"InvalidArgumentError", "MalformedInputError"}, there[2]
