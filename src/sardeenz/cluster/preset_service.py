"""Presets as a service: storage, distribution, apply, and the reconcile loop.

* **Storage and distribution.** The presets are the ``presets`` document of
  the replicated control state (cluster/control_state.py): the leader (the
  admin API reaches it through the followers' 307) changes its table, then
  writes the whole set, and a change is acknowledged once a majority of the
  pods stored it (503 ``no_quorum`` otherwise). Every other pod replaces its
  table with each copy it receives, and a new leader adopts the newest copy a
  majority holds before it reconciles anything.
* **Apply** (``POST .../{name}/apply``): plan, refuse the whole preset when a
  replica fits nowhere (409 ``preset_unschedulable``, nothing done), else mark
  it applied and run the steps in a task this service owns, whose progress is
  an event log the SSE stream replays and follows. A client that leaves does
  not stop it; applying again is idempotent (the plan is computed afresh, so a
  finished step is not repeated) and resumes a partial apply. One apply or
  reconcile pass at a time: a second apply gets 409 ``preset_apply_in_progress``.
* **Reconcile** (controller pattern, level-triggered): the leader compares the
  applied preset with what the pods' heartbeats show, at least every
  ``SARDEENZ_PRESET_RECONCILE_SECONDS`` and at once when the set of available
  pods changes, and runs the plan's loads and unloads, with exponential backoff
  after a pass with failures. It acts only on a settled view: no pass while a
  pod is suspect or a pod without a heartbeat yet, so a new leader does not
  place replicas it simply has not heard of yet.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from sardeenz.cluster.control import ControlState
from sardeenz.cluster.membership.election import PeerState
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.orders import PodOrders
from sardeenz.cluster.preset_plan import Placer, Plan, Step, make_plan
from sardeenz.cluster.presets import Observed, PresetBody, PresetModel
from sardeenz.cluster.transport.leader_loop import LeaderLoop
from sardeenz.cluster.view import ClusterView
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, utcnow
from sardeenz.errors import Conflict, NotFound, SardeenzError
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.store.presets import PresetRepository, PresetRow
from sardeenz.tasks import stop_task

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
TICK_SECONDS = 1.0
MAX_BACKOFF_SECONDS = 120.0
KEY = "presets"
"""The control-state document that holds the presets."""


@dataclass
class ApplyRun:
    """One apply (or reconcile pass): its steps' states and its event log."""

    preset: str
    trigger: str
    steps: list[dict[str, Any]] = field(default_factory=list)
    state: str = "running"
    started_at: str = field(default_factory=lambda: utcnow().isoformat())
    finished_at: str | None = None
    events: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def emit(self, kind: str, data: dict[str, Any]) -> None:
        self.events.append((kind, data))
        self.changed.set()
        self.changed = asyncio.Event()

    def as_json(self) -> dict[str, Any]:
        return {
            "preset": self.preset,
            "trigger": self.trigger,
            "state": self.state,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "steps": self.steps,
        }


class PresetService:
    def __init__(
        self,
        membership: Membership,
        view: ClusterView,
        orders: PodOrders,
        supervisor: Supervisor,
        settings: Settings,
        repo: PresetRepository,
        placer: Placer,
        control: ControlState,
        moving: Callable[[], frozenset[str]] = frozenset,
    ) -> None:
        self._m = membership
        self._cluster = view
        self._orders = orders
        self._supervisor = supervisor
        self._settings = settings
        self._repo = repo
        self._placer = placer
        self._control = control
        control.subscribe(KEY, self._take)
        control.seed(KEY, self._seed)
        self._busy = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._loop = LeaderLoop("preset-reconcile", membership.is_leader, self._tick, TICK_SECONDS)
        self._last_run: ApplyRun | None = None
        self._last_pass = 0.0
        self._members: frozenset[str] = frozenset()
        self._failures = 0
        self._next_pass = 0.0
        self.unschedulable: list[dict[str, Any]] = []
        """What the last reconcile pass could not place, with the reasons."""
        self.moving = moving
        """Served names with a move under way (the move service's); left alone."""
        self._declared: frozenset[str] = frozenset()
        """Served names the applied preset wants replicas of, kept in memory so the proxy
        can ask on a routing miss without a database read (:meth:`declares`)."""
        self._applied = False
        """Whether some preset is applied, kept with ``_declared``: an idle leader with
        nothing applied (most clusters) then has nothing to read each tick, where it
        queried the presets table every second to find that out."""

    # ------------------------------------------------------------- lifecycle
    async def load(self) -> None:
        """Read which names the applied preset declares (after the control state loaded)."""
        await self._remember_declared()

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
        await stop_task(self._task)
        self._task = None

    # ------------------------------------------------------------------ CRUD
    async def all(self) -> list[dict[str, Any]]:
        return [self._view(r) for r in await self._repo.list_all()]

    async def get(self, name: str) -> dict[str, Any]:
        return self._view(await self._row(name))

    async def put(self, name: str, body: PresetBody) -> dict[str, Any]:
        models = [m.model_dump(mode="json", by_alias=True) for m in body.models]
        row = await self._repo.put(name, models)
        await self._remember_declared()
        await self._publish()
        self.poke()
        return self._view(row)

    async def delete(self, name: str) -> dict[str, Any]:
        row = await self._row(name)
        if row.applied_at is not None and self._busy.locked():
            raise Conflict(
                f"preset {name!r} is being applied; delete it once the apply ends",
                code="preset_apply_in_progress",
            )
        await self._repo.delete(name)
        await self._remember_declared()
        await self._publish()
        return self._view(row)

    async def plan(self, name: str) -> Plan:
        row = await self._row(name)
        dropped = row.dropped if row.applied_at is not None else await self._dropped_by(name)
        return await make_plan(_models(row), self.observed(), self._placer, dropped, self.moving())

    # ----------------------------------------------------------------- apply
    async def apply(self, name: str) -> ApplyRun:
        """Start applying ``name``; the caller streams the returned run's events."""
        row = await self._row(name)
        if self._busy.locked():
            raise Conflict(
                "another preset apply or reconcile pass is running; try again when it ends",
                code="preset_apply_in_progress",
            )
        await self._busy.acquire()
        try:
            dropped = await self._dropped_by(name) if row.applied_at is None else row.dropped
            plan = await make_plan(
                _models(row), self.observed(), self._placer, dropped, self.moving()
            )
            if plan.unschedulable:
                raise Conflict(
                    f"preset {name!r} cannot be applied: "
                    + "; ".join(f"{s.model}: {s.reason}" for s in plan.unschedulable),
                    code="preset_unschedulable",
                    steps=[s.as_json() for s in plan.unschedulable],
                )
            await self._repo.mark_applied(name)
            await self._remember_declared()
            await self._publish()
        except BaseException:
            self._busy.release()
            raise
        run = ApplyRun(name, "apply")
        self._last_run = run
        self._task = asyncio.create_task(self._run(run, plan, owned=True), name="preset-apply")
        return run

    async def events(self, run: ApplyRun) -> AsyncIterator[tuple[str, dict[str, Any]]]:
        """The run's events from the first, then as they come, until it ends."""
        sent = 0
        while True:
            changed = run.changed
            while sent < len(run.events):
                yield run.events[sent]
                sent += 1
            if run.state != "running":
                return
            await changed.wait()

    async def _run(self, run: ApplyRun, plan: Plan, owned: bool) -> None:
        try:
            run.steps = [{**s.as_json(), "state": "pending"} for s in plan.steps]
            run.emit("plan", {"preset": run.preset, **plan.as_json()})
            failed = 0
            for i, step in enumerate(plan.steps):
                if step.action == "unschedulable":
                    run.steps[i].update(state="failed", error=step.reason)
                    run.emit("step", {"index": i, **run.steps[i]})
                    failed += 1
                    continue
                run.steps[i]["state"] = "running"
                run.emit("step", {"index": i, **run.steps[i]})
                try:
                    detail = await self._execute(step)
                    run.steps[i].update(state="done", **detail)
                except SardeenzError as exc:
                    failed += 1
                    run.steps[i].update(state="failed", error=exc.message, code=exc.code)
                except Exception as exc:  # a step fails; the others still run
                    failed += 1
                    log.exception("preset %s: step %d failed", run.preset, i)
                    run.steps[i].update(state="failed", error=str(exc) or type(exc).__name__)
                run.emit("step", {"index": i, **run.steps[i]})
            await self._settle_dropped(run.preset)
            run.state = "failed" if failed else "done"
            run.finished_at = utcnow().isoformat()
            self._note_outcome(failed)
            log.info(
                "preset %s: %s %s (%d steps, %d failed)",
                run.preset, run.trigger, run.state, len(plan.steps), failed,
            )  # fmt: skip
            run.emit("done", {"state": run.state, "failed": failed, "steps": len(plan.steps)})
        finally:
            if run.state == "running":  # cancelled (shutdown): say so to followers
                run.state = "cancelled"
                run.emit("done", {"state": "cancelled", "failed": 0, "steps": len(plan.steps)})
            if owned:
                self._busy.release()

    async def _execute(self, step: Step) -> dict[str, Any]:
        if step.action == "unload":
            assert step.instance_id is not None
            if await self._orders.act_on(step.instance_id, "unload") is None:
                await self._supervisor.unload(step.instance_id)
            return {}
        assert step.load is not None
        assert step.pod_id is not None
        remote = await self._orders.load_on(step.pod_id, step.load)
        instance = remote or await self._supervisor.load(
            step.load.model_copy(update={"pod_id": None})
        )
        await self._wait_serving(step.pod_id, instance.id)
        return {"instanceId": instance.id}

    async def _wait_serving(self, pod_id: str, instance_id: str) -> None:
        """Until the step's instance serves; its failure, or its unload before it served
        (an operator's, a move's), ends the step at once: the run would otherwise hold
        the presets (``preset_apply_in_progress``) for the whole step timeout waiting for
        an instance that is gone, and the next pass is the one to place a replica again.
        """
        deadline = time.monotonic() + self._settings.preset_step_timeout_seconds
        seen = False  # a remote instance shows up with its pod's next heartbeat
        while time.monotonic() < deadline:
            status, error = self._status_of(pod_id, instance_id)
            if status in (InstanceStatus.ACTIVE, InstanceStatus.SLEEPING):
                return
            if status is InstanceStatus.FAILED:
                raise SardeenzError(
                    f"instance {instance_id} on {pod_id} failed: {error or 'no reason given'}",
                    code="instance_failed",
                )
            if status is InstanceStatus.STOPPING or (status is None and seen):
                raise SardeenzError(
                    f"instance {instance_id} on {pod_id} was unloaded before it served",
                    code="instance_unloaded",
                )
            seen = seen or status is not None
            await asyncio.sleep(POLL_SECONDS)
        raise SardeenzError(
            f"instance {instance_id} on {pod_id} not active after "
            f"{self._settings.preset_step_timeout_seconds:g} s",
            code="step_timeout",
        )

    def _status_of(self, pod_id: str, instance_id: str) -> tuple[InstanceStatus | None, str | None]:
        found = self._cluster.instance_on(pod_id, instance_id)
        return (found.status, found.error_message) if found is not None else (None, None)

    def observed(self) -> list[Observed]:
        """Every instance of every pod not known to be gone, as the leader sees it."""
        me = self._m.identity.pod_id
        return [
            Observed(i.pod_id or me, i.id, i.served_model_name, i.status, i.created_at)
            for i in self._cluster.instances()
        ]

    # ------------------------------------------------------------- reconcile
    def poke(self) -> None:
        """Run a reconcile pass at the next tick (a change an operator just made)."""
        self._next_pass = 0.0

    def status(self) -> dict[str, Any]:
        return {
            "lastRun": self._last_run.as_json() if self._last_run else None,
            "unschedulable": self.unschedulable,
            "consecutiveFailures": self._failures,
        }

    async def _tick(self) -> None:
        """One round on the leader (the loop runs it only there)."""
        if not self._control.ready():
            return  # a new leader first adopts the newest presets a majority holds
        members = self._available_pods()
        now = time.monotonic()
        due = now >= self._next_pass or members != self._members
        if not self._applied or not due or self._busy.locked() or not self._settled():
            return
        applied = next((r for r in await self._repo.list_all() if r.applied_at), None)
        if applied is None:
            return
        self._members = members
        async with self._busy:
            self._next_pass = now + self._settings.preset_reconcile_seconds
            plan = await make_plan(
                _models(applied), self.observed(), self._placer, applied.dropped, self.moving()
            )
            self.unschedulable = [s.as_json() for s in plan.unschedulable]
            if plan.nothing_to_do:
                self._note_outcome(0)
                return
            run = ApplyRun(applied.name, "reconcile")
            self._last_run = run
            await self._run(run, plan, owned=False)

    def _note_outcome(self, failed: int) -> None:
        self._failures = self._failures + 1 if failed else 0
        if self._failures:
            delay = min(MAX_BACKOFF_SECONDS, 5.0 * 2 ** (self._failures - 1))
            self._next_pass = time.monotonic() + max(delay, self._settings.preset_reconcile_seconds)

    def _available_pods(self) -> frozenset[str]:
        m = self._m
        pods = {m.identity.pod_id}
        if m.active:
            now = m.now()
            pods |= {
                p.pod_id
                for p in m.peers.all()
                if m.detector.state(p.pod_id, now) is not PeerState.UNAVAILABLE
            }
        return frozenset(pods)

    def _settled(self) -> bool:
        m = self._m
        if not m.active:
            return True
        now = m.now()
        for peer in m.peers.all():
            state = m.detector.state(peer.pod_id, now)
            if state is PeerState.SUSPECT:
                return False
            if state is PeerState.HEALTHY and peer.heartbeat is None:
                return False
        return True

    async def _settle_dropped(self, name: str) -> None:
        """Forget dropped names whose instances are all gone (the unloads are done)."""
        row = await self._repo.get(name)
        if row is None or not row.dropped:
            return
        running = {o.served_model_name for o in self.observed()}
        left = [n for n in row.dropped if n in running]
        if left != row.dropped:
            await self._repo.set_dropped(name, left)
            await self._publish()

    # ------------------------------------------------------------------ sync
    async def _publish(self) -> None:
        """Write the whole set as the cluster's copy; returns once a majority stored it."""
        if not self._m.active:
            return

        async def snapshot(_: Any) -> list[dict[str, Any]]:
            return [r.as_json() for r in await self._repo.list_all()]

        await self._control.update(KEY, snapshot)

    async def _take(self, body: Any) -> None:
        """Another pod's copy (the leader's write, or what a new leader adopted)."""
        rows = [PresetRow.from_json(r) for r in body] if isinstance(body, list) else []
        await self._repo.replace_all(rows)
        await self._remember_declared()

    async def _seed(self) -> Any:
        """A cluster's first leader: the table an older version kept on every pod."""
        rows = await self._repo.list_all()
        return [r.as_json() for r in rows] or None

    # --------------------------------------------------------------- helpers
    async def _row(self, name: str) -> PresetRow:
        row = await self._repo.get(name)
        if row is None:
            raise NotFound(f"no preset {name!r}", code="preset_not_found")
        return row

    async def _dropped_by(self, name: str) -> list[str]:
        """Names the currently applied preset (not ``name``) owns that ``name`` drops."""
        rows = await self._repo.list_all()
        target = next(r for r in rows if r.name == name)
        keep = {str(m["servedModelName"]) for m in target.models}
        out: set[str] = set()
        for r in rows:
            if r.name != name and r.applied_at is not None:
                out |= {str(m["servedModelName"]) for m in r.models} | set(r.dropped)
        return sorted(out - keep)

    async def applied_names(self) -> tuple[str, frozenset[str]] | None:
        """The applied preset's name and the served names it declares (None: none applied)."""
        row = next((r for r in await self._repo.list_all() if r.applied_at is not None), None)
        if row is None:
            return None
        return row.name, frozenset(str(m["servedModelName"]) for m in row.models)

    def declares(self, name: str) -> bool:
        """True if the applied preset wants at least one replica of served name ``name``.

        The proxy asks this when a request's model has no instance anywhere: such a
        model is between replicas (a move, a restart of its engines), so the client
        gets 503 ``model_not_ready`` instead of 404. From memory: no database read.
        """
        return name in self._declared

    async def _remember_declared(self) -> None:
        """Refresh :meth:`declares`'s set; called after every change to the table."""
        row = next((r for r in await self._repo.list_all() if r.applied_at is not None), None)
        models = row.models if row is not None else []
        self._applied = row is not None
        self._declared = frozenset(
            str(m["servedModelName"]) for m in models if int(m.get("replicas", 1)) > 0
        )

    def _view(self, row: PresetRow) -> dict[str, Any]:
        out = row.as_json()
        out["applied"] = row.applied_at is not None
        if row.applied_at is not None:
            out["reconcile"] = self.status()
        return out


def _models(row: PresetRow) -> list[PresetModel]:
    return [PresetModel.model_validate(m) for m in row.models]
