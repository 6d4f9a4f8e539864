"""Kubernetes mode: a load placed on a pod (``podId``) as soon as ``GET /api/cluster/status``
lists it is accepted, not refused for the heartbeat the pod has not sent yet (issue 28).

The pod watch makes a Ready pod a member at once; the failure detector calls a member it
has never heard from unavailable, and the leader's pod client used to refuse such a pod
at once with 503 ``pod_unavailable`` (for about 3 s after it joined). Now a call to a
member never heard from waits, within its deadline and the detector's unavailable time,
for its first sign of life. Here pod-c is held stopped (SIGSTOP) while it turns Ready, so
the window is as wide as the test wants: the load waits, pod-c is continued, the load is
accepted and its instance becomes active. A member that stays silent is still refused
with ``pod_unavailable``, once the detector's time is up (never a hang).

The same holds for a member heard before whose heartbeats are late (a busy machine: the
detector gave up on a live pod): the leader's order waits for its next sign of life
within the same bounds, instead of refusing at once (a move's test was refused so).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from testkit.kube import KubeApiServer
from testkit.kube_pods import KubePods
from testkit.servers import HTTP

pytestmark = [pytest.mark.kube, pytest.mark.slow]


@pytest.fixture(scope="module")
def pods(kube: KubeApiServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubePods]:
    """pod-a and pod-b running (one of them the leader) for the module; each test starts a
    pod of its own (pod-c, pod-d, pod-e): one cluster start for the module instead of one
    per test."""
    cluster = KubePods(kube, tmp_path_factory.mktemp("firstload"), 5)
    try:
        for name in ("pod-a", "pod-b"):
            cluster.create_pod(name)
        _start_side_by_side(cluster, "pod-a", "pod-b")
        yield cluster
    finally:
        cluster.close()


@pytest.fixture(autouse=True)
def _continued(pods: KubePods) -> Iterator[None]:
    """A test that failed while its pod was stopped leaves it running again: the next test
    waits on every live pod's status."""
    yield
    for name in ("pod-c", "pod-d", "pod-e"):
        proc = pods.pods[name].proc
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)


def _start_side_by_side(pods: KubePods, *names: str) -> None:
    """Start ``names`` at once (a start is mostly the app's import), each marked Ready as
    soon as it answers its probe."""
    for name in names:
        pods.pods[name].spawn()
    for name in names:
        pods.pods[name].wait_ready(60)
        pods.mark_ready(name)


def _silent_member(pods: KubePods, name: str) -> tuple[str, int]:
    """Start ``name`` stopped (SIGSTOP: it cannot send or answer a heartbeat) and mark it
    Ready; the leader then and the stopped process's pid."""
    leader, _ = pods.wait_one_leader(30)
    pods.create_pod(name)
    started = pods.pods[name].start(60)
    assert started.proc is not None
    os.kill(started.proc.pid, signal.SIGSTOP)
    pods.mark_ready(name)
    return leader, started.proc.pid


def _listed(pods: KubePods, leader: str, name: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = pods.status(leader) or {"pods": []}
        found: dict[str, Any] | None = next((p for p in status["pods"] if p["id"] == name), None)
        if found is not None:
            return found
        time.sleep(0.02)
    raise AssertionError(f"{name} not listed by {leader}'s status in 30s")


def _load(url: str, pod: str, out: dict[str, Any]) -> None:
    body = {
        "modelPath": f"first-load-{pod}",
        "engine": "sim",
        "extraArgs": ["--load-seconds", "0.2"],
        "podId": pod,
    }
    t0 = time.monotonic()
    resp = HTTP.post(f"{url}/api/v1/models/load", json=body, timeout=60)
    out.update(status=resp.status_code, body=resp.json(), seconds=time.monotonic() - t0)


def test_load_on_a_pod_just_listed_waits_for_its_first_heartbeat(pods: KubePods) -> None:
    leader, pid = _silent_member(pods, "pod-c")
    url = pods.pods[leader].url
    listed = _listed(pods, leader, "pod-c")
    assert listed["lastSeenSecondsAgo"] is None, f"pod-c heard while stopped: {listed}"

    answer: dict[str, Any] = {}
    loading = threading.Thread(target=_load, args=(url, "pod-c", answer))
    loading.start()
    loading.join(0.8)
    assert answer == {}, f"the load did not wait for pod-c's first heartbeat: {answer}"
    os.kill(pid, signal.SIGCONT)
    loading.join(60)
    assert answer.get("status") == 202, f"load on pod-c just after it was listed: {answer}"
    assert pods.wait_instance("pod-c", answer["body"]["id"], "active", 30)


def test_a_member_that_stays_silent_is_refused_not_waited_for_ever(pods: KubePods) -> None:
    leader, _ = _silent_member(pods, "pod-d")
    _listed(pods, leader, "pod-d")
    answer: dict[str, Any] = {}
    _load(pods.pods[leader].url, "pod-d", answer)
    assert (answer["status"], answer["body"].get("code")) == (503, "pod_unavailable"), answer


def test_a_load_on_a_pod_merely_late_waits_for_its_next_heartbeat(pods: KubePods) -> None:
    leader, _ = pods.wait_one_leader(30)
    pods.create_pod("pod-e")
    e = pods.pods["pod-e"].start(60)
    assert e.proc is not None
    pods.mark_ready("pod-e")
    deadline = time.monotonic() + 30
    while _listed(pods, leader, "pod-e")["state"] != "healthy":
        assert time.monotonic() < deadline, "pod-e never heard by the leader"
        time.sleep(0.05)
    os.kill(e.proc.pid, signal.SIGSTOP)  # its heartbeats stop: late, then given up on
    deadline = time.monotonic() + 30
    while (listed := _listed(pods, leader, "pod-e"))["state"] != "unavailable":
        assert time.monotonic() < deadline, f"pod-e never called unavailable: {listed}"
        time.sleep(0.05)
    assert listed["lastSeenSecondsAgo"] is not None, listed  # heard before, silent since

    answer: dict[str, Any] = {}
    loading = threading.Thread(target=_load, args=(pods.pods[leader].url, "pod-e", answer))
    loading.start()
    loading.join(0.8)
    assert answer == {}, f"the load did not wait for pod-e's next heartbeat: {answer}"
    os.kill(e.proc.pid, signal.SIGCONT)
    loading.join(60)
    assert answer.get("status") == 202, f"load on pod-e once it was late: {answer}"
    assert pods.wait_instance("pod-e", answer["body"]["id"], "active", 30)
