"""Where a new engine runs and how much GPU memory it may take.

The seed's allocation strategy: query free memory (NVML), keep 2 GB per GPU
back for CUDA overhead, give each model its own limit, and pass that limit to
vLLM as ``--gpu-memory-utilization``.

Units. The API's ``gpuMemoryLimit`` is in GB and the seed's reserve is "2GB";
both are decimal gigabytes (10**9 bytes), the unit the seed's figures and
the load dialog use. Messages print GiB with one decimal (``sardeenz.units.gib``),
as vLLM's own log lines do: the reserve reads "1.9 GiB"; a refusal of a given
``gpuMemoryLimit`` speaks GB, the unit the caller typed (``sardeenz.units.gb``).
No ``force`` overrides this module's refusals: the memory is not free, so an
engine given it could not start (``force`` skips the fit estimate only).

No ``gpuMemoryLimit``. vLLM would take its default 0.9 of TOTAL memory,
which fails vLLM's own start-up check as soon as anything else holds memory
on the GPU. Instead:

* if the caller knows the engine's footprint (the simulated engine does) it
  passes ``default_limit_bytes`` and that is placed like a requested limit;
* otherwise the engine gets what is free after the reserve, capped at vLLM's
  default: ``min(0.9, (free - reserve) / total)`` over the chosen GPUs. On an
  idle GPU that is vLLM's usual behaviour; on a shared one it is the most
  that can work, and a warning says so (a limit keeps room for others).
  With nothing free beyond the reserve the load is refused (409).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from sardeenz.errors import Conflict, InvalidRequest
from sardeenz.gpu.inventory import GpuInfo
from sardeenz.units import gb, gib

GB = 10**9
RESERVED_BYTES = 2 * GB
"""Per-GPU headroom for CUDA contexts and allocator slack (the seed's 2 GB)."""

VLLM_DEFAULT_UTILIZATION = 0.9
"""vLLM's default ``--gpu-memory-utilization``: the cap when no limit is given."""

MIN_UTILIZATION = 0.001
"""Smallest fraction passed to vLLM (it rejects 0); 3 decimals as in the seed."""


@dataclass(frozen=True, slots=True)
class Placement:
    """The outcome of :func:`plan_placement`.

    ``gpu_ids`` empty means CPU mode (no GPUs on this node).
    ``gpu_memory_utilization`` is the value for ``--gpu-memory-utilization``
    (fraction of TOTAL memory of each GPU), None to pass no flag.
    ``bytes_per_gpu`` is what the engine may take on each chosen GPU (on the
    smallest one if their sizes differ): the amount a simulated engine books.
    ``gpus`` are the chosen GPUs' snapshots, in ``gpu_ids`` order, e.g. for
    :func:`sardeenz.gpu.capability.attention_backend_override`.
    """

    gpu_ids: list[int]
    gpu_memory_utilization: float | None
    bytes_per_gpu: int
    warnings: list[str] = field(default_factory=list)
    gpus: list[GpuInfo] = field(default_factory=list)


def available_bytes(gpu: GpuInfo) -> int:
    """Free memory after the reserve (never negative)."""
    return max(0, gpu.free_bytes - RESERVED_BYTES)


def _describe(gpu: GpuInfo, unit: Callable[[float | None], str] = gib) -> str:
    return f"GPU{gpu.index} {gpu.name} {unit(available_bytes(gpu))}"


def _free_report(gpus: Sequence[GpuInfo]) -> list[dict[str, object]]:
    return [
        {
            "index": g.index,
            "name": g.name,
            "totalBytes": g.total_bytes,
            "freeBytes": g.free_bytes,
            "availableBytes": available_bytes(g),
        }
        for g in gpus
    ]


def _insufficient(
    what: str,
    all_gpus: Sequence[GpuInfo],
    chosen: Sequence[GpuInfo],
    required: int,
    unit: Callable[[float | None], str] = gib,
) -> Conflict:
    free = ", ".join(_describe(g, unit) for g in all_gpus)
    return Conflict(
        f"not enough free GPU memory: {what}; free after the {unit(RESERVED_BYTES)} reserve: "
        f"{free} (force cannot override this: it skips the memory estimate, not free memory)",
        code="insufficient_gpu_memory",
        requiredBytesPerGpu=required,
        reservedBytesPerGpu=RESERVED_BYTES,
        chosenGpuIds=[g.index for g in chosen],
        gpus=_free_report(all_gpus),
    )


def _choose(
    gpus: Sequence[GpuInfo], gpu_ids: Sequence[int] | None, tensor_parallel_size: int
) -> list[GpuInfo]:
    by_index = {g.index: g for g in gpus}
    if gpu_ids:
        unknown = [i for i in gpu_ids if i not in by_index]
        if unknown:
            have = ", ".join(f"{g.index} ({g.name})" for g in gpus) or "none"
            raise InvalidRequest(
                f"unknown GPU id(s) {unknown}: this node's GPUs are {have}",
                code="unknown_gpu",
                unknownGpuIds=unknown,
                availableGpuIds=sorted(by_index),
            )
        if len(set(gpu_ids)) != len(gpu_ids):
            raise InvalidRequest("gpuIds must not repeat a GPU", code="invalid_gpu_ids")
        if len(gpu_ids) != tensor_parallel_size:
            raise InvalidRequest(
                f"tensorParallelSize {tensor_parallel_size} needs exactly that many gpuIds, "
                f"got {len(gpu_ids)}",
                code="invalid_gpu_ids",
            )
        return [by_index[i] for i in gpu_ids]
    if tensor_parallel_size > len(gpus):
        raise InvalidRequest(
            f"tensorParallelSize {tensor_parallel_size} needs {tensor_parallel_size} GPUs; "
            f"this node has {len(gpus)}",
            code="not_enough_gpus",
            availableGpuIds=sorted(by_index),
        )
    # Most free memory first; equal free memory -> lower index first.
    ranked = sorted(gpus, key=lambda g: (-g.free_bytes, g.index))
    return sorted(ranked[:tensor_parallel_size], key=lambda g: g.index)


def _fraction_up(x: float) -> float:
    """Round to 3 decimals, never below what was asked by more than float noise."""
    return math.ceil(x * 1000 - 1e-6) / 1000


def _fraction_down(x: float) -> float:
    return math.floor(x * 1000 + 1e-6) / 1000


def plan_placement(
    gpus: Sequence[GpuInfo],
    *,
    gpu_ids: Sequence[int] | None,
    tensor_parallel_size: int,
    gpu_memory_limit_gb: float | None,
    default_limit_bytes: int | None = None,
) -> Placement:
    """Choose GPUs and the memory fraction for a new engine (module docstring).

    Raises ``InvalidRequest`` (400) ``unknown_gpu`` / ``invalid_gpu_ids`` /
    ``not_enough_gpus`` for impossible requests and ``Conflict`` (409)
    ``insufficient_gpu_memory`` when the memory is not free right now.
    """
    if tensor_parallel_size < 1:
        raise InvalidRequest("tensorParallelSize must be at least 1", code="invalid_gpu_ids")
    if not gpus:
        if gpu_ids:
            raise InvalidRequest(
                f"unknown GPU id(s) {list(gpu_ids)}: this node has no GPUs",
                code="unknown_gpu",
                unknownGpuIds=list(gpu_ids),
                availableGpuIds=[],
            )
        cpu_notes = (
            ["this node has no GPUs: gpuMemoryLimit is ignored (CPU mode)"]
            if gpu_memory_limit_gb is not None
            else []
        )
        return Placement(
            gpu_ids=[], gpu_memory_utilization=None, bytes_per_gpu=0, warnings=cpu_notes
        )

    chosen = _choose(gpus, gpu_ids, tensor_parallel_size)
    smallest = min(g.total_bytes for g in chosen)
    ids = [g.index for g in chosen]
    on = "per GPU" if len(chosen) == 1 else f"on each of {len(chosen)} GPUs"
    warnings: list[str] = []

    limit = (
        round(gpu_memory_limit_gb * GB) if gpu_memory_limit_gb is not None else default_limit_bytes
    )
    if limit is not None:
        if limit <= 0:
            raise InvalidRequest("gpuMemoryLimit must be positive", code="invalid_memory_limit")
        # One fraction for all GPUs (vLLM's flag is per engine). Relative to
        # the smallest GPU so each gets at least the limit; a larger GPU in
        # the same set gets proportionally more, and must have room for it.
        # Rounding up adds at most 0.1% of total, which the reserve absorbs.
        fraction = min(1.0, max(MIN_UTILIZATION, _fraction_up(limit / smallest)))
        for g in chosen:
            need = limit * g.total_bytes // smallest
            if need > available_bytes(g):
                if gpu_memory_limit_gb is None:
                    raise _insufficient(f"needs {gib(limit)} {on}", gpus, chosen, limit)
                asked = f"gpuMemoryLimit {gpu_memory_limit_gb:g} GB {on}"
                raise _insufficient(asked, gpus, chosen, limit, gb)
        if len({g.total_bytes for g in chosen}) > 1:
            shares = ", ".join(f"GPU{g.index} {gib(fraction * g.total_bytes)}" for g in chosen)
            warnings.append(
                f"GPUs of different sizes share one --gpu-memory-utilization {fraction} "
                f"(a fraction of each GPU's total): {shares}"
            )
        return Placement(
            gpu_ids=ids,
            gpu_memory_utilization=fraction,
            bytes_per_gpu=limit,
            warnings=warnings,
            gpus=chosen,
        )

    # No limit: what is free after the reserve, capped at vLLM's default.
    fraction = min(
        VLLM_DEFAULT_UTILIZATION,
        _fraction_down(min(available_bytes(g) / g.total_bytes for g in chosen)),
    )
    if fraction < MIN_UTILIZATION:
        raise _insufficient(f"nothing free beyond the reserve {on}", gpus, chosen, 0)
    if fraction < VLLM_DEFAULT_UTILIZATION:
        warnings.append(
            f"no gpuMemoryLimit given: using --gpu-memory-utilization {fraction} "
            f"({gib(fraction * smallest)} {on}, what is free after the reserve) instead of "
            f"vLLM's default {VLLM_DEFAULT_UTILIZATION}; set gpuMemoryLimit to leave room "
            "for other models"
        )
    return Placement(
        gpu_ids=ids,
        gpu_memory_utilization=fraction,
        bytes_per_gpu=int(fraction * smallest),
        warnings=warnings,
        gpus=chosen,
    )


def cuda_env(gpu_ids: Sequence[int]) -> dict[str, str]:
    """Environment that makes CUDA's device numbering match NVML's indices.

    CUDA orders devices fastest-first by default, NVML by PCI bus id; without
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` "GPU 1" in the API could be another card
    inside the engine. Empty for CPU mode.
    """
    if not gpu_ids:
        return {}
    return {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in gpu_ids),
    }
