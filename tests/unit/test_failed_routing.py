"""A failed instance leaves the routing table when it is failed, not after the disk write;
and ``failed`` is published only once the engine's process tree is gone.

Issue 18: for about 0.5 s after an engine died, ``/v1`` answered 503
``engine_unavailable`` (the proxy still routed to the dead port) although
the instance already read ``failed``: the runner published the status event
that updates the routing table only after the registry's database write,
which a busy disk makes slow. The table must follow the in-memory status.

A watcher (the supervisor's retry, an operator's event stream, another pod) that sees
``failed`` may act on it at once: a retry starting a second engine while the first
still ran would put two engines on one instance's memory, port and GPU. So
``InstanceRunner.fail`` kills and reaps the tree first, then publishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

import httpx
import psutil

from sardeenz import proctree
from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.events import Event, EventBus, StatusEvent
from sardeenz.proxy.routing import RoutingTable, RoutingUpdater
from sardeenz.runtime.runner import InstanceRunner
from testkit.waiting import within

# An "engine" with a child of its own, as vLLM has its EngineCore: it prints the child's pid.
ENGINE = (
    "import subprocess, sys, time\n"
    "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
    "print(child.pid, flush=True)\n"
    "time.sleep(120)\n"
)


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


async def test_failed_is_published_only_once_the_engine_tree_is_gone() -> None:
    seen: list[tuple[InstanceStatus, list[int]]] = []
    engine = await asyncio.create_subprocess_exec(
        sys.executable, "-c", ENGINE, stdout=asyncio.subprocess.PIPE, start_new_session=True
    )
    assert engine.stdout is not None
    line = await within(engine.stdout.readline(), 30, "the engine's child pid on its stdout")
    child = int(line)
    tree = [engine.pid, child]

    class WatchedBus(EventBus):
        """Records which of the tree's processes still run when a status is published."""

        def publish(self, event: Event) -> None:
            if isinstance(event, StatusEvent):
                running = [p for p in tree if _running(p)]
                seen.append((event.instance.status, running))
            super().publish(event)

    async def persist(runner: InstanceRunner) -> None:
        return None

    try:
        async with httpx.AsyncClient() as http:
            runner = InstanceRunner(_instance(), Settings(), WatchedBus(), persist, http)
            runner.proc, runner.pid = engine, engine.pid
            runner.create_time = proctree.create_time(engine.pid)
            await within(runner.fail("health check failed"), 30, "fail() with the tree gone")
        assert seen == [(InstanceStatus.FAILED, [])]
        assert engine.returncode is not None  # reaped: no zombie left behind either
        assert runner.instance.error_message == "health check failed"
    finally:
        for pid in tree:
            with contextlib.suppress(psutil.Error):
                psutil.Process(pid).kill()
        if engine.returncode is None:
            await within(engine.wait(), 10, "the engine's reaping")


def _running(pid: int) -> bool:
    """Alive and not a zombie (a zombie is dead, only not reaped yet)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
