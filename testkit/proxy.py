"""The standalone proxy on a background thread, for tests and benchmarks.

``ThreadedProxyServer`` runs what ``python -m sardeenz.standalone`` runs
(``build_gateway``: the node's own dispatch with no admin API behind it) on a
thread with its own event loop, so a test can drive it with blocking clients
(the official ``openai`` client) as well as async ones, and change the routing
table while requests are in flight.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

import uvicorn

from sardeenz.config import Settings
from sardeenz.domain import ModelInstance
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.routing import RoutingTable
from sardeenz.standalone import build_gateway

T = TypeVar("T")


class ThreadedProxyServer:
    """uvicorn + InferenceProxy on a private thread and loop (see module doc)."""

    def __init__(
        self,
        settings: Settings | None = None,
        host: str = "127.0.0.1",
        *,
        timeout_keep_alive: int = 5,
    ) -> None:
        self.settings = settings or Settings()
        self.host = host
        self.timeout_keep_alive = timeout_keep_alive
        self.port = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: uvicorn.Server | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.table: RoutingTable | None = None
        self.proxy: InferenceProxy | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> ThreadedProxyServer:
        self._thread = threading.Thread(target=self._run, name="proxy-server", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            raise RuntimeError("proxy server did not start")
        if self._error is not None:
            raise RuntimeError("proxy server failed to start") from self._error
        return self

    def _run(self) -> None:
        try:
            import uvloop

            factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
        except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
            factory = asyncio.new_event_loop
        # Tests start their own coroutines on this loop (``run``): engines that misbehave on
        # purpose, whose connection handlers may still wait on a keep-alive connection the
        # proxy never closed. The Runner cancels and awaits them when it closes, as
        # ``asyncio.run`` does, instead of destroying them pending with the loop.
        with asyncio.Runner(loop_factory=factory) as runner:
            self._loop = runner.get_loop()
            try:
                runner.run(self._serve())
            except BaseException as exc:  # reported to start()
                self._error = exc
                self._ready.set()

    async def _serve(self) -> None:
        self.table = RoutingTable()
        self.proxy = InferenceProxy(self.settings, self.table)
        self.proxy.verify_direct = False  # engines we did not start: no process to check
        gateway = build_gateway(self.proxy, self.settings)
        config = uvicorn.Config(
            gateway,
            host=self.host,
            port=0,
            loop="none",
            http=gateway.http_protocol(self.settings),
            lifespan="on",
            access_log=False,
            log_level="warning",
            timeout_graceful_shutdown=2,
            timeout_keep_alive=self.timeout_keep_alive,
        )
        server = self._server = uvicorn.Server(config)
        serve = asyncio.get_running_loop().create_task(server.serve())
        while not server.started:
            if serve.done():
                await serve  # raises the start-up error
                return
            await asyncio.sleep(0.01)
        self.port = server.servers[0].sockets[0].getsockname()[1]
        self._ready.set()
        await serve

    def call(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on the server loop (the table is loop-confined) and return its result."""
        return self.run(self._wrap(fn))

    @staticmethod
    async def _wrap(fn: Callable[[], T]) -> T:
        return fn()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        assert self._loop is not None
        fut: Future[T] = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return fut.result(timeout)

    def apply(self, instance: ModelInstance) -> None:
        table = self.table
        assert table is not None
        self.call(lambda: table.apply(instance))

    def remove(self, instance_id: str) -> None:
        table = self.table
        assert table is not None
        self.call(lambda: table.remove(instance_id))

    def stop(self) -> None:
        server, loop, thread = self._server, self._loop, self._thread
        if server is not None and loop is not None and not loop.is_closed():
            server.should_exit = True
        if thread is not None:
            thread.join(10)
