"""One instance namespace: every route on an instance answers the same from every pod.

A table: each instance route x each pod as the entry x an instance on each pod (and an
id no pod has), on the folder's shared cluster of 3 real `sardeenz serve` processes. Entries
that follow are redirected (307) to the leader, which runs the route locally or on the
instance's pod through the locator (cluster/locator.py). The answer each case gets is
compared with the one the instance's own pod gives as the entry.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from testkit.cluster import Cluster
from testkit.servers import HTTP

# The first test also pays for the cluster and its three loads.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

PODS = ("pod-a", "pod-b", "pod-c")
MISSING = "no-such-instance"


class Namespace:
    """The cluster, one sleepable instance on each pod, and the answers already seen."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.leader = cluster.leader_url()
        self.instance: dict[str, str] = {}
        self.reference: dict[tuple[str, str], Any] = {}

    def load(self, pod: str, name: str) -> str:
        iid = self.start_load(pod, name)
        self.wait_listed(iid, "active")
        return iid

    def start_load(self, pod: str, name: str) -> str:
        """Ask the leader to load ``name`` on ``pod``; its instance id (starting)."""
        body = {
            "modelPath": name,
            "engine": "sim",
            "extraArgs": ["--load-seconds", "0.2"],
            "enableSleepMode": True,
            "podId": pod,
        }
        resp = HTTP.post(f"{self.leader}/api/v1/models/load", json=body, timeout=30)
        assert resp.status_code == 202, resp.text
        return str(resp.json()["id"])

    def listed(self, iid: str) -> bool:
        return any(
            i["id"] == iid for i in HTTP.get(f"{self.leader}/api/v1/models", timeout=5).json()
        )

    def wait_listed(self, iid: str, status: str | None, timeout: float = 30) -> None:
        """Until the leader's list shows ``iid`` in ``status`` (None: not at all)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            listed = HTTP.get(f"{self.leader}/api/v1/models", timeout=5).json()
            found = next((i for i in listed if i["id"] == iid), None)
            if (found is None and status is None) or (found and found["status"] == status):
                return
            time.sleep(0.1)
        raise AssertionError(f"instance {iid} not listed {status} by the leader in {timeout}s")

    def url(self, pod: str) -> str:
        return self.cluster.pods[pod].url


@pytest.fixture(scope="module")
def ns(shared_cluster: Cluster) -> Iterator[Namespace]:
    """The shared cluster with one instance on each pod, unloaded after the module."""
    n = Namespace(shared_cluster)
    try:
        for pod in PODS:
            n.instance[pod] = n.load(pod, f"ns-{pod}")
        yield n
    finally:
        for pod, iid in n.instance.items():
            shared_cluster.unload(pod, iid)


def _call(method: str, url: str, **kw: Any) -> httpx.Response:
    return HTTP.request(method, url, follow_redirects=True, timeout=30, **kw)


def _answer(resp: httpx.Response, keep: Callable[[Any], Any]) -> tuple[int, Any]:
    data = resp.json()
    if resp.status_code >= 400:
        return resp.status_code, data.get("code")
    return resp.status_code, keep(data)


def _instance_view(data: dict[str, Any]) -> dict[str, Any]:
    """The instance without what changes by itself from one second to the next."""
    volatile = {"lastActivity", "lastUsedAt", "updatedAt", "healthFailures"}
    return {k: v for k, v in data.items() if k not in volatile}


def details(ns: Namespace, entry: str, iid: str) -> Any:
    return _answer(_call("GET", f"{ns.url(entry)}/api/v1/models/{iid}"), _instance_view)


def logs(ns: Namespace, entry: str, iid: str) -> Any:
    resp = _call("GET", f"{ns.url(entry)}/api/v1/models/{iid}/logs", params={"lines": 100000})
    # The first lines (the engine's start-up) are fixed; new ones keep coming.
    return _answer(resp, lambda d: (d["instanceId"], d["lines"][:5], len(d["lines"]) >= 5))


def metrics(ns: Namespace, entry: str, iid: str) -> Any:
    resp = _call("GET", f"{ns.url(entry)}/api/v1/models/{iid}/metrics")
    return _answer(resp, lambda d: (d["modelId"], d["servedModelName"], d["status"]))


def events(ns: Namespace, entry: str, iid: str) -> Any:
    """Replay, then the current status: what a client that follows the log sees first."""
    url = f"{ns.url(entry)}/api/v1/models/instances/{iid}/events"
    with (
        httpx.Client(follow_redirects=True, timeout=30) as client,
        client.stream("GET", url, params={"replay": "true"}) as resp,
    ):
        if resp.status_code != 200:
            resp.read()
            return resp.status_code, resp.json().get("code")
        replayed: list[str] = []
        name = ""
        for line in resp.iter_lines():
            if line.startswith("event:"):
                name = line.split(":", 1)[1].strip()
            elif line.startswith("data:"):
                data = orjson.loads(line.split(":", 1)[1])
                if name == "log":
                    replayed.append(data["line"])
                elif name == "status":
                    return 200, (data["instanceId"], data["status"], replayed[:5])
    raise AssertionError("the stream ended before its status event")


def sleep_wake(ns: Namespace, entry: str, iid: str) -> Any:
    slept = _call("POST", f"{ns.url(entry)}/api/v1/models/{iid}/sleep", params={"level": 1})
    if slept.status_code != 200:
        return slept.status_code, slept.json().get("code")
    woke = _call("POST", f"{ns.url(entry)}/api/v1/models/{iid}/wake")
    assert woke.status_code == 200, woke.text
    s, w = slept.json(), woke.json()
    return 200, (s["id"], s["status"], s["podId"], w["status"], w["podId"])


def profile(ns: Namespace, entry: str, iid: str) -> Any:
    resp = _call("POST", f"{ns.url(entry)}/api/memory/profiles", json={"instanceId": iid})
    keep = ("modelPath", "maxTokens", "gpuName", "weightsMemoryGib", "kvCacheAvailableGib")
    return _answer(resp, lambda d: {k: d.get(k) for k in keep})


def benchmark(ns: Namespace, entry: str, iid: str) -> Any:
    """A scenario naming the instance, longer than its context: refused once found."""
    scenario = {"instanceId": iid, "routingMode": "proxy", "inputTokens": 100000}
    body = {"scenarios": [{**scenario, "outputTokens": 8, "totalRequests": 1}]}
    resp = _call("POST", f"{ns.url(entry)}/api/benchmarks", json=body)
    return resp.status_code, resp.json().get("code")


def move(ns: Namespace, entry: str, iid: str) -> Any:
    """A move to a pod that does not exist: refused for the target once the instance is
    found (an unknown instance is refused first, for itself)."""
    body = {"instanceId": iid, "targetPodId": "pod-nowhere"}
    resp = _call("POST", f"{ns.url(entry)}/api/cluster/moves", json=body)
    return resp.status_code, resp.json().get("code")


ROUTES: dict[str, Callable[[Namespace, str, str], Any]] = {
    f.__name__: f for f in (details, logs, metrics, events, sleep_wake, profile, benchmark, move)
}
EXPECTED_STATUS = {
    "details": 200,
    "logs": 200,
    "metrics": 200,
    "events": 200,
    "sleep_wake": 200,
    "profile": 201,
    "benchmark": 400,
    "move": 404,
}


@pytest.mark.parametrize("owner", PODS, ids=lambda p: f"on-{p}")
@pytest.mark.parametrize("entry", PODS, ids=lambda p: f"via-{p}")
@pytest.mark.parametrize("route", list(ROUTES))
def test_instance_route_answers_the_same_from_every_pod(
    ns: Namespace, route: str, entry: str, owner: str
) -> None:
    iid = ns.instance[owner]
    key = (route, owner)
    if key not in ns.reference:  # the instance's own pod as the entry
        ns.reference[key] = ROUTES[route](ns, owner, iid)
    expected = ns.reference[key]
    assert expected[0] == EXPECTED_STATUS[route], expected
    got = ROUTES[route](ns, entry, iid)
    assert got == expected


@pytest.mark.parametrize("entry", PODS, ids=lambda p: f"via-{p}")
@pytest.mark.parametrize("route", list(ROUTES))
def test_an_instance_no_pod_has_is_404_everywhere(ns: Namespace, route: str, entry: str) -> None:
    assert ROUTES[route](ns, entry, MISSING) == (404, "instance_not_found")


@pytest.fixture(scope="module")
def doomed(ns: Namespace) -> Iterator[dict[tuple[str, str], str]]:
    """An instance on each owner for each entry to unload, (entry, owner) -> id: the nine
    start side by side (one after another, each test waited out a start of its own);
    whichever a failed test left is unloaded after the module."""
    started = {
        (entry, owner): ns.start_load(owner, f"gone-{owner}-{entry}")
        for entry in PODS
        for owner in PODS
    }
    try:
        for iid in started.values():
            ns.wait_listed(iid, "active")
        yield started
    finally:
        for (_, owner), iid in started.items():
            if ns.listed(iid):
                ns.cluster.unload(owner, iid)


@pytest.mark.parametrize("owner", PODS, ids=lambda p: f"on-{p}")
@pytest.mark.parametrize("entry", PODS, ids=lambda p: f"via-{p}")
def test_unload_from_any_pod(
    ns: Namespace, doomed: dict[tuple[str, str], str], entry: str, owner: str
) -> None:
    iid = doomed[entry, owner]
    resp = _call("POST", f"{ns.url(entry)}/api/v1/models/{iid}/unload")
    assert resp.status_code == 200, resp.text
    assert (resp.json()["id"], resp.json()["podId"]) == (iid, owner)
    ns.wait_listed(iid, None)
    again = _call("GET", f"{ns.url(entry)}/api/v1/models/{iid}")
    assert (again.status_code, again.json()["code"]) == (404, "instance_not_found")


def test_details_carry_the_pod_and_match_its_own_view(ns: Namespace) -> None:
    for owner in PODS:
        own = next(i for i in ns.cluster.instances(owner) if i["id"] == ns.instance[owner])
        status, seen = details(ns, PODS[0], ns.instance[owner])
        assert status == 200
        assert seen["podId"] == owner
        assert (seen["status"], seen["port"], seen["modelPath"]) == (
            own["status"],
            own["port"],
            own["modelPath"],
        )


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sardeenz.cli", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "COLUMNS": "200"},
    )


@pytest.mark.parametrize("entry", PODS, ids=lambda p: f"via-{p}")
def test_cli_lists_every_pod_and_shows_another_pods_instance_log(ns: Namespace, entry: str) -> None:
    listed = _cli("models", "ls", "--url", ns.url(entry))
    assert listed.returncode == 0, listed.stderr
    header, *rows = listed.stdout.splitlines()
    assert header.split("\t")[:2] == ["ID", "POD"]
    pod_of = {r.split("\t")[0]: r.split("\t")[1] for r in rows}
    assert all(pod_of[ns.instance[owner]] == owner for owner in PODS)
    owner = PODS[(PODS.index(entry) + 1) % len(PODS)]  # an instance another pod runs
    logs = _cli("models", "logs", f"ns-{owner}", "--url", ns.url(entry), "-n", "100000")
    assert logs.returncode == 0, logs.stderr
    url = f"{ns.url(owner)}/api/v1/models/{ns.instance[owner]}/logs"
    api = _call("GET", url, params={"lines": 100000})
    assert logs.stdout.splitlines()[0] == api.json()["lines"][0]  # its start-up, from its pod
