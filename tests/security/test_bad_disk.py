"""A damaged WAL or a read-only data dir stops the start in one line and loses nothing.

The engines started before keep running, no file is touched, and once the disk is
put right the next start re-adopts them.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from testkit.servers import ServerProcess, kill_engines, sim_load, wait_for_status


def _start_fails(srv: ServerProcess) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", "serve"],
        env=srv.env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _snapshot(data_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(data_dir.glob("sardeenz.db*"))}


@contextlib.contextmanager
def _read_only(path: Path) -> Iterator[None]:
    """``path`` re-mounted read-only in place (root only); skips where mounts are refused."""
    bind = subprocess.run(["mount", "--bind", str(path), str(path)], capture_output=True)
    if bind.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {bind.stderr.decode().strip()}")
    try:
        subprocess.run(
            ["mount", "-o", "remount,bind,ro", str(path), str(path)], check=True, timeout=10
        )
        yield
    finally:
        subprocess.run(["umount", str(path)], check=True, timeout=10)


def test_a_damaged_wal_and_a_read_only_disk_stop_the_start_and_lose_nothing(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "node"
    srv = ServerProcess(data_dir).start()
    try:
        with srv.client() as api:
            inst = sim_load(api, "disk-a")
            wait_for_status(api, inst["id"], "active")
        engine = psutil.Process(inst["processId"])
        srv.stop(signal.SIGKILL)  # no checkpoint: the registry lives in the WAL
        db = data_dir / "sardeenz.db"
        wal = db.with_name("sardeenz.db-wal")
        pristine = wal.read_bytes()
        assert len(pristine) > 32

        damaged = bytearray(pristine)
        damaged[20] ^= 0xFF  # the header's salt: its checksum no longer holds
        wal.write_bytes(bytes(damaged))
        before = _snapshot(data_dir)
        refused = _start_fails(srv)
        assert refused.returncode == 3, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert str(wal) in lines[0]
        assert "damaged header" in lines[0]
        assert "nothing was changed" in lines[0]
        assert _snapshot(data_dir) == before
        assert engine.is_running()

        wal.write_bytes(pristine)
        with _read_only(data_dir):
            refused = _start_fails(srv)
        assert refused.returncode == 3, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert str(data_dir) in lines[0]
        assert "not writable" in lines[0]
        assert engine.is_running()

        srv.start()
        with srv.client() as api:
            back = wait_for_status(api, inst["id"], "active")
            assert back["processId"] == engine.pid
            reply = httpx.post(
                f"{srv.url}/v1/completions",
                json={"model": "disk-a", "prompt": "hi", "max_tokens": 3},
                timeout=30,
            )
            assert reply.status_code == 200, reply.text
            assert reply.json()["model"] == "disk-a"
    finally:
        srv.stop()
        kill_engines(data_dir)
