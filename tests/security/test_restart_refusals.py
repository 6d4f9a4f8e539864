"""A restart that cannot serve the node's data refuses before it touches anything (issue 23).

The controller is SIGKILLed with an engine running, so its registry lives in the WAL.
Then the main database is emptied (``truncate -s0``) or moved aside alone, or the port is
taken. Each restart used to go on: SQLite took the missing or empty file for a new
database and reset the WAL, the server migrated from scratch, stopped the engine "that
no instance accounts for" and started empty; with the port taken it re-adopted the
engine, failed to bind and stopped it on the way out (exit 3). Now each is one line and
its exit code, the files and the engine are as they were, and once the cause is gone
the next start re-adopts the engine.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import psutil

from testkit.servers import ServerProcess, kill_engines, load_active, wait_for_status

EXIT_STORAGE = 3  # docs/operations.md, "Start-up checks and exit codes"
EXIT_ADDRESS_IN_USE = 5


def _start_fails(srv: ServerProcess) -> str:
    """Run ``sardeenz serve`` until it exits; its one line of refusal."""
    done = subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", "serve"],
        env=srv.env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return f"{done.returncode} {lines[0]}"


def _files(data_dir: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(data_dir.glob("sardeenz.db*"))}


def test_a_lost_database_or_a_taken_port_stops_the_restart_and_loses_nothing(
    tmp_path: Path,
) -> None:
    data_dir = tmp_path / "node"
    srv = ServerProcess(data_dir).start()
    try:
        with srv.client() as api:
            inst = load_active(api, "keep-me")
        engine = psutil.Process(inst["processId"])
        srv.stop(signal.SIGKILL)
        db = data_dir / "sardeenz.db"
        wal = data_dir / "sardeenz.db-wal"
        pristine = db.read_bytes()
        assert wal.stat().st_size > 32  # the registry is in the WAL

        db.write_bytes(b"")  # truncate -s0 sardeenz.db
        before = _files(data_dir)
        refused = _start_fails(srv)
        assert refused.startswith(f"{EXIT_STORAGE} sardeenz: database {db} is empty (0 bytes)")
        assert f"its write-ahead log {wal.name} holds {wal.stat().st_size} bytes" in refused
        assert "nothing was changed" in refused
        assert _files(data_dir) == before
        assert engine.is_running()

        db.unlink()  # only sardeenz.db moved aside
        before = _files(data_dir)
        refused = _start_fails(srv)
        assert refused.startswith(f"{EXIT_STORAGE} sardeenz: database {db} is missing")
        assert _files(data_dir) == before
        assert engine.is_running()

        db.write_bytes(pristine)
        before = _files(data_dir)
        with socket.socket() as taken:
            taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            taken.bind(("127.0.0.1", srv.port))
            taken.listen()
            refused = _start_fails(srv)
        assert refused.startswith(f"{EXIT_ADDRESS_IN_USE} sardeenz: cannot listen on ")
        assert f"127.0.0.1:{srv.port}: Address already in use" in refused
        assert _files(data_dir) == before  # not even migrated
        assert engine.is_running()

        srv.start()
        with srv.client() as api:
            back = wait_for_status(api, inst["id"], "active")
            assert back["processId"] == engine.pid
        reply = httpx.post(
            f"{srv.url}/v1/completions",
            json={"model": "keep-me", "prompt": "hi", "max_tokens": 3},
            timeout=30,
        )
        assert reply.status_code == 200, reply.text
    finally:
        with contextlib.suppress(Exception):
            srv.stop()
        kill_engines(data_dir)
