"""ClusterManager: the one object the rest of the node knows of the cluster.

Single-node mode (no ``CLUSTER_PEERS``): ``active`` is False, ``start()``
creates nothing, ``/internal`` answers 404 and the proxy's hot path is the
single-node one (the routing table holds no remote endpoint, so the remote
branch of the forwarder is never taken).

Static mode: ``start()`` starts one task (cluster/driver.py) that finds the
peers, exchanges heartbeats and runs the election; the handlers of
``/internal/*`` (cluster/internal.py) call the ``on_*`` methods here. The
election and failure detector are pure (cluster/election.py): this class
feeds them messages with the monotonic clock and keeps the routing table's
remote endpoints in step with what peers report.

Kubernetes mode (cluster/kube.py): the same heartbeat driver (no pings, no
votes), while the pod watch says who the peers are (``members``) and the
Lease says who leads (``leadership`` is a kube_lease.py ``LeaseElection``).
Everything else (routing, ``/internal``, status, fencing) is shared.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sardeenz.cluster.election import Election, FailureDetector, PeerState, Timing
from sardeenz.cluster.identity import (
    ClusterMode,
    Identity,
    PeerAddress,
    detect_mode,
    identity_of,
    is_self,
    parse_peers,
)
from sardeenz.cluster.leadership import Leadership
from sardeenz.cluster.peers import GpuFigures, Heartbeat, PeerStore, remote_endpoints, route_key
from sardeenz.config import Settings
from sardeenz.domain import LoadRequest, ModelInstance
from sardeenz.errors import Conflict, NotFound, SardeenzError, Unavailable
from sardeenz.gpu.inventory import GpuInfo, GpuInventory
from sardeenz.proxy.routing import RoutingTable
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.security.cluster_hmac import Signer, Verifier

if TYPE_CHECKING:
    from sardeenz.cluster.driver import ClusterDriver
    from sardeenz.cluster.kube import KubeCluster

log = logging.getLogger(__name__)

HOP_HEADER = b"x-sardeenz-hop"
"""Set on a /v1 request one pod forwards to another: the receiver never forwards it again."""


class ClusterManager:
    def __init__(
        self,
        settings: Settings,
        table: RoutingTable,
        supervisor: Supervisor,
        inventory: GpuInventory,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.table = table
        self.supervisor = supervisor
        self.inventory = inventory
        self.mode = detect_mode(settings, environ)
        self.active = self.mode is not ClusterMode.SINGLE
        self.identity: Identity = identity_of(settings, self.mode)
        self.timing = Timing(
            suspect_after=settings.cluster_suspect_after_seconds,
            unavailable_after=settings.cluster_unavailable_after_seconds,
            candidacy_timeout=settings.cluster_request_timeout_seconds * 1.5,
        )
        self.election = Election(self.identity.pod_id, self.timing)
        """Static mode's Bully state (its driver stands, votes and persists with it)."""
        self.leadership: Leadership = self.election
        """Who leads and the fencing term, whichever mode elects."""
        self.members: set[str] | None = None
        """Kubernetes mode: the Ready pods the watch reports; only they are peers.
        None (static mode): any pod with the secret that makes itself heard."""
        if self.mode is ClusterMode.KUBERNETES:
            from sardeenz.cluster.kube_api import lease_timing
            from sardeenz.cluster.kube_lease import LeaseElection

            self.leadership = LeaseElection(self.identity.pod_id, lease_timing(settings))
            self.members = set()
        self.detector = FailureDetector(self.timing)
        self.peers = PeerStore()
        self.seeds: list[PeerAddress] = []
        self.signer: Signer | None = None
        self.verifier: Verifier | None = None
        if self.active:
            self.seeds = [
                p
                for p in parse_peers(settings.cluster_peers)
                if not is_self(p, self.identity, settings)
            ]
            secret = settings.cluster_secret.get_secret_value().encode()
            previous = settings.cluster_secret_previous.get_secret_value().encode()
            self.signer = Signer(secret)
            self.verifier = Verifier([secret, previous])
        self._state_file = settings.data_dir / "cluster-election.json"
        self._driver: ClusterDriver | None = None
        self._kube: KubeCluster | None = None
        self._gpus: list[GpuFigures] = []
        self.promised_bytes: Callable[[list[GpuInfo]], Awaitable[dict[int, int]]] | None = None
        """The memory ledger's promised bytes per GPU (app.py sets it)."""
        self.profiles_version: Callable[[], str] | None = None
        """The version of this pod's memory profiles (app.py sets it)."""
        self._last_leader: tuple[str | None, int] = (None, 0)
        self.withdrawn: dict[str, float] = {}
        """Instance id -> monotonic expiry: served here, not advertised to peers (a move's
        source on its way out, cluster/handover.py). Expiry so that a leader dying mid-move
        cannot leave an instance unadvertised forever."""

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        if not self.active:
            return
        from sardeenz.cluster.driver import ClusterDriver  # only a cluster pays for httpx

        if self.mode is ClusterMode.KUBERNETES:
            from sardeenz.cluster.kube import KubeCluster  # and only Kubernetes for its client
            from sardeenz.cluster.kube_lease import LeaseElection

            assert isinstance(self.leadership, LeaseElection)
            self._kube = KubeCluster(self, self.leadership)
            await self._kube.start()
            self._driver = ClusterDriver(self)
            self._driver.start()
            return
        saved = await asyncio.to_thread(_read_state, self._state_file)
        if saved is not None:
            self.election.term, self.election.voted_for = saved
            if self.election.term > 0:
                # We may have acknowledged a leader just before we stopped: keep that
                # promise (no vote for another) for D after a restart.
                self.election.no_vote_until = self.now() + self.timing.unavailable_after
                self.election.bound_to = None
        self.election.size = self.cluster_size()
        log.info(
            "cluster: static mode as %s (%s); peers %s",
            self.identity.pod_id,
            self.identity.address,
            ", ".join(str(s) for s in self.seeds) or "(none yet)",
        )
        self._driver = ClusterDriver(self)
        self._driver.start()

    async def stop(self) -> None:
        kube, self._kube = self._kube, None
        if kube is not None:  # first: the leader hands the Lease back while peers still hear it
            await kube.stop()
        driver, self._driver = self._driver, None
        if driver is not None:
            await driver.stop()

    # --------------------------------------------------------------- queries
    @staticmethod
    def now() -> float:
        return time.monotonic()

    def cluster_size(self) -> int:
        """``max(known pods, CLUSTER_EXPECTED_PODS)``; known = configured and discovered."""
        known = set(self.peers.ids()) | {self.identity.pod_id}
        unnamed = [s for s in self.seeds if self.peers.pod_at(s) is None]
        return max(len(known) + len(unnamed), self.settings.cluster_expected_pods, 1)

    def leader(self) -> str | None:
        if not self.active:
            return self.identity.pod_id
        return self.leadership.current_leader(self.now())

    def is_leader(self) -> bool:
        return not self.active or self.leadership.is_leader(self.now())

    def ping(self) -> dict[str, Any]:
        return {
            "podId": self.identity.pod_id,
            "host": self.identity.address.host,
            "port": self.identity.address.port,
            "term": self.leadership.term,
            "leader": self.leader(),
        }

    async def local_heartbeat(self) -> Heartbeat:
        try:
            gpus = await self.inventory.snapshot()
            promised = await self.promised_bytes(gpus) if self.promised_bytes else {}
            self._gpus = [
                GpuFigures(
                    index=g.index,
                    name=g.name,
                    total_bytes=g.total_bytes,
                    used_bytes=g.used_bytes,
                    free_bytes=g.free_bytes,
                    simulated=g.simulated,
                    promised_bytes=promised.get(g.index, 0),
                )
                for g in gpus
            ]
        except Exception as exc:  # GPU figures are informative; a heartbeat must still go
            log.debug("GPU snapshot for the heartbeat failed: %s", exc)
        instances = self.supervisor.list_instances()
        return Heartbeat(
            pod_id=self.identity.pod_id,
            host=self.identity.address.host,
            port=self.identity.address.port,
            term=self.leadership.term,
            leader=self.leadership.is_leader(self.now()),
            routing_version=self.table.version,
            instances=instances,
            gpus=self._gpus,
            unrouted=self._unrouted({i.id for i in instances}),
            profiles_version=self.profiles_version() if self.profiles_version else None,
        )

    def _unrouted(self, present: set[str]) -> list[str]:
        now = self.now()
        for iid in [i for i, until in self.withdrawn.items() if until < now or i not in present]:
            del self.withdrawn[iid]
        return sorted(self.withdrawn)

    def beat_soon(self) -> None:
        """Send the next heartbeat now (a routing change peers should learn quickly)."""
        if self._driver is not None:
            self._driver.beat_soon()

    async def status(self) -> dict[str, Any]:
        """``GET /api/cluster/status``: this pod's view of the cluster."""
        now = self.now()
        me = await self.local_heartbeat()
        leader = self.leader()
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
        for peer in self.peers.all():
            hb = peer.heartbeat
            last = self.detector.last_heard(peer.pod_id)
            pods.append(
                {
                    "id": peer.pod_id,
                    "address": str(peer.address),
                    "state": self.detector.state(peer.pod_id, now).value,
                    "isLeader": leader == peer.pod_id,
                    "self": False,
                    "term": hb.term if hb else None,
                    "lastSeenSecondsAgo": round(now - last, 3) if last is not None else None,
                    "gpus": [g.model_dump(mode="json") for g in hb.gpus] if hb else [],
                    "instances": [i.model_dump(mode="json") for i in hb.instances] if hb else [],
                }
            )
        return {
            "mode": self.mode.value,
            "podId": self.identity.pod_id,
            "leader": leader,
            "term": self.leadership.term,
            "quorum": self.leadership.quorum if self.active else 1,
            "size": self.cluster_size() if self.active else 1,
            "pods": pods,
            "warnings": self._kube.warnings() if self._kube is not None else [],
        }

    def instances(self) -> list[ModelInstance]:
        """``GET /api/v1/models``: this pod's instances, then each peer's from its last
        heartbeat (no request to any pod), every one stamped with its ``podId``.

        A single node answers its supervisor's list as it is (``podId`` null). The
        instances of a pod the failure detector calls unavailable are left out, as
        its routes are: that heartbeat is too old to describe anything.
        """
        local = self.supervisor.list_instances()
        if not self.active:
            return local
        out = [i.model_copy(update={"pod_id": self.identity.pod_id}) for i in local]
        now = self.now()
        for peer in self.peers.all():
            hb = peer.heartbeat
            if hb is None or self.detector.state(peer.pod_id, now) is PeerState.UNAVAILABLE:
                continue
            out.extend(i.model_copy(update={"pod_id": peer.pod_id}) for i in hb.instances)
        return out

    def peer_gpus(self) -> list[tuple[str, GpuFigures]]:
        """Each other pod's GPUs as its last heartbeat gave them (unavailable pods: none)."""
        now = self.now()
        return [
            (peer.pod_id, g)
            for peer in self.peers.all()
            if peer.heartbeat is not None
            and self.detector.state(peer.pod_id, now) is not PeerState.UNAVAILABLE
            for g in peer.heartbeat.gpus
        ]

    def instance_on(self, pod_id: str, instance_id: str) -> ModelInstance | None:
        """``instance_id`` as ``pod_id`` last described it (this pod: as it is now)."""
        if pod_id == self.identity.pod_id:
            found = [i for i in self.supervisor.list_instances() if i.id == instance_id]
        else:
            peer = self.peers.get(pod_id)
            hb = peer.heartbeat if peer is not None else None
            found = [i for i in (hb.instances if hb else []) if i.id == instance_id]
        return found[0] if found else None

    # ------------------------------------------------------------ messages in
    def heard(self, pod_id: str, address: PeerAddress) -> None:
        """A sign of life from ``pod_id`` (a ping answer, a heartbeat, a reply)."""
        if pod_id == self.identity.pod_id or not self.admits(pod_id):
            return
        self.peers.upsert(pod_id, address)
        while self.peers.replaced:
            gone = self.peers.replaced.pop()
            self.detector.forget(gone)
            self.table.set_remote(gone, [])
            log.warning("cluster: pod %s at %s is now %s", gone, address, pod_id)
        self.detector.heard(pod_id, self.now())

    def on_heartbeat(self, hb: Heartbeat) -> dict[str, Any]:
        """``POST /internal/heartbeat``: record the peer; ack it if it is our leader."""
        now = self.now()
        if hb.pod_id == self.identity.pod_id or not self.admits(hb.pod_id):
            return {"podId": self.identity.pod_id, "term": self.leadership.term, "ack": False}
        self.heard(hb.pod_id, hb.address)
        peer = self.peers.apply(hb)
        key = route_key(hb)
        if key != peer.routes:
            peer.routes = key
            self.table.set_remote(hb.pod_id, remote_endpoints(hb))
        ack = self.leadership.on_heartbeat(hb.pod_id, hb.term, hb.leader, now)
        self.note_leadership()
        return {"podId": self.identity.pod_id, "term": self.leadership.term, "ack": ack}

    async def on_vote(self, candidate: str, term: int) -> dict[str, Any]:
        granted = self.leadership.on_vote_request(candidate, term, self.now())
        if granted:  # one vote per term, also across a restart
            await self.persist()
        return {"podId": self.identity.pod_id, "term": self.leadership.term, "granted": granted}

    def on_prevote(self, candidate: str, term: int) -> dict[str, Any]:
        granted = self.leadership.would_vote(candidate, term, self.now())
        return {"podId": self.identity.pod_id, "term": self.leadership.term, "granted": granted}

    def accepts_order(self, term: int) -> bool:
        """Fencing: refuse a leader order older than the newest term seen here."""
        ok = self.leadership.accepts_order(term)
        self.note_leadership()
        return ok

    # -------------------------------------------------------- leader orders
    async def order(
        self,
        pod_id: str,
        path: str,
        payload: dict[str, Any],
        timeout: float | None = None,  # noqa: ASYNC109 - passed to the HTTP client
    ) -> dict[str, Any]:
        """Run an admin action on another pod through ``/internal``, fenced by our term.

        Only the leader gives orders (409 ``not_leader`` elsewhere, naming the
        leader); an unknown pod is 404, an unavailable one 503; the pod's own
        refusal (409 ``model_does_not_fit``, ...) comes back as it was given.
        """
        if not self.active or self._driver is None:
            raise NotFound(
                f"no pod {pod_id!r}: this node is not in a cluster", code="pod_not_found"
            )
        peer = self.peers.get(pod_id)
        if peer is None:
            raise NotFound(f"no pod {pod_id!r} in this cluster", code="pod_not_found")
        if not self.is_leader():
            raise Conflict(
                f"only the leader gives orders to other pods; the leader is {self.leader()!r}",
                code="not_leader",
            )
        if self.detector.state(pod_id, self.now()) is PeerState.UNAVAILABLE:
            raise Unavailable(f"pod {pod_id!r} is unavailable", code="pod_unavailable")
        import httpx

        try:
            status, data = await self._driver.order(
                peer.address,
                path,
                {**payload, "term": self.leadership.term},
                timeout=timeout or max(30.0, self.settings.cluster_request_timeout_seconds),
            )
        except httpx.HTTPError as exc:
            raise Unavailable(
                f"pod {pod_id!r} did not answer: {exc}", code="pod_unavailable"
            ) from exc
        if status >= 400:
            detail = data.get("detail") if isinstance(data, dict) else None
            code = data.get("code") if isinstance(data, dict) else None
            extra = (
                {k: v for k, v in data.items() if k not in ("detail", "code")}
                if isinstance(data, dict)
                else {}
            )  # e.g. the fit verdict of a model_does_not_fit refusal
            err = SardeenzError(
                f"pod {pod_id}: {detail or status}", code=code or "peer_error", **extra
            )
            err.status = status
            raise err
        if not isinstance(data, dict):
            raise Unavailable(f"pod {pod_id!r} answered no instance", code="pod_unavailable")
        return data

    async def ask(
        self, pod_id: str, method: str, path: str, payload: Any = None
    ) -> dict[str, Any] | None:
        """A signed request to a known pod; its JSON answer, None on any failure."""
        peer = self.peers.get(pod_id)
        if peer is None or self._driver is None:
            return None
        return await self._driver.call(peer.address, method, path, payload)

    async def load_on(self, pod_id: str, req: LoadRequest) -> ModelInstance | None:
        """Load on ``pod_id``; None when that is this pod (the caller loads locally)."""
        if pod_id == self.identity.pod_id:
            return None
        request = req.model_dump(mode="json", exclude={"pod_id"})
        data = await self.order(pod_id, "/internal/models/load", {"request": request})
        return ModelInstance.model_validate({**data, "podId": pod_id})

    def owner_of(self, instance_id: str) -> str | None:
        """The pod whose last heartbeat listed ``instance_id`` (None: local or unknown)."""
        if not self.active or any(i.id == instance_id for i in self.supervisor.list_instances()):
            return None
        for peer in self.peers.all():
            hb = peer.heartbeat
            if hb is not None and any(i.id == instance_id for i in hb.instances):
                return peer.pod_id
        return None

    async def act_on(self, instance_id: str, action: str, level: int = 1) -> ModelInstance | None:
        """Unload/sleep/wake an instance another pod runs; None when it is not remote."""
        owner = self.owner_of(instance_id)
        if owner is None:
            return None
        data = await self.order(owner, f"/internal/models/{instance_id}/{action}", {"level": level})
        return ModelInstance.model_validate({**data, "podId": owner})

    def admits(self, pod_id: str) -> bool:
        """Static: anyone with the secret; Kubernetes: the Ready pods the watch reports
        (kube_discovery.py's ``Membership`` keeps ``members``)."""
        return self.members is None or pod_id in self.members

    # -------------------------------------------------------------- upkeep
    def expire_routes(self) -> None:
        """Remove the routes of pods the failure detector calls unavailable."""
        now = self.now()
        for peer in self.peers.all():
            if peer.routes and self.detector.state(peer.pod_id, now) is PeerState.UNAVAILABLE:
                peer.routes = ()
                self.table.set_remote(peer.pod_id, [])
                log.warning("cluster: pod %s is unavailable; its routes are removed", peer.pod_id)

    def note_leadership(self) -> None:
        """Log leadership changes (once each)."""
        now = self.now()
        self.leadership.size = self.cluster_size()
        self.leadership.tick(now)
        current = (self.leadership.current_leader(now), self.leadership.term)
        if current != self._last_leader:
            self._last_leader = current
            leader, term = current
            if leader is None:
                log.log(
                    logging.WARNING if term else logging.INFO, "cluster: no leader (term %d)", term
                )
            elif leader == self.identity.pod_id:
                log.warning("cluster: this pod leads (term %d)", term)
            else:
                log.info("cluster: leader is %s (term %d)", leader, term)

    async def persist(self) -> None:
        """Write (term, voted_for) before a vote is answered or asked for."""
        e = self.election
        await asyncio.to_thread(_write_state, self._state_file, e.term, e.voted_for)


def _read_state(path: Path) -> tuple[int, str | None] | None:
    try:
        data = json.loads(path.read_text())
        term = int(data["term"])
        voted = data.get("votedFor")
        return term, voted if isinstance(voted, str) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_state(path: Path, term: int, voted_for: str | None) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"term": term, "votedFor": voted_for}))
    tmp.replace(path)
