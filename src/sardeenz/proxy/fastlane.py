"""A lean HTTP/1.1 server lane for ``/v1/*``, in front of uvicorn's protocol.

Why: measured in benchmarks/proxy_overhead.py, uvicorn's request cycle alone
(parse, scope, ASGI messages, header checks, flow control objects) costs
about 110 us of CPU per request on this kind of machine: most of the proxy's
150 us budget before a byte is forwarded. Every inference request pays it.

What: uvicorn instantiates this protocol for every accepted connection (it is
passed as ``uvicorn.Config(http=...)``). As long as each request on the
connection is an ordinary ``/v1/...`` request (HTTP/1.1, a Content-Length or
no body, no upgrade) this lane parses it with httptools and runs the SAME
ASGI app uvicorn would (the Gateway), with a minimal ASGI cycle: one
``http.request`` message, then ``http.disconnect``; responses written with
Content-Length or chunked framing, head and first body bytes in one write.

Anything else (the admin API, the dashboard, ``/metrics``, a websocket
upgrade, a chunked upload, a body over the proxy's limit, HTTP/1.0, a
malformed path) makes the lane hand the connection to uvicorn's own
``HttpToolsProtocol`` at that request boundary, with every unconsumed byte,
and step aside for good. So the lane only has to be right for the narrow
case it accepts, and uvicorn stays in charge of everything else, including
the 413 for a body that is too large (it streams, the app refuses).

Before it buffers a body, the lane asks ``admission`` (the gateway's API key
check) with the request's headers: a refused request is answered at once and
the connection closed, its body never read. A body must then arrive within
``body_timeout`` seconds (408 ``body_timeout`` past it), like on the
connections handed to uvicorn (headguard.py).

It keeps the parts of uvicorn's contract that an operator relies on:
keep-alive with the configured idle timeout, pipelined requests answered in
order, ``Expect: 100-continue``, back-pressure both ways, the ``date`` and
``server`` headers, graceful shutdown (it registers in uvicorn's server
state, so ``shutdown()`` closes it once its response is done), and client
disconnects reported to the app as ``http.disconnect`` (the proxy's cue to
abort the engine request).
"""

from __future__ import annotations

import asyncio
import http
import logging
import urllib.parse
from collections.abc import Callable
from typing import Any, Final, Literal, NamedTuple, Protocol

import httptools
from uvicorn.config import Config
from uvicorn.server import ServerState

from sardeenz.asgi import ASGIApp, Message, Scope
from sardeenz.proxy.headguard import (
    BODY_TIMEOUT,
    GuardedHttpToolsProtocol,
    HeadLimits,
    guarded_protocol,
    too_large_reply,
)
from sardeenz.proxy.metrics import LANE
from sardeenz.proxy.wire import ascii_int, openai_error

log = logging.getLogger(__name__)


MAX_HEAD_BYTES: Final = 64 * 1024
"""Default for request line plus headers (``SARDEENZ_MAX_HEADER_BYTES``); larger is 431."""
_READ_PAUSE_SLACK: Final = 256 * 1024
"""Buffered bytes beyond one full request before we stop reading the client."""

_STATUS_LINES: Final = {
    s.value: b"HTTP/1.1 %d %s\r\n" % (s.value, s.phrase.encode()) for s in http.HTTPStatus
}
_NO_BODY_STATUS: Final = frozenset({204, 304})
_CONTINUE: Final = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK: Final = b"0\r\n\r\n"
_ASGI: Final = {"version": "3.0", "spec_version": "2.4"}
_REQUEST: Final = "http.request"
_DISCONNECT: Final = {"type": "http.disconnect"}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    return line if line is not None else b"HTTP/1.1 %d \r\n" % status


def _error_reply(
    status: int, message: str, code: str, type_: str = "invalid_request_error"
) -> bytes:
    """A complete response that closes the connection: the lane's own errors."""
    body = openai_error(message, type_, code)
    head = b"%scontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
    return head % (_status_line(status), len(body)) + body


class Active(Protocol):
    """The request a lane connection is answering: an ASGI cycle or an express exchange."""

    def disconnect(self) -> None:
        """The client went away."""

    def writing_paused(self, paused: bool) -> None:
        """The client's socket buffer went over (True) or back under (False) its limit."""


HAND_OVER: Final = "hand over"
"""An admission verdict: let uvicorn's protocol (and the app) read this request."""


class Refusal(NamedTuple):
    """An admission verdict: answer this, close the connection, never read the body."""

    status: int
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...] = ()


Admission = Callable[[list[tuple[bytes, bytes]]], Refusal | Literal["hand over"] | None]
"""Called with a ``/v1`` request's headers when a body is announced, before any of it
is buffered: None to read it, a ``Refusal``, or ``HAND_OVER``."""


class ExpressPath(Protocol):
    def begin(
        self,
        lane: FastLaneProtocol,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        keep_alive: bool,
    ) -> Active | None:
        """Take this POST and answer it (calling ``lane.finish``), or return None."""


def fast_lane_protocol(
    app: ASGIApp,
    *,
    max_body_bytes: int,
    express: ExpressPath | None = None,
    limits: HeadLimits | None = None,
    admission: Admission | None = None,
) -> type[asyncio.Protocol]:
    """The protocol class to pass as ``uvicorn.Config(http=...)``.

    ``app`` is called for the lane's requests (``/v1/...`` only); every other
    request runs through uvicorn with the app uvicorn was given. Bodies over
    ``max_body_bytes`` go to uvicorn too, so the app's own limit check sees
    them without the lane buffering them first. ``express``, if given, may
    take a POST before the app does (see proxy/express.py). ``limits``
    bound request heads (and the time to send a body) here and on the
    connections handed to uvicorn (proxy/headguard.py). ``admission``, if
    given, sees the headers of a request with a body before the lane buffers
    any of it (the gateway's API key check).
    """
    head = limits or HeadLimits(MAX_HEAD_BYTES, 100, 10.0)

    class _Lane(FastLaneProtocol):
        lane_app = staticmethod(app)
        max_body = max_body_bytes
        max_head = head.max_bytes
        max_fields = head.max_count
        head_timeout = head.timeout
        body_timeout = head.body_timeout
        successor = guarded_protocol(head)

    _Lane.express = express
    _Lane.admission = staticmethod(admission) if admission is not None else None
    return _Lane


class FastLaneProtocol(asyncio.Protocol):
    """One client connection; see the module docstring. Subclassed by ``fast_lane_protocol``."""

    lane_app: ASGIApp
    max_body: int
    max_head: int
    max_fields: int
    head_timeout: float
    body_timeout: float
    successor: type[GuardedHttpToolsProtocol]
    express: ExpressPath | None = None
    admission: Admission | None = None

    def __init__(
        self,
        config: Config,
        server_state: ServerState,
        app_state: dict[str, Any],
        _loop: asyncio.AbstractEventLoop | None = None,
    ) -> None:
        self._config = config
        self._server_state = server_state
        self._app_state = app_state
        self._loop = _loop or asyncio.get_event_loop()
        self.transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._parser = httptools.HttpRequestParser(self)
        self._server_addr: tuple[str, int] | None = None
        self._client_addr: tuple[str, int] | None = None
        # the request whose head is parsed and whose body may still be arriving
        self._head_len = 0
        self._body_len = 0
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._hand_over = False
        self._expect_continue = False
        self._keep_alive = True
        self._cycle: Active | None = None  # the request being answered
        self._closing = False  # close once the current response is done
        self._read_paused = False
        self._write_paused = False
        self._drain: asyncio.Future[None] | None = None
        self._idle_timer: asyncio.TimerHandle | None = None
        self._idle_since = 0.0
        # When the wait for the head being received began (0: not waiting); one
        # timer checks it lazily, like the idle timer (see _head_timeout).
        self._head_since = 0.0
        self._head_timer: asyncio.TimerHandle | None = None
        # The body being received must be complete by then (0: not waiting for one).
        self._body_deadline = 0.0
        self._body_timer: asyncio.TimerHandle | None = None

    # ------------------------------------------------------- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._server_state.connections.add(self)  # type: ignore[arg-type]
        self._server_addr = _addr(transport.get_extra_info("sockname"))
        self._client_addr = _addr(transport.get_extra_info("peername"))
        LANE.accepted += 1
        self._idle_since = self._loop.time()
        self._arm_idle_timer(self._config.timeout_keep_alive)
        self._await_head(self._idle_since)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        if self._cycle is None:
            self._process()
        elif len(self._buf) > self.max_head + _READ_PAUSE_SLACK and not self._read_paused:
            # A client pipelining far ahead: stop reading until we catch up.
            self._read_paused = True
            if self.transport is not None:
                self.transport.pause_reading()

    def connection_lost(self, exc: Exception | None) -> None:
        self._server_state.connections.discard(self)
        self._cancel_idle_timer()
        self._cancel_head_timer()
        self._cancel_body_timer()
        self.transport = None
        cycle = self._cycle
        if cycle is not None:
            cycle.disconnect()
        self._wake_writers()

    def eof_received(self) -> bool | None:
        return None  # let the transport close: a half-closed client is gone

    def pause_writing(self) -> None:
        self._write_paused = True
        if self._cycle is not None:
            self._cycle.writing_paused(True)

    def resume_writing(self) -> None:
        self._write_paused = False
        self._wake_writers()
        if self._cycle is not None:
            self._cycle.writing_paused(False)

    def shutdown(self) -> None:
        """Called by uvicorn on graceful shutdown: close once the response is done."""
        if self._cycle is None:
            if self.transport is not None:
                self.transport.close()
        else:
            self._closing = True

    # ------------------------------------------------------- httptools callbacks
    def on_url(self, url: bytes) -> None:
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length":
            length = ascii_int(value)
            if length is not None:
                self._body_len = length
            else:  # llhttp rejects most of these; uvicorn answers the rest
                self._hand_over = True
        elif name == b"transfer-encoding" or name == b"upgrade":
            self._hand_over = True
        elif name == b"expect" and value.lower() == b"100-continue":
            self._expect_continue = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        # Only valid now: llhttp forgets the message's flags once it completes.
        self._keep_alive = self._parser.should_keep_alive()

    # --------------------------------------------------------------- the lane
    def _process(self) -> None:
        """Start the next complete request in the buffer, or hand over, or wait."""
        transport = self.transport
        while self._cycle is None and transport is not None and not transport.is_closing():
            buf = self._buf
            if not buf:
                self._idle_since = self._loop.time()
                self._arm_idle_timer(self._config.timeout_keep_alive)
                return
            if not self._head_len:
                end = buf.find(b"\r\n\r\n")
                if end < 0:
                    if not self._first_line_fits(buf):
                        return self._give_to_uvicorn()
                    if len(buf) > self.max_head:
                        return self._too_large()
                    if not self._head_since:
                        self._await_head(self._loop.time())
                    return
                if not self._first_line_fits(buf):
                    return self._give_to_uvicorn()  # which bounds the head itself
                if end + 4 > self.max_head:
                    return self._too_large()
                try:
                    self._parser.feed_data(bytes(buf[: end + 4]))
                except httptools.HttpParserError:
                    return self._reject(400, "invalid HTTP request", "invalid_http_request")
                self._head_since = 0.0
                if len(self._headers) > self.max_fields:
                    return self._too_large(f"more than {self.max_fields} request header fields")
                if (
                    self._hand_over
                    or self._body_len > self.max_body
                    or self._parser.get_http_version() != "1.1"
                ):
                    return self._give_to_uvicorn()
                if self._body_len and self.admission is not None:
                    verdict = self.admission(self._headers)
                    if verdict is not None:
                        if verdict == HAND_OVER:
                            return self._give_to_uvicorn()
                        assert isinstance(verdict, Refusal)
                        return self._refuse(verdict)
                self._head_len = end + 4
                if self._expect_continue and len(buf) < self._head_len + self._body_len:
                    transport.write(_CONTINUE)
            need = self._head_len + self._body_len
            if len(buf) < need:
                if not self._body_deadline:
                    self._await_body()
                return  # the body is still arriving
            if self._body_deadline:
                self._body_deadline = 0.0
            body = bytes(buf[self._head_len : need]) if self._body_len else b""
            if body:
                try:
                    self._parser.feed_data(body)  # completes the message in the parser
                except httptools.HttpParserError:
                    return self._reject(400, "invalid HTTP request", "invalid_http_request")
            del buf[:need]
            if self._read_paused and len(buf) <= _READ_PAUSE_SLACK:
                self._read_paused = False
                transport.resume_reading()
            self._start(body)

    def _first_line_fits(self, buf: bytearray) -> bool:
        """Does the request line name a ``/v1/`` path? (Else, or unsure: uvicorn.)"""
        if buf.startswith(b"POST /v1/"):
            return True
        eol = buf.find(b"\r\n", 0, 8192)
        line = buf[:eol] if eol >= 0 else buf[:8192]
        sp = line.find(b" ")
        if sp < 0:
            return eol < 0 and len(buf) < 16  # not enough bytes to tell yet
        target = line[sp + 1 : sp + 5]
        if len(target) < 4 and eol < 0:
            return b"/v1/".startswith(target)  # not enough bytes to tell yet
        return target == b"/v1/"

    def _start(self, body: bytes) -> None:
        url, self._url = self._url, b""
        headers, self._headers = self._headers, []
        self._head_len = self._body_len = 0
        self._expect_continue = False
        method: bytes = self._parser.get_method()
        keep_alive = self._keep_alive and not self._closing
        self._server_state.total_requests += 1
        express = self.express
        if express is not None and method == b"POST":
            active = express.begin(self, url, headers, body, keep_alive)
            if active is not None:
                self._cycle = active
                return
        self.run_app(method, url, headers, body, keep_alive)

    def run_app(
        self,
        method: bytes,
        url: bytes,
        headers: list[tuple[bytes, bytes]],
        body: bytes,
        keep_alive: bool,
    ) -> None:
        """Answer the request with the ASGI app (also the express path's fallback)."""
        parsed = httptools.parse_url(url)
        raw_path: bytes = parsed.path
        path = raw_path.decode("ascii")
        if "%" in path:
            path = urllib.parse.unquote(path)
        scope: Scope = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": "1.1",
            "server": self._server_addr,
            "client": self._client_addr,
            "scheme": "http",
            "method": method.decode("ascii"),
            "root_path": "",
            "path": path,
            "raw_path": raw_path,
            "query_string": parsed.query or b"",
            "headers": headers,
            "state": self._app_state.copy(),
        }
        cycle = self._cycle = _Cycle(self, body, keep_alive, method == b"HEAD")
        if self.transport is None:  # gone while the express path was trying
            cycle.disconnect()
        task = self._loop.create_task(self._run(cycle, scope))
        tasks = self._server_state.tasks
        tasks.add(task)
        task.add_done_callback(tasks.discard)

    async def _run(self, cycle: _Cycle, scope: Scope) -> None:
        try:
            await self.lane_app(scope, cycle.receive, cycle.send)
        except BaseException as exc:
            if not isinstance(exc, asyncio.CancelledError):
                log.exception("unhandled error answering %s %s", scope["method"], scope["path"])
            if not cycle.started and self.transport is not None:
                cycle.keep_alive = False
                self.transport.write(
                    _error_reply(500, "internal server error", "internal_error", "server_error")
                )
            if isinstance(exc, (asyncio.CancelledError, KeyboardInterrupt, SystemExit)):
                raise
        finally:
            self._finish(cycle)

    def _finish(self, cycle: _Cycle) -> None:
        self.finish(cycle, cycle.complete and cycle.keep_alive)

    def finish(self, active: Active, reusable: bool) -> None:
        """The response is over: keep the connection for the next request, or close it.

        ``reusable`` is False when the response was cut short: it must not
        look complete, so the connection is closed rather than reused.
        """
        if self._cycle is active:
            self._cycle = None
        transport = self.transport
        if transport is None:
            return
        if not reusable or self._closing:
            transport.close()
            return
        self._process()

    def _give_to_uvicorn(self) -> None:
        """Hand this connection, unconsumed bytes included, to uvicorn's protocol."""
        transport = self.transport
        assert transport is not None
        self._cancel_idle_timer()
        self._cancel_head_timer()
        self._cancel_body_timer()
        self._server_state.connections.discard(self)
        self.transport = None
        LANE.handed_over += 1
        successor = self.successor(
            config=self._config,
            server_state=self._server_state,
            app_state=self._app_state,
            _loop=self._loop,
        )
        transport.set_protocol(successor)
        successor.connection_made(transport)
        if self._head_since:  # the head's time limit runs on, it does not restart
            successor.start_head_clock(self._head_since)
        if self._write_paused:
            successor.pause_writing()
        if self._read_paused:
            transport.resume_reading()
        data, self._buf = bytes(self._buf), bytearray()
        if data:
            successor.data_received(data)

    def _refuse(self, refusal: Refusal) -> None:
        """Answer a request the admission refused, without reading its body; close."""
        transport = self.transport
        if transport is not None:
            head = [_status_line(refusal.status)]
            head.append(
                b"content-type: application/json\r\ncontent-length: %d\r\n" % len(refusal.body)
            )
            head.extend(name + b": " + value + b"\r\n" for name, value in refusal.headers)
            head.append(b"connection: close\r\n\r\n")
            transport.write(b"".join(head) + refusal.body)
            transport.close()
        self._buf.clear()

    def _too_large(self, message: str = "request headers too large") -> None:
        """431: the head is over the size or field limit (only /v1 heads reach here)."""
        transport = self.transport
        if transport is not None:
            transport.write(too_large_reply(True, message))
            transport.close()
        self._buf.clear()

    def _reject(self, status: int, message: str, code: str) -> None:
        transport = self.transport
        if transport is not None:
            transport.write(_error_reply(status, message, code))
            transport.close()
        self._buf.clear()

    # --------------------------------------------------------------- helpers
    def write(self, data: bytes) -> None:
        transport = self.transport
        if transport is not None:
            transport.write(data)

    async def drain(self) -> None:
        """Wait while the client's socket buffer is over its high-water mark."""
        while self._write_paused and self.transport is not None:
            if self._drain is None:
                self._drain = self._loop.create_future()
            await asyncio.shield(self._drain)

    def _wake_writers(self) -> None:
        drain, self._drain = self._drain, None
        if drain is not None and not drain.done():
            drain.set_result(None)

    # The keep-alive timeout. One timer per connection, re-armed only when it
    # fires, instead of a timer created and cancelled around every request.
    def _arm_idle_timer(self, delay: float) -> None:
        if self._idle_timer is None and self.transport is not None:
            self._idle_timer = self._loop.call_later(delay, self._idle_timeout)

    def _cancel_idle_timer(self) -> None:
        timer, self._idle_timer = self._idle_timer, None
        if timer is not None:
            timer.cancel()

    # The slow-header timeout: a head must be complete within ``head_timeout``
    # of the connection's opening or of its first byte. Armed only when a head
    # is incomplete after a read (or on connect), so a request that arrives in
    # one read costs one attribute store.
    def _await_head(self, since: float) -> None:
        self._head_since = since
        if self._head_timer is None and self.transport is not None:
            self._head_timer = self._loop.call_later(self.head_timeout, self._head_timeout)

    # The body timeout: a body must be complete within ``body_timeout`` of its
    # head. Armed only when a body is still arriving after a read.
    def _await_body(self) -> None:
        self._body_deadline = self._loop.time() + self.body_timeout
        if self._body_timer is None and self.transport is not None:
            self._body_timer = self._loop.call_later(self.body_timeout, self._body_timeout)

    def _cancel_body_timer(self) -> None:
        timer, self._body_timer = self._body_timer, None
        if timer is not None:
            timer.cancel()

    def _body_timeout(self) -> None:
        self._body_timer = None
        if self.transport is None or not self._body_deadline:
            return
        left = self._body_deadline - self._loop.time()
        if left > 0.01:
            self._body_timer = self._loop.call_later(left, self._body_timeout)
        else:
            self._reject(
                408,
                f"request body not received within {self.body_timeout:g} s",
                BODY_TIMEOUT,
            )

    def _cancel_head_timer(self) -> None:
        timer, self._head_timer = self._head_timer, None
        if timer is not None:
            timer.cancel()

    def _head_timeout(self) -> None:
        self._head_timer = None
        transport = self.transport
        if transport is None or not self._head_since:
            return
        left = self._head_since + self.head_timeout - self._loop.time()
        if left > 0.01:
            self._head_timer = self._loop.call_later(left, self._head_timeout)
        elif self._cycle is None:
            transport.close()
        else:  # a pipelined head waits for the response before it (not ours to cut)
            self._head_timer = self._loop.call_later(self.head_timeout, self._head_timeout)

    def _idle_timeout(self) -> None:
        self._idle_timer = None
        transport = self.transport
        if transport is None:
            return
        timeout = self._config.timeout_keep_alive
        if self._cycle is not None or self._buf:
            self._arm_idle_timer(timeout)  # busy: look again later
            return
        left = self._idle_since + timeout - self._loop.time()
        if left > 0.01:
            self._arm_idle_timer(left)
        else:
            transport.close()

    def response_head(
        self, status: int, headers: Any, keep_alive: bool, head_only: bool = False
    ) -> tuple[bytes, bool, bool]:
        """The response head to write, whether the body is chunked, and keep-alive.

        ``headers`` are the app's (name, value) pairs; without a
        Content-Length the body is sent chunked; the server's ``date`` and
        ``server`` are added, and ``connection: close`` when not keeping alive
        (or when the app asked for it).
        """
        parts = [_status_line(status)]
        for name, value in self._server_state.default_headers:
            parts.append(name + b": " + value + b"\r\n")
        framed = False
        for name, value in headers:
            name = bytes(name).lower()
            if name == b"content-length":
                framed = True
            elif name == b"connection" and bytes(value).lower() == b"close":
                keep_alive = False
                continue  # added below once
            parts.append(name + b": " + bytes(value) + b"\r\n")
        chunked = not framed and status not in _NO_BODY_STATUS and not head_only
        if chunked:
            parts.append(b"transfer-encoding: chunked\r\n")
        if not keep_alive:
            parts.append(b"connection: close\r\n")
        parts.append(b"\r\n")
        return b"".join(parts), chunked, keep_alive


class _Cycle:
    """One request/response exchange: the ASGI ``receive`` and ``send`` of the lane."""

    __slots__ = (
        "_body",
        "_chunked",
        "_disconnected",
        "_head",
        "_head_only",
        "_proto",
        "_waiter",
        "complete",
        "keep_alive",
        "started",
    )

    def __init__(self, proto: FastLaneProtocol, body: bytes, keep_alive: bool, head: bool) -> None:
        self._proto = proto
        self._body: bytes | None = body
        self._head_only = head
        self._head = b""
        self._chunked = False
        self._disconnected = False
        self._waiter: asyncio.Future[None] | None = None
        self.keep_alive = keep_alive
        self.started = False
        self.complete = False

    def disconnect(self) -> None:
        self._disconnected = True
        self._wake()

    def writing_paused(self, paused: bool) -> None:
        pass  # send() waits on the lane's drain instead

    def _wake(self) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def receive(self) -> Message:
        body, self._body = self._body, None
        if body is not None:
            return {"type": _REQUEST, "body": body, "more_body": False}
        while not (self._disconnected or self.complete):
            if self._waiter is None:
                self._waiter = self._proto._loop.create_future()
            await asyncio.shield(self._waiter)
        return _DISCONNECT

    async def send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.body":
            if not self.started:
                raise RuntimeError("response body sent before http.response.start")
            if self.complete:
                raise RuntimeError("response already complete")
            self._body_message(message.get("body", b""), message.get("more_body", False))
            if self._proto._write_paused:
                await self._proto.drain()
        elif kind == "http.response.start":
            if self.started:
                raise RuntimeError("http.response.start sent twice")
            self.started = True
            self._head = self._build_head(message["status"], message.get("headers", ()))
        else:
            raise RuntimeError(f"unsupported ASGI message {kind!r} on the fast lane")

    def _build_head(self, status: int, headers: Any) -> bytes:
        head, self._chunked, self.keep_alive = self._proto.response_head(
            status, headers, self.keep_alive, self._head_only
        )
        return head

    def _body_message(self, body: bytes, more: bool) -> None:
        head, self._head = self._head, b""
        if self._head_only or self._disconnected:
            out = head
        elif self._chunked:
            out = head + (b"%x\r\n%s\r\n" % (len(body), body) if body else b"")
            if not more:
                out += _LAST_CHUNK
        else:
            out = head + body if head else body
        if out:
            self._proto.write(out)
        if not more:
            self.complete = True
            self._wake()


def _addr(value: Any) -> tuple[str, int] | None:
    if isinstance(value, tuple) and len(value) >= 2:
        return (str(value[0]), int(value[1]))
    return None
