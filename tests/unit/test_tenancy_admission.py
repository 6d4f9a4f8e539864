"""The admission's fast path against its definition: GCRA buckets, a plan's rates charged
together, refusals that undo what they charged, budgets rolled over on the monotonic clock.

The limits' semantics (the N-th request passes, the N+1-th is refused with the wait that
makes it pass) are test_tenancy.py's; what is asserted here is that the cheaper
representations keep them: a GCRA bucket admits exactly what a token bucket does (a
capacity that does not divide the minute too), the plan's inline loop answers what each
bucket's own ``charge`` answers, a refusal leaves every counter as it found it (and a
cluster's lease counts the request once in its demand), and a budget's period still ends
at its wall-clock end.
"""

from __future__ import annotations

import copy
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sardeenz.proxy.reqlog import usage_tokens, usage_total
from sardeenz.tenancy import admission as admission_module
from sardeenz.tenancy.admission import ALL_MODELS, ROLL_CHECK_SECONDS, Admission, Rejection, Ticket
from sardeenz.tenancy.counters import (
    MINUTE,
    SLACK,
    TokenBucket,
    rates,
    retry_after,
)
from sardeenz.tenancy.shares import LeasedBucket, SharedCounters
from sardeenz.tenancy.spec import Limits, Tenant

# ------------------------------------------------------------------ GCRA bucket


@pytest.mark.parametrize("capacity", [1, 3, 7, 13, 60, 97, 1000, 10**7])
def test_a_burst_of_exactly_the_capacity_passes_at_one_instant(capacity: int) -> None:
    """The sums of ``60 / capacity`` round; the N-th of N still passes (``SLACK``), the
    N+1-th waits one unit's time (to a thousandth of a unit: the rounding of 2000 sums
    at 10^5 s), and the Retry-After says it in whole seconds."""
    now = 123456.789  # a monotonic clock's magnitude, not 0
    bucket = TokenBucket(capacity, now)
    for _ in range(min(capacity, 2000)):
        assert bucket.charge(1, now) == 0.0
    if capacity > 2000:
        bucket.take(capacity - 2000, now)
    wait = bucket.charge(1, now)
    assert wait == pytest.approx(MINUTE / capacity, abs=MINUTE / capacity / 1000 + 2 * SLACK)
    assert retry_after(wait) == max(1, -(-60 // capacity))  # ceil(60 / capacity)
    assert bucket.level_at(now) == pytest.approx(0, abs=1e-3)  # (the same thousandth)


def test_a_bucket_refills_at_its_rate_and_never_above_its_capacity() -> None:
    bucket = TokenBucket(6, 0.0)  # one every 10 s
    bucket.take(6, 0.0)
    assert bucket.level_at(25.0) == pytest.approx(2.5)
    assert bucket.wait(3, 25.0) == pytest.approx(5.0)
    assert bucket.charge(2, 25.0) == 0.0
    assert bucket.level_at(1000.0) == 6  # full, not 100
    assert bucket.wait(6, 1000.0) == 0.0
    assert bucket.wait(7, 1000.0) == 0.0  # bigger than the bucket: passes when full
    bucket.take(7, 1000.0)
    assert bucket.level_at(1000.0) == pytest.approx(-1)
    assert bucket.wait(1, 1000.0) == pytest.approx(20.0)  # the debt, then one unit


def test_a_huge_limit_late_in_a_monotonic_clock_is_off_by_at_most_its_slack() -> None:
    """10^12 tokens a minute: a token is 6e-11 s, less than a float's step at 10^6 s of
    uptime; what a full bucket admits beyond its capacity is the slack's worth."""
    now = 1e6
    capacity = 10**12
    bucket = TokenBucket(capacity, now)
    assert bucket.charge(capacity, now) == 0.0
    slack_tokens = SLACK * capacity / MINUTE  # about 17
    assert bucket.charge(2 * slack_tokens, now) > 0  # refused: beyond the slack
    assert bucket.charge(capacity / 2, now + 30.0) == 0.0  # half a minute: half refilled
    assert bucket.level_at(now + 30.0) == pytest.approx(0, abs=10**4)


@settings(max_examples=200, deadline=None)
@given(
    capacities=st.tuples(*[st.integers(1, 5000)] * 4),
    steps=st.lists(st.tuples(st.integers(0, 90_000), st.integers(1, 20_000)), max_size=40),
)
def test_a_plans_rates_answer_what_each_buckets_charge_answers(
    capacities: tuple[int, int, int, int], steps: list[tuple[int, int]]
) -> None:
    """``Rates.charge`` (the inline loop) against each bucket's ``charge`` in order,
    stopping at the first refusal and giving back what was charged before it (what
    ``Plan.refused`` does): the same admissions, waits and states. Times in ms."""
    start = 5000.0
    inline = [TokenBucket(c, start) for c in capacities]
    alone = copy.deepcopy(inline)
    group = rates((inline[0], inline[1]), (inline[2], inline[3]))
    now = start
    for gap_ms, tokens in steps:
        now += gap_ms / 1000
        got = group.charge(tokens, now)
        expected = None
        amounts = [1, 1, tokens, tokens]
        for i, bucket in enumerate(alone):
            wait = bucket.charge(amounts[i], now)
            if wait:
                expected = (i, wait)
                for j in range(i):
                    alone[j].give(amounts[j], now)
                break
        if expected is None:
            assert got is None
        else:
            assert got is not None
            counter, wait = got
            assert counter is inline[expected[0]]
            assert wait == pytest.approx(expected[1], rel=1e-9, abs=1e-9)
            for j in range(expected[0]):
                inline[j].give(amounts[j], now)
        group.give(tokens // 3, now)  # the engine used less than the estimate
        for b in alone[2:]:
            b.give(tokens // 3, now)
        for a, b in zip(inline, alone, strict=True):
            assert a.full_at == pytest.approx(b.full_at, rel=1e-12)


def test_counters_of_a_cluster_are_charged_one_call_each() -> None:
    """Leases are not this pod's buckets: ``rates`` calls their ``charge``."""
    leased = LeasedBucket(60, 1, 0.0)
    group = rates((leased,), ())
    assert type(group).__name__ == "_CounterRates"
    for _ in range(60):
        assert group.charge(5, 0.0) is None
    refused = group.charge(5, 0.0)
    assert refused is not None
    assert refused[0] is leased
    assert refused[1] == pytest.approx(1.0)
    assert leased.asked == 61  # every request counted in its demand, admitted or not


# ------------------------------------------------------------------ plans and refusals

WALL0 = datetime(2026, 12, 4, 23, 59, 50, tzinfo=UTC).timestamp()  # 10 s to midnight UTC


class Clock:
    """The admission's clocks; starts ahead of the real monotonic clock, where this
    pod's buckets are made (``LocalCounters.rate``), so they start full."""

    def __init__(self) -> None:
        self.t = time.monotonic() + 100.0
        self.t0 = self.t
        self.step = 0.0
        """Added to the wall clock alone (a clock stepped by NTP or by hand)."""

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return WALL0 + self.t - self.t0 + self.step


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(admission_module, "_mono", c.mono)
    monkeypatch.setattr(admission_module, "_wall", c.wall)
    monkeypatch.setattr("sardeenz.tenancy.shares.monotonic", c.mono)
    return c


def _tenant(models: dict[str, Limits] | None = None, **limits: Any) -> Tenant:
    return Tenant(
        name="team", source="api", api_keys=["k1"], limits=Limits(**limits), models=models or {}
    )


def _admit(adm: Admission, model: str = "m", max_tokens: int = 10) -> Ticket | Rejection | None:
    return adm.admit("k1", model, {"max_tokens": max_tokens}, 40)  # estimate 10 + max_tokens


def _state(adm: Admission) -> list[Any]:
    out: list[Any] = []
    for s in adm.scopes():
        for rate in (s.rpm, s.tpm):
            if isinstance(rate, TokenBucket):
                out.append(rate.full_at)
            elif isinstance(rate, LeasedBucket):
                out.append((rate.allowance, rate.level, rate.unleased))
        out += [s.inflight, *[(b.used, b.held) for b in (s.day, s.month) if b is not None]]
    return out


@pytest.mark.parametrize("cluster", [False, True], ids=["one pod", "leases"])
def test_a_refusal_by_the_last_rate_leaves_every_counter_as_it_was(
    clock: Clock, cluster: bool
) -> None:
    """The tenant's rates admit, the model's tokens refuse: what the fast path charged
    before it is given back, and each lease counts the request once in its demand."""
    counters = SharedCounters(1, {}) if cluster else None
    adm = Admission(counters)
    every = {"requests_per_minute": 100, "tokens_per_minute": 10_000}
    adm.configure([_tenant({"big": Limits(requests_per_minute=50, tokens_per_minute=30)}, **every)])
    assert isinstance(_admit(adm, "big", max_tokens=10), Ticket)  # 20 of the 30
    before = _state(adm)
    refused = _admit(adm, "big", max_tokens=10)
    assert isinstance(refused, Rejection)
    assert (refused.scope, refused.reason, refused.limit) == ("big", "tokens_per_minute", 30)
    assert refused.retry_after == 20  # 10 short of 20, at 30 a minute
    assert _state(adm) == before
    if cluster:
        asked = [(s.rpm.asked, s.tpm.asked) for s in adm.scopes()]  # type: ignore[union-attr]
        assert asked == [(2, 40), (2, 40)]  # two requests of 20 tokens, each once


@pytest.mark.parametrize("cluster", [False, True], ids=["one pod", "leases"])
@pytest.mark.parametrize("refusing", ["concurrent_requests", "tokens_per_month"])
def test_a_refusal_by_the_concurrency_or_a_budget_leaves_every_counter_as_it_was(
    clock: Clock, cluster: bool, refusing: str
) -> None:
    """The concurrency is checked before the rates are charged, a budget after (the
    rates then given back): either way nothing is taken, each lease asked once."""
    counters = SharedCounters(1, {}) if cluster else None
    adm = Admission(counters)
    limits = {"requests_per_minute": 100, "tokens_per_minute": 10_000, "tokens_per_day": 10**6}
    if refusing == "concurrent_requests":
        limits["concurrent_requests"] = 1
    else:
        limits["tokens_per_month"] = 20  # 20 held of 20; after the day's: its hold undone
    adm.configure([_tenant({"big": Limits(tokens_per_minute=1000)}, **limits)])
    assert isinstance(_admit(adm, "big", max_tokens=10), Ticket)  # 20 tokens, 1 in flight
    before = _state(adm)
    refused = _admit(adm, "big", max_tokens=10)
    assert isinstance(refused, Rejection)
    assert (refused.scope, refused.reason) == (ALL_MODELS, refusing)
    assert _state(adm) == before
    if cluster:
        asked = [(getattr(s.rpm, "asked", 0), getattr(s.tpm, "asked", 0)) for s in adm.scopes()]
        assert asked == [(2, 40), (0, 40)]


def test_of_two_scopes_refusing_the_longer_wait_is_answered(clock: Clock) -> None:
    adm = Admission()
    adm.configure(
        [_tenant({"big": Limits(tokens_per_minute=60)}, requests_per_minute=2)]  # 30 s, 1 s
    )
    assert isinstance(_admit(adm, "big", max_tokens=50), Ticket)  # 60 of 60 tokens
    assert isinstance(_admit(adm, "small"), Ticket)  # 2 of 2 requests
    refused = _admit(adm, "big", max_tokens=50)
    assert isinstance(refused, Rejection)
    assert (refused.scope, refused.reason, refused.retry_after) == ("big", "tokens_per_minute", 60)
    clock.t += 45  # the requests' rate has room again (one each 30 s), the tokens not
    refused = _admit(adm, "big", max_tokens=50)
    assert isinstance(refused, Rejection)
    assert (refused.reason, refused.retry_after) == ("tokens_per_minute", 15)
    refused = _admit(adm, "big", max_tokens=50)  # one refusal takes nothing: same answer
    assert isinstance(refused, Rejection)
    assert (refused.reason, refused.retry_after) == ("tokens_per_minute", 15)
    busy = Admission()
    busy.configure([_tenant({"big": Limits(concurrent_requests=1)}, tokens_per_day=10**6)])
    assert isinstance(_admit(busy, "big"), Ticket)
    refused = _admit(busy, "big")
    assert isinstance(refused, Rejection)
    assert (refused.scope, refused.reason, refused.retry_after) == ("big", "concurrent_requests", 1)


def test_a_day_budget_ends_at_midnight_utc_read_on_the_monotonic_clock(clock: Clock) -> None:
    adm = Admission()
    adm.configure([_tenant(tokens_per_day=40)])
    (scope,) = adm.scopes()
    assert scope.day is not None
    day = scope.day.period_id
    for _ in range(2):
        ticket = _admit(adm)
        assert isinstance(ticket, Ticket)
        ticket.settle(200, b'"usage":{"prompt_tokens":15,"completion_tokens":5}', b"")
    refused = _admit(adm)
    assert isinstance(refused, Rejection)
    assert (refused.reason, refused.retry_after) == ("tokens_per_day", 10)
    clock.t += 9.5
    assert isinstance(_admit(adm), Rejection)  # 23:59:59.5: the same day
    clock.t += 0.5
    ticket = _admit(adm)  # midnight: a new day, from zero
    assert isinstance(ticket, Ticket)
    assert scope.day.period_id != day
    ticket.settle(200, b'"usage":{"prompt_tokens":15,"completion_tokens":5}', b"")
    assert (scope.day.used, scope.day.held) == (20, 0)


def test_a_request_in_flight_over_midnight_counts_in_the_new_day(clock: Clock) -> None:
    adm = Admission()
    adm.configure([_tenant(tokens_per_day=1000)])
    (scope,) = adm.scopes()
    ticket = _admit(adm)
    assert isinstance(ticket, Ticket)
    clock.t += 30  # past midnight, no request since: the settlement rolls the day over
    ticket.settle(200, b'"usage":{"prompt_tokens":15,"completion_tokens":5}', b"")
    assert scope.day is not None
    assert scope.day.period_id == "2026-12-05"
    assert (scope.day.used, scope.day.held) == (20, 0)


def test_a_wall_clock_stepped_past_midnight_is_seen_within_the_roll_check(
    clock: Clock,
) -> None:
    adm = Admission()
    adm.configure([_tenant(tokens_per_day=20)])
    (scope,) = adm.scopes()
    clock.step = -3600  # an hour before midnight
    ticket = _admit(adm)
    assert isinstance(ticket, Ticket)
    ticket.settle(200, b'"usage":{"prompt_tokens":15,"completion_tokens":5}', b"")
    assert isinstance(_admit(adm), Rejection)  # 20 used of 20
    clock.step = 10  # the wall clock jumps past midnight; the monotonic one does not
    assert isinstance(_admit(adm), Rejection)  # not asked yet: within the roll check
    clock.t += ROLL_CHECK_SECONDS
    again = _admit(adm)
    assert isinstance(again, Ticket)
    assert scope.day is not None
    assert scope.day.period_id == "2026-12-05"


def test_a_ticket_outliving_its_plan_settles_against_the_scopes_counters(clock: Clock) -> None:
    adm = Admission()
    adm.configure([_tenant(tokens_per_minute=100, concurrent_requests=3)])
    ticket = _admit(adm)  # 20 tokens
    assert isinstance(ticket, Ticket)
    adm.configure([_tenant(concurrent_requests=3, tokens_per_day=1000)])  # tpm gone, a budget
    (scope,) = adm.scopes()
    ticket.settle(200, b'"usage":{"prompt_tokens":1,"completion_tokens":1}', b"")
    assert scope.inflight == 0
    assert scope.day is not None
    assert (scope.day.used, scope.day.held) == (2, 0)  # read: the old plan counted tokens


def test_the_scope_of_a_model_without_limits_is_the_tenants() -> None:
    adm = Admission()
    adm.configure([_tenant({"big": Limits(requests_per_minute=1)}, requests_per_minute=2)])
    refused = [_admit(adm, "other") for _ in range(3)][-1]
    assert isinstance(refused, Rejection)
    assert refused.scope == ALL_MODELS


# ------------------------------------------------------------------ usage


@pytest.mark.parametrize(
    ("last", "prev"),
    [
        (b'{"usage":{"prompt_tokens":9,"completion_tokens":4,"total_tokens":13}}', b""),
        (b'{"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4}}', b""),
        (b'"usage":{"prompt_tokens":9,"total_tokens":13,"completion_tokens":4,"x":null}}', b""),
        (b'"usage": {"completion_tokens": 9, "prompt_tokens": 4}}', b""),
        (b'"usage":{"prompt_tokens":6,"total_tokens":6}}', b""),
        (b'"usage":{"prompt_tokens":1234567890123,"completion_tokens":1}}', b""),
        (b'"usage":null}', b""),
        (b"data: [DONE]\n\n", b'data: {"usage":{"prompt_tokens":3,"completion_tokens":5}}\n\n'),
        (b'{"usage":{"prompt_tokens":1,"completion_tokens":1}} "usage":{"prompt_tokens":2,', b""),
        (b"", b""),
    ],
)
def test_usage_total_is_the_sum_usage_tokens_reads(last: bytes, prev: bytes) -> None:
    prompt, completion = usage_tokens(last, prev)
    expected = None if prompt is None else prompt + (completion or 0)
    assert usage_total(last, prev) == expected
