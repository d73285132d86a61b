"""What a new user of a Jaccard collection meets first (issue 42's walkthrough): a text too
short to sketch, a sketch sent to the fingerprint query, advice that must work when followed."""

from __future__ import annotations

import numpy as np
import pytest

import permindex
from permindex.cli import main
from permindex.errors import EXIT_CODES, InvalidArgumentError
from permindex.rpc.server import RunningServer

TEXT = "the quick brown fox jumps over the lazy dog"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """``permindex ARGS`` in this process: (exit code, stdout, stderr)."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_query_text_too_short_exits_6_on_a_jaccard_collection(
    server: RunningServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with permindex.Client(server.address) as client:
        client.create_collection("j", method="minhash", threshold=0.8)
        client.use("j").add([("a", TEXT)])
    at = ("--address", server.address, "--collection", "j")
    code, out, err = run(capsys, "query", "--text", "two words", *at)
    assert (code, out) == (EXIT_CODES["too_short"], "")
    assert "fewer than 3 words: it has no sketch" in err
    # the SimHash collection says it alike
    code, out, err = run(capsys, "query", "--text", "two words", "--address", server.address)
    assert (code, out) == (EXIT_CODES["too_short"], "")
    assert "fewer than 3 words: it has no fingerprint" in err
    # three words are enough, and the stored page is found
    code, out, _ = run(capsys, "query", "--text", TEXT, *at)
    assert (code, out) == (0, "a\t1.0000\n")


def test_query_given_a_sketch_says_in_one_line_to_call_query_jaccard(
    server: RunningServer,
) -> None:
    sketch = permindex.minhash_sketch(TEXT)
    assert sketch is not None
    with permindex.Client(server.address) as client:
        with pytest.raises(InvalidArgumentError) as raised:
            client.query(sketch)  # type: ignore[arg-type]
        message = str(raised.value)
        assert "\n" not in message and len(message) < 200
        assert "MinHashSketch" in message and 'query_jaccard([...], by="sketch")' in message
        with pytest.raises(InvalidArgumentError, match=r'by="text"'):
            client.query(TEXT)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgumentError) as raised:
            client.query_many([np.arange(1000)])  # type: ignore[list-item]
        assert str(raised.value) == "fingerprints[0] = a ndarray is not an int in [0, 2**64)"
