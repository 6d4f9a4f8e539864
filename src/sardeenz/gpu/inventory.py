"""What GPUs this node has and how much memory is free on each.

Two sources behind one small protocol:

* :class:`NvmlInventory` asks the NVIDIA driver through NVML (``pynvml`` from
  nvidia-ml-py). NVML calls block (a wedged driver can stall for seconds), so
  every call runs in a worker thread. A node without a driver is normal (CPU
  engines, laptops, CI): the inventory then reports ``available=False`` with
  the reason, logs one warning, and never raises.
* :class:`SimulatedInventory` serves the GPUs of ``--sim-gpus``/``--demo`` and
  keeps books of what simulated engines hold, so the numbers the dashboard
  and the placement logic see add up exactly like on real hardware.

Both also implement :class:`GpuBooks`, the write side the memory ledger
(``sardeenz.memory.ledger``) uses: ``claim`` memory for an engine being
placed, ``set_usage`` when it sleeps or wakes, ``release`` when it is gone.
The simulated GPUs *are* books, so a claim shows in the next snapshot at
once; a driver shows what processes really hold, so on NVML these calls keep
nothing and the ledger's promised reservations cover the gap until the
engine allocates. The ledger calls the same methods either way and never asks
which inventory it has. An inventory that only reads (a test double, say) is
given :data:`NO_BOOKS`, the driver's behaviour, by :func:`books_for`.

Translation from NVML's own ctypes structs to :class:`GpuInfo` is a pure
function (:func:`gpu_info_from_nvml`) so it is tested without a driver.

``pynvml`` is imported by the NVML code that calls it, not with this module: a
server on simulated GPUs (the demo, the test servers given --sim-gpus) never loads it
(tests/unit/test_start_imports.py), which saves about 25 ms of CPU at each start.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from sardeenz.config import SimGpuSpec
from sardeenz.gpu.capability import capability_from_name

if TYPE_CHECKING:
    from sardeenz.config import Settings

log = logging.getLogger(__name__)

NVML_VALUE_NOT_AVAILABLE = 2**64 - 1
"""NVML's 'unknown' marker for a process's memory (``c_ulonglong(-1)``)."""


class _Frozen(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, serialize_by_alias=True, frozen=True
    )


class GpuProcess(_Frozen):
    """A process holding memory on one GPU.

    ``pid`` is None for a simulated engine that has no process yet;
    ``instance_id`` is set by the simulated inventory (NVML knows only PIDs).
    ``used_bytes`` is 0 when the driver cannot tell (NVML reports 'not
    available' under Windows WDDM and for some containers).
    """

    pid: int | None
    used_bytes: int = Field(ge=0)
    instance_id: str | None = None


class GpuInfo(_Frozen):
    """One GPU at one moment. Byte counts as NVML reports them.

    ``free_bytes`` comes from the driver and is not always ``total - used``
    (drivers reserve some memory); placement trusts ``free_bytes``.
    """

    index: int = Field(ge=0)
    name: str
    uuid: str
    total_bytes: int = Field(ge=0)
    used_bytes: int = Field(ge=0)
    free_bytes: int = Field(ge=0)
    utilization_percent: int | None = None
    compute_capability: tuple[int, int] | None = None
    processes: list[GpuProcess] = Field(default_factory=list)
    simulated: bool = False


@runtime_checkable
class GpuInventory(Protocol):
    """The node's GPUs. ``available`` is False when there are none to use."""

    @property
    def available(self) -> bool: ...

    @property
    def reason(self) -> str | None:
        """Why there are no GPUs (shown to operators); None when available."""
        ...

    @property
    def simulated(self) -> bool: ...

    async def open(self) -> None:
        """Prepare the source; idempotent, never raises. ``snapshot`` opens lazily."""
        ...

    async def snapshot(self) -> list[GpuInfo]: ...

    async def close(self) -> None: ...


class GpuOutOfMemory(RuntimeError):
    """A claim (or a wake-up taking memory back) does not fit in what a GPU has free."""


@runtime_checkable
class GpuBooks(Protocol):
    """What the node's books hold per instance (see the module docstring).

    ``bytes_per_gpu`` is one figure for each of the instance's GPUs, or a
    mapping for single GPUs. ``claim`` and ``set_usage`` raise
    :class:`GpuOutOfMemory` and change nothing when the books cannot hold it;
    ``set_usage`` raises ``KeyError`` for an instance that claimed nothing.
    """

    def claim(
        self,
        instance_id: str,
        gpu_ids: Sequence[int],
        bytes_per_gpu: int,
        *,
        pid: int | None = None,
    ) -> None: ...

    def set_usage(
        self, instance_id: str, bytes_per_gpu: int | Mapping[int, int], *, pid: int | None = None
    ) -> None: ...

    def usage(self, instance_id: str) -> dict[int, int]:
        """Bytes per GPU the books hold for the instance ({} if none)."""
        ...

    def release(self, instance_id: str) -> bool: ...


class DriverBooks:
    """Books of a driver-backed inventory: nothing is kept, the driver shows real usage.

    Memory promised to an engine that has not allocated it yet is the ledger's
    business (its pending reservations), not the inventory's.
    """

    def claim(
        self,
        instance_id: str,
        gpu_ids: Sequence[int],
        bytes_per_gpu: int,
        *,
        pid: int | None = None,
    ) -> None:
        return None

    def set_usage(
        self, instance_id: str, bytes_per_gpu: int | Mapping[int, int], *, pid: int | None = None
    ) -> None:
        return None

    def usage(self, instance_id: str) -> dict[int, int]:
        return {}

    def release(self, instance_id: str) -> bool:
        return False


NO_BOOKS = DriverBooks()


def books_for(inventory: GpuInventory) -> GpuBooks:
    """The inventory's own books, or :data:`NO_BOOKS` for one that only reads (a driver)."""
    return inventory if isinstance(inventory, GpuBooks) else NO_BOOKS


# --- NVML ------------------------------------------------------------------------


def _text(value: str | bytes) -> str:
    """NVML strings: nvidia-ml-py >= 11.5 returns str, older versions bytes."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace").rstrip("\x00")
    return value


def _process_bytes(value: int | None) -> int:
    if value is None or value < 0 or value >= NVML_VALUE_NOT_AVAILABLE:
        return 0
    return int(value)


def gpu_info_from_nvml(
    index: int,
    *,
    name: str | bytes,
    uuid: str | bytes,
    memory: Any,
    utilization: Any | None = None,
    compute_capability: tuple[int, int] | None = None,
    processes: Sequence[Any] = (),
) -> GpuInfo:
    """Build a :class:`GpuInfo` from what the NVML getters return.

    ``memory`` is a ``c_nvmlMemory_t`` (or v2) with ``total``/``free``/``used``;
    ``utilization`` a ``c_nvmlUtilization_t`` (``gpu`` percent) or None when
    the device does not support it; ``processes`` the structs or "friendly
    objects" of ``nvmlDeviceGetComputeRunningProcesses`` (``pid``,
    ``usedGpuMemory``, which may be None or NVML's not-available marker).
    A missing capability falls back to the name table.
    """
    gpu_name = _text(name)
    procs = [
        GpuProcess(pid=int(p.pid), used_bytes=_process_bytes(getattr(p, "usedGpuMemory", None)))
        for p in processes
    ]
    util = None if utilization is None else int(utilization.gpu)
    return GpuInfo(
        index=index,
        name=gpu_name,
        uuid=_text(uuid),
        total_bytes=int(memory.total),
        used_bytes=int(memory.used),
        free_bytes=int(memory.free),
        utilization_percent=util,
        compute_capability=compute_capability or capability_from_name(gpu_name),
        processes=procs,
        simulated=False,
    )


def nvml_unavailable_reason(exc: BaseException) -> str:
    """An operator-facing sentence for an ``nvmlInit`` failure."""
    import pynvml

    hint = "GPU engines cannot run here; use --sim-gpus to simulate GPUs"
    if isinstance(exc, pynvml.NVMLError_LibraryNotFound):
        return f"NVIDIA driver not found (libnvidia-ml.so.1 could not be loaded): {hint}"
    if isinstance(exc, pynvml.NVMLError_DriverNotLoaded):
        return f"NVIDIA driver is installed but not loaded: {hint}"
    if isinstance(exc, pynvml.NVMLError_NoPermission):
        return f"no permission to use the NVIDIA driver (NVML): {hint}"
    if isinstance(exc, pynvml.NVMLError):
        return f"NVML could not start ({exc}): {hint}"
    return f"NVML could not start ({type(exc).__name__}: {exc}): {hint}"


def _optional(what: str, index: int, call: Any, *args: Any) -> Any:
    """Run an optional NVML getter: unsupported or failing -> None, logged at debug."""
    import pynvml

    try:
        return call(*args)
    except pynvml.NVMLError as exc:
        log.debug("GPU %d: %s unavailable: %s", index, what, exc)
        return None


class NvmlInventory(DriverBooks):
    """GPUs seen by the NVIDIA driver (its books keep nothing: see ``DriverBooks``).

    ``open()`` (or the first ``snapshot()``) runs ``nvmlInit`` in a thread. A
    failure is reported through ``available``/``reason`` and one warning, and
    never retried: a driver does not appear while the server runs. An asyncio
    lock keeps ``close()`` (``nvmlShutdown``) from racing a snapshot.
    """

    simulated = False

    def __init__(self) -> None:
        self._lock = asyncio.Lock()
        self._opened = False
        self._initialised = False
        self._count = 0
        self._reason: str | None = "NVML not initialised yet"
        self._device_errors: set[tuple[int, str]] = set()

    @property
    def available(self) -> bool:
        return self._initialised and self._count > 0

    @property
    def reason(self) -> str | None:
        return None if self.available else self._reason

    async def open(self) -> None:
        async with self._lock:
            if self._opened:
                return
            self._opened = True
            try:
                self._count = await asyncio.to_thread(self._init)
            except Exception as exc:  # NVMLError, OSError from ctypes, ...: never fatal
                self._reason = nvml_unavailable_reason(exc)
                log.warning("no GPUs: %s", self._reason)
                return
            self._initialised = True
            if self._count == 0:
                self._reason = "the NVIDIA driver reports no GPUs"
                log.warning("no GPUs: %s", self._reason)
            else:
                self._reason = None

    @staticmethod
    def _init() -> int:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount())
        except BaseException:
            pynvml.nvmlShutdown()
            raise

    async def snapshot(self) -> list[GpuInfo]:
        await self.open()
        async with self._lock:
            if not self.available:
                return []
            return await asyncio.to_thread(self._read_all)

    def _read_all(self) -> list[GpuInfo]:
        import pynvml

        gpus: list[GpuInfo] = []
        for index in range(self._count):
            try:
                gpus.append(self._read_one(index))
            except pynvml.NVMLError as exc:
                # A GPU that fell off the bus must not hide the healthy ones.
                key = (index, str(exc))
                if key not in self._device_errors:
                    self._device_errors.add(key)
                    log.warning("GPU %d cannot be read: %s", index, exc)
        return gpus

    @staticmethod
    def _read_one(index: int) -> GpuInfo:
        import pynvml

        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        name = pynvml.nvmlDeviceGetName(handle)
        uuid = _optional("uuid", index, pynvml.nvmlDeviceGetUUID, handle) or f"GPU-index-{index}"
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        utilization = _optional("utilization", index, pynvml.nvmlDeviceGetUtilizationRates, handle)
        cap = _optional(
            "compute capability", index, pynvml.nvmlDeviceGetCudaComputeCapability, handle
        )
        procs = _optional("processes", index, pynvml.nvmlDeviceGetComputeRunningProcesses, handle)
        return gpu_info_from_nvml(
            index,
            name=name,
            uuid=uuid,
            memory=memory,
            utilization=utilization,
            compute_capability=(int(cap[0]), int(cap[1])) if cap else None,
            processes=procs or (),
        )

    async def close(self) -> None:
        async with self._lock:
            if self._initialised:
                import pynvml

                self._initialised = False
                self._reason = "NVML closed"
                try:
                    await asyncio.to_thread(pynvml.nvmlShutdown)
                except pynvml.NVMLError as exc:
                    log.debug("nvmlShutdown failed: %s", exc)


# --- simulated ---------------------------------------------------------------------


class SimulatedOutOfMemory(GpuOutOfMemory):
    """A simulated engine asked for more than a simulated GPU has free.

    Mirrors a real CUDA out-of-memory at start-up, so the caller can fail the
    instance the way a real engine would fail.
    """


def sim_uuid(index: int) -> str:
    """A UUID-shaped id that cannot be mistaken for a real GPU's."""
    return f"GPU-sim-00000000-0000-0000-{index:012x}"


@dataclass
class _Allocation:
    bytes_by_gpu: dict[int, int]
    pid: int | None = None


@dataclass
class _SimGpu:
    spec: SimGpuSpec
    other_bytes: int = 0
    utilization_percent: int = 0
    allocations: dict[str, int] = field(default_factory=dict)

    @property
    def used(self) -> int:
        return self.other_bytes + sum(self.allocations.values())


class SimulatedInventory:
    """Simulated GPUs with exact memory accounting.

    ``used = other_bytes + sum of allocations`` and ``free = total - used``
    on every GPU, always: a request that would break it raises
    :class:`SimulatedOutOfMemory` and changes nothing. Methods are plain
    (no awaits) and guarded by a lock, so they are atomic for asyncio tasks
    and safe from worker threads.
    """

    simulated = True

    def __init__(
        self, specs: Sequence[SimGpuSpec], *, other_bytes: int | Mapping[int, int] = 0
    ) -> None:
        self._lock = threading.Lock()
        self._gpus: dict[int, _SimGpu] = {}
        for spec in specs:
            other = (
                other_bytes.get(spec.index, 0) if isinstance(other_bytes, Mapping) else other_bytes
            )
            if not 0 <= other <= spec.memory_bytes:
                raise ValueError(f"other_bytes for GPU {spec.index} must be within its memory")
            self._gpus[spec.index] = _SimGpu(spec=spec, other_bytes=other)
        self._allocations: dict[str, _Allocation] = {}

    @property
    def available(self) -> bool:
        return bool(self._gpus)

    @property
    def reason(self) -> str | None:
        return None if self._gpus else "no simulated GPUs configured"

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def snapshot(self) -> list[GpuInfo]:
        return self.snapshot_now()

    def snapshot_now(self) -> list[GpuInfo]:
        """The same as ``snapshot()``, for synchronous callers."""
        with self._lock:
            return [self._info(g) for g in sorted(self._gpus.values(), key=lambda g: g.spec.index)]

    def _info(self, gpu: _SimGpu) -> GpuInfo:
        total = gpu.spec.memory_bytes
        used = gpu.used
        return GpuInfo(
            index=gpu.spec.index,
            name=gpu.spec.name,
            uuid=sim_uuid(gpu.spec.index),
            total_bytes=total,
            used_bytes=used,
            free_bytes=total - used,
            utilization_percent=gpu.utilization_percent,
            compute_capability=capability_from_name(gpu.spec.name),
            processes=[
                GpuProcess(pid=self._allocations[iid].pid, used_bytes=b, instance_id=iid)
                for iid, b in gpu.allocations.items()
            ],
            simulated=True,
        )

    # --- accounting -------------------------------------------------------------------
    def claim(
        self,
        instance_id: str,
        gpu_ids: Sequence[int],
        bytes_per_gpu: int,
        *,
        pid: int | None = None,
    ) -> None:
        """``GpuBooks.claim``: the same as :meth:`allocate`."""
        self.allocate(instance_id, gpu_ids, bytes_per_gpu, pid=pid)

    def allocate(
        self,
        instance_id: str,
        gpu_ids: Sequence[int],
        bytes_per_gpu: int,
        *,
        pid: int | None = None,
    ) -> None:
        """Book ``bytes_per_gpu`` on each of ``gpu_ids`` for a new instance."""
        if bytes_per_gpu < 0:
            raise ValueError("bytes_per_gpu must not be negative")
        ids = list(dict.fromkeys(gpu_ids))
        with self._lock:
            if instance_id in self._allocations:
                raise ValueError(f"instance {instance_id} already holds simulated GPU memory")
            wanted = dict.fromkeys(ids, bytes_per_gpu)
            self._check(instance_id, wanted)
            self._allocations[instance_id] = _Allocation(bytes_by_gpu=wanted, pid=pid)
            for i, b in wanted.items():
                self._gpus[i].allocations[instance_id] = b

    def set_usage(
        self,
        instance_id: str,
        bytes_per_gpu: int | Mapping[int, int],
        *,
        pid: int | None = None,
    ) -> None:
        """Change what an instance holds (e.g. sleep freed its weights).

        An int applies to every GPU of the instance; a mapping sets single
        GPUs of the instance. ``pid`` (if given) records the engine's PID.
        """
        with self._lock:
            alloc = self._allocations.get(instance_id)
            if alloc is None:
                raise KeyError(f"instance {instance_id} holds no simulated GPU memory")
            if isinstance(bytes_per_gpu, Mapping):
                unknown = set(bytes_per_gpu) - set(alloc.bytes_by_gpu)
                if unknown:
                    raise ValueError(f"instance {instance_id} is not on GPU(s) {sorted(unknown)}")
                wanted = {**alloc.bytes_by_gpu, **bytes_per_gpu}
            else:
                wanted = dict.fromkeys(alloc.bytes_by_gpu, bytes_per_gpu)
            if any(b < 0 for b in wanted.values()):
                raise ValueError("bytes_per_gpu must not be negative")
            self._check(instance_id, wanted)
            alloc.bytes_by_gpu = wanted
            if pid is not None:
                alloc.pid = pid
            for i, b in wanted.items():
                self._gpus[i].allocations[instance_id] = b

    def release(self, instance_id: str) -> bool:
        """Give back everything an instance holds; False if it held nothing."""
        with self._lock:
            alloc = self._allocations.pop(instance_id, None)
            if alloc is None:
                return False
            for i in alloc.bytes_by_gpu:
                self._gpus[i].allocations.pop(instance_id, None)
            return True

    def set_utilization(self, index: int, percent: int) -> None:
        """Let the simulated engine report how busy its GPU is (0-100)."""
        with self._lock:
            self._gpu(index).utilization_percent = max(0, min(100, percent))

    def usage(self, instance_id: str) -> dict[int, int]:
        """Bytes per GPU the instance holds ({} if none)."""
        with self._lock:
            alloc = self._allocations.get(instance_id)
            return dict(alloc.bytes_by_gpu) if alloc else {}

    def _gpu(self, index: int) -> _SimGpu:
        try:
            return self._gpus[index]
        except KeyError:
            raise ValueError(f"no simulated GPU {index}") from None

    def _check(self, instance_id: str, wanted: Mapping[int, int]) -> None:
        for index, amount in wanted.items():
            gpu = self._gpu(index)
            current = gpu.allocations.get(instance_id, 0)
            free = gpu.spec.memory_bytes - gpu.used
            if amount - current > free:
                raise SimulatedOutOfMemory(
                    f"simulated GPU {index} ({gpu.spec.name}) out of memory: tried to "
                    f"allocate {(amount - current) / 2**30:.2f} GiB, "
                    f"{free / 2**30:.2f} GiB free of {gpu.spec.memory_bytes / 2**30:.2f} GiB"
                )


def create_inventory(settings: Settings) -> GpuInventory:
    """Simulated GPUs when ``--sim-gpus``/``--demo`` name some, else NVML."""
    specs = settings.effective_sim_gpus
    if specs:
        return SimulatedInventory(specs)
    return NvmlInventory()
