"""The ASGI types the modules that speak raw ASGI share (gateway, proxy, sim engine, audit),
and the header lookup every one of them needs (so security/ need not import the proxy).

Error bodies and the other wire helpers are the proxy's: proxy/wire.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def header(headers: Iterable[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    """The first value of header ``name`` (lower-case, as ASGI servers give names)."""
    for key, value in headers:
        if key == name:
            return bytes(value)
    return None
