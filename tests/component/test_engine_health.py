"""An engine that stops answering, or never becomes ready, ends `failed` and leaves nothing.

Real `sardeenz serve` with short health and readiness settings, real sim-engine
processes. A SIGSTOPped engine keeps its listening socket (the kernel still
accepts connections) but never answers: only the health checks can tell, and
the third failed one in a row must fail the instance and kill the whole
stopped tree (SIGKILL works on a stopped process; nobody sends SIGCONT).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from testkit.servers import (
    ServerPool,
    ServerProcess,
    engine_processes,
    load_active,
    sim_load,
    tree_pids,
    wait_for_status,
    wait_gone,
)

HEALTH_INTERVAL = 0.5
HEALTH_TIMEOUT = 1.0
HEALTH_THRESHOLD = 3
READY_TIMEOUT = 5.0
SLACK = 4.0
"""Polling, a busy machine, and the kill after the verdict."""


@pytest.fixture(scope="module")
def health_server(module_server_factory: ServerPool) -> ServerProcess:
    srv: ServerProcess = module_server_factory(
        extra_env={
            "SARDEENZ_HEALTH_INTERVAL_SECONDS": str(HEALTH_INTERVAL),
            "SARDEENZ_HEALTH_TIMEOUT_SECONDS": str(HEALTH_TIMEOUT),
            "SARDEENZ_HEALTH_FAILURE_THRESHOLD": str(HEALTH_THRESHOLD),
            "SARDEENZ_READY_TIMEOUT_SECONDS": str(READY_TIMEOUT),
        }
    )
    return srv.start()


def _processes_of(data_dir: Path, instance_id: str) -> list[psutil.Process]:
    """Live processes carrying the instance's marker: children spawned later included."""
    found = []
    for proc in engine_processes(data_dir):
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("SARDEENZ_INSTANCE_ID") == instance_id and proc.is_running():
                found.append(proc)
    return found


def _wait_no_processes(data_dir: Path, instance_id: str, timeout: float = 5.0) -> list[Any]:
    deadline = time.monotonic() + timeout
    left = _processes_of(data_dir, instance_id)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = _processes_of(data_dir, instance_id)
    return [(p.pid, p.status()) for p in left if p.is_running()]


def test_a_hung_engine_fails_after_three_failed_health_checks(
    health_server: ServerProcess,
) -> None:
    with health_server.client() as api:
        inst = load_active(api, "hung")
        pids = tree_pids(inst["processId"])
        assert len(pids) >= 2  # the API server and its EngineCore child

        t0 = time.monotonic()
        os.kill(inst["processId"], signal.SIGSTOP)
        # Each failed check waits out the timeout; the verdict comes after the third.
        bound = HEALTH_THRESHOLD * (HEALTH_INTERVAL + HEALTH_TIMEOUT) + SLACK
        failed = wait_for_status(api, inst["id"], "failed", timeout=bound)
        elapsed = time.monotonic() - t0
        assert elapsed >= (HEALTH_THRESHOLD - 1) * HEALTH_TIMEOUT, elapsed  # not on one miss
        assert f"health check failed {HEALTH_THRESHOLD} times" in failed["errorMessage"]

        # The stopped tree is killed, not left stopped (no SIGCONT from anyone).
        assert wait_gone(pids) == []
        assert _wait_no_processes(health_server.data_dir, inst["id"]) == []
        assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200


def test_a_start_that_never_becomes_ready_fails_at_the_ready_timeout(
    health_server: ServerProcess,
) -> None:
    with health_server.client() as api:
        t0 = time.monotonic()
        inst = sim_load(api, "never-ready", "--load-seconds", "60")
        assert inst["status"] == "starting"
        failed = wait_for_status(api, inst["id"], "failed", timeout=READY_TIMEOUT + SLACK)
        elapsed = time.monotonic() - t0
        assert elapsed >= READY_TIMEOUT, elapsed
        assert f"not ready after {READY_TIMEOUT:g} s" in failed["errorMessage"]
        assert failed["processId"] > 0  # it was started, then given up on
        assert _wait_no_processes(health_server.data_dir, inst["id"]) == []
        assert wait_gone([failed["processId"]]) == []
        assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200
