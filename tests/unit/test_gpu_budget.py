"""Memory baselines and the per-GPU budget: KV total = total - baselines - other."""

from __future__ import annotations

from sardeenz.config import parse_sim_gpus
from sardeenz.gpu.budget import compute_budget, measure_baseline
from sardeenz.gpu.inventory import GpuInfo, GpuProcess, SimulatedInventory

GiB = 2**30


def test_budget_on_simulated_gpus() -> None:
    inv = SimulatedInventory(
        parse_sim_gpus("NVIDIA L4:24GiB,Tesla T4:16GiB"), other_bytes={0: GiB, 1: 2 * GiB}
    )
    inv.allocate("a", [0], 6 * GiB)
    inv.allocate("b", [0], 4 * GiB)
    # Baselines taken when they became ready; "a" has since grown its KV cache.
    baselines = {"a": {0: 5 * GiB}, "b": {0: 4 * GiB}}
    g0, g1 = compute_budget(inv.snapshot_now(), baselines)
    assert g0.total_bytes == 24 * GiB
    assert g0.baseline_bytes == 9 * GiB
    assert g0.other_bytes == GiB  # used 11 GiB, ours hold 10 GiB now
    assert g0.kv_cache_total_bytes == 24 * GiB - 9 * GiB - GiB
    assert g0.free_bytes == 13 * GiB
    assert g0.instances == {"a": 5 * GiB, "b": 4 * GiB}
    assert (g1.baseline_bytes, g1.other_bytes, g1.kv_cache_total_bytes) == (0, 2 * GiB, 14 * GiB)
    assert g1.instances == {}
    assert g0.model_dump() == {
        "index": 0,
        "name": "NVIDIA L4",
        "simulated": True,
        "totalBytes": 24 * GiB,
        "usedBytes": 11 * GiB,
        "freeBytes": 13 * GiB,
        "baselineBytes": 9 * GiB,
        "otherBytes": GiB,
        "kvCacheTotalBytes": 14 * GiB,
        "instances": {"a": 5 * GiB, "b": 4 * GiB},
    }


def _real(used: int, processes: list[GpuProcess]) -> GpuInfo:
    return GpuInfo(
        index=0,
        name="NVIDIA L4",
        uuid="GPU-1",
        total_bytes=24 * GiB,
        used_bytes=used,
        free_bytes=24 * GiB - used,
        processes=processes,
    )


def test_budget_matches_nvml_processes_by_pid() -> None:
    gpu = _real(
        12 * GiB,
        [GpuProcess(pid=100, used_bytes=7 * GiB), GpuProcess(pid=555, used_bytes=3 * GiB)],
    )
    (b,) = compute_budget([gpu], {"a": {0: 6 * GiB}}, instance_pids={"a": [99, 100]})
    # pid 555 and the 2 GiB nobody claims (driver, contexts) are "other".
    assert b.other_bytes == 5 * GiB
    assert b.kv_cache_total_bytes == 24 * GiB - 6 * GiB - 5 * GiB


def test_budget_without_process_info_assumes_baselines() -> None:
    gpu = _real(12 * GiB, [])  # NVML in a container: no visible processes
    (b,) = compute_budget([gpu], {"a": {0: 6 * GiB}}, instance_pids={"a": [100]})
    assert b.other_bytes == 6 * GiB  # used - baselines
    assert b.kv_cache_total_bytes == 12 * GiB
    (floor,) = compute_budget([_real(GiB, [])], {"a": {0: 6 * GiB}})
    assert floor.other_bytes == 0
    assert floor.kv_cache_total_bytes == 18 * GiB


def test_measure_baseline() -> None:
    inv = SimulatedInventory(parse_sim_gpus("NVIDIA L4:24GiB,NVIDIA L4:24GiB"))
    inv.allocate("tp", [0, 1], 7 * GiB, pid=321)
    gpus = inv.snapshot_now()
    assert measure_baseline(gpus, gpu_ids=[0, 1], instance_id="tp") == {0: 7 * GiB, 1: 7 * GiB}
    assert measure_baseline(gpus, gpu_ids=[1], pids=[321]) == {1: 7 * GiB}
    assert measure_baseline(gpus, gpu_ids=[0], pids=[999]) is None
