"""cluster/membership/election.py: failure detector, Bully-with-votes, leases (fake clock).

Table-driven cases for each rule, and a hypothesis property that runs random
schedules (elections by anyone, message delays, losses and partitions) and
checks the safety claims: never two leaders with a live lease at one moment,
never two leaders of one term, terms never decrease.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sardeenz.cluster.membership.election import (
    Election,
    FailureDetector,
    PeerState,
    Role,
    Timing,
    quorum,
)

T = Timing(suspect_after=10, unavailable_after=15, candidacy_timeout=2)


@pytest.mark.parametrize(
    ("known", "expected", "q"),
    [(1, 0, 1), (2, 0, 2), (3, 0, 2), (4, 0, 3), (5, 0, 3), (2, 5, 3), (5, 3, 3), (0, 0, 1)],
)
def test_quorum(known: int, expected: int, q: int) -> None:
    assert quorum(known, expected) == q


@pytest.mark.parametrize(
    ("age", "state"),
    [
        (0, PeerState.HEALTHY),
        (9.9, PeerState.HEALTHY),
        (10, PeerState.SUSPECT),
        (15, PeerState.SUSPECT),
        (15.1, PeerState.UNAVAILABLE),
    ],
)
def test_failure_detector_states(age: float, state: PeerState) -> None:
    fd = FailureDetector(T)
    fd.heard("b", 100.0)
    assert fd.state("b", 100.0 + age) is state
    assert fd.state("never", 100.0) is PeerState.UNAVAILABLE


def test_timing_must_be_ordered() -> None:
    with pytest.raises(ValueError, match="suspect_after"):
        Timing(suspect_after=15, unavailable_after=10)


def pod(name: str, size: int = 3) -> Election:
    return Election(self_id=name, timing=T, size=size)


@pytest.mark.parametrize(
    ("me", "healthy", "stands"),
    [
        ("a", {"b", "c"}, True),  # lowest, quorum
        ("a", {"b"}, True),  # 2 of 3 is a quorum
        ("a", set(), False),  # alone: no quorum
        ("b", {"a", "c"}, False),  # a lower pod is healthy
        ("b", {"c"}, True),  # a is gone: b is lowest
    ],
)
def test_bully_candidacy(me: str, healthy: set[str], stands: bool) -> None:
    assert pod(me).should_stand(0.0, healthy) is stands


def elect(candidate: Election, voters: list[Election], now: float) -> bool:
    term = candidate.start_election(now)
    won = False
    for v in voters:
        granted = v.on_vote_request(candidate.self_id, term, now)
        won = candidate.on_vote_reply(v.self_id, v.term, granted, now) or won
    return won


def test_election_then_lease_then_step_down_without_acks() -> None:
    a, b, c = pod("a"), pod("b"), pod("c")
    assert elect(a, [b, c], 0.0)
    assert a.term == 1
    assert a.is_leader(0.0)
    assert a.current_leader(0.0) == "a"
    # Heartbeats keep the lease alive.
    assert b.on_heartbeat("a", 1, True, 5.0)
    a.on_heartbeat_reply("b", 1, True, sent_at=5.0)
    assert a.is_leader(14.0)
    assert b.current_leader(14.0) == "a"
    # No ack for E seconds: the lease is over, before b's promise (D) ends.
    assert not a.is_leader(15.0)
    a.tick(15.0)
    assert a.role is Role.FOLLOWER
    assert not b.on_vote_request("c", 2, 19.9)  # b is still bound to a
    assert b.on_vote_request("c", 2, 20.1)


def test_one_vote_per_term() -> None:
    a, b, c = pod("a"), pod("b"), pod("c")
    a.start_election(0.0)
    c.start_election(0.0)
    assert b.on_vote_request("a", 1, 0.0)
    assert not b.on_vote_request("c", 1, 0.0)


def test_vote_refused_for_an_older_term_and_while_leading() -> None:
    a, b, c = pod("a"), pod("b"), pod("c")
    assert elect(a, [b, c], 0.0)
    assert not a.on_vote_request("b", 5, 1.0)  # leading with a lease
    assert a.term == 1  # and the term was not bumped by the refused request
    c.term = 7
    assert not c.on_vote_request("b", 3, 100.0)


def test_newer_term_deposes_a_leader_and_fences_old_orders() -> None:
    a, b, c = pod("a"), pod("b"), pod("c")
    assert elect(a, [b, c], 0.0)
    a.on_heartbeat_reply("b", 4, False, sent_at=1.0)  # someone has moved on
    assert a.role is Role.FOLLOWER
    assert a.term == 4
    assert not a.is_leader(1.0)
    assert not b.accepts_order(0)
    assert b.accepts_order(1)
    assert b.accepts_order(3)
    assert not b.accepts_order(2)  # 3 was seen: 2 is stale now


def test_prevote_changes_nothing_and_refuses_while_a_leader_is_live() -> None:
    a, b, c = pod("a"), pod("b"), pod("c")
    assert elect(b, [a, c], 0.0)  # b leads term 1; a and c are bound to it
    before = (a.term, a.voted_for, a.no_vote_until, c.term)
    assert not a.would_vote("c", 2, 1.0)  # bound to b
    assert not b.would_vote("a", 2, 1.0)  # leading
    assert (a.term, a.voted_for, a.no_vote_until, c.term) == before
    assert a.would_vote("b", 2, 1.0)  # the pod it is bound to
    # Once the promise has run out, a higher term would get the vote.
    assert a.would_vote("c", 2, 16.0)
    assert not a.would_vote("c", 1, 16.0)  # voted for b in term 1 already
    assert not a.would_vote("c", 0, 16.0)


def test_candidate_gives_up_after_timeout() -> None:
    a = pod("a")
    a.start_election(0.0)
    a.tick(2.5)
    assert a.role is Role.FOLLOWER
    assert a.term == 1


def test_single_expected_pod_leads_alone() -> None:
    a = pod("a", size=1)
    a.start_election(0.0)
    assert a.is_leader(0.0)


# --------------------------------------------------------------------- property


@dataclass
class Msg:
    kind: str  # vote_req | vote_rep | hb | hb_rep
    src: str
    dst: str
    term: int
    flag: bool
    sent_at: float


NAMES = ["a", "b", "c", "d", "e"]

actions = st.lists(
    st.one_of(
        st.tuples(st.just("advance"), st.floats(0.1, 6.0)),
        st.tuples(st.just("stand"), st.integers(0, 4)),
        st.tuples(st.just("heartbeat"), st.integers(0, 4)),
        st.tuples(st.just("deliver"), st.integers(0, 1000)),
        st.tuples(st.just("drop"), st.integers(0, 1000)),
        st.tuples(st.just("tick"), st.integers(0, 4)),
    ),
    min_size=1,
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(n=st.integers(3, 5), script=actions)
def test_safety_under_arbitrary_schedules(n: int, script: list[tuple[str, float]]) -> None:
    pods = {name: Election(self_id=name, timing=T, size=n) for name in NAMES[:n]}
    now = 0.0
    queue: list[Msg] = []
    leaders_of_term: dict[int, set[str]] = {}
    last_term = dict.fromkeys(pods, 0)

    def pick(i: float) -> Election:
        return pods[NAMES[int(i) % n]]

    for action, arg in script:
        if action == "advance":
            now += arg
        elif action == "stand":
            # Anyone may stand (more adversarial than Bully), if unbound.
            p = pick(arg)
            if p.role is Role.FOLLOWER and now >= p.no_vote_until:
                term = p.start_election(now)
                others = [o for o in pods if o != p.self_id]
                queue.extend(Msg("vote_req", p.self_id, o, term, False, now) for o in others)
        elif action == "heartbeat":
            p = pick(arg)
            claims = p.is_leader(now)
            others = [o for o in pods if o != p.self_id]
            queue.extend(Msg("hb", p.self_id, o, p.term, claims, now) for o in others)
        elif action in ("deliver", "drop") and queue:
            m = queue.pop(int(arg) % len(queue))
            if action == "deliver":
                dst = pods[m.dst]
                if m.kind == "vote_req":
                    granted = dst.on_vote_request(m.src, m.term, now)
                    queue.append(Msg("vote_rep", m.dst, m.src, dst.term, granted, m.sent_at))
                elif m.kind == "vote_rep":
                    dst.on_vote_reply(m.src, m.term, m.flag, m.sent_at)
                elif m.kind == "hb":
                    ack = dst.on_heartbeat(m.src, m.term, m.flag, now)
                    queue.append(Msg("hb_rep", m.dst, m.src, dst.term, ack, m.sent_at))
                else:
                    dst.on_heartbeat_reply(m.src, m.term, m.flag, m.sent_at)
        elif action == "tick":
            pick(arg).tick(now)
        live = [p.self_id for p in pods.values() if p.is_leader(now)]
        assert len(live) <= 1, f"two leaders with quorum at t={now}: {live}"
        for p in pods.values():
            assert p.term >= last_term[p.self_id], "a term decreased"
            last_term[p.self_id] = p.term
            if p.role is Role.LEADER:
                leaders_of_term.setdefault(p.term, set()).add(p.self_id)
                assert len(leaders_of_term[p.term]) == 1, f"two leaders of term {p.term}"
