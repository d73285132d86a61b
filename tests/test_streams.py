"""The asyncio server's limits on what clients hold (permindex.rpc.limits): streams per client
address and in all, unary calls admitted whatever the streams, the idle timeout, the join budget,
the Prometheus counters of each refusal, and SIGTERM finishing in-flight work. Real servers on
127.0.0.1 (port 0), each test with at most 12 streams and 60 s of wall time."""

from __future__ import annotations

import queue
import random
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from conftest import StartServer, make_stub
from grpc_health.v1 import health_pb2, health_pb2_grpc
from serverproc import ServeProcess, cpu_seconds

import permindex
from permindex.errors import LimitExceededError
from permindex.v1 import index_pb2 as pb
from permindex.v1 import index_pb2_grpc


class _Silent:
    """A request stream that sends nothing until :meth:`close` (then ends)."""

    def __init__(self) -> None:
        self.queue: queue.Queue[Any] = queue.Queue()

    def __iter__(self) -> Iterator[Any]:
        return iter(self.queue.get, None)

    def close(self) -> None:
        self.queue.put(None)


def _open_stream(address: str, kind: str) -> tuple[Any, Any, _Silent]:
    """(channel, call, request feed) of one silent stream on its own channel; the call is
    started (a response-less silent stream is only started once its metadata arrived)."""
    channel, stub = make_stub(address)
    feed = _Silent()
    if kind == "watch":
        call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
        next(call)
    elif kind == "ingest":
        call = stub.Ingest(iter(feed), timeout=60)
    else:
        call = stub.QueryColumns(iter(feed), timeout=60)
    return channel, call, feed


def _refusal(call: Any) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as refused:
        next(call)
    return refused.value


def _wait_until_open(server: Any, count: int) -> None:
    deadline = time.monotonic() + 10
    while (held := server.limits.streams + server.limits.watches) < count:
        assert time.monotonic() < deadline, f"{held} of {count} streams open"
        time.sleep(0.01)


def _metrics(address: str) -> str:
    with urllib.request.urlopen(f"http://{address}/metrics", timeout=10) as response:
        text: str = response.read().decode()
    return text


def test_streams_per_address_are_bounded_and_unary_calls_still_admitted(
    start_server: StartServer,
) -> None:
    """3 streams per address: a 4th (each on its own channel, so its own port) is refused at
    once with RESOURCE_EXHAUSTED naming the option; Stats and health checks still answer; once
    a stream closes, a new one is admitted."""
    server = start_server(max_streams_per_address=3, metrics_address="127.0.0.1:0")
    opened = [_open_stream(server.address, kind) for kind in ("watch", "ingest", "columns")]
    try:
        _wait_until_open(server, 3)
        channel, call, feed = _open_stream(server.address, "columns")
        began = time.monotonic()
        refused = _refusal(call)
        assert time.monotonic() - began < 2
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-streams-per-address" in (refused.details() or "")
        assert "127.0.0.1" in (refused.details() or "")
        channel.close()
        with permindex.Client(server.address) as client:
            assert client.stats().count == 0
        health = health_pb2_grpc.HealthStub(opened[0][0])
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=2).status == 1
        ch, call, feed = opened.pop(1)  # the Ingest stream ends
        feed.close()
        assert list(call) == []
        ch.close()
        channel, call, feed = _open_stream(server.address, "columns")
        opened.append((channel, call, feed))
        _wait_until_open(server, 3)
        assert server.metrics is not None and server.metrics.address is not None
        text = _metrics(server.metrics.address)
        assert 'permindex_streams_refused_total{limit="streams_per_address"} 1.0' in text
    finally:
        for channel, _, feed in opened:
            feed.close()
            channel.close()


def test_streams_in_all_are_bounded(start_server: StartServer) -> None:
    server = start_server(max_streams=2)
    opened = [_open_stream(server.address, "ingest") for _ in range(2)]
    try:
        _wait_until_open(server, 2)
        channel, call, _ = _open_stream(server.address, "ingest")
        refused = _refusal(call)
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "--max-streams)" in (refused.details() or "")
        channel.close()
        with permindex.Client(server.address) as client:
            client.add([("a", 1)])
            assert client.stats().count == 1
    finally:
        for channel, _, feed in opened:
            feed.close()
            channel.close()


def test_a_stream_is_closed_once_idle_after_its_last_message_or_unread(
    start_server: StartServer,
) -> None:
    """--stream-idle-seconds 0.5, measured from the wait in progress: an Ingest that sent a
    batch every 0.1 s for 1 s, then nothing, is closed about 0.5 s after its last batch (all of
    them applied); a Pairs stream whose client stops taking its messages (flow control: the
    server's sends wait) is closed with DEADLINE_EXCEEDED naming what it waited for."""
    server = start_server(stream_idle_seconds=0.5)
    channel, stub = make_stub(server.address)
    with channel:
        feed = _Silent()
        last = [0.0]

        def then_silent() -> Iterator[pb.AddRequest]:
            for i in range(10):
                yield pb.AddRequest(documents=[pb.Document(key=f"k{i}", fingerprint=i)])
                last[0] = time.monotonic()
                time.sleep(0.1)
            yield from feed

        replies = stub.Ingest(then_silent(), timeout=30)
        with pytest.raises(grpc.RpcError) as closed:
            for _ in replies:
                pass
        assert closed.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert 0.4 < time.monotonic() - last[0] < 5
        feed.close()
        copies = [pb.Document(key=f"copy/{i:04d}", fingerprint=7) for i in range(3000)]
        stub.Add(pb.AddRequest(documents=copies))  # 4,498,500 pairs: far past the windows
    slow = grpc.insecure_channel(server.address, options=[("grpc.http2.bdp_probe", 0)])
    with slow:
        stub = index_pb2_grpc.PermIndexStub(slow)  # type: ignore[no-untyped-call]
        pairs = stub.Pairs(pb.PairsRequest(), timeout=30)
        next(pairs)
        time.sleep(2.0)  # not reading: the server's sends wait for the client
        with pytest.raises(grpc.RpcError) as unread:
            for _ in pairs:
                pass
        assert unread.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "taken by the client" in (unread.value.details() or "")


def test_an_idle_stream_is_closed_and_a_busy_one_is_not(start_server: StartServer) -> None:
    """--stream-idle-seconds 0.5: a silent Ingest is closed with DEADLINE_EXCEEDED naming the
    option within about that time; one that sends a batch every 0.1 s for 1.5 s stays open and
    has every batch applied; the idle closure is counted."""
    server = start_server(stream_idle_seconds=0.5, metrics_address="127.0.0.1:0")
    channel, stub = make_stub(server.address)
    with channel:
        feed = _Silent()
        began = time.monotonic()
        silent = stub.Ingest(iter(feed), timeout=30)
        closed = _refusal(silent)
        assert 0.4 < time.monotonic() - began < 5
        assert closed.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert "--stream-idle-seconds" in (closed.details() or "")

        def steady() -> Iterator[pb.AddRequest]:
            for i in range(15):
                yield pb.AddRequest(documents=[pb.Document(key=f"k{i}", fingerprint=i)])
                time.sleep(0.1)

        assert sum(r.added for r in stub.Ingest(steady(), timeout=30)) == 15
        feed.close()
    with permindex.Client(server.address) as client:
        assert client.stats().count == 15
    assert server.metrics is not None and server.metrics.address is not None
    assert "permindex_streams_idle_closed_total 1.0" in _metrics(server.metrics.address)


def test_a_join_over_its_budget_is_refused_before_any_work(start_server: StartServer) -> None:
    """--max-join-work 1000 with 200 fingerprints that all share one prefix of the join: Pairs,
    Clusters and Flags are refused with RESOURCE_EXHAUSTED naming the estimate and the option.
    5,000 keys of one fingerprint need no candidate verified: their Clusters and
    ExactDuplicates are answered, their Pairs (12,497,500 to send) refused; a small collection
    is answered."""
    server = start_server(max_join_work=1000, metrics_address="127.0.0.1:0")
    rng = random.Random(9)
    with permindex.Client(server.address, retries=0) as client:
        client.add([(f"near/{i}", (0xABCD << 48) | rng.getrandbits(20)) for i in range(200)])
        for call in (client.pairs, client.clusters, client.flags):
            with pytest.raises(LimitExceededError) as refused:
                call()
            message = str(refused.value)
            assert "--max-join-work" in message and "1,000" in message
        client.remove([f"near/{i}" for i in range(200)])
        client.add([(f"copy/{i:04d}", 7) for i in range(5000)])
        assert [len(cluster) for cluster in client.clusters()] == [5000]
        assert [len(group.keys) for group in client.exact_duplicates()] == [5000]
        with pytest.raises(LimitExceededError) as refused:
            client.pairs()
        assert "12,497,500" in str(refused.value)
        client.remove([f"copy/{i:04d}" for i in range(5000)])
        client.add([("a", 1), ("b", 1), ("c", 3)])
        assert client.pairs() == [("a", "b", 0), ("a", "c", 1), ("b", "c", 1)]
    assert server.metrics is not None and server.metrics.address is not None
    assert "permindex_budget_refusals_total 4.0" in _metrics(server.metrics.address)


def test_sigterm_lets_an_in_flight_unary_call_finish(tmp_path: Path) -> None:
    """An Add of 4,000 texts of 2,000 words (seconds of fingerprinting on the server: shingles
    of 512 words, each hashed whole) in flight when SIGTERM arrives is applied and answered; the
    final snapshot holds it."""
    proc = ServeProcess(tmp_path / "data", "--shingle-size", "512", "--max-message-mb", "64")
    address = proc.address()
    assert address is not None, proc.text
    rng = random.Random(2)
    words = [f"w{i}" for i in range(5000)]
    batch = [(f"k{i}", " ".join(rng.choices(words, k=2000))) for i in range(4000)]
    result: list[Any] = []

    def add() -> None:
        # one request: the Client splits an add by count and bytes (about 48 MB here)
        with permindex.Client(address, batch_size=4000, batch_bytes=1 << 30) as client:
            result.append(client.add(batch))

    baseline = cpu_seconds(proc.pid)
    thread = threading.Thread(target=add)
    began = time.monotonic()
    thread.start()
    # the server has received the Add and is fingerprinting it (seconds of CPU in all)
    while cpu_seconds(proc.pid) - baseline < 0.5 and time.monotonic() - began < 60:
        time.sleep(0.02)
    in_flight = thread.is_alive()
    proc.process.send_signal(signal.SIGTERM)
    thread.join(60)
    assert proc.wait() == 0, proc.text
    assert in_flight, "the Add was answered before the signal: nothing was in flight"
    assert result and result[0].added == 4000, proc.text
    assert time.monotonic() - began < 30
    assert "snapshot of 4000 keys" in proc.text
    assert "Traceback" not in proc.text


def test_a_batch_lookup_past_its_deadline_stops_and_keeps_its_place_until_then(
    tmp_path: Path,
) -> None:
    """5,000 keys of one fingerprint; Query and QueryColumns of 1,024 copies of it (5.1 million
    matches) with a 0.5 s deadline: the server's CPU goes idle within 1 s of the deadline (the
    lookup is sliced by matches and checks the call between slices). With
    --max-concurrent-rpcs 2, 6 rounds of 2 such calls keep the executor's queue bounded: after
    them the server is idle within 5 s (the abandoned lookups held their places until they
    stopped, so they could not queue up) and a Stats call is answered at once."""
    proc = ServeProcess(tmp_path / "data", "--max-concurrent-rpcs", "2")
    address = proc.address()
    assert address is not None, proc.text

    def idle_after(began: float) -> float:
        """Seconds from ``began`` until the server used under 20 ms of CPU in 100 ms."""
        while True:
            before = cpu_seconds(proc.pid)
            time.sleep(0.1)
            if cpu_seconds(proc.pid) - before < 0.02:
                return time.monotonic() - began
            assert time.monotonic() - began < 30, "the server kept working"

    template = 0x0123456789ABCDEF
    try:
        with permindex.Client(address) as client:
            client.add([(f"https://example.com/{i:05d}", template) for i in range(5000)])
        channel, stub = make_stub(address)
        with channel:
            import numpy as np

            copies = np.full(1024, template, dtype=np.uint64)
            for kind in ("query", "columns"):
                with pytest.raises(grpc.RpcError) as late:
                    if kind == "query":
                        stub.Query(pb.QueryRequest(fingerprints=copies.tolist()), timeout=0.5)
                    else:
                        columns = pb.QueryColumnsRequest(fingerprints=copies.tobytes())
                        list(stub.QueryColumns(iter([columns]), timeout=0.5))
                # past the deadline, or (on a fast machine) refused first for an answer over
                # the 64 MiB message limit: either way the work stops
                assert late.value.code() in (
                    grpc.StatusCode.DEADLINE_EXCEEDED,
                    grpc.StatusCode.RESOURCE_EXHAUSTED,
                ), late.value.details()
                assert idle_after(time.monotonic()) < 1.0, kind
            request = pb.QueryRequest(fingerprints=copies.tolist())
            for _ in range(6):
                calls = [stub.Query.future(request, timeout=0.3) for _ in range(2)]
                for call in calls:
                    with pytest.raises(grpc.RpcError) as refused:
                        call.result()
                    assert refused.value.code() in (
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        grpc.StatusCode.RESOURCE_EXHAUSTED,
                    )
            # the abandoned work held its places until it stopped, and stops soon: no queue
            assert idle_after(time.monotonic()) < 5.0
            began = time.monotonic()
            assert stub.Stats(pb.StatsRequest(), timeout=5).count == 5000
            assert time.monotonic() - began < 1
    finally:
        proc.process.terminate()
        proc.wait()


def test_connections_are_bounded_and_silent_sockets_closed(tmp_path: Path) -> None:
    """--max-connections 20: 30 raw TCP sockets that never speak HTTP/2 keep at most 20 open
    (the rest are closed at once); once they are gone the server answers again; a socket that
    stays silent is closed by the server's 10 s handshake timeout."""
    import socket

    proc = ServeProcess(tmp_path / "data", "--max-connections", "20")
    address = proc.address()
    assert address is not None, proc.text
    host, port = address.rsplit(":", 1)

    def is_open(sock: socket.socket) -> bool:
        """False once the server closed it (what it sent before, its SETTINGS, is read)."""
        try:
            while sock.recv(4096, socket.MSG_DONTWAIT):
                continue
            return False
        except BlockingIOError:
            return True
        except OSError:
            return False

    sockets = [socket.create_connection((host, int(port)), timeout=5) for _ in range(30)]
    for sock in sockets:
        sock.setblocking(False)
    try:
        time.sleep(1.0)
        assert sum(is_open(sock) for sock in sockets) == 20
        for sock in sockets[1:]:
            sock.close()
        time.sleep(0.5)
        with permindex.Client(address, timeout=5) as client:
            assert client.stats().count == 0
        began = time.monotonic()
        while is_open(sockets[0]):
            assert time.monotonic() - began < 15, "a silent socket was held past 15 s"
            time.sleep(0.2)
    finally:
        for sock in sockets:
            sock.close()
        proc.process.terminate()
        proc.wait()


def test_a_slow_pipe_into_ingest_is_sent_as_it_comes(start_server: StartServer) -> None:
    """`permindex ingest -` fed one document a second through a pipe kept open: each document is
    stored within about a second of being written (a batch is cut once its first document has
    waited 1 s), so with --stream-idle-seconds 3 the stream is never idle and all 5 are stored;
    the summary counts them."""
    import subprocess
    import sys

    server = start_server(stream_idle_seconds=3)
    process = subprocess.Popen(
        [sys.executable, "-m", "permindex", "ingest", "-", "--address", server.address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None
    try:
        with permindex.Client(server.address) as client:
            for i in range(5):
                process.stdin.write(
                    f'{{"id": "line/{i}", "text": "one two three four number {i}"}}\n'
                )
                process.stdin.flush()
                began = time.monotonic()
                while client.get(f"line/{i}") is None:
                    assert time.monotonic() - began < 4, f"line/{i} not sent while the pipe is open"
                    time.sleep(0.05)
                time.sleep(1.0)
        _, stderr = process.communicate(timeout=30)  # closes the pipe: the ingest ends
        assert process.returncode == 0, stderr
        assert "5 documents" in stderr and "5 added" in stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_health_watches_cannot_take_the_data_streams_places(start_server: StartServer) -> None:
    """--max-streams 2: two health watches (which need no token) fill their own pool: a third
    is refused, while two Ingest streams are still admitted."""
    server = start_server(max_streams=2)
    opened = [_open_stream(server.address, "watch") for _ in range(2)]
    try:
        _wait_until_open(server, 2)
        channel, call, _ = _open_stream_unstarted_watch(server.address)
        refused = _refusal(call)
        assert refused.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "too many health watches open" in (refused.details() or "")
        channel.close()
        opened += [_open_stream(server.address, "ingest") for _ in range(2)]
        _wait_until_open(server, 4)
    finally:
        for channel, _, feed in opened:
            feed.close()
            channel.close()


def _open_stream_unstarted_watch(address: str) -> tuple[Any, Any, _Silent]:
    channel, _ = make_stub(address)
    call = health_pb2_grpc.HealthStub(channel).Watch(health_pb2.HealthCheckRequest())
    return channel, call, _Silent()


@pytest.mark.parametrize(
    ("peer", "counted_as"),
    [
        ("ipv4:127.0.0.1:5000", "127.0.0.1"),
        ("ipv6:[::1]:5000", "::1"),
        ("ipv6:[2001:db8::1]:5000", "2001:db8::/64"),
        ("ipv6:[2001:db8::ffff:2]:6000", "2001:db8::/64"),
        ("ipv6:[::ffff:10.0.0.1]:5000", "10.0.0.1"),
        ("unix:/tmp/socket", "unix:/tmp/socket"),
    ],
)
def test_the_per_address_limit_counts_ipv6_by_its_64(peer: str, counted_as: str) -> None:
    from permindex.rpc.limits import client_address

    assert client_address(peer) == counted_as
