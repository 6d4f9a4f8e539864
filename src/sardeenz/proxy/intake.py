"""Reading a client's request for the ASGI handler: its headers, its body, its JSON.

Why a module of its own: what the proxy accepts from a client (the body limit, by
``Content-Length`` or by counting a chunked upload; a JSON object; ``model``
rewritten for an alias or an external server) is one set of rules, and the
handler (forwarder.py) and the relay (asgirelay.py, external servers) both apply
them. The express path (express.py) takes only bodies that already passed the
fast lane's limit and parse with orjson; everything else comes through here.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from sardeenz.asgi import Receive, Scope
from sardeenz.proxy.wire import ErrorReply, ascii_int, request_header_block


class Disconnected(Exception):
    """The client went away while we were reading its body."""


class RequestReader:
    """Reads a request's headers and body under ``proxy_max_body_bytes``; one per proxy."""

    def __init__(self, max_body: int) -> None:
        self._max_body = max_body

    def headers(self, scope: Scope, *, json_default: bool) -> bytes:
        """The header block to forward, after checking Content-Length against the limit."""
        return request_header_block(scope["headers"], json_default, self._check_length)

    def _check_length(self, value: bytes) -> None:
        n = ascii_int(value)
        if n is None:
            raise ErrorReply(
                400,
                "invalid Content-Length header",
                "invalid_request_error",
                "invalid_content_length",
            )
        if n > self._max_body:
            raise self._too_large()

    def _too_large(self) -> ErrorReply:
        return ErrorReply(
            413,
            f"request body is larger than the limit of {self._max_body} bytes",
            "invalid_request_error",
            "body_too_large",
            # Do not read the rest of a body we refuse.
            headers=[(b"connection", b"close")],
        )

    async def body(self, receive: Receive) -> bytes:
        """The whole request body, counting bytes as they come (chunked uploads)."""
        limit = self._max_body
        first = b""
        chunks: list[bytes] | None = None
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Disconnected
            data: bytes = message.get("body", b"")
            if data:
                size += len(data)
                if size > limit:
                    raise self._too_large()
                if not first and chunks is None:
                    first = data
                else:
                    if chunks is None:
                        chunks = [first]
                    chunks.append(data)
            if not message.get("more_body", False):
                break
        return first if chunks is None else b"".join(chunks)


def parse_json(body: bytes) -> dict[str, Any]:
    """The body as a JSON object, or a 400 reply."""
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError:
        # orjson refuses some valid JSON (integers beyond 64 bits); ask the
        # stdlib before calling the client wrong. Only on this error path.
        try:
            payload = json.loads(body)
        except (ValueError, RecursionError):
            raise ErrorReply(
                400,
                "We could not parse the JSON body of your request.",
                "invalid_request_error",
                "invalid_json",
            ) from None
    if not isinstance(payload, dict):
        raise ErrorReply(
            400, "The request body must be a JSON object.", "invalid_request_error", "invalid_body"
        )
    return payload


def with_model(payload: dict[str, Any], model: str) -> bytes:
    """The request body again with ``model`` replaced (alias -> served name)."""
    payload["model"] = model
    try:
        return orjson.dumps(payload)
    except TypeError:  # an integer beyond 64 bits, parsed by the stdlib
        return json.dumps(payload).encode()
