"""The rough edges a new user met (issue 40, point 8), each as the user met it: the ``permindex``
command (its :func:`~permindex.cli.main` in this process, or the installed script in a
subprocess where the process matters), its exit code and the words on stderr."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from permindex.cli import build_parser, main
from permindex.errors import EXIT_CODES

if TYPE_CHECKING:
    from permindex.rpc.server import RunningServer

OK, USAGE = EXIT_CODES["ok"], EXIT_CODES["usage"]
REPO = Path(__file__).resolve().parent.parent
_SCRIPT = Path(sys.executable).parent / "permindex"
#: The installed console script, as a user runs it (``python -m permindex`` where there is none).
PERMINDEX = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "permindex"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """main(argv) in this process: (exit code, stdout, stderr)."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def permindex(
    *argv: str, env: dict[str, str] | None = None, timeout: float = 60
) -> tuple[int, str, str]:
    """Run ``permindex ARGV...`` in a subprocess to its end (at most ``timeout`` seconds):
    (exit code, stdout, stderr)."""
    environ = {
        k: v for k, v in os.environ.items() if not k.startswith(("PERMINDEX_", "NUMBA_CACHE_DIR"))
    }
    done = subprocess.run(
        [*PERMINDEX, *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        env={**environ, **(env or {})},
    )
    return done.returncode, done.stdout, done.stderr


def last_line(err: str) -> str:
    """The last line of stderr (after argparse's usage lines)."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines, "nothing on stderr"
    return lines[-1]


# --- option names: written in full, an unknown one named ------------------------------------


def parsers(parser: argparse.ArgumentParser) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """``parser`` and every parser under it (the commands' subparsers), with their names."""
    yield parser.prog, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from parsers(sub)


def test_no_parser_takes_an_abbreviated_option() -> None:
    found = dict(parsers(build_parser()))
    assert {"permindex", "permindex query", "permindex dedup", "permindex serve"} <= set(found)
    assert len(found) > 15  # the top parser and every command's
    for name, parser in found.items():
        assert parser.allow_abbrev is False, name


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["query", "--tex", "a b c"], "unknown option --tex; did you mean --text?"),
        (["query", "--txt", "a b c"], "unknown option --txt; did you mean --text?"),
        (["query", "--txt=a b c"], "unknown option --txt; did you mean --text?"),
        # before the required one of --text, --fingerprint, --key, and before a bad value
        (["query", "--key", "k", "--limt", "x"], "unknown option --limt; did you mean --limit?"),
        (["stats", "--adress", "127.0.0.1:1"], "unknown option --adress; did you mean --address?"),
        (["dedup", "x.jsonl", "--kep", "first"], "unknown option --kep; did you mean --keep?"),
        (["ingest", "x.jsonl", "--text_field", "body"], "did you mean --text-field?"),
        (  # (a bad --address: were --data-di taken as --data-dir, no server would start)
            ["serve", "--data-di", "d", "--address", "no-port"],
            "unknown option --data-di; did you mean --data-dir?",
        ),
        (["pairs", "--bogus"], "unknown option --bogus"),
    ],
)
def test_an_unknown_option_is_named_with_the_closest_one(
    capsys: pytest.CaptureFixture[str], argv: list[str], line: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert (code, out) == (USAGE, "")
    assert err.startswith(f"usage: permindex {argv[0]} ")
    assert last_line(err).startswith(f"permindex {argv[0]}: error: unknown option --")
    assert last_line(err).endswith(line)
    if "did you mean" not in line:
        assert "did you mean" not in err  # nothing close: no suggestion


def test_the_installed_command_refuses_an_abbreviation_before_connecting() -> None:
    """The user's own case: ``query --tex`` was taken as ``--text`` and sent to a server."""
    code, out, err = permindex("query", "--tex", "a b c", "--address", "127.0.0.1:9")
    assert (code, out) == (USAGE, "")
    assert last_line(err) == "permindex query: error: unknown option --tex; did you mean --text?"
    code, _out, err = permindex("query", "--txt", "a b c")
    assert code == USAGE
    assert last_line(err) == "permindex query: error: unknown option --txt; did you mean --text?"
    assert "is required" not in err


@pytest.mark.parametrize(
    ("argv", "exit_code"),
    [
        (["query", "--key", "k", "--k", "-1"], USAGE),  # a value (refused as one: below 0)
        (["fingerprint", "-x y z"], OK),  # text with a space is a value
        (["fingerprint", "--", "-k"], EXIT_CODES["too_short"]),  # after --: TEXT, one word
    ],
)
def test_values_that_start_with_a_dash_are_no_unknown_options(
    capsys: pytest.CaptureFixture[str], argv: list[str], exit_code: int
) -> None:
    code, _out, err = run(capsys, *argv)
    assert code == exit_code, err
    assert "unknown option" not in err


def test_option_names_written_in_full_still_parse() -> None:
    args = build_parser().parse_args(["query", "--text=a b c", "--k", "2", "--limit", "5"])
    assert (args.text, args.k, args.limit) == ("a b c", 2, 5)
    args = build_parser().parse_args(["serve", "--config", "x.toml", "--data-dir", "d"])
    assert (args.config, str(args.data_dir)) == ("x.toml", "d")


# --- an input that gives nothing: said, not a quiet "0 documents" ----------------------------


def write_lines(path: Path, *lines: str) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_ingest_of_an_empty_input_warns_naming_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    blank = write_lines(tmp_path / "blank.jsonl", "", "  ")
    folder = tmp_path / "folder"
    folder.mkdir()
    for path in (empty, blank, folder):
        code, out, err = run(capsys, "ingest", str(path), "--address", server.address)
        assert (code, out) == (OK, ""), err
        assert err.splitlines()[-1] == f"permindex ingest: warning: {path} holds no documents"
    code, _out, err = run(capsys, "import", str(empty), "--address", server.address)
    assert code == OK
    assert err.splitlines()[-1] == f"permindex import: warning: {empty} holds no documents"


def test_ingest_that_stores_nothing_says_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    short = write_lines(tmp_path / "short.jsonl", '{"id": "a", "text": "one two"}')
    code, _out, err = run(capsys, "ingest", str(short), "--address", server.address)
    assert code == OK
    assert err.splitlines()[-1] == (
        f"permindex ingest: warning: no document of {short} was stored: 1 too short (fewer "
        "words than a shingle or --min-words)"
    )
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "link.txt").symlink_to(short)
    code, _out, err = run(capsys, "ingest", str(folder), "--address", server.address)
    assert code == OK
    assert err.splitlines()[-1] == (
        f"permindex ingest: warning: no document of {folder} was stored: 1 skipped"
    )
    # anything stored: no warning
    mixed = write_lines(
        tmp_path / "mixed.jsonl",
        '{"id": "a", "text": "one two"}',
        '{"id": "b", "text": "one two three four"}',
    )
    code, _out, err = run(capsys, "ingest", str(mixed), "--address", server.address)
    assert code == OK
    assert "warning" not in err
    assert "1 added" in err and "1 too short" in err


def test_dedup_of_an_empty_or_all_short_input_warns(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    code, out, err = run(capsys, "dedup", str(empty), "--out", str(tmp_path / "r1"))
    assert (code, out) == (OK, "")
    assert "0 documents" in err
    assert err.splitlines()[-1] == f"permindex dedup: warning: {empty} holds no documents"
    short = write_lines(
        tmp_path / "short.jsonl", '{"id": "a", "text": "one two"}', '{"id": "b", "text": "x"}'
    )
    code, out, err = run(capsys, "dedup", str(short), "--out", str(tmp_path / "r2"))
    assert (code, out) == (OK, "")
    assert err.splitlines()[-1] == (
        f"permindex dedup: warning: no document of {short} was fingerprinted: 2 too short "
        "(fewer words than a shingle or --min-words)"
    )
    fine = write_lines(tmp_path / "fine.jsonl", '{"id": "a", "text": "one two three"}')
    code, _out, err = run(capsys, "dedup", str(fine), "--out", str(tmp_path / "r3"))
    assert code == OK
    assert "warning" not in err


# --- a JSONL line whose text has another name: the option that names it ----------------------


def test_a_line_with_body_instead_of_text_names_text_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    good = '{"id": "a", "text": "one two three four"}'
    crawl = write_lines(
        tmp_path / "crawl.jsonl", good, '{"id": "b", "body": "one two three four", "url": "u"}'
    )
    expected = (
        f'{crawl}, line 2: neither "text" nor "fingerprint": give exactly one (its fields: id, '
        "body, url); name the text's field with --text-field body"
    )
    code, _out, err = run(capsys, "dedup", str(crawl), "--out", str(tmp_path / "r"))
    assert code == EXIT_CODES["invalid"]
    assert err == f"permindex dedup: {expected}\n"
    code, _out, err = run(capsys, "ingest", str(crawl), "--address", server.address)
    assert code == EXIT_CODES["invalid"]
    assert err == f"permindex ingest: {expected} (1 document before it was stored)\n"
    # the advice works
    code, _out, err = run(
        capsys, "ingest", str(crawl), "--text-field", "body", "--address", server.address
    )
    assert code == EXIT_CODES["invalid"]  # line 1 has no "body" now, and says so
    assert 'line 1: neither "body" nor "fingerprint"' in err
    assert "(its fields: id, text); name the text's field with --text-field text" in err


def test_the_field_hint_reads_gzip_and_names_fingerprint_and_key_fields(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    import gzip

    packed = tmp_path / "crawl.jsonl.gz"
    packed.write_bytes(gzip.compress(b'{"id": "a", "content": "one two three", "n": 1}\n'))
    code, _out, err = run(capsys, "dedup", str(packed), "--out", str(tmp_path / "r"))
    assert code == EXIT_CODES["invalid"]
    assert err.rstrip().endswith(
        "(its fields: id, content, n); name the text's field with --text-field content"
    )
    hashes = write_lines(tmp_path / "hashes.jsonl", '{"id": "a", "simhash": "00000000000000ff"}')
    code, _out, err = run(capsys, "dedup", str(hashes), "--out", str(tmp_path / "r"))
    assert code == EXIT_CODES["invalid"]
    assert err.rstrip().endswith(
        "(its fields: id, simhash); name the fingerprint's field with --fingerprint-field simhash"
    )
    urls = write_lines(tmp_path / "urls.jsonl", '{"url": "u", "text": "one two three"}')
    code, _out, err = run(capsys, "dedup", str(urls), "--out", str(tmp_path / "r"))
    assert code == EXIT_CODES["invalid"]
    assert err == (
        f'permindex dedup: {urls}, line 1: no "id" (its fields: url, text); name the key\'s '
        "field with --id-field NAME\n"
    )


def test_the_field_hint_from_standard_input_names_both_options(tmp_path: Path) -> None:
    line = '{"id": "b", "body": "one two three four"}\n'
    done = subprocess.run(
        [*PERMINDEX, "dedup", "-", "--out", str(tmp_path / "r")],
        input=line,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == EXIT_CODES["invalid"]
    assert done.stderr.rstrip().endswith(
        "give exactly one; name the text's field with --text-field NAME or a fingerprint's "
        "with --fingerprint-field NAME"
    )


# --- the first run after an install compiles the kernels: said, not a silent wait ------------

NOTICE = "loading the {} kernels (the first run after an install or a numba upgrade compiles them"


@pytest.mark.soak
def test_the_first_run_after_an_install_says_it_compiles_later_runs_are_quiet(
    tmp_path: Path,
) -> None:
    """An empty kernel cache (as after an install): ``dedup`` compiles its kernels for seconds
    and says so, once, naming the cache (permindex's: nothing into the package's folders);
    ``fingerprint`` then loads them from there and says nothing. A real compile of every
    fingerprint and join kernel (minutes of CPU on a busy machine), so behind ``-m soak``: the
    default suite checks the notices with a compile made slow below, and a real first compile
    into an empty cache through ``serve`` (tests/test_jit.py)."""
    package = REPO / "permindex"
    before = set(package.rglob("*.nbi"))
    cache = tmp_path / "cache"
    env = {"PERMINDEX_CACHE_DIR": str(cache)}
    source = write_lines(
        tmp_path / "in.jsonl",
        '{"id": "a", "text": "the tide comes in twice a day"}',
        '{"id": "b", "text": "the tide comes in twice a day"}',
    )
    argv = ["dedup", str(source), "--out", str(tmp_path / "r")]
    code, out, err = permindex(*argv, env=env, timeout=300)
    assert (code, out) == (OK, "a\tb\t0\n"), err
    assert [line for line in err.splitlines() if "kernels" in line] == [
        f"permindex dedup: {NOTICE.format('fingerprint and join')} into {cache}, about 10 s; "
        "later runs load them in about a second)"
    ]
    assert list(cache.rglob("*.nbi"))
    assert set(package.rglob("*.nbi")) == before
    code, out, err = permindex("fingerprint", "the tide comes in", env=env)
    assert code == OK and len(out.strip()) == 16
    assert err == ""


def compiling_first(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """From now on, the first call of the SimHash kernel in this process compiles for
    ``seconds`` first, as after an install (numba's ``numba:compile`` event, then the wait);
    loaded already, the kernel compiles nothing."""
    import time

    from permindex.text import simhash_kernels  # numba imported, its cache directory set

    from numba.core import event  # isort: skip

    calls: list[str] = []

    def compiling(name: str) -> Any:
        kernel = getattr(simhash_kernels, name)

        def call(*args: Any) -> Any:
            if not calls:
                with event.trigger_event("numba:compile", data={}):
                    time.sleep(seconds)
            calls.append(name)
            return kernel(*args)

        return call

    for name in ("simhash_of", "shingle_hashes_of"):  # texts; each text of vote="set"
        monkeypatch.setattr(simhash_kernels, name, compiling(name))


@pytest.mark.parametrize(
    ("argv", "kernels"),
    [
        (["fingerprint", "the tide comes in"], "fingerprint"),
        (["query", "--text", "the tide comes in"], "fingerprint"),
        (["ingest", "IN", "--vote", "set"], "fingerprint"),
        (["dedup", "IN", "--out", "OUT"], "fingerprint and join"),
    ],
)
def test_commands_that_fingerprint_say_when_they_compile_the_kernels(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    server: RunningServer,
    argv: list[str],
    kernels: str,
) -> None:
    source = write_lines(tmp_path / "in.jsonl", '{"id": "a", "text": "the tide comes in"}')
    names = {"IN": str(source), "OUT": str(tmp_path / "report")}
    argv = [names.get(arg, arg) for arg in argv]
    if argv[0] in ("query", "ingest"):
        argv += ["--address", server.address]
    code, _out, err = run(capsys, *argv)  # loaded already: nothing compiles, nothing said
    assert code == OK and "kernels" not in err, err
    compiling_first(monkeypatch, 1.3)
    code, _out, err = run(capsys, *argv)
    assert code == OK, err
    notice = err.splitlines()[0]
    assert notice.startswith(f"permindex {argv[0]}: {NOTICE.format(kernels)} into "), err
    assert notice.endswith(", about 10 s; later runs load them in about a second)")
    assert "kernels" not in "\n".join(err.splitlines()[1:])  # once


def test_a_short_compile_is_not_worth_a_notice(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    compiling_first(monkeypatch, 0.2)
    code, out, err = run(capsys, "fingerprint", "the tide comes in")
    assert (code, err) == (OK, "")
    assert len(out.strip()) == 16
