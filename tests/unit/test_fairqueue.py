"""The fair queue (tenancy/fairqueue.py) and the proxy's gate (proxy/fairgate.py): pure logic.

The scheduler is driven request by request, with no clock: who goes next under
start-time fair queuing, weights, strict priority classes, the bound, leaving.
The gate is driven with a real routing table and real futures, no HTTP.
"""

from __future__ import annotations

from collections import Counter

import pytest

from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.proxy.fairgate import FairGate, Waiter, requested_priority
from sardeenz.proxy.routing import RoutingTable
from sardeenz.proxy.wire import ErrorReply
from sardeenz.tenancy.admission import Admission
from sardeenz.tenancy.fairqueue import BATCH, INTERACTIVE, Entry, FairQueue
from sardeenz.tenancy.spec import from_config
from testkit.waiting import within


def drain(queue: FairQueue) -> list[str]:
    out = []
    while (entry := queue.pop()) is not None:
        out.append(entry.tenant)
    return out


def test_a_quiet_tenant_goes_next_whatever_the_noisy_one_queued() -> None:
    queue = FairQueue(1000)
    for _ in range(50):
        assert queue.push(Entry("noisy", 1, INTERACTIVE))
    quiet = Entry("quiet", 1, INTERACTIVE)
    queue.push(quiet)
    assert queue.position(quiet) == 1  # behind the noisy head only (it came first)
    order = drain(queue)
    assert order.index("quiet") == 1
    assert len(order) == 51


def test_without_fairness_the_quiet_tenant_waits_behind_everything() -> None:
    queue = FairQueue(1000, fair=False)
    for _ in range(50):
        queue.push(Entry("noisy", 1, INTERACTIVE))
    quiet = Entry("quiet", 1, INTERACTIVE)
    queue.push(quiet)
    assert queue.position(quiet) == 50
    assert drain(queue).index("quiet") == 50


def test_backlogged_tenants_alternate_by_weight() -> None:
    queue = FairQueue(1000)
    for _ in range(30):
        queue.push(Entry("a", 2, INTERACTIVE))
        queue.push(Entry("b", 1, INTERACTIVE))
    first = drain(queue)[:30]
    counts = Counter(first)
    assert counts["a"] == 20
    assert counts["b"] == 10


def test_virtual_time_moves_with_service_so_a_returning_tenant_gets_no_credit() -> None:
    queue = FairQueue(1000)
    for _ in range(10):
        queue.push(Entry("a", 1, INTERACTIVE))
    for _ in range(8):
        queue.pop()  # a is served alone for a while: V advances to 7
    for _ in range(4):
        queue.push(Entry("b", 1, INTERACTIVE))
    # b starts at V, not at 0: it does not get 8 turns in a row for having been away
    assert drain(queue) == ["b", "a", "b", "a", "b", "b"]


def test_interactive_goes_before_every_batch_request() -> None:
    queue = FairQueue(1000)
    for _ in range(5):
        queue.push(Entry("big", 1, BATCH))
    late = Entry("late", 1, INTERACTIVE)
    queue.push(late)
    assert queue.position(late) == 0
    assert drain(queue) == ["late"] + ["big"] * 5


def test_classes_keep_separate_shares() -> None:
    queue = FairQueue(1000)
    for _ in range(5):
        queue.push(Entry("t", 1, BATCH))
    for _ in range(3):
        queue.push(Entry("t", 1, INTERACTIVE))
    queue.push(Entry("u", 1, INTERACTIVE))
    # t's batch requests did not use up its interactive share: t's first goes first
    assert drain(queue)[:4] == ["t", "u", "t", "t"]


def test_the_queue_is_bounded() -> None:
    queue = FairQueue(3)
    assert all(queue.push(Entry("a", 1, INTERACTIVE)) for _ in range(3))
    extra = Entry("b", 1, INTERACTIVE)
    assert not queue.push(extra)
    assert not extra.queued
    assert len(queue) == 3
    assert queue.by_tenant == {"a": 3}


def test_a_request_that_leaves_frees_its_place_and_is_skipped() -> None:
    queue = FairQueue(2)
    first, second = Entry("a", 1, INTERACTIVE), Entry("b", 1, INTERACTIVE)
    queue.push(first)
    queue.push(second)
    assert queue.remove(first)
    assert not queue.remove(first)  # once
    assert len(queue) == 1
    assert queue.by_tenant == {"b": 1}
    assert queue.push(Entry("c", 1, INTERACTIVE))  # its place is free again
    assert drain(queue) == ["b", "c"]
    assert queue.pop() is None


def test_many_leavers_do_not_grow_the_heap_without_bound() -> None:
    queue = FairQueue(10_000)
    keep = Entry("k", 1, INTERACTIVE)
    queue.push(keep)
    for _ in range(1000):
        e = Entry("x", 1, INTERACTIVE)
        queue.push(e)
        queue.remove(e)
    assert len(queue._classes[INTERACTIVE].heap) < 200
    assert drain(queue) == ["k"]


@pytest.mark.parametrize("bad", [0, -1])
def test_a_queue_of_no_room_is_refused(bad: int) -> None:
    with pytest.raises(ValueError, match="max_length"):
        FairQueue(bad)


@pytest.mark.parametrize(
    ("value", "ceiling", "expected"),
    [
        (None, "interactive", INTERACTIVE),
        (None, "batch", BATCH),
        (b"batch", "interactive", BATCH),
        (b" Interactive ", "interactive", INTERACTIVE),
        (b"interactive", "batch", BATCH),  # a batch tenant cannot jump the queue
    ],
)
def test_requested_priority(value: bytes | None, ceiling: str, expected: int) -> None:
    assert requested_priority(value, ceiling) == expected


@pytest.mark.parametrize("value", [b"urgent", b"", b"0", b"interactive!"])
def test_an_unknown_priority_is_a_400(value: bytes) -> None:
    reply = requested_priority(value, "interactive")
    assert isinstance(reply, ErrorReply)
    assert reply.status == 400
    assert reply.code == "invalid_priority"
    assert "interactive, batch" in reply.message


# ------------------------------------------------------------------- the gate
def active(
    iid: str, name: str = "m", status: InstanceStatus = InstanceStatus.ACTIVE
) -> ModelInstance:
    return ModelInstance(
        id=iid,
        model_path=f"/models/{name}",
        served_model_name=name,
        display_name=name,
        engine=EngineKind.SIM,
        status=status,
        port=9000 + len(iid),
    )


async def test_gate_holds_what_the_slots_cannot_take_and_lets_it_in_fairly() -> None:
    table = RoutingTable()
    table.apply(active("a"))
    gate = FairGate(table, 2, max_queue=10, max_wait=30)
    express = gate.room("m")
    assert express is not None
    gate.take(express)
    first = gate.join("m", "noisy", 1, INTERACTIVE)
    assert isinstance(first, Waiter)
    assert first.future is None
    assert gate.room("m") is None  # both slots held
    noisy = [gate.join("m", "noisy", 1, INTERACTIVE) for _ in range(3)]
    quiet = gate.join("m", "quiet", 1, INTERACTIVE)
    assert all(isinstance(w, Waiter) and w.future is not None for w in [*noisy, quiet])
    assert isinstance(quiet, Waiter)
    gate.release(express)  # a slot frees: the first noisy one (it came first) goes
    gate.leave(first)  # another: the quiet one, ahead of two noisy ones
    assert quiet.future is not None
    assert quiet.future.done()
    assert [w.future.done() for w in noisy if isinstance(w, Waiter) and w.future] == [
        True,
        False,
        False,
    ]
    assert await gate.wait(quiet) is None
    gate.leave(quiet)
    gate.leave(quiet)  # twice frees once
    assert sum(1 for w in noisy if isinstance(w, Waiter) and w.future and w.future.done()) == 2


async def test_gate_refuses_past_the_queue_bound_and_the_wait_bound() -> None:
    table = RoutingTable()
    table.apply(active("a"))
    gate = FairGate(table, 1, max_queue=1, max_wait=0.05)
    holder = gate.join("m", None, 1, INTERACTIVE)
    waiting = gate.join("m", None, 1, INTERACTIVE)
    full = gate.join("m", None, 1, INTERACTIVE)
    assert isinstance(full, ErrorReply)
    assert full.status == 503
    assert full.code == "queue_full"
    assert (b"retry-after", b"1") in full.headers
    assert isinstance(waiting, Waiter)
    late = await gate.wait(waiting)
    assert isinstance(late, ErrorReply)
    assert late.code == "queue_timeout"
    assert gate.room("m") is None  # the holder still holds its slot
    assert len(waiting.gate.queue) == 0
    assert isinstance(holder, Waiter)
    gate.leave(holder)
    assert gate.room("m") is not None


async def test_a_request_for_a_model_that_is_waking_keeps_its_place() -> None:
    table = RoutingTable()
    table.apply(active("a", status=InstanceStatus.SLEEPING))
    gate = FairGate(table, 1, max_queue=10, max_wait=30)
    early = gate.join("m", "quiet", 1, INTERACTIVE)
    assert isinstance(early, Waiter)
    assert early.future is not None
    later = gate.join("m", "noisy", 1, INTERACTIVE)
    table.apply(active("a"))  # woken: the one that came first gets the slot
    assert early.future.done()
    assert isinstance(later, Waiter)
    assert later.future is not None
    assert not later.future.done()
    assert await within(gate.wait(early), 5, "the early waiter let in after the wake") is None


async def test_headroom_lets_a_quiet_interactive_request_in_beside_a_backlog() -> None:
    table = RoutingTable()
    table.apply(active("a"))
    gate = FairGate(table, 4, max_queue=10, max_wait=30, headroom_percent=25)
    held = [gate.join("m", "noisy", 1, INTERACTIVE) for _ in range(4)]
    assert all(isinstance(w, Waiter) and w.future is None for w in held)
    first = gate.join("m", "noisy", 1, INTERACTIVE)
    assert isinstance(first, Waiter)
    assert first.future is None  # nothing of noisy waited yet: the headroom (1 of 4)
    backlog = gate.join("m", "noisy", 1, INTERACTIVE)
    assert isinstance(backlog, Waiter)
    assert backlog.future is not None  # the headroom is full
    gate.leave(first)  # the headroom frees; still at capacity: nobody is let in
    assert not backlog.future.done()
    again = gate.join("m", "noisy", 1, INTERACTIVE)
    assert isinstance(again, Waiter)
    assert again.future is not None  # noisy has one waiting: never the headroom
    batch = gate.join("m", "quiet", 1, BATCH)
    assert isinstance(batch, Waiter)
    assert batch.future is not None  # batch waits its turn
    quiet = gate.join("m", "other", 1, INTERACTIVE)
    assert isinstance(quiet, Waiter)
    assert quiet.future is None  # nothing waiting, interactive: the headroom, at once
    late = gate.join("m", "late", 1, INTERACTIVE)
    assert isinstance(late, Waiter)
    assert late.future is not None  # the headroom is full again: it waits
    gate.leave(quiet)
    assert isinstance(held[0], Waiter)
    assert isinstance(held[1], Waiter)
    assert isinstance(held[0], Waiter)
    assert isinstance(held[1], Waiter)
    gate.leave(held[0])  # a slot frees: the next in fair order, noisy's head (it came first)
    assert backlog.future.done()
    assert not late.future.done()
    gate.leave(held[1])  # then late, its tenant's first, ahead of noisy's second
    assert late.future.done()
    assert not again.future.done()
    fifo = FairGate(table, 4, fair=False, headroom_percent=25)
    assert fifo.headroom == 0  # headroom is part of fair sharing


def test_gate_off_costs_one_attribute() -> None:
    gate = FairGate(RoutingTable(), 0)
    assert not gate.on


# ------------------------------------------------------- a tenant's weight and class
@pytest.mark.parametrize("weight", [0, -1, 1001, 1.5, "2", True, None])
def test_a_bad_weight_is_refused_naming_the_field(weight: object) -> None:
    with pytest.raises(ValueError, match=r"tenant 't': weight"):
        from_config({"t": {"weight": weight}})


@pytest.mark.parametrize("priority", ["urgent", "", "Interactive", 1, None])
def test_a_bad_priority_is_refused_naming_the_field(priority: object) -> None:
    with pytest.raises(ValueError, match=r"tenant 't': priority"):
        from_config({"t": {"priority": priority}})


def test_weight_and_priority_reach_the_gate_through_admission() -> None:
    tenants = from_config(
        {"a": {"api_keys": ["ka"], "weight": 3, "priority": "batch"}, "b": {"api_keys": ["kb"]}}
    )
    admission = Admission()
    admission.configure(tenants)
    assert admission.share_of("ka") == ("a", 3, "batch")
    assert admission.share_of("kb") == ("b", 1, "interactive")
    assert admission.share_of("nobody") is None
