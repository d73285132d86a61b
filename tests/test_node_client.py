"""The Node.js client example (clients/node/example.js: @grpc/grpc-js and @grpc/proto-loader on
protos/permindex/v1/index.proto, with the loader options the docs give) against a real
``permindex serve`` process: health, add by text, by fingerprint and by hex, query,
check-and-add, and the refusals of malformed hex fingerprints, checked line by line and against
what the server then holds.

``npm ci`` runs once in clients/node (its node_modules are kept while they match
package-lock.json). Where node or npm is missing the test is skipped with the reason; where
``npm ci`` fails (no network to the npm registry) it is skipped too, except under ``CI=true``:
CI reaches the registry, so there a failed install fails the test instead of hiding it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import make_stub
from serverproc import REPO, ServeProcess

import permindex
from permindex.v1 import index_pb2 as pb

NODE_CLIENT = REPO / "clients" / "node"


def _installed(folder: Path) -> bool:
    """Whether ``folder/node_modules`` holds every package of ``folder/package-lock.json`` at its
    locked version (npm's own record of what it installed, node_modules/.package-lock.json;
    optional packages, which npm leaves out on other platforms, are not required)."""
    try:
        locked = json.loads((folder / "package-lock.json").read_text(encoding="utf-8"))
        present = json.loads(
            (folder / "node_modules" / ".package-lock.json").read_text(encoding="utf-8")
        )
    except (OSError, ValueError):
        return False
    have = {path: entry.get("version") for path, entry in present.get("packages", {}).items()}
    return all(
        have.get(path) == entry.get("version")
        for path, entry in locked.get("packages", {}).items()
        if path and not entry.get("optional")
    )


def tool(name: str) -> str:
    """The path of ``name`` on PATH, or skip the test saying it is missing."""
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (the Node.js client tests need node and npm)")
    return found


def node_modules(folder: Path = NODE_CLIENT) -> Path:
    """``folder``'s node_modules after ``npm ci`` (run only when they do not match the lock).

    Skips when node or npm is missing, or when ``npm ci`` fails outside CI; fails under
    ``CI=true``."""
    tool("node")
    npm = tool("npm")
    if not _installed(folder):
        done = subprocess.run(
            [npm, "ci", "--no-audit", "--no-fund"],
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-5:])
            message = f"npm ci in {folder} failed (exit {done.returncode}): {tail}"
            if os.environ.get("CI") == "true":
                pytest.fail(message + " (CI reaches the npm registry: this is an error here)")
            pytest.skip(message + " (offline? CI runs it)")
    return folder / "node_modules"


TEXT = "the quick brown fox jumps over the lazy dog near the river bank today"


@pytest.fixture(scope="module")
def address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    node_modules()  # skip before starting a server when there is no node
    serve = ServeProcess(tmp_path_factory.mktemp("node") / "data")
    found = serve.address()
    assert found is not None, serve.text
    yield found
    assert serve.stop() == 0, serve.text


def _run_example(address: str, collection: str = "") -> tuple[int, list[dict[str, Any]], str]:
    done = subprocess.run(
        [tool("node"), "example.js", address, *([collection] if collection else [])],
        cwd=NODE_CLIENT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


def test_node_example_against_a_real_server(address: str) -> None:
    code, lines, stderr = _run_example(address)
    assert code == 0, stderr
    steps: dict[str, list[dict[str, Any]]] = {}
    for line in lines:
        steps.setdefault(line.pop("step"), []).append(line)

    assert steps["health"] == [
        {"service": "", "status": "SERVING"},
        {"service": "permindex.v1.PermIndex", "status": "SERVING"},
    ]
    text_fp = f"{permindex.simhash(TEXT):016x}"  # the server's fingerprint of the text
    added = "DOCUMENT_STATUS_ADDED"
    fp, fp_1 = "7bdb22cf023304c1", "7bdb22cf023304c0"
    assert steps["add"] == [
        {"key": "node/text", "status": added, "fingerprint": text_fp},
        {"key": "node/fixed64", "status": added, "fingerprint": fp},
        {"key": "node/hex", "status": added, "fingerprint": fp_1},
    ]
    assert steps["query"] == [
        {"fingerprint": fp, "matches": [["node/fixed64", fp, 0], ["node/hex", fp_1, 1]]}
    ]
    assert steps["check_and_add"] == [
        {"key": "node/near", "status": "DOCUMENT_STATUS_NEAR_DUPLICATE",
         "matches": [["node/fixed64", 1], ["node/hex", 2]]},
        {"key": "node/new", "status": added, "matches": []},
    ]  # fmt: skip
    # What proto-loader's conversion sends for a fixed64 it is given (the docs' warning):
    # no error, another number, so the server cannot refuse it.
    assert {(s["value"], s["sent"]) for s in steps["fixed64_sent"]} == {
        ("abc", "0"),
        ("0x10", "0"),
        ("-5", "0"),
        ("18446744073709552000", "18446744073709551615"),  # 2 ** 64, a JavaScript number
        ("18446744073709551616", "0"),
        ("7bdb22cf023304c1", "700023304"),
    }  # fmt: skip
    # The same values in hex reach the server as they are and are refused, naming field and value.
    refused = steps["refused"]
    assert len(refused) == 11 and {r["code"] for r in refused} == {"INVALID_ARGUMENT"}
    for r in refused[:-1]:
        field = "documents[0].fingerprint_hex" if r["method"] == "Add" else "fingerprints_hex[0]"
        assert r["details"].startswith(f"{field}"), r
        assert repr(r["value"]) in r["details"], r
    assert "documents[0] sets both fingerprint and fingerprint_hex" in refused[-1]["details"]
    assert {r["value"] for r in refused} == {
        "abc", "0x10", "-5", "18446744073709552000", "18446744073709551616", "both"
    }  # fmt: skip

    # What the server holds is what Python sees: the exact 64 bits, nothing of the refusals.
    channel, stub = make_stub(address)
    try:
        keys = ["node/text", "node/fixed64", "node/hex", "node/near", "node/new", "node/bad"]
        got = stub.Get(pb.GetRequest(keys=keys), timeout=30)
    finally:
        channel.close()
    assert [(r.found, r.fingerprint) for r in got.results] == [
        (True, int(text_fp, 16)),
        (True, 0x7BDB22CF023304C1),
        (True, 0x7BDB22CF023304C0),
        (False, 0),
        (True, 0x0123456789ABCDEF),
        (False, 0),
    ]
