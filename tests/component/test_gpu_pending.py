"""Placement counts the memory of engines still starting on driver-backed GPUs.

On real GPUs (NVML) an engine that was just spawned has not taken its memory yet:
vLLM allocates only after loading weights and profiling. The inventory here behaves
like NVML in that situation: its free memory never drops when an engine starts. The
app runs in this process (its inventory cannot be chosen from outside), the engines
are real simulated-engine processes, and every call goes through the HTTP API.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from starlette.testclient import TestClient

from sardeenz import app as app_module
from sardeenz.app import create_app
from sardeenz.config import Settings, load_settings
from sardeenz.gpu.inventory import GpuInfo
from testkit.ports import free_port_range
from testkit.servers import engine_processes, kill_engines

GIB = 2**30
GPU_BYTES = 24 * GIB
LIMIT_GB = 15  # decimal GB, about 14 GiB: one fits in 24 GiB after the 2 GB reserve, two do not


class DriverLikeInventory:
    """One GPU whose free memory is what a driver reports before any engine allocates.

    The same protocol as ``NvmlInventory`` (not simulated: the supervisor books nothing
    in it). Our engines never show up in it: the driver's view of a GPU whose engines
    are all still loading weights, or asleep. ``other_bytes`` is memory some other
    process holds; a test changes it to take GPU memory away from under the engines.
    """

    simulated = False

    def __init__(self) -> None:
        self.snapshots = 0
        self.other_bytes = 0

    @property
    def available(self) -> bool:
        return True

    @property
    def reason(self) -> str | None:
        return None

    async def open(self) -> None:
        return None

    async def close(self) -> None:
        return None

    async def snapshot(self) -> list[GpuInfo]:
        self.snapshots += 1
        used = 512 * 2**20 + self.other_bytes  # the driver's own reservation, and others
        return [
            GpuInfo(
                index=0,
                name="NVIDIA L4",
                uuid="GPU-00000000-test-driver-like",
                total_bytes=GPU_BYTES,
                used_bytes=used,
                free_bytes=GPU_BYTES - used,
                utilization_percent=0,
                compute_capability=(8, 9),
                processes=[],
            )
        ]


@pytest.fixture
def settings(tmp_path: Path) -> Iterator[Settings]:
    data_dir = tmp_path / "node"
    yield load_settings(
        data_dir=data_dir,
        vllm_base_port=free_port_range(10),
        port_range_size=10,
        health_interval_seconds=0.5,
        stop_grace_seconds=5,
    )
    kill_engines(data_dir)


@pytest.fixture
def inventory(monkeypatch: pytest.MonkeyPatch) -> DriverLikeInventory:
    inv = DriverLikeInventory()
    monkeypatch.setattr(app_module, "create_inventory", lambda _settings: inv)
    return inv


def _load(
    api: TestClient, name: str, load_seconds: float, **fields: object
) -> tuple[int, dict[str, object]]:
    resp = api.post(
        "/api/v1/models/load",
        json={
            "modelPath": name,
            "engine": "sim",
            "gpuMemoryLimit": LIMIT_GB,
            "extraArgs": ["--load-seconds", str(load_seconds), "--memory-gib", "14"],
            **fields,
        },
    )
    body: dict[str, object] = resp.json()
    return resp.status_code, body


def _wait_for_status(api: TestClient, instance_id: str, wanted: str) -> None:
    deadline = time.monotonic() + 60
    status = None
    while time.monotonic() < deadline:
        status = api.get(f"/api/v1/models/{instance_id}").json()["status"]
        if status == wanted:
            return
        time.sleep(0.1)
    raise AssertionError(f"instance {instance_id} is {status}, not {wanted}")


def test_a_starting_engine_keeps_its_memory_from_the_next_load(
    settings: Settings, inventory: DriverLikeInventory
) -> None:
    with TestClient(create_app(settings)) as api:
        status, a = _load(api, "model-a", load_seconds=60)
        assert status == 202, a
        assert a["gpuIds"] == [0]
        assert a["reservedBytesPerGpu"] == LIMIT_GB * 10**9

        # A is still loading: the driver shows its memory as free, placement must not.
        assert api.get(f"/api/v1/models/{a['id']}").json()["status"] == "starting"
        status, refused = _load(api, "model-b", load_seconds=0.3)
        assert status == 409, refused
        assert refused["code"] == "insufficient_gpu_memory"
        assert "still starting" in str(refused["detail"])
        assert refused["chosenGpuIds"] == [0]
        assert [m["id"] for m in api.get("/api/v1/models").json()] == [a["id"]]
        # The GPU view keeps showing what the driver says.
        (gpu,) = api.get("/api/v1/gpus").json()["gpus"]
        assert gpu["freeBytes"] == GPU_BYTES - 512 * 2**20

        # Once A is gone its reservation goes with it.
        unload = api.post(f"/api/v1/models/{a['id']}/unload")
        assert unload.status_code == 200, unload.text
        status, b = _load(api, "model-b", load_seconds=0.3)
        assert status == 202, b
        assert b["gpuIds"] == [0]
        _wait_for_status(api, str(b["id"]), "active")
    assert engine_processes(settings.data_dir) == []
    assert inventory.snapshots >= 3


def test_waking_refuses_when_the_memory_it_gave_back_was_taken(
    settings: Settings, inventory: DriverLikeInventory
) -> None:
    # A long proxy wait: a refused wake-up must answer at once, not after the wait.
    settings = settings.model_copy(update={"proxy_ready_wait_seconds": 30.0})
    with TestClient(create_app(settings)) as api:
        status, a = _load(api, "model-a", load_seconds=0.3, enableSleepMode=True)
        assert status == 202, a
        iid = str(a["id"])
        _wait_for_status(api, iid, "active")
        resp = api.post(f"/api/v1/models/{iid}/sleep", json={"level": 1})
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "sleeping"

        # While it sleeps another process takes most of the GPU: 14 GiB cannot come back.
        inventory.other_bytes = 12 * GIB
        resp = api.post(f"/api/v1/models/{iid}/wake")
        assert resp.status_code == 409, resp.text
        refused = resp.json()
        assert refused["code"] == "insufficient_gpu_memory"
        detail = str(refused["detail"])
        assert f"cannot wake {iid}" in detail
        assert "GPU0 NVIDIA L4 needs 14.0 GiB back" in detail
        assert "11.5 GiB free" in detail  # 24 GiB - 0.5 GiB - 12 GiB = 11.5 GiB
        after = api.get(f"/api/v1/models/{iid}").json()
        assert after["status"] == "sleeping"
        assert after["sleepLevel"] == 1
        # The engine itself was not asked to wake.
        engine = f"http://{settings.engine_host}:{after['port']}"
        assert httpx.get(f"{engine}/is_sleeping").json() == {"is_sleeping": True}

        # The proxy's auto-wake meets the same refusal: an OpenAI 503 at once, with
        # the reason, and the model still asleep.
        t0 = time.monotonic()
        resp = api.post("/v1/completions", json={"model": "model-a", "prompt": "hi"})
        assert resp.status_code == 503, resp.text
        assert time.monotonic() - t0 < 5  # not the 30 s ready wait
        error = resp.json()["error"]
        assert error["type"] == "service_unavailable_error"
        assert error["code"] == "wake_failed"
        assert "could not be woken" in error["message"]
        assert "needs 14.0 GiB back" in error["message"]
        assert resp.headers["retry-after"] == "10"
        assert api.get(f"/api/v1/models/{iid}").json()["status"] == "sleeping"

        # The other process is gone: the wake-up fits again.
        inventory.other_bytes = 0
        resp = api.post(f"/api/v1/models/{iid}/wake")
        assert resp.status_code == 200, resp.text
        assert resp.json()["status"] == "active"
        assert api.get(f"/api/v1/models/{iid}").json()["status"] == "active"
    assert engine_processes(settings.data_dir) == []
