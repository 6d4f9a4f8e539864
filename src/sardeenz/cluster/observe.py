"""Cluster-wide observability: each pod pulls the others' request log, off the hot path.

Why pull, and why every pod: a ``/v1`` request must never wait for another pod to
hear about it, so nothing is sent per request. Instead one task per pod (owned here,
started with the cluster, cancelled on shutdown) asks every other pod, every
``SARDEENZ_CLUSTER_COLLECT_INTERVAL_SECONDS``, for its records past the cursor it
holds for that pod (``POST /internal/requests/pull``, signed like every internal
call, with the cluster request timeout), plus its usage counters and requests in
flight. Every pod collecting means every pod has the whole cluster's log: a
follower's Requests page, a new leader after a failover and a pod reading its own
records all see the same book, and a pod that dies keeps its collected records on
every other pod.

A pod that does not answer is retried with exponential backoff (one interval,
doubling, up to ``MAX_BACKOFF_SECONDS``); its records stay, its in-flight count is
dropped. An answer that says ``more`` is followed at once by the next pull.
The cursor and dedup rules are the book's (telemetry/requestbook.py).

Why not every pod every interval: an idle cluster would pay a signed call per pair
of pods per interval for answers that say nothing new (a 20-pod cluster: as many
calls as its heartbeats). Every answer carries the version of what it says, and
every heartbeat the version of what a pull would say now (proxy/history.py
``pull_version``: records, usage and requests in flight; equal versions, equal
answers). A pod whose heartbeat advertises the version the collector already holds
is not asked; one whose version moved is asked at the next tick (a quarter of the
interval) once an interval has passed since its last pull, so new records still
arrive within about a heartbeat interval of being made, and a busy pod is pulled
every interval as before. Every pod is asked at least every ``QUIET_PULL_SECONDS``
whatever its heartbeats say, and a pod whose heartbeats carry no version (an older
one) every interval.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable
from typing import Any, Final

from pydantic import BaseModel, Field

from sardeenz.cluster.membership.election import PeerState
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler, InternalRequest
from sardeenz.proxy.history import RequestHistory
from sardeenz.tasks import stop_task

log = logging.getLogger(__name__)

MAX_BACKOFF_SECONDS: Final = 30.0
MAX_PULLS_PER_ROUND: Final = 10
"""Pulls in a row from one pod that says ``more`` (a backlog), before the next round."""
TICKS_PER_INTERVAL: Final = 4
"""Rounds per collect interval: how soon after a heartbeat that says there is something
new the pull goes (a round that asks nobody costs a loop over the peers)."""
QUIET_PULL_SECONDS: Final = 30.0
"""A pod is pulled at least this often even while its heartbeats say nothing changed."""


def pull_due(advertised: str | None, held: str | None, since_pull: float, interval: float) -> bool:
    """Whether to pull a pod now: ``advertised`` is its last heartbeat's request-log
    version, ``held`` the version of the last answer taken from it (None: none, or it
    ended with more to come), ``since_pull`` the seconds since that pull."""
    if since_pull < interval:
        return False
    if since_pull >= QUIET_PULL_SECONDS or advertised is None or held is None:
        return True
    return advertised != held


class PullRequest(BaseModel):
    epoch: str = Field("", max_length=32)
    seq: int = Field(0, ge=0)


class Backoff:
    """Per-pod retry schedule: skip ``2**(n-1)`` rounds after ``n`` failures, capped."""

    def __init__(self, interval: float, cap: float = MAX_BACKOFF_SECONDS) -> None:
        self._interval = interval
        self._cap = cap
        self._fails: dict[str, int] = {}
        self._next: dict[str, float] = {}

    def due(self, pod: str, now: float) -> bool:
        return now >= self._next.get(pod, 0.0)

    def failed(self, pod: str, now: float) -> float:
        n = self._fails.get(pod, 0) + 1
        self._fails[pod] = n
        wait = float(min(self._cap, self._interval * 2 ** (n - 1)))
        self._next[pod] = now + wait
        return wait

    def ok(self, pod: str) -> None:
        self._fails.pop(pod, None)
        self._next.pop(pod, None)


class RequestCollector:
    """The pulling task (client side) and the answer to a pull (server side)."""

    def __init__(
        self,
        membership: Membership,
        interval: float,
        history: RequestHistory,
        in_flight: Callable[[], dict[str, int]],
    ) -> None:
        self._m = membership
        self._history = history
        self._in_flight = in_flight
        self.interval = interval
        self._backoff = Backoff(self.interval)
        self._task: asyncio.Task[None] | None = None
        self._held: dict[str, str | None] = {}
        """Pod -> the version of the last answer taken from it (``pull_due``)."""
        self._pulled_at: dict[str, float] = {}
        """Pod -> when it last answered (membership's clock)."""

    # ------------------------------------------------------------ server side
    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        return [(routes.REQUESTS_PULL, self.answer)]

    def version(self) -> str:
        """What a pull would answer now, digested: every heartbeat carries it."""
        return self._history.pull_version(self._in_flight())

    async def answer(self, request: InternalRequest) -> dict[str, Any]:
        """``POST /internal/requests/pull``: this pod's records after the asker's cursor."""
        ask = request.parse(PullRequest)
        return await self._history.pull_answer(ask.epoch, ask.seq, self._in_flight())

    # ------------------------------------------------------------ client side
    def start(self) -> None:
        if self._m.active and self._task is None:
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name="request-collector"
            )

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def collect_once(self) -> int:
        """One round: every reachable pod once (more while it has a backlog)."""
        m = self._m
        now = m.now()
        new = 0
        for peer in m.peers.all():
            pod = peer.pod_id
            if m.detector.state(pod, now) is PeerState.UNAVAILABLE:
                self._history.book.forget_in_flight(pod)
                self._held.pop(pod, None)  # what is held is no longer its last answer
                continue
            if not self._backoff.due(pod, now):
                continue
            advertised = peer.heartbeat.request_log_version if peer.heartbeat else None
            since = now - self._pulled_at.get(pod, -math.inf)
            if not pull_due(advertised, self._held.get(pod), since, self.interval):
                continue
            try:
                new += await self._pull(pod)
            except Exception as exc:  # one pod's bad answer must not stop the others'
                self._history.book.forget_in_flight(pod)
                self._held.pop(pod, None)
                wait = self._backoff.failed(pod, m.now())
                log.debug("request collector: pod %s: %s; next try in %.0f s", pod, exc, wait)
            else:
                self._backoff.ok(pod)
                self._pulled_at[pod] = now
        return new

    async def _pull(self, pod: str) -> int:
        book = self._history.book
        new = 0
        for _ in range(MAX_PULLS_PER_ROUND):
            cursor = book.cursor(pod)
            data = await self._m.client_for(pod).ask(
                pod, routes.REQUESTS_PULL, {"epoch": cursor.epoch, "seq": cursor.seq}
            )
            if data is None:
                raise ConnectionError("no answer")
            epoch = str(data.get("epoch", ""))
            rows = data.get("records")
            usage = data.get("usage")
            flight = data.get("inFlight")
            if not isinstance(rows, list) or not isinstance(usage, list):
                raise ValueError("answer without records or usage")
            new += await self._history.accept(pod, epoch, rows)
            book.set_usage(
                pod,
                epoch,
                [
                    (str(r[0]), str(r[1]), int(r[2]), int(r[3]), int(r[4]))
                    for r in usage
                    if isinstance(r, list) and len(r) == 5
                ],
                {str(k): int(v) for k, v in flight.items()} if isinstance(flight, dict) else {},
            )
            more = bool(data.get("more"))
            version = data.get("version")
            # held only for a complete answer: with more to come, the next round asks
            self._held[pod] = version if isinstance(version, str) and not more else None
            if not more:
                break
        return new

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval / TICKS_PER_INTERVAL)
            try:
                await self.collect_once()
            except Exception:  # the loop must outlive any one round
                log.warning("request collector: a round failed", exc_info=True)
