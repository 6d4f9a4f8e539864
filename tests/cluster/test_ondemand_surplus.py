"""After a partition heals, the leader reduces surplus on-demand copies to one; a
copy a dead leader withdrew is not left unroutable.

Three pods in network namespaces (testkit/netns.py). pod-c is cut off; a request
through pod-a starts the catalog model where the leader places it, a request
through pod-c (no leader on its side) starts a copy of its own. The operator also
loads the model's name by hand on a majority pod. Once pod-c rejoins, steady
traffic (streams, through every pod) keeps every copy busy, so no idle reaper
would ever put one away; the leader must drain and unload pod-c's copy (the
younger of the two on-demand copies), keep the operator's, and every request must
succeed throughout.

A leader retires a copy by withdrawing it from routing, then unloading it. On
three pods on loopback (testkit/cluster.py) where only pod-c can hold the model,
the test sends pod-c the withdrawal a retiring leader sends (signed as a pod,
with the leader's term) and kills the leader: the copy kept ran on the leader's
pod, so pod-c's is the model's only copy. The next leader must advertise it again
at once, not after the withdrawal's TTL. A withdrawn copy whose own pod restarts
is advertised again as well (withdrawals live in memory).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import orjson
import pytest

from sardeenz.cluster.transport import routes
from sardeenz.security.cluster_hmac import Signer
from testkit import netns
from testkit.cluster import (
    SECRET,
    TESTER,
    TIMING,
    Cluster,
    agreed_leader,
    assert_answers_through,
    poll,
)
from testkit.servers import HTTP

pytestmark = pytest.mark.slow
needs_netns = pytest.mark.skipif(not netns.available(), reason="needs root and iproute2 (ip netns)")

NAMES = ["pod-a", "pod-b", "pod-c"]
MODEL = "surplus-cat"
SIM = ["--load-seconds", "0.3", "--ttft-ms", "10", "--itl-ms", "20", "--memory-gib", "4"]
SETTLE = 2 * float(TIMING["SARDEENZ_CLUSTER_UNAVAILABLE_AFTER_SECONDS"])
REDUCED_WITHIN = SETTLE + 40.0  # the settle bound, route waits, the drain, the unload


class Pods(netns.Pods):
    def copies(self, leader: str) -> list[dict[str, Any]]:
        """Every live instance of the model, as the leader lists them."""
        resp = HTTP.get(f"{self.url(leader)}/api/v1/models", timeout=5)
        assert resp.status_code == 200, resp.text
        return [
            i
            for i in resp.json()
            if i["servedModelName"] == MODEL and i["status"] in ("starting", "active", "sleeping")
        ]


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pods]:
    root = tmp_path_factory.mktemp("ondemand-surplus")
    env = {"SARDEENZ_SIM_GPUS": "NVIDIA L4:24GiB", **TIMING}
    with netns.running_pods(root, NAMES, env) as running:
        yield Pods(running.fabric, running.servers)


def _complete(url: str) -> str:
    """One streamed completion through ``url``; its text (an error raises)."""
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=30, max_retries=0)
    with client.completions.create(model=MODEL, prompt="hi", max_tokens=12, stream=True) as s:
        chunks = [c for c in s]
    assert chunks, "a stream without a chunk"
    assert chunks[-1].choices[0].finish_reason is not None, "a stream without its end"
    return "".join(c.choices[0].text for c in chunks)


class Traffic:
    """Streams sent back to back through every pod until stopped; every outcome kept."""

    def __init__(self, pods: Pods) -> None:
        self.ok = 0
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._run, args=(pods.url(n),), daemon=True)
            for n in NAMES
            for _ in range(2)
        ]
        for t in self._threads:
            t.start()

    def _run(self, url: str) -> None:
        while not self._stop.is_set():
            try:
                _complete(url)
                self.ok += 1
            except (openai.OpenAIError, AssertionError) as exc:
                self.failed.append(f"{url}: {exc!r}")

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(40)
        assert not any(t.is_alive() for t in self._threads), "a request hung"


@needs_netns
def test_surplus_on_demand_copy_is_drained_after_the_heal(pods: Pods) -> None:
    leader = netns.until("one leader everywhere", 30, pods.leader)
    assert leader != "pod-c"  # the Bully election: pod-a
    entry = {"modelPath": MODEL, "engine": "sim", "extraArgs": SIM}
    resp = HTTP.put(f"{pods.url(leader)}/api/v1/catalog/{MODEL}", json=entry, timeout=30)
    assert resp.status_code == 200, resp.text

    with pods.cut("pod-c"):
        netns.until("pod-c sees no leader", 30, lambda: pods.leader(["pod-c"]) is None)
        leader = netns.until("the majority agrees on a leader", 30, lambda: pods.leader(NAMES[:2]))
        _complete(pods.url("pod-a"))  # placed by the leader
        [placed] = pods.copies(leader)
        assert placed["onDemand"] is True, placed
        other = next(n for n in NAMES[:2] if n != placed["podId"])
        resp = HTTP.post(
            f"{pods.url(leader)}/api/v1/models/load",
            json={**entry, "servedModelName": MODEL, "podId": other},
            timeout=30,
        )
        assert resp.status_code == 202, resp.text
        admin = resp.json()
        assert admin["onDemand"] is False, admin
        _complete(pods.url("pod-c"))  # no leader on its side: its own copy
    healed = time.monotonic()

    netns.until("the leader sees all three copies", 30, lambda: len(pods.copies(leader)) == 3)
    traffic = Traffic(pods)
    try:
        netns.until(
            "the surplus copy is unloaded",
            REDUCED_WITHIN,
            lambda: len(pods.copies(leader)) == 2 and traffic.ok > 0,
        )
        reduced_after = time.monotonic() - healed
        left = {i["id"]: i for i in pods.copies(leader)}
        assert set(left) == {placed["id"], admin["id"]}, left
        time.sleep(SETTLE / 2)  # traffic goes on against the copies kept
    finally:
        traffic.stop()
    print(f"\nreduced {reduced_after:.1f}s after the heal; {traffic.ok} streams completed")
    assert not traffic.failed, traffic.failed
    assert {i["id"] for i in pods.copies(leader)} == {placed["id"], admin["id"]}
    assert reduced_after >= SETTLE, "reduced before membership had settled"
    metrics = HTTP.get(f"{pods.url(leader)}/metrics", timeout=5).text
    counted = (
        f'sardeenz_ondemand_lifecycle_actions_total{{action="unload",model="{MODEL}",'
        f'reason="surplus"}} 1.0'
    )
    assert counted in metrics, [m for m in metrics.splitlines() if "lifecycle" in m]


# ------------------------------------- a copy withdrawn by a leader that then died

LONE = "lone-cat"
LONE_ENTRY = {
    "modelPath": f"/models/{LONE}",
    "engine": "sim",
    "extraArgs": ["--memory-gib", "30", "--load-seconds", "0.3"],
}
WITHDRAW_TTL = 120.0
"""Longer than a retiring leader's (``route_timeout x 2 + 60``, 80 s with TIMING)."""
BACK_WITHIN = 40.0
"""Detection, election and a few leader rounds: far less than WITHDRAW_TTL, so a copy
routed again within it was advertised again, not left to expire."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """pod-a leads; only pod-c's GPU holds the catalog model: its copy runs there."""
    c = Cluster(
        tmp_path_factory.mktemp("ondemand-withdrawn"),
        3,
        pod_env={
            "pod-a": {"SARDEENZ_SIM_GPUS": "NVIDIA L4:16GiB"},
            "pod-b": {"SARDEENZ_SIM_GPUS": "NVIDIA L4:16GiB"},
            "pod-c": {"SARDEENZ_SIM_GPUS": "NVIDIA L40S:40GiB"},
        },
        SARDEENZ_CATALOG=json.dumps({LONE: LONE_ENTRY}),
        SARDEENZ_ONDEMAND_MAX_WAIT_SECONDS="30",
    )
    try:
        c.start()
        c.wait(
            lambda st: all(len(p["gpus"]) == 1 for s in st.values() for p in s["pods"]),
            20,
            "every pod's GPUs in every heartbeat (the leader places by them)",
        )
        c.wait_whole(30, "started")
        yield c
    finally:
        c.close()
        assert c.orphans() == []


_signer = Signer(SECRET.encode(), source=TESTER)


def _routes(cluster: Cluster, pod: str) -> set[str]:
    """``pod/instance`` of every endpoint of ``LONE`` in ``pod``'s routing table."""
    path = routes.ROUTES.path()
    headers = _signer.headers("GET", path, b"", target=pod)
    resp = HTTP.get(f"{cluster.pods[pod].url}{path}", headers=headers, timeout=5)
    assert resp.status_code == 200, resp.text
    return set(resp.json()["routes"].get(LONE, []))


def _withdraw(cluster: Cluster, pod: str, iid: str, term: int) -> None:
    """The order a leader of ``term`` retiring ``iid`` sends first (cluster/handover.py)."""
    path = routes.WITHDRAW.path(instance_id=iid)
    body = orjson.dumps({"term": term, "seconds": WITHDRAW_TTL})
    headers = {
        **_signer.headers("POST", path, body, target=pod),
        "Content-Type": "application/json",
    }
    resp = HTTP.post(f"{cluster.pods[pod].url}{path}", content=body, headers=headers, timeout=5)
    assert resp.status_code == 200, resp.text


def _lone_copy(cluster: Cluster) -> str:
    """Start the model on demand, once (a request through the leader: a follower would
    ask it, within the cluster request timeout, 0.5 s in TIMING, which a loaded machine
    can miss); pod-c's copy's id, once pod-b routes it."""
    leader, _ = cluster.wait_one_leader()
    resp = HTTP.post(
        f"{cluster.pods[leader].url}/v1/completions",
        json={"model": LONE, "prompt": "hi", "max_tokens": 3},
        timeout=60,
    )
    assert resp.status_code == 200, resp.text
    [copy] = [i for i in cluster.instances("pod-c") if i["servedModelName"] == LONE]
    assert copy["onDemand"] is True, copy
    key = f"pod-c/{copy['id']}"
    poll(f"pod-b routes {key}", lambda: _routes(cluster, "pod-b"), lambda r: key in r, 15)
    return str(copy["id"])


def _drain(cluster: Cluster, pod: str, iid: str, term: int) -> None:
    """The order a leader of ``term`` sends once no other pod routes ``iid``: hold and
    drain it for its unload (cluster/handover.py)."""
    path = routes.DRAIN.path(instance_id=iid)
    body = orjson.dumps({"term": term, "seconds": 1})
    headers = _signer.headers("POST", path, body, target=pod)
    headers["Content-Type"] = "application/json"
    resp = HTTP.post(f"{cluster.pods[pod].url}{path}", content=body, headers=headers, timeout=15)
    assert resp.status_code == 200, resp.text


class LeaderDeath:
    """The leader (never pod-c, which runs the copy) is SIGKILLed; the other pod left
    watches; the dead leader is started again on the way out (only if it was killed)."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.leader, self.term = cluster.wait_one_leader()
        assert self.leader != "pod-c", "the pod running the copy leads"
        self.observer = next(n for n in ("pod-a", "pod-b") if n != self.leader)
        self.killed = 0.0

    def __enter__(self) -> LeaderDeath:
        return self

    def kill(self) -> None:
        self.cluster.pods[self.leader].stop(signal.SIGKILL)
        self.killed = time.monotonic()
        self.cluster.wait(
            lambda st: agreed_leader(st) and all(s["leader"] != self.leader for s in st.values()),
            30,
            "a leader other than the dead one",
        )
        assert self.cluster.wait_one_leader()[1] > self.term

    def __exit__(self, *exc: object) -> None:
        if self.killed:  # a second process of a pod still running would be orphaned
            self.cluster.rejoin(self.leader)


def test_the_only_copy_a_dead_leader_withdrew_is_advertised_again(cluster: Cluster) -> None:
    with LeaderDeath(cluster) as death:
        iid = _lone_copy(cluster)
        key, watch = f"pod-c/{iid}", death.observer
        _withdraw(cluster, "pod-c", iid, death.term)
        poll(f"{watch} drops {key}", lambda: _routes(cluster, watch), lambda r: key not in r, 15)
        death.kill()  # before the unload
        poll(
            f"{watch} routes {key} again (the withdrawal's TTL is {WITHDRAW_TTL:g}s)",
            lambda: _routes(cluster, watch),
            lambda r: key in r,
            BACK_WITHIN,
        )
        back_after = time.monotonic() - death.killed
        assert_answers_through(cluster.pods[watch].url, LONE)
        [copy] = [i for i in cluster.instances("pod-c") if i["servedModelName"] == LONE]
        assert copy["id"] == iid, "the copy was replaced, not advertised again"
    print(f"\nrouted again by {watch} {back_after:.1f}s after the leader was killed")


def test_the_only_copy_a_dead_leader_drained_is_unloaded(cluster: Cluster) -> None:
    """Drained, the copy is held for its unload and never serves again: the next leader
    unloads it, and the next request starts the model anew."""
    with LeaderDeath(cluster) as death:
        iid = _lone_copy(cluster)
        key, watch = f"pod-c/{iid}", death.observer
        _withdraw(cluster, "pod-c", iid, death.term)
        poll(f"{watch} drops {key}", lambda: _routes(cluster, watch), lambda r: key not in r, 15)
        _drain(cluster, "pod-c", iid, death.term)
        death.kill()  # before the unload
        poll(
            f"{iid} unloaded from pod-c",
            lambda: [i["id"] for i in cluster.instances("pod-c")],
            lambda ids: iid not in ids,
            BACK_WITHIN,
        )
        gone_after = time.monotonic() - death.killed
        cluster.wait(
            lambda st: all(
                g["freeBytes"] >= 32 * 2**30
                for s in st.values()
                for p in s["pods"]
                if p["id"] == "pod-c"
                for g in p["gpus"]
            ),
            30,
            "pod-c's GPU free again in every view (the leader places by it)",
        )
        leader, _ = cluster.wait_one_leader()  # places it at once (see _lone_copy)
        assert_answers_through(cluster.pods[leader].url, LONE)
        assert_answers_through(cluster.pods[watch].url, LONE)
    print(f"\nthe held copy unloaded {gone_after:.1f}s after the leader was killed")


def test_a_withdrawn_copy_whose_pod_restarts_is_advertised_again(cluster: Cluster) -> None:
    """The withdrawal lives in pod-c's memory: the pod that restarts adopts its engine
    and advertises it again (a live leader retiring it sees it routed again, restores
    it and tries again on its next round)."""
    _, term = cluster.wait_one_leader()
    iid = _lone_copy(cluster)
    key = f"pod-c/{iid}"
    _withdraw(cluster, "pod-c", iid, term)
    poll(f"pod-b drops {key}", lambda: _routes(cluster, "pod-b"), lambda r: key not in r, 15)

    cluster.pods["pod-c"].stop(signal.SIGKILL)  # its engine outlives it
    cluster.rejoin("pod-c")
    poll(
        f"pod-b routes {key} again (the withdrawal's TTL is {WITHDRAW_TTL:g}s)",
        lambda: _routes(cluster, "pod-b"),
        lambda r: key in r,
        BACK_WITHIN,
    )
    assert_answers_through(cluster.pods["pod-b"].url, LONE)
