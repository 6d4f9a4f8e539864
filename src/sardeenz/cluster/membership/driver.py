"""The static-mode driver: one task that moves the cluster's messages.

Every ``tick`` (a fraction of the heartbeat interval) it may

* ping the configured peers it has no live pod for (``routes.PING``, every
  ``SARDEENZ_CLUSTER_PING_INTERVAL_SECONDS``; a peer that does not answer is
  retried with exponential backoff up to that interval);
* send its heartbeat to every known pod (``/internal/heartbeat``, every
  ``SARDEENZ_CLUSTER_HEARTBEAT_INTERVAL_SECONDS``); replies are acks that
  renew a leader's lease;
* step down, expire routes of unavailable pods, and stand for election when
  the Bully rule says so (``/internal/election/vote`` to the healthy pods).

Every remote call goes through the pod client (cluster/transport/client.py):
signed, with a timeout (``SARDEENZ_CLUSTER_REQUEST_TIMEOUT_SECONDS``) and a
backoff per route and address. The task is owned by Membership,
which cancels it on shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import TYPE_CHECKING

import orjson

from sardeenz.cluster.identity import PeerAddress
from sardeenz.cluster.membership.election import PeerState
from sardeenz.cluster.membership.peers import Peer
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.client import PodClient
from sardeenz.tasks import stop_task

if TYPE_CHECKING:
    from sardeenz.cluster.membership.service import Membership

log = logging.getLogger(__name__)


class ClusterDriver:
    def __init__(self, membership: Membership, client: PodClient) -> None:
        self._m = membership
        self._client = client
        s = membership.settings
        self._ping_every = s.cluster_ping_interval_seconds
        self._beat_every = s.cluster_heartbeat_interval_seconds
        self._tick = min(0.25, self._beat_every / 4)
        self._task: asyncio.Task[None] | None = None
        self._next_stand = 0.0
        self._beat_soon = False

    def beat_soon(self) -> None:
        """Heartbeat on the next tick instead of at the interval."""
        self._beat_soon = True

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sardeenz-cluster")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    # ------------------------------------------------------------------ loop
    async def _run(self) -> None:
        m = self._m
        next_ping = next_beat = 0.0
        while True:
            try:
                now = m.now()
                if now >= next_ping:
                    next_ping = now + self._ping_every
                    await self._ping_round(force=True)
                else:
                    await self._ping_round(force=False)
                now = m.now()
                if now >= next_beat or self._beat_soon:
                    self._beat_soon = False
                    next_beat = now + self._beat_every
                    await self._heartbeat_round()
                m.note_leadership()
                m.expire_routes()
                healthy = m.detector.healthy(m.now()) & m.peers.ids()
                bully = m.leadership is m.election  # Kubernetes mode: the Lease elects
                stand = bully and m.now() >= self._next_stand
                if stand and m.election.should_stand(m.now(), healthy):
                    if await self._stand(healthy):
                        next_beat = m.now() + self._beat_every
                        await self._heartbeat_round()  # tell everyone at once
                    else:  # refused: retry after a random pause, not every tick
                        self._next_stand = m.now() + self._beat_every * (1 + random.random())
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not end the cluster
                log.exception("cluster round failed")
            await asyncio.sleep(self._tick)

    # -------------------------------------------------------------- messages
    async def _ping_round(self, *, force: bool) -> None:
        """Ping configured peers that have no live pod (and are not backing off)."""
        m = self._m
        now = m.now()
        due = []
        for address in m.seeds:
            pod = m.peers.pod_at(address)
            live = pod is not None and m.detector.state(pod, now) is not PeerState.UNAVAILABLE
            if live or not self._client.due(routes.PING, address):
                continue
            if force or pod is None:
                due.append(address)
        if due:
            await asyncio.gather(*(self._ping(a) for a in due))

    async def _ping(self, address: PeerAddress) -> None:
        m = self._m
        data = await self._client.call_at(address, routes.PING)
        if data is None or not isinstance(data.get("podId"), str):
            return
        pod_id = data["podId"]
        if pod_id == m.identity.pod_id:  # CLUSTER_PEERS names us under another address
            m.seeds = [s for s in m.seeds if s != address]
            return
        m.heard(pod_id, address)

    async def _heartbeat_round(self) -> None:
        m = self._m
        hb = await m.local_heartbeat()
        # Encoded once for every peer (the same bytes go to each; only the signature differs).
        payload = orjson.dumps(hb.model_dump(mode="json"))
        sent_at = m.now()
        due = self._client.due
        targets = [p for p in m.peers.all() if due(routes.HEARTBEAT, p.address)]
        if targets:
            await asyncio.gather(*(self._beat(p, payload, sent_at) for p in targets))

    async def _beat(self, peer: Peer, payload: bytes, sent_at: float) -> None:
        m = self._m
        address = peer.address
        data = await self._client.call_at(address, routes.HEARTBEAT, payload, pod_id=peer.pod_id)
        if data is None:
            return
        pod_id, term = data.get("podId"), data.get("term")
        if not isinstance(pod_id, str) or not isinstance(term, int):
            return
        m.heard(pod_id, address)
        m.leadership.on_heartbeat_reply(pod_id, term, data.get("ack") is True, sent_at)

    async def _prevote(self, peers: list[Peer]) -> bool:
        """Would a quorum vote for us in the next term? Nobody changes state to answer."""
        m = self._m
        body = {"candidate": m.identity.pod_id, "term": m.election.term + 1}

        async def ask(peer: Peer) -> bool:
            data = await self._client.call_at(
                peer.address, routes.PREVOTE, body, pod_id=peer.pod_id
            )
            if data is None or not isinstance(data.get("term"), int):
                return False
            m.election.observe_term(data["term"])  # a real term we are behind on
            return data.get("granted") is True

        results = await asyncio.gather(*(ask(p) for p in peers))
        return 1 + sum(results) >= m.election.quorum

    async def _stand(self, healthy: set[str]) -> bool:
        """Run one election round; True if this pod won it."""
        m = self._m
        peers = [p for p in m.peers.all() if p.pod_id in healthy]
        if not await self._prevote(peers):
            return False
        now = m.now()
        if not m.election.should_stand(now, m.detector.healthy(now) & m.peers.ids()):
            return False  # a leader made itself heard meanwhile
        term = m.election.start_election(now)
        await m.persist()
        log.info("cluster: standing for election in term %d", term)
        if m.election.is_leader(now):
            m.note_leadership()
            return True
        body = {"candidate": m.identity.pod_id, "term": term}

        async def ask(peer: Peer) -> bool:
            data = await self._client.call_at(peer.address, routes.VOTE, body, pod_id=peer.pod_id)
            if data is None:
                return False
            pod_id, their_term = data.get("podId"), data.get("term")
            if not isinstance(pod_id, str) or not isinstance(their_term, int):
                return False
            return m.election.on_vote_reply(
                pod_id, their_term, data.get("granted") is True, sent_at=now
            )

        results = await asyncio.gather(*(ask(p) for p in peers))
        m.note_leadership()
        return any(results) and m.election.is_leader(m.now())
