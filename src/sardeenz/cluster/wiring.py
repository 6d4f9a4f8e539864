"""Plugs an active cluster into the gateway and the proxy (app.py calls it once)."""

from __future__ import annotations

from typing import Any

from sardeenz.cluster.control_state import ControlRegister
from sardeenz.cluster.forwarding import remote_headers, trusted_forward
from sardeenz.cluster.internal import InternalApi
from sardeenz.cluster.manager import ClusterManager
from sardeenz.cluster.ondemand import ClusterStarts
from sardeenz.cluster.profile_sync import ProfileSync
from sardeenz.cluster.redirect import leader_redirect
from sardeenz.proxy.forwarder import InferenceProxy


def install_cluster(
    gateway: Any,
    manager: ClusterManager,
    proxy: InferenceProxy,
    profile_sync: ProfileSync | None = None,
    starts: ClusterStarts | None = None,
    control: ControlRegister | None = None,
) -> None:
    gateway.internal = InternalApi(manager, profile_sync, starts, control)
    gateway.trusted_forward = trusted_forward(manager)
    gateway.redirect = leader_redirect(manager)
    proxy.remote_headers = remote_headers(manager)
