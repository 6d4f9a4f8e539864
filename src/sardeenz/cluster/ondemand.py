"""On-demand starts in a cluster: the leader's scheduler chooses the pod.

A ``/v1`` request on any pod for a catalog model that runs nowhere in the
cluster (no local instance, no remote route) is a start on demand
(catalog/demand.py). In a cluster that pod does not start it on itself: it
asks the leader (``routes.ONDEMAND_PLACE`` with the load request its
catalog entry makes), and the leader places it as it places a load without
``podId`` (cluster/placement.py: the scheduler over every pod's GPUs, the
chosen pod's ledger admitting it). The asking pod's waiters then wait for the
model's route, which arrives with the chosen pod's heartbeat, and are
forwarded there like any request for a remote model.

When the leader cannot place it (no pod has room, the chosen pod refused), or
there is no leader (an election, the minority side of a partition), the pod
starts the model on itself, making room by evicting its own idle catalog
models as a single node does: a request for a catalog model is answered when
the pod it reached can serve it. Two pods may then run the model; the idle
reaper of each puts its copy away when idle. The catalog's API entries are
the cluster's (cluster/catalog_sync.py), so any pod can start, route and put
away any of them; config-file entries are each pod's own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from pydantic import BaseModel, ValidationError

from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.placement import ClusterPlacement
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler, InternalRequest
from sardeenz.cluster.view import ClusterView
from sardeenz.domain import InstanceStatus, LoadRequest, ModelInstance
from sardeenz.errors import SardeenzError

log = logging.getLogger(__name__)


class _PlaceOrder(BaseModel):
    request: LoadRequest


_LIVE = (InstanceStatus.STARTING, InstanceStatus.ACTIVE, InstanceStatus.SLEEPING)


class ClusterStarts:
    def __init__(
        self, membership: Membership, view: ClusterView, placement: ClusterPlacement
    ) -> None:
        self._m = membership
        self._view = view
        self._placement = placement
        self._locks: dict[str, asyncio.Lock] = {}
        """One placement at a time per served name (unnamed requests share ``""``)."""
        self._lock_wait = membership.settings.cluster_request_timeout_seconds
        """How long an ask waits for the placement of the same model already under way:
        an asking pod gives up after this (the call's timeout) and starts the model on
        itself, so waiting longer would only hold the leader's handler."""
        self._recent: dict[str, tuple[str, ModelInstance, float]] = {}
        """Served name -> (pod, instance, monotonic time) of the leader's last on-demand
        placement: until the chosen pod's heartbeat lists it, only the leader knows."""

    @property
    def pod_id(self) -> str:
        return self._m.identity.pod_id

    async def start(self, name: str, req: LoadRequest) -> tuple[str, ModelInstance] | None:
        """Where the leader started ``name``; None: start it on this pod instead."""
        m = self._m
        if not m.active:
            return None
        leader = m.leader()
        if leader is None:
            log.warning("on-demand start of %s: no leader now, starting it on this pod", name)
            return None
        if leader == m.identity.pod_id:
            answer = await self.place(req)
        else:
            body = {"request": req.model_dump(mode="json", by_alias=True)}
            answer = await m.client_for(leader).ask(leader, routes.ONDEMAND_PLACE, body) or {
                "placed": False,
                "reason": f"the leader {leader} did not answer",
            }
        if not answer.get("placed"):
            log.warning(
                "on-demand start of %s: the leader could not place it (%s); "
                "starting it on this pod",
                name,
                answer.get("reason"),
            )
            return None
        try:
            pod, instance = str(answer["podId"]), ModelInstance.model_validate(answer["instance"])
        except (KeyError, ValidationError) as exc:
            log.warning("on-demand start of %s: bad answer from the leader: %s", name, exc)
            return None
        log.info("on-demand start of %s placed on %s by the leader", name, pod)
        return pod, instance

    async def place(self, req: LoadRequest) -> dict[str, Any]:
        """The leader's side: place ``req`` with the scheduler; never raises.

        Idempotent per served name: first requests for one model entering through
        several pods (each before its pod heard of the others' start) get the one
        instance already starting or running, not one each. One placement at a time, so
        two asks that arrive together cannot both miss it; placements of other models
        are not held up by a slow one, and an ask waits for the placement under way at
        most as long as the asking pod waits for the answer.
        """
        name = req.served_model_name
        lock = self._locks.setdefault(name or "", asyncio.Lock())
        try:
            async with asyncio.timeout(self._lock_wait):
                await lock.acquire()
        except TimeoutError:
            return {
                "placed": False,
                "reason": f"a placement of {name!r} has been under way for more than "
                f"{self._lock_wait:g} s",
                "code": "placement_busy",
            }
        try:
            found = self._existing(name) if name is not None else None
            if found is not None:
                pod, instance = found
                log.info("on-demand start of %s: already on %s (%s)", name, pod, instance.id)
                return _placed(pod, instance)
            try:
                made = await self._placement.place(req.model_copy(update={"pod_id": None}))
            except SardeenzError as exc:  # no_pod_fits, not_leader, the chosen pod's refusal
                return {"placed": False, "reason": exc.message, "code": exc.code}
            if made is None:  # not in a cluster after all
                return {"placed": False, "reason": "not in a cluster", "code": "not_clustered"}
            pod = made.pod_id or self._m.identity.pod_id
            if name is not None:
                self._recent[name] = (pod, made, time.monotonic())
            return _placed(pod, made)
        finally:
            lock.release()

    def _existing(self, name: str) -> tuple[str, ModelInstance] | None:
        """A live instance of ``name`` anywhere in the cluster: one a heartbeat lists, or
        one this leader placed too recently for a heartbeat to list it yet."""
        for inst in self._view.instances():
            if inst.served_model_name == name and inst.status in _LIVE:
                return inst.pod_id or self._m.identity.pod_id, inst
        recent = self._recent.get(name)
        if recent is None:
            return None
        pod, placed, at = recent
        listed = self._view.instance_on(pod, placed.id)
        fresh = time.monotonic() - at < self._m.timing.unavailable_after
        if listed is None and fresh:
            return pod, placed  # not in that pod's heartbeat yet
        del self._recent[name]  # gone, failed or stopping: place anew
        return None

    async def receive(self, request: InternalRequest) -> dict[str, Any]:
        """``POST /internal/ondemand/place`` (signed; answered by the leader)."""
        return await self.place(request.parse(_PlaceOrder).request)

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        return [(routes.ONDEMAND_PLACE, self.receive)]

    def status(self, pod_id: str, instance_id: str) -> tuple[InstanceStatus | None, str | None]:
        """The instance as its pod last described it: (None, None) while no heartbeat
        lists it yet."""
        found = self._view.instance_on(pod_id, instance_id)
        return (found.status, found.error_message) if found is not None else (None, None)


def _placed(pod: str, instance: ModelInstance) -> dict[str, Any]:
    return {
        "placed": True,
        "podId": pod,
        "instance": instance.model_dump(mode="json", by_alias=True),
    }
