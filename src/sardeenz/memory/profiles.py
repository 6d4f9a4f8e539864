"""The memory profile service: profiles from running instances, lookups, fit checks.

A profile records what a model really took on one GPU model at one context
length, so the next "will it fit" answer for that model is a measurement
rather than an estimate. Taken from a running instance, the figures are the
ones the engine itself logged (``memoryMetrics``); the total is the larger
of the sum of those parts and what the node measured for the instance (its
baseline when it turned active, or else the memory booked for it), and
whatever the parts do not explain is ``overheadMemoryGib``.
"""

from __future__ import annotations

import uuid
from typing import Protocol, overload

from sardeenz.domain import InstanceStatus, ModelInstance, utcnow
from sardeenz.errors import Conflict, InvalidRequest, NotFound
from sardeenz.gpu.inventory import GpuInventory
from sardeenz.gpu.selection import GB
from sardeenz.memory.estimate import GIB
from sardeenz.memory.models import MemoryProfile, ProfileCreate
from sardeenz.store.profiles import ProfileRepository

_SERVING = (InstanceStatus.ACTIVE, InstanceStatus.SLEEPING)


def _round(x: float) -> float:
    return round(x, 4)


@overload
def _pick(given: float | None, reported: float | None, default: float) -> float: ...
@overload
def _pick(given: float | None, reported: float | None, default: None) -> float | None: ...
def _pick(given: float | None, reported: float | None, default: float | None) -> float | None:
    """An explicit figure of the request, else the instance's, else ``default`` (0 counts)."""
    if given is not None:
        return given
    return reported if reported is not None else default


def _not_found(profile_id: str) -> NotFound:
    return NotFound(f"no memory profile with id {profile_id!r}", code="profile_not_found")


class Instances(Protocol):
    """What a profile is made from: the instances this node runs (the supervisor's, which
    imports the ledger, so memory/ names only this much of it)."""

    def get(self, instance_id: str) -> ModelInstance: ...

    def list_instances(self) -> list[ModelInstance]: ...


class ProfileService:
    def __init__(
        self, repo: ProfileRepository, supervisor: Instances, inventory: GpuInventory
    ) -> None:
        self.repo = repo
        self._supervisor = supervisor
        self._inventory = inventory

    # --- queries ---------------------------------------------------------------------
    async def list_profiles(self, model_path: str | None = None) -> list[MemoryProfile]:
        return await self.repo.list_all(model_path)

    async def get(self, profile_id: str) -> MemoryProfile:
        profile = await self.repo.get(profile_id)
        if profile is None:
            raise _not_found(profile_id)
        return profile

    async def lookup(self, model_path: str, max_tokens: int, gpu_name: str | None) -> MemoryProfile:
        profile = await self.repo.lookup(model_path, max_tokens, gpu_name)
        if profile is None:
            on = f" on {gpu_name}" if gpu_name else ""
            raise NotFound(
                f"no memory profile for {model_path!r} at {max_tokens} tokens{on}",
                code="profile_not_found",
            )
        return profile

    async def delete(self, profile_id: str) -> None:
        if not await self.repo.delete(profile_id):
            raise _not_found(profile_id)

    # --- create ----------------------------------------------------------------------
    async def create(self, body: ProfileCreate) -> MemoryProfile:
        has_figures = body.weights_memory_gib is not None or body.kv_cache_available_gib is not None
        if body.instance_id is not None:
            inst = self._supervisor.get(body.instance_id)  # 404 instance_not_found
            return await self.repo.create(await self._from_instance(inst, body))
        if body.model_path is not None and not has_figures:
            inst = self._serving_instance(body.model_path)
            return await self.repo.create(await self._from_instance(inst, body))
        return await self.repo.create(self._explicit(body))

    def _serving_instance(self, model_path: str) -> ModelInstance:
        candidates = [
            i
            for i in self._supervisor.list_instances()
            if model_path in (i.model_path, i.served_model_name)
            and i.status in _SERVING
            and i.memory_metrics is not None
        ]
        if not candidates:
            raise NotFound(
                f"no running instance of {model_path!r} to profile; load it first, give "
                "instanceId, or send the memory figures explicitly",
                code="model_not_loaded",
            )
        return max(candidates, key=lambda i: i.started_at or i.created_at)

    def _explicit(self, body: ProfileCreate) -> MemoryProfile:
        required = {
            "modelPath": body.model_path,
            "maxTokens": body.max_tokens,
            "weightsMemoryGib": body.weights_memory_gib,
            "kvCacheAvailableGib": body.kv_cache_available_gib,
        }
        missing = [k for k, v in required.items() if v is None]
        if missing:
            raise InvalidRequest(
                f"a profile without instanceId needs {', '.join(missing)}",
                code="incomplete_profile",
                missing=missing,
            )
        assert body.model_path is not None
        assert body.max_tokens is not None
        weights = body.weights_memory_gib or 0.0
        graphs = body.cuda_graphs_gib or 0.0
        overhead = body.overhead_memory_gib or 0.0
        kv = body.kv_cache_available_gib or 0.0
        parts = weights + graphs + overhead + kv
        total = body.total_gpu_memory_gib if body.total_gpu_memory_gib is not None else parts
        if total + 1e-9 < parts:
            raise InvalidRequest(
                f"totalGpuMemoryGib {total} is less than the sum of its parts {parts:.4f}",
                code="inconsistent_profile",
            )
        return self._new(
            body,
            model_path=body.model_path,
            max_tokens=body.max_tokens,
            total=total,
            weights=weights,
            graphs=graphs,
            overhead=overhead,
            kv=kv,
            per_request=body.kv_cache_per_request_mib,
            gpu_name=body.gpu_name,
            gpu_total=body.gpu_total_memory_gib,
            default_name=f"{body.model_path} @ {body.max_tokens} tokens",
        )

    async def _from_instance(self, inst: ModelInstance, body: ProfileCreate) -> MemoryProfile:
        metrics = inst.memory_metrics
        if metrics is None or metrics.weights_memory_gib is None:
            raise Conflict(
                f"instance {inst.id} ({inst.status.value}) has not reported its memory yet; "
                "profile it once it is active",
                code="memory_metrics_unavailable",
            )
        max_tokens = body.max_tokens or metrics.max_model_len
        if max_tokens is None:
            raise InvalidRequest(
                f"instance {inst.id} did not report its max_model_len; give maxTokens",
                code="max_tokens_required",
            )
        gpu_index = body.gpu_index
        if gpu_index is not None and gpu_index not in inst.gpu_ids:
            raise InvalidRequest(
                f"instance {inst.id} runs on GPUs {inst.gpu_ids}, not {gpu_index}",
                code="invalid_gpu_index",
            )
        if gpu_index is None and inst.gpu_ids:
            gpu_index = inst.gpu_ids[0]
        gpu_name, gpu_total = None, None
        if gpu_index is not None:
            for gpu in await self._inventory.snapshot():
                if gpu.index == gpu_index:
                    gpu_name, gpu_total = gpu.name, gpu.total_bytes / GIB
        weights = _pick(body.weights_memory_gib, metrics.weights_memory_gib, 0.0)
        graphs = _pick(body.cuda_graphs_gib, metrics.cuda_graph_memory_gib, 0.0)
        kv = _pick(body.kv_cache_available_gib, metrics.kv_cache_available_gib, 0.0)
        parts = weights + graphs + kv
        measured = 0.0
        if gpu_index is not None and inst.memory_baseline_by_gpu:
            measured = inst.memory_baseline_by_gpu.get(gpu_index, 0.0) * GB / GIB
        elif inst.reserved_bytes_per_gpu:
            measured = inst.reserved_bytes_per_gpu / GIB
        total = _pick(body.total_gpu_memory_gib, max(parts, measured), parts)
        overhead = (
            body.overhead_memory_gib
            if body.overhead_memory_gib is not None
            else max(0.0, total - parts)
        )
        where = body.gpu_name or gpu_name or "CPU"
        return self._new(
            body,
            model_path=inst.model_path,
            max_tokens=max_tokens,
            total=total,
            weights=weights,
            graphs=graphs,
            overhead=overhead,
            kv=kv,
            per_request=_pick(
                body.kv_cache_per_request_mib, metrics.kv_cache_per_request_mib, None
            ),
            gpu_name=body.gpu_name or gpu_name,
            gpu_total=_pick(body.gpu_total_memory_gib, gpu_total, None),
            default_name=f"{inst.served_model_name} @ {max_tokens} tokens on {where}",
        )

    @staticmethod
    def _new(
        body: ProfileCreate,
        *,
        model_path: str,
        max_tokens: int,
        total: float,
        weights: float,
        graphs: float,
        overhead: float,
        kv: float,
        per_request: float | None,
        gpu_name: str | None,
        gpu_total: float | None,
        default_name: str,
    ) -> MemoryProfile:
        now = utcnow()
        return MemoryProfile(
            id=str(uuid.uuid4()),
            profile_name=body.profile_name or default_name,
            model_path=model_path,
            max_tokens=max_tokens,
            total_gpu_memory_gib=_round(total),
            weights_memory_gib=_round(weights),
            cuda_graphs_gib=_round(graphs),
            overhead_memory_gib=_round(overhead),
            kv_cache_available_gib=_round(kv),
            kv_cache_per_request_mib=None if per_request is None else _round(per_request),
            gpu_name=gpu_name,
            gpu_total_memory_gib=None if gpu_total is None else _round(gpu_total),
            comments=body.comments,
            created_by=body.created_by,
            created_at=now,
            updated_at=now,
        )
