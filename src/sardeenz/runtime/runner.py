"""One engine process: spawn, log tail, readiness, health monitor, stop.

An ``InstanceRunner`` knows nothing about which engine it runs: the adapter
gave it an argv and an environment. It owns the process from spawn to reap,
feeds the engine's log through the vLLM log parser (the simulated engine
writes vLLM-format lines on purpose), decides readiness (the readiness line
or ``/health`` 200, whichever first), counts failed health checks and ends
the whole process tree. The supervisor decides *what* runs; the runner makes
one engine run.

Ready is not yet ``active``: the runner then checks the engine's identity (its port
is listened on by its own process tree only, and ``/v1/models`` lists its served
name; see ``runtime/identity.py``). An engine whose port turns out taken or shared
by another process, or that cannot bind it, is restarted on another claimed port,
at most ``port_retries`` times, each noted in its log and in the instance's
``warnings``: never routed to the wrong engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
from collections import deque
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import psutil

from sardeenz import proctree
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, ModelInstance, utcnow
from sardeenz.engines.base import EngineAdapter, LaunchContext
from sardeenz.engines.logparse import VllmLogParser, extract_error
from sardeenz.errors import SardeenzError
from sardeenz.events import EventBus, LogEvent, PhaseEvent, StatusEvent
from sardeenz.runtime import identity
from sardeenz.runtime.logs import LogBuffer, LogTailer, read_tail_lines
from sardeenz.runtime.marker import (
    ENV_DATA_DIR,
    ENV_INSTANCE_ID,
    data_dir_mark,
    instance_groups,
    instance_of,
)
from sardeenz.runtime.ports import PortAllocator, port_is_free
from sardeenz.tasks import await_within

log = logging.getLogger(__name__)


# Secrets of the controller never reach an engine's environment.
SECRET_ENV = (
    "CLUSTER_SECRET",
    "CLUSTER_SECRET_PREVIOUS",
    "SARDEENZ_JWT_SECRET",
    "SARDEENZ_API_KEYS",
    "SARDEENZ_OPENSHIFT_OAUTH_CLIENT_SECRET",
)
ERROR_TAIL_LINES = 500
ENGINE_CALL_TIMEOUT = 120.0  # sleep/wake move weights between GPU and CPU: can take a while


class EngineCallFailed(SardeenzError):
    status = 502
    code = "engine_error"


class PortTaken(Exception):
    """The engine's port is (also) served by another process, or the engine could not
    bind it: the reason, for the log and the instance's warnings."""


class InstanceRunner:
    """Owns one engine: its process, log, readiness and health."""

    def __init__(
        self,
        instance: ModelInstance,
        settings: Settings,
        bus: EventBus,
        persist: Callable[[InstanceRunner], Coroutine[Any, Any, None]],
        http: httpx.AsyncClient,
        on_active: Callable[[InstanceRunner], Coroutine[Any, Any, None]] | None = None,
        on_ended: Callable[[InstanceRunner], None] | None = None,
        ports: PortAllocator | None = None,
    ) -> None:
        self.instance = instance
        self.settings = settings
        self.bus = bus
        self._persist = persist
        self._http = http
        self.buffer = LogBuffer(settings.log_buffer_lines)
        self.parser = VllmLogParser()
        self.proc: asyncio.subprocess.Process | None = None
        self.pid: int | None = instance.process_id
        self.create_time: float | None = None
        self.exit_code: int | None = None
        self._changed = asyncio.Event()
        self._exited = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._log_path = Path(instance.log_file) if instance.log_file else None
        self.tailer: LogTailer | None = None
        self.stopping = False
        self._on_active = on_active
        self._on_ended = on_ended
        self.sleep_lock = asyncio.Lock()
        self.falling_asleep = False
        """A sleep is draining or under way: a wake-up must wait for it, not skip."""
        self.wake_task: asyncio.Task[ModelInstance] | None = None
        self.launched = asyncio.Event()
        """Set once the engine's spawn is over (spawned, or failed to): an unload waits
        for it, so it never ends an instance whose engine is still being started (that
        engine would start after the kill and run on, forgotten). Set from the start for
        an engine re-adopted after a restart; ``Supervisor.load`` clears it."""
        self.launched.set()
        # Restarting on another port needs what the first spawn got; an adopted
        # engine has neither, so it fails instead.
        self._ports = ports
        self._adapter: EngineAdapter | None = None
        self._ctx: LaunchContext | None = None
        self._watch: asyncio.Task[None] | None = None
        self._ready_deadline = 0.0
        self._port_restarts = 0
        self._tried_ports: set[int] = set()
        self._attempt_lines: deque[str] = deque(maxlen=ERROR_TAIL_LINES)

    # --- log ---------------------------------------------------------------
    def _on_line(self, line: str) -> None:
        self.buffer.append(line)
        self._attempt_lines.append(line)
        was_ready = self.parser.ready
        self.parser.feed(line)
        self.bus.publish(LogEvent(self.instance.id, line))
        if self.parser.ready and not was_ready:
            self._changed.set()
        self._note_phase()

    def _note_phase(self) -> None:
        """A starting engine's log opened a new load phase: publish it with the instance.

        Only published, not saved: the record is written at the next status change, and a
        restarted controller reads the phase from the log again.
        """
        inst = self.instance
        phase = self.parser.load_phase
        if inst.status != InstanceStatus.STARTING or phase is None or phase == inst.load_phase:
            return
        inst.load_phase = phase
        self.bus.publish(PhaseEvent(self.snapshot()))

    def prime_from_file(self) -> int:
        """Load the existing log (after a controller restart) without re-publishing it."""
        if self._log_path is None:
            return 0
        for line in read_tail_lines(self._log_path, 4 * 1024 * 1024):
            self.buffer.append(line)
            self.parser.feed(line)
        if self.instance.status == InstanceStatus.STARTING:
            self.instance.load_phase = self.parser.load_phase or "spawned"
        try:
            return self._log_path.stat().st_size
        except OSError:
            return 0

    # --- lifecycle -----------------------------------------------------------
    async def spawn(self, adapter: EngineAdapter, ctx: LaunchContext) -> None:
        """Start the engine; ``ValueError``/``OSError`` when it cannot start (the caller
        marks the instance failed with the reason)."""
        self._adapter, self._ctx = adapter, ctx
        refusal = await asyncio.to_thread(adapter.start_refusal, self.instance)
        if refusal is not None:
            raise ValueError(refusal)
        spec = adapter.build_launch(self.instance, ctx)
        env = {k: v for k, v in os.environ.items() if k not in SECRET_ENV}
        env.update(spec.env)
        # vLLM 0.11/0.14 colour their process tags even into files unless told not to.
        env.setdefault("NO_COLOR", "1")
        env[ENV_INSTANCE_ID] = self.instance.id
        env[ENV_DATA_DIR] = data_dir_mark(self.settings.data_dir)
        assert self._log_path is not None
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        with self._log_path.open("ab") as logf:
            self.proc = await asyncio.create_subprocess_exec(
                *spec.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=logf,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                cwd=ctx.instance_dir,
                start_new_session=True,
            )
        self.pid = self.proc.pid
        self.create_time = proctree.create_time(self.pid)
        self.instance.process_id = self.pid
        new_warnings = [w for w in spec.warnings if w not in self.instance.warnings]
        self.instance.warnings = [*self.instance.warnings, *new_warnings]

    def start(self, offset: int = 0) -> None:
        assert self._log_path is not None
        self.tailer = LogTailer(self._log_path, self._on_line, offset=offset)
        self.tailer.fast = self.instance.status == InstanceStatus.STARTING
        self._task = asyncio.create_task(self._supervise(), name=f"supervise-{self.instance.id}")

    async def _supervise(self) -> None:
        assert self.tailer is not None
        tail = asyncio.create_task(self.tailer.run(), name=f"tail-{self.instance.id}")
        self._watch = asyncio.create_task(self._watch_exit(), name=f"exit-{self.instance.id}")
        try:
            if self.instance.status == InstanceStatus.STARTING and not await self._start_verified():
                return
            if self.instance.status == InstanceStatus.STARTING:
                await self._become_active()
            await self._monitor()
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a bug here must not leave an engine unwatched
            log.exception("supervision of %s crashed", self.instance.id)
            await self.fail(f"supervisor error: {exc}")
        finally:
            tasks = [tail, *([self._watch] if self._watch is not None else [])]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _watch_exit(self) -> None:
        if self.proc is not None:
            self.exit_code = await self.proc.wait()
        elif self.pid is not None:
            await proctree.wait_foreign_exit(self.pid, self.create_time)
        self._exited.set()
        self._changed.set()

    async def _health_ok(self) -> tuple[bool, str]:
        url = f"http://{self.settings.engine_host}:{self.instance.port}/health"
        try:
            resp = await self._http.get(url)
        except httpx.HTTPError as exc:
            return False, f"{type(exc).__name__} on GET /health"
        if resp.status_code == 200:
            return True, ""
        return False, f"GET /health answered {resp.status_code}"

    async def _await_ready(self) -> bool:
        """Ready = readiness log line or /health 200, whichever comes first.

        Raises ``PortTaken`` when another process listens on the port meanwhile, or the
        engine died of its port being held."""
        loop = asyncio.get_running_loop()
        deadline = self._ready_deadline = loop.time() + self.settings.ready_timeout_seconds
        next_health = loop.time()
        while True:
            if self.parser.ready:
                return True
            if self._exited.is_set():
                await self._raise_if_port_taken()
                await self._fail_from_log("engine exited before it was ready")
                return False
            now = loop.time()
            if now >= next_health:
                # A listener of another process on our port while we load: move now rather
                # than after a load that may take minutes (vLLM binds with SO_REUSEPORT).
                owner = await asyncio.to_thread(
                    identity.engine_port_ownership, self.instance.port, self.pid
                )
                if owner.foreign:
                    raise PortTaken(owner.describe_foreign())
                ok, _ = await self._health_ok()
                if ok:
                    return True
                next_health = loop.time() + self.settings.health_interval_seconds
            if now >= deadline:
                await self.fail(
                    f"engine not ready after {self.settings.ready_timeout_seconds:g} s "
                    "(no readiness line, /health never answered 200)"
                )
                return False
            self._changed.clear()
            timeout = max(0.0, min(next_health, deadline) - loop.time())
            with contextlib.suppress(TimeoutError):
                await await_within(self._changed.wait(), timeout)

    # --- identity: the port is served by this engine alone ---------------------------
    async def _start_verified(self) -> bool:
        """Ready and identified, restarting on another port while the port is taken."""
        while True:
            try:
                return await self._await_ready() and await self._verify_identity()
            except PortTaken as taken:
                if not await self._restart_elsewhere(str(taken)):
                    return False

    async def _identify(self) -> identity.Verdict:
        # An exited engine owns nothing (and its PID may already be someone else's).
        pid = None if self._exited.is_set() else self.pid
        inst = self.instance
        return await identity.identify(
            self._http, self.settings.engine_host, inst.port, pid, inst.served_model_name
        )

    async def _raise_if_port_taken(self) -> None:
        """After the engine exited: was it the port? (a listener of another process, or
        the engine's own ``Address already in use``)."""
        owner = await asyncio.to_thread(identity.engine_port_ownership, self.instance.port, None)
        if owner.foreign:
            raise PortTaken(owner.describe_foreign())
        if self.tailer is not None:
            self.tailer.poll()
            self.tailer.flush_partial()
        port = self.instance.port
        if any("address already in use" in line.lower() for line in self._attempt_lines) and (
            # Still held (an engine loading there binds without listening)? Else the clash
            # was about some other port of the engine, which another port cannot cure.
            not await asyncio.to_thread(port_is_free, self.settings.engine_host, port)
        ):
            raise PortTaken(f"the engine could not use port {port}: Address already in use")

    async def _verify_identity(self) -> bool:
        """Ready is not enough: every listener on the port must be the engine's own and
        ``/v1/models`` must list its served name (a 200 may come from another server)."""
        loop = asyncio.get_running_loop()
        delay = 0.02
        while True:
            if self._exited.is_set():
                await self._raise_if_port_taken()
                await self._fail_from_log("engine exited before it was ready")
                return False
            verdict = await self._identify()
            if verdict.conflict:
                raise PortTaken(verdict.conflict)
            if verdict.wrong_engine:
                await self.fail(verdict.wrong_engine)
                return False
            if verdict.confirmed:
                return True
            if loop.time() >= self._ready_deadline:  # ready, yet not listening on its port
                await self.fail(
                    f"engine ready but not serving its port {self.instance.port} after "
                    f"{self.settings.ready_timeout_seconds:g} s"
                )
                return False
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                await await_within(self._changed.wait(), delay)
            delay = min(delay * 2, self.settings.health_interval_seconds)

    async def verify_adopted(self) -> bool:
        """After a controller restart: keep an engine only if its port is still its own.

        A foreign listener, or no listener of its own for an engine that was serving,
        fails the instance instead of letting it be routed. An engine still loading is
        checked when it becomes ready.
        """
        inst = self.instance
        verdict = await self._identify()
        problem = verdict.conflict or verdict.wrong_engine
        if problem is None and inst.status != InstanceStatus.STARTING and not verdict.ownership.own:
            problem = f"port {inst.port} has no listener of the engine (pid {self.pid})"
        if problem is None:
            return True
        await self.fail(f"{problem}: not re-adopted after the controller restart")
        return False

    async def _restart_elsewhere(self, reason: str) -> bool:
        """Stop this attempt and start the engine again on another claimed port."""
        inst = self.instance
        self._tried_ports.add(inst.port)
        limit = self.settings.port_retries
        if self._ports is None or self._adapter is None or self._ctx is None:
            await self.fail(f"{reason} (an adopted engine cannot be restarted elsewhere)")
            return False
        if self._port_restarts >= limit:
            tried = ", ".join(str(p) for p in sorted(self._tried_ports))
            await self.fail(f"{reason}; gave up after {limit} port restart(s) (ports {tried})")
            return False
        await self.kill_tree(grace=0.0)
        if self._watch is not None:
            self._watch.cancel()
            await asyncio.gather(self._watch, return_exceptions=True)
        try:
            new = await self._ports.allocate_async(self._tried_ports)
        except SardeenzError as exc:  # range exhausted, or the claim failed
            await self.fail(f"{reason}; no other port to restart on: {exc.message}")
            return False
        old, inst.port = inst.port, new
        self._ports.release(old)
        self._port_restarts += 1
        note = f"{reason}: restarted the engine on port {new}"
        inst.warnings = [*inst.warnings, note]
        log.warning(
            "instance %s: %s (port restart %d of %d)", inst.id, note, self._port_restarts, limit
        )
        if self.tailer is not None:  # what the old engine wrote, before the new one starts
            self.tailer.poll()
            self.tailer.flush_partial()
        if self._log_path is not None:
            line = f"[sardeenz] {note} (port restart {self._port_restarts} of {limit})\n"
            await asyncio.to_thread(_append, self._log_path, line)
        self.parser = VllmLogParser()
        inst.load_phase = "spawned"
        self._attempt_lines.clear()
        self._exited.clear()
        self.exit_code = None
        inst.engine_core_pid = None
        ctx = dataclasses.replace(self._ctx, port=new)
        spawn = asyncio.ensure_future(self.spawn(self._adapter, ctx))
        try:
            await asyncio.shield(spawn)
        except asyncio.CancelledError:
            # An unload came: let the spawn finish so the stop sees (and ends) the new PID.
            with contextlib.suppress(Exception):
                await spawn
            raise
        except (OSError, ValueError) as exc:
            await self.fail(f"cannot restart engine on port {new}: {exc}")
            return False
        self._watch = asyncio.create_task(self._watch_exit(), name=f"exit-{inst.id}")
        await self.set_status(InstanceStatus.STARTING)  # saves the new port and PID
        return True

    async def _become_active(self) -> None:
        inst = self.instance
        inst.engine_core_pid = self.parser.engine_core_pid or await asyncio.to_thread(
            proctree.find_engine_core_pid, self.pid
        )
        inst.memory_metrics = self.parser.memory.model_copy()
        inst.started_at = utcnow()
        if self._on_active is not None:
            await self._on_active(self)
        await self.set_status(InstanceStatus.ACTIVE)
        if self.tailer is not None:
            self.tailer.fast = False

    async def _monitor(self) -> None:
        failures = 0
        interval = self.settings.health_interval_seconds
        while True:
            with contextlib.suppress(TimeoutError):
                await await_within(self._exited.wait(), interval)
            if self._exited.is_set():
                await self._fail_from_log("engine process exited")
                return
            ok, reason = await self._health_ok()
            if ok:
                failures = 0
                continue
            failures += 1
            if failures >= self.settings.health_failure_threshold:
                await self.fail(f"health check failed {failures} times in a row ({reason})")
                return

    async def _fail_from_log(self, what: str) -> None:
        if self.tailer is not None:
            self.tailer.poll()
            self.tailer.flush_partial()
        lines = self.buffer.lines(ERROR_TAIL_LINES)
        if self._log_path is not None:
            lines = await asyncio.to_thread(read_tail_lines, self._log_path)
        cause = extract_error(lines[-ERROR_TAIL_LINES:])
        code = f" (exit code {self.exit_code})" if self.exit_code is not None else ""
        await self.fail(f"{cause}" if cause else f"{what}{code}")

    async def fail(self, message: str) -> None:
        """Make sure nothing of the engine is left running, then mark it failed.

        Killed and reaped first: whoever sees ``failed`` (the supervisor's retry, an
        event stream, another pod) may act on it at once, and a retry started while
        the old engine still ran would put two engines on one instance's memory and
        port. The kill has no grace (SIGKILL), so the routing table hears of it only
        as long after as the reaping takes.
        """
        self.instance.error_message = message
        self.instance.stopped_at = utcnow()
        survivors: list[int] = []
        try:
            survivors = await self.kill_tree(grace=0.0)
        finally:
            await self.set_status(InstanceStatus.FAILED)
        self.ended()
        log.warning("instance %s failed: %s", self.instance.id, message)
        if survivors:
            log.error("instance %s: processes %s survived SIGKILL", self.instance.id, survivors)

    async def kill_tree(self, grace: float) -> list[int]:
        """End every process of this engine; return the PIDs that survived SIGKILL.

        Its process group first (SIGTERM, ``grace``, SIGKILL), then any process still
        carrying this instance's mark (runtime/marker.py): whoever forgets the instance
        after this (an unload, a failure) forgets no engine that still runs, even one
        whose PID the runner never learnt (spawned while an unload ran) or whose start
        time no longer matches the recorded one (the wall clock was stepped).
        """
        survivors: list[int] = []
        if self.pid is not None:
            snapshot = await asyncio.to_thread(proctree.tree, self.pid)
            if not snapshot or await asyncio.to_thread(self._owns, snapshot[0]):
                survivors = await asyncio.to_thread(
                    proctree.terminate_group, self.pid, snapshot, grace
                )
            # else the PID was reused by someone else. Linux never hands out a number
            # still used as a process group id, so our engine's group is empty:
            # signalling "its" group would hit the newcomer's group instead.
        if self.proc is not None and self.proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.exit_code = await self.proc.wait()
        data_dir, iid = self.settings.data_dir, self.instance.id
        for pgid in await asyncio.to_thread(instance_groups, data_dir, iid):
            log.warning(
                "instance %s: engine process group %d (pid %s recorded) outlived its stop: "
                "killing it",
                iid,
                pgid,
                self.pid,
            )
            survivors += await asyncio.to_thread(proctree.terminate_group, pgid, [], 0.0)
        return sorted(set(survivors))

    def _owns(self, proc: psutil.Process) -> bool:
        """Whether ``proc`` (at our PID) is our engine: its start time is the recorded
        one, or it carries our mark (a start time moves with the wall clock). Blocking."""
        if self.create_time is None:
            return True
        with contextlib.suppress(psutil.Error):
            if abs(proc.create_time() - self.create_time) <= 0.5:
                return True
        return instance_of(proc, data_dir_mark(self.settings.data_dir)) == self.instance.id

    async def set_status(self, status: InstanceStatus) -> None:
        previous = self.instance.status
        self.instance.status = status
        if status != InstanceStatus.STARTING:
            self.instance.load_phase = None
        # Published first: the routing table follows this event, and a failed
        # or stopping engine must leave it now, not after a database write
        # that a busy disk can make take half a second (issue 18).
        self.bus.publish(StatusEvent(self.snapshot(), previous))
        await self._persist(self)

    def ended(self) -> None:
        """The engine is gone for good: give back what it held (idempotent)."""
        if self._on_ended is not None:
            self._on_ended(self)

    def snapshot(self) -> ModelInstance:
        return self.instance.model_copy(deep=True)

    async def engine_call(self, method: str, path: str) -> httpx.Response:
        url = f"http://{self.settings.engine_host}:{self.instance.port}{path}"
        try:
            return await self._http.request(method, url, timeout=ENGINE_CALL_TIMEOUT)
        except httpx.HTTPError as exc:
            raise EngineCallFailed(
                f"engine of instance {self.instance.id} did not answer {method} {path}: "
                f"{type(exc).__name__}"
            ) from exc

    async def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


def _append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)
