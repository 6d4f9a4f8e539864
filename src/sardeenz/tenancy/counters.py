"""The counters a tenant's limits are checked against: rates, budgets, requests in flight.

Why an interface: on one pod these are plain numbers in memory, changed by the
event loop only (no lock: admission never awaits). A cluster-wide limit needs
the same questions answered across pods ("may this tenant take N more tokens
now? if not, how long until it may?"); an implementation that shares its
consumption with the other pods (a lease of part of the rate, or counts
gossiped over the transport) plugs in through ``CounterFactory`` without the
admission code (admission.py) changing.

The rates are token buckets: ``capacity`` units, refilled continuously at
``capacity`` per minute. A request may take more than the bucket holds when the
bucket is full (a big prompt must not be refused forever): the level then goes
below zero, and later requests wait until it is paid back. The level may also
go up or down after the fact (``settle``: the engine's usage replaces the
estimate). A pod's own bucket is kept as GCRA (``TokenBucket``): one timestamp,
not a level refilled on each question.

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

    def resize(self, capacity: float, now: float) -> None:
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


SLACK: Final = 1e-9
"""Seconds a GCRA bucket may be early (``TokenBucket``): its arithmetic is on times, and
N units taken at one instant add up to N x (60 / capacity) with rounding, so the N-th of
a capacity of N must still pass (without it, 7 per minute could admit 6). A nanosecond
of the rate: less than a unit below 6 x 10^10 per minute."""


_LATEST: Final = MINUTE + SLACK


class TokenBucket:
    """A rate counter of this pod alone (see module doc), kept as GCRA.

    Why GCRA (the generic cell rate algorithm): the bucket is one timestamp, ``full_at``,
    the time it is full again; its level at ``now`` is ``capacity - (full_at - now) /
    per_unit`` (``capacity`` when ``full_at`` is past). Taking ``n`` units moves
    ``full_at`` ``n x per_unit`` later (from ``now`` if it is past); a request may pass
    when the bucket, its units taken, would be full again within a minute of ``now``.
    The same token bucket as a level refilled by ``elapsed x rate`` on every question,
    with a comparison and one store in place of the refill's arithmetic and two stores
    (measured in a prototype of admission's loop: 2.4 us instead of 2.9 per request of
    a tenant with every limit; Python allocates a float per arithmetic result).
    """

    __slots__ = ("capacity", "full_at", "per_unit")

    def __init__(self, capacity: float, now: float) -> None:
        self.capacity = float(capacity)
        self.per_unit = MINUTE / self.capacity
        """Seconds a unit takes to come back."""
        self.full_at = now

    def level_at(self, now: float) -> float:
        """Units it holds at ``now`` (below zero: in debt)."""
        ahead = self.full_at - now
        return self.capacity - ahead / self.per_unit if ahead > 0 else self.capacity

    def resize(self, capacity: float, now: float) -> None:
        """A new limit keeps what was consumed (the level moves by the difference)."""
        ahead = self.full_at - now
        consumed = ahead / self.per_unit if ahead > 0 else 0.0
        self.capacity = float(capacity)
        self.per_unit = MINUTE / self.capacity
        self.full_at = now + consumed * self.per_unit

    def wait(self, amount: float, now: float) -> float:
        t = self.full_at
        if t < now:
            t = now
        need = amount * self.per_unit  # (at most a full bucket: never refused forever)
        over = t + (need if need < MINUTE else MINUTE) - (now + MINUTE)
        return over if over > SLACK else 0.0

    def charge(self, amount: float, now: float) -> float:
        t = self.full_at
        if t < now:
            t = now
        need = amount * self.per_unit
        over = t + (need if need < MINUTE else MINUTE) - (now + MINUTE)
        if over > SLACK:
            return over
        self.full_at = t + need
        return 0.0

    def take(self, amount: float, now: float) -> None:
        t = self.full_at
        self.full_at = (t if t > now else now) + amount * self.per_unit

    def give(self, amount: float, now: float) -> None:
        t = self.full_at
        t = (t if t > now else now) - amount * self.per_unit
        self.full_at = t if t > now else now  # (never more than full)


class Rates(Protocol):
    """The rate counters of one request, charged together: the per-request ones (one
    each) then the per-token ones (the request's tokens each), in that order."""

    def charge(self, tokens: float, now: float) -> tuple[RateCounter, float] | None:
        """Charge each in order while it admits (``RateCounter.charge``). None: every one
        did; else the one that refused and its wait, the ones before it charged, it and
        the ones after it not asked."""
        ...

    def give(self, tokens: float, now: float) -> None:
        """Give ``tokens`` back to each per-token counter (negative: take more)."""
        ...


class _BucketRates:
    """``Rates`` of this pod's own buckets: ``TokenBucket``'s arithmetic, in one loop
    per kind (a call per bucket was a quarter of an admission's cost)."""

    __slots__ = ("per_request", "per_token")

    def __init__(self, per_request: tuple[TokenBucket, ...], per_token: tuple[TokenBucket, ...]):
        self.per_request = per_request
        self.per_token = per_token

    def charge(self, tokens: float, now: float) -> tuple[RateCounter, float] | None:
        # ``TokenBucket.charge`` of each, its comparison with the slack added once: the
        # wait is worked out only for the one that refuses.
        latest = now + _LATEST
        for b in self.per_request:
            t = b.full_at
            if t < now:
                t = now
            t += b.per_unit  # (one unit: never more than the bucket, capacity >= 1)
            if t > latest:
                return b, _wait(t - (now + MINUTE))
            b.full_at = t
        minute = MINUTE
        for b in self.per_token:
            t = b.full_at
            if t < now:
                t = now
            need = tokens * b.per_unit
            if t + (need if need < minute else minute) > latest:
                return b, _wait(t + (need if need < minute else minute) - (now + minute))
            b.full_at = t + need
        return None

    def give(self, tokens: float, now: float) -> None:
        for b in self.per_token:
            t = b.full_at
            t = (t if t > now else now) - tokens * b.per_unit
            b.full_at = t if t > now else now


def _wait(over: float) -> float:
    """The wait of a bucket that refused: ``over``, never 0 (a refusal must name a wait;
    its comparison, ``latest``, rounds apart from this subtraction by an ulp)."""
    return over if over > SLACK else SLACK


class _CounterRates:
    """``Rates`` of any counters (a cluster's leases, shares.py): one call each."""

    __slots__ = ("per_request", "per_token")

    def __init__(self, per_request: tuple[RateCounter, ...], per_token: tuple[RateCounter, ...]):
        self.per_request = per_request
        self.per_token = per_token

    def charge(self, tokens: float, now: float) -> tuple[RateCounter, float] | None:
        for counter in self.per_request:
            wait = counter.charge(1, now)
            if wait:
                return counter, wait
        for counter in self.per_token:
            wait = counter.charge(tokens, now)
            if wait:
                return counter, wait
        return None

    def give(self, tokens: float, now: float) -> None:
        for counter in self.per_token:
            counter.give(tokens, now)


def rates(per_request: tuple[RateCounter, ...], per_token: tuple[RateCounter, ...]) -> Rates:
    """The ``Rates`` of these counters: inline arithmetic when they are all this pod's
    own buckets, a call per counter otherwise."""
    if all(type(c) is TokenBucket for c in (*per_request, *per_token)):
        return _BucketRates(per_request, per_token)  # type: ignore[arg-type]  # (checked)
    return _CounterRates(per_request, per_token)


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
