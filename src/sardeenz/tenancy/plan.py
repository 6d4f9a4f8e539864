"""What a tenant's request is checked against: its scopes' counters, flattened into a plan.

A tenant has a scope for its whole traffic (``ALL_MODELS``) and one per model it
limits apart (``Scope``: the counters of one scope, kept across reconfigurations).
A request to a model is checked against a ``Plan``: the counters of its scopes that
exist, listed once per ``Admission.configure`` (admission.py), so that a request
touches those and nothing else, and the refusal it gets when one says no. No clock
is read here: admission.py passes its own (the tests set them).
"""

from __future__ import annotations

import math
from typing import Final, NamedTuple

from sardeenz.tenancy.counters import (
    BudgetCounter,
    CounterFactory,
    RateCounter,
    Rates,
    rates,
    retry_after,
)
from sardeenz.tenancy.spec import Limits

ROLL_CHECK_SECONDS: Final = 1.0
"""How long a plan goes without asking its budgets whether their period ended, at most
(``Plan.roll``): the periods' ends are wall-clock times, the requests read the monotonic
clock; a wall clock stepped forward past a period's end is seen within this."""

ALL_MODELS: Final = "*"
"""The scope of a tenant's whole traffic (a model scope is named by the served name)."""
CONCURRENCY_RETRY_AFTER: Final = 1
"""``Retry-After`` of a refusal by the concurrency limit: nobody knows when a request
in flight ends, and a second is what a client waits before trying again."""

LIMIT_WORDS: Final = {
    "requests_per_minute": "requests per minute",
    "tokens_per_minute": "tokens per minute",
    "concurrent_requests": "concurrent requests",
    "tokens_per_day": "tokens per day",
    "tokens_per_month": "tokens per month",
}


class Rejection(NamedTuple):
    """A refusal: which tenant, which limit (a ``Limits`` field name), how long to wait."""

    tenant: str
    scope: str
    reason: str
    limit: int
    retry_after: int
    key: str = ""
    """The API key id the refused request came with (for the usage meter)."""
    model: str = ""
    """The served model it asked for."""

    @property
    def message(self) -> str:
        where = "" if self.scope == ALL_MODELS else f" for the model {self.scope[:200]!r}"
        return (
            f"Rate limit reached for tenant {self.tenant!r}{where}: "
            f"{LIMIT_WORDS[self.reason]} limit of {self.limit}. "
            f"Try again in {self.retry_after} s."
        )


class Scope:
    """The counters of one tenant scope; kept across reconfigurations (see ``configure``)."""

    __slots__ = (
        "busy_refusals",
        "concurrency",
        "day",
        "inflight",
        "month",
        "name",
        "rpm",
        "slots",
        "tenant",
        "tpm",
    )

    def __init__(self, tenant: str, name: str) -> None:
        self.tenant = tenant
        self.name = name
        self.rpm: RateCounter | None = None
        self.tpm: RateCounter | None = None
        self.concurrency: int | None = None
        """The tenant's limit (what a refusal names)."""
        self.slots: int | None = None
        """This pod's part of it: the limit on one node, a share in a cluster (shares.py)."""
        self.inflight = 0
        self.busy_refusals = 0
        """Refusals by the concurrency limit (the demand a cluster's share follows)."""
        self.day: BudgetCounter | None = None
        self.month: BudgetCounter | None = None

    @property
    def counts_tokens(self) -> bool:
        return self.tpm is not None or self.day is not None or self.month is not None

    def refusal(self, wall: float, wait_rpm: float, wait_tpm: float) -> Rejection | None:
        """The limit of this scope that refuses (the longest wait of those that do), the
        rate limits' waits given (``Plan.refused``); budgets rolled over up to ``wall``."""
        rpm, tpm, day, month = self.rpm, self.tpm, self.day, self.month
        candidates: list[tuple[float, str, int]] = []
        if self.slots is not None and self.inflight >= self.slots and self.concurrency is not None:
            self.busy_refusals += 1
            candidates.append((CONCURRENCY_RETRY_AFTER, "concurrent_requests", self.concurrency))
        if wait_rpm and rpm is not None:
            candidates.append((wait_rpm, "requests_per_minute", int(rpm.capacity)))
        if wait_tpm and tpm is not None:
            candidates.append((wait_tpm, "tokens_per_minute", int(tpm.capacity)))
        if day is not None and day.used + day.held >= day.limit:
            candidates.append((day.reset_at(wall) - wall, "tokens_per_day", day.limit))
        if month is not None and month.used + month.held >= month.limit:
            candidates.append((month.reset_at(wall) - wall, "tokens_per_month", month.limit))
        if not candidates:
            return None
        wait, reason, limit = max(candidates)
        return Rejection(self.tenant, self.name, reason, limit, retry_after(wait))

    def cancel(self, estimate: int, now: float) -> None:
        self.inflight -= 1
        if self.rpm is not None:
            self.rpm.give(1, now)
        if self.tpm is not None:
            self.tpm.give(estimate, now)
        for budget in (self.day, self.month):
            if budget is not None:
                budget.held = max(0, budget.held - estimate)

    def apply(self, limits: Limits, counters: CounterFactory, wall: float, now: float) -> None:
        """Take ``limits``, keeping what was consumed under the previous ones."""
        self.rpm = _rate(self, self.rpm, limits.requests_per_minute, "rpm", counters, now)
        self.tpm = _rate(self, self.tpm, limits.tokens_per_minute, "tpm", counters, now)
        if limits.concurrent_requests is None:
            self.slots = None
        elif limits.concurrent_requests != self.concurrency or self.slots is None:
            self.slots = counters.slots(self.tenant, self.name, limits.concurrent_requests)
        self.concurrency = limits.concurrent_requests
        self.day = _budget(self, self.day, limits.tokens_per_day, "day", counters, wall)
        self.month = _budget(self, self.month, limits.tokens_per_month, "month", counters, wall)


def _rate(
    scope: Scope,
    held: RateCounter | None,
    limit: int | None,
    kind: str,
    counters: CounterFactory,
    now: float,
) -> RateCounter | None:
    if limit is None:
        return None
    if held is None:
        return counters.rate(scope.tenant, scope.name, kind, limit)
    if held.capacity != limit:
        held.resize(limit, now)
    return held


def _budget(
    scope: Scope,
    held: BudgetCounter | None,
    limit: int | None,
    period: str,
    counters: CounterFactory,
    wall: float,
) -> BudgetCounter | None:
    if limit is None:
        return None
    if held is None:
        return counters.budget(scope.tenant, scope.name, period, limit, wall)
    held.limit = limit
    return held


class Plan:
    """What a request of one tenant to one model is checked against, flattened.

    Why: a request's scopes (the tenant's whole traffic, and the model's) hold up to
    four rate limits, two budgets and two in-flight counts; walking them scope by scope
    asked each ``is not None`` on every request. A plan lists, once per
    ``Admission.configure`` (the only place a scope's counters change), the counters
    that exist, so a request touches those and nothing else. Its order is the scopes'
    (the tenant's first), which a refusal's choice depends on (``refused``).
    """

    __slots__ = (
        "budgets",
        "check_at",
        "counts_tokens",
        "gated",
        "per_request",
        "per_token",
        "rates",
        "scopes",
        "stale",
        "tenant",
    )

    def __init__(self, tenant: str, scopes: tuple[Scope, ...]) -> None:
        self.tenant = tenant
        self.scopes = scopes
        self.stale = False
        """Replaced by a later ``configure``: its scopes' counters may have changed (a
        limit added or removed), so a ticket of it settles against the scopes' own."""
        self.per_request = tuple(s.rpm for s in scopes if s.rpm is not None)
        """Charged one per request."""
        self.per_token = tuple(s.tpm for s in scopes if s.tpm is not None)
        """Charged the request's estimate, settled to its usage."""
        self.rates: Rates = rates(self.per_request, self.per_token)
        self.budgets = tuple(b for s in scopes for b in (s.day, s.month) if b is not None)
        self.gated = tuple(s for s in scopes if s.concurrency is not None)
        """Scopes with a concurrency limit (their ``slots`` an int: ``Scope.apply``)."""
        self.counts_tokens = bool(self.per_token or self.budgets)
        """Whether a request's end must read its usage: any token limit in any scope."""
        self.check_at = -math.inf
        """Monotonic time before which none of the budgets' periods ends, as their
        ``reset_at`` last said (a period does not change before its end): before it,
        asking them is skipped, and their ``add`` is written inline (-inf: ask)."""

    def roll(self, now: float, wall: float) -> None:
        """Roll the budgets whose period ended over (a new period starts from zero)."""
        ends = min([b.reset_at(wall) for b in self.budgets], default=math.inf)
        self.check_at = now + min(ends - wall, ROLL_CHECK_SECONDS)

    def refused(
        self,
        tokens: int,
        now: float,
        wall: float,
        failed: RateCounter | None = None,
        wait: float = 0.0,
        budget: BudgetCounter | None = None,
    ) -> Rejection:
        """The refusal of a request the fast path (``Admission.admit``) could not admit,
        and what it charged undone.

        The fast path's order: the concurrency, the rates (per request, then per token),
        the budgets. ``failed``: the rate that refused (``wait``: its seconds), the ones
        before it charged (given back here), the ones after it asked here (so each rate
        counts the request once in its demand, shares.py ``LeasedBucket.asked``).
        ``budget``: the budget that refused, every rate charged (each admitted: a wait of
        0) and the budgets before it holding the tokens. Neither: the concurrency refused,
        nothing charged, every rate asked here. The answer is the one admission always
        gave: of each scope the limit with the longest wait, of the scopes the first
        unless a later one's ``Retry-After`` is longer.
        """
        order = [(r, 1) for r in self.per_request] + [(r, tokens) for r in self.per_token]
        if budget is not None:
            charged = len(order)
            for before in self.budgets[: self.budgets.index(budget)]:
                before.held -= tokens
        else:
            charged = [r for r, _ in order].index(failed) if failed is not None else 0
        waits: dict[int, float] = {}
        for i, (counter, amount) in enumerate(order):
            if i < charged:
                counter.give(amount, now)  # admitted by it: undone
                waits[id(counter)] = 0.0
            elif counter is failed:
                waits[id(counter)] = wait
            else:
                waits[id(counter)] = counter.wait(amount, now)
        refusal = None
        for scope in self.scopes:
            found = scope.refusal(
                wall,
                waits.get(id(scope.rpm), 0.0),
                waits.get(id(scope.tpm), 0.0),
            )
            if found is not None and (refusal is None or found.retry_after > refusal.retry_after):
                refusal = found
        if refusal is None:  # (not reached: the fast path saw one refuse)
            raise AssertionError("a refused request with no limit refusing")
        return refusal
