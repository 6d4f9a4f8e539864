"""Every pod answers 503, not 404, for a name the applied preset declares and nothing runs.

The leader's preset writes reach the followers through the replicated control
state; each pod keeps the applied preset's names in memory for its proxy. A
declared model that runs nowhere (here: one whose GPU type no pod has, so the
reconcile loop cannot place it; in life, the moment between two replicas) is
503 ``model_not_ready`` on every pod, and a name nobody declares stays 404.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit.cluster import Cluster
from testkit.servers import HTTP

SMALL = "between-small"
GHOST = "between-ghost"


def _sim(name: str, **extra: Any) -> dict[str, Any]:
    return {
        "modelPath": f"/models/{name}",
        "servedModelName": name,
        "engine": "sim",
        "extraArgs": ["--load-seconds", "0.2", "--memory-gib", "1"],
        **extra,
    }


def _apply(url: str, name: str) -> str:
    """POST apply and read its event stream to the end: the outcome."""
    outcome = ""
    with HTTP.stream("POST", f"{url}/api/cluster/presets/{name}/apply", timeout=60) as resp:
        assert resp.status_code == 200, resp.read().decode()
        kind = ""
        for line in resp.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and kind == "done":
                outcome = json.loads(line.split(":", 1)[1])["state"]
    return outcome


def _chat(url: str, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    return HTTP.post(f"{url}/v1/chat/completions", json=body, timeout=30)


def _wait_routed(url: str, model: str, pod: str) -> None:
    deadline = time.monotonic() + 15
    while True:
        listed = HTTP.get(f"{url}/v1/models", timeout=10).json()["data"]
        if any(m["id"] == model and m.get("state", "active") == "active" for m in listed):
            return
        assert time.monotonic() < deadline, f"{pod} does not route {model} after 15 s: {listed}"
        time.sleep(0.1)


@pytest.fixture
def applied(shared_cluster: Cluster) -> Iterator[str]:
    """The leader's URL, with preset ``between`` applied; removed with its instances after."""
    url = shared_cluster.leader_url()
    try:
        yield url
    finally:
        # A reconcile pass may still hold the presets (409 preset_apply_in_progress, "try
        # again when it ends"): retry that answer only, for a bounded time.
        deadline = time.monotonic() + 30
        gone = HTTP.delete(f"{url}/api/cluster/presets/between", timeout=30)
        while gone.status_code == 409 and time.monotonic() < deadline:
            assert gone.json()["code"] == "preset_apply_in_progress", gone.text
            time.sleep(0.2)
            gone = HTTP.delete(f"{url}/api/cluster/presets/between", timeout=30)
        assert gone.status_code == 200, gone.text
        for pod in shared_cluster.names:
            for inst in shared_cluster.instances(pod):
                if inst["servedModelName"] in (SMALL, GHOST):
                    HTTP.post(f"{url}/api/v1/models/{inst['id']}/unload", timeout=30)
                    shared_cluster.wait_instance(pod, inst["id"], None)


def test_every_pod_answers_503_for_a_declared_model_that_runs_nowhere(
    shared_cluster: Cluster, applied: str
) -> None:
    url = applied
    put = HTTP.put(f"{url}/api/cluster/presets/between", json={"models": [_sim(SMALL)]})
    assert put.status_code == 200, put.text
    assert _apply(url, "between") == "done"
    # "done" is the leader's word: wait until every pod routes the replica too (each
    # hears of it from its pod's heartbeat), so what runs is served before and after.
    for pod in shared_cluster.names:
        _wait_routed(shared_cluster.pods[pod].url, SMALL, pod)
    # The applied preset now also declares a model no pod can run (no H100 anywhere).
    models = [_sim(SMALL), _sim(GHOST, gpuType="NVIDIA H100")]
    put = HTTP.put(f"{url}/api/cluster/presets/between", json={"models": models})
    assert put.status_code == 200, put.text

    for pod in shared_cluster.names:
        pod_url = shared_cluster.pods[pod].url
        deadline = time.monotonic() + 15
        while (resp := _chat(pod_url, GHOST)).status_code == 404:  # the copy is on its way
            assert time.monotonic() < deadline, f"{pod} still answers 404: {resp.text}"
            time.sleep(0.2)
        assert resp.status_code == 503, (pod, resp.text)
        assert resp.json()["error"]["code"] == "model_not_ready", (pod, resp.text)
        assert 1 <= int(resp.headers["retry-after"]) <= 30
        nobody = _chat(pod_url, "between-nobody")
        assert nobody.status_code == 404, (pod, nobody.text)
        assert nobody.json()["error"]["code"] == "model_not_found"
        served = _chat(pod_url, SMALL)
        assert served.status_code == 200, (pod, served.text)  # what runs is served as before
