"""The supervisor: desired state (the registry) reconciled with running engines.

One ``InstanceRunner`` (``runtime/runner.py``) per instance owns its engine
process: it spawns it, tails its log, decides when it is ready, watches its
health, and ends it. The ``Supervisor`` owns the runners, the port range and
the registry, and is the only way the API changes an instance.

It knows engines only through ``EngineAdapter`` hooks (``engines.get_adapter``: argument
checks, footprint, device, sleep/wake calls) and memory only through the
``MemoryLedger`` (``memory/ledger.py``): every load and wake-up is admitted by the
ledger, which holds what it granted until the supervisor reports the engine active,
stopping or gone. No branch here depends on the engine kind or the GPU inventory.

Crash safety comes from three choices: engines run in their own session with
output to a file, so they outlive the controller; every instance is written
to the registry *before* its process is spawned and again with its PID and
start time right after; and on start-up the supervisor re-adopts what is
alive, fails what is dead, and kills any engine of this data dir that the
registry cannot account for. Engines are told by the mark in their environment
(runtime/marker.py), and no engine outlives its instance: a stop kills every
process carrying the instance's mark before the instance is forgotten, an unload
waits for a spawn under way, and a periodic sweep kills any marked process no
listed instance owns (docs/operations.md, "No engine without its record").
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import httpx

from sardeenz import proctree
from sardeenz.config import Settings
from sardeenz.domain import EngineKind, InstanceStatus, LoadRequest, ModelInstance, utcnow
from sardeenz.engines import get_adapter
from sardeenz.engines.base import (
    EngineAdapter,
    EngineTarget,
    InstallProbe,
    LaunchContext,
    engine_tmp_dir,
)
from sardeenz.engines.logparse import extract_error
from sardeenz.errors import (
    Conflict,
    InvalidRequest,
    NotFound,
    SardeenzError,
    is_storage_full,
    log_write_failure,
    storage_full,
)
from sardeenz.events import EventBus, RemovedEvent, StatusEvent
from sardeenz.gpu.selection import GB
from sardeenz.memory.ledger import Admission, MemoryLedger
from sardeenz.runtime.drain import NoTraffic, Traffic, drain_for_sleep, drain_for_unload
from sardeenz.runtime.marker import carries, engine_groups
from sardeenz.runtime.names import check_load_names
from sardeenz.runtime.ports import PortAllocator, prepare_lock_dir
from sardeenz.runtime.runner import (
    ERROR_TAIL_LINES,
    EngineCallFailed,
    InstanceRunner,
)
from sardeenz.store.instances import InstanceRepository
from sardeenz.tasks import stop_task
from sardeenz.tls import client_tls

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
        ledger: MemoryLedger,
        installs: InstallProbe,
        adapters: Callable[[EngineKind], EngineAdapter] = get_adapter,
        runner_class: type[InstanceRunner] = InstanceRunner,
        *,
        traffic: Traffic | None = None,
    ) -> None:
        self.settings = settings
        self.ledger = ledger
        self.installs = installs
        self.bus = bus
        self.repo = repo
        self._adapters = adapters
        self._runner_class = runner_class  # tests run the supervisor with in-process fakes
        self._runners: dict[str, InstanceRunner] = {}
        lock_dir = prepare_lock_dir(settings.port_lock_dir, must_own=settings.runtime_dir is None)
        self._ports = PortAllocator(settings.engine_port_range, settings.engine_host, lock_dir)
        self._http: httpx.AsyncClient | None = None
        self._ops: set[asyncio.Task[Any]] = set()
        self._sweeper: asyncio.Task[None] | None = None
        """The periodic ``sweep_strays`` (``engine_sweep_seconds``), ended at shutdown."""
        self._unremoved: set[str] = set()
        self._unsaved: set[str] = set()
        """Running instances whose last record write found the data dir full
        (``_record``)."""
        """Instances unloaded while their record could not be removed (a full data dir):
        removed by the next stop or load that can write, and at shutdown, so an unload
        answered 200 does not come back as a failed instance after a restart."""
        self.instances_dir = settings.data_dir / "instances"
        self.traffic: Traffic = traffic if traffic is not None else NoTraffic()
        """The proxy's side of a sleep or an unload (runtime/drain.py)."""
        self.after_wake: Callable[[ModelInstance], Awaitable[None]] | None = None
        """Run after an engine woke, before it is routed again (the catalog's warm-up
        request); see ``set_after_wake``. It must not raise: a failure is logged."""

    def set_after_wake(self, hook: Callable[[ModelInstance], Awaitable[None]]) -> None:
        """Install the post-wake hook (the catalog's warm-up, catalog/warmup.py).

        Late by necessity: the warm-up reads the catalog, and the catalog lists this
        supervisor's instances, so the supervisor is built before either. app.py
        calls this once, right after building the warm-up.
        """
        self.after_wake = hook

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
        self.instances_dir.mkdir(parents=True, exist_ok=True)
        self._http = httpx.AsyncClient(
            timeout=self.settings.health_timeout_seconds,
            limits=httpx.Limits(max_keepalive_connections=64),
            verify=client_tls(),
        )
        for stored in await self.repo.list_all():
            await self._restore(stored.instance, stored.process_create_time)
        await self.sweep_strays(grace=5.0)
        if self.settings.engine_sweep_seconds > 0:
            self._sweeper = asyncio.create_task(self._sweep_loop(), name="sardeenz-engine-sweep")

    async def sweep_strays(self, grace: float = 0.0) -> list[int]:
        """Kill every engine process of this data dir that no live instance owns; return
        the process groups killed.

        An instance owns its engine from before the spawn (it is listed first) until
        after the kill (it is forgotten last), so a marked process whose instance is not
        listed here, or is ``failed``, is an engine nobody will ever stop: at start-up,
        those the last run left (its records are restored first); afterwards, the net
        under every stop (issue 28: an engine outlived its unload and ran on, unlisted).
        """
        groups = await asyncio.to_thread(engine_groups, self.settings.data_dir)
        killed: list[int] = []
        for iid, pgids in sorted(groups.items()):
            runner = self._runners.get(iid)
            if runner is not None and runner.instance.status != InstanceStatus.FAILED:
                continue
            for pgid in sorted(pgids):
                log.warning(
                    "killing engine process group %d of instance %s: no instance here owns it",
                    pgid,
                    iid,
                )
                await asyncio.to_thread(proctree.terminate_group, pgid, [], grace)
                killed.append(pgid)
        return killed

    async def _sweep_loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.engine_sweep_seconds)
            try:
                await self.sweep_strays()
            except Exception:  # a /proc walk that failed: the next round tries again
                log.exception("sweeping engine processes failed")

    async def _restore(self, inst: ModelInstance, create_time: float | None) -> None:
        runner = self._new_runner(inst)
        runner.create_time = create_time
        self._runners[inst.id] = runner
        if inst.status == InstanceStatus.FAILED:
            runner.prime_from_file()
            self._remove_engine_tmp(inst.id)  # the controller may have died before it could
            return
        alive = await self._alive(inst, create_time)
        if inst.status == InstanceStatus.STOPPING:
            # We died mid-unload: finish it, whether or not the engine outlived us (its
            # orphans, if any, still get the grace). Failing it would ask for a second unload.
            await self._finish_stop(runner, grace=self.settings.stop_grace_seconds)
            return
        if alive and not proctree.is_alive(inst.process_id or 0, create_time):
            # Ours by its mark, though its start time moved with the wall clock: the time
            # of now is the one that tells this process apart from a later one.
            runner.create_time = create_time = proctree.create_time(inst.process_id or 0)
        if not alive:
            runner.prime_from_file()
            cause = extract_error(runner.buffer.lines(ERROR_TAIL_LINES))
            await runner.fail(
                "engine was gone when the controller restarted" + (f": {cause}" if cause else "")
            )
            return
        if not self._ports.reserve(inst.port):
            log.warning("instance %s: port %d is claimed by another server", inst.id, inst.port)
        self.ledger.adopt(inst, create_time)
        if not await runner.verify_adopted():  # its port may be someone else's by now
            runner.prime_from_file()
            return
        if not await self._wake_if_asleep(runner):
            runner.prime_from_file()
            return
        if inst.status == InstanceStatus.SLEEPING:
            await self._sync_memory(runner)
        offset = runner.prime_from_file()
        log.info("re-adopted instance %s (pid %s, port %d)", inst.id, inst.process_id, inst.port)
        runner.start(offset=offset)

    async def _wake_if_asleep(self, runner: InstanceRunner) -> bool:
        """An engine recorded ``active`` that is asleep: wake it, or fail the instance.

        A sleep records ``sleeping`` only after the engine answered that it sleeps, so
        a controller killed in between leaves an ``active`` record over a sleeping
        engine. Routed as active, it would queue every request until the client gave
        up (issue 28: a catalog model hung for minutes after its pod was killed during
        an idle sleep, and stayed the one copy the cluster kept). The record wins: the
        ledger re-adopted it holding its full memory, so waking it needs no admission.
        False: the instance failed (an engine that will not wake must not be routed).
        """
        inst = runner.instance
        adapter = self._adapters(inst.engine)
        if inst.status != InstanceStatus.ACTIVE or not inst.sleep_mode_enabled:
            return True
        if adapter.sleep_refusal(inst) is not None:
            return True
        try:  # bounded: a stopped engine must not hold up the controller's start
            async with asyncio.timeout(self.settings.health_timeout_seconds):
                asleep = await self._is_sleeping(runner, adapter)
        except (TimeoutError, SardeenzError) as exc:
            log.warning("instance %s: cannot tell whether its engine sleeps: %s", inst.id, exc)
            return True
        if not asleep:
            return True
        log.warning(
            "instance %s: recorded active but its engine is asleep (the controller ended "
            "during a sleep): waking it",
            inst.id,
        )
        try:
            resp = await adapter.wake(runner.engine_call)
            self._check_engine_answer(runner, resp, "wake_up")
            if await self._is_sleeping(runner, adapter):
                raise EngineCallFailed(f"engine of {inst.id} still reports sleeping")
        except SardeenzError as exc:
            await runner.fail(f"engine was asleep when the controller restarted: {exc.message}")
            return False
        return True

    async def _alive(self, inst: ModelInstance, create_time: float | None) -> bool:
        """Whether the engine of a record still runs: its PID with the recorded start
        time, or (that time moved with the wall clock) its PID carrying its mark."""
        pid = inst.process_id
        if pid is None:
            return False
        if proctree.is_alive(pid, create_time):
            return True
        return await asyncio.to_thread(carries, pid, self.settings.data_dir, inst.id)

    # --- load --------------------------------------------------------------------
    async def load(self, req: LoadRequest, *, on_demand: bool = False) -> ModelInstance:
        """Admit (the ledger), record, spawn: the instance answers ``starting``.

        ``on_demand``: a catalog model's start on a request (catalog/demand.py), kept on
        the instance so surplus copies can be told from an operator's loads."""
        model_path = check_load_names(req)
        engine = req.engine or EngineKind(self.settings.effective_default_engine)
        adapter = self._adapters(engine)
        try:
            extra_args = adapter.validate_args(list(req.extra_args))
        except ValueError as exc:
            raise InvalidRequest(str(exc), code="invalid_extra_args") from exc
        target = await adapter.target(self.installs)
        instance_id = uuid.uuid4().hex[:12]
        grant = await self._admit(instance_id, req, target, extra_args, adapter)
        warnings = list(grant.warnings)
        if req.enable_sleep_mode and target.no_sleep_reason:
            warnings.append(target.no_sleep_reason)
        extra_args = [*extra_args, *grant.backend_args]
        try:
            port = await self._ports.allocate_async()
        except BaseException:
            self.ledger.release(instance_id)
            raise
        instance_dir = self.instances_dir / instance_id
        served = req.served_model_name or model_path
        inst = ModelInstance(
            id=instance_id,
            model_path=model_path,
            served_model_name=served,
            display_name=req.display_name or served,
            engine=engine,
            status=InstanceStatus.STARTING,
            load_phase="spawned",
            port=port,
            gpu_memory_limit=req.gpu_memory_limit,
            gpu_ids=grant.gpu_ids,
            tensor_parallel_size=req.tensor_parallel_size,
            kvcached_enabled=grant.kvcached_ipc_name is not None,
            kvcached_ipc_name=grant.kvcached_ipc_name,
            gpu_memory_utilization=grant.gpu_memory_utilization,
            reserved_bytes_per_gpu=grant.reserved_bytes_per_gpu,
            warnings=warnings,
            sleep_mode_enabled=req.enable_sleep_mode and target.no_sleep_reason is None,
            on_demand=on_demand,
            extra_args=extra_args,
            log_file=str(instance_dir / "engine.log"),
            simulated=adapter.simulated,
            engine_device=target.device,
        )
        runner = self._new_runner(inst)
        runner.launched.clear()
        self._runners[instance_id] = runner
        try:
            return await self._launch(runner, adapter, target)
        finally:
            runner.launched.set()

    async def _launch(
        self, runner: InstanceRunner, adapter: EngineAdapter, target: EngineTarget
    ) -> ModelInstance:
        """Record, then spawn, the engine of a new instance (``load``)."""
        inst = runner.instance
        instance_id, port = inst.id, inst.port
        instance_dir = self.instances_dir / instance_id
        tmp_dir = engine_tmp_dir(instance_dir, instance_id) if target.own_tmpdir else None
        ctx = LaunchContext(
            host=self.settings.engine_host,
            port=port,
            gpu_ids=inst.gpu_ids,
            gpu_memory_utilization=inst.gpu_memory_utilization,
            kvcached_ipc_name=inst.kvcached_ipc_name,
            instance_dir=str(instance_dir),
            settings=self.settings,
            tmp_dir=str(tmp_dir) if tmp_dir is not None else None,
            vllm=target.install,
        )
        instance_dir.mkdir(parents=True, exist_ok=True)
        if tmp_dir is not None:
            tmp_dir.mkdir(parents=True, exist_ok=True)
        # Registry first, then the process: a crash in between leaves a record
        # (failed at restart) rather than an engine nobody knows about.
        await self._catch_up()
        try:
            await self._save(runner)
        except BaseException as exc:
            # Not recorded (a full disk: 507 insufficient_storage): nothing may stay of
            # it, neither a listed instance nor its memory grant nor its port.
            del self._runners[instance_id]
            self.ledger.release(instance_id)
            self._ports.release(port)
            if is_storage_full(exc):
                # A refusal like any other: the API's 507 and, for a start on demand,
                # the proxy's 503 model_start_failed with this cause.
                raise storage_full(exc) from exc
            raise
        self.bus.publish(StatusEvent(runner.snapshot(), None))
        try:
            await runner.spawn(adapter, ctx)
        except (OSError, ValueError) as exc:
            await runner.fail(f"cannot start engine: {exc}")
            self._ports.release(port)
            return runner.snapshot()
        self.ledger.commit(instance_id, runner.pid, runner.create_time)
        await self._record(runner)
        runner.start()
        log.info(
            "loading %s as %s on port %d (pid %s)", inst.model_path, instance_id, port, runner.pid
        )
        return runner.snapshot()

    async def _admit(
        self,
        instance_id: str,
        req: LoadRequest,
        target: EngineTarget,
        extra_args: list[str],
        adapter: EngineAdapter,
    ) -> Admission:
        """The ledger's grant; or the target's refusal when the engine cannot run here.

        An engine that cannot start is refused after the ledger has checked the request
        (a 400 for a bad request still says what is wrong with it) but before its memory
        verdict, which judges a device that was only guessed.
        """
        footprint = adapter.default_footprint_bytes(extra_args)
        if target.refusal is None:
            return await self.ledger.admit_load(instance_id, req, target, extra_args, footprint)
        try:
            await self.ledger.admit_load(instance_id, req, target, extra_args, footprint)
        except InvalidRequest:
            raise
        except SardeenzError:
            pass
        self.ledger.release(instance_id)
        raise target.refusal

    # --- unload ------------------------------------------------------------------
    async def unload(self, instance_id: str) -> ModelInstance:
        runner = self._runner(instance_id)
        if runner.stopping or runner.instance.status == InstanceStatus.STOPPING:
            raise Conflict(f"instance {instance_id} is already stopping", code="instance_stopping")
        runner.stopping = True
        self.ledger.stopping(instance_id)
        # The stop runs as a task of ours: a client that hangs up mid-unload
        # must not leave an engine half stopped.
        task = asyncio.create_task(self._stop(runner))
        self._ops.add(task)
        task.add_done_callback(self._ops.discard)
        return await asyncio.shield(task)

    async def _stop(self, runner: InstanceRunner) -> ModelInstance:
        """Unroute, drain (up to the stop grace), cut what is left, then end the engine.

        The route goes first (synchronously, runtime/drain.py), so no new request
        reaches an engine that is about to stop; its requests in flight get the grace
        to finish, and those cut get ``model_unloaded``, not ``engine_failed``.
        """
        inst = runner.instance
        runner.stopping = True
        self.ledger.stopping(inst.id)
        self.traffic.hold(inst.id, InstanceStatus.STOPPING)
        # An instance listed but still being spawned (a new leader retiring the target a
        # dead one started, the surplus reduction): its engine must exist before it can
        # be ended, or it would start after the kill and run on, forgotten (issue 28).
        await runner.launched.wait()
        if self._runners.get(inst.id) is not runner:  # never recorded (``_launch``)
            return runner.snapshot()
        await runner.cancel()
        serving = inst.status in (InstanceStatus.ACTIVE, InstanceStatus.SLEEPING)
        if inst.status != InstanceStatus.FAILED:
            try:
                await runner.set_status(InstanceStatus.STOPPING)
            except Exception as exc:
                # A stop must stop, even with the data dir full (or a shutdown would
                # leave the engine running): the status is set and published; only its
                # record lags (the next start resolves it, docs/operations.md).
                log_write_failure(log, exc, f"instance {inst.id}: recording its stop failed")
        grace = self.settings.stop_grace_seconds
        if serving:
            cut = await drain_for_unload(self.traffic, inst.id, grace)
            if cut:
                log.warning(
                    "instance %s: cut %d request(s) still running after %g s", inst.id, cut, grace
                )
        return await self._finish_stop(runner, grace=grace)

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
        self._unremoved.add(runner.instance.id)
        await self._catch_up()
        snap = runner.snapshot()
        self.traffic.forget(runner.instance.id)
        self.bus.publish(RemovedEvent(snap))
        log.info("unloaded instance %s", runner.instance.id)
        return snap

    async def _catch_up(self) -> None:
        """Write what a full data dir held back: records of running instances
        (``_unsaved``), then removals of ended ones (``_unremoved``)."""
        for instance_id in sorted(self._unsaved):
            runner = self._runners.get(instance_id)
            if runner is None:
                self._unsaved.discard(instance_id)
                continue
            try:
                await self._save(runner)
            except Exception as exc:
                log_write_failure(log, exc, f"instance {instance_id}: record kept to retry")
                return
            self._unsaved.discard(instance_id)
        for instance_id in sorted(self._unremoved):
            try:
                await self.repo.delete(instance_id)
            except Exception as exc:  # the engine is gone; only its record stays (see _stop)
                log_write_failure(
                    log, exc, f"instance {instance_id}: removing its record failed, kept to retry"
                )
                return
            self._unremoved.discard(instance_id)

    # --- shutdown ----------------------------------------------------------------
    async def shutdown(self) -> None:
        """Graceful stop of the controller: every engine is stopped, none left behind."""
        await self._stop_sweeper()
        runners = list(self._runners.values())
        results = await asyncio.gather(*(self._stop(r) for r in runners), return_exceptions=True)
        for r, res in zip(runners, results, strict=True):
            if isinstance(res, BaseException):
                log.error("stopping %s failed: %s", r.instance.id, res)
        if self._ops:
            await asyncio.gather(*self._ops, return_exceptions=True)
        await self._catch_up()
        await self.installs.close()
        if self._http is not None:
            await self._http.aclose()

    async def detach(self) -> None:
        """Stop watching without touching the engines (tests of crash recovery)."""
        await self._stop_sweeper()
        for r in list(self._runners.values()):
            await r.cancel()
        await self.installs.close()
        if self._http is not None:
            await self._http.aclose()

    async def _stop_sweeper(self) -> None:
        if self._sweeper is not None:
            await stop_task(self._sweeper)
            self._sweeper = None

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

    # --- memory held ---------------------------------------------------------------------
    def _unbook(self, runner: InstanceRunner) -> None:
        """The engine is gone: the ledger gets its memory back, its TMPDIR goes."""
        self.ledger.release(runner.instance.id)
        self._remove_engine_tmp(runner.instance.id)

    async def _measure_baseline(self, runner: InstanceRunner) -> None:
        inst = runner.instance
        baseline = await self.ledger.settle(inst.id, runner.pid)
        if baseline is not None:
            inst.memory_baseline_bytes_by_gpu = dict(baseline)
            inst.memory_baseline_by_gpu = {i: round(b / GB, 3) for i, b in baseline.items()}

    async def _sync_memory(self, runner: InstanceRunner) -> None:
        """Tell the ledger what a sleeping engine holds, when only the engine can say."""
        adapter = self._adapters(runner.instance.engine)
        try:
            held = await adapter.held_after_sleep(runner.engine_call)
        except (EngineCallFailed, ValueError, KeyError, TypeError) as exc:
            log.warning("instance %s: memory held after sleep unknown: %s", runner.instance.id, exc)
            return
        if held is not None:
            self.ledger.note_usage(runner.instance.id, held)

    # --- sleep / wake ------------------------------------------------------------------
    async def sleep(self, instance_id: str, level: int, force: bool = False) -> ModelInstance:
        """Sleep an instance once its requests in flight are done (runtime/drain.py).

        It is unrouted first (held as ``sleeping``: new requests wait and wake it
        afterwards), so no request reaches an engine that is falling asleep.
        """
        runner = self._runner(instance_id)
        inst = runner.instance
        adapter = self._adapters(inst.engine)
        refusal = adapter.sleep_refusal(inst)
        if refusal is not None:
            raise SleepUnsupported(refusal)
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
            runner.falling_asleep = True
            self.traffic.hold(inst.id, InstanceStatus.SLEEPING)
            try:
                cut = await drain_for_sleep(
                    self.traffic, inst.id, self.settings.sleep_drain_seconds, force
                )
                if cut:
                    log.warning("instance %s: sleep cut %d request(s) in flight", inst.id, cut)
                await self._ask_to_sleep(runner, adapter, level)
                if not await self._is_sleeping(runner, adapter):
                    raise EngineCallFailed(f"engine of {instance_id} did not report sleeping")
                inst.sleep_level = level
                inst.slept_at = utcnow()
                self.ledger.slept(inst, level)
                await self._sync_memory(runner)
                await runner.set_status(InstanceStatus.SLEEPING)
            finally:
                runner.falling_asleep = False
                if not runner.stopping:  # an unload holds it as stopping now
                    self.traffic.release(runner.snapshot())
            return runner.snapshot()

    async def wake(self, instance_id: str) -> ModelInstance:
        """Wake an instance; concurrent callers share one wake-up (single flight)."""
        runner = self._runner(instance_id)
        if runner.instance.status == InstanceStatus.ACTIVE and not runner.falling_asleep:
            return runner.snapshot()
        if runner.wake_task is None or runner.wake_task.done():
            runner.wake_task = asyncio.create_task(self._wake(runner))
            self._ops.add(runner.wake_task)
            runner.wake_task.add_done_callback(self._ops.discard)
        return await asyncio.shield(runner.wake_task)

    async def _wake(self, runner: InstanceRunner) -> ModelInstance:
        inst = runner.instance
        adapter = self._adapters(inst.engine)
        async with runner.sleep_lock:
            if inst.status == InstanceStatus.ACTIVE:
                return runner.snapshot()
            if inst.status != InstanceStatus.SLEEPING:
                raise InvalidState(f"instance {inst.id} is {inst.status.value}, not sleeping")
            # The ledger takes the memory back first: if another model took it
            # meanwhile, refuse instead of letting the engine run out of memory.
            await self.ledger.admit_wake(inst)
            woke = False
            try:
                resp = await adapter.wake(runner.engine_call)
                self._check_engine_answer(runner, resp, "wake_up")
                if await self._is_sleeping(runner, adapter):
                    raise EngineCallFailed(f"engine of {inst.id} still reports sleeping")
                woke = True
            finally:
                self.ledger.wake_done(inst.id, woke=woke)
            inst.sleep_level = None
            inst.slept_at = None
            if self.after_wake is not None:  # still unrouted: held traffic waits for it
                try:
                    await self.after_wake(runner.snapshot())
                except Exception:  # the engine is awake: serve it even if this failed
                    log.exception("instance %s: after-wake hook failed", inst.id)
            await runner.set_status(InstanceStatus.ACTIVE)
            return runner.snapshot()

    async def _ask_to_sleep(
        self, runner: InstanceRunner, adapter: EngineAdapter, level: int
    ) -> None:
        """``POST /sleep``; an answer lost on the way (a timeout, a reset) is no refusal.

        The engine may have fallen asleep all the same, and a record left ``active``
        would route requests to an engine that queues them until someone wakes it. So
        the engine is asked: asleep, the sleep stands; awake (or silent), it failed.
        """
        try:
            resp = await adapter.sleep(runner.engine_call, level)
        except EngineCallFailed as lost:
            try:
                asleep = await self._is_sleeping(runner, adapter)
            except EngineCallFailed:
                raise lost from None
            if not asleep:
                raise
            log.warning(
                "instance %s: the engine's answer to /sleep was lost (%s); it reports "
                "sleeping, so the sleep stands",
                runner.instance.id,
                lost,
            )
            return
        self._check_engine_answer(runner, resp, "sleep")

    async def _is_sleeping(self, runner: InstanceRunner, adapter: EngineAdapter) -> bool:
        resp = await adapter.is_sleeping(runner.engine_call)
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

    # --- housekeeping ------------------------------------------------------------------
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
        return self._runner_class(
            inst,
            self.settings,
            self.bus,
            self._record,
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

    async def _record(self, runner: InstanceRunner) -> None:
        """Write a running instance's record (its status changes, its PID after spawn).

        The engine runs whether or not this lands: with the data dir full the record
        lags (one line logged) and ``_catch_up`` writes it on the next write that
        succeeds, instead of an engine that became active being failed and killed for
        want of disk. Any other error is raised as before.
        """
        try:
            await self._save(runner)
        except Exception as exc:
            if not is_storage_full(exc):
                raise
            log_write_failure(log, exc, f"instance {runner.instance.id}: record kept to retry")
            self._unsaved.add(runner.instance.id)
            return
        self._unsaved.discard(runner.instance.id)
