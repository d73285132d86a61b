"""The command line's rough edges of issue 12, each run as a new user would: the installed
``permindex`` command in a subprocess, its exit code and the message on stderr checked. The
server, where one is needed, is a real one on 127.0.0.1 (port 0) in this process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from serverproc import without_loading_notice

from permindex.errors import EXIT_CODES

if TYPE_CHECKING:
    from permindex.rpc.server import RunningServer

REPO = Path(__file__).resolve().parent.parent
OK, ERROR, USAGE = EXIT_CODES["ok"], EXIT_CODES["error"], EXIT_CODES["usage"]
INVALID, DATA = EXIT_CODES["invalid"], EXIT_CODES["data"]
_SCRIPT = Path(sys.executable).parent / "permindex"
#: The installed console script, as a user runs it (``python -m permindex`` where there is none).
PERMINDEX = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "permindex"]
TOKEN = "0123456789abcdef0123"


def permindex(
    *argv: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> tuple[int, str, str]:
    """Run ``permindex ARGV...`` to its end (at most 60 s): (exit code, stdout, stderr)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("PERMINDEX_")}
    done = subprocess.run(
        [*PERMINDEX, *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd or REPO,
        stdin=subprocess.DEVNULL,
        env={**environ, **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr


def one_line(err: str) -> str:
    """The error line of stderr (after argparse's usage lines, if any)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    return lines[-1]


# --- --address ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "words"),
    [
        ("127.0.0.1:70000", "has port 70000, above 65535"),
        ("127.0.0.1", "'127.0.0.1' has no port"),
        ("localhost", "'localhost' has no port"),
        ("localhost:", "'localhost:' has no port"),
        ("127.0.0.1:http", "has port 'http', not a number"),
        (":50051", "has no host"),
        ("::1:50051", "IPv6 host without brackets"),
        ("[::1]", "'[::1]' has no port"),
    ],
)
def test_a_bad_address_exits_2_naming_it(address: str, words: str) -> None:
    code, out, err = permindex("stats", "--address", address)
    assert (code, out) == (USAGE, "")
    line = one_line(err)
    assert line.startswith("permindex stats: error: argument --address: address ")
    assert words in line
    assert "443" not in err  # never the silent default port of gRPC


@pytest.mark.parametrize("command", [["pairs"], ["get", "k"], ["bench"], ["serve"]])
def test_every_command_checks_its_address(command: list[str]) -> None:
    address, words = "localhost:65536", "has port 65536, above 65535"
    extra = ["--data-dir", "/nonexistent/x"] if command == ["serve"] else []
    code, out, err = permindex(*command, "--address", address, *extra)
    assert (code, out) == (USAGE, "")
    line = one_line(err)
    assert line.startswith(f"permindex {command[0]}: error: argument --address: address ")
    assert words in line
    assert "443" not in err  # never the silent default port of gRPC


def test_options_before_the_command_are_told_to_go_after_it() -> None:
    code, out, err = permindex("--address", "127.0.0.1:1", "stats", "--json")
    assert (code, out) == (USAGE, "")
    assert one_line(err) == (
        "permindex: error: options go after the command: write "
        "`permindex stats --json --address 127.0.0.1:1` (--address came before stats)"
    )
    code, out, err = permindex("--address", "127.0.0.1:1")
    assert (code, out) == (USAGE, "")
    assert "--address: options go after the command" in one_line(err)
    # --help and --version still work before any command
    assert permindex("--version")[0] == OK


# --- serve: checked before it starts ---------------------------------------------------------


def test_serve_k_above_the_design_exits_2_in_one_sentence(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, out, err = permindex(
        "serve", "--address", "127.0.0.1:0", "--data-dir", str(data), "--k", "10"
    )
    assert (code, out) == (USAGE, "")
    line = one_line(err)
    assert line == (
        "permindex serve: error: --k 10 is above 3, the largest k the server's design "
        "(4 blocks, 1 leading) guarantees: serve with --k 3 or less (a collection of another "
        "design answers k=10: `permindex collections create NAME --k 10 --blocks 12 "
        "--leading 2`)"
    )
    assert "serving on" not in err
    assert not data.exists()  # refused before anything was opened
    code, _out, err = permindex("serve", "--data-dir", str(data), "--k", "64")
    assert code == USAGE and "no design answers k=64" in one_line(err)
    assert not data.exists()


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ("short read-write\n", "line 1: a token needs at least 16 characters"),
        (f"{TOKEN} superuser\n", "line 1: expected `TOKEN ROLE [COLLECTIONS]`"),
        ("# only a comment\n", "no token"),
        (None, "cannot read it: No such file or directory"),
    ],
)
def test_serve_bad_token_file_exits_2(tmp_path: Path, content: str | None, words: str) -> None:
    tokens = tmp_path / "tokens"
    if content is not None:
        tokens.write_text(content)
    data = tmp_path / "data"
    code, out, err = permindex(
        "serve", "--address", "127.0.0.1:0", "--data-dir", str(data), "--token-file", str(tokens)
    )
    assert (code, out) == (USAGE, "")
    line = one_line(err)
    assert line.startswith("permindex serve: error: --token-file")
    assert str(tokens) in line and words in line
    assert "short" not in line  # the token itself is never quoted
    assert not data.exists()


def test_serve_data_dir_that_is_a_file_exits_7(tmp_path: Path) -> None:
    a_file = tmp_path / "hostname"
    a_file.write_text("not a folder\n")
    for data_dir, words in (
        (a_file, f"data directory {a_file} exists and is not a directory"),
        (a_file / "below", f"data directory {a_file / 'below'} cannot be used"),
    ):
        code, out, err = permindex("serve", "--address", "127.0.0.1:0", "--data-dir", str(data_dir))
        assert (code, out) == (DATA, ""), err
        assert words in one_line(err)
        assert "Traceback" not in err and "serving on" not in err


def test_serve_data_dir_that_cannot_be_opened_exits_7(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "LOCK").mkdir(parents=True)  # the lock file cannot be opened (even by root)
    code, out, err = permindex("serve", "--address", "127.0.0.1:0", "--data-dir", str(data))
    assert (code, out) == (DATA, "")
    assert f"data directory {data} cannot be used: {data / 'LOCK'}: Is a directory" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root opens files whatever their mode")
def test_serve_unreadable_data_dir_exits_7(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    data.chmod(0)
    try:
        code, out, err = permindex("serve", "--address", "127.0.0.1:0", "--data-dir", str(data))
    finally:
        data.chmod(0o700)
    assert (code, out) == (DATA, "")
    assert f"data directory {data} cannot be used" in err and "Permission denied" in err


def test_serve_config_values_of_the_wrong_kind_and_unknown_variables_exit_2(
    tmp_path: Path,
) -> None:
    config = tmp_path / "permindex.toml"
    data = str(tmp_path / "data")
    config.write_text('k = "3"\n')
    code, _out, err = permindex("serve", "--config", str(config), "--data-dir", data)
    assert code == USAGE
    assert one_line(err) == (
        f"permindex serve: {config}: k: --k takes a number, not the string '3' "
        "(write k = 3 without quotes)"
    )
    config.write_text("data_dir = 5\n")
    code, _out, err = permindex("serve", "--config", str(config))
    assert code == USAGE and "--data-dir takes a string, not the number 5" in one_line(err)
    code, _out, err = permindex("serve", "--data-dir", data, env={"PERMINDEX_BOGUS": "1"})
    assert code == USAGE
    assert one_line(err).startswith("permindex serve: environment PERMINDEX_BOGUS: unknown")
    code, _out, err = permindex("serve", "--data-dir", data, env={"PERMINDEX_WORKER": "2"})
    assert code == USAGE and "did you mean PERMINDEX_WORKERS?" in one_line(err)
    assert not Path(data).exists()


# --- one fingerprint rule ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("123", "fingerprint '123' has 3 digits, not 16, and no 0x (if it is decimal, write 0x7b)"),
        ("18446744073709551615", "has 20 hex digits, more than 64 bits"),
        ("0x", "fingerprint '0x' is not hex"),
        ("0x" + "f" * 17, "has 17 hex digits"),
        ("-1", "fingerprint '-1' is not hex"),
        ("12345678901234zz", "is not hex"),
    ],
)
def test_query_fingerprint_not_hex_exits_4_naming_it(value: str, words: str) -> None:
    code, out, err = permindex("query", "--fingerprint", value, "--address", "127.0.0.1:1")
    assert (code, out) == (INVALID, "")  # refused before any connection
    line = one_line(err)
    assert line.startswith("permindex query: ") and words in line
    assert "16 hex digits or 0x and 1 to 16" in line


def test_query_help_states_the_rule() -> None:
    code, out, _err = permindex("query", "--help")
    assert code == OK
    assert "exactly 16 hex digits, or 0x and 1 to 16 hex" in out


def test_one_rule_for_the_command_line_and_jsonl(tmp_path: Path, server: RunningServer) -> None:
    addr = ("--address", server.address)
    rows = [
        {"id": "number", "fingerprint": 1234567890123456},  # a JSON number: its value
        {"id": "hex16", "fingerprint": "1234567890123456"},  # a string: hex
        {"id": "0x", "fingerprint": "0x7b"},
    ]
    path = tmp_path / "fp.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert permindex("ingest", str(path), "--no-progress", *addr)[0] == OK
    code, out, _err = permindex("get", "number", "hex16", "0x", *addr)
    assert code == OK
    assert out == (
        f"number\t{1234567890123456:016x}\nhex16\t1234567890123456\n0x\t000000000000007b\n"
    )
    # the same string on the command line is the same hex value
    code, out, _err = permindex("query", "--fingerprint", "1234567890123456", "--k", "0", *addr)
    assert (code, out) == (OK, "hex16\t1234567890123456\t0\n")
    code, out, _err = permindex("query", "--fingerprint", "0x7B", "--k", "0", *addr)
    assert (code, out) == (OK, "0x\t000000000000007b\t0\n")


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ('{"id": "b", "fingerprint": "123"}', "fingerprint '123' has 3 digits, not 16, and no 0x"),
        ('{"id": "b", "fingerprint": 1.5}', "fingerprint 1.5 is not an integer or a hex string"),
        ('{"id": "b", "fingerprint": -1}', "fingerprint -1 is outside [0, 2**64)"),
        ('{"id": 17, "fingerprint": 5}', '"id" must be a string (a key), not 17 (write "17")'),
        ('{"id": 17, "text": "one two three"}', '"id" must be a string (a key), not 17'),
        ('{"id": "b", "text": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
    ],
)
def test_a_bad_jsonl_line_exits_4_naming_the_value_and_the_line(
    tmp_path: Path, server: RunningServer, line: str, words: str
) -> None:
    # ingest for every line; import (the same reader) for the key and the fingerprint rule
    command = "import" if line.startswith('{"id": 17, "f') or "1.5" in line else "ingest"
    path = tmp_path / "in.jsonl"
    path.write_text('{"id": "a", "fingerprint": 5}\n' + line + "\n")
    code, out, err = permindex(command, str(path), "--address", server.address)
    assert (code, out) == (INVALID, ""), err
    message = one_line(err)
    assert message.startswith(f"permindex {command}: {path}, line 2: ")
    assert words in message
    assert "Traceback" not in err and "RecursionError" not in err


@pytest.mark.parametrize(
    ("arguments", "option", "bound"),
    [
        (
            ["fingerprint", "--shingle-size", "99999999999999999999", "a b c d"],
            "--shingle-size",
            "1,024",
        ),
        (["fingerprint", "--shingle-size", "1025", "a b c d"], "--shingle-size", "1,024"),
        (["query", "--text", "a b c", "--shingle-size", "4294967296"], "--shingle-size", "1,024"),
        (["dedup", "-", "--shingle-size", "2000"], "--shingle-size", "1,024"),
        (["dedup", "-", "--min-words", "99999999999999999999"], "--min-words", "1,000,000"),
        (["ingest", "-", "--min-words", "1000001"], "--min-words", "1,000,000"),
        (["collections", "create", "c", "--shingle-size", "4294967296"], "--shingle-size", "1,024"),
        (["serve", "--shingle-size", "4294967296"], "--shingle-size", "1,024"),
        (["serve", "--min-words", "1000001"], "--min-words", "1,000,000"),
    ],
)
def test_text_options_have_an_upper_bound(
    tmp_path: Path, arguments: list[str], option: str, bound: str
) -> None:
    """--shingle-size above 1,024 and --min-words above 10^6 are usage errors (exit 2, one
    line naming the option and its bound), before anything is read, sent or opened."""
    extra = ["--data-dir", str(tmp_path / "data")] if arguments[0] == "serve" else []
    extra += ["--address", "127.0.0.1:1"] if arguments[0] not in ("fingerprint", "dedup") else []
    code, out, err = permindex(*arguments, *extra)
    assert (code, out) == (USAGE, ""), err
    assert f"argument {option}: must be at most {bound}, got " in err
    assert "Traceback" not in err and not (tmp_path / "data").exists()


# --- export, pipes, counts -----------------------------------------------------------------


def test_export_into_a_missing_folder_exits_4(tmp_path: Path) -> None:
    target = tmp_path / "missing" / "backup.jsonl"
    code, out, err = permindex("export", "--out", str(target), "--address", "127.0.0.1:1")
    assert (code, out) == (INVALID, "")  # refused before the server is asked
    assert one_line(err) == (
        f"permindex export: --out {target}: cannot write {target}.partial: "
        "No such file or directory"
    )
    code, _out, err = permindex("export", "--out", str(tmp_path), "--address", "127.0.0.1:1")
    assert code == INVALID and f"--out {tmp_path} is a folder" in one_line(err)
    assert list(tmp_path.iterdir()) == []


def test_export_writes_through_a_link_and_refuses_fifos(
    tmp_path: Path, server: RunningServer
) -> None:
    """export --out renames FILE.partial onto FILE: through a symbolic link it replaces the file
    the link names (the link stays); a FIFO (or a link to one, as /dev/stdout may be) is
    refused with exit 4 before the server is asked, and stays a FIFO."""
    work = tmp_path / "out"  # tmp_path also holds the server's data folder
    work.mkdir()
    rows = work / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"k{i}", "fingerprint": i}) + "\n" for i in range(3)))
    assert permindex("ingest", str(rows), "--address", server.address)[0] == OK
    backup = work / "backup.jsonl"
    backup.write_text("old\n")
    link = work / "latest.jsonl"
    link.symlink_to(backup)
    code, _out, err = permindex("export", "--out", str(link), "--address", server.address)
    assert code == OK, err
    assert link.is_symlink() and os.readlink(link) == str(backup)
    assert sorted(json.loads(line)["id"] for line in backup.read_text().splitlines()) == [
        "k0",
        "k1",
        "k2",
    ]
    assert sorted(path.name for path in work.iterdir()) == [
        "backup.jsonl",
        "latest.jsonl",
        "rows.jsonl",
    ]
    fifo = work / "fifo"
    os.mkfifo(fifo)
    (work / "to-fifo").symlink_to(fifo)
    for out in (fifo, work / "to-fifo", work / "to-fifo.parquet"):
        if out.suffix == ".parquet":
            out.symlink_to(fifo)
        code, stdout, err = permindex("export", "--out", str(out), "--address", server.address)
        assert (code, stdout) == (INVALID, ""), err
        assert one_line(err) == (
            f"permindex export: --out {out} is not a regular file (a FIFO, device or socket): "
            "export writes a file through FILE.partial and renames it onto FILE; name a file, "
            "or --out - for stdout"
        )
        assert fifo.is_fifo()
    assert not any(path.name.endswith(".partial") for path in work.iterdir())


EXPORT_TO_DEV_STDOUT = [
    sys.executable,
    "-m",
    "permindex",
    "export",
    "--out",
    "/dev/stdout",
    "--address",
]


def test_export_refuses_dev_stdout_whatever_stdout_is(
    tmp_path: Path, server: RunningServer
) -> None:
    """export --out /dev/stdout is refused (exit 4) with stdout a pipe and with stdout a file
    the shell redirected to (export renamed a new file onto that file, exit 0), and the file
    is left as it was."""
    expected = (
        "permindex export: --out /dev/stdout is a device or a process's file (under /dev or "
        "/proc): export writes a file through FILE.partial and renames it onto FILE; name a "
        "file, or --out - for stdout"
    )
    code, stdout, err = permindex("export", "--out", "/dev/stdout", "--address", server.address)
    assert (code, stdout, one_line(err)) == (INVALID, "", expected)
    redirected = tmp_path / "redirected.txt"
    redirected.write_text("kept\n")
    with redirected.open("a") as sink:
        done = subprocess.run(
            [*EXPORT_TO_DEV_STDOUT, server.address],
            stdout=sink,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
            check=False,
        )
    assert (done.returncode, one_line(done.stderr)) == (INVALID, expected)
    assert redirected.read_text() == "kept\n"


def test_output_into_a_pipe_closed_early_exits_1(tmp_path: Path, server: RunningServer) -> None:
    rows = [{"id": f"document-{i:06d}", "fingerprint": i} for i in range(5000)]
    path = tmp_path / "many.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert permindex("ingest", str(path), "--address", server.address)[0] == OK
    # export writes ~270 kB; the reader takes 100 bytes and goes (as `| head -c 100`)
    proc = subprocess.Popen(
        [*PERMINDEX, "export", "--address", server.address],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.read(100).startswith(b'{"id": "document-000000"')
    proc.stdout.close()
    assert proc.wait(timeout=60) == ERROR  # was 0, with the output cut short
    assert b"written to stdout" not in proc.stderr.read()
    proc.stderr.close()
    # read to the end, the same export is complete and exits 0
    code, out, err = permindex("export", "--address", server.address)
    assert code == OK and out.count("\n") == 5000
    assert one_line(err) == "permindex export: 5000 keys written to stdout"


def test_counts_of_one_are_singular(tmp_path: Path, server: RunningServer) -> None:
    addr = ("--address", server.address)
    path = tmp_path / "one.jsonl"
    path.write_text('{"id": "only", "fingerprint": 1}\n')
    assert permindex("ingest", str(path), *addr)[0] == OK
    code, _out, err = permindex("export", "--out", str(tmp_path / "out.jsonl"), *addr)
    assert (code, one_line(err)) == (OK, f"permindex export: 1 key written to {tmp_path}/out.jsonl")
    code, _out, err = permindex("remove", "only", *addr)
    assert (code, one_line(err)) == (OK, "permindex remove: removed 1 of 1 key")


# --- files named by options, and what the adversarial and fresh-user runs found --------------


def test_serve_refuses_tls_files_that_are_missing_or_not_pem(tmp_path: Path) -> None:
    """A certificate that is not PEM was reported as "the address is in use", a missing one as
    a raw FileNotFoundError with exit 1: both are a bad command line (2), named, found before
    the data directory is created."""
    text = tmp_path / "not-a-cert.txt"
    text.write_text("hello\n")
    data = tmp_path / "data"
    base = ["serve", "--address", "127.0.0.1:0", "--data-dir", str(data)]
    code, _, err = permindex(*base, "--tls-cert", str(text), "--tls-key", str(text))
    assert code == EXIT_CODES["usage"]
    assert f"--tls-cert {text}: not a PEM file with a certificate in it" in one_line(err)
    missing = tmp_path / "missing.pem"
    code, _, err = permindex(*base, "--tls-cert", str(missing), "--tls-key", str(missing))
    assert code == EXIT_CODES["usage"]
    assert f"--tls-cert {missing}: cannot read it" in one_line(err)
    assert "Traceback" not in err and "Errno" not in err
    assert not data.exists()


def test_client_options_name_a_file_they_cannot_read(tmp_path: Path) -> None:
    missing = tmp_path / "missing"
    for option in ("--tls-ca", "--token-file"):
        code, _, err = permindex("stats", "--address", "127.0.0.1:9", option, str(missing))
        assert code == EXIT_CODES["invalid"], err
        assert one_line(err) == f"permindex stats: {option} {missing}: cannot read it: " + (
            "No such file or directory"
        )


def test_ingest_with_no_server_says_nothing_was_stored(tmp_path: Path) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "a", "text": "one two three four"}\n')
    code, _, err = permindex("ingest", str(source), "--address", "127.0.0.1:9")
    assert code == EXIT_CODES["unavailable"]
    assert "failed to connect" in err and "nothing was stored" in err
    assert "in flight" not in err


def test_dedup_refuses_an_out_it_cannot_write_before_any_work(tmp_path: Path) -> None:
    source = tmp_path / "docs.jsonl"
    source.write_text('{"id": "a", "text": "one two three four"}\n')
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for out in (blocker, blocker / "below"):
        code, stdout, err = permindex("dedup", str(source), "--out", str(out))
        assert code == EXIT_CODES["invalid"], err
        assert one_line(err).startswith(f"permindex dedup: --out {out}: cannot write the report")
        assert stdout == "" and "Traceback" not in err


def test_serve_names_a_metrics_address_in_use(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        code, _, err = permindex(
            "serve", "--address", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
            "--metrics-address", f"127.0.0.1:{port}",
        )  # fmt: skip
    assert code == EXIT_CODES["usage"], err
    assert f"--metrics-address 127.0.0.1:{port}: cannot listen there" in err
    # one line, besides the notice that loading the kernels takes long (a busy machine)
    lines = without_loading_notice(err)
    assert len(lines) == 1 and "Traceback" not in err and "never awaited" not in err


def refused_before_the_kernels(
    argv: list[str], exit_code: int = EXIT_CODES["usage"]
) -> subprocess.CompletedProcess[str]:
    """``permindex`` ``argv`` run in a process of its own that also prints whether it imported
    numba (the kernels' compiler); asserts that it exited ``exit_code`` (default 2, a usage
    error) without."""
    code = (
        "import sys; from permindex.cli import main; code = main(sys.argv[1:]); "
        "print('numba' in sys.modules); sys.exit(code)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == exit_code, done.stderr
    assert done.stdout.strip() == "False", "the kernels were loaded before the refusal"
    return done


def test_serve_refuses_a_data_directory_in_use_before_it_loads_the_kernels(
    tmp_path: Path,
) -> None:
    """A data directory whose lock another process holds is found by a probe before the
    kernels load (seconds on a first start or a busy machine; found only after them before):
    exit 7, one line naming the holder, the lock file untouched; once the lock is let go the
    probe passes it."""
    from permindex.storage.datadir import DirectoryLock, refuse_if_locked

    data = tmp_path / "data"
    lock = DirectoryLock(data)  # as a running server holds it (flock, this process's pid)
    try:
        before = (data / "LOCK").read_bytes()
        argv = ["serve", "--data-dir", str(data), "--address", "127.0.0.1:0"]
        done = refused_before_the_kernels(argv, EXIT_CODES["data"])
        assert done.stderr.splitlines() == [
            f"permindex: error: data directory {data} is in use by process {os.getpid()} "
            f"(lock {data / 'LOCK'})"
        ]
        assert (data / "LOCK").read_bytes() == before
    finally:
        lock.close()
    refuse_if_locked(data)  # free: the probe takes the lock and lets it go
    refuse_if_locked(tmp_path / "missing")  # no lock file: nothing made
    assert not (tmp_path / "missing").exists()
    DirectoryLock(data).close()  # and the probe left it free


@pytest.mark.parametrize("which", ["--address", "--metrics-address"])
def test_serve_refuses_an_address_in_use_before_it_loads_the_kernels(
    tmp_path: Path, which: str
) -> None:
    """An address in use is found by a probe before the kernels load (seconds on a first start,
    found only after them before): the process that refuses never imported numba."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        other = "--metrics-address" if which == "--address" else "--address"
        argv = ["serve", "--data-dir", str(tmp_path / "data"), which, f"127.0.0.1:{port}"]
        argv += [other, "127.0.0.1:0"]
        done = refused_before_the_kernels(argv)
    assert "in use" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    if which == "--metrics-address":
        assert f"--metrics-address 127.0.0.1:{port}: cannot listen there" in done.stderr


@pytest.mark.parametrize(
    ("address", "problem"),
    [("foo", "has no port"), ("127.0.0.1:99999", "above 65535"), ("[::1]:x", "not a number")],
)
def test_serve_refuses_a_malformed_metrics_address_as_a_usage_error(
    tmp_path: Path, address: str, problem: str
) -> None:
    """--metrics-address is checked as --address is (before: a ValueError's text with exit 4,
    or gRPC's bind() error with exit 1, after the kernels had loaded)."""
    code, _, err = permindex(
        "serve", "--address", "127.0.0.1:0", "--data-dir", str(tmp_path / "data"),
        "--metrics-address", address,
    )  # fmt: skip
    assert code == EXIT_CODES["usage"], err
    assert f"argument --metrics-address: address '{address}'" in err and problem in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("metrics", "problem"),
    [
        ("192.0.2.1:9464", "not an address of this machine"),  # TEST-NET-1: never local
        ("127.0.0.1:PORT", "it is the port of --address 127.0.0.1:PORT"),
    ],
)
def test_serve_refuses_a_metrics_address_it_cannot_listen_on_at_once(
    tmp_path: Path, metrics: str, problem: str
) -> None:
    """A --metrics-address that is not local, or the port of --address, is a usage error found
    before the kernels load (it was exit 1 with an "[Errno 99]" prefix, or a port "in use" by
    another server, after them), and the data directory is not created."""
    import socket

    with socket.socket() as probe:  # a free port for --address
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    metrics = metrics.replace("PORT", str(port))
    problem = problem.replace("PORT", str(port))
    data = tmp_path / "data"
    argv = ["serve", "--data-dir", str(data), "--address", f"127.0.0.1:{port}"]
    argv += ["--metrics-address", metrics]
    done = refused_before_the_kernels(argv)
    assert done.stderr.splitlines() == [
        f"permindex: error: --metrics-address {metrics}: cannot listen there: "
        + done.stderr.split("cannot listen there: ", 1)[1].strip()
    ]
    assert problem in done.stderr and "Errno" not in done.stderr
    assert not data.exists()
