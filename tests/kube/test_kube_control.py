"""Kubernetes mode: the control state written through any pod survives a leader kill.

Three real pods against a real kube-apiserver (tests/kube/pods.py plays the kubelet).
A preset written through a follower is answered by the Lease holder (307) and held by
every pod; the Lease holder is SIGKILLed right after acknowledging a catalog write, and
the pod that takes the Lease (once it expired) has the entry and starts it on demand.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.cluster import agreed_leader
from tests.kube.apiserver import KubeApiServer
from tests.kube.pods import KubePods

pytestmark = [pytest.mark.kube, pytest.mark.slow]


@pytest.fixture(scope="module")
def pods(kube: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubePods]:
    cluster = KubePods(
        kube,
        tmp_path_factory.mktemp("kubecontrol"),
        3,
        extra_env={"SARDEENZ_SIM_GPUS": "NVIDIA L4:24GiB", "CLUSTER_EXPECTED_PODS": "3"},
    )
    try:
        yield cluster.start()
    finally:
        cluster.close()
        assert cluster.orphans() == []


def leader_of(pods: KubePods, other_than: str | None = None) -> str:
    statuses = pods.wait(
        lambda st: agreed_leader(st) and next(iter(st.values()))["leader"] != other_than,
        30,
        f"one leader other than {other_than}",
    )
    return str(next(iter(statuses.values()))["leader"])


def copy_on(pods: KubePods, pod: str, key: str) -> Any:
    resp = httpx.get(f"{pods.pods[pod].url}/api/cluster/control", timeout=5)
    assert resp.status_code == 200, resp.text
    return next((d["body"] for d in resp.json()["documents"] if d["key"] == key), None)


def test_a_preset_through_a_follower_is_on_every_pod(pods: KubePods) -> None:
    leader = leader_of(pods)
    follower = next(p for p in pods.names if p != leader)
    preset = {"models": [{"modelPath": "/models/k", "servedModelName": "k", "engine": "sim"}]}
    url = f"{pods.pods[follower].url}/api/cluster/presets/kp"
    direct = httpx.put(url, json=preset, timeout=10)
    assert direct.status_code == 307, direct.text
    resp = httpx.put(url, json=preset, follow_redirects=True, timeout=10)
    assert resp.status_code == 200, resp.text
    deadline = time.monotonic() + 15
    while not all(
        "kp" in [p["name"] for p in copy_on(pods, n, "presets") or []] for n in pods.names
    ):
        assert time.monotonic() < deadline, {n: copy_on(pods, n, "presets") for n in pods.names}
        time.sleep(0.1)


def test_a_catalog_entry_acknowledged_just_before_the_leader_dies_is_kept(
    pods: KubePods,
) -> None:
    leader = leader_of(pods)
    entry = {"modelPath": "/models/kc", "engine": "sim", "extraArgs": ["--memory-gib", "1"]}
    resp = httpx.put(f"{pods.pods[leader].url}/api/v1/catalog/kc", json=entry, timeout=10)
    assert resp.status_code == 200, resp.text
    pods.pods[leader].stop(signal.SIGKILL)  # the Lease must expire before another holds it
    new = leader_of(pods, other_than=leader)
    got = httpx.get(f"{pods.pods[new].url}/api/v1/catalog/kc", timeout=10)
    assert got.status_code == 200, got.text
    for pod in pods.alive():
        body = {"model": "kc", "prompt": "hi", "max_tokens": 2}
        answer = httpx.post(f"{pods.pods[pod].url}/v1/completions", json=body, timeout=60)
        assert answer.status_code == 200, (pod, answer.text)
    # The killed pod comes back (same data dir) and is brought up to date.
    pods.pods[leader].start(timeout=60)
    deadline = time.monotonic() + 20
    while "kc" not in (copy_on(pods, leader, "catalog") or {}):
        assert time.monotonic() < deadline, copy_on(pods, leader, "catalog")
        time.sleep(0.1)
