"""A lean HTTP/1.1 client for engines: asyncio protocol + httptools, pooled.

Why not aiohttp or httpx: measured on the proxy's hot path (see
benchmarks/README.md), aiohttp spends ~170 us of CPU per request in the client
alone and httpx several times that, more than the whole proxy budget. An
engine is a known HTTP/1.1 server on a trusted network; what the proxy needs
from a client is small: write one pre-assembled request, parse the response
head, hand over body bytes as they arrive, and keep the connection for the
next request. That is this module: one ``transport.write`` per request, the
response parsed by httptools (llhttp, the parser uvicorn uses), no header
objects, no cookie jar, no decompression, no redirects.

What it does not do: TLS, proxies, redirects, request streaming (bodies are
already in memory: the proxy must read them to find ``model``), HTTP/2.

Connections are kept per (host, port) in a LIFO stack and retired after
``keepalive_timeout`` seconds idle, below uvicorn's (hence vLLM's) 5 s, so we
do not send a request on a connection the engine is closing. If that still
happens (``relay.may_retry_stale``: no byte of response, failure within a
second, on a reused connection), the request is retried once on a fresh
connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from typing import Final, Protocol

import httptools

from sardeenz.proxy.relay import may_retry_stale

_HIGH_WATER: Final = 1 << 20
"""Stop reading from the engine while this much body is waiting for the client."""
_LOW_WATER: Final = 1 << 18
_BODYLESS_METHODS: Final = frozenset({b"GET", b"HEAD", b"DELETE", b"OPTIONS"})


class UpstreamError(Exception):
    """Base of the errors below."""


class ConnectFailed(UpstreamError):
    """No connection could be made: nothing reached the engine (safe to retry)."""


class UpstreamClosed(UpstreamError):
    """The connection broke (or the response was invalid) during an exchange."""

    def __init__(self, message: str, *, received: bool = False) -> None:
        super().__init__(message)
        self.received = received
        """True if any response byte had arrived before the failure."""


class Sink(Protocol):
    """Receives one exchange's response from protocol callbacks (see ``Connection.start``).

    Exactly one of ``on_end`` / ``on_error`` is called, after ``on_head`` (and
    ``on_body`` calls) or, for ``on_error``, possibly without them.
    """

    def on_head(self, status: int, headers: list[tuple[bytes, bytes]]) -> None: ...

    def on_body(self, data: bytes) -> None: ...

    def on_flush(self) -> None:
        """One read from the engine has been parsed: a good moment to write what came."""

    def on_end(self) -> None: ...

    def on_error(self, error: UpstreamClosed) -> None: ...


class Response:
    """Status, headers and a body you ``read()`` chunk by chunk as it arrives.

    ``headers`` are (lower-case name, value) byte pairs exactly as sent.
    ``read()`` returns everything received since the last call, joined (so a
    slow reader naturally gets bigger, fewer chunks), and b"" at the end.
    """

    __slots__ = (
        "_chunks",
        "_conn",
        "_done",
        "_error",
        "_loop",
        "_size",
        "_waiter",
        "headers",
        "status",
    )

    def __init__(
        self, status: int, headers: list[tuple[bytes, bytes]], conn: Connection | None
    ) -> None:
        self.status = status
        self.headers = headers
        self._conn = conn
        self._chunks: list[bytes] = []
        self._size = 0
        self._waiter: asyncio.Future[None] | None = None
        self._done = False
        self._error: UpstreamError | None = None
        self._loop = asyncio.get_running_loop()

    @property
    def complete(self) -> bool:
        """The whole body has been received (it may not all be read yet)."""
        return self._done

    async def read(self) -> bytes:
        """The next body bytes; b"" once the body is complete and consumed."""
        while True:
            chunks = self._chunks
            if chunks:
                data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
                chunks.clear()
                if self._size > _LOW_WATER and self._conn is not None:
                    self._conn.resume()
                self._size = 0
                return data
            if self._error is not None:
                raise self._error
            if self._done:
                return b""
            waiter = self._waiter = self._loop.create_future()
            try:
                await waiter
            finally:
                self._waiter = None

    async def read_all(self) -> bytes:
        parts = []
        while chunk := await self.read():
            parts.append(chunk)
        return b"".join(parts)

    def close(self) -> None:
        """Give up on the rest: closes the connection if the body is unfinished.

        That is how an abandoned request reaches the engine: it sees the
        connection close and aborts the generation.
        """
        conn, self._conn = self._conn, None
        if conn is not None and not self._done:
            conn.abort_exchange()

    def cut(self, reason: str) -> None:
        """End the body now: ``read()`` raises ``UpstreamClosed(reason)`` and the engine
        sees its connection close (and aborts the generation). For a drain that ran out."""
        conn = self._conn
        self._finish(UpstreamClosed(reason, received=True))
        if conn is not None:
            conn.abort_exchange()

    # --- fed by the connection ---------------------------------------------
    def _feed(self, data: bytes) -> None:
        self._chunks.append(data)
        self._size += len(data)
        if self._size > _HIGH_WATER and self._conn is not None:
            self._conn.pause()
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _finish(self, error: UpstreamError | None = None) -> None:
        if self._done or self._error is not None:
            return
        if error is None:
            self._done = True
        else:
            self._error = error
        self._conn = None
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)


class Connection(asyncio.Protocol):
    """One keep-alive connection; at most one exchange at a time.

    An exchange is consumed either as a ``Response`` (``exchange``, awaited)
    or by a ``Sink`` called straight from the protocol callbacks (``start``),
    which is what the express path uses to relay without a task.
    """

    def __init__(self, pool: UpstreamClient, key: tuple[str, int]) -> None:
        self._pool = pool
        self.key = key
        self._loop = asyncio.get_running_loop()
        self.transport: asyncio.Transport | None = None
        self._parser = httptools.HttpResponseParser(self)
        self._head: asyncio.Future[Response] | None = None
        self._response: Response | None = None
        self._sink: Sink | None = None
        self._sink_head = False
        self._headers: list[tuple[bytes, bytes]] = []
        self._head_request = False
        self._informational = False
        self._close_delimited = False
        self._framed = False
        self._received = False
        self._paused = False
        self.idle_since = 0.0
        self.uses = 0

    # --- asyncio.Protocol ---------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self._received = True
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamClosed(f"invalid response from engine: {exc}", received=True))
            self._close()
            return
        sink = self._sink
        if sink is not None:
            sink.on_flush()

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self._pool._forget(self)
        sink = self._sink
        if sink is not None and self._sink_head and self._close_delimited:
            self._sink = None
            sink.on_end()
            return
        response = self._response
        if response is not None and self._close_delimited:
            self._response = None
            response._finish()
            return
        self._fail(
            UpstreamClosed(
                "engine closed the connection" + (f" ({exc})" if exc else ""),
                received=self._received,
            )
        )

    # --- httptools callbacks -----------------------------------------------
    def on_header(self, name: bytes, value: bytes) -> None:
        name = name.lower()
        if name == b"content-length" or name == b"transfer-encoding":
            self._framed = True
        self._headers.append((name, value))

    def on_headers_complete(self) -> None:
        status = self._parser.get_status_code()
        framed, self._framed = self._framed, False
        if 100 <= status < 200 and status != 101:
            self._informational = True
            self._headers = []
            return
        headers, self._headers = self._headers, []
        sink = self._sink
        if sink is not None:
            self._close_delimited = not (framed or status in (204, 304))
            self._sink_head = True
            sink.on_head(status, headers)
            return
        response = Response(status, headers, self)
        # A body with neither Content-Length nor chunking ends when the
        # connection does (HTTP/1.0 style).
        self._close_delimited = not (framed or self._head_request or status in (204, 304))
        head = self._head
        self._head = None
        if self._head_request:
            # httptools cannot be told a response to HEAD has no body: finish
            # here and do not reuse the connection.
            response._finish()
            self._close()
        else:
            self._response = response
        if head is not None and not head.done():
            head.set_result(response)

    def on_body(self, body: bytes) -> None:
        sink = self._sink
        if sink is not None:
            sink.on_body(body)
            return
        response = self._response
        if response is not None:
            response._feed(body)

    def on_message_complete(self) -> None:
        if self._informational:
            self._informational = False
            return
        response = self._response
        self._response = None
        if response is not None:
            response._finish()
        sink, self._sink = self._sink, None
        if self._paused:
            self.resume()
        if self._parser.should_keep_alive() and self.transport is not None:
            self._pool._release(self)
        else:
            self._close()
        if sink is not None:  # after the release: the sink may start the next request
            sink.on_end()

    # --- used by the pool and Response -------------------------------------
    @property
    def usable(self) -> bool:
        t = self.transport
        return t is not None and not t.is_closing()

    def start(self, data: bytes, sink: Sink) -> None:
        """Send a request (never HEAD) whose response goes to ``sink``'s callbacks."""
        transport = self.transport
        if transport is None:
            raise UpstreamClosed("connection closed before the request was sent")
        self.uses += 1
        self._received = False
        self._head_request = False
        self._sink = sink
        self._sink_head = False
        transport.write(data)

    async def exchange(self, data: bytes, head_request: bool) -> Response:
        transport = self.transport
        if transport is None:
            raise UpstreamClosed("connection closed before the request was sent")
        self.uses += 1
        self._received = False
        self._head_request = head_request
        head: asyncio.Future[Response] = self._loop.create_future()
        self._head = head
        transport.write(data)
        return await head

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        """Stop reading the engine: its client is slower than it.

        Only while an exchange is in progress: backpressure that reaches a connection
        after its response ended (the client's transport filling up on the final write)
        would leave it paused in the pool, and the next request on it would never be
        read."""
        if self._sink is None and self._response is None:
            return
        if not self._paused and self.transport is not None:
            self._paused = True
            self.transport.pause_reading()

    def resume(self) -> None:
        if self._paused and self.transport is not None:
            self._paused = False
            self.transport.resume_reading()

    def abort_exchange(self) -> None:
        """Drop the exchange in progress: the engine sees the connection close."""
        self._head = None
        self._response = None
        self._sink = None
        self._close()

    def _fail(self, error: UpstreamError) -> None:
        head, self._head = self._head, None
        if head is not None and not head.done():
            head.set_exception(error)
        response, self._response = self._response, None
        if response is not None:
            response._finish(error)
        sink, self._sink = self._sink, None
        if sink is not None and isinstance(error, UpstreamClosed):
            sink.on_error(error)

    def _close(self) -> None:
        t = self.transport
        if t is not None:
            t.close()


class UpstreamClient:
    """Pooled keep-alive connections to engines; one per process, loop-bound."""

    def __init__(
        self,
        *,
        keepalive_timeout: float = 3.0,
        max_idle_per_host: int = 512,
        connect_timeout: float = 10.0,
    ) -> None:
        self._keepalive = keepalive_timeout
        self._max_idle = max_idle_per_host
        self._connect_timeout = connect_timeout
        self._idle: dict[tuple[str, int], list[Connection]] = {}
        self._all: set[Connection] = set()
        self._host_headers: dict[tuple[str, int], bytes] = {}
        self._closed = False

    async def request(
        self,
        host: str,
        port: int,
        method: bytes,
        target: bytes,
        headers: bytes,
        body: bytes,
    ) -> Response:
        """Send one request; returns once the response head has arrived.

        ``headers`` is the pre-assembled ``name: value\\r\\n`` block without
        ``host`` and ``content-length`` (added here). Raises ConnectFailed or
        UpstreamClosed.
        """
        key = (host, port)
        data = self.encode(host, port, method, target, headers, body)
        head_request = method == b"HEAD"
        loop = asyncio.get_running_loop()
        conn = self._acquire(key, loop.time())
        reused = conn is not None
        if conn is None:
            conn = await self._connect(key)
        started = loop.time()
        try:
            return await conn.exchange(data, head_request)
        except UpstreamClosed as exc:
            if self._closed or not may_retry_stale(reused, exc.received, loop.time() - started):
                raise
        except BaseException:
            conn.abort_exchange()
            raise
        # The engine closed an idle keep-alive connection under us: once more,
        # on a fresh connection.
        conn = await self._connect(key)
        try:
            return await conn.exchange(data, head_request)
        except BaseException:
            conn.abort_exchange()
            raise

    def encode(
        self, host: str, port: int, method: bytes, target: bytes, headers: bytes, body: bytes
    ) -> bytes:
        """The request's bytes: ``headers`` as for ``request``, plus host and length."""
        key = (host, port)
        host_header = self._host_headers.get(key)
        if host_header is None:
            h = f"[{host}]" if ":" in host else host
            host_header = self._host_headers[key] = f"host: {h}:{port}\r\n".encode("latin-1")
        if body or method not in _BODYLESS_METHODS:
            return b"%s %s HTTP/1.1\r\n%s%scontent-length: %d\r\n\r\n%s" % (
                method,
                target,
                host_header,
                headers,
                len(body),
                body,
            )
        return b"%s %s HTTP/1.1\r\n%s%s\r\n" % (method, target, host_header, headers)

    def idle_connection(self, host: str, port: int) -> Connection | None:
        """A pooled keep-alive connection to ``host:port``, if one is idle (for ``start``)."""
        # The connection's loop, not get_running_loop(): on Python 3.11 that is
        # a getpid() system call, and this runs on every express request.
        stack = self._idle.get((host, port))
        if not stack:
            return None
        return self._acquire((host, port), stack[-1]._loop.time())

    async def connect(self, host: str, port: int) -> Connection:
        """A new connection to ``host:port`` (for ``start``); raises ConnectFailed."""
        return await self._connect((host, port))

    async def close(self) -> None:
        """Close every connection (idle ones now, busy ones are cut)."""
        self._closed = True
        for conn in list(self._all):
            conn.abort_exchange()
        self._idle.clear()
        self._all.clear()
        await asyncio.sleep(0)

    @property
    def connection_count(self) -> int:
        return len(self._all)

    @property
    def paused_count(self) -> int:
        """Connections not being read because their client is slower than the engine."""
        return sum(1 for conn in self._all if conn.paused)

    def _acquire(self, key: tuple[str, int], now: float) -> Connection | None:
        stack = self._idle.get(key)
        while stack:
            conn = stack.pop()
            if conn.usable and now - conn.idle_since < self._keepalive:
                return conn
            conn._close()
        return None

    async def _connect(self, key: tuple[str, int]) -> Connection:
        if self._closed:
            raise ConnectFailed("client closed")
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self._connect_timeout):
                _, proto = await loop.create_connection(
                    lambda: Connection(self, key), key[0], key[1]
                )
        except (OSError, TimeoutError) as exc:
            raise ConnectFailed(f"cannot connect to {key[0]}:{key[1]}: {exc}") from exc
        self._all.add(proto)
        return proto

    def _release(self, conn: Connection) -> None:
        if self._closed:
            conn._close()
            return
        stack = self._idle.setdefault(conn.key, [])
        if len(stack) >= self._max_idle:
            conn._close()
            return
        conn.idle_since = conn._loop.time()
        stack.append(conn)

    def _forget(self, conn: Connection) -> None:
        self._all.discard(conn)
        stack = self._idle.get(conn.key)
        if stack:
            with contextlib.suppress(ValueError):
                stack.remove(conn)
