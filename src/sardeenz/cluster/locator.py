"""The locator: where an instance lives, and every action on it, wherever that is.

One instance namespace (DESIGN.md, "Cluster"): the admin API, the benchmark runner,
the profile maker and the dashboard's data ask this service for an instance and never
decide cluster-or-local themselves. An instance lives

* on this pod when this pod's supervisor has it: the action runs here;
* on the pod whose last heartbeat lists it: the action runs there over the signed pod
  transport (reads: ``GET /internal/instances/...``, any pod may ask; changes: the
  leader's fenced orders ``POST /internal/models/{id}/...``), and the answer is the
  one that pod gives, error codes included;
* nowhere known: before answering 404 ``instance_not_found`` the healthy peers are
  asked once (a load a moment ago is on its pod before that pod's next heartbeat).

A pod the failure detector calls unavailable, or one that does not answer, gives 503
``pod_unavailable`` with ``podId``. A single node is the first case only: the same
calls, no network. Event streams of a remote instance are relayed
(cluster/instance_relay.py).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from sardeenz.cluster.instance_relay import PodReads
from sardeenz.cluster.membership.election import PeerState
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.transport import routes
from sardeenz.cluster.view import ClusterView
from sardeenz.config import Settings
from sardeenz.domain import ModelInstance
from sardeenz.errors import NotFound, SardeenzError, Unavailable
from sardeenz.events import EventBus
from sardeenz.gpu.inventory import GpuInventory
from sardeenz.runtime.event_stream import SseItem, open_instance_stream
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.telemetry.resources import ResourceMetrics

log = logging.getLogger(__name__)

LocalMetrics = Callable[[str], Awaitable[ResourceMetrics]]
"""This pod's ``ResourceMetrics`` of one of its instances (services.py measures them)."""

ACTIONS = ("unload", "sleep", "wake")


class InstanceLocator:
    def __init__(
        self,
        membership: Membership,
        view: ClusterView,
        settings: Settings,
        supervisor: Supervisor,
        bus: EventBus,
        inventory: GpuInventory,
        local_metrics: LocalMetrics,
    ) -> None:
        self._m = membership
        self._view = view
        self._supervisor = supervisor
        self._bus = bus
        self._inventory = inventory
        self._local_metrics = local_metrics
        self.reads = PodReads(membership, settings)
        """Signed reads and relayed streams from other pods (closed by ``stop``)."""

    async def stop(self) -> None:
        await self.reads.close()

    # ------------------------------------------------------------------ where
    def _me(self) -> str | None:
        return self._m.identity.pod_id if self._m.active else None

    def _local(self, instance_id: str) -> bool:
        return any(i.id == instance_id for i in self._supervisor.list_instances())

    def _listed_by(self, instance_id: str) -> str | None:
        for peer in self._m.peers.all():
            hb = peer.heartbeat
            if hb is not None and any(i.id == instance_id for i in hb.instances):
                return peer.pod_id
        return None

    async def where(self, instance_id: str) -> str | None:
        """None: this pod runs it; else the pod that does. 404 or 503 (see module doc)."""
        if self._local(instance_id) or not self._m.active:
            self._supervisor.get(instance_id)  # instance_not_found, as a single node says it
            return None
        owner = self._listed_by(instance_id)
        if owner is None:
            owner = await self._ask_around(instance_id)
        if owner is None:
            raise NotFound(f"no instance with id {instance_id!r}", code="instance_not_found")
        if self._m.detector.state(owner, self._m.now()) is PeerState.UNAVAILABLE:
            raise Unavailable(
                f"instance {instance_id} is on pod {owner}, which is unavailable",
                code="pod_unavailable",
                podId=owner,
            )
        return owner

    async def _ask_around(self, instance_id: str) -> str | None:
        """Which healthy peer has ``instance_id`` now (one signed GET each, together)."""
        now = self._m.now()
        healthy = self._m.detector.healthy(now)
        pods = [p.pod_id for p in self._m.peers.all() if p.pod_id in healthy]

        async def has(pod: str) -> bool:
            try:
                await self.reads.get(pod, routes.INSTANCE, instance_id=instance_id)
            except SardeenzError:
                return False
            return True

        found = await asyncio.gather(*(has(p) for p in pods))
        return next((p for p, yes in zip(pods, found, strict=True) if yes), None)

    # ------------------------------------------------------------------ reads
    def local_instance(self, instance_id: str) -> ModelInstance:
        """This pod's instance, with its ``podId`` when in a cluster (404 if not here)."""
        inst = self._supervisor.get(instance_id)
        me = self._me()
        return inst if me is None else inst.model_copy(update={"pod_id": me})

    def local_logs(self, instance_id: str, lines: int) -> list[str]:
        return self._supervisor.log_lines(instance_id, lines)

    async def local_metrics(self, instance_id: str) -> ResourceMetrics:
        return await self._local_metrics(instance_id)

    def local_events(self, instance_id: str, replay: bool) -> AsyncIterator[SseItem]:
        return open_instance_stream(self._supervisor, self._bus, instance_id, replay)

    async def instance(self, instance_id: str) -> ModelInstance:
        """``GET /api/v1/models/{id}``: the instance as its pod sees it now."""
        owner = await self.where(instance_id)
        if owner is None:
            return self.local_instance(instance_id)
        data = await self.reads.get(owner, routes.INSTANCE, instance_id=instance_id)
        return ModelInstance.model_validate(data)

    async def logs(self, instance_id: str, lines: int) -> list[str]:
        """The last ``lines`` lines of the engine's log, from its pod's ring buffer."""
        owner = await self.where(instance_id)
        if owner is None:
            return self.local_logs(instance_id, lines)
        data = await self.reads.get(
            owner, routes.INSTANCE_LOGS, instance_id=instance_id, lines=str(lines)
        )
        found = data.get("lines")
        return [str(x) for x in found] if isinstance(found, list) else []

    async def metrics(self, instance_id: str) -> ResourceMetrics:
        """The seed's ``ResourceMetrics``, measured now on the instance's pod."""
        owner = await self.where(instance_id)
        if owner is None:
            return await self.local_metrics(instance_id)
        data = await self.reads.get(owner, routes.INSTANCE_METRICS, instance_id=instance_id)
        return ResourceMetrics.model_validate(data)

    async def events(self, instance_id: str, replay: bool) -> AsyncIterator[SseItem]:
        """The instance's SSE items (404 before any is sent); relayed from its pod."""
        owner = await self.where(instance_id)
        if owner is None:
            return self.local_events(instance_id, replay)
        return await self.reads.stream(owner, instance_id, replay)

    async def gpu(self, instance: ModelInstance, index: int) -> tuple[str, int] | None:
        """(name, total bytes) of GPU ``index`` of the instance's pod (its last heartbeat
        for another pod); None when that pod reports no such GPU."""
        pod = instance.pod_id
        if pod is None or pod == self._me():
            for g in await self._inventory.snapshot():
                if g.index == index:
                    return g.name, g.total_bytes
            return None
        peer = self._m.peers.get(pod)
        hb = peer.heartbeat if peer is not None else None
        for f in hb.gpus if hb is not None else []:
            if f.index == index:
                return f.name, f.total_bytes
        return None

    def is_here(self, instance: ModelInstance) -> bool:
        """Does this pod run ``instance`` (as ``instance()`` answered it)?"""
        return instance.pod_id is None or instance.pod_id == self._me()

    def instances(self) -> list[ModelInstance]:
        """Every instance of every reachable pod (``GET /api/v1/models``)."""
        return self._view.instances()

    # ---------------------------------------------------------------- actions
    async def act(
        self, instance_id: str, action: str, level: int = 1, force: bool = False
    ) -> ModelInstance:
        """Unload, sleep or wake the instance on its pod (the leader's fenced order there)."""
        assert action in ACTIONS
        owner = await self.where(instance_id)
        if owner is None:
            sup = self._supervisor
            if action == "unload":
                inst = await sup.unload(instance_id)
            elif action == "sleep":
                inst = await sup.sleep(instance_id, level, force)
            else:
                inst = await sup.wake(instance_id)
            me = self._me()
            return inst if me is None else inst.model_copy(update={"pod_id": me})
        payload: dict[str, Any] = {"level": level, "force": force}
        route = routes.INSTANCE_ACTIONS[action]
        data = await self.reads.call(owner, route, payload, instance_id=instance_id)
        return ModelInstance.model_validate({**data, "podId": owner})
