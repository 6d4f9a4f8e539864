"""RoutingTable and RoutingUpdater: pure, in-process, no HTTP."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Sequence

import pytest

from sardeenz.domain import EngineKind, InstanceStatus, MemoryMetrics, ModelInstance
from sardeenz.events import EventBus, LogEvent, RemovedEvent, StatusEvent
from sardeenz.proxy import metrics
from sardeenz.proxy.routing import (
    Endpoint,
    InstanceView,
    RoutingTable,
    RoutingUpdater,
    WakeFailed,
)
from testkit.waiting import within

ACTIVE = InstanceStatus.ACTIVE
STARTING = InstanceStatus.STARTING
SLEEPING = InstanceStatus.SLEEPING


def inst(
    iid: str,
    name: str = "m",
    port: int = 9000,
    status: InstanceStatus = ACTIVE,
    max_model_len: int | None = None,
) -> ModelInstance:
    return ModelInstance(
        id=iid,
        model_path=f"/models/{name}",
        served_model_name=name,
        display_name=name,
        engine=EngineKind.SIM,
        status=status,
        port=port,
        memory_metrics=MemoryMetrics(max_model_len=max_model_len) if max_model_len else None,
    )


def remote(iid: str, name: str = "m", port: int = 7000) -> Endpoint:
    return Endpoint(
        instance_id=iid,
        served_name=name,
        host="10.0.0.2",
        port=port,
        base_url=f"http://10.0.0.2:{port}",
        weight=1,
        local=False,
    )


def test_active_instance_is_routable_with_a_local_endpoint() -> None:
    table = RoutingTable()
    table.apply(inst("a", port=9001, max_model_len=4096))
    ep = table.pick("m")
    assert ep is not None
    assert (ep.instance_id, ep.host, ep.port, ep.base_url) == (
        "a",
        "127.0.0.1",
        9001,
        "http://127.0.0.1:9001",
    )
    assert ep.local
    assert ep.weight == 2
    assert ep.max_model_len == 4096
    assert table.names() == ["m"]
    assert table.pick("other") is None


def test_bind_all_engine_host_is_reached_on_loopback() -> None:
    table = RoutingTable(engine_host="0.0.0.0")
    table.apply(inst("a"))
    ep = table.pick("m")
    assert ep is not None
    assert ep.base_url == "http://127.0.0.1:9000"


def test_round_robin_alternates_between_instances() -> None:
    table = RoutingTable()
    table.apply(inst("a", port=9001))
    table.apply(inst("b", port=9002))
    picks = [table.pick("m") for _ in range(10)]
    ids = [p.instance_id for p in picks if p is not None]
    assert len(ids) == 10
    assert all(ids[i] != ids[i + 1] for i in range(9))
    assert Counter(ids) == {"a": 5, "b": 5}


def test_lookup_does_not_advance_the_rotation() -> None:
    table = RoutingTable()
    table.apply(inst("a", port=9001))
    table.apply(inst("b", port=9002))
    first = table.lookup("m")
    assert first is not None
    assert table.lookup("m") == first
    assert table.pick("m") == first
    assert table.pick("m") != first


def test_local_endpoints_take_two_requests_per_remote_one_smoothly() -> None:
    table = RoutingTable()
    table.apply(inst("local", port=9001))
    table.set_remote("peer-1", [remote("far")])
    ids = [e.instance_id for e in (table.pick("m") for _ in range(30)) if e is not None]
    assert Counter(ids) == {"local": 20, "far": 10}
    # smooth: the remote endpoint never gets two in a row
    assert all(not (ids[i] == ids[i + 1] == "far") for i in range(29))
    table.set_remote("peer-1", [])
    assert {table.pick("m").instance_id for _ in range(4)} == {"local"}  # type: ignore[union-attr]


def test_smooth_weighted_round_robin_matches_nginx_sequence() -> None:
    table = RoutingTable()
    table.set_remote(
        "p",
        [
            Endpoint("a", "m", "h", 1, "http://h:1", weight=5, local=False),
            Endpoint("b", "m", "h", 2, "http://h:2", weight=1, local=False),
            Endpoint("c", "m", "h", 3, "http://h:3", weight=1, local=False),
        ],
    )
    seq = "".join(table.pick("m").instance_id for _ in range(7))  # type: ignore[union-attr]
    assert seq == "aabacaa"


def test_huge_weights_fall_back_to_stepwise_swrr_with_the_same_shares() -> None:
    table = RoutingTable()
    table.set_remote(
        "p",
        [
            Endpoint("a", "m", "h", 1, "http://h:1", weight=3001, local=False),
            Endpoint("b", "m", "h", 2, "http://h:2", weight=1999, local=False),
        ],
    )
    counts = Counter(table.pick("m").instance_id for _ in range(5000))  # type: ignore[union-attr]
    assert counts == {"a": 3001, "b": 1999}


def test_version_bumps_on_change_and_not_on_identical_snapshots() -> None:
    table = RoutingTable()
    v0 = table.version
    table.apply(inst("a", status=STARTING))
    v1 = table.version
    assert v1 > v0
    table.apply(inst("a", status=STARTING))
    assert table.version == v1
    table.apply(inst("a"))
    v2 = table.version
    assert v2 > v1
    table.remove("a")
    assert table.version > v2
    v3 = table.version
    table.remove("a")
    assert table.version == v3


@pytest.mark.parametrize(
    "status",
    [
        InstanceStatus.STARTING,
        InstanceStatus.SLEEPING,
        InstanceStatus.STOPPING,
        InstanceStatus.FAILED,
    ],
)
def test_instance_leaves_the_route_when_it_stops_being_active(status: InstanceStatus) -> None:
    table = RoutingTable()
    table.apply(inst("a", port=9001))
    table.apply(inst("b", port=9002))
    table.apply(inst("a", port=9001, status=status))
    assert {table.pick("m").instance_id for _ in range(6)} == {"b"}  # type: ignore[union-attr]
    table.apply(inst("b", port=9002, status=status))
    assert table.pick("m") is None
    assert table.names() == []
    # still known: a request for it is "not ready", not "unknown model"
    assert table.is_known("m")
    assert table.known_port(9001)
    assert table.known_port(9002)
    assert table.known_names() == ["m"]


def test_remove_forgets_the_instance_and_its_port() -> None:
    table = RoutingTable()
    table.apply(inst("a", port=9001))
    table.remove("a")
    assert table.pick("m") is None
    assert not table.is_known("m")
    assert not table.known_port(9001)
    table.remove("never-seen")


def test_renamed_instance_moves_between_names() -> None:
    table = RoutingTable()
    table.apply(inst("a", name="old"))
    table.apply(inst("a", name="new"))
    assert table.names() == ["new"]
    assert not table.is_known("old")


def test_port_shared_by_two_records_stays_known_until_both_go() -> None:
    table = RoutingTable()
    table.apply(inst("a", port=9001, status=InstanceStatus.FAILED))
    table.apply(inst("b", port=9001))
    table.remove("a")
    assert table.known_port(9001)
    table.remove("b")
    assert not table.known_port(9001)


def test_pending_counts_starting_and_only_with_a_waker_sleeping() -> None:
    table = RoutingTable()
    table.apply(inst("a", status=STARTING))
    table.apply(inst("b", port=9001, status=SLEEPING))
    table.apply(inst("c", port=9002, status=InstanceStatus.FAILED))
    assert [i.instance_id for i in table.pending("m")] == ["a"]

    async def waker(name: str, sleeping: Sequence[InstanceView]) -> None:
        return None

    table.set_waker(waker)
    assert sorted(i.instance_id for i in table.pending("m")) == ["a", "b"]


def test_replace_all_drops_instances_missing_from_the_snapshot() -> None:
    table = RoutingTable()
    table.apply(inst("a", port=9001))
    table.apply(inst("b", port=9002))
    table.replace_all([inst("b", port=9002), inst("c", port=9003)])
    assert sorted(i.instance_id for i in table.instances()) == ["b", "c"]


async def test_many_waiters_are_released_when_the_instance_becomes_active() -> None:
    table = RoutingTable()
    table.apply(inst("a", status=STARTING))
    waiters = [asyncio.create_task(table.wait_until_routable("m", 5)) for _ in range(50)]
    await asyncio.sleep(0.05)
    assert not any(w.done() for w in waiters)
    table.apply(inst("a"))
    results = await within(
        asyncio.gather(*waiters), 2, "the 50 waiters released by the active instance"
    )
    assert all(r is not None and r.instance_id == "a" for r in results)


async def test_wait_times_out_with_none() -> None:
    table = RoutingTable()
    table.apply(inst("a", status=STARTING))
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    assert await table.wait_until_routable("m", 0.2) is None
    assert 0.15 < loop.time() - t0 < 1.0


async def test_wait_returns_at_once_for_unknown_or_failed_models() -> None:
    table = RoutingTable()
    unknown = await within(table.wait_until_routable("nope", 30), 0.5, "an unknown model's wait")
    assert unknown is None
    table.apply(inst("a", status=InstanceStatus.FAILED))
    failed = await within(table.wait_until_routable("m", 30), 0.5, "a failed model's wait")
    assert failed is None


async def test_wait_ends_early_when_the_starting_instance_fails() -> None:
    table = RoutingTable()
    table.apply(inst("a", status=STARTING))
    waiter = asyncio.create_task(table.wait_until_routable("m", 30))
    await asyncio.sleep(0.05)
    table.apply(inst("a", status=InstanceStatus.FAILED))
    assert await within(waiter, 1, "the wait ended by the instance's failure") is None


async def test_wait_survives_unrelated_changes() -> None:
    table = RoutingTable()
    table.apply(inst("a", status=STARTING))
    waiter = asyncio.create_task(table.wait_until_routable("m", 5))
    table.apply(inst("x", name="other", port=9100))
    table.apply(inst("a", status=STARTING, max_model_len=100))
    await asyncio.sleep(0.05)
    assert not waiter.done()
    table.apply(inst("a"))
    assert (await within(waiter, 1, "the wait ended by the instance turning active")) is not None


async def test_waker_is_called_for_sleeping_models_and_wait_follows_the_wake() -> None:
    table = RoutingTable()
    table.apply(inst("a", status=SLEEPING))
    calls: list[tuple[str, list[str]]] = []

    async def waker(name: str, sleeping: Sequence[InstanceView]) -> None:
        calls.append((name, [i.instance_id for i in sleeping]))
        asyncio.get_running_loop().call_later(0.05, table.apply, inst("a"))

    table.set_waker(waker)
    ep = await within(table.wait_until_routable("m", 5), 2, "the route after the wake")
    assert ep is not None
    assert calls == [("m", ["a"])]


async def test_failing_waker_does_not_break_the_wait() -> None:
    table = RoutingTable()
    table.apply(inst("a", status=SLEEPING))

    async def waker(name: str, sleeping: Sequence[InstanceView]) -> None:
        raise RuntimeError("wake failed")

    table.set_waker(waker)
    assert await table.wait_until_routable("m", 0.1) is None


async def test_a_refused_wake_ends_the_wait_at_once_with_the_reason() -> None:
    table = RoutingTable()
    table.apply(inst("a", status=SLEEPING))

    async def waker(name: str, sleeping: Sequence[InstanceView]) -> None:
        raise WakeFailed("not enough free GPU memory")

    table.set_waker(waker)
    with pytest.raises(WakeFailed, match="not enough free GPU memory"):
        await within(table.wait_until_routable("m", 30), 1, "the refused wake ending the wait")


async def test_a_refused_wake_still_routes_to_an_instance_that_came_up() -> None:
    table = RoutingTable()
    table.apply(inst("a", status=SLEEPING))

    async def waker(name: str, sleeping: Sequence[InstanceView]) -> None:
        table.apply(inst("b"))  # another instance of the model became active meanwhile
        raise WakeFailed("refused")

    table.set_waker(waker)
    ep = await within(
        table.wait_until_routable("m", 30), 1, "the route to b despite the refused wake"
    )
    assert ep is not None
    assert ep.instance_id == "b"


async def test_a_waiter_takes_a_peer_route_that_appears_while_the_wake_is_stuck() -> None:
    """A wake that hangs (its memory held by a victim with requests in flight) must not
    hold a waiter whose model became routable on a peer meanwhile; the wake goes on."""
    table = RoutingTable()
    table.apply(inst("a", status=SLEEPING))
    release = asyncio.Event()
    woken: list[str] = []

    async def waker(name: str, sleeping: Sequence[InstanceView]) -> None:
        await release.wait()
        woken.append(name)

    table.set_waker(waker)
    waiter = asyncio.create_task(table.wait_until_routable("m", 30))
    await asyncio.sleep(0.05)
    assert not waiter.done(), "the waiter returned before any route existed"
    table.set_remote("pod-b", [remote("pod-b/x")])
    ep = await within(waiter, 2, "the waiter took the peer's route")
    assert ep is not None
    assert ep.instance_id == "pod-b/x"
    release.set()  # the wake was not cancelled by the waiter leaving: it completes
    for _ in range(100):
        if woken:
            break
        await asyncio.sleep(0.01)
    assert woken == ["m"]


async def test_updater_follows_status_and_removed_events() -> None:
    bus = EventBus()
    table = RoutingTable()
    updater = RoutingUpdater(bus, table)
    updater.start()
    try:
        bus.publish(StatusEvent(inst("a", status=STARTING), None))
        bus.publish(LogEvent("a", "loading"))
        bus.publish(StatusEvent(inst("a"), STARTING))
        await asyncio.sleep(0.02)
        assert table.pick("m") is not None
        bus.publish(StatusEvent(inst("a", status=InstanceStatus.STOPPING), ACTIVE))
        await asyncio.sleep(0.02)
        assert table.pick("m") is None
        assert table.is_known("m")
        bus.publish(RemovedEvent(inst("a", status=InstanceStatus.STOPPING)))
        await asyncio.sleep(0.02)
        assert not table.is_known("m")
    finally:
        await updater.stop()
    assert bus.subscriber_count == 0


async def test_updater_resyncs_after_losing_events() -> None:
    bus = EventBus(queue_size=2)
    table = RoutingTable()
    snapshot = [inst("z", name="zm", port=9999)]
    updater = RoutingUpdater(bus, table, resync=lambda: snapshot)
    updater.start()
    try:
        for i in range(10):  # overflows the subscriber queue before the task runs
            bus.publish(LogEvent("a", f"line {i}"))
        await asyncio.sleep(0.02)
        assert table.names() == ["zm"]
        assert table.known_port(9999)
    finally:
        await updater.stop()


def test_instance_status_gauge_follows_the_table() -> None:
    table = RoutingTable()
    table.add_listener(metrics.observe_instance)

    def value(iid: str, name: str, status: str) -> float | None:
        return metrics.REGISTRY.get_sample_value(
            "sardeenz_instance_status", {"instance_id": iid, "model": name, "status": status}
        )

    table.apply(inst("gauge-a", name="gm", status=STARTING))
    assert value("gauge-a", "gm", "starting") == 1
    assert value("gauge-a", "gm", "active") == 0
    table.apply(inst("gauge-a", name="gm"))
    assert value("gauge-a", "gm", "starting") == 0
    assert value("gauge-a", "gm", "active") == 1
    table.remove("gauge-a")
    assert value("gauge-a", "gm", "active") is None


def test_model_metrics_children_are_cached_and_counted() -> None:
    mm = metrics.for_model("cached-model")
    assert metrics.for_model("cached-model") is mm
    mm.count(200)
    mm.count(200)
    mm.count(503)
    get = metrics.REGISTRY.get_sample_value
    assert get("sardeenz_proxy_requests_total", {"model": "cached-model", "status": "200"}) == 2
    assert get("sardeenz_proxy_requests_total", {"model": "cached-model", "status": "503"}) == 1
    body, content_type = metrics.render_metrics()
    assert content_type.startswith("text/plain")
    assert b"sardeenz_proxy_requests_total" in body
    assert b"process_cpu_seconds_total" in body


def test_local_and_remote_share_by_weight_and_pick_local_finds_the_local_one() -> None:
    """Local weight 2, remote 1; a forwarded request uses ``pick_local`` only."""
    table = RoutingTable()
    table.apply(inst("l1", "m", 20001))
    table.set_remote("pod-b", [remote("pod-b/x")])
    served = []
    for _ in range(30):
        ep = table.pick("m")
        assert ep is not None
        served.append(ep.local)
    assert served.count(False) == 10
    assert served.count(True) == 20
    for _ in range(3):
        local = table.pick_local("m")
        assert local is not None
        assert local.local
    table.set_remote("pod-b", [])
    table.remove("l1")
    assert table.pick_local("m") is None
