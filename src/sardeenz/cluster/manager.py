"""ClusterManager: the node's cluster parts put together (membership, routes, this pod).

It composes what the cluster layers are given: :class:`Membership`
(cluster/membership/service.py: peers, election or Lease, terms, the signed
pod client), the routing table's remote part fed by heartbeats
(cluster/remote_routes.py), and this pod's side: the heartbeat it sends
(its supervisor's instances, GPU figures, routing version, profiles version,
withdrawn instances) and the cluster-wide instance queries and orders the
admin API and the features use (``instances``, ``instance_on``, ``owner_of``,
``load_on``, ``act_on``).

The membership parts are exposed here under their own names (``peers``,
``detector``, ``leadership``, ``is_leader()``...) for the features that still
take the manager; membership itself never sees this class.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from sardeenz.cluster.identity import ClusterMode, Identity, PeerAddress, detect_mode, identity_of
from sardeenz.cluster.membership.election import PeerState
from sardeenz.cluster.membership.peers import GpuFigures, Heartbeat
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.remote_routes import RemoteRoutes
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.client import PodClient
from sardeenz.cluster.transport.server import Handler
from sardeenz.config import Settings
from sardeenz.domain import LoadRequest, ModelInstance
from sardeenz.errors import NotFound
from sardeenz.gpu.inventory import GpuInfo, GpuInventory
from sardeenz.proxy.routing import RoutingTable
from sardeenz.runtime.supervisor import Supervisor

log = logging.getLogger(__name__)

PromisedBytes = Callable[[list[GpuInfo]], Awaitable[dict[int, int]]]
"""The memory ledger's promised bytes per GPU of a snapshot."""


class ClusterManager:
    def __init__(
        self,
        settings: Settings,
        table: RoutingTable,
        supervisor: Supervisor,
        inventory: GpuInventory,
        environ: Mapping[str, str] | None = None,
        *,
        promised_bytes: PromisedBytes | None = None,
        profiles_version: Callable[[], str] | None = None,
    ) -> None:
        self.settings = settings
        self.table = table
        self.supervisor = supervisor
        self.inventory = inventory
        self.promised_bytes = promised_bytes
        """The memory ledger's promised bytes per GPU (reported in heartbeats)."""
        self.profiles_version = profiles_version
        """The version of this pod's memory profiles (reported in heartbeats)."""
        mode = detect_mode(settings, environ)
        self.remote_routes = RemoteRoutes(table)
        self.membership = Membership(
            settings, mode, identity_of(settings, mode), self.local_heartbeat, self.remote_routes
        )
        m = self.membership
        self.mode: ClusterMode = m.mode
        self.active = m.active
        self.identity: Identity = m.identity
        self.peers = m.peers
        self.detector = m.detector
        self.leadership = m.leadership
        self.election = m.election
        self.members = m.members
        self.signer = m.signer
        self.verifier = m.verifier
        self.client = m.client
        self._gpus: list[GpuFigures] = []
        self.withdrawn: dict[str, float] = {}
        """Instance id -> monotonic expiry: served here, not advertised to peers (a move's
        source on its way out, cluster/handover.py). Expiry so that a leader dying mid-move
        cannot leave an instance unadvertised forever."""

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        await self.membership.start()

    async def stop(self) -> None:
        await self.membership.stop()

    # ------------------------------------------------------- membership's view
    def now(self) -> float:
        return self.membership.now()

    def leader(self) -> str | None:
        return self.membership.leader()

    def is_leader(self) -> bool:
        return self.membership.is_leader()

    def current_term(self) -> int:
        return self.membership.current_term()

    def address_of(self, pod_id: str) -> PeerAddress | None:
        return self.membership.address_of(pod_id)

    def reachable(self, pod_id: str) -> bool:
        return self.membership.reachable(pod_id)

    def accepts_order(self, term: int) -> bool:
        return self.membership.accepts_order(term)

    def cluster_size(self) -> int:
        return self.membership.cluster_size()

    def beat_soon(self) -> None:
        self.membership.beat_soon()

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        """Membership's routes, with ``state`` answering this pod's full view."""
        return self.membership.internal_routes(self.status)

    # ------------------------------------------------------------ this pod
    async def local_heartbeat(self) -> Heartbeat:
        try:
            gpus = await self.inventory.snapshot()
            promised = await self.promised_bytes(gpus) if self.promised_bytes else {}
            self._gpus = [
                GpuFigures(
                    index=g.index,
                    name=g.name,
                    total_bytes=g.total_bytes,
                    used_bytes=g.used_bytes,
                    free_bytes=g.free_bytes,
                    simulated=g.simulated,
                    promised_bytes=promised.get(g.index, 0),
                )
                for g in gpus
            ]
        except Exception as exc:  # GPU figures are informative; a heartbeat must still go
            log.debug("GPU snapshot for the heartbeat failed: %s", exc)
        instances = self.supervisor.list_instances()
        return Heartbeat(
            pod_id=self.identity.pod_id,
            host=self.identity.address.host,
            port=self.identity.address.port,
            term=self.leadership.term,
            leader=self.leadership.is_leader(self.now()),
            routing_version=self.table.version,
            instances=instances,
            gpus=self._gpus,
            unrouted=self._unrouted({i.id for i in instances}),
            profiles_version=self.profiles_version() if self.profiles_version else None,
        )

    def _unrouted(self, present: set[str]) -> list[str]:
        now = self.now()
        for iid in [i for i, until in self.withdrawn.items() if until < now or i not in present]:
            del self.withdrawn[iid]
        return sorted(self.withdrawn)

    async def status(self) -> dict[str, Any]:
        """``GET /api/cluster/status``: this pod's view of the cluster."""
        now = self.now()
        me = await self.local_heartbeat()
        leader = self.leader()
        pods = [
            {
                "id": me.pod_id,
                "address": str(me.address),
                "state": PeerState.HEALTHY.value,
                "isLeader": leader == me.pod_id,
                "self": True,
                "term": me.term,
                "gpus": [g.model_dump(mode="json") for g in me.gpus],
                "instances": [i.model_dump(mode="json") for i in me.instances],
            }
        ]
        for peer in self.peers.all():
            hb = peer.heartbeat
            last = self.detector.last_heard(peer.pod_id)
            pods.append(
                {
                    "id": peer.pod_id,
                    "address": str(peer.address),
                    "state": self.detector.state(peer.pod_id, now).value,
                    "isLeader": leader == peer.pod_id,
                    "self": False,
                    "term": hb.term if hb else None,
                    "lastSeenSecondsAgo": round(now - last, 3) if last is not None else None,
                    "gpus": [g.model_dump(mode="json") for g in hb.gpus] if hb else [],
                    "instances": [i.model_dump(mode="json") for i in hb.instances] if hb else [],
                }
            )
        return {
            "mode": self.mode.value,
            "podId": self.identity.pod_id,
            "leader": leader,
            "term": self.leadership.term,
            "quorum": self.leadership.quorum if self.active else 1,
            "size": self.cluster_size() if self.active else 1,
            "pods": pods,
            "warnings": self.membership.warnings(),
        }

    def instances(self) -> list[ModelInstance]:
        """``GET /api/v1/models``: this pod's instances, then each peer's from its last
        heartbeat (no request to any pod), every one stamped with its ``podId``.

        A single node answers its supervisor's list as it is (``podId`` null). The
        instances of a pod the failure detector calls unavailable are left out, as
        its routes are: that heartbeat is too old to describe anything.
        """
        local = self.supervisor.list_instances()
        if not self.active:
            return local
        out = [i.model_copy(update={"pod_id": self.identity.pod_id}) for i in local]
        now = self.now()
        for peer in self.peers.all():
            hb = peer.heartbeat
            if hb is None or self.detector.state(peer.pod_id, now) is PeerState.UNAVAILABLE:
                continue
            out.extend(i.model_copy(update={"pod_id": peer.pod_id}) for i in hb.instances)
        return out

    def instance_on(self, pod_id: str, instance_id: str) -> ModelInstance | None:
        """``instance_id`` as ``pod_id`` last described it (this pod: as it is now)."""
        if pod_id == self.identity.pod_id:
            found = [i for i in self.supervisor.list_instances() if i.id == instance_id]
        else:
            peer = self.peers.get(pod_id)
            hb = peer.heartbeat if peer is not None else None
            found = [i for i in (hb.instances if hb else []) if i.id == instance_id]
        return found[0] if found else None

    # -------------------------------------------------------- leader orders
    def client_for(self, pod_id: str) -> PodClient:
        """The pod client, to reach ``pod_id`` (404 ``pod_not_found`` on a single node)."""
        if self.client is None:
            raise NotFound(
                f"no pod {pod_id!r}: this node is not in a cluster", code="pod_not_found"
            )
        return self.client

    async def load_on(self, pod_id: str, req: LoadRequest) -> ModelInstance | None:
        """Load on ``pod_id``; None when that is this pod (the caller loads locally)."""
        if pod_id == self.identity.pod_id:
            return None
        request = req.model_dump(mode="json", exclude={"pod_id"})
        data = await self.client_for(pod_id).call(pod_id, routes.LOAD, {"request": request})
        return ModelInstance.model_validate({**data, "podId": pod_id})

    def owner_of(self, instance_id: str) -> str | None:
        """The pod whose last heartbeat listed ``instance_id`` (None: local or unknown)."""
        if not self.active or any(i.id == instance_id for i in self.supervisor.list_instances()):
            return None
        for peer in self.peers.all():
            hb = peer.heartbeat
            if hb is not None and any(i.id == instance_id for i in hb.instances):
                return peer.pod_id
        return None

    async def act_on(self, instance_id: str, action: str, level: int = 1) -> ModelInstance | None:
        """Unload/sleep/wake an instance another pod runs; None when it is not remote."""
        owner = self.owner_of(instance_id)
        if owner is None:
            return None
        route = routes.INSTANCE_ACTIONS[action]
        data = await self.client_for(owner).call(
            owner, route, {"level": level}, instance_id=instance_id
        )
        return ModelInstance.model_validate({**data, "podId": owner})
