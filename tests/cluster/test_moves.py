"""Blue-green moves on a 3-pod static cluster (sim engines, two simulated GPUs per pod).

One cluster for the module (pod-a leads). A move under load (200 streaming
clients through pod-c, the model moved from pod-a to pod-b), a move whose
target dies while starting, a move between the GPUs of one (follower) pod,
and the refusals. Every test counts failed requests: there must be none.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest

from testkit.cluster import Cluster
from testkit.servers import HTTP
from testkit.streams import Load, run_clients

pytestmark = pytest.mark.slow

GPUS = "NVIDIA L4:24GiB,NVIDIA L4:24GiB"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("moves"), 3, SARDEENZ_SIM_GPUS=GPUS)
    try:
        c.start()
        assert c.wait_one_leader()[0] == "pod-a"
        yield c
    finally:
        c.close()


def _post_move(url: str, **body: Any) -> httpx.Response:
    return HTTP.post(f"{url}/api/cluster/moves", json=body, timeout=10)


async def _follow(url: str, move_id: str, within: float = 40) -> dict[str, Any]:
    """Poll the move until it is done or failed (async: the clients run meanwhile)."""
    deadline = time.monotonic() + within
    async with aiohttp.ClientSession() as s:
        while time.monotonic() < deadline:
            async with s.get(f"{url}/api/cluster/moves/{move_id}") as resp:
                assert resp.status == 200, await resp.text()
                move: dict[str, Any] = await resp.json()
            if move["state"] in ("done", "failed"):
                return move
            await asyncio.sleep(0.1)
    raise AssertionError(f"move {move_id} not finished in {within}s: {move}")


def _timeline(move: dict[str, Any]) -> str:
    steps = move["steps"]
    t0 = _ts(move["createdAt"])
    lines = [
        f"  +{_ts(s['at']) - t0:6.3f}s {s['name']}" + (f": {s['detail']}" if s["detail"] else "")
        for s in steps
    ]
    return "\n".join([f"move {move['id']} ({move['state']}, {move['durationSeconds']}s):", *lines])


def _ts(text: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _under_load(
    entry: str,
    model: str,
    clients: int,
    tokens: int,
    action: Any,
) -> tuple[Load, Any]:
    """Run ``clients`` streaming clients through ``entry`` while ``action()`` runs."""
    load = Load()

    async def main() -> Any:
        stop = asyncio.Event()
        runner = asyncio.create_task(run_clients(entry, model, clients, stop, tokens, load))
        try:
            await load.until_flowing(clients, 30)
            result = await action()
            await asyncio.sleep(0.5)  # and some more after the switch
        finally:
            stop.set()
            await runner
        return result

    return load, asyncio.run(main())


def test_move_under_load_fails_no_request(cluster: Cluster) -> None:
    leader = cluster.pods["pod-a"].url
    src = cluster.load_on("pod-a", "mv", "--itl-ms", "40", "--ttft-ms", "20")
    _wait_model(cluster.pods["pod-c"].url, "mv")

    async def move() -> dict[str, Any]:
        resp = await asyncio.to_thread(
            _post_move, leader, instanceId=src["id"], targetPodId="pod-b"
        )
        assert resp.status_code == 202, resp.text
        assert resp.json()["state"] in ("pending", "starting-target")
        return await _follow(leader, resp.json()["id"])

    # 100 tokens at 40 ms: streams of 4 s, longer than the switch takes to be seen by every
    # pod plus its grace even on a busy machine, so the drain always has streams to wait
    # for (with 1 s streams a slow heartbeat round let them all end before it began).
    load, moved = _under_load(cluster.pods["pod-c"].url, "mv", 200, 100, move)
    print(f"\n{_timeline(moved)}")
    took = sorted(s.chunks[-1] - s.started for s in load.ok)
    p50 = took[len(took) // 2]
    print(f"{len(load.streams)} streams, {len(load.failed)} failed, p50 duration {p50:.2f}s")
    assert moved["state"] == "done", moved
    assert load.failed == [], [s.error for s in load.failed[:5]]
    assert len(load.ok) >= 200
    names = [s["name"] for s in moved["steps"]]
    assert names == [
        "target-loading",
        "target-active",
        "target-routed",
        "source-withdrawn",
        "source-unrouted",
        "drain-end",
        "source-gone",
    ]
    # The source's pod had forwarded streams in flight when the drain began (the
    # switch does not wait for them), and all of them finished: none was cut.
    drain = next(s for s in moved["steps"] if s["name"] == "drain-end")["detail"]
    in_flight = int(drain.split()[0])
    assert in_flight > 0, drain
    assert re.search(r" 0 cut; drained in \d+\.\ds \(limit 5s\)$", drain), drain
    assert moved["sourcePodId"] == "pod-a"
    assert moved["targetPodId"] == "pod-b"
    assert cluster.wait_instance("pod-a", src["id"], None, 10) is None
    target = cluster.wait_instance("pod-b", moved["targetInstanceId"], "active", 10)
    assert target is not None
    assert target["servedModelName"] == "mv"
    assert target["extraArgs"][:2] == src["extraArgs"][:2]
    listed = HTTP.get(f"{leader}/api/cluster/moves", timeout=5).json()
    assert moved["id"] in [m["id"] for m in listed]


def test_target_that_dies_while_starting_leaves_the_source_serving(cluster: Cluster) -> None:
    leader = cluster.pods["pod-a"].url
    src = cluster.load_on("pod-b", "mvfail", "--load-seconds", "3", "--itl-ms", "40", timeout=30)
    _wait_model(cluster.pods["pod-a"].url, "mvfail")

    async def move() -> dict[str, Any]:
        resp = await asyncio.to_thread(
            _post_move, leader, instanceId=src["id"], targetPodId="pod-c"
        )
        assert resp.status_code == 202, resp.text
        move_id = resp.json()["id"]
        pid = await asyncio.to_thread(_starting_pid, cluster, "pod-c", "mvfail")
        os.kill(pid, signal.SIGKILL)  # the target's engine dies before it is active
        return await _follow(leader, move_id)

    load, moved = _under_load(cluster.pods["pod-a"].url, "mvfail", 50, 20, move)
    print(f"\n{_timeline(moved)}")
    assert moved["state"] == "failed", moved
    assert moved["code"] == "target_failed"
    assert "target failed to start" in moved["reason"]
    assert [s["name"] for s in moved["steps"]][-2:] == ["target-removed", "failed"]
    assert load.failed == [], [s.error for s in load.failed[:5]]
    assert len(load.ok) >= 50
    # The source still serves, on its pod; the target is gone.
    assert cluster.wait_instance("pod-b", src["id"], "active", 5) is not None
    assert cluster.wait_instance("pod-c", moved["targetInstanceId"], None, 10) is None


def test_move_between_gpus_of_a_follower_pod(cluster: Cluster) -> None:
    leader = cluster.pods["pod-a"].url
    src = cluster.load_on("pod-c", "mvgpu", "--itl-ms", "40")
    assert src["gpuIds"] in ([0], [1])
    other = 1 - src["gpuIds"][0]
    _wait_model(cluster.pods["pod-a"].url, "mvgpu")

    async def move() -> dict[str, Any]:
        resp = await asyncio.to_thread(
            _post_move, leader, instanceId=src["id"], targetPodId="pod-c", gpuIds=[other]
        )
        assert resp.status_code == 202, resp.text
        return await _follow(leader, resp.json()["id"])

    load, moved = _under_load(cluster.pods["pod-a"].url, "mvgpu", 30, 20, move)
    print(f"\n{_timeline(moved)}")
    assert moved["state"] == "done", moved
    assert load.failed == [], [s.error for s in load.failed[:5]]
    target = cluster.wait_instance("pod-c", moved["targetInstanceId"], "active", 5)
    assert target is not None
    assert target["gpuIds"] == [other]
    assert cluster.wait_instance("pod-c", src["id"], None, 10) is None


def test_refusals_have_a_code_and_change_nothing(cluster: Cluster) -> None:
    leader = cluster.pods["pod-a"].url
    src = cluster.load_on("pod-b", "mvbad", "--load-seconds", "2")
    before = {p: sorted(i["id"] for i in cluster.instances(p)) for p in cluster.names}
    moves_before = len(HTTP.get(f"{leader}/api/cluster/moves", timeout=5).json())

    def refused(status: int, code: str, **body: Any) -> None:
        resp = _post_move(leader, **body)
        assert resp.status_code == status, resp.text
        assert resp.json()["code"] == code, resp.text

    refused(404, "pod_not_found", instanceId=src["id"], targetPodId="pod-z")
    refused(404, "instance_not_found", instanceId="nosuchinstance", targetPodId="pod-c")
    refused(400, "move_to_itself", instanceId=src["id"], targetPodId="pod-b")
    refused(400, "move_to_itself", instanceId=src["id"], targetPodId="pod-b", gpuIds=src["gpuIds"])
    refused(400, "unknown_gpu", instanceId=src["id"], targetPodId="pod-c", gpuIds=[7])
    refused(422, "validation_error", instanceId=src["id"], targetPodId="pod-c", bogus=1)
    after = {p: sorted(i["id"] for i in cluster.instances(p)) for p in cluster.names}
    assert after == before
    assert len(HTTP.get(f"{leader}/api/cluster/moves", timeout=5).json()) == moves_before
    missing = HTTP.get(f"{leader}/api/cluster/moves/nosuchmove", timeout=5)
    assert missing.status_code == 404
    assert missing.json()["code"] == "move_not_found"

    # A follower sends move requests to the leader, which holds the moves.
    follower = HTTP.post(
        f"{cluster.pods['pod-c'].url}/api/cluster/moves",
        json={"instanceId": src["id"], "targetPodId": "pod-c"},
        timeout=5,
    )
    assert follower.status_code == 307
    assert follower.headers["location"] == f"{leader}/api/cluster/moves"

    # The same instance twice: the second is refused while the first runs
    # (its target takes 2 s to load).
    first = _post_move(leader, instanceId=src["id"], targetPodId="pod-c")
    assert first.status_code == 202, first.text
    refused(409, "instance_moving", instanceId=src["id"], targetPodId="pod-a")
    moved = asyncio.run(_follow(leader, first.json()["id"]))
    assert moved["state"] == "done", moved


def test_no_orphan_engines_after_a_clean_stop(cluster: Cluster) -> None:
    for pod in cluster.pods.values():
        pod.stop(signal.SIGTERM)
    deadline = time.monotonic() + 10
    while cluster.orphans() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.orphans() == [], "engines still running 10 s after every pod stopped"


def _wait_model(url: str, name: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        data = HTTP.get(f"{url}/v1/models", timeout=5).json()["data"]
        if name in [m["id"] for m in data]:
            return
        time.sleep(0.05)
    raise AssertionError(f"{name} not listed at {url}")


def _starting_pid(cluster: Cluster, pod: str, name: str, timeout: float = 10) -> int:
    """The engine pid of a ``starting`` instance of ``name`` on ``pod``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for inst in cluster.instances(pod):
            starting = inst["servedModelName"] == name and inst["status"] == "starting"
            if starting and inst.get("processId"):
                return int(inst["processId"])
        time.sleep(0.05)
    raise AssertionError(f"no starting {name} on {pod}")
