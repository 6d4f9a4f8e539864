"""The careful steps a move is made of, shared by a move and its take-over.

cluster/moves.py runs moves; these are the steps both a move and a new
leader's take-over of one use: withdraw an instance and wait until no other
pod routes to it, retire a target the careful way (withdraw, wait, drain,
unload), advertise an instance again, wait for routes, and run one call of a
step so that a refusal (or a lost leadership) becomes the move's failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import TypeVar

from sardeenz.cluster.handover import Pods, route_timeout
from sardeenz.cluster.move_types import Move, MoveStep
from sardeenz.config import Settings
from sardeenz.domain import ModelInstance, utcnow
from sardeenz.errors import SardeenzError

log = logging.getLogger(__name__)
T = TypeVar("T")

POLL = 0.1
SOURCE_BACKOFF_MAX = 5.0
"""Longest pause between two tries of a resumed move's step on an unavailable source pod."""
RETRIED = frozenset({"pod_unavailable"})
"""Codes of a step on the source pod that mean "not now" (paused, partitioned,
restarting), not "never": a resumed move tries again until its deadline."""


class MoveFailed(Exception):
    def __init__(self, reason: str, code: str) -> None:
        super().__init__(reason)
        self.reason, self.code = reason, code


class MoveSteps:
    """What every move step needs: the pods, the settings, the bounds on waits."""

    def __init__(self, pods: Pods, settings: Settings) -> None:
        self._pods = pods
        self._settings = settings
        beat = settings.cluster_heartbeat_interval_seconds
        self.route_timeout = route_timeout(settings)
        """Bound on each wait for route propagation (target in, source out)."""
        self.source_wait = self.route_timeout + settings.stop_grace_seconds
        """How long a resumed move (phase ``draining``/``unloading-source``) waits for its
        source pod to be available again: a pod paused, partitioned or restarting for
        up to three failure-detector bounds (``route_timeout``), plus the stop grace
        its drain may still take. Past it the move ends ``source_pod_unavailable``
        and the held source is left to its own pod (``PodSide.drain_here``)."""
        self.transit_grace = max(0.5, beat)
        """After the last pod dropped the source: requests it picked just before are
        still on their way to the source pod."""

    def _step(self, move: Move, name: str, detail: str | None = None) -> None:
        move.steps.append(MoveStep(name=name, at=utcnow(), detail=detail))
        log.info("move %s: %s%s", move.id, name, f" ({detail})" if detail else "")

    def _target_of(self, move: Move) -> ModelInstance | None:
        """The move's target as the target pod now runs it. A target started just
        before the old leader could record its id is found by what it is: the same
        served model on the target pod, created after the move began."""
        pod = move.target_pod_id
        if move.target_instance_id is not None:
            return self._pods.instance(pod, move.target_instance_id)
        candidates = [
            i
            for i in self._pods.on(pod)
            if i.served_model_name == move.model
            and i.id != move.instance_id
            and i.created_at >= move.created_at
        ]
        return candidates[0] if len(candidates) == 1 else None

    async def _withdraw(self, move: Move, pod: str, iid: str, who: str) -> None:
        """Out of every other pod's table, still serving on its own; then the transit grace."""
        ttl = self.route_timeout * 2 + 60
        await self._call(self._pods.withdraw(pod, iid, ttl), f"{who}_withdraw")
        self._step(move, f"{who}-withdrawn", f"pod {pod} stops advertising {iid}")
        await self._wait_routes(pod, iid, present=False)
        self._step(move, f"{who}-unrouted", "no other pod's table routes to it")
        await asyncio.sleep(self.transit_grace)

    async def _rollback(self, move: Move, target: ModelInstance, *, routed: bool) -> None:
        """Remove the target (best effort: the move fails anyway, with its own reason).

        A target that may be in some table is retired like a source (withdraw, wait,
        drain), so the rollback fails no request either.
        """
        pod = move.target_pod_id
        try:
            if routed:
                await self._withdraw(move, pod, target.id, "target")
                await self._call(self._pods.drain(pod, target.id, 5.0), "target_drain")
            await self._call(self._pods.unload(pod, target.id), "target_unload")
            self._step(move, "target-removed")
        except MoveFailed as exc:
            self._step(move, "target-left-running", exc.reason)
            log.warning("move %s: target %s left on pod %s: %s", move.id, target.id, pod, exc)

    async def _restore(self, pod: str, iid: str, move: Move | None = None) -> None:
        """Advertise an instance again (a move or a surplus reduction rolled back; the
        move's step says which way it went). A restore that fails (its pod is
        unreachable) is said so: the instance is then advertised again when its
        withdrawal's TTL expires (cluster/handover.py), not now."""
        try:
            await self._call(self._pods.restore(pod, iid), "source_restore")
        except MoveFailed as exc:
            ttl = self.route_timeout * 2 + 60
            detail = (
                f"restoring {iid} on pod {pod} failed: {exc.reason}; its withdrawal "
                f"expires within {ttl:g}s and the pod advertises it again then"
            )
            log.warning("%s%s", f"move {move.id}: " if move else "", detail)
            if move is not None:
                self._step(move, "source-restore-failed", detail)
            return
        if move is not None:
            self._step(move, "source-restored", f"pod {pod} advertises {iid}")

    async def _on_source(self, move: Move, step: Callable[[], Awaitable[T]]) -> T:
        """Run ``step`` on a resumed move's source pod, waiting for that pod with backoff.

        The source is held (out of every table) when a move is resumed past the switch,
        so giving up at once on a pod that is only paused or cut off for a few seconds
        would leave it held for good. ``pod_unavailable`` is retried until
        ``source_wait``; a pod that left the cluster, or a deadline that passed, ends
        the move with its own code.
        """
        pod = move.source_pod_id
        deadline = time.monotonic() + self.source_wait
        pause = POLL
        waited = False
        while True:
            if not self._pods.known(pod):
                raise MoveFailed(f"the source's pod {pod} left the cluster", "source_pod_gone")
            why = f"pod {pod} is unavailable"
            if self._pods.available(pod):
                try:
                    return await step()
                except MoveFailed as exc:
                    if exc.code not in RETRIED:
                        raise
                    why = exc.reason
            if not waited:
                waited = True
                self._step(move, "source-waiting", f"{why}; waiting up to {self.source_wait:g}s")
            if time.monotonic() + pause > deadline:
                raise MoveFailed(
                    f"the source's pod {pod} was unavailable for {self.source_wait:g}s "
                    f"({why}); it unloads the held source itself when it is back",
                    "source_pod_unavailable",
                )
            await asyncio.sleep(pause)
            pause = min(pause * 2, SOURCE_BACKOFF_MAX)

    async def _wait_routes(self, pod: str, iid: str, *, present: bool) -> None:
        """Until every live pod's table has (``present``) or lacks ``pod/iid``.

        The instance's own pod is left out when waiting for its absence: it keeps
        routing to its withdrawn instance until the drain. Unavailable pods are left
        out too (their routes expire everywhere anyway).
        """
        key = f"{pod}/{iid}"
        deadline = time.monotonic() + self.route_timeout
        while True:
            pending = [p for p in self._pods.live() if present or p != pod]
            views = await asyncio.gather(*(self._pods.routes(p) for p in pending))
            late = [
                p for p, v in zip(pending, views, strict=True) if v is None or (key in v) != present
            ]
            if not late:
                return
            if time.monotonic() > deadline:
                what = "route to" if present else "dropped"
                raise MoveFailed(
                    f"pods {late} have not {what} {key} within {self.route_timeout:g}s",
                    "route_timeout",
                )
            await asyncio.sleep(POLL)

    async def _call(self, aw: Awaitable[T], code: str) -> T:
        """A step's call; a refusal or a dead peer becomes the move's failure reason.

        A pod that lost the leadership mid-move takes no further step, not even on
        its own instances (the new leader knows nothing of this move).
        """
        if not self._pods.leading():
            if isinstance(aw, Coroutine):
                aw.close()
            raise MoveFailed("this pod no longer leads the cluster", "not_leader")
        try:
            return await aw
        except SardeenzError as exc:
            raise MoveFailed(exc.message, exc.code or code) from exc
