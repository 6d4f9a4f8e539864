"""The benchmark runner: creates runs, drives their load, records results, reports progress.

Design choices, and why:

* **One aiohttp session for the node**, created on first use and closed on
  shutdown: connections to each engine are pooled and reused across
  scenarios and warm-up, so measured requests do not pay TCP handshakes.
* **Every asyncio task belongs to the runner.** A run is one task; its
  scenarios and their ``concurrency`` workers are children of it. Cancelling
  the run (``POST .../cancel``, ``DELETE`` of a running run, server
  shutdown) cancels the children, which closes their in-flight HTTP
  streams, so the engine aborts those requests at once: the load stops
  within milliseconds, not when the last request would have finished.
* **The database sees transitions only** (run and scenario status, a
  scenario's final metrics), each in its own short transaction, never
  per request. Live counters stay in memory and reach clients through
  ``GET /api/benchmarks/{id}`` and the SSE stream (``progress`` events at
  most every ``PROGRESS_INTERVAL`` seconds per scenario).
* **No run is left ``running`` forever.** A clean shutdown cancels running
  runs (status ``cancelled``, with the reason). A run that was in progress
  when the process died is marked ``failed`` with a reason at the next
  start (:meth:`BenchmarkRunner.start`).
* **One run at a time per node** (409 ``benchmark_in_progress``): two runs
  would measure each other. Use ``contention`` mode to measure scenarios
  together on purpose.
* **A dead target does not spin.** A scenario whose requests fail
  ``max(ABORT_MIN_FAILURES, 2 x concurrency)`` times in a row is aborted
  (``failed``) instead of firing the rest of its 100 000 requests into a
  closed port.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from sardeenz.bench.models import (
    MAX_RUN_CONCURRENCY,
    MAX_RUN_REQUESTS,
    BenchmarkCreate,
    ScenarioSpec,
)
from sardeenz.bench.stats import RequestSample, scenario_metrics
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, ModelInstance, utcnow
from sardeenz.errors import Conflict, InvalidRequest, NotFound, SardeenzError, Unavailable
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.security.auth import ApiKeys
from sardeenz.store.benchmarks import BenchmarkRepository
from sardeenz.store.records import (
    BenchmarkRun,
    BenchmarkScenario,
    RoutingMode,
    RunMode,
    RunStatus,
    ScenarioStatus,
)

if TYPE_CHECKING:  # aiohttp is imported on first use: it adds to every server start-up
    import aiohttp

    from sardeenz.bench.client import Target

log = logging.getLogger(__name__)

RESTART_REASON: Final = "the server stopped while this run was in progress"
SHUTDOWN_REASON: Final = "the server shut down while this run was in progress"
CANCEL_REASON: Final = "cancelled by request"
PROGRESS_INTERVAL: Final = 0.25
ABORT_MIN_FAILURES: Final = 50
STOP_TIMEOUT: Final = 10.0
EVENT_QUEUE_SIZE: Final = 1000

SseItem = tuple[str, dict[str, Any]]


class ScenarioAborted(Exception):
    """A scenario cannot go on (target gone, every request failing); the message says why."""


# --- load generation (also used stand-alone by benchmarks/runner_capacity.py) --------


async def run_load(
    session: aiohttp.ClientSession,
    target: Target,
    bodies: Sequence[bytes],
    *,
    total: int,
    concurrency: int,
    samples: list[RequestSample] | None = None,
    on_sample: Callable[[RequestSample], None] | None = None,
    abort_after: int | None = None,
    ramp_seconds: float = 0.0,
) -> list[RequestSample]:
    """Send ``total`` requests with ``concurrency`` in flight; bodies are used round robin.

    Workers start together (a burst, as a benchmark scenario does), or spread
    evenly over ``ramp_seconds`` (steady state: their requests stay out of
    phase when all take equally long).

    Samples are appended to ``samples`` as they finish (so a caller keeps
    what completed if this is cancelled). Raises :class:`ScenarioAborted`
    after ``abort_after`` consecutive failures. On cancellation every worker
    is cancelled and awaited before the ``CancelledError`` propagates.
    """
    from sardeenz.bench.client import stream_completion

    out: list[RequestSample] = samples if samples is not None else []
    issued = 0
    streak = 0

    async def worker(delay: float) -> None:
        nonlocal issued, streak
        if delay > 0:
            await asyncio.sleep(delay)
        while issued < total:
            body = bodies[issued % len(bodies)]
            issued += 1
            sample = await stream_completion(session, target, body)
            out.append(sample)
            if on_sample is not None:
                on_sample(sample)
            if sample.ok:
                streak = 0
            else:
                streak += 1
                if abort_after is not None and streak >= abort_after:
                    raise ScenarioAborted(
                        f"aborted after {streak} failed requests in a row; last: {sample.error}"
                    )

    count = max(1, min(concurrency, total))
    workers = [asyncio.create_task(worker(ramp_seconds * i / count)) for i in range(count)]
    try:
        await asyncio.gather(*workers)
    except BaseException:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        raise
    return out


def new_session() -> aiohttp.ClientSession:
    """The runner's HTTP client: no connection limit (concurrency is the scenario's), keep-alive."""
    import aiohttp

    from sardeenz.bench.client import trace_config

    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=300),
        # No sock_read: stream_completion keeps its own, cheaper read deadline.
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None),
        trace_configs=[trace_config()],
    )


# --- progress fan-out ---------------------------------------------------------------


class ProgressHub:
    """Per-run SSE subscribers. Publishing never waits: a full queue drops its oldest item."""

    def __init__(self) -> None:
        self._subs: dict[str, set[asyncio.Queue[SseItem | None]]] = {}

    def subscribe(self, run_id: str) -> asyncio.Queue[SseItem | None]:
        queue: asyncio.Queue[SseItem | None] = asyncio.Queue(EVENT_QUEUE_SIZE)
        self._subs.setdefault(run_id, set()).add(queue)
        return queue

    def unsubscribe(self, run_id: str, queue: asyncio.Queue[SseItem | None]) -> None:
        subs = self._subs.get(run_id)
        if subs is not None:
            subs.discard(queue)
            if not subs:
                self._subs.pop(run_id, None)

    def publish(self, run_id: str, event: str, data: dict[str, Any]) -> None:
        for queue in tuple(self._subs.get(run_id, ())):
            _offer(queue, (event, data))

    def close(self, run_id: str) -> None:
        """End every stream of this run (after its ``done`` event)."""
        for queue in self._subs.pop(run_id, set()):
            _offer(queue, None)


def _offer(queue: asyncio.Queue[SseItem | None], item: SseItem | None) -> None:
    while True:
        try:
            queue.put_nowait(item)
            return
        except asyncio.QueueFull:
            queue.get_nowait()


# --- the runner -----------------------------------------------------------------------


@dataclass(slots=True)
class _Progress:
    phase: str = "pending"
    total: int = 0
    successful: int = 0
    failed: int = 0
    first_error: str | None = None
    started: float = field(default_factory=time.perf_counter)
    changed: bool = True

    def begin(self, phase: str, total: int) -> None:
        self.phase, self.total, self.successful, self.failed = phase, total, 0, 0
        self.started = time.perf_counter()
        self.changed = True

    def record(self, sample: RequestSample) -> None:
        if sample.ok:
            self.successful += 1
        else:
            self.failed += 1
            if self.first_error is None:
                self.first_error = sample.error
        self.changed = True


@dataclass(slots=True)
class _Active:
    run: BenchmarkRun
    progress: dict[str, _Progress]
    proxy_headers: dict[str, str] = field(default_factory=dict)
    task: asyncio.Task[None] | None = None
    cancel_reason: str | None = None
    started: float = field(default_factory=time.perf_counter)
    finished: bool = False


def _self_host(host: str) -> str:
    """How this process reaches its own HTTP server (wildcards mean loopback)."""
    if host in ("", "0.0.0.0", "::"):
        return "127.0.0.1"
    return f"[{host}]" if ":" in host else host


class BenchmarkRunner:
    """The benchmark service: the API's entry point for runs (module docstring)."""

    def __init__(
        self,
        settings: Settings,
        supervisor: Supervisor,
        repo: BenchmarkRepository,
        api_keys: ApiKeys | None = None,
    ) -> None:
        self.settings = settings
        self.repo = repo
        self._supervisor = supervisor
        self._api_keys = api_keys
        self._active: dict[str, _Active] = {}
        self._hub = ProgressHub()
        self._session: aiohttp.ClientSession | None = None
        self._stopping = False

    # --- lifecycle ---------------------------------------------------------------
    async def start(self) -> None:
        """Fail what a previous process left unfinished: nothing will ever finish it."""
        failed = await self.repo.fail_unfinished(RESTART_REASON)
        if failed:
            log.warning(
                "marked %d benchmark run(s) failed: %s (%s)",
                len(failed),
                ", ".join(failed),
                RESTART_REASON,
            )

    async def shutdown(self) -> None:
        """Cancel running runs (recorded as cancelled, with the reason) and close the session."""
        self._stopping = True
        actives = list(self._active.values())
        for active in actives:
            active.cancel_reason = SHUTDOWN_REASON
            if active.task is not None:
                active.task.cancel()
        await self._await_stopped(actives)
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _await_stopped(self, actives: Sequence[_Active]) -> None:
        tasks = {a.task for a in actives if a.task is not None}
        if tasks:
            await asyncio.wait(tasks, timeout=STOP_TIMEOUT)
        for active in actives:
            # A task cancelled before it ever ran never reached its own clean-up.
            if not active.finished:
                await self._finish_run(
                    active, RunStatus.CANCELLED, active.cancel_reason or CANCEL_REASON
                )

    def session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = new_session()
        return self._session

    # --- queries -----------------------------------------------------------------
    def _snapshot(self, active: _Active) -> BenchmarkRun:
        run = active.run.model_copy(deep=True)
        for sc in run.scenarios:
            prog = active.progress[sc.id]
            if sc.status == ScenarioStatus.RUNNING and prog.phase == "measure":
                sc.successful_requests, sc.failed_requests = prog.successful, prog.failed
        run.successful_requests = sum(s.successful_requests for s in run.scenarios)
        run.failed_requests = sum(s.failed_requests for s in run.scenarios)
        return run

    async def get(self, run_id: str) -> BenchmarkRun:
        active = self._active.get(run_id)
        if active is not None:
            return self._snapshot(active)
        run = await self.repo.get(run_id)
        if run is None:
            raise NotFound(f"no benchmark run with id {run_id!r}", code="benchmark_not_found")
        return run

    async def list_runs(self, limit: int = 100, offset: int = 0) -> list[BenchmarkRun]:
        runs = await self.repo.list_runs(limit, offset)
        return [self._snapshot(self._active[r.id]) if r.id in self._active else r for r in runs]

    async def subscribe(
        self, run_id: str
    ) -> tuple[BenchmarkRun, asyncio.Queue[SseItem | None] | None]:
        """The run now, and a queue of its events (None when it has already finished)."""
        active = self._active.get(run_id)
        if active is not None and not active.finished:
            return self._snapshot(active), self._hub.subscribe(run_id)
        return await self.get(run_id), None

    def unsubscribe(self, run_id: str, queue: asyncio.Queue[SseItem | None]) -> None:
        self._hub.unsubscribe(run_id, queue)

    # --- commands ----------------------------------------------------------------
    async def create(self, body: BenchmarkCreate) -> BenchmarkRun:
        """Validate, record (``pending``) and start a run; returns at once."""
        if self._stopping:
            raise Unavailable("the server is shutting down", code="shutting_down")
        # A run that is finishing (its status already final, as GET answers it; only its
        # record still being written) sends no more load: it does not hold the node.
        sending = [run_id for run_id, active in self._active.items() if not active.finished]
        if sending:
            running = sending[0]
            raise Conflict(
                f"benchmark run {running} is in progress; cancel it or wait for it to finish "
                "(runs on one node would measure each other)",
                code="benchmark_in_progress",
                runId=running,
            )
        self._check_size(body)
        proxy_headers = self._proxy_headers(body)
        run_id = str(uuid.uuid4())
        instances = [self._instance(spec.instance_id, spec) for spec in body.scenarios]
        scenarios = [
            BenchmarkScenario(
                id=str(uuid.uuid4()),
                run_id=run_id,
                instance_id=inst.id,
                routing_mode=spec.routing_mode,
                model_path=inst.model_path,
                model_name=inst.served_model_name,
                input_tokens=spec.input_tokens,
                output_tokens=spec.output_tokens,
                concurrency=spec.concurrency,
                warmup_requests=spec.warmup_requests,
                total_requests=spec.total_requests,
                sla_threshold_ms=spec.sla_threshold_ms,
                status=ScenarioStatus.PENDING,
            )
            for spec, inst in zip(body.scenarios, instances, strict=True)
        ]
        run = BenchmarkRun(
            id=run_id,
            name=body.name,
            status=RunStatus.PENDING,
            mode=body.mode,
            kvcached_enabled=any(i.kvcached_enabled for i in instances),
            created_at=utcnow(),
            total_requests=sum(s.total_requests for s in scenarios),
            scenarios=scenarios,
        )
        active = _Active(
            run=run,
            progress={s.id: _Progress() for s in scenarios},
            proxy_headers=proxy_headers,
        )
        self._active[run_id] = active  # before any await: a second create sees it
        try:
            await self.repo.create(run)
        except BaseException:
            self._active.pop(run_id, None)
            raise
        if active.finished:  # a shutdown raced the insert (the next start fails it if need be)
            return self._snapshot(active)
        active.task = asyncio.create_task(self._execute(active), name=f"benchmark-{run_id}")
        return self._snapshot(active)

    @staticmethod
    def _check_size(body: BenchmarkCreate) -> None:
        requests = sum(s.total_requests + s.warmup_requests for s in body.scenarios)
        if requests > MAX_RUN_REQUESTS:
            raise InvalidRequest(
                f"a run may send at most {MAX_RUN_REQUESTS} requests (warm-up included); "
                f"this one asks for {requests}",
                code="benchmark_too_large",
            )
        if body.mode == RunMode.CONTENTION:
            concurrency = sum(s.concurrency for s in body.scenarios)
            if concurrency > MAX_RUN_CONCURRENCY:
                raise InvalidRequest(
                    f"contention mode runs every scenario at once: total concurrency "
                    f"{concurrency} exceeds {MAX_RUN_CONCURRENCY}",
                    code="benchmark_too_large",
                )

    def _proxy_headers(self, body: BenchmarkCreate) -> dict[str, str]:
        """The Authorization header proxy-mode requests need when inference keys are on."""
        uses_proxy = any(s.routing_mode == RoutingMode.PROXY for s in body.scenarios)
        if not uses_proxy or self._api_keys is None or not self._api_keys.enabled:
            return {}
        if body.api_key is None:
            raise InvalidRequest(
                "inference API keys are configured: proxy-mode scenarios need apiKey",
                code="api_key_required",
            )
        header = f"Bearer {body.api_key.get_secret_value()}"
        if not self._api_keys.check(header.encode()):
            raise InvalidRequest("apiKey is not a valid inference key", code="invalid_api_key")
        return {"Authorization": header}

    def _instance(self, instance_id: str, spec: ScenarioSpec) -> ModelInstance:
        inst = self._supervisor.get(instance_id)  # 404 instance_not_found
        if inst.status != InstanceStatus.ACTIVE:
            raise Conflict(
                f"instance {instance_id} is {inst.status.value}; "
                "benchmarks need an active instance",
                code="instance_not_active",
            )
        mml = inst.memory_metrics.max_model_len if inst.memory_metrics else None
        if mml is not None and spec.input_tokens + spec.output_tokens > mml:
            raise InvalidRequest(
                f"inputTokens + outputTokens = {spec.input_tokens + spec.output_tokens} exceeds "
                f"the context length of instance {instance_id} ({mml})",
                code="context_too_long",
            )
        return inst

    async def cancel(self, run_id: str) -> BenchmarkRun:
        """Stop a run's load now; returns the run once it is recorded ``cancelled``."""
        active = self._active.get(run_id)
        if active is None:
            run = await self.get(run_id)  # 404 if unknown
            raise Conflict(
                f"benchmark run {run_id} is already {run.status.value}",
                code="benchmark_not_running",
            )
        if active.cancel_reason is None:
            active.cancel_reason = CANCEL_REASON
        if active.task is not None:
            active.task.cancel()
        await self._await_stopped([active])
        return await self.get(run_id)

    async def delete(self, run_id: str) -> None:
        """Delete a run with its scenarios and metrics (a running run is cancelled first)."""
        if run_id in self._active:
            with contextlib.suppress(Conflict):
                await self.cancel(run_id)
        if not await self.repo.delete(run_id):
            raise NotFound(f"no benchmark run with id {run_id!r}", code="benchmark_not_found")

    # --- execution ---------------------------------------------------------------
    def _publish(self, run_id: str, event: str, data: dict[str, Any]) -> None:
        self._hub.publish(run_id, event, data)

    def _publish_progress(self, active: _Active) -> None:
        now = time.perf_counter()
        for sc in active.run.scenarios:
            prog = active.progress[sc.id]
            if not prog.changed or sc.status != ScenarioStatus.RUNNING:
                continue
            prog.changed = False
            self._publish(
                active.run.id,
                "progress",
                {
                    "runId": active.run.id,
                    "scenarioId": sc.id,
                    "phase": prog.phase,
                    "completed": prog.successful + prog.failed,
                    "successful": prog.successful,
                    "failed": prog.failed,
                    "total": prog.total,
                    "elapsedSeconds": round(now - prog.started, 3),
                },
            )

    async def _tick(self, active: _Active) -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL)
            self._publish_progress(active)

    async def _execute(self, active: _Active) -> None:
        run = active.run
        ticker = asyncio.create_task(self._tick(active))
        status, error = RunStatus.COMPLETED, None
        try:
            run.status, run.started_at = RunStatus.RUNNING, utcnow()
            active.started = time.perf_counter()
            await self.repo.update_run(run.id, status=run.status.value, started_at=run.started_at)
            self._publish(run.id, "status", {"runId": run.id, "status": run.status.value})
            if run.mode == RunMode.ISOLATED:
                for sc in run.scenarios:
                    await self._scenario(active, sc, None)
            else:
                barrier = asyncio.Barrier(len(run.scenarios))
                tasks = [
                    asyncio.create_task(self._scenario(active, sc, barrier)) for sc in run.scenarios
                ]
                try:
                    await asyncio.gather(*tasks)
                finally:  # one failing must not leave the others sending load unowned
                    for task in tasks:
                        task.cancel()
                    await asyncio.gather(*tasks, return_exceptions=True)
            failed = [
                (i, s) for i, s in enumerate(run.scenarios) if s.status == ScenarioStatus.FAILED
            ]
            if failed:
                status = RunStatus.FAILED
                error = f"{len(failed)} of {len(run.scenarios)} scenario(s) failed: " + "; ".join(
                    f"#{i + 1} ({s.model_name}): {s.error_message}" for i, s in failed
                )
        except asyncio.CancelledError:
            status, error = RunStatus.CANCELLED, active.cancel_reason or CANCEL_REASON
        except Exception as exc:  # a bug: record it rather than leave the run running
            log.exception("benchmark run %s failed", run.id)
            status, error = RunStatus.FAILED, f"internal error: {exc}"
        finally:
            ticker.cancel()
            await asyncio.shield(self._finish_run(active, status, error))

    async def _finish_run(self, active: _Active, status: RunStatus, error: str | None) -> None:
        """Record the end: memory first (so any snapshot from now on is final), then the DB."""
        if active.finished:
            return
        active.finished = True
        run = active.run
        now = utcnow()
        unfinished = [
            sc
            for sc in run.scenarios
            if sc.status in (ScenarioStatus.PENDING, ScenarioStatus.RUNNING)
        ]
        for sc in unfinished:
            cancelled = status == RunStatus.CANCELLED
            sc.status = ScenarioStatus.CANCELLED if cancelled else ScenarioStatus.FAILED
            sc.error_message = sc.error_message or error
            sc.completed_at = now
        run.status, run.error_message, run.completed_at = status, error, now
        run.duration_seconds = (
            round(time.perf_counter() - active.started, 3) if run.started_at else None
        )
        run.successful_requests = sum(s.successful_requests for s in run.scenarios)
        run.failed_requests = sum(s.failed_requests for s in run.scenarios)
        try:
            for sc in unfinished:
                await self.repo.update_scenario(
                    sc.id, status=sc.status.value, error_message=sc.error_message, completed_at=now
                )
            await self.repo.update_run(
                run.id,
                status=status.value,
                error_message=error,
                completed_at=now,
                duration_seconds=run.duration_seconds,
                successful_requests=run.successful_requests,
                failed_requests=run.failed_requests,
            )
        except Exception:  # the next start marks it failed; do not lose the event stream too
            log.exception("could not record the end of benchmark run %s", run.id)
        finally:
            self._publish(run.id, "done", run.model_dump(mode="json"))
            self._hub.close(run.id)
            self._active.pop(run.id, None)
            log.info("benchmark run %s %s%s", run.id, status.value, f": {error}" if error else "")

    def _target(
        self, active: _Active, sc: BenchmarkScenario, inst: ModelInstance
    ) -> tuple[Target, str]:
        """Completions URL (engine or our own /v1) and the engine's tokenizer URL."""
        from sardeenz.bench.client import Target

        engine = f"http://{_self_host(self.settings.engine_host)}:{inst.port}"
        tokenize = f"{engine}/tokenize"
        model = inst.served_model_name
        if sc.routing_mode == RoutingMode.PROXY:
            base = f"http://{_self_host(self.settings.host)}:{self.settings.port}"
            url = f"{base}/v1/completions"
            return Target(url=url, model=model, headers=active.proxy_headers), tokenize
        return Target(url=f"{engine}/v1/completions", model=model), tokenize

    async def _set_scenario(self, active: _Active, sc: BenchmarkScenario, **values: Any) -> None:
        await self.repo.update_scenario(sc.id, **values)
        self._publish(active.run.id, "scenario", sc.model_dump(mode="json"))

    async def _prepare(
        self, active: _Active, sc: BenchmarkScenario, position: int
    ) -> tuple[Target, list[bytes]] | None:
        """Instance check, prompts, warm-up. None (scenario recorded failed) on failure."""
        from sardeenz.bench.client import completion_body
        from sardeenz.bench.prompts import build_prompts

        prog = active.progress[sc.id]
        try:
            inst = self._supervisor.get(sc.instance_id)
            if inst.status != InstanceStatus.ACTIVE:
                raise ScenarioAborted(f"instance {inst.id} is {inst.status.value}")
            target, tokenize_url = self._target(active, sc, inst)
            sc.status, sc.started_at = ScenarioStatus.RUNNING, utcnow()
            prog.begin("prompts", 0)
            await self._set_scenario(active, sc, status=sc.status.value, started_at=sc.started_at)
            session = self.session()
            prompts, source = await build_prompts(
                session,
                tokenize_url,
                inst.served_model_name,
                sc.input_tokens,
                sc.warmup_requests + sc.total_requests,
                seed=position,
            )
            sc.prompt_source = source
            await self.repo.update_scenario(sc.id, prompt_source=source.value)
            bodies = [completion_body(target.model, p, sc.output_tokens) for p in prompts]
            if sc.warmup_requests:
                prog.begin("warmup", sc.warmup_requests)
                await run_load(
                    session,
                    target,
                    bodies,
                    total=sc.warmup_requests,
                    concurrency=sc.concurrency,
                    on_sample=prog.record,
                    abort_after=max(ABORT_MIN_FAILURES, 2 * sc.concurrency),
                )
            return target, bodies
        except (ScenarioAborted, SardeenzError) as exc:
            reason = exc.message if isinstance(exc, SardeenzError) else str(exc)
            await self._finish_scenario(active, sc, [], ScenarioStatus.FAILED, reason)
        except Exception as exc:
            log.exception("benchmark scenario %s failed", sc.id)
            await self._finish_scenario(
                active, sc, [], ScenarioStatus.FAILED, f"internal error: {exc}"
            )
        return None

    async def _scenario(
        self, active: _Active, sc: BenchmarkScenario, barrier: asyncio.Barrier | None
    ) -> None:
        """One scenario: prepare and warm up, (meet the others,) then the measured load."""
        position = active.run.scenarios.index(sc)
        prepared = await self._prepare(active, sc, position)
        if barrier is not None:
            # Contention: measured phases start together, after every warm-up.
            await barrier.wait()
        if prepared is None:
            return
        target, bodies = prepared
        prog = active.progress[sc.id]
        prog.begin("measure", sc.total_requests)
        prog.first_error = None
        samples: list[RequestSample] = []
        error: str | None = None
        try:
            await run_load(
                self.session(),
                target,
                bodies,
                total=sc.total_requests,
                concurrency=sc.concurrency,
                samples=samples,
                on_sample=prog.record,
                abort_after=max(ABORT_MIN_FAILURES, 2 * sc.concurrency),
            )
        except ScenarioAborted as exc:
            error = str(exc)
        except asyncio.CancelledError:
            reason = active.cancel_reason or CANCEL_REASON
            await asyncio.shield(
                self._finish_scenario(active, sc, samples, ScenarioStatus.CANCELLED, reason)
            )
            raise
        ok = any(s.ok for s in samples)
        status = ScenarioStatus.COMPLETED if ok and error is None else ScenarioStatus.FAILED
        if error is None and not ok:
            error = f"every request failed; first: {prog.first_error}"
        await self._finish_scenario(active, sc, samples, status, error)

    async def _finish_scenario(
        self,
        active: _Active,
        sc: BenchmarkScenario,
        samples: list[RequestSample],
        status: ScenarioStatus,
        error: str | None,
    ) -> None:
        self._publish_progress(active)  # the last counts, while the scenario is still running
        metrics = scenario_metrics(sc.id, samples, sc.sla_threshold_ms)
        ok = sum(1 for s in samples if s.ok)
        failed = len(samples) - ok
        if error is None and failed:
            first = next(s.error for s in samples if not s.ok)
            error = f"{failed} of {len(samples)} requests failed; first: {first}"
        sc.status, sc.completed_at, sc.error_message = status, utcnow(), error
        sc.successful_requests, sc.failed_requests, sc.metrics = ok, failed, metrics
        await self.repo.save_result(
            sc.id,
            metrics,
            status=status.value,
            completed_at=sc.completed_at,
            error_message=error,
            successful_requests=ok,
            failed_requests=failed,
            prompt_source=sc.prompt_source.value if sc.prompt_source else None,
        )
        self._publish(active.run.id, "scenario", sc.model_dump(mode="json"))
