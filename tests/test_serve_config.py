"""serve options from a TOML file and PERMINDEX_* environment variables: precedence (flags >
environment > file > defaults), checked values, and a real server started from a file."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from permindex.cli import build_parser, main
from permindex.cli.serve import ConfigError, apply_defaults


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
        8,
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
        ("PERMINDEX_MAX_CONCURRENT_RPCS", "64"),
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
            assert "serving on 127.0.0.1:" in line and str(tmp_path / "from-env") in line
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(timeout=60)
    assert process.returncode == 0
