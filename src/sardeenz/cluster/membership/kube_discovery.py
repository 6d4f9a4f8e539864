"""Kubernetes-mode discovery: the Ready ``app=sardeenz`` pods of ``NAMESPACE``.

List, then watch from the list's resourceVersion, resuming each watch from
the last version seen (bookmarks included); a 410 Gone (the version left the
API server's window) means list again. Only a pod that is Ready, has a
``podIP`` and is not being deleted counts: membership then knows it (its
PeerStore entry, to which heartbeats go, as in static mode). A pod that is
deleted, loses its Ready condition or its IP leaves at once, with its routes.

A peer's address is its ``podIP`` and, in order: the ``sardeenz.io/port``
annotation, the container port named ``http``, else this pod's own port
(every pod of a StatefulSet listens on the same one).

The loop, its backoff and its RBAC warnings are kube_watch.py's. While the
API cannot be reached the pods known stay as they were: the heartbeats'
failure detector still takes the routes of a pod that stops answering.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from sardeenz.asgi import ascii_int
from sardeenz.cluster.identity import PeerAddress
from sardeenz.cluster.membership.kube_api import KubeApi
from sardeenz.cluster.membership.kube_watch import list_then_watch, watch_seconds

if TYPE_CHECKING:
    from sardeenz.cluster.membership.service import Membership

log = logging.getLogger(__name__)

PORT_ANNOTATION = "sardeenz.io/port"


def pod_address(pod: Mapping[str, Any], default_port: int) -> PeerAddress | None:
    """Where a pod (the API's JSON) serves, or None while it must not count."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    ip = status.get("podIP")
    if meta.get("deletionTimestamp") or not isinstance(ip, str) or not ip:
        return None
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or []
        if isinstance(c, dict)
    )
    if not ready:
        return None
    return PeerAddress(ip, _port(pod, default_port))


def _port(pod: Mapping[str, Any], default: int) -> int:
    annotated = ((pod.get("metadata") or {}).get("annotations") or {}).get(PORT_ANNOTATION)
    number = ascii_int(annotated) if isinstance(annotated, str) else None
    if number is not None and 0 < number < 65536:
        return number
    for container in (pod.get("spec") or {}).get("containers") or []:
        for port in container.get("ports") or []:
            if port.get("name") == "http" and isinstance(port.get("containerPort"), int):
                return int(port["containerPort"])
    return default


def pod_name(pod: Mapping[str, Any]) -> str | None:
    name = (pod.get("metadata") or {}).get("name")
    return name if isinstance(name, str) and name else None


class Members(Protocol):
    def set_members(self, members: Mapping[str, PeerAddress]) -> None: ...

    def set_member(self, pod_id: str, address: PeerAddress | None) -> None: ...


class PodMembers:
    """What the watch reports, applied to membership's peers, failure detector and
    routes (the same state static mode's pings and heartbeats feed)."""

    def __init__(self, membership: Membership) -> None:
        assert membership.members is not None, "Kubernetes mode only"
        self._m = membership
        self._members = membership.members

    def set_members(self, members: Mapping[str, PeerAddress]) -> None:
        """A fresh pod list: exactly these pods (besides this one) are the peers."""
        for gone in self._members - set(members):
            self.set_member(gone, None)
        for pod_id, address in members.items():
            self.set_member(pod_id, address)

    def set_member(self, pod_id: str, address: PeerAddress | None) -> None:
        """``pod_id`` is Ready at ``address``, or (None) deleted or not Ready: its routes
        go at once, not after the failure detector's unavailable time."""
        m = self._m
        if pod_id == m.identity.pod_id:
            return
        if address is None:
            self._members.discard(pod_id)
            if m.forget(pod_id):
                log.warning("cluster: pod %s left (deleted or not Ready); routes removed", pod_id)
            return
        if pod_id not in self._members:
            log.info("cluster: pod %s joined at %s", pod_id, address)
        self._members.add(pod_id)
        if m.peers.get(pod_id) is None or m.peers.pod_at(address) != pod_id:
            m.peers.upsert(pod_id, address)
            m.forget_replaced(pod_id, address)  # a pod that had this address before


class PodWatcher:
    def __init__(self, members: Members, api: KubeApi, retry: float, port: int) -> None:
        self._m = members
        self._api = api
        self._retry = retry
        self._port = port
        """The port of a pod that names none (this pod's own)."""

    async def run(self) -> None:
        await list_then_watch(self._api, "pods", self._relist, self._watch, self._retry)

    async def _relist(self) -> str:
        data = await self._api.list_pods()
        self._api.allowed("list", "pods")
        members: dict[str, PeerAddress] = {}
        for pod in data.get("items") or []:
            name = pod_name(pod)
            address = pod_address(pod, self._port) if name else None
            if name and address is not None:
                members[name] = address
        self._m.set_members(members)
        version = (data.get("metadata") or {}).get("resourceVersion")
        return str(version or "")

    async def _watch(self, version: str) -> str:
        """One watch from ``version``; the last version seen when the server ends it."""
        events = self._api.pod_events(version, watch_seconds())
        try:
            async for event in events:
                self._api.allowed("watch", "pods")
                obj = event.get("object") or {}
                seen = (obj.get("metadata") or {}).get("resourceVersion")
                if seen:
                    version = str(seen)
                name = pod_name(obj)
                if event.get("type") == "BOOKMARK" or name is None:
                    continue
                gone = event.get("type") == "DELETED"
                self._m.set_member(name, None if gone else pod_address(obj, self._port))
        finally:
            await events.aclose()
        return version
