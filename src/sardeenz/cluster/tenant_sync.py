"""The tenants of the admin API as the cluster's: one copy, written by the leader.

In a cluster, ``PUT``/``DELETE /api/v1/tenants/{name}`` reach the leader (the
followers' 307), which writes the whole set of API tenants as the ``tenants``
document of the control state (cluster/control.py: acknowledged by a majority
of the pods, or the API server's ConfigMap in Kubernetes mode); every pod's
tenant service reloads when its copy arrives, so a tenant put through any pod
limits the traffic entering every pod. The config file's tenants stay each
pod's own (every pod reads the same file).
"""

from __future__ import annotations

from typing import Any, Final

from sardeenz.cluster.control import ControlState
from sardeenz.store.tenants import TenantRepository
from sardeenz.tenancy.service import TenantService

KEY: Final = "tenants"


class ReplicatedTenants:
    """tenancy/service.py's ``TenantDefinitions`` over the ``tenants`` document."""

    def __init__(self, control: ControlState) -> None:
        self._control = control

    async def list_all(self) -> dict[str, dict[str, Any]]:
        body = self._control.body(KEY, {})
        if not isinstance(body, dict):
            return {}
        return {str(k): dict(v) for k, v in sorted(body.items()) if isinstance(v, dict)}

    async def put(self, name: str, body: dict[str, Any]) -> None:
        async def change(current: Any) -> dict[str, Any]:
            return {**(current if isinstance(current, dict) else {}), name: body}

        await self._control.update(KEY, change)

    async def delete(self, name: str) -> bool:
        found = False

        async def change(current: Any) -> dict[str, Any]:
            nonlocal found
            tenants = dict(current) if isinstance(current, dict) else {}
            found = tenants.pop(name, None) is not None
            return tenants

        await self._control.update(KEY, change)
        return found


def bind_tenants(control: ControlState, service: TenantService, local: TenantRepository) -> None:
    """Every pod's tenants follow the cluster's copy; a first leader seeds it from the
    API tenants it kept on its own (an older version stored them on the leader only)."""

    async def reload(_: Any) -> None:
        await service.reload()

    async def seed() -> Any:
        return await local.list_all() or None

    control.subscribe(KEY, reload)
    control.seed(KEY, seed)
