"""Run the proxy alone, without the supervisor: for benchmarks, tests, debugging.

``python -m sardeenz.standalone --port 3100 --route NAME=PORT ...``
serves ``/v1/*``, ``/api/direct/{port}/*`` and ``/metrics`` in front of engines
that are already running, through the node's own dispatch (``gateway.Gateway``)
with no admin API behind it. The routes are static ``active`` instances;
nothing is spawned or health-checked. (testkit/proxy.py runs the same thing on
a thread for tests and benchmarks.)
"""

from __future__ import annotations

import argparse
import contextlib
from typing import TypeVar

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
        settings,
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
    # engines we did not start: no process to check
    proxy = InferenceProxy(settings, table, verify_direct=False)
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
