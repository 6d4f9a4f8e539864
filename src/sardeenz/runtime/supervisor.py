"""The supervisor: desired state (the registry) reconciled with running engines.

One ``InstanceRunner`` (``runtime/runner.py``) per instance owns its engine
process: it spawns it, tails its log, decides when it is ready, watches its
health, and ends it. The ``Supervisor`` owns the runners, the port range and the registry, and is the
only way the API changes an instance.

Crash safety comes from three choices: engines run in their own session with
output to a file, so they outlive the controller; every instance is written
to the registry *before* its process is spawned and again with its PID and
start time right after; and on start-up the supervisor re-adopts what is
alive, fails what is dead, and kills any engine of this data dir that the
registry cannot account for.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx
import psutil

from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, LoadRequest, ModelInstance, utcnow
from sardeenz.engines import get_adapter
from sardeenz.engines.base import EngineAdapter, LaunchContext, engine_tmp_dir
from sardeenz.engines.logparse import extract_error
from sardeenz.engines.sim_adapter import sim_footprint_bytes
from sardeenz.engines.vllm import validate_extra_args
from sardeenz.engines.vllm_probe import VllmProbe
from sardeenz.errors import Conflict, InvalidRequest, NotFound
from sardeenz.events import EventBus, RemovedEvent, StatusEvent
from sardeenz.gpu.budget import (
    Reservation,
    measure_baseline,
    pending_bytes_by_gpu,
    wake_shortfalls,
    with_pending_reservations,
)
from sardeenz.gpu.capability import attention_backend_override
from sardeenz.gpu.inventory import GpuInventory, SimulatedInventory, SimulatedOutOfMemory
from sardeenz.gpu.kvcached import SegmentTracker, ipc_name, should_enable
from sardeenz.gpu.selection import GB, Placement, gb, plan_placement
from sardeenz.runtime import hostmem, proctree
from sardeenz.runtime.ports import PortAllocator, prepare_lock_dir
from sardeenz.runtime.runner import (
    ENV_DATA_DIR,
    ENV_INSTANCE_ID,
    ERROR_TAIL_LINES,
    EngineCallFailed,
    InstanceRunner,
)
from sardeenz.store.instances import InstanceRepository

log = logging.getLogger(__name__)


class SleepUnsupported(Conflict):
    code = "sleep_unsupported"


class InvalidState(Conflict):
    code = "invalid_state"


class Supervisor:
    """Owns every runner; the API's single entry point for instance lifecycle."""

    def __init__(
        self,
        settings: Settings,
        bus: EventBus,
        repo: InstanceRepository,
        inventory: GpuInventory,
        segments: SegmentTracker | None = None,
        adapters: Callable[[EngineKind], EngineAdapter] = get_adapter,
    ) -> None:
        self.settings = settings
        self.inventory = inventory
        self.segments = segments or SegmentTracker()
        self.bus = bus
        self.repo = repo
        self._adapters = adapters
        self._runners: dict[str, InstanceRunner] = {}
        lock_dir = prepare_lock_dir(settings.port_lock_dir, must_own=settings.runtime_dir is None)
        self._ports = PortAllocator(settings.engine_port_range, settings.engine_host, lock_dir)
        self._lock = asyncio.Lock()
        self._http: httpx.AsyncClient | None = None
        self._ops: set[asyncio.Task[Any]] = set()
        self.instances_dir = settings.data_dir / "instances"
        self.vllm_probe = VllmProbe(
            settings.vllm_python, settings.vllm_device, settings.vllm_probe_timeout_seconds
        )
        self.host_memory = hostmem.HostMemoryBook()

    # --- queries -------------------------------------------------------------
    def list_instances(self) -> list[ModelInstance]:
        return [r.snapshot() for r in self._runners.values()]

    def get(self, instance_id: str) -> ModelInstance:
        return self._runner(instance_id).snapshot()

    def log_lines(self, instance_id: str, last: int | None = None) -> list[str]:
        return self._runner(instance_id).buffer.lines(last)

    def managed_ports(self) -> frozenset[int]:
        return frozenset(r.instance.port for r in self._runners.values())

    def _runner(self, instance_id: str) -> InstanceRunner:
        runner = self._runners.get(instance_id)
        if runner is None:
            raise NotFound(f"no instance with id {instance_id!r}", code="instance_not_found")
        return runner

    # --- start-up: re-adopt ----------------------------------------------------
    async def start(self) -> None:
        self.vllm_probe.start()  # in the background; the first vLLM load awaits it
        self.instances_dir.mkdir(parents=True, exist_ok=True)
        self._http = httpx.AsyncClient(
            timeout=self.settings.health_timeout_seconds,
            limits=httpx.Limits(max_keepalive_connections=64),
        )
        for stored in await self.repo.list_all():
            await self._restore(stored.instance, stored.process_create_time)
        known = {
            rid for rid, r in self._runners.items() if r.instance.status != InstanceStatus.FAILED
        }
        strays = await asyncio.to_thread(find_strays, self.settings.data_dir, known)
        for pgid in strays:
            log.warning("killing engine process group %d that no instance accounts for", pgid)
            await asyncio.to_thread(proctree.terminate_group, pgid, [], 5.0)

    async def _restore(self, inst: ModelInstance, create_time: float | None) -> None:
        runner = self._new_runner(inst)
        runner.create_time = create_time
        self._runners[inst.id] = runner
        if inst.status == InstanceStatus.FAILED:
            runner.prime_from_file()
            self._remove_engine_tmp(inst.id)  # the controller may have died before it could
            return
        alive = inst.process_id is not None and proctree.is_alive(inst.process_id, create_time)
        if not alive:
            runner.prime_from_file()
            cause = extract_error(runner.buffer.lines(ERROR_TAIL_LINES))
            await runner.fail(
                "engine was gone when the controller restarted" + (f": {cause}" if cause else "")
            )
            return
        if inst.status == InstanceStatus.STOPPING:  # we died mid-unload: finish it
            await self._finish_stop(runner, grace=self.settings.stop_grace_seconds)
            return
        if not self._ports.reserve(inst.port):
            log.warning("instance %s: port %d is claimed by another server", inst.id, inst.port)
        self._book(runner)
        if not await runner.verify_adopted():  # its port may be someone else's by now
            runner.prime_from_file()
            return
        if inst.status == InstanceStatus.SLEEPING:
            await self._sync_simulated_memory(runner)
        offset = runner.prime_from_file()
        log.info("re-adopted instance %s (pid %s, port %d)", inst.id, inst.process_id, inst.port)
        runner.start(offset=offset)

    # --- load --------------------------------------------------------------------
    async def load(self, req: LoadRequest) -> ModelInstance:
        model_path = req.model_path.strip()
        if not model_path:
            raise InvalidRequest("modelPath must not be empty", code="invalid_model_path")
        engine = req.engine or EngineKind(self.settings.effective_default_engine)
        try:
            extra_args = validate_extra_args(list(req.extra_args))
        except ValueError as exc:
            raise InvalidRequest(str(exc), code="invalid_extra_args") from exc
        adapter = self._adapters(engine)
        install = await self.vllm_probe.get() if engine == EngineKind.VLLM else None
        on_cpu = install is not None and install.device == "cpu"
        async with self._lock:
            placement, backend_args, warnings, ipc = await self._place(
                req, adapter.simulated, extra_args, cpu_engine=on_cpu
            )
            host_bytes = await self._check_host_memory(req, extra_args) if on_cpu else 0
            if on_cpu and req.enable_sleep_mode:
                warnings.append(
                    "enableSleepMode ignored: vLLM's CPU build has no sleep mode "
                    "(it refuses to start with --enable-sleep-mode)"
                )
            extra_args = [*extra_args, *backend_args]
            port = await self._ports.allocate_async()
            instance_id = uuid.uuid4().hex[:12]
            instance_dir = self.instances_dir / instance_id
            served = req.served_model_name or model_path
            inst = ModelInstance(
                id=instance_id,
                model_path=model_path,
                served_model_name=served,
                display_name=req.display_name or served,
                engine=engine,
                status=InstanceStatus.STARTING,
                port=port,
                gpu_memory_limit=req.gpu_memory_limit,
                gpu_ids=placement.gpu_ids,
                tensor_parallel_size=req.tensor_parallel_size,
                kvcached_enabled=ipc is not None,
                kvcached_ipc_name=ipc,
                gpu_memory_utilization=placement.gpu_memory_utilization,
                reserved_bytes_per_gpu=placement.bytes_per_gpu if placement.gpu_ids else None,
                warnings=warnings,
                sleep_mode_enabled=req.enable_sleep_mode and not on_cpu,
                extra_args=extra_args,
                log_file=str(instance_dir / "engine.log"),
                simulated=adapter.simulated,
                engine_device=install.device if install is not None else None,
            )
            runner = self._new_runner(inst)
            self._runners[instance_id] = runner
            self._book(runner)
            if host_bytes:
                self.host_memory.reserve(instance_id, host_bytes)
        tmp_dir = engine_tmp_dir(instance_dir, instance_id) if install is not None else None
        ctx = LaunchContext(
            host=self.settings.engine_host,
            port=port,
            gpu_ids=placement.gpu_ids,
            gpu_memory_utilization=placement.gpu_memory_utilization,
            kvcached_ipc_name=ipc,
            instance_dir=str(instance_dir),
            settings=self.settings,
            tmp_dir=str(tmp_dir) if tmp_dir is not None else None,
            vllm=install,
        )
        instance_dir.mkdir(parents=True, exist_ok=True)
        if tmp_dir is not None:
            tmp_dir.mkdir(parents=True, exist_ok=True)
        # Registry first, then the process: a crash in between leaves a record
        # (failed at restart) rather than an engine nobody knows about.
        await self._save(runner)
        self.bus.publish(StatusEvent(runner.snapshot(), None))
        try:
            await runner.spawn(adapter, ctx)
        except (OSError, ValueError) as exc:
            await runner.fail(f"cannot start engine: {exc}")
            self._ports.release(port)
            return runner.snapshot()
        if isinstance(self.inventory, SimulatedInventory) and placement.gpu_ids:
            self.inventory.set_usage(inst.id, placement.bytes_per_gpu, pid=runner.pid)
        await self._save(runner)
        runner.start()
        log.info("loading %s as %s on port %d (pid %s)", model_path, instance_id, port, runner.pid)
        return runner.snapshot()

    # --- unload ------------------------------------------------------------------
    async def unload(self, instance_id: str) -> ModelInstance:
        runner = self._runner(instance_id)
        if runner.stopping or runner.instance.status == InstanceStatus.STOPPING:
            raise Conflict(f"instance {instance_id} is already stopping", code="instance_stopping")
        runner.stopping = True
        # The stop runs as a task of ours: a client that hangs up mid-unload
        # must not leave an engine half stopped.
        task = asyncio.create_task(self._stop(runner))
        self._ops.add(task)
        task.add_done_callback(self._ops.discard)
        return await asyncio.shield(task)

    async def _stop(self, runner: InstanceRunner) -> ModelInstance:
        runner.stopping = True
        await runner.cancel()
        if runner.instance.status != InstanceStatus.FAILED:
            await runner.set_status(InstanceStatus.STOPPING)
        return await self._finish_stop(runner, grace=self.settings.stop_grace_seconds)

    async def _finish_stop(self, runner: InstanceRunner, grace: float) -> ModelInstance:
        survivors = await runner.kill_tree(grace)
        if survivors:
            log.error("instance %s: processes %s survived SIGKILL", runner.instance.id, survivors)
        if runner.tailer is not None:
            runner.tailer.poll()
            runner.tailer.close()
        runner.instance.stopped_at = utcnow()
        runner.ended()
        self._ports.release(runner.instance.port)
        self._runners.pop(runner.instance.id, None)
        await self.repo.delete(runner.instance.id)
        snap = runner.snapshot()
        self.bus.publish(RemovedEvent(snap))
        log.info("unloaded instance %s", runner.instance.id)
        return snap

    # --- shutdown ----------------------------------------------------------------
    async def shutdown(self) -> None:
        """Graceful stop of the controller: every engine is stopped, none left behind."""
        runners = list(self._runners.values())
        results = await asyncio.gather(*(self._stop(r) for r in runners), return_exceptions=True)
        for r, res in zip(runners, results, strict=True):
            if isinstance(res, BaseException):
                log.error("stopping %s failed: %s", r.instance.id, res)
        if self._ops:
            await asyncio.gather(*self._ops, return_exceptions=True)
        await self.vllm_probe.close()
        if self._http is not None:
            await self._http.aclose()

    async def detach(self) -> None:
        """Stop watching without touching the engines (tests of crash recovery)."""
        for r in list(self._runners.values()):
            await r.cancel()
        await self.vllm_probe.close()
        if self._http is not None:
            await self._http.aclose()

    # --- GPUs ------------------------------------------------------------------------
    async def _place(
        self,
        req: LoadRequest,
        simulated_engine: bool,
        extra_args: list[str],
        cpu_engine: bool = False,
    ) -> tuple[Placement, list[str], list[str], str | None]:
        """GPUs, memory fraction, attention-backend flag, kvcached segment for a load.

        A CPU-mode vLLM engine gets the empty placement whatever GPUs the node has: no
        ``CUDA_VISIBLE_DEVICES``, no ``--gpu-memory-utilization``, no kvcached.
        """
        if cpu_engine and req.gpu_ids:
            raise InvalidRequest(
                "gpuIds cannot be used: vLLM runs on CPU here (its CPU build, or "
                "SARDEENZ_VLLM_DEVICE=cpu)",
                code="unknown_gpu",
                unknownGpuIds=list(req.gpu_ids),
                availableGpuIds=[],
            )
        gpus = [] if cpu_engine else await self.inventory.snapshot()
        pending: dict[int, int] = {}
        if gpus and not isinstance(self.inventory, SimulatedInventory):
            # The driver does not show what engines still starting will take (the
            # simulated inventory books it at load time instead): count it as used.
            reservations = await self._pending_reservations()
            pending = pending_bytes_by_gpu(gpus, reservations)
            gpus = with_pending_reservations(gpus, reservations)
        try:
            placement = plan_placement(
                gpus,
                gpu_ids=req.gpu_ids,
                tensor_parallel_size=req.tensor_parallel_size,
                gpu_memory_limit_gb=req.gpu_memory_limit,
                default_limit_bytes=sim_footprint_bytes(extra_args) if simulated_engine else None,
            )
        except Conflict as exc:
            if exc.code != "insufficient_gpu_memory" or not pending:
                raise
            held = ", ".join(f"GPU{i} {gb(b)}" for i, b in sorted(pending.items()))
            raise Conflict(
                f"{exc.message} (this counts as used the memory promised to engines that are "
                f"still starting or waking up and have not taken it yet: {held})",
                code=exc.code,
                **exc.extra,
            ) from exc
        backend_args, backend_warnings = attention_backend_override(placement.gpus, extra_args)
        ipc = None
        if should_enable(
            self.settings.kvcached_enabled, req.tensor_parallel_size, bool(placement.gpu_ids)
        ):
            ipc = ipc_name(placement.gpu_ids)
        return placement, backend_args, [*placement.warnings, *backend_warnings], ipc

    def _holds_pending_memory(self, runner: InstanceRunner) -> bool:
        """Whether the driver may not show yet the GPU memory promised to this instance.

        Starting engines (vLLM allocates after loading weights and profiling) and
        sleeping ones being woken (the simulated inventory books a wake-up before the
        engine is asked to wake). Active engines hold their share (NVML shows it);
        sleeping ones gave it back and it is free for others until a wake-up, as with
        the simulated inventory. Stopping and failed ones are on their way out.
        """
        inst = runner.instance
        if not inst.gpu_ids or not inst.reserved_bytes_per_gpu or runner.stopping:
            return False
        if inst.status == InstanceStatus.STARTING:
            return True
        waking = runner.wake_task is not None and not runner.wake_task.done()
        return inst.status == InstanceStatus.SLEEPING and waking

    async def _pending_reservations(self, *, exclude: str | None = None) -> list[Reservation]:
        """The reservations of instances that may not hold their memory yet (but
        ``exclude``), with the PIDs of their process trees."""
        return await self._reservations(
            r
            for r in self._runners.values()
            if r.instance.id != exclude and self._holds_pending_memory(r)
        )

    @staticmethod
    async def _reservations(runners: Iterable[InstanceRunner]) -> list[Reservation]:
        """The instances' reservations with the PIDs of their process trees (walked in
        a worker thread)."""
        # Read on the event loop; only the process-tree walk goes to the thread.
        holders = [
            (
                Reservation(
                    instance_id=r.instance.id,
                    gpu_ids=tuple(r.instance.gpu_ids),
                    bytes_per_gpu=r.instance.reserved_bytes_per_gpu or 0,
                ),
                r.pid,
                r.create_time,
                r.instance.engine_core_pid,
            )
            for r in runners
        ]
        if not holders:
            return []

        def collect() -> list[Reservation]:
            out = []
            for res, pid, created, core in holders:
                if pid is None or not proctree.is_alive(pid, created):
                    out.append(res)  # not spawned yet, or gone (its PID maybe reused)
                    continue
                pids = {p.pid for p in proctree.tree(pid)}
                if core is not None:
                    pids.add(core)
                out.append(dataclasses.replace(res, pids=frozenset(pids)))
            return out

        return await asyncio.to_thread(collect)

    def _book(self, runner: InstanceRunner) -> None:
        """Hold the instance's memory and segment in the node's books."""
        inst = runner.instance
        if inst.kvcached_ipc_name:
            self.segments.record(inst.kvcached_ipc_name)
        if (
            isinstance(self.inventory, SimulatedInventory)
            and inst.gpu_ids
            and inst.reserved_bytes_per_gpu is not None
            and not self.inventory.usage(inst.id)
        ):
            try:
                self.inventory.allocate(
                    inst.id, inst.gpu_ids, inst.reserved_bytes_per_gpu, pid=inst.process_id
                )
            except (SimulatedOutOfMemory, ValueError) as exc:  # re-adopted over budget
                log.warning("instance %s: simulated memory not booked: %s", inst.id, exc)

    def _unbook(self, runner: InstanceRunner) -> None:
        self.host_memory.release(runner.instance.id)
        self._remove_engine_tmp(runner.instance.id)
        if isinstance(self.inventory, SimulatedInventory):
            self.inventory.release(runner.instance.id)

    async def _measure_baseline(self, runner: InstanceRunner) -> None:
        inst = runner.instance
        self.host_memory.release(inst.id)  # active: its memory is in use, no longer promised
        if not inst.gpu_ids:
            return
        pids = [p.pid for p in await asyncio.to_thread(proctree.tree, runner.pid or -1)]
        baseline = measure_baseline(
            await self.inventory.snapshot(), gpu_ids=inst.gpu_ids, pids=pids, instance_id=inst.id
        )
        if baseline is not None:
            inst.memory_baseline_bytes_by_gpu = dict(baseline)
            inst.memory_baseline_by_gpu = {i: round(b / GB, 3) for i, b in baseline.items()}

    async def _sync_simulated_memory(self, runner: InstanceRunner) -> None:
        """Book what a simulated engine really holds now (sleep frees, wake takes back)."""
        if not (isinstance(self.inventory, SimulatedInventory) and runner.instance.simulated):
            return
        resp = await runner.engine_call("GET", "/sim/state")
        if resp.status_code != 200:
            return
        held = int(float(resp.json()["memory_gib"]) * 2**30)
        try:
            self.inventory.set_usage(runner.instance.id, held)
        except (KeyError, SimulatedOutOfMemory) as exc:
            log.warning("instance %s: %s", runner.instance.id, exc)

    def baselines_bytes(self) -> dict[str, dict[int, int]]:
        return {
            r.instance.id: dict(r.instance.memory_baseline_bytes_by_gpu)
            for r in self._runners.values()
            if r.instance.memory_baseline_bytes_by_gpu
        }

    def instance_pids(self) -> dict[str, list[int]]:
        return {
            r.instance.id: [p for p in (r.pid, r.instance.engine_core_pid) if p is not None]
            for r in self._runners.values()
        }

    # --- sleep / wake ------------------------------------------------------------------
    async def sleep(self, instance_id: str, level: int) -> ModelInstance:
        runner = self._runner(instance_id)
        inst = runner.instance
        if inst.engine_device == "cpu":
            raise SleepUnsupported(
                f"instance {instance_id} runs on vLLM's CPU build, which has no sleep mode: "
                "sleeping would free no memory. Unload it instead"
            )
        if not inst.sleep_mode_enabled:
            raise SleepUnsupported(
                f"instance {instance_id} was loaded without sleep mode; "
                "load it with enableSleepMode: true",
                code="sleep_mode_disabled",
            )
        async with runner.sleep_lock:
            if inst.status == InstanceStatus.SLEEPING and inst.sleep_level == level:
                return runner.snapshot()
            if inst.status not in (InstanceStatus.ACTIVE, InstanceStatus.SLEEPING):
                raise InvalidState(f"instance {instance_id} is {inst.status.value}, not active")
            resp = await runner.engine_call("POST", f"/sleep?level={level}")
            self._check_engine_answer(runner, resp, "sleep")
            if not await self._is_sleeping(runner):
                raise EngineCallFailed(f"engine of {instance_id} did not report sleeping")
            inst.sleep_level = level
            inst.slept_at = utcnow()
            await self._sync_simulated_memory(runner)
            await runner.set_status(InstanceStatus.SLEEPING)
            return runner.snapshot()

    async def wake(self, instance_id: str) -> ModelInstance:
        """Wake an instance; concurrent callers share one wake-up (single flight)."""
        runner = self._runner(instance_id)
        if runner.instance.status == InstanceStatus.ACTIVE:
            return runner.snapshot()
        if runner.wake_task is None or runner.wake_task.done():
            runner.wake_task = asyncio.create_task(self._wake(runner))
            self._ops.add(runner.wake_task)
            runner.wake_task.add_done_callback(self._ops.discard)
        return await asyncio.shield(runner.wake_task)

    async def _wake(self, runner: InstanceRunner) -> ModelInstance:
        inst = runner.instance
        async with runner.sleep_lock:
            if inst.status == InstanceStatus.ACTIVE:
                return runner.snapshot()
            if inst.status != InstanceStatus.SLEEPING:
                raise InvalidState(f"instance {inst.id} is {inst.status.value}, not sleeping")
            sleeping_usage = None
            if isinstance(self.inventory, SimulatedInventory) and inst.reserved_bytes_per_gpu:
                # Take the memory back in the books first: if another model took it
                # meanwhile, refuse instead of letting the engine run out of memory.
                sleeping_usage = self.inventory.usage(inst.id)
                try:
                    self.inventory.set_usage(inst.id, inst.reserved_bytes_per_gpu)
                except SimulatedOutOfMemory as exc:
                    raise Conflict(
                        f"cannot wake {inst.id}: {exc}", code="insufficient_gpu_memory"
                    ) from exc
            elif inst.gpu_ids and inst.reserved_bytes_per_gpu:
                await self._check_wake_fits(runner)
            try:
                resp = await runner.engine_call("POST", "/wake_up")
                self._check_engine_answer(runner, resp, "wake_up")
                if await self._is_sleeping(runner):
                    raise EngineCallFailed(f"engine of {inst.id} still reports sleeping")
            except BaseException:
                if sleeping_usage:
                    self.inventory.set_usage(inst.id, sleeping_usage)  # type: ignore[attr-defined]
                raise
            inst.sleep_level = None
            inst.slept_at = None
            await runner.set_status(InstanceStatus.ACTIVE)
            return runner.snapshot()

    async def _check_wake_fits(self, runner: InstanceRunner) -> None:
        """Refuse (409 ``insufficient_gpu_memory``) to wake an engine on driver-backed GPUs
        whose memory was taken while it slept, before vLLM dies of CUDA out-of-memory.

        The simulated inventory books the wake-up instead (see ``_wake``).
        """
        inst = runner.instance
        gpus = await self.inventory.snapshot()
        if not gpus:
            return
        (waking,) = await self._reservations([runner])
        others = await self._pending_reservations(exclude=inst.id)
        short = wake_shortfalls(gpus, waking, others)
        if not short:
            return
        lacking = ", ".join(
            f"GPU{s.index} {s.name} needs {gb(s.needed_bytes)} back, {gb(s.free_bytes)} free"
            for s in short
        )
        pending = pending_bytes_by_gpu(gpus, others)
        held = [f"GPU{s.index} {gb(pending[s.index])}" for s in short if pending.get(s.index)]
        promised = (
            f" (counting as used the memory promised to engines still starting or waking up: "
            f"{', '.join(held)})"
            if held
            else ""
        )
        raise Conflict(
            f"cannot wake {inst.id}: not enough free GPU memory to take back its "
            f"{gb(inst.reserved_bytes_per_gpu or 0)} per GPU: {lacking}{promised}; "
            "unload or sleep another model first",
            code="insufficient_gpu_memory",
        )

    async def _is_sleeping(self, runner: InstanceRunner) -> bool:
        resp = await runner.engine_call("GET", "/is_sleeping")
        self._check_engine_answer(runner, resp, "is_sleeping")
        try:
            return bool(resp.json()["is_sleeping"])
        except (ValueError, KeyError, TypeError) as exc:
            raise EngineCallFailed(f"unexpected /is_sleeping answer: {resp.text[:200]}") from exc

    @staticmethod
    def _check_engine_answer(runner: InstanceRunner, resp: httpx.Response, what: str) -> None:
        if resp.status_code == 404:
            raise SleepUnsupported(
                f"engine of {runner.instance.id} has no /{what} endpoint "
                "(started without sleep mode or VLLM_SERVER_DEV_MODE=1)"
            )
        if resp.status_code >= 400:
            raise EngineCallFailed(
                f"engine answered {resp.status_code} to /{what}: {resp.text[:300]}"
            )

    # --- vLLM housekeeping -------------------------------------------------------------
    async def _check_host_memory(self, req: LoadRequest, extra_args: list[str]) -> int:
        """Refuse (409 ``insufficient_host_memory``) a CPU-mode load that cannot fit in RAM.

        Returns the estimate to hold for the instance while it starts; ``force`` skips the
        refusal but the estimate is still booked, so later loads see it.
        """
        estimate, available = await asyncio.to_thread(
            lambda: (
                hostmem.estimate_cpu_engine(self.settings, req.model_path.strip(), extra_args),
                hostmem.available_bytes(),
            )
        )
        if not req.force:
            self.host_memory.check(estimate, available)
        return estimate.total

    def _remove_engine_tmp(self, instance_id: str) -> None:
        """Delete the engine's private TMPDIR (``vllm_dist_*``, ZMQ sockets) in the background.

        Called once the engine's processes are gone; the task is tracked so a shutdown waits
        for it.
        """
        path = engine_tmp_dir(self.instances_dir / instance_id, instance_id)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            shutil.rmtree(path, ignore_errors=True)
            return
        task = loop.create_task(asyncio.to_thread(shutil.rmtree, path, True))
        self._ops.add(task)
        task.add_done_callback(self._ops.discard)

    # --- helpers -------------------------------------------------------------------
    def _new_runner(self, inst: ModelInstance) -> InstanceRunner:
        return InstanceRunner(
            inst,
            self.settings,
            self.bus,
            self._save,
            self._client(),
            on_active=self._measure_baseline,
            on_ended=self._unbook,
            ports=self._ports,
        )

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            raise RuntimeError("Supervisor.start() has not run")
        return self._http

    async def _save(self, runner: InstanceRunner) -> None:
        await self.repo.save(runner.instance, runner.create_time)


def find_strays(data_dir: Path, known_ids: set[str]) -> list[int]:
    """Process groups of engines started for ``data_dir`` that no live instance owns.

    Groups, not PIDs: the API server may be dead with its EngineCore orphaned
    in the group. Blocking (walks /proc): call it in a worker thread.
    """
    ours = str(data_dir.resolve())
    groups: set[int] = set()
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error, OSError):
            env = proc.environ()
            if env.get(ENV_DATA_DIR) != ours or env.get(ENV_INSTANCE_ID) in known_ids:
                continue
            groups.add(os.getpgid(proc.pid))
    groups.discard(os.getpgid(0))  # never our own group
    return sorted(groups)
