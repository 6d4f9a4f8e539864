"""After a partition heals, the leader reduces surplus on-demand copies to one.

Three pods in network namespaces (testkit/netns.py). pod-c is cut off; a request
through pod-a starts the catalog model where the leader places it, a request
through pod-c (no leader on its side) starts a copy of its own. The operator also
loads the model's name by hand on a majority pod. Once pod-c rejoins, steady
traffic (streams, through every pod) keeps every copy busy, so no idle reaper
would ever put one away; the leader must drain and unload pod-c's copy (the
younger of the two on-demand copies), keep the operator's, and every request must
succeed throughout.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from testkit import netns
from testkit.cluster import TIMING
from testkit.servers import HTTP

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not netns.available(), reason="needs root and iproute2 (ip netns)"),
]

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
