"""The key rule: what a key is (a non-empty str of at most :data:`MAX_KEY_BYTES` UTF-8 bytes),
checked in one place for the index, the input readers and the server.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from permindex.errors import InvalidArgumentError

__all__ = ["MAX_KEY_BYTES", "check_int", "short_repr", "validate_key"]

#: Longest key, in UTF-8 bytes.
MAX_KEY_BYTES: Final = 1024


def validate_key(key: object, *, name: str = "key") -> str:
    """Return ``key`` as a ``str`` after checking it is a valid key: a non-empty str of at most
    :data:`MAX_KEY_BYTES` (1,024) bytes in UTF-8 (URLs, paths, ids).

    Raises:
        TypeError: ``key`` is not a str.
        InvalidArgumentError: it is empty, longer than 1,024 UTF-8 bytes, or not encodable
            (a lone surrogate).
    """
    if not isinstance(key, str):
        raise TypeError(f"{name} must be str, not {type(key).__name__} {short_repr(key)}")
    if not key:
        raise InvalidArgumentError(f"{name} must not be empty", value=key)
    if key.isascii():
        size = len(key)
    else:
        try:
            size = len(key.encode("utf-8"))
        except UnicodeEncodeError as error:
            raise InvalidArgumentError(
                f"{name} {short_repr(key)} cannot be encoded as UTF-8: {error.reason}", value=key
            ) from None
    if size > MAX_KEY_BYTES:
        raise InvalidArgumentError(
            f"{name} {short_repr(key)} is {size} UTF-8 bytes; at most {MAX_KEY_BYTES} are allowed",
            value=key,
        )
    return key if type(key) is str else str(key)


def short_repr(value: object) -> str:
    """``repr(value)``, cut to 60 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_int(value: object, name: str) -> int:
    """``value`` as an int; ``TypeError`` (naming ``name``) for a bool or a non-integer."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__} {short_repr(value)}")
    return int(value)
