"""The routing table's remote endpoints, kept in step with the peers' heartbeats.

Membership hands every peer heartbeat here and says when a pod serves nothing
any more (unavailable, left, replaced at its address); this is the one place
that turns that into the routing table's remote part (proxy/routing.py
``set_remote``), rebuilt for a pod only when what routing needs of its
heartbeat changed (``route_key``), so a heartbeat that changes nothing costs
the table nothing.
"""

from __future__ import annotations

from typing import Any

from sardeenz.cluster.membership.peers import Heartbeat, remote_endpoints, route_key
from sardeenz.proxy.routing import RoutingTable


class RemoteRoutes:
    def __init__(self, table: RoutingTable) -> None:
        self._table = table
        self._keys: dict[str, tuple[Any, ...]] = {}

    def peer_heartbeat(self, hb: Heartbeat) -> None:
        key = route_key(hb)
        if key != self._keys.get(hb.pod_id, ()):
            self._keys[hb.pod_id] = key
            self._table.set_remote(hb.pod_id, remote_endpoints(hb))

    def peer_gone(self, pod_id: str) -> bool:
        if not self._keys.pop(pod_id, ()):
            return False
        self._table.set_remote(pod_id, [])
        return True
