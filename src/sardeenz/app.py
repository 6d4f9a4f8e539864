"""create_app(settings): wires the node's services, routers and lifespan.

The returned ASGI callable (``Gateway``) dispatches on the path before FastAPI
sees the request: ``/v1/*`` and ``/api/direct/*`` go straight to the inference
proxy (the hot path: no dependency injection, no middleware stack), everything
else to the FastAPI app (``gateway.api``) with the admin API, docs and dashboard.
"""

from __future__ import annotations

import logging
import mimetypes
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from starlette.convertors import StringConvertor, register_url_convertor

from sardeenz import __version__
from sardeenz.api import auth, benchmarks, engines, gpus, health, memory, models
from sardeenz.api.errors import document_error_shapes, install_error_handlers
from sardeenz.bench.runner import BenchmarkRunner
from sardeenz.config import Settings
from sardeenz.demo import load_demo_models
from sardeenz.domain import InstanceStatus
from sardeenz.engines.vllm_probe import VllmProbe
from sardeenz.errors import SardeenzError
from sardeenz.events import EventBus
from sardeenz.gateway import Gateway
from sardeenz.gpu.inventory import create_inventory
from sardeenz.gpu.kvcached import Kvctl, SegmentTracker
from sardeenz.memory.ledger import MemoryLedger
from sardeenz.memory.profiles import ProfileService
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.proxy.metrics import observe_instance
from sardeenz.proxy.routing import InstanceView, RoutingTable, RoutingUpdater, WakeFailed
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.security.audit import AuditTrail
from sardeenz.security.auth import ApiKeys, Authenticator
from sardeenz.services import Services
from sardeenz.store.audit import AuditRepository
from sardeenz.store.benchmarks import BenchmarkRepository
from sardeenz.store.db import Database
from sardeenz.store.instances import InstanceRepository
from sardeenz.store.profiles import ProfileRepository

log = logging.getLogger("sardeenz")


def build_services(settings: Settings) -> Services:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    bus = EventBus()
    db = Database(settings.effective_database_url)
    inventory = create_inventory(settings)
    segments = SegmentTracker()
    profiles = ProfileRepository(db)
    ledger = MemoryLedger(settings, inventory, profiles, segments)
    vllm_probe = VllmProbe(
        settings.vllm_python, settings.vllm_device, settings.vllm_probe_timeout_seconds
    )
    supervisor = Supervisor(settings, bus, InstanceRepository(db), ledger, vllm_probe)
    api_keys = ApiKeys.from_settings(settings)
    table = RoutingTable(engine_host=settings.engine_host)
    table.add_listener(observe_instance)
    if settings.proxy_auto_wake:
        table.waker = _waker(supervisor)
    return Services(
        settings=settings,
        bus=bus,
        db=db,
        supervisor=supervisor,
        inventory=inventory,
        ledger=ledger,
        vllm_probe=vllm_probe,
        segments=segments,
        kvctl=Kvctl.for_settings(settings),
        routing=table,
        proxy=InferenceProxy(settings, table),
        routing_updater=RoutingUpdater(bus, table, resync=supervisor.list_instances),
        auth=Authenticator(settings),
        api_keys=api_keys,
        audit=AuditTrail(AuditRepository(db)),
        profiles=ProfileService(profiles, supervisor, inventory),
        benchmarks=BenchmarkRunner(settings, supervisor, BenchmarkRepository(db), api_keys),
    )


def _waker(supervisor: Supervisor) -> Callable[[str, Sequence[InstanceView]], Awaitable[None]]:
    """Auto-wake for the proxy: a request for a sleeping model wakes one instance.

    ``Supervisor.wake`` is single-flight, so 50 requests arriving together
    cause exactly one wake-up; they all wait for it. A refused wake-up (no
    GPU memory to take back, engine gone) raises ``WakeFailed``.
    """

    async def wake(name: str, sleeping: Sequence[InstanceView]) -> None:
        refusals = []
        for view in sleeping:
            try:
                await supervisor.wake(view.instance_id)
                return
            except SardeenzError as exc:
                log.warning("auto-wake of %s (%s) failed: %s", view.instance_id, name, exc)
                refusals.append(exc.message)
        if refusals:  # the requests waiting for it get a 503 now, with the reason
            raise WakeFailed("; ".join(refusals))

    return wake


WEB_DIR = Path(__file__).parent / "web"
"""The built dashboard (``make web``: frontend/ -> here; not committed)."""

_NO_BUILD_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Sardeenz: dashboard not built</title></head>
<body style="font-family: sans-serif; max-width: 40rem; margin: 3rem auto; line-height: 1.5">
<h1>The dashboard is not built</h1>
<p>This server runs, but its web dashboard was not built into
<code>src/sardeenz/web/</code>. From a source checkout run <code>make web</code>
(or <code>cd frontend &amp;&amp; npm ci &amp;&amp; npm run build</code>; Node.js 20.19+),
then reload this page. <code>make run</code> builds it for you.</p>
<p>Meanwhile the API works: <a href="/docs">/docs</a>, <a href="/openapi.json">/openapi.json</a>,
<a href="/metrics">/metrics</a>.</p>
</body></html>
"""


class _DashboardPath(StringConvertor):
    """Any path but the server's own: ``/api``, ``/v1``, ``/internal`` (cluster), docs,
    OpenAPI and metrics keep their answers (404 and 405 included) instead of falling
    through to the dashboard, whatever order their routes are added in."""

    regex = r"(?!(?:api|v1|internal|docs|redoc|openapi\.json|metrics)(?:/|$)).*"


register_url_convertor("dashboard", _DashboardPath())


_PRECOMPRESSED = (("br", ".br"), ("gzip", ".gz"))
"""Sibling files the build writes (``x.js.br``, ``x.js.gz``), preferred in this order."""


def _accepted_codings(accept_encoding: str) -> dict[str, float]:
    """``Accept-Encoding`` as coding -> q (``br;q=0`` refuses br; ``*`` stands for the rest)."""
    codings: dict[str, float] = {}
    for item in accept_encoding.lower().split(","):
        coding, *params = (p.strip() for p in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if coding:
            codings[coding] = q
    return codings


def _dashboard_file(request: Request, file: Path, cache: str) -> FileResponse:
    """``file``, or its precompressed sibling when the client accepts that coding.

    The body, ``Content-Length`` and ``ETag`` are the sibling's; ``Content-Type`` stays
    the original's. Nothing is compressed per request: without a sibling the file goes
    out as it is.
    """
    headers = {"Cache-Control": cache}
    siblings = [(c, file.with_name(file.name + s)) for c, s in _PRECOMPRESSED]
    siblings = [(c, f) for c, f in siblings if f.is_file()]
    if not siblings:
        return FileResponse(file, headers=headers)
    headers["Vary"] = "Accept-Encoding"
    accepted = _accepted_codings(request.headers.get("accept-encoding", ""))
    best: tuple[float, str, Path] | None = None
    for coding, sibling in siblings:
        q = accepted.get(coding, accepted.get("*", 0.0))
        if q > 0 and (best is None or q > best[0]):
            best = (q, coding, sibling)
    if best is None:
        return FileResponse(file, headers=headers)
    media_type = mimetypes.guess_type(file.name)[0] or "application/octet-stream"
    headers["Content-Encoding"] = best[1]
    return FileResponse(best[2], headers=headers, media_type=media_type)


def mount_dashboard(app: FastAPI, web_dir: Path) -> None:
    """Serve the dashboard at ``/`` with client-side routing.

    Files of the build are served as they are (hashed ``assets/`` cached for a
    year), or precompressed (``.br``/``.gz`` siblings written by the build) when
    the client accepts it; any other path gets ``index.html`` so deep links
    reload. Without a build, a short page says how to make one.
    """
    root = web_dir.resolve()

    @app.api_route("/{path:dashboard}", methods=["GET", "HEAD"], include_in_schema=False)
    async def dashboard(path: str, request: Request) -> Response:
        index = root / "index.html"
        if not index.is_file():
            return HTMLResponse(_NO_BUILD_PAGE)
        file = (root / path).resolve()
        if path and file.is_file() and file.is_relative_to(root):
            immutable = file.parent == root / "assets"
            cache = "public, max-age=31536000, immutable" if immutable else "no-cache"
            return _dashboard_file(request, file, cache)
        if path.startswith("assets/"):  # a stale hashed name: never answer HTML for a script
            raise HTTPException(404, "no such dashboard asset")
        return _dashboard_file(request, index, "no-cache")


def create_app(settings: Settings) -> Gateway:
    services = build_services(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await services.db.migrate()
        await services.inventory.open()
        await services.auth.start()
        await services.proxy.start()
        # Subscribe before seeding: no transition can fall between the two.
        services.routing_updater.start()
        await services.supervisor.start()
        await services.benchmarks.start()  # fails runs a dead predecessor left running
        services.routing.replace_all(services.supervisor.list_instances())
        services.started = True
        if settings.demo:
            await load_demo_models(services)
        try:
            yield
        finally:
            services.stopping = True
            count = len(services.supervisor.list_instances())
            log.info("shutting down: stopping %d engine(s)", count)
            await services.benchmarks.shutdown()  # cancel runs before their engines go
            await services.supervisor.shutdown()
            await services.routing_updater.stop()
            await services.proxy.close()
            await services.audit.close()
            removed = await services.segments.cleanup(services.kvctl)
            if removed:
                log.info("deleted kvcached segments: %s", ", ".join(removed))
            await services.inventory.close()
            await services.db.close()

    app = FastAPI(
        title="Sardeenz",
        version=__version__,
        summary="Many LLM engines on shared GPUs behind one OpenAI-compatible endpoint",
        lifespan=lifespan,
    )
    app.state.services = services
    install_error_handlers(app)
    document_error_shapes(app)
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(models.events_router)
    app.include_router(gpus.router)
    app.include_router(engines.router)
    app.include_router(auth.router)
    app.include_router(memory.router)
    app.include_router(benchmarks.router)

    mount_dashboard(app, WEB_DIR)  # last: its catch-all must not shadow any route above

    gateway = Gateway(
        app,
        services.proxy,
        services.auth,
        services.api_keys,
        settings.api_max_body_bytes,
        services.audit,
    )
    gateway.api = app
    gateway.services = services
    return gateway


__all__ = ["InstanceStatus", "create_app"]
