"""Input readers (permindex.text.documents): JSONL files (plain, gzip, stdin), folders (keys, HTML,
.gz, skipped entries), fingerprint formats and malformed lines named by their line number."""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import pytest

from permindex import InvalidArgumentError
from permindex.errors import InvalidKeyError
from permindex.index.hamming import parse_fingerprint
from permindex.index.keys.rule import MAX_KEY_BYTES, validate_key
from permindex.text.documents import (
    Document,
    DocumentReader,
    MalformedInputError,
    check_key,
    html_to_text,
    read_documents,
    read_file_text,
)

# --- fingerprint formats -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0, 0),
        (255, 255),
        (2**64 - 1, 2**64 - 1),
        ("00000000000000ff", 255),
        ("FFFFFFFFFFFFFFFF", 2**64 - 1),
        ("0xff", 255),
        ("0XFF", 255),
        ("0x0", 0),
        ("0xffffffffffffffff", 2**64 - 1),
    ],
)
def test_parse_fingerprint_accepts(value: object, expected: int) -> None:
    assert parse_fingerprint(value) == expected


@pytest.mark.parametrize(
    ("value", "named"),
    [
        (-1, "-1"),
        (2**64, str(2**64)),
        (True, "true"),
        (1.5, "1.5"),
        (None, "null"),
        ([1], "[1]"),
        ("ff", "'ff'"),  # hex without 0x must be exactly 16 digits
        ("123", "'123'"),  # a decimal must be a JSON integer
        ("0x", "'0x'"),
        ("0x" + "1" * 17, "'0x" + "1" * 17 + "'"),
        ("g" * 16, "'" + "g" * 16 + "'"),
        ("-0x1", "'-0x1'"),
        (" 0x1", "' 0x1'"),
    ],
)
def test_parse_fingerprint_refuses_and_names_the_value(value: object, named: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        parse_fingerprint(value)
    assert named in str(caught.value)


# --- JSONL ---------------------------------------------------------------------------------


def _jsonl(lines: list[object]) -> str:
    return "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)


def test_jsonl_texts_and_fingerprints(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    path.write_text(
        _jsonl(
            [
                {"id": "a", "text": "one two three"},
                "",
                "   ",
                {"id": "b", "fingerprint": 12345, "other": "ignored"},
                {"id": "c", "fingerprint": "000000000000abcd"},
                {"id": "d", "fingerprint": "0xABCD"},
                {"id": "7", "text": "a numeric key, as a string"},
                {"id": "e", "text": ""},
            ]
        ),
        encoding="utf-8",
    )
    reader = read_documents(path)
    assert reader.kind == "jsonl"
    assert reader.size_bytes == path.stat().st_size
    assert list(reader) == [
        Document("a", text="one two three"),
        Document("b", fingerprint=12345),
        Document("c", fingerprint=0xABCD),
        Document("d", fingerprint=0xABCD),
        Document("7", text="a numeric key, as a string"),
        Document("e", text=""),
    ]
    assert reader.stats.documents == 6
    assert reader.stats.skipped == 0
    assert reader.position_bytes() == path.stat().st_size


def test_jsonl_fields_renamed(tmp_path: Path) -> None:
    path = tmp_path / "docs.jsonl"
    lines = [
        {"url": "a", "body": "one two three", "fingerprint": "ignored: not the field"},
        {"url": "b", "simhash": "0x7b", "text": 5},
    ]
    path.write_text(_jsonl(lines), encoding="utf-8")

    def reader() -> DocumentReader:
        return read_documents(path, id_field="url", text_field="body", fingerprint_field="simhash")

    assert list(reader()) == [Document("a", text="one two three"), Document("b", fingerprint=0x7B)]
    parser = reader().parser()  # the block parser of dedup's workers
    assert parser.block_columns(path.read_bytes(), 1).documents() == list(reader())
    path.write_text(_jsonl([{"url": "c", "body": "x y z", "simhash": 1}]), encoding="utf-8")
    with pytest.raises(MalformedInputError, match='line 1: both "body" and "simhash"'):
        list(reader())


def test_jsonl_gzip_is_recognised_by_its_magic_bytes(tmp_path: Path) -> None:
    data = _jsonl([{"id": "é/中", "text": "x y z"}]).encode("utf-8")
    for name in ("docs.jsonl.gz", "docs.jsonl"):
        path = tmp_path / name
        path.write_bytes(gzip.compress(data))
        assert list(read_documents(path)) == [Document("é/中", text="x y z")]


def test_jsonl_from_stdin_stream() -> None:
    data = _jsonl([{"id": "a", "fingerprint": 1}, {"id": "b", "text": "t u v"}]).encode()
    for payload in (data, gzip.compress(data)):
        reader = read_documents("-", stdin=io.BufferedReader(io.BytesIO(payload)))
        assert reader.name == "<stdin>"
        assert [d.key for d in reader] == ["a", "b"]


@pytest.mark.parametrize(
    ("bad_line", "words"),
    [
        ("{not json", "bad JSON"),
        ('["a", "b"]', "JSON object"),
        ('{"text": "no id"}', 'no "id"'),
        ('{"id": "a"}', 'neither "text" nor "fingerprint"'),
        ('{"id": "a", "text": "t", "fingerprint": 1}', 'both "text" and "fingerprint"'),
        ('{"id": "a", "fingerprint": -5}', "-5"),
        ('{"id": "a", "fingerprint": 18446744073709551616}', "18446744073709551616"),
        ('{"id": "a", "fingerprint": "abc"}', "'abc'"),
        ('{"id": "a", "fingerprint": 1.0}', "1.0"),
        ('{"id": "a", "fingerprint": null}', "null"),
        ('{"id": "a", "text": 5}', '"text" must be a string'),
        ('{"id": true, "text": "t"}', '"id" must be a string (a key), not true'),
        ('{"id": null, "text": "t"}', '"id" must be a string (a key), not null'),
        ('{"id": 17, "text": "t"}', '"id" must be a string (a key), not 17 (write "17")'),
        ('{"id": 1.5, "text": "t"}', '"id" must be a string (a key), not 1.5'),
        ("[" * 100_000 + "]" * 100_000, "nested too deeply"),
        ('{"id": "a", "text": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
        ('{"id": "", "text": "t"}', "key is empty"),
        (json.dumps({"id": "k" * (MAX_KEY_BYTES + 1), "text": "t"}), "1025 UTF-8 bytes"),
        ('{"id": "a", "text": "lone \\ud800 surrogate here"}', "lone surrogate \\ud800"),
        ('{"id": "\\udfff", "text": "three words here"}', "not valid Unicode"),
    ],
)
def test_malformed_jsonl_line_names_file_and_line(
    tmp_path: Path, bad_line: str, words: str
) -> None:
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"id": "ok", "text": "fine words here"})
    path.write_text(f"{good}\n\n{bad_line}\n{good}\n", encoding="utf-8")
    reader = read_documents(path)
    seen: list[Document] = []
    with pytest.raises(MalformedInputError) as caught:
        seen.extend(reader)
    assert len(seen) == 1  # the documents before the bad line were read
    assert caught.value.line == 3
    assert caught.value.path == str(path)
    assert f"{path}, line 3: " in str(caught.value)
    assert words in str(caught.value)
    assert isinstance(caught.value, InvalidArgumentError)


def test_jsonl_line_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    path.write_bytes(b'{"id": "a", "text": "x y z"}\n{"id": "b", "text": "caf\xe9 x y"}\n')
    with pytest.raises(MalformedInputError, match="line 2: not valid UTF-8"):
        list(read_documents(path))


def test_truncated_gzip_is_an_input_error(tmp_path: Path) -> None:
    data = gzip.compress(_jsonl([{"id": str(i), "text": "a b c"} for i in range(1000)]).encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        list(read_documents(path))


def test_missing_path(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="no such file or folder"):
        read_documents(tmp_path / "nothing-here")


def test_path_that_is_neither_file_nor_folder(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(InvalidArgumentError, match="not a regular file or a folder"):
        read_documents(fifo)


# --- folders -------------------------------------------------------------------------------


def _make_folder(root: Path) -> None:
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "a.txt").write_text("plain text file here", encoding="utf-8")
    (root / "sub" / "page.html").write_text(
        "<html><head><title>Title words hidden</title><style>p {}</style></head>"
        "<body><h1>Heading</h1><p>Para<b>graph</b> one</p><script>var x;</script>"
        "<div>second block</div></body></html>",
        encoding="utf-8",
    )
    (root / "sub" / "deeper" / "notes.txt.gz").write_bytes(gzip.compress(b"compressed text inside"))
    (root / "sub" / "deeper" / "page.htm.gz").write_bytes(
        gzip.compress(b"<p>zipped <i>html</i></p><p>page</p>")
    )
    (root / "bom.txt").write_bytes(b"\xef\xbb\xbfwith a bom")
    (root / "empty.txt").write_bytes(b"")
    (root / "binary.bin").write_bytes(b"\x7fELF\x00\x01\x02 words")
    (root / "latin1.txt").write_bytes(b"caf\xe9 au lait")
    (root / "broken.gz").write_bytes(b"\x1f\x8b not really gzip")
    (root / "zipped-binary.gz").write_bytes(gzip.compress(b"\x00\x00\x00"))
    (root / "link.txt").symlink_to(root / "a.txt")
    (root / "linkdir").symlink_to(root / "sub")
    (root / "dangling").symlink_to(root / "missing")
    os.mkfifo(root / "fifo")


def test_folder_keys_texts_and_skips(tmp_path: Path) -> None:
    _make_folder(tmp_path)
    reader = read_documents(tmp_path)
    assert reader.kind == "folder"
    documents = {d.key: d.text for d in reader}
    assert list(documents) == [  # depth first, code point order of names
        "a.txt",
        "bom.txt",
        "empty.txt",
        "sub/deeper/notes.txt.gz",
        "sub/deeper/page.htm.gz",
        "sub/page.html",
    ]
    assert documents["a.txt"] == "plain text file here"
    assert documents["bom.txt"] == "with a bom"
    assert documents["empty.txt"] == ""
    assert documents["sub/deeper/notes.txt.gz"] == "compressed text inside"
    assert documents["sub/deeper/page.htm.gz"] == "zipped html\npage"
    assert documents["sub/page.html"] == "Heading\nParagraph one\nsecond block"
    assert reader.stats.documents == 6
    assert dict(reader.stats.skipped_by_reason) == {
        "symlink": 3,
        "not text": 4,
        "not a regular file": 1,
    }
    assert reader.stats.skipped == 8


def test_folder_skips_names_that_are_not_utf8(tmp_path: Path) -> None:
    name = os.fsdecode(b"caf\xe9.txt")
    try:
        (tmp_path / name).write_text("some text here", encoding="utf-8")
    except (OSError, UnicodeEncodeError):
        pytest.skip("this file system refuses names that are not UTF-8")
    (tmp_path / "ok.txt").write_text("fine", encoding="utf-8")
    reader = read_documents(tmp_path)
    assert [d.key for d in reader] == ["ok.txt"]
    assert dict(reader.stats.skipped_by_reason) == {"name not UTF-8": 1}


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_folder_counts_unreadable_files(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("hidden", encoding="utf-8")
    secret.chmod(0)
    reader = read_documents(tmp_path)
    assert list(reader) == []
    assert dict(reader.stats.skipped_by_reason) == {"unreadable": 1}


def test_read_file_text_matches_the_folder_reader(tmp_path: Path) -> None:
    _make_folder(tmp_path)
    documents = {d.key: d.text for d in read_documents(tmp_path)}
    for key, text in documents.items():
        assert read_file_text(tmp_path / key) == text
    with pytest.raises(InvalidArgumentError, match="not text"):
        read_file_text(tmp_path / "binary.bin")
    with pytest.raises(InvalidArgumentError, match="not a valid gzip file"):
        read_file_text(tmp_path / "broken.gz")
    with pytest.raises(InvalidArgumentError, match="cannot read"):
        read_file_text(tmp_path / "missing.txt")


# --- HTML ----------------------------------------------------------------------------------


def test_html_visible_text() -> None:
    html = (
        "<!DOCTYPE html><html><head><title>not shown</title><meta charset=utf-8>"
        "<script>alert('no')</script></head><body>"
        "<!-- a comment --><p>in<em>line</em> words&nbsp;joined</p>"
        "<ul><li>one</li><li>two</li></ul>text<br>after break"
        "<table><tr><td>cell a</td><td>cell b</td></tr></table>"
        "<iframe src=x.svg><p>no frames fallback</p></iframe>"
        "<style>.x { color: red }</style><pre>  pre\n  lines </pre></body></html>"
    )
    assert html_to_text(html) == (
        "inline words\xa0joined\none\ntwo\ntext\nafter break\ncell a\ncell b\npre\nlines"
    )


def test_html_deep_nesting_does_not_recurse() -> None:
    depth = 1500
    html = "<div>" * depth + "deep text" + "</div>" * depth
    assert html_to_text(html) == "deep text"


def test_html_too_deep_is_refused_not_truncated(tmp_path: Path) -> None:
    depth = 5000
    html = "<div>" * depth + "deep text" + "</div>" * depth
    with pytest.raises(InvalidArgumentError, match="cannot be parsed"):
        html_to_text(html)
    # In a folder, such a page is skipped and counted, never indexed with partial text.
    (tmp_path / "deep.html").write_text(html)
    (tmp_path / "ok.html").write_text("<p>three words here</p>")
    reader = read_documents(tmp_path)
    docs = list(reader)
    assert [d.key for d in docs] == ["ok.html"]
    assert reader.stats.skipped_by_reason == {"unparseable HTML": 1}


def test_document_size_bytes() -> None:
    assert Document("ab", text="é").size_bytes() == 2 + 2 + 16
    assert Document("ab", fingerprint=5).size_bytes() == 2 + 16


LIBSTDCXX_DOC = Path("/usr/share/doc/libstdc++-12-doc/libstdc++")
LIBSTDCXX_CORPUS = Path(__file__).resolve().parents[2] / "shared/corpora/libstdc++-12-doc.jsonl.gz"


@pytest.mark.slow
def test_html_text_has_the_words_of_the_shared_corpus() -> None:
    """The corpus holds the visible text of the HTML pages of Debian's libstdc++-12-doc: reading
    the installed pages as a folder gives the same words (so the same fingerprints)."""
    if not LIBSTDCXX_CORPUS.exists():
        pytest.skip(f"shared corpus not found at {LIBSTDCXX_CORPUS}")
    if not (LIBSTDCXX_DOC / "api.html").exists():
        pytest.skip(f"Debian package libstdc++-12-doc is not installed ({LIBSTDCXX_DOC})")
    with gzip.open(LIBSTDCXX_CORPUS, "rt", encoding="utf-8") as lines:
        corpus = [json.loads(line) for line in lines]
    sample = corpus[::20]  # one page in 20 of the 3,906; the whole corpus agrees as well
    differ = [
        row["id"]
        for row in sample
        if read_file_text(LIBSTDCXX_DOC / row["id"]).split() != row["text"].split()
    ]
    assert differ == []


def test_the_key_rule_is_validate_key_with_a_limit() -> None:
    assert validate_key("k" * 10, max_bytes=10) == "k" * 10
    assert validate_key("é" * 5, max_bytes=10) == "é" * 5
    cases = (("", "empty", 0), ("é" * 6, "size", 12), ("\udfff", "encoding", None))
    for key, reason, size in cases:
        with pytest.raises(InvalidKeyError) as refused:
            validate_key(key, max_bytes=10)
        assert (refused.value.reason, refused.value.size, refused.value.limit) == (reason, size, 10)
        if reason != "size":  # the reader's wording, the same rule (its limit: MAX_KEY_BYTES)
            with pytest.raises(InvalidKeyError) as reader:
                check_key(key)
            assert reader.value.reason == reason
    with pytest.raises(TypeError, match="key must be str"):
        validate_key(b"k")
