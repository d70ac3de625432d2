"""What reaches the logs: no secret in any record, and no traceback for what is the client's fault or was logged
already."""

from __future__ import annotations

import logging
import re
from typing import Any
from urllib.parse import unquote_plus

from voxgate.gateway.protocol import TOKEN_SUBPROTOCOL_PREFIX

_INVALID_UTF8 = "Invalid UTF-8 sequence received from client."
REDACTED = "***"
TOKEN_PARAMS = ("token", "access_token")  # query keys whose value is a secret, in any case and percent-encoding
# A query pair `key=value` at a ?, & or the start of a query string (also inside a repr: b'token=...').
_QUERY_PAIR = re.compile(r"(?<![^\s?&'\"])([^\s?&=#'\"]+)=([^\s&#'\"]*)")
# The rest of an Authorization header value (auth.py takes everything after `Bearer `, spaces included): a value
# alone, after a header name's colon, or quoted (a repr); not prose such as "a bearer token is required".
_BEARER = re.compile(r"((?:^|['\"]|:\s*)bearer\s+)[^\r\n'\"]+", re.IGNORECASE)
_SUBPROTOCOL = re.compile(r"(" + re.escape(TOKEN_SUBPROTOCOL_PREFIX) + r")[^\s,'\"]+", re.IGNORECASE)


def _query_key(key: str) -> str:
    for _ in range(3):  # `%2574oken` is `%74oken` once decoded: decode until it settles
        decoded = unquote_plus(key)
        if decoded == key:
            break
        key = decoded
    return key.lower()


def _redact_pair(match: re.Match[str]) -> str:
    if _query_key(match.group(1)) in TOKEN_PARAMS and match.group(2):
        return f"{match.group(1)}={REDACTED}"
    return match.group(0)


def redact(text: str) -> str:
    """Every way auth.py takes a token, redacted: `?token=s3cret` (`?%74oken=` too) -> `?token=***`,
    `Bearer s3cret` -> `Bearer ***`, `voxgate.token.s3cret` -> `voxgate.token.***`."""
    if "=" in text:
        text = _QUERY_PAIR.sub(_redact_pair, text)
    text = _BEARER.sub(rf"\1{REDACTED}", text)
    return _SUBPROTOCOL.sub(rf"\1{REDACTED}", text)


def _redact_arg(arg: Any) -> Any:
    return redact(arg) if isinstance(arg, str) else arg


def redact_record(record: logging.LogRecord) -> None:
    """In place: the message and each argument redacted. Arguments keep their places (uvicorn's access formatter
    unpacks them); a secret that only the formatted message shows (a bytes or split argument) flattens it."""
    if isinstance(record.msg, str):
        record.msg = redact(record.msg)
    if isinstance(record.args, tuple):
        record.args = tuple(_redact_arg(a) for a in record.args)
    elif isinstance(record.args, dict):
        record.args = {k: _redact_arg(v) for k, v in record.args.items()}
    if record.args:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: logging reports it when it is emitted
            return
        if redact(message) != message:
            record.msg, record.args = redact(message), ()
    if record.exc_info and record.exc_info[1] is not None:
        text = logging.Formatter().formatException(record.exc_info)
        if redact(text) != text:
            record.exc_text = redact(text)  # what formatters print instead of formatting exc_info again


def _redacting_factory(make: Any) -> Any:
    def make_record(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        redact_record(record)
        return record

    make_record.redacts_tokens = True  # type: ignore[attr-defined]
    return make_record


class AlreadyLogged(Exception):
    """Raised to cut a response whose cause was logged and counted already; uvicorn's traceback for it is dropped."""


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
    """Idempotent. Tokens are redacted where every record is made (the record factory), so no logger, level or
    handler can print one: uvicorn's access log and WebSocket accept lines carry the query string, and at debug
    level websockets logs every handshake header (Authorization, Sec-WebSocket-Protocol). The client-error filter
    goes on uvicorn's error logger (after uvicorn configured its logging)."""
    factory = logging.getLogRecordFactory()
    if not getattr(factory, "redacts_tokens", False):
        logging.setLogRecordFactory(_redacting_factory(factory))
    logger = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, QuietClientErrors) for f in logger.filters):
        logger.addFilter(QuietClientErrors())
