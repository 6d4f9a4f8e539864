"""The memory ledger: one admission decision for loads, wake-ups and fit checks.

Pure and in-process: simulated GPUs (books) and a driver-like inventory (no books,
free memory changes only when a test says a process took it), a profile store in
memory, no engine processes.
"""

from __future__ import annotations

import asyncio
import os
from datetime import timedelta
from pathlib import Path
from typing import cast

import pytest

from sardeenz import proctree
from sardeenz.config import Settings, SimGpuSpec
from sardeenz.domain import EngineKind, InstanceStatus, LoadRequest, ModelInstance, utcnow
from sardeenz.engines.base import EngineTarget
from sardeenz.errors import Conflict, InvalidRequest
from sardeenz.gpu.inventory import GpuInfo, GpuProcess, SimulatedInventory
from sardeenz.gpu.kvcached import SegmentTracker
from sardeenz.memory import hostmem
from sardeenz.memory.ledger import Admission, MemoryLedger
from sardeenz.memory.models import FitRequest, MemoryProfile
from sardeenz.store.profiles import ProfileRepository

GIB = 2**30
ON_GPU = EngineTarget(device=None, uses_gpus=True)
ON_HOST = EngineTarget(device="cpu", uses_gpus=False, own_tmpdir=True)


class Profiles:
    """The part of ``ProfileRepository`` the fit check reads."""

    def __init__(self, *profiles: MemoryProfile) -> None:
        self.profiles = list(profiles)

    async def list_all(self, model_path: str | None = None) -> list[MemoryProfile]:
        return [p for p in self.profiles if model_path in (None, p.model_path)]


class DriverLike:
    """One GPU as a driver reports it: engines show only once they really allocate.

    ``processes`` is what the driver attributes to processes; ``other_bytes`` is held
    by something that is none of ours. Every snapshot yields to the event loop, as
    NVML's worker-thread call does, so concurrent admissions interleave.
    """

    simulated = False
    available = True
    reason = None

    def __init__(self, total: int = 24 * GIB) -> None:
        self.total = total
        self.other_bytes = 0
        self.processes: list[GpuProcess] = []

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def snapshot(self) -> list[GpuInfo]:
        await asyncio.sleep(0.001)
        used = self.other_bytes + sum(p.used_bytes for p in self.processes)
        return [
            GpuInfo(
                index=0,
                name="NVIDIA L4",
                uuid="GPU-test",
                total_bytes=self.total,
                used_bytes=used,
                free_bytes=self.total - used,
                compute_capability=(8, 9),
                processes=list(self.processes),
            )
        ]


def _sim(*sizes_gib: int) -> SimulatedInventory:
    return SimulatedInventory(
        [
            SimGpuSpec(index=i, name="NVIDIA L4", memory_bytes=s * GIB)
            for i, s in enumerate(sizes_gib)
        ]
    )


def _ledger(
    inventory: SimulatedInventory | DriverLike, tmp_path: Path, *profiles: MemoryProfile
) -> MemoryLedger:
    settings = Settings(data_dir=tmp_path, vllm_cpu_kvcache_gib=4, vllm_cpu_overhead_gib=2.5)
    repo = cast(ProfileRepository, Profiles(*profiles))
    return MemoryLedger(settings, inventory, repo, SegmentTracker())


def _req(model: str = "m", **fields: object) -> LoadRequest:
    return LoadRequest.model_validate({"modelPath": model, **fields})


def _instance(iid: str, reserved: int, status: InstanceStatus) -> ModelInstance:
    return ModelInstance(
        id=iid,
        model_path="m",
        served_model_name="m",
        display_name="m",
        engine=EngineKind.SIM,
        status=status,
        port=1,
        gpu_ids=[0],
        reserved_bytes_per_gpu=reserved,
    )


async def test_a_load_on_simulated_gpus_is_booked_until_released(tmp_path: Path) -> None:
    inv = _sim(24)
    ledger = _ledger(inv, tmp_path)
    grant = await ledger.admit_load("a", _req(), ON_GPU, [], 6 * GIB)
    assert grant.gpu_ids == [0]
    assert grant.reserved_bytes_per_gpu == 6 * GIB
    assert grant.gpu_memory_utilization == 0.25
    assert grant.kvcached_ipc_name == "kvcached_vllm_GPU0"
    assert ledger.segments.owns("kvcached_vllm_GPU0")
    assert grant.host_bytes == 0
    assert inv.usage("a") == {0: 6 * GIB}  # the books show it at once

    with pytest.raises(Conflict) as refused:
        await ledger.admit_load("b", _req(), ON_GPU, [], 20 * GIB)
    assert refused.value.code == "insufficient_gpu_memory"
    assert "still starting" not in refused.value.message  # nothing pending: it is booked
    (gpu,) = refused.value.extra["gpus"]
    assert gpu["freeBytes"] == 18 * GIB
    assert inv.usage("b") == {}

    ledger.release("a")
    ledger.release("a")  # idempotent
    assert inv.usage("a") == {}
    assert (await ledger.admit_load("b", _req(), ON_GPU, [], 20 * GIB)).gpu_ids == [0]


async def test_memory_promised_to_a_starting_engine_counts_until_it_is_taken(
    tmp_path: Path,
) -> None:
    driver = DriverLike()
    ledger = _ledger(driver, tmp_path)
    await ledger.admit_load("a", _req(), ON_GPU, [], 14 * GIB)

    # The driver still shows the GPU empty; the promise to "a" does not let "b" in.
    with pytest.raises(Conflict) as refused:
        await ledger.admit_load("b", _req(), ON_GPU, [], 14 * GIB)
    assert refused.value.code == "insufficient_gpu_memory"
    assert "still starting" in refused.value.message
    assert "GPU0 14.0 GiB" in refused.value.message  # 14 GiB promised
    assert refused.value.extra["chosenGpuIds"] == [0]

    # "a" runs (this process stands in for it) and has taken 10 GiB of its 14:
    # only the other 4 GiB are still pending, so 6 GiB fit beside it.
    me = os.getpid()
    ledger.commit("a", me, proctree.create_time(me))
    driver.processes = [GpuProcess(pid=me, used_bytes=10 * GIB)]
    assert (await ledger.admit_load("b", _req(), ON_GPU, [], 6 * GIB)).gpu_ids == [0]
    ledger.release("b")

    # Active: the promise is settled, its baseline is what the driver shows for it.
    assert await ledger.settle("a", me) == {0: 10 * GIB}
    driver.processes = []  # (the driver view a test wants: "a" gone from it)
    assert (await ledger.admit_load("c", _req(), ON_GPU, [], 14 * GIB)).gpu_ids == [0]


async def test_a_stopping_engine_promises_nothing(tmp_path: Path) -> None:
    ledger = _ledger(DriverLike(), tmp_path)
    await ledger.admit_load("a", _req(), ON_GPU, [], 14 * GIB)
    ledger.stopping("a")
    assert (await ledger.admit_load("b", _req(), ON_GPU, [], 14 * GIB)).gpu_ids == [0]


async def test_one_lock_serializes_concurrent_admissions(tmp_path: Path) -> None:
    ledger = _ledger(DriverLike(), tmp_path)
    results = await asyncio.gather(
        *(ledger.admit_load(f"i{n}", _req(), ON_GPU, [], 14 * GIB) for n in range(4)),
        return_exceptions=True,
    )
    granted = [r for r in results if isinstance(r, Admission)]
    refused = [r for r in results if isinstance(r, Conflict)]
    assert len(granted) == 1
    assert len(refused) == 3
    assert all(r.code == "insufficient_gpu_memory" for r in refused)


async def test_wake_on_simulated_gpus_takes_the_memory_back_or_refuses(tmp_path: Path) -> None:
    inv = _sim(24)
    ledger = _ledger(inv, tmp_path)
    await ledger.admit_load("a", _req(), ON_GPU, [], 8 * GIB)
    await ledger.settle("a", None)
    ledger.note_usage("a", 1 * GIB)  # asleep: the engine says it holds 1 GiB
    await ledger.admit_load("b", _req(), ON_GPU, [], 18 * GIB)  # takes what "a" freed

    sleeping = _instance("a", 8 * GIB, InstanceStatus.SLEEPING)
    with pytest.raises(Conflict) as refused:
        await ledger.admit_wake(sleeping)
    assert refused.value.code == "insufficient_gpu_memory"
    assert refused.value.message.startswith("cannot wake a: ")
    assert inv.usage("a") == {0: 1 * GIB}  # nothing changed

    ledger.release("b")
    await ledger.admit_wake(sleeping)
    assert inv.usage("a") == {0: 8 * GIB}
    ledger.wake_done("a", woke=False)  # the engine did not wake: the books say so
    assert inv.usage("a") == {0: 1 * GIB}
    await ledger.admit_wake(sleeping)
    ledger.wake_done("a", woke=True)
    assert inv.usage("a") == {0: 8 * GIB}


async def test_wake_on_a_driver_checks_free_memory_and_counts_as_promised(
    tmp_path: Path,
) -> None:
    driver = DriverLike()
    ledger = _ledger(driver, tmp_path)
    await ledger.admit_load("a", _req(), ON_GPU, [], 14 * GIB)
    await ledger.settle("a", None)
    sleeping = _instance("a", 14 * GIB, InstanceStatus.SLEEPING)

    driver.other_bytes = 12 * GIB  # another process took the memory "a" gave back
    with pytest.raises(Conflict) as refused:
        await ledger.admit_wake(sleeping)
    assert refused.value.code == "insufficient_gpu_memory"
    assert "cannot wake a: not enough free GPU memory" in refused.value.message
    assert "GPU0 NVIDIA L4 needs 14.0 GiB back, 12.0 GiB free" in refused.value.message

    driver.other_bytes = 0
    await ledger.admit_wake(sleeping)
    # While "a" wakes up its memory is promised: a load placed meanwhile leaves room.
    with pytest.raises(Conflict) as refused:
        await ledger.admit_load("b", _req(), ON_GPU, [], 14 * GIB)
    assert "still starting or waking up" in refused.value.message
    ledger.wake_done("a", woke=True)
    assert (await ledger.admit_load("b", _req(), ON_GPU, [], 14 * GIB)).gpu_ids == [0]


async def test_host_memory_engines_are_checked_against_ram_and_held_while_starting(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hostmem, "available_bytes", lambda: 10 * GIB)
    ledger = _ledger(_sim(24), tmp_path)  # GPUs on the node do not matter to a CPU engine
    need = int(6.5 * GIB)  # 4 GiB KV cache + 2.5 GiB runtime, no weights for a hub id

    grant = await ledger.admit_load("a", _req("org/model"), ON_HOST, [], None)
    assert (grant.gpu_ids, grant.gpu_memory_utilization, grant.kvcached_ipc_name) == (
        [],
        None,
        None,
    )
    assert grant.reserved_bytes_per_gpu is None
    assert grant.host_bytes == need

    with pytest.raises(Conflict) as refused:
        await ledger.admit_load("b", _req("org/model"), ON_HOST, [], None)
    assert refused.value.code == "insufficient_host_memory"
    assert refused.value.extra["pendingBytes"] == need

    forced = await ledger.admit_load("c", _req("org/model", force=True), ON_HOST, [], None)
    assert forced.host_bytes == need  # held all the same, so later loads see it
    await ledger.settle("a", None)  # active: its memory is in use, no longer promised
    ledger.release("c")
    assert (await ledger.admit_load("b", _req("org/model"), ON_HOST, [], None)).host_bytes == need

    with pytest.raises(InvalidRequest) as pinned:
        await ledger.admit_load("d", _req("org/model", gpuIds=[0], force=True), ON_HOST, [], None)
    assert pinned.value.code == "unknown_gpu"
    assert "runs on CPU" in pinned.value.message


async def test_the_fit_check_and_the_load_give_the_same_verdict(tmp_path: Path) -> None:
    now = utcnow()
    big = MemoryProfile(
        id="p1",
        profile_name="big",
        model_path="big",
        max_tokens=4096,
        total_gpu_memory_gib=30.0,
        weights_memory_gib=28.0,
        cuda_graphs_gib=0.5,
        overhead_memory_gib=0.5,
        kv_cache_available_gib=1.0,
        kv_cache_per_request_mib=512.0,
        gpu_name="NVIDIA L4",
        created_at=now - timedelta(minutes=1),
        updated_at=now,
    )
    inv = _sim(24)
    ledger = _ledger(inv, tmp_path, big)
    verdict = await ledger.check(FitRequest(model_path="big"))
    assert verdict.fits is False
    assert verdict.source == "profile"

    with pytest.raises(Conflict) as refused:
        await ledger.admit_load("a", _req("big"), ON_GPU, [], 4 * GIB)
    assert refused.value.code == "model_does_not_fit"
    assert refused.value.extra["fit"] == verdict.model_dump(mode="json")
    assert refused.value.message == (
        f"{verdict.reason}; force: true skips this check and starts the engine anyway "
        "(it fails if the memory really is short; free memory itself is never overridden)"
    )
    assert inv.usage("a") == {}

    forced = await ledger.admit_load("a", _req("big", force=True), ON_GPU, [], 4 * GIB)
    assert forced.reserved_bytes_per_gpu == 4 * GIB


async def test_re_adopted_instances_are_booked_again(tmp_path: Path) -> None:
    inv = _sim(24)
    ledger = _ledger(inv, tmp_path)
    active = _instance("a", 6 * GIB, InstanceStatus.ACTIVE)
    active.kvcached_ipc_name = "kvcached_vllm_GPU0"
    ledger.adopt(active, None)
    assert inv.usage("a") == {0: 6 * GIB}
    assert ledger.segments.owns("kvcached_vllm_GPU0")
    ledger.adopt(active, None)  # booked once, whatever happens
    assert inv.usage("a") == {0: 6 * GIB}
    too_big = _instance("b", 30 * GIB, InstanceStatus.ACTIVE)
    ledger.adopt(too_big, None)  # over budget after a restart: logged, not booked
    assert inv.usage("b") == {}
