"""Memory promised to engines that have not taken it yet (the ledger's "assumed pods").

An engine the ledger admitted has not allocated its memory yet: vLLM allocates
after loading weights and profiling (tens of seconds), a waking engine after
``/wake_up``. Until it does, a driver (NVML) shows that memory as free, and a
second load placed into it would make both engines die of CUDA out-of-memory.
Like the Kubernetes scheduler's assumed pods, a :class:`Promise` counts as used
until observed usage replaces it: it is *pending* while the engine starts and
while it wakes up, and stops being pending once the engine is active, asleep,
stopping or gone.

A pending promise is matched against what the snapshot attributes to the
engine's processes (``gpu.budget.pending_bytes_by_gpu``), so an engine that has
already taken part of it counts only for the rest; the process tree is walked
here, in a worker thread. On simulated GPUs the books show a claim at once (by
instance id), so a promise there is never pending beyond its claim.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sardeenz import proctree
from sardeenz.errors import Conflict
from sardeenz.gpu.budget import Reservation, pending_bytes_by_gpu, wake_shortfalls
from sardeenz.gpu.inventory import GpuInfo
from sardeenz.units import gib


@dataclass
class Promise:
    """One instance in the ledger: what it was granted and the processes that hold it."""

    gpu_ids: tuple[int, ...]
    bytes_per_gpu: int
    starting: bool = True
    waking: bool = False
    stopping: bool = False
    pid: int | None = None
    create_time: float | None = None
    core_pid: int | None = None
    before_wake: dict[int, int] = field(default_factory=dict)
    """What the books held for it while asleep (given back if the wake-up fails)."""

    @property
    def pending(self) -> bool:
        """Whether the driver may not show yet the memory promised (module docstring)."""
        if not self.gpu_ids or not self.bytes_per_gpu or self.stopping:
            return False
        return self.starting or self.waking


async def reservations(promises: Iterable[tuple[str, Promise]]) -> list[Reservation]:
    """The promises as reservations with the PIDs of their process trees.

    The promises are read on the event loop; only the process-tree walk goes to a
    worker thread. A promise whose engine is not spawned yet, or gone (its PID maybe
    reused), keeps no PIDs: all of it is pending.
    """
    items = [
        (
            Reservation(instance_id=iid, gpu_ids=p.gpu_ids, bytes_per_gpu=p.bytes_per_gpu),
            p.pid,
            p.create_time,
            p.core_pid,
        )
        for iid, p in promises
    ]
    if not items:
        return []

    def collect() -> list[Reservation]:
        out = []
        for res, pid, created, core in items:
            if pid is None or not proctree.is_alive(pid, created):
                out.append(res)
                continue
            pids = {p.pid for p in proctree.tree(pid)}
            if core is not None:
                pids.add(core)
            out.append(dataclasses.replace(res, pids=frozenset(pids)))
        return out

    return await asyncio.to_thread(collect)


def wake_refusal(
    instance_id: str,
    promise: Promise,
    gpus: Sequence[GpuInfo],
    waking: Reservation,
    others: Sequence[Reservation],
) -> Conflict | None:
    """The 409 ``insufficient_gpu_memory`` for a wake-up that cannot take its memory back
    (``gpu.budget.wake_shortfalls``), None when it fits."""
    short = wake_shortfalls(gpus, waking, others)
    if not short:
        return None
    lacking = ", ".join(
        f"GPU{s.index} {s.name} needs {gib(s.needed_bytes)} back, {gib(s.free_bytes)} free"
        for s in short
    )
    pending = pending_bytes_by_gpu(gpus, others)
    held = [f"GPU{s.index} {gib(pending[s.index])}" for s in short if pending.get(s.index)]
    promised = (
        f" (counting as used the memory promised to engines still starting or waking up: "
        f"{', '.join(held)})"
        if held
        else ""
    )
    return Conflict(
        f"cannot wake {instance_id}: not enough free GPU memory to take back its "
        f"{gib(promise.bytes_per_gpu)} per GPU: {lacking}{promised}; "
        "unload or sleep another model first",
        code="insufficient_gpu_memory",
        shortBytesPerGpu=max(s.needed_bytes - s.free_bytes for s in short),
    )
