"""Plugs an active cluster into the gateway and the proxy (app.py passes these to their
constructors).

The ``/internal`` router is built here from every part that serves internal
routes: membership (ping, heartbeat, state, votes), the leader's orders on
instances, a move's steps, profile sync, the replicated control state
(presets, catalog, moves), on-demand placement, the request collector
(cluster/observe.py), the locator's reads of this pod's instances and the
tenants' limit shares (cluster/tenant_shares.py).
A feature with routes of its own adds its ``internal_routes()`` here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from sardeenz.asgi import ASGIApp, Receive, Scope, Send
from sardeenz.cluster.control import ControlState
from sardeenz.cluster.control_state import ControlRegister
from sardeenz.cluster.forwarding import remote_headers, trusted_forward
from sardeenz.cluster.handover import PodSide
from sardeenz.cluster.identity import ClusterMode
from sardeenz.cluster.instance_routes import InstanceRoutes
from sardeenz.cluster.locator import InstanceLocator
from sardeenz.cluster.manager import ClusterManager
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.observe import RequestCollector
from sardeenz.cluster.ondemand import ClusterStarts
from sardeenz.cluster.orders import InstanceOrders
from sardeenz.cluster.profile_sync import ProfileSync
from sardeenz.cluster.redirect import Redirect, leader_redirect
from sardeenz.cluster.tenant_shares import TenantShares
from sardeenz.cluster.transport.routes import InternalRoute
from sardeenz.cluster.transport.server import Handler, InternalRouter
from sardeenz.proxy.remote import RemoteHeaders
from sardeenz.security.unverified import UnverifiedBodies
from sardeenz.store.control import ControlRepository


def control_state(members: Membership, copies: ControlRepository) -> ControlState:
    """Where the control state lives: the API server's ConfigMaps in Kubernetes mode
    (a consensus store already), else the majority-acknowledged register of the pods."""
    if members.mode is ClusterMode.KUBERNETES:
        from sardeenz.cluster.control_kube import KubeControlState  # only Kubernetes pays

        return KubeControlState(
            members.identity.pod_id,
            members.is_leader,
            members.current_term,
            members.kube_api,
            members.settings,
            copies,
        )
    return ControlRegister(members, copies)


def internal_router(
    manager: ClusterManager,
    pod_side: PodSide,
    profile_sync: ProfileSync,
    control: ControlState,
    starts: ClusterStarts,
    unverified: UnverifiedBodies,
    collector: RequestCollector,
    locator: InstanceLocator,
    shares: TenantShares,
    extra_routes: Sequence[tuple[InternalRoute, Handler]] = (),
) -> InternalRouter:
    """Every ``/internal/*`` route of this pod, bound to its handler."""
    membership = manager.membership
    assert membership.verifier is not None
    router = InternalRouter(membership.verifier, membership, unverified)
    router.include(manager.internal_routes())
    router.include(InstanceOrders(manager.local.supervisor).internal_routes())
    router.include(pod_side.internal_routes())
    router.include(profile_sync.internal_routes())
    router.include(control.internal_routes())
    router.include(starts.internal_routes())
    router.include(collector.internal_routes())
    router.include(InstanceRoutes(locator).internal_routes())
    router.include(shares.internal_routes())
    router.include(extra_routes)  # features outside cluster/ (the usage query)
    return router


TrustedForward = Callable[[Scope, Receive, Send, ASGIApp], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class GatewayHooks:
    """What an active cluster adds to the gateway (all None on a single node)."""

    internal: ASGIApp | None = None
    trusted_forward: TrustedForward | None = None
    redirect: Redirect | None = None


def gateway_hooks(
    manager: ClusterManager,
    pod_side: PodSide,
    profile_sync: ProfileSync,
    control: ControlState,
    starts: ClusterStarts,
    collector: RequestCollector,
    locator: InstanceLocator,
    shares: TenantShares,
    unverified: UnverifiedBodies,
    max_body_bytes: int,
    extra_routes: Sequence[tuple[InternalRoute, Handler]] = (),
) -> GatewayHooks:
    membership = manager.membership
    if not manager.active or membership.verifier is None:
        return GatewayHooks()
    return GatewayHooks(
        internal=internal_router(
            manager,
            pod_side,
            profile_sync,
            control,
            starts,
            unverified,
            collector,
            locator,
            shares,
            extra_routes,
        ),
        trusted_forward=trusted_forward(membership.verifier, unverified, max_body_bytes),
        redirect=leader_redirect(membership),
    )


def proxy_remote_headers(manager: ClusterManager) -> RemoteHeaders | None:
    """The proxy's hook for requests to other pods (None on a single node)."""
    signer = manager.membership.signer
    if not manager.active or signer is None:
        return None
    return remote_headers(manager.membership.identity, signer)
