"""Logging of ``permindex serve``: plain text or one JSON object a line (``--log-format``).

A JSON line holds ``time`` (ISO 8601, UTC), ``level``, ``logger``, ``message`` and, when there is
one, ``exception`` (the traceback as text). Nothing in permindex logs keys or texts at INFO or
above; DEBUG may name methods and status codes, never tokens.
"""

from __future__ import annotations

import datetime
import json
import logging
import sys
from typing import Final

__all__ = ["LOG_FORMATS", "LOG_LEVELS", "JsonFormatter", "configure_logging"]

LOG_FORMATS: Final = ("text", "json")
LOG_LEVELS: Final = ("debug", "info", "warning", "error")
_TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object a line (fields: module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure_logging(log_format: str = "text", level: str = "warning") -> None:
    """Send the ``permindex`` loggers to stderr at ``level`` in ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if log_format == "json" else logging.Formatter(_TEXT_FORMAT)
    )
    logger = logging.getLogger("permindex")
    for old in list(logger.handlers):
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(level.upper())
    logger.propagate = False
