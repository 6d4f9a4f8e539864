"""Cluster-wide limits: the leader holds each rate's bucket, the pods admit from leases.

This module is the pods' side; tenancy/ledger.py the leader's.

Why leases and not a round trip per request: admission never awaits (admission.py),
so a pod must decide from what it holds in memory. For each rate limit of a tenant
scope (requests or tokens per minute) the leader (``ShareLedger``) keeps the one
token bucket of the cluster; every pod (``SharedCounters``) holds a lease on part of
it, an ``allowance`` it admits from, and with each sync (cluster/tenant_shares.py,
once a second by default) reports what it was asked (its demand), asks for what it
expects to need over the next ``HORIZON`` seconds and gives back what it holds beyond
twice that. The leader grants from its bucket, to each pod at most its demand's part
of what the bucket holds, so the first pod to sync does not take what the others are
about to ask for. A pod admits only what it was granted, so together the pods admit at
most what the one bucket holds: ``limit + limit x seconds / 60`` over any window, as
on one node. A burst on a pod that was idle passes from its next sync on (the grant
follows the demand).

Concurrency is split in whole slots, by demand (in flight, and one more where a request
was refused): the leader gives each pod its share rounded down and the slots left over
to the largest remainders, so the slots add up to the limit.

Without a leader (before the first answer, an election, a partition) a pod that has
had no answer for ``lease_seconds`` admits from a bucket of its own of ``1 / pods`` of
the limit (``pods``: the members it knows of, reachable or not, so the pods of either
side of a partition never take more than their part), starting from what it still
held; whole slots rounded down but at least one; and may spend ``1 / pods`` of what was
left of each budget. What it admitted so is charged to the leader's bucket with its
next report, so the cluster's bucket pays it back.

Budgets are counted where the tokens were: each pod reports what it counted this
period (``own``, cumulative, so a report repeated or lost changes nothing), the
leader keeps the largest seen per pod and answers the sum (and the others' tokens in
flight). The leader writes those per-pod counts to the cluster's control state (a
document, like the presets), so a new leader and a restarted pod start from them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from time import monotonic
from typing import Any, Final

from sardeenz.tenancy.counters import MINUTE, PeriodBudget, period_bounds

SMOOTHING: Final = 0.5
"""Weight of the newest demand sample (an exponential average: a burst on one pod moves
its grants within a sync or two, one quiet second does not take them away)."""
HORIZON: Final = 2.0
"""Seconds of its demand a pod asks to hold (two sync intervals at the default)."""
STANDING: Final = 4
"""Every pod holds at least ``limit / (STANDING x pods)`` (and one request): a request
on a quiet pod passes at once, not after the next sync. Held, not asked for again, so
the busy pods lose that part of the first burst only, not of the rate."""


class LeasedBucket:
    """A ``RateCounter`` of a cluster-wide token bucket, on one pod.

    ``capacity`` is the tenant's limit (what the 429 names and ``resize`` compares).
    Leased (the leader answers): it admits from ``allowance``, the units granted and
    not spent yet. Not leased (no answer for a lease): it admits from a bucket of its
    own of ``capacity / pods`` (``local``), and counts what it took so (``unleased``)
    for the leader to charge. ``asked`` adds up what admission asked for, admitted or
    not: the demand reported at the next sync.
    """

    __slots__ = (
        "_rate",
        "_stamp",
        "allowance",
        "asked",
        "capacity",
        "demand",
        "leased",
        "level",
        "local",
        "pods",
        "unleased",
    )

    def __init__(self, capacity: float, pods: int, now: float) -> None:
        self.capacity = float(capacity)
        self.leased = False
        self.allowance = 0.0
        self.pods = max(1, pods)
        self.local = self.capacity / self.pods
        self._rate = self.local / MINUTE
        self.level = self.local
        self._stamp = now
        self.unleased = 0.0
        self.asked = 0.0
        self.demand = 0.0
        """Units asked per second, smoothed (``report``)."""

    def _refill(self, now: float) -> float:
        elapsed = now - self._stamp
        if elapsed > 0:
            self._stamp = now
            level = self.level + elapsed * self._rate
            self.level = level if level < self.local else self.local
        return self.level

    def wait(self, amount: float, now: float) -> float:
        self.asked += amount
        need = amount if amount < self.capacity else self.capacity
        if self.leased:
            short = need - self.allowance
            # (the cluster refills at the limit's rate; this pod's part of it is not
            # known here: the hint is the soonest it could be)
            return short * MINUTE / self.capacity if short > 0 else 0.0
        if need > self.local:
            need = self.local
        short = need - self._refill(now)
        return short / self._rate if short > 0 else 0.0

    def charge(self, amount: float, now: float) -> float:
        # ``wait`` then ``take``, in one call (counters.py ``RateCounter.charge``)
        self.asked += amount
        capacity = self.capacity
        need = amount if amount < capacity else capacity
        if self.leased:
            short = need - self.allowance
            if short > 0:
                return short * MINUTE / capacity
            self.allowance -= amount
            return 0.0
        if need > self.local:
            need = self.local
        level = self._refill(now)
        short = need - level
        if short > 0:
            return short / self._rate
        self.level = level - amount
        self.unleased += amount
        return 0.0

    def take(self, amount: float, now: float) -> None:
        if self.leased:
            self.allowance -= amount
        else:
            self.level = (self.level if now == self._stamp else self._refill(now)) - amount
            self.unleased += amount

    def give(self, amount: float, now: float) -> None:
        if self.leased:
            self.allowance += amount  # (more than needed goes back with the next report)
        else:
            level = (self.level if now == self._stamp else self._refill(now)) + amount
            self.level = level if level < self.local else self.local
            self.unleased -= amount

    def resize(self, capacity: float, now: float) -> None:
        """A new limit: the own bucket keeps what was consumed; a lease is the leader's."""
        local = capacity * self.local / self.capacity
        self.level = min(local, self.level + local - self.local)
        self.local = local
        self._rate = local / MINUTE
        self.capacity = float(capacity)

    def report(self, seconds: float) -> tuple[float, float, float, float]:
        """(demand, want, given back, taken unleased) for the sync, and the books reset."""
        if seconds > 0:
            self.demand = SMOOTHING * self.asked / seconds + (1 - SMOOTHING) * self.demand
        self.asked = 0.0
        standing = max(self.capacity / (STANDING * self.pods), min(1.0, self.capacity))
        target = max(self.demand * HORIZON, standing)
        back = 0.0
        if self.leased and self.allowance > 2 * target:
            back = self.allowance - 2 * target
            self.allowance -= back
        want = max(0.0, target - self.allowance) if self.leased else target
        unleased, self.unleased = self.unleased, 0.0
        return self.demand, want, back, unleased

    def granted(self, units: float) -> None:
        """The leader's grant; the first one after the own bucket ends it (what that
        admitted was reported as ``unleased``)."""
        if not self.leased:
            self.leased = True
            self.allowance = 0.0
        self.allowance += units

    def fall_back(self, pods: int, now: float) -> None:
        """No leader: a bucket of ``capacity / pods``, holding what was still granted."""
        self.pods = max(1, pods)
        self.local = self.capacity / self.pods
        self._rate = self.local / MINUTE
        if self.leased:
            self.leased = False
            self.level = min(self.local, max(0.0, self.allowance))
            self.allowance = 0.0
            self._stamp = now


class ShareBudget(PeriodBudget):
    """A ``BudgetCounter`` of a cluster-wide budget: ``used`` = ``own`` + ``others``.

    ``own``: tokens this pod counted this period (reported, and kept by the leader);
    ``others``: what the other pods counted and hold in flight, as the leader last said.
    ``own`` is derived (``used - others``), not counted apart: ``add`` is then the plain
    budget's, which admission writes inline (counters.py ``BudgetCounter.add``).
    """

    __slots__ = ("others", "synced_others", "synced_used")

    def __init__(self, period: str, limit: int, wall: float, own: int = 0, others: int = 0):
        super().__init__(period, limit, wall, used=own + others)
        self.others = others
        self.synced_others = others
        """``others`` as the leader said it last (a degraded pod adds to it, see ``degrade``)."""
        self.synced_used = own + others

    @property
    def own(self) -> int:
        return self.used - self.others

    def reset_at(self, wall: float) -> float:
        before = self.period_id
        end = super().reset_at(wall)
        if self.period_id != before:
            self.others = self.synced_others = self.synced_used = 0  # (``used`` too: 0)
        return end

    def synced(self, period_id: str, own: int, others: int) -> None:
        """The leader's count: the largest ``own`` either side saw, the others' sum."""
        if period_id != self.period_id:
            return  # an answer about the period that just ended
        own = max(self.own, own)
        self.others = self.synced_others = others
        self.used = self.synced_used = own + others

    def degrade(self, pods: int) -> None:
        """No leader: the other pods are assumed to spend their part of what was left."""
        left = max(0, self.limit - self.synced_used)
        own = self.own
        self.others = self.synced_others + left * (pods - 1) // pods
        self.used = own + self.others


def degraded_slots(limit: int, pods: int) -> int:
    """Whole slots rounded down, at least one (a tenant limited to fewer requests in
    flight than there are pods still gets one per pod while no leader splits them)."""
    return max(1, limit // max(1, pods))


# ------------------------------------------------------------------ the pods' side
ScopeLike = Any
"""plan.Scope (not imported: plan.py imports counters, not the other way)."""


class SharedCounters:
    """The ``CounterFactory`` of a pod in a cluster; reports demand and applies answers."""

    def __init__(self, pods: int, stored: Mapping[tuple[str, str, str], tuple[int, int]]) -> None:
        self.pods = max(1, pods)
        """Members known: a new counter starts at ``1 / pods`` until the first answer."""
        self.stored = dict(stored)
        """(tenant, scope, period id) -> (this pod's tokens, the other pods' tokens), from
        the cluster's control state as this pod last held it."""
        self.degraded = False

    def rate(self, tenant: str, scope: str, kind: str, capacity: int) -> LeasedBucket:
        return LeasedBucket(capacity, self.pods, monotonic())

    def budget(self, tenant: str, scope: str, period: str, limit: int, wall: float) -> ShareBudget:
        period_id = period_bounds(period, wall)[0]
        own, others = self.stored.get((tenant, scope, period_id), (0, 0))
        return ShareBudget(period, limit, wall, own=own, others=others)

    def slots(self, tenant: str, scope: str, limit: int) -> int:
        return degraded_slots(limit, self.pods)

    def report(self, scopes: Iterable[ScopeLike], seconds: float) -> dict[str, Any]:
        """The sync's body: every scope's demand, wants and budget counts.

        ``rates``: ``[tenant, scope, kind, demand, limit, want, given back, unleased]``;
        ``budgets``: ``[tenant, scope, period id, own, held]``.
        """
        rates: list[list[Any]] = []
        budgets: list[list[Any]] = []
        for s in scopes:
            for kind in ("rpm", "tpm"):
                bucket = getattr(s, kind)
                if isinstance(bucket, LeasedBucket):
                    demand, want, back, unleased = bucket.report(seconds)
                    limit = int(bucket.capacity)
                    rates.append([s.tenant, s.name, kind, demand, limit, want, back, unleased])
            if s.concurrency is not None:
                # in flight now, and one more if it had to refuse one since the last report
                wanted = s.inflight + (1 if s.busy_refusals else 0)
                s.busy_refusals = 0
                rates.append([s.tenant, s.name, "conc", wanted, s.concurrency, 0, 0, 0])
            for budget in (s.day, s.month):
                if isinstance(budget, ShareBudget):
                    budgets.append([s.tenant, s.name, budget.period_id, budget.own, budget.held])
        return {"rates": rates, "budgets": budgets}

    def apply(self, scopes: Iterable[ScopeLike], answer: Mapping[str, Any], now: float) -> None:
        """The leader's answer (``ShareLedger.sync``): grants, slots, budget counts."""
        self.degraded = False
        grants = {(t, s, k): float(v) for t, s, k, v in answer.get("grants", [])}
        slots = {(t, s): int(n) for t, s, n in answer.get("slots", [])}
        counts = {(t, s, p): (int(o), int(x)) for t, s, p, o, x in answer.get("budgets", [])}
        for s in scopes:
            for kind in ("rpm", "tpm"):
                bucket = getattr(s, kind)
                grant = grants.get((s.tenant, s.name, kind))
                if isinstance(bucket, LeasedBucket) and grant is not None:
                    bucket.granted(grant)
            given = slots.get((s.tenant, s.name))
            if s.concurrency is not None and given is not None:
                s.slots = given
            for budget in (s.day, s.month):
                if isinstance(budget, ShareBudget):
                    found = counts.get((s.tenant, s.name, budget.period_id))
                    if found is not None:
                        budget.synced(budget.period_id, *found)

    def degrade(self, scopes: Iterable[ScopeLike], pods: int, now: float) -> None:
        """No answer for a lease: ``1 / pods`` of everything (module doc)."""
        self.pods = pods = max(1, pods)
        self.degraded = True
        for s in scopes:
            for kind in ("rpm", "tpm"):
                bucket = getattr(s, kind)
                if isinstance(bucket, LeasedBucket):
                    bucket.fall_back(pods, now)
            if s.concurrency is not None:
                s.slots = degraded_slots(s.concurrency, pods)
            for budget in (s.day, s.month):
                if isinstance(budget, ShareBudget):
                    budget.degrade(pods)
