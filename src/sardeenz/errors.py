"""Service-level errors with a stable machine-readable ``code``.

Services raise these; the API layer turns them into ``{"detail", "code"}``
JSON with ``status``. Codes are part of the public contract: never rename one.
"""

from __future__ import annotations

import errno
import logging
import sqlite3
from typing import Any


class SardeenzError(Exception):
    status: int = 400
    code: str = "bad_request"

    def __init__(self, message: str, *, code: str | None = None, **extra: Any) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.extra = extra


class InvalidRequest(SardeenzError):
    status = 400
    code = "invalid_request"


class NotFound(SardeenzError):
    status = 404
    code = "not_found"


class Conflict(SardeenzError):
    status = 409
    code = "conflict"


class Unavailable(SardeenzError):
    status = 503
    code = "unavailable"


class PayloadTooLarge(SardeenzError):
    status = 413
    code = "payload_too_large"


class StorageFull(SardeenzError):
    """The data dir's filesystem (or the database) has no room for a write.

    Nothing was stored: the client may retry once space is freed (docs/operations.md).
    """

    status = 507
    code = "insufficient_storage"


_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
_SQLITE_FULL = 13
"""SQLITE_FULL: "database or disk is full" (the primary code of every extended one)."""


def is_storage_full(exc: BaseException) -> bool:
    """Is ``exc`` (or what it wraps) a write refused for want of space?

    The one place that recognises a full disk: SQLite's SQLITE_FULL (as raised by the
    driver, or wrapped by SQLAlchemy in ``.orig``) and an ``OSError`` ENOSPC or EDQUOT,
    anywhere in the chain of causes, so every caller maps it the same way.
    """
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        cur = todo.pop()
        if cur is None or id(cur) in seen:
            continue
        seen.add(id(cur))
        if isinstance(cur, StorageFull):
            return True
        if isinstance(cur, sqlite3.Error):
            code = getattr(cur, "sqlite_errorcode", None)
            if (isinstance(code, int) and code & 0xFF == _SQLITE_FULL) or (
                "database or disk is full" in str(cur)
            ):
                return True
        if isinstance(cur, OSError) and cur.errno in _FULL_ERRNOS:
            return True
        orig = getattr(cur, "orig", None)  # SQLAlchemy's DBAPIError wraps the driver's
        todo.extend([orig if isinstance(orig, BaseException) else None])
        todo.extend([cur.__cause__, cur.__context__])
    return False


def storage_full(exc: BaseException) -> StorageFull:
    """The client-facing error for a write ``is_storage_full`` recognised."""
    return StorageFull(
        "the node's data directory is full: nothing was stored; free space and retry"
    )


def log_write_failure(logger: logging.Logger, exc: BaseException, what: str) -> None:
    """Log a background write that failed: a full disk in one line, anything else with
    its traceback. A flusher retries every second or so, and the log may be on the full
    disk too: a traceback a second would only add to it."""
    if is_storage_full(exc):
        logger.warning("%s: data dir full", what)
    else:
        logger.error("%s", what, exc_info=exc)
