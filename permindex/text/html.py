"""The visible text of an HTML page (:func:`html_to_text`; or its main content,
:func:`html_page_text`), as ``ingest`` and ``dedup`` read an
HTML file and the Scrapy middleware a response. lxml is imported on the first call.
"""

from __future__ import annotations

from typing import Final

from permindex.errors import InvalidArgumentError
from permindex.text.extract import Extract, main_text

__all__ = ["html_page_text", "html_to_main_text", "html_to_text"]

#: Elements whose end (and start) ends a line of visible text.
_BLOCK_ELEMENTS: Final = frozenset(
    """address article aside blockquote body br caption center dd details dialog dir div dl dt
    fieldset figcaption figure footer form frame frameset h1 h2 h3 h4 h5 h6 header hgroup hr html
    iframe legend li main menu nav noframes ol optgroup option p pre section summary table tbody
    td tfoot th thead title tr ul""".split()
)
#: Elements whose content is not visible text. An iframe's content is the fallback shown only by
#: browsers without frames.
_DROPPED_ELEMENTS: Final = frozenset(("head", "script", "style", "iframe"))


def html_to_text(html: str) -> str:
    """The visible text of an HTML page: ``head``, ``script``, ``style`` and ``iframe`` dropped
    (comments, processing instructions and doctype too); block elements (``p``, ``div``, ``li``,
    ``td``, ``h1``...) and ``br`` end a line; inline elements (``a``, ``b``, ``span``...) join their
    text to their neighbours without a space. Each line stripped, blank lines removed. Parsed with
    lxml's HTML parser (libxml2), which repairs malformed markup as browsers do; a page with no
    markup at all gives its text, an empty page ``""``. O(len(html)) time and memory.

    Raises:
        InvalidArgumentError: the page cannot be parsed whole (elements nested more than 2,048
            deep: libxml2's limit); no partial text is returned.

    Examples:
        >>> import permindex
        >>> page = "<head><title>T</title></head><body><h1>Tides</h1><p>Twice a <b>day</b>.</p>"
        >>> permindex.html_to_text(page + "<script>go()</script></body>")
        'Tides\\nTwice a day.'
    """
    from lxml import etree
    from lxml import html as lxml_html

    # The text was decoded as UTF-8 already; say so, so that a <meta charset> or an XML
    # declaration naming another encoding cannot make libxml2 decode it again. huge_tree lifts
    # the nesting limit from 256 to 2,048. A parser per call: its error log is per parser.
    parser = lxml_html.HTMLParser(
        encoding="utf-8", remove_comments=True, remove_pis=True, huge_tree=True
    )
    try:
        root = lxml_html.document_fromstring(html.encode("utf-8"), parser=parser)
    except etree.ParserError:  # "Document is empty"
        return ""
    fatal = [entry for entry in parser.error_log if entry.level_name == "FATAL"]
    if fatal:
        raise InvalidArgumentError(f"HTML cannot be parsed: {fatal[0].message}")
    parts: list[str] = []
    walker = etree.iterwalk(root, events=("start", "end"))
    for event, element in walker:
        tag = element.tag
        if not isinstance(tag, str):  # a comment or processing instruction: only its tail shows
            if event == "end" and element.tail:
                parts.append(element.tail)
            continue
        if tag in _DROPPED_ELEMENTS:
            if event == "start":
                walker.skip_subtree()
            elif element.tail:
                parts.append(element.tail)
            continue
        if tag in _BLOCK_ELEMENTS:
            parts.append("\n")
        if event == "start":
            if element.text:
                parts.append(element.text)
        elif element.tail:
            parts.append(element.tail)
    lines = (line.strip() for line in "".join(parts).splitlines())
    return "\n".join(line for line in lines if line)


def html_page_text(html: str, extract: Extract = "visible") -> str:
    """The text of an HTML page: :func:`html_to_text` (``extract="visible"``), or with
    ``extract="main"`` its main content (:func:`permindex.text.extract.main_text`), the visible
    text when that is too short. ``extract`` is not checked here (see
    :func:`~permindex.text.extract.check_extract`). Raises as :func:`html_to_text`."""
    main = main_text(html) if extract == "main" else None
    return main if main is not None else html_to_text(html)


def html_to_main_text(html: str) -> str:
    """The main content of an HTML page as text: the page without its boilerplate (navigation,
    headers, footers, sidebars, cookie banners), as trafilatura extracts it, paragraphs on
    lines of their own; when that has fewer than 50 words (a table of contents or an index
    page, mostly links, which the extractor cuts to its header), the page's visible text,
    :func:`html_to_text`, instead. It is the text that ``ingest --extract main``, ``dedup
    --extract main`` and the Scrapy middleware with ``PERMINDEX_EXTRACT = "main"`` fingerprint:
    pass it to :func:`permindex.simhash` or a :class:`permindex.Client`'s ``add`` and
    ``check_and_add`` to compare pages with theirs. O(len(html)).

    Needs trafilatura, the optional extra ``pip install '.[extract]'``.

    Examples:
        >>> import permindex
        >>> menu = "".join(f"<li><a href='/{i}'>Menu item {i}</a></li>" for i in range(12))
        >>> story = "The tide comes in twice a day and goes out twice a day. " * 6
        >>> page = f"<body><nav><ul>{menu}</ul></nav><article><h1>Tides</h1><p>{story}</p>"
        >>> text = permindex.html_to_main_text(page + "<footer>Cookie notice</footer></body>")
        >>> text.splitlines()[0], "Menu item" in text, "Cookie" in text
        ('Tides', False, False)
        >>> permindex.html_to_main_text("<p>A short page of a few words.</p>")
        'A short page of a few words.'

    Raises:
        ImportError: trafilatura is not installed; the message says how to install it.
        InvalidArgumentError: the page cannot be parsed whole (as :func:`html_to_text`).
    """
    try:
        return html_page_text(html, "main")
    except ModuleNotFoundError as error:
        if error.name != "trafilatura":
            raise
        raise ModuleNotFoundError(
            "html_to_main_text needs trafilatura: pip install '.[extract]'",
            name="trafilatura",
        ) from None
