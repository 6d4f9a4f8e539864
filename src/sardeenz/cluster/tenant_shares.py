"""Tenants' limits across the pods: the sync loop, the leader's answer, the stored budgets.

Every pod admits from its lease on each limit (tenancy/shares.py says how and why
the sum holds; tenancy/ledger.py is the leader's side). This module moves the numbers:

* every ``cluster_tenancy_sync_seconds`` each pod sends the leader its demand and
  budget counts (``POST /internal/tenancy/sync``, the client's timeout) and applies
  the answer; the leader answers its own from memory. A pod with no limit (no
  tenant, or none with a limit) has nothing to report and sends nothing. A failed
  sync is retried with a doubling delay (up to the lease); a pod without an answer
  for the lease (``LEASE_SYNCS`` sync intervals) falls back to ``1 / pods`` of every limit, and
  takes the leader's shares again with its next answer;
* the leader writes every pod's budget counts to the control state's
  ``tenant-usage`` document every ``tenancy_flush_seconds`` when they changed
  (acknowledged by a majority of the pods, or the API server's ConfigMap), and a
  new leader reads them back once it holds the newest control state: a budget
  spent stays spent across restarts and leader changes (the last interval's count
  of a pod that died with it is lost, as on one node).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Annotated, Any, Final

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

from sardeenz.cluster.control import ControlState
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.transport import routes
from sardeenz.cluster.transport.server import Handler, InternalRequest
from sardeenz.errors import Conflict, Unavailable
from sardeenz.tasks import stop_task
from sardeenz.tenancy.admission import Admission
from sardeenz.tenancy.ledger import ShareLedger, current_periods, merge_document, stored_counts
from sardeenz.tenancy.shares import SharedCounters

log = logging.getLogger(__name__)
_mono = time.monotonic

KEY: Final = "tenant-usage"
"""The control state's document of budget counts: ``tenant\\tscope\\tperiod`` -> pod -> tokens."""
LEASE_SYNCS: Final = 3
"""Syncs a pod's shares outlive without an answer (one lost answer is not a failure)."""

Name = Annotated[str, StringConstraints(max_length=512)]
Units = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class SyncReport(BaseModel):
    """A pod's report (tenancy/shares.py ``SharedCounters.report`` says what each field
    is), checked: a bad one is a 400, never a wrong count."""

    model_config = ConfigDict(extra="forbid")

    pod: Annotated[str, StringConstraints(min_length=1, max_length=253)]
    rates: list[tuple[Name, Name, Name, Units, Annotated[int, Field(ge=0)], Units, Units, Units]]
    budgets: list[tuple[Name, Name, Name, Annotated[int, Field(ge=0)], Annotated[int, Field(ge=0)]]]


class TenantShares:
    """One per pod in a cluster: its sync loop, and the ledger it answers with as leader."""

    def __init__(
        self,
        members: Membership,
        control: ControlState,
        admission: Admission,
        interval: float,
        flush_seconds: float,
    ) -> None:
        self._m = members
        self._control = control
        self._admission = admission
        self.interval = interval
        self.lease = interval * LEASE_SYNCS
        self._flush_seconds = flush_seconds
        self.ledger = ShareLedger(self.lease)
        self._task: asyncio.Task[None] | None = None
        self._last_ok = _mono()
        self._last_report = self._last_ok
        self._last_write = 0.0
        self._failures = 0
        control.when_ready(self._adopt_stored)

    def counters(self) -> SharedCounters:
        """The admission's counters (before the tenants are applied): budgets start from
        this pod's copy of the stored counts, rates at ``1 / pods`` until the first sync."""
        stored = stored_counts(self._control.body(KEY), self._m.me)
        return SharedCounters(self._m.cluster_size(), stored)

    @property
    def degraded(self) -> bool:
        counters = self._admission.counters
        return isinstance(counters, SharedCounters) and counters.degraded

    # ------------------------------------------------------------ leader side
    def internal_routes(self) -> list[tuple[routes.InternalRoute, Handler]]:
        return [(routes.TENANCY_SYNC, self._answer)]

    def _answer(self, request: InternalRequest) -> dict[str, Any]:
        """``POST /internal/tenancy/sync``: the asker's shares (409 unless this pod leads)."""
        report = request.parse(SyncReport)
        if not self._m.is_leader():
            raise Conflict(
                f"only the leader splits the tenants' limits; it is {self._m.leader()!r}",
                code="not_leader",
            )
        if self.ledger.since is None:  # no answer is better than an empty one: the
            # asker falls back on its own after the lease instead of waiting for grants
            raise Unavailable(
                "this leader has not read the tenants' stored counts yet; retry shortly",
                code="control_state_not_ready",
            )
        return self.ledger.sync(report.pod, report.model_dump(), _mono())

    async def _adopt_stored(self) -> None:
        """A new ready leader: the counts the previous one stored (tenancy/shares.py
        ``ShareLedger.lead`` says why it answers no shares for one lease)."""
        self.ledger.lead(_mono(), self._control.body(KEY))

    async def _store(self) -> None:
        """The leader writes the counts when they changed (every ``flush_seconds``)."""
        now = _mono()
        if now - self._last_write < self._flush_seconds or not self._control.ready():
            return
        periods = current_periods(time.time())
        self.ledger.forget_periods(periods)
        if not self.ledger.changed:
            return
        self._last_write = now
        counts = {k: dict(v) for k, v in self.ledger.counts.items()}
        self.ledger.changed = False

        async def change(body: Any) -> Any:
            return merge_document(body, counts, periods)

        try:
            await self._control.update(KEY, change)
        except Exception:
            self.ledger.changed = True  # written with the next round
            raise

    # ------------------------------------------------------------ both sides
    def start(self) -> None:
        if self._m.active and self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="tenant-shares")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await stop_task(task)

    async def sync_once(self) -> bool:
        """One report to the leader and its answer applied; False without an answer."""
        counters = self._admission.counters
        if not isinstance(counters, SharedCounters):
            return True  # the tenant service has not started yet
        now = _mono()
        scopes = list(self._admission.scopes())
        report = counters.report(scopes, now - self._last_report)
        self._last_report = now
        if not report["rates"] and not report["budgets"]:
            # No limit here: nothing to split, and the leader's answer to an empty report
            # is empty. Most clusters have no tenants; their pods used to send this every
            # interval, each a signed call (and a warning when no leader answered it).
            self._last_ok = now
            counters.degraded = False
            return True
        report["pod"] = self._m.me
        leader = self._m.leader()
        answer: dict[str, Any] | None
        if leader is None:
            answer = None
        elif leader == self._m.me and self._m.is_leader():
            leading = self.ledger.since is not None
            answer = self.ledger.sync(self._m.me, report, now) if leading else None
        else:
            answer = await self._m.client_for(leader).ask(leader, routes.TENANCY_SYNC, report)
        now = _mono()
        if answer is not None:
            counters.apply(self._admission.scopes(), answer, now)
            self._last_ok = now
            return True
        if now - self._last_ok > self.lease and not counters.degraded:
            pods = self._m.cluster_size()
            log.warning(
                "tenants: no answer from a leader for %.1f s: each limit is split %d ways "
                "on this pod until one answers",
                now - self._last_ok,
                pods,
            )
            counters.degrade(self._admission.scopes(), pods, now)
        return False

    async def _run(self) -> None:
        while True:
            try:
                ok = await self.sync_once()
                if self._m.is_leader():
                    await self._store()
                elif self.ledger.since is not None:
                    self.ledger.follow()
            except asyncio.CancelledError:
                raise
            except Exception:  # one bad round must not end the loop
                log.warning("tenants: a sync round failed", exc_info=True)
                ok = False
            self._failures = 0 if ok else self._failures + 1
            delay = self.interval * 2 ** min(self._failures, 4)
            await asyncio.sleep(min(delay, self.lease) if self._failures else self.interval)
