"""Kubernetes mode: the control state lives in the API server's ConfigMaps.

Three real pods against a real kube-apiserver (testkit/kube_pods.py plays the kubelet).
A preset written through a follower is answered by the Lease holder (307), stored in the
``sardeenz-control-presets`` ConfigMap and held by every pod; catalog entries PUT through
two pods at once all land; the Lease holder is SIGKILLed right after acknowledging a
preset and a catalog write, and the pod that takes the Lease (once it expired) has both
and starts the entry on demand, then again in the middle of a move, which the next
leader resumes or rolls back from the ``sardeenz-control-moves`` ConfigMap while 50
streaming clients see no failed request; a ConfigMap edited into bad JSON is a warning on every
pod and a clear 409 for writes, never a crash, and deleting it brings the last good copy
back.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from testkit.cluster import agreed_leader
from testkit.kube import KubeApiServer
from testkit.kube_pods import KubePods
from testkit.servers import HTTP
from testkit.streams import Load, run_clients

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
    resp = HTTP.get(f"{pods.pods[pod].url}/api/cluster/control", timeout=5)
    assert resp.status_code == 200, resp.text
    assert resp.json()["store"] == "kubernetes"
    return next((d["body"] for d in resp.json()["documents"] if d["key"] == key), None)


def configmap(pods: KubePods, key: str) -> dict[str, Any] | None:
    """The control document's ConfigMap as the API server holds it (read as admin)."""
    with pods.kube.client() as admin:
        resp = admin.get(f"/api/v1/namespaces/{pods.namespace}/configmaps/sardeenz-control-{key}")
    if resp.status_code == 404:
        return None
    assert resp.status_code == 200, resp.text
    obj: dict[str, Any] = resp.json()
    return obj


def stored(pods: KubePods, key: str) -> Any:
    obj = configmap(pods, key)
    return None if obj is None else json.loads(obj["data"]["body"])


def on_every_pod(pods: KubePods, key: str, holds: Any, what: str) -> None:
    deadline = time.monotonic() + 15
    while not all(holds(copy_on(pods, n, key)) for n in pods.alive()):
        assert time.monotonic() < deadline, (what, {n: copy_on(pods, n, key) for n in pods.alive()})
        time.sleep(0.1)


def test_a_preset_through_a_follower_is_on_every_pod(pods: KubePods) -> None:
    leader = leader_of(pods)
    follower = next(p for p in pods.names if p != leader)
    preset = {"models": [{"modelPath": "/models/k", "servedModelName": "k", "engine": "sim"}]}
    url = f"{pods.pods[follower].url}/api/cluster/presets/kp"
    direct = HTTP.put(url, json=preset, timeout=10)
    assert direct.status_code == 307, direct.text
    resp = HTTP.put(url, json=preset, follow_redirects=True, timeout=10)
    assert resp.status_code == 200, resp.text
    # Acknowledged means in the API server: the ConfigMap holds it already.
    assert "kp" in [p["name"] for p in stored(pods, "presets")]
    on_every_pod(
        pods, "presets", lambda b: "kp" in [p["name"] for p in b or []], "the preset everywhere"
    )
    for name in pods.names:  # and each pod's preset list (a follower's GET: its own copy)
        got = HTTP.get(
            f"{pods.pods[name].url}/api/cluster/presets/kp", follow_redirects=True, timeout=10
        )
        assert got.status_code == 200, (name, got.text)


def test_catalog_writes_through_two_pods_at_once_all_land(pods: KubePods) -> None:
    leader = leader_of(pods)
    b, c = (p for p in pods.names if p != leader)
    names = [f"cc-{p}{i}" for i in range(6) for p in ("b", "c")]

    def put(name: str) -> int:
        entry = {"modelPath": f"/models/{name}", "engine": "sim"}
        via = pods.pods[b if "-b" in name else c].url
        resp = HTTP.put(
            f"{via}/api/v1/catalog/{name}", json=entry, follow_redirects=True, timeout=30
        )
        assert resp.status_code in (200, 409), resp.text
        if resp.status_code == 409:  # lost every retry: a clear conflict, not a lost write
            assert resp.json()["code"] == "control_write_conflict", resp.text
        return resp.status_code

    with ThreadPoolExecutor(len(names)) as pool:
        codes = dict(zip(names, pool.map(put, names), strict=True))
    acked = {n for n, code in codes.items() if code == 200}
    assert acked <= set(stored(pods, "catalog"))  # no acknowledged write lost
    print(f"\n{len(acked)} of {len(names)} concurrent catalog PUTs acknowledged, all stored")
    on_every_pod(pods, "catalog", lambda body: acked <= set(body or {}), "every entry")


def test_a_corrupt_configmap_is_reported_not_a_crash(pods: KubePods) -> None:
    leader = leader_of(pods)
    # A presets document of its own to corrupt (whatever ran before it in the module).
    preset = {"models": [{"modelPath": "/models/c", "servedModelName": "c", "engine": "sim"}]}
    made = HTTP.put(f"{pods.pods[leader].url}/api/cluster/presets/kc", json=preset, timeout=10)
    assert made.status_code == 200, made.text
    on_every_pod(
        pods, "presets", lambda b: "kc" in [p["name"] for p in b or []], "the preset everywhere"
    )
    before = stored(pods, "presets")
    obj = configmap(pods, "presets")
    assert obj is not None
    obj["data"]["body"] = '[{"name": "kp", '  # a hand edit cut short
    with pods.kube.client() as admin:
        resp = admin.put(
            f"/api/v1/namespaces/{pods.namespace}/configmaps/sardeenz-control-presets", json=obj
        )
    assert resp.status_code == 200, resp.text

    def warned(statuses: dict[str, dict[str, Any]]) -> bool:
        return len(statuses) == len(pods.alive()) and all(
            any("sardeenz-control-presets" in w and "not JSON" in w for w in s["warnings"])
            for s in statuses.values()
        )

    pods.wait(warned, 15, "every pod reports the corrupt ConfigMap")
    for name in pods.alive():  # the last good copy is kept, not the bad one
        assert copy_on(pods, name, "presets") == before, name
    other = {"models": [{"modelPath": "/models/z", "servedModelName": "z", "engine": "sim"}]}
    refused = HTTP.put(f"{pods.pods[leader].url}/api/cluster/presets/kz", json=other, timeout=10)
    assert refused.status_code == 409, refused.text
    assert refused.json()["code"] == "control_document_corrupt"
    # The operator deletes it: the leader writes its last good copy again.
    with pods.kube.client() as admin:
        gone = admin.delete(
            f"/api/v1/namespaces/{pods.namespace}/configmaps/sardeenz-control-presets"
        )
    assert gone.status_code == 200, gone.text
    pods.wait(
        lambda st: not any("sardeenz-control" in w for s in st.values() for w in s["warnings"]),
        15,
        "the warning gone",
    )
    deadline = time.monotonic() + 15
    while stored(pods, "presets") is None:
        assert time.monotonic() < deadline, "the leader did not write the presets again"
        time.sleep(0.1)
    assert [p["name"] for p in stored(pods, "presets")] == [p["name"] for p in before]
    for name, pod in pods.pods.items():
        assert pod.proc is not None
        assert pod.proc.poll() is None, name
        assert "Traceback" not in pod.log(), name


def test_a_catalog_entry_acknowledged_just_before_the_leader_dies_is_kept(
    pods: KubePods,
) -> None:
    leader = leader_of(pods)
    preset = {"models": [{"modelPath": "/models/kk", "servedModelName": "kk", "engine": "sim"}]}
    resp = HTTP.put(f"{pods.pods[leader].url}/api/cluster/presets/kk", json=preset, timeout=10)
    assert resp.status_code == 200, resp.text
    entry = {"modelPath": "/models/kc", "engine": "sim", "extraArgs": ["--memory-gib", "1"]}
    resp = HTTP.put(f"{pods.pods[leader].url}/api/v1/catalog/kc", json=entry, timeout=10)
    assert resp.status_code == 200, resp.text
    pods.pods[leader].stop(signal.SIGKILL)  # the Lease must expire before another holds it
    new = leader_of(pods, other_than=leader)
    got = HTTP.get(f"{pods.pods[new].url}/api/v1/catalog/kc", timeout=10)
    assert got.status_code == 200, got.text
    got = HTTP.get(f"{pods.pods[new].url}/api/cluster/presets/kk", timeout=10)
    assert got.status_code == 200, got.text
    # The new leader wrote each document again under its own term (fencing the old one)
    # once it is ready; the reads above may be answered before (they are its copies).
    deadline = time.monotonic() + 30
    while not HTTP.get(f"{pods.pods[new].url}/api/cluster/control", timeout=5).json()["ready"]:
        assert time.monotonic() < deadline, f"{new} never read the control state in its term"
        time.sleep(0.1)
    new_term = pods.status(new)["term"]  # type: ignore[index]
    for key in ("presets", "catalog"):
        obj = configmap(pods, key)
        assert obj is not None
        assert int(obj["data"]["term"]) == new_term, (key, obj["data"]["term"], new_term)
    for pod in pods.alive():
        body = {"model": "kc", "prompt": "hi", "max_tokens": 2}
        answer = HTTP.post(f"{pods.pods[pod].url}/v1/completions", json=body, timeout=60)
        assert answer.status_code == 200, (pod, answer.text)
    # The killed pod comes back (same data dir) and is brought up to date.
    pods.pods[leader].start(timeout=60)
    deadline = time.monotonic() + 20
    while "kc" not in (copy_on(pods, leader, "catalog") or {}):
        assert time.monotonic() < deadline, copy_on(pods, leader, "catalog")
        time.sleep(0.1)


def test_a_move_in_flight_when_the_leader_dies_is_finished_by_the_next(
    pods: KubePods,
) -> None:
    leader = leader_of(pods)
    source_pod, target_pod = sorted(p for p in pods.names if p != leader)
    # The engine takes 3 s to load: the move is still starting its target when the
    # leader dies. Streams of ~1.6 s (40 tokens at 40 ms).
    src = pods.load_on(source_pod, "mv", "--itl-ms", "40", "--load-seconds", "3")
    entry = pods.pods[target_pod].url
    deadline = time.monotonic() + 15
    while "mv" not in [m["id"] for m in HTTP.get(f"{entry}/v1/models").json()["data"]]:
        assert time.monotonic() < deadline, "mv not routed at the target pod"
        time.sleep(0.05)
    load = Load()

    def move_on(url: str, move_id: str) -> dict[str, Any] | None:
        """The move as the leader holds it (None: not ready yet, or no leader)."""
        try:
            resp = HTTP.get(f"{url}/api/cluster/moves/{move_id}", follow_redirects=True, timeout=5)
        except httpx.HTTPError:
            return None
        if resp.status_code in (503, 307):
            return None
        assert resp.status_code == 200, resp.text
        move: dict[str, Any] = resp.json()
        return move

    async def main() -> tuple[dict[str, Any], str]:
        stop = asyncio.Event()
        runner = asyncio.create_task(run_clients(entry, "mv", 50, stop, 40, load))
        try:
            await load.until_flowing(50, 30)
            url = pods.pods[leader].url
            body = {"instanceId": src["id"], "targetPodId": target_pod, "drainSeconds": 5}
            resp = await asyncio.to_thread(
                HTTP.post, f"{url}/api/cluster/moves", json=body, timeout=10
            )
            assert resp.status_code == 202, resp.text
            move_id = str(resp.json()["id"])
            t0 = time.monotonic()
            while ((await asyncio.to_thread(move_on, url, move_id)) or {}).get(
                "targetInstanceId"
            ) is None:
                assert time.monotonic() - t0 < 15, "the move never started its target"
                await asyncio.sleep(0.02)
            # The record the next leader reads is in the API server already.
            assert move_id in [m["id"] for m in stored(pods, "moves")]
            pods.pods[leader].stop(signal.SIGKILL)
            new = await asyncio.to_thread(leader_of, pods, leader)
            new_url = pods.pods[new].url
            while True:
                move = await asyncio.to_thread(move_on, new_url, move_id)
                if move is not None and move["state"] in ("done", "failed"):
                    break
                assert time.monotonic() - t0 < 90, f"the move was not finished: {move}"
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # and some more streams after it ended
            return move, new
        finally:
            stop.set()
            await runner

    move, new = asyncio.run(main())
    steps = [(s["name"], s["detail"]) for s in move["steps"]]
    print(f"\nmove {move['state']} ({move.get('code')}) by {new}: {steps}")
    print(f"{len(load.streams)} streams, {len(load.failed)} failed")
    assert load.failed == [], [s.error for s in load.failed[:5]]
    assert len(load.ok) >= 50
    assert "taken-over" in [s["name"] for s in move["steps"]]
    mv = [
        (p, i["id"])
        for p in pods.alive()
        for i in pods.instances(p)
        if i["servedModelName"] == "mv"
    ]
    if move["state"] == "failed":  # rolled back: the source alone serves
        assert move["code"] == "leader_changed", move
        assert mv == [(source_pod, src["id"])]
    else:  # resumed: the target alone serves
        assert mv == [(target_pod, move["targetInstanceId"])]
    recorded = {m["id"]: m["state"] for m in stored(pods, "moves")}
    assert recorded[move["id"]] == move["state"]  # the outcome is in the ConfigMap too
