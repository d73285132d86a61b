"""TLS (with generated test certificates), bearer tokens (right, wrong, missing, read-only),
the refusal of an exposed address without TLS and tokens, and logs free of keys at INFO; real
servers on 127.0.0.1 (port 0)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import grpc
import pytest
from certs import Certificates, make_certificates
from conftest import StartServer, server_config
from grpc_health.v1 import health_pb2, health_pb2_grpc

import permindex
from permindex.cli import main
from permindex.errors import InvalidArgumentError, ServerError
from permindex.rpc.auth import exposure_problem, is_loopback, load_tokens
from permindex.rpc.server import create_server

RW_TOKEN = "rw-0123456789abcdef0123"
RO_TOKEN = "ro-0123456789abcdef0123"


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Certificates:
    return make_certificates(tmp_path_factory.mktemp("certs"))


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "tokens"
    path.write_text(f"# tokens\n{RW_TOKEN} read-write\n\n{RO_TOKEN}   read-only\n")
    return path


def test_tls_round_trip_and_plaintext_refused(
    start_server: StartServer, certificates: Certificates
) -> None:
    server = start_server(tls_cert=certificates.server_cert, tls_key=certificates.server_key)
    with permindex.Client(server.address, root_certificates=certificates.ca) as client:
        client.add([("a", 5)])
        assert client.get("a") == 5
    with permindex.Client(server.address, timeout=3, retries=0) as plain:
        with pytest.raises(ServerError) as refused:
            plain.stats()
        assert refused.value.code == "UNAVAILABLE"
        assert "the server serves TLS and this client connects in plaintext" in str(refused.value)
        assert "--tls-ca" in str(refused.value) and "root_certificates=" in str(refused.value)
    plain_server = start_server(data_dir=server.config.data_dir.parent / "plain")
    with permindex.Client(
        plain_server.address, root_certificates=certificates.ca, timeout=3, retries=0
    ) as tls_client:
        with pytest.raises(ServerError) as mismatch:
            tls_client.stats()
        assert "the server does not serve TLS" in str(mismatch.value)
        assert "leave out --tls-ca" in str(mismatch.value)
    with permindex.Client(
        server.address, root_certificates=certificates.other_ca, timeout=3, retries=0
    ) as untrusting:
        with pytest.raises(ServerError):
            untrusting.stats()


def test_client_certificates_required(
    start_server: StartServer, certificates: Certificates
) -> None:
    server = start_server(
        tls_cert=certificates.server_cert,
        tls_key=certificates.server_key,
        tls_client_ca=certificates.ca,
    )
    with permindex.Client(
        server.address, root_certificates=certificates.ca, timeout=3, retries=0
    ) as anonymous:
        with pytest.raises(ServerError):
            anonymous.stats()
    with permindex.Client(
        server.address,
        root_certificates=certificates.ca,
        certificate_chain=certificates.client_cert,
        private_key=certificates.client_key,
    ) as client:
        assert client.stats().count == 0


def test_tokens_right_wrong_missing_and_read_only(
    start_server: StartServer, token_file: Path
) -> None:
    server = start_server(token_file=token_file)
    with permindex.Client(server.address) as nobody:
        with pytest.raises(PermissionError) as missing:
            nobody.query(1)
        assert isinstance(missing.value, ServerError)
        assert missing.value.code == "UNAUTHENTICATED"
        with pytest.raises(ServerError) as missing_write:
            nobody.add([("a", 1)])
        assert missing_write.value.code == "UNAUTHENTICATED"
    with permindex.Client(server.address, token=RW_TOKEN[:-1] + "X") as wrong:
        with pytest.raises(ServerError) as refused:
            wrong.stats()
        assert refused.value.code == "UNAUTHENTICATED"
    with permindex.Client(server.address, token=RW_TOKEN) as writer:
        writer.add([("a", 1)])
        writer.ingest([("b", 2), ("c", 3)])
    with permindex.Client(server.address, token=RO_TOKEN) as reader:
        assert reader.get("a") == 1
        assert [m.key for m in reader.query(1)] == ["a", "c", "b"]
        assert reader.stats().count == 3
        assert reader.pairs() != []
        for write in (
            lambda: reader.add([("d", 4)]),
            lambda: reader.ingest([("d", 4)]),
            lambda: reader.check_and_add("d", 4),
            lambda: reader.remove("a"),
            lambda: reader.snapshot(),
        ):
            with pytest.raises(ServerError) as denied:
                write()
            assert denied.value.code == "PERMISSION_DENIED"
        assert reader.get("d") is None and reader.get("a") == 1
    # health checking needs no token
    with grpc.insecure_channel(server.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING


def test_cli_token_and_tls_options(
    start_server: StartServer,
    certificates: Certificates,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    server = start_server(
        tls_cert=certificates.server_cert, tls_key=certificates.server_key, token_file=token_file
    )
    tls = ["--address", server.address, "--tls-ca", str(certificates.ca)]
    assert main(["stats", *tls]) == 4  # no token: refused (UNAUTHENTICATED)
    assert "UNAUTHENTICATED" in capsys.readouterr().err
    rw = tmp_path / "rw"
    rw.write_text(RW_TOKEN + "\n")
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "x", "fingerprint": 7}\n')
    assert main(["ingest", str(source), "--no-progress", *tls, "--token-file", str(rw)]) == 0
    monkeypatch.setenv("PERMINDEX_TOKEN", RO_TOKEN)
    capsys.readouterr()
    assert main(["get", "x", *tls]) == 0
    assert "0000000000000007" in capsys.readouterr().out
    assert main(["remove", "x", *tls]) != 0
    assert "PERMISSION_DENIED" in capsys.readouterr().err


def test_load_tokens_refuses_malformed_files(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    for content, fragment in (
        ("short read-write\n", "16 characters"),
        (f"{RW_TOKEN} superuser\n", "line 1"),
        (f"{RW_TOKEN} read alpha,,beta\n", "empty name"),
        (f"# comment\n{RW_TOKEN}\n", "line 2"),
        ("# nothing\n\n", "no token"),
    ):
        path.write_text(content)
        with pytest.raises(InvalidArgumentError, match=fragment) as refused:
            load_tokens(path)
        assert RW_TOKEN not in str(refused.value)
    path.write_text(f"{RW_TOKEN} read-write\n{RO_TOKEN} read-only alpha,b*\n")
    assert [(t.role, t.collections) for t in load_tokens(path)] == [
        ("admin", ("*",)),
        ("read", ("alpha", "b*")),
    ]


def test_exposed_address_needs_tls_and_tokens_or_insecure(
    tmp_path: Path,
    certificates: Certificates,
    token_file: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("[::1]") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("example.com")
    exposed = server_config(tmp_path / "data", address="0.0.0.0:0")
    problem = exposure_problem(exposed)
    assert problem is not None and "TLS" in problem and "tokens" in problem
    with pytest.raises(InvalidArgumentError, match="--insecure"):
        create_server(exposed)
    assert not (tmp_path / "data").exists()  # refused before anything was created
    secured = server_config(
        tmp_path / "data",
        address="0.0.0.0:0",
        tls_cert=certificates.server_cert,
        tls_key=certificates.server_key,
        token_file=token_file,
    )
    assert exposure_problem(secured) is None
    caplog.set_level(logging.WARNING, logger="permindex")
    running = create_server(server_config(tmp_path / "data", address="0.0.0.0:0", insecure=True))
    try:
        assert any("insecure" in r.getMessage() for r in caplog.records)
    finally:
        running.stop(grace=0)


def test_serve_refuses_an_exposed_address_with_exit_2(tmp_path: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "permindex",
            "serve",
            "--address",
            "0.0.0.0:0",
            "--data-dir",
            str(tmp_path / "data"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "refusing to start" in done.stderr and "--insecure" in done.stderr


def test_keys_and_texts_are_not_logged_at_info(
    start_server: StartServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    server = start_server(max_batch=2)
    secret_key = "https://secret.example/page"
    secret_text = "confidential words that must not reach the log file"
    with permindex.Client(server.address) as client:
        client.add([(secret_key, secret_text)])
        client.query(1)
        client.check_and_add(secret_key + "2", secret_text)
        with pytest.raises(ServerError):
            client.add([(secret_key, secret_text)] * 3)
        client.snapshot()
    logged = "\n".join(r.getMessage() for r in caplog.records if r.levelno >= logging.INFO)
    assert "secret" not in logged and "confidential" not in logged


def test_bench_with_tls_token_and_collection(
    start_server: StartServer, certificates: Certificates, token_file: Path, tmp_path: Path
) -> None:
    server = start_server(
        tls_cert=certificates.server_cert, tls_key=certificates.server_key, token_file=token_file
    )
    with permindex.Client(server.address, root_certificates=certificates.ca, token=RW_TOKEN) as c:
        c.create_collection("bench")
    rw = tmp_path / "rw"
    rw.write_text(RW_TOKEN + "\n")
    out = tmp_path / "bench.json"
    code = main(
        [
            "bench", "--address", server.address, "--tls-ca", str(certificates.ca),
            "--token-file", str(rw), "--collection", "bench", "--clients", "1",
            "--duration", "0.5", "--preload", "50", "--mix", "query=1,add=1",
            "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    with permindex.Client(server.address, root_certificates=certificates.ca, token=RW_TOKEN) as c:
        assert c.use("bench").stats().count > 0
        assert c.stats().count == 0  # nothing went to the default collection
