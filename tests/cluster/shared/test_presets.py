"""Presets on a 3-pod cluster: apply, reconcile after a pod dies and returns, refusals.

On the folder's shared cluster: every pod has two simulated NVIDIA L4s of 24 GiB; the
strategy is balanced (the default). A GPU's memory available to a new engine is its
free memory minus the 2 GB (1.86 GiB) reserve, so an empty L4 offers 22.14 GiB. The
preset's six models, in order, m1-m4 of 14 GiB and m5, m6 of 9 GiB, land by hand
calculation (balanced: the GPUs that keep the most free, then the pod that
keeps the most in total, then the lower pod id and GPU index):

    m1 -> pod-a GPU 0   m2 -> pod-b GPU 0   m3 -> pod-c GPU 0   (every pod alike)
    m4 -> pod-a GPU 1   (8.14 GiB left on each GPU 0: only the GPU 1s fit 14 GiB)
    m5 -> pod-b GPU 1   m6 -> pod-c GPU 1   (13.14 GiB beats pod-b GPU 1's 4.14)

pod-c is then killed (SIGKILL: its engines live on, as after a node's
controller crash). The leader (pod-a, lowest id) re-places what fits: m6
(9 GiB) on pod-b GPU 1, the only GPU with 13.14 GiB; m3 (14 GiB) fits nowhere
and is reported with a reason per pod. pod-c comes back and re-adopts its
engines: m6 now runs twice, and the newer replica (pod-b's) is the surplus
that goes, so the cluster ends as it started, with no duplicate.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.cluster import Cluster
from testkit.servers import HTTP

pytestmark = pytest.mark.slow

SIZES = {"m1": 14, "m2": 14, "m3": 14, "m4": 14, "m5": 9, "m6": 9}


@pytest.fixture(scope="module")
def cluster(shared_cluster: Cluster) -> Iterator[Cluster]:
    """The folder's shared cluster (two L4s per pod, presets reconciled every second);
    the module's presets and their instances are removed after it."""
    shared_cluster.wait(
        lambda st: all(len(p["gpus"]) == 2 for s in st.values() for p in s["pods"]),
        20,
        "every pod's GPUs in every heartbeat",
    )
    try:
        yield shared_cluster
    finally:
        url = shared_cluster.leader_url()
        for preset in HTTP.get(f"{url}/api/cluster/presets", timeout=10).json():
            delete_preset(url, preset["name"])
        for pod in shared_cluster.names:
            for inst in shared_cluster.instances(pod):
                shared_cluster.unload(pod, inst["id"])


def delete_preset(url: str, name: str) -> None:
    """DELETE, retrying only 409 preset_apply_in_progress (a reconcile pass still holds the
    presets: the API says to try again when it ends), bounded."""
    deadline = time.monotonic() + 30
    gone = HTTP.delete(f"{url}/api/cluster/presets/{name}", timeout=30)
    while gone.status_code == 409 and time.monotonic() < deadline:
        assert gone.json()["code"] == "preset_apply_in_progress", gone.text
        time.sleep(0.2)
        gone = HTTP.delete(f"{url}/api/cluster/presets/{name}", timeout=30)
    assert gone.status_code == 200, gone.text


def sim(name: str, gib: float, replicas: int = 1, load_s: float = 0.2) -> dict[str, Any]:
    return {
        "modelPath": f"/models/{name}",
        "servedModelName": name,
        "engine": "sim",
        "extraArgs": ["--load-seconds", str(load_s), "--memory-gib", str(gib)],
        "replicas": replicas,
    }


def running(c: Cluster) -> dict[str, list[tuple[str, list[int]]]]:
    """served name -> [(pod, GPU ids)] of its serving instances, as every live pod says."""
    out: dict[str, list[tuple[str, list[int]]]] = {}
    for pod in c.alive():
        for i in c.instances(pod):
            if i["status"] in ("active", "sleeping", "starting"):
                out.setdefault(i["servedModelName"], []).append((pod, i["gpuIds"]))
    return {k: sorted(v) for k, v in sorted(out.items())}


def apply(url: str, name: str) -> list[tuple[str, dict[str, Any]]]:
    """POST apply and read its event stream to the end: [(event, data)]."""
    events: list[tuple[str, dict[str, Any]]] = []
    with HTTP.stream("POST", f"{url}/api/cluster/presets/{name}/apply", timeout=120) as resp:
        assert resp.status_code == 200, resp.read().decode()
        kind = ""
        for line in resp.iter_lines():
            if line.startswith("event:"):
                kind = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                events.append((kind, json.loads(line.split(":", 1)[1])))
    return events


def wait_for(c: Cluster, want: dict[str, list[tuple[str, list[int]]]], timeout: float) -> float:
    start = time.monotonic()
    seen: dict[str, list[tuple[str, list[int]]]] = {}
    while time.monotonic() - start < timeout:
        seen = running(c)
        if seen == want:
            return time.monotonic() - start
        time.sleep(0.25)
    raise AssertionError(f"not converged in {timeout}s:\n want {want}\n seen {seen}")


PLACED = {
    "m1": [("pod-a", [0])],
    "m2": [("pod-b", [0])],
    "m3": [("pod-c", [0])],
    "m4": [("pod-a", [1])],
    "m5": [("pod-b", [1])],
    "m6": [("pod-c", [1])],
}


def test_refusals_change_nothing(cluster: Cluster) -> None:
    url = cluster.leader_url()
    bad = HTTP.put(
        f"{url}/api/cluster/presets/x", json={"models": [{**sim("a", 1), "replicas": -1}]}
    )
    assert bad.status_code == 422, bad.text
    dup = HTTP.put(f"{url}/api/cluster/presets/x", json={"models": [sim("a", 1), sim("a", 2)]})
    assert dup.status_code == 422
    assert "appears twice" in dup.text
    assert HTTP.put(f"{url}/api/cluster/presets/bad%20name", json={"models": []}).status_code == 422
    missing = HTTP.get(f"{url}/api/cluster/presets/nope/plan")
    assert missing.status_code == 404
    assert missing.json()["code"] == "preset_not_found"

    huge = HTTP.put(f"{url}/api/cluster/presets/huge", json={"models": [sim("huge", 30)]})
    assert huge.status_code == 200, huge.text
    plan = HTTP.get(f"{url}/api/cluster/presets/huge/plan").json()
    [step] = plan["steps"]
    assert step["action"] == "unschedulable"
    assert set(step["reasons"]) == {"pod-a", "pod-b", "pod-c"}
    refused = HTTP.post(f"{url}/api/cluster/presets/huge/apply")
    assert refused.status_code == 409
    body = refused.json()
    assert body["code"] == "preset_unschedulable"
    assert set(body["steps"][0]["reasons"]) == {"pod-a", "pod-b", "pod-c"}
    assert running(cluster) == {}
    assert HTTP.get(f"{url}/api/cluster/presets/huge").json()["applied"] is False
    assert HTTP.delete(f"{url}/api/cluster/presets/huge").status_code == 200


def test_apply_places_by_strategy_then_reconciles_a_dead_and_returning_pod(
    cluster: Cluster,
) -> None:
    url = cluster.leader_url()
    assert url == cluster.pods["pod-a"].url
    models = [sim(n, g) for n, g in SIZES.items()]
    put = HTTP.put(f"{url}/api/cluster/presets/six", json={"models": models})
    assert put.status_code == 200, put.text
    plan = HTTP.get(f"{url}/api/cluster/presets/six/plan").json()
    assert [(s["model"], s["podId"], s["gpuIds"]) for s in plan["steps"]] == [
        (n, *PLACED[n][0]) for n in SIZES
    ]
    started = time.monotonic()
    events = apply(url, "six")
    kinds = [k for k, _ in events]
    assert kinds[0] == "plan"
    assert kinds[-1] == "done"
    assert events[-1][1] == {"state": "done", "failed": 0, "steps": 6}
    assert kinds.count("step") == 12  # running, then done, for each
    print(f"\napply of 6 models: {time.monotonic() - started:.1f} s")
    assert running(cluster) == PLACED
    # Every instance of the applied preset says so (the dashboard and CLI mark it).
    listed = HTTP.get(f"{url}/api/v1/models").json()
    assert {i["servedModelName"]: i["managedBy"] for i in listed} == {
        n: {"kind": "preset", "name": "six"} for n in SIZES
    }
    # Every pod holds the presets the leader sent (any of them could lead next).
    for pod in ("pod-b", "pod-c"):
        unsigned = HTTP.post(f"{cluster.pods[pod].url}/internal/control/read", json={})
        assert unsigned.status_code == 401
        copy = stored_presets(cluster, pod)["six"]
        assert copy["appliedAt"] is not None
        assert [m["servedModelName"] for m in copy["models"]] == list(SIZES)
    # Applying again does nothing: the plan is computed afresh.
    again = apply(url, "six")
    assert again[-1][1] == {"state": "done", "failed": 0, "steps": 0}

    pod_c = cluster.pods["pod-c"]
    pod_c.stop(signal.SIGKILL)
    killed = time.monotonic()
    after_death = {**PLACED, "m6": [("pod-b", [1])]}
    del after_death["m3"]
    took = wait_for(cluster, after_death, 30)
    print(f"pod-c killed: m6 re-placed on pod-b after {took:.1f} s; m3 fits nowhere")
    preset = HTTP.get(f"{url}/api/cluster/presets/six").json()
    [stuck] = preset["reconcile"]["unschedulable"]
    assert stuck["model"] == "m3"
    assert set(stuck["reasons"]) == {"pod-a", "pod-b", "pod-c"}
    assert "unavailable" in stuck["reasons"]["pod-c"]

    pod_c.start()
    took = wait_for(cluster, PLACED, 40)
    print(f"pod-c back after {time.monotonic() - killed:.1f} s: converged {took:.1f} s later")
    # Stays converged: no replica is added or removed on the next passes.
    time.sleep(2.5)
    assert running(cluster) == PLACED


def stored_presets(cluster: Cluster, pod: str) -> dict[str, Any]:
    """``pod``'s own copy of the presets: its copy of the control state (its presets API
    would redirect to the leader)."""
    resp = HTTP.get(f"{cluster.pods[pod].url}/api/cluster/control", timeout=5)
    assert resp.status_code == 200, resp.text
    [doc] = [d for d in resp.json()["documents"] if d["key"] == "presets"]
    return {p["name"]: p for p in doc["body"]}


def test_a_second_apply_while_one_runs_is_refused(cluster: Cluster) -> None:
    url = cluster.leader_url()
    slow = HTTP.put(f"{url}/api/cluster/presets/slow", json={"models": [sim("slow", 1, load_s=3)]})
    assert slow.status_code == 200
    result: list[list[tuple[str, dict[str, Any]]]] = []
    first = threading.Thread(target=lambda: result.append(apply(url, "slow")))
    first.start()
    try:
        deadline = time.monotonic() + 10
        view = HTTP.get(f"{url}/api/cluster/presets/slow").json()
        while time.monotonic() < deadline and not (
            view["applied"] and view["reconcile"]["lastRun"]["state"] == "running"
        ):
            time.sleep(0.05)
            view = HTTP.get(f"{url}/api/cluster/presets/slow").json()
        assert view["reconcile"]["lastRun"]["trigger"] == "apply"
        second = HTTP.post(f"{url}/api/cluster/presets/slow/apply")
        assert second.status_code == 409, second.text
        assert second.json()["code"] == "preset_apply_in_progress"
    finally:
        first.join(60)
    [events] = result
    # Switching presets: the six models of the previously applied preset are dropped.
    steps = [d for k, d in events if k == "step" and d["state"] == "done"]
    assert sorted(d["model"] for d in steps if d["action"] == "unload") == sorted(SIZES)
    assert [d["model"] for d in steps if d["action"] == "load"] == ["slow"]
    assert events[-1][1]["state"] == "done"
    assert set(running(cluster)) == {"slow"}
