"""Service-level errors with a stable machine-readable ``code``.

Services raise these; the API layer turns them into ``{"detail", "code"}``
JSON with ``status``. Codes are part of the public contract: never rename one.
"""

from __future__ import annotations

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
