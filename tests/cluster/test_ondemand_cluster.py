"""On-demand starts in a cluster: the leader's scheduler chooses the pod.

Three pods with the same catalog; only pod-c's GPU (40 GiB) can hold the
catalog model (30 GiB), pod-a and pod-b have 16 GiB each. A first request sent
to pod-b (a follower, not the one that fits) starts the model on pod-c through
the leader, waits for its route and is answered through pod-b; pod-b runs
nothing. A model that fits nowhere in the cluster falls back to the entry pod,
which refuses it with the ledger's reason (the waiters' 503 names it).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from testkit.cluster import Cluster
from testkit.servers import HTTP

pytestmark = pytest.mark.slow

CATALOG = {
    "od-big": {
        "modelPath": "/models/od-big",
        "engine": "sim",
        "extraArgs": ["--memory-gib", "30", "--load-seconds", "0.5"],
    },
    "od-huge": {
        "modelPath": "/models/od-huge",
        "engine": "sim",
        "extraArgs": ["--memory-gib", "60", "--load-seconds", "0.2"],
    },
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("ondemand-cluster"),
        3,
        pod_env={
            "pod-a": {"SARDEENZ_SIM_GPUS": "NVIDIA L4:16GiB"},
            "pod-b": {"SARDEENZ_SIM_GPUS": "NVIDIA L4:16GiB"},
            "pod-c": {"SARDEENZ_SIM_GPUS": "NVIDIA L40S:40GiB"},
        },
        SARDEENZ_CATALOG=json.dumps(CATALOG),
        SARDEENZ_ONDEMAND_MAX_WAIT_SECONDS="30",
    )
    try:
        c.start()
        c.wait(
            lambda st: all(len(p["gpus"]) == 1 for s in st.values() for p in s["pods"]),
            20,
            "every pod's GPUs in every heartbeat",
        )
        yield c
    finally:
        c.close()
        assert c.orphans() == []


def test_first_request_on_a_follower_starts_the_model_where_the_scheduler_says(
    cluster: Cluster,
) -> None:
    leader, _ = cluster.wait_one_leader()
    assert leader == "pod-a"
    entry = cluster.pods["pod-b"].url
    body = {"model": "od-big", "prompt": "hello", "max_tokens": 3}
    t0 = time.monotonic()
    resp = HTTP.post(f"{entry}/v1/completions", json=body, timeout=60)
    took = time.monotonic() - t0
    assert resp.status_code == 200, resp.text
    assert resp.json()["choices"][0]["text"]
    print(f"\nfirst request through pod-b, model started on pod-c: {took:.2f} s")
    names = {pod: [i["servedModelName"] for i in cluster.instances(pod)] for pod in cluster.names}
    assert names == {"pod-a": [], "pod-b": [], "pod-c": ["od-big"]}
    # The next requests (stream too) are routed to pod-c at once, from any pod.
    with HTTP.stream(
        "POST", f"{cluster.pods['pod-a'].url}/v1/completions",
        json={**body, "stream": True}, timeout=30,
    ) as stream:  # fmt: skip
        assert stream.status_code == 200
        lines = [ln for ln in stream.iter_lines() if ln.startswith("data:")]
    assert lines[-1] == "data: [DONE]"
    assert [i["servedModelName"] for i in cluster.instances("pod-c")] == ["od-big"]


def test_a_model_that_fits_nowhere_gets_the_reason(cluster: Cluster) -> None:
    entry = cluster.pods["pod-b"].url
    body = {"model": "od-huge", "prompt": "hello", "max_tokens": 1}
    resp = HTTP.post(f"{entry}/v1/completions", json=body, timeout=60)
    assert resp.status_code == 503, resp.text
    error = resp.json()["error"]
    assert error["code"] == "model_start_failed"
    assert "od-huge" in error["message"]
    assert resp.headers["retry-after"]
    assert all(
        "od-huge" not in [i["servedModelName"] for i in cluster.instances(p)] for p in cluster.names
    )
