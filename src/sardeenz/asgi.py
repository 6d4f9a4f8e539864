"""The ASGI types the modules that speak raw ASGI share (gateway, proxy, sim engine, audit).

Header lookup and error bodies are the proxy's wire helpers: proxy/wire.py.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]
