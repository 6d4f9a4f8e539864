"""Acting on an instance of any pod for a move: local calls here, leader orders elsewhere.

A move (cluster/moves.py) is a sequence of small steps on two pods; each step
exists in two forms, which this module keeps side by side so they cannot drift:

* the **pod side** (``PodSide``: ``withdraw_here``, ``restore_here``,
  ``drain_here``, ``routes_here``): what a pod does to one of its own instances, called
  directly when the leader is that pod and from ``/internal`` otherwise;
* the **leader side** (``Pods``): the same step aimed at a pod id, a local
  call for the leader's own pod, a fenced order (cluster/orders.py) or a
  signed read (``routes.ROUTES``) for the others.

Why "withdraw" exists: routes come from heartbeats, so after an instance
leaves routing a peer may still send it a request for up to a heartbeat
(and the request carries the hop header: the receiving pod cannot pass it
on). A withdrawn instance is left out of the pod's heartbeats (``unrouted``)
but keeps serving locally, so those late forwarded requests are still
answered; it is drained and held only once every pod's table has dropped it.
A withdrawal expires (``ttl``) unless the drain makes it final, so a leader
that dies mid-move cannot leave an instance unadvertised for ever. It carries
the term of the order that made it (in the heartbeat, ``withdrawnTerms``): the
next leader advertises again, at once, a model's last routable copy that a
previous term withdrew (cluster/ondemand_surplus.py).

A drained (held) source serves nothing and is never advertised again; the
move's next step unloads it. Should no leader ever take that step (the move
failed after the drain, the leader that resumed it gave up on this pod), the
pod unloads the held source itself ``held_unload_after`` seconds after the
drain (``PodSide.drain_here``): level-triggered on the pod's own state, so it
holds through any leader change and partition, and it is always safe (a held
instance can never serve again; keeping it only hides from the preset
reconcile that the model lacks a replica).
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import Any, Protocol

from pydantic import BaseModel, Field

from sardeenz.cluster.local_pod import LocalPod
from sardeenz.cluster.membership.election import PeerState
from sardeenz.cluster.membership.peers import Heartbeat
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.orders import PodOrders
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler, InternalRequest
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, LoadRequest, ModelInstance
from sardeenz.errors import Conflict, NotFound, SardeenzError
from sardeenz.runtime.drain import drain_for_unload
from sardeenz.tasks import stop_task

log = logging.getLogger(__name__)


def route_timeout(settings: Settings) -> float:
    """Bound on each wait of a move for route propagation: three failure-detector
    bounds (a pod that misses heartbeats is dropped everywhere within one)."""
    beat = settings.cluster_heartbeat_interval_seconds
    return max(10.0, 3 * settings.cluster_unavailable_after_seconds, 5 * beat)


def held_unload_after(settings: Settings) -> float:
    """How long after its drain a pod keeps a held source no leader unloaded.

    Longer than anything a leader resuming the move may still do: being elected
    (within a failure-detector bound, inside ``route_timeout``), waiting for this
    pod (``route_timeout`` + the stop grace, ``MoveSteps.source_wait``), then a
    withdrawal's route wait (``route_timeout``). A race is harmless anyway: the
    second unload finds the source gone or stopping, which a resumed move accepts.
    """
    return 3 * route_timeout(settings) + settings.stop_grace_seconds


# ------------------------------------------------------------------ pod side


class AdapterHands(Protocol):
    """What a move needs of the pod's LoRA adapter loader (catalog/demand.py)."""

    async def carry_adapters(self, instance_id: str, names: list[str]) -> dict[str, str | None]:
        """Load ``names`` into ``instance_id``: each -> None (loaded) or why not."""


class PodSide:
    """What a pod does to one of its own instances for a move (``LocalPod``'s withdrawals,
    its routing table and supervisor; membership only to send the next heartbeat now)."""

    def __init__(self, local: LocalPod, membership: Membership) -> None:
        self.local = local
        self._membership = membership
        self.adapters: AdapterHands | None = None
        """The pod's adapter loader (set by the app's wiring; None: no adapters)."""
        self.held_unload_after = held_unload_after(local.supervisor.settings)
        """Seconds after its drain a held source nobody unloaded is unloaded here."""
        self._retiring: dict[str, asyncio.Task[None]] = {}

    def routes_here(self) -> dict[str, Any]:
        """This pod's routing table as ``{name: ["pod/instance", ...]}`` (locals named too)."""
        table, me = self.local.table, self.local.pod_id
        routes = {
            name: [e.instance_id if not e.local else f"{me}/{e.instance_id}" for e in eps]
            for name in table.names()
            if (eps := table.endpoints(name))
        }
        return {"podId": me, "version": table.version, "routes": routes}

    def _serving(self, instance_id: str) -> ModelInstance:
        inst = self.local.supervisor.get(instance_id)  # NotFound: instance_not_found
        if inst.status is not InstanceStatus.ACTIVE:
            raise Conflict(
                f"instance {instance_id} is {inst.status.value}, not active",
                code="instance_not_active",
            )
        return inst

    def withdraw_here(self, instance_id: str, ttl: float, term: int) -> dict[str, Any]:
        """Stop advertising ``instance_id`` to peers for ``ttl`` s, on the order of the
        leader of ``term``; it keeps serving here.

        A ``starting`` instance may be withdrawn too: a move's target is advertised
        only once it has settled (cluster/moves.py).
        """
        inst = self.local.supervisor.get(instance_id)  # NotFound: instance_not_found
        if inst.status not in (InstanceStatus.ACTIVE, InstanceStatus.STARTING):
            self._serving(instance_id)  # the refusal, with its code
        self.local.withdraw(instance_id, self._membership.now() + ttl, term)
        self._membership.beat_soon()
        return {"instanceId": instance_id, "withdrawn": True}

    def restore_here(self, instance_id: str) -> dict[str, Any]:
        """Advertise ``instance_id`` again (a move rolled back); never a held one."""
        if self.local.held(instance_id):
            raise Conflict(
                f"instance {instance_id} was drained for a move: it is never advertised again",
                code="instance_held",
            )
        self.local.restore(instance_id)
        self._membership.beat_soon()
        return {"instanceId": instance_id, "withdrawn": False}

    async def drain_here(self, instance_id: str, seconds: float, term: int) -> dict[str, Any]:
        """Take ``instance_id`` out of local routing for good and wait for its requests,
        on the order of the leader of ``term``.

        The hold is the one an unload places (runtime/drain.py), so the unload that
        follows finds nothing left to drain; requests still running after ``seconds``
        are cut with ``model_unloaded``. The withdrawal becomes permanent: a held
        instance must never be advertised again.
        """
        self._serving(instance_id)
        self.local.withdraw(instance_id, math.inf, term)
        traffic = self.local.supervisor.traffic
        traffic.hold(instance_id, InstanceStatus.STOPPING)
        in_flight = traffic.in_flight(instance_id)
        cut = await drain_for_unload(traffic, instance_id, seconds)
        self._unload_later(instance_id)
        return {"instanceId": instance_id, "inFlight": in_flight, "cut": cut}

    def _unload_later(self, instance_id: str) -> None:
        """The safety net for a held source (module docstring): one owned task each."""
        if instance_id in self._retiring:
            return
        task = asyncio.get_running_loop().create_task(
            self._unload_if_held(instance_id), name=f"sardeenz-held-{instance_id}"
        )
        self._retiring[instance_id] = task
        task.add_done_callback(lambda _: self._retiring.pop(instance_id, None))

    async def _unload_if_held(self, instance_id: str) -> None:
        await asyncio.sleep(self.held_unload_after)
        supervisor = self.local.supervisor
        if not self.local.held(instance_id):
            return  # unloaded meanwhile (the withdrawal goes with the instance)
        try:
            inst = supervisor.get(instance_id)
        except NotFound:
            return
        if inst.status is InstanceStatus.STOPPING:
            return
        log.warning(
            "instance %s was drained for a move %gs ago and no leader unloaded it "
            "(its move ended without that step): unloading it here",
            instance_id,
            self.held_unload_after,
        )
        try:
            await supervisor.unload(instance_id)
        except SardeenzError as exc:  # unloaded by a leader meanwhile
            log.info("instance %s: unloading the held source: %s", instance_id, exc.message)

    async def stop(self) -> None:
        """Shutdown: pending unloads of held sources end (the hold ends with the process)."""
        for task in list(self._retiring.values()):
            await stop_task(task)

    async def carry_here(self, instance_id: str, names: list[str]) -> dict[str, Any]:
        """Load the LoRA adapters ``names`` into ``instance_id`` (a move's target: what
        its source held before the switch). Each adapter's outcome, never an error for
        one of them: the move goes on without an adapter that cannot come along."""
        self._serving(instance_id)
        if self.adapters is None or not names:
            return {"instanceId": instance_id, "adapters": {}}
        done = await self.adapters.carry_adapters(instance_id, names)
        return {"instanceId": instance_id, "adapters": done}

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        """The pod side over ``/internal`` (the orders are fenced by the route table)."""

        def seconds(request: InternalRequest) -> float:
            return request.parse(_HandoverOrder).seconds

        def withdraw(r: InternalRequest) -> dict[str, Any]:
            # A fenced route: the order's term, already accepted, is the withdrawal's.
            term = r.term if r.term is not None else self._membership.current_term()
            return self.withdraw_here(r.params["instance_id"], seconds(r), term)

        async def drain(r: InternalRequest) -> dict[str, Any]:
            term = r.term if r.term is not None else self._membership.current_term()
            return await self.drain_here(r.params["instance_id"], seconds(r), term)

        async def carry(r: InternalRequest) -> dict[str, Any]:
            names = r.parse(_CarryOrder).adapters
            return await self.carry_here(r.params["instance_id"], names)

        return [
            (routes.ROUTES, lambda _: self.routes_here()),
            (routes.ADAPTERS_CARRY, carry),
            (routes.WITHDRAW, withdraw),
            (routes.RESTORE, lambda r: self.restore_here(r.params["instance_id"])),
            (routes.DRAIN, drain),
        ]


class _HandoverOrder(BaseModel):
    seconds: float = Field(30.0, ge=0, le=86400)


class _CarryOrder(BaseModel):
    adapters: list[str] = Field(default_factory=list, max_length=4096)


# --------------------------------------------------------------- leader side


class Pods:
    """The leader's hands: every step of a move, aimed at a pod id (this one included)."""

    def __init__(
        self, membership: Membership, here: PodSide, orders: PodOrders, settings: Settings
    ) -> None:
        self._m = membership
        self._here = here
        self._local = here.local
        self._orders = orders
        self._settings = settings

    @property
    def me(self) -> str:
        return self._m.identity.pod_id

    async def stop(self) -> None:
        """Shutdown of this pod's side (its pending unloads of held sources)."""
        await self._here.stop()

    def leading(self) -> bool:
        """Orders to peers are fenced by the term; this guards the local steps too."""
        return self._m.is_leader()

    def known(self, pod_id: str) -> bool:
        return pod_id == self.me or (self._m.active and self._m.peers.get(pod_id) is not None)

    def available(self, pod_id: str) -> bool:
        m = self._m
        return pod_id == self.me or m.detector.state(pod_id, m.now()) is not PeerState.UNAVAILABLE

    def live(self) -> list[str]:
        """This pod and every peer the failure detector does not call unavailable."""
        m = self._m
        if not m.active:
            return [self.me]
        return [self.me, *(p.pod_id for p in m.peers.all() if self.available(p.pod_id))]

    async def gpu_indices(self, pod_id: str) -> list[int]:
        if pod_id == self.me:
            return [g.index for g in await self._local.inventory.snapshot()]
        peer = self._m.peers.get(pod_id)
        hb = peer.heartbeat if peer is not None else None
        return [g.index for g in hb.gpus] if hb is not None else []

    def locate(self, instance_id: str) -> tuple[str, ModelInstance] | None:
        """The pod running ``instance_id`` and the instance as last seen."""
        found = self.instance(self.me, instance_id)
        if found is not None:
            return self.me, found
        if self._m.active:
            for peer in self._m.peers.all():
                found = self.instance(peer.pod_id, instance_id)
                if found is not None:
                    return peer.pod_id, found
        return None

    def on(self, pod_id: str) -> list[ModelInstance]:
        """Every instance ``pod_id`` runs (a peer: as of its last heartbeat)."""
        if pod_id == self.me:
            return self._local.supervisor.list_instances()
        peer = self._m.peers.get(pod_id)
        hb = peer.heartbeat if peer is not None else None
        return list(hb.instances) if hb is not None else []

    def instance(self, pod_id: str, instance_id: str) -> ModelInstance | None:
        """The instance on ``pod_id`` (for a peer: as of its last heartbeat)."""
        if pod_id == self.me:
            try:
                return self._local.supervisor.get(instance_id)
            except NotFound:
                return None
        peer = self._m.peers.get(pod_id)
        hb = peer.heartbeat if peer is not None else None
        if hb is None:
            return None
        return next((i for i in hb.instances if i.id == instance_id), None)

    async def routes(self, pod_id: str) -> set[str] | None:
        """``pod/instance`` of every endpoint in ``pod_id``'s table (None: no answer)."""
        data = (
            self._here.routes_here()
            if pod_id == self.me
            else await self._m.client_for(pod_id).ask(pod_id, routes.ROUTES)
        )
        if data is None or not isinstance(data.get("routes"), dict):
            return None
        return {str(e) for eps in data["routes"].values() if isinstance(eps, list) for e in eps}

    async def load(
        self, pod_id: str, req: LoadRequest, *, on_demand: bool = False
    ) -> ModelInstance:
        remote = await self._orders.load_on(pod_id, req, on_demand=on_demand)
        if remote is not None:
            return remote
        return await self._local.supervisor.load(req, on_demand=on_demand)

    async def unload(self, pod_id: str, instance_id: str) -> None:
        if pod_id == self.me:
            await self._local.supervisor.unload(instance_id)
        else:
            # Drain (nothing left after ours), SIGTERM, grace, SIGKILL: longer than
            # an order's default timeout when the grace is long.
            wait = self._settings.stop_grace_seconds * 2 + 30
            client = self._m.client_for(pod_id)
            await client.call(pod_id, routes.UNLOAD, timeout=wait, instance_id=instance_id)

    async def withdraw(self, pod_id: str, instance_id: str, ttl: float) -> None:
        if pod_id == self.me:
            self._here.withdraw_here(instance_id, ttl, self._m.current_term())
        else:
            client = self._m.client_for(pod_id)
            await client.call(pod_id, routes.WITHDRAW, {"seconds": ttl}, instance_id=instance_id)

    def withdrawals(self, pod_id: str) -> dict[str, int]:
        """The instances ``pod_id`` withdraws (for a while, not held) -> the term of the
        order that withdrew each (a peer's: as of its last heartbeat)."""
        if pod_id == self.me:
            return self._local.withdrawn_terms()
        hb = self._heartbeat(pod_id)
        return dict(hb.withdrawn_terms) if hb is not None else {}

    def holds(self, pod_id: str) -> dict[str, int]:
        """The instances ``pod_id`` holds for their unload (a drain's) -> the term of the
        drain order (a peer's: as of its last heartbeat)."""
        if pod_id == self.me:
            return self._local.held_terms()
        hb = self._heartbeat(pod_id)
        return dict(hb.held_terms) if hb is not None else {}

    def _heartbeat(self, pod_id: str) -> Heartbeat | None:
        peer = self._m.peers.get(pod_id)
        return peer.heartbeat if peer is not None else None

    async def restore(self, pod_id: str, instance_id: str) -> None:
        if pod_id == self.me:
            self._here.restore_here(instance_id)
        else:
            client = self._m.client_for(pod_id)
            await client.call(pod_id, routes.RESTORE, instance_id=instance_id)

    def adapters_on(self, pod_id: str, instance_id: str) -> list[str]:
        """The LoRA adapters ``instance_id`` on ``pod_id`` holds (a peer's: as of its last
        heartbeat)."""
        if pod_id == self.me:
            held = self._local.adapters() if self._local.adapters is not None else {}
            return sorted(held.get(instance_id, {}))
        peer = self._m.peers.get(pod_id)
        hb = peer.heartbeat if peer is not None else None
        return sorted(hb.adapters.get(instance_id, {})) if hb is not None else []

    async def carry(self, pod_id: str, instance_id: str, names: list[str]) -> dict[str, Any]:
        """Load ``names`` into ``instance_id`` on ``pod_id``: each name -> None or why not."""
        if pod_id == self.me:
            data = await self._here.carry_here(instance_id, names)
        else:
            data = await self._m.client_for(pod_id).call(
                pod_id,
                routes.ADAPTERS_CARRY,
                {"adapters": names},
                timeout=self._settings.ondemand_max_wait_seconds * max(1, len(names)) + 30,
                instance_id=instance_id,
            )
        done = data.get("adapters")
        return done if isinstance(done, dict) else {}

    async def drain(self, pod_id: str, instance_id: str, seconds: float) -> tuple[int, int]:
        """Hold and drain: (requests in flight when it began, how many had to be cut)."""
        if pod_id == self.me:
            data = await self._here.drain_here(instance_id, seconds, self._m.current_term())
        else:
            data = await self._m.client_for(pod_id).call(
                pod_id,
                routes.DRAIN,
                {"seconds": seconds},
                timeout=seconds + 30,
                instance_id=instance_id,
            )
        in_flight, cut = data.get("inFlight"), data.get("cut")
        return (
            in_flight if isinstance(in_flight, int) else 0,
            cut if isinstance(cut, int) else 0,
        )
