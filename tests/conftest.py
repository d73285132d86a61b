"""Shared test setup: the hypothesis profile, and real in-process servers on 127.0.0.1 (port 0)
with a temporary data directory plus a real gRPC client stub.

grpc is imported inside the fixtures only, so that collecting the tests of the pure-Python core
does not load it.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import settings

from permindex.rpc.config import ServerConfig

if TYPE_CHECKING:
    from permindex.rpc.server import RunningServer
    from permindex.v1.index_pb2_grpc import PermIndexStub

settings.register_profile("permindex", max_examples=100, deadline=None)
settings.register_profile("quick", max_examples=20, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "permindex"))

#: Message size limit of the test clients: the server's default, 64 MiB.
CLIENT_MAX_MESSAGE_BYTES = 64 * 1024 * 1024

StartServer = Callable[..., "RunningServer"]

#: Markers of long runs that the default suite skips: they run when ``-m`` names them (``soak``:
#: more rounds of checks the default suite makes in a shorter form; see pyproject.toml).
OPT_IN_MARKERS = ("soak", "power_loss_soak")


def pytest_report_header(config: pytest.Config) -> str:
    """What to expect of a run, before its dots: its time, and how to make it shorter."""
    return (
        "permindex: the default suite takes about 13 minutes on 2 idle cores (more on a busy "
        "machine; the first run on a machine first compiles the kernels); -m 'not slow' "
        "skips the longest tests, -m soak runs only the long forms; the "
        "slowest are listed at the end"
    )


def pytest_sessionstart(session: pytest.Session) -> None:
    """Load the kernels a server loads at its start, once, before any test starts a server: on a
    fresh machine this compiles them into numba's cache (a minute or more on a busy machine),
    which the servers the tests start then load from in seconds, instead of each test's first
    server compiling them against its start-up timeout."""
    from permindex.index.search.lookup import kernels
    from permindex.text.fingerprint import simhash_many

    kernels()
    simhash_many(["load the fingerprint kernel before the tests start servers"])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the tests of :data:`OPT_IN_MARKERS` unless ``-m`` names their marker."""
    chosen = set(re.findall(r"\w+", config.getoption("markexpr") or ""))
    for marker in OPT_IN_MARKERS:
        if marker in chosen:
            continue
        skip = pytest.mark.skip(reason=f"a long run: select it with -m {marker}")
        for item in items:
            if item.get_closest_marker(marker) is not None:
                item.add_marker(skip)


def server_config(data_dir: Path, **changes: Any) -> ServerConfig:
    """A ServerConfig for tests: 127.0.0.1 port 0, ``data_dir``, no periodic snapshots, a short
    grace; ``changes`` override any field (a misspelled one raises TypeError)."""
    base = ServerConfig(
        address="127.0.0.1:0", data_dir=data_dir, snapshot_interval=0, grace_seconds=5.0
    )
    return dataclasses.replace(base, **changes)


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[StartServer]:
    """A function that starts a real server (``server_config(tmp_path / "data", **changes)``) and
    returns its RunningServer; every server started is stopped at teardown."""
    from permindex.rpc.server import create_server

    started: list[RunningServer] = []

    def start(**changes: Any) -> RunningServer:
        changes.setdefault("data_dir", tmp_path / "data")
        running = create_server(server_config(**changes))
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop(grace=0)


@pytest.fixture
def server(start_server: StartServer) -> RunningServer:
    """A real server on 127.0.0.1:PORT with a temporary data dir: ``.address``, ``.port``,
    ``.data_dir``, ``.stop()``."""
    return start_server()


def make_stub(address: str) -> tuple[Any, PermIndexStub]:
    """(channel, stub) for ``address``; close the channel when done."""
    import grpc

    from permindex.v1.index_pb2_grpc import PermIndexStub

    channel = grpc.insecure_channel(
        address,
        options=[
            ("grpc.max_receive_message_length", CLIENT_MAX_MESSAGE_BYTES),
            ("grpc.max_send_message_length", CLIENT_MAX_MESSAGE_BYTES),
        ],
    )
    return channel, PermIndexStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture
def stub(server: RunningServer) -> Iterator[PermIndexStub]:
    """A PermIndex client stub connected to ``server``."""
    channel, client = make_stub(server.address)
    try:
        yield client
    finally:
        channel.close()


@pytest.fixture
def prepare_run_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The name of the thread of every ``Table.prepare_run`` call from now on (the tables' runs
    of a large batch are built in ``permindex-build`` threads), in call order."""
    import threading

    from permindex.index.tables.table import Table

    names: list[str] = []
    prepare_run = Table.prepare_run

    def recording(self: Table, values: Any) -> Any:
        names.append(threading.current_thread().name)
        return prepare_run(self, values)

    monkeypatch.setattr(Table, "prepare_run", recording)
    return names


@dataclasses.dataclass
class IndexParts:
    """The parts of every Index made since the fixture started, in order of creation: index
    i's row store is ``rows[i]`` and its runs object ``runs[i]`` (each Index makes one of each).
    Tests observe a part through its public attributes and methods, not the Index's privates."""

    rows: list[Any]
    runs: list[Any]


@pytest.fixture
def index_parts(monkeypatch: pytest.MonkeyPatch) -> IndexParts:
    """Records the :class:`~permindex.index.rows.RowStore` and
    :class:`~permindex.index.table_set.TableSet` of every Index made from now on."""
    from permindex.index.rows import RowStore
    from permindex.index.table_set import TableSet

    parts = IndexParts([], [])
    rows_init = RowStore.__init__
    runs_init = TableSet.__init__

    def recording_rows(self: RowStore, *args: Any, **kwargs: Any) -> None:
        rows_init(self, *args, **kwargs)
        parts.rows.append(self)

    def recording_runs(self: TableSet, *args: Any, **kwargs: Any) -> None:
        runs_init(self, *args, **kwargs)
        parts.runs.append(self)

    monkeypatch.setattr(RowStore, "__init__", recording_rows)
    monkeypatch.setattr(TableSet, "__init__", recording_runs)
    return parts
