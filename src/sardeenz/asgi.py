"""The ASGI types the modules that speak raw ASGI share (gateway, proxy, sim engine, audit),
and the header lookup every one of them needs (so security/ need not import the proxy).

Error bodies and the other wire helpers are the proxy's: proxy/wire.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, MutableMapping
from typing import Any, Final

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


_MAX_DIGITS: Final = 18


def ascii_int(text: str | bytes) -> int | None:
    """``text`` as a non-negative integer if it is 1-18 ASCII digits, else None.

    Ports and Content-Length are read with this and nothing else: ``str.isdigit``
    accepts superscripts and other scripts' digits (``int()`` then raises or, for
    Arabic-Indic digits, converts them), and an unbounded digit string costs time.
    """
    if 0 < len(text) <= _MAX_DIGITS and text.isascii() and text.isdigit():
        return int(text)
    return None
