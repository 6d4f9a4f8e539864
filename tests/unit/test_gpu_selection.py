"""Placement: which GPUs a new engine gets and its --gpu-memory-utilization."""

from __future__ import annotations

import pytest

from sardeenz.config import parse_sim_gpus
from sardeenz.errors import Conflict, InvalidRequest
from sardeenz.gpu.inventory import GpuInfo, SimulatedInventory
from sardeenz.gpu.selection import (
    GB,
    RESERVED_BYTES,
    VLLM_DEFAULT_UTILIZATION,
    cuda_env,
    plan_placement,
)

GiB = 2**30
L4 = 24 * GiB  # 25_769_803_776 bytes
T4 = 16 * GiB  # 17_179_869_184 bytes


def _inv(text: str = "NVIDIA L4:24GiB,Tesla T4:16GiB") -> SimulatedInventory:
    return SimulatedInventory(parse_sim_gpus(text))


def test_auto_spreads_loads_by_free_memory() -> None:
    inv = _inv()
    chosen: list[list[int]] = []
    for n in range(3):
        p = plan_placement(
            inv.snapshot_now(), gpu_ids=None, tensor_parallel_size=1, gpu_memory_limit_gb=10
        )
        assert p.bytes_per_gpu == 10 * GB
        assert p.warnings == []
        assert [g.index for g in p.gpus] == p.gpu_ids
        inv.allocate(f"m{n}", p.gpu_ids, p.bytes_per_gpu)
        chosen.append(p.gpu_ids)
    # L4 (24 GiB) first; then the T4 has more free (17.2 GB > 15.8 GB); then the L4.
    assert chosen == [[0], [1], [0]]
    g0, g1 = inv.snapshot_now()
    assert g0.used_bytes == 20 * GB
    assert g1.used_bytes == 10 * GB


def test_utilization_is_a_fraction_of_total_memory() -> None:
    gpus = _inv().snapshot_now()
    on_l4 = plan_placement(gpus, gpu_ids=[0], tensor_parallel_size=1, gpu_memory_limit_gb=10)
    on_t4 = plan_placement(gpus, gpu_ids=[1], tensor_parallel_size=1, gpu_memory_limit_gb=10)
    assert on_l4.gpu_memory_utilization == 0.389  # 10e9 / 25.77e9 = 0.38805, rounded up
    assert on_t4.gpu_memory_utilization == 0.583  # 10e9 / 17.18e9 = 0.58208
    # Fraction of TOTAL, not of free: memory held by others does not change it.
    inv = _inv()
    inv.allocate("other", [0], 8 * GB)
    busy = plan_placement(
        inv.snapshot_now(), gpu_ids=[0], tensor_parallel_size=1, gpu_memory_limit_gb=10
    )
    assert busy.gpu_memory_utilization == 0.389
    # The fraction never gives less than asked.
    for p, total in ((on_l4, L4), (on_t4, T4)):
        assert p.gpu_memory_utilization is not None
        assert p.gpu_memory_utilization * total >= 10 * GB


def test_tensor_parallel_takes_two_gpus() -> None:
    inv = _inv("NVIDIA L4:24GiB,NVIDIA L4:24GiB,NVIDIA L4:24GiB")
    inv.allocate("busy", [1], 5 * GB)
    p = plan_placement(
        inv.snapshot_now(), gpu_ids=None, tensor_parallel_size=2, gpu_memory_limit_gb=8
    )
    assert p.gpu_ids == [0, 2]  # the two with most free; GPU 1 is busier
    assert p.gpu_memory_utilization == 0.311
    assert p.warnings == []
    inv.allocate("tp", p.gpu_ids, p.bytes_per_gpu)
    assert [g.used_bytes for g in inv.snapshot_now()] == [8 * GB, 5 * GB, 8 * GB]


def test_ties_go_to_the_lower_index() -> None:
    gpus = _inv("NVIDIA A100:40GiB,NVIDIA A100:40GiB").snapshot_now()
    p = plan_placement(gpus, gpu_ids=None, tensor_parallel_size=1, gpu_memory_limit_gb=1)
    assert p.gpu_ids == [0]


def test_mixed_sizes_share_one_fraction_with_a_warning() -> None:
    gpus = _inv().snapshot_now()
    p = plan_placement(gpus, gpu_ids=[1, 0], tensor_parallel_size=2, gpu_memory_limit_gb=8)
    assert p.gpu_ids == [1, 0]  # the user's order is kept (rank order)
    assert p.gpu_memory_utilization == 0.466  # relative to the smaller GPU (T4)
    assert len(p.warnings) == 1
    assert "different sizes" in p.warnings[0]


def test_explicit_ids_are_validated() -> None:
    gpus = _inv().snapshot_now()
    with pytest.raises(InvalidRequest) as unknown:
        plan_placement(gpus, gpu_ids=[0, 5], tensor_parallel_size=2, gpu_memory_limit_gb=1)
    assert unknown.value.code == "unknown_gpu"
    assert unknown.value.status == 400
    assert "0 (NVIDIA L4), 1 (Tesla T4)" in unknown.value.message
    assert unknown.value.extra["unknownGpuIds"] == [5]
    with pytest.raises(InvalidRequest) as count:
        plan_placement(gpus, gpu_ids=[0], tensor_parallel_size=2, gpu_memory_limit_gb=1)
    assert count.value.code == "invalid_gpu_ids"
    with pytest.raises(InvalidRequest) as repeated:
        plan_placement(gpus, gpu_ids=[1, 1], tensor_parallel_size=2, gpu_memory_limit_gb=1)
    assert repeated.value.code == "invalid_gpu_ids"
    with pytest.raises(InvalidRequest) as too_many:
        plan_placement(gpus, gpu_ids=None, tensor_parallel_size=4, gpu_memory_limit_gb=1)
    assert too_many.value.code == "not_enough_gpus"


def test_too_big_is_a_409_naming_free_memory_per_gpu() -> None:
    inv = _inv()
    inv.allocate("a", [0], 10 * GB)
    inv.allocate("b", [1], 5 * GB)
    with pytest.raises(Conflict) as exc:
        plan_placement(
            inv.snapshot_now(), gpu_ids=None, tensor_parallel_size=1, gpu_memory_limit_gb=20
        )
    err = exc.value
    assert err.status == 409
    assert err.code == "insufficient_gpu_memory"
    assert err.message == (
        # In the unit of the gpuMemoryLimit asked for, GB (sardeenz.units.gb):
        # L4: 24 GiB - 10 GB - 2 GB = 13.8 GB; T4: 16 GiB - 5 GB - 2 GB = 10.2 GB
        "not enough free GPU memory: gpuMemoryLimit 20 GB per GPU; free after the 2.0 GB "
        "reserve: GPU0 NVIDIA L4 13.8 GB, GPU1 Tesla T4 10.2 GB (force cannot override this: "
        "it skips the memory estimate, not free memory)"
    )
    assert err.extra["requiredBytesPerGpu"] == 20 * GB
    assert err.extra["chosenGpuIds"] == [0]
    assert [g["availableBytes"] for g in err.extra["gpus"]] == [
        L4 - 10 * GB - RESERVED_BYTES,
        T4 - 5 * GB - RESERVED_BYTES,
    ]


def test_exactly_the_free_memory_fits() -> None:
    gpus = _inv().snapshot_now()
    room = (T4 - RESERVED_BYTES) / GB
    p = plan_placement(gpus, gpu_ids=[1], tensor_parallel_size=1, gpu_memory_limit_gb=room)
    assert p.gpu_ids == [1]
    with pytest.raises(Conflict):
        plan_placement(gpus, gpu_ids=[1], tensor_parallel_size=1, gpu_memory_limit_gb=room + 0.01)


def test_no_limit_takes_the_default_or_what_is_left() -> None:
    inv = _inv()
    idle = plan_placement(
        inv.snapshot_now(), gpu_ids=[0], tensor_parallel_size=1, gpu_memory_limit_gb=None
    )
    assert idle.gpu_memory_utilization == VLLM_DEFAULT_UTILIZATION
    assert idle.warnings == []
    inv.allocate("a", [0], 12 * GB)
    shared = plan_placement(
        inv.snapshot_now(), gpu_ids=[0], tensor_parallel_size=1, gpu_memory_limit_gb=None
    )
    # (25.77 - 12 - 2) / 25.77 = 0.4567 -> rounded down so it fits
    assert shared.gpu_memory_utilization == 0.456
    assert shared.bytes_per_gpu <= L4 - 12 * GB - RESERVED_BYTES
    assert "no gpuMemoryLimit given" in shared.warnings[0]
    inv.set_usage("a", L4 - GB)
    with pytest.raises(Conflict) as full:
        plan_placement(
            inv.snapshot_now(), gpu_ids=[0], tensor_parallel_size=1, gpu_memory_limit_gb=None
        )
    assert full.value.code == "insufficient_gpu_memory"
    assert "GPU0 NVIDIA L4 0.0 GiB" in full.value.message


def test_default_limit_bytes_is_placed_like_a_limit() -> None:
    inv = _inv()
    p = plan_placement(
        inv.snapshot_now(),
        gpu_ids=None,
        tensor_parallel_size=1,
        gpu_memory_limit_gb=None,
        default_limit_bytes=2 * GiB,
    )
    assert p.gpu_ids == [0]
    assert p.bytes_per_gpu == 2 * GiB
    assert p.gpu_memory_utilization == 0.084  # 2 GiB / 24 GiB = 0.0833
    # An explicit limit wins over the engine's default footprint.
    q = plan_placement(
        inv.snapshot_now(),
        gpu_ids=None,
        tensor_parallel_size=1,
        gpu_memory_limit_gb=4,
        default_limit_bytes=2 * GiB,
    )
    assert q.bytes_per_gpu == 4 * GB


def test_no_gpus_means_cpu_mode() -> None:
    empty: list[GpuInfo] = []
    p = plan_placement(empty, gpu_ids=None, tensor_parallel_size=1, gpu_memory_limit_gb=None)
    assert (p.gpu_ids, p.gpu_memory_utilization, p.bytes_per_gpu, p.warnings) == ([], None, 0, [])
    q = plan_placement(empty, gpu_ids=[], tensor_parallel_size=1, gpu_memory_limit_gb=8)
    assert q.gpu_ids == []
    assert "ignored" in q.warnings[0]
    with pytest.raises(InvalidRequest) as exc:
        plan_placement(empty, gpu_ids=[0], tensor_parallel_size=1, gpu_memory_limit_gb=None)
    assert exc.value.code == "unknown_gpu"


def test_cuda_env_uses_nvml_numbering() -> None:
    assert cuda_env([1, 0]) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": "1,0"}
    assert cuda_env([]) == {}
