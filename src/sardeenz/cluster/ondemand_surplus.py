"""The leader reduces surplus on-demand copies of a catalog model to one.

Why: a pod without a leader (an election, the minority side of a partition)
starts a catalog model on itself (cluster/ondemand.py), so after a 2|3
partition one model may run on three pods. Nothing else reduces them: traffic
spread over the copies keeps each busy, the idle reaper never finds one idle,
and the cluster keeps three times the memory for ever.

What: every ``ondemand_tick_seconds`` the leader looks at the instances of the
pods it can see. A served name with more than one live copy marked
``on_demand`` (every start on demand marks its instance, locally or through the
leader's placement; an operator's load and a preset's replicas are never
marked) is reduced to its best copy: active over sleeping, then the oldest.
Only catalog entries that the leader itself would start on demand qualify: not
an external server, not a LoRA adapter, not a name the applied preset declares
(its reconcile owns the replica count), not a model being moved (a move runs
one copy more on purpose). A name with a copy still starting waits for it to
settle: judging a copy that may yet fail could keep the wrong one.

When: only once membership has been stable for ``2 x unavailable_after``: the
same term and the same set of live pods for that long. A healed pod is heard
again within one heartbeat, but every pod's routes converge only within the
failure detector's bound (``unavailable_after``); the second bound covers a
partition that flaps (a link back for a moment, then gone: the copy on the far
side would be needed again at once). Each change of term or of the live set
starts the wait again, so nothing is reduced during a partition or an election.

How: the careful retirement a move uses for its source (cluster/move_steps.py,
cluster/handover.py): advertise the copy kept again (a leader that died mid-retirement
may have withdrawn it), wait until every live pod routes it, withdraw
the surplus copy (it keeps serving its own pod), wait until no other pod routes
to it, the transit grace, drain its requests in flight (the unload's hold;
``stop_grace_seconds``, as a move gives its source), then unload it. A sleeping
copy has nothing in flight and is unloaded at once (the unload's own drain).
A step that fails restores the copy's advertisement; the next round tries again.

A leader that dies between the withdrawal and the unload leaves the copy
withdrawn for the withdrawal's TTL (``route_timeout x 2 + 60`` s). When the
copy kept died with it (it ran on the leader's pod), that withdrawn copy is
the model's only one, and no other pod routes it meanwhile. So every round,
before anything else and without waiting for membership to settle, the leader
compares what is wanted (each reducible name with an active copy has at least
one that other pods route) with what it observes (each pod's withdrawals and
the term of the order that made each, ``withdrawnTerms`` and ``heldTerms`` in
its heartbeat): a name whose active copies are all withdrawn, one of them by an
earlier term, gets its best such copy advertised again (``orphans``); one
whose copies a dead leader had already drained (held: never advertised or
served again) has them unloaded, and the next request starts the model anew.
A withdrawal of this leader's own term is never touched: it is part of a
retirement this leader runs (and then another copy is routed anyway).
Withdrawals live in the pod's memory only: a pod that restarts advertises
every copy it adopts again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from sardeenz.catalog.metrics import STATS
from sardeenz.cluster.handover import Pods
from sardeenz.cluster.move_steps import MoveFailed, MoveSteps
from sardeenz.cluster.transport.leader_loop import LeaderLoop
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, ModelInstance

log = logging.getLogger(__name__)

_RANK = {InstanceStatus.ACTIVE: 0, InstanceStatus.SLEEPING: 1, InstanceStatus.STARTING: 2}
"""Which copy is kept first: one that serves now, then one that can wake."""


@dataclass(frozen=True, slots=True)
class Copy:
    pod_id: str
    instance: ModelInstance


@dataclass(frozen=True, slots=True)
class Reduction:
    """One served name's copies: the one kept and those that go."""

    name: str
    keep: Copy
    drop: tuple[Copy, ...]


def surplus(copies: Iterable[Copy], reducible: Callable[[str], bool]) -> list[Reduction]:
    """The pure decision: for each served name ``reducible`` accepts, with more than one
    live on-demand copy and none still starting, the copy kept and the copies that go.

    The best copy is kept: active over sleeping, then the oldest (``created_at``);
    the pod and instance ids break ties so every round decides the same.
    """
    groups: dict[str, list[Copy]] = {}
    for c in copies:
        inst = c.instance
        if inst.on_demand and inst.status in _RANK and reducible(inst.served_model_name):
            groups.setdefault(inst.served_model_name, []).append(c)
    out = []
    for name in sorted(groups):
        group = groups[name]
        if len(group) < 2 or any(c.instance.status is InstanceStatus.STARTING for c in group):
            continue
        group.sort(
            key=lambda c: (
                _RANK[c.instance.status],
                c.instance.created_at,
                c.pod_id,
                c.instance.id,
            )
        )
        out.append(Reduction(name, group[0], tuple(group[1:])))
    return out


@dataclass(frozen=True, slots=True)
class Orphans:
    """What a previous leader's unfinished retirements left without an owner."""

    advertise: tuple[Copy, ...] = ()
    """Withdrawn copies to advertise again."""
    unload: tuple[Copy, ...] = ()
    """Held copies (drained for their unload) to unload: they never serve again."""


def orphans(
    copies: Iterable[Copy],
    withdrawn: Mapping[tuple[str, str], int],
    held: Mapping[tuple[str, str], int],
    term: int,
    reducible: Callable[[str], bool],
) -> Orphans:
    """The pure decision: what to do now about the withdrawals earlier terms left.

    ``withdrawn`` and ``held`` map (pod, instance) to the term of the order that
    withdrew it, or that held it for its unload (a drain). For each served name
    ``reducible`` accepts whose active copies are all withdrawn or held (no other pod
    routes the model), among its active on-demand copies: the best (the oldest; pod
    and instance ids break ties) that an earlier term than ``term`` withdrew is
    advertised again; failing one, those an earlier term held are unloaded (a held
    copy never serves again; the next request starts the model anew). Their leader is
    gone and no one will finish what it began. A name with a routed active copy, or
    whose withdrawals are all of ``term`` (this leader's own, mid-retirement), is left
    as it is.
    """
    groups: dict[str, list[Copy]] = {}
    for c in copies:
        if c.instance.status is InstanceStatus.ACTIVE and reducible(c.instance.served_model_name):
            groups.setdefault(c.instance.served_model_name, []).append(c)
    unrouted = withdrawn.keys() | held.keys()
    advertise: list[Copy] = []
    unload: list[Copy] = []
    for name in sorted(groups):
        group = groups[name]
        if any((c.pod_id, c.instance.id) not in unrouted for c in group):
            continue  # routed by every pod
        mine = [c for c in group if c.instance.on_demand]
        stale = [c for c in mine if withdrawn.get((c.pod_id, c.instance.id), term) < term]
        if stale:
            best = min(stale, key=lambda c: (c.instance.created_at, c.pod_id, c.instance.id))
            advertise.append(best)
            continue
        unload += [c for c in mine if held.get((c.pod_id, c.instance.id), term) < term]
    return Orphans(tuple(advertise), tuple(unload))


class Settling:
    """How long the membership the leader sees has been the same (term and live pods)."""

    def __init__(self, settle: float) -> None:
        self.settle = settle
        self._seen: tuple[int, frozenset[str]] | None = None
        self._since = 0.0

    def stable(self, term: int, live: Iterable[str], now: float) -> bool:
        seen = (term, frozenset(live))
        if seen != self._seen:
            self._seen, self._since = seen, now
        return now - self._since >= self.settle

    def reset(self) -> None:
        self._seen = None


class SurplusReducer(MoveSteps):
    """The leader's loop that drains and unloads surplus on-demand copies."""

    def __init__(
        self,
        pods: Pods,
        settings: Settings,
        *,
        term: Callable[[], int],
        now: Callable[[], float],
        reducible: Callable[[str], bool],
        moving: Callable[[], frozenset[str]],
    ) -> None:
        super().__init__(pods, settings)
        self._term = term
        self._now = now
        self._reducible = reducible
        self._moving = moving
        self._drain_s = settings.stop_grace_seconds
        self.settling = Settling(2 * settings.cluster_unavailable_after_seconds)
        self._loop = LeaderLoop(
            "sardeenz-ondemand-surplus",
            pods.leading,
            self.step,
            settings.ondemand_tick_seconds,
            on_follow=self.settling.reset,
        )

    def start(self) -> None:
        self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()

    def decide(self) -> list[Reduction]:
        """What one round would do now (nothing while membership is settling)."""
        pods = self._pods
        live = pods.live()
        if not self.settling.stable(self._term(), live, self._now()):
            return []
        moving = self._moving()
        copies = [Copy(pod, inst) for pod in live for inst in pods.on(pod)]
        return surplus(copies, lambda n: n not in moving and self._reducible(n))

    def orphaned(self) -> Orphans:
        """What to do now about withdrawals earlier terms left (``orphans``; no settling
        wait: it never takes a route away, and a held copy never serves again)."""
        pods, moving = self._pods, self._moving()
        live = pods.live()
        copies = [Copy(pod, inst) for pod in live for inst in pods.on(pod)]
        withdrawn = {(pod, i): t for pod in live for i, t in pods.withdrawals(pod).items()}
        held = {(pod, i): t for pod in live for i, t in pods.holds(pod).items()}
        reducible = self._reducible
        return orphans(
            copies, withdrawn, held, self._term(), lambda n: n not in moving and reducible(n)
        )

    async def step(self) -> None:
        found = self.orphaned()
        for c in found.advertise:
            log.warning(
                "%s: its only routable copy %s on pod %s was withdrawn by a previous leader; "
                "advertising it again",
                c.instance.served_model_name,
                c.instance.id,
                c.pod_id,
            )
            try:
                await self._call(self._pods.restore(c.pod_id, c.instance.id), "surplus_restore")
            except MoveFailed as exc:  # the next round tries again
                log.warning("advertising %s again failed: %s", c.instance.id, exc.reason)
        for c in found.unload:
            name = c.instance.served_model_name
            log.warning(
                "%s: copy %s on pod %s was drained for its unload by a previous leader; "
                "unloading it (the next request starts the model again)",
                name,
                c.instance.id,
                c.pod_id,
            )
            try:
                await self._call(self._pods.unload(c.pod_id, c.instance.id), "surplus_unload")
            except MoveFailed as exc:
                log.warning("unloading %s failed: %s", c.instance.id, exc.reason)
            else:
                STATS.action(name, "unload", "surplus")
        for reduction in self.decide():
            for go in reduction.drop:
                try:
                    await self._retire(reduction.keep, go)
                except MoveFailed as exc:
                    log.warning(
                        "surplus copy %s of %s on pod %s left for the next round: %s",
                        go.instance.id,
                        reduction.name,
                        go.pod_id,
                        exc.reason,
                    )
                    return  # membership or the cluster changed: decide again

    async def _retire(self, keep: Copy, go: Copy) -> None:
        pod, iid, name = go.pod_id, go.instance.id, go.instance.served_model_name
        log.info(
            "reducing %s to one on-demand copy: keeping %s on %s, retiring %s on %s",
            name,
            keep.instance.id,
            keep.pod_id,
            iid,
            pod,
        )
        # The kept copy may be one a previous leader withdrew to retire it and then died
        # (a withdrawal outlives its leader for its TTL, a minute and more): advertised
        # again, or the only copy left would be routed by its own pod alone until then
        # (the Kubernetes soak: every other pod answered model_not_ready for ~60 s).
        await self._call(self._pods.restore(keep.pod_id, keep.instance.id), "surplus_restore")
        if go.instance.status is InstanceStatus.ACTIVE:  # then the kept copy is active too
            await self._wait_routes(keep.pod_id, keep.instance.id, present=True)
            ttl = self.route_timeout * 2 + 60
            await self._call(self._pods.withdraw(pod, iid, ttl), "surplus_withdraw")
            try:
                await self._wait_routes(pod, iid, present=False)
                await asyncio.sleep(self.transit_grace)
                drained = self._pods.drain(pod, iid, self._drain_s)
                in_flight, cut = await self._call(drained, "surplus_drain")
            except MoveFailed:
                await self._restore(pod, iid)
                raise
            log.info("surplus copy %s drained: %d in flight, %d cut", iid, in_flight, cut)
        await self._call(self._pods.unload(pod, iid), "surplus_unload")
        STATS.action(name, "unload", "surplus")
        log.info("surplus copy %s of %s on pod %s unloaded", iid, name, pod)
