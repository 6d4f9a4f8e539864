"""The controller's logging: one record per line, text or JSON lines, quiet clients.

Two formats, both safe against forged records (see ``safetext``):

* ``text`` (default): ``OneLineFormatter``, a human line per record;
* ``json`` (``SARDEENZ_LOG_FORMAT=json``): one JSON object per line, for log
  shippers. JSON escapes every control character in strings, so a newline in a
  message cannot start a second record; the message is still passed through
  ``escape_unsafe`` first, so a consumer that prints the ``msg`` field raw to a
  terminal cannot be driven by an ANSI escape either.

Records carry the id of the admin request being served (``request_id``), set by
``RequestIdMiddleware``: an operator can tie a log line to the request that caused it.

The HTTP client libraries (httpx, httpcore) log every request at INFO. The
controller polls each engine's ``/health`` every couple of seconds, so at INFO they
would bury the log in one line per poll per engine: they only speak at DEBUG.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
import uuid
from datetime import UTC, datetime
from typing import Literal

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sardeenz.safetext import OneLineFormatter, escape_unsafe

__all__ = [
    "CHATTY_CLIENT_LOGGERS",
    "QUIET_LIBRARY_LOGGERS",
    "JsonLineFormatter",
    "RequestIdMiddleware",
    "configure_logging",
    "request_id",
]

TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
CHATTY_CLIENT_LOGGERS = ("httpx", "httpcore")
"""Loggers that emit one record per HTTP request made: health polls among them."""

QUIET_LIBRARY_LOGGERS = ("alembic",)
"""Libraries whose INFO drowns the start-up: alembic logs each plugin it sets up and each
migration step (a dozen lines before the first of ours). Their warnings still show."""

request_id: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "sardeenz_request_id", default=None
)
_MAX_INCOMING_ID = 128


class JsonLineFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, msg, request_id, exc."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": escape_unsafe(record.getMessage()),
        }
        rid = getattr(record, "request_id", None) or request_id.get()
        if rid:
            entry["request_id"] = escape_unsafe(str(rid))
        if record.exc_info:
            entry["exc"] = escape_unsafe(self.formatException(record.exc_info))
        if record.stack_info:
            entry["stack"] = escape_unsafe(self.formatStack(record.stack_info))
        # ensure_ascii: the line is plain ASCII, whatever a model name holds.
        return json.dumps(entry, ensure_ascii=True)


def configure_logging(
    level: str, fmt: Literal["text", "json"] = "text", stream: object | None = None
) -> None:
    """Install the controller's handler on the root logger and quiet the HTTP clients."""
    handler = logging.StreamHandler(stream or sys.stderr)  # type: ignore[arg-type]
    handler.setFormatter(JsonLineFormatter() if fmt == "json" else OneLineFormatter(TEXT_FORMAT))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    client_level = logging.DEBUG if level.lower() == "debug" else logging.WARNING
    for name in (*CHATTY_CLIENT_LOGGERS, *QUIET_LIBRARY_LOGGERS):
        logging.getLogger(name).setLevel(client_level)


class RequestIdMiddleware:
    """Give each HTTP request an id (``X-Request-Id``, taken from the client when sane).

    The id is set in ``request_id`` for the request's task, so every record logged
    while serving it carries it, and echoed in the response's ``X-Request-Id``.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _incoming_id(scope) or uuid.uuid4().hex
        token = request_id.set(rid)

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"x-request-id", rid.encode()))
                message = {**message, "headers": headers}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        finally:
            request_id.reset(token)


def _incoming_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == b"x-request-id":
            text: str = value.decode("latin-1").strip()
            if 0 < len(text) <= _MAX_INCOMING_ID and text.isascii() and text.isprintable():
                return text
    return None
