"""Memory profile endpoints of the seed: thin, :class:`ProfileService` decides."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query
from starlette.status import HTTP_201_CREATED, HTTP_204_NO_CONTENT

from sardeenz.api.deps import ServicesDep
from sardeenz.memory.models import FitRequest, FitVerdict, MemoryProfile, ProfileCreate
from sardeenz.security.policy import ADMIN, READONLY

router = APIRouter(prefix="/api/memory/profiles", tags=["memory"])

_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such profile (`code`: profile_not_found)"}
}


@router.get("", response_model=list[MemoryProfile], dependencies=[READONLY])
async def list_profiles(
    services: ServicesDep,
    model_path: Annotated[str | None, Query(max_length=4096)] = None,
) -> list[MemoryProfile]:
    """Every saved profile, newest first (only one model's with ``model_path``)."""
    return await services.profiles.list_profiles(model_path)


@router.post(
    "",
    dependencies=[ADMIN],
    status_code=HTTP_201_CREATED,
    response_model=MemoryProfile,
    responses={
        400: {"description": "`incomplete_profile`, `max_tokens_required`, `invalid_gpu_index`"},
        404: {"description": "`instance_not_found`, `model_not_loaded`"},
        409: {"description": "`memory_metrics_unavailable`: the instance has not loaded yet"},
    },
)
async def create_profile(body: ProfileCreate, services: ServicesDep) -> MemoryProfile:
    """Save a profile: from a running instance (``instanceId``) or from explicit figures."""
    return await services.profiles.create(body)


@router.get("/lookup", response_model=MemoryProfile, responses=_NOT_FOUND, dependencies=[READONLY])
async def lookup_profile(
    services: ServicesDep,
    model_path: Annotated[str, Query(min_length=1, max_length=4096)],
    max_tokens: Annotated[int, Query(ge=1, le=100_000_000)],
    gpu_name: Annotated[str | None, Query(min_length=1, max_length=256)] = None,
) -> MemoryProfile:
    """The newest profile for this model at this context length (on this GPU model, if given)."""
    return await services.profiles.lookup(model_path, max_tokens, gpu_name)


@router.post(
    "/check",
    dependencies=[READONLY],
    response_model=FitVerdict,
    responses={400: {"description": "`unknown_gpu`, `invalid_gpu_ids`"}},
)
async def check_fit(body: FitRequest, services: ServicesDep) -> FitVerdict:
    """Will the model fit on this node's GPUs now, given what is loaded? Answers per GPU."""
    return await services.ledger.check(body)


@router.get(
    "/{profile_id}", response_model=MemoryProfile, responses=_NOT_FOUND, dependencies=[READONLY]
)
async def get_profile(profile_id: str, services: ServicesDep) -> MemoryProfile:
    """One profile."""
    return await services.profiles.get(profile_id)


@router.delete(
    "/{profile_id}", status_code=HTTP_204_NO_CONTENT, responses=_NOT_FOUND, dependencies=[ADMIN]
)
async def delete_profile(profile_id: str, services: ServicesDep) -> None:
    """Delete a profile."""
    await services.profiles.delete(profile_id)
