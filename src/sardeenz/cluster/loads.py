"""Where a load goes: the pod ``podId`` names, the leader scheduler's choice, or here.

``POST /api/v1/models`` loads through this one service. In a cluster the
instance is created where ``podId`` says (the leader's fenced order to that
pod), or where the leader's scheduler places it; a single node loads on its
supervisor. The memory ledger admits a local load (409 ``model_does_not_fit``
unless ``force``; an unknown verdict never blocks), the same verdict
``POST /api/memory/profiles/check`` answers.
"""

from __future__ import annotations

from sardeenz.cluster.orders import PodOrders
from sardeenz.cluster.placement import ClusterPlacement
from sardeenz.domain import LoadRequest, ModelInstance
from sardeenz.runtime.supervisor import Supervisor


class Loads:
    def __init__(
        self, orders: PodOrders, placement: ClusterPlacement, supervisor: Supervisor
    ) -> None:
        self._orders = orders
        self._placement = placement
        self._supervisor = supervisor

    async def load(self, req: LoadRequest) -> ModelInstance:
        if req.pod_id is not None:
            remote = await self._orders.load_on(req.pod_id, req)
        else:
            remote = await self._placement.place(req)
        if remote is not None:
            return remote
        return await self._supervisor.load(req)
