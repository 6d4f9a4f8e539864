"""Membership: who is in the cluster, who leads, in which term (both modes, one interface).

Single-node mode (no ``CLUSTER_PEERS``): ``active`` is False, ``start()``
creates nothing, this pod leads itself.

Static mode: ``start()`` starts one task (membership/driver.py) that finds the
peers, exchanges heartbeats and runs the election; the ``/internal`` routes of
``internal_routes()`` (ping, heartbeat, state, pre-vote, vote) call the
``on_*`` methods here. The election and failure detector are pure
(membership/election.py): this class feeds them messages with the monotonic
clock.

Kubernetes mode (membership/kube.py): the same heartbeat driver (no pings, no
votes), while the pod watch says who the peers are (``members``) and the
Lease says who leads (``leadership`` is a kube_lease.py ``LeaseElection``).

What membership does not know, it is given: the heartbeat this pod sends (a
:data:`HeartbeatSource`, built from the node's state elsewhere) and where the
routes its peers' heartbeats announce go (a :class:`RouteListener`, the
routing table's remote part). It owns the signed pod client (cluster/transport)
and is its directory, so membership and transport never import a feature.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import BaseModel, Field

from sardeenz.cluster.identity import ClusterMode, Identity, PeerAddress, is_self, parse_peers
from sardeenz.cluster.membership.election import Election, FailureDetector, PeerState, Timing
from sardeenz.cluster.membership.leadership import Leadership
from sardeenz.cluster.membership.peers import Heartbeat, PeerStore
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.client import PodClient
from sardeenz.cluster.transport.server import Handler, InternalRequest
from sardeenz.config import Settings
from sardeenz.errors import NotFound
from sardeenz.security.cluster_hmac import Signer, Verifier
from sardeenz.tasks import await_within

if TYPE_CHECKING:
    from sardeenz.cluster.membership.driver import ClusterDriver
    from sardeenz.cluster.membership.kube import KubeCluster
    from sardeenz.cluster.membership.kube_api import KubeApi

log = logging.getLogger(__name__)

HeartbeatSource = Callable[[int, bool], Awaitable[Heartbeat]]
"""This pod's heartbeat as it is now (its instances, GPUs, routing version...), given the
term and whether this pod leads (membership owns both; cluster/local_pod.py builds the rest)."""


class RouteListener(Protocol):
    """Where the routes peers announce go (the routing table's remote endpoints)."""

    def peer_heartbeat(self, hb: Heartbeat) -> None:
        """``hb``'s pod serves what it lists (replaces that pod's routes if they changed)."""

    def peer_gone(self, pod_id: str) -> bool:
        """``pod_id`` serves nothing now; True if it had routes."""


class _Vote(BaseModel):
    candidate: str = Field(min_length=1, max_length=253)
    term: int = Field(ge=1)


class Membership:
    def __init__(
        self,
        settings: Settings,
        mode: ClusterMode,
        identity: Identity,
        heartbeat: HeartbeatSource,
        routes: RouteListener,
    ) -> None:
        self.settings = settings
        self.mode = mode
        self.active = mode is not ClusterMode.SINGLE
        self.identity = identity
        self._heartbeat = heartbeat
        self._routes = routes
        self.timing = Timing(
            suspect_after=settings.cluster_suspect_after_seconds,
            unavailable_after=settings.cluster_unavailable_after_seconds,
            candidacy_timeout=settings.cluster_request_timeout_seconds * 1.5,
        )
        self.election = Election(identity.pod_id, self.timing)
        """Static mode's Bully state (its driver stands, votes and persists with it)."""
        self.leadership: Leadership = self.election
        """Who leads and the fencing term, whichever mode elects."""
        self.members: set[str] | None = None
        """Kubernetes mode: the Ready pods the watch reports; only they are peers.
        None (static mode): any pod with the secret that makes itself heard."""
        if mode is ClusterMode.KUBERNETES:
            from sardeenz.cluster.membership.kube_api import lease_timing
            from sardeenz.cluster.membership.kube_lease import LeaseElection

            self.leadership = LeaseElection(identity.pod_id, lease_timing(settings))
            self.members = set()
        self.detector = FailureDetector(self.timing)
        self.peers = PeerStore()
        self.seeds: list[PeerAddress] = []
        self.signer: Signer | None = None
        self.verifier: Verifier | None = None
        self.client: PodClient | None = None
        """The signed client to other pods (cluster/transport); None on a single node."""
        if self.active:
            self.seeds = [
                p for p in parse_peers(settings.cluster_peers) if not is_self(p, identity, settings)
            ]
            secret = settings.cluster_secret.get_secret_value().encode()
            previous = settings.cluster_secret_previous.get_secret_value().encode()
            unsourced = settings.cluster_unsourced_signatures  # a rolling upgrade only
            self.signer = Signer(secret, source=identity.pod_id, unsourced=unsourced)
            self.verifier = Verifier(
                [secret, previous], me=identity.pod_id, accept_unsourced=unsourced
            )
            self.client = PodClient(
                self.signer,
                self,
                timeout=settings.cluster_request_timeout_seconds,
                order_timeout=max(30.0, settings.cluster_request_timeout_seconds),
                backoff_base=settings.cluster_heartbeat_interval_seconds,
                backoff_cap=settings.cluster_ping_interval_seconds,
            )
        self._state_file = settings.data_dir / "cluster-election.json"
        self._driver: ClusterDriver | None = None
        self._kube: KubeCluster | None = None
        self._last_leader: tuple[str | None, int] = (None, 0)
        self._news = asyncio.Event()
        """Set (and replaced) at each sign of life of any peer."""

    # ------------------------------------------------------------- lifecycle
    async def start(self) -> None:
        if not self.active or self.client is None:
            return
        from sardeenz.cluster.membership.driver import ClusterDriver

        await self.client.start()
        if self.mode is ClusterMode.KUBERNETES:
            from sardeenz.cluster.membership.kube import KubeCluster  # only Kubernetes pays
            from sardeenz.cluster.membership.kube_lease import LeaseElection

            assert isinstance(self.leadership, LeaseElection)
            self._kube = KubeCluster(self, self.leadership)
            await self._kube.start()
            self._driver = ClusterDriver(self, self.client)
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
        self._driver = ClusterDriver(self, self.client)
        self._driver.start()

    async def stop(self) -> None:
        kube, self._kube = self._kube, None
        if kube is not None:  # first: the leader hands the Lease back while peers still hear it
            await kube.stop()
        driver, self._driver = self._driver, None
        if driver is not None:
            await driver.stop()
        if self.client is not None:
            await self.client.close()

    # --------------------------------------------------------------- queries
    @staticmethod
    def now() -> float:
        return time.monotonic()

    @property
    def me(self) -> str:
        return self.identity.pod_id

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

    def current_term(self) -> int:
        return self.leadership.term

    def address_of(self, pod_id: str) -> PeerAddress | None:
        peer = self.peers.get(pod_id)
        return peer.address if peer is not None else None

    def state_of(self, pod_id: str) -> PeerState:
        """The failure detector's verdict (this pod: healthy)."""
        if pod_id == self.identity.pod_id:
            return PeerState.HEALTHY
        return self.detector.state(pod_id, self.now())

    def reachable(self, pod_id: str) -> bool:
        """False while the failure detector calls ``pod_id`` unavailable."""
        return self.state_of(pod_id) is not PeerState.UNAVAILABLE

    async def first_heard(
        self,
        pod_id: str,
        timeout: float,  # noqa: ASYNC109
        *,
        silent_too: bool = False,
    ) -> bool:
        """``reachable``, waiting for a member never heard from yet (PodDirectory says why),
        and with ``silent_too`` for one heard before and silent since as well.

        The wait is bounded by the failure detector's own unavailable time too: a pod
        discovered that long ago and still silent is unavailable by the detector's rule,
        and a pod silent that much longer again is taken for dead.
        """
        known = self.peers.get(pod_id) is not None
        heard_before = self.detector.last_heard(pod_id) is not None
        if self.reachable(pod_id) or not known or (heard_before and not silent_too):
            return self.reachable(pod_id)
        deadline = self.now() + min(timeout, self.timing.unavailable_after)
        while not self.reachable(pod_id):
            left = deadline - self.now()
            if left <= 0 or self.peers.get(pod_id) is None:
                return False
            with contextlib.suppress(TimeoutError):
                await await_within(self._news.wait(), left)
        return True

    def client_for(self, pod_id: str) -> PodClient:
        """The pod client, to reach ``pod_id`` (404 ``pod_not_found`` on a single node)."""
        if self.client is None:
            raise NotFound(
                f"no pod {pod_id!r}: this node is not in a cluster", code="pod_not_found"
            )
        return self.client

    def warnings(self) -> list[str]:
        return self._kube.warnings() if self._kube is not None else []

    def kube_api(self) -> KubeApi | None:
        """Kubernetes mode, once started: the API client (None otherwise)."""
        return self._kube.api if self._kube is not None else None

    async def local_heartbeat(self) -> Heartbeat:
        return await self._heartbeat(self.leadership.term, self.leadership.is_leader(self.now()))

    def ping(self) -> dict[str, Any]:
        return {
            "podId": self.identity.pod_id,
            "host": self.identity.address.host,
            "port": self.identity.address.port,
            "term": self.leadership.term,
            "leader": self.leader(),
        }

    def beat_soon(self) -> None:
        """Send the next heartbeat now (a routing change peers should learn quickly)."""
        if self._driver is not None:
            self._driver.beat_soon()

    # ------------------------------------------------------------ messages in
    def heard(self, pod_id: str, address: PeerAddress) -> None:
        """A sign of life from ``pod_id`` (a ping answer, a heartbeat, a reply)."""
        if pod_id == self.identity.pod_id or not self.admits(pod_id):
            return
        self.peers.upsert(pod_id, address)
        self.forget_replaced(pod_id, address)
        self.detector.heard(pod_id, self.now())
        news, self._news = self._news, asyncio.Event()
        news.set()  # wakes whoever waits for a first sign of life (first_heard)

    def forget_replaced(self, pod_id: str, address: PeerAddress) -> None:
        """Pods the peer store replaced (``pod_id`` is at their address now) serve nothing."""
        while self.peers.replaced:
            gone = self.peers.replaced.pop()
            self.detector.forget(gone)
            self._routes.peer_gone(gone)
            log.warning("cluster: pod %s at %s is now %s", gone, address, pod_id)

    def forget(self, pod_id: str) -> bool:
        """``pod_id`` left (Kubernetes: deleted or not Ready): gone at once, routes too."""
        if self.peers.remove(pod_id) is None:
            return False
        self.detector.forget(pod_id)
        self._routes.peer_gone(pod_id)
        return True

    def on_heartbeat(self, hb: Heartbeat) -> dict[str, Any]:
        """``POST /internal/heartbeat``: record the peer; ack it if it is our leader."""
        now = self.now()
        if hb.pod_id == self.identity.pod_id or not self.admits(hb.pod_id):
            return {"podId": self.identity.pod_id, "term": self.leadership.term, "ack": False}
        self.heard(hb.pod_id, hb.address)
        self.peers.apply(hb)
        self._routes.peer_heartbeat(hb)
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

    def admits(self, pod_id: str) -> bool:
        """Static: anyone with the secret; Kubernetes: the Ready pods the watch reports
        (kube_discovery.py's ``PodMembers`` keeps ``members``)."""
        return self.members is None or pod_id in self.members

    def internal_routes(
        self, status: Callable[[], Awaitable[dict[str, Any]]]
    ) -> list[tuple[routes.InternalRoute, Handler]]:
        """Ping, heartbeat, pre-vote, vote; and ``state`` (``status``: the pod's full view)."""

        async def vote(request: InternalRequest) -> dict[str, Any]:
            v = request.parse(_Vote)
            request.check_sender(v.candidate)
            return await self.on_vote(v.candidate, v.term)

        def prevote(request: InternalRequest) -> dict[str, Any]:
            v = request.parse(_Vote)
            request.check_sender(v.candidate)
            return self.on_prevote(v.candidate, v.term)

        def heartbeat(request: InternalRequest) -> dict[str, Any]:
            hb = request.parse(Heartbeat)
            request.check_sender(hb.pod_id)
            return self.on_heartbeat(hb)

        return [
            (routes.PING, lambda _: self.ping()),
            (routes.HEARTBEAT, heartbeat),
            (routes.STATE, lambda _: status()),
            (routes.PREVOTE, prevote),
            (routes.VOTE, vote),
        ]

    # -------------------------------------------------------------- upkeep
    def expire_routes(self) -> None:
        """Remove the routes of pods the failure detector calls unavailable."""
        now = self.now()
        for peer in self.peers.all():
            unavailable = self.detector.state(peer.pod_id, now) is PeerState.UNAVAILABLE
            if unavailable and self._routes.peer_gone(peer.pod_id):
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
