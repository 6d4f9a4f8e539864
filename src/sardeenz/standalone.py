"""Run the proxy alone, without the supervisor: for benchmarks, tests, debugging.

``python -m sardeenz.standalone --port 3100 --route NAME=PORT ...``
serves ``/v1/*``, ``/api/direct/{port}/*`` and ``/metrics`` in front of engines
that are already running, through the node's own dispatch (``gateway.Gateway``)
with no admin API behind it. The routes are static ``active`` instances;
nothing is spawned or health-checked.

``ThreadedProxyServer`` runs the same thing on a background thread with its
own event loop, so a test can drive it with blocking clients (the official
``openai`` client) as well as async ones, and change the routing table while
requests are in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
from collections.abc import Callable, Coroutine
from concurrent.futures import Future
from typing import Any, TypeVar

import uvicorn

from sardeenz.asgi import ASGIApp, Receive, Scope, Send
from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.gateway import Gateway
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.routing import RoutingTable
from sardeenz.proxy.wire import api_error, ascii_int, send_json
from sardeenz.security.auth import ApiKeys, Authenticator

T = TypeVar("T")


def make_instance(
    instance_id: str,
    name: str,
    port: int,
    status: InstanceStatus = InstanceStatus.ACTIVE,
) -> ModelInstance:
    """A minimal ModelInstance for a pre-existing engine on ``port``."""
    return ModelInstance(
        id=instance_id,
        model_path=name,
        served_model_name=name,
        display_name=name,
        engine=EngineKind.SIM,
        status=status,
        port=port,
    )


def build_gateway(proxy: InferenceProxy, settings: Settings) -> Gateway:
    """The node's own dispatch (gateway.Gateway) with no admin API behind it.

    ``/v1``, ``/api/direct`` and ``/metrics`` behave as in ``sardeenz serve``;
    every other path is 404. Admin auth is off (every caller is the local
    admin, as on a node without auth) and nothing is audited: there is no
    database. Inference API keys apply as configured.
    """
    no_admin_auth = settings.model_copy(
        update={"jwt_secret": None, "jwt_jwks_url": None, "oidc_issuer": None}
    )
    return Gateway(
        _no_api(proxy),
        proxy,
        Authenticator(no_admin_auth),
        ApiKeys.from_settings(settings),
        settings.api_max_body_bytes,
        audit=None,
    )


def _no_api(proxy: InferenceProxy) -> ASGIApp:
    """What stands where FastAPI stands in the node: the proxy's lifespan, then 404s."""

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await proxy.start()
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await proxy.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] == "http":
            await send_json(send, 404, api_error("not found", "not_found"))

    return app


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

            loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
        except ImportError:  # pragma: no cover - uvloop ships with uvicorn[standard]
            loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self._serve())
        except BaseException as exc:  # reported to start()
            self._error = exc
            self._ready.set()
        finally:
            loop.close()

    async def _serve(self) -> None:
        self.table = RoutingTable()
        self.proxy = InferenceProxy(self.settings, self.table)
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3100)
    parser.add_argument(
        "--route",
        action="append",
        default=[],
        metavar="NAME=PORT",
        help="serve NAME from the engine on 127.0.0.1:PORT (repeat for round robin)",
    )
    args = parser.parse_args(argv)
    settings = Settings()
    table = RoutingTable(engine_host=settings.engine_host)
    for i, route in enumerate(args.route):
        name, sep, port_text = route.rpartition("=")
        port = ascii_int(port_text)
        if not sep or port is None or not 0 < port < 65536:
            parser.error(f"--route {route!r}: expected NAME=PORT")
        table.apply(make_instance(f"static-{i}", name, port))
    proxy = InferenceProxy(settings, table)
    gateway = build_gateway(proxy, settings)
    with contextlib.suppress(KeyboardInterrupt):
        uvicorn.run(
            gateway,
            host=args.host,
            port=args.port,
            loop="uvloop",
            http=gateway.http_protocol(settings),
            lifespan="on",
            access_log=False,
            log_level="warning",
            # uvicorn closes idle client connections after 5 s by default; a
            # burst after a quiet spell then pays a TCP handshake per request.
            # nginx keeps them 75 s; so do we.
            timeout_keep_alive=75,
        )


if __name__ == "__main__":
    main()
