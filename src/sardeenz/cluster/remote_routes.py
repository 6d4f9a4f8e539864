"""The routing table's remote endpoints, kept in step with the peers' heartbeats.

Membership hands every peer heartbeat here and says when a pod serves nothing
any more (unavailable, left, replaced at its address); this is the one place
that turns that into the routing table's remote part (proxy/routing.py
``set_remote``), rebuilt for a pod only when what routing needs of its
heartbeat changed (``route_key``), so a heartbeat that changes nothing costs
the table nothing.

When a pod serves nothing any more, the requests this pod forwarded to it and
still waits on are ended too (``pod_unavailable``, through the proxy's
in-flight registry): a pod cut off by the network sends no reset, so without
this they would wait for an answer until the network healed (issue 28's soak
found streams hung for 30 s and more across a 2|3 partition).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from sardeenz.cluster.membership.peers import Heartbeat, remote_endpoints, route_key
from sardeenz.proxy.relay import POD_UNAVAILABLE
from sardeenz.proxy.routing import RoutingTable

log = logging.getLogger(__name__)


class InFlight(Protocol):
    """The proxy's in-flight registry, as this module uses it (proxy/inflight.py)."""

    def cut(self, instance_id: str, code: str) -> int: ...

    def ending(self, instance_id: str, code: str | None) -> None: ...


class RemoteRoutes:
    def __init__(self, table: RoutingTable, inflight: InFlight | None = None) -> None:
        self._table = table
        self._keys: dict[str, tuple[Any, ...]] = {}
        self.inflight = inflight
        """The proxy's requests in flight; None: nothing is cut (unit tests)."""

    def peer_heartbeat(self, hb: Heartbeat) -> None:
        key = route_key(hb)
        if key != self._keys.get(hb.pod_id, ()):
            self._keys[hb.pod_id] = key
            endpoints = remote_endpoints(hb)
            if self.inflight is not None:  # back: its requests end as usual again
                for ep in endpoints:
                    self.inflight.ending(ep.instance_id, None)
            self._table.set_remote(hb.pod_id, endpoints)

    def peer_gone(self, pod_id: str) -> bool:
        if not self._keys.pop(pod_id, ()):
            return False
        gone = self._table.remote(pod_id)
        self._table.set_remote(pod_id, [])
        if self.inflight is not None:
            cut = sum(self.inflight.cut(ep.instance_id, POD_UNAVAILABLE) for ep in gone)
            if cut:
                log.warning("cluster: %d request(s) in flight on pod %s ended", cut, pod_id)
        return True
