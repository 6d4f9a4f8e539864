"""``POST /api/cluster/schedule`` on a single node: the scheduler's need is the fit check's.

The dry run of a load of a model directory judges it with the same numbers
``POST /api/memory/profiles/check`` answers (the estimate here), and says no,
per pod, when nothing fits. The 3-pod behaviour is in tests/cluster/test_scheduling.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testkit.servers import ServerPool, ServerProcess
from tests.component.test_memory_profiles import _model_dir

GIB = 2**30


@pytest.fixture(scope="module")
def node(module_server_factory: ServerPool) -> ServerProcess:
    return module_server_factory(
        args=["--sim-gpus", "NVIDIA L4:24GiB,Tesla T4:16GiB"], extra_env={"POD_NAME": "solo"}
    ).start()


def test_dry_run_uses_the_fit_checks_need(node: ServerProcess, tmp_path: Path) -> None:
    model = _model_dir(tmp_path, "eight", 8 * GIB)
    with node.client() as api:
        fit = api.post(
            "/api/memory/profiles/check", json={"modelPath": str(model), "maxTokens": 4096}
        ).json()
        assert fit["source"] == "estimate"
        body = {
            "modelPath": str(model),
            "engine": "sim",
            "extraArgs": ["--memory-gib", "1", "--max-model-len", "4096"],
        }
        resp = api.post("/api/cluster/schedule", json=body)
        assert resp.status_code == 200, resp.text
        verdict = resp.json()
        assert verdict["placed"] is True
        assert verdict["podId"] == "solo"
        assert verdict["needSource"] == "estimate"
        assert verdict["needBytesPerGpu"] == fit["neededBytesPerGpu"]  # more than the booking
        assert verdict["needBytesPerGpu"] > GIB
        assert verdict["gpuIds"] == [0]  # balanced: the L4 keeps more free than the T4
        t4 = api.post("/api/cluster/schedule", json={**body, "gpuType": "t4"}).json()
        assert t4["gpuIds"] == [1]
        assert api.get("/api/v1/models").json() == []  # a dry run loads nothing

        model_big = _model_dir(tmp_path, "forty", 40 * GIB)
        refused = api.post(
            "/api/cluster/schedule", json={**body, "modelPath": str(model_big)}
        ).json()
        assert refused["placed"] is False
        assert set(refused["reasons"]) == {"solo"}
        assert "GPU0 NVIDIA L4" in refused["reasons"]["solo"]
        bad = api.post("/api/cluster/schedule", json={**body, "minVramGiB": -1})
        assert bad.status_code == 422
