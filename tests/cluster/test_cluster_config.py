"""Cluster settings at start-up: refused in one line (exit 2), and single mode costs nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from testkit.servers import HTTP, ServerProcess


def _serve(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", "serve", "--data-dir", str(tmp_path / "data")],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def test_static_mode_without_a_secret_refuses_to_start(tmp_path: Path) -> None:
    done = _serve(tmp_path, CLUSTER_PEERS="127.0.0.2:3000", CLUSTER_SECRET="")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "CLUSTER_SECRET is empty" in lines[0]
    assert not (tmp_path / "data").exists()


def test_a_short_secret_is_refused_without_echoing_it(tmp_path: Path) -> None:
    done = _serve(tmp_path, CLUSTER_PEERS="127.0.0.2:3000", CLUSTER_SECRET="hunter2-secret")
    assert done.returncode == 2
    assert "CLUSTER_SECRET is 14 bytes" in done.stderr
    assert "hunter2" not in done.stderr


def test_single_node_mode_has_no_cluster_and_no_internal_api(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "single").start()
    try:
        status = HTTP.get(f"{srv.url}/api/cluster/status", timeout=5).json()
        assert status["mode"] == "single"
        assert status["leader"] == status["pods"][0]["id"]
        assert [p["isLeader"] for p in status["pods"]] == [True]
        resp = HTTP.get(f"{srv.url}/internal/ping", timeout=5)
        assert resp.status_code == 404
        assert resp.json()["code"] == "not_clustered"
        assert "cluster" not in srv.log().lower()  # no cluster task, no cluster log line
    finally:
        srv.stop()


def test_cli_cluster_status(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "cli").start()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "sardeenz.cli", "cluster", "status", "--url", srv.url],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert done.returncode == 0, done.stderr
        assert "mode single" in done.stdout
        assert "healthy" in done.stdout
        as_json = subprocess.run(
            [sys.executable, "-m", "sardeenz.cli", "cluster", "status", "--json", "--url", srv.url],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert as_json.returncode == 0
        assert '"mode": "single"' in as_json.stdout
    finally:
        srv.stop()
