"""Fixtures of the cluster tier: one shared 3-pod cluster, or a cluster of the module's own.

A cluster start costs 20-35 s on a loaded 2-core machine (three `sardeenz serve`
imports, the election, the first heartbeats), so modules share one where they can.

``shared_cluster`` (testkit/cluster.py's ``Cluster``): pods ``pod-a``..``pod-c`` on
127.0.0.1-3, two simulated ``NVIDIA L4:24GiB`` GPUs each (``SHARED_GPUS``), the tier's
short timings, no API keys; ``pod-a`` leads. It is started once per xdist worker, the
first time a module asks for it, and stopped at the end of the session. A module uses it
by taking the fixture::

    def test_something(shared_cluster: Cluster) -> None:
        inst = shared_cluster.load_on("pod-b", "my-module-model")
        ...

and may do so only if it leaves the cluster as it found it: every pod running (no kill,
no restart, no settings change), nothing of its own left loaded (unload what you load,
under names no other module uses). Both are checked before and after each module: a
module that leaves an instance behind fails at its teardown (and the instance is
unloaded, so the next module still starts clean); a dead pod fails the module that
killed it. A module that kills or restarts pods, or needs other settings (API keys,
other GPUs, a catalog), builds its own ``Cluster`` in a module-scoped fixture, as
test_moves.py and test_presets.py do; ``cluster3`` is a plain 3-pod one of that kind.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from testkit.cluster import Cluster

SHARED_GPUS = "NVIDIA L4:24GiB,NVIDIA L4:24GiB"


@pytest.fixture(scope="module")
def cluster3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """A 3-pod cluster of the module's own (each start costs seconds of CPU)."""
    cluster = Cluster(tmp_path_factory.mktemp("cluster3"), 3)
    try:
        yield cluster.start()
    finally:
        cluster.close()


@pytest.fixture(scope="session")
def shared_cluster_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The processes behind ``shared_cluster``; take ``shared_cluster``, not this."""
    cluster = Cluster(tmp_path_factory.mktemp("shared-cluster"), 3, SARDEENZ_SIM_GPUS=SHARED_GPUS)
    try:
        cluster.start()
        cluster.wait(
            lambda st: all(len(p["gpus"]) == 2 for s in st.values() for p in s["pods"]),
            30,
            "every pod's two GPUs in every heartbeat",
        )
        yield cluster
    finally:
        cluster.close()
        assert cluster.orphans() == []


def _loaded(cluster: Cluster) -> list[tuple[str, dict[str, Any]]]:
    return [(pod, i) for pod in cluster.names for i in cluster.instances(pod)]


def _check_whole(cluster: Cluster, when: str) -> None:
    dead = [n for n in cluster.names if n not in cluster.alive()]
    assert dead == [], f"shared cluster {when}: pods {dead} are not running"
    leader, _ = cluster.wait_one_leader(20.0)
    assert leader == "pod-a", f"shared cluster {when}: {leader} leads, not pod-a"


@pytest.fixture(scope="module")
def shared_cluster(shared_cluster_session: Cluster) -> Iterator[Cluster]:
    """The worker's shared 3-pod cluster, checked whole and empty around the module."""
    cluster = shared_cluster_session
    _check_whole(cluster, "before the module")
    assert _loaded(cluster) == [], "shared cluster not empty before the module"
    yield cluster
    _check_whole(cluster, "after the module")
    left = _loaded(cluster)
    if left:
        for pod, inst in left:
            cluster.unload(pod, inst["id"])
        names = sorted(f"{i['servedModelName']} on {pod}" for pod, i in left)
        raise AssertionError(f"the module left instances on the shared cluster: {names}")
