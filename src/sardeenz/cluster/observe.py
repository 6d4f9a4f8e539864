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
"""

from __future__ import annotations

import asyncio
import logging
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

    # ------------------------------------------------------------ server side
    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        return [(routes.REQUESTS_PULL, self.answer)]

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
                continue
            if not self._backoff.due(pod, now):
                continue
            try:
                new += await self._pull(pod)
            except Exception as exc:  # one pod's bad answer must not stop the others'
                self._history.book.forget_in_flight(pod)
                wait = self._backoff.failed(pod, m.now())
                log.debug("request collector: pod %s: %s; next try in %.0f s", pod, exc, wait)
            else:
                self._backoff.ok(pod)
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
            if not data.get("more"):
                break
        return new

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.collect_once()
            except Exception:  # the loop must outlive any one round
                log.warning("request collector: a round failed", exc_info=True)
