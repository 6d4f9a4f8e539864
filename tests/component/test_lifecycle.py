"""Engine supervision end to end: real `sardeenz serve`, real sim-engine processes.

The tests that only load, crash and unload engines share one server (``reused_server``
empties it after each); the ones that restart, stop or reconfigure it have their own.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from typing import Any

import httpx
import psutil
import pytest

from testkit.servers import (
    ServerProcess,
    engine_processes,
    load_active,
    sim_load,
    tree_pids,
    wait_for_status,
    wait_gone,
)


class EventCollector:
    """Reads an instance's SSE stream in a thread and keeps every event."""

    def __init__(self, url: str, instance_id: str) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []
        self._url = f"{url}/api/v1/models/instances/{instance_id}/events?replay=true"
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.connected = threading.Event()
        self._thread.start()

    def _run(self) -> None:
        with httpx.stream("GET", self._url, timeout=60) as resp:
            self.connected.set()
            event = ""
            for line in resp.iter_lines():
                if line.startswith("event:"):
                    event = line[6:].strip()
                elif line.startswith("data:"):
                    self.events.append((event, json.loads(line[5:])))
                    if event == "removed":
                        return

    def join(self, timeout: float = 15) -> None:
        self._thread.join(timeout)

    def statuses(self) -> list[str]:
        return [d["status"] for e, d in self.events if e in ("status", "removed")]

    def log_lines(self) -> list[str]:
        return [d["line"] for e, d in self.events if e == "log"]


def test_three_models_load_stream_events_and_unload_cleanly(reused_server: ServerProcess) -> None:
    with reused_server.client() as api:
        insts = [sim_load(api, f"model-{i}", "--load-seconds", "0.8") for i in range(3)]
        assert {i["status"] for i in insts} == {"starting"}
        assert len({i["port"] for i in insts}) == 3
        collector = EventCollector(reused_server.url, insts[0]["id"])
        assert collector.connected.wait(10)
        active = [wait_for_status(api, i["id"], "active") for i in insts]
        for a in active:
            assert a["processId"] > 0
            assert a["engineCorePid"] is not None
            assert a["engineCorePid"] != a["processId"]
            assert a["memoryMetrics"]["weightsMemoryGiB"] > 0
            assert a["memoryMetrics"]["kvCacheTokens"] > 0
            assert a["startedAt"] is not None
        listed = api.get("/api/v1/models").json()
        assert {i["id"] for i in listed} == {i["id"] for i in insts}

        pids = tree_pids(active[0]["processId"])
        assert active[0]["engineCorePid"] in pids
        resp = api.post(f"/api/v1/models/{insts[0]['id']}/unload")
        assert resp.status_code == 200, resp.text
        assert resp.json()["stoppedAt"] is not None
        assert wait_gone(pids, 1.0) == []
        collector.join()
        assert collector.statuses() == ["starting", "active", "stopping", "removed"]
        lines = collector.log_lines()
        assert any("Application startup complete." in ln for ln in lines)
        assert any("Model loading took" in ln for ln in lines)
        assert api.get(f"/api/v1/models/{insts[0]['id']}").status_code == 404
        assert len(api.get("/api/v1/models").json()) == 2


def test_sigkill_of_engine_turns_it_failed_and_leaves_nothing(reused_server: ServerProcess) -> None:
    with reused_server.client() as api:
        inst = load_active(api, "victim")
        pids = tree_pids(inst["processId"])
        assert len(pids) >= 2  # the API server and its EngineCore child
        t0 = time.monotonic()
        os.kill(inst["processId"], signal.SIGKILL)
        failed = wait_for_status(api, inst["id"], "failed", timeout=10)
        assert time.monotonic() - t0 < 5
        assert "exit" in failed["errorMessage"]
        assert "-9" in failed["errorMessage"]
        # The orphaned EngineCore is killed too: nothing of the tree survives.
        assert wait_gone(pids) == []
        assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200


def test_fail_after_load_reports_the_root_cause(reused_server: ServerProcess) -> None:
    with reused_server.client() as api:
        inst = sim_load(api, "doomed", "--fail-after-load")
        failed = wait_for_status(api, inst["id"], "failed", timeout=20)
        msg = failed["errorMessage"]
        assert "KV cache" in msg
        assert "max seq len" in msg
        assert "Engine core initialization failed" not in msg
        assert [p for p in engine_processes(reused_server.data_dir) if p.is_running()] == []


def test_restart_after_sigkill_readopts_running_engines(server_factory: Any) -> None:
    srv: ServerProcess = server_factory().start()
    with srv.client() as api:
        a = load_active(api, "keep-a", enableSleepMode=True)
        b = load_active(api, "keep-b")
    srv.stop(signal.SIGKILL)
    # Engines survive the controller's death.
    assert psutil.pid_exists(a["processId"])
    assert psutil.pid_exists(b["processId"])
    engine = httpx.post(
        f"http://127.0.0.1:{a['port']}/v1/completions",
        json={"model": "keep-a", "prompt": "hi", "max_tokens": 3},
        timeout=10,
    )
    assert engine.status_code == 200
    # The controller died between the engine's sleep and its record (issue 28): the
    # record says active, the engine sleeps and would queue every request.
    httpx.post(f"http://127.0.0.1:{a['port']}/sleep?level=1", timeout=10).raise_for_status()

    srv2 = ServerProcess(srv.data_dir)
    srv2.port, srv2.url = srv.port, srv.url
    srv2.env = srv.env
    srv2.start()
    try:
        with srv2.client() as api:
            listed = {i["id"]: i for i in api.get("/api/v1/models").json()}
            assert set(listed) == {a["id"], b["id"]}
            for old in (a, b):
                new = listed[old["id"]]
                assert new["status"] == "active"
                assert (new["processId"], new["port"]) == (old["processId"], old["port"])
            awake = httpx.get(f"http://127.0.0.1:{a['port']}/is_sleeping", timeout=10)
            assert awake.json() == {"is_sleeping": False}, "re-adopted active, left asleep"
            routed = api.post(
                "/v1/completions",
                json={"model": "keep-a", "prompt": "routed", "max_tokens": 2},
                timeout=10,
            )
            assert routed.status_code == 200, routed.text
            # Logs continue: a request now produces a new access-log line we see.
            before = len(api.get(f"/api/v1/models/{a['id']}/logs?lines=5000").json()["lines"])
            httpx.post(
                f"http://127.0.0.1:{a['port']}/v1/completions",
                json={"model": "keep-a", "prompt": "again", "max_tokens": 2},
                timeout=10,
            ).raise_for_status()
            # Health monitoring of the adopted engine still works: kill it.
            os.kill(b["processId"], signal.SIGKILL)
            assert "exited" in wait_for_status(api, b["id"], "failed", 10)["errorMessage"]
            deadline = time.monotonic() + 5
            after = before
            while after <= before and time.monotonic() < deadline:
                after = len(api.get(f"/api/v1/models/{a['id']}/logs?lines=5000").json()["lines"])
                time.sleep(0.1)
            assert after > before, "no new line in keep-a's log within 5 s of a request"
    finally:
        srv2.stop(signal.SIGTERM)
    assert engine_processes(srv.data_dir) == []


def test_sigterm_of_server_leaves_no_engine(server: ServerProcess) -> None:
    with server.client() as api:
        ids = [sim_load(api, f"m{i}")["id"] for i in range(2)]
        for i in ids:
            wait_for_status(api, i, "active")
    pids = [p.pid for p in engine_processes(server.data_dir)]
    assert len(pids) >= 4  # two API servers, two EngineCores
    # uvicorn re-raises the signal after its graceful shutdown, so -SIGTERM is a clean exit.
    assert server.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    log = server.log()
    assert "stopping 2 engine(s)" in log
    # The exit is bounded (sardeenz.shutdown): 5 s graceful + 2 x the 5 s stop grace + 30.
    assert "the process ends within 45 s" in log
    assert "shut down: every service stopped" in log
    assert "Traceback" not in log
    assert wait_gone(pids) == []


def test_readoption_fails_engines_that_died_meanwhile(server_factory: Any) -> None:
    srv: ServerProcess = server_factory().start()
    with srv.client() as api:
        a = load_active(api, "dies-while-down")
    srv.stop(signal.SIGKILL)
    os.killpg(a["processId"], signal.SIGKILL)
    srv2 = ServerProcess(srv.data_dir)
    srv2.port, srv2.url, srv2.env = srv.port, srv.url, srv.env
    srv2.start()
    try:
        with srv2.client() as api:
            inst = api.get(f"/api/v1/models/{a['id']}").json()
            assert inst["status"] == "failed"
            assert "gone" in inst["errorMessage"]
    finally:
        srv2.stop(signal.SIGTERM)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({}, 422, "validation_error"),
        ({"modelPath": ""}, 422, "validation_error"),
        ({"modelPath": "   "}, 400, "invalid_model_path"),
        ({"modelPath": "m", "engine": "tensorrt"}, 422, "validation_error"),
        ({"modelPath": "m", "gpuMemoryLimit": -1}, 422, "validation_error"),
        ({"modelPath": "m", "gpuMemoryLimit": 1e9}, 422, "validation_error"),
        ({"modelPath": "m", "tensorParallelSize": 0}, 422, "validation_error"),
        ({"modelPath": "m", "extraArgs": "--ttft-ms 5"}, 422, "validation_error"),
        ({"modelPath": "m", "extraArgs": [1, 2]}, 422, "validation_error"),
        ({"modelPath": "m", "extraArgs": ["--port", "1"]}, 400, "invalid_extra_args"),
        ({"modelPath": "m", "gpuIds": [7]}, 400, "unknown_gpu"),
        ({"modelPath": "m", "unknownField": 1}, 422, "validation_error"),
    ],
)
def test_bad_load_requests_are_rejected_with_a_code(
    module_server: ServerProcess, body: dict[str, Any], status: int, code: str
) -> None:
    # One server for every case: each refusal must leave it exactly as empty as it was.
    with module_server.client() as api:
        resp = api.post("/api/v1/models/load", json=body)
        assert resp.status_code == status, resp.text
        assert resp.json()["code"] == code
        assert isinstance(resp.json()["detail"], str)
        assert api.get("/api/v1/models").json() == []
    assert engine_processes(module_server.data_dir) == []


def test_a_starting_instance_shows_its_load_phase(module_server: ServerProcess) -> None:
    """``loadPhase`` follows the engine's log while it starts, then is null once active."""
    order = ["spawned", "loading weights", "KV cache", "CUDA graphs"]
    with module_server.client() as api:
        inst = sim_load(api, "phased", "--load-seconds", "3")
        assert (inst["status"], inst["loadPhase"]) == ("starting", "spawned")
        collector = EventCollector(module_server.url, inst["id"])
        assert collector.connected.wait(10)
        deadline = time.monotonic() + 30
        while (now := api.get(f"/api/v1/models/{inst['id']}").json())["loadPhase"] in (
            "spawned",
            "loading weights",
        ):
            assert now["status"] == "starting"
            assert time.monotonic() < deadline, now
            time.sleep(0.05)
        assert (now["status"], now["loadPhase"]) in {
            ("starting", "KV cache"),
            ("starting", "CUDA graphs"),
        }
        active = wait_for_status(api, inst["id"], "active")
        assert active["loadPhase"] is None
        assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200
    collector.join()
    # The replayed current state first, then each phase as an event of its own: the
    # status transitions stay one event each.
    assert collector.statuses() == ["starting", "active", "stopping", "removed"]
    first = next(d for e, d in collector.events if e == "status")
    phases = [d for e, d in collector.events if e == "phase"]
    assert all(d["status"] == "starting" for d in phases)
    assert all(d["loadPhase"] == d["instance"]["loadPhase"] for d in phases)
    seen = [first["instance"]["loadPhase"], *(d["loadPhase"] for d in phases)]
    assert seen == sorted(set(seen), key=order.index), seen  # forward, each once
    assert seen[-2:] == ["KV cache", "CUDA graphs"]
    later = [d["instance"]["loadPhase"] for e, d in collector.events if e == "status"][1:]
    assert later == [None, None]  # active, stopping


def test_malformed_json_and_unknown_ids(module_server: ServerProcess) -> None:
    with module_server.client() as api:
        resp = api.post(
            "/api/v1/models/load", content=b"{nope", headers={"content-type": "application/json"}
        )
        assert resp.status_code == 422
        assert resp.json()["code"] == "validation_error"
        for method, path in [
            ("GET", "/api/v1/models/nope"),
            ("POST", "/api/v1/models/nope/unload"),
            ("GET", "/api/v1/models/instances/nope/events"),
            ("GET", "/api/v1/models/nope/logs"),
        ]:
            resp = api.request(method, path)
            assert resp.status_code == 404, path
            assert resp.json()["code"] == "instance_not_found"
        assert api.get("/api/v1/no-such-route").json()["code"] == "not_found"


def test_shell_metacharacters_are_literal_argv(reused_server: ServerProcess, tmp_path: Any) -> None:
    marker = tmp_path / "pwned"
    token = f"--x; touch {marker} $(touch {marker}) | touch {marker}"
    with reused_server.client() as api:
        inst = sim_load(api, "meta", token)
        # The engine gets ONE argv token and rejects it like vLLM's argparse would;
        # no shell ever sees it.
        failed = wait_for_status(api, inst["id"], "failed", timeout=20)
        assert "unrecognized arguments" in failed["errorMessage"]
        assert token in failed["errorMessage"]
        assert failed["extraArgs"][-1] == token
    assert not marker.exists()


def test_unload_twice_and_port_exhaustion(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(port_range=1).start()
    with srv.client() as api:
        first = sim_load(api, "only-one")
        resp = api.post("/api/v1/models/load", json={"modelPath": "second", "engine": "sim"})
        assert resp.status_code == 409
        assert resp.json()["code"] == "port_range_exhausted"
        wait_for_status(api, first["id"], "active")
        assert api.post(f"/api/v1/models/{first['id']}/unload").status_code == 200
        again = api.post(f"/api/v1/models/{first['id']}/unload")
        assert again.status_code == 404
        assert again.json()["code"] == "instance_not_found"
        # The port is free again.
        second = sim_load(api, "now-fits")
        wait_for_status(api, second["id"], "active")
