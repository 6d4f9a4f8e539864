"""The cluster as this pod sees it: every pod's instances and GPUs, and its status.

Read from the heartbeats membership holds (no request to any pod) plus this
pod's supervisor as it is now. The admin API's instance list, the locator,
on-demand placement, presets and the dashboard's GPU panel read it here.
"""

from __future__ import annotations

from typing import Any

from sardeenz.cluster.local_pod import LocalPod
from sardeenz.cluster.membership.election import PeerState
from sardeenz.cluster.membership.peers import GpuFigures
from sardeenz.cluster.membership.service import Membership
from sardeenz.domain import ModelInstance


class ClusterView:
    def __init__(self, membership: Membership, local: LocalPod) -> None:
        self._members = membership
        self._local = local

    async def status(self) -> dict[str, Any]:
        """``GET /api/cluster/status``: this pod's view of the cluster."""
        m = self._members
        now = m.now()
        me = await m.local_heartbeat()
        leader = m.leader()
        pods = [
            {
                "id": me.pod_id,
                "address": str(me.address),
                "state": PeerState.HEALTHY.value,
                "isLeader": leader == me.pod_id,
                "self": True,
                "term": me.term,
                "gpus": [g.model_dump(mode="json") for g in me.gpus],
                "instances": [i.model_dump(mode="json") for i in me.instances],
            }
        ]
        for peer in m.peers.all():
            hb = peer.heartbeat
            last = m.detector.last_heard(peer.pod_id)
            pods.append(
                {
                    "id": peer.pod_id,
                    "address": str(peer.address),
                    "state": m.detector.state(peer.pod_id, now).value,
                    "isLeader": leader == peer.pod_id,
                    "self": False,
                    "term": hb.term if hb else None,
                    "lastSeenSecondsAgo": round(now - last, 3) if last is not None else None,
                    "gpus": [g.model_dump(mode="json") for g in hb.gpus] if hb else [],
                    "instances": [i.model_dump(mode="json") for i in hb.instances] if hb else [],
                }
            )
        return {
            "mode": m.mode.value,
            "podId": m.identity.pod_id,
            "leader": leader,
            "term": m.leadership.term,
            "quorum": m.leadership.quorum if m.active else 1,
            "size": m.cluster_size() if m.active else 1,
            "pods": pods,
            "warnings": m.warnings(),
        }

    def instances(self) -> list[ModelInstance]:
        """``GET /api/v1/models``: this pod's instances, then each peer's from its last
        heartbeat (no request to any pod), every one stamped with its ``podId``.

        A single node answers its supervisor's list as it is (``podId`` null). The
        instances of a pod the failure detector calls unavailable are left out, as
        its routes are: that heartbeat is too old to describe anything.
        """
        m = self._members
        local = self._local.supervisor.list_instances()
        if not m.active:
            return local
        out = [i.model_copy(update={"pod_id": m.identity.pod_id}) for i in local]
        now = m.now()
        for peer in m.peers.all():
            hb = peer.heartbeat
            if hb is None or m.detector.state(peer.pod_id, now) is PeerState.UNAVAILABLE:
                continue
            out.extend(i.model_copy(update={"pod_id": peer.pod_id}) for i in hb.instances)
        return out

    def peer_gpus(self) -> list[tuple[str, GpuFigures]]:
        """Each other pod's GPUs as its last heartbeat gave them (unavailable pods: none)."""
        m = self._members
        now = m.now()
        return [
            (peer.pod_id, g)
            for peer in m.peers.all()
            if peer.heartbeat is not None
            and m.detector.state(peer.pod_id, now) is not PeerState.UNAVAILABLE
            for g in peer.heartbeat.gpus
        ]

    def instance_on(self, pod_id: str, instance_id: str) -> ModelInstance | None:
        """``instance_id`` as ``pod_id`` last described it (this pod: as it is now)."""
        if pod_id == self._members.identity.pod_id:
            found = [i for i in self._local.supervisor.list_instances() if i.id == instance_id]
        else:
            peer = self._members.peers.get(pod_id)
            hb = peer.heartbeat if peer is not None else None
            found = [i for i in (hb.instances if hb else []) if i.id == instance_id]
        return found[0] if found else None

    def owner_of(self, instance_id: str) -> str | None:
        """The pod whose last heartbeat listed ``instance_id`` (None: local or unknown)."""
        if not self._members.active or any(
            i.id == instance_id for i in self._local.supervisor.list_instances()
        ):
            return None
        for peer in self._members.peers.all():
            hb = peer.heartbeat
            if hb is not None and any(i.id == instance_id for i in hb.instances):
                return peer.pod_id
        return None
