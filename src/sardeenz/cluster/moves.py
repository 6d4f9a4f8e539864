"""Blue-green moves: an instance changes pod (or GPUs) without a failed request.

The leader runs each move as one task, in this order, so that at every moment
every pod's routing table holds at least one route to the model:

1. ``starting-target``: load the same model (path, engine, names, arguments,
   memory limit, tensor parallel, sleep mode) on the target pod/GPUs, held
   out of other pods' tables (withdrawn, cluster/handover.py, so that a
   target the move gives up was never routed); wait until it is ``active``,
   then let its pod advertise it.
   The LoRA adapters the source holds are then loaded into the target (best effort:
   one that cannot come along is loaded again on its next request).
2. ``switching``: wait until every live pod's table routes to the target
   (read through ``/internal/routes``); withdraw the source (its pod stops
   advertising it but keeps serving it, cluster/handover.py says why); wait
   until no other pod's table routes to it, then a short grace for requests
   already on their way.
3. ``draining``: the source pod holds the source out of its own table and
   waits for its requests in flight (``drainSeconds``, default
   ``SARDEENZ_STOP_GRACE_SECONDS``; what is left after it is cut with
   ``model_unloaded``, runtime/drain.py).
4. ``unloading-source``: the usual unload (SIGTERM, grace, SIGKILL).

A target that is refused or fails to start is unloaded and the move ends
``failed`` with the reason; the source was never touched. A failure while
switching restores the source's advertisement and retires the target the
same careful way (the steps themselves: cluster/move_steps.py).

The move record (phase, source, target) is the ``moves`` document of the
replicated control state (cluster/control_state.py), written before each step
it announces (write-ahead) and acknowledged by a majority of the pods, so a
leader that dies mid-move leaves its successor the phase the move was in. The
new leader, once it has adopted the control state, takes every unfinished
move over (:meth:`MoveService.take_over`):

* phase ``draining`` or ``unloading-source`` (every pod already routes to the
  target, the source is held): the move is resumed, withdraw, drain then
  unload. The source's pod is often the old leader, paused or cut off for a
  few seconds: each step waits for it with backoff up to ``source_wait``
  (cluster/move_steps.py) rather than giving up at once, which left the
  source held and routed by no pod (the 60-minute soak). If the pod stays
  away or left, the move ends failed (``source_pod_unavailable``,
  ``source_pod_gone``) and the held source is unloaded by its own pod
  (cluster/handover.py), so it cannot stay a zombie either way;
* earlier phases (the source was never held): the move is rolled back, the
  source advertised again and the target (if one was started) retired the
  careful way; it ends ``failed`` with code ``leader_changed``;
* a source that is gone (it ran on the dead leader) keeps the target instead.

The source serves throughout: nothing in either path stops it before every
pod routes to the target.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Coroutine

from sardeenz.cluster.control import ControlState
from sardeenz.cluster.handover import Pods
from sardeenz.cluster.move_steps import POLL, MoveFailed, MoveSteps
from sardeenz.cluster.move_types import FINISHED, Move, MoveRequest, MoveState
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, LoadRequest, ModelInstance, utcnow
from sardeenz.errors import Conflict, InvalidRequest, NotFound, SardeenzError, Unavailable
from sardeenz.tasks import stop_task

log = logging.getLogger(__name__)

HISTORY = 100
"""Finished moves kept for ``GET /api/cluster/moves``."""
JOURNALED_HISTORY = 20
"""Finished moves kept in the replicated record (a new leader lists them too)."""
KEY = "moves"
"""The control-state document that holds the move records."""
GOING = frozenset({"instance_not_found", "instance_stopping"})
"""Refusals by the source's pod meaning the source is already gone or being unloaded."""


class MoveService(MoveSteps):
    """The leader's moves: validation, the in-memory list, one owned task per move."""

    def __init__(self, pods: Pods, settings: Settings, control: ControlState) -> None:
        super().__init__(pods, settings)
        self._control = control
        control.when_ready(self.take_over)
        self._moves: dict[str, Move] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}

    # ---------------------------------------------------------------- reads
    def list(self) -> list[Move]:
        return sorted(self._moves.values(), key=lambda m: m.created_at, reverse=True)

    def get(self, move_id: str) -> Move:
        move = self._moves.get(move_id)
        if move is None and self._control.replicated and not self._control.ready():
            raise Unavailable(
                "this leader has not yet read the moves' record from a majority of the pods; "
                "retry shortly",
                code="control_state_not_ready",
            )
        if move is None:
            raise NotFound(f"no move {move_id!r} (moves live on the leader)", code="move_not_found")
        return move

    def moving_models(self) -> frozenset[str]:
        """Served names with an unfinished move: for a while they run one replica more
        (the target next to the source), which the preset reconcile must not undo."""
        return frozenset(m.model for m in self._moves.values() if m.state not in FINISHED)

    def moving(self, instance_id: str) -> Move | None:
        """The unfinished move ``instance_id`` is the source or target of."""
        for move in self._moves.values():
            if move.state not in FINISHED and instance_id in (
                move.instance_id,
                move.target_instance_id,
            ):
                return move
        return None

    # ---------------------------------------------------------------- start
    async def start(self, req: MoveRequest) -> Move:
        """Validate (nothing is done on a refusal), record, and run the move in the background."""
        pods = self._pods
        found = pods.locate(req.instance_id)
        if found is None:
            raise NotFound(f"no instance with id {req.instance_id!r}", code="instance_not_found")
        source_pod, source = found
        target_pod = req.target_pod_id
        if not pods.known(target_pod):
            raise NotFound(f"no pod {target_pod!r} in this cluster", code="pod_not_found")
        if target_pod == source_pod and (
            req.gpu_ids is None or sorted(set(req.gpu_ids)) == sorted(source.gpu_ids)
        ):
            raise InvalidRequest(
                f"instance {source.id} already runs on pod {source_pod} GPUs "
                f"{source.gpu_ids}: a move within a pod needs other gpuIds",
                code="move_to_itself",
            )
        if not pods.available(target_pod):
            raise Unavailable(f"pod {target_pod!r} is unavailable", code="pod_unavailable")
        if req.gpu_ids:
            have = await pods.gpu_indices(target_pod)
            unknown = sorted(set(req.gpu_ids) - set(have))
            if unknown:
                raise InvalidRequest(
                    f"pod {target_pod} has no GPU {unknown} (it has {have})",
                    code="unknown_gpu",
                    unknownGpuIds=unknown,
                    availableGpuIds=have,
                )
        # No await from here on: the "already moving" check and the record are one step.
        busy = self.moving(source.id)
        if busy is not None:
            raise Conflict(
                f"instance {source.id} is already moving (move {busy.id}, {busy.state.value})",
                code="instance_moving",
                moveId=busy.id,
            )
        if source.status is not InstanceStatus.ACTIVE:
            raise Conflict(
                f"instance {source.id} is {source.status.value}: only an active instance moves",
                code="instance_not_active",
            )
        move = Move(
            id=uuid.uuid4().hex[:12],
            instance_id=source.id,
            model=source.served_model_name,
            source_pod_id=source_pod,
            source_gpu_ids=list(source.gpu_ids),
            target_pod_id=target_pod,
            target_gpu_ids=list(req.gpu_ids) if req.gpu_ids is not None else None,
        )
        self._moves[move.id] = move
        self._forget_old()
        try:  # acknowledged to the client only once a majority holds the record
            await self._journal()
        except SardeenzError:
            self._moves.pop(move.id, None)
            raise
        drain = req.drain_seconds
        drain_s = self._settings.stop_grace_seconds if drain is None else drain
        self._launch(move, self._run(move, source, drain_s))
        log.info(
            "move %s: %s (%s) from %s to %s%s",
            move.id,
            source.id,
            move.model,
            source_pod,
            target_pod,
            f" GPUs {req.gpu_ids}" if req.gpu_ids is not None else "",
        )
        return move

    def _launch(self, move: Move, work: Coroutine[None, None, None]) -> None:
        task = asyncio.get_running_loop().create_task(work, name=f"sardeenz-move-{move.id}")
        self._tasks[move.id] = task
        task.add_done_callback(lambda _: self._tasks.pop(move.id, None))

    async def _journal(self) -> None:
        """Write every unfinished move and the last finished ones as the cluster's record
        (returns once a majority stored it; raises 503 otherwise)."""
        if not self._control.replicated:
            return

        async def record(_: object) -> list[dict[str, object]]:
            moves = self.list()  # taken under the register's lock: the newest of every move
            kept = [m for m in moves if m.state not in FINISHED]
            kept += [m for m in moves if m.state in FINISHED][:JOURNALED_HISTORY]
            return [m.model_dump(mode="json", by_alias=True) for m in kept]

        await self._control.update(KEY, record)

    async def _mark(self, move: Move, state: MoveState) -> None:
        """Record ``state`` before the step it announces (a new leader resumes from it)."""
        move.state = state
        try:
            await self._journal()
        except SardeenzError as exc:
            raise MoveFailed(f"the move's record was not stored: {exc.message}", exc.code) from exc

    async def take_over(self) -> None:
        """This pod became a ready leader: adopt the recorded moves, finish the open ones."""
        body = self._control.body(KEY, [])
        for raw in body if isinstance(body, list) else []:
            try:
                move = Move.model_validate(raw)
            except ValueError:
                log.warning("move record unreadable, skipped: %.200s", raw)
                continue
            if move.id in self._tasks:  # ours still running (we led before and still do)
                continue
            self._moves[move.id] = move
            if move.state not in FINISHED:
                log.warning("move %s: taken over in state %s", move.id, move.state.value)
                self._launch(move, self._recover(move))

    async def stop(self) -> None:
        """Shutdown: moves in progress end where they are (documented as a leader loss),
        and so do this pod's pending unloads of held sources (the hold ends with it)."""
        for task in list(self._tasks.values()):
            await stop_task(task)
        await self._pods.stop()

    def _forget_old(self) -> None:
        done = [m for m in self.list() if m.state in FINISHED]
        for move in done[HISTORY:]:
            self._moves.pop(move.id, None)

    # ------------------------------------------------------------------ run
    async def _run(self, move: Move, source: ModelInstance, drain_s: float) -> None:
        t0 = time.monotonic()
        src_pod = move.source_pod_id
        try:
            target = await self._start_target(move, source)
            await self._carry_adapters(move, source, target)
            await self._mark(move, MoveState.SWITCHING)
            try:
                await self._wait_routes(move.target_pod_id, target.id, present=True)
            except MoveFailed:
                await self._rollback(move, target, routed=True)
                raise
            self._step(move, "target-routed", "every pod's table routes to the target")
            try:
                await self._withdraw(move, src_pod, source.id, "source")
            except MoveFailed:
                still = self._pods.instance(src_pod, source.id)
                if still is None or still.status is not InstanceStatus.ACTIVE:
                    # The source went meanwhile (unloaded, crashed): the target is now the
                    # model's only instance, so it stays.
                    self._step(move, "target-kept", "the source is no longer active")
                    raise
                await self._restore(src_pod, source.id, move)
                await self._rollback(move, target, routed=True)
                raise
            await self._mark(move, MoveState.DRAINING)
            drained = self._pods.drain(src_pod, source.id, drain_s)
            drain_t0 = time.monotonic()
            try:
                in_flight, cut = await self._call(drained, "source_drain")
            except MoveFailed:
                await self._undrained_source(move, src_pod, source.id)
                raise
            # The time it took, not the limit: a drain usually ends well before it.
            took = time.monotonic() - drain_t0
            self._step(
                move,
                "drain-end",
                f"{in_flight} request(s) in flight at the start, {cut} cut; "
                f"drained in {took:.1f}s (limit {drain_s:g}s)",
            )
            await self._mark(move, MoveState.UNLOADING_SOURCE)
            await self._call(self._pods.unload(src_pod, source.id), "source_unload")
            self._step(move, "source-gone")
            move.state = MoveState.DONE
        except MoveFailed as exc:
            move.state, move.reason, move.code = MoveState.FAILED, exc.reason, exc.code
            self._step(move, "failed", exc.reason)
            log.warning("move %s failed: %s", move.id, exc.reason)
        except Exception as exc:  # a bug must end the move visibly, not hang it
            log.exception("move %s crashed", move.id)
            move.state, move.reason, move.code = MoveState.FAILED, str(exc), "internal_error"
        finally:
            move.finished_at = utcnow()
            move.duration_seconds = round(time.monotonic() - t0, 3)
            await self._journal_end(move)

    async def _undrained_source(self, move: Move, src_pod: str, src_id: str) -> None:
        """A source withdrawn for the switch whose drain was refused (put to sleep
        meanwhile, or its pod did not answer): the move ends there and the target,
        active and routed, stays. The source is advertised again now: its withdrawal
        was for this move, and left to its TTL (over a minute) it would keep serving
        only its own pod; woken meanwhile, other pods would not route the model to it
        (the 60-minute soak: a pod's ``/v1/models`` without the model for as long)."""
        self._step(move, "target-kept", "the source was not drained")
        if self._pods.instance(src_pod, src_id) is not None:
            await self._restore(src_pod, src_id, move)

    async def _journal_end(self, move: Move) -> None:
        """Record the end (best effort: a leader that lost its majority leaves the move
        open in the record, and the next leader finishes it)."""
        if not self._pods.leading():
            return
        try:
            await self._journal()
        except SardeenzError as exc:
            log.warning("move %s: its end was not recorded: %s", move.id, exc)

    async def _recover(self, move: Move) -> None:
        """Finish a move a previous leader left open (the module docstring says how)."""
        t0 = time.monotonic()
        src_pod, src_id = move.source_pod_id, move.instance_id
        try:
            self._step(move, "taken-over", f"by pod {self._pods.me} in state {move.state.value}")
            target = self._target_of(move)
            source = self._pods.instance(src_pod, src_id)
            if source is None:
                if target is None:
                    raise MoveFailed("source and target are both gone", "leader_changed")
                await self._call(
                    self._pods.restore(move.target_pod_id, target.id), "target_restore"
                )
                self._step(move, "target-kept", f"the source on pod {src_pod} is gone")
                move.state = MoveState.DONE
            elif move.state in (MoveState.DRAINING, MoveState.UNLOADING_SOURCE):
                await self._finish_source(move)
                move.state = MoveState.DONE
            else:
                await self._restore(src_pod, src_id, move)
                if target is not None:
                    # A target still starting was held from the start (no pod routes to
                    # it): a plain unload. An active one may be routed: the careful way.
                    routed = target.status is not InstanceStatus.STARTING
                    await self._rollback(move, target, routed=routed)
                raise MoveFailed(
                    "the leader changed mid-move: rolled back (the source kept serving)",
                    "leader_changed",
                )
        except MoveFailed as exc:
            move.state, move.reason, move.code = MoveState.FAILED, exc.reason, exc.code
            self._step(move, "failed", exc.reason)
            log.warning("move %s failed: %s", move.id, exc.reason)
        except Exception as exc:  # a bug must end the move visibly, not hang it
            log.exception("move %s: take-over crashed", move.id)
            move.state, move.reason, move.code = MoveState.FAILED, str(exc), "internal_error"
        finally:
            move.finished_at = utcnow()
            move.duration_seconds = round(time.monotonic() - t0, 3)
            await self._journal_end(move)

    async def _finish_source(self, move: Move) -> None:
        """Retire the source of a move resumed past the switch: withdraw, drain, unload.

        Every pod already routes to the target; the source may be held (drained), or
        advertised again if its pod restarted since (a hold lives in memory), hence
        the withdrawal first (it never shortens a hold, cluster/local_pod.py). Each
        step waits for a source pod that is unavailable for now (``_on_source``). A
        source already on its way out (its pod unloads a held source that nobody
        unloaded, cluster/handover.py) needs nothing more.
        """
        src_pod, src_id = move.source_pod_id, move.instance_id
        if move.state is MoveState.DRAINING:
            try:
                await self._on_source(move, lambda: self._withdraw(move, src_pod, src_id, "source"))
                drain_s = self._settings.stop_grace_seconds
                in_flight, cut = await self._on_source(
                    move,
                    lambda: self._call(self._pods.drain(src_pod, src_id, drain_s), "source_drain"),
                )
                self._step(move, "drain-end", f"{in_flight} in flight, {cut} cut")
            except MoveFailed as exc:
                if exc.code not in GOING | {"instance_not_active"}:
                    raise
                self._step(move, "drain-skipped", exc.reason)
            await self._mark(move, MoveState.UNLOADING_SOURCE)
        try:
            await self._on_source(
                move, lambda: self._call(self._pods.unload(src_pod, src_id), "source_unload")
            )
        except MoveFailed as exc:
            if exc.code not in GOING:
                raise
            self._step(move, "source-gone", f"already on its way out ({exc.reason})")
            return
        self._step(move, "source-gone", "resumed by the new leader")

    async def _carry_adapters(
        self, move: Move, source: ModelInstance, target: ModelInstance
    ) -> None:
        """Load into the target the LoRA adapters the source holds now, before the switch,
        so their requests find them loaded on the target. Best effort: an adapter that
        cannot come along (no slot, refused) is loaded again on its next request."""
        names = self._pods.adapters_on(move.source_pod_id, source.id)
        if not names:
            return
        try:
            done = await self._call(
                self._pods.carry(move.target_pod_id, target.id, names), "adapters_carry"
            )
        except MoveFailed as exc:
            self._step(move, "adapters-not-carried", exc.reason)
            return
        loaded = sorted(n for n, why in done.items() if why is None)
        left = {n: why for n, why in done.items() if why is not None}
        detail = f"loaded on the target: {', '.join(loaded) or 'none'}"
        if left:
            detail += "; not: " + "; ".join(f"{n} ({why})" for n, why in sorted(left.items()))
        self._step(move, "adapters-carried", detail)

    async def _start_target(self, move: Move, source: ModelInstance) -> ModelInstance:
        await self._mark(move, MoveState.STARTING_TARGET)
        req = LoadRequest(
            model_path=source.model_path,
            engine=source.engine,
            served_model_name=source.served_model_name,
            display_name=source.display_name,
            gpu_ids=move.target_gpu_ids,
            gpu_memory_limit=source.gpu_memory_limit,
            tensor_parallel_size=source.tensor_parallel_size,
            enable_sleep_mode=source.sleep_mode_enabled,
            extra_args=list(source.extra_args),
        )
        # A moved on-demand copy stays one: the surplus reduction still sees it as such.
        loading = self._pods.load(move.target_pod_id, req, on_demand=source.on_demand)
        target = await self._call(loading, "target_refused")
        move.target_instance_id = target.id
        move.target_gpu_ids = list(target.gpu_ids)
        self._step(move, "target-loading", f"instance {target.id} on pod {move.target_pod_id}")
        await self._mark(move, MoveState.STARTING_TARGET)  # with the target's id
        # Not advertised to other pods before it is active: a target rolled back was never
        # routed. No pause after that: its first streams are served as fast as those of an
        # instance that has served for a while (tests/cluster/shared/test_first_streams.py).
        hold = self._settings.ready_timeout_seconds + self.route_timeout * 2 + 60
        try:
            held = self._pods.withdraw(move.target_pod_id, target.id, hold)
            await self._call(held, "target_hold")
        except MoveFailed as exc:  # e.g. it failed at once (its engine could not spawn)
            await self._rollback(move, target, routed=False)
            code = exc.code if exc.code == "not_leader" else "target_failed"
            raise MoveFailed(f"target failed to start: {exc.reason}", code) from exc
        deadline = time.monotonic() + self._settings.ready_timeout_seconds + self.route_timeout
        seen = False
        while True:
            now = self._pods.instance(move.target_pod_id, target.id)
            if now is not None:
                seen = True
                if now.status is InstanceStatus.ACTIVE:
                    self._step(move, "target-active", "advertised to other pods")
                    restore = self._pods.restore(move.target_pod_id, target.id)
                    await self._call(restore, "target_restore")
                    return now
                if now.status in (InstanceStatus.FAILED, InstanceStatus.STOPPING):
                    why = now.error_message or f"target instance is {now.status.value}"
                    await self._rollback(move, target, routed=False)
                    raise MoveFailed(f"target failed to start: {why}", "target_failed")
            elif seen:
                raise MoveFailed("target instance disappeared while starting", "target_failed")
            if not self._pods.available(move.target_pod_id):
                raise MoveFailed(f"pod {move.target_pod_id} became unavailable", "pod_unavailable")
            if time.monotonic() > deadline:
                await self._rollback(move, target, routed=False)
                raise MoveFailed("target not active in time", "target_timeout")
            await asyncio.sleep(POLL)
