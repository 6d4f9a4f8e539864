"""The seed's Controller API for model instances: thin, the supervisor decides."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Request
from sse_starlette import EventSourceResponse
from starlette.status import HTTP_202_ACCEPTED

from sardeenz.api.deps import ServicesDep
from sardeenz.domain import LoadRequest, ModelInstance, SleepRequest
from sardeenz.events import (
    CatalogEvent,
    Event,
    LogEvent,
    PhaseEvent,
    RemovedEvent,
    StatusEvent,
)
from sardeenz.security.policy import ADMIN, READONLY
from sardeenz.telemetry.resources import ResourceMetrics

router = APIRouter(prefix="/api/v1/models", tags=["models"])

ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such instance (`code`: instance_not_found)"},
    409: {"description": "conflicting state (`code` says which)"},
}


@router.post(
    "/load",
    dependencies=[ADMIN],
    status_code=HTTP_202_ACCEPTED,
    response_model=ModelInstance,
    responses={
        400: {"description": "invalid request"},
        404: {"description": "cluster: no such pod (`code`: pod_not_found)"},
        409: {
            "description": "conflicting state (`code` says which); in a cluster, no pod can "
            "take the load: `no_pod_fits` with `reasons` per pod; `engine_unavailable`: "
            "the engine is not installed on this node (no vLLM behind SARDEENZ_VLLM_PYTHON)"
        },
        503: {"description": "cluster: the pod is unavailable (`code`: pod_unavailable)"},
    },
)
async def load_model(body: LoadRequest, services: ServicesDep) -> ModelInstance:
    """Start an engine; returns at once with the instance in `starting`.

    In a cluster, ``podId`` names the pod to load on (the leader sends the
    order through ``/internal/models/load``, fenced by its term); without it
    the leader's scheduler chooses the pod and GPUs (``SARDEENZ_SCHEDULER_STRATEGY``,
    constraints ``gpuType``, ``minVramGiB``, ``tensorParallelSize``).
    """
    if body.pod_id is not None:
        remote = await services.cluster.load_on(body.pod_id, body)
        if remote is not None:
            return remote
    else:
        placed = await services.placement.place(body)
        if placed is not None:
            return placed
    return await services.load_model(body)


@router.post(
    "/{instance_id}/unload", response_model=ModelInstance, responses=ERRORS, dependencies=[ADMIN]
)
async def unload_model(instance_id: str, services: ServicesDep) -> ModelInstance:
    """Stop the engine and remove the instance.

    The instance leaves routing first; its requests in flight get
    ``SARDEENZ_STOP_GRACE_SECONDS`` to finish, those left are cut with an error
    ``model_unloaded``; then SIGTERM, the grace again, SIGKILL. In a cluster, the
    leader sends this to the pod that runs the instance.
    """
    remote = await services.cluster.act_on(instance_id, "unload")
    if remote is not None:
        return remote
    return await services.supervisor.unload(instance_id)


@router.post(
    "/{instance_id}/sleep",
    dependencies=[ADMIN],
    response_model=ModelInstance,
    responses={**ERRORS, 502: {"description": "the engine failed the call (`engine_error`)"}},
)
async def sleep_model(
    instance_id: str,
    services: ServicesDep,
    body: SleepRequest | None = None,
    level: Annotated[int | None, Query(ge=1, le=2)] = None,
    force: Annotated[bool | None, Query()] = None,
) -> ModelInstance:
    """Put an instance to sleep (level 1: weights to CPU RAM; 2: discard them).

    ``level`` comes from the query or the body (default 1). 409
    ``sleep_mode_disabled`` when the instance was loaded without sleep mode.
    New requests for the model are held from the start (they wake it afterwards);
    the requests in flight get ``SARDEENZ_SLEEP_DRAIN_SECONDS`` to finish, then the
    sleep is refused with 409 ``requests_in_flight`` (``inFlight``: how many), or,
    with ``force`` (query or body), they are cut with an error ``model_sleeping``.
    """
    chosen = level if level is not None else (body.level if body is not None else 1)
    forced = force if force is not None else (body.force if body is not None else False)
    remote = await services.cluster.act_on(instance_id, "sleep", chosen)
    if remote is not None:
        return remote
    return await services.supervisor.sleep(instance_id, chosen, forced)


@router.post(
    "/{instance_id}/wake",
    dependencies=[ADMIN],
    response_model=ModelInstance,
    responses={**ERRORS, 502: {"description": "the engine failed the call (`engine_error`)"}},
)
async def wake_model(instance_id: str, services: ServicesDep) -> ModelInstance:
    """Wake a sleeping instance; returns once the engine reports it is awake."""
    remote = await services.cluster.act_on(instance_id, "wake")
    if remote is not None:
        return remote
    return await services.supervisor.wake(instance_id)


@router.get("", response_model=list[ModelInstance], dependencies=[READONLY])
async def list_models(services: ServicesDep) -> list[ModelInstance]:
    """Every instance; in a cluster, every pod's, each with its ``podId`` (from the
    heartbeats this pod holds: followers redirect here to the leader)."""
    return services.cluster.instances()


@router.get(
    "/{instance_id}", response_model=ModelInstance, responses=ERRORS, dependencies=[READONLY]
)
async def get_model(instance_id: str, services: ServicesDep) -> ModelInstance:
    """One instance."""
    return services.supervisor.get(instance_id)


@router.get(
    "/{instance_id}/metrics",
    response_model=ResourceMetrics,
    responses=ERRORS,
    dependencies=[READONLY],
)
async def get_resource_metrics(instance_id: str, services: ServicesDep) -> ResourceMetrics:
    """The seed's ``ResourceMetrics`` of one instance, measured now.

    ``gpuMemoryUsed`` in GB (10^9 bytes) as the seed has it, with exact bytes beside;
    ``activeConnections`` are the instance's requests in flight; ``requestCount`` and the
    latencies (``avgResponseTime`` is the p50, as in the seed; ms) count its served name.
    """
    (found,) = await services.resource_metrics(instance_id)
    return found


@router.get("/{instance_id}/logs", responses=ERRORS, dependencies=[READONLY])
async def get_logs(
    instance_id: str,
    services: ServicesDep,
    lines: Annotated[int, Query(ge=1, le=100_000)] = 200,
) -> dict[str, Any]:
    """The last ``lines`` lines of the engine's log (from the ring buffer)."""
    return {"instanceId": instance_id, "lines": services.supervisor.log_lines(instance_id, lines)}


def _sse(event: Event) -> dict[str, str]:
    if isinstance(event, LogEvent):
        data: dict[str, Any] = {
            "instanceId": event.instance_id,
            "line": event.line,
            "timestamp": event.at.isoformat(),
        }
        return {"event": "log", "data": orjson.dumps(data).decode()}
    if isinstance(event, StatusEvent):
        data = {
            "instanceId": event.instance_id,
            "status": event.instance.status.value,
            "previous": event.previous.value if event.previous else None,
            "errorMessage": event.instance.error_message,
            "instance": event.instance.model_dump(mode="json"),
            "timestamp": event.at.isoformat(),
        }
        return {"event": "status", "data": orjson.dumps(data).decode()}
    if isinstance(event, PhaseEvent):
        data = {
            "instanceId": event.instance_id,
            "status": event.instance.status.value,
            "loadPhase": event.instance.load_phase,
            "instance": event.instance.model_dump(mode="json"),
            "timestamp": event.at.isoformat(),
        }
        return {"event": "phase", "data": orjson.dumps(data).decode()}
    if isinstance(event, CatalogEvent):
        data = {
            "instanceId": event.instance_id,
            "model": event.model,
            "action": event.action,
            "reason": event.reason,
            "message": event.message,
            **event.details,
            "timestamp": event.at.isoformat(),
        }
        return {"event": "catalog", "data": orjson.dumps(data).decode()}
    data = {
        "instanceId": event.instance_id,
        "status": "removed",
        "instance": event.instance.model_dump(mode="json"),
        "timestamp": event.at.isoformat(),
    }
    return {"event": "removed", "data": orjson.dumps(data).decode()}


@router.get(
    "/instances/{instance_id}/events",
    dependencies=[READONLY],
    responses={**ERRORS, 200: {"content": {"text/event-stream": {}}}},
)
async def instance_events(
    instance_id: str,
    request: Request,
    services: ServicesDep,
    replay: bool = False,
) -> EventSourceResponse:
    """SSE: `log` lines, `status` transitions and, while it starts, `phase` changes (its
    `loadPhase`) of one instance; `removed` ends it.

    With ``replay=true`` the buffered log lines are sent first. The subscription
    is taken before the replay, so no line falls between the two.
    """
    supervisor = services.supervisor
    current = supervisor.get(instance_id)  # 404 before the stream starts
    sub = services.bus.subscribe(instance_id)
    backlog = supervisor.log_lines(instance_id) if replay else []

    async def stream() -> AsyncIterator[dict[str, str]]:
        try:
            for line in backlog:
                yield {
                    "event": "log",
                    "data": orjson.dumps(
                        {"instanceId": instance_id, "line": line, "replayed": True}
                    ).decode(),
                }
            yield _sse(StatusEvent(current, None))
            while True:
                event = await sub.get()
                yield _sse(event)
                if isinstance(event, RemovedEvent):
                    return
        finally:
            sub.close()

    return EventSourceResponse(stream(), ping=15, send_timeout=30)


events_router = APIRouter(prefix="/api/v1", tags=["models"])


@events_router.get(
    "/resource-metrics", response_model=list[ResourceMetrics], dependencies=[READONLY]
)
async def list_resource_metrics(services: ServicesDep) -> list[ResourceMetrics]:
    """``ResourceMetrics`` of every instance of this node (one poll for the dashboard)."""
    return await services.resource_metrics()


@events_router.get(
    "/events", responses={200: {"content": {"text/event-stream": {}}}}, dependencies=[READONLY]
)
async def all_events(services: ServicesDep, logs: bool = False) -> EventSourceResponse:
    """SSE of every instance's `status` and `phase` (and, with ``logs=true``, `log`) events,
    and the `catalog` events of on-demand handling (idle sleeps and unloads, evictions,
    warm-ups)."""
    sub = services.bus.subscribe()

    async def stream() -> AsyncIterator[dict[str, str]]:
        try:
            while True:
                event = await sub.get()
                if isinstance(event, LogEvent) and not logs:
                    continue
                yield _sse(event)
        finally:
            sub.close()

    return EventSourceResponse(stream(), ping=15, send_timeout=30)
