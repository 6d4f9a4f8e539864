"""CPU-mode vLLM loads through a real `sardeenz serve`, without vLLM installed.

``SARDEENZ_VLLM_DEVICE=cpu`` makes the controller treat vLLM as its CPU build; the engine
interpreter is this venv's Python, which has no vLLM, so every engine dies at once with
``No module named vllm``. That is enough to check what happens before and around the engine:
the host-memory refusal, ``force``, the sleep refusal, and the clean-up of the engine's
TMPDIR. The real engine is exercised by tests/vllm.
"""

from __future__ import annotations

import sys
import time

import pytest

from tests.support import ServerPool, ServerProcess, engine_processes, wait_for_status

CPU_ENV = {
    "SARDEENZ_VLLM_PYTHON": sys.executable,
    "SARDEENZ_VLLM_DEVICE": "cpu",
    # No machine has 4 TiB available: every CPU-mode load is over the estimate.
    "SARDEENZ_VLLM_CPU_KVCACHE_GIB": "4096",
}


@pytest.fixture(scope="module")
def cpu_server(module_server_factory: ServerPool) -> ServerProcess:
    """One CPU-mode server for the module.

    The refusal starts and records nothing; the forced load unloads what it
    started: neither test sees a trace of the other, in either order.
    """
    srv: ServerProcess = module_server_factory(extra_env=CPU_ENV)
    return srv.start()


def test_cpu_mode_load_is_refused_when_host_memory_is_short(cpu_server: ServerProcess) -> None:
    with cpu_server.client() as api:
        resp = api.post("/api/v1/models/load", json={"modelPath": "org/model", "engine": "vllm"})
        assert resp.status_code == 409, resp.text
        body = resp.json()
        assert body["code"] == "insufficient_host_memory"
        assert body["requiredBytes"] > body["availableBytes"]
        assert body["kvCacheBytes"] == 4096 * 2**30
        assert "force" in body["detail"]
        assert api.get("/api/v1/models").json() == []  # nothing was started or recorded


def test_forced_cpu_load_runs_without_gpu_settings_and_cleans_up(cpu_server: ServerProcess) -> None:
    srv = cpu_server
    with srv.client() as api:
        resp = api.post(
            "/api/v1/models/load",
            json={
                "modelPath": "org/model",
                "engine": "vllm",
                "force": True,
                "enableSleepMode": True,
                "gpuMemoryLimit": 4,
            },
        )
        assert resp.status_code == 202, resp.text
        inst = resp.json()
        assert inst["engineDevice"] == "cpu"
        assert inst["gpuIds"] == []
        assert inst["gpuMemoryUtilization"] is None
        assert inst["kvcachedEnabled"] is False
        assert inst["sleepModeEnabled"] is False
        assert any("no sleep mode" in w for w in inst["warnings"])

        failed = wait_for_status(api, inst["id"], "failed", timeout=30)
        assert "No module named 'vllm'" in failed["errorMessage"]
        assert [p for p in engine_processes(srv.data_dir) if p.is_running()] == []
        tmp_dir = srv.data_dir / "instances" / inst["id"] / "tmp"
        deadline = time.monotonic() + 5
        while tmp_dir.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not tmp_dir.exists()
        assert (srv.data_dir / "instances" / inst["id"] / "engine.log").exists()  # kept

        started = time.monotonic()
        sleep = api.post(f"/api/v1/models/{inst['id']}/sleep")
        assert time.monotonic() - started < 2
        assert sleep.status_code == 409, sleep.text
        assert sleep.json()["code"] == "sleep_unsupported"
        assert "CPU build" in sleep.json()["detail"]

        gpu_ids = api.post(
            "/api/v1/models/load",
            json={"modelPath": "org/model", "engine": "vllm", "force": True, "gpuIds": [0]},
        )
        assert gpu_ids.status_code == 400, gpu_ids.text
        assert "runs on CPU" in gpu_ids.json()["detail"]
        assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200
