"""The memory ledger: the one place that decides whether an engine may take memory.

Every question "may this engine have memory here, now, and how much" goes
through one :class:`MemoryLedger` under one ``asyncio.Lock``:

* a load (:meth:`MemoryLedger.admit_load`): the profile or estimate verdict
  (``memory.fit``, refused with 409 ``model_does_not_fit`` unless forced),
  the GPU choice and memory fraction (``gpu.selection``), the attention
  backend flag, the kvcached segment, and for an engine that runs on host
  memory (vLLM's CPU build) the host-RAM check (``memory.hostmem``);
* a wake-up (:meth:`MemoryLedger.admit_wake`): can the sleeping engine take
  its memory back (409 ``insufficient_gpu_memory``);
* ``POST /api/memory/profiles/check`` (:meth:`MemoryLedger.check`), which
  is the verdict step of a load, answered alone: the same function
  (``memory.fit.check_fit``) on the same snapshot, under the same lock.

Why one lock: two loads judged concurrently both see the same free memory and
both fit; judged one after the other, the second sees the first's promise.
The lock covers the decision and the booking of its result, not the engine's
start-up (which takes seconds to minutes).

Promised memory (the Kubernetes scheduler's "assumed pods", see
``memory.promises``): what was granted to an engine that has not allocated it
yet counts as used. The supervisor reports each step: :meth:`commit` (spawned),
:meth:`settle` (active), :meth:`stopping`, :meth:`release` (gone), and
:meth:`admit_wake` / :meth:`wake_done` around a wake-up.

One inventory interface. The ledger writes what it decides into the
inventory's books (``gpu.inventory.GpuBooks``: ``claim``, ``set_usage``,
``release``) and reads free memory from its snapshot, whatever the inventory
is. Simulated GPUs are books, so a claim shows in the next snapshot at once
and the promise is never pending beyond it; a driver (NVML) keeps no books,
so the promise covers the gap until the engine allocates. A wake-up first
takes its memory back in the books (simulated GPUs refuse when it is gone),
then checks the driver's view for the rest. The ledger never asks which
inventory it has. (One difference remains by construction: a promise on GPUs
of different sizes grows with each GPU's total, as vLLM's fraction does,
while simulated books hold the same bytes on each; on such mixed sets the
simulated GPUs may count a little more as pending while an engine starts.)

Refusals keep one shape: ``Conflict`` (409) with a ``code`` and, for GPU
memory, the per-GPU free figures of ``gpu.selection``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass

from sardeenz import proctree
from sardeenz.config import Settings
from sardeenz.domain import InstanceStatus, LoadRequest, ModelInstance
from sardeenz.engines.base import EngineTarget
from sardeenz.errors import Conflict, InvalidRequest
from sardeenz.gpu.budget import (
    Reservation,
    measure_baseline,
    pending_bytes_by_gpu,
    with_pending_reservations,
)
from sardeenz.gpu.capability import attention_backend_override
from sardeenz.gpu.inventory import GpuBooks, GpuInfo, GpuInventory, GpuOutOfMemory, books_for
from sardeenz.gpu.kvcached import SegmentTracker, ipc_name, should_enable
from sardeenz.gpu.selection import plan_placement
from sardeenz.memory import hostmem
from sardeenz.memory.fit import check_fit, fit_request_for_load, load_refusal
from sardeenz.memory.models import FitRequest, FitVerdict
from sardeenz.memory.promises import Promise, reservations, wake_refusal
from sardeenz.store.profiles import ProfileRepository
from sardeenz.units import gib

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Admission:
    """What the ledger granted a load (and holds for it until :meth:`MemoryLedger.release`)."""

    gpu_ids: list[int]
    gpu_memory_utilization: float | None
    reserved_bytes_per_gpu: int | None
    """Bytes promised on each GPU (on the smallest one if sizes differ); None without GPUs."""
    backend_args: list[str]
    """Flags to append to the engine's argv (the attention backend for old GPUs)."""
    warnings: list[str]
    kvcached_ipc_name: str | None
    host_bytes: int
    """Host memory promised to an engine that runs on host memory (0: none)."""


class MemoryLedger:
    """Admission for load, wake and fit checks; the books of promised memory."""

    def __init__(
        self,
        settings: Settings,
        inventory: GpuInventory,
        profiles: ProfileRepository,
        segments: SegmentTracker | None = None,
    ) -> None:
        self.settings = settings
        self.inventory = inventory
        self.segments = segments or SegmentTracker()
        self._books: GpuBooks = books_for(inventory)
        self._profiles = profiles
        self._host = hostmem.HostMemoryBook()
        self._held: dict[str, Promise] = {}
        self._offloaded: dict[str, int] = {}
        """Host RAM holding the weights of level-1 sleeping engines, by instance."""
        self._lock = asyncio.Lock()

    # --- fit check -----------------------------------------------------------------
    async def check(self, request: FitRequest) -> FitVerdict:
        """``POST /api/memory/profiles/check``: the verdict a load would get now."""
        async with self._lock:
            return await self._verdict(request, await self.inventory.snapshot())

    async def _verdict(self, request: FitRequest, gpus: Sequence[GpuInfo]) -> FitVerdict:
        return await check_fit(
            request, inventory=self.inventory, profiles=self._profiles, gpus=gpus
        )

    async def _with_promises(self, gpus: list[GpuInfo]) -> tuple[list[GpuInfo], dict[int, int]]:
        """The GPUs with promised memory counted as used, and the promised bytes per GPU."""
        if not gpus:
            return gpus, {}
        promised = await self._pending()
        return (
            with_pending_reservations(gpus, promised),
            pending_bytes_by_gpu(gpus, promised),
        )

    async def promised_bytes_by_gpu(self, gpus: Sequence[GpuInfo]) -> dict[int, int]:
        """Bytes per GPU promised to engines that have not taken them yet (as placement
        counts them); the cluster heartbeat carries them to the leader's scheduler."""
        if not gpus or not any(p.pending for p in self._held.values()):
            return {}
        return pending_bytes_by_gpu(gpus, await self._pending())

    # --- load ----------------------------------------------------------------------
    async def admit_load(
        self,
        instance_id: str,
        req: LoadRequest,
        target: EngineTarget,
        extra_args: list[str],
        default_bytes: int | None,
    ) -> Admission:
        """Decide a load and hold its memory for ``instance_id`` (or raise, promise nothing).

        ``extra_args`` are the validated user flags; ``default_bytes`` the engine's
        own footprint when the request gives no ``gpuMemoryLimit``
        (``EngineAdapter.default_footprint_bytes``). Raises ``Conflict`` (409)
        ``model_does_not_fit`` / ``insufficient_gpu_memory`` /
        ``insufficient_host_memory`` and ``InvalidRequest`` (400) for impossible GPU
        requests, as the fit check and the placement define them.

        The verdict judges the model against what the GPUs hold now (as
        ``check`` answers it); placement then also counts the memory promised to
        engines still starting or waking up, so its refusal can say so.
        """
        async with self._lock:
            gpus = await self.inventory.snapshot()
            refusal = None
            if not req.force:
                refusal = load_refusal(await self._verdict(fit_request_for_load(req), gpus))
            if not target.uses_gpus:
                gpus = []
            gpus, pending = await self._with_promises(gpus)
            # Placement first: its refusals (memory that is not free) are the ones
            # ``force`` cannot override, so a refusal that offers ``force`` is only
            # given when forcing would actually start the engine.
            admission = self._place(req, target, gpus, pending, extra_args, default_bytes)
            if refusal is not None:
                raise refusal
            if not target.uses_gpus:
                admission = dataclasses.replace(
                    admission, host_bytes=await self._host_bytes(req, extra_args)
                )
            self._hold(instance_id, admission)
            return admission

    def _place(
        self,
        req: LoadRequest,
        target: EngineTarget,
        gpus: list[GpuInfo],
        pending: dict[int, int],
        extra_args: list[str],
        default_bytes: int | None,
    ) -> Admission:
        """GPUs, memory fraction, attention-backend flag, kvcached segment for a load.

        An engine on host memory gets the empty placement whatever GPUs the node
        has: no ``CUDA_VISIBLE_DEVICES``, no ``--gpu-memory-utilization``, no kvcached.
        """
        if not target.uses_gpus and req.gpu_ids:
            raise InvalidRequest(
                "gpuIds cannot be used: vLLM runs on CPU here (its CPU build, or "
                "SARDEENZ_VLLM_DEVICE=cpu)",
                code="unknown_gpu",
                unknownGpuIds=list(req.gpu_ids),
                availableGpuIds=[],
            )
        try:
            placement = plan_placement(
                gpus,
                gpu_ids=req.gpu_ids,
                tensor_parallel_size=req.tensor_parallel_size,
                gpu_memory_limit_gb=req.gpu_memory_limit,
                default_limit_bytes=default_bytes,
            )
        except Conflict as exc:
            if exc.code != "insufficient_gpu_memory" or not pending:
                raise
            held = ", ".join(f"GPU{i} {gib(b)}" for i, b in sorted(pending.items()))
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
        return Admission(
            gpu_ids=placement.gpu_ids,
            gpu_memory_utilization=placement.gpu_memory_utilization,
            reserved_bytes_per_gpu=placement.bytes_per_gpu if placement.gpu_ids else None,
            backend_args=backend_args,
            warnings=[*placement.warnings, *backend_warnings],
            kvcached_ipc_name=ipc,
            host_bytes=0,
        )

    async def _host_bytes(self, req: LoadRequest, extra_args: list[str]) -> int:
        """Refuse (409 ``insufficient_host_memory``) a host-memory engine that cannot fit.

        Returns the estimate to hold while it starts; ``force`` skips the refusal
        but the estimate is still held, so later loads see it.
        """
        estimate, available = await asyncio.to_thread(
            lambda: (
                hostmem.estimate_cpu_engine(self.settings, req.model_path.strip(), extra_args),
                hostmem.available_bytes(),
            )
        )
        if not req.force:
            self._host.check(estimate, available)
        return estimate.total

    def _hold(self, instance_id: str, admission: Admission) -> None:
        promise = Promise(
            gpu_ids=tuple(admission.gpu_ids), bytes_per_gpu=admission.reserved_bytes_per_gpu or 0
        )
        self._held[instance_id] = promise
        if admission.kvcached_ipc_name:
            self.segments.record(admission.kvcached_ipc_name)
        if admission.host_bytes:
            self._host.reserve(instance_id, admission.host_bytes)
        self._claim(instance_id, promise)

    def _claim(self, instance_id: str, promise: Promise) -> None:
        if not promise.gpu_ids or not promise.bytes_per_gpu or self._books.usage(instance_id):
            return
        try:
            self._books.claim(instance_id, promise.gpu_ids, promise.bytes_per_gpu, pid=promise.pid)
        except (GpuOutOfMemory, ValueError) as exc:  # re-adopted over budget
            log.warning("instance %s: GPU memory not booked: %s", instance_id, exc)

    def commit(self, instance_id: str, pid: int | None, create_time: float | None) -> None:
        """The admitted engine was spawned as ``pid``: its processes hold the promise."""
        promise = self._held.get(instance_id)
        if promise is None:
            return
        promise.pid, promise.create_time = pid, create_time
        if promise.gpu_ids and promise.bytes_per_gpu:
            with contextlib.suppress(KeyError, GpuOutOfMemory):
                self._books.set_usage(instance_id, promise.bytes_per_gpu, pid=pid)

    def adopt(self, inst: ModelInstance, create_time: float | None) -> None:
        """Hold what an engine re-adopted after a controller restart was promised."""
        promise = Promise(
            gpu_ids=tuple(inst.gpu_ids),
            bytes_per_gpu=inst.reserved_bytes_per_gpu or 0,
            starting=inst.status == InstanceStatus.STARTING,
            pid=inst.process_id,
            create_time=create_time,
            core_pid=inst.engine_core_pid,
        )
        self._held[inst.id] = promise
        if inst.kvcached_ipc_name:
            self.segments.record(inst.kvcached_ipc_name)
        if inst.reserved_bytes_per_gpu is not None:
            self._claim(inst.id, promise)

    async def settle(self, instance_id: str, pid: int | None) -> dict[int, int] | None:
        """The engine is active: it holds its memory now, nothing is promised any more.

        Returns its footprint per GPU as the inventory sees it (its baseline), None
        when the snapshot cannot tell.
        """
        self._host.release(instance_id)
        promise = self._held.get(instance_id)
        if promise is None:
            return None
        promise.starting = False
        if not promise.gpu_ids:
            return None
        procs = [] if pid is None else await asyncio.to_thread(proctree.tree, pid)
        pids = [p.pid for p in procs]
        return measure_baseline(
            await self.inventory.snapshot(),
            gpu_ids=promise.gpu_ids,
            pids=pids,
            instance_id=instance_id,
        )

    def stopping(self, instance_id: str) -> None:
        """The engine is being stopped: whatever it has not taken, it never will."""
        promise = self._held.get(instance_id)
        if promise is not None:
            promise.stopping = True

    def release(self, instance_id: str) -> None:
        """The engine is gone: give back everything held for it (idempotent)."""
        self._held.pop(instance_id, None)
        self._offloaded.pop(instance_id, None)
        self._host.release(instance_id)
        self._books.release(instance_id)

    # --- sleep / wake --------------------------------------------------------------
    def note_usage(self, instance_id: str, bytes_per_gpu: int) -> None:
        """What an engine holds after a sleep or a wake-up, when only it can tell."""
        try:
            self._books.set_usage(instance_id, bytes_per_gpu)
        except (KeyError, GpuOutOfMemory) as exc:
            log.warning("instance %s: %s", instance_id, exc)

    async def admit_wake(self, inst: ModelInstance) -> None:
        """Let a sleeping engine take its memory back, or refuse (409
        ``insufficient_gpu_memory``) before it dies of out-of-memory.

        The books take the memory back first (simulated GPUs refuse when another
        model took it meanwhile); then the promise must fit in the snapshot's free
        memory after the other engines' pending promises. Until :meth:`wake_done`
        the promise is pending, so loads placed meanwhile leave room for it.
        """
        promise = self._held.get(inst.id)
        if promise is None or not promise.gpu_ids or not promise.bytes_per_gpu:
            return
        async with self._lock:
            promise.pid = inst.process_id or promise.pid
            promise.core_pid = inst.engine_core_pid
            before = self._books.usage(inst.id)
            try:
                self._books.set_usage(inst.id, promise.bytes_per_gpu)
            except GpuOutOfMemory as exc:
                raise Conflict(
                    f"cannot wake {inst.id}: {exc}", code="insufficient_gpu_memory"
                ) from exc
            except KeyError:
                before = {}
            try:
                await self._check_wake_fits(inst.id, promise)
            except BaseException:
                self._restore_usage(inst.id, before)
                raise
            promise.waking = True
            promise.before_wake = before

    def wake_done(self, instance_id: str, *, woke: bool) -> None:
        """The wake-up ended; if the engine did not wake, the books get back what it held."""
        if woke:  # its weights are back on the GPU
            self._offloaded.pop(instance_id, None)
        promise = self._held.get(instance_id)
        if promise is None or not promise.waking:
            return
        promise.waking = False
        if not woke:
            self._restore_usage(instance_id, promise.before_wake)
        promise.before_wake = {}

    def _restore_usage(self, instance_id: str, before: dict[int, int]) -> None:
        if before:
            with contextlib.suppress(KeyError, GpuOutOfMemory, ValueError):
                self._books.set_usage(instance_id, before)

    # --- host RAM of level-1 sleeps ------------------------------------------------
    def slept(self, inst: ModelInstance, level: int) -> None:
        """The engine fell asleep: at level 1 its weights now sit in host RAM (booked until
        it wakes or goes); at level 2 they are discarded."""
        if level == 1:
            self._offloaded[inst.id] = offload_bytes(inst)
        else:
            self._offloaded.pop(inst.id, None)

    async def host_room(self) -> int:
        """Bytes of host RAM another level-1 sleep may still fill: what the host has
        available (less what starting CPU-build engines were promised), and within
        ``SARDEENZ_SLEEP_HOST_MEMORY_GIB`` when set."""
        room = await asyncio.to_thread(hostmem.available_bytes) - self._host.pending()
        budget = self.settings.sleep_host_memory_gib
        if budget is not None:
            room = min(room, int(budget * hostmem.GIB) - sum(self._offloaded.values()))
        return max(0, room)

    async def _check_wake_fits(self, instance_id: str, promise: Promise) -> None:
        gpus = await self.inventory.snapshot()
        if not gpus:
            return
        (waking,) = await reservations([(instance_id, promise)])
        refusal = wake_refusal(
            instance_id, promise, gpus, waking, await self._pending(exclude=instance_id)
        )
        if refusal is not None:
            raise refusal

    async def _pending(self, *, exclude: str | None = None) -> list[Reservation]:
        """The reservations of the promises still pending (but ``exclude``'s)."""
        return await reservations(
            (iid, p) for iid, p in self._held.items() if iid != exclude and p.pending
        )


def offload_bytes(inst: ModelInstance) -> int:
    """Host RAM a level-1 sleep of ``inst`` fills: its weights on every GPU (as the engine
    logged them), or, unknown, all it was given (the larger figure: never too little)."""
    metrics = inst.memory_metrics
    per_gpu: float | None = None
    if metrics is not None and metrics.weights_memory_gib is not None:
        per_gpu = metrics.weights_memory_gib * hostmem.GIB
    elif inst.reserved_bytes_per_gpu is not None:
        per_gpu = inst.reserved_bytes_per_gpu
    return int((per_gpu or 0) * max(1, inst.tensor_parallel_size))
