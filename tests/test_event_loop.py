"""The server's event loop (``serve --event-loop``, ``PERMINDEX_EVENT_LOOP``): uvloop where
installed, asyncio's own on request, a clear error for anything else; a real server answers and
stops gracefully on both."""

from __future__ import annotations

import asyncio
import importlib.util
import sys
from pathlib import Path

import pytest
from serverproc import ServeProcess

from permindex.client import Client
from permindex.rpc.server import new_event_loop

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


def _loop_module(loop: asyncio.AbstractEventLoop) -> str:
    try:
        return type(loop).__module__.split(".")[0]
    finally:
        loop.close()


@pytest.mark.skipif(not HAS_UVLOOP, reason="uvloop is not installed (Windows)")
def test_uvloop_is_the_default_where_installed() -> None:
    assert _loop_module(new_event_loop()) == "uvloop"
    assert _loop_module(new_event_loop("uvloop")) == "uvloop"


def test_asyncio_loop_on_request() -> None:
    assert _loop_module(new_event_loop("asyncio")) == "asyncio"


def test_unknown_event_loop_is_refused() -> None:
    with pytest.raises(ValueError, match="event loop 'tokio'"):
        new_event_loop("tokio")


def test_uvloop_asked_for_but_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop raises ImportError
    with pytest.raises(ValueError, match="uvloop is not installed"):
        new_event_loop("uvloop")
    assert _loop_module(new_event_loop()) == "asyncio"  # auto falls back


@pytest.mark.parametrize("choice", ["asyncio", "uvloop"])
def test_server_answers_and_stops_on_either_loop(tmp_path: Path, choice: str) -> None:
    if choice == "uvloop" and not HAS_UVLOOP:
        pytest.skip("uvloop is not installed (Windows)")
    server = ServeProcess(tmp_path / "data", env={"PERMINDEX_EVENT_LOOP": choice})
    try:
        address = server.address()
        assert address is not None, server.text
        with Client(address, timeout=30) as client:
            client.add([("a", 0b1011), ("b", 0b1010)])
            assert [m.key for m in client.query(0b1011, k=1)] == ["a", "b"]
    finally:
        assert server.stop() == 0, server.text
    assert "snapshot of 2 keys written" in server.text


def test_bad_event_loop_exits_2_with_a_message(tmp_path: Path) -> None:
    server = ServeProcess(tmp_path / "data", "--event-loop", "tokio")
    assert server.address(timeout=60) is None
    assert server.wait() == 2  # a bad command line
    assert "tokio" in server.text
    assert "Traceback" not in server.text
