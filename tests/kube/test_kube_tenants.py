"""Kubernetes mode: a tenant's limit holds once over three pods, its definition in a ConfigMap.

Three real pods against a real kube-apiserver (testkit/kube_pods.py plays the kubelet;
the Lease elects the leader). The tenant is put through a follower (its 307 to the
Lease holder), stored in the ``sardeenz-control-tenants`` ConfigMap, held by every
pod; then one client per pod sends for ``WINDOW`` s and the three pods together admit
what one bucket of the limit admits, within the tolerance of the static-peers test
(tests/cluster/test_tenant_limits.py, which says why the window holds the burst).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

from testkit.kube import KubeApiServer
from testkit.kube_pods import KubePods
from testkit.tenants import (
    assert_one_limit,
    chat_body,
    keys_file,
    paced_window,
    put_tenant,
    wait_tenant_everywhere,
)

pytestmark = [pytest.mark.kube, pytest.mark.slow]

MODEL = "kube-tenant-m"
RPM = 120
WINDOW = 20.0
PACE = 0.2
TOLERANCE = 0.10


@pytest.fixture(scope="module")
def pods(kube: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubePods]:
    root = tmp_path_factory.mktemp("kubetenants")
    cluster = KubePods(
        kube,
        root,
        3,
        extra_env={
            "SARDEENZ_API_KEYS_FILE": keys_file(root / "keys.txt", ["k-kube"]),
            "CLUSTER_EXPECTED_PODS": "3",
        },
    )
    try:
        cluster.start()
        # Served by every pod (each admits what it serves); the three loads side by side,
        # as in the static-peers test: each waits for its engine, then for the leader to
        # hear of it in a heartbeat, and one after another they were seconds of waiting.
        with ThreadPoolExecutor(3) as pool:
            loads = [
                pool.submit(cluster.load_on, pod, MODEL, "--ttft-ms", "1", "--itl-ms", "1")
                for pod in cluster.names
            ]
            for load in loads:
                load.result()
        yield cluster
    finally:
        cluster.close()
        assert cluster.orphans() == []


def test_a_tenant_put_through_a_follower_gets_its_limit_once(
    pods: KubePods, kube: KubeApiServer
) -> None:
    leader, _ = pods.wait_one_leader(30)
    follower = next(p for p in pods.names if p != leader)
    urls = {name: pod.url for name, pod in pods.pods.items()}
    body = {"api_keys": ["k-kube"], "limits": {"requests_per_minute": RPM}}
    put_tenant(urls[follower], "team-kube", body)
    wait_tenant_everywhere(urls.values(), "team-kube")
    with kube.client() as api:
        resp = api.get(f"/api/v1/namespaces/{pods.namespace}/configmaps/sardeenz-control-tenants")
    assert resp.status_code == 200, resp.text
    stored = json.loads(resp.json()["data"]["body"])
    assert stored["team-kube"]["limits"]["requests_per_minute"] == RPM

    results = paced_window(urls, "k-kube", chat_body(MODEL), WINDOW, PACE)
    assert_one_limit(results, RPM, WINDOW, TOLERANCE)
