"""One data dir, one controller: a second ``sardeenz serve`` on it is refused (issue 23).

It used to read the live server's registry, "re-adopt" its engines and, its port taken,
stop them on the way out (same port), or take them over (another port): every engine of
the live server ended ``failed`` while serving. Now it exits 4 with one line naming the
live server's PID, and the live server never notices.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from testkit.ports import free_port
from testkit.servers import ServerProcess, kill_engines, load_active, wait_for_status

EXIT_DATA_DIR_IN_USE = 4  # docs/operations.md, "Start-up checks and exit codes"


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[ServerProcess, list[dict[str, Any]]]]:
    srv = ServerProcess(tmp_path / "node").start()
    try:
        with srv.client() as api:
            models = [load_active(api, "one-a"), load_active(api, "one-b")]
        yield srv, models
    finally:
        srv.stop()
        kill_engines(srv.data_dir)


def _second(srv: ServerProcess, port: int) -> subprocess.CompletedProcess[str]:
    """``sardeenz serve`` on the live server's data dir, run until it exits."""
    return subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", "serve"],
        env={**srv.env, "SARDEENZ_PORT": str(port)},
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )


def _completion(url: str, model: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/completions",
        json={"model": model, "prompt": "still here?", "max_tokens": 3},
        timeout=30,
    )


def test_a_second_controller_is_refused_and_the_live_one_keeps_serving(
    live: tuple[ServerProcess, list[dict[str, Any]]],
) -> None:
    srv, models = live
    assert srv.proc is not None
    for port in (srv.port, free_port()):  # its port (taken), and a free one
        refused = _second(srv, port)
        assert refused.returncode == EXIT_DATA_DIR_IN_USE, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert f"in use by another sardeenz serve (pid {srv.proc.pid})" in lines[0]
        assert str(srv.data_dir) in lines[0]
        assert "Traceback" not in refused.stderr
        # Nothing of the live server's was read or touched: no engine re-adopted, none
        # stopped, the live server logged nothing about it.
        assert "re-adopted" not in refused.stderr
        with srv.client() as api:
            for model in models:
                now = wait_for_status(api, model["id"], "active", timeout=5)
                assert (now["processId"], now["port"]) == (model["processId"], model["port"])
                assert psutil.Process(model["processId"]).is_running()
        for model in models:
            reply = _completion(srv.url, model["servedModelName"])
            assert reply.status_code == 200, reply.text
            assert reply.json()["model"] == model["servedModelName"]
    assert "stopping" not in srv.log()


def test_the_lock_dies_with_its_controller_and_engines_do_not_hold_it(
    live: tuple[ServerProcess, list[dict[str, Any]]],
) -> None:
    # A SIGKILLed controller leaves its engines running on purpose; if they had inherited
    # the lock, no controller could ever start on the data dir again.
    srv, models = live
    srv.stop(signal.SIGKILL)
    for model in models:
        assert psutil.Process(model["processId"]).is_running()
    srv.start()
    with srv.client() as api:
        for model in models:
            back = wait_for_status(api, model["id"], "active")
            assert back["processId"] == model["processId"]
    assert _completion(srv.url, "one-a").status_code == 200
    refused = _second(srv, free_port())  # and the new controller holds it in turn
    assert refused.returncode == EXIT_DATA_DIR_IN_USE, refused.stderr
    assert srv.proc is not None
    assert f"pid {srv.proc.pid}" in refused.stderr
