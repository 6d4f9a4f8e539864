"""``/api/cluster/presets``: desired states of the cluster, their plans and applies.

Admin routes run on the leader (a follower answers 307 to it); the preset
service (cluster/preset_service.py) stores, distributes and applies them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Path
from sse_starlette import EventSourceResponse, ServerSentEvent

from sardeenz.api.deps import ServicesDep
from sardeenz.cluster.presets import NAME_PATTERN, PresetBody
from sardeenz.security.policy import ADMIN, READONLY

router = APIRouter(prefix="/api/cluster/presets", tags=["cluster"])

PresetName = Annotated[str, Path(pattern=NAME_PATTERN, description="the preset's name")]

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such preset (`code`: preset_not_found)"}
}


@router.get("", dependencies=[READONLY])
async def list_presets(services: ServicesDep) -> list[dict[str, Any]]:
    """Every preset; the applied one carries its reconcile status."""
    return await services.presets.all()


@router.get("/{name}", responses=NOT_FOUND, dependencies=[READONLY])
async def get_preset(name: PresetName, services: ServicesDep) -> dict[str, Any]:
    """One preset (the applied one with its reconcile status)."""
    return await services.presets.get(name)


@router.put("/{name}", dependencies=[ADMIN])
async def put_preset(name: PresetName, body: PresetBody, services: ServicesDep) -> dict[str, Any]:
    """Create or replace a preset (checked like load requests; nothing is loaded until it
    is applied). Replacing the applied preset changes the desired state at once: the
    reconcile loop loads and unloads to match."""
    return await services.presets.put(name, body)


@router.delete("/{name}", responses=NOT_FOUND, dependencies=[ADMIN])
async def delete_preset(name: PresetName, services: ServicesDep) -> dict[str, Any]:
    """Delete a preset. Deleting the applied one stops its reconciliation; what runs keeps
    running."""
    return await services.presets.delete(name)


@router.get("/{name}/plan", responses=NOT_FOUND, dependencies=[READONLY])
async def plan_preset(name: PresetName, services: ServicesDep) -> dict[str, Any]:
    """What applying the preset would do now: loads (pod, GPUs, the scheduler's verdict),
    unloads, replicas that fit nowhere (with the reason per pod), or nothing to do."""
    plan = await services.presets.plan(name)
    return {"preset": name, **plan.as_json()}


@router.post(
    "/{name}/apply",
    dependencies=[ADMIN],
    responses={
        **NOT_FOUND,
        200: {"content": {"text/event-stream": {}}},
        409: {
            "description": "a replica fits nowhere (`preset_unschedulable`, with `steps` "
            "and the reasons per pod; nothing done) or another apply is running "
            "(`preset_apply_in_progress`)"
        },
    },
)
async def apply_preset(name: PresetName, services: ServicesDep) -> EventSourceResponse:
    """Apply the preset: its progress as Server-Sent Events (`plan`, one `step` per
    change of a step, `done`). The apply goes on if the client leaves; applying again
    resumes a partial apply (only what is still missing is done)."""
    presets = services.presets
    run = await presets.apply(name)

    async def stream() -> AsyncIterator[ServerSentEvent]:
        async for kind, data in presets.events(run):
            yield ServerSentEvent(data=orjson.dumps(data).decode(), event=kind)

    return EventSourceResponse(stream(), ping=15, send_timeout=30)
