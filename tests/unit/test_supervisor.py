"""The supervisor with fake runners: registry, status events, ledger, re-adoption.

Pure and in-process: ``FakeRunner`` is an ``InstanceRunner`` whose engine is a few
fields (no process, no log, no port traffic); the registry is a dict; the GPUs are
simulated; the adapter is the real simulated-engine adapter, whose sleep/wake calls
reach the fake engine through ``engine_call``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, ClassVar, cast

import httpx
import pytest

from sardeenz import proctree
from sardeenz.config import Settings, SimGpuSpec
from sardeenz.domain import EngineKind, InstanceStatus, LoadRequest, ModelInstance
from sardeenz.engines.base import EngineAdapter, LaunchContext
from sardeenz.engines.vllm_probe import VllmInstall
from sardeenz.errors import Conflict, InvalidRequest
from sardeenz.events import Event, EventBus, RemovedEvent, StatusEvent, Subscription
from sardeenz.gpu.inventory import SimulatedInventory
from sardeenz.gpu.kvcached import SegmentTracker
from sardeenz.memory.ledger import MemoryLedger
from sardeenz.runtime.runner import EngineCallFailed, InstanceRunner
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.store.instances import InstanceRepository, StoredInstance
from sardeenz.store.profiles import ProfileRepository
from testkit.ports import free_port_range
from testkit.servers import marked_process
from testkit.waiting import within

GIB = 2**30


class FakeRunner(InstanceRunner):
    """A runner whose engine lives in memory: ready at once, sleeps when asked."""

    spawned: ClassVar[list[list[str]]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sleeping = False
        self.killed = 0

    async def spawn(self, adapter: EngineAdapter, ctx: LaunchContext) -> None:
        spec = adapter.build_launch(self.instance, ctx)
        if self.instance.model_path == "unstartable":
            raise OSError("no such program")
        FakeRunner.spawned.append(spec.argv)
        self.instance.warnings = [*self.instance.warnings, *spec.warnings]

    def start(self, offset: int = 0) -> None:
        self._task = asyncio.create_task(self._run())

    async def _run(self) -> None:
        if self.instance.status == InstanceStatus.STARTING:
            await self._become_active()
        await asyncio.Event().wait()  # "monitoring" until cancelled

    async def verify_adopted(self) -> bool:
        return True  # no socket to inspect: the identity check has its own tests

    async def kill_tree(self, grace: float) -> list[int]:
        self.killed += 1  # never signal anything: the PIDs here may be the test's own
        return []

    async def engine_call(self, method: str, path: str) -> httpx.Response:
        if path.startswith("/sleep"):
            self.sleeping = True
            return httpx.Response(200)
        if path == "/wake_up":
            self.sleeping = False
            return httpx.Response(200)
        if path == "/is_sleeping":
            return httpx.Response(200, json={"is_sleeping": self.sleeping})
        if path == "/sim/state":
            return httpx.Response(200, json={"memory_gib": 0.5 if self.sleeping else 6.0})
        return httpx.Response(404)


class Registry:
    """``InstanceRepository`` in a dict."""

    def __init__(self, *stored: StoredInstance) -> None:
        self.rows = {s.instance.id: s for s in stored}

    async def save(self, instance: ModelInstance, process_create_time: float | None) -> None:
        self.rows[instance.id] = StoredInstance(instance.model_copy(deep=True), process_create_time)

    async def delete(self, instance_id: str) -> None:
        self.rows.pop(instance_id, None)

    async def list_all(self) -> list[StoredInstance]:
        return list(self.rows.values())


class Installs:
    def __init__(self) -> None:
        self.asked = 0

    async def get(self) -> VllmInstall:
        self.asked += 1
        return VllmInstall("python3", "0.32.0", "vllm", False, "cuda")

    async def close(self) -> None:
        return None


class NoProfiles:
    async def list_all(self, model_path: str | None = None) -> list[object]:
        return []


class Node:
    def __init__(
        self, tmp_path: Path, registry: Registry, runner_class: type[InstanceRunner] = FakeRunner
    ) -> None:
        self.settings = Settings(
            data_dir=tmp_path,
            vllm_base_port=free_port_range(5),
            port_range_size=5,
            default_engine="sim",
            runtime_dir=tmp_path / "run",
        )
        self.inventory = SimulatedInventory(
            [SimGpuSpec(index=0, name="NVIDIA L4", memory_bytes=24 * GIB)]
        )
        self.registry = registry
        self.installs = Installs()
        self.bus = EventBus()
        self.events: Subscription = self.bus.subscribe()
        ledger = MemoryLedger(
            self.settings,
            self.inventory,
            cast(ProfileRepository, NoProfiles()),
            SegmentTracker(),
        )
        self.supervisor = Supervisor(
            self.settings,
            self.bus,
            cast(InstanceRepository, registry),
            ledger,
            self.installs,
            runner_class=runner_class,
        )

    async def next_event(self) -> Event:
        return await within(self.events.get(), 2, "the next event on the bus")

    async def until(self, instance_id: str, status: InstanceStatus) -> ModelInstance:
        for _ in range(200):
            inst = self.supervisor.get(instance_id)
            if inst.status == status:
                return inst
            await asyncio.sleep(0.01)
        raise AssertionError(f"{instance_id} is {inst.status}, not {status}")


@pytest.fixture
async def node(tmp_path: Path) -> AsyncIterator[Node]:
    n = Node(tmp_path, Registry())
    await n.supervisor.start()
    yield n
    await n.supervisor.shutdown()


def _req(model: str = "m", *args: str, **fields: object) -> LoadRequest:
    return LoadRequest.model_validate(
        {"modelPath": model, "extraArgs": ["--memory-gib", "6", *args], **fields}
    )


async def test_load_registers_then_spawns_and_reports_each_status(node: Node) -> None:
    inst = await node.supervisor.load(_req(enableSleepMode=True))
    assert inst.status == InstanceStatus.STARTING
    assert inst.engine == EngineKind.SIM
    assert inst.gpu_ids == [0]
    assert inst.reserved_bytes_per_gpu == 6 * GIB
    assert inst.sleep_mode_enabled
    assert inst.engine_device is None
    assert FakeRunner.spawned[-1][-2:] == ["--memory-gib", "6"]
    assert node.inventory.usage(inst.id) == {0: 6 * GIB}

    first = await node.next_event()
    assert isinstance(first, StatusEvent)
    assert (first.previous, first.instance.status) == (None, InstanceStatus.STARTING)
    active = await node.next_event()
    assert isinstance(active, StatusEvent)
    assert (active.previous, active.instance.status) == (
        InstanceStatus.STARTING,
        InstanceStatus.ACTIVE,
    )
    assert node.registry.rows[inst.id].instance.status == InstanceStatus.ACTIVE
    assert [i.id for i in node.supervisor.list_instances()] == [inst.id]
    assert node.supervisor.managed_ports() == frozenset({inst.port})

    gone = await node.supervisor.unload(inst.id)
    assert gone.status == InstanceStatus.STOPPING
    events = [await node.next_event(), await node.next_event()]
    assert isinstance(events[0], StatusEvent)
    assert events[0].instance.status == InstanceStatus.STOPPING
    assert isinstance(events[1], RemovedEvent)
    assert node.registry.rows == {}
    assert node.supervisor.list_instances() == []
    assert node.inventory.usage(inst.id) == {}
    assert node.supervisor.managed_ports() == frozenset()


async def test_only_a_vllm_load_asks_which_vllm_is_installed(node: Node) -> None:
    """The probe starts the vLLM interpreter: a controller of simulated engines never
    pays for it, neither at start-up nor per load."""
    sim = await node.supervisor.load(_req())
    await node.until(sim.id, InstanceStatus.ACTIVE)
    assert node.installs.asked == 0
    vllm = await node.supervisor.load(_req("m2", engine="vllm"))
    assert node.installs.asked == 1
    assert vllm.engine == EngineKind.VLLM
    await node.supervisor.unload(vllm.id)


async def test_a_refused_load_leaves_no_trace(node: Node) -> None:
    with pytest.raises(Conflict) as refused:
        await node.supervisor.load(_req("huge", "--memory-gib", "30"))
    assert refused.value.code == "insufficient_gpu_memory"
    with pytest.raises(InvalidRequest) as bad:
        await node.supervisor.load(_req("m", "--port", "1"))
    assert bad.value.code == "invalid_extra_args"
    with pytest.raises(InvalidRequest) as empty:
        await node.supervisor.load(_req("  "))
    assert empty.value.code == "invalid_model_path"
    assert node.registry.rows == {}
    assert node.supervisor.list_instances() == []
    assert node.inventory.snapshot_now()[0].used_bytes == 0


async def test_an_engine_that_cannot_start_fails_and_gives_its_memory_back(node: Node) -> None:
    inst = await node.supervisor.load(_req("unstartable"))
    assert inst.status == InstanceStatus.FAILED
    assert inst.error_message == "cannot start engine: no such program"
    assert node.inventory.usage(inst.id) == {}
    assert node.supervisor.managed_ports() == frozenset({inst.port})  # kept with the record
    assert node.registry.rows[inst.id].instance.status == InstanceStatus.FAILED


async def test_sleep_and_wake_go_through_the_adapter_and_the_ledger(node: Node) -> None:
    inst = await node.supervisor.load(_req(enableSleepMode=True))
    await node.until(inst.id, InstanceStatus.ACTIVE)

    asleep = await node.supervisor.sleep(inst.id, 1)
    assert (asleep.status, asleep.sleep_level) == (InstanceStatus.SLEEPING, 1)
    assert node.inventory.usage(inst.id) == {0: GIB // 2}  # what /sim/state said

    # Another model takes the freed memory: the wake-up is refused, the engine sleeps on.
    other = await node.supervisor.load(_req("other", "--memory-gib", "20"))
    with pytest.raises(Conflict) as refused:
        await node.supervisor.wake(inst.id)
    assert refused.value.code == "insufficient_gpu_memory"
    assert node.supervisor.get(inst.id).status == InstanceStatus.SLEEPING

    await node.supervisor.unload(other.id)
    awake = await node.supervisor.wake(inst.id)
    assert awake.status == InstanceStatus.ACTIVE
    assert node.inventory.usage(inst.id) == {0: 6 * GIB}


async def test_restart_re_adopts_live_engines_and_fails_dead_ones(tmp_path: Path) -> None:
    me = os.getpid()  # stands in for a live engine; FakeRunner never signals it

    def stored(iid: str, status: InstanceStatus, create_time: float | None) -> StoredInstance:
        inst = ModelInstance(
            id=iid,
            model_path="m",
            served_model_name=iid,
            display_name=iid,
            engine=EngineKind.SIM,
            status=status,
            port=40000 + len(iid),
            process_id=me,
            gpu_ids=[0],
            reserved_bytes_per_gpu=4 * GIB,
        )
        return StoredInstance(inst, create_time)

    registry = Registry(
        stored("alive", InstanceStatus.ACTIVE, proctree.create_time(me)),
        stored("dead", InstanceStatus.ACTIVE, 1.0),  # the PID now belongs to someone else
        stored("failed-before", InstanceStatus.FAILED, None),
    )
    node = Node(tmp_path, registry)
    await node.supervisor.start()
    try:
        alive = node.supervisor.get("alive")
        assert alive.status == InstanceStatus.ACTIVE
        assert node.inventory.usage("alive") == {0: 4 * GIB}
        assert alive.port in node.supervisor.managed_ports()

        dead = node.supervisor.get("dead")
        assert dead.status == InstanceStatus.FAILED
        assert dead.error_message == "engine was gone when the controller restarted"
        assert node.inventory.usage("dead") == {}
        assert registry.rows["dead"].instance.status == InstanceStatus.FAILED

        assert node.supervisor.get("failed-before").status == InstanceStatus.FAILED
    finally:
        await node.supervisor.detach()


@pytest.mark.parametrize("engine_alive", [False, True], ids=["engine-gone", "engine-running"])
async def test_restart_finishes_an_unload_the_controller_died_in(
    tmp_path: Path, engine_alive: bool
) -> None:
    """A record left ``stopping`` is an unload to complete, whether or not its engine ended."""
    me = os.getpid()
    inst = ModelInstance(
        id="mid-unload",
        model_path="m",
        served_model_name="m",
        display_name="m",
        engine=EngineKind.SIM,
        status=InstanceStatus.STOPPING,
        port=40000,
        process_id=me,
        gpu_ids=[0],
        reserved_bytes_per_gpu=4 * GIB,
    )
    create_time = proctree.create_time(me) if engine_alive else 1.0  # 1.0: the PID was reused
    registry = Registry(StoredInstance(inst, create_time))
    node = Node(tmp_path, registry)
    await node.supervisor.start()
    try:
        assert node.supervisor.list_instances() == []
        assert registry.rows == {}
        removed = await node.next_event()
        assert isinstance(removed, RemovedEvent)
        assert removed.instance.id == "mid-unload"
        assert node.inventory.usage("mid-unload") == {}
        assert node.supervisor.managed_ports() == frozenset()
    finally:
        await node.supervisor.detach()


class LostAnswerRunner(FakeRunner):
    """An engine whose answer to ``/sleep`` never arrives (a timeout, a reset).

    ``falls_asleep``: whether it slept all the same; ``answers``: whether it still
    answers ``/is_sleeping`` afterwards."""

    falls_asleep: ClassVar[bool] = True
    answers: ClassVar[bool] = True

    async def engine_call(self, method: str, path: str) -> httpx.Response:
        if path.startswith("/sleep"):
            self.sleeping = self.falls_asleep
            raise EngineCallFailed(f"engine did not answer {method} {path}: ReadTimeout")
        if path == "/is_sleeping" and not self.answers:
            raise EngineCallFailed(f"engine did not answer {method} {path}: ConnectError")
        return await super().engine_call(method, path)


@pytest.mark.parametrize(
    ("falls_asleep", "answers"),
    [(True, True), (False, True), (True, False)],
    ids=["slept", "stayed-awake", "silent"],
)
async def test_a_lost_answer_to_sleep_records_what_the_engine_reports(
    tmp_path: Path, falls_asleep: bool, answers: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The engine slept but its answer was lost: the record must say sleeping, or
    requests are routed to an engine that queues them until woken. Awake, or silent,
    the sleep failed with the engine's error and the instance stays active."""
    monkeypatch.setattr(LostAnswerRunner, "falls_asleep", falls_asleep)
    monkeypatch.setattr(LostAnswerRunner, "answers", answers)
    node = Node(tmp_path, Registry(), runner_class=LostAnswerRunner)
    await node.supervisor.start()
    try:
        inst = await node.supervisor.load(_req(enableSleepMode=True))
        await node.until(inst.id, InstanceStatus.ACTIVE)
        if falls_asleep and answers:
            asleep = await node.supervisor.sleep(inst.id, 1)
            assert (asleep.status, asleep.sleep_level) == (InstanceStatus.SLEEPING, 1)
            assert node.registry.rows[inst.id].instance.status == InstanceStatus.SLEEPING
            assert node.inventory.usage(inst.id) == {0: GIB // 2}  # what /sim/state said
            assert (await node.supervisor.wake(inst.id)).status == InstanceStatus.ACTIVE
        else:
            with pytest.raises(EngineCallFailed, match=r"POST /sleep\?level=1: ReadTimeout"):
                await node.supervisor.sleep(inst.id, 1)
            assert node.supervisor.get(inst.id).status == InstanceStatus.ACTIVE
            assert node.registry.rows[inst.id].instance.status == InstanceStatus.ACTIVE
            assert node.inventory.usage(inst.id) == {0: 6 * GIB}
    finally:
        await node.supervisor.shutdown()


class AsleepRunner(FakeRunner):
    """An engine that fell asleep before the controller died: its sleep was never recorded.

    ``wakes``: whether ``/wake_up`` works; ``paths``: every engine call, in order."""

    wakes: ClassVar[bool] = True
    made: ClassVar[dict[str, AsleepRunner]] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.sleeping = True
        self.paths: list[str] = []
        AsleepRunner.made[self.instance.id] = self

    async def engine_call(self, method: str, path: str) -> httpx.Response:
        self.paths.append(path)
        if path == "/wake_up" and not self.wakes:
            return httpx.Response(500, text="CUDA error")
        return await super().engine_call(method, path)


@pytest.mark.parametrize("wakes", [True, False], ids=["wakes", "will-not-wake"])
async def test_restart_wakes_an_engine_whose_sleep_was_never_recorded(
    tmp_path: Path, wakes: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between the engine's sleep and the record (issue 28, soak run 62): the
    record says active, so the engine must be awake before anything routes to it (an
    asleep engine queues requests forever); one that will not wake fails instead."""
    me = os.getpid()
    monkeypatch.setattr(AsleepRunner, "wakes", wakes)

    def stored(iid: str, sleep_mode: bool) -> StoredInstance:
        inst = ModelInstance(
            id=iid,
            model_path="m",
            served_model_name=iid,
            display_name=iid,
            engine=EngineKind.SIM,
            status=InstanceStatus.ACTIVE,
            port=40000 + len(iid),
            process_id=me,
            gpu_ids=[0],
            reserved_bytes_per_gpu=4 * GIB,
            sleep_mode_enabled=sleep_mode,
        )
        return StoredInstance(inst, proctree.create_time(me))

    registry = Registry(stored("cat", True), stored("no-sleep-mode", False))
    node = Node(tmp_path, registry, runner_class=AsleepRunner)
    await node.supervisor.start()
    try:
        engine = AsleepRunner.made["cat"]
        cat = node.supervisor.get("cat")
        if wakes:
            assert engine.paths == ["/is_sleeping", "/wake_up", "/is_sleeping"]
            assert not engine.sleeping
            assert cat.status == InstanceStatus.ACTIVE
            assert node.inventory.usage("cat") == {0: 4 * GIB}
        else:
            assert engine.paths == ["/is_sleeping", "/wake_up"]
            assert cat.status == InstanceStatus.FAILED
            assert cat.error_message == (
                "engine was asleep when the controller restarted: "
                "engine answered 500 to /wake_up: CUDA error"
            )
            assert registry.rows["cat"].instance.status == InstanceStatus.FAILED
            assert node.inventory.usage("cat") == {}
        # Without sleep mode it cannot be asleep: the engine is not asked.
        assert AsleepRunner.made["no-sleep-mode"].paths == []
        assert node.supervisor.get("no-sleep-mode").status == InstanceStatus.ACTIVE
    finally:
        await node.supervisor.detach()


class SlowSpawnRunner(FakeRunner):
    """Spawns a real (marked, idle) process once ``gate`` opens, and stops it for real."""

    gate: ClassVar[asyncio.Event]
    engines: ClassVar[list[subprocess.Popen[bytes]]]

    async def spawn(self, adapter: EngineAdapter, ctx: LaunchContext) -> None:
        await self.gate.wait()
        engine = marked_process(self.settings.data_dir, self.instance.id)
        SlowSpawnRunner.engines.append(engine)
        self.pid = self.instance.process_id = engine.pid
        self.create_time = proctree.create_time(engine.pid)

    async def kill_tree(self, grace: float) -> list[int]:
        return await InstanceRunner.kill_tree(self, grace)


async def test_an_unload_while_the_engine_is_spawned_ends_that_engine(tmp_path: Path) -> None:
    # The instance is listed (and so can be unloaded: a new leader retiring the target
    # a dead one started) before its engine exists. The unload used to end "nothing",
    # forget the instance, and the engine started a moment later ran on, forgotten,
    # with its record written again (issue 28).
    SlowSpawnRunner.gate = asyncio.Event()
    SlowSpawnRunner.engines = []
    registry = Registry()
    node = Node(tmp_path, registry, runner_class=SlowSpawnRunner)
    await node.supervisor.start()
    try:
        loading = asyncio.create_task(node.supervisor.load(_req()))
        for _ in range(200):
            if node.supervisor.list_instances():
                break
            await asyncio.sleep(0.01)
        [starting] = node.supervisor.list_instances()
        assert starting.process_id is None
        unloading = asyncio.create_task(node.supervisor.unload(starting.id))
        await asyncio.sleep(0.05)  # the unload is under way, waiting for nothing to spawn
        SlowSpawnRunner.gate.set()
        await within(loading, 10, "the load, its spawn let go")
        await within(unloading, 10, "the unload of the instance spawned meanwhile")
        [engine] = SlowSpawnRunner.engines
        assert await asyncio.to_thread(engine.wait, 5) is not None, "the engine outlived its unload"
        assert node.supervisor.list_instances() == []
        assert registry.rows == {}
    finally:
        await node.supervisor.shutdown()
        for engine in SlowSpawnRunner.engines:
            engine.kill()
            engine.wait()


async def test_restart_adopts_an_engine_whose_start_time_moved_with_the_clock(
    tmp_path: Path,
) -> None:
    # A stepped wall clock moves psutil's start times: the engine is told by its mark,
    # adopted, not failed (and later stopped for real, not skipped as someone else).
    engine = marked_process(tmp_path, "stepped")
    try:
        started = proctree.create_time(engine.pid)
        assert started is not None
        inst = ModelInstance(
            id="stepped",
            model_path="m",
            served_model_name="m",
            display_name="m",
            engine=EngineKind.SIM,
            status=InstanceStatus.ACTIVE,
            port=40001,
            process_id=engine.pid,
            gpu_ids=[0],
            reserved_bytes_per_gpu=4 * GIB,
        )
        registry = Registry(StoredInstance(inst, started - 1.0))
        node = Node(tmp_path, registry)
        await node.supervisor.start()
        try:
            assert node.supervisor.get("stepped").status == InstanceStatus.ACTIVE
            assert engine.poll() is None  # adopted, not taken for a stray
        finally:
            await node.supervisor.detach()
    finally:
        engine.kill()
        engine.wait()


async def test_the_sweep_kills_the_engines_no_instance_owns(node: Node, tmp_path: Path) -> None:
    # The net under every stop (issue 28): an engine process of this data dir whose
    # instance is not listed here is one nobody would ever stop; a listed one's is left.
    listed = await node.supervisor.load(_req())
    owned = marked_process(tmp_path, listed.id)  # stands in for its engine (FakeRunner)
    stray = marked_process(tmp_path, "forgotten")
    try:
        assert await node.supervisor.sweep_strays() == [stray.pid]
        assert await asyncio.to_thread(stray.wait, 5) is not None
        assert owned.poll() is None
    finally:
        for proc in (owned, stray):
            proc.kill()
            proc.wait()
