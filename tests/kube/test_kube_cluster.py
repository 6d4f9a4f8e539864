"""Kubernetes mode end to end: three real `sardeenz serve` pods against a real kube-apiserver.

The test plays the kubelet (testkit/kube_pods.py). In order, on one cluster: one leader
through the ``sardeenz-leader`` Lease and the same term everywhere; a model loaded on pod B
answers through pod A's ``/v1``, and its details, log and events from every pod; the
cluster-wide request log and usage (requests entering every pod, each seen once by every
pod, as in static mode: tests/cluster/shared/test_observability.py); deleting
pod B's Pod object takes its routes at once (its process keeps running and heartbeating:
only the watch removes it), and recreating it brings them back; the leader stopped
(SIGTERM: it releases the Lease) and then killed (SIGKILL: the Lease expires) hands the
Lease over, times printed; no orphan engine at the end. Then a Role missing one rule
(leases update, pods watch) gives a clear warning, not a crash.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from sardeenz.security.cluster_hmac import Signer
from testkit.cluster import (
    SECRET,
    TESTER,
    agreed_leader,
    assert_answers_through,
    listed_models,
    wait_listed,
)
from testkit.kube import SARDEENZ_RULES, KubeApiServer
from testkit.kube_pods import LEASE_TIMING, KubePods
from testkit.servers import HTTP

pytestmark = [pytest.mark.kube, pytest.mark.slow]

UNAVAILABLE_AFTER = 2.5
"""testkit/cluster.py's failure-detector time: route removal by the watch must beat it."""


@pytest.fixture(scope="module")
def pods(kube: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubePods]:
    cluster = KubePods(kube, tmp_path_factory.mktemp("kubepods"), 3)
    try:
        yield cluster.start()
    finally:
        cluster.close()


ROUTES_SETTLE = 30.0
"""How long a route may take to appear on another pod (a heartbeat, normally under a
second): generous, because the heartbeats of a loaded machine time out and back off;
the time taken is printed, never asserted."""


def _remote_b_instance(pods: KubePods) -> str:
    """The id of pod B's ``remote-b`` instance, loaded here when no earlier test left one
    (each test sets up what it needs; the module's cluster is shared to save starts)."""
    for inst in pods.instances("pod-b"):
        if inst["servedModelName"] == "remote-b" and inst["status"] == "active":
            return str(inst["id"])
    loaded = pods.load_on("pod-b", "remote-b")
    assert loaded["status"] == "active", loaded
    return str(loaded["id"])


def test_one_leader_through_the_lease_and_one_term(pods: KubePods) -> None:
    t0 = time.monotonic()
    # A peer the watch reports is listed before its first heartbeat arrives (then it is
    # not healthy yet): wait for the heartbeats too, not only for the listing.
    statuses = pods.wait(
        lambda s: (
            agreed_leader(s)
            and all(len(v["pods"]) == 3 for v in s.values())
            and all(p["state"] == "healthy" for v in s.values() for p in v["pods"])
        ),
        20.0,
        "one leader, one term, three healthy pods",
    )
    print(f"\nleader agreed with all pods known {time.monotonic() - t0:.2f}s after start")
    first = next(iter(statuses.values()))
    leader, term = first["leader"], first["term"]
    lease = pods.lease()
    assert lease is not None
    assert lease["holderIdentity"] == leader
    assert lease["leaseDurationSeconds"] == int(
        LEASE_TIMING["SARDEENZ_KUBE_LEASE_DURATION_SECONDS"]
    )
    assert term == lease["leaseTransitions"] + 1  # the fencing term
    for status in statuses.values():
        assert status["mode"] == "kubernetes"
        assert status["warnings"] == []
        assert {p["id"] for p in status["pods"]} == set(pods.names)
        assert all(p["state"] == "healthy" for p in status["pods"])
        assert [p["id"] for p in status["pods"] if p["isLeader"]] == [leader]
    me = {p["id"]: p for p in statuses["pod-a"]["pods"]}
    assert me["pod-b"]["address"] == f"127.0.0.3:{pods.port}"  # podIP + the http port


def test_model_on_pod_b_answers_through_pod_a(pods: KubePods) -> None:
    a = pods.pods["pod-a"]
    assert pods.load_on("pod-b", "remote-b")["status"] == "active"
    wait_listed(a.url, "remote-b", True, ROUTES_SETTLE)
    assert_answers_through(a.url, "remote-b")
    assert pods.instances("pod-a") == []  # served by pod B's engine


def test_pod_bs_instance_answers_from_every_pod(pods: KubePods) -> None:
    """One instance namespace in Kubernetes mode: details, log and event stream of pod B's
    instance from every pod (followers redirect to the Lease holder, whose locator asks
    pod B)."""
    iid = _remote_b_instance(pods)
    for name, pod in pods.pods.items():
        with httpx.Client(base_url=pod.url, follow_redirects=True, timeout=30) as api:
            # The leader hears of it with pod B's heartbeat.
            deadline = time.monotonic() + ROUTES_SETTLE
            details = api.get(f"/api/v1/models/{iid}")
            while details.status_code == 404 and time.monotonic() < deadline:
                time.sleep(0.1)
                details = api.get(f"/api/v1/models/{iid}")
            assert details.status_code == 200, f"via {name}: {details.text}"
            assert (details.json()["podId"], details.json()["status"]) == ("pod-b", "active")
            logs = api.get(f"/api/v1/models/{iid}/logs", params={"lines": 5})
            assert logs.status_code == 200, f"via {name}: {logs.text}"
            assert logs.json()["lines"], f"via {name}: no log line"
            url = f"/api/v1/models/instances/{iid}/events"
            with api.stream("GET", url, params={"replay": "true"}) as resp:
                assert resp.status_code == 200
                lines = resp.iter_lines()
                assert any(line == "event: status" for line in lines), f"via {name}"


OBSERVED = "observed-kube"
SENT = {"pod-a": 2, "pod-b": 1, "pod-c": 3}
"""Requests for ``OBSERVED`` (on pod-b) entering each pod."""


def _entries(url: str) -> list[dict[str, Any]]:
    resp = HTTP.get(f"{url}/api/v1/requests", params={"model": OBSERVED}, timeout=5)
    assert resp.status_code == 200, resp.text
    data: list[dict[str, Any]] = resp.json()
    return data


def test_every_pod_sees_every_request_once(pods: KubePods) -> None:
    """The cluster-wide request log and usage, collected from every pod: each pod's
    ``/api/v1/requests`` and ``/api/v1/usage`` show each request once, with the pod that
    ran it and the pod it entered."""
    assert pods.load_on("pod-b", OBSERVED)["status"] == "active"
    for name, n in SENT.items():
        url = pods.pods[name].url
        deadline = time.monotonic() + 15
        while OBSERVED not in listed_models(url):
            assert time.monotonic() < deadline, f"{OBSERVED} not routable on {name}"
            time.sleep(0.1)
        for _ in range(n):
            resp = HTTP.post(
                f"{url}/v1/chat/completions",
                json={"model": OBSERVED, "messages": [{"role": "user", "content": "hi"}]},
                timeout=30,
            )
            assert resp.status_code == 200, resp.text
    total = sum(SENT.values())
    for name, pod in pods.pods.items():
        deadline = time.monotonic() + 30
        while len(entries := _entries(pod.url)) < total:
            assert time.monotonic() < deadline, f"{name} collected {len(entries)} of {total}"
            time.sleep(0.3)
        assert len(entries) == total
        assert {e["pod"] for e in entries} == {"pod-b"}
        assert Counter(e["entryPod"] for e in entries) == SENT
        usage = HTTP.get(f"{pod.url}/api/v1/usage", timeout=5).json()["byModel"]
        assert sum(r["requests"] for r in usage if r["model"] == OBSERVED) == total


def test_deleting_a_pod_object_removes_its_routes_at_once(pods: KubePods) -> None:
    a = pods.pods["pod-a"]
    _remote_b_instance(pods)
    wait_listed(a.url, "remote-b", True, ROUTES_SETTLE)
    pods.delete_pod("pod-b")
    took = wait_listed(a.url, "remote-b", False, UNAVAILABLE_AFTER)
    print(f"\npod-b's Pod deleted: its routes left pod-a in {took:.2f}s")
    assert pods.pods["pod-b"].proc is not None
    assert pods.pods["pod-b"].proc.poll() is None
    # Its process still heartbeats; past the detector's time it must still be out.
    time.sleep(UNAVAILABLE_AFTER + 0.5)
    assert "remote-b" not in listed_models(a.url)
    status = pods.status("pod-a")
    assert status is not None
    assert "pod-b" not in {p["id"] for p in status["pods"]}
    # The kubelet brings it back: Ready again, routes again.
    pods.create_pod("pod-b")
    pods.mark_ready("pod-b")
    back = wait_listed(a.url, "remote-b", True, ROUTES_SETTLE)
    print(f"pod-b Ready again: its routes back on pod-a in {back:.2f}s")


def test_stopped_leader_hands_the_lease_over(pods: KubePods) -> None:
    statuses = pods.wait(agreed_leader, 10.0, "one leader")
    old = next(iter(statuses.values()))
    leader, term = old["leader"], old["term"]

    # SIGTERM: the leader releases the Lease on its way out; the kubelet marks it not Ready.
    proc = pods.pods[leader].proc
    assert proc is not None
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    pods.mark_ready(leader, False)
    second, lease_took = pods.wait_holder(leader, 10.0)
    proc.wait(30)
    agreed = pods.wait(agreed_leader, 10.0, "a new leader")
    agreed_took = time.monotonic() - t0
    new = next(iter(agreed.values()))
    assert new["leader"] == second
    assert new["term"] == term + 1
    lease = pods.lease()
    assert lease is not None
    assert lease["leaseTransitions"] == term
    print(
        f"\nSIGTERM {leader}: Lease to {second} after {lease_took:.2f}s, "
        f"all pods agree after {agreed_took:.2f}s (term {term} -> {new['term']})"
    )

    # SIGKILL, Pod object left as it was: the Lease must expire (3 s here) first.
    t0 = time.monotonic()
    pods.pods[second].stop(signal.SIGKILL)
    third, lease_took = pods.wait_holder(second, 15.0)
    agreed = pods.wait(agreed_leader, 10.0, "a third leader")
    agreed_took = time.monotonic() - t0
    assert next(iter(agreed.values()))["leader"] == third
    assert next(iter(agreed.values()))["term"] == term + 2
    print(
        f"SIGKILL {second}: Lease to {third} after {lease_took:.2f}s "
        f"(lease {LEASE_TIMING['SARDEENZ_KUBE_LEASE_DURATION_SECONDS']} s), agreed after "
        f"{agreed_took:.2f}s"
    )
    assert lease_took >= float(LEASE_TIMING["SARDEENZ_KUBE_RENEW_DEADLINE_SECONDS"])

    # Fencing: an order of the first leader's term is refused by the pod that leads now.
    path = "/internal/models/nope/sleep"
    body = f'{{"term": {term}, "level": 1}}'.encode()
    resp = HTTP.post(
        f"{pods.pods[third].url}{path}",
        content=body,
        headers=Signer(SECRET.encode(), source=TESTER).headers("POST", path, body, target=third),
        timeout=5,
    )
    assert resp.status_code == 409, resp.text
    assert resp.json()["code"] == "stale_term"


def test_no_orphan_engines(pods: KubePods) -> None:
    pods.close()
    deadline = time.monotonic() + 10
    while pods.orphans() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert pods.orphans() == [], "engines still running 10 s after every pod stopped"


def _without(resource: str, verb: str) -> list[dict[str, object]]:
    rules = []
    for rule in SARDEENZ_RULES:
        verbs = [v for v in rule["verbs"] if not (rule["resources"] == [resource] and v == verb)]
        rules.append({**rule, "verbs": verbs})
    return rules


def test_a_missing_rule_is_a_clear_warning_not_a_crash(kube: KubeApiServer, tmp_path: Path) -> None:
    cases = {
        ("update", "leases"): KubePods(
            kube, tmp_path / "no-update", 1, _without("leases", "update"), 10
        ),
        ("watch", "pods"): KubePods(kube, tmp_path / "no-watch", 1, _without("pods", "watch"), 11),
    }
    try:
        for (_, resource), one in cases.items():
            if resource == "leases":
                # A released Lease: the pod must update it to lead.
                with kube.client() as api:
                    made = api.post(
                        f"/apis/coordination.k8s.io/v1/namespaces/{one.namespace}/leases",
                        json={
                            "metadata": {"name": "sardeenz-leader"},
                            "spec": {"holderIdentity": "", "leaseDurationSeconds": 3},
                        },
                    )
                assert made.status_code == 201, made.text
        with ThreadPoolExecutor(len(cases)) as pool:
            for done in [pool.submit(one.start) for one in cases.values()]:
                done.result()
        for (verb, resource), one in cases.items():
            deadline = time.monotonic() + 15
            warnings: list[str] = []
            while time.monotonic() < deadline and not warnings:
                status = one.status("pod-a")
                warnings = status["warnings"] if status else []
                time.sleep(0.1)
            print(f"\n{verb} {resource} missing: {warnings}")
            assert len(warnings) == 1, warnings
            text = warnings[0]
            assert f'verbs ["{verb}"]' in text
            assert f'resources ["{resource}"]' in text
            assert f"namespace {one.namespace!r}" in text
            assert "Role" in text
            assert "403" in text
            pod = one.pods["pod-a"]
            time.sleep(1.0)
            assert pod.proc is not None
            assert pod.proc.poll() is None
            assert HTTP.get(f"{pod.url}/api/health/ready", timeout=5).status_code == 200
            log = pod.log()
            assert "Traceback" not in log
            lines = [ln for ln in log.splitlines() if "Kubernetes RBAC" in ln]
            assert lines, log[-2000:]
            assert f"{verb} {resource}" in lines[0], lines
            assert len(lines) <= 2, lines  # once (not once per retry)
            cli = subprocess.run(
                [sys.executable, "-m", "sardeenz.cli", "cluster", "status", "--url", pod.url],
                capture_output=True,
                text=True,
                timeout=60,
                env={**os.environ, "COLUMNS": "400"},
                check=False,
            )
            assert cli.returncode == 0, cli.stderr
            assert "warning: Kubernetes RBAC" in cli.stdout
            if resource == "leases":
                status = one.status("pod-a")
                assert status is not None
                assert status["leader"] is None
    finally:
        for one in cases.values():
            one.close()
