"""permindex.scrapy.NearDuplicateMiddleware in real crawls: the ``scrapy runspider`` command in a
subprocess, against pages served by ``http.server`` on 127.0.0.1 (unique pages, and mirrors of
some at other URLs with the same visible text in other markup), and a real permindex server
(tests/serverproc.py), under Scrapy's default reactor (asyncio) and a non-asyncio one; then with
no server listening. The fingerprints the server stores are checked against ``ingest``'s text of
the same files.
"""

from __future__ import annotations

import functools
import gzip
import json
import random
import re
import socket
import subprocess
import sys
import threading
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

pytest.importorskip("scrapy")

from scrapy.http import HtmlResponse
from serverproc import ServeProcess

from permindex import Client, hamming, simhash
from permindex.errors import InvalidKeyError, LimitExceededError
from permindex.scrapy.bodies import UndecodableBodyError, decoded_body, response_text
from permindex.scrapy.checker import BatchChecker, PageOutcome
from permindex.text.documents import html_to_text, read_file_text

UNIQUE = 6  # unique pages u0..u5
MIRRORED = 3  # u0..u2 also served at mirror/u0.html..mirror/u2.html
TEXTS = 2  # notes.txt and mirror/notes.txt: the same text, not HTML, so never checked
ASYNCIO = "twisted.internet.asyncioreactor.AsyncioSelectorReactor"  # Scrapy's default
EPOLL = "twisted.internet.epollreactor.EPollReactor"

SPIDER = """
import time

import scrapy
from scrapy.http import HtmlResponse
from twisted.internet import reactor


class Pages(scrapy.Spider):
    name = "pages"

    def __init__(self, start, **kwargs):
        super().__init__(**kwargs)
        self.start_urls = start.split(",")

    async def start(self):
        self.started = time.monotonic()  # the clock of "elapsed": as the first requests go
        for url in self.start_urls:
            yield scrapy.Request(url, self.parse)

    def parse(self, response):
        if not isinstance(response, HtmlResponse):
            yield from self.page(response)
            return
        for href in response.css("a::attr(href)").getall():
            yield response.follow(href, self.page, errback=self.dropped)

    def page(self, response):
        yield {
            "url": response.url,
            "title": response.css("title::text").get(),
            "permindex": response.meta.get("permindex"),
            "reactor": type(reactor).__name__,
            "elapsed": time.monotonic() - self.started,
        }

    def dropped(self, failure):
        yield {"dropped": failure.request.url, "permindex": failure.request.meta.get("permindex")}
"""


def _words(rng: random.Random, n: int) -> str:
    vocabulary = [f"w{i}" for i in range(5000)]
    return " ".join(rng.choice(vocabulary) for _ in range(n))


def _page(title: str, text: str, *, mirror: bool = False) -> str:
    if mirror:  # other markup, scripts and comments, the same visible text
        return (
            f"<!doctype html><html><head><title>{title}</title><script>var x = 1;</script>"
            f"</head><body><!-- a mirror --><div class='c'><p>{text}</p></div></body></html>"
        )
    return f"<html><head><title>{title}</title></head><body><p>{text}</p></body></html>"


def _templated(rng: random.Random, title: str, text: str, menu: str) -> str:
    """A page of a site template: ``menu`` (a long navigation list) and a footer around an
    article of ``text``."""
    return (
        f"<html><head><title>{title}</title></head><body><header><nav><ul>{menu}</ul></nav>"
        f"</header><main><article><h1>{title}</h1><p>{text}</p></article></main>"
        f"<footer><p>{_words(rng, 300)}</p></footer></body></html>"
    )


def _main_pages(root: Path) -> None:
    """``main/``: the article of ``a1.html`` again under another template (``a2.html``),
    another article under the first template (``b1.html``), and a page whose main content is
    too short (``short.html``, 30 words: its visible text is used); ``main.html`` links them."""
    rng = random.Random(16)
    item = "<li><a href='/'>{}</a></li>"
    menus = ["".join(item.format(_words(rng, 4)) for _ in range(100)) for _ in range(3)]
    article, other = _words(rng, 80), _words(rng, 80)
    (root / "main").mkdir()
    for name, title, text, menu in [
        ("a1", "article", article, menus[0]),
        ("a2", "article", article, menus[1]),
        ("b1", "other", other, menus[0]),
        ("short", "short", _words(rng, 30), menus[2]),
    ]:
        page = _templated(rng, title, text, menu)
        (root / "main" / f"{name}.html").write_text(page, encoding="utf-8")
    links = "".join(f'<a href="main/{n}.html">{n}</a> ' for n in ("a1", "a2", "b1", "short"))
    (root / "main.html").write_text(f"<html><body>{links}</body></html>", encoding="utf-8")


class _Handler(SimpleHTTPRequestHandler):
    """Files of the site; ``/gz/NAME`` is NAME sent with ``Content-Encoding: gzip``,
    ``/slow/NAME`` is NAME sent after a second."""

    def do_GET(self) -> None:
        if self.path.startswith("/slow/"):
            time.sleep(1)
            self.path = self.path[5:]
        if not self.path.startswith("/gz/"):
            super().do_GET()
            return
        body = gzip.compress((Path(self.directory) / self.path[4:]).read_bytes())
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@dataclass
class Site:
    root: Path
    base: str

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    root = tmp_path_factory.mktemp("site")
    (root / "mirror").mkdir()
    rng = random.Random(15)
    links = []
    for i in range(UNIQUE):
        text = _words(rng, 200)
        (root / f"u{i}.html").write_text(_page(f"u{i}", text), encoding="utf-8")
        links.append(f"u{i}.html")
        if i < MIRRORED:
            (root / "mirror" / f"u{i}.html").write_text(
                _page(f"mirror u{i}", text, mirror=True), encoding="utf-8"
            )
            links.append(f"mirror/u{i}.html")
    # a page sent gzip-compressed, and its mirror sent plain
    text = _words(rng, 200)
    (root / "g.html").write_text(_page("g", text), encoding="utf-8")
    (root / "mirror" / "g.html").write_text(_page("mirror g", text, mirror=True), encoding="utf-8")
    gz_links = ["gz/g.html", "mirror/g.html"]
    # two pages 2 bits apart: near-duplicates for k >= 2 only
    text = _words(rng, 200)
    fp = simhash(text)
    for _ in range(5000):
        words = text.split()
        words[rng.randrange(len(words))] = rng.choice(words)
        other = " ".join(words)
        if hamming(fp, simhash(other)) == 2:
            break
    else:
        raise AssertionError("no text 2 bits from the first")
    (root / "near-a.html").write_text(_page("near a", text), encoding="utf-8")
    (root / "near-b.html").write_text(_page("near b", other), encoding="utf-8")
    (root / "k.html").write_text(
        '<html><body><a href="near-a.html">a</a> <a href="near-b.html">b</a></body></html>',
        encoding="utf-8",
    )
    notes = _words(rng, 100)
    for name in ("notes.txt", "mirror/notes.txt"):
        (root / name).write_text(notes, encoding="utf-8")
        links.append(name)
    index = "".join(f'<a href="{link}">{link}</a> ' for link in links)
    (root / "index.html").write_text(f"<html><body>{index}</body></html>", encoding="utf-8")
    gz_index = "".join(f'<a href="{link}">{link}</a> ' for link in gz_links)
    (root / "gz.html").write_text(f"<html><body>{gz_index}</body></html>", encoding="utf-8")
    _main_pages(root)
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield Site(root, f"http://127.0.0.1:{server.server_address[1]}")
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    process = ServeProcess(tmp_path_factory.mktemp("data"))
    address = process.address()
    assert address is not None, process.text
    try:
        yield address
    finally:
        process.stop()


_collections = iter(range(10**6))


@pytest.fixture
def collection(server: str) -> str:
    """A new empty collection of the module's server for each test."""
    name = f"crawl-{next(_collections)}"
    with Client(server) as client:
        client.create_collection(name)
    return name


@dataclass
class Crawl:
    items: list[dict[str, object]]  # the pages scraped
    dropped: list[dict[str, object]]  # the errbacks' IgnoreRequest failures
    log: str
    returncode: int

    @property
    def urls(self) -> set[str]:
        return {str(item["url"]) for item in self.items}

    def stat(self, name: str) -> int | None:
        """A counter of the stats dump at the end of the log."""
        found = re.search(rf"'{re.escape(name)}': (\d+)", self.log)
        return None if found is None else int(found.group(1))

    @property
    def finish_reason(self) -> str | None:
        found = re.search(r"'finish_reason': '([^']*)'", self.log)
        return None if found is None else found.group(1)


def _crawl(tmp_path: Path, start: str, *settings: str) -> Crawl:
    """``scrapy runspider`` of the spider above from ``start``, with ``-s`` ``settings``."""
    spider = tmp_path / "pages.py"
    spider.write_text(SPIDER, encoding="utf-8")
    items = tmp_path / "items.jsonl"
    scrapy = Path(sys.executable).parent / "scrapy"
    command = [str(scrapy)] if scrapy.exists() else [sys.executable, "-m", "scrapy"]
    defaults = {
        "DOWNLOADER_MIDDLEWARES": '{"permindex.scrapy.NearDuplicateMiddleware": 500}',
        "LOG_LEVEL": "INFO",
        "TELNETCONSOLE_ENABLED": "False",
        "REMOTE_CONTROL_ENABLED": "False",
        "ROBOTSTXT_OBEY": "False",
        "PERMINDEX_TIMEOUT": "10",
    }
    given = dict(setting.split("=", 1) for setting in settings)
    options = [f"-s{name}={value}" for name, value in {**defaults, **given}.items()]
    argv = [*command, "runspider", str(spider), "-a", f"start={start}", "-O", str(items)]
    done = subprocess.run(
        [*argv, *options], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    (tmp_path / "crawl.log").write_text(done.stderr, encoding="utf-8")
    assert "Warning:" not in done.stderr  # no deprecation of what the middleware does
    lines = items.read_text(encoding="utf-8").splitlines() if items.exists() else []
    found = [json.loads(line) for line in lines]
    return Crawl(
        [item for item in found if "url" in item],
        [item for item in found if "dropped" in item],
        done.stderr,
        done.returncode,
    )


def _pairs(site: Site) -> list[tuple[str, str]]:
    return [(site.url(f"u{i}.html"), site.url(f"mirror/u{i}.html")) for i in range(MIRRORED)]


def _uniques(site: Site) -> list[str]:
    return [site.url(f"u{i}.html") for i in range(MIRRORED, UNIQUE)]


def _check_one_of_each(site: Site, crawl: Crawl) -> None:
    assert crawl.returncode == 0, crawl.log
    for page, mirror in _pairs(site):
        assert (page in crawl.urls) != (mirror in crawl.urls), (page, crawl.urls)
    assert set(_uniques(site)) <= crawl.urls
    assert len(crawl.items) == UNIQUE + TEXTS  # the mirrors dropped, nothing else
    for name in ("notes.txt", "mirror/notes.txt"):  # passed untouched
        (item,) = [item for item in crawl.items if item["url"] == site.url(name)]
        assert item["permindex"] is None


def test_the_pages_are_far_apart(site: Site) -> None:
    """The premise of the crawls: unique pages are far apart, a mirror has its page's text."""
    fps = {p.name: simhash(read_file_text(p)) for p in site.root.glob("u*.html")}
    values = [fp for fp in fps.values() if fp is not None]
    assert len(values) == UNIQUE
    assert min(hamming(a, b) for i, a in enumerate(values) for b in values[i + 1 :]) > 3
    for i in range(MIRRORED):
        assert simhash(read_file_text(site.root / "mirror" / f"u{i}.html")) == fps[f"u{i}.html"]


@pytest.mark.parametrize("reactor", [ASYNCIO, EPOLL], ids=["asyncio", "epoll"])
def test_crawl_scrapes_one_of_each_mirror_pair(
    tmp_path: Path, site: Site, server: str, collection: str, reactor: str
) -> None:
    settings = (
        f"PERMINDEX_ADDRESS={server}",
        f"PERMINDEX_COLLECTION={collection}",
        f"TWISTED_REACTOR={reactor}",
    )
    crawl = _crawl(tmp_path, site.url("index.html"), *settings)
    _check_one_of_each(site, crawl)
    assert {item["reactor"] for item in crawl.items} == {reactor.rsplit(".", 1)[1]}
    # the index page and the 6 unique pages stored; 3 mirrors found; one request at least
    assert crawl.stat("permindex/added") == 1 + UNIQUE
    assert crawl.stat("permindex/near_duplicate") == MIRRORED
    assert crawl.stat("permindex/errors") is None
    requests = crawl.stat("permindex/requests")
    assert requests is not None and 1 <= requests <= 1 + UNIQUE + MIRRORED
    dropped = re.findall(r"Dropped near-duplicate (\S+) of (\S+) \(distance (\d)\)", crawl.log)
    assert len(dropped) == MIRRORED
    for url, kept, distance in dropped:
        assert distance == "0" and kept in crawl.urls and url not in crawl.urls
    for item in crawl.items:
        found = item["permindex"]
        assert found is None or (isinstance(found, dict) and found["status"] == "added")
    assert len(crawl.dropped) == MIRRORED  # the errback sees what was found
    for item in crawl.dropped:
        found = item["permindex"]
        assert isinstance(found, dict) and found["status"] == "near_duplicate"
        assert found["distance"] == 0 and found["duplicate_of"] in crawl.urls
    # the server holds what `ingest` would store for the same files
    with Client(server, collection=collection) as client:
        for i in range(UNIQUE):
            stored = client.get(site.url(f"u{i}.html")) or client.get(site.url(f"mirror/u{i}.html"))
            assert stored == simhash(read_file_text(site.root / f"u{i}.html"))
    if reactor != ASYNCIO:
        return
    # a re-crawl of the same URLs: each page replaces itself, the same mirrors are dropped
    again = _crawl(tmp_path, site.url("index.html"), *settings)
    _check_one_of_each(site, again)
    assert again.urls == crawl.urls
    assert again.stat("permindex/replaced") == 1 + UNIQUE
    assert again.stat("permindex/added") is None
    assert again.stat("permindex/near_duplicate") == MIRRORED


def test_annotate_only(tmp_path: Path, site: Site, server: str, collection: str) -> None:
    crawl = _crawl(
        tmp_path,
        site.url("index.html"),
        f"PERMINDEX_ADDRESS={server}",
        f"PERMINDEX_COLLECTION={collection}",
        "PERMINDEX_DROP=False",
    )
    assert crawl.returncode == 0, crawl.log
    assert len(crawl.items) == UNIQUE + MIRRORED + TEXTS  # every page scraped
    near = [
        item
        for item in crawl.items
        if isinstance(item["permindex"], dict) and item["permindex"]["status"] == "near_duplicate"
    ]
    assert len(near) == MIRRORED
    for item in near:
        found = item["permindex"]
        assert isinstance(found, dict)
        assert found["distance"] == 0 and found["matches"] == [[found["duplicate_of"], 0]]
        pair = {str(item["url"]), str(found["duplicate_of"])}
        assert len(pair) == 2 and len({url.replace("/mirror/", "/") for url in pair}) == 1
    assert crawl.stat("permindex/near_duplicate") == MIRRORED
    assert "kept: PERMINDEX_DROP = False" in crawl.log


@pytest.mark.parametrize("shards", [1, 2], ids=["one-server", "two-shards"])
def test_a_jaccard_collection(tmp_path: Path, site: Site, server: str, shards: int) -> None:
    """The middleware over a Jaccard collection (method minhash): the same pages flagged, each
    with the Jaccard of its nearest page (1.0: a mirror has its page's text); with
    ``PERMINDEX_ADDRESS`` naming two shards as well (the client checks every shard, then adds
    on the key's)."""
    name = f"jaccard-{next(_collections)}"
    other = ServeProcess(tmp_path / "shard-2") if shards == 2 else None
    addresses = [server]
    if other is not None:
        second = other.address()
        assert second is not None, other.text
        addresses.append(second)
    try:
        with Client(addresses) as client:
            client.create_collection(name, method="minhash", threshold=0.8)
        crawl = _crawl(
            tmp_path,
            site.url("index.html"),
            f"PERMINDEX_ADDRESS={','.join(addresses)}",
            f"PERMINDEX_COLLECTION={name}",
            "PERMINDEX_DROP=False",
        )
        with Client(addresses, collection=name) as client:
            stored = {key for key, _ in client.iter_export()}
        for page, mirror in _pairs(site):  # one of each mirrored pair stored, on any shard
            assert (page in stored) != (mirror in stored), (page, stored)
        assert set(_uniques(site)) <= stored
    finally:
        if other is not None:
            other.stop()
    assert crawl.returncode == 0, crawl.log
    near = [
        item["permindex"]
        for item in crawl.items
        if isinstance(item["permindex"], dict) and item["permindex"]["status"] == "near_duplicate"
    ]
    assert len(near) == MIRRORED
    for found in near:
        assert isinstance(found, dict)
        assert found["jaccard"] == 1.0 and found["matches"] == [[found["duplicate_of"], 1.0]]
    assert "Jaccard 1.0000" in crawl.log


@pytest.mark.parametrize("priority", [500, 800], ids=["after-decompression", "before"])
def test_gzip_response(
    tmp_path: Path, site: Site, server: str, collection: str, priority: int
) -> None:
    """A gzip-encoded page and its plain mirror: one of them scraped, the same fingerprint
    whether the middleware runs after Scrapy's decompression (500) or before it (800), and the
    response passed on still decodes (the spider reads its title)."""
    crawl = _crawl(
        tmp_path,
        site.url("gz.html"),
        f"PERMINDEX_ADDRESS={server}",
        f"PERMINDEX_COLLECTION={collection}",
        f'DOWNLOADER_MIDDLEWARES={{"permindex.scrapy.NearDuplicateMiddleware": {priority}}}',
    )
    assert crawl.returncode == 0, crawl.log
    assert len(crawl.items) == 1, crawl.items
    assert crawl.items[0]["title"] in ("g", "mirror g")
    assert crawl.stat("permindex/near_duplicate") == 1
    assert crawl.stat("permindex/errors") is None
    with Client(server, collection=collection) as client:
        stored = [client.get(site.url(name)) for name in ("gz/g.html", "mirror/g.html")]
    expected = simhash(read_file_text(site.root / "g.html"))
    assert [fp for fp in stored if fp is not None] == [expected]


def _unused_address() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


@pytest.mark.parametrize("reactor", [ASYNCIO, EPOLL], ids=["asyncio", "epoll"])
def test_server_down_fail_open(tmp_path: Path, site: Site, reactor: str) -> None:
    crawl = _crawl(
        tmp_path,
        site.url("index.html"),
        f"PERMINDEX_ADDRESS={_unused_address()}",
        f"TWISTED_REACTOR={reactor}",
    )
    assert crawl.returncode == 0, crawl.log
    assert crawl.finish_reason == "finished"
    assert len(crawl.items) == UNIQUE + MIRRORED + TEXTS  # every page scraped
    assert crawl.stat("permindex/errors") == 1 + UNIQUE + MIRRORED
    assert crawl.stat("permindex/added") is None
    assert "pages pass unchecked until it answers (PERMINDEX_FAIL_OPEN = True)" in crawl.log
    for item in crawl.items:
        if not str(item["url"]).endswith(".txt"):
            assert item["permindex"] == {"status": "error", "fingerprint": None, "matches": []}


def test_server_down_fail_closed(tmp_path: Path, site: Site) -> None:
    crawl = _crawl(
        tmp_path,
        site.url("index.html"),
        f"PERMINDEX_ADDRESS={_unused_address()}",
        "PERMINDEX_FAIL_OPEN=False",
    )
    assert crawl.finish_reason == "permindex_error", crawl.log
    assert re.search(r"ERROR: permindex server \S+: .*failed to connect.*; stopping the crawl "
                     r"\(PERMINDEX_FAIL_OPEN = False\)", crawl.log), crawl.log  # fmt: skip
    assert crawl.items == []  # the index page was not checked: nothing followed, nothing scraped


def test_batch_checker_sends_queued_pages_in_one_request(server: str, collection: str) -> None:
    """Pages queued while no request can be sent (here: before the worker starts; in a crawl:
    while the previous request is in flight) go in one CheckAndAdd, which the server applies in
    order: of two near-duplicates in one request only the first is stored."""
    rng = random.Random(7)
    texts = [_words(rng, 100) for _ in range(40)]
    outcomes: list[PageOutcome] = []
    done = threading.Event()

    def settle(outcome: PageOutcome) -> None:
        outcomes.append(outcome)
        if len(outcomes) == 41:
            done.set()

    checker = BatchChecker(Client(server, collection=collection))
    for i, text in enumerate(texts):
        checker.submit(f"page-{i}", lambda text=text: text, settle)  # type: ignore[misc]
    checker.submit("copy-of-0", lambda: texts[0], settle)
    checker.start()
    assert done.wait(30)
    checker.stop(timeout=10)
    assert checker.requests == 1
    assert [o.status for o in outcomes] == ["added"] * 40 + ["near_duplicate"]
    assert outcomes[-1].matches[0].key == "page-0" and outcomes[-1].batch == 41


def test_token_file_and_configuration_errors(tmp_path: Path, site: Site) -> None:
    """PERMINDEX_TOKEN_FILE: a read-write token crawls; a read-only one (PERMISSION_DENIED) and a
    collection that does not exist stop the crawl even with PERMINDEX_FAIL_OPEN = True."""
    tokens = tmp_path / "tokens"
    read_write, read_only = "rw-" + "a" * 29, "ro-" + "b" * 29
    tokens.write_text(f"{read_write} read-write\n{read_only} read-only\n", encoding="utf-8")
    process = ServeProcess(tmp_path / "data", "--token-file", str(tokens))
    address = process.address()
    assert address is not None, process.text
    try:
        (tmp_path / "rw").write_text(f"{read_write}\n", encoding="utf-8")
        (tmp_path / "ro").write_text(f"  {read_only} a comment\n", encoding="utf-8")
        start = site.url("index.html")
        runs = {}
        for name, extra in [
            ("rw", (f"PERMINDEX_TOKEN_FILE={tmp_path / 'rw'}",)),
            ("ro", (f"PERMINDEX_TOKEN_FILE={tmp_path / 'ro'}",)),
            ("missing", (f"PERMINDEX_TOKEN_FILE={tmp_path / 'rw'}", "PERMINDEX_COLLECTION=nope")),
        ]:
            workdir = tmp_path / f"crawl-{name}"
            workdir.mkdir()
            runs[name] = _crawl(workdir, start, f"PERMINDEX_ADDRESS={address}", *extra)
    finally:
        process.stop()
    _check_one_of_each(site, runs["rw"])
    for name in ("ro", "missing"):
        crawl = runs[name]
        assert crawl.finish_reason == "permindex_error", crawl.log
        assert crawl.items == []
        assert re.search(r"ERROR: permindex server \S+: .*; stopping the crawl\n", crawl.log)
    assert "PERMISSION_DENIED" in runs["ro"].log or "read-only" in runs["ro"].log
    assert "nope" in runs["missing"].log


def test_a_missing_token_file_is_refused_at_start(tmp_path: Path, site: Site) -> None:
    crawl = _crawl(
        tmp_path,
        site.url("index.html"),
        f"PERMINDEX_ADDRESS={_unused_address()}",
        f"PERMINDEX_TOKEN_FILE={tmp_path / 'absent'}",
    )
    assert crawl.returncode != 0 and crawl.items == []
    assert f"PERMINDEX_TOKEN_FILE {tmp_path / 'absent'}: cannot read it" in crawl.log


def test_extract_main(tmp_path: Path, site: Site, server: str, collection: str) -> None:
    """PERMINDEX_EXTRACT = main: the text of ``ingest --extract main`` (the main content, or
    the visible text when that is too short). The same article under two templates is a
    near-duplicate (one dropped) though its visible texts are far apart; two articles under one
    template are not."""
    folder = site.root / "main"
    visible = {p.stem: simhash(read_file_text(p)) for p in folder.glob("*.html")}
    main = {p.stem: simhash(read_file_text(p, extract="main")) for p in folder.glob("*.html")}
    assert hamming(visible["a1"], visible["a2"]) > 3 and main["a1"] == main["a2"]
    assert hamming(main["a1"], main["b1"]) > 3 and main["short"] == visible["short"]
    assert all(main[n] != visible[n] for n in ("a1", "a2", "b1"))
    crawl = _crawl(
        tmp_path,
        site.url("main.html"),
        f"PERMINDEX_ADDRESS={server}",
        f"PERMINDEX_COLLECTION={collection}",
        "PERMINDEX_EXTRACT=main",
    )
    assert crawl.returncode == 0, crawl.log
    pages = {site.url(f"main/{n}.html") for n in ("b1", "short")}
    assert pages <= crawl.urls and len(crawl.urls) == 3  # a1 or a2, b1, short
    assert crawl.stat("permindex/near_duplicate") == 1
    assert crawl.stat("permindex/added") == 4  # main.html (its links' text) too
    with Client(server, collection=collection) as client:
        for name in ("b1", "short"):
            assert client.get(site.url(f"main/{name}.html")) == main[name]
        kept = [client.get(site.url(f"main/{n}.html")) for n in ("a1", "a2")]
    assert [fp for fp in kept if fp is not None] == [main["a1"]]


def test_a_bad_extract_is_refused_at_start(tmp_path: Path, site: Site) -> None:
    crawl = _crawl(
        tmp_path,
        site.url("main.html"),
        f"PERMINDEX_ADDRESS={_unused_address()}",
        "PERMINDEX_EXTRACT=boilerplate",
    )
    assert crawl.returncode != 0 and crawl.items == []
    assert "PERMINDEX_EXTRACT must be one of visible, main, got 'boilerplate'" in crawl.log


def test_k(tmp_path: Path, site: Site, server: str, collection: str) -> None:
    """Two pages 2 bits apart: one is dropped with the collection's k (3), both are scraped with
    PERMINDEX_K = 1; a k above the collection's stops the crawl (every request is refused), and
    so does any k on a Jaccard collection, the log naming PERMINDEX_K."""
    with Client(server) as client:
        client.create_collection(collection + "-k1")
        client.create_collection(collection + "-j", method="minhash", threshold=0.8)
    runs = {}
    for name, extra in [
        ("k3", (collection, ())),
        ("k1", (collection + "-k1", ("PERMINDEX_K=1",))),
        ("k9", (collection + "-k1", ("PERMINDEX_K=9",))),
        ("jk", (collection + "-j", ("PERMINDEX_K=3",))),
    ]:
        workdir = tmp_path / name
        workdir.mkdir()
        runs[name] = _crawl(
            workdir,
            site.url("k.html"),
            f"PERMINDEX_ADDRESS={server}",
            f"PERMINDEX_COLLECTION={extra[0]}",
            *extra[1],
        )
    assert len(runs["k3"].items) == 1 and runs["k3"].stat("permindex/near_duplicate") == 1
    assert "(distance 2)" in runs["k3"].log
    assert len(runs["k1"].items) == 2 and runs["k1"].stat("permindex/near_duplicate") is None
    assert runs["k9"].finish_reason == "permindex_error" and runs["k9"].items == []
    assert re.search(
        r"ERROR: permindex server \S+: .*\b9\b.*; stopping the crawl \(PERMINDEX_K = 9 ",
        runs["k9"].log,
    )
    # a Jaccard collection takes no k: the log names the setting to remove
    assert runs["jk"].finish_reason == "permindex_error" and runs["jk"].items == []
    assert re.search(
        r"ERROR: permindex server \S+: .*leave k unset.*; stopping the crawl \(PERMINDEX_K = 3 is "
        r"sent with every page: .* a Jaccard collection \(method minhash\) any k; lower "
        r"PERMINDEX_K or remove it\)\n",
        runs["jk"].log,
    )


def test_a_page_that_cannot_be_sent_does_not_fail_the_others(server: str, collection: str) -> None:
    """A text over the limit, a key over 1,024 bytes and a body that cannot be decoded are that
    page's errors; the pages sent with them are checked."""
    rng = random.Random(8)
    outcomes: dict[str, PageOutcome] = {}
    done = threading.Event()

    def settle(outcome: PageOutcome) -> None:
        outcomes[outcome.key] = outcome
        if len(outcomes) == 4:
            done.set()

    def undecodable() -> str:
        raise UndecodableBodyError("the gzip body is corrupt")

    checker = BatchChecker(Client(server, collection=collection), max_text_bytes=2000)
    checker.submit("long", lambda: _words(rng, 1000), settle)
    checker.submit("x" * 1025, lambda: _words(rng, 50), settle)
    checker.submit("corrupt", undecodable, settle)
    checker.submit("fine", lambda: _words(rng, 50), settle)
    checker.start()
    assert done.wait(30)
    checker.stop(timeout=10)
    assert outcomes["fine"].status == "added" and checker.requests == 1
    assert isinstance(outcomes["long"].error, LimitExceededError)
    assert "PERMINDEX_MAX_TEXT_BYTES" in str(outcomes["long"].error)
    assert isinstance(outcomes["x" * 1025].error, InvalidKeyError)
    assert isinstance(outcomes["corrupt"].error, UndecodableBodyError)
    assert {o.status for k, o in outcomes.items() if k != "fine"} == {"error"}


@pytest.mark.parametrize(
    "codings",
    [["gzip"], ["x-gzip"], ["deflate"], ["raw-deflate"], ["gzip", "deflate"], ["identity"], []],
)
def test_response_text_undoes_the_content_encodings(codings: list[str]) -> None:
    """What the middleware fingerprints when it runs before Scrapy's decompression: the text
    ``ingest`` takes from the same HTML, whatever Content-Encoding still applies."""
    html = _page("t", "café " + _words(random.Random(1), 50)).encode("utf-8")
    body = html
    for coding in codings:  # applied in order, the header lists them in that order
        if coding in ("gzip", "x-gzip"):
            body = gzip.compress(body)
        elif coding == "deflate":
            body = zlib.compress(body)
        elif coding == "raw-deflate":
            squeeze = zlib.compressobj(wbits=-15)
            body = squeeze.compress(body) + squeeze.flush()
    header = ", ".join("deflate" if c == "raw-deflate" else c for c in codings)
    headers = {"Content-Type": "text/html; charset=utf-8"}
    if header:
        headers["Content-Encoding"] = header
    response = HtmlResponse("http://127.0.0.1/p", body=body, headers=headers)
    assert decoded_body(response) == (html if "identity" not in codings else body)
    assert response_text(response, html_to_text) == html_to_text(html.decode("utf-8"))
    assert response.body == body  # unchanged


def test_a_body_that_cannot_be_decoded_is_refused() -> None:
    def response(body: bytes, coding: str) -> HtmlResponse:
        return HtmlResponse("http://127.0.0.1/p", body=body, headers={"Content-Encoding": coding})

    with pytest.raises(UndecodableBodyError, match="corrupt"):
        decoded_body(response(b"not gzip at all", "gzip"))
    with pytest.raises(UndecodableBodyError, match="truncated"):
        decoded_body(response(gzip.compress(b"x" * 1000)[:-12], "gzip"))
    with pytest.raises(UndecodableBodyError, match="unknown Content-Encoding 'compress'"):
        decoded_body(response(b"...", "compress"))
    bomb = gzip.compress(b"\0" * (1 << 20))
    with pytest.raises(UndecodableBodyError, match="more than 1,000 bytes once decoded"):
        decoded_body(response(bomb, "gzip"), limit=1000)
    two_members = gzip.compress(b"<p>one two") + gzip.compress(b" three</p>")
    assert decoded_body(response(two_members, "gzip")) == b"<p>one two three</p>"


@pytest.mark.parametrize("reactor", [ASYNCIO, EPOLL], ids=["asyncio", "epoll"])
def test_the_reactor_runs_while_a_check_hangs(tmp_path: Path, site: Site, reactor: str) -> None:
    """A server that accepts the connection and never answers: the HTML page's check waits for
    its deadline (5 s) on the worker thread, and meanwhile the crawl goes on: a text file that
    arrives 1 s after the page is scraped at once, not once the check gives up."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)  # the kernel completes the handshakes; nothing ever reads
        crawl = _crawl(
            tmp_path,
            f"{site.url('u0.html')},{site.url('slow/notes.txt')}",
            f"PERMINDEX_ADDRESS=127.0.0.1:{silent.getsockname()[1]}",
            "PERMINDEX_TIMEOUT=5",
            f"TWISTED_REACTOR={reactor}",
        )
    assert crawl.returncode == 0, crawl.log
    (notes,) = crawl.items
    assert notes["url"] == site.url("slow/notes.txt")
    found = re.search(r"'elapsed_time_seconds': ([\d.]+)", crawl.log)
    assert found is not None
    crawl_seconds = float(found.group(1))  # from the spider's opening, just before its start
    assert crawl_seconds >= 5  # the check waited for its deadline
    # scraped about 1 s after the start, not after the deadline
    assert 1 <= float(notes["elapsed"]) < crawl_seconds - 2, crawl.log  # type: ignore[arg-type]
    assert crawl.stat("permindex/errors") == 1
    assert "no answer within the call's deadline" in crawl.log


def test_a_page_that_cannot_be_parsed_passes_whatever_fail_open(
    tmp_path: Path, site: Site, server: str, collection: str
) -> None:
    """HTML nested deeper than libxml2 parses is the page's problem, not the server's: it
    passes, counted in permindex/unchecked_pages, and the crawl is not stopped."""
    (site.root / "deep.html").write_text(
        "<html><body>" + "<div>" * 100_000 + "some words of text here" + "</body></html>",
        encoding="utf-8",
    )
    crawl = _crawl(
        tmp_path,
        site.url("deep.html"),
        f"PERMINDEX_ADDRESS={server}",
        f"PERMINDEX_COLLECTION={collection}",
        "PERMINDEX_FAIL_OPEN=False",
    )
    assert crawl.returncode == 0 and crawl.finish_reason == "finished", crawl.log
    # not dropped (the spider's errback would record it); the spider itself gets the page
    # (its own parse of so deep a page may fail: not the middleware's concern)
    assert crawl.dropped == []
    assert crawl.stat("permindex/unchecked_pages") == 1
    assert crawl.stat("permindex/errors") is None
    assert "passes unchecked" in crawl.log
