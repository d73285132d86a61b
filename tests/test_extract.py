"""Main-content extraction (``--extract main``, trafilatura, the ``extract`` extra installed by
``dev``) with its fallback to the visible text, in the readers, ``dedup`` and ``ingest``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from permindex import simhash
from permindex.cli import main
from permindex.errors import InvalidArgumentError
from permindex.text.documents import html_to_text, read_documents, read_file_text
from permindex.text.extract import MIN_MAIN_WORDS, check_extract, main_text

if TYPE_CHECKING:
    from permindex.rpc.server import RunningServer

pytest.importorskip("trafilatura")

MENU = " ".join(f'<li><a href="/p{i}.html">Section {i} of the manual</a></li>' for i in range(80))


def article(seed: int, words: int = 300) -> str:
    rng = np.random.default_rng(seed)
    vocab = [f"word{i}" for i in range(4000)]
    body = [vocab[i] for i in rng.integers(0, 4000, size=words).tolist()]
    paragraphs = [" ".join(body[i : i + 60]) + "." for i in range(0, words, 60)]
    return "".join(f"<p>{p}</p>" for p in paragraphs)


def page(content: str, menu: str = MENU, title: str = "A page") -> str:
    return (
        f"<html><head><title>{title}</title></head><body>"
        f'<header><nav><ul class="menu">{menu}</ul></nav></header>'
        f"<main><article><h1>{title}</h1>{content}</article></main>"
        f"<footer><p>Copyright 2024 The Manual Project. All rights reserved. Privacy. "
        f"Terms of use. Contact us.</p></footer></body></html>"
    )


def test_main_text_drops_the_boilerplate() -> None:
    html = page(article(1))
    text = main_text(html)
    assert text is not None
    assert "word" in text and "Section 7 of the manual" not in text and "Copyright" not in text
    assert "Section 7 of the manual" in html_to_text(html)


def test_short_main_text_falls_back_to_the_visible_text(tmp_path: Path) -> None:
    # a table of contents: links only; what an extractor keeps of it is too short to use
    toc = page("<ul>" + MENU + "</ul>", menu="<li>Home</li>")
    kept = main_text(toc)
    assert kept is None or len(kept.split()) >= MIN_MAIN_WORDS
    short = page("<p>" + " ".join(["few"] * (MIN_MAIN_WORDS - 5)) + "</p>", menu="<li>Home</li>")
    assert main_text(short) is None  # fewer than MIN_MAIN_WORDS words: not used
    path = tmp_path / "short.html"
    path.write_text(short, encoding="utf-8")
    assert read_file_text(path, "main") == read_file_text(path) == html_to_text(short)
    long_ = tmp_path / "long.html"
    long_.write_text(page(article(2)), encoding="utf-8")
    assert read_file_text(long_, "main") == main_text(page(article(2)))
    documents = {d.key: d.text for d in read_documents(tmp_path, extract="main")}
    want = {"long.html": main_text(page(article(2))), "short.html": html_to_text(short)}
    assert documents == want


def test_check_extract() -> None:
    assert check_extract("visible") == "visible" and check_extract("main") == "main"
    with pytest.raises(InvalidArgumentError):
        check_extract("article")


def site(root: Path) -> Path:
    """Two pages with different articles and one big shared menu, and one page whose article is
    the first one's under another menu."""
    root.mkdir()
    other_menu = " ".join(f"<li><a>Other entry {i}</a></li>" for i in range(80))
    (root / "a.html").write_text(page(article(10, 120)), encoding="utf-8")
    (root / "b.html").write_text(page(article(11, 120)), encoding="utf-8")
    (root / "c.html").write_text(page(article(10, 120), menu=other_menu), encoding="utf-8")
    return root


def test_dedup_extract_main(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    root = site(tmp_path / "site")

    def pairs(*argv: str) -> list[tuple[str, str]]:
        out_dir = tmp_path / f"out{len(argv)}"
        code = main(["dedup", str(root), "--out", str(out_dir), "--no-progress", *argv])
        assert code == 0
        lines = capsys.readouterr().out.splitlines()
        return [(a, b) for a, b, _ in (line.split("\t") for line in lines)]

    jaccard = ("--method", "minhash", "--threshold", "0.5")
    # visible text: the shared menu makes a and b alike, and a and c apart
    visible = pairs(*jaccard)
    assert ("a.html", "b.html") in visible and ("a.html", "c.html") not in visible
    # main content: the same article is the pair, whatever the menus
    assert pairs(*jaccard, "--extract", "main") == [("a.html", "c.html")]
    summary = json.loads((tmp_path / "out6" / "summary.json").read_text())
    assert summary["extract"] == "main"


def test_ingest_extract_main(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    root = site(tmp_path / "site")
    code = main(["ingest", str(root), "--address", server.address, "--extract", "main"])
    assert code == 0
    capsys.readouterr()
    text = main_text(page(article(10, 120)))
    assert text is not None
    code = main(["query", "--text", text, "--k", "0", "--address", server.address])
    out = capsys.readouterr().out
    assert code == 0
    assert [line.split("\t")[0] for line in out.splitlines()] == ["a.html", "c.html"]
    assert out.splitlines()[0].split("\t")[1] == f"{simhash(text):016x}"


def test_a_client_fingerprints_the_main_text_as_ingest_extract_main_does(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, server: RunningServer
) -> None:
    """permindex.html_to_main_text (public): the text ``ingest --extract main`` stores, main
    content or, for a page too short for it, the visible text; a Client adding it finds the
    page ingest stored."""
    import permindex

    root = site(tmp_path / "site")
    short = page("<p>" + " ".join(["few"] * (MIN_MAIN_WORDS - 5)) + "</p>", menu="<li>Home</li>")
    (root / "short.html").write_text(short, encoding="utf-8")
    assert main(["ingest", str(root), "--address", server.address, "--extract", "main"]) == 0
    capsys.readouterr()
    with permindex.Client(server.address) as client:
        for name in ("a.html", "c.html", "short.html"):
            text = permindex.html_to_main_text((root / name).read_text(encoding="utf-8"))
            assert client.get(name) == simhash(text), name
        assert permindex.html_to_main_text(short) == html_to_text(short)
        found = client.check_and_add(
            "copy-of-a", permindex.html_to_main_text(page(article(10, 120), menu="<li>x</li>"))
        )
        assert found.status == "near_duplicate"
        matches = [m for m in found.matches if isinstance(m, permindex.Match)]
        assert len(matches) == len(found.matches)  # a SimHash collection's
        assert sorted(m.key for m in matches if m.distance == 0) == ["a.html", "c.html"]


def test_html_to_main_text_examples_run() -> None:
    import doctest

    import permindex

    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    (test,) = finder.find(permindex.html_to_main_text, "html_to_main_text", globs={})
    assert test.examples
    result = runner.run(test)
    assert (result.failed, result.attempted) == (0, len(test.examples))


def test_html_to_main_text_without_trafilatura_says_how_to_install_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    import permindex

    monkeypatch.setitem(sys.modules, "trafilatura", None)  # import trafilatura fails
    with pytest.raises(ImportError, match=r"pip install '\.\[extract\]'"):
        permindex.html_to_main_text(page(article(1)))
