"""The static-mode driver: one task that moves the cluster's messages.

Every ``tick`` (a fraction of the heartbeat interval) it may

* ping the configured peers it has no live pod for (``/internal/ping``, every
  ``SARDEENZ_CLUSTER_PING_INTERVAL_SECONDS``; a peer that does not answer is
  retried with exponential backoff up to that interval);
* send its heartbeat to every known pod (``/internal/heartbeat``, every
  ``SARDEENZ_CLUSTER_HEARTBEAT_INTERVAL_SECONDS``); replies are acks that
  renew a leader's lease;
* step down, expire routes of unavailable pods, and stand for election when
  the Bully rule says so (``/internal/election/vote`` to the healthy pods).

Every remote call has a timeout (``SARDEENZ_CLUSTER_REQUEST_TIMEOUT_SECONDS``)
and goes through one pooled ``httpx.AsyncClient``. The task is owned by the
ClusterManager, which cancels it on shutdown.
"""

from __future__ import annotations

import asyncio
import logging
import random
from typing import TYPE_CHECKING, Any

import httpx
import orjson

from sardeenz.cluster.election import PeerState
from sardeenz.cluster.identity import PeerAddress
from sardeenz.tasks import stop_task

if TYPE_CHECKING:
    from sardeenz.cluster.manager import ClusterManager

log = logging.getLogger(__name__)


class _Backoff:
    """Per-address retry schedule: 1, 2, 4, ... ticks up to ``cap`` seconds."""

    def __init__(self, base: float, cap: float) -> None:
        self._base = base
        self._cap = cap
        self._next: dict[PeerAddress, float] = {}
        self._fails: dict[PeerAddress, int] = {}

    def due(self, address: PeerAddress, now: float) -> bool:
        return now >= self._next.get(address, 0.0)

    def failed(self, address: PeerAddress, now: float) -> None:
        n = self._fails.get(address, 0) + 1
        self._fails[address] = n
        self._next[address] = now + min(self._cap, self._base * 2 ** (n - 1))

    def ok(self, address: PeerAddress) -> None:
        self._fails.pop(address, None)
        self._next.pop(address, None)


class ClusterDriver:
    def __init__(self, manager: ClusterManager) -> None:
        self._m = manager
        s = manager.settings
        self._ping_every = s.cluster_ping_interval_seconds
        self._beat_every = s.cluster_heartbeat_interval_seconds
        self._timeout = s.cluster_request_timeout_seconds
        self._tick = min(0.25, self._beat_every / 4)
        self._ping_backoff = _Backoff(self._beat_every, self._ping_every)
        self._beat_backoff = _Backoff(self._beat_every, self._ping_every)
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._next_stand = 0.0
        self._beat_soon = False

    def beat_soon(self) -> None:
        """Heartbeat on the next tick instead of at the interval."""
        self._beat_soon = True

    def start(self) -> None:
        # httpx logs every request at INFO: a heartbeat every 2 s to every peer would
        # drown the log (no per-request logging at INFO, DESIGN.md).
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(self._timeout),
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
            trust_env=False,  # peers are direct: no HTTP(S)_PROXY detour for /internal
        )
        self._task = asyncio.get_running_loop().create_task(self._run(), name="sardeenz-cluster")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

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
    async def call(
        self, address: PeerAddress, method: str, path: str, payload: Any = None
    ) -> dict[str, Any] | None:
        """A signed request to a peer; its JSON answer, or None on any failure."""
        return await self._call(address, method, path, payload)

    async def _call(
        self, address: PeerAddress, method: str, path: str, payload: Any = None
    ) -> dict[str, Any] | None:
        """A signed request; the JSON answer, or None on any failure (logged at debug)."""
        client, signer = self._client, self._m.signer
        assert client is not None
        assert signer is not None
        body = orjson.dumps(payload) if payload is not None else b""
        headers = signer.headers(method, path, body)
        if body:
            headers["Content-Type"] = "application/json"
        try:
            resp = await client.request(method, address.url + path, content=body, headers=headers)
        except (httpx.HTTPError, OSError) as exc:
            log.debug("cluster: %s %s%s failed: %s", method, address, path, exc)
            return None
        if resp.status_code != 200:
            log.warning(
                "cluster: %s %s%s answered %d: %s",
                method,
                address,
                path,
                resp.status_code,
                resp.text[:200],
            )
            return None
        try:
            data = resp.json()
        except ValueError:
            return None
        return data if isinstance(data, dict) else None

    async def order(
        self,
        address: PeerAddress,
        path: str,
        payload: Any,
        timeout: float,  # noqa: ASYNC109 - httpx's own per-request timeout
    ) -> tuple[int, Any]:
        """A signed leader order: (status, JSON answer); raises httpx.HTTPError."""
        client, signer = self._client, self._m.signer
        assert client is not None
        assert signer is not None
        body = orjson.dumps(payload)
        headers = {**signer.headers("POST", path, body), "Content-Type": "application/json"}
        resp = await client.post(address.url + path, content=body, headers=headers, timeout=timeout)
        try:
            return resp.status_code, resp.json()
        except ValueError:
            return resp.status_code, {"detail": resp.text[:200], "code": "bad_peer_answer"}

    async def _ping_round(self, *, force: bool) -> None:
        """Ping configured peers that have no live pod (and are not backing off)."""
        m = self._m
        now = m.now()
        due = []
        for address in m.seeds:
            pod = m.peers.pod_at(address)
            live = pod is not None and m.detector.state(pod, now) is not PeerState.UNAVAILABLE
            if live or not self._ping_backoff.due(address, now):
                continue
            if force or pod is None:
                due.append(address)
        if due:
            await asyncio.gather(*(self._ping(a) for a in due))

    async def _ping(self, address: PeerAddress) -> None:
        m = self._m
        data = await self._call(address, "GET", "/internal/ping")
        if data is None or not isinstance(data.get("podId"), str):
            self._ping_backoff.failed(address, m.now())
            return
        self._ping_backoff.ok(address)
        pod_id = data["podId"]
        if pod_id == m.identity.pod_id:  # CLUSTER_PEERS names us under another address
            m.seeds = [s for s in m.seeds if s != address]
            return
        m.heard(pod_id, address)

    async def _heartbeat_round(self) -> None:
        m = self._m
        hb = await m.local_heartbeat()
        payload = hb.model_dump(mode="json")
        sent_at = m.now()
        targets = [p.address for p in m.peers.all() if self._beat_backoff.due(p.address, sent_at)]
        if targets:
            await asyncio.gather(*(self._beat(a, payload, sent_at) for a in targets))

    async def _beat(self, address: PeerAddress, payload: Any, sent_at: float) -> None:
        m = self._m
        data = await self._call(address, "POST", "/internal/heartbeat", payload)
        if data is None:
            self._beat_backoff.failed(address, m.now())
            return
        self._beat_backoff.ok(address)
        pod_id, term = data.get("podId"), data.get("term")
        if not isinstance(pod_id, str) or not isinstance(term, int):
            return
        m.heard(pod_id, address)
        m.leadership.on_heartbeat_reply(pod_id, term, data.get("ack") is True, sent_at)

    async def _prevote(self, peers: list[Any]) -> bool:
        """Would a quorum vote for us in the next term? Nobody changes state to answer."""
        m = self._m
        body = {"candidate": m.identity.pod_id, "term": m.election.term + 1}

        async def ask(address: PeerAddress) -> bool:
            data = await self._call(address, "POST", "/internal/election/prevote", body)
            if data is None or not isinstance(data.get("term"), int):
                return False
            m.election.observe_term(data["term"])  # a real term we are behind on
            return data.get("granted") is True

        results = await asyncio.gather(*(ask(p.address) for p in peers))
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

        async def ask(address: PeerAddress) -> bool:
            data = await self._call(address, "POST", "/internal/election/vote", body)
            if data is None:
                return False
            pod_id, their_term = data.get("podId"), data.get("term")
            if not isinstance(pod_id, str) or not isinstance(their_term, int):
                return False
            return m.election.on_vote_reply(
                pod_id, their_term, data.get("granted") is True, sent_at=now
            )

        results = await asyncio.gather(*(ask(p.address) for p in peers))
        m.note_leadership()
        return any(results) and m.election.is_leader(m.now())
