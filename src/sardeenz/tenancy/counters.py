"""The counters a tenant's limits are checked against: rates, budgets, requests in flight.

Why an interface: on one pod these are plain numbers in memory, changed by the
event loop only (no lock: admission never awaits). A cluster-wide limit needs
the same questions answered across pods ("may this tenant take N more tokens
now? if not, how long until it may?"); an implementation that shares its
consumption with the other pods (a lease of part of the rate, or counts
gossiped over the transport) plugs in through ``CounterFactory`` without the
admission code (admission.py) changing.

The rates are token buckets: ``capacity`` units, refilled continuously at
``capacity`` per ``period`` seconds. A request may take more than the bucket
holds when the bucket is full (a big prompt must not be refused forever): the
level then goes below zero, and later requests wait until it is paid back. The
level may also go up or down after the fact (``settle``: the engine's usage
replaces the estimate).

Budgets count tokens per calendar period in UTC (day, month); they are kept
in SQLite by the tenant service (service.py) and restored on start.
"""

from __future__ import annotations

import calendar
import math
import time
from datetime import UTC, datetime
from typing import Final, Protocol

MINUTE: Final = 60.0


class RateCounter(Protocol):
    """A rate limit: ``capacity`` units per ``period`` seconds."""

    capacity: float

    def wait(self, amount: float, now: float) -> float:
        """Seconds until ``amount`` may be taken (0: now)."""
        ...

    def take(self, amount: float, now: float) -> None: ...

    def charge(self, amount: float, now: float) -> float:
        """``wait`` and, when it is 0, ``take`` in one call: 0.0 when ``amount`` was taken,
        else the seconds to wait and nothing taken. Admission charges every rate limit of a
        request so (one call per limit, not two) and gives back with ``give`` what it
        charged when a later limit refuses."""
        ...

    def give(self, amount: float, now: float) -> None:
        """Give back (negative: take more) after the fact, e.g. estimate minus usage."""
        ...

    def resize(self, capacity: float) -> None:
        """A new limit; what was consumed under the old one stays consumed."""
        ...


class BudgetCounter(Protocol):
    """Tokens per calendar period; ``held``: reserved by requests in flight."""

    limit: int
    used: int
    held: int
    period_id: str
    dirty: bool
    """Changed since the service last stored it (service.py clears it)."""

    def reset_at(self, wall: float) -> float:
        """Wall-clock time the current period ends (rolling over first if it has)."""
        ...

    def add(self, tokens: int, wall: float) -> None:
        """Count ``tokens`` used. Before the period's end (``reset_at``) this is exactly
        ``used += tokens; dirty = True``: admission.py writes that inline (a call per
        budget per request was a tenth of the cost) and calls ``add`` only past it."""
        ...


class CounterFactory(Protocol):
    """Makes the counters of one tenant scope (``scope``: a model name, or ``*``)."""

    def rate(self, tenant: str, scope: str, kind: str, capacity: int) -> RateCounter: ...

    def budget(
        self, tenant: str, scope: str, period: str, limit: int, wall: float
    ) -> BudgetCounter: ...

    def slots(self, tenant: str, scope: str, limit: int) -> int:
        """Requests this pod may have in flight of ``limit`` for the whole scope."""
        ...


class TokenBucket:
    """A rate counter of this pod alone (see module doc)."""

    __slots__ = ("_rate", "_stamp", "capacity", "level")

    def __init__(self, capacity: float, now: float, period: float = MINUTE) -> None:
        self.capacity = float(capacity)
        self._rate = self.capacity / period
        self.level = self.capacity
        self._stamp = now

    def resize(self, capacity: float, period: float = MINUTE) -> None:
        """A new limit keeps what was consumed (the level moves by the difference)."""
        self.level = min(capacity, self.level + capacity - self.capacity)
        self.capacity = float(capacity)
        self._rate = self.capacity / period

    def _refill(self, now: float) -> float:
        elapsed = now - self._stamp
        if elapsed > 0:
            self._stamp = now
            level = self.level + elapsed * self._rate
            self.level = level if level < self.capacity else self.capacity
        return self.level

    # ``wait`` and ``give`` refill inline rather than through ``_refill``: they run for
    # every rate limit of every request, and a call is a third of their cost.
    def wait(self, amount: float, now: float) -> float:
        capacity, level = self.capacity, self.level
        elapsed = now - self._stamp
        if elapsed > 0:
            self._stamp = now
            level += elapsed * self._rate
            if level > capacity:
                level = capacity
            self.level = level
        short = (amount if amount < capacity else capacity) - level
        return short / self._rate if short > 0 else 0.0

    def charge(self, amount: float, now: float) -> float:
        # ``wait`` then ``take`` at the same ``now``, inline (see ``wait``)
        capacity, level = self.capacity, self.level
        elapsed = now - self._stamp
        if elapsed > 0:
            self._stamp = now
            level += elapsed * self._rate
            if level > capacity:
                level = capacity
        short = (amount if amount < capacity else capacity) - level
        if short > 0:
            self.level = level
            return short / self._rate
        self.level = level - amount
        return 0.0

    def take(self, amount: float, now: float) -> None:
        # Admission asks ``wait`` at the same ``now`` first: no second refill then.
        self.level = (self.level if now == self._stamp else self._refill(now)) - amount

    def give(self, amount: float, now: float) -> None:
        capacity, level = self.capacity, self.level
        elapsed = now - self._stamp
        if elapsed > 0:
            self._stamp = now
            level += elapsed * self._rate
            if level > capacity:
                level = capacity
        level += amount
        self.level = level if level < capacity else capacity


def period_bounds(period: str, wall: float) -> tuple[str, float]:
    """The id (``2026-12-04`` or ``2026-12``) and end (epoch seconds) of the UTC period
    holding ``wall``."""
    t = datetime.fromtimestamp(wall, UTC)
    if period == "day":
        start = datetime(t.year, t.month, t.day, tzinfo=UTC)
        return start.strftime("%Y-%m-%d"), start.timestamp() + 86400
    days = calendar.monthrange(t.year, t.month)[1]
    start = datetime(t.year, t.month, 1, tzinfo=UTC)
    return start.strftime("%Y-%m"), start.timestamp() + days * 86400


class PeriodBudget:
    """A budget counter of this pod alone; ``dirty`` until the service stored it."""

    __slots__ = ("_end", "dirty", "held", "limit", "period", "period_id", "used")

    def __init__(self, period: str, limit: int, wall: float, used: int = 0) -> None:
        self.period = period
        self.limit = limit
        self.period_id, self._end = period_bounds(period, wall)
        self.used = used
        self.held = 0
        self.dirty = False

    def reset_at(self, wall: float) -> float:
        if wall >= self._end:
            self.period_id, self._end = period_bounds(self.period, wall)
            self.used = 0
            self.dirty = True
        return self._end

    def add(self, tokens: int, wall: float) -> None:
        if wall >= self._end:  # (``reset_at`` does nothing else; a call saved per request)
            self.reset_at(wall)
        self.used += tokens
        self.dirty = True


class LocalCounters:
    """``CounterFactory`` of a single pod; budgets start from what the store held."""

    def __init__(self, stored: dict[tuple[str, str, str], int] | None = None) -> None:
        self.stored = stored or {}
        """(tenant, scope, period id) -> tokens used, as loaded from SQLite."""

    def rate(self, tenant: str, scope: str, kind: str, capacity: int) -> TokenBucket:
        return TokenBucket(capacity, time.monotonic())

    def budget(self, tenant: str, scope: str, period: str, limit: int, wall: float) -> PeriodBudget:
        counter = PeriodBudget(period, limit, wall)
        counter.used = self.stored.get((tenant, scope, counter.period_id), 0)
        return counter

    def slots(self, tenant: str, scope: str, limit: int) -> int:
        return limit


def retry_after(seconds: float) -> int:
    """Whole seconds for ``Retry-After``: rounded up, at least 1 (0 would mean now)."""
    return max(1, math.ceil(seconds - 1e-9))
