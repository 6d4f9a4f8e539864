"""The last hour of the dashboard's figures, sampled in the server, for every pod.

The dashboard's charts used to keep their history in the browser tab, so a reload (or a
second operator opening the page) started from an empty chart. Here one background task,
owned by this object, takes a sample every ``INTERVAL_SECONDS`` into a ring of
``WINDOW_SECONDS / INTERVAL_SECONDS`` samples, so memory is bounded:

* GPU memory of this pod (its inventory) and of every other pod (its last heartbeat);
* per model, the requests that ended in the interval, the 5xx among them, and the p50
  and p95 of their latencies, computed from the request log's records
  (telemetry/traffic.py: each request's own latency, every pod's records in a cluster,
  each request once), once for the whole cluster and once per pod;
* requests in flight per model, on each pod's own instances.

Records from other pods arrive with the collector's pull (cluster/observe.py, every
few seconds): they count in the interval in which they arrived here.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable

from pydantic import Field

from sardeenz.domain import CamelModel
from sardeenz.gpu.inventory import GpuInventory
from sardeenz.proxy.history import RequestHistory
from sardeenz.tasks import stop_task
from sardeenz.telemetry.traffic import Tally, tally

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 5.0
WINDOW_SECONDS = 3600.0


class GpuPoint(CamelModel):
    pod: str | None = Field(None, description="the pod it is on (null: a single node)")
    index: int
    name: str
    used_bytes: int
    total_bytes: int


class ModelPoint(CamelModel):
    model: str
    pod: str | None = Field(None, description="null: every pod together")
    requests: int = Field(description="requests that ended in the interval")
    errors: int = Field(description="of which answered with a 5xx")
    in_flight: int
    p50: float | None = Field(None, description="seconds; answered requests (status < 400)")
    p95: float | None = Field(None, description="seconds; null: no answered request")


class HistorySample(CamelModel):
    t: float = Field(description="Unix time in seconds")
    seconds: float = Field(description="the interval the counts cover (since the last sample)")
    gpus: list[GpuPoint]
    models: list[ModelPoint] = Field(description="per model, every pod together")
    pods: list[ModelPoint] = Field(
        default_factory=list, description="per model and pod (cluster mode)"
    )


class HistoryReport(CamelModel):
    interval_seconds: float
    window_seconds: float
    pod: str | None = Field(None, description="the pod the figures are of (null: every pod)")
    samples: list[HistorySample]


PeerGpus = Callable[[], list[GpuPoint]]
"""The other pods' GPUs as their last heartbeats describe them (cluster mode)."""
InFlight = Callable[[], dict[str | None, dict[str, int]]]
"""pod (None: this node) -> model -> requests in flight on that pod's instances."""


class MetricsHistory:
    """A bounded ring of samples and the one task that fills it."""

    def __init__(
        self,
        inventory: GpuInventory,
        requests: RequestHistory,
        in_flight: InFlight,
        peer_gpus: PeerGpus | None = None,
        interval: float = INTERVAL_SECONDS,
        window: float = WINDOW_SECONDS,
    ) -> None:
        self._inventory = inventory
        self._requests = requests
        self._in_flight = in_flight
        self._peer_gpus = peer_gpus
        self.interval = interval
        self.window = window
        self._ring: deque[HistorySample] = deque(maxlen=max(1, int(window / interval)))
        self._task: asyncio.Task[None] | None = None
        self._seen = requests.book.newest_id
        self._last_t = time.time()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="metrics-history")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def sample(self) -> HistorySample:
        """Takes one sample now and keeps it (the oldest falls out of a full ring)."""
        pod = self._requests.book.pod
        gpus = await self._inventory.snapshot() if self._inventory.available else []
        points = [
            GpuPoint(
                pod=pod,
                index=g.index,
                name=g.name,
                used_bytes=g.used_bytes,
                total_bytes=g.total_bytes,
            )
            for g in gpus
        ]
        if self._peer_gpus is not None:
            points.extend(self._peer_gpus())
        await self._requests.flush()
        book = self._requests.book
        by_model, by_pod = tally(book.after(self._seen))
        self._seen = book.newest_id
        flights = self._in_flight()
        total_flight: dict[str, int] = {}
        for per_model in flights.values():
            for model, n in per_model.items():
                total_flight[model] = total_flight.get(model, 0) + n
        for model in total_flight:
            by_model.setdefault(model, Tally())
        for p, per_model in flights.items():
            if p is not None:
                for model in per_model:
                    by_pod.setdefault((model, p), Tally())
        now = time.time()
        point = HistorySample(
            t=now,
            seconds=max(0.0, now - self._last_t),
            gpus=points,
            models=[
                _point(model, None, t, total_flight.get(model, 0))
                for model, t in sorted(by_model.items())
            ],
            pods=[
                _point(model, p, t, flights.get(p, {}).get(model, 0))
                for (model, p), t in sorted(by_pod.items())
            ],
        )
        self._last_t = now
        self._ring.append(point)
        return point

    def report(self, since: float | None = None, pod: str | None = None) -> HistoryReport:
        """The kept samples, oldest first; only those after ``since`` when given; with
        ``pod``, only that pod's GPUs and models."""
        samples = [s for s in self._ring if since is None or s.t > since]
        if pod is not None:
            samples = [
                s.model_copy(
                    update={
                        "gpus": [g for g in s.gpus if g.pod == pod],
                        "models": [m for m in s.pods if m.pod == pod],
                        "pods": [],
                    }
                )
                for s in samples
            ]
        return HistoryReport(
            interval_seconds=self.interval, window_seconds=self.window, pod=pod, samples=samples
        )

    async def _run(self) -> None:
        # A fixed cadence from a monotonic clock: a slow sample does not shift the next ones.
        next_at = time.monotonic()
        while True:
            try:
                await self.sample()
            except Exception:  # one failed GPU read must not end the history
                log.warning("metrics history: sampling failed", exc_info=True)
            now = time.monotonic()
            next_at = max(next_at + self.interval, now)  # after a stall: no burst to catch up
            await asyncio.sleep(next_at - now)


def _point(model: str, pod: str | None, t: Tally, in_flight: int) -> ModelPoint:
    p50, p95 = t.quantiles()
    return ModelPoint(
        model=model,
        pod=pod,
        requests=t.requests,
        errors=t.errors,
        in_flight=in_flight,
        p50=p50,
        p95=p95,
    )
