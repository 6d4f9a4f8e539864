"""Memory baselines and the per-GPU budget: KV total = total - baselines - other."""

from __future__ import annotations

from sardeenz.config import parse_sim_gpus
from sardeenz.gpu.budget import (
    Reservation,
    WakeShortfall,
    compute_budget,
    measure_baseline,
    pending_bytes_by_gpu,
    wake_shortfalls,
    with_pending_reservations,
)
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


# --- reservations of engines that have not taken their memory yet ------------------


def _gpu(index: int, used: int, processes: list[GpuProcess], total: int = 24 * GiB) -> GpuInfo:
    return GpuInfo(
        index=index,
        name="NVIDIA L4",
        uuid=f"GPU-{index}",
        total_bytes=total,
        used_bytes=used,
        free_bytes=total - used,
        processes=processes,
    )


def _free(gpus: list[GpuInfo]) -> list[int]:
    return [g.free_bytes for g in gpus]


def test_pending_reservation_is_subtracted_from_free() -> None:
    gpus = [_gpu(0, GiB, []), _gpu(1, GiB, [])]
    res = Reservation("a", (0,), 14 * GiB, frozenset({100, 101}))
    adjusted = with_pending_reservations(gpus, [res])
    assert _free(adjusted) == [9 * GiB, 23 * GiB]
    # Only free changes; the driver's other numbers and the input stay as they were.
    assert adjusted[0].used_bytes == GiB
    assert adjusted[0].total_bytes == 24 * GiB
    assert adjusted[1] is gpus[1]
    assert _free(gpus) == [23 * GiB, 23 * GiB]
    assert pending_bytes_by_gpu(gpus, [res]) == {0: 14 * GiB}


def test_partially_allocated_engine_subtracts_only_the_rest() -> None:
    # EngineCore (101) has taken 5 GiB of its 14 GiB; a foreign process holds 3 GiB.
    gpu = _gpu(
        0, 9 * GiB, [GpuProcess(pid=101, used_bytes=5 * GiB), GpuProcess(pid=7, used_bytes=3 * GiB)]
    )
    res = Reservation("a", (0,), 14 * GiB, frozenset({100, 101, 102}))
    (adjusted,) = with_pending_reservations([gpu], [res])
    assert adjusted.free_bytes == 15 * GiB - 9 * GiB
    # Memory of several processes of the same engine (TP workers, API server) adds up.
    gpu2 = _gpu(
        0, 9 * GiB, [GpuProcess(pid=101, used_bytes=5 * GiB), GpuProcess(pid=102, used_bytes=GiB)]
    )
    assert pending_bytes_by_gpu([gpu2], [res]) == {0: 8 * GiB}


def test_memory_already_shown_by_the_driver_is_not_counted_twice() -> None:
    gpu = _gpu(0, 15 * GiB, [GpuProcess(pid=101, used_bytes=15 * GiB)])
    res = Reservation("a", (0,), 14 * GiB, frozenset({100, 101}))
    (adjusted,) = with_pending_reservations([gpu], [res])
    assert adjusted.free_bytes == 9 * GiB  # what the driver says; the engine took it all
    assert pending_bytes_by_gpu([gpu], [res]) == {}
    # Another process with the same memory is someone else's: the reservation is pending.
    foreign = _gpu(0, 15 * GiB, [GpuProcess(pid=555, used_bytes=15 * GiB)])
    assert pending_bytes_by_gpu([foreign], [res]) == {0: 14 * GiB}


def test_free_never_goes_below_zero() -> None:
    gpus = [_gpu(0, 20 * GiB, [])]
    res = [
        Reservation("a", (0,), 14 * GiB),
        Reservation("b", (0,), 6 * GiB),  # not spawned yet: no PIDs, all pending
    ]
    assert pending_bytes_by_gpu(gpus, res) == {0: 20 * GiB}
    assert _free(with_pending_reservations(gpus, res)) == [0]


def test_reservations_add_up_and_follow_their_gpus() -> None:
    gpus = [_gpu(0, 0, []), _gpu(1, 0, []), _gpu(2, 0, [], total=48 * GiB)]
    res = [
        Reservation("a", (0,), 4 * GiB),
        Reservation("b", (0, 1), 3 * GiB, frozenset({200})),
        # Mixed sizes: one fraction of each GPU's total, so the 48 GiB GPU gets twice
        # the 24 GiB one's share (as plan_placement checked it).
        Reservation("c", (1, 2), 2 * GiB),
        Reservation("gone", (9,), 5 * GiB),  # a GPU the snapshot lacks is skipped
        Reservation("empty", (0,), 0),
    ]
    assert pending_bytes_by_gpu(gpus, res) == {0: 7 * GiB, 1: 5 * GiB, 2: 4 * GiB}


def test_simulated_processes_match_by_instance_id() -> None:
    inv = SimulatedInventory(parse_sim_gpus("NVIDIA L4:24GiB"))
    inv.allocate("a", [0], 6 * GiB)
    gpus = inv.snapshot_now()
    assert pending_bytes_by_gpu(gpus, [Reservation("a", (0,), 8 * GiB)]) == {0: 2 * GiB}
    assert pending_bytes_by_gpu(gpus, [Reservation("b", (0,), 8 * GiB)]) == {0: 8 * GiB}


# --- waking a sleeping engine: does what it gives back still fit? -------------------


def test_wake_fits_in_free_memory() -> None:
    # Asleep, the engine (PID 100) holds 1 GiB; it needs 13 GiB back, 16 GiB are free.
    gpu = _gpu(
        0, 8 * GiB, [GpuProcess(pid=100, used_bytes=GiB), GpuProcess(pid=7, used_bytes=7 * GiB)]
    )
    me = Reservation("a", (0,), 14 * GiB, frozenset({100}))
    assert wake_shortfalls([gpu], me, []) == []


def test_wake_refused_when_another_process_took_the_memory() -> None:
    gpu = _gpu(
        0, 12 * GiB, [GpuProcess(pid=100, used_bytes=GiB), GpuProcess(pid=7, used_bytes=11 * GiB)]
    )
    me = Reservation("a", (0,), 14 * GiB, frozenset({100}))
    assert wake_shortfalls([gpu], me, []) == [WakeShortfall(0, "NVIDIA L4", 13 * GiB, 12 * GiB)]


def test_wake_needs_the_whole_share_when_no_process_matches() -> None:
    # NVML in a container sees host PIDs: the engine's leftover cannot be told apart.
    gpu = _gpu(0, 10 * GiB, [GpuProcess(pid=9100, used_bytes=GiB)])
    me = Reservation("a", (0,), 14 * GiB, frozenset({100}))
    assert wake_shortfalls([gpu], me, []) == []
    assert wake_shortfalls([_gpu(0, 11 * GiB, [])], me, []) == [
        WakeShortfall(0, "NVIDIA L4", 14 * GiB, 13 * GiB)
    ]


def test_wake_counts_other_engines_pending_reservations_but_not_its_own() -> None:
    gpus = [_gpu(0, 2 * GiB, []), _gpu(1, 2 * GiB, [])]
    me = Reservation("a", (0, 1), 12 * GiB)
    starting = Reservation("b", (1,), 11 * GiB)  # placed while "a" slept, not allocated yet
    # "a" itself among the others (it is being woken) must not count twice.
    assert wake_shortfalls(gpus, me, [me, starting]) == [
        WakeShortfall(1, "NVIDIA L4", 12 * GiB, 22 * GiB - 11 * GiB)
    ]
    assert wake_shortfalls(gpus, me, [me]) == []


def test_wake_on_mixed_gpus_needs_each_gpus_fraction() -> None:
    # One vLLM fraction for both: the 48 GiB GPU takes back twice the 24 GiB one's share.
    gpus = [_gpu(0, 0, []), _gpu(1, 20 * GiB, [], total=48 * GiB)]
    me = Reservation("a", (0, 1), 12 * GiB)
    assert wake_shortfalls(gpus, me, []) == []  # 24 GiB back, 28 GiB free
    gpus[1] = _gpu(1, 25 * GiB, [], total=48 * GiB)
    assert wake_shortfalls(gpus, me, []) == [WakeShortfall(1, "NVIDIA L4", 24 * GiB, 23 * GiB)]
    # A GPU the snapshot lacks (fallen off the bus) is not checked.
    assert wake_shortfalls([gpus[0]], me, []) == []
