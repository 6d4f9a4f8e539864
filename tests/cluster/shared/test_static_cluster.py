"""A 3-pod static-peers cluster of real `sardeenz serve` processes (sim engines).

On the tier's shared cluster (tests/cluster/conftest.py), the tests in order: election,
inference across pods, a load ordered through the leader, the leader acting on other
pods' instances, stale terms refused. Each leaves the cluster as it found it. Failover,
rejoin and a clean stop kill and restart pods: test_static_failover.py, on a cluster of
its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from sardeenz.security.cluster_hmac import Signer
from testkit.cluster import (
    SECRET,
    TESTER,
    Cluster,
    assert_answers_through,
    listed_models,
    wait_listed,
)
from testkit.servers import HTTP, engine_processes

pytestmark = pytest.mark.slow


def test_one_leader_within_15s_and_the_same_term_everywhere(shared_cluster: Cluster) -> None:
    t0 = time.monotonic()
    leader, term = shared_cluster.wait_one_leader(15.0)
    took = time.monotonic() - t0
    print(f"\nleader {leader} (term {term}) agreed by all pods {took:.2f}s after start")
    assert leader == "pod-a"  # Bully: the lowest pod id wins
    assert term >= 1
    status = shared_cluster.status("pod-b")
    assert status is not None
    assert status["mode"] == "static"
    pods = {p["id"]: p for p in status["pods"]}
    assert set(pods) == {"pod-a", "pod-b", "pod-c"}
    assert all(p["state"] == "healthy" for p in pods.values())
    assert [p["id"] for p in pods.values() if p["isLeader"]] == ["pod-a"]
    assert pods["pod-a"]["address"] == f"127.0.0.1:{shared_cluster.pods['pod-a'].port}"
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "sardeenz.cli",
            "cluster",
            "status",
            "--url",
            shared_cluster.pods["pod-c"].url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert cli.returncode == 0, cli.stderr
    assert "mode static, leader pod-a" in cli.stdout
    assert cli.stdout.count("healthy") == 3


@pytest.fixture(scope="module")
def remote_b(shared_cluster: Cluster) -> Iterator[dict[str, Any]]:
    """``remote-b`` on pod B for the module's tests, unloaded after them."""
    inst = shared_cluster.load_on("pod-b", "remote-b")
    yield inst
    with shared_cluster.pods["pod-a"].client() as client:
        assert client.post(f"/api/v1/models/{inst['id']}/unload").status_code == 200
    shared_cluster.wait_instance("pod-b", inst["id"], None)


def test_model_on_pod_b_answers_through_pod_a(
    shared_cluster: Cluster, remote_b: dict[str, Any]
) -> None:
    a, b = shared_cluster.pods["pod-a"], shared_cluster.pods["pod-b"]
    assert remote_b["status"] == "active"
    wait_listed(a.url, "remote-b", True)
    assert "remote-b" in listed_models(shared_cluster.pods["pod-c"].url)
    assert_answers_through(a.url, "remote-b")
    # The engine ran on pod B: pod A (the leader) lists it as pod B's and runs none itself.
    with a.client() as ca:
        listed = ca.get("/api/v1/models").json()
    assert [i["podId"] for i in listed if i["servedModelName"] == "remote-b"] == ["pod-b"]
    assert [i for i in listed if i["podId"] == "pod-a"] == []
    # The cluster secret never reaches an engine's environment.
    engines = engine_processes(b.data_dir)
    assert engines
    for proc in engines:
        assert "CLUSTER_SECRET" not in proc.environ()


def test_forwarded_request_needs_a_valid_cluster_signature(
    shared_cluster: Cluster, remote_b: dict[str, Any]
) -> None:
    """Without an API key check configured, pod B serves /v1 anyway; the hop header
    only stops a second hop. What the signature is for is checked in
    test_internal_auth.py with API keys on."""
    b = shared_cluster.pods["pod-b"]
    resp = HTTP.post(
        f"{b.url}/v1/chat/completions",
        json={"model": "remote-b", "messages": [{"role": "user", "content": "x"}]},
        headers={"x-sardeenz-hop": "pod-a"},
        timeout=10,
    )
    assert resp.status_code == 200


def test_load_with_pod_id_goes_through_the_leader(shared_cluster: Cluster) -> None:
    leader, _ = shared_cluster.wait_one_leader(10.0)
    lead = shared_cluster.pods[leader]
    with lead.client() as client:
        resp = client.post(
            "/api/v1/models/load",
            json={
                "modelPath": "placed-on-c",
                "engine": "sim",
                "extraArgs": ["--load-seconds", "0.2"],
                "podId": "pod-c",
            },
        )
        assert resp.status_code == 202, resp.text
        iid = resp.json()["id"]
        # One instance namespace: the leader answers for pod-c's instance (cluster/locator.py).
        details = client.get(f"/api/v1/models/{iid}")
        assert details.status_code == 200, details.text
        assert details.json()["podId"] == "pod-c"
        missing = client.post(
            "/api/v1/models/load",
            json={"modelPath": "x", "engine": "sim", "podId": "pod-zz"},
        )
        assert missing.status_code == 404
        assert missing.json()["code"] == "pod_not_found"
    placed = shared_cluster.wait_instance("pod-c", iid, "active")
    assert placed is not None
    assert placed["servedModelName"] == "placed-on-c"
    shared_cluster.unload("pod-c", iid)


def test_followers_send_admin_and_dashboard_requests_to_the_leader(shared_cluster: Cluster) -> None:
    leader, _ = shared_cluster.wait_one_leader(10.0)
    lead_url = shared_cluster.pods[leader].url
    follower = shared_cluster.pods[next(n for n in shared_cluster.names if n != leader)]
    with follower.client() as client:
        load = client.post("/api/v1/models/load?x=1", json={"modelPath": "x", "engine": "sim"})
        assert load.status_code == 307  # the method and body are repeated at the leader
        assert load.headers["location"] == f"{lead_url}/api/v1/models/load?x=1"
        assert load.json()["code"] == "leader_redirect"
        listing = client.get("/api/v1/models")
        assert listing.status_code == 307
        assert listing.headers["location"] == f"{lead_url}/api/v1/models"
        assert client.get("/").headers.get("location") == f"{lead_url}/"
        # Each pod's own view stays readable: health, metrics, cluster status, docs.
        for path in ("/api/health", "/api/health/ready", "/metrics", "/api/cluster/status"):
            assert client.get(path).status_code == 200, path
        assert client.get("/openapi.json").status_code == 200
    # The CLI follows the redirect (with its credentials) to the leader.
    cli = subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", "models", "ls", "--json", "--url", follower.url],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr


def test_leader_unloads_an_instance_of_another_pod(shared_cluster: Cluster) -> None:
    leader, _ = shared_cluster.wait_one_leader(10.0)
    iid = shared_cluster.load_on("pod-c", "unloaded-on-c")["id"]
    with shared_cluster.pods[leader].client() as client:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the leader learns of it from pod-c's heartbeat
            resp = client.post(f"/api/v1/models/{iid}/unload")
            if resp.status_code != 404:
                break
            time.sleep(0.1)
        assert resp.status_code == 200, f"the leader's unload of pod-c's {iid}: {resp.text}"
        assert resp.json()["id"] == iid
    assert shared_cluster.wait_instance("pod-c", iid, None) is None  # gone from pod-c


def _pods_instances(status: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (i["id"], p["id"], i["status"])
        for p in status["pods"]
        if p["state"] != "unavailable"
        for i in p["instances"]
    }


def test_leader_lists_every_pods_instances_and_sleeps_and_wakes_a_remote_one(
    shared_cluster: Cluster,
) -> None:
    leader, _ = shared_cluster.wait_one_leader(10.0)
    follower = next(n for n in shared_cluster.names if n != leader)
    with shared_cluster.pods[leader].client() as client:
        resp = client.post(
            "/api/v1/models/load",
            json={
                "modelPath": "sleepy-remote",
                "engine": "sim",
                "extraArgs": ["--load-seconds", "0.2"],
                "enableSleepMode": True,
                "podId": follower,
            },
        )
        assert resp.status_code == 202, resp.text
        assert resp.json()["podId"] == follower
        iid = resp.json()["id"]
        shared_cluster.wait_instance(follower, iid, "active")

        # The leader's list is every pod's instances as its status shows them (both
        # from the heartbeats it holds), each naming its pod.
        deadline = time.monotonic() + 10
        while True:
            listed = client.get("/api/v1/models").json()
            status = client.get("/api/cluster/status").json()
            rows = {(i["id"], i["podId"], i["status"]) for i in listed}
            if (iid, follower, "active") in rows and rows == _pods_instances(status):
                break
            assert time.monotonic() < deadline, (rows, _pods_instances(status))
            time.sleep(0.1)
        assert len(listed) == len(rows)  # no instance twice

        # Sleep and wake by id from the leader: executed on the pod that runs it.
        slept = client.post(f"/api/v1/models/{iid}/sleep", json={"level": 1})
        assert slept.status_code == 200, slept.text
        assert (slept.json()["status"], slept.json()["podId"]) == ("sleeping", follower)
        shared_cluster.wait_instance(follower, iid, "sleeping")
        woke = client.post(f"/api/v1/models/{iid}/wake")
        assert woke.status_code == 200, woke.text
        assert (woke.json()["status"], woke.json()["podId"]) == ("active", follower)
        shared_cluster.wait_instance(follower, iid, "active")

    # A follower's list redirects to the leader, which answers for the whole cluster.
    via = HTTP.get(
        f"{shared_cluster.pods[follower].url}/api/v1/models", follow_redirects=True, timeout=5
    )
    assert via.status_code == 200
    assert str(via.url).startswith(shared_cluster.pods[leader].url)
    assert {(i["id"], i["podId"]) for i in via.json()} >= {(iid, follower)}

    with shared_cluster.pods[leader].client() as client:
        assert client.post(f"/api/v1/models/{iid}/unload").status_code == 200
    assert shared_cluster.wait_instance(follower, iid, None) is None


def test_orders_of_an_old_term_are_refused(shared_cluster: Cluster) -> None:
    _, term = shared_cluster.wait_one_leader(10.0)
    c = shared_cluster.pods["pod-c"]
    signer = Signer(SECRET.encode(), source=TESTER)
    body = b'{"term": 0, "level": 1}'
    path = "/internal/models/nope/sleep"
    resp = HTTP.post(
        f"{c.url}{path}", content=body, headers=signer.headers("POST", path, body, target="pod-c")
    )
    assert term >= 1
    assert resp.status_code == 409
    assert resp.json()["code"] == "stale_term"
