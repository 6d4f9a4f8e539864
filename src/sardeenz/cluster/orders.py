"""The pod side of the leader's orders on instances: load, unload, sleep, wake.

The leader sends them through the pod client (``ClusterManager.load_on`` and
``act_on``, the move and preset steps); the route table fences them by term,
so a handler here only runs the supervisor's own operation, whose refusals
(409 ``model_does_not_fit``, 404 ``instance_not_found``, ...) go back to the
leader as they are.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler, InternalRequest
from sardeenz.domain import LoadRequest
from sardeenz.runtime.supervisor import Supervisor


class _LoadOrder(BaseModel):
    request: LoadRequest


class _ActionOrder(BaseModel):
    level: int = Field(1, ge=1, le=2)


class InstanceOrders:
    def __init__(self, supervisor: Supervisor) -> None:
        self._sup = supervisor

    async def load(self, request: InternalRequest) -> dict[str, Any]:
        order = request.parse(_LoadOrder)
        instance = await self._sup.load(order.request.model_copy(update={"pod_id": None}))
        return instance.model_dump(mode="json")

    async def unload(self, request: InternalRequest) -> dict[str, Any]:
        instance = await self._sup.unload(request.params["instance_id"])
        return instance.model_dump(mode="json")

    async def sleep(self, request: InternalRequest) -> dict[str, Any]:
        level = request.parse(_ActionOrder).level
        instance = await self._sup.sleep(request.params["instance_id"], level)
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
