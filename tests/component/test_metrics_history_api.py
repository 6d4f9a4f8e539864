"""GET /api/v1/metrics/history over HTTP: samples from the server's own task, and `since`."""

from __future__ import annotations

import time

from testkit.servers import ServerProcess


def test_history_is_sampled_by_the_server_and_filtered_by_since(
    module_server: ServerProcess,
) -> None:
    with module_server.client() as api:
        deadline = time.monotonic() + 15
        while len(api.get("/api/v1/metrics/history").json()["samples"]) < 2:
            assert time.monotonic() < deadline, "the server took no samples"
            time.sleep(0.5)
        report = api.get("/api/v1/metrics/history").json()
        assert report["intervalSeconds"] == 5.0
        assert report["windowSeconds"] == 3600.0
        ts = [s["t"] for s in report["samples"]]
        assert ts == sorted(ts)
        assert 4.0 <= ts[1] - ts[0] <= 6.5  # one sampling task at a fixed interval
        newer = api.get("/api/v1/metrics/history", params={"since": ts[0]}).json()["samples"]
        assert newer[0]["t"] == ts[1]
        assert all(s["t"] > ts[0] for s in newer)
        assert api.get("/api/v1/metrics/history", params={"since": "x"}).status_code == 422
