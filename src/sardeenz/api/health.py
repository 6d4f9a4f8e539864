"""Health probes: ``/api/health`` (summary), ``/ready`` and ``/live`` for Kubernetes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from sardeenz import __version__
from sardeenz.api.deps import ServicesDep
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus
from sardeenz.security.policy import PUBLIC

router = APIRouter(prefix="/api/health", tags=["health"])


class HealthReport(BaseModel):
    status: str
    version: str
    mode: str
    instances: dict[str, int]


@router.get("", response_model=HealthReport, dependencies=[PUBLIC])
async def health(services: ServicesDep) -> HealthReport:
    """Summary: version, mode and how many instances are in each state.

    ``mode``: ``demo`` (``--demo``), ``simulated`` (simulated GPUs from ``--sim-gpus``
    outside a demo: the GPUs are books, not hardware) or ``real``.
    """
    counts = {s.value: 0 for s in InstanceStatus}
    for inst in services.supervisor.list_instances():
        counts[inst.status.value] += 1
    return HealthReport(
        status="ok" if services.started and not services.stopping else "starting",
        version=__version__,
        mode=_mode(services.settings),
        instances=counts,
    )


@router.get("/live", dependencies=[PUBLIC])
async def live() -> dict[str, str]:
    """The process answers: the event loop is not wedged."""
    return {"status": "alive"}


@router.get(
    "/ready",
    responses={503: {"description": "not ready yet, or shutting down"}},
    dependencies=[PUBLIC],
)
async def ready(services: ServicesDep) -> JSONResponse:
    """Ready once the registry is loaded and engines re-adopted; not while stopping."""
    if services.started and not services.stopping:
        return JSONResponse({"status": "ready"})
    return JSONResponse(
        {"detail": "not ready", "code": "not_ready", "status": "not_ready"}, status_code=503
    )


def _mode(settings: Settings) -> str:
    if settings.demo:
        return "demo"
    return "simulated" if settings.effective_sim_gpus else "real"
