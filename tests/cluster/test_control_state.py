"""The replicated control state on a 3-pod cluster: writes through any pod, on every pod.

One cluster for the module (pod-a leads). A preset and a catalog entry written
through a follower are answered by the leader (307) and held by every pod with
the same term and revision; the catalog entry starts on demand through any
pod. pod-c has its own config-file catalog: its file entries stay its own, the
cluster's entry of the same name wins over its file entry on pod-c too.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.cluster import Cluster
from testkit.servers import HTTP
from testkit.waiting import wait_until

pytestmark = pytest.mark.slow

FILE_CATALOG = {
    "filed": {"modelPath": "/models/filed", "engine": "sim", "extraArgs": ["--memory-gib", "1"]},
    "shadowed": {
        "modelPath": "/models/from-the-file",
        "engine": "sim",
        "extraArgs": ["--memory-gib", "1"],
    },
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("control"),
        3,
        pod_env={"pod-c": {"SARDEENZ_CATALOG": json.dumps(FILE_CATALOG)}},
        SARDEENZ_SIM_GPUS="NVIDIA L4:24GiB",
        SARDEENZ_ONDEMAND_MAX_WAIT_SECONDS="30",
    )
    try:
        c.start()
        assert c.wait_one_leader()[0] == "pod-a"
        yield c
    finally:
        c.close()
        assert c.orphans() == []


def copies(cluster: Cluster, key: str) -> dict[str, dict[str, Any] | None]:
    """Each live pod's own copy of ``key`` (``/api/cluster/control`` is never redirected)."""
    out: dict[str, dict[str, Any] | None] = {}
    for pod in cluster.alive():
        resp = HTTP.get(f"{cluster.pods[pod].url}/api/cluster/control", timeout=5)
        assert resp.status_code == 200, resp.text
        out[pod] = next((d for d in resp.json()["documents"] if d["key"] == key), None)
    return out


def wait_copies(
    cluster: Cluster, key: str, ok: Any, within: float = 15
) -> dict[str, dict[str, Any]]:
    """Until every live pod holds a copy of ``key`` that satisfies ``ok(body)``, the same
    copy (term and revision) everywhere."""
    deadline = time.monotonic() + within
    seen: dict[str, Any] = {}
    while time.monotonic() < deadline:
        seen = copies(cluster, key)
        docs = list(seen.values())
        versions = {(d["term"], d["revision"]) for d in docs if d is not None}
        if all(d is not None and ok(d["body"]) for d in docs) and len(versions) == 1:
            return {p: d for p, d in seen.items() if d is not None}
        time.sleep(0.1)
    raise AssertionError(f"not every pod holds the same {key} within {within}s: {seen}")


def sim(name: str) -> dict[str, Any]:
    return {
        "modelPath": f"/models/{name}",
        "servedModelName": name,
        "engine": "sim",
        "extraArgs": ["--memory-gib", "1"],
    }


def test_a_preset_written_through_a_follower_is_the_leaders_and_on_every_pod(
    cluster: Cluster,
) -> None:
    follower = cluster.pods["pod-b"].url
    direct = HTTP.put(f"{follower}/api/cluster/presets/p1", json={"models": [sim("x")]})
    assert direct.status_code == 307, direct.text
    assert direct.headers["location"].startswith(cluster.pods["pod-a"].url)
    resp = HTTP.put(
        f"{follower}/api/cluster/presets/p1",
        json={"models": [sim("x")]},
        follow_redirects=True,
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    # Acknowledged: a majority (2 of 3) already holds it; every pod soon does.
    held = [d for d in copies(cluster, "presets").values() if d and "p1" in _names(d["body"])]
    assert len(held) >= 2
    docs = wait_copies(cluster, "presets", lambda b: "p1" in _names(b))
    assert {d["term"] for d in docs.values()} == {cluster.status("pod-a")["term"]}  # type: ignore[index]
    listed = HTTP.get(f"{follower}/api/cluster/presets", follow_redirects=True).json()
    assert [p["name"] for p in listed] == ["p1"]
    gone = HTTP.delete(f"{follower}/api/cluster/presets/p1", follow_redirects=True, timeout=10)
    assert gone.status_code == 200, gone.text
    wait_copies(cluster, "presets", lambda b: "p1" not in _names(b))


def everything(cluster: Cluster) -> list[dict[str, Any]]:
    return [i for p in cluster.alive() for i in cluster.instances(p)]


def _names(body: Any) -> list[str]:
    return [p["name"] for p in body or []]


def test_a_catalog_entry_put_through_any_pod_starts_on_demand_through_every_pod(
    cluster: Cluster,
) -> None:
    entry = {"modelPath": "/models/everywhere", "engine": "sim", "extraArgs": ["--memory-gib", "1"]}
    resp = HTTP.put(
        f"{cluster.pods['pod-c'].url}/api/v1/catalog/everywhere",
        json=entry,
        follow_redirects=True,
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["source"] == "api"
    wait_copies(cluster, "catalog", lambda b: "everywhere" in (b or {}))
    for pod in cluster.names:  # every pod resolves it, so every pod starts it on demand
        body = {"model": "everywhere", "prompt": "hi", "max_tokens": 2}
        answer = HTTP.post(f"{cluster.pods[pod].url}/v1/completions", json=body, timeout=60)
        assert answer.status_code == 200, (pod, answer.text)
    # One instance: the pods that entered later asked the leader, which answered with
    # the one it had placed (before their heartbeats could tell them of it).
    started = [i for i in everything(cluster) if i["servedModelName"] == "everywhere"]
    assert len(started) == 1, started
    listed = HTTP.get(f"{cluster.pods['pod-b'].url}/api/v1/catalog", follow_redirects=True)
    assert "everywhere" in [m["name"] for m in listed.json()]


def test_a_pods_config_file_entries_stay_its_own_and_the_clusters_win_over_them(
    cluster: Cluster,
) -> None:
    def models(pod: str) -> set[str]:
        data = HTTP.get(f"{cluster.pods[pod].url}/v1/models", timeout=5).json()["data"]
        return {m["id"] for m in data}

    assert {"filed", "shadowed"} <= models("pod-c")
    assert not {"filed", "shadowed"} & models("pod-a")
    # The cluster's entry of a file entry's name: on every pod, and pod-c runs the
    # cluster's version of it, not its file's.
    override = {"modelPath": "/models/from-the-cluster", "engine": "sim"}
    resp = HTTP.put(
        f"{cluster.pods['pod-b'].url}/api/v1/catalog/shadowed",
        json=override,
        follow_redirects=True,
        timeout=10,
    )
    assert resp.status_code == 200, resp.text
    wait_copies(cluster, "catalog", lambda b: "shadowed" in (b or {}))
    assert "shadowed" in models("pod-a")
    body = {"model": "shadowed", "prompt": "hi", "max_tokens": 2}
    answer = HTTP.post(f"{cluster.pods['pod-c'].url}/v1/completions", json=body, timeout=60)
    assert answer.status_code == 200, answer.text
    [inst] = [i for i in everything(cluster) if i["servedModelName"] == "shadowed"]
    assert inst["modelPath"] == "/models/from-the-cluster"
    leader = cluster.pods["pod-a"].url
    pod = next(p for p in cluster.alive() if inst["id"] in {i["id"] for i in cluster.instances(p)})
    unload = HTTP.post(f"{leader}/api/v1/models/{inst['id']}/unload", timeout=30)
    assert unload.status_code == 200, unload.text
    cluster.wait_instance(pod, inst["id"], None)
    # Deleted from the cluster: pod-c's file entry applies again there, and only there.
    gone = HTTP.delete(f"{cluster.pods['pod-a'].url}/api/v1/catalog/shadowed", timeout=10)
    assert gone.status_code == 200, gone.text
    wait_copies(cluster, "catalog", lambda b: "shadowed" not in (b or {}))
    # pod-a's list is its routing table (pod-c's unload, heard by heartbeat) and its catalog
    # (the copy just checked): the two converge on their own paths, within a few beats.
    wait_until(lambda: "shadowed" not in models("pod-a"), "pod-a stops listing 'shadowed'", 10)
    assert "shadowed" in models("pod-c")


def test_the_control_state_survives_a_restart_of_every_pod_copy(cluster: Cluster) -> None:
    # pod-b restarts: it still holds the copies it acknowledged (SQLite, not memory).
    before = copies(cluster, "catalog")["pod-b"]
    assert before is not None
    pod_b = cluster.pods["pod-b"]
    pod_b.stop()
    pod_b.start()
    after = HTTP.get(f"{pod_b.url}/api/cluster/control", timeout=5).json()
    [doc] = [d for d in after["documents"] if d["key"] == "catalog"]
    assert (doc["term"], doc["revision"]) >= (before["term"], before["revision"])
    assert doc["body"] == before["body"] or doc["revision"] > before["revision"]


def test_without_a_majority_a_write_is_refused_with_no_quorum(cluster: Cluster) -> None:
    leader, _ = cluster.wait_one_leader()
    followers = [p for p in cluster.alive() if p != leader]
    for pod in followers:  # alive but silent: the leader still leads for a moment
        proc = cluster.pods[pod].proc
        assert proc is not None
        proc.send_signal(signal.SIGSTOP)
    try:
        resp = HTTP.put(
            f"{cluster.pods[leader].url}/api/cluster/presets/unacked",
            json={"models": [sim("y")]},
            timeout=30,
        )
    finally:
        for pod in followers:
            proc = cluster.pods[pod].proc
            assert proc is not None
            proc.send_signal(signal.SIGCONT)
    assert resp.status_code == 503, resp.text
    assert resp.json()["code"] == "no_quorum"
    assert "stored by 1 of the 2 pods" in resp.json()["detail"]
    # A majority again: the same write is acknowledged (through any pod).
    cluster.wait_one_leader(timeout=30)
    again = HTTP.put(
        f"{cluster.pods['pod-c'].url}/api/cluster/presets/unacked",
        json={"models": [sim("y")]},
        follow_redirects=True,
        timeout=30,
    )
    assert again.status_code == 200, again.text
    wait_copies(cluster, "presets", lambda b: "unacked" in _names(b))
