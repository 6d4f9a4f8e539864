"""Kubernetes mode: the cluster-wide request log and usage, collected from every pod.

Three real `sardeenz serve` pods against a real kube-apiserver (tests/kube/pods.py plays
the kubelet). A model runs on pod-b; requests enter through every pod; each pod's
``/api/v1/requests`` and ``/api/v1/usage`` show each request once, with the pod that ran
it and the pod it entered, as in static mode (tests/cluster/shared/test_observability.py).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.servers import HTTP
from tests.kube.apiserver import KubeApiServer
from tests.kube.pods import KubePods

pytestmark = [pytest.mark.kube, pytest.mark.slow]

MODEL = "observed-kube"
SENT = {"pod-a": 2, "pod-b": 1, "pod-c": 3}


@pytest.fixture(scope="module")
def pods(kube: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubePods]:
    cluster = KubePods(kube, tmp_path_factory.mktemp("kubeobserve"), 3)
    try:
        yield cluster.start()
    finally:
        cluster.close()


def _entries(url: str) -> list[dict[str, Any]]:
    resp = HTTP.get(f"{url}/api/v1/requests", params={"model": MODEL}, timeout=5)
    assert resp.status_code == 200, resp.text
    data: list[dict[str, Any]] = resp.json()
    return data


def test_every_pod_sees_every_request_once(pods: KubePods) -> None:
    assert pods.load_on("pod-b", MODEL)["status"] == "active"
    for name, n in SENT.items():
        url = pods.pods[name].url
        deadline = time.monotonic() + 15
        while MODEL not in [m["id"] for m in HTTP.get(f"{url}/v1/models").json()["data"]]:
            assert time.monotonic() < deadline, f"{MODEL} not routable on {name}"
            time.sleep(0.1)
        for _ in range(n):
            resp = HTTP.post(
                f"{url}/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]},
                timeout=30,
            )
            assert resp.status_code == 200, resp.text
    total = sum(SENT.values())
    for name, pod in pods.pods.items():
        deadline = time.monotonic() + 30
        while len(entries := _entries(pod.url)) < total:
            assert time.monotonic() < deadline, f"{name} collected {len(entries)} of {total}"
            time.sleep(0.3)
        assert len(entries) == total
        assert {e["pod"] for e in entries} == {"pod-b"}
        assert Counter(e["entryPod"] for e in entries) == SENT
        usage = HTTP.get(f"{pod.url}/api/v1/usage", timeout=5).json()["byModel"]
        assert sum(r["requests"] for r in usage if r["model"] == MODEL) == total
