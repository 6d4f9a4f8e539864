"""The controller's own log: quiet about health polls, optionally JSON lines."""

from __future__ import annotations

import json
import time
from typing import Any

from testkit.servers import ServerProcess, sim_load, wait_for_status

POLLS = 200
"""Health polls the engines must have answered before the controller's log is read."""
HEALTH_INTERVAL = 0.1  # this test's SARDEENZ_HEALTH_INTERVAL_SECONDS: 200 polls in ~4 s
ENGINES = 5


def test_info_log_has_no_per_poll_lines(server_factory: Any) -> None:
    """5 engines polled until they answered 200 health polls leave no trace at INFO.

    The engines' own access logs prove the polls happened (the wait counts them
    there, instead of sleeping for a nominal number); the controller's log, at INFO,
    must not have one line per poll (httpx logs each request at INFO).
    """
    srv: ServerProcess = server_factory(
        extra_env={
            "SARDEENZ_LOG_LEVEL": "info",
            "SARDEENZ_HEALTH_INTERVAL_SECONDS": str(HEALTH_INTERVAL),
        }
    ).start()
    with srv.client() as api:
        # Loaded side by side (each engine start is a process start of its own).
        ids = [sim_load(api, f"quiet-{i}")["id"] for i in range(ENGINES)]
        for inst_id in ids:
            wait_for_status(api, inst_id, "active")
        deadline = time.monotonic() + 60
        polls = 0
        while polls < POLLS:
            assert time.monotonic() < deadline, f"{polls} of {POLLS} health polls in 60 s"
            time.sleep(0.5)
            polls = 0
            for inst_id in ids:
                lines = api.get(f"/api/v1/models/{inst_id}/logs", params={"lines": 2000}).json()
                polls += sum("GET /health" in line for line in lines["lines"])
    log = srv.log()
    assert "loading quiet-0" in log  # the controller does log at INFO
    per_poll = [ln for ln in log.splitlines() if "/health" in ln or "HTTP Request" in ln]
    assert per_poll == [], per_poll[:5]


def test_json_log_lines_carry_request_ids(server_factory: Any) -> None:
    srv: ServerProcess = server_factory(extra_env={"SARDEENZ_LOG_FORMAT": "json"}).start()
    with srv.client() as api:
        resp = api.post(
            "/api/v1/models/load",
            json={"modelPath": "json\nforged", "engine": "sim"},
            headers={"X-Request-Id": "req-refused"},
        )
        assert resp.status_code == 400
        assert resp.headers["x-request-id"] == "req-refused"
        inst = api.post(
            "/api/v1/models/load",
            json={"modelPath": "json-model", "engine": "sim"},
            headers={"X-Request-Id": "req-42"},
        ).json()
        assert api.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200
        generated = api.get("/api/health").headers["x-request-id"]
        assert len(generated) == 32
    records = [json.loads(line) for line in srv.log().splitlines() if line.strip()]
    assert all({"time", "level", "logger", "msg"} <= set(r) for r in records)
    loading = [r for r in records if "loading json-model" in r["msg"]]
    assert loading
    assert loading[0]["request_id"] == "req-42"
    assert loading[0]["level"] == "INFO"
