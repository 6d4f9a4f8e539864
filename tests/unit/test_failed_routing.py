"""A failed instance leaves the routing table when it is failed, not after the disk write.

Issue 18: for about 0.5 s after an engine died, ``/v1`` answered 503
``engine_unavailable`` (the proxy still routed to the dead port) although
the instance already read ``failed``: the runner published the status event
that updates the routing table only after the registry's database write,
which a busy disk makes slow. The table must follow the in-memory status.
"""

from __future__ import annotations

import asyncio

import httpx

from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.events import EventBus
from sardeenz.proxy.routing import RoutingTable, RoutingUpdater
from sardeenz.runtime.runner import InstanceRunner


def _instance() -> ModelInstance:
    return ModelInstance(
        id="dead",
        model_path="/models/m",
        served_model_name="m",
        display_name="m",
        engine=EngineKind.SIM,
        status=InstanceStatus.ACTIVE,
        port=9000,
    )


async def test_the_table_drops_a_failed_instance_before_the_database_write_ends() -> None:
    bus = EventBus()
    table = RoutingTable()
    updater = RoutingUpdater(bus, table)
    updater.start()
    disk = asyncio.Event()  # a slow disk: the write finishes when we say so
    writes: list[InstanceStatus] = []

    async def persist(runner: InstanceRunner) -> None:
        writes.append(runner.instance.status)
        await disk.wait()

    async with httpx.AsyncClient() as http:
        runner = InstanceRunner(_instance(), Settings(), bus, persist, http)
        table.apply(runner.snapshot())
        assert table.pick("m") is not None
        failing = asyncio.create_task(runner.set_status(InstanceStatus.FAILED))
        try:
            for _ in range(20):
                await asyncio.sleep(0)
            assert writes == [InstanceStatus.FAILED]  # the write is under way ...
            assert not failing.done()
            assert table.pick("m") is None  # ... and the model is already unroutable
            assert [v.status for v in table.instances("m")] == [InstanceStatus.FAILED]
        finally:
            disk.set()
            await failing
            await updater.stop()
