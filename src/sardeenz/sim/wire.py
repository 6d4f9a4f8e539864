"""ASGI request/response helpers of the simulated engine, and vLLM's OpenAI error shape.

The simulated engine is a raw ASGI callable (no Starlette): it is the upstream in proxy
benchmarks with hundreds of concurrent streams. These helpers are the little that a
framework would otherwise give: whole-body reads with a size cap, JSON parsing with
vLLM's error messages, and pre-built response messages.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

from sardeenz.asgi import Message, Receive, Send

__all__ = [
    "DONE",
    "SSE_START",
    "RequestError",
    "read_json",
    "respond",
    "respond_empty",
]

_MAX_BODY_BYTES: Final = 64 * 2**20

_JSON_CT: Final = (b"content-type", b"application/json")
SSE_START: Final[Message] = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream; charset=utf-8")],
}
_EMPTY_200: Final[Message] = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-length", b"0")],
}
_EMPTY_BODY: Final[Message] = {"type": "http.response.body", "body": b"", "more_body": False}
DONE: Final = b"data: [DONE]\n\n"


async def respond(send: Send, status: int, body: bytes, content_type: bytes = b"") -> None:
    headers = [(b"content-type", content_type)] if content_type else [_JSON_CT]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def respond_empty(send: Send) -> None:
    await send(_EMPTY_200)
    await send(_EMPTY_BODY)


def _error_body(message: str, err_type: str, code: int, param: str | None = None) -> bytes:
    return orjson.dumps(
        {"error": {"message": message, "type": err_type, "param": param, "code": code}}
    )


class RequestError(Exception):
    """A client error to report in OpenAI shape (status, message, type, param)."""

    def __init__(
        self,
        message: str,
        status: int = 400,
        err_type: str = "BadRequestError",
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.err_type = err_type
        self.param = param

    async def send_to(self, send: Send) -> None:
        body = _error_body(self.message, self.err_type, self.status, self.param)
        await respond(send, self.status, body)


async def _read_body(receive: Receive) -> bytes | None:
    """The whole request body, or None when the client went away first."""
    message = await receive()
    if message["type"] == "http.disconnect":
        return None
    body: bytes = message.get("body", b"")
    if not message.get("more_body", False):
        return body
    chunks = [body]
    size = len(body)
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        chunk: bytes = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY_BYTES:
            raise RequestError(
                f"Request body larger than {_MAX_BODY_BYTES} bytes", 413, "RequestTooLarge"
            )
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def read_json(receive: Receive) -> dict[str, Any] | None:
    body = await _read_body(receive)
    if body is None:
        return None
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"JSON decode error: {exc}") from None
    if not isinstance(data, dict):
        raise RequestError("Input should be a valid JSON object")
    return data
