"""What the proxy's layers write on the wire and read off it, in one place.

The fast lane (fastlane.py), the express path (express.py), the general
handler (forwarder.py) and the gateway all answer errors and look at
headers. Each used to carry its own copy of some of this; a copy that drifts
changes bytes a client sees on one path and not on the other. So the error
bodies (OpenAI's shape on ``/v1``, ``{detail, code}`` on ``/api``), the
error reply every layer renders, the header lookup and the hop-by-hop
filtering of relayed headers live here, and nowhere else.

Nothing here allocates more than the bytes it returns: the express path calls
``request_header_block`` and ``response_headers`` on every request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

import orjson

from sardeenz.asgi import Send
from sardeenz.asgi import ascii_int as ascii_int  # its home is sardeenz.asgi too
from sardeenz.asgi import header as header  # its home is sardeenz.asgi; the proxy uses it here

JSON_CT: Final = (b"content-type", b"application/json")
API_KEY_SCOPE: Final = "sardeenz.api_key"
"""Where the gateway leaves the inference key (``ApiKey``) a ``/v1`` request presented."""
TICKET_SCOPE: Final = "sardeenz.tenant_ticket"
"""Where the handler keeps the tenant admission (tenancy ``Ticket``) a request holds."""
GATE_SCOPE: Final = "sardeenz.fair_waiter"
"""Where the handler keeps its place in the fair queue, then its slot (proxy/fairgate.py)."""

_HOP_BY_HOP: Final = frozenset(
    {b"connection", b"keep-alive", b"transfer-encoding", b"te", b"trailer", b"upgrade"}
)
"""RFC 9110 7.6.1: headers for one connection, never relayed in either direction."""
_DROP_REQUEST: Final = _HOP_BY_HOP | {b"host", b"content-length", b"expect"}
"""Not forwarded upstream: hop-by-hop, the ones the upstream client computes itself
(host, content-length) and ``expect`` (the 100-continue dance ends at the proxy)."""
_DROP_RESPONSE: Final = _HOP_BY_HOP | {b"date", b"server"}
"""Not relayed to the client: hop-by-hop, and ``date``/``server`` which the HTTP
server adds itself (relaying them would duplicate them)."""


"""Longest number read from a client: below 2**63, and far below Python's 4300-digit
``int()`` limit (past which ``int()`` raises instead of returning a big number)."""


def openai_error(message: str, type_: str, code: str, param: str | None = None) -> bytes:
    """An error body in OpenAI's shape: what every ``/v1`` client parses."""
    return orjson.dumps(
        {"error": {"message": message, "type": type_, "param": param, "code": code}}
    )


def api_error(message: str, code: str) -> bytes:
    """An error body in the admin API's ``{detail, code}`` shape."""
    return orjson.dumps({"detail": message, "code": code})


async def send_json(
    send: Send,
    status: int,
    body: bytes,
    extra: list[tuple[bytes, bytes]] | None = None,
    *,
    content_length: int | None = None,
) -> None:
    """A complete JSON response as two ASGI messages (``content_length`` for HEAD)."""
    n = len(body) if content_length is None else content_length
    headers = [JSON_CT, (b"content-length", str(n).encode())]
    if extra:
        headers.extend(extra)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


class ErrorReply(Exception):
    """An error answer: raised where it is found, rendered by whoever answers.

    Rendered in the OpenAI shape on ``/v1/*`` and as ``{"detail", "code"}`` on
    ``/api/direct``; the express path writes ``render(True)`` itself.
    """

    def __init__(
        self,
        status: int,
        message: str,
        type_: str,
        code: str,
        param: str | None = None,
        headers: list[tuple[bytes, bytes]] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.code = code
        self.param = param
        self.headers = headers or []

    def render(self, openai: bool) -> bytes:
        if openai:
            return openai_error(self.message, self.type, self.code, self.param)
        return api_error(self.message, self.code)

    async def send(self, send: Send, openai: bool) -> int:
        await send_json(send, self.status, self.render(openai), self.headers)
        return self.status


INVALID_API_KEY: Final = openai_error(
    "Invalid or missing API key: send 'Authorization: Bearer <key>'",
    "invalid_request_error",
    "invalid_api_key",
)
"""The 401 body for a ``/v1`` request without a valid inference API key."""


def request_header_block(
    headers: list[tuple[bytes, bytes]],
    json_default: bool,
    check_length: Callable[[bytes], None] | None = None,
) -> bytes:
    """The ``name: value\\r\\n`` block to forward upstream from a client's headers.

    Names and values are relayed as received (the HTTP server has already
    rejected anything that is not valid HTTP), minus hop-by-hop headers and
    those named in ``Connection``. ``check_length`` sees the Content-Length.
    """
    out: list[bytes] = []
    has_ct = False
    connection: bytes | None = None
    for k, v in headers:
        if k in _DROP_REQUEST or k.startswith(b"proxy-"):
            if k == b"content-length":
                if check_length is not None:
                    check_length(v)
            elif k == b"connection":
                connection = v if connection is None else connection + b"," + v
            continue
        if k == b"content-type":
            has_ct = True
        out.append(k + b": " + v + b"\r\n")
    if connection is not None:
        # RFC 9110 7.6.1: headers named in Connection are hop-by-hop too.
        drop = {t.strip().lower() + b":" for t in connection.split(b",")}
        out = [h for h in out if h[: h.index(b":") + 1].lower() not in drop]
    if json_default and not has_ct:
        out.append(b"content-type: application/json\r\n")
    return b"".join(out)


def response_headers(
    headers: list[tuple[bytes, bytes]],
) -> tuple[list[tuple[bytes, bytes]], int | None, bool]:
    """An engine's response headers to relay, its Content-Length, and whether it is SSE."""
    out: list[tuple[bytes, bytes]] = []
    length: int | None = None
    event_stream = False
    for k, v in headers:
        if k in _DROP_RESPONSE or k.startswith(b"proxy-"):
            continue
        if k == b"content-length":
            length = ascii_int(v)
            if length is None:
                continue
        elif k == b"content-type":
            event_stream = v.startswith(b"text/event-stream")
        out.append((k, v))
    return out, length, event_stream


_CREDENTIALS: Final = (b"authorization:", b"cookie:")


def without_credentials(block: bytes) -> bytes:
    """A forwarded header block with the client's ``Authorization`` and ``Cookie`` lines
    dropped: what ``/api/direct`` sends an engine (the admin's token is for Sardeenz)."""
    return b"".join(
        line
        for line in block.splitlines(keepends=True)
        if not line.lower().startswith(_CREDENTIALS)
    )


def replace_authorization(block: bytes, auth: bytes) -> bytes:
    """A forwarded header block for a server with its own key: the client's
    ``Authorization`` (its key for Sardeenz, not for that server) is dropped, and
    ``auth`` (the server's ``authorization: ...\\r\\n`` line, or b"") added.

    Only requests to external catalog servers pay for this (a few microseconds);
    the match ignores case, whatever layer built the block.
    """
    kept = [
        line for line in block.splitlines(keepends=True) if line[:14].lower() != b"authorization:"
    ]
    kept.append(auth)
    return b"".join(kept)
