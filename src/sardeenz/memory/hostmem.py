"""Host memory for vLLM's CPU build: refuse a load that cannot fit before spawning it.

On a GPU the planner books GPU memory (``sardeenz.gpu.selection``). vLLM's CPU build keeps
weights, KV cache and its runtime in host RAM instead, and a node that runs out of RAM does
not fail one engine cleanly: the kernel's OOM killer picks a victim, which may be another
engine or the controller. So a CPU-mode load is checked against
``psutil.virtual_memory().available`` first, with an estimate that errs on the large side:

    KV cache (SARDEENZ_VLLM_CPU_KVCACHE_GIB, or the load's --kv-cache-memory-bytes)
  + weights (size of the model folder's *.safetensors / *.bin files; 0 for a hub id)
  + an allowance for the runtime (SARDEENZ_VLLM_CPU_OVERHEAD_GIB, 2.5 GiB by default:
    measured 1.9 GB RSS for API server + EngineCore + Worker with a tiny model)

Engines still starting have not allocated their share yet, so what they were promised is
subtracted from the available figure until they turn active (``HostMemoryBook``).
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from sardeenz.config import ConfigError, Settings, parse_size
from sardeenz.engines.vllm import flag_value
from sardeenz.errors import Conflict
from sardeenz.units import GIB as GIB
from sardeenz.units import gib

WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".gguf")


class InsufficientHostMemory(Conflict):
    code = "insufficient_host_memory"


@dataclass(frozen=True, slots=True)
class HostEstimate:
    """What a CPU-mode engine is expected to take, by part (bytes)."""

    kv_cache: int
    weights: int
    overhead: int

    @property
    def total(self) -> int:
        return self.kv_cache + self.weights + self.overhead


def weights_on_disk(model_path: str) -> int:
    """Bytes of weight files in a local model folder (not recursive); 0 for anything else.

    Blocking (stats files): call it in a worker thread.
    """
    path = Path(model_path).expanduser()
    total = 0
    with contextlib.suppress(OSError):
        if not path.is_dir():
            return 0
        with os.scandir(path) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.name.endswith(WEIGHT_SUFFIXES) and entry.is_file():
                        total += entry.stat().st_size
    return total


def estimate_cpu_engine(settings: Settings, model_path: str, extra_args: list[str]) -> HostEstimate:
    """The host memory one CPU-build engine is expected to hold (module docstring).

    Blocking (stats the model folder): call it in a worker thread.
    """
    kv = settings.vllm_cpu_kvcache_gib * GIB
    given = flag_value(extra_args, "--kv-cache-memory-bytes")
    if given is not None:
        with contextlib.suppress(ConfigError):
            kv = parse_size(given)
    return HostEstimate(
        kv_cache=kv,
        weights=weights_on_disk(model_path),
        overhead=int(settings.vllm_cpu_overhead_gib * GIB),
    )


def available_bytes() -> int:
    """Memory the kernel can give without swapping (MemAvailable)."""
    return int(psutil.virtual_memory().available)


class HostMemoryBook:
    """Host memory promised to CPU-mode engines that are still starting."""

    def __init__(self) -> None:
        self._pending: dict[str, int] = {}

    def pending(self) -> int:
        return sum(self._pending.values())

    def check(self, estimate: HostEstimate, available: int) -> None:
        """Raise ``InsufficientHostMemory`` (409) when ``estimate`` does not fit."""
        pending = self.pending()
        usable = available - pending
        if estimate.total <= usable:
            return
        starting = f", {gib(pending)} of it promised to engines still starting" if pending else ""
        raise InsufficientHostMemory(
            f"not enough host memory for a vLLM CPU engine: needs about {gib(estimate.total)} "
            f"(KV cache {gib(estimate.kv_cache)} + weights {gib(estimate.weights)} + runtime "
            f"{gib(estimate.overhead)}), {gib(available)} available{starting}. Lower "
            "SARDEENZ_VLLM_CPU_KVCACHE_GIB, unload a model, or load with force: true",
            requiredBytes=estimate.total,
            availableBytes=available,
            pendingBytes=pending,
            kvCacheBytes=estimate.kv_cache,
            weightsBytes=estimate.weights,
            overheadBytes=estimate.overhead,
        )

    def reserve(self, instance_id: str, n_bytes: int) -> None:
        self._pending[instance_id] = n_bytes

    def release(self, instance_id: str) -> None:
        """The engine is up (it holds its memory now) or gone: stop counting it (idempotent)."""
        self._pending.pop(instance_id, None)
