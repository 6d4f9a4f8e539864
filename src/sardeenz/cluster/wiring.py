"""Plugs an active cluster into the gateway and the proxy (app.py calls it once).

The ``/internal`` router is built here from every part that serves internal
routes: membership (ping, heartbeat, state, votes), the leader's orders on
instances, a move's steps, profile sync, presets and on-demand placement.
A feature with routes of its own adds its ``internal_routes()`` here.
"""

from __future__ import annotations

from typing import Any

from sardeenz.cluster import handover
from sardeenz.cluster.forwarding import remote_headers, trusted_forward
from sardeenz.cluster.manager import ClusterManager
from sardeenz.cluster.ondemand import ClusterStarts
from sardeenz.cluster.orders import InstanceOrders
from sardeenz.cluster.preset_service import PresetService
from sardeenz.cluster.profile_sync import ProfileSync
from sardeenz.cluster.redirect import leader_redirect
from sardeenz.cluster.transport.server import InternalRouter
from sardeenz.proxy.forwarder import InferenceProxy


def internal_router(
    manager: ClusterManager,
    profile_sync: ProfileSync,
    presets: PresetService,
    starts: ClusterStarts,
) -> InternalRouter:
    """Every ``/internal/*`` route of this pod, bound to its handler."""
    assert manager.verifier is not None
    router = InternalRouter(manager.verifier, manager)
    router.include(manager.internal_routes())
    router.include(InstanceOrders(manager.supervisor).internal_routes())
    router.include(handover.internal_routes(manager))
    router.include(profile_sync.internal_routes())
    router.include(presets.internal_routes())
    router.include(starts.internal_routes())
    return router


def install_cluster(
    gateway: Any,
    manager: ClusterManager,
    proxy: InferenceProxy,
    profile_sync: ProfileSync,
    presets: PresetService,
    starts: ClusterStarts,
) -> None:
    gateway.internal = internal_router(manager, profile_sync, presets, starts)
    gateway.trusted_forward = trusted_forward(manager)
    gateway.redirect = leader_redirect(manager)
    proxy.remote_headers = remote_headers(manager)
