"""Relayed instance streams (log follow, SSE events) of an instance on another pod.

On the folder's shared cluster (pod-c, killed here, is started again after the test).

The leader (pod-a) relays the stream of pod-b's instance from pod-b: new log lines
arrive live; a client that leaves ends pod-b's stream (its
``sardeenz_cluster_relayed_streams`` gauge drops back to 0); pod-b SIGKILLed
mid-stream ends the client's stream with a final ``unavailable`` event naming it.
"""

from __future__ import annotations

import queue
import re
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from testkit.cluster import Cluster
from testkit.servers import HTTP

pytestmark = pytest.mark.slow

GAUGE = re.compile(r"^sardeenz_cluster_relayed_streams (\S+)$", re.M)


def relayed_streams(cluster: Cluster, pod: str) -> float:
    text = HTTP.get(f"{cluster.pods[pod].url}/metrics", timeout=5).text
    found = GAUGE.search(text)
    assert found is not None, "no sardeenz_cluster_relayed_streams gauge on /metrics"
    return float(found.group(1))


def wait_gauge(cluster: Cluster, pod: str, want: float, timeout: float) -> float:
    """Seconds until ``pod``'s open relayed streams are ``want``."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if relayed_streams(cluster, pod) == want:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"{pod} did not have {want} relayed stream(s) within {timeout}s")


class Follower:
    """An SSE client of the events of one instance, read on a thread into a queue."""

    def __init__(self, url: str) -> None:
        self.events: queue.Queue[tuple[str, dict[str, Any]] | None] = queue.Queue()
        self._client = httpx.Client(timeout=httpx.Timeout(30, read=60))
        self._url = url
        self._resp: httpx.Response | None = None
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            with self._client.stream("GET", self._url, params={"replay": "true"}) as resp:
                self._resp = resp
                name = ""
                for line in resp.iter_lines():
                    if line.startswith("event:"):
                        name = line.split(":", 1)[1].strip()
                    elif line.startswith("data:"):
                        self.events.put((name, orjson.loads(line.split(":", 1)[1])))
        except httpx.HTTPError:
            pass
        finally:
            self.events.put(None)

    def next(self, what: str, timeout: float = 20) -> tuple[str, dict[str, Any]] | None:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no event ({what}) within {timeout}s") from None

    def until(self, name: str, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.next(f"waiting for {name}", deadline - time.monotonic())
            assert got is not None, f"the stream ended before a {name} event"
            if got[0] == name:
                return got[1]
        raise AssertionError(f"no {name} event within {timeout}s")

    def leave(self) -> None:
        self._client.close()  # closes the connection under the reading thread
        self._thread.join(10)


@pytest.fixture(scope="module")
def relay(shared_cluster: Cluster) -> Iterator[Cluster]:
    """The folder's shared cluster; the module's instances are unloaded after it."""
    try:
        yield shared_cluster
    finally:
        for pod in shared_cluster.names:
            for inst in shared_cluster.instances(pod):
                if inst["servedModelName"].startswith("relay-"):
                    shared_cluster.unload(pod, inst["id"])


def _instance_on(cluster: Cluster, pod: str, name: str) -> str:
    inst = cluster.load_on(pod, name)
    leader = cluster.leader_url()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # the leader learns it from pod's next heartbeat
        if any(i["id"] == inst["id"] for i in HTTP.get(f"{leader}/api/v1/models").json()):
            return str(inst["id"])
        time.sleep(0.1)
    raise AssertionError(f"the leader does not list {inst['id']} within 30s")


def test_live_lines_are_relayed_and_a_client_that_leaves_ends_the_upstream(
    relay: Cluster,
) -> None:
    iid = _instance_on(relay, "pod-b", "relay-b")
    wait_gauge(relay, "pod-b", 0, 10)  # no stream an earlier module followed is still open
    follower = Follower(f"{relay.pods['pod-a'].url}/api/v1/models/instances/{iid}/events")
    try:
        status = follower.until("status")
        assert (status["instanceId"], status["status"]) == (iid, "active")
        wait_gauge(relay, "pod-b", 1, 10)
        # A live line: a request served by the engine writes an access line to its log.
        resp = HTTP.post(
            f"{relay.pods['pod-b'].url}/v1/completions",
            json={"model": "relay-b", "prompt": "hi", "max_tokens": 2},
            timeout=30,
        )
        assert resp.status_code == 200, resp.text
        live = follower.until("log")
        while live.get("replayed") or "/v1/completions" not in live["line"]:
            live = follower.until("log")
        assert live["instanceId"] == iid
    finally:
        follower.leave()
    took = wait_gauge(relay, "pod-b", 0, 10)
    print(f"\nupstream stream on pod-b closed {took * 1000:.0f} ms after the client left")


def test_owning_pod_killed_mid_stream_ends_it_with_a_final_event(relay: Cluster) -> None:
    iid = _instance_on(relay, "pod-c", "relay-c")
    try:
        _kill_the_owner_mid_stream(relay, iid)
    finally:
        relay.rejoin("pod-c")  # the cluster is shared: leave it whole (pod-c re-adopts relay-c)


def _kill_the_owner_mid_stream(relay: Cluster, iid: str) -> None:
    follower = Follower(f"{relay.pods['pod-a'].url}/api/v1/models/instances/{iid}/events")
    try:
        follower.until("status")
        wait_gauge(relay, "pod-c", 1, 10)
        t0 = time.monotonic()
        relay.pods["pod-c"].stop(signal.SIGKILL)
        final = follower.until("unavailable", timeout=30)
        took = time.monotonic() - t0
        assert final["code"] == "pod_unavailable"
        assert (final["podId"], final["instanceId"]) == ("pod-c", iid)
        assert "pod-c" in final["detail"]
        assert follower.next("the end of the stream", 10) is None  # and then it ends
        print(f"\nstream ended {took * 1000:.0f} ms after pod-c was killed")
    finally:
        follower.leave()
    # Its instance is now on an unavailable pod: 503 naming it, once the detector says so.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        resp = HTTP.get(f"{relay.pods['pod-a'].url}/api/v1/models/{iid}", timeout=10)
        if resp.status_code == 503:
            assert resp.json()["code"] == "pod_unavailable"
            assert resp.json()["podId"] == "pod-c"
            return
        time.sleep(0.2)
    raise AssertionError(f"details of {iid} not 503 pod_unavailable within 30s: {resp.text}")
