"""The heartbeat message and the in-memory store of what each peer last said.

A heartbeat carries the sender's identity, its term and whether it leads,
its routing version, its instances (as ``GET /api/v1/models`` shows them)
its GPU figures (with the memory its ledger promised), the LoRA adapters each
instance holds and the version of its memory profiles. The store keeps the
newest heartbeat per pod and turns a pod's active instances into remote
endpoints for the routing table (weight 1: local engines, weight 2, take two
requests for every remote one).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import Field

from sardeenz.cluster.identity import PeerAddress
from sardeenz.domain import CamelModel, InstanceStatus, ModelInstance
from sardeenz.proxy.routing import REMOTE_WEIGHT, Endpoint


class GpuFigures(CamelModel):
    index: int
    name: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    simulated: bool = False
    promised_bytes: int = 0
    """Promised by the pod's memory ledger to engines still starting or waking up (which
    a driver does not show as used yet); the scheduler counts it as used. Absent (0) in
    the heartbeats of older pods."""


class Heartbeat(CamelModel):
    pod_id: str = Field(min_length=1, max_length=253)
    host: str = Field(min_length=1, max_length=253)
    port: int = Field(ge=1, le=65535)
    term: int = Field(ge=0)
    leader: bool = False
    routing_version: int = 0
    instances: list[ModelInstance] = Field(default_factory=list, max_length=4096)
    gpus: list[GpuFigures] = Field(default_factory=list, max_length=1024)
    unrouted: list[str] = Field(default_factory=list, max_length=4096)
    """Instance ids the sender still serves but withdraws from other pods' routing
    (the source of a move, cluster/handover.py): peers route none of them."""
    withdrawn_terms: dict[str, int] = Field(default_factory=dict, max_length=4096)
    """Instance id (of ``unrouted``) -> the term of the leader order that withdrew it, so
    that a later leader can tell a withdrawal whose leader is gone
    (cluster/ondemand_surplus.py). A drain's hold is not listed (never advertised again).
    Empty from older pods: their withdrawals only expire."""
    held_terms: dict[str, int] = Field(default_factory=dict, max_length=4096)
    """Instance id (of ``unrouted``) -> the term of the drain order that held it for its
    unload: a later leader unloads a held copy whose leader died before the unload
    (cluster/ondemand_surplus.py). Empty from older pods."""
    adapters: dict[str, dict[str, int]] = Field(default_factory=dict, max_length=4096)
    """Instance id -> {LoRA adapter loaded there: its requests in flight}: where other
    pods send an adapter's requests (catalog/adapters.py). Empty from older pods."""
    profiles_version: str | None = Field(None, max_length=128)
    """Changes whenever the pod's memory profiles change: the leader then collects
    them (cluster/profile_sync.py). None from pods without profile sync."""
    request_log_version: str | None = Field(None, max_length=128)
    """What a pull of the sender's request log would answer, digested (its records,
    usage and requests in flight; proxy/history.py ``pull_version``): a collector
    holding this version has nothing to pull (cluster/observe.py). None from older
    pods, which are pulled every interval."""

    @property
    def address(self) -> PeerAddress:
        return PeerAddress(self.host, self.port)


@dataclass
class Peer:
    pod_id: str
    address: PeerAddress
    heartbeat: Heartbeat | None = None


class PeerStore:
    """pod id -> Peer; address -> pod id. Touched only on the event loop."""

    def __init__(self) -> None:
        self._peers: dict[str, Peer] = {}
        self._by_address: dict[PeerAddress, str] = {}
        self.replaced: list[str] = []
        """Pod ids forgotten because another pod took their address (membership
        clears their routes and failure-detector entry)."""

    def get(self, pod_id: str) -> Peer | None:
        return self._peers.get(pod_id)

    def all(self) -> list[Peer]:
        return [self._peers[k] for k in sorted(self._peers)]

    def ids(self) -> set[str]:
        return set(self._peers)

    def pod_at(self, address: PeerAddress) -> str | None:
        return self._by_address.get(address)

    def upsert(self, pod_id: str, address: PeerAddress) -> Peer:
        """Record ``pod_id`` at ``address``; a pod previously known there is forgotten
        (renamed or replaced: keeping it would inflate the quorum's base forever)."""
        previous = self._by_address.get(address)
        if previous is not None and previous != pod_id:
            self._peers.pop(previous, None)
            self.replaced.append(previous)
        peer = self._peers.get(pod_id)
        if peer is None:
            peer = self._peers[pod_id] = Peer(pod_id, address)
        elif peer.address != address:
            self._by_address.pop(peer.address, None)
            peer.address = address
        self._by_address[address] = pod_id
        return peer

    def remove(self, pod_id: str) -> Peer | None:
        """Forget ``pod_id`` (Kubernetes: its pod was deleted or is not Ready)."""
        peer = self._peers.pop(pod_id, None)
        if peer is not None and self._by_address.get(peer.address) == pod_id:
            del self._by_address[peer.address]
        return peer

    def apply(self, hb: Heartbeat) -> Peer:
        peer = self.upsert(hb.pod_id, hb.address)
        peer.heartbeat = hb
        return peer


def route_key(hb: Heartbeat) -> tuple[Any, ...]:
    """What of a heartbeat matters to routing: a change here rebuilds the pod's routes."""
    return (
        hb.host,
        hb.port,
        tuple(
            sorted(
                (
                    i.served_model_name,
                    i.id,
                    i.memory_metrics.max_model_len if i.memory_metrics else None,
                )
                for i in hb.instances
                if i.status is InstanceStatus.ACTIVE and i.id not in hb.unrouted
            )
        ),
    )


def remote_endpoints(hb: Heartbeat) -> list[Endpoint]:
    """The pod's active instances as endpoints of its proxy (never its engines' ports)."""
    address = hb.address
    out = []
    for inst in hb.instances:
        if inst.status is not InstanceStatus.ACTIVE or inst.id in hb.unrouted:
            continue
        out.append(
            Endpoint(
                instance_id=f"{hb.pod_id}/{inst.id}",
                served_name=inst.served_model_name,
                host=address.host,
                port=address.port,
                base_url=address.url,
                weight=REMOTE_WEIGHT,
                local=False,
                max_model_len=inst.memory_metrics.max_model_len if inst.memory_metrics else None,
                created=int(inst.created_at.timestamp()),
                pod_id=hb.pod_id,
            )
        )
    return out
