"""LoRA adapters: where each is loaded across the cluster (readonly); load and unload
(admin)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sardeenz.api.deps import ServicesDep
from sardeenz.catalog.models import AdapterView
from sardeenz.security.policy import ADMIN, READONLY

router = APIRouter(prefix="/api/v1/adapters", tags=["catalog"])


@router.get("", response_model=list[AdapterView], dependencies=[READONLY])
async def list_adapters(services: ServicesDep) -> list[AdapterView]:
    """Every LoRA adapter entry of the catalog with its base, its state and the instances
    (on any pod, from their heartbeats) that hold it loaded, with its requests in flight
    on each. Invalid adapter entries are in `GET /api/v1/catalog` with their error."""
    return services.ondemand.adapter_views()


NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "no LoRA adapter entry of that name (`code`: adapter_not_found)"}
}


@router.post(
    "/{name:path}/load",
    response_model=AdapterView,
    dependencies=[ADMIN],
    responses={
        **NOT_FOUND,
        503: {
            "description": "its base could not start, or every slot serves requests "
            "(`adapter_slots_busy`); the engine's refusal keeps its own status "
            "(`adapter_load_failed`)"
        },
    },
)
async def load_adapter(name: str, services: ServicesDep) -> AdapterView:
    """Load the adapter now, as its first request would: nothing to do when an instance
    holds it; else its base is started or woken if needed and the adapter loaded (an idle
    adapter unloaded first when its slots are full). Answered once it is loaded."""
    return await services.adapter_orders.load(name)


@router.post(
    "/{name:path}/unload",
    response_model=AdapterView,
    dependencies=[ADMIN],
    responses={
        **NOT_FOUND,
        409: {"description": "it serves requests now (`adapter_in_use`): nothing unloaded"},
    },
)
async def unload_adapter(name: str, services: ServicesDep) -> AdapterView:
    """Unload the adapter from every active instance holding it, on every pod; refused
    while it has requests in flight. A sleeping base keeps it (the idle TTL takes it once
    the base is awake). The next request loads it again."""
    return await services.adapter_orders.unload(name)
