"""``GET /api/v1/engines``: what vLLM the node found, answered from the real probe."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from testkit.servers import ServerProcess


def test_a_python_without_vllm_is_reported_as_not_found(server_factory: Any) -> None:
    # The test interpreter is a real Python with no vLLM installed.
    srv: ServerProcess = server_factory(extra_env={"SARDEENZ_VLLM_PYTHON": sys.executable}).start()
    with srv.client() as api:
        resp = api.get("/api/v1/engines")
    assert resp.status_code == 200, resp.text
    report = resp.json()
    vllm = report["vllm"]
    assert vllm["python"] == sys.executable
    assert vllm["found"] is False
    assert vllm["version"] is None
    assert "not installed" in vllm["error"]
    assert vllm["description"].startswith("no vLLM found")
    assert report["sim"]["available"] is True


def test_a_missing_interpreter_is_an_error_not_a_crash(server_factory: Any, tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-python")
    srv: ServerProcess = server_factory(extra_env={"SARDEENZ_VLLM_PYTHON": missing}).start()
    with srv.client() as api:
        resp = api.get("/api/v1/engines")
    assert resp.status_code == 200, resp.text
    vllm = resp.json()["vllm"]
    assert vllm["found"] is False
    assert "cannot run" in vllm["error"]
