"""Memory baselines and the per-GPU memory budget shown by the API.

The seed: when a model becomes ready its memory footprint per GPU is
captured as its *baseline* (weights, CUDA graphs, context: what it holds
idle, before any request). With kvcached the KV cache is shared and elastic,
so the useful number is how much room is left for KV cache on each GPU::

    KV cache total = GPU total - model baselines - other processes

"Other processes" is memory on the GPU that none of our instances holds:
foreign processes, the driver's own reservation. It is ``used`` minus what
our instances hold now. What they hold is known per process when the
snapshot's processes can be matched to instances (the simulated inventory
tags them; for NVML the caller passes each instance's PIDs). When nothing on
a GPU can be matched (NVML in a container often sees host PIDs only), the
instances are assumed to sit at their baselines: ``used - baselines``.

Placement on a driver-backed inventory (NVML) also needs the memory that was
*promised* to an engine but that the engine has not taken yet: a vLLM engine
allocates its share only after tens of seconds of loading weights and
profiling, and until then the driver shows that memory as free. Like the
Kubernetes scheduler's "assumed" pods, a reservation counts until observed
usage replaces it: :func:`with_pending_reservations`. Waking a sleeping engine
takes its memory back, so it is checked the same way: :func:`wake_shortfalls`.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sardeenz.gpu.inventory import GpuInfo, GpuProcess

Baselines = Mapping[str, Mapping[int, int]]
"""``{instance_id: {gpu_index: bytes}}``."""


class GpuBudget(BaseModel):
    """One GPU's memory split, in bytes, serialised camelCase for the API."""

    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, frozen=True
    )

    index: int
    name: str
    simulated: bool = False
    total_bytes: int
    used_bytes: int
    free_bytes: int
    baseline_bytes: int = Field(description="sum of our instances' baselines on this GPU")
    other_bytes: int = Field(description="memory held by anything but our instances")
    kv_cache_total_bytes: int = Field(
        description="total - baselines - other: room for (shared) KV cache"
    )
    instances: dict[str, int] = Field(
        default_factory=dict, description="baseline bytes per instance id on this GPU"
    )


def _owner(proc: GpuProcess, known: Collection[str], pid_owner: Mapping[int, str]) -> str | None:
    if proc.instance_id is not None and proc.instance_id in known:
        return proc.instance_id
    if proc.pid is not None:
        return pid_owner.get(proc.pid)
    return None


def compute_budget(
    gpus: Iterable[GpuInfo],
    baselines: Baselines,
    *,
    instance_pids: Mapping[str, Collection[int]] | None = None,
) -> list[GpuBudget]:
    """The per-GPU budget for the given snapshot (see the module docstring).

    ``instance_pids`` maps instance ids to the PIDs holding their GPU memory
    (API server, EngineCore, workers). Results are floored at 0 so a
    snapshot taken mid-change never shows negative memory.
    """
    pid_owner = {pid: iid for iid, pids in (instance_pids or {}).items() for pid in pids}
    known = set(baselines) | set(instance_pids or {})
    result: list[GpuBudget] = []
    for gpu in gpus:
        per_instance = {
            iid: int(by_gpu[gpu.index])
            for iid, by_gpu in baselines.items()
            if by_gpu.get(gpu.index, 0) > 0
        }
        baseline = sum(per_instance.values())
        matched = [p for p in gpu.processes if _owner(p, known, pid_owner) is not None]
        ours_now = sum(p.used_bytes for p in matched) if matched else baseline
        other = max(0, gpu.used_bytes - ours_now)
        result.append(
            GpuBudget(
                index=gpu.index,
                name=gpu.name,
                simulated=gpu.simulated,
                total_bytes=gpu.total_bytes,
                used_bytes=gpu.used_bytes,
                free_bytes=gpu.free_bytes,
                baseline_bytes=baseline,
                other_bytes=other,
                kv_cache_total_bytes=max(0, gpu.total_bytes - baseline - other),
                instances=per_instance,
            )
        )
    return result


def held_by_instance(
    gpus: Iterable[GpuInfo],
    baselines: Baselines,
    *,
    instance_pids: Mapping[str, Collection[int]] | None = None,
) -> dict[str, dict[int, int]]:
    """What each instance holds now, ``{instance_id: {gpu_index: bytes}}``.

    Its processes' memory in the snapshot, matched as ``compute_budget`` matches them; an
    instance none of whose processes can be seen (NVML in a container sees host PIDs) is
    taken to hold its baseline. Instances with neither are absent.
    """
    pid_owner = {pid: iid for iid, pids in (instance_pids or {}).items() for pid in pids}
    known = set(baselines) | set(instance_pids or {})
    held: dict[str, dict[int, int]] = {}
    for gpu in gpus:
        for proc in gpu.processes:
            owner = _owner(proc, known, pid_owner)
            if owner is not None:
                by_gpu = held.setdefault(owner, {})
                by_gpu[gpu.index] = by_gpu.get(gpu.index, 0) + proc.used_bytes
    for iid, baseline in baselines.items():
        if iid not in held and baseline:
            held[iid] = {int(i): int(b) for i, b in baseline.items()}
    return held


def measure_baseline(
    gpus: Iterable[GpuInfo],
    *,
    gpu_ids: Collection[int],
    pids: Collection[int] = (),
    instance_id: str | None = None,
) -> dict[int, int] | None:
    """An instance's footprint per GPU from a snapshot taken when it became ready.

    Sums the memory of its processes (by PID, or by instance id for simulated
    GPUs) on each of its GPUs. None when none of them is visible in the
    snapshot (the caller may fall back to the used-memory delta around the
    load, or skip the baseline).
    """
    wanted = set(pids)
    found = False
    baseline: dict[int, int] = {}
    for gpu in gpus:
        if gpu.index not in gpu_ids:
            continue
        total = 0
        for p in gpu.processes:
            mine = (instance_id is not None and p.instance_id == instance_id) or (
                p.pid is not None and p.pid in wanted
            )
            if mine:
                found = True
                total += p.used_bytes
        baseline[gpu.index] = total
    return baseline if found else None


@dataclass(frozen=True, slots=True)
class Reservation:
    """GPU memory promised to one of our engines when it was placed.

    ``bytes_per_gpu`` is the instance's ``reservedBytesPerGpu`` (what
    :func:`sardeenz.gpu.selection.plan_placement` checked, on the smallest of
    its GPUs); ``pids`` are the engine's processes (API server, EngineCore,
    workers), whose memory in the snapshot is already taken, not pending.
    """

    instance_id: str
    gpu_ids: tuple[int, ...]
    bytes_per_gpu: int
    pids: frozenset[int] = frozenset()


def _promised(gpu: GpuInfo, smallest_total: int, bytes_per_gpu: int) -> int:
    """What the engine takes on ``gpu``: one vLLM fraction of each GPU's total, so a
    larger GPU of a mixed tensor-parallel set gets proportionally more (as placed)."""
    if smallest_total <= 0:
        return bytes_per_gpu
    return bytes_per_gpu * gpu.total_bytes // smallest_total


def pending_bytes_by_gpu(
    gpus: Sequence[GpuInfo], reservations: Iterable[Reservation]
) -> dict[int, int]:
    """Per GPU index, the reserved bytes the snapshot does not show as used yet.

    For each reservation and each of its GPUs:
    ``max(0, promised - what the snapshot attributes to its processes)``, where
    processes are matched by PID (or by instance id, for simulated GPUs). An
    engine that has taken part of its share counts only for the rest; one that
    has taken it all (or more: KV cache growth) counts for nothing. Unmatched
    processes (NVML in a container sees host PIDs) leave the whole reservation
    pending: refusing a load for the tens of seconds an engine starts is
    better than two engines dying of CUDA out-of-memory. GPUs absent from the
    snapshot are skipped.
    """
    by_index = {g.index: g for g in gpus}
    pending: dict[int, int] = {}
    for res in reservations:
        if res.bytes_per_gpu <= 0:
            continue
        mine = [by_index[i] for i in dict.fromkeys(res.gpu_ids) if i in by_index]
        if not mine:
            continue
        smallest = min(g.total_bytes for g in mine)
        for gpu in mine:
            taken = sum(
                p.used_bytes
                for p in gpu.processes
                if (p.pid is not None and p.pid in res.pids) or p.instance_id == res.instance_id
            )
            rest = max(0, _promised(gpu, smallest, res.bytes_per_gpu) - taken)
            if rest:
                pending[gpu.index] = pending.get(gpu.index, 0) + rest
    return pending


def with_pending_reservations(
    gpus: Sequence[GpuInfo], reservations: Iterable[Reservation]
) -> list[GpuInfo]:
    """The snapshot with each GPU's ``free_bytes`` lowered by its pending reservations.

    See :func:`pending_bytes_by_gpu`. Free memory never goes below 0; total,
    used and processes stay as the driver reported them. Pure: the input
    snapshot is not changed.
    """
    pending = pending_bytes_by_gpu(gpus, reservations)
    return [
        gpu.model_copy(update={"free_bytes": max(0, gpu.free_bytes - pending[gpu.index])})
        if pending.get(gpu.index)
        else gpu
        for gpu in gpus
    ]


@dataclass(frozen=True, slots=True)
class WakeShortfall:
    """A GPU without room for what a sleeping engine needs back to wake up."""

    index: int
    name: str
    needed_bytes: int
    """What the engine takes back on this GPU (its share minus what it still holds)."""
    free_bytes: int
    """Free memory after the pending reservations of other engines."""


def wake_shortfalls(
    gpus: Sequence[GpuInfo], waking: Reservation, others: Iterable[Reservation]
) -> list[WakeShortfall]:
    """The GPUs on which ``waking`` cannot take its memory back, by index (empty: it fits).

    A sleeping vLLM engine gave most of its memory back, and another load may have
    been placed into it since. Waking takes it back: on each of its GPUs the engine
    needs its promised share minus what the snapshot still attributes to its
    processes (:func:`pending_bytes_by_gpu` for this one reservation), and that must
    fit in the GPU's free memory lowered by the ``others``' pending reservations
    (:func:`with_pending_reservations`; a reservation of ``waking`` itself among them
    is ignored). Without matching processes the whole share is needed, which can
    only refuse a wake that would have fitted by the engine's leftover, never let
    one through that does not. GPUs absent from the snapshot are skipped.
    """
    needed = pending_bytes_by_gpu(gpus, [waking])
    rest = [r for r in others if r.instance_id != waking.instance_id]
    return [
        WakeShortfall(gpu.index, gpu.name, needed[gpu.index], gpu.free_bytes)
        for gpu in sorted(with_pending_reservations(gpus, rest), key=lambda g: g.index)
        if needed.get(gpu.index, 0) > gpu.free_bytes
    ]


class EngineFootprints(Protocol):
    """What a budget needs of the engines running here (the supervisor has both)."""

    def baselines_bytes(self) -> dict[str, dict[int, int]]: ...

    def instance_pids(self) -> dict[str, list[int]]: ...


class GpuBudgets:
    """Per-GPU budgets of this node's engines (``GET /api/gpus``, kvcached limits)."""

    def __init__(self, engines: EngineFootprints) -> None:
        self._engines = engines

    def of(self, gpus: list[GpuInfo]) -> list[GpuBudget]:
        """Per-GPU budget of a snapshot: model baselines, other processes, KV cache total."""
        e = self._engines
        return compute_budget(gpus, e.baselines_bytes(), instance_pids=e.instance_pids())
