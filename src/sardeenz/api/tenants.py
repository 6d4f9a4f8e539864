"""``/api/v1/tenants``: tenants, their limits and their current use (admin writes).

Tenants of the config file are listed with ``source: config`` and cannot be
changed here (409 ``tenant_from_config``); those created here are stored. A
change that would leave a key, subject or group in two tenants, or name an
unknown key, is refused whole (422 with a stable ``code``). Every write is in
the audit trail, as every admin write is.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path

from sardeenz.api.deps import ServicesDep
from sardeenz.security.policy import ADMIN, READONLY
from sardeenz.tenancy.spec import NAME_PATTERN, TenantBody

router = APIRouter(prefix="/api/v1/tenants", tags=["tenants"])

TenantName = Annotated[str, Path(pattern=NAME_PATTERN, description="the tenant's name")]

NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"description": "no such tenant (`code`: tenant_not_found)"}
}
FROM_CONFIG: dict[int | str, dict[str, Any]] = {
    409: {"description": "defined in the config file (`code`: tenant_from_config)"}
}
CONFLICT: dict[int | str, dict[str, Any]] = {
    422: {
        "description": "an invalid limit (`validation_error`), an unknown key "
        "(`unknown_api_key`), or a key, subject or group already in another tenant "
        "(`key_in_two_tenants`, `subject_in_two_tenants`, `group_in_two_tenants`)"
    }
}


@router.get("", dependencies=[READONLY])
async def list_tenants(services: ServicesDep) -> list[dict[str, Any]]:
    """Every tenant: members, limits, and current use per scope (in flight, tokens
    counted today and this month)."""
    return services.tenants.all()


@router.get("/{name}", responses=NOT_FOUND, dependencies=[READONLY])
async def get_tenant(name: TenantName, services: ServicesDep) -> dict[str, Any]:
    """One tenant, with its current use."""
    return services.tenants.get(name)


@router.put("/{name}", responses={**FROM_CONFIG, **CONFLICT}, dependencies=[ADMIN])
async def put_tenant(name: TenantName, body: TenantBody, services: ServicesDep) -> dict[str, Any]:
    """Create or replace a tenant. Its counters carry over a replacement: raising a limit
    does not forgive what was already consumed."""
    return await services.tenants.put(name, body)


@router.delete("/{name}", responses={**NOT_FOUND, **FROM_CONFIG}, dependencies=[ADMIN])
async def delete_tenant(name: TenantName, services: ServicesDep) -> dict[str, Any]:
    """Delete a tenant: its keys are no longer limited."""
    return await services.tenants.delete(name)
