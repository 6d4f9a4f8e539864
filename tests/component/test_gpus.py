"""GPU placement, kvcached, attention backend and sleep mode on simulated GPUs.

Real `sardeenz serve --sim-gpus ...` and real sim-engine processes; the engine's
environment is read back from /proc, so what is asserted is what it really got.
"""

from __future__ import annotations

from typing import Any

import httpx
import psutil

from testkit.servers import ServerProcess, engine_processes, load_active, sim_load, wait_for_status

GIB = 2**30


def _gpus(api: httpx.Client) -> dict[str, Any]:
    resp = api.get("/api/v1/gpus")
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


def _used(api: httpx.Client) -> list[int]:
    return [g["usedBytes"] for g in _gpus(api)["gpus"]]


def _env(pid: int) -> dict[str, str]:
    return psutil.Process(pid).environ()


def test_no_gpus_is_reported_cleanly_by_real_nvml(module_server: ServerProcess) -> None:
    with module_server.client() as api:
        report = _gpus(api)
    assert report["available"] is False
    assert report["simulated"] is False
    assert report["gpus"] == []
    assert "driver" in report["reason"].lower() or "nvml" in report["reason"].lower()


def test_auto_placement_spreads_by_free_memory_and_books_memory(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(
        args=["--sim-gpus", "NVIDIA A100:40GiB,NVIDIA A100:40GiB"]
    ).start()
    with srv.client() as api:
        insts = []
        for i in range(3):
            inst = sim_load(api, f"spread-{i}", "--memory-gib", "6")
            insts.append(inst)
        assert [i["gpuIds"] for i in insts] == [[0], [1], [0]]
        for inst in insts:
            assert inst["reservedBytesPerGpu"] == 6 * GIB
            assert 0 < inst["gpuMemoryUtilization"] <= 1
        assert _used(api) == [12 * GIB, 6 * GIB]
        report = _gpus(api)
        assert all(g["freeBytes"] == g["totalBytes"] - g["usedBytes"] for g in report["gpus"])
        active = wait_for_status(api, insts[0]["id"], "active")
        assert active["memoryBaselineByGpu"] == {"0": round(6 * GIB / 1e9, 3)}
        env = _env(active["processId"])
        assert env["CUDA_VISIBLE_DEVICES"] == "0"
        assert env["ENABLE_KVCACHED"] == "true"
        assert env["KVCACHED_AUTOPATCH"] == "1"
        assert env["KVCACHED_IPC_NAME"] == "kvcached_vllm_GPU0"
        assert active["kvcachedEnabled"] is True
        budget0 = _gpus(api)["budgets"][0]
        assert budget0["baselineBytes"] >= 6 * GIB
        assert budget0["kvCacheTotalBytes"] == (
            budget0["totalBytes"] - budget0["baselineBytes"] - budget0["otherBytes"]
        )
        # Unloading gives the memory back.
        api.post(f"/api/v1/models/{insts[1]['id']}/unload").raise_for_status()
        assert _used(api)[1] == 0


def test_tensor_parallel_takes_two_gpus_without_kvcached(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(args=["--sim-gpus", "NVIDIA L4:24GiB,NVIDIA L4:24GiB"])
    srv.start()
    with srv.client() as api:
        inst = sim_load(api, "tp2", "--memory-gib", "4", tensorParallelSize=2)
        assert inst["gpuIds"] == [0, 1]
        assert inst["kvcachedEnabled"] is False
        active = wait_for_status(api, inst["id"], "active")
        env = _env(active["processId"])
        assert env["CUDA_VISIBLE_DEVICES"] == "0,1"
        assert "ENABLE_KVCACHED" not in env
        assert "KVCACHED_IPC_NAME" not in env
        assert _used(api) == [4 * GIB, 4 * GIB]
        bad = api.post(
            "/api/v1/models/load",
            json={"modelPath": "m", "engine": "sim", "gpuIds": [0, 0], "tensorParallelSize": 2},
        )
        assert bad.status_code == 400
        assert bad.json()["code"] == "invalid_gpu_ids"


def test_pre_ampere_gpu_gets_triton_backend_unless_user_chose(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(args=["--sim-gpus", "Tesla T4:16GiB"]).start()
    with srv.client() as api:
        auto = sim_load(api, "t4-auto", "--memory-gib", "2")
        assert auto["extraArgs"][-2:] == ["--attention-backend", "TRITON_ATTN"]
        assert any("7.5" in w and "TRITON_ATTN" in w for w in auto["warnings"])
        mine = sim_load(api, "t4-mine", "--memory-gib", "2", "--attention-backend=FLASHINFER")
        assert "TRITON_ATTN" not in mine["extraArgs"]
        assert mine["extraArgs"][-1] == "--attention-backend=FLASHINFER"
        active = wait_for_status(api, auto["id"], "active")
        assert "TRITON_ATTN" in psutil.Process(active["processId"]).cmdline()


def test_too_big_is_refused_before_any_process_starts(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(args=["--sim-gpus", "NVIDIA L4:24GiB,Tesla T4:16GiB"])
    srv.start()
    with srv.client() as api:
        resp = api.post(
            "/api/v1/models/load",
            json={"modelPath": "huge", "engine": "sim", "extraArgs": ["--memory-gib", "30"]},
        )
        assert resp.status_code == 409, resp.text
        body = resp.json()
        assert body["code"] == "insufficient_gpu_memory"
        assert "GPU0" in body["detail"]
        assert "GPU1" in body["detail"]
        resp = api.post(
            "/api/v1/models/load",
            json={"modelPath": "huge", "engine": "sim", "gpuMemoryLimit": 100},
        )
        assert resp.status_code == 409
        assert api.get("/api/v1/models").json() == []
    assert engine_processes(srv.data_dir) == []


def test_sleep_frees_simulated_memory_and_wake_restores_it(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(args=["--sim-gpus", "NVIDIA L4:24GiB"]).start()
    with srv.client() as api:
        inst = sim_load(api, "sleepy", "--memory-gib", "8", enableSleepMode=True)
        active = wait_for_status(api, inst["id"], "active")
        assert _env(active["processId"])["VLLM_SERVER_DEV_MODE"] == "1"
        assert "--enable-sleep-mode" in psutil.Process(active["processId"]).cmdline()
        assert _used(api) == [8 * GIB]

        resp = api.post(f"/api/v1/models/{inst['id']}/sleep", json={"level": 1})
        assert resp.status_code == 200, resp.text
        slept = resp.json()
        assert slept["status"] == "sleeping"
        assert slept["sleepLevel"] == 1
        assert slept["sleptAt"] is not None
        asleep_used = _used(api)[0]
        assert 0 < asleep_used < 1 * GIB  # weights and KV cache freed, a little remains

        resp = api.post(f"/api/v1/models/{inst['id']}/wake")
        assert resp.status_code == 200, resp.text
        woke = resp.json()
        assert woke["status"] == "active"
        assert woke["sleepLevel"] is None
        assert _used(api) == [8 * GIB]

        resp = api.post(f"/api/v1/models/{inst['id']}/sleep?level=2")
        assert resp.json()["sleepLevel"] == 2
        assert api.post(f"/api/v1/models/{inst['id']}/sleep?level=3").status_code == 422


def test_sleep_without_sleep_mode_is_a_409(module_server: ServerProcess) -> None:
    with module_server.client() as api:
        inst = load_active(api, "awake")
        resp = api.post(f"/api/v1/models/{inst['id']}/sleep")
        assert resp.status_code == 409
        assert resp.json()["code"] == "sleep_mode_disabled"
        assert api.post("/api/v1/models/nope/sleep").status_code == 404
        assert api.get(f"/api/v1/models/{inst['id']}").json()["status"] == "active"


def test_kvcached_segments_view_answers_without_kvctl(module_server: ServerProcess) -> None:
    with module_server.client() as api:
        resp = api.get("/api/v1/kvcached/segments")
        assert resp.status_code == 200
        body = resp.json()
        assert body["source"] in ("kvctl", "shm")
        assert isinstance(body["segments"], list)
