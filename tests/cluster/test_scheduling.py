"""The leader's scheduler and profile sync on a 3-pod cluster with simulated GPUs.

pod-a: one NVIDIA L4 (24 GiB); pod-b: two NVIDIA L4; pod-c: one A100 80 GiB.
Strategy balanced (the default). Tests in order, one cluster for the module:
the dry run and the load without ``podId`` agree and land where balanced says;
TP and GPU type constraints; a refusal is 409 ``no_pod_fits`` with a reason per
pod; a profile made on the leader (pod-a) refuses, then (a newer measurement of
the same key) admits, a load on pod-c.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from sardeenz.cluster.transport.routes import PROFILES
from sardeenz.security.cluster_hmac import Signer
from testkit.cluster import SECRET, TESTER, Cluster
from testkit.servers import HTTP

PATH = PROFILES.path()

pytestmark = pytest.mark.slow

GIB = 2**30
A100 = "NVIDIA A100-SXM4-80GB"


@pytest.fixture(scope="module")
def gpu_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = Cluster(
        tmp_path_factory.mktemp("sched"),
        3,
        pod_env={
            "pod-a": {"SARDEENZ_SIM_GPUS": "NVIDIA L4:24GiB"},
            "pod-b": {"SARDEENZ_SIM_GPUS": "NVIDIA L4:24GiB,NVIDIA L4:24GiB"},
            "pod-c": {"SARDEENZ_SIM_GPUS": f"{A100}:80GiB"},
        },
    )
    try:
        cluster.start()
        cluster.wait(
            lambda st: all(len(p["gpus"]) > 0 for s in st.values() for p in s["pods"]),
            20,
            "every pod's GPUs in every heartbeat",
        )
        yield cluster
    finally:
        cluster.close()


def _body(name: str, memory_gib: float, **extra: Any) -> dict[str, Any]:
    return {
        "modelPath": name,
        "engine": "sim",
        "extraArgs": ["--load-seconds", "0.2", "--memory-gib", str(memory_gib)],
        **extra,
    }


def _gpu_free(cluster: Cluster, pod: str) -> dict[int, int]:
    status = cluster.status(pod)
    assert status is not None
    me = next(p for p in status["pods"] if p.get("self"))
    return {g["index"]: g["freeBytes"] for g in me["gpus"]}


def test_load_without_pod_id_goes_where_the_dry_run_says(gpu_cluster: Cluster) -> None:
    url = gpu_cluster.leader_url()
    before = _gpu_free(gpu_cluster, "pod-c")
    body = _body("sched-big", 10)
    verdict = HTTP.post(f"{url}/api/cluster/schedule", json=body, timeout=10).json()
    print(f"\ndry run: {verdict['verdict']}")
    # balanced: the A100 keeps the most free after 10 GiB (an L4 would keep ~12 GB)
    assert verdict["placed"] is True
    assert verdict["strategy"] == "balanced"
    assert (verdict["podId"], verdict["gpuIds"]) == ("pod-c", [0])
    assert verdict["needBytesPerGpu"] == 10 * GIB
    assert verdict["needSource"] == "booking"
    expected_after = before[0] - 2 * 10**9 - 10 * GIB  # the 2 GB reserve, the booking
    assert verdict["freeAfterBytes"] == {"0": expected_after}
    assert verdict["verdict"].startswith("would go to pod-c, GPU 0 (NVIDIA A100-SXM4-80GB): ")
    # the same answer from a follower (every pod holds every heartbeat)
    again = HTTP.post(
        f"{gpu_cluster.pods['pod-b'].url}/api/cluster/schedule", json=body, timeout=10
    ).json()
    assert (again["podId"], again["gpuIds"]) == ("pod-c", [0])

    resp = HTTP.post(f"{url}/api/v1/models/load", json=body, timeout=30)
    assert resp.status_code == 202, resp.text
    inst = gpu_cluster.wait_instance("pod-c", resp.json()["id"], "active")
    assert inst is not None
    assert inst["gpuIds"] == [0]
    assert _gpu_free(gpu_cluster, "pod-c")[0] == before[0] - 10 * GIB


def test_constraints_gpu_type_and_tensor_parallel(gpu_cluster: Cluster) -> None:
    url = gpu_cluster.leader_url()
    # two L4s on one pod: only pod-b has them
    tp = _body("sched-tp", 4, gpuType="L4", tensorParallelSize=2)
    resp = HTTP.post(f"{url}/api/v1/models/load", json=tp, timeout=30)
    assert resp.status_code == 202, resp.text
    inst = gpu_cluster.wait_instance("pod-b", resp.json()["id"], "active")
    assert inst is not None
    assert sorted(inst["gpuIds"]) == [0, 1]
    # one L4 now: pod-a's is untouched while pod-b's hold 4 GiB each
    verdict = HTTP.post(
        f"{url}/api/cluster/schedule", json=_body("x", 4, gpuType="l4"), timeout=10
    ).json()
    assert (verdict["podId"], verdict["gpuIds"]) == ("pod-a", [0])
    # at least 40 GiB of VRAM: only the A100
    verdict = HTTP.post(
        f"{url}/api/cluster/schedule", json=_body("x", 4, minVramGiB=40), timeout=10
    ).json()
    assert verdict["podId"] == "pod-c"


def test_no_pod_fits_is_409_with_a_reason_per_pod(gpu_cluster: Cluster) -> None:
    url = gpu_cluster.leader_url()
    resp = HTTP.post(f"{url}/api/v1/models/load", json=_body("sched-huge", 100), timeout=30)
    assert resp.status_code == 409, resp.text
    data = resp.json()
    assert data["code"] == "no_pod_fits"
    assert data["strategy"] == "balanced"
    assert set(data["reasons"]) == {"pod-a", "pod-b", "pod-c"}
    assert all("needs 100.0 GiB per GPU" in r for r in data["reasons"].values()), data
    h100 = HTTP.post(
        f"{url}/api/v1/models/load", json=_body("sched-h100", 1, gpuType="H100"), timeout=30
    )
    assert h100.status_code == 409
    assert "no GPU named like 'H100'" in h100.json()["reasons"]["pod-c"]
    names = {i["servedModelName"] for p in gpu_cluster.pods for i in gpu_cluster.instances(p)}
    assert not names & {"sched-huge", "sched-h100"}  # nothing half-done


def _profiles_on(cluster: Cluster, pod: str) -> list[dict[str, Any]]:
    """A pod's own profiles, read with a signed /internal call (its API redirects)."""
    headers = Signer(SECRET.encode(), source=TESTER).headers("GET", PATH, b"", target=pod)
    resp = HTTP.get(f"{cluster.pods[pod].url}{PATH}", headers=headers, timeout=5)
    assert resp.status_code == 200, resp.text
    profiles: list[dict[str, Any]] = resp.json()["profiles"]
    return profiles


def _wait_profile_on(cluster: Cluster, pod: str, profile_id: str, timeout: float = 15) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if any(p["id"] == profile_id for p in _profiles_on(cluster, pod)):
            return time.monotonic() - t0
        time.sleep(0.1)
    raise AssertionError(f"profile {profile_id} not on {pod} within {timeout}s")


def _profile(weights_gib: float) -> dict[str, Any]:
    return {
        "modelPath": "synced-model",
        "maxTokens": 4096,
        "weightsMemoryGib": weights_gib,
        "kvCacheAvailableGib": 1.0,
        "kvCachePerRequestMib": 512,
        "gpuName": A100,
        "gpuTotalMemoryGib": 80,
    }


def test_a_profile_made_on_pod_a_admits_and_refuses_loads_on_pod_c(
    gpu_cluster: Cluster,
) -> None:
    leader, _ = gpu_cluster.wait_one_leader()
    assert leader == "pod-a"
    url = gpu_cluster.pods[leader].url
    load = _body("synced-model", 1, podId="pod-c")
    load["extraArgs"] += ["--max-model-len", "4096"]

    big = HTTP.post(f"{url}/api/memory/profiles", json=_profile(100), timeout=10)
    assert big.status_code == 201, big.text
    took = _wait_profile_on(gpu_cluster, "pod-c", big.json()["id"])
    print(f"\nprofile made on {leader} reached pod-c in {took:.2f}s")
    refused = HTTP.post(f"{url}/api/v1/models/load", json=load, timeout=30)
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "model_does_not_fit"
    fit = refused.json()["fit"]
    assert fit["source"] == "profile"
    assert fit["profileId"] == big.json()["id"]

    # A newer measurement of the same model, length and GPU type wins everywhere.
    small = HTTP.post(f"{url}/api/memory/profiles", json=_profile(2), timeout=10)
    assert small.status_code == 201, small.text
    _wait_profile_on(gpu_cluster, "pod-c", small.json()["id"])
    admitted = HTTP.post(f"{url}/api/v1/models/load", json=load, timeout=30)
    assert admitted.status_code == 202, admitted.text
    assert gpu_cluster.wait_instance("pod-c", admitted.json()["id"], "active") is not None

    merged = HTTP.get(f"{url}/api/cluster/memory-profiles", timeout=5).json()["profiles"]
    entry = next(m for m in merged if m["profile"]["modelPath"] == "synced-model")
    assert entry["profile"]["id"] == small.json()["id"]
    assert entry["count"] == 2
    assert entry["pods"] == ["pod-a", "pod-b", "pod-c"]
    # followers hold the merged set they were pushed, counts included
    deadline = time.monotonic() + 10
    while True:
        seen = HTTP.get(
            f"{gpu_cluster.pods['pod-b'].url}/api/cluster/memory-profiles", timeout=5
        ).json()["profiles"]
        got = [(m["profile"]["id"], m["count"]) for m in seen]
        if got == [(small.json()["id"], 2)] or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert got == [(small.json()["id"], 2)]
