"""Will this model fit on this node's GPUs, now, given what is already loaded?

The answer uses the best matching memory profile when there is one (measured
on a real load, so it beats any estimate) and the estimate from the model
directory otherwise (:mod:`sardeenz.memory.estimate`), and says which it used.
Free memory comes from the GPU inventory snapshot, which already accounts for
every loaded engine (NVML's view, or the simulated inventory's books); the
seed's per-GPU reserve (2 GB for CUDA contexts) is kept back, as placement
does.

What "needed" means: the least an engine accepts to start, i.e. weights,
CUDA graphs and activations, and the KV cache of one request of the full
context length (vLLM refuses to start when its KV cache cannot hold one).
When the load would book a fixed ``gpuMemoryLimit``, that limit is what is
needed (and a limit below the minimum cannot work at all).

The memory ledger (:mod:`sardeenz.memory.ledger`) is the only caller: for
``POST /api/memory/profiles/check`` and, with :func:`fit_request_for_load`, for
every load, which it refuses with :func:`load_refusal` unless forced. It passes
the GPUs as placement sees them (memory promised to engines still starting
counted as used).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Sequence
from pathlib import Path

from sardeenz.domain import LoadRequest
from sardeenz.engines.vllm import flag_value
from sardeenz.errors import Conflict, InvalidRequest
from sardeenz.gpu.inventory import GpuInfo, GpuInventory
from sardeenz.gpu.selection import GB, RESERVED_BYTES, available_bytes
from sardeenz.memory.estimate import (
    GIB,
    MIB,
    EstimateError,
    MemoryEstimate,
    estimate_model_memory,
)
from sardeenz.memory.models import (
    FitRequest,
    FitSource,
    FitVerdict,
    GpuFit,
    MemoryBreakdown,
    MemoryProfile,
)
from sardeenz.store.profiles import ProfileRepository
from sardeenz.units import gb, gib

log = logging.getLogger(__name__)

_BASIS = {"profile": "measured profile", "estimate": "estimate"}
"""What a verdict's figures come from, as its reason says it (``source``)."""


def choose_profile(
    profiles: Sequence[MemoryProfile], max_tokens: int | None, gpu_names: Sequence[str]
) -> MemoryProfile | None:
    """The profile that best describes a load of ``max_tokens`` on GPUs named ``gpu_names``.

    Preference: the same context length (other lengths are rescaled), then a
    profile taken on a GPU of the same model, then the newest.
    """
    if not profiles:
        return None
    names = set(gpu_names)

    def rank(p: MemoryProfile) -> tuple[bool, bool, float]:
        same_len = max_tokens is None or p.max_tokens == max_tokens
        same_gpu = p.gpu_name is not None and p.gpu_name in names
        stamp = (p.updated_at or p.created_at).timestamp()
        return (same_len, same_gpu, stamp)

    return max(profiles, key=rank)


def profile_breakdown(
    profile: MemoryProfile, max_tokens: int | None
) -> tuple[MemoryBreakdown, int, list[str]]:
    """Bytes per GPU from a profile, KV rescaled linearly to ``max_tokens``."""
    notes: list[str] = []
    tokens = max_tokens or profile.max_tokens
    if profile.kv_cache_per_request_mib is not None:
        kv = profile.kv_cache_per_request_mib * MIB * tokens / profile.max_tokens
        if tokens != profile.max_tokens:
            notes.append(
                f"profile taken at maxTokens {profile.max_tokens}: KV cache per request "
                f"rescaled to {tokens}"
            )
    else:
        kv = profile.kv_cache_available_gib * GIB
        notes.append(
            "profile has no per-request KV figure: counting the whole KV cache the profiled "
            "engine took"
        )
    overhead = (profile.cuda_graphs_gib + profile.overhead_memory_gib) * GIB
    breakdown = MemoryBreakdown(
        weights_bytes=math.ceil(profile.weights_memory_gib * GIB),
        kv_cache_bytes=math.ceil(kv),
        overhead_bytes=math.ceil(overhead),
    )
    return breakdown, tokens, notes


def estimate_breakdown(estimate: MemoryEstimate) -> MemoryBreakdown:
    tp = estimate.tensor_parallel_size
    return MemoryBreakdown(
        weights_bytes=math.ceil(estimate.weights_bytes / tp),
        kv_cache_bytes=math.ceil(estimate.kv_bytes_per_request / tp),
        overhead_bytes=estimate.overhead_bytes,
    )


def _target_gpus(gpus: Sequence[GpuInfo], request: FitRequest) -> list[GpuInfo] | None:
    """The GPUs the caller pinned (validated), or None to let the check choose."""
    if not request.gpu_ids:
        return None
    by_index = {g.index: g for g in gpus}
    unknown = [i for i in request.gpu_ids if i not in by_index]
    if unknown:
        raise InvalidRequest(
            f"unknown GPU id(s) {unknown}", code="unknown_gpu", availableGpuIds=sorted(by_index)
        )
    if len(set(request.gpu_ids)) != len(request.gpu_ids):
        raise InvalidRequest("gpuIds must not repeat a GPU", code="invalid_gpu_ids")
    if len(request.gpu_ids) != request.tensor_parallel_size:
        raise InvalidRequest(
            f"tensorParallelSize {request.tensor_parallel_size} needs exactly that many "
            f"gpuIds, got {len(request.gpu_ids)}",
            code="invalid_gpu_ids",
        )
    return [by_index[i] for i in request.gpu_ids]


async def _source(
    request: FitRequest, profiles: ProfileRepository, gpu_names: Sequence[str]
) -> tuple[FitSource, MemoryBreakdown | None, int | None, MemoryProfile | None, list[str], str]:
    """Where the figures come from: profile, estimate, or nothing (with the reason)."""
    profile = choose_profile(
        await profiles.list_all(request.model_path), request.max_tokens, gpu_names
    )
    if profile is not None:
        breakdown, tokens, notes = profile_breakdown(profile, request.max_tokens)
        if request.tensor_parallel_size > 1:
            notes.append("profile figures are per GPU as measured; tensor parallelism not rescaled")
        return "profile", breakdown, tokens, profile, notes, ""
    path = Path(request.model_path)
    try:
        estimate = await asyncio.to_thread(
            estimate_model_memory,
            path,
            max_tokens=request.max_tokens,
            tensor_parallel_size=request.tensor_parallel_size,
            kv_cache_dtype=request.kv_cache_dtype,
            dtype=request.dtype,
        )
    except EstimateError as exc:
        return "unknown", None, request.max_tokens, None, [], f"no profile and no estimate: {exc}"
    notes = [
        *estimate.notes,
        "estimate: exact weights from safetensors headers, KV cache from config.json, "
        "overhead is an allowance",
    ]
    return "estimate", estimate_breakdown(estimate), estimate.max_tokens, None, notes, ""


def _gpu_fit(gpu: GpuInfo, needed: int | None) -> GpuFit:
    avail = available_bytes(gpu)
    return GpuFit(
        index=gpu.index,
        name=gpu.name,
        total_bytes=gpu.total_bytes,
        free_bytes=gpu.free_bytes,
        reserved_bytes=RESERVED_BYTES,
        available_bytes=avail,
        needed_bytes=needed,
        fits=None if needed is None else needed <= avail,
    )


async def check_fit(
    request: FitRequest,
    *,
    inventory: GpuInventory,
    profiles: ProfileRepository,
    gpus: Sequence[GpuInfo] | None = None,
) -> FitVerdict:
    """Answer "will ``request.model_path`` fit on this node's GPUs right now?".

    ``fits`` is True/False from a profile or an estimate, None when nothing is
    known about the model (then a load should not be refused). On a node
    without GPUs the answer is True: memory is the engine's business there.
    Raises ``InvalidRequest`` (400) ``unknown_gpu``/``invalid_gpu_ids`` for
    impossible ``gpuIds``. Never blocks the event loop (files are read in a
    worker thread). ``gpus``: the snapshot to judge by (default: the inventory's).
    """
    if gpus is None:
        gpus = await inventory.snapshot()
    pinned = _target_gpus(gpus, request)
    names = [g.name for g in (pinned if pinned is not None else gpus)]
    source, breakdown, tokens, profile, notes, why_unknown = await _source(request, profiles, names)
    tp = request.tensor_parallel_size
    base = {
        "model_path": request.model_path,
        "source": source,
        "profile_id": profile.id if profile else None,
        "profile_name": profile.profile_name if profile else None,
        "max_tokens": tokens,
        "tensor_parallel_size": tp,
        "breakdown": breakdown,
        "reserved_bytes_per_gpu": RESERVED_BYTES,
        "notes": notes,
    }
    minimum = (
        None
        if breakdown is None
        else breakdown.weights_bytes + breakdown.kv_cache_bytes + breakdown.overhead_bytes
    )
    if not gpus:
        return FitVerdict.model_validate(
            {
                **base,
                "fits": True,
                "needed_bytes_per_gpu": minimum,
                "reason": "this node has no GPUs (CPU mode): GPU memory is not checked",
            }
        )
    needed = minimum
    # A limit the caller gave is judged in its unit (GB), free memory with it.
    unit = gib if request.gpu_memory_limit is None else gb
    basis = _BASIS.get(source, "")
    if request.gpu_memory_limit is not None:
        limit = round(request.gpu_memory_limit * GB)
        asked = f"gpuMemoryLimit {request.gpu_memory_limit:g} GB"
        if minimum is not None and limit < minimum:
            fits_gpus = [_gpu_fit(g, minimum) for g in gpus]
            return FitVerdict.model_validate(
                {
                    **base,
                    "fits": False,
                    "needed_bytes_per_gpu": minimum,
                    "gpus": fits_gpus,
                    "reason": f"{asked} is below the {gb(minimum)} per GPU "
                    f"the model needs to start ({basis})",
                }
            )
        if minimum is None:
            # Nothing known about the model: the limit alone is what it needs.
            basis = asked
        needed = limit if minimum is None else max(limit, minimum)
    per_gpu = [_gpu_fit(g, needed) for g in gpus]
    if needed is None:
        return FitVerdict.model_validate(
            {**base, "fits": None, "gpus": per_gpu, "reason": why_unknown}
        )
    if pinned is not None:
        chosen = [f for f in per_gpu if f.index in {g.index for g in pinned}]
        fits = all(f.fits for f in chosen)
    else:
        fitting = sorted(
            (f for f in per_gpu if f.fits), key=lambda f: (-f.available_bytes, f.index)
        )
        chosen = sorted(fitting[:tp], key=lambda f: f.index)
        fits = len(fitting) >= tp
    on = "per GPU" if tp == 1 else f"on each of {tp} GPUs"
    reserve = unit(RESERVED_BYTES)
    if fits:
        where = ", ".join(f"GPU{f.index} {f.name} ({unit(f.available_bytes)} free)" for f in chosen)
        reason = f"fits ({basis}): needs {unit(needed)} {on}; {where} after the {reserve} reserve"
    else:
        free = ", ".join(f"GPU{f.index} {f.name} {unit(f.available_bytes)}" for f in per_gpu)
        reason = (
            f"does not fit ({basis}): needs {unit(needed)} {on}; free after the {reserve} "
            f"reserve: {free}"
        )
    return FitVerdict.model_validate(
        {
            **base,
            "fits": fits,
            "needed_bytes_per_gpu": needed,
            "chosen_gpu_ids": [f.index for f in chosen] if fits else [],
            "gpus": per_gpu,
            "reason": reason,
        }
    )


def parse_max_model_len(text: str) -> int | None:
    """vLLM's ``--max-model-len``: ``4096``, ``4k`` (x1000), ``4K`` (x1024); None for auto/-1."""
    text = text.strip()
    if not text or text in ("auto", "-1"):
        return None
    scale = {"k": 10**3, "m": 10**6, "g": 10**9, "K": 2**10, "M": 2**20, "G": 2**30}
    factor = scale.get(text[-1], 1)
    number = text[:-1] if text[-1] in scale else text
    try:
        value = int(float(number) * factor)
    except ValueError:
        return None
    return value if value > 0 else None


def fit_request_for_load(req: LoadRequest) -> FitRequest:
    """The fit question a load request asks (context length and dtypes from its extra args)."""
    args = list(req.extra_args)
    mml = flag_value(args, "--max-model-len")
    return FitRequest(
        model_path=req.model_path,
        max_tokens=parse_max_model_len(mml) if mml is not None else None,
        gpu_ids=req.gpu_ids,
        tensor_parallel_size=req.tensor_parallel_size,
        gpu_memory_limit=req.gpu_memory_limit,
        kv_cache_dtype=flag_value(args, "--kv-cache-dtype") or "auto",
        dtype=flag_value(args, "--dtype") or "auto",
    )


def load_refusal(verdict: FitVerdict) -> Conflict | None:
    """The 409 to raise for a load that will not fit (None when it fits or nobody knows)."""
    if verdict.fits is not False:
        return None
    return Conflict(
        f"{verdict.reason}; force: true skips this check and starts the engine anyway "
        "(it fails if the memory really is short; free memory itself is never overridden)",
        code="model_does_not_fit",
        fit=verdict.model_dump(mode="json"),
    )
