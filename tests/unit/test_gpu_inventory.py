"""GPU inventory: the real NVML path on this driverless machine, NVML struct
translation, and the simulated inventory's accounting."""

from __future__ import annotations

import logging

import pynvml
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sardeenz.config import Settings, SimGpuSpec, parse_sim_gpus
from sardeenz.gpu.inventory import (
    GpuInfo,
    GpuInventory,
    GpuProcess,
    NvmlInventory,
    SimulatedInventory,
    SimulatedOutOfMemory,
    create_inventory,
    gpu_info_from_nvml,
    sim_uuid,
)

GiB = 2**30


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


no_driver = pytest.mark.skipif(_driver_present(), reason="an NVIDIA driver is present")


# --- NVML, for real -----------------------------------------------------------------


@no_driver
async def test_nvml_without_driver_reports_unavailable(caplog: pytest.LogCaptureFixture) -> None:
    inv = NvmlInventory()
    assert isinstance(inv, GpuInventory)
    with caplog.at_level(logging.WARNING, logger="sardeenz.gpu.inventory"):
        await inv.open()
        assert await inv.snapshot() == []
        assert await inv.snapshot() == []
        await inv.open()
    assert inv.available is False
    assert inv.simulated is False
    assert inv.reason is not None
    assert "NVIDIA driver not found" in inv.reason
    assert "--sim-gpus" in inv.reason
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, "one warning, not one per snapshot"
    await inv.close()
    await inv.close()


@no_driver
async def test_create_inventory_without_sim_gpus_is_nvml() -> None:
    inv = create_inventory(Settings(sim_gpus=None, demo=False))
    assert isinstance(inv, NvmlInventory)
    assert await inv.snapshot() == []
    assert inv.available is False
    assert inv.reason
    assert "driver" in inv.reason
    await inv.close()


async def test_create_inventory_with_sim_gpus_is_simulated() -> None:
    inv = create_inventory(Settings(sim_gpus="NVIDIA L4:24GiB,Tesla T4:16GiB"))
    assert isinstance(inv, SimulatedInventory)
    gpus = await inv.snapshot()
    assert [(g.index, g.name, g.total_bytes) for g in gpus] == [
        (0, "NVIDIA L4", 24 * GiB),
        (1, "Tesla T4", 16 * GiB),
    ]
    assert inv.available
    assert inv.reason is None
    assert inv.simulated
    demo = create_inventory(Settings(demo=True))
    assert isinstance(demo, SimulatedInventory)
    assert len(await demo.snapshot()) == 2


# --- NVML translation from NVML's own types -----------------------------------------


def test_translation_from_nvml_structs() -> None:
    memory = pynvml.c_nvmlMemory_t(total=16 * GiB, free=10 * GiB, used=6 * GiB)
    util = pynvml.c_nvmlUtilization_t(gpu=37, memory=12)
    raw = pynvml.c_nvmlProcessInfo_t(pid=4242, usedGpuMemory=5 * GiB)
    friendly = pynvml.nvmlStructToFriendlyObject(
        pynvml.c_nvmlProcessInfo_t(pid=4343, usedGpuMemory=GiB)
    )
    unknown = pynvml.nvmlStructToFriendlyObject(pynvml.c_nvmlProcessInfo_t(pid=4444))
    unknown.usedGpuMemory = None  # what nvmlDeviceGetComputeRunningProcesses does for N/A
    marker = pynvml.c_nvmlProcessInfo_t(
        pid=4545, usedGpuMemory=pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
    )
    info = gpu_info_from_nvml(
        1,
        name=b"Tesla T4",  # old nvidia-ml-py returns bytes
        uuid="GPU-6a4c1a2e-0000-1111-2222-333344445555",
        memory=memory,
        utilization=util,
        compute_capability=(7, 5),
        processes=[raw, friendly, unknown, marker],
    )
    assert info == GpuInfo(
        index=1,
        name="Tesla T4",
        uuid="GPU-6a4c1a2e-0000-1111-2222-333344445555",
        total_bytes=16 * GiB,
        used_bytes=6 * GiB,
        free_bytes=10 * GiB,
        utilization_percent=37,
        compute_capability=(7, 5),
        processes=[
            GpuProcess(pid=4242, used_bytes=5 * GiB),
            GpuProcess(pid=4343, used_bytes=GiB),
            GpuProcess(pid=4444, used_bytes=0),
            GpuProcess(pid=4545, used_bytes=0),
        ],
        simulated=False,
    )


def test_translation_without_optional_values_uses_name_table() -> None:
    memory = pynvml.c_nvmlMemory_v2_t(total=24 * GiB, free=20 * GiB, used=3 * GiB, reserved=GiB)
    info = gpu_info_from_nvml(0, name="NVIDIA L4", uuid=b"GPU-abc", memory=memory, utilization=None)
    assert info.name == "NVIDIA L4"
    assert info.uuid == "GPU-abc"
    assert info.utilization_percent is None
    assert info.compute_capability == (8, 9)  # from the name: the NVML call failed
    assert info.free_bytes == 20 * GiB  # the driver's free, not total - used
    assert info.processes == []
    dumped = info.model_dump()
    assert dumped["totalBytes"] == 24 * GiB
    assert dumped["computeCapability"] == (8, 9)


# --- simulated ----------------------------------------------------------------------


def _sim(**kw: int) -> SimulatedInventory:
    return SimulatedInventory(parse_sim_gpus("NVIDIA L4:24GiB,Tesla T4:16GiB"), **kw)


def test_simulated_snapshot_shape() -> None:
    inv = _sim(other_bytes=GiB)
    gpus = inv.snapshot_now()
    assert [g.uuid for g in gpus] == [sim_uuid(0), sim_uuid(1)]
    assert gpus[0].uuid.startswith("GPU-sim-")
    assert gpus[0].compute_capability == (8, 9)
    assert gpus[1].compute_capability == (7, 5)
    assert all(g.simulated for g in gpus)
    assert gpus[0].used_bytes == GiB
    assert gpus[0].free_bytes == 23 * GiB


def test_simulated_allocate_sleep_release() -> None:
    inv = _sim()
    inv.allocate("a", [0], 8 * GiB, pid=100)
    inv.allocate("b", [0, 1], 4 * GiB)
    g0, g1 = inv.snapshot_now()
    assert g0.used_bytes == 12 * GiB
    assert g0.free_bytes == 12 * GiB
    assert g1.used_bytes == 4 * GiB
    assert {(p.instance_id, p.pid, p.used_bytes) for p in g0.processes} == {
        ("a", 100, 8 * GiB),
        ("b", None, 4 * GiB),
    }
    inv.set_usage("a", GiB // 2)  # asleep: weights offloaded
    inv.set_usage("b", {1: GiB}, pid=200)
    g0, g1 = inv.snapshot_now()
    assert g0.used_bytes == GiB // 2 + 4 * GiB
    assert g1.used_bytes == GiB
    assert g1.processes[0].pid == 200
    assert inv.usage("b") == {0: 4 * GiB, 1: GiB}
    with pytest.raises(SimulatedOutOfMemory, match="out of memory"):
        inv.allocate("c", [1], 16 * GiB)
    with pytest.raises(SimulatedOutOfMemory):
        inv.set_usage("a", 21 * GiB)
    with pytest.raises(ValueError, match="already"):
        inv.allocate("a", [1], 1)
    with pytest.raises(ValueError, match="no simulated GPU 7"):
        inv.allocate("d", [7], 1)
    with pytest.raises(KeyError):
        inv.set_usage("zzz", 1)
    assert inv.release("a")
    assert inv.release("b")
    assert not inv.release("a")
    assert [g.used_bytes for g in inv.snapshot_now()] == [0, 0]


_ids = st.sampled_from(["a", "b", "c", "d"])
_amount = st.integers(min_value=0, max_value=30 * GiB)
_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("allocate"), _ids, st.lists(st.integers(0, 2), min_size=1, max_size=3), _amount
        ),
        st.tuples(st.just("set_usage"), _ids, _amount),
        st.tuples(st.just("release"), _ids),
    ),
    max_size=40,
)


@settings(max_examples=100, deadline=None)
@given(ops=_ops, other=st.integers(0, 2 * GiB))
def test_simulated_accounting_adds_up(ops: list[tuple[object, ...]], other: int) -> None:
    specs = [
        SimGpuSpec(index=0, name="NVIDIA L4", memory_bytes=24 * GiB),
        SimGpuSpec(index=1, name="Tesla T4", memory_bytes=16 * GiB),
        SimGpuSpec(index=2, name="NVIDIA A100", memory_bytes=40 * GiB),
    ]
    inv = SimulatedInventory(specs, other_bytes=other)
    model: dict[str, dict[int, int]] = {}
    for op in ops:
        kind, iid = op[0], str(op[1])
        try:
            if kind == "allocate":
                gpu_ids, amount = op[2], op[3]
                assert isinstance(gpu_ids, list)
                assert isinstance(amount, int)
                inv.allocate(iid, gpu_ids, amount)
                model[iid] = dict.fromkeys(gpu_ids, amount)
            elif kind == "set_usage":
                amount = op[2]
                assert isinstance(amount, int)
                inv.set_usage(iid, amount)
                model[iid] = dict.fromkeys(model[iid], amount)
            else:
                assert inv.release(iid) == (iid in model)
                model.pop(iid, None)
        except (SimulatedOutOfMemory, ValueError, KeyError):
            pass  # refused: nothing may have changed (checked below)
        for gpu in inv.snapshot_now():
            booked = sum(m.get(gpu.index, 0) for m in model.values())
            assert gpu.used_bytes == other + booked
            assert gpu.free_bytes == gpu.total_bytes - gpu.used_bytes >= 0
            assert sum(p.used_bytes for p in gpu.processes) == booked
    for iid in list(model):
        assert inv.release(iid)
    assert [g.free_bytes for g in inv.snapshot_now()] == [s.memory_bytes - other for s in specs]
