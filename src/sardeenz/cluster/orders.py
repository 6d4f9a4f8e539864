"""The leader's orders on instances (load, unload, sleep, wake): both sides.

The leader sends them through the pod client (:class:`PodOrders`: ``load_on``
and ``act_on``, used by placement, moves and presets); the pod side
(:class:`InstanceOrders`) is fenced by term in the route table,
so a handler here only runs the supervisor's own operation, whose refusals
(409 ``model_does_not_fit``, 404 ``instance_not_found``, ...) go back to the
leader as they are.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler, InternalRequest
from sardeenz.cluster.view import ClusterView
from sardeenz.domain import LoadRequest, ModelInstance
from sardeenz.runtime.supervisor import Supervisor


class _LoadOrder(BaseModel):
    request: LoadRequest
    on_demand: bool = Field(False, alias="onDemand")
    """A catalog model's start on demand (ModelInstance.on_demand); absent from an older
    leader's order, which makes an operator's instance (never reduced): the safe side."""


class _ActionOrder(BaseModel):
    level: int = Field(1, ge=1, le=2)
    force: bool = False


class InstanceOrders:
    def __init__(self, supervisor: Supervisor) -> None:
        self._sup = supervisor

    async def load(self, request: InternalRequest) -> dict[str, Any]:
        order = request.parse(_LoadOrder)
        instance = await self._sup.load(
            order.request.model_copy(update={"pod_id": None}), on_demand=order.on_demand
        )
        return instance.model_dump(mode="json")

    async def unload(self, request: InternalRequest) -> dict[str, Any]:
        instance = await self._sup.unload(request.params["instance_id"])
        return instance.model_dump(mode="json")

    async def sleep(self, request: InternalRequest) -> dict[str, Any]:
        order = request.parse(_ActionOrder)
        instance = await self._sup.sleep(request.params["instance_id"], order.level, order.force)
        return instance.model_dump(mode="json")

    async def wake(self, request: InternalRequest) -> dict[str, Any]:
        instance = await self._sup.wake(request.params["instance_id"])
        return instance.model_dump(mode="json")

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        return [
            (routes.LOAD, self.load),
            (routes.UNLOAD, self.unload),
            (routes.SLEEP, self.sleep),
            (routes.WAKE, self.wake),
        ]


class PodOrders:
    """The sending side: the leader's orders to the pod that runs (or will run) an instance."""

    def __init__(self, membership: Membership, view: ClusterView) -> None:
        self._members = membership
        self._view = view

    async def load_on(
        self, pod_id: str, req: LoadRequest, *, on_demand: bool = False
    ) -> ModelInstance | None:
        """Load on ``pod_id``; None when that is this pod (the caller loads locally)."""
        if pod_id == self._members.identity.pod_id:
            return None
        request = req.model_dump(mode="json", exclude={"pod_id"})
        body: dict[str, Any] = {"request": request}
        if on_demand:
            body["onDemand"] = True
        data = await self._members.client_for(pod_id).call(pod_id, routes.LOAD, body)
        return ModelInstance.model_validate({**data, "podId": pod_id})

    async def act_on(self, instance_id: str, action: str, level: int = 1) -> ModelInstance | None:
        """Unload/sleep/wake an instance another pod runs; None when it is not remote."""
        owner = self._view.owner_of(instance_id)
        if owner is None:
            return None
        route = routes.INSTANCE_ACTIONS[action]
        data = await self._members.client_for(owner).call(
            owner, route, {"level": level}, instance_id=instance_id
        )
        return ModelInstance.model_validate({**data, "podId": owner})
