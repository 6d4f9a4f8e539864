"""create_app(settings): wires the node's services, routers and lifespan.

The returned ASGI callable dispatches on the path before FastAPI sees the
request: ``/v1/*`` and ``/api/direct/*`` go straight to the inference proxy
(the hot path: no dependency injection, no middleware stack), everything else
to the FastAPI app with the admin API, docs and dashboard.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import RedirectResponse, Response

from sardeenz import __version__
from sardeenz.api import gpus, health, models
from sardeenz.api.errors import install_error_handlers
from sardeenz.config import Settings
from sardeenz.demo import load_demo_models
from sardeenz.domain import InstanceStatus
from sardeenz.events import EventBus
from sardeenz.gpu.inventory import create_inventory
from sardeenz.gpu.kvcached import Kvctl, SegmentTracker
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.services import Services
from sardeenz.store.db import Database
from sardeenz.store.instances import InstanceRepository

log = logging.getLogger("sardeenz")


def build_services(settings: Settings) -> Services:
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    bus = EventBus()
    db = Database(settings.effective_database_url)
    inventory = create_inventory(settings)
    segments = SegmentTracker()
    supervisor = Supervisor(settings, bus, InstanceRepository(db), inventory, segments)
    return Services(
        settings=settings,
        bus=bus,
        db=db,
        supervisor=supervisor,
        inventory=inventory,
        segments=segments,
        kvctl=Kvctl.for_settings(settings),
    )


def create_app(settings: Settings) -> FastAPI:
    services = build_services(settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await services.db.migrate()
        await services.inventory.open()
        await services.supervisor.start()
        services.started = True
        if settings.demo:
            await load_demo_models(services)
        try:
            yield
        finally:
            services.stopping = True
            count = len(services.supervisor.list_instances())
            log.info("shutting down: stopping %d engine(s)", count)
            await services.supervisor.shutdown()
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
    app.include_router(health.router)
    app.include_router(models.router)
    app.include_router(models.events_router)
    app.include_router(gpus.router)

    @app.get("/", include_in_schema=False)
    async def root() -> Response:
        return RedirectResponse("/docs")

    return app


__all__ = ["InstanceStatus", "create_app"]
