"""Plugs an active cluster into the gateway and the proxy (app.py calls it once).

The ``/internal`` router is built here from every part that serves internal
routes: membership (ping, heartbeat, state, votes), the leader's orders on
instances, a move's steps, profile sync, the replicated control state
(presets, catalog, moves), on-demand placement, the request collector
(cluster/observe.py) and the locator's reads of this pod's instances.
A feature with routes of its own adds its ``internal_routes()`` here.
"""

from __future__ import annotations

from typing import Any

from sardeenz.cluster import handover
from sardeenz.cluster.control_state import ControlRegister
from sardeenz.cluster.forwarding import remote_headers, trusted_forward
from sardeenz.cluster.instance_routes import InstanceRoutes
from sardeenz.cluster.locator import InstanceLocator
from sardeenz.cluster.manager import ClusterManager
from sardeenz.cluster.observe import RequestCollector
from sardeenz.cluster.ondemand import ClusterStarts
from sardeenz.cluster.orders import InstanceOrders
from sardeenz.cluster.profile_sync import ProfileSync
from sardeenz.cluster.redirect import leader_redirect
from sardeenz.cluster.transport.routes import HOP_HEADER
from sardeenz.cluster.transport.server import InternalRouter
from sardeenz.proxy.forwarder import InferenceProxy
from sardeenz.security.unverified import UnverifiedBodies


def internal_router(
    manager: ClusterManager,
    profile_sync: ProfileSync,
    control: ControlRegister,
    starts: ClusterStarts,
    unverified: UnverifiedBodies,
    collector: RequestCollector,
    locator: InstanceLocator,
) -> InternalRouter:
    """Every ``/internal/*`` route of this pod, bound to its handler."""
    assert manager.verifier is not None
    router = InternalRouter(manager.verifier, manager, unverified)
    router.include(manager.internal_routes())
    router.include(InstanceOrders(manager.supervisor).internal_routes())
    router.include(handover.internal_routes(manager))
    router.include(profile_sync.internal_routes())
    router.include(control.internal_routes())
    router.include(starts.internal_routes())
    router.include(collector.internal_routes())
    router.include(InstanceRoutes(locator).internal_routes())
    return router


def install_cluster(
    gateway: Any,
    manager: ClusterManager,
    proxy: InferenceProxy,
    profile_sync: ProfileSync,
    control: ControlRegister,
    starts: ClusterStarts,
    collector: RequestCollector,
    locator: InstanceLocator,
) -> None:
    gateway.internal = internal_router(
        manager, profile_sync, control, starts, gateway.unverified, collector, locator
    )
    gateway.trusted_forward = trusted_forward(manager, gateway.unverified)
    gateway.redirect = leader_redirect(manager)
    proxy.remote_headers = remote_headers(manager)
    proxy.hop_header = HOP_HEADER
