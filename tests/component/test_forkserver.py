"""The fork server that starts the suite's servers (testkit/forkserver.py): a forked
``sardeenz serve`` behaves as the command line does, and forking is safe."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from testkit import forkserver
from testkit.netns import private_network
from testkit.servers import ServerProcess


def test_the_preloaded_modules_leave_no_thread_and_no_event_loop() -> None:
    """A thread or an event loop alive at ``fork`` would be copied half-way (locks held,
    a selector shared); the fork server imports exactly ``PRELOAD``, then ``_warm``s."""
    code = (
        "import asyncio, importlib, json, threading\n"
        "from testkit import forkserver\n"
        "for name in forkserver.PRELOAD:\n"
        "    importlib.import_module(name)\n"
        "forkserver._warm()\n"
        "try:\n"
        "    asyncio.get_running_loop()\n"
        "    loop = True\n"
        "except RuntimeError:\n"
        "    loop = False\n"
        "print(json.dumps([threading.active_count(), loop]))\n"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [1, False]


@pytest.mark.parametrize("exec_", [True, False], ids=["exec", "fork"])
def test_a_refused_start_exits_2_with_the_reason_either_way(tmp_path: Path, exec_: bool) -> None:
    """The same configuration error, exec'd and forked: exit code 2 and the one-line
    reason in the log. The fork reads its own environment, not the fork server's."""
    srv = ServerProcess(
        tmp_path / "data", extra_env={"SARDEENZ_PROXY_MAX_BODY_BYTES": "lots"}, exec_=exec_
    )
    srv.spawn()
    assert srv.proc is not None
    assert srv.proc.wait(60) == 2
    assert srv.log() == (
        "sardeenz: invalid configuration: SARDEENZ_PROXY_MAX_BODY_BYTES: Input should be a "
        "valid integer, unable to parse string as an integer\n"
    )


def test_a_forked_server_serves_signals_and_reports_how_it_ended(tmp_path: Path) -> None:
    srv = ServerProcess(tmp_path / "data", exec_=False).start()
    proc = srv.proc
    assert isinstance(proc, forkserver.ForkedServer)
    assert proc.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        proc.wait(0.2)
    with srv.client() as api:
        assert api.get("/api/health").status_code == 200
    assert srv.stop(signal.SIGTERM) in (0, -signal.SIGTERM)  # as uvicorn ends on SIGTERM
    assert "shut down: every service stopped" in srv.log()

    killed = ServerProcess(tmp_path / "killed", exec_=False).start()
    assert killed.stop(signal.SIGKILL) == -signal.SIGKILL
    assert killed.proc is not None
    killed.proc.send_signal(signal.SIGTERM)  # ended and reaped: never signals a reused pid


@pytest.mark.parametrize(
    ("name", "value"),
    [("LD_PRELOAD", "libfaketime.so.1"), ("SSL_CERT_FILE", "/srv/sardeenz-test/ca.pem")],
)
def test_a_server_given_what_acts_at_start_is_execd(tmp_path: Path, name: str, value: str) -> None:
    """``LD_PRELOAD`` acts at exec (the soak's libfaketime), ``SSL_CERT_FILE`` shaped the
    TLS contexts the fork server built for its forks: a fork would run without either."""
    plain = ServerProcess(tmp_path / "plain")
    assert forkserver.forkable(plain.env)
    given = ServerProcess(tmp_path / "given", extra_env={name: value})
    assert not forkserver.forkable(given.env)


def test_a_server_starts_in_the_network_namespace_of_its_caller(tmp_path: Path) -> None:
    """The browser tier's worker enters a network namespace of its own: its servers must
    start there (reachable: ``start`` waits for an answer), not in the namespace where
    the worker's first fork server started."""
    outside = ServerProcess(tmp_path / "outside").start()  # a fork server out here
    started: list[ServerProcess] = []
    outcome: list[BaseException | bool] = []

    def in_a_namespace_of_its_own() -> None:
        try:
            with private_network() as entered:
                outcome.append(entered)
                if entered:
                    started.append(ServerProcess(tmp_path / "inside").spawn())
                    started[0].wait_ready()
        except BaseException as exc:  # the test's thread raises it
            outcome.append(exc)

    thread = threading.Thread(target=in_a_namespace_of_its_own)
    thread.start()
    thread.join(90)
    try:
        if outcome == [False]:
            pytest.skip("creating a network namespace needs root")
        assert outcome == [True], outcome
        inside, here = started[0].proc, Path("/proc/thread-self/ns/net").stat().st_ino
        assert inside is not None
        assert Path(f"/proc/{inside.pid}/ns/net").stat().st_ino != here
    finally:
        for srv in (outside, *started):
            srv.stop(signal.SIGKILL)


def test_a_server_that_never_gets_ready_is_not_left_behind(tmp_path: Path) -> None:
    """``start`` raises when the server does not answer in time; the caller holds no
    server to stop, so the process must be gone by then (a test's failed start used to
    leave it running for the rest of the session)."""
    srv = ServerProcess(tmp_path / "data").spawn()
    assert srv.proc is not None
    srv.proc.send_signal(signal.SIGSTOP)  # it never answers
    with pytest.raises(RuntimeError, match="not ready"):
        srv.wait_ready(timeout=1)
    assert srv.proc.poll() == -signal.SIGKILL


def test_a_wedged_fork_server_fails_the_request_saying_so_and_is_replaced(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fork server that stops answering must not hang the test that asked: the request
    fails naming itself, the wedged process is killed and the next request starts a
    new fork server."""
    monkeypatch.setattr(forkserver, "ANSWER_SECONDS", 0.5)
    client = forkserver.ForkServerClient()
    wedged = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; sys.stdin.readline(); time.sleep(60)"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    client.proc = wedged
    try:
        with pytest.raises(RuntimeError, match=r"did not answer status within 0\.5 s: killed"):
            client.status(1)
        assert wedged.poll() == -signal.SIGKILL
        monkeypatch.setattr(forkserver, "ANSWER_SECONDS", 60.0)
        assert client.status(1) is None  # a new fork server: no child 1 ended
        assert client.proc is not wedged
    finally:
        client.close()
        if wedged.poll() is None:
            wedged.kill()
            wedged.wait()
