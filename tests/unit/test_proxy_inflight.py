"""The routing hold and the in-flight registry a sleep or an unload drains with (issue 18)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from sardeenz.domain import InstanceStatus
from sardeenz.proxy.inflight import Inflight, ProxyTraffic
from sardeenz.proxy.routing import InstanceView, RoutingTable
from sardeenz.runtime.drain import RequestsInFlight, drain_for_sleep, drain_for_unload
from testkit.waiting import within
from tests.unit.test_proxy_routing import inst

ACTIVE = InstanceStatus.ACTIVE
SLEEPING = InstanceStatus.SLEEPING
STOPPING = InstanceStatus.STOPPING


class Req:
    def __init__(self, inflight: Inflight, iid: str) -> None:
        self.cut_count = 0
        self._inflight, self._iid = inflight, iid
        inflight.add(iid, self)

    def cut(self) -> None:
        self.cut_count += 1
        self._inflight.discard(self._iid, self)

    def end(self) -> None:
        self._inflight.discard(self._iid, self)


def test_hold_unroutes_at_once_and_survives_stale_events() -> None:
    table = RoutingTable()
    table.apply(inst("a"))
    table.hold("a", SLEEPING)
    assert table.pick("m") is None  # synchronous: the very next pick sees it
    table.apply(inst("a"))  # a late "active" event does not route it again
    assert table.pick("m") is None
    table.release(inst("a", status=SLEEPING))
    assert table.pick("m") is None
    assert [v.status for v in table.instances("m")] == [SLEEPING]
    table.release(inst("a"))
    assert table.pick("m") is not None


def test_hold_as_sleeping_makes_requests_wait_and_as_stopping_not() -> None:
    table = RoutingTable()

    async def waker(name: str, views: Sequence[InstanceView]) -> None:
        return None

    table.set_waker(waker)
    table.apply(inst("a"))
    table.hold("a", SLEEPING)
    assert [v.status for v in table.pending("m")] == [SLEEPING]
    table.hold("a", STOPPING)
    assert table.pending("m") == []
    table.remove("a")
    table.apply(inst("a"))
    assert table.pick("m") is not None  # removal ended the hold


async def test_request_held_while_falling_asleep_wakes_the_model_once_asleep() -> None:
    """The waker is called again after a change: the first call found it still awake."""
    table = RoutingTable()
    calls: list[str] = []

    async def waker(name: str, views: Sequence[InstanceView]) -> None:
        calls.append(views[0].status.value)
        if len(calls) == 2:  # the second call (model asleep now) wakes it
            table.apply(inst("a"))

    table.set_waker(waker)
    table.apply(inst("a"))
    table.hold("a", SLEEPING)
    waiting = asyncio.create_task(table.wait_until_routable("m", 5))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    table.release(inst("a", status=SLEEPING))  # the sleep finished
    ep = await within(waiting, 2, "the held request's route after the second wake")
    assert ep is not None
    assert len(calls) == 2


async def test_drain_for_sleep_waits_refuses_or_cuts() -> None:
    table, inflight = RoutingTable(), Inflight()
    traffic = ProxyTraffic(table, inflight)
    quick = Req(inflight, "a")
    asyncio.get_running_loop().call_later(0.05, quick.end)
    assert await drain_for_sleep(traffic, "a", 2, force=False) == 0
    slow = [Req(inflight, "a") for _ in range(3)]
    with pytest.raises(RequestsInFlight) as refused:
        await drain_for_sleep(traffic, "a", 0.05, force=False)
    assert refused.value.extra == {"inFlight": 3}
    assert refused.value.status == 409
    assert [r.cut_count for r in slow] == [0, 0, 0]
    assert await drain_for_sleep(traffic, "a", 0.05, force=True) == 3
    assert [r.cut_count for r in slow] == [1, 1, 1]
    assert inflight.end_code("a") == "model_sleeping"
    traffic.release(inst("a"))
    assert inflight.end_code("a") is None


async def test_drain_for_unload_marks_failures_as_unloaded_and_cuts_at_the_end() -> None:
    inflight = Inflight()
    traffic = ProxyTraffic(RoutingTable(), inflight)
    reqs = [Req(inflight, "a") for _ in range(2)]
    other = Req(inflight, "b")
    assert await drain_for_unload(traffic, "a", 0.05) == 2
    assert [r.cut_count for r in reqs] == [1, 1]
    assert other.cut_count == 0
    assert inflight.end_code("a") == "model_unloaded"
    assert inflight.end_code("b") is None
    traffic.forget("a")
    assert inflight.end_code("a") is None
