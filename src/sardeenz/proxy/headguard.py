"""Request limits on uvicorn's own HTTP protocol: head size, field count, time; body time.

Why: llhttp (under httptools) puts no bound on a request head. uvicorn's
``HttpToolsProtocol`` feeds the parser every byte it reads, and httptools
grows a header value across reads in one bytes object, so a single
unauthenticated request with a 50 MB header made the controller hold it all
(measured: four such requests took the controller from 124 to 330 MiB RSS,
and it stayed there). uvicorn also arms no timer before a connection's first
response, so a client sending its head a byte at a time held its connection
(and its buffers) for ever. Authentication cannot help: it runs after the head.

What: ``GuardedHttpToolsProtocol`` is uvicorn's protocol with three checks
in front of its parser, all per connection and none per byte:

* it counts the raw bytes of the head being received (from the end of the
  previous request to llhttp's headers-complete) and feeds the parser no more
  than ``max_bytes`` of them: a head not complete by then is answered 431 and
  the connection closed, so the parser never holds more than the limit;
* it counts header fields: more than ``max_count`` is a 431 too;
* a head must be complete within ``timeout`` seconds of the connection's
  opening or of the first byte of the next request, or the connection is
  closed (idle keep-alive connections keep uvicorn's own timeout);
* a body must be complete within ``body_timeout`` seconds of its head: else
  the request is answered 408 ``body_timeout`` (or cut, if its answer started)
  and the connection closed, so a slow upload holds nothing for long.

The 431 is in OpenAI's shape for a ``/v1/`` request and ``{detail, code}``
elsewhere, like every other error of the node. The fast lane (fastlane.py)
applies the same limits itself and hands connections to this protocol, and
``SARDEENZ_PROXY_FAST_LANE=false`` gives uvicorn this protocol directly, so
every path is bounded either way.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Final

from uvicorn.config import Config
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.server import ServerState

from sardeenz.config import Settings
from sardeenz.proxy.wire import api_error, openai_error

HEADERS_TOO_LARGE: Final = "headers_too_large"
"""The error code of a 431, on every path."""
BODY_TIMEOUT: Final = "body_timeout"
"""The error code of a 408: the body did not arrive within ``body_timeout``."""


@dataclass(frozen=True, slots=True)
class HeadLimits:
    """What a client may send before its request exists (see the module docstring)."""

    max_bytes: int
    max_count: int
    timeout: float
    body_timeout: float = 30.0
    """Time to send the whole body once the head is in (``SARDEENZ_BODY_TIMEOUT_SECONDS``)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> HeadLimits:
        return cls(
            max_bytes=settings.max_header_bytes,
            max_count=settings.max_header_count,
            timeout=settings.header_timeout_seconds,
            body_timeout=settings.body_timeout_seconds,
        )


def too_large_reply(openai: bool, message: str = "request headers too large") -> bytes:
    """The complete 431 response that closes the connection."""
    if openai:
        body = openai_error(message, "invalid_request_error", HEADERS_TOO_LARGE)
    else:
        body = api_error(message, HEADERS_TOO_LARGE)
    return (
        b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
        % len(body)
    ) + body


def body_timeout_reply(openai: bool, seconds: float) -> bytes:
    """The complete 408 for a body not received in time; it closes the connection."""
    message = f"request body not received within {seconds:g} s"
    if openai:
        body = openai_error(message, "invalid_request_error", BODY_TIMEOUT)
    else:
        body = api_error(message, BODY_TIMEOUT)
    return (
        b"HTTP/1.1 408 Request Timeout\r\n"
        b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
        % len(body)
    ) + body


def guarded_protocol(limits: HeadLimits) -> type[GuardedHttpToolsProtocol]:
    """The protocol class to pass as ``uvicorn.Config(http=...)``."""

    class _Guarded(GuardedHttpToolsProtocol):
        pass

    _Guarded.limits = limits
    return _Guarded


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's HTTP/1.1 protocol with bounded request heads."""

    limits: HeadLimits

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self._in_head = True  # a head is (or may start) arriving: count its bytes
        self._head_bytes = 0
        self._head_count = 0
        self._heads_done = 0
        self._head_since = 0.0  # 0: not waiting for a head
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False
        self._body_expected = False  # the head being parsed announces a body
        self._body_timer: asyncio.TimerHandle | None = None

    def start_head_clock(self, since: float) -> None:
        """The head wait started at ``since`` (the fast lane carries its clock over)."""
        self._head_since = since
        if self._head_timer is not None:
            self._head_timer.cancel()
        delay = max(0.0, since + self.limits.timeout - self.loop.time())
        self._head_timer = self.loop.call_later(delay, self._head_timeout)

    # ------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self.start_head_clock(self.loop.time())

    def connection_lost(self, exc: Exception | None) -> None:
        timer, self._head_timer = self._head_timer, None
        if timer is not None:
            timer.cancel()
        self._stop_body_clock()
        super().connection_lost(exc)
        # uvicorn cancels its keep-alive timer only when the connection ended cleanly
        # (``exc is None``). A client that resets the connection (closing with the
        # answer's last bytes unread does it) left the timer armed, and the timer holds
        # this protocol, its transport, the last request's cycle and its scope (every
        # header, 60 KiB ones included) until it fires: ``timeout_keep_alive`` (75 s)
        # later. Under a flood of new connections that is tens of MiB held at any
        # moment, and RSS the allocator never gave back (docs/connection-memory.md).
        self._unset_keepalive_if_required()

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        if not self._in_head:
            super().data_received(data)
            return
        room = self.limits.max_bytes - self._head_bytes
        if len(data) <= room:
            self._head_bytes += len(data)
            super().data_received(data)
            return
        # More than the head may hold: feed what fits; if that did not complete
        # the head, refuse it without ever giving the parser the rest.
        heads = self._heads_done
        self._head_bytes = self.limits.max_bytes
        if room > 0:
            super().data_received(data[:room])
        if self._refused or self.transport.is_closing():
            return
        if self._heads_done == heads:
            self._refuse()
            return
        self.data_received(data[room:])

    def send_400_response(self, msg: str) -> None:
        if not self._refused:  # our 431 already went out (see on_headers_complete)
            super().send_400_response(msg)

    # ------------------------------------------------------ parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._head_count = 0
        if not self._head_since:
            self._head_since = self.loop.time()
            if self._head_timer is None:
                self._head_timer = self.loop.call_later(self.limits.timeout, self._head_timeout)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_count += 1
        if self._head_count <= self.limits.max_count:
            lower = name.lower()
            if (lower == b"content-length" and value.strip(b" \t0")) or (
                lower == b"transfer-encoding"
            ):
                self._body_expected = True
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_bytes = 0
        self._head_since = 0.0
        self._heads_done += 1
        if self._head_count > self.limits.max_count:
            self._refuse(f"more than {self.limits.max_count} request header fields")
            # Stops the parser before uvicorn starts the request; it would answer
            # the parser error with a 400, which send_400_response now skips.
            raise _HeadRefused
        if self._body_expected:
            self._body_expected = False
            self._body_timer = self.loop.call_later(self.limits.body_timeout, self._body_timeout)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._stop_body_clock()
        super().on_message_complete()
        self._in_head = True  # the next request's head starts with the next byte

    # ---------------------------------------------------------------- helpers
    def _refuse(self, message: str = "request headers too large") -> None:
        self._refused = True
        url: bytes = getattr(self, "url", b"")
        self.transport.write(too_large_reply(url.startswith(b"/v1/"), message))
        self.transport.close()

    def _stop_body_clock(self) -> None:
        timer, self._body_timer = self._body_timer, None
        if timer is not None:
            timer.cancel()

    def _body_timeout(self) -> None:
        """The body did not arrive in time: 408 if no answer started, and close."""
        self._body_timer = None
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        self._refused = True  # feed the parser nothing more
        if self.cycle is None or not self.cycle.response_started:
            url: bytes = getattr(self, "url", b"")
            transport.write(body_timeout_reply(url.startswith(b"/v1/"), self.limits.body_timeout))
        if self.cycle is not None:
            # The app sees the client gone: its receive() returns http.disconnect and
            # whatever it sends now is dropped (nothing after the 408).
            self.cycle.disconnected = True
            self.cycle.message_event.set()
        transport.close()

    def _head_timeout(self) -> None:
        self._head_timer = None
        transport = self.transport
        if transport is None or transport.is_closing() or not self._head_since:
            return
        left = self._head_since + self.limits.timeout - self.loop.time()
        if left > 0.01:
            self._head_timer = self.loop.call_later(left, self._head_timeout)
        elif self.cycle is not None and not self.cycle.response_complete:
            # A response is still going out; the pipelined head waits for it.
            self._head_timer = self.loop.call_later(self.limits.timeout, self._head_timeout)
        else:
            transport.close()


class _HeadRefused(Exception):
    """Raised from a parser callback to stop parsing a refused head."""
