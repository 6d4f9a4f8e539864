"""The leader places loads: the cluster snapshot, the memory need, the scheduler's choice.

``ClusterPlacement`` turns what it knows into the pure scheduler's inputs
(cluster/scheduler.py) and acts on its answer:

* the snapshot: this pod's fresh heartbeat and every peer's last one (GPU
  figures with the memory each pod's ledger promised), the failure detector's
  state per pod, minus nothing, plus the placements this leader made whose
  effect no heartbeat shows yet (:class:`_Recent`), so two loads placed in the
  same heartbeat interval do not both take the same free memory;
* the need per GPU, per pod: the memory fit check's own figure
  (``memory.fit.check_fit``: the best profile for the pod's GPU model, else the
  estimate) judged on that pod's GPUs, and what the load will book (its
  ``gpuMemoryLimit``, or the engine's default footprint), whichever is more;
* the load: sent to the chosen pod with its GPUs pinned (``gpuIds``), through
  ``/internal/models/load`` fenced by the leader's term, or loaded here when
  the leader is the chosen pod. The pod's own ledger still admits it (the
  scheduler chooses, the ledger decides), so a refusal there comes back as is.

Placements are serialized by one lock (choose, order, book), as the ledger
serializes admissions on one pod.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from sardeenz.cluster.membership.election import PeerState
from sardeenz.cluster.membership.peers import Heartbeat
from sardeenz.cluster.membership.service import Membership
from sardeenz.cluster.orders import PodOrders
from sardeenz.cluster.scheduler import (
    GIB,
    ClusterSnapshot,
    GpuState,
    Placement,
    PlacementRequest,
    PodState,
    Refusal,
    Strategy,
    matches_type,
    schedule,
)
from sardeenz.config import Settings
from sardeenz.domain import EngineKind, LoadRequest, ModelInstance
from sardeenz.engines import get_adapter
from sardeenz.errors import Conflict, InvalidRequest
from sardeenz.gpu.inventory import GpuInfo, GpuInventory
from sardeenz.gpu.selection import GB
from sardeenz.memory.fit import check_fit, fit_request_for_load
from sardeenz.runtime.supervisor import Supervisor
from sardeenz.store.profiles import ProfileRepository

RECENT_TTL_SECONDS = 60.0
"""A placement no heartbeat has shown after this long is forgotten (the load failed)."""


@dataclass(frozen=True, slots=True)
class _Recent:
    """A placement this leader made that the pod's heartbeats may not show yet."""

    instance_id: str
    pod_id: str
    gpu_ids: tuple[int, ...]
    bytes_per_gpu: int
    at: float


@dataclass(frozen=True, slots=True)
class Decision:
    """What ``POST /api/cluster/schedule`` answers (and what a load acts on)."""

    strategy: Strategy
    result: Placement | Refusal
    source: str | None
    """Where the need came from on the chosen pod: profile, estimate, unknown, booking."""

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"strategy": self.strategy.value}
        if isinstance(self.result, Refusal):
            out.update(
                placed=False,
                verdict=self.result.message(),
                reasons=self.result.by_pod,
            )
            return out
        p = self.result
        out.update(
            placed=True,
            podId=p.pod_id,
            gpuIds=list(p.gpu_ids),
            needBytesPerGpu=p.need_bytes_per_gpu,
            needSource=self.source,
            freeAfterBytes={str(i): b for i, b in p.free_after_bytes},
            minFreeAfterBytes=p.min_free_after_bytes,
            verdict=p.verdict(),
        )
        return out


class ClusterPlacement:
    def __init__(
        self,
        membership: Membership,
        settings: Settings,
        supervisor: Supervisor,
        inventory: GpuInventory,
        orders: PodOrders,
        profiles: ProfileRepository,
    ) -> None:
        self._m = membership
        self._settings = settings
        self._supervisor = supervisor
        self._inventory = inventory
        self._orders = orders
        self._profiles = profiles
        self._lock = asyncio.Lock()
        self._recent: list[_Recent] = []

    @property
    def strategy(self) -> Strategy:
        return Strategy(self._settings.scheduler_strategy)

    # ------------------------------------------------------------------ inputs
    async def snapshot(self) -> ClusterSnapshot:
        m = self._m
        now = m.now()
        me = await m.local_heartbeat()
        pods = [_pod(me, None)]
        for peer in m.peers.all():
            state = m.detector.state(peer.pod_id, now)
            why = None
            if peer.heartbeat is None:
                why = "no heartbeat from this pod yet"
            elif state is PeerState.UNAVAILABLE:
                why = "pod unavailable (no heartbeat for too long)"
            elif state is PeerState.SUSPECT:
                why = "pod suspect (its heartbeats are late)"
            hb = peer.heartbeat or Heartbeat(
                pod_id=peer.pod_id, host=peer.address.host, port=peer.address.port, term=0
            )
            pods.append(_pod(hb, why))
        return ClusterSnapshot(tuple(self._with_recent(pods, now)))

    def _with_recent(self, pods: list[PodState], now: float) -> list[PodState]:
        """Count recent placements their pod's heartbeat does not list yet as promised."""
        listed = {
            p.pod_id: {i.id for i in (h.instances if h else [])}
            for p, h in ((p, self._heartbeat(p.pod_id)) for p in pods)
        }
        self._recent = [
            r
            for r in self._recent
            if now - r.at < RECENT_TTL_SECONDS and r.instance_id not in listed.get(r.pod_id, set())
        ]
        out = []
        for pod in pods:
            extra: dict[int, int] = {}
            for r in self._recent:
                if r.pod_id == pod.pod_id:
                    for i in r.gpu_ids:
                        extra[i] = extra.get(i, 0) + r.bytes_per_gpu
            if extra:
                gpus = tuple(
                    GpuState(
                        g.index,
                        g.name,
                        g.total_bytes,
                        g.free_bytes,
                        g.promised_bytes + extra.get(g.index, 0),
                    )
                    for g in pod.gpus
                )
                pod = PodState(pod.pod_id, gpus, pod.unavailable, pod.instances)
            out.append(pod)
        return out

    def _heartbeat(self, pod_id: str) -> Heartbeat | None:
        peer = self._m.peers.get(pod_id)
        return peer.heartbeat if peer is not None else None

    async def request_for(
        self, req: LoadRequest, snapshot: ClusterSnapshot
    ) -> tuple[PlacementRequest, dict[str, str]]:
        """The scheduler's request for a load, and where each pod's need came from."""
        engine = req.engine or EngineKind(self._settings.effective_default_engine)
        adapter = get_adapter(engine)
        try:
            extra_args = adapter.validate_args(list(req.extra_args))
        except ValueError as exc:
            raise InvalidRequest(str(exc), code="invalid_extra_args") from exc
        target = await adapter.target(self._supervisor.installs)
        booked = (
            round(req.gpu_memory_limit * GB)
            if req.gpu_memory_limit is not None
            else adapter.default_footprint_bytes(extra_args)
        )
        min_vram = round(req.min_vram_gib * GIB) if req.min_vram_gib is not None else None
        needs: dict[str, int | None] = {}
        sources: dict[str, str] = {}
        verdicts: dict[tuple[str, ...], tuple[int | None, str]] = {}
        fit_question = fit_request_for_load(req).model_copy(update={"gpu_ids": None})
        for pod in snapshot.pods:
            eligible = [
                g
                for g in pod.gpus
                if matches_type(g.name, req.gpu_type)
                and (min_vram is None or g.total_bytes >= min_vram)
            ]
            names = tuple(sorted({g.name for g in eligible}))
            if not names or req.force or not target.uses_gpus:
                needs[pod.pod_id], sources[pod.pod_id] = booked, "booking"
                continue
            if names not in verdicts:  # the profile chosen depends on the GPU model only
                verdict = await check_fit(
                    fit_question,
                    inventory=self._inventory,
                    profiles=self._profiles,
                    gpus=[_gpu_info(g) for g in eligible],
                )
                verdicts[names] = (verdict.needed_bytes_per_gpu, verdict.source)
            minimum, source = verdicts[names]
            known = [b for b in (minimum, booked) if b is not None]
            needs[pod.pod_id] = max(known) if known else None
            sources[pod.pod_id] = source if minimum is not None else "booking"
        request = PlacementRequest(
            need_by_pod=needs,
            tensor_parallel_size=req.tensor_parallel_size,
            gpu_type=req.gpu_type,
            min_vram_bytes=min_vram,
            gpu_ids=tuple(req.gpu_ids) if req.gpu_ids else None,
            uses_gpus=target.uses_gpus,
        )
        return request, sources

    # ----------------------------------------------------------------- actions
    async def decide(self, req: LoadRequest) -> Decision:
        """``POST /api/cluster/schedule``: where the load would go now (nothing is done)."""
        snapshot = await self.snapshot()
        request, sources = await self.request_for(req, snapshot)
        result = schedule(snapshot, request, self.strategy)
        source = sources.get(result.pod_id) if isinstance(result, Placement) else None
        return Decision(self.strategy, result, source)

    async def place(self, req: LoadRequest, *, on_demand: bool = False) -> ModelInstance | None:
        """Load where the scheduler says (cluster mode, no ``podId``); None on a single node.

        Raises ``Conflict`` (409 ``no_pod_fits``) with the per-pod reasons when no
        pod can take it, and whatever the chosen pod's ledger raises. ``on_demand``
        marks the instance as a catalog model's start on demand (cluster/ondemand.py).
        """
        m = self._m
        if not m.active:
            return None
        if not m.is_leader():  # a follower redirects admin writes, but leadership may move
            raise Conflict(
                f"only the leader places loads; the leader is {m.leader()!r}", code="not_leader"
            )
        async with self._lock:
            decision = await self.decide(req)
            result = decision.result
            if isinstance(result, Refusal):
                raise Conflict(
                    f"{result.message()} (strategy {decision.strategy.value})",
                    code="no_pod_fits",
                    reasons=result.by_pod,
                    strategy=decision.strategy.value,
                )
            pinned = req.model_copy(
                update={"pod_id": None, "gpu_ids": list(result.gpu_ids) or None}
            )
            if result.pod_id == m.identity.pod_id:
                return await self._supervisor.load(pinned, on_demand=on_demand)
            instance = await self._orders.load_on(result.pod_id, pinned, on_demand=on_demand)
            assert instance is not None  # another pod: load_on answers its instance
            if result.gpu_ids and result.need_bytes_per_gpu:
                self._recent.append(
                    _Recent(
                        instance.id,
                        result.pod_id,
                        result.gpu_ids,
                        result.need_bytes_per_gpu,
                        m.now(),
                    )
                )
            return instance


def _pod(hb: Heartbeat, unavailable: str | None) -> PodState:
    gpus = tuple(
        GpuState(g.index, g.name, g.total_bytes, g.free_bytes, g.promised_bytes) for g in hb.gpus
    )
    return PodState(hb.pod_id, gpus, unavailable, len(hb.instances))


def _gpu_info(g: GpuState) -> GpuInfo:
    """A GPU of another pod as the fit check reads it (only name and memory matter)."""
    return GpuInfo(
        index=g.index,
        name=g.name,
        uuid=f"pod-gpu-{g.index}",
        total_bytes=g.total_bytes,
        used_bytes=max(0, g.total_bytes - g.free_bytes),
        free_bytes=g.free_bytes,
    )
