"""Discovery and observability through a real `sardeenz serve` on one simulated L4.

``GET /v1/models`` lists what a request would be served for (sleeping and starting models
too, with their ``state``); ``/metrics`` has GPU and instance memory, instance status and
admin API request metrics; ``GET /api/v1/models/{id}/metrics`` is the seed's
``ResourceMetrics``. One server for the module: each test unloads what it loaded.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from testkit.servers import ServerPool, ServerProcess, load_active, sim_load, wait_for_status

GIB = 2**30


@pytest.fixture(scope="module")
def srv(module_server_factory: ServerPool) -> ServerProcess:
    server: ServerProcess = module_server_factory(args=["--sim-gpus", "NVIDIA L4:24GiB"])
    return server.start()


@pytest.fixture
def api(srv: ServerProcess) -> Iterator[httpx.Client]:
    with srv.client() as client:
        yield client
        for inst in client.get("/api/v1/models").json():  # leave the server empty
            client.post(f"/api/v1/models/{inst['id']}/unload")


def samples(api: httpx.Client, name: str, **labels: str) -> list[float]:
    text = api.get("/metrics").text
    return [
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


def one(api: httpx.Client, name: str, **labels: str) -> float:
    found = samples(api, name, **labels)
    assert len(found) == 1, (name, labels, found)
    return found[0]


def cards(api: httpx.Client) -> dict[str, dict[str, object]]:
    resp = api.get("/v1/models")
    assert resp.status_code == 200, resp.text
    return {c["id"]: c for c in resp.json()["data"]}


def test_v1_models_lists_sleeping_and_starting_models_with_their_state(
    api: httpx.Client,
) -> None:
    nap = load_active(api, "nap", "--memory-gib", "2", enableSleepMode=True)
    assert api.post(f"/api/v1/models/{nap['id']}/sleep").json()["status"] == "sleeping"
    sim_load(api, "slow", "--memory-gib", "2", "--load-seconds", "60")
    broken = sim_load(api, "broken", "--memory-gib", "2", "--fail-after-load")
    wait_for_status(api, broken["id"], "failed")
    listed = cards(api)
    assert listed["nap"]["state"] == "sleeping"
    assert listed["slow"]["state"] == "starting"
    assert "broken" not in listed  # a request could not be served
    assert all(c["object"] == "model" and c["owned_by"] == "sardeenz" for c in listed.values())
    single = api.get("/v1/models/nap")
    assert single.status_code == 200
    assert single.json()["state"] == "sleeping"
    assert api.get("/v1/models/broken").status_code == 404
    # A request wakes it (as discovery promised), and the card follows.
    reply = api.post("/v1/completions", json={"model": "nap", "prompt": "x", "max_tokens": 2})
    assert reply.status_code == 200, reply.text
    assert cards(api)["nap"]["state"] == "active"


def test_gpu_and_instance_memory_and_status_are_scraped(api: httpx.Client) -> None:
    inst = load_active(api, "scraped", "--memory-gib", "3")
    assert one(api, "sardeenz_gpu_memory_bytes", gpu="0", kind="total") == 24 * GIB
    assert one(api, "sardeenz_gpu_memory_bytes", gpu="0", kind="used") == 3 * GIB
    assert one(api, "sardeenz_gpu_memory_bytes", gpu="0", kind="free") == 21 * GIB
    assert one(api, "sardeenz_gpu_memory_bytes", gpu="0", kind="promised") == 0
    held = {"instance_id": inst["id"], "model": "scraped", "gpu": "0"}
    assert one(api, "sardeenz_instance_memory_bytes", **held) == 3 * GIB
    status = {"instance_id": inst["id"], "model": "scraped"}
    assert one(api, "sardeenz_instance_status", **status, status="active") == 1
    assert one(api, "sardeenz_instance_status", **status, status="sleeping") == 0
    api.post(f"/api/v1/models/{inst['id']}/unload").raise_for_status()
    assert samples(api, "sardeenz_instance_memory_bytes", instance_id=inst["id"]) == []
    assert one(api, "sardeenz_gpu_memory_bytes", gpu="0", kind="used") == 0


def test_admin_api_requests_are_counted_by_route_template(api: httpx.Client) -> None:
    route = {"method": "GET", "route": "/api/v1/models/{instance_id}"}

    def count(status: str) -> float:
        return sum(samples(api, "sardeenz_api_requests_total", **route, status=status))

    before_404 = count("404")
    for name in ("a1", "b2", "c3"):
        assert api.get(f"/api/v1/models/{name}").status_code == 404
    assert count("404") == before_404 + 3
    inst = load_active(api, "counted", "--memory-gib", "1")
    before_200 = count("200")  # wait_for_status polled the same route
    for _ in range(2):
        assert api.get(f"/api/v1/models/{inst['id']}").status_code == 200
    assert count("200") == before_200 + 2
    assert sum(samples(api, "sardeenz_api_request_duration_seconds_count", **route)) >= 5
    served = api.post("/v1/completions", json={"model": "counted", "prompt": "x", "max_tokens": 1})
    assert served.status_code == 200
    routes = _labels(api, "sardeenz_api_requests_total", "route")
    assert "/api/v1/models/load" in routes
    assert not any(r.startswith("/v1") for r in routes)  # the hot path is never counted
    assert not any(inst["id"] in r for r in routes)  # templates, never raw paths


def _labels(api: httpx.Client, name: str, label: str) -> set[str]:
    text = api.get("/metrics").text
    return {
        s.labels[label]
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_resource_metrics_of_an_instance(api: httpx.Client) -> None:
    inst = load_active(api, "measured", "--memory-gib", "2")
    for _ in range(3):
        r = api.post("/v1/completions", json={"model": "measured", "prompt": "x", "max_tokens": 2})
        assert r.status_code == 200
    resp = api.get(f"/api/v1/models/{inst['id']}/metrics")
    assert resp.status_code == 200, resp.text
    m = resp.json()
    assert m["modelId"] == inst["id"]
    assert m["servedModelName"] == "measured"
    assert m["status"] == "active"
    assert m["gpuMemoryUsedBytes"] == 2 * GIB
    assert m["gpuMemoryUsedBytesByGpu"] == {"0": 2 * GIB}
    assert m["gpuMemoryUsed"] == round(2 * GIB / 1e9, 3)
    assert m["requestCount"] == 3
    assert m["activeConnections"] == 0
    assert 0 < m["avgResponseTime"] <= m["p95ResponseTime"]
    assert m["timestamp"]
    listed = api.get("/api/v1/resource-metrics").json()
    assert [x["modelId"] for x in listed] == [inst["id"]]
    missing = api.get("/api/v1/models/nope/metrics")
    assert missing.status_code == 404
    assert missing.json()["code"] == "instance_not_found"
