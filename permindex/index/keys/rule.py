"""The key rule, in one place for the index, the input readers and the server: a key is a
non-empty ``str`` of at most :data:`MAX_KEY_BYTES` UTF-8 bytes (a server may set a lower limit).
Also the small argument checks the index layer shares (:func:`check_int`, :func:`short_repr`).
"""

from __future__ import annotations

from typing import Final

import numpy as np

from permindex.errors import InvalidKeyError

__all__ = ["MAX_KEY_BYTES", "check_int", "short_repr", "validate_key"]

#: Longest key, in UTF-8 bytes.
MAX_KEY_BYTES: Final = 1024


def validate_key(key: object, *, name: str = "key", max_bytes: int = MAX_KEY_BYTES) -> str:
    """Return ``key`` as a ``str`` after checking it is a valid key: a non-empty str of at most
    ``max_bytes`` (default :data:`MAX_KEY_BYTES`, 1,024) bytes in UTF-8 (URLs, paths, ids).

    ``name`` names the key in the messages (``"keys[3]"``). Callers that word their messages
    differently (the JSONL reader, the server's request checks) catch the
    :class:`~permindex.errors.InvalidKeyError` and format its ``reason``, ``size`` and
    ``limit``; the rule itself is only here.

    O(1) for an ASCII key; O(len(key)) otherwise (the key is encoded to be measured).

    Raises:
        TypeError: ``key`` is not a str.
        InvalidKeyError: (an :class:`~permindex.errors.InvalidArgumentError`) it is empty
            (``reason="empty"``), not encodable as UTF-8 (a lone surrogate, ``"encoding"``), or
            longer than ``max_bytes`` UTF-8 bytes (``"size"``).
    """
    if not isinstance(key, str):
        raise TypeError(f"{name} must be str, not {type(key).__name__} {short_repr(key)}")
    if type(key) is not str:  # a subclass: check and return its characters, whatever it overrides
        key = str.__str__(key)
    if not key:
        raise InvalidKeyError(f"{name} must not be empty", key, "empty", 0, max_bytes)
    if key.isascii():
        size = len(key)
    else:
        try:
            size = len(key.encode("utf-8"))
        except UnicodeEncodeError as error:
            raise InvalidKeyError(
                f"{name} {short_repr(key)} cannot be encoded as UTF-8: {error.reason}",
                key,
                "encoding",
                None,
                max_bytes,
            ) from None
    if size > max_bytes:
        raise InvalidKeyError(
            f"{name} {short_repr(key)} is {size} UTF-8 bytes; at most {max_bytes} are allowed",
            key,
            "size",
            size,
            max_bytes,
        )
    return key


def short_repr(value: object) -> str:
    """``repr(value)``, cut to 60 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check_int(value: object, name: str) -> int:
    """``value`` as an int (a numpy integer is converted).

    Raises:
        TypeError: (naming ``name``) a bool or a non-integer.
    """
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int, not {type(value).__name__} {short_repr(value)}")
    return int(value)
