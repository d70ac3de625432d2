"""Filters on uvicorn's loggers: no secret in a log line, and no traceback for what is the client's fault or was
logged already."""

from __future__ import annotations

import logging
import re

_TOKEN = re.compile(r"([?&](?:token|access_token)=)[^&\s\"']*", re.IGNORECASE)
_INVALID_UTF8 = "Invalid UTF-8 sequence received from client."


def redact(text: str) -> str:
    """`?token=s3cret` -> `?token=***` (browsers send tokens in the query string)."""
    return _TOKEN.sub(r"\1***", text)


class AlreadyLogged(Exception):
    """Raised to cut a response whose cause was logged and counted already; uvicorn's traceback for it is dropped."""


class RedactTokens(logging.Filter):
    """uvicorn logs each request's path with its query string (access log, WebSocket accepts): redact tokens."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, str) and "token=" in a.lower() for a in record.args):
            record.args = tuple(redact(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str) and "token=" in record.msg.lower():
            record.msg = redact(record.msg)
        return True


class QuietClientErrors(logging.Filter):
    """One line, no traceback: a client's invalid UTF-8 (it gets close 1007), and responses cut on purpose."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.msg == _INVALID_UTF8:
            record.msg = "invalid UTF-8 in a client's text frame; closed with 1007"
            record.exc_info = record.exc_text = None
            record.levelno, record.levelname = logging.INFO, "INFO"
        elif record.exc_info and isinstance(record.exc_info[1], AlreadyLogged):
            record.msg, record.args = f"response cut: {record.exc_info[1]}", ()
            record.exc_info = record.exc_text = None
        return True


def install() -> None:
    """Idempotent: attach the filters to uvicorn's loggers (after uvicorn configured its logging)."""
    for name, filters in (("uvicorn.access", (RedactTokens,)), ("uvicorn.error", (RedactTokens, QuietClientErrors))):
        logger = logging.getLogger(name)
        for cls in filters:
            if not any(isinstance(f, cls) for f in logger.filters):
                logger.addFilter(cls())
