"""The controller's own log: quiet about health polls, optionally JSON lines."""

from __future__ import annotations

import json
import time
from typing import Any

from testkit.servers import ServerProcess, load_active

QUIET_SECONDS = 20.0
HEALTH_INTERVAL = 0.5  # ServerProcess's SARDEENZ_HEALTH_INTERVAL_SECONDS
ENGINES = 5


def test_info_log_has_no_per_poll_lines(server_factory: Any) -> None:
    """5 engines polled every 0.5 s for 20 s (~200 polls) leave no trace at INFO.

    The engines' own access logs prove the polls happened; the controller's log,
    at INFO, must not have one line per poll (httpx logs each request at INFO).
    """
    srv: ServerProcess = server_factory(extra_env={"SARDEENZ_LOG_LEVEL": "info"}).start()
    with srv.client() as api:
        ids = [load_active(api, f"quiet-{i}")["id"] for i in range(ENGINES)]
        time.sleep(QUIET_SECONDS)
        polls = 0
        for inst_id in ids:
            lines = api.get(f"/api/v1/models/{inst_id}/logs", params={"lines": 2000}).json()
            polls += sum("GET /health" in line for line in lines["lines"])
    # Loose lower bound (half the nominal rate): enough to show polling went on.
    assert polls >= ENGINES * QUIET_SECONDS / HEALTH_INTERVAL / 2, polls
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
