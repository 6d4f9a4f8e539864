"""Tenant limits without a server: the token bucket, budgets, admission, the spec checks.

Time is passed in explicitly (the bucket) or the counters are read after each step,
so every edge is exact: the N-th request passes, the N+1-th is refused with the wait
that makes it pass.
"""

from __future__ import annotations

import copy
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from sardeenz.tenancy.admission import (
    ALL_MODELS,
    Admission,
    Rejection,
    Ticket,
    estimate_tokens,
)
from sardeenz.tenancy.counters import (
    LocalCounters,
    PeriodBudget,
    TokenBucket,
    period_bounds,
    retry_after,
)
from sardeenz.tenancy.spec import Limits, Tenant, TenantBody, TenantConflict, check_set, from_config

# ------------------------------------------------------------------ token bucket


def test_a_bucket_admits_its_capacity_then_says_how_long_to_wait() -> None:
    bucket = TokenBucket(3, now=0.0)  # 3 per minute: one every 20 s
    for _ in range(3):
        assert bucket.wait(1, 0.0) == 0
        bucket.take(1, 0.0)
    assert bucket.wait(1, 0.0) == pytest.approx(20.0)
    assert bucket.wait(1, 19.9) == pytest.approx(0.1)
    assert bucket.wait(1, 20.0) == 0


def test_a_request_bigger_than_the_bucket_passes_when_it_is_full_and_leaves_a_debt() -> None:
    bucket = TokenBucket(60, now=0.0)  # 1 token a second
    assert bucket.wait(100, 0.0) == 0  # never refused forever
    bucket.take(100, 0.0)
    assert bucket.level_at(0.0) == -40
    assert bucket.wait(1, 0.0) == pytest.approx(41.0)


def test_giving_back_never_overfills_and_a_negative_give_takes_more() -> None:
    bucket = TokenBucket(10, now=0.0)
    bucket.take(8, 0.0)
    bucket.give(100, 0.0)
    assert bucket.level_at(0.0) == 10
    bucket.give(-15, 0.0)
    assert bucket.level_at(0.0) == -5


def test_resizing_keeps_what_was_consumed() -> None:
    bucket = TokenBucket(10, now=0.0)
    bucket.take(10, 0.0)
    bucket.resize(20, 0.0)
    assert bucket.level_at(0.0) == 10  # 10 consumed of 20
    bucket.resize(5, 0.0)
    assert bucket.level_at(0.0) == -5


@settings(max_examples=200, deadline=None)
@given(
    capacity=st.integers(1, 10_000),
    steps=st.lists(
        st.tuples(st.floats(0, 120, allow_nan=False), st.integers(1, 20_000)), max_size=40
    ),
)
def test_a_bucket_never_admits_more_than_capacity_plus_its_refill(
    capacity: int, steps: list[tuple[float, int]]
) -> None:
    """Over any sequence of admissions, what was taken is at most the capacity, plus the
    refill over the elapsed time, plus the one oversized request a full bucket allows;
    and the wait it announces is exactly what makes the request pass."""
    bucket = TokenBucket(capacity, now=0.0)
    now = 0.0
    taken = 0
    largest = 0
    for gap, amount in steps:
        now += gap
        wait = bucket.wait(amount, now)
        if wait == 0:
            bucket.take(amount, now)
            taken += amount
            largest = max(largest, amount)
        else:
            # (asked of copies: asking refills the bucket up to the time asked about)
            assert copy.copy(bucket).wait(amount, now + wait + 1e-6) == 0
            assert copy.copy(bucket).wait(amount, now + wait * 0.99) > 0
        assert bucket.level_at(now) <= capacity
    assert taken <= capacity + now * capacity / 60 + max(0, largest - capacity) + 1e-6


def test_retry_after_rounds_up_and_is_at_least_one_second() -> None:
    assert retry_after(0.01) == 1
    assert retry_after(20.0) == 20
    assert retry_after(20.0001) == 21


# --------------------------------------------------------------------- budgets


def test_periods_are_utc_days_and_calendar_months() -> None:
    wall = datetime(2026, 2, 14, 23, 59, tzinfo=UTC).timestamp()
    assert period_bounds("day", wall) == (
        "2026-02-14",
        datetime(2026, 2, 15, tzinfo=UTC).timestamp(),
    )
    assert period_bounds("month", wall) == (
        "2026-02",
        datetime(2026, 3, 1, tzinfo=UTC).timestamp(),
    )
    december = datetime(2026, 12, 31, 12, tzinfo=UTC).timestamp()
    assert period_bounds("month", december)[1] == datetime(2027, 1, 1, tzinfo=UTC).timestamp()


def test_a_budget_rolls_over_at_the_end_of_its_period() -> None:
    start = datetime(2026, 12, 4, 10, tzinfo=UTC).timestamp()
    budget = PeriodBudget("day", 100, start, used=90)
    budget.dirty = False
    end = budget.reset_at(start)
    assert end == datetime(2026, 12, 5, tzinfo=UTC).timestamp()
    assert budget.used == 90
    assert not budget.dirty
    budget.reset_at(end)
    assert budget.used == 0
    assert budget.period_id == "2026-12-05"
    assert budget.dirty


def test_stored_usage_seeds_the_budget_of_the_current_period_only() -> None:
    wall = datetime(2026, 12, 4, 10, tzinfo=UTC).timestamp()
    counters = LocalCounters({("t", "*", "2026-12-04"): 70, ("t", "*", "2026-12-03"): 999})
    assert counters.budget("t", "*", "day", 100, wall).used == 70
    assert counters.budget("t", "*", "month", 100, wall).used == 0


# ------------------------------------------------------------------- admission


def _tenant(name: str = "team", keys: tuple[str, ...] = ("k1",), **limits: Any) -> Tenant:
    models = limits.pop("models", {})
    return Tenant(
        name=name, source="api", api_keys=list(keys), limits=Limits(**limits), models=models
    )


def _admit(adm: Admission, model: str = "m", max_tokens: int = 10) -> Ticket | Rejection | None:
    # 40 body bytes: a prompt estimate of 10 tokens, + max_tokens
    return adm.admit("k1", model, {"max_tokens": max_tokens}, 40)


def test_no_tenant_for_the_key_means_nothing_is_counted() -> None:
    adm = Admission()
    assert not adm.active
    adm.configure([_tenant(requests_per_minute=1)])
    assert adm.active
    assert adm.admit("other-key", "m", {}, 10) is None


def test_requests_per_minute_edge() -> None:
    adm = Admission()
    adm.configure([_tenant(requests_per_minute=5)])
    tickets = [_admit(adm) for _ in range(5)]
    assert all(isinstance(t, Ticket) for t in tickets)
    refused = _admit(adm)
    assert isinstance(refused, Rejection)
    assert refused.reason == "requests_per_minute"
    assert refused.limit == 5
    assert refused.retry_after in (11, 12)  # 60/5 s, less what refilled meanwhile
    assert "requests per minute limit of 5" in refused.message


def test_concurrency_edge_and_release() -> None:
    adm = Admission()
    adm.configure([_tenant(concurrent_requests=2)])
    first, second = _admit(adm), _admit(adm)
    assert isinstance(first, Ticket)
    assert isinstance(second, Ticket)
    refused = _admit(adm)
    assert isinstance(refused, Rejection)
    assert refused.reason == "concurrent_requests"
    assert refused.retry_after == 1
    first.settle(200, b"", b"")
    first.settle(200, b"", b"")  # settling twice releases once
    assert isinstance(_admit(adm), Ticket)
    assert isinstance(_admit(adm), Rejection)


def test_tokens_per_minute_charges_the_estimate_then_the_engines_usage() -> None:
    adm = Admission()
    adm.configure([_tenant(tokens_per_minute=100)])
    ticket = _admit(adm, max_tokens=50)  # estimate 60
    assert isinstance(ticket, Ticket)
    assert ticket.estimate == 60
    assert isinstance(_admit(adm, max_tokens=50), Rejection)  # 40 left < 60
    usage = b'{"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}'
    ticket.settle(200, usage, b"")  # 90 left
    assert isinstance(_admit(adm, max_tokens=50), Ticket)


def test_a_failed_request_without_usage_is_not_charged_but_a_stream_without_it_is() -> None:
    adm = Admission()
    adm.configure([_tenant(tokens_per_day=1000)])
    (scope,) = adm.scopes()
    failed = _admit(adm, max_tokens=90)
    assert isinstance(failed, Ticket)
    failed.settle(502, b"", b"")
    assert scope.day is not None
    assert scope.day.used == 0
    assert scope.day.held == 0
    stream = _admit(adm, max_tokens=90)
    assert isinstance(stream, Ticket)
    stream.settle(200, b"data: [DONE]\n\n", b"")
    assert scope.day.used == 100


def test_a_day_budget_refuses_once_spent_until_midnight_utc() -> None:
    adm = Admission()
    adm.configure([_tenant(tokens_per_day=25)])
    for _ in range(3):  # 10 tokens each: 0, 10, 20 < 25 pass
        ticket = _admit(adm)
        assert isinstance(ticket, Ticket)
        ticket.settle(200, b'"usage":{"prompt_tokens":4,"completion_tokens":6}', b"")
    refused = _admit(adm)
    assert isinstance(refused, Rejection)
    assert refused.reason == "tokens_per_day"
    now = datetime.now(UTC)
    midnight = datetime(now.year, now.month, now.day, tzinfo=UTC).timestamp() + 86400
    assert abs(refused.retry_after - math.ceil(midnight - now.timestamp())) <= 2


def test_in_flight_estimates_count_against_the_budget() -> None:
    adm = Admission()
    adm.configure([_tenant(tokens_per_month=30)])
    held = [_admit(adm) for _ in range(3)]  # 20 each held: 0, 20 pass; 40 >= 30 refused
    assert [type(t) for t in held] == [Ticket, Ticket, Rejection]


def test_a_models_limits_hold_in_addition_to_the_tenants() -> None:
    adm = Admission()
    adm.configure([_tenant(requests_per_minute=3, models={"big": Limits(requests_per_minute=1)})])
    assert isinstance(_admit(adm, "big"), Ticket)
    refused = _admit(adm, "big")
    assert isinstance(refused, Rejection)
    assert refused.scope == "big"
    assert "for the model 'big'" in refused.message
    # the refusal charged nothing: two more to other models pass, the third is refused
    assert isinstance(_admit(adm, "small"), Ticket)
    assert isinstance(_admit(adm, "small"), Ticket)
    refused = _admit(adm, "small")
    assert isinstance(refused, Rejection)
    assert refused.scope == ALL_MODELS


def test_a_cancelled_ticket_gives_everything_back() -> None:
    adm = Admission()
    adm.configure([_tenant(requests_per_minute=1, concurrent_requests=1, tokens_per_day=50)])
    ticket = _admit(adm)
    assert isinstance(ticket, Ticket)
    ticket.cancel()
    again = _admit(adm)
    assert isinstance(again, Ticket)


def test_reconfiguring_keeps_the_counters_and_in_flight_requests() -> None:
    adm = Admission()
    adm.configure([_tenant(concurrent_requests=1, requests_per_minute=2)])
    ticket = _admit(adm)
    assert isinstance(ticket, Ticket)
    adm.configure([_tenant(concurrent_requests=2, requests_per_minute=2)])
    assert isinstance(_admit(adm), Ticket)  # 2 in flight of 2
    assert isinstance(_admit(adm), Rejection)  # and the rate was not forgiven either


def test_the_estimate_is_prompt_bytes_over_4_plus_the_completion_cap() -> None:
    assert estimate_tokens({"max_tokens": 10}, 41, 256) == 11 + 10
    assert estimate_tokens({"max_completion_tokens": 5, "max_tokens": 10}, 4, 256) == 6
    assert estimate_tokens({}, 0, 256) == 256
    assert estimate_tokens({"max_tokens": "ten"}, 0, 7) == 7
    assert estimate_tokens({"max_tokens": -1}, 0, 7) == 7


def test_jwt_subjects_and_groups_map_to_their_tenant() -> None:
    adm = Admission()
    tenant = Tenant(name="t", source="api", subjects=["alice"], groups=["ml", "ops"])
    adm.configure([tenant])
    assert adm.tenant_of_principal("alice", []) == "t"
    assert adm.tenant_of_principal("bob", ["ops"]) == "t"
    assert adm.tenant_of_principal("bob", ["other"]) is None


# ------------------------------------------------------------------------ spec


@pytest.mark.parametrize("value", [0, -1, 10**13, 1.5, "10", True, None])
def test_a_limit_is_a_whole_number_from_1(value: Any) -> None:
    if value is None:
        assert Limits(tokens_per_day=None).empty
        return
    with pytest.raises(ValidationError):
        Limits(tokens_per_day=value)


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValidationError):
        TenantBody.model_validate({"limits": {"requests_per_hour": 5}})


def test_a_key_in_two_tenants_and_an_unknown_key_are_refused_with_their_codes() -> None:
    a = _tenant("a", ("k1",))
    b = _tenant("b", ("k1",))
    with pytest.raises(TenantConflict) as exc:
        check_set([a, b], ["k1"])
    assert exc.value.code == "key_in_two_tenants"
    assert exc.value.status == 422
    with pytest.raises(TenantConflict) as exc:
        check_set([_tenant("a", ("nope",))], ["k1"])
    assert exc.value.code == "unknown_api_key"
    g1 = Tenant(name="a", source="api", groups=["ml"])
    g2 = Tenant(name="b", source="api", groups=["ml"])
    with pytest.raises(TenantConflict) as exc:
        check_set([g1, g2], [])
    assert exc.value.code == "group_in_two_tenants"


def test_config_tenants_name_the_bad_one() -> None:
    with pytest.raises(ValueError, match=r"tenant 'a': limits.requests_per_minute"):
        from_config({"a": {"limits": {"requests_per_minute": 0}}})
    with pytest.raises(ValueError, match="tenant name"):
        from_config({"Bad Name": {}})
    (t,) = from_config({"a": {"api_keys": ["k1"], "limits": {"tokens_per_day": 5}}})
    assert t.source == "config"
    assert t.limits.tokens_per_day == 5


def test_a_budget_added_while_requests_are_in_flight_is_not_credited_by_them() -> None:
    adm = Admission()
    adm.configure([_tenant(requests_per_minute=100)])
    early = _admit(adm)  # admitted before the budget existed: nothing held for it
    assert isinstance(early, Ticket)
    adm.configure([_tenant(requests_per_minute=100, tokens_per_day=15)])
    early.settle(200, b'"usage":{"prompt_tokens":2,"completion_tokens":3}', b"")
    (scope,) = adm.scopes()
    assert scope.day is not None
    assert scope.day.held == 0  # not -20: later requests get no credit
    # admitted when no limit counted tokens, its usage is not read: the estimate counts
    assert scope.day.used == 20
