"""Every ```python and ```sh block of README.md and docs/**/*.md runs as written (the
conventions and markers: tests/docblocks.py), one test per page, in a network namespace of the
page's own; a block marked ``<!-- not run: REASON -->`` is reported skipped with its reason.
Also: the docs site's hook reads every line of the .proto files and renders each subcommand of
the parser.

Nothing here reads the pages' prose or compares a figure written in them: a block passes when
it runs (exit 0), as a reader who pastes it would see.
"""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from docblocks import (
    ALIASES,
    REPO,
    Block,
    blocks,
    namespace_command,
    pages,
    spec_of,
    stray_markers,
)

PAGES = {str(page.relative_to(REPO)): blocks(page) for page in pages()}
RUN = [name for name, found in PAGES.items() if any(block.runs for block in found)]
NOT_RUN = [block for found in PAGES.values() for block in found if block.marker == "not run"]
#: Seconds one page may take in all.
PAGE_SECONDS = 600
#: Pages run at once: each in a namespace of its own, so they cannot meet; two keep both cores
#: of a 2-core machine busy while one page waits for a server or a process to start.
PARALLEL_PAGES = 2


@pytest.fixture(scope="module")
def namespace() -> list[str]:
    prefix = namespace_command()
    if prefix is None:
        pytest.skip(
            "no network namespace can be made here (unshare --net needs root or user "
            "namespaces): the blocks that use the default address would meet other servers"
        )
    return prefix


@dataclass(frozen=True)
class PageRun:
    """The runner's process and its result file, for one page."""

    returncode: int
    stderr: str
    outcome: dict[str, Any] | None


def _run_page(page: str, namespace: list[str], folder: Path) -> PageRun:
    cwd = folder / "work"
    cwd.mkdir(parents=True)
    spec = folder / "spec.json"
    result = folder / "result.json"
    spec.write_text(json.dumps(spec_of(PAGES[page], cwd, namespace=True)), encoding="utf-8")
    runner = Path(__file__).resolve().parent / "docblocks.py"
    done = subprocess.run(
        [*namespace, sys.executable, str(runner), str(spec), str(result)],
        capture_output=True,
        text=True,
        timeout=PAGE_SECONDS,
        check=False,
    )
    outcome = json.loads(result.read_text(encoding="utf-8")) if result.exists() else None
    return PageRun(done.returncode, done.stderr, outcome)


@pytest.fixture(scope="module")
def page_runs(
    request: pytest.FixtureRequest,
    namespace: list[str],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[dict[str, Future[PageRun]]]:
    """Every selected page's run, started at once, PARALLEL_PAGES at a time (in page order)."""
    selected = [
        str(item.callspec.params["page"])
        for item in request.session.items
        if isinstance(item, pytest.Function) and item.originalname == "test_page_blocks_run"
    ]
    root = tmp_path_factory.mktemp("pages")
    with ThreadPoolExecutor(max_workers=PARALLEL_PAGES) as pool:
        yield {
            page: pool.submit(_run_page, page, namespace, root / f"page-{number}")
            for number, page in enumerate(selected)
        }


@pytest.mark.parametrize("page", RUN)
def test_page_blocks_run(page: str, page_runs: dict[str, Future[PageRun]]) -> None:
    run = page_runs[page].result(timeout=PAGE_SECONDS * len(page_runs))
    assert run.returncode == 0 and run.outcome is not None, run.stderr
    outcome = run.outcome
    assert "failed" not in outcome, f"{outcome['failed']}: {outcome['why']}\n{outcome['output']}"
    assert outcome["ran"] == sum(block.runs for block in PAGES[page])


@pytest.mark.parametrize("block", NOT_RUN, ids=[block.where for block in NOT_RUN])
def test_blocks_not_run_say_why(block: Block) -> None:
    assert block.reason
    pytest.skip(f"{block.where}: not run: {block.reason}")


def test_markers_sit_on_blocks_and_no_block_escapes_the_runner() -> None:
    assert [where for page in pages() for where in stray_markers(page)] == []
    aliased = [b.where for found in PAGES.values() for b in found if b.lang in ALIASES]
    assert aliased == [], "write these blocks as ```sh or ```python, which the tests run"


def test_the_runner_reports_a_failing_block(namespace: list[str], tmp_path: Path) -> None:
    """The harness itself: a block that fails is named with its line; the ones before it ran."""
    page = tmp_path / "page.md"
    page.write_text("```sh\ntrue\n```\n\n```python\nraise SystemExit(3)\n```\n")
    found = blocks(page, tmp_path)
    cwd = tmp_path / "work"
    cwd.mkdir()
    (tmp_path / "spec.json").write_text(json.dumps(spec_of(found, cwd, namespace=True)))
    runner = Path(__file__).resolve().parent / "docblocks.py"
    subprocess.run(
        [*namespace, sys.executable, str(runner), str(tmp_path / "spec.json"),
         str(tmp_path / "result.json")],
        check=True, timeout=120,
    )  # fmt: skip
    outcome = json.loads((tmp_path / "result.json").read_text())
    assert (outcome["ran"], outcome["failed"], outcome["why"]) == (1, "page.md:5", "exit code 3")


def test_blocks_see_their_own_loopback_only(namespace: list[str]) -> None:
    """Inside a page's namespace the default port is free even while this machine's own
    127.0.0.1:50051 is taken (here by the test itself, unless something else already has it)."""
    code = "import socket\nwith socket.create_server(('127.0.0.1', 50051)):\n    print('bound')\n"
    try:
        held: socket.socket | None = socket.create_server(("127.0.0.1", 50051))
    except OSError:  # already taken on this machine: the point holds the same
        held = None
    try:
        done = subprocess.run(
            [*namespace, sys.executable, "-c", code], capture_output=True, text=True, timeout=60
        )
    finally:
        if held is not None:
            held.close()
    assert done.stdout == "bound\n", done.stderr


# --------------------------------------------------------------------------------------------
# The site's hook (docs/hooks/reference.py): the generated references


def _hook() -> ModuleType:
    path = REPO / "docs" / "hooks" / "reference.py"
    spec = importlib.util.spec_from_file_location("docs_reference_hook", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_cli_reference_has_every_subcommand_and_option() -> None:
    from permindex.cli import build_parser

    reference = _hook()
    text = reference.cli_reference()
    parser = build_parser()
    for name, sub in reference._subcommands(parser).items():
        assert f"## `permindex {name}`" in text
        for action in sub._actions:
            for option in action.option_strings:
                assert f"`{option}" in text or f", {option}" in text, (name, option)


def test_grpc_reference_reads_every_rpc_message_and_field() -> None:
    reference = _hook()
    from permindex.v1 import index_pb2

    service = index_pb2.DESCRIPTOR.services_by_name["PermIndex"]
    proto = reference.parse_proto(REPO / "protos" / "permindex" / "v1" / "index.proto")
    (parsed_service,) = [b for b in proto.blocks if b.kind == "service"]
    assert [rpc.name for rpc in parsed_service.items] == [m.name for m in service.methods]
    for message in index_pb2.DESCRIPTOR.message_types_by_name.values():
        (block,) = [b for b in proto.blocks if b.kind == "message" and b.name == message.name]
        parsed = [
            member.name
            for item in block.items
            for member in (item.items if hasattr(item, "items") else [item])
        ]
        assert sorted(parsed) == sorted(f.name for f in message.fields), message.name
    text = reference.grpc_reference()
    assert all(f"### `{m.name}`" in text for m in service.methods)
