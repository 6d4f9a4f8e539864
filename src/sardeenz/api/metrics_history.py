"""``GET /api/v1/metrics/history``: the server-side history behind the dashboard's charts."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from sardeenz.api.deps import ServicesDep
from sardeenz.metrics_history import HistoryReport
from sardeenz.security.policy import READONLY

router = APIRouter(prefix="/api/v1", tags=["metrics"])


@router.get("/metrics/history", response_model=HistoryReport, dependencies=[READONLY])
async def metrics_history(
    services: ServicesDep,
    since: Annotated[
        float | None, Query(description="only samples taken after this Unix time (seconds)")
    ] = None,
    pod: Annotated[
        str | None, Query(max_length=253, description="one pod's GPUs and models only")
    ] = None,
) -> HistoryReport:
    """GPU memory, and per model the requests, 5xx, p50/p95 latency (from each request's
    own latency in the request log) and requests in flight; one sample every 5 s for the
    last hour (a ring in the server: it survives a page reload, not a controller
    restart). In a cluster: every pod's, and per pod (``pod``)."""
    return services.metrics_history.report(since, pod)
