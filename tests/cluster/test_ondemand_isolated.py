"""Requests for a catalog model entering a pod cut off from the cluster end once it heals.

Three pods in network namespaces (testkit/netns.py), the catalog model running on
pod-c. pod-b (a follower) is isolated: it loses its routes to pod-c and its leader,
and a request for the model through it is a start on demand that cannot reach the
leader. Requests sent through pod-b while it is cut off, and just after it rejoins,
must each end (an answer, or a clean OpenAI error) well within the soak's 30 s
deadline, and the ones after the heal must be answered once pod-c's route is back:
a waiter must not stay stuck on a start or a wake while the routing table already
has an active instance of its model.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from testkit import netns
from testkit.cluster import TIMING
from testkit.servers import HTTP

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not netns.available(), reason="needs root and iproute2 (ip netns)"),
]

NAMES = ["pod-a", "pod-b", "pod-c"]
MODEL = "iso-cat"
SIM = ["--load-seconds", "0.5", "--ttft-ms", "10", "--itl-ms", "5", "--memory-gib", "4"]
DEADLINE = 30.0  # the soak's per-request deadline
CUT_SECONDS = 6.0  # as long as the soak's isolation that found the hang


class Pods(netns.Pods):
    def lists(self, name: str) -> bool:
        try:
            data = HTTP.get(f"{self.url(name)}/v1/models", timeout=1).json()["data"]
        except (httpx.HTTPError, ValueError, KeyError):
            return False
        # A catalog model is always listed; ``state`` says whether it runs somewhere.
        return any(
            m["id"] == MODEL and m.get("state", "active") in ("active", "sleeping") for m in data
        )

    def own_instances(self, name: str) -> list[dict[str, Any]]:
        status = self.status(name)
        assert status is not None
        me = next(p for p in status["pods"] if p.get("self"))
        return [i for i in me["instances"] if i["servedModelName"] == MODEL]


@pytest.fixture(scope="module")
def pods(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pods]:
    root = tmp_path_factory.mktemp("ondemand-isolated")
    env = {"SARDEENZ_SIM_GPUS": "NVIDIA L4:24GiB", **TIMING}
    with netns.running_pods(root, NAMES, env) as running:
        yield Pods(running.fabric, running.servers)


class Sent:
    """One request sent in a thread: when it started, ended and how."""

    def __init__(self, url: str, t0: float) -> None:
        self.start = time.monotonic() - t0
        self.end: float | None = None
        self.outcome = "hung"
        self._t0 = t0
        self._thread = threading.Thread(target=self._run, args=(url,), daemon=True)
        self._thread.start()

    def _run(self, url: str) -> None:
        body = {"model": MODEL, "prompt": "hello", "max_tokens": 3}
        try:
            resp = HTTP.post(f"{url}/v1/completions", json=body, timeout=DEADLINE)
            self.outcome = str(resp.status_code)
            if resp.status_code != 200:
                self.outcome += f" {resp.json().get('error', {}).get('code')}"
        except httpx.TimeoutException:
            self.outcome = "hung"
        except httpx.HTTPError as exc:
            self.outcome = f"broken: {exc!r}"
        self.end = time.monotonic() - self._t0

    def join(self) -> None:
        self._thread.join(DEADLINE + 5)

    def __repr__(self) -> str:
        end = f"{self.end:.2f}" if self.end is not None else "-"
        return f"[{self.start:.2f}..{end} {self.outcome}]"


@pytest.mark.parametrize(
    ("victim", "asleep"), [("pod-b", False), ("pod-a", False), ("pod-b", True)]
)
def test_requests_through_an_isolated_pod_end_once_it_heals(
    pods: Pods, victim: str, asleep: bool
) -> None:
    leader_id = netns.until("one leader everywhere", 30, pods.leader)
    leader = pods.url(leader_id)
    if not pods.lists("pod-c"):  # the first case puts the model on pod-c
        entry = {"modelPath": MODEL, "engine": "sim", "extraArgs": SIM, "sleepLevel": 1}
        resp = HTTP.put(f"{leader}/api/v1/catalog/{MODEL}", json=entry, timeout=30)
        assert resp.status_code == 200, resp.text
        resp = HTTP.post(
            f"{leader}/api/v1/models/load",
            json={"modelPath": MODEL, "engine": "sim", "extraArgs": SIM, "podId": "pod-c"},
            timeout=30,
        )
        assert resp.status_code == 202, resp.text
    netns.until("every pod routes the model", 30, lambda: all(pods.lists(n) for n in NAMES))

    if asleep:  # the isolated pod has a copy of its own, asleep
        mine = pods.own_instances(victim)
        assert mine, f"{victim} has no copy of {MODEL}"
        for inst in mine:
            if inst["status"] == "active":
                resp = HTTP.post(
                    f"{leader}/api/v1/models/{inst['id']}/sleep", json={"level": 1}, timeout=30
                )
                assert resp.status_code in (200, 202), resp.text
        netns.until(
            f"{victim}'s copies asleep",
            30,
            lambda: all(i["status"] == "sleeping" for i in pods.own_instances(victim)),
        )

    t0 = time.monotonic()
    sent: list[Sent] = []
    with pods.cut(victim):
        # From the cut on (before and after the pod notices it), then past the heal.
        while time.monotonic() - t0 < CUT_SECONDS:
            sent.append(Sent(pods.url(victim), t0))
            time.sleep(0.5)
    healed = time.monotonic() - t0
    for _ in range(4):
        sent.append(Sent(pods.url(victim), t0))
        time.sleep(0.5)
    for s in sent:
        s.join()
    print(f"\nhealed at {healed:.2f}s, requests: {sent}")
    hung = [s for s in sent if s.end is None or s.outcome == "hung"]
    assert not hung, f"requests that did not end within {DEADLINE}s: {hung} (all: {sent})"
    late = [s for s in sent if s.start >= healed]
    assert all(s.outcome == "200" for s in late), f"after the heal: {late}"
