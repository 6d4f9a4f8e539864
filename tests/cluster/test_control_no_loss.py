"""No acknowledged write is lost across a leader change (3 static pods, SIGKILL).

The leader is killed right after it acknowledged a preset write, then (once the
killed pod is back) right after a catalog write, then (back again) in the
middle of a move. Each time the next leader holds what was acknowledged: a
write is acknowledged once a majority stored it, and a new leader adopts the
newest copy a majority holds before it acts. The move is rolled back or
resumed by the new leader while 50 streaming clients, entering through the
move's target pod, see no failed request.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from typing import Any

import aiohttp
import pytest

from testkit.cluster import Cluster, agreed_leader
from testkit.servers import HTTP
from testkit.streams import Load, run_clients
from testkit.waiting import within

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(
        tmp_path_factory.mktemp("no-loss"),
        3,
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


def kill_leader_and_wait_for_the_next(cluster: Cluster, killed: str) -> str:
    """SIGKILL ``killed`` (the leader); the leader the two others agree on."""
    cluster.pods[killed].stop(signal.SIGKILL)
    statuses = cluster.wait(
        lambda st: agreed_leader(st) and next(iter(st.values()))["leader"] != killed,
        30,
        f"a leader other than {killed}",
    )
    return str(next(iter(statuses.values()))["leader"])


def bring_back(cluster: Cluster, pod: str) -> str:
    """Restart ``pod``; the leader once all three are healthy and agree on one."""
    cluster.pods[pod].start()

    def settled(st: dict[str, dict[str, Any]]) -> bool:
        leaders = {s["leader"] for s in st.values()}
        healthy = all(p["state"] == "healthy" for s in st.values() for p in s["pods"])
        return len(st) == 3 and len(leaders) == 1 and None not in leaders and healthy

    statuses = cluster.wait(settled, 30, "three healthy pods agreeing on one leader")
    return str(statuses[pod]["leader"])


def test_a_preset_acknowledged_just_before_the_leader_dies_is_the_next_leaders(
    cluster: Cluster,
) -> None:
    leader = cluster.pods["pod-a"].url
    preset = {"models": [{"modelPath": "/models/kept", "servedModelName": "kept", "engine": "sim"}]}
    resp = HTTP.put(f"{leader}/api/cluster/presets/kept", json=preset, timeout=10)
    assert resp.status_code == 200, resp.text
    new = kill_leader_and_wait_for_the_next(cluster, "pod-a")  # at once: no grace
    got = HTTP.get(f"{cluster.pods[new].url}/api/cluster/presets/kept", timeout=10)
    assert got.status_code == 200, got.text
    assert got.json()["models"][0]["servedModelName"] == "kept"
    back = bring_back(cluster, "pod-a")
    # Whoever leads after the return (pod-a, the lowest id, stands again) has it too.
    again = HTTP.get(f"{cluster.pods[back].url}/api/cluster/presets", timeout=10)
    assert [p["name"] for p in again.json()] == ["kept"]


def test_a_catalog_entry_acknowledged_just_before_the_leader_dies_is_the_next_leaders(
    cluster: Cluster,
) -> None:
    leader, _ = cluster.wait_one_leader()
    entry = {"modelPath": "/models/kept-entry", "engine": "sim", "extraArgs": ["--memory-gib", "1"]}
    url = cluster.pods[leader].url
    resp = HTTP.put(f"{url}/api/v1/catalog/kept-entry", json=entry, timeout=10)
    assert resp.status_code == 200, resp.text
    new = kill_leader_and_wait_for_the_next(cluster, leader)
    got = HTTP.get(f"{cluster.pods[new].url}/api/v1/catalog/kept-entry", timeout=10)
    assert got.status_code == 200, got.text
    for pod in cluster.alive():  # and it starts on demand through every survivor
        body = {"model": "kept-entry", "prompt": "hi", "max_tokens": 2}
        answer = HTTP.post(f"{cluster.pods[pod].url}/v1/completions", json=body, timeout=60)
        assert answer.status_code == 200, (pod, answer.text)
    bring_back(cluster, leader)


async def _move_state(url: str, move_id: str) -> dict[str, Any]:
    """The move as ``url`` (the leader) holds it; a leader that has not adopted the
    record yet says so (503 ``control_state_not_ready``): state "unknown" then."""
    async with (
        aiohttp.ClientSession() as s,
        s.get(f"{url}/api/cluster/moves/{move_id}", allow_redirects=True) as resp,
    ):
        if resp.status == 503:
            assert (await resp.json())["code"] == "control_state_not_ready"
            return {"state": "unknown", "targetInstanceId": None}
        assert resp.status == 200, await resp.text()
        move: dict[str, Any] = await resp.json()
        return move


def test_a_move_in_flight_when_the_leader_dies_is_finished_by_the_next_with_no_failed_request(
    cluster: Cluster,
) -> None:
    leader, _ = cluster.wait_one_leader()
    source_pod, target_pod = sorted(p for p in cluster.names if p != leader)
    # The engine takes 3 s to load: the move is still starting its target when the
    # leader dies. Streams of ~1.6 s (40 tokens at 40 ms).
    src = cluster.load_on(source_pod, "mv", "--itl-ms", "40", "--load-seconds", "3")
    entry = cluster.pods[target_pod].url
    deadline = time.monotonic() + 15
    while "mv" not in [m["id"] for m in HTTP.get(f"{entry}/v1/models").json()["data"]]:
        assert time.monotonic() < deadline, "mv not routed at the target pod"
        time.sleep(0.05)
    load = Load()

    async def main() -> tuple[dict[str, Any], str]:
        stop = asyncio.Event()
        runner = asyncio.create_task(run_clients(entry, "mv", 50, stop, 40, load))
        try:
            await load.until_flowing(50, 30)
            url = cluster.pods[leader].url
            body = {"instanceId": src["id"], "targetPodId": target_pod, "drainSeconds": 5}
            resp = await asyncio.to_thread(
                HTTP.post, f"{url}/api/cluster/moves", json=body, timeout=10
            )
            assert resp.status_code == 202, resp.text
            move_id = resp.json()["id"]
            t0 = time.monotonic()
            while (await _move_state(url, move_id))["targetInstanceId"] is None:
                assert time.monotonic() - t0 < 15, "the move never started its target"
                await asyncio.sleep(0.02)
            new = await asyncio.to_thread(kill_leader_and_wait_for_the_next, cluster, leader)
            new_url = cluster.pods[new].url
            while (move := await _move_state(new_url, move_id))["state"] not in ("done", "failed"):
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
        for p in cluster.alive()
        for i in cluster.instances(p)
        if i["servedModelName"] == "mv"
    ]
    if move["state"] == "failed":  # rolled back: the source alone serves
        assert move["code"] == "leader_changed", move
        assert mv == [(source_pod, src["id"])]
    else:  # resumed: the target alone serves
        assert mv == [(target_pod, move["targetInstanceId"])]


def test_a_new_leader_that_missed_a_write_adopts_it_from_the_majority(cluster: Cluster) -> None:
    for pod in cluster.names:  # the move test left its leader dead
        if pod not in cluster.alive():
            bring_back(cluster, pod)
    leader, _ = cluster.wait_one_leader()
    late = min(p for p in cluster.names if p != leader)
    late_proc = cluster.pods[late].proc
    assert late_proc is not None
    late_proc.send_signal(signal.SIGSTOP)  # it misses the write...
    try:
        preset = {"models": [{"modelPath": "/models/m", "servedModelName": "m", "engine": "sim"}]}
        url = f"{cluster.pods[leader].url}/api/cluster/presets/missed"
        resp = HTTP.put(url, json=preset, timeout=10)
        assert resp.status_code == 200, resp.text  # ...stored by the leader and the third pod
        cluster.pods[leader].stop(signal.SIGKILL)
    finally:
        late_proc.send_signal(signal.SIGCONT)
    # `late` (the lowest id left) most likely leads next, without the write: it must read
    # it from the third pod before it acts.
    new = kill_leader_and_wait_for_the_next(cluster, leader)
    got = HTTP.get(f"{cluster.pods[new].url}/api/cluster/presets/missed", timeout=10)
    assert got.status_code == 200, (new, got.text)
    print(f"\nnew leader {new} ({'missed the write' if new == late else 'held it'})")
    control = HTTP.get(f"{cluster.pods[late].url}/api/cluster/control", timeout=5).json()
    [doc] = [d for d in control["documents"] if d["key"] == "presets"]
    assert "missed" in [p["name"] for p in doc["body"]]
    bring_back(cluster, leader)


async def _recorded(s: aiohttp.ClientSession, url: str, move_id: str) -> str | None:
    """The move's state in the replicated record as the pod at ``url`` stores it."""
    async with s.get(f"{url}/api/cluster/control") as resp:
        assert resp.status == 200, await resp.text()
        docs = (await resp.json())["documents"]
    moves = next((d["body"] for d in docs if d["key"] == "moves"), None) or []
    return next((m["state"] for m in moves if m["id"] == move_id), None)


def _story(move: dict[str, Any]) -> str:
    steps = [(s["name"], s["detail"]) for s in move.get("steps", [])]
    return f"{move['state']} {move.get('code')}: {move.get('reason')}; {steps}"


def next_leader_without(cluster: Cluster, paused: str) -> str:
    """The leader the pods other than ``paused`` (SIGSTOPped: it answers nothing) agree on."""
    others = [p for p in cluster.names if p != paused]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        leaders = {(cluster.status(p) or {}).get("leader") for p in others}
        if len(leaders) == 1 and (new := leaders.pop()) not in (None, paused):
            return str(new)
        time.sleep(0.1)
    raise AssertionError(f"no leader other than the paused {paused} within 30s")


def test_a_move_resumed_while_its_source_pod_is_paused_waits_for_it_and_unloads_the_source(
    cluster: Cluster,
) -> None:
    """The 60-minute soak's zombie: the leader, which was also the source's pod, drained
    the source (held: never advertised again) and was SIGSTOPped before the unload. The
    next leader took the move over in ``draining`` and failed it at once ("pod is
    unavailable"): the paused pod came back with the source held for good and routed
    by no pod. Now the next leader waits for the pod, then withdraws, drains, unloads."""
    for pod in cluster.names:  # an earlier test may have left a pod dead
        if pod not in cluster.alive():
            bring_back(cluster, pod)
    leader, _ = cluster.wait_one_leader()
    target_pod = min(p for p in cluster.names if p != leader)
    src = cluster.load_on(leader, "zb", "--itl-ms", "40")
    url = cluster.pods[leader].url
    proc = cluster.pods[leader].proc
    assert proc is not None

    async def main() -> tuple[dict[str, Any], str]:
        # One long stream on the source (~12 s) keeps the old leader's drain running.
        body = {"model": "zb", "prompt": "hi", "max_tokens": 300, "stream": True}
        timeout = aiohttp.ClientTimeout(total=120)
        async with aiohttp.ClientSession(timeout=timeout) as s:
            stream = await s.post(f"{url}/v1/completions", json=body)
            assert stream.status == 200, await stream.text()
            await stream.content.readline()  # flowing on the source
            move_body = {"instanceId": src["id"], "targetPodId": target_pod, "drainSeconds": 60}
            resp = await s.post(f"{url}/api/cluster/moves", json=move_body)
            assert resp.status == 202, await resp.text()
            move_id = (await resp.json())["id"]
            t0 = time.monotonic()
            # `draining` stored on every other pod (a leader's memory has it before the
            # record is acknowledged): whichever leads next finds the source held.
            while not all(
                [
                    await _recorded(s, cluster.pods[p].url, move_id) == "draining"
                    for p in cluster.names
                    if p != leader
                ]
            ):
                assert time.monotonic() - t0 < 30, "the move never reached draining"
                await asyncio.sleep(0.02)
            proc.send_signal(signal.SIGSTOP)  # held, not yet unloaded
            try:
                new = await asyncio.to_thread(next_leader_without, cluster, leader)
                new_url = cluster.pods[new].url
                while "source-waiting" not in [
                    s["name"] for s in (await _move_state(new_url, move_id)).get("steps", [])
                ]:
                    move = await _move_state(new_url, move_id)
                    # not given up at once (nor finished without its source pod)
                    assert move["state"] not in ("done", "failed"), _story(move)
                    assert time.monotonic() - t0 < 60, "the new leader never took the move over"
                    await asyncio.sleep(0.05)
            finally:
                proc.send_signal(signal.SIGCONT)
            while (move := await _move_state(new_url, move_id))["state"] not in ("done", "failed"):
                assert time.monotonic() - t0 < 90, f"the move was not finished: {move}"
                await asyncio.sleep(0.1)
            await within(stream.read(), 30, "the stream through the move ended (served or cut)")
            stream.release()
            return move, new

    move, new = asyncio.run(main())
    steps = [s["name"] for s in move["steps"]]
    print(f"\nmove {move['state']} ({move.get('code')}) by {new}: {steps}")
    assert move["state"] == "done", move
    assert steps.index("taken-over") < steps.index("source-waiting") < steps.index("source-gone")
    deadline = time.monotonic() + 15
    while src["id"] in [i["id"] for i in cluster.instances(leader)]:
        assert time.monotonic() < deadline, f"the held source {src['id']} is still on {leader}"
        time.sleep(0.1)
    for pod in cluster.names:
        models = HTTP.get(f"{cluster.pods[pod].url}/v1/models", timeout=10).json()["data"]
        assert "zb" in [m["id"] for m in models], f"{pod} does not route zb"
