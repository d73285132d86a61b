"""Main-content extraction for web pages (``--extract main`` of ``ingest`` and ``dedup``): the
text of a page with its boilerplate (navigation, headers, footers, sidebars, cookie banners)
removed by trafilatura (Barbaresso 2021, *Trafilatura: A Web Scraping Library and Command-Line
Tool for Text Discovery and Extraction*, ACL demos), an optional extra: ``pip install
'.[extract]'``.

Two documentation pages of one site share their menus, so their visible texts look alike
however different their contents; their main texts do not. But an extractor can also throw
away the content itself: table-of-contents and index pages are mostly links, and trafilatura
cuts such a page to its header. So :func:`main_text` gives up (the caller keeps the visible
text, :func:`permindex.text.documents.html_to_text`) when the extracted text has fewer than
:data:`MIN_MAIN_WORDS` words.
Importing it does not import trafilatura.
"""

from __future__ import annotations

import importlib.util
from typing import Final, Literal

from permindex.errors import InvalidArgumentError

__all__ = ["EXTRACTS", "MIN_MAIN_WORDS", "Extract", "check_extract", "main_text"]

Extract = Literal["visible", "main"]
#: The text of an HTML page: ``"visible"`` (every visible text node, the default) or ``"main"``
#: (the main content, boilerplate removed, :func:`main_text`).
EXTRACTS: Final = ("visible", "main")
#: Extracted main text shorter than this many words (``str.split``) is not used: the page's
#: visible text is, instead.
MIN_MAIN_WORDS: Final = 50


def check_extract(extract: object) -> Extract:
    """``extract`` checked: one of :data:`EXTRACTS`, and for ``"main"`` trafilatura installed.

    Raises:
        InvalidArgumentError: an unknown value, or ``"main"`` without trafilatura (the message
            says how to install it).
    """
    if extract not in EXTRACTS:
        raise InvalidArgumentError(
            f"extract must be one of {', '.join(EXTRACTS)}, got {extract!r}", value=extract
        )
    if extract == "main" and importlib.util.find_spec("trafilatura") is None:
        raise InvalidArgumentError(
            "extract 'main' needs trafilatura: pip install '.[extract]' in the permindex clone",
            value=extract,
        )
    return "main" if extract == "main" else "visible"


def main_text(html: str) -> str | None:
    """The main content of the page ``html`` as text (paragraphs separated by newlines), or
    None when trafilatura finds none or fewer than :data:`MIN_MAIN_WORDS` words (the caller
    then keeps the visible text). Tables are kept, comments are not; no deduplication of
    repeated paragraphs (the fingerprint decides what repeats). O(len(html)).

    Raises:
        ImportError: trafilatura is not installed (check with :func:`check_extract` first).
    """
    import trafilatura

    text = trafilatura.extract(
        html,
        include_comments=False,
        include_tables=True,
        include_images=False,
        include_links=False,
        deduplicate=False,
        with_metadata=False,
    )
    if text is None or len(text.split()) < MIN_MAIN_WORDS:
        return None
    return str(text)
