"""Engine identity end to end: an instance is active only on a port its own engine serves.

Real `sardeenz serve` processes and real sim engines. The sim binds its port at once
and listens only once loaded, like vLLM: the window in which another process could
take the port.
"""

from __future__ import annotations

import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest

from sardeenz.runtime import identity
from sardeenz.runtime.ports import PortAllocator, port_is_free
from testkit.ports import free_port_range
from testkit.servers import ServerProcess, sim_load, wait_for_status


def _foreign_listener(port: int) -> socket.socket:
    """What a second vLLM does: SO_REUSEPORT (and SO_REUSEADDR, as uvicorn sets), so the
    kernel lets it join a port an engine has bound but not yet listens on."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(64)
    sock.setblocking(False)
    return sock


def _requests_received(sock: socket.socket) -> list[bytes]:
    """Accept what queued on ``sock`` and return what each connection sent."""
    got: list[bytes] = []
    while True:
        try:
            conn, _ = sock.accept()
        except BlockingIOError:
            return got
        with conn:
            conn.settimeout(0.2)
            try:
                got.append(conn.recv(65536))
            except OSError:
                got.append(b"")


def _chat(base_url: str, model: str) -> dict[str, Any]:
    resp = httpx.post(
        f"{base_url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "who?"}], "max_tokens": 2},
        timeout=30,
    )
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json()
    return body


def _tree(pid: int) -> list[int]:
    try:
        root = psutil.Process(pid)
        return [root.pid, *(c.pid for c in root.children(recursive=True))]
    except psutil.Error:
        return []


def test_a_foreign_listener_on_the_port_while_loading_moves_the_engine(
    server: ServerProcess,
) -> None:
    with server.client() as api:
        inst = sim_load(api, "who-am-i", "--load-seconds", "3")
        assert inst["status"] == "starting"
        taken = inst["port"]
        foreign = _foreign_listener(taken)  # appears while the engine loads
        try:
            active = wait_for_status(api, inst["id"], {"active", "failed"}, timeout=60)
            assert active["status"] == "active", active.get("errorMessage")
            assert active["port"] != taken
            moved = [w for w in active["warnings"] if f"port {taken}" in w]
            assert moved, active["warnings"]
            assert f"restarted the engine on port {active['port']}" in moved[0]
            assert f"pid {psutil.Process().pid}" in moved[0]  # names the intruder
            # The new port is served by the instance's own engine, and only by it.
            owner = identity.port_ownership(active["port"], _tree(active["processId"]))
            assert owner.served_by_own_tree
            # Requests reach the right engine: the sim answers with its served name.
            for _ in range(5):
                assert _chat(server.url, "who-am-i")["model"] == "who-am-i"
            lines = api.get(f"/api/v1/models/{inst['id']}/logs?lines=5000").json()["lines"]
            assert any(ln.startswith("[sardeenz]") and f"port {taken}" in ln for ln in lines)
            # Nothing but the readiness probes of the first attempt ever went to the intruder.
            sent = _requests_received(foreign)
            assert not [r for r in sent if b"/v1/" in r], sent
        finally:
            foreign.close()


def test_with_no_port_retries_a_taken_port_fails_the_instance(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(extra_env={"SARDEENZ_PORT_RETRIES": "0"}).start()
    with srv.client() as api:
        inst = sim_load(api, "nowhere-to-go", "--load-seconds", "3")
        with _foreign_listener(inst["port"]):
            failed = wait_for_status(api, inst["id"], {"active", "failed"}, timeout=60)
        assert failed["status"] == "failed"
        assert (
            f"port {inst['port']} is also listened on by another process"
            in (failed["errorMessage"])
        )
        assert "gave up after 0 port restart(s)" in failed["errorMessage"]
        assert failed["port"] == inst["port"]


ROUNDS = 3
MODELS = 10


@pytest.mark.slow
def test_two_servers_with_the_same_base_port_never_share_an_engine_port(
    server_factory: Any, tmp_path: Path
) -> None:
    base = free_port_range(3 * MODELS)
    shared = {
        "VLLM_BASE_PORT": str(base),
        "SARDEENZ_PORT_RANGE_SIZE": str(3 * MODELS),
        "SARDEENZ_RUNTIME_DIR": str(tmp_path / "runtime"),
        "SARDEENZ_STOP_GRACE_SECONDS": "3",
    }
    servers: list[ServerProcess] = [server_factory(extra_env=shared).start() for _ in range(2)]
    clients = [s.client() for s in servers]
    pool = ThreadPoolExecutor(2 * MODELS)
    try:
        for rnd in range(ROUNDS):
            names = [[f"s{s}-r{rnd}-m{i}" for i in range(MODELS)] for s in range(2)]
            loads = [
                pool.submit(
                    sim_load,
                    clients[s],
                    name,
                    "--load-seconds",
                    "0.5",
                    "--memory-gib",
                    "0.1",
                    "--disable-uvicorn-access-log",
                )
                for s in range(2)
                for name in names[s]
            ]
            started = [f.result() for f in loads]
            assert {i["status"] for i in started} == {"starting"}
            _wait_all_active_never_shared(clients, expected=2 * MODELS)
            ports = [{i["port"] for i in c.get("/api/v1/models").json()} for c in clients]
            assert len(ports[0]) == len(ports[1]) == MODELS
            assert not ports[0] & ports[1]
            chats = [
                pool.submit(_chat, servers[s].url, name) for s in range(2) for name in names[s]
            ]
            answered = [f.result()["model"] for f in chats]
            assert answered == [name for s in range(2) for name in names[s]]
            unloads = [
                pool.submit(c.post, f"/api/v1/models/{i['id']}/unload")
                for c in clients
                for i in c.get("/api/v1/models").json()
            ]
            assert [f.result().status_code for f in unloads] == [200] * (2 * MODELS)
    finally:
        pool.shutdown(wait=True)
        for c in clients:
            c.close()


def _trees(roots: list[int]) -> dict[int, list[int]]:
    """Each root's process tree (itself and its descendants), from one walk of the
    process table: one ``_tree`` per root walks all of it each time."""
    children: dict[int, list[int]] = {}
    for proc in psutil.process_iter(["ppid"]):
        children.setdefault(proc.info["ppid"], []).append(proc.pid)
    trees: dict[int, list[int]] = {}
    for root in roots:
        tree, todo = [], [root]
        while todo:
            pid = todo.pop()
            tree.append(pid)
            todo.extend(children.get(pid, []))
        trees[root] = tree
    return trees


def _wait_all_active_never_shared(clients: list[httpx.Client], expected: int) -> None:
    """Wait until every instance is active; at every look, each active instance's port is
    listened on by its own engine's process tree only. One look reads the kernel's socket
    tables and the process table once for all instances (per instance, twenty of them
    every 0.2 s, the looks took most of a core)."""
    deadline = time.monotonic() + 60
    while True:
        insts = [i for c in clients for i in c.get("/api/v1/models").json()]
        assert len(insts) == expected
        failed = [i for i in insts if i["status"] == "failed"]
        assert not failed, failed
        active = [i for i in insts if i["status"] == "active"]
        listeners = identity.listeners_by_port()
        trees = _trees([i["processId"] for i in active])
        for inst in active:
            owner = identity.port_ownership(
                inst["port"], trees[inst["processId"]], listeners.get(inst["port"], [])
            )
            assert owner.served_by_own_tree, (inst["servedModelName"], owner)
        if len(active) == expected:
            return
        assert time.monotonic() < deadline, [(i["servedModelName"], i["status"]) for i in insts]
        time.sleep(0.2)


def test_readoption_retakes_the_port_claims_and_checks_identity(
    server_factory: Any, tmp_path: Path
) -> None:
    runtime = tmp_path / "runtime"
    srv: ServerProcess = server_factory(extra_env={"SARDEENZ_RUNTIME_DIR": str(runtime)}).start()
    with srv.client() as api:
        keep = wait_for_status(api, sim_load(api, "keeps-its-port")["id"], "active")
        loading = sim_load(api, "loses-its-port", "--load-seconds", "30")
    deadline = time.monotonic() + 30
    while port_is_free("127.0.0.1", loading["port"]):  # until the loading engine has bound it
        assert time.monotonic() < deadline
        time.sleep(0.05)
    srv.stop(signal.SIGKILL)
    # The controller is gone, and its claims with it; while it is down another process
    # joins the port of the engine that is still loading.
    claims = PortAllocator(range(srv.base_port, srv.base_port + 20), lock_dir=runtime / "ports")
    assert claims.reserve(keep["port"]) is True
    claims.release(keep["port"])
    foreign = _foreign_listener(loading["port"])
    srv2 = ServerProcess(srv.data_dir)
    srv2.port, srv2.url, srv2.env = srv.port, srv.url, srv.env
    try:
        srv2.start()
        with srv2.client() as api:
            kept = api.get(f"/api/v1/models/{keep['id']}").json()
            assert kept["status"] == "active"
            assert (kept["port"], kept["processId"]) == (keep["port"], keep["processId"])
            assert _chat(srv2.url, "keeps-its-port")["model"] == "keeps-its-port"
            lost = api.get(f"/api/v1/models/{loading['id']}").json()
            assert lost["status"] == "failed"
            assert (
                f"port {loading['port']} is also listened on by another process"
                in (lost["errorMessage"])
            )
            assert "not re-adopted" in lost["errorMessage"]
            assert not psutil.pid_exists(loading["processId"]) or (
                psutil.Process(loading["processId"]).status() == psutil.STATUS_ZOMBIE
            )
            # The restarted controller holds the claim of the engine it kept.
            assert claims.reserve(keep["port"]) is False
    finally:
        srv2.stop(signal.SIGTERM)
        foreign.close()
