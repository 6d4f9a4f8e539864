"""ClusterManager: builds the node's cluster core and starts/stops it; nothing passes through.

The core is four parts, each handed on its own to the features that need it
(app.py is the one place that does so):

* :class:`Membership` (cluster/membership/service.py): peers, election or
  Lease, terms, the failure detector and the signed pod client;
* :class:`LocalPod` (cluster/local_pod.py): this pod's heartbeat and the
  instances it withdraws;
* :class:`ClusterView` (cluster/view.py): every pod's instances and GPUs from
  the heartbeats held, and the cluster status;
* :class:`PodOrders` (cluster/orders.py): the leader's fenced orders to a pod.

The routing table's remote part (cluster/remote_routes.py) is fed by
membership's heartbeats. No feature takes this class: each takes the parts
above it uses, so none reaches through a hub.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sardeenz.cluster.identity import detect_mode, identity_of
from sardeenz.cluster.local_pod import LocalPod, PromisedBytes
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.orders import PodOrders
from sardeenz.cluster.remote_routes import InFlight, RemoteRoutes
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler
from sardeenz.cluster.view import ClusterView
from sardeenz.config import Settings
from sardeenz.gpu.inventory import GpuInventory
from sardeenz.proxy.routing import RoutingTable
from sardeenz.runtime.supervisor import Supervisor


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
        inflight: InFlight | None = None,
    ) -> None:
        mode = detect_mode(settings, environ)
        identity = identity_of(settings, mode)
        self.remote_routes = RemoteRoutes(table, inflight)
        self.local = LocalPod(
            identity,
            supervisor,
            table,
            inventory,
            promised_bytes=promised_bytes,
            profiles_version=profiles_version,
        )
        self.membership = Membership(
            settings, mode, identity, self.local.heartbeat, self.remote_routes
        )
        self.view = ClusterView(self.membership, self.local)
        self.orders = PodOrders(self.membership, self.view)

    @property
    def active(self) -> bool:
        """False on a single node: no peers, no pod client, no cluster routes."""
        return self.membership.active

    async def start(self) -> None:
        await self.membership.start()

    async def stop(self) -> None:
        await self.membership.stop()

    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        """Membership's routes, with ``state`` answering this pod's full view."""
        return self.membership.internal_routes(self.view.status)
