"""Benchmark endpoints of the seed (plus cancel): thin, :class:`BenchmarkRunner` decides."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query
from sse_starlette import EventSourceResponse
from starlette.status import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from sardeenz.api.deps import ServicesDep
from sardeenz.bench.models import BenchmarkCreate
from sardeenz.security.policy import ADMIN, READONLY
from sardeenz.store.db import SQL_INT_MAX
from sardeenz.store.records import BenchmarkRun

router = APIRouter(prefix="/api/benchmarks", tags=["benchmarks"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such run (`code`: benchmark_not_found)"}
}


def _event(name: str, data: Any) -> dict[str, str]:
    return {"event": name, "data": orjson.dumps(data).decode()}


@router.post(
    "",
    dependencies=[ADMIN],
    status_code=HTTP_201_CREATED,
    response_model=BenchmarkRun,
    responses={
        400: {"description": "`benchmark_too_large`, `context_too_long`"},
        404: {"description": "`instance_not_found`"},
        409: {"description": "`instance_not_active`, `benchmark_in_progress`"},
        422: {"description": "`validation_error`: counts out of range (see docs)"},
    },
)
async def create_benchmark(body: BenchmarkCreate, services: ServicesDep) -> BenchmarkRun:
    """Create a run and start it; returns at once (status `pending` or `running`)."""
    return await services.benchmarks.create(body)


@router.get("", response_model=list[BenchmarkRun], dependencies=[READONLY])
async def list_benchmarks(
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0, le=SQL_INT_MAX)] = 0,
) -> list[BenchmarkRun]:
    """Runs, newest first, with their scenarios and metrics."""
    return await services.benchmarks.list_runs(limit, offset)


@router.get("/{run_id}", response_model=BenchmarkRun, responses=_NOT_FOUND, dependencies=[READONLY])
async def get_benchmark(run_id: str, services: ServicesDep) -> BenchmarkRun:
    """One run with scenarios and metrics; live request counts while it runs."""
    return await services.benchmarks.get(run_id)


@router.get(
    "/{run_id}/events",
    dependencies=[READONLY],
    responses={**_NOT_FOUND, 200: {"content": {"text/event-stream": {}}}},
)
async def benchmark_events(run_id: str, services: ServicesDep) -> EventSourceResponse:
    """SSE: `snapshot` (the run now), then `status`, `scenario`, `progress`; `done` ends it.

    A finished run answers `snapshot` and `done` at once.
    """
    runner = services.benchmarks
    snapshot, queue = await runner.subscribe(run_id)  # 404 before the stream starts

    async def stream() -> AsyncIterator[dict[str, str]]:
        try:
            yield _event("snapshot", snapshot.model_dump(mode="json"))
            if queue is None:
                yield _event("done", snapshot.model_dump(mode="json"))
                return
            while True:
                item = await queue.get()
                if item is None:
                    return
                yield _event(*item)
        finally:
            if queue is not None:
                runner.unsubscribe(run_id, queue)

    return EventSourceResponse(stream(), ping=15, send_timeout=30)


@router.post(
    "/{run_id}/cancel",
    dependencies=[ADMIN],
    response_model=BenchmarkRun,
    responses={**_NOT_FOUND, 409: {"description": "`benchmark_not_running`"}},
)
async def cancel_benchmark(run_id: str, services: ServicesDep) -> BenchmarkRun:
    """Stop a running run now; answers once it is recorded `cancelled`."""
    return await services.benchmarks.cancel(run_id)


@router.delete(
    "/{run_id}", status_code=HTTP_204_NO_CONTENT, responses=_NOT_FOUND, dependencies=[ADMIN]
)
async def delete_benchmark(run_id: str, services: ServicesDep) -> None:
    """Delete a run, its scenarios and metrics (a running run is cancelled first)."""
    await services.benchmarks.delete(run_id)
