"""PodScheduler: where in the cluster a model should run, as a pure function.

``schedule(snapshot, request, strategy)`` answers with a :class:`Placement`
(pod, GPUs, memory need, free memory after) or a :class:`Refusal` that says
for every pod why not. Nothing here does I/O or reads a clock, so the same
input always gets the same answer (the order pods and GPUs are listed in does
not matter either), and the leader, the dry-run endpoint and a preset
planner all get the verdict a load would get.

Memory figures are the ledger's own: a GPU's *available* memory is its free
memory minus what the pod's ledger promised to engines still starting or
waking (which a driver does not show yet), minus the per-GPU reserve of
``gpu.selection``; the *need* per GPU comes from the memory fit check (a
profile, else the estimate; see cluster/placement.py, which computes it per
pod because the best profile depends on the pod's GPU model). The pod's own
ledger still admits the load: the scheduler chooses, the ledger decides.

Strategies (``SARDEENZ_SCHEDULER_STRATEGY``):

* ``balanced`` (spread, the default): the GPUs that keep the most memory free
  after the load (the least-free chosen GPU counts), then the pod with the
  most free memory in total. Keeps headroom everywhere (KV cache, wake-ups)
  and spreads models over failure domains.
* ``maximize-models`` (pack, best fit): the GPUs that keep the least memory
  free after the load, then the pod with the least free memory in total, so
  large holes stay whole for large models.

Ties go to the lower pod id, then the lower GPU indices. Constraints: GPU
type (``gpuType``: a case-insensitive substring of the GPU name, or a glob
such as ``*A100*80GB``), minimum VRAM per GPU (its total), tensor parallelism
(``tensorParallelSize`` GPUs on one pod), pinned ``gpuIds``. A pod without
GPUs (CPU engines) takes a load only when no pod with GPUs can and the
request has no GPU constraint; among such pods, balanced takes the one with
the fewest instances and maximize-models the one with the most.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from sardeenz.gpu.selection import RESERVED_BYTES
from sardeenz.units import gib

GIB = 2**30


class Strategy(StrEnum):
    BALANCED = "balanced"
    MAXIMIZE_MODELS = "maximize-models"


@dataclass(frozen=True, slots=True)
class GpuState:
    """One GPU of one pod as its last heartbeat described it."""

    index: int
    name: str
    total_bytes: int
    free_bytes: int
    promised_bytes: int = 0
    """Promised by the pod's ledger to engines that have not taken it yet."""

    @property
    def available_bytes(self) -> int:
        """What a new engine may take: free, minus promised, minus the reserve."""
        return max(0, self.free_bytes - self.promised_bytes - RESERVED_BYTES)


@dataclass(frozen=True, slots=True)
class PodState:
    pod_id: str
    gpus: tuple[GpuState, ...] = ()
    unavailable: str | None = None
    """Why the pod cannot take a load now (unavailable, suspect, no heartbeat yet)."""
    instances: int = 0


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    pods: tuple[PodState, ...]


@dataclass(frozen=True, slots=True)
class PlacementRequest:
    """What a load asks of the cluster (built from a LoadRequest by cluster/placement.py)."""

    need_bytes_per_gpu: int | None = None
    """Bytes each chosen GPU must have available; None: unknown (any free memory will do)."""
    need_by_pod: Mapping[str, int | None] = field(default_factory=dict)
    """Per-pod needs where they differ (a profile taken on that pod's GPU model)."""
    tensor_parallel_size: int = 1
    gpu_type: str | None = None
    min_vram_bytes: int | None = None
    gpu_ids: tuple[int, ...] | None = None
    uses_gpus: bool = True
    """False for an engine that runs on host memory: every pod is a candidate, no GPUs."""
    pods: frozenset[str] | None = None
    """Only these pods are candidates (None: all)."""

    def need_on(self, pod_id: str) -> int | None:
        return self.need_by_pod.get(pod_id, self.need_bytes_per_gpu)


@dataclass(frozen=True, slots=True)
class Placement:
    pod_id: str
    gpu_ids: tuple[int, ...]
    need_bytes_per_gpu: int | None
    free_after_bytes: tuple[tuple[int, int], ...]
    """(GPU index, bytes available on it after the load), in ``gpu_ids`` order."""
    strategy: Strategy
    gpu_names: tuple[str, ...] = ()

    @property
    def min_free_after_bytes(self) -> int | None:
        return min((b for _, b in self.free_after_bytes), default=None)

    def verdict(self) -> str:
        """One line for people, e.g. ``pod-b, GPU 1 (NVIDIA L4): 11.2 GB free after``."""
        if not self.gpu_ids:
            return f"would go to {self.pod_id} (no GPUs: the engine runs on host memory)"
        gpus = ", ".join(
            f"GPU {i} ({n}): {gib(b)} free after"
            for (i, b), n in zip(self.free_after_bytes, self.gpu_names, strict=True)
        )
        need = (
            "memory need unknown"
            if self.need_bytes_per_gpu is None
            else f"needs {gib(self.need_bytes_per_gpu)} per GPU"
        )
        return f"would go to {self.pod_id}, {gpus} ({need})"


@dataclass(frozen=True, slots=True)
class Refusal:
    reasons: tuple[tuple[str, str], ...]
    """(pod id, why it cannot take the load), by pod id."""

    @property
    def by_pod(self) -> dict[str, str]:
        return dict(self.reasons)

    def message(self) -> str:
        if not self.reasons:
            return "no pod can take this load: the cluster has no pods"
        return "no pod can take this load: " + "; ".join(f"{p}: {r}" for p, r in self.reasons)


def matches_type(name: str, pattern: str | None) -> bool:
    """``gpuType``: a glob (``*``, ``?``, ``[``) or else a substring, case-insensitive."""
    if not pattern:
        return True
    n, p = name.casefold(), pattern.casefold()
    if any(c in p for c in "*?["):
        return fnmatch.fnmatchcase(n, p)
    return p in n


@dataclass(frozen=True, slots=True)
class _Candidate:
    key: tuple[object, ...]
    placement: Placement


def schedule(
    snapshot: ClusterSnapshot, request: PlacementRequest, strategy: Strategy
) -> Placement | Refusal:
    """The placement ``strategy`` chooses for ``request``, or why no pod can take it."""
    reasons: dict[str, str] = {}
    best: _Candidate | None = None
    for pod in sorted(snapshot.pods, key=lambda p: p.pod_id):
        if request.pods is not None and pod.pod_id not in request.pods:
            reasons[pod.pod_id] = "not a candidate for this request"
            continue
        found = _on_pod(pod, request, strategy)
        if isinstance(found, str):
            reasons[pod.pod_id] = found
        elif best is None or found.key < best.key:
            best = found
    if best is not None:
        return best.placement
    return Refusal(tuple(sorted(reasons.items())))


def book(snapshot: ClusterSnapshot, placement: Placement) -> ClusterSnapshot:
    """The snapshot after ``placement`` (its need promised on its GPUs, one more
    instance on its pod): to plan several loads in a row, e.g. a preset, each placed
    as if the ones before it had been loaded."""
    need = placement.need_bytes_per_gpu or 0
    chosen = set(placement.gpu_ids)
    pods = []
    for pod in snapshot.pods:
        if pod.pod_id == placement.pod_id:
            gpus = tuple(
                GpuState(g.index, g.name, g.total_bytes, g.free_bytes, g.promised_bytes + need)
                if g.index in chosen
                else g
                for g in pod.gpus
            )
            pod = PodState(pod.pod_id, gpus, pod.unavailable, pod.instances + 1)
        pods.append(pod)
    return ClusterSnapshot(tuple(pods))


def _on_pod(pod: PodState, request: PlacementRequest, strategy: Strategy) -> _Candidate | str:
    """The best placement on one pod, or why there is none."""
    if pod.unavailable:
        return pod.unavailable
    need = request.need_on(pod.pod_id)
    if not request.uses_gpus or not pod.gpus:
        return _host_candidate(pod, request, strategy)
    tp = request.tensor_parallel_size
    gpus = sorted(pod.gpus, key=lambda g: g.index)
    eligible = [
        g
        for g in gpus
        if matches_type(g.name, request.gpu_type)
        and (request.min_vram_bytes is None or g.total_bytes >= request.min_vram_bytes)
    ]
    if not eligible:
        return _no_eligible(gpus, request)
    if request.gpu_ids is not None:
        by_index = {g.index: g for g in eligible}
        missing = [i for i in request.gpu_ids if i not in by_index]
        if missing:
            return f"no eligible GPU {missing} here (has {[g.index for g in gpus]})"
        pinned = [by_index[i] for i in request.gpu_ids]
        short = [g for g in pinned if not _fits(g, need)]
        if short:
            return _shortfall(short, need, len(pinned))
        chosen = pinned
    else:
        if len(eligible) < tp:
            return (
                f"tensorParallelSize {tp} needs {tp} GPUs on one pod; {len(eligible)} eligible here"
            )
        fitting = [g for g in eligible if _fits(g, need)]
        if len(fitting) < tp:
            return _shortfall(eligible, need, tp)
        if strategy is Strategy.BALANCED:
            ordered = sorted(fitting, key=lambda g: (-g.available_bytes, g.index))
        else:
            ordered = sorted(fitting, key=lambda g: (g.available_bytes, g.index))
        chosen = sorted(ordered[:tp], key=lambda g: g.index)
    taken = need or 0
    after = tuple((g.index, g.available_bytes - taken) for g in chosen)
    least = min(b for _, b in after)
    pod_after = sum(g.available_bytes for g in gpus) - taken * len(chosen)
    ids = tuple(g.index for g in chosen)
    if strategy is Strategy.BALANCED:
        key: tuple[object, ...] = (0, -least, -pod_after, pod.pod_id, ids)
    else:
        key = (0, least, pod_after, pod.pod_id, ids)
    placement = Placement(
        pod_id=pod.pod_id,
        gpu_ids=ids,
        need_bytes_per_gpu=need,
        free_after_bytes=after,
        strategy=strategy,
        gpu_names=tuple(g.name for g in chosen),
    )
    return _Candidate(key, placement)


def _host_candidate(
    pod: PodState, request: PlacementRequest, strategy: Strategy
) -> _Candidate | str:
    """A pod without GPUs (or an engine on host memory): no GPU memory to check."""
    if request.uses_gpus:
        wanted = [
            w
            for w, given in (
                (f"gpuType {request.gpu_type!r}", request.gpu_type),
                ("minVramGiB", request.min_vram_bytes),
                ("gpuIds", request.gpu_ids),
            )
            if given
        ]
        if wanted:
            return f"this pod has no GPUs ({', '.join(wanted)} asked)"
    elif request.gpu_ids:
        return "gpuIds cannot be used: the engine runs on host memory"
    rank = pod.instances if strategy is Strategy.BALANCED else -pod.instances
    # After every GPU placement (prefix 1): a pod with GPUs is used when one can.
    placement = Placement(
        pod_id=pod.pod_id,
        gpu_ids=(),
        need_bytes_per_gpu=None,
        free_after_bytes=(),
        strategy=strategy,
    )
    return _Candidate((1, rank, 0, pod.pod_id, ()), placement)


def _fits(gpu: GpuState, need: int | None) -> bool:
    # Unknown need: the engine takes what is free, so something must be free.
    return gpu.available_bytes >= need if need is not None else gpu.available_bytes > 0


def _describe(gpus: Sequence[GpuState]) -> str:
    return ", ".join(f"GPU{g.index} {g.name} {gib(g.available_bytes)}" for g in gpus)


def _shortfall(gpus: Sequence[GpuState], need: int | None, count: int) -> str:
    on = "per GPU" if count == 1 else f"on each of {count} GPUs"
    wanted = "free memory" if need is None else gib(need)
    return (
        f"needs {wanted} {on}; available after promises and the "
        f"{gib(RESERVED_BYTES)} reserve: {_describe(gpus)}"
    )


def _no_eligible(gpus: Sequence[GpuState], request: PlacementRequest) -> str:
    names = sorted({g.name for g in gpus})
    parts = []
    if request.gpu_type:
        parts.append(f"named like {request.gpu_type!r}")
    if request.min_vram_bytes is not None:
        parts.append(f"with at least {request.min_vram_bytes / GIB:g} GiB")
    biggest = max(g.total_bytes for g in gpus) / GIB
    return f"no GPU {' and '.join(parts)} (has {', '.join(names)}; largest {biggest:.0f} GiB)"
