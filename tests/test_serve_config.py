"""serve options from a TOML file and PERMINDEX_* environment variables: precedence (flags >
environment > file > defaults), checked values, and a real server started from a file."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import pytest
from certs import make_certificates
from serverproc import LOADING_NOTICE

import permindex.rpc.server as server_module
from permindex.cli import build_parser, main
from permindex.cli.serve import (
    CONFIG_OPTION,
    SERVE_OPTIONS,
    ConfigError,
    ServeLogging,
    apply_defaults,
)
from permindex.rpc.config import Option, ServerConfig, declared_options


def serve_args(argv: list[str], config: Path | None, environ: dict[str, str]) -> Any:
    parser = build_parser()
    args = parser.parse_args(["serve", *argv])
    apply_defaults(args.parser, None if config is None else str(config), environ)
    return parser.parse_args(["serve", *argv])


def test_precedence_flags_environment_file_defaults(tmp_path: Path) -> None:
    config = tmp_path / "permindex.toml"
    config.write_text(
        '[serve]\naddress = "127.0.0.1:7000"\nmax-batch = 500\nworkers = 3\n'
        'fsync = "interval"\ninsecure = true\n'
    )
    defaults = serve_args([], None, {})
    assert (defaults.address, defaults.max_batch, defaults.workers) == (
        "127.0.0.1:50051",
        100_000,
        4,
    )
    from_file = serve_args([], config, {})
    assert (from_file.address, from_file.max_batch, from_file.workers) == ("127.0.0.1:7000", 500, 3)
    assert from_file.fsync == "interval" and from_file.insecure is True
    environ = {"PERMINDEX_MAX_BATCH": "700", "PERMINDEX_INSECURE": "0", "PERMINDEX_K": "2"}
    from_env = serve_args([], config, environ)
    assert (from_env.max_batch, from_env.insecure, from_env.k, from_env.workers) == (
        700,
        False,
        2,
        3,
    )
    flags = serve_args(["--max-batch", "900", "--workers", "5"], config, environ)
    assert (flags.max_batch, flags.workers, flags.address) == (900, 5, "127.0.0.1:7000")


@pytest.mark.parametrize(
    ("content", "environ", "fragment"),
    [
        ("max_btach = 5\n", {}, "unknown option 'max_btach'"),
        ("max_batch = 0\n", {}, "--max-batch"),
        ('fsync = "sometimes"\n', {}, "choose from"),
        ('insecure = "maybe"\n', {}, "switch"),
        ("max_batch = [1]\n", {}, "takes a value"),
        ("not toml = = 1\n", {}, "not valid TOML"),
        ("", {"PERMINDEX_WORKERS": "many"}, "environment PERMINDEX_WORKERS"),
    ],
)
def test_bad_values_name_their_source(
    tmp_path: Path, content: str, environ: dict[str, str], fragment: str
) -> None:
    config = tmp_path / "bad.toml"
    config.write_text(content)
    with pytest.raises(ConfigError, match=fragment):
        serve_args([], config, environ)


def test_serve_exits_2_on_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("nope = 1\n")
    assert main(["serve", "--config", str(config)]) == 2
    assert "unknown option 'nope'" in capsys.readouterr().err
    assert main(["serve", "--config", str(tmp_path / "missing.toml")]) == 2


def test_help_lists_every_option_with_its_variable_and_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    for name, default in (
        ("PERMINDEX_DATA_DIR", "permindex-data"),
        ("PERMINDEX_MAX_CONCURRENT_RPCS", "256"),
        ("PERMINDEX_MAX_STREAMS_PER_ADDRESS", "256"),
        ("PERMINDEX_KEEPALIVE_TIMEOUT_SECONDS", "20.0"),
        ("PERMINDEX_METRICS_ADDRESS", "off"),
        ("PERMINDEX_MIN_WORDS", "0"),
    ):
        line = next(line for line in out.splitlines() if name in line)
        assert line.split()[-1] == default
    assert "flags > environment > file > defaults" in out


def test_a_real_server_from_file_and_environment(tmp_path: Path) -> None:
    config = tmp_path / "permindex.toml"
    config.write_text('address = "127.0.0.1:0"\nsnapshot_interval = 0\n')
    environ = dict(os.environ, PERMINDEX_DATA_DIR=str(tmp_path / "from-env"))
    environ.pop("PERMINDEX_CONFIG", None)
    with subprocess.Popen(
        [sys.executable, "-m", "permindex", "serve", "--config", str(config)],
        env=environ,
        stderr=subprocess.PIPE,
        text=True,
    ) as process:
        try:
            assert process.stderr is not None
            line = process.stderr.readline()
            if LOADING_NOTICE in line:  # loading the kernels took over a second (a busy machine)
                line = process.stderr.readline()
            assert "serving on 127.0.0.1:" in line and str(tmp_path / "from-env") in line
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    assert process.returncode == 0


# --- every option from its one declaration ---------------------------------------------------

#: A value other than the default for every serve option, by TOML key. An option added to
#: ServerConfig or ServeLogging without an entry here fails test_samples_cover_every_option.
SAMPLES = {
    "address": "127.0.0.1:7001",
    "data_dir": "elsewhere",
    "k": "2",
    "expire_after": "30d",
    "snapshot_interval": "5",
    "max_message_mb": "2",
    "max_batch": "9",
    "shingle_size": "4",
    "min_words": "20",
    "vote": "set",
    "grace_seconds": "1.5",
    "workers": "3",
    "event_loop": "asyncio",
    "fsync": "never",
    "fsync_interval": "0.5",
    "truncate_corrupt_log": "true",
    "tls_cert": "cert.pem",
    "tls_key": "key.pem",
    "tls_client_ca": "ca.pem",
    "token_file": "tokens",
    "insecure": "true",
    "max_key_bytes": "100",
    "max_text_bytes": "77",
    "max_concurrent_rpcs": "5",
    "max_streams": "7",
    "max_streams_per_address": "6",
    "max_connections": "50",
    "stream_idle_seconds": "2.5",
    "keepalive_seconds": "30",
    "keepalive_timeout_seconds": "5",
    "max_memory": "2GiB",
    "max_join_work": "1000",
    "metrics_address": "127.0.0.1:9464",
    "metrics_hide_collections": "true",
    "log_format": "json",
    "log_level": "info",
}


def toml_value(option: Option, text: str) -> str:
    """``text`` as the value of ``option`` in TOML: a number unquoted for a numeric option (a
    quoted one is refused), any other value as a string."""
    numeric = isinstance(option.default, int | float) and not isinstance(option.default, bool)
    return text if numeric else json.dumps(text)


def expected(option: Option) -> Any:
    text = SAMPLES[option.key]
    if option.is_switch:
        return True
    return text if option.parse is None else option.parse(text)


def test_samples_cover_every_option() -> None:
    assert [option.key for option in SERVE_OPTIONS] == list(SAMPLES)
    server = [option.dest for option in declared_options(ServerConfig)]
    assert server == [item.name for item in fields(ServerConfig)]
    assert [option.dest for option in SERVE_OPTIONS] == [
        *server,
        *(item.name for item in fields(ServeLogging)),
    ]


@pytest.mark.parametrize("option", SERVE_OPTIONS, ids=lambda option: option.key)
def test_every_option_by_flag_environment_and_file(tmp_path: Path, option: Option) -> None:
    value = expected(option)
    assert value != option.default
    text = SAMPLES[option.key]
    flag = [option.flag] if option.is_switch else [option.flag, text]
    assert getattr(serve_args(flag, None, {}), option.dest) == value
    environ = {option.env: "1" if option.is_switch else text}
    assert option.env == "PERMINDEX_" + option.key.upper()
    assert getattr(serve_args([], None, environ), option.dest) == value
    for key in (option.key, option.name):  # `max_batch` or `max-batch`
        config = tmp_path / "permindex.toml"
        config.write_text(f"{key} = {'true' if option.is_switch else toml_value(option, text)}\n")
        assert getattr(serve_args([], config, {}), option.dest) == value
    assert getattr(serve_args([], None, {}), option.dest) == option.default


def test_the_server_config_holds_every_declared_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "permindex.toml"
    config.write_text(
        "".join(
            f"{option.key} = {toml_value(option, SAMPLES[option.key])}\n"
            for option in declared_options(ServerConfig)
        )
    )
    started: list[ServerConfig] = []

    def run_server(made: ServerConfig) -> int:
        started.append(made)
        return 0

    monkeypatch.setattr(server_module, "run_server", run_server)
    monkeypatch.chdir(tmp_path)  # serve reads the token file before it starts
    (tmp_path / SAMPLES["token_file"]).write_text("0123456789abcdef0123 read-write\n")
    # serve checks its TLS files before it starts (the key must match the certificate)
    made = make_certificates(tmp_path / "certs")
    shutil.copy(made.server_cert, tmp_path / SAMPLES["tls_cert"])
    shutil.copy(made.server_key, tmp_path / SAMPLES["tls_key"])
    shutil.copy(made.ca, tmp_path / SAMPLES["tls_client_ca"])
    monkeypatch.delenv("PERMINDEX_CONFIG", raising=False)
    monkeypatch.setenv("MALLOC_ARENA_MAX", "8")  # leave this process's malloc as it is
    assert main(["serve", "--config", str(config)]) == 0
    assert started == [
        ServerConfig(**{option.dest: expected(option) for option in declared_options(ServerConfig)})
    ]
    assert started[0].max_message_bytes == 2 * 1024 * 1024
    assert started[0].data_dir == Path("elsewhere")


def test_help_table_lists_every_declared_option(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--help"]) == 0
    out = capsys.readouterr().out
    for option in SERVE_OPTIONS:
        assert [option.flag, option.env] in [line.split()[:2] for line in out.splitlines()]
    flat = " ".join(out.split())
    for option in (*SERVE_OPTIONS, CONFIG_OPTION):
        assert " ".join(option.help.split()) in flat


@pytest.mark.parametrize(
    ("content", "environ", "message"),
    [
        ("max-batchh = 5\n", {}, "{config}: unknown option 'max-batchh' (known: address, "),
        ("", {"PERMINDEX_K": "x"}, "environment PERMINDEX_K: --k 'x': not an integer: 'x'"),
        (
            "",
            {"PERMINDEX_MAX_MESSAGE_MB": "4096"},
            "environment PERMINDEX_MAX_MESSAGE_MB: --max-message-mb '4096': must be more than 0 "
            "and at most 2047 MiB, got 4096",
        ),
        ("", {"PERMINDEX_INSECURE": "2"}, "environment PERMINDEX_INSECURE: --insecure is a switch"),
    ],
)
def test_misspelled_key_and_bad_environment_value_exit_2_naming_the_source(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    content: str,
    environ: dict[str, str],
    message: str,
) -> None:
    config = tmp_path / "permindex.toml"
    config.write_text(content)
    monkeypatch.delenv("PERMINDEX_CONFIG", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)
    assert main(["serve", "--config", str(config)]) == 2
    assert capsys.readouterr().err.startswith("permindex serve: " + message.format(config=config))


def test_a_field_without_a_declaration_is_refused() -> None:
    @dataclass(frozen=True)
    class Undeclared:
        workers: int = 8

    with pytest.raises(TypeError, match="not declared"):
        declared_options(Undeclared)


def test_the_config_module_imports_no_grpc_argparse_or_cli() -> None:
    code = "import sys, permindex.rpc.config; print(' '.join(sorted(sys.modules)))"
    modules = subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True
    ).stdout.split()
    assert not [
        name
        for name in modules
        if name.split(".")[0] in {"grpc", "argparse"} or name.startswith("permindex.cli")
    ]
