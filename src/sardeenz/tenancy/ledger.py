"""The leader's side of cluster-wide limits: the rate buckets, the grants, the counts.

tenancy/shares.py says how the pods admit from their leases and why the sum holds;
this is what the leader keeps (``ShareLedger``, one per pod, used while it leads:
cluster/tenant_shares.py answers each pod's sync with it) and the ``tenant-usage``
document of the control state it stores the budget counts in. Pure: no I/O, time
passed in.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from sardeenz.tenancy.counters import TokenBucket, period_bounds

IDLE_SHARE: Final = 0.05
"""Part of the bucket the pods without demand may be granted together (when there is
any left after the busy pods' part)."""
FORGET_LEASES: Final = 100
"""Leases after which the leader forgets a silent pod's demand (its counts stay)."""


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
            grant = max(0.0, min(want, bucket.level_at(now) * share))
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
            bucket.resize(limit, now)
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
