"""A reset connection leaves nothing behind in the protocol outside the fast lane.

uvicorn arms a keep-alive timer once an answer is out and cancels it in
``connection_lost`` only when the connection closed cleanly: a client that reset
its connection left the timer, and through it the protocol, its transport and the
last request's scope, alive for ``timeout_keep_alive`` (issue 23 item 5;
docs/connection-memory.md). A real uvicorn server on loopback with the node's
protocol (proxy/headguard.py) and keep-alive; a client that reads the whole
answer and closes with ``SO_LINGER`` 0.
"""

from __future__ import annotations

import asyncio
import gc
import socket
import struct
import weakref
from typing import Any

import pytest
from uvicorn.config import Config
from uvicorn.server import Server

from sardeenz.proxy.headguard import GuardedHttpToolsProtocol, HeadLimits, guarded_protocol
from testkit.waiting import within

KEEP_ALIVE = 75  # the node's (cli/server.py)


async def _app(scope: Any, receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]}
    )
    await send({"type": "http.response.body", "body": b"ok"})


@pytest.mark.timeout(30)
async def test_a_connection_reset_after_its_answer_is_released_at_once() -> None:
    protocols: list[weakref.ref[GuardedHttpToolsProtocol]] = []
    lost: list[type[Exception] | None] = []  # the type: a traceback would hold the protocol
    closed = asyncio.Event()
    base = guarded_protocol(HeadLimits(max_bytes=64 * 1024, max_count=100, timeout=10))

    class Watched(base):  # type: ignore[valid-type,misc]
        def connection_made(self, transport: asyncio.Transport) -> None:
            protocols.append(weakref.ref(self))
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            lost.append(type(exc) if exc is not None else None)
            closed.set()

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = Config(
        app=_app,
        host="127.0.0.1",
        port=port,
        http=Watched,
        loop="none",
        log_level="error",
        timeout_keep_alive=KEEP_ALIVE,
    )
    server = Server(config)
    serve = asyncio.get_running_loop().create_task(server.serve())
    try:
        while not server.started:
            assert not serve.done(), "uvicorn did not start"
            await asyncio.sleep(0.01)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * 60 * 1024 + b"\r\n\r\n")
        answer = b""
        while not answer.endswith(b"\r\n\r\nok"):
            chunk = await within(reader.read(65536), 5, "more of the answer to the big header")
            assert chunk, f"the server closed before its answer was complete: {answer!r}"
            answer += chunk
        assert answer.startswith(b"HTTP/1.1 200")
        raw = writer.get_extra_info("socket")
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.close()
        await within(closed.wait(), 5, "the server closed the reset connection")
        assert lost[0] is not None
        assert issubclass(lost[0], ConnectionError), f"closed with {lost[0]!r}, not a reset"
        gc.collect()
        protocol = protocols[0]()
        assert protocol is None, (
            "the reset connection's protocol is still referenced; its keep-alive timer: "
            f"{protocol.timeout_keep_alive_task!r}"
        )
    finally:
        server.should_exit = True
        await within(serve, 10, "uvicorn's serve() ended after should_exit")
