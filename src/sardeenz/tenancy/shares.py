"""Cluster-wide limits: the leader holds each rate's bucket, the pods admit from leases.

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
from dataclasses import dataclass, field
from time import monotonic
from typing import Any, Final

from sardeenz.tenancy.counters import MINUTE, PeriodBudget, TokenBucket, period_bounds

SMOOTHING: Final = 0.5
"""Weight of the newest demand sample (an exponential average: a burst on one pod moves
its grants within a sync or two, one quiet second does not take them away)."""
IDLE_SHARE: Final = 0.05
"""Part of the bucket the pods without demand may be granted together (when there is
any left after the busy pods' part)."""
FORGET_LEASES: Final = 100
"""Leases after which the leader forgets a silent pod's demand (its counts stay)."""
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

    def resize(self, capacity: float) -> None:
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
    """

    __slots__ = ("others", "own", "synced_others", "synced_used")

    def __init__(self, period: str, limit: int, wall: float, own: int = 0, others: int = 0):
        super().__init__(period, limit, wall, used=own + others)
        self.own = own
        self.others = others
        self.synced_others = others
        """``others`` as the leader said it last (a degraded pod adds to it, see ``degrade``)."""
        self.synced_used = own + others

    def reset_at(self, wall: float) -> float:
        before = self.period_id
        end = super().reset_at(wall)
        if self.period_id != before:
            self.own = self.others = self.synced_others = self.synced_used = 0
        return end

    def add(self, tokens: int, wall: float) -> None:
        super().add(tokens, wall)
        self.own += tokens

    def synced(self, period_id: str, own: int, others: int) -> None:
        """The leader's count: the largest ``own`` either side saw, the others' sum."""
        if period_id != self.period_id:
            return  # an answer about the period that just ended
        self.own = max(self.own, own)
        self.others = self.synced_others = others
        self.used = self.synced_used = self.own + others

    def degrade(self, pods: int) -> None:
        """No leader: the other pods are assumed to spend their part of what was left."""
        left = max(0, self.limit - self.synced_used)
        self.others = self.synced_others + left * (pods - 1) // pods
        self.used = self.own + self.others


def degraded_slots(limit: int, pods: int) -> int:
    """Whole slots rounded down, at least one (a tenant limited to fewer requests in
    flight than there are pods still gets one per pod while no leader splits them)."""
    return max(1, limit // max(1, pods))


# ------------------------------------------------------------------ the pods' side
ScopeLike = Any
"""admission.Scope (not imported: admission.py imports counters, not the other way)."""


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


# ------------------------------------------------------------------ the leader's side
@dataclass
class _Pod:
    seen: float
    demand: dict[tuple[str, str, str], float] = field(default_factory=dict)
    limits: dict[tuple[str, str], int] = field(default_factory=dict)
    """Concurrency limit per (tenant, scope), as this pod has it."""
    held: dict[tuple[str, str, str], int] = field(default_factory=dict)


class ShareLedger:
    """The leader's view: every pod's demand and budget counts; answers each sync."""

    def __init__(self, lease_seconds: float) -> None:
        self.lease_seconds = lease_seconds
        """A pod not heard from for this long has no share (it falls back on its own)."""
        self._pods: dict[str, _Pod] = {}
        self._buckets: dict[tuple[str, str, str], TokenBucket] = {}
        """The cluster's token bucket of each (tenant, scope, rpm or tpm)."""
        self.counts: dict[tuple[str, str, str], dict[str, int]] = {}
        """(tenant, scope, period id) -> pod -> tokens it counted (the largest reported)."""
        self.changed = False
        """Counts changed since ``document`` was last taken."""
        self.since: float | None = None
        """When this pod began to lead with the stored counts read (``lead``); None while
        it follows."""

    def lead(self, now: float, document: Any) -> None:
        """A new term: the counts a previous leader stored, and one lease of listening.

        Until every pod has reported once, slots computed from the reports so far would
        give the first pods to report the whole limit while the others still hold
        theirs: the answers carry no slots for the first lease, so the pods keep what
        the previous leader gave them (or ``1 / pods``). The rate buckets start full
        (what a previous leader had granted is not known: at most one more burst)."""
        self.since = now
        self.load(document)

    def follow(self) -> None:
        self.since = None
        self._pods.clear()
        self._buckets.clear()

    def _live(self, now: float) -> dict[str, _Pod]:
        forget = FORGET_LEASES * self.lease_seconds
        gone = [p for p, v in self._pods.items() if now - v.seen > forget]
        for pod in gone:  # (a pod replaced under a new name in Kubernetes never comes back)
            del self._pods[pod]
        return {p: v for p, v in self._pods.items() if now - v.seen <= self.lease_seconds}

    def sync(self, pod: str, report: Mapping[str, Any], now: float) -> dict[str, Any]:
        """Record ``pod``'s report; its grants, slots and budget counts."""
        if self.since is None:
            return {"grants": [], "slots": [], "budgets": []}  # not leading: nothing known
        entry = self._pods.setdefault(pod, _Pod(now))
        entry.seen = now
        entry.demand = {}
        entry.limits = {}
        wants: list[tuple[tuple[str, str, str], float, int, float, float]] = []
        for t, s, kind, demand, limit, want, back, unleased in report.get("rates", []):
            key = (str(t), str(s), str(kind))
            entry.demand[key] = max(0.0, float(demand))
            if kind == "conc":
                entry.limits[(key[0], key[1])] = max(0, int(limit))
            else:
                wants.append((key, max(0.0, float(want)), int(limit), back, unleased))
        entry.held = {}
        for t, s, period_id, own, held in report.get("budgets", []):
            key = (str(t), str(s), str(period_id))
            per_pod = self.counts.setdefault(key, {})
            if int(own) > per_pod.get(pod, 0):
                per_pod[pod] = int(own)
                self.changed = True
            entry.held[key] = max(0, int(held))
        live = self._live(now)
        grants = []
        for key, want, limit, back, unleased in wants:
            bucket = self._bucket(key, limit, now)
            # what the pod gives back, less what it admitted on its own meanwhile
            bucket.give(max(0.0, float(back)) - max(0.0, float(unleased)), now)
            # its demand's part of what the bucket holds: the rest stays for the others'
            # next sync, so the first pod to sync does not take it all
            share = self._shares(key, live)[pod]
            grant = max(0.0, min(want, bucket.level * share))
            bucket.take(grant, now)
            grants.append([*key, grant])
        slots = []
        if now - self.since >= self.lease_seconds:  # (``lead`` says why)
            slots = [
                [t, s, self._slots((t, s, "conc"), pod, live, limit)]
                for (t, s), limit in entry.limits.items()
            ]
        budgets = []
        for key in entry.held:
            per_pod = self.counts[key]
            mine = per_pod.get(pod, 0)
            others = sum(n for p, n in per_pod.items() if p != pod)
            others += sum(v.held.get(key, 0) for p, v in live.items() if p != pod)
            budgets.append([*key, mine, others])
        return {"grants": grants, "slots": slots, "budgets": budgets}

    def _bucket(self, key: tuple[str, str, str], limit: int, now: float) -> TokenBucket:
        """The cluster's bucket of ``key``: new ones start full, as on one node."""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(limit, now)
        elif bucket.capacity != limit:
            bucket.resize(limit)
        bucket.give(0.0, now)  # refilled up to now
        return bucket

    @staticmethod
    def _shares(key: tuple[str, str, str], live: Mapping[str, _Pod]) -> dict[str, float]:
        """Every live pod's share of ``key``: its demand, plus a floor for the idle ones."""
        demands = {p: v.demand[key] for p, v in live.items() if key in v.demand}
        total = sum(demands.values())
        if total <= 0:
            return {p: 1 / len(demands) for p in demands}
        floor = IDLE_SHARE * total / len(demands)
        return {p: (d + floor) / (total + floor * len(demands)) for p, d in demands.items()}

    def _share(self, key: tuple[str, str, str], pod: str, live: Mapping[str, _Pod]) -> float:
        return self._shares(key, live)[pod]

    def _slots(
        self, key: tuple[str, str, str], pod: str, live: Mapping[str, _Pod], limit: int
    ) -> int:
        """``pod``'s whole slots of ``limit``: the shares rounded down, the slots left over
        to the largest remainders (ties by pod name), so the pods' slots add up to it."""
        shares = self._shares(key, live)
        quotas = {p: limit * s for p, s in shares.items()}
        given = {p: int(q) for p, q in quotas.items()}
        left = limit - sum(given.values())
        by_remainder = sorted(quotas, key=lambda p: (given[p] - quotas[p], p))
        for p in by_remainder[:left]:
            given[p] += 1
        return given[pod]

    def forget_periods(self, current: set[str]) -> None:
        """Drop the counts of periods that ended."""
        for key in [k for k in self.counts if k[2] not in current]:
            del self.counts[key]
            self.changed = True

    def load(self, document: Any) -> None:
        """Take the counts a previous leader stored (the largest per pod wins)."""
        for key, per_pod in parse_document(document).items():
            mine = self.counts.setdefault(key, {})
            for pod, n in per_pod.items():
                if n > mine.get(pod, 0):
                    mine[pod] = n
                    self.changed = True

    def document(self) -> dict[str, dict[str, int]]:
        self.changed = False
        return {"\t".join(k): dict(v) for k, v in sorted(self.counts.items())}


def parse_document(document: Any) -> dict[tuple[str, str, str], dict[str, int]]:
    """The control state's ``tenant-usage`` body; anything malformed is skipped."""
    found: dict[tuple[str, str, str], dict[str, int]] = {}
    if not isinstance(document, dict):
        return found
    for raw, per_pod in document.items():
        parts = str(raw).split("\t")
        if len(parts) != 3 or not isinstance(per_pod, dict):
            continue
        counts = {str(p): n for p, n in per_pod.items() if type(n) is int and n >= 0}
        found[(parts[0], parts[1], parts[2])] = counts
    return found


def stored_counts(document: Any, me: str) -> dict[tuple[str, str, str], tuple[int, int]]:
    """(this pod's, the other pods') tokens per budget key, from the stored document."""
    return {
        key: (per_pod.get(me, 0), sum(n for p, n in per_pod.items() if p != me))
        for key, per_pod in parse_document(document).items()
    }


def merge_document(
    current: Any, counts: Mapping[tuple[str, str, str], Mapping[str, int]], periods: set[str]
) -> dict[str, dict[str, int]]:
    """What the leader writes: the stored counts and its own, the largest per pod, of the
    current periods only."""
    merged = {k: dict(v) for k, v in parse_document(current).items() if k[2] in periods}
    for key, per_pod in counts.items():
        if key[2] not in periods:
            continue
        mine = merged.setdefault(key, {})
        for pod, n in per_pod.items():
            mine[pod] = max(n, mine.get(pod, 0))
    return {"\t".join(k): v for k, v in sorted(merged.items())}


def current_periods(wall: float) -> set[str]:
    return {period_bounds("day", wall)[0], period_bounds("month", wall)[0]}
