"""Load on first request against a fake supervisor and a real routing table."""

from __future__ import annotations

import asyncio

from sardeenz.catalog.demand import OnDemand
from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, LoadRequest, ModelInstance
from sardeenz.errors import NotFound
from sardeenz.proxy.routing import Endpoint, RoutingTable
from sardeenz.proxy.wire import ErrorReply
from sardeenz.store.records import CatalogEntry
from testkit.waiting import within


class _Catalog:
    version = 1

    def entry(self, name: str) -> CatalogEntry | None:
        return CatalogEntry(model_path="org/m") if name == "m" else None

    def resolve(self, name: str) -> str | None:
        return "m" if name == "m" else None

    def names(self) -> list[str]:
        return ["m"]


class _Starter:
    """Loads answer ``starting`` (or ``failed``); the test turns them active."""

    def __init__(self, table: RoutingTable, spawn_fails: bool = False) -> None:
        self.table = table
        self.spawn_fails = spawn_fails
        self.loads: list[LoadRequest] = []
        self.instances: dict[str, ModelInstance] = {}

    async def load(self, req: LoadRequest, *, on_demand: bool = False) -> ModelInstance:
        assert on_demand, "a start on demand marks its instance"
        self.loads.append(req)
        await asyncio.sleep(0.01)
        inst = ModelInstance(
            id=f"i{len(self.loads)}",
            model_path=req.model_path,
            served_model_name=req.served_model_name or req.model_path,
            display_name="m",
            engine=EngineKind.SIM,
            status=InstanceStatus.FAILED if self.spawn_fails else InstanceStatus.STARTING,
            port=4000 + len(self.loads),
            error_message="cannot start engine: no such file" if self.spawn_fails else None,
        )
        self.instances[inst.id] = inst
        return inst

    async def unload(self, instance_id: str) -> ModelInstance:
        inst = self.instances.pop(instance_id)
        self.table.remove(instance_id)
        return inst

    async def wake(self, instance_id: str) -> ModelInstance:
        return self.instances[instance_id]

    def get(self, instance_id: str) -> ModelInstance:
        if instance_id not in self.instances:
            raise NotFound("gone")
        return self.instances[instance_id]

    def list_instances(self) -> list[ModelInstance]:
        return list(self.instances.values())

    def become(self, status: InstanceStatus) -> None:
        for inst in self.instances.values():
            inst.status = status
            self.table.apply(inst)


def _ondemand(starter_fails: bool = False) -> tuple[OnDemand, _Starter]:
    table = RoutingTable()
    starter = _Starter(table, spawn_fails=starter_fails)
    settings = Settings(ondemand_max_wait_seconds=5, ondemand_failure_hold_seconds=10)
    return OnDemand(settings, _Catalog(), table, starter), starter  # type: ignore[arg-type]


async def test_concurrent_first_requests_share_one_start() -> None:
    ondemand, starter = _ondemand()
    waiters = [asyncio.create_task(ondemand.wait("m")) for _ in range(20)]
    await asyncio.sleep(0.1)
    assert len(starter.loads) == 1
    assert starter.loads[0].served_model_name == "m"
    assert ondemand.waiting("m") == 20
    starter.become(InstanceStatus.ACTIVE)
    answers = await asyncio.gather(*waiters)
    assert all(isinstance(a, Endpoint) for a in answers)
    assert ondemand.waiting("m") == 0


async def test_an_engine_that_cannot_be_spawned_is_answered_once_not_restarted() -> None:
    ondemand, starter = _ondemand(starter_fails=True)
    answers = await asyncio.gather(*(ondemand.wait("m") for _ in range(5)))
    assert len(starter.loads) == 1
    for a in answers:
        assert isinstance(a, ErrorReply)
        assert a.code == "model_start_failed"
        assert "no such file" in a.message
    again = await ondemand.wait("m")  # within the hold time: the same cause, no new start
    assert isinstance(again, ErrorReply)
    assert len(starter.loads) == 1


async def test_a_waiter_that_is_cancelled_leaves_the_queue_and_the_start_goes_on() -> None:
    ondemand, starter = _ondemand()
    first = asyncio.create_task(ondemand.wait("m"))
    await asyncio.sleep(0.005)  # inside the start
    first.cancel()
    await asyncio.gather(first, return_exceptions=True)
    assert ondemand.waiting("m") == 0
    await asyncio.sleep(0.05)
    assert len(starter.loads) == 1  # the start was not cancelled with its first waiter
    second = asyncio.create_task(ondemand.wait("m"))
    await asyncio.sleep(0.05)
    starter.become(InstanceStatus.ACTIVE)
    assert isinstance(await second, Endpoint)
    assert len(starter.loads) == 1


class _StuckStarter(_Starter):
    """A start that does not return until the test lets it (the leader's placement order
    to a pod gone silent, making room behind a busy victim...)."""

    def __init__(self, table: RoutingTable) -> None:
        super().__init__(table)
        self.go = asyncio.Event()

    async def load(self, req: LoadRequest, *, on_demand: bool = False) -> ModelInstance:
        await self.go.wait()
        return await super().load(req, on_demand=on_demand)


async def test_waiters_take_a_route_that_comes_while_the_start_is_stuck() -> None:
    """The soak's hang: a pod cut off from its peers starts the model itself; when it
    rejoins, a peer's active instance is routable again, and its waiters must take it
    instead of waiting out the start (they did, past the client's deadline)."""
    table = RoutingTable()
    starter = _StuckStarter(table)
    settings = Settings(ondemand_max_wait_seconds=60, ondemand_failure_hold_seconds=10)
    ondemand = OnDemand(settings, _Catalog(), table, starter)  # type: ignore[arg-type]
    waiters = [asyncio.create_task(ondemand.wait("m")) for _ in range(5)]
    await asyncio.sleep(0.05)
    assert ondemand.waiting("m") == 5
    assert not any(w.done() for w in waiters)
    peer = Endpoint("far-1", "m", "10.0.0.2", 3000, "http://10.0.0.2:3000", 1, False)
    table.set_remote("pod-d", [peer])
    answers = await within(asyncio.gather(*waiters), 5, "the 5 waiters took the peer's route")
    assert answers == [peer] * 5
    assert ondemand.waiting("m") == 0
    # The start was not cancelled by its waiters leaving: it goes on, and a request
    # after it finds the route at once.
    assert starter.loads == []
    starter.go.set()
    await asyncio.sleep(0.05)
    assert len(starter.loads) == 1
    assert await within(ondemand.wait("m"), 5, "a later request's route") == peer
    await ondemand.close()
