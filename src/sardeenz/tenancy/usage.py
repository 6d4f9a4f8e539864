"""Billable usage: the meter's buckets stored, rolled up, and read back as one answer.

Owns one background task (started and stopped by the app's lifespan) that,
every ``SARDEENZ_USAGE_FLUSH_SECONDS``, writes the minute buckets the meter
(tenancy/meter.py) gathered in one transaction, and every
``ROLL_UP_EVERY`` seconds folds minute buckets older than
``SARDEENZ_USAGE_MINUTE_RETENTION_HOURS`` into hour buckets and deletes hour
buckets older than ``SARDEENZ_USAGE_RETENTION_DAYS``. Nothing here runs on a
request's path: the proxy only appends to the meter.

A read sums the table's rows and the buckets not written yet, under the lock
the writer holds, so an answer counts each request exactly once, the moment it
ended. In a cluster each pod stores what entered through it, and the answer
adds every other pod's (``fanout``, cluster/usage_fanout.py), each asked with a
timeout; a pod that does not answer is named in ``missingPods``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Final

from sardeenz.config import Settings
from sardeenz.errors import log_write_failure
from sardeenz.store.usage import UsageRepository, UsageRow
from sardeenz.tasks import stop_task
from sardeenz.tenancy.meter import UsageMeter
from sardeenz.tenancy.usage_query import (
    TenantUsageReport,
    UsageQuery,
    pending_rows,
    summed,
)

log = logging.getLogger(__name__)

ROLL_UP_EVERY: Final = 600.0
"""Seconds between two roll-ups (minute buckets to hours; old hours deleted)."""
HOUR: Final = 3600

Fanout = Callable[[UsageQuery], Awaitable[tuple[list[UsageRow], list[str], list[str]]]]
"""Asks every other pod: (their rows, pods that answered, pods that did not)."""


class UsageService:
    def __init__(
        self,
        settings: Settings,
        meter: UsageMeter,
        repository: UsageRepository,
        own_pod: str | None = None,
        fanout: Fanout | None = None,
    ) -> None:
        self.meter = meter
        self._repo = repository
        self._flush_every = settings.usage_flush_seconds
        self._minute_keep = int(settings.usage_minute_retention_hours * HOUR)
        self._hour_keep = int(settings.usage_retention_days * 86_400)
        self._own_pod = own_pod
        self._fanout = fanout
        """Asks the other pods (cluster/usage_fanout.py); None: a single node."""
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        try:
            await self.roll_up()
        except Exception:  # a busy database: the loop tries again
            log.exception("usage roll-up failed")
        self._task = asyncio.get_running_loop().create_task(self._run(), name="usage-flush")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)
        await self.flush()

    async def _run(self) -> None:
        last_roll = time.monotonic()
        while True:
            await asyncio.sleep(self._flush_every)
            try:
                await self.flush()
                if time.monotonic() - last_roll >= ROLL_UP_EVERY:
                    last_roll = time.monotonic()
                    await self.roll_up()
            except Exception as exc:  # the next round writes what this one could not
                log_write_failure(log, exc, "storing usage failed, kept for the next round")

    async def flush(self) -> None:
        """Write the meter's buckets; on failure they go back to the meter (nothing lost)."""
        async with self._lock:
            taken = self.meter.take()
            if not taken:
                return
            rows = [(*key, *counts) for key, counts in taken.items()]
            try:
                await self._repo.add(rows)  # type: ignore[arg-type]
            except BaseException:
                self.meter.restore(taken)
                raise

    async def roll_up(self, now: float | None = None) -> int:
        wall = time.time() if now is None else now
        minutes_before = int(wall - self._minute_keep) // HOUR * HOUR
        return await self._repo.roll_up(minutes_before, int(wall) - self._hour_keep)

    async def local(self, q: UsageQuery) -> list[UsageRow]:
        """This pod's rows for ``q``: the table's and the meter's unwritten ones."""
        async with self._lock:
            rows = await self._repo.query(q.start, q.end, q.step, q.group_by)
            rows.extend(pending_rows(self.meter.peek(), q))
        return rows

    async def report(self, q: UsageQuery) -> TenantUsageReport:
        rows = await self.local(q)
        pods: list[str] = []
        missing: list[str] = []
        if self._fanout is not None:
            theirs, pods, missing = await self._fanout(q)
            rows.extend(theirs)
            if self._own_pod is not None:
                pods = sorted([self._own_pod, *pods])
        return TenantUsageReport(
            start=datetime.fromtimestamp(q.start, UTC),
            end=datetime.fromtimestamp(q.end, UTC),
            step=q.step,
            group_by=[{"key_id": "key"}.get(g, g) for g in q.group_by],
            buckets=summed(rows, q),
            pods=pods,
            missing_pods=missing,
        )
