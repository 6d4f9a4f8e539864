"""The last hour of the dashboard's metrics, sampled in the server.

The dashboard's charts used to keep their history in the browser tab, so a reload (or a
second operator opening the page) started from an empty chart. Here one background task,
owned by this object, samples every ``INTERVAL_SECONDS`` the GPU memory and the proxy's raw
per-model counters (request and error totals, in-flight gauge, cumulative duration
buckets) into a ring of ``WINDOW_SECONDS / INTERVAL_SECONDS`` samples, so memory is bounded
(about 720 small records). Raw counters, not rates: the browser derives rates and
quantiles between consecutive samples with the same code it uses for live scrapes, and a
counter reset (controller restart) is handled there once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque

from pydantic import Field

from sardeenz.domain import CamelModel
from sardeenz.gpu.inventory import GpuInventory
from sardeenz.proxy import metrics
from sardeenz.tasks import stop_task

log = logging.getLogger(__name__)

INTERVAL_SECONDS = 5.0
WINDOW_SECONDS = 3600.0


class GpuPoint(CamelModel):
    index: int
    name: str
    used_bytes: int
    total_bytes: int


class ModelPoint(CamelModel):
    model: str
    requests: int
    errors: int
    in_flight: int
    duration: list[int] = Field(
        description="cumulative bucket counts, one per durationBounds entry, then +Inf"
    )


class HistorySample(CamelModel):
    t: float = Field(description="Unix time in seconds")
    gpus: list[GpuPoint]
    models: list[ModelPoint]


class HistoryReport(CamelModel):
    interval_seconds: float
    window_seconds: float
    duration_bounds: list[float] = Field(
        description="upper bounds (seconds) of the duration buckets, +Inf implied"
    )
    samples: list[HistorySample]


class MetricsHistory:
    """A bounded ring of samples and the one task that fills it."""

    def __init__(
        self,
        inventory: GpuInventory,
        interval: float = INTERVAL_SECONDS,
        window: float = WINDOW_SECONDS,
    ) -> None:
        self._inventory = inventory
        self.interval = interval
        self.window = window
        self._ring: deque[HistorySample] = deque(maxlen=max(1, int(window / interval)))
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="metrics-history")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def sample(self) -> HistorySample:
        """Takes one sample now and keeps it (the oldest falls out of a full ring)."""
        gpus = await self._inventory.snapshot() if self._inventory.available else []
        point = HistorySample(
            t=time.time(),
            gpus=[
                GpuPoint(
                    index=g.index, name=g.name, used_bytes=g.used_bytes, total_bytes=g.total_bytes
                )
                for g in gpus
            ],
            models=[
                ModelPoint(model=m, requests=r, errors=e, in_flight=f, duration=d)
                for m, r, e, f, d in metrics.model_counters()
            ],
        )
        self._ring.append(point)
        return point

    def report(self, since: float | None = None) -> HistoryReport:
        """The kept samples, oldest first; only those after ``since`` when given."""
        samples = [s for s in self._ring if since is None or s.t > since]
        return HistoryReport(
            interval_seconds=self.interval,
            window_seconds=self.window,
            duration_bounds=list(metrics.DURATION_BUCKETS),
            samples=samples,
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
