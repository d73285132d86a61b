"""The visible text of a Scrapy response, as ``permindex ingest`` takes it from an HTML file:
the body decoded from its ``Content-Encoding`` when it is still compressed (a middleware placed
before Scrapy's ``HttpCompressionMiddleware``, priority above 590, sees the body as it came from
the network), then from its charset (Scrapy's rule: the HTTP header, a BOM, ``<meta charset>``,
then detection), then reduced to visible text by :func:`permindex.text.documents.html_to_text`.
The response itself is never changed. No grpc.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Final

from permindex.errors import InvalidArgumentError

if TYPE_CHECKING:
    from scrapy.http import TextResponse

__all__ = [
    "MAX_DECODED_BYTES",
    "UndecodableBodyError",
    "content_encodings",
    "decoded_body",
    "response_text",
]

#: The largest body decoded from a Content-Encoding, bytes (a decompression bomb stops there).
MAX_DECODED_BYTES: Final = 64 * 1024 * 1024
_CHUNK: Final = 1 << 16


class UndecodableBodyError(InvalidArgumentError):
    """A compressed body cannot be decoded: an encoding with no decoder installed (``br`` needs
    the ``brotli`` or ``brotlicffi`` package, ``zstd`` the ``zstandard`` package), corrupt data,
    or more than :data:`MAX_DECODED_BYTES` once decoded."""


def content_encodings(response: TextResponse) -> list[str]:
    """The codings of the ``Content-Encoding`` header(s) in the order they were applied, lower
    case, ``identity`` left out (RFC 9110 section 8.4: a list, the first coding applied first)."""
    codings: list[str] = []
    for value in response.headers.getlist(b"Content-Encoding"):
        for part in value.decode("latin-1").split(","):
            coding = part.strip().lower()
            if coding and coding != "identity":
                codings.append(coding)
    return codings


def _inflate(body: bytes, wbits: int, limit: int) -> bytes:
    """zlib-decode ``body`` (``wbits`` as :func:`zlib.decompressobj`), gzip members one after
    the other, at most ``limit`` bytes out."""
    out: list[bytes] = []
    size = 0
    data = body
    while data:
        inflater = zlib.decompressobj(wbits)
        chunk = inflater.decompress(data, _CHUNK)
        while True:
            size += len(chunk)
            if size > limit:
                raise UndecodableBodyError(f"the body is more than {limit:,} bytes once decoded")
            out.append(chunk)
            if inflater.eof or not inflater.unconsumed_tail:
                break
            chunk = inflater.decompress(inflater.unconsumed_tail, _CHUNK)
        if not inflater.eof:
            raise UndecodableBodyError("the compressed body is truncated")
        data = inflater.unused_data if wbits > 15 else b""  # another gzip member follows
    return b"".join(out)


def _optional_decoder(coding: str) -> Callable[[bytes], bytes]:
    """The ``decompress`` of an optional package for ``br`` or ``zstd``."""
    names = {"br": ("brotli", "brotlicffi"), "zstd": ("zstandard",)}[coding]
    for name in names:
        try:
            module = __import__(name)
        except ImportError:
            continue
        decompress: Callable[[bytes], bytes] = module.decompress
        return decompress
    raise UndecodableBodyError(
        f"the body is {coding}-encoded and no decoder is installed (pip install {names[0]})"
    )


def _decode_one(body: bytes, coding: str, limit: int) -> bytes:
    try:
        if coding in ("gzip", "x-gzip"):
            return _inflate(body, 16 + zlib.MAX_WBITS, limit)
        if coding == "deflate":  # zlib-wrapped as the RFC says, or raw as some servers send
            try:
                return _inflate(body, zlib.MAX_WBITS, limit)
            except zlib.error:
                return _inflate(body, -zlib.MAX_WBITS, limit)
        if coding in ("br", "zstd"):
            decoded = _optional_decoder(coding)(body)
            if len(decoded) > limit:
                raise UndecodableBodyError(f"the body is more than {limit:,} bytes once decoded")
            return decoded
    except zlib.error as error:
        raise UndecodableBodyError(f"the {coding} body is corrupt: {error}") from None
    raise UndecodableBodyError(f"unknown Content-Encoding {coding!r}")


def decoded_body(response: TextResponse, limit: int = MAX_DECODED_BYTES) -> bytes:
    """The body of ``response`` with every Content-Encoding still applied undone (gzip, x-gzip,
    deflate; br and zstd when their package is installed), the last applied first; the body as
    it is when there is none. O(decoded size).

    Raises:
        UndecodableBodyError: see the class.
    """
    body = response.body
    for coding in reversed(content_encodings(response)):
        body = _decode_one(body, coding, limit)
    return body


def response_text(response: TextResponse, extract: Callable[[str], str]) -> str:
    """``extract`` (:func:`~permindex.text.documents.html_to_text` by default) of the decoded
    text of ``response``: its body decoded by :func:`decoded_body`, then from its charset as
    Scrapy decodes ``response.text``.

    Raises:
        UndecodableBodyError: see :func:`decoded_body`.
        InvalidArgumentError: ``extract`` refused the page (HTML nested too deep).
    """
    if content_encodings(response):
        response = response.replace(body=decoded_body(response))
    return extract(response.text)
