"""Abuse clients of the load suite (tests/test_load.py), on the raw permindex.v1 and
grpc.health.v1 stubs.

- :class:`StreamHolder` runs ``python tests/load_clients.py hold ...`` in its own process: one
  grpc.aio event loop holding many calls open, each on its own channel (and its own TCP
  connection: a local subchannel pool per channel), sending nothing after the call starts.
  Kinds: ``ingest`` and ``columns`` (Ingest and QueryColumns with an open request stream that
  never sends), ``pairs`` (a Pairs call whose replies are never read), ``watch``
  (grpc.health.v1.Health/Watch, every update read). It prints one JSON line per event on its
  stdout: ``{"event": "ready", ...}`` once every call is started, then ``{"event": "closed",
  "kind", "index", "code", "details", "statuses", "after_s"}`` as each call ends (``statuses``:
  the health statuses a watch received; ``after_s``: seconds since ready, negative before).
  Killing it (SIGKILL) drops every connection without a goodbye.
- :func:`unary_latencies`: sequential Stats or Query calls from a fresh channel, each under its
  own deadline.
- :func:`nearest_rank`: the nearest-rank percentile (p99 of 20 values is their maximum).
- :func:`raw_connections`: TCP connections to the server's port that break the protocol
  (reset at once, a partial HTTP/2 preface, garbage after the preface).

Not a test module (pytest collects ``test_*.py`` only).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import queue
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
KINDS = ("ingest", "columns", "pairs", "watch")
#: Channel options of every abuse client: 64 MiB messages, and a subchannel (TCP connection) of
#: its own, so that N channels are N connections.
CHANNEL_OPTIONS = (
    ("grpc.max_receive_message_length", 64 * 1024 * 1024),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    ("grpc.use_local_subchannel_pool", 1),
)


def nearest_rank(values: Sequence[float], percent: float) -> float:
    """The nearest-rank ``percent`` percentile of ``values`` (non-empty): the smallest value
    with at least ``percent`` % of the values at or below it."""
    ordered = sorted(values)
    rank = max(1, math.ceil(percent / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Latencies:
    """Sequential unary calls: ``seconds`` of each answered call, ``failures`` the status code
    names of the others, in call order."""

    seconds: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    @property
    def answered(self) -> int:
        return len(self.seconds)

    def p99(self) -> float:
        """Nearest-rank p99 of the answered calls' latencies (inf when none was answered)."""
        return nearest_rank(self.seconds, 99) if self.seconds else math.inf

    def summary(self) -> str:
        if not self.seconds:
            return f"0 answered, failures {self.failures}"
        return (
            f"{self.answered} answered (failures {self.failures}), p50 "
            f"{nearest_rank(self.seconds, 50) * 1e3:.1f} ms, p99 {self.p99() * 1e3:.1f} ms, "
            f"max {max(self.seconds) * 1e3:.1f} ms"
        )


def unary_latencies(
    address: str, kind: str = "stats", calls: int = 20, timeout: float = 2.0
) -> Latencies:
    """``calls`` sequential ``Stats`` (kind ``stats``) or one-fingerprint ``Query`` (kind
    ``query``) calls on a new channel, each with a ``timeout`` s deadline; the channel is
    connected first (within 10 s) so that its connection time is not a call's."""
    import grpc

    from permindex.v1 import index_pb2 as pb
    from permindex.v1 import index_pb2_grpc

    out = Latencies()
    channel = grpc.insecure_channel(address, options=list(CHANNEL_OPTIONS))
    try:
        grpc.channel_ready_future(channel).result(timeout=10)
        stub = index_pb2_grpc.PermIndexStub(channel)  # type: ignore[no-untyped-call]
        for i in range(calls):
            began = time.perf_counter()
            try:
                if kind == "stats":
                    stub.Stats(pb.StatsRequest(), timeout=timeout)
                else:
                    stub.Query(pb.QueryRequest(fingerprints=[i * 7919]), timeout=timeout)
            except grpc.RpcError as error:
                out.failures.append(error.code().name)
                continue
            out.seconds.append(time.perf_counter() - began)
    finally:
        channel.close()
    return out


def raw_connections(address: str, count: int) -> None:
    """``count`` TCP connections to ``address`` that break the protocol, closed without a
    goodbye, in turn: reset at once (SO_LINGER 0), a partial HTTP/2 client preface, the preface
    followed by 1 KiB of garbage, a SETTINGS frame then a reset."""
    host, port = address.rsplit(":", 1)
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    settings = struct.pack(">I", 0)[1:] + b"\x04\x00" + struct.pack(">I", 0)
    for i in range(count):
        sock = socket.create_connection((host, int(port)), timeout=5)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            mode = i % 4
            if mode == 1:
                sock.sendall(preface[:10])
            elif mode == 2:
                sock.sendall(preface + os.urandom(1024))
            elif mode == 3:
                sock.sendall(preface + settings)
        except OSError:
            pass  # the server may close first
        finally:
            sock.close()


# -- the holder process -----------------------------------------------------------------------


class StreamHolder:
    """A process holding ``counts[kind]`` calls of each kind open on ``address`` (see the module
    docstring); ``pairs_k`` is the k of its Pairs calls (None: the server's)."""

    def __init__(self, address: str, counts: dict[str, int], pairs_k: int | None = None) -> None:
        argv = [sys.executable, str(Path(__file__)), "hold", "--address", address]
        for kind in KINDS:
            argv += [f"--{kind}", str(counts.get(kind, 0))]
        if pairs_k is not None:
            argv += ["--pairs-k", str(pairs_k)]
        self.counts = counts
        self.process = subprocess.Popen(
            argv,
            cwd=REPO,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.closed: list[dict[str, Any]] = []
        self.ready: dict[str, Any] | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if event.get("event") == "closed":
                self.closed.append(event)
            self.events.put(event)

    def wait_ready(self, timeout: float = 60, require_all: bool = True) -> dict[str, Any]:
        """The ready event (every call started or given up after 20 s: ``not_started``);
        AssertionError with the holder's stderr if it ended or did not get there within
        ``timeout`` s, or (``require_all``) if a call could not start (its headers sent)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.1)
            except queue.Empty:
                if self.process.poll() is not None:
                    break
                continue
            if event.get("event") == "ready":
                self.ready = event
                if require_all:
                    assert event["not_started"] == 0, f"calls not started in 20 s: {event}"
                return event
        raise AssertionError(f"the stream holder did not get ready: {self.stderr()}")

    def wait_closed(self, count: int, timeout: float) -> list[dict[str, Any]]:
        """The closed events once ``count`` calls have ended, or those seen after ``timeout``."""
        deadline = time.monotonic() + timeout
        while len(self.closed) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return list(self.closed)

    def stderr(self) -> str:
        if self.process.poll() is None:
            return "(still running)"
        assert self.process.stderr is not None
        return self.process.stderr.read()[-2000:]

    def pause(self) -> None:
        """SIGSTOP: the process stops answering (its connections stay open, TCP still
        acknowledged by the kernel): a dead peer for the server's keepalive."""
        self.process.send_signal(signal.SIGSTOP)

    def kill(self) -> None:
        """SIGKILL: every connection dropped by the kernel, no goodbye from gRPC."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self._reader.join(timeout=10)

    def close(self) -> None:
        """Ends the holder (stdin closed, then killed after 5 s)."""
        if self.process.poll() is None:
            assert self.process.stdin is not None
            try:
                self.process.stdin.close()
            except OSError:
                pass
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        for stream in (self.process.stdin, self.process.stdout, self.process.stderr):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass  # a pipe to a killed process


def _emit(event: dict[str, Any]) -> None:
    try:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()
    except OSError:
        pass  # the test went away


async def _hold(address: str, counts: dict[str, int], pairs_k: int | None) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from permindex.v1 import index_pb2 as pb
    from permindex.v1 import index_pb2_grpc

    ready_at: list[float] = []
    began = time.monotonic()

    def since_ready() -> float:
        return time.monotonic() - (ready_at[0] if ready_at else began)

    async def watch(kind: str, index: int, call: Any) -> None:
        statuses: list[str] = []
        code, details = "OK", ""
        try:
            if kind == "watch":
                async for reply in call:
                    statuses.append(health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status))
            code = (await call.code()).name
            details = await call.details() or ""
        except grpc.RpcError as error:
            code, details = error.code().name, error.details() or ""
        except asyncio.CancelledError:
            return
        _emit(
            {
                "event": "closed",
                "kind": kind,
                "index": index,
                "code": code,
                "details": details[:300],
                "statuses": statuses,
                "after_s": round(since_ready() if ready_at else -since_ready(), 3),
            }
        )

    channels: list[Any] = []
    calls: list[Any] = []
    tasks: list[asyncio.Task[None]] = []
    for kind in KINDS:
        for index in range(counts[kind]):
            channel = grpc.aio.insecure_channel(address, options=list(CHANNEL_OPTIONS))
            channels.append(channel)
            if kind == "watch":
                health = health_pb2_grpc.HealthStub(channel)
                call = health.Watch(health_pb2.HealthCheckRequest(service=""))
            else:
                stub = index_pb2_grpc.PermIndexStub(channel)  # type: ignore[no-untyped-call]
                if kind == "ingest":
                    call = stub.Ingest()
                elif kind == "columns":
                    call = stub.QueryColumns()
                else:
                    call = stub.Pairs(pb.PairsRequest(k=pairs_k))
            calls.append(call)
            tasks.append(asyncio.ensure_future(watch(kind, index, call)))

    async def connected(call: Any) -> bool:
        try:
            await asyncio.wait_for(call.wait_for_connection(), timeout=20)
        except grpc.RpcError:
            pass  # refused: its closed event tells
        except TimeoutError:
            return False
        return True

    started = await asyncio.gather(*(connected(c) for c in calls))
    await asyncio.sleep(0.3)  # the last calls' headers reach the server
    ready_at.append(time.monotonic())
    _emit(
        {
            "event": "ready",
            "counts": counts,
            "open_s": round(ready_at[0] - began, 3),
            "not_started": started.count(False),
        }
    )
    loop = asyncio.get_running_loop()
    stdin_closed = asyncio.Event()
    loop.add_reader(sys.stdin.fileno(), stdin_closed.set)
    await stdin_closed.wait()
    for call in calls:
        call.cancel()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*(c.close() for c in channels), return_exceptions=True)


def main() -> int:
    parser = argparse.ArgumentParser(description="hold gRPC calls open (see the docstring)")
    sub = parser.add_subparsers(dest="command", required=True)
    hold = sub.add_parser("hold")
    hold.add_argument("--address", required=True)
    for kind in KINDS:
        hold.add_argument(f"--{kind}", type=int, default=0)
    hold.add_argument("--pairs-k", type=int, default=None)
    args = parser.parse_args()
    counts = {kind: getattr(args, kind) for kind in KINDS}
    asyncio.run(_hold(args.address, counts, args.pairs_k))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
