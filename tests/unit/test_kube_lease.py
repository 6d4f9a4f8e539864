"""cluster/membership/kube_lease.py: the Lease election's state machine on a fake clock.

Table-like cases for each rule (create, renew, expiry only after a full observed duration,
conflict, step-down at the renew deadline, release, fencing terms), then a hypothesis
property that runs three pods against a fake API server with the Lease's optimistic
concurrency (delays, lost answers, unreachable pods) and checks the safety claims: never
two pods leading at one moment, terms never decrease, a leader's term is the Lease's.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field
from typing import cast

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sardeenz.cluster.membership.kube_lease import (
    Desired,
    LeaseElection,
    LeaseRecord,
    LeaseTiming,
    Step,
)

T = LeaseTiming(duration=15, renew_deadline=10, renew_interval=5, retry_period=2)


def rec(holder: str | None, version: str, transitions: int = 0) -> LeaseRecord:
    return LeaseRecord(holder=holder, duration=15, transitions=transitions, version=version)


def test_timing_must_leave_a_margin() -> None:
    with pytest.raises(ValueError, match="renew deadline < lease duration"):
        LeaseTiming(duration=10, renew_deadline=10, renew_interval=5)
    with pytest.raises(ValueError, match="renew interval < renew deadline"):
        LeaseTiming(duration=15, renew_deadline=5, renew_interval=5)
    with pytest.raises(ValueError, match="retry period"):
        LeaseTiming(duration=15, renew_deadline=10, renew_interval=5, retry_period=10)


def test_first_pod_creates_the_lease_and_renews_it() -> None:
    e = LeaseElection("a", T)
    assert e.plan(0) == (Step.READ, 0)
    e.observed_missing(0.1)
    assert e.plan(0.1) == (Step.CREATE, 0)
    assert e.desired(Step.CREATE) == Desired("a", 15, 0, None, True)
    e.written(rec("a", "1"), sent_at=0.1, now=0.2)
    assert e.term == 1  # leaseTransitions + 1
    assert e.is_leader(0.2)
    assert e.current_leader(0.2) == "a"
    step, wait = e.plan(0.2)
    assert step is Step.RENEW
    assert wait == pytest.approx(4.9)  # renew_interval after the write was sent
    assert e.desired(Step.RENEW) == Desired("a", 15, 0, "1", False)


def test_a_follower_takes_the_lease_only_after_seeing_it_unchanged_for_its_duration() -> None:
    e = LeaseElection("b", T)
    e.observed(rec("a", "7", transitions=3), now=100)
    assert e.term == 4
    assert e.current_leader(100) == "a"
    assert e.plan(100) == (Step.READ, 2)  # the retry period after the last read
    for t in (102, 104, 106, 108, 110, 112, 114):
        e.observed(rec("a", "7", transitions=3), now=t)
        assert e.plan(t)[0] is Step.READ, t
    # Its expiry (100 + 15) falls before the next retry: read exactly then.
    assert e.plan(114) == (Step.READ, 1)
    assert e.plan(115)[0] is Step.READ  # expired in theory, but not read since: read first
    e.observed(rec("a", "7", transitions=3), now=115)
    assert e.current_leader(115) is None
    assert e.plan(115) == (Step.ACQUIRE, 0)
    assert e.desired(Step.ACQUIRE) == Desired("b", 15, 4, "7", True)
    e.written(rec("b", "8", transitions=4), sent_at=115, now=115.1)
    assert e.term == 5
    assert e.is_leader(115.1)


def test_renewals_seen_keep_a_follower_away() -> None:
    e = LeaseElection("b", T)
    for i, t in enumerate(range(0, 60, 2)):
        e.observed(rec("a", str(i)), now=t)  # a new resourceVersion every read
        assert e.plan(t)[0] is Step.READ
        assert e.current_leader(t) == "a"


def test_a_released_lease_is_taken_at_once() -> None:
    e = LeaseElection("b", T)
    e.observed(rec("", "9", transitions=2), now=5)
    assert e.current_leader(5) is None
    assert e.plan(5) == (Step.ACQUIRE, 0)
    assert e.desired(Step.ACQUIRE).transitions == 3


def test_conflict_means_read_again_and_a_leader_that_conflicts_steps_down() -> None:
    e = LeaseElection("b", T)
    e.observed(rec("", "9"), now=0)
    e.conflict(0.1)  # someone else took it first
    assert e.plan(0.1) == (Step.READ, 0)
    e.observed(rec("c", "10", transitions=1), now=0.2)
    assert e.current_leader(0.2) == "c"

    leader = LeaseElection("a", T)
    leader.written(rec("a", "1"), sent_at=0, now=0)
    assert leader.is_leader(1)
    leader.conflict(5)
    assert not leader.is_leader(5)
    assert leader.plan(5) == (Step.READ, 0)


def test_leader_steps_down_at_the_renew_deadline_before_anyone_can_take_over() -> None:
    leader, follower = LeaseElection("a", T), LeaseElection("b", T)
    leader.written(rec("a", "1"), sent_at=10.0, now=10.3)  # sent at 10, answered at 10.3
    follower.observed(rec("a", "1"), now=10.2)  # saw it no earlier than it was sent
    for t in (15.0, 17.0, 19.0):  # every renewal fails from now on
        assert leader.plan(t)[0] is Step.RENEW
        leader.failed(t, backoff=2)
    assert leader.is_leader(19.99)
    assert not leader.is_leader(20.0)  # sent + renew_deadline
    assert leader.current_leader(20.0) is None
    # The follower: the Lease is still held in its view until 10.2 + 15.
    for t in (20.0, 22.0, 24.0):
        follower.observed(rec("a", "1"), now=t)
        assert follower.current_leader(t) == "a"
        assert follower.plan(t)[0] is Step.READ
    follower.observed(rec("a", "1"), now=25.2)
    assert follower.plan(25.2) == (Step.ACQUIRE, 0)
    # The margin is duration - renew_deadline = 5 s at least.
    assert T.duration - T.renew_deadline <= 25.2 - 20.0


def test_failed_call_backs_off_but_leadership_ends_by_the_clock() -> None:
    e = LeaseElection("a", T)
    e.written(rec("a", "1"), sent_at=0, now=0)
    e.failed(5, backoff=2)
    assert e.plan(5) == (Step.RENEW, 2)
    e.tick(9.9)
    assert e.is_leader(9.9)
    e.tick(10)
    assert e.renewed_at is None
    # Still the holder in the Lease: it may take it back (no transition) if nobody else did.
    e.observed(rec("a", "1"), now=11)
    assert e.plan(11) == (Step.ACQUIRE, 0)
    assert e.desired(Step.ACQUIRE) == Desired("a", 15, 0, "1", False)


def test_a_missing_lease_stops_the_leader_and_a_recreated_one_keeps_terms_rising() -> None:
    e = LeaseElection("a", T)
    e.written(rec("a", "1", transitions=4), sent_at=0, now=0)
    assert e.term == 5
    e.observed_missing(3)
    assert not e.is_leader(3)
    assert e.desired(Step.CREATE) == Desired("a", 15, 5, None, True)  # term 6
    # A Lease recreated behind the term seen (by a pod that knew less): taken over ahead.
    e.observed(rec("z", "2", transitions=0), now=4)
    assert e.term == 5
    assert e.current_leader(4) is None  # stale record: its term is older than ours
    assert e.desired(Step.ACQUIRE).transitions == 5


def test_fencing_and_heartbeats_only_carry_terms() -> None:
    e = LeaseElection("a", T)
    e.written(rec("a", "1", transitions=1), sent_at=0, now=0)
    assert e.term == 2
    assert not e.accepts_order(1)
    assert e.accepts_order(2)
    assert e.is_leader(1)
    assert e.on_heartbeat("b", 3, claims_leader=True, now=1) is False
    assert e.term == 3
    assert not e.is_leader(1)  # a newer term exists: it cannot be ours
    assert not e.would_vote("b", 4, 1)
    assert not e.on_vote_request("b", 4, 1)


# ---------------------------------------------------------------- property


@dataclass
class FakeApi:
    """The Lease on an API server: create refused if it exists, update needs the version."""

    lease: LeaseRecord | None = None
    version: int = 0

    def apply(self, step: Step, d: Desired | None) -> tuple[str, LeaseRecord | None]:
        if step is Step.READ:
            return ("ok", self.lease) if self.lease else ("missing", None)
        assert d is not None
        if step is Step.CREATE and self.lease is not None:
            return "conflict", None
        if step is not Step.CREATE and (self.lease is None or d.version != self.lease.version):
            return ("missing", None) if self.lease is None else ("conflict", None)
        self.version += 1
        self.lease = LeaseRecord(d.holder, d.duration, d.transitions, str(self.version))
        return "ok", self.lease


@dataclass(order=True)
class Event:
    at: float
    seq: int
    pod: int = field(compare=False)
    kind: str = field(compare=False)
    payload: object = field(compare=False, default=None)


def simulate(
    delays: list[float],
    losses: list[bool],
    outages: list[tuple[int, float, float]],
    offsets: list[float],
) -> tuple[FakeApi, set[str]]:
    """Three pods for 200 simulated seconds; asserts the safety claims at every event.
    Returns the API server's state and the pods that led at some point."""
    api = FakeApi()
    pods = [LeaseElection(name, T) for name in ("a", "b", "c")]
    timeout = 3.0
    queue: list[Event] = []
    seq = 0

    def push(at: float, pod: int, kind: str, payload: object = None) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(queue, Event(at, seq, pod, kind, payload))

    def down(pod: int, at: float) -> bool:
        return any(p == pod and start <= at < start + length for p, start, length in outages)

    for i in range(3):
        push(0.1 * i, i, "plan")
    terms = [0, 0, 0]
    n = 0
    led: set[str] = set()
    while queue:
        ev = heapq.heappop(queue)
        if ev.at > 200:
            break
        now = ev.at
        e = pods[ev.pod]
        local = now + offsets[ev.pod]  # monotonic clocks have arbitrary origins
        if ev.kind == "plan":
            step, wait = e.plan(local)
            if wait > 0:
                # (at least a microsecond: a float step below now's precision stands still)
                push(now + max(1e-6, min(wait, T.retry_period)), ev.pod, "plan")
                continue
            desired = e.desired(step) if step is not Step.READ else None
            d = delays[n % len(delays)]
            lost = losses[n % len(losses)] or down(ev.pod, now)
            n += 1
            result = api.apply(step, desired) if not down(ev.pod, now + d / 2) else ("down", None)
            if lost or d > timeout:
                push(now + timeout, ev.pod, "failed")
            else:
                push(now + d, ev.pod, "answer", (step, local, result))
        elif ev.kind == "failed":
            e.failed(local, T.retry_period)
            push(now, ev.pod, "plan")
        else:
            answer = cast(tuple[Step, float, tuple[str, LeaseRecord | None]], ev.payload)
            step, sent, (outcome, record) = answer
            if outcome == "ok" and record is not None and step is Step.READ:
                e.observed(record, local)
            elif outcome == "ok" and record is not None:
                e.written(record, sent, local)
            elif outcome == "missing":
                e.observed_missing(local)
            elif outcome == "conflict":
                e.conflict(local)
            else:
                e.failed(local, T.retry_period)
            push(now, ev.pod, "plan")
        leaders = [p.self_id for i, p in enumerate(pods) if p.is_leader(now + offsets[i])]
        assert len(leaders) <= 1, (now, leaders)
        led.update(leaders)
        for i, p in enumerate(pods):
            assert p.term >= terms[i]
            terms[i] = p.term
            if p.is_leader(now + offsets[i]):
                assert api.lease is not None
                assert p.term == api.lease.term
    return api, led


@settings(max_examples=60, deadline=None)
@given(
    delays=st.lists(st.floats(0.0, 1.5), min_size=50, max_size=50),
    losses=st.lists(st.booleans(), min_size=50, max_size=50),
    outages=st.lists(st.tuples(st.integers(0, 2), st.floats(0, 120), st.floats(0, 40)), max_size=4),
    offsets=st.lists(st.floats(-1000, 1000), min_size=3, max_size=3),
)
def test_never_two_leaders(
    delays: list[float],
    losses: list[bool],
    outages: list[tuple[int, float, float]],
    offsets: list[float],
) -> None:
    simulate(delays, losses, outages, offsets)


def test_the_simulation_hands_over_when_the_leader_is_cut_off() -> None:
    """The property is not vacuous: with the first leader unreachable, another takes over."""
    api, led = simulate([0.05, 0.4, 1.2], [False] * 9 + [True], [(0, 30, 60)], [0, 7, -3])
    assert "a" in led
    assert len(led) >= 2
    assert api.lease is not None
    assert api.lease.transitions >= 1
