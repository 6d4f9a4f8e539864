"""Failover in a 3-pod static-peers cluster of its own: leader SIGKILL, rejoin, clean stop.

The tests in order: a model on the leader, the leader SIGKILLed (a new leader, the
dead pod's routes gone; the times are printed), the pod restarted (it rejoins without
deposing the new leader, its engine routable again), then every pod stopped cleanly
with no orphan engine. Its own cluster (``cluster3``), not the shared one: it kills and
restarts pods.
"""

from __future__ import annotations

import signal
import time

import pytest

from testkit.cluster import Cluster, agreed_leader
from testkit.servers import HTTP, load_active

pytestmark = pytest.mark.slow


def _models(url: str) -> list[str]:
    return [m["id"] for m in HTTP.get(f"{url}/v1/models", timeout=5).json()["data"]]


def _wait_models(url: str, want: bool, name: str, timeout: float = 10.0) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if (name in _models(url)) is want:
            return time.monotonic() - t0
        time.sleep(0.05)
    raise AssertionError(f"{name} {'not ' if want else ''}listed at {url} in {timeout}s")


def test_leader_sigkill_new_leader_and_routes_to_the_dead_pod_go(cluster3: Cluster) -> None:
    old, old_term = cluster3.wait_one_leader(10.0)
    dead = cluster3.pods[old]
    with dead.client() as client:
        load_active(client, "on-the-leader")
    survivors = [n for n in cluster3.names if n != old]
    for name in survivors:
        _wait_models(cluster3.pods[name].url, True, "on-the-leader")
    t0 = time.monotonic()
    dead.stop(signal.SIGKILL)
    statuses = cluster3.wait(
        lambda s: agreed_leader(s) and next(iter(s.values()))["leader"] != old,
        20.0,
        "a new leader",
    )
    elected = time.monotonic() - t0
    new, new_term = next(iter(statuses.values()))["leader"], next(iter(statuses.values()))["term"]
    for name in survivors:
        _wait_models(cluster3.pods[name].url, False, "on-the-leader", 15.0)
    routes_gone = time.monotonic() - t0
    print(
        f"\nfailover: leader {old} (term {old_term}) killed -> {new} (term {new_term}) "
        f"leads after {elected:.2f}s; routes to {old} gone after {routes_gone:.2f}s"
    )
    assert new == min(survivors)
    assert new_term > old_term
    assert elected < 20.0
    assert routes_gone < 15.0 + elected
    for name in survivors:
        st = statuses[name]
        states = {p["id"]: p["state"] for p in st["pods"]}
        assert states[old] in ("suspect", "unavailable")


def test_restarted_pod_rejoins(cluster3: Cluster) -> None:
    dead = next(n for n in cluster3.names if n not in cluster3.alive())
    t0 = time.monotonic()
    cluster3.pods[dead].start()
    statuses = cluster3.wait(
        lambda s: (
            agreed_leader(s)
            and dead in s
            and all(p["state"] == "healthy" for st in s.values() for p in st["pods"])
        ),
        15.0,
        "the restarted pod back",
    )
    leader = statuses[dead]["leader"]
    print(f"\n{dead} rejoined after {time.monotonic() - t0:.2f}s; leader {leader}")
    assert leader != dead  # a healthy leader with quorum is not deposed by a returning pod
    # Its re-adopted engine is routable cluster-wide again.
    for name in cluster3.names:
        _wait_models(cluster3.pods[name].url, True, "on-the-leader", 15.0)


def test_no_orphan_engines_after_a_clean_stop(cluster3: Cluster) -> None:
    for pod in cluster3.pods.values():
        # uvicorn re-raises the signal after its graceful shutdown: -15 is a clean stop.
        assert pod.stop(signal.SIGTERM) in (0, -signal.SIGTERM)
    deadline = time.monotonic() + 10
    while cluster3.orphans() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert cluster3.orphans() == [], "engines still running 10 s after every pod stopped"
