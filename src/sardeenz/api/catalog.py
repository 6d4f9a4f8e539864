"""The on-demand catalog: list and read (readonly), add/replace and delete (admin)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from sardeenz.api.deps import ServicesDep
from sardeenz.catalog.models import CatalogModel, CatalogView
from sardeenz.security.policy import ADMIN, READONLY
from sardeenz.services import Services
from sardeenz.store.records import CatalogEntry

router = APIRouter(prefix="/api/v1/catalog", tags=["catalog"])

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such entry (`code`: catalog_entry_not_found)"}
}


def _view(model: CatalogModel, services: Services) -> CatalogView:
    idle = services.reaper.idle_seconds(model.instance_ids) if model.instance_ids else None
    return CatalogView(**dict(model), idle_seconds=idle)


@router.get("", response_model=list[CatalogView], dependencies=[READONLY])
async def list_catalog(services: ServicesDep) -> list[CatalogView]:
    """Every catalog entry (config file and API), invalid ones with their error, and how
    long each has been idle (the TTL countdowns start from it)."""
    return [_view(m, services) for m in services.catalog.list_models()]


@router.get(
    "/{name:path}", response_model=CatalogView, responses=NOT_FOUND, dependencies=[READONLY]
)
async def get_catalog_entry(name: str, services: ServicesDep) -> CatalogView:
    """One catalog entry (`name` is the served model name and may contain `/`)."""
    return _view(services.catalog.get_model(name), services)


@router.put(
    "/{name:path}",
    response_model=CatalogModel,
    dependencies=[ADMIN],
    responses={
        400: {"description": "the entry would not load (`code`: invalid_catalog_entry)"},
        409: {
            "description": "a name or alias is another entry's (`catalog_name_taken`); "
            "its engine is not installed on this node (`engine_unavailable`)"
        },
    },
)
async def put_catalog_entry(name: str, body: CatalogEntry, services: ServicesDep) -> CatalogModel:
    """Add or replace an entry (stored; overrides a config-file entry of the same name).

    Checked like a load request, including whether its engine can run here (an
    entry with ``engine: vllm`` where no vLLM was found is refused with 409
    ``engine_unavailable``); a running instance keeps running as it was loaded.
    """
    return await services.catalog.put(name, body, services.engines.require)


@router.delete(
    "/{name:path}",
    response_model=CatalogModel,
    dependencies=[ADMIN],
    responses={
        **NOT_FOUND,
        409: {"description": "the entry is the config file's (`catalog_entry_readonly`)"},
    },
)
async def delete_catalog_entry(name: str, services: ServicesDep) -> CatalogModel:
    """Delete an API entry (a config-file entry of that name applies again); running
    instances keep running."""
    return await services.catalog.delete(name)
