"""Cluster-wide limits without a cluster: three pods' admissions and the leader's ledger.

Each simulated pod is a real ``Admission`` over ``SharedCounters``; the clock is the
module's (admission reads ``_mono``/``_wall``, patched here), the sync is a direct
call of ``ShareLedger.sync``, so every step is exact and a window of minutes runs in
milliseconds. What is asserted is the module's claim: together the pods admit what
one bucket would, whoever they are asked through; without a leader each takes its
``1 / pods`` part; budgets are counted once across pods, restarts and leaders.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any, cast

import orjson
import pytest
from pydantic import ValidationError

from sardeenz.cluster import tenant_shares
from sardeenz.cluster.control import ControlState
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.tenant_shares import SyncReport
from sardeenz.proxy.remote import to_another_pod
from sardeenz.proxy.routing import Endpoint
from sardeenz.tenancy import admission as admission_module
from sardeenz.tenancy.admission import ALL_MODELS, Admission, Rejection, Ticket
from sardeenz.tenancy.ledger import ShareLedger, merge_document, stored_counts
from sardeenz.tenancy.shares import STANDING, LeasedBucket, SharedCounters
from sardeenz.tenancy.spec import Limits, Tenant

WALL0 = datetime(2026, 12, 4, 10, tzinfo=UTC).timestamp()
DAY = "2026-12-04"


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0
        self.t0 = self.t

    def mono(self) -> float:
        return self.t

    def wall(self) -> float:
        return WALL0 + self.t - self.t0

    def ledger(self, lease: float = 3, document: Any = None) -> ShareLedger:
        """A leader's ledger past its first lease (``ShareLedger.lead``)."""
        ledger = ShareLedger(lease)
        ledger.lead(self.t - lease, document)
        return ledger


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    c = Clock()
    monkeypatch.setattr(admission_module, "_mono", c.mono)
    monkeypatch.setattr(admission_module, "_wall", c.wall)
    monkeypatch.setattr("sardeenz.tenancy.shares.monotonic", c.mono)
    return c


def _tenant(**limits: Any) -> Tenant:
    return Tenant(name="team", source="api", api_keys=["k1"], limits=Limits(**limits))


class Pod:
    def __init__(self, name: str, tenant: Tenant, pods: int = 3, stored: Any = None) -> None:
        self.name = name
        self.counters = SharedCounters(pods, stored or {})
        self.adm = Admission(self.counters)
        self.adm.configure([tenant])
        self.last = 0.0
        self.admitted = 0

    def send(self, max_tokens: int = 10) -> Ticket | Rejection | None:
        got = self.adm.admit("k1", "m", {"max_tokens": max_tokens}, 40)
        if isinstance(got, Ticket):
            self.admitted += 1
        return got

    def sync(self, ledger: ShareLedger, now: float) -> dict[str, Any]:
        report = self.counters.report(self.adm.scopes(), now - self.last if self.last else 1.0)
        self.last = now
        answer = ledger.sync(self.name, report, now)
        self.counters.apply(self.adm.scopes(), answer, now)
        return answer

    @property
    def scope(self) -> Any:
        return next(s for s in self.adm.scopes() if s.name == ALL_MODELS)


def _run(
    clock: Clock,
    pods: list[Pod],
    ledger: ShareLedger,
    seconds: int,
    per_second: dict[str, int],
) -> None:
    """Each second: every pod asked ``per_second[name]`` times, spread over the second;
    then every pod syncs."""
    for _ in range(seconds):
        steps = max(per_second.values())
        for i in range(steps):
            clock.t += 1 / steps
            for pod in pods:
                if i < per_second.get(pod.name, 0):
                    ticket = pod.send()
                    if isinstance(ticket, Ticket):
                        ticket.settle(200, b"", b"")
        for pod in pods:
            pod.sync(ledger, clock.t)


def test_three_pods_admit_one_limit_not_three(clock: Clock) -> None:
    tenant = _tenant(requests_per_minute=120)
    ledger = clock.ledger()
    pods = [Pod(n, tenant) for n in ("a", "b", "c")]
    _run(clock, pods, ledger, 60, {"a": 5, "b": 5, "c": 5})
    total = sum(p.admitted for p in pods)
    # One bucket of 120 admits 120 at once and 120 more over the minute: 240.
    assert 0.95 * 240 <= total <= 240 + 1, [p.admitted for p in pods]
    # ...and each pod a fair part of it (syncing in the same order every second, the
    # worst case: the first takes a third of what the bucket holds, the next a third
    # of what is left)
    assert all(p.admitted >= 0.2 * total for p in pods), [p.admitted for p in pods]
    alone = [Pod(n, tenant, pods=1) for n in ("x", "y", "z")]
    for pod in alone:  # each pod on its own: a whole limit each (what this replaces)
        _run(clock, [pod], clock.ledger(), 60, {pod.name: 5})
    assert sum(p.admitted for p in alone) >= 3 * 0.95 * 240


def test_the_grants_follow_the_demand(clock: Clock) -> None:
    tenant = _tenant(requests_per_minute=120)
    ledger = clock.ledger()
    pods = [Pod(n, tenant) for n in ("a", "b", "c")]
    _run(clock, pods, ledger, 60, {"a": 1, "b": 1, "c": 1})
    for pod in pods:
        pod.admitted = 0
    _run(clock, pods, ledger, 60, {"a": 10, "b": 0, "c": 0})
    a, b, c = pods
    # All the traffic through one pod: it gets the limit's whole rate, 120 a minute
    # (and what the bucket held: at most 120 more), the quiet ones keep their standing.
    assert 0.95 * 120 <= a.admitted <= 240 + 1
    standing = 120 / (STANDING * 3)
    assert b.scope.rpm.allowance <= 2 * standing + 1e-9
    assert c.scope.rpm.allowance <= 2 * standing + 1e-9
    assert isinstance(b.send(), Ticket)  # a quiet pod's first request passes at once


def test_a_limit_smaller_than_the_pods_is_split_in_whole_slots(clock: Clock) -> None:
    tenant = _tenant(concurrent_requests=4)
    ledger = clock.ledger()
    pods = [Pod(n, tenant) for n in ("a", "b", "c")]
    a, b, c = pods
    assert [p.scope.slots for p in pods] == [1, 1, 1]  # 4 // 3 before any answer
    assert isinstance(a.send(), Ticket)
    assert isinstance(a.send(), Rejection)  # its one slot is taken
    assert isinstance(b.send(), Ticket)
    for _ in range(3):
        clock.t += 1
        for pod in pods:
            pod.sync(ledger, clock.t)
    # a and b are busy, c idle: 2 + 2 + 0, the 4 slots where the requests are
    assert [p.scope.slots for p in pods] == [2, 2, 0]
    assert isinstance(a.send(), Ticket)
    refused = c.send()
    assert isinstance(refused, Rejection)
    assert refused.limit == 4  # the tenant's limit is named, not the pod's part
    assert refused.reason == "concurrent_requests"


def test_without_a_leader_each_pod_takes_its_part(clock: Clock) -> None:
    tenant = _tenant(requests_per_minute=90, concurrent_requests=4, tokens_per_day=1000)
    ledger = clock.ledger()
    pods = [Pod(n, tenant) for n in ("a", "b", "c")]
    _run(clock, pods, ledger, 10, {"a": 10})
    a = pods[0]
    assert a.scope.rpm.leased
    held = a.scope.rpm.allowance
    spent = a.scope.day.used
    assert spent > 0
    a.counters.degrade(a.adm.scopes(), 3, clock.t)
    assert a.counters.degraded
    rpm = a.scope.rpm
    assert not rpm.leased
    assert rpm.local == pytest.approx(30)
    assert rpm.level == pytest.approx(min(30, max(0, held)))  # what it still held, no more
    assert a.scope.slots == 1  # 4 // 3
    # The budget: a third of what was left, the rest left to the other pods.
    assert a.scope.day.used == spent + (1000 - spent) * 2 // 3
    left = 1000 - a.scope.day.used
    a.scope.day.add(left, clock.wall())
    assert isinstance(a.send(), Rejection)
    # The leader answers again: grants, and the others' counts are the leader's.
    a.sync(ledger, clock.t + 1)
    assert not a.counters.degraded
    assert a.scope.rpm.leased
    assert a.scope.day.used == spent + left


def test_a_degraded_pod_never_goes_beyond_its_part_of_the_rate(clock: Clock) -> None:
    tenant = _tenant(requests_per_minute=90)
    pods = [Pod(n, tenant) for n in ("a", "b", "c")]
    for pod in pods:
        pod.counters.degrade(pod.adm.scopes(), 3, clock.t)
    for _ in range(600):  # 10 per second for a minute on every pod
        clock.t += 0.1
        for pod in pods:
            pod.send()
    # Each: its 30 at once and 30 over the minute; together one limit's 90 + 90.
    assert all(p.admitted <= 60 + 1 for p in pods), [p.admitted for p in pods]
    assert sum(p.admitted for p in pods) <= 180 + 3


def test_budgets_are_counted_once_across_pods_and_reports_repeated(clock: Clock) -> None:
    tenant = _tenant(tokens_per_day=10_000)
    ledger = clock.ledger()
    a, b = Pod("a", tenant, 2), Pod("b", tenant, 2)
    for pod in (a, b):
        ticket = pod.send(max_tokens=90)  # 10 + 90 tokens, no usage: the estimate
        assert isinstance(ticket, Ticket)
        ticket.settle(200, b"", b"")
    a.sync(ledger, clock.t)
    a.sync(ledger, clock.t)  # repeated: cumulative counts change nothing
    b.sync(ledger, clock.t)
    a.sync(ledger, clock.t)
    assert a.scope.day.used == b.scope.day.used == 200
    assert ledger.counts[("team", ALL_MODELS, DAY)] == {"a": 100, "b": 100}
    assert ledger.changed


def test_budgets_survive_a_new_leader_and_a_restarted_pod(clock: Clock) -> None:
    tenant = _tenant(tokens_per_day=1000)
    old = clock.ledger()
    a, b = Pod("a", tenant, 2), Pod("b", tenant, 2)
    for pod, n in ((a, 300), (b, 200)):
        pod.scope.day.add(n, clock.wall())
        pod.sync(old, clock.t)
    stored = merge_document(None, old.counts, {DAY, "2026-12"})
    assert old.document() != {}
    # A new leader reads what the old one stored; a pod restarts from its copy.
    new = clock.ledger(document=stored)
    restarted = Pod("a", tenant, 2, stored=stored_counts(stored, "a"))
    assert restarted.scope.day.own == 300
    assert restarted.scope.day.used == 500
    restarted.sync(new, clock.t)
    assert restarted.scope.day.used == 500
    # The pod that lost its unsynced count takes the leader's larger one back.
    fresh = Pod("b", tenant, 2)
    fresh.sync(new, clock.t)
    assert fresh.scope.day.own == 200
    assert fresh.scope.day.used == 500


def test_old_periods_are_dropped_from_the_stored_document() -> None:
    counts = {("t", "*", "2026-12-03"): {"a": 5}, ("t", "*", DAY): {"a": 7}}
    doc = merge_document({"t\t*\t2026-12-02": {"b": 1}, "bad": 3}, counts, {DAY})
    assert doc == {f"t\t*\t{DAY}": {"a": 7}}


def test_a_bad_stored_document_is_ignored() -> None:
    assert stored_counts({"t\t*\tx": {"a": -1, "b": "9", "c": 2}, "x": {}}, "a") == {
        ("t", "*", "x"): (0, 2)
    }
    assert stored_counts(["not", "a", "dict"], "a") == {}


def test_what_a_pod_admits_without_a_lease_is_charged_to_the_cluster(clock: Clock) -> None:
    tenant = _tenant(requests_per_minute=60)
    ledger = clock.ledger()
    a, b = Pod("a", tenant, 2), Pod("b", tenant, 2)
    _run(clock, [a, b], ledger, 70, {"a": 2, "b": 2})  # the bucket is drained
    b.counters.degrade(b.adm.scopes(), 2, clock.t)
    for _ in range(20):  # b, partitioned, admits from its own half for 20 s
        clock.t += 1
        b.send()
        a.sync(ledger, clock.t)
    on_its_own = b.scope.rpm.unleased
    assert 0 < on_its_own <= 30 / 60 * 20 + 1 + 1e-9
    a.admitted = b.admitted = 0
    _run(clock, [a, b], ledger, 30, {"a": 2, "b": 2})
    # Back with the leader: what b took on its own was charged, the two share 30 s of
    # refill (30) less it, plus what the bucket had refilled meanwhile for a alone.
    assert b.scope.rpm.leased
    assert a.admitted + b.admitted <= 30 + 20 - on_its_own + 2


def test_a_new_leader_grants_at_once_and_splits_slots_after_a_lease(clock: Clock) -> None:
    tenant = _tenant(requests_per_minute=60, concurrent_requests=3)
    pods = [Pod(n, tenant) for n in ("a", "b", "c")]
    ledger = ShareLedger(lease_seconds=3)
    assert pods[0].sync(ledger, clock.t) == {"grants": [], "slots": [], "budgets": []}
    ledger.lead(clock.t, None)
    answer = pods[0].sync(ledger, clock.t + 1)  # only a reported yet
    assert answer["slots"] == []  # it must not get all the slots
    assert pods[0].scope.slots == 1
    ((*_, grant),) = answer["grants"]
    assert 0 < grant <= 60
    assert pods[0].scope.rpm.leased
    for pod in pods:
        pod.sync(ledger, clock.t + 2)
    answer = pods[0].sync(ledger, clock.t + 3.5)
    assert answer["slots"] == [["team", ALL_MODELS, 1]]
    ledger.follow()
    assert pods[0].sync(ledger, clock.t + 4) == {"grants": [], "slots": [], "budgets": []}


# ------------------------------------------------------------ who admits, what is sent
def _endpoint(local: bool) -> Endpoint:
    return Endpoint(
        instance_id="i",
        served_name="m",
        host="127.0.0.1",
        port=1,
        base_url="http://127.0.0.1:1",
        local=local,
        pod_id=None if local else "pod-b",
    )


def test_a_request_is_admitted_by_the_pod_that_serves_it() -> None:
    hop = b"x-sardeenz-hop"
    assert not to_another_pod(_endpoint(True), hop, [])  # served here: admitted here
    assert to_another_pod(_endpoint(False), hop, [])  # forwarded: that pod admits it
    # Forwarded to us already, with a remote endpoint: served here (one hop at most),
    # so admitted here; a client sending the hop header cannot skip its limits either.
    assert not to_another_pod(_endpoint(False), hop, [(hop, b"pod-a")])


@pytest.mark.parametrize(
    "rates",
    [
        [["t", "*", "rpm", -1, 10, 0, 0, 0]],  # a negative demand
        [["t", "*", "rpm", "nan", 10, 0, 0, 0]],  # not a number
        [["t", "*", "rpm", "many", 10, 0, 0, 0]],  # not a number either
        [["t", "*", "rpm", 1, 10, 0, 0]],  # a field short
        [["t", "*", "rpm", 1, 10, 1e400, 0, 0]],  # infinite
    ],
)
def test_a_bad_sync_report_is_refused(rates: list[list[Any]]) -> None:
    body = {"pod": "pod-b", "rates": rates, "budgets": []}
    with pytest.raises(ValidationError):
        SyncReport.model_validate_json(orjson.dumps(body))
    ok = {"pod": "pod-b", "rates": [["t", "*", "rpm", 1.5, 10, 3, 0, 0]], "budgets": []}
    assert SyncReport.model_validate_json(orjson.dumps(ok)).rates[0][3] == 1.5


# ------------------------------------------------------------ the sync loop's lease
class _Members:
    """What TenantShares asks of membership: a follower whose leader answers or not."""

    me = "pod-b"
    active = True

    def __init__(self) -> None:
        self.answer: dict[str, Any] | None = None
        self.reports: list[dict[str, Any]] = []

    def leader(self) -> str:
        return "pod-a"

    def is_leader(self) -> bool:
        return False

    def cluster_size(self) -> int:
        return 3

    def client_for(self, pod: str) -> _Members:
        return self

    async def ask(self, pod: str, route: Any, payload: dict[str, Any]) -> dict[str, Any] | None:
        self.reports.append(payload)
        return self.answer


class _Control:
    def body(self, key: str, default: Any = None) -> Any:
        return default

    def when_ready(self, action: Any) -> None:
        pass


def test_a_pod_without_an_answer_for_the_lease_falls_back_then_takes_grants_again(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tenant_shares, "_mono", clock.mono)
    members = _Members()
    adm = Admission()
    shares = tenant_shares.TenantShares(
        cast(Membership, members), cast(ControlState, _Control()), adm, 1.0, 5.0
    )
    adm.counters = shares.counters()
    adm.configure([_tenant(requests_per_minute=90, concurrent_requests=6)])
    scope = next(iter(adm.scopes()))
    assert asyncio.run(shares.sync_once()) is False
    assert not shares.degraded  # one lost answer is not a lost leader
    clock.t += shares.lease + 0.1
    assert asyncio.run(shares.sync_once()) is False
    assert shares.degraded
    assert scope.rpm.local == pytest.approx(30)
    assert scope.slots == 2
    assert members.reports[-1]["pod"] == "pod-b"
    members.answer = {"grants": [["team", ALL_MODELS, "rpm", 5.0]], "slots": [], "budgets": []}
    clock.t += 1
    assert asyncio.run(shares.sync_once()) is True
    assert not shares.degraded
    assert scope.rpm.leased
    assert scope.rpm.allowance == 5.0


class _Leader(_Members):
    me = "pod-a"

    def is_leader(self) -> bool:
        return True


def test_a_leader_that_has_not_read_the_stored_counts_answers_nothing(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tenant_shares, "_mono", clock.mono)
    adm = Admission()
    shares = tenant_shares.TenantShares(
        cast(Membership, _Leader()), cast(ControlState, _Control()), adm, 1.0, 5.0
    )
    adm.counters = shares.counters()
    adm.configure([_tenant(requests_per_minute=90)])
    # Not ready yet: no grants of an empty ledger, so the lease runs out as without one.
    assert asyncio.run(shares.sync_once()) is False
    clock.t += shares.lease + 0.1
    assert asyncio.run(shares.sync_once()) is False
    assert shares.degraded
    shares.ledger.lead(clock.t, None)  # ready: its own sync is answered
    assert asyncio.run(shares.sync_once()) is True
    bucket = next(iter(adm.scopes())).rpm
    assert isinstance(bucket, LeasedBucket)
    assert bucket.leased


def test_a_pod_with_no_limit_sends_no_sync_and_never_falls_back(
    clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing to split (no tenant, or none with a limit): no call to the leader, whose
    answer to an empty report is empty, and no fallback however long no leader answers.
    A limit put later is reported at the next sync."""
    monkeypatch.setattr(tenant_shares, "_mono", clock.mono)
    members = _Members()
    adm = Admission()
    shares = tenant_shares.TenantShares(
        cast(Membership, members), cast(ControlState, _Control()), adm, 1.0, 5.0
    )
    adm.counters = shares.counters()
    adm.configure([])
    for _ in range(5):
        assert asyncio.run(shares.sync_once()) is True
        clock.t += shares.lease
    adm.configure([_tenant()])  # a tenant without limits: still nothing to split
    assert asyncio.run(shares.sync_once()) is True
    assert members.reports == []
    assert not shares.degraded
    adm.configure([_tenant(concurrent_requests=6)])
    assert asyncio.run(shares.sync_once()) is False  # reported; this leader does not answer
    assert [r["rates"] for r in members.reports] == [[["team", ALL_MODELS, "conc", 0, 6, 0, 0, 0]]]
