"""The EngineAdapter hooks the supervisor and the ledger use instead of engine branches."""

from __future__ import annotations

import httpx
import pytest

from sardeenz.domain import EngineKind, InstanceStatus, ModelInstance
from sardeenz.engines import get_adapter
from sardeenz.engines.vllm_probe import Device, VllmInstall

GIB = 2**30


class Probe:
    def __init__(self, device: Device) -> None:
        self.install = VllmInstall("python3", "0.32.0", "vllm", device == "cpu", device)

    async def get(self) -> VllmInstall:
        return self.install

    async def close(self) -> None:
        return None


def _instance(engine: EngineKind, device: Device | None) -> ModelInstance:
    return ModelInstance(
        id="i1",
        model_path="m",
        served_model_name="m",
        display_name="m",
        engine=engine,
        status=InstanceStatus.ACTIVE,
        port=1,
        engine_device=device,
    )


async def test_vllm_runs_where_its_install_says() -> None:
    vllm = get_adapter(EngineKind.VLLM)
    cuda = await vllm.target(Probe("cuda"))
    assert (cuda.device, cuda.uses_gpus, cuda.no_sleep_reason, cuda.own_tmpdir) == (
        "cuda",
        True,
        None,
        True,
    )
    cpu = await vllm.target(Probe("cpu"))
    assert (cpu.device, cpu.uses_gpus) == ("cpu", False)
    assert cpu.no_sleep_reason is not None
    assert "no sleep mode" in cpu.no_sleep_reason
    assert cpu.install is not None
    assert cpu.install.cpu_build
    assert vllm.default_footprint_bytes(["--memory-gib", "6"]) is None
    refusal = vllm.sleep_refusal(_instance(EngineKind.VLLM, "cpu"))
    assert refusal is not None
    assert "CPU build" in refusal
    assert vllm.sleep_refusal(_instance(EngineKind.VLLM, "cuda")) is None
    with pytest.raises(ValueError, match="--port"):
        vllm.validate_args(["--port", "1"])


async def test_the_simulated_engine_uses_simulated_gpus_and_says_what_it_holds() -> None:
    sim = get_adapter(EngineKind.SIM)
    target = await sim.target(Probe("cpu"))  # the vLLM install does not matter to it
    assert (target.device, target.uses_gpus, target.own_tmpdir, target.install) == (
        None,
        True,
        False,
        None,
    )
    assert sim.default_footprint_bytes(["--memory-gib", "6"]) == 6 * GIB
    assert sim.default_footprint_bytes([]) == 4 * GIB
    assert sim.sleep_refusal(_instance(EngineKind.SIM, None)) is None
    assert sim.validate_args(["--memory-gib", "6"]) == ["--memory-gib", "6"]

    calls: list[tuple[str, str]] = []

    async def call(method: str, path: str) -> httpx.Response:
        calls.append((method, path))
        if path == "/sim/state":
            return httpx.Response(200, json={"memory_gib": 1.5})
        return httpx.Response(200, json={"is_sleeping": True})

    assert await sim.held_after_sleep(call) == int(1.5 * GIB)
    await sim.sleep(call, 2)
    await sim.wake(call)
    await sim.is_sleeping(call)
    assert calls[1:] == [("POST", "/sleep?level=2"), ("POST", "/wake_up"), ("GET", "/is_sleeping")]
    assert await get_adapter(EngineKind.VLLM).held_after_sleep(call) is None  # NVML shows it
