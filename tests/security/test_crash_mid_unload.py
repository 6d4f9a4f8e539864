"""A controller SIGKILLed during an unload finishes that unload when it restarts (issue 18).

Real ``sardeenz serve`` and a real simulated engine. The engine is frozen (SIGSTOP) so the
unload is still waiting for it when the controller is killed; the engine then ends on
its own (the SIGTERM of the unload, delivered on SIGCONT) while no controller runs. The
restarted controller must complete the unload, not report the instance ``failed`` and
wait for a second one.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path

import httpx
import psutil

from testkit.servers import ServerProcess, engine_processes, kill_engines, sim_load, wait_for_status
from testkit.waiting import wait_until


def _signal_all(procs: list[psutil.Process], sig: signal.Signals) -> None:
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)


def _sigterm_pending(proc: psutil.Process) -> bool:
    """Whether SIGTERM waits, undelivered, on ``proc`` (stopped, it cannot act on it)."""
    bit = 1 << (signal.SIGTERM - 1)
    try:
        with open(f"/proc/{proc.pid}/status") as status:
            return any(
                line.startswith(("SigPnd:", "ShdPnd:")) and int(line.split()[1], 16) & bit
                for line in status
            )
    except OSError:
        return False


def _wait_no_engines(data_dir: Path, timeout: float) -> list[psutil.Process]:
    deadline = time.monotonic() + timeout
    left = engine_processes(data_dir)
    while left and time.monotonic() < deadline:
        time.sleep(0.1)
        left = engine_processes(data_dir)
    return left


def test_unload_interrupted_by_a_controller_kill_completes_on_restart(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path, extra_env={"SARDEENZ_STOP_GRACE_SECONDS": "20"})
    server.start()
    frozen: list[psutil.Process] = []
    try:
        with server.client() as api:
            inst = sim_load(api, "crash-mid-unload")
            wait_for_status(api, inst["id"], "active", 30)
            frozen = engine_processes(tmp_path)
            assert frozen
            _signal_all(frozen, signal.SIGSTOP)  # the SIGTERM of the unload waits for SIGCONT

            def unload() -> None:
                with contextlib.suppress(httpx.HTTPError):  # the controller dies under it
                    httpx.post(f"{server.url}/api/v1/models/{inst['id']}/unload", timeout=60)

            threading.Thread(target=unload, daemon=True).start()
            wait_for_status(api, inst["id"], "stopping", 10)
            # "stopping" is recorded before the engine is signalled: the controller must
            # not be killed before the unload's SIGTERM is pending on the frozen engine.
            wait_until(
                lambda: any(_sigterm_pending(p) for p in frozen),
                "the unload's SIGTERM pending on the frozen engine",
                20,
            )
        server.stop(signal.SIGKILL)

        _signal_all(frozen, signal.SIGCONT)
        assert _wait_no_engines(tmp_path, 15) == [], "the engine did not end on its SIGTERM"

        server.start()
        with server.client() as api:
            assert api.get("/api/v1/models").json() == []
            gone = api.get(f"/api/v1/models/{inst['id']}")
            assert gone.status_code == 404, gone.text
        assert engine_processes(tmp_path) == []
    finally:
        _signal_all(frozen, signal.SIGCONT)
        server.stop()
        kill_engines(tmp_path)
