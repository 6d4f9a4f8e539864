"""The seed's Controller API for model instances: thin, the supervisor decides."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from sse_starlette import EventSourceResponse
from starlette.status import HTTP_202_ACCEPTED

from sardeenz.api.deps import ServicesDep
from sardeenz.domain import LoadRequest, ModelInstance, SleepRequest
from sardeenz.events import LogEvent
from sardeenz.runtime.event_stream import sse_item
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
    return await services.loads.load(body)


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
    return await services.locator.act(instance_id, "unload")


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
    return await services.locator.act(instance_id, "sleep", chosen, forced)


@router.post(
    "/{instance_id}/wake",
    dependencies=[ADMIN],
    response_model=ModelInstance,
    responses={**ERRORS, 502: {"description": "the engine failed the call (`engine_error`)"}},
)
async def wake_model(instance_id: str, services: ServicesDep) -> ModelInstance:
    """Wake a sleeping instance; returns once the engine reports it is awake."""
    return await services.locator.act(instance_id, "wake")


@router.get("", response_model=list[ModelInstance], dependencies=[READONLY])
async def list_models(services: ServicesDep) -> list[ModelInstance]:
    """Every instance; in a cluster, every pod's, each with its ``podId`` (from the
    heartbeats this pod holds: followers redirect here to the leader), each with
    ``managedBy``: the applied preset or catalog entry that brings it back after an unload."""
    return await services.stewards.mark(services.locator.instances())


@router.get(
    "/{instance_id}", response_model=ModelInstance, responses=ERRORS, dependencies=[READONLY]
)
async def get_model(instance_id: str, services: ServicesDep) -> ModelInstance:
    """One instance, as the pod that runs it sees it now (with its ``podId`` in a cluster
    and its ``managedBy``)."""
    return await services.stewards.mark_one(await services.locator.instance(instance_id))


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
    return await services.locator.metrics(instance_id)


@router.get("/{instance_id}/logs", responses=ERRORS, dependencies=[READONLY])
async def get_logs(
    instance_id: str,
    services: ServicesDep,
    lines: Annotated[int, Query(ge=1, le=100_000)] = 200,
) -> dict[str, Any]:
    """The last ``lines`` lines of the engine's log (from the ring buffer of its pod)."""
    return {"instanceId": instance_id, "lines": await services.locator.logs(instance_id, lines)}


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
    is taken before the replay, so no line falls between the two. In a cluster, the
    stream of another pod's instance is relayed from that pod; if that pod dies or falls
    silent, a final `unavailable` event (``code`` pod_unavailable, ``podId``) ends it.
    """
    stream = await services.locator.events(instance_id, replay)  # 404 before it starts
    return EventSourceResponse(stream, ping=15, send_timeout=30)


events_router = APIRouter(prefix="/api/v1", tags=["models"])


@events_router.get(
    "/resource-metrics", response_model=list[ResourceMetrics], dependencies=[READONLY]
)
async def list_resource_metrics(services: ServicesDep) -> list[ResourceMetrics]:
    """``ResourceMetrics`` of every instance of this node (one poll for the dashboard)."""
    return await services.meter.all()


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
                yield sse_item(event)
        finally:
            sub.close()

    return EventSourceResponse(stream(), ping=15, send_timeout=30)
