"""Tokens scoped to collections, refused calls that cost nothing, and TLS and tokens reloaded
while the server runs; real servers on 127.0.0.1 (port 0).

- every RPC against every role (``read``, ``write``, ``admin``, and the old ``read-only`` and
  ``read-write``) and collection scope, on the raw stub;
- the issue's figure: an admin token and a ``write alpha`` token;
- hostile requests: a 60 MB Get of 30,000,000 empty keys without a token (refused from its
  metadata: the request is never read), with a valid token (sized from its wire bytes, never
  parsed), four at once -- with the time another client's one-fingerprint Query takes meanwhile
  and the server's resident memory;
- the token file and the TLS files changed under open connections;
- ``serve --check-config``; the server's token file given to a client as it is.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from certs import make_certificates
from conftest import StartServer
from load_clients import nearest_rank
from serverproc import RssSampler, ServeProcess, status_bytes

import permindex
from permindex.cli import main
from permindex.errors import ServerError
from permindex.rpc.auth import ADMIN, READ, RELOAD_SECONDS, WRITE, TokenFile
from permindex.rpc.handlers import PERMINDEX_SERVICE
from permindex.v1 import index_pb2 as pb

ADMIN_TOKEN = "ADMIN_TOKEN-0123456789abcdef"
ALPHA_TOKEN = "ALPHA_TOKEN-0123456789abcdef"
MiB = 1024 * 1024

#: name -> (token, role, scope) of the table test's token file.
TABLE_TOKENS = {
    "read alpha": ("read-alpha-0123456789abcdef", READ, "alpha"),
    "write alpha": ("write-alpha-0123456789abcdef", WRITE, "alpha"),
    "admin alpha": ("admin-alpha-0123456789abcdef", ADMIN, "alpha"),
    "read b*": ("read-bstar-0123456789abcdef", READ, "b*"),
    "read *": ("read-all-0123456789abcdef", READ, None),
    "write *": ("write-all-0123456789abcdef", WRITE, None),
    "admin *": ("admin-all-0123456789abcdef", ADMIN, None),
    "read-only": ("legacy-ro-0123456789abcdef", READ, "legacy"),
    "read-write": ("legacy-rw-0123456789abcdef", ADMIN, "legacy"),
}
RANK = {READ: 0, WRITE: 1, ADMIN: 2}
NEEDS = {
    **dict.fromkeys(
        "Query QueryColumns Get Pairs Clusters Flags ExactDuplicates Export Stats "
        "DescribeCollection ListCollections".split(),
        READ,
    ),
    **dict.fromkeys("Add Ingest CheckAndAdd Remove".split(), WRITE),
    **dict.fromkeys("CreateCollection DropCollection Snapshot".split(), ADMIN),
}


def token_line(name: str) -> str:
    token, role, scope = TABLE_TOKENS[name]
    if scope == "legacy":
        return f"{token} {name}"
    return f"{token} {role}" + ("" if scope is None else f" {scope}")


def covers(scope: str | None, collection: str) -> bool:
    if scope in (None, "legacy"):
        return True
    return collection == scope or (scope == "b*" and collection.startswith("b"))


def request_bytes(method: Any, collection: str) -> bytes:
    """A small request of ``method`` naming ``collection``."""
    message = pb.__dict__[method.input_type.name]()
    field = "name" if method.name in ("CreateCollection", "DropCollection",
                                      "DescribeCollection") else "collection"  # fmt: skip
    if field in message.DESCRIPTOR.fields_by_name:
        setattr(message, field, collection)
    if method.name in ("Add", "Ingest", "CheckAndAdd"):
        message.documents.add(key="k", fingerprint=7)
    elif method.name == "Query":
        message.fingerprints.append(7)
    elif method.name in ("Get", "Remove"):
        message.keys.append("k")
    elif method.name == "QueryColumns":
        message.fingerprints = (7).to_bytes(8, "little")
    data: bytes = message.SerializeToString()
    return data


def call(channel: grpc.Channel, method: Any, data: bytes, token: str | None) -> str:
    """The status code name of one call of ``method`` with request ``data``."""
    path = f"/{PERMINDEX_SERVICE.full_name}/{method.name}"
    metadata: tuple[tuple[str, str | bytes], ...] = (
        () if token is None else (("authorization", f"Bearer {token}"),)
    )
    raw: Any = channel  # no serializers: the bytes as they are
    try:
        if method.client_streaming:
            for _ in raw.stream_stream(path)(iter([data]), metadata=metadata, timeout=20):
                pass
        elif method.server_streaming:
            for _ in raw.unary_stream(path)(data, metadata=metadata, timeout=20):
                pass
        else:
            raw.unary_unary(path)(data, metadata=metadata, timeout=20)
    except grpc.RpcError as error:
        return str(error.code().name)
    return "OK"


@pytest.fixture
def table_server(start_server: StartServer, tmp_path: Path) -> Any:
    path = tmp_path / "tokens"
    path.write_text(
        f"# the table test's tokens\n{ADMIN_TOKEN} admin\n"
        + "\n".join(token_line(name) for name in TABLE_TOKENS)
        + "\n"
    )
    server = start_server(token_file=path)
    with permindex.Client(server.address, token=ADMIN_TOKEN) as admin:
        for name in ("alpha", "beta"):
            admin.create_collection(name)
            admin.use(name).add([("k", 7), ("other", 8)])
    return server


def test_every_rpc_against_every_role_and_scope(table_server: Any) -> None:
    problems = []
    with (
        grpc.insecure_channel(table_server.address) as channel,
        permindex.Client(table_server.address, token=ADMIN_TOKEN) as admin,
    ):
        for method in PERMINDEX_SERVICE.methods:
            for collection in ("alpha", "beta"):
                data = request_bytes(method, collection)
                for who in (None, "unknown", *TABLE_TOKENS):
                    token = {None: None, "unknown": "unknown-0123456789abcdef"}.get(
                        who, TABLE_TOKENS[who][0] if who in TABLE_TOKENS else None
                    )
                    got = call(channel, method, data, token)
                    if who is None or who == "unknown":
                        expected = "UNAUTHENTICATED"
                    else:
                        _, role, scope = TABLE_TOKENS[who]
                        allowed = RANK[role] >= RANK[NEEDS[method.name]] and (
                            method.name == "ListCollections" or covers(scope, collection)
                        )
                        expected = "allowed" if allowed else "PERMISSION_DENIED"
                    denied = got in ("UNAUTHENTICATED", "PERMISSION_DENIED")
                    if (expected == "allowed" and denied) or (
                        expected != "allowed" and got != expected
                    ):
                        problems.append(f"{method.name} {collection} by {who}: {got}")
                    if method.name == "DropCollection" and got == "OK":
                        admin.create_collection(collection)  # put it back for the next tokens
    assert not problems, problems


def test_list_collections_and_stats_show_a_token_its_own(table_server: Any) -> None:
    for who, visible in (
        ("read alpha", ["alpha"]),
        ("read b*", ["beta"]),
        ("read *", ["alpha", "beta", "default"]),
        ("read-only", ["alpha", "beta", "default"]),
    ):
        with permindex.Client(table_server.address, token=TABLE_TOKENS[who][0]) as client:
            assert [info.name for info in client.list_collections()] == visible, who
    with permindex.Client(table_server.address, token=TABLE_TOKENS["read alpha"][0]) as reader:
        stats = reader.use("alpha").stats()
        assert stats.count == 2 and stats.resident_memory_bytes == 0  # a server-wide figure
        with pytest.raises(ServerError) as denied:
            reader.use("beta").stats()
        assert denied.value.code == "PERMISSION_DENIED"
        assert "'beta'" in str(denied.value) and "read token for alpha" in str(denied.value)
    with permindex.Client(table_server.address, token=ADMIN_TOKEN) as admin:
        assert admin.use("alpha").stats().resident_memory_bytes > 0


def test_write_alpha_token_beside_an_admin(start_server: StartServer, tmp_path: Path) -> None:
    """The issue's figure: ``ADMIN_TOKEN admin`` and ``ALPHA_TOKEN write alpha``."""
    path = tmp_path / "tokens"
    path.write_text(f"{ADMIN_TOKEN} admin\n{ALPHA_TOKEN} write alpha\n")
    server = start_server(token_file=path)
    with permindex.Client(server.address, token=ADMIN_TOKEN) as admin:
        for name in ("alpha", "beta"):
            admin.create_collection(name)
            admin.use(name).add([(f"{name}/{i}", i) for i in range(10)])
    with permindex.Client(server.address, token=ALPHA_TOKEN) as alpha:
        assert sorted(alpha.iter_export(collection="alpha")) == [
            (f"alpha/{i}", i) for i in range(10)
        ]
        with pytest.raises(ServerError) as export:
            list(alpha.iter_export(collection="beta"))
        with pytest.raises(ServerError) as drop:
            alpha.drop_collection("beta")
        assert export.value.code == drop.value.code == "PERMISSION_DENIED"
        assert "DropCollection needs an admin token" in str(drop.value)
        assert [info.name for info in alpha.list_collections()] == ["alpha"]
        alpha.use("alpha").add([("alpha/new", 99)])  # write: allowed on its collection


def _sender(address: str, token: str | None, keys: int) -> subprocess.Popen[str]:
    """A process that sends one Get of ``keys`` empty keys (2 bytes each on the wire) and
    prints the status code name and the seconds until it came."""
    script = (
        "import sys, time, grpc\n"
        "from permindex.v1 import index_pb2 as pb\n"
        f"data = b'\\x0a\\x00' * {keys}\n"
        "channel = grpc.insecure_channel(sys.argv[1], options=[('grpc.max_send_message_length',"
        " -1)])\n"
        "grpc.channel_ready_future(channel).result(timeout=10)\n"
        "print('ready', flush=True)\n"
        "sys.stdin.readline()\n"
        "md = [] if sys.argv[2] == '-' else [('authorization', 'Bearer ' + sys.argv[2])]\n"
        "began = time.perf_counter()\n"
        "try:\n"
        "    channel.unary_unary('/permindex.v1.PermIndex/Get')(data, metadata=md, timeout=60)\n"
        "    print('OK', time.perf_counter() - began, flush=True)\n"
        "except grpc.RpcError as error:\n"
        "    print(error.code().name, time.perf_counter() - began, flush=True)\n"
    )
    process = subprocess.Popen(
        [sys.executable, "-c", script, address, token or "-"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None and process.stdout.readline().strip() == "ready"
    return process


def _query_latencies(address: str, token: str, stop: threading.Event, out: list[float]) -> None:
    """One-fingerprint Queries one after another until ``stop``; each one's seconds."""
    with grpc.insecure_channel(address) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        raw: Any = channel
        query = raw.unary_unary("/permindex.v1.PermIndex/Query")
        data = pb.QueryRequest(fingerprints=[12345]).SerializeToString()
        metadata = (("authorization", f"Bearer {token}"),)
        while not stop.is_set():
            began = time.perf_counter()
            query(data, metadata=metadata, timeout=10)
            out.append(time.perf_counter() - began)
            time.sleep(0.002)


@pytest.fixture
def token_server(tmp_path: Path) -> Iterator[tuple[ServeProcess, str]]:
    path = tmp_path / "tokens"
    path.write_text(f"{ADMIN_TOKEN} admin\n")
    server = ServeProcess(tmp_path / "data", "--token-file", str(path))
    address = server.address(timeout=120)
    assert address is not None, server.text
    with permindex.Client(address, token=ADMIN_TOKEN) as admin:
        admin.add([(f"k{i}", i * 7919) for i in range(1000)])
    yield server, address
    server.kill()


@pytest.mark.parametrize(
    ("token", "senders", "status", "rss_bound"),
    [
        (None, 1, "UNAUTHENTICATED", 64 * MiB),
        ("wrong-token-0123456789abcdef", 1, "UNAUTHENTICATED", 64 * MiB),
        (None, 4, "UNAUTHENTICATED", 64 * MiB),
        (ADMIN_TOKEN, 1, "RESOURCE_EXHAUSTED", 256 * MiB),
    ],
    ids=["no token", "wrong token", "four without a token", "valid token"],
)
def test_a_60_mb_request_stalls_nobody(
    token_server: tuple[ServeProcess, str],
    token: str | None,
    senders: int,
    status: str,
    rss_bound: int,
) -> None:
    """A Get of 30,000,000 empty keys (60 MB, under the 64 MB message limit): without a token
    refused from its metadata, never read; with one, sized from its bytes (over --max-batch)
    and never parsed. Another client's one-fingerprint Queries meanwhile, and the server's
    resident memory."""
    server, address = token_server
    processes = [_sender(address, token, 30_000_000) for _ in range(senders)]
    latencies: list[float] = []
    stop = threading.Event()
    querier = threading.Thread(
        target=_query_latencies, args=(address, ADMIN_TOKEN, stop, latencies)
    )
    querier.start()
    time.sleep(0.3)
    before = status_bytes(server.pid, "VmRSS")
    with RssSampler(server.pid) as rss:
        for process in processes:
            assert process.stdin is not None
            process.stdin.write("go\n")
            process.stdin.flush()
        answers = [process.communicate(timeout=120)[0].split() for process in processes]
        time.sleep(0.3)
    stop.set()
    querier.join(timeout=30)
    assert [answer[0] for answer in answers] == [status] * senders
    seconds = max(float(answer[1]) for answer in answers)
    growth = rss.peak - before
    p99 = nearest_rank(latencies, 99)
    print(
        f"{senders} x 60 MB ({status}): answered in {seconds:.3f} s; server RSS "
        f"+{growth / MiB:.1f} "
        f"MiB; other client's Query p50 {nearest_rank(latencies, 50) * 1e3:.1f} ms, p99 "
        f"{p99 * 1e3:.1f} ms over {len(latencies)}"
    )
    assert growth <= rss_bound
    assert p99 <= 0.050 * 4  # the figure is 50 ms on an idle machine; the suite shares its cores
    if status == "UNAUTHENTICATED" and senders == 1:
        assert seconds < 1.0  # the figure is 100 ms; the server answers from the headers


def test_token_file_reloaded_under_open_connections(
    start_server: StartServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="permindex.rpc.auth")
    newcomer = "newcomer-0123456789abcdef"
    path = tmp_path / "tokens"
    path.write_text(f"{ADMIN_TOKEN} admin\n")
    server = start_server(token_file=path)

    def becomes(check: Any) -> float:
        began = time.monotonic()
        while time.monotonic() - began < 2.0:  # the bound
            if check():
                return time.monotonic() - began
            time.sleep(0.05)
        raise AssertionError("not reloaded within 2 s")

    def code(client: permindex.Client, action: Any) -> str:
        try:
            action(client)
        except ServerError as error:
            return error.code
        return "OK"

    def add(client: permindex.Client) -> Any:
        return client.add([("n", 1)])

    def get(client: permindex.Client) -> Any:
        return client.get("n")

    with (
        permindex.Client(server.address, token=ADMIN_TOKEN) as admin,
        permindex.Client(server.address, token=newcomer) as client,
    ):
        # an Ingest stream of the admin stays open across every reload
        batches: list[Any] = []
        release = threading.Event()

        def documents() -> Iterator[list[tuple[str, int]]]:
            for i in range(4):
                yield [(f"stream/{i}", i)]
                if i < 3:  # the stream ends after its last batch, not 30 s later
                    release.wait(timeout=30)
                    release.clear()

        stream = threading.Thread(
            target=lambda: admin.ingest_batches(documents(), progress=batches.append)
        )
        stream.start()
        assert code(client, get) == "UNAUTHENTICATED"
        path.write_text(f"{ADMIN_TOKEN} admin\n{newcomer} read\n")
        becomes(lambda: code(client, get) in ("OK", "NOT_FOUND"))
        assert code(client, add) == "PERMISSION_DENIED"
        release.set()
        path.write_text(f"{ADMIN_TOKEN} admin\n{newcomer} write\n")
        becomes(lambda: code(client, add) == "OK")
        release.set()
        path.write_text("not a token file\n")  # refused: the tokens in force stay
        time.sleep(4 * RELOAD_SECONDS)
        assert code(client, add) == "OK"
        assert any("not reloaded" in r.getMessage() for r in caplog.records)
        # a role lowered while the newcomer's own stream is open: its next batch is refused
        lowered = threading.Event()
        sent: list[Any] = []

        def newcomer_batches() -> Iterator[list[tuple[str, int]]]:
            yield [("by-newcomer/0", 0)]
            lowered.wait(timeout=30)
            yield [("by-newcomer/1", 1)]

        refused: list[str] = []

        def newcomer_stream() -> None:
            try:
                client.ingest_batches(newcomer_batches(), progress=sent.append)
            except ServerError as error:
                refused.append(error.code)

        writer = threading.Thread(target=newcomer_stream)
        writer.start()
        becomes(lambda: len(sent) == 1)
        path.write_text(f"{ADMIN_TOKEN} admin\n{newcomer} read\n")
        becomes(lambda: code(client, add) == "PERMISSION_DENIED")
        lowered.set()
        writer.join(timeout=30)
        assert refused == ["PERMISSION_DENIED"] and len(sent) == 1
        assert admin.get("by-newcomer/1") is None
        path.write_text(f"{ADMIN_TOKEN} admin\n")  # the newcomer removed
        becomes(lambda: code(client, get) == "UNAUTHENTICATED")
        release.set()
        stream.join(timeout=30)
        assert len(batches) == 4  # the stream was never dropped
        assert admin.get("stream/3") == 3
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert newcomer not in logged and ADMIN_TOKEN not in logged
    assert "refused: UNAUTHENTICATED" in logged and "ipv4:127.0.0.1" in logged


def test_tls_files_reloaded_without_dropping_connections(
    start_server: StartServer, tmp_path: Path
) -> None:
    first, second = make_certificates(tmp_path / "first"), make_certificates(tmp_path / "second")
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    shutil.copy(first.server_cert, cert)
    shutil.copy(first.server_key, key)
    server = start_server(tls_cert=cert, tls_key=key)
    with permindex.Client(server.address, root_certificates=first.ca) as old:
        old.add([("a", 1)])
        shutil.copy(second.server_cert, cert)
        shutil.copy(second.server_key, key)
        began = time.monotonic()
        while True:
            with permindex.Client(
                server.address, root_certificates=second.ca, timeout=2, retries=0
            ) as new:
                try:
                    assert new.get("a") == 1
                    break
                except ServerError:
                    assert time.monotonic() - began < 2.0, "the new certificate was not served"
                    time.sleep(0.1)
        assert old.get("a") == 1  # the connection made before the change still works


def test_check_config(tmp_path: Path) -> None:
    certs = make_certificates(tmp_path / "certs")
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{ADMIN_TOKEN} admin\n{ALPHA_TOKEN} write alpha,beta\n")

    def check(*options: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "permindex", "serve", "--check-config",
             "--data-dir", str(tmp_path / "data"), *options],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip

    done = check("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.server_key),
                 "--token-file", str(tokens))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "configuration OK" in done.stderr and "TLS" in done.stderr and "2 tokens" in done.stderr
    assert not (tmp_path / "data").exists()  # nothing created, loaded or served
    mismatched = check("--tls-cert", str(certs.server_cert), "--tls-key", str(certs.client_key))
    assert mismatched.returncode == 2 and "do not go together" in mismatched.stderr
    tokens.write_text(f"{ADMIN_TOKEN} superuser\n")
    refused = check("--token-file", str(tokens))
    assert refused.returncode == 2 and "line 1" in refused.stderr
    assert ADMIN_TOKEN not in refused.stderr
    exposed = check("--address", "0.0.0.0:0")
    assert exposed.returncode == 2 and "not a loopback address" in exposed.stderr


def test_the_servers_token_file_works_for_a_client(
    start_server: StartServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# tokens of this server\n\n{ALPHA_TOKEN} write default\n")
    server = start_server(token_file=path)
    options = ["--address", server.address, "--token-file", str(path)]
    assert main(["stats", *options]) == 0
    assert main(["collections", "create", "other", *options]) != 0
    assert "PERMISSION_DENIED" in capsys.readouterr().err


def test_health_requests_are_small_and_open(table_server: Any) -> None:
    """The health service needs no token, so it takes only small, valid requests."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(table_server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        raw: Any = channel
        for method in ("Check", "Watch"):
            path = f"/grpc.health.v1.Health/{method}"
            call = raw.unary_unary(path) if method == "Check" else raw.unary_stream(path)
            for data in (b"\x0a" + b"\xff\xff\x03" + b"x" * 65535, b"\x0a\x05ab"):
                with pytest.raises(grpc.RpcError) as refused:
                    answer = call(data, timeout=10)
                    if method == "Watch":
                        list(answer)
                assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        with pytest.raises(grpc.RpcError) as unknown:
            health.Check(health_pb2.HealthCheckRequest(service="x" * 500), timeout=10)
        assert unknown.value.code() == grpc.StatusCode.NOT_FOUND
        assert len(unknown.value.details() or "") < 200  # the name is not echoed whole


def test_a_token_file_is_read_whole_and_an_empty_one_revokes_all(tmp_path: Path) -> None:
    """The reload reads a file only once a change has stood for one look (never one half
    written), and a file with no token refuses every call."""
    path = tmp_path / "tokens"
    path.write_text(f"{ADMIN_TOKEN} admin\n")
    tokens = TokenFile(path)
    admin, alpha = ADMIN_TOKEN.encode(), ALPHA_TOKEN.encode()
    path.write_text(f"{ADMIN_TOKEN} admin\n{ALPHA_TOKEN} write")  # half written: no scope yet
    assert not tokens.reload_if_changed()  # a change: it waits for it to settle
    path.write_text(f"{ADMIN_TOKEN} admin\n{ALPHA_TOKEN} write alpha\n")
    assert not tokens.reload_if_changed()  # changed again: waits again
    assert tokens.find(alpha) is None  # the half-written file was never in force
    assert tokens.reload_if_changed()
    found = tokens.find(alpha)
    assert found is not None and found.collections == ("alpha",)
    path.write_text("# every token revoked\n")
    tokens.reload_if_changed()
    assert tokens.reload_if_changed()
    assert tokens.find(admin) is None and tokens.find(alpha) is None
    path.write_text(f"{ADMIN_TOKEN} admin\n")
    tokens.reload_if_changed()
    tokens.reload_if_changed()
    path.unlink()  # a missing file keeps what is in force
    tokens.reload_if_changed()
    assert not tokens.reload_if_changed()
    assert tokens.find(admin) is not None
