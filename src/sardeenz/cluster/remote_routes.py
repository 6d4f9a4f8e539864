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

It also keeps the LoRA adapters each peer's instances hold (the heartbeats'
``adapters``), read by the adapter loader (catalog/adapters.py ``PeerAdapters``):
where an adapter's requests go, and its state in ``GET /v1/models``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from sardeenz.cluster.membership.peers import Heartbeat, remote_endpoints, route_key
from sardeenz.domain import InstanceStatus
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
        self._held: dict[str, dict[str, dict[str, int]]] = {}
        """pod -> ``pod/instance`` -> {adapter: requests in flight} (active instances)."""
        self._asleep: dict[str, dict[str, frozenset[str]]] = {}
        """pod -> ``pod/instance`` -> adapters that sleeping instance keeps."""
        self.version = 0
        """Changes whenever a peer's adapters change (``PeerAdapters``)."""

    # -- PeerAdapters (catalog/adapters.py) ------------------------------------------------
    def adapters_of(self, endpoint_id: str) -> Mapping[str, int] | None:
        pod = endpoint_id.partition("/")[0]
        return self._held.get(pod, {}).get(endpoint_id)

    def sleeping_with(self, adapter: str) -> bool:
        return any(adapter in names for pod in self._asleep.values() for names in pod.values())

    def placements(self, adapter: str) -> list[tuple[str, int, bool]]:
        """``(pod/instance, requests in flight, asleep)`` of each peer instance holding it."""
        out = [
            (eid, held[adapter], False)
            for pod in self._held.values()
            for eid, held in pod.items()
            if adapter in held
        ]
        out += [
            (eid, 0, True)
            for pod in self._asleep.values()
            for eid, names in pod.items()
            if adapter in names
        ]
        return sorted(out)

    def _adapters(self, hb: Heartbeat) -> None:
        status = {i.id: i.status for i in hb.instances}
        held = {
            f"{hb.pod_id}/{iid}": dict(names)
            for iid, names in hb.adapters.items()
            if names and status.get(iid) is InstanceStatus.ACTIVE
        }
        asleep = {
            f"{hb.pod_id}/{iid}": frozenset(names)
            for iid, names in hb.adapters.items()
            if names and status.get(iid) is InstanceStatus.SLEEPING
        }
        old_held = self._held.get(hb.pod_id, {})
        if {k: set(v) for k, v in held.items()} != {k: set(v) for k, v in old_held.items()}:
            self.version += 1  # in-flight counts alone do not change any listing
        if asleep != self._asleep.get(hb.pod_id, {}):
            self.version += 1
        self._held[hb.pod_id] = held
        self._asleep[hb.pod_id] = asleep

    # -- routes ----------------------------------------------------------------------------
    def peer_heartbeat(self, hb: Heartbeat) -> None:
        self._adapters(hb)
        key = route_key(hb)
        if key != self._keys.get(hb.pod_id, ()):
            self._keys[hb.pod_id] = key
            endpoints = remote_endpoints(hb)
            if self.inflight is not None:  # back: its requests end as usual again
                for ep in endpoints:
                    self.inflight.ending(ep.instance_id, None)
            self._table.set_remote(hb.pod_id, endpoints)

    def peer_gone(self, pod_id: str) -> bool:
        if self._held.pop(pod_id, None) or self._asleep.pop(pod_id, None):
            self.version += 1
        if not self._keys.pop(pod_id, ()):
            return False
        gone = self._table.remote(pod_id)
        self._table.set_remote(pod_id, [])
        if self.inflight is not None:
            cut = sum(self.inflight.cut(ep.instance_id, POD_UNAVAILABLE) for ep in gone)
            if cut:
                log.warning("cluster: %d request(s) in flight on pod %s ended", cut, pod_id)
        return True
