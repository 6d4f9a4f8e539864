"""Error bodies for ``/api``: always JSON ``{"detail": str, "code": str}``.

A client can switch on ``code`` (stable) and show ``detail`` (human). Nothing
user-caused becomes a bare 500; a real bug becomes a 500 with code
``internal_error`` and is logged with its traceback.
"""

from __future__ import annotations

import logging
import sqlite3
from typing import Any

import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from sardeenz.errors import SardeenzError, is_storage_full, storage_full

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "payload_too_large",
    415: "unsupported_media_type",
    422: "validation_error",
    429: "too_many_requests",
    503: "unavailable",
    507: "insufficient_storage",
}


def error_body(detail: str, code: str, **extra: Any) -> dict[str, Any]:
    return {"detail": detail, "code": code, **extra}


def _location(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path")]
    return ".".join(parts) or "body"


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(SardeenzError)
    async def _sardeenz_error(_: Request, exc: SardeenzError) -> JSONResponse:
        headers = {"WWW-Authenticate": 'Bearer realm="sardeenz"'} if exc.status == 401 else {}
        retry_after = getattr(exc, "retry_after", None)  # e.g. a token review unavailable
        if isinstance(retry_after, int):
            headers["Retry-After"] = str(retry_after)
        return JSONResponse(
            error_body(exc.message, exc.code, **exc.extra),
            status_code=exc.status,
            headers=headers,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"field": _location(tuple(e.get("loc", ()))), "message": str(e.get("msg", ""))}
            for e in exc.errors()
        ]
        summary = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        return JSONResponse(
            error_body(f"invalid request: {summary}", "validation_error", errors=errors),
            status_code=422,
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, f"http_{exc.status_code}")
        return JSONResponse(
            error_body(str(exc.detail), code),
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    async def _storage(request: Request, exc: Exception) -> JSONResponse:
        # Handled here, in the app's own exception layer (Starlette's catch-all for
        # ``Exception`` re-raises to the server after answering, which logs a traceback).
        if not is_storage_full(exc):
            raise exc  # a real error: the catch-all below answers 500 internal_error
        # Not a bug: the disk filled. One line, no traceback (the log may share the
        # full disk); the client gets a code it can act on.
        log.warning("%s %s: data dir full, write refused", request.method, request.url.path)
        full = storage_full(exc)
        return JSONResponse(error_body(full.message, full.code), status_code=full.status)

    for kind in (OSError, sqlite3.Error, sqlalchemy.exc.DBAPIError):
        app.add_exception_handler(kind, _storage)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return JSONResponse(
            error_body("internal error; see the server log", "internal_error"), status_code=500
        )


VALIDATION_ERROR_SCHEMA: dict[str, Any] = {
    "title": "ValidationErrorBody",
    "type": "object",
    "required": ["detail", "code"],
    "properties": {
        "detail": {"type": "string"},
        "code": {"type": "string"},
        "errors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"field": {"type": "string"}, "message": {"type": "string"}},
            },
        },
    },
}


def document_error_shapes(app: FastAPI) -> None:
    """Make /openapi.json describe the 422 body we really send, not FastAPI's default."""
    default_openapi = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schema = default_openapi()
            schemas = schema.get("components", {}).get("schemas", {})
            if "HTTPValidationError" in schemas:
                schemas["HTTPValidationError"] = VALIDATION_ERROR_SCHEMA
                schemas.pop("ValidationError", None)
            app.openapi_schema = schema
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
