"""One 3-pod cluster for every module of this folder, started once.

tests/scheduling.py hands this folder to one xdist worker as one unit, so its modules
run one after another and the package-scoped cluster starts once for all of them (and
stops after the last one: nothing idles between them). Run by hand, pytest runs a
folder's modules one after another too.

``shared_cluster`` (testkit/cluster.py's ``Cluster``): pods ``pod-a``..``pod-c`` on
127.0.0.1-3, two simulated ``NVIDIA L4:24GiB`` GPUs each (``SHARED_GPUS``), the tier's
short timings, an applied preset reconciled every second, no API keys; ``pod-a`` leads.
A module uses it by taking the fixture::

    def test_something(shared_cluster: Cluster) -> None:
        inst = shared_cluster.load_on("pod-b", "my-module-model")
        ...

and belongs here only if it leaves the cluster as it found it:

- every pod running under pod-a: a module that stops a follower starts it again with
  ``shared_cluster.rejoin(pod)`` (same data dir) before it ends; one that kills the
  leader, cuts the network or needs other settings (API keys, other GPUs, a catalog
  file) builds its own cluster in ``tests/cluster/``;
- nothing of its own left: no instance, preset or catalog entry (unload and delete what
  you made, under names no other module uses). Request records, usage and memory
  profiles stay, so count only your own model names.

Both are checked before and after each module (``Cluster.leftovers``): a module that
leaves something fails at its teardown, naming what, and what it left is removed so the
next module still starts clean; a pod left dead fails the module that killed it and is
restarted.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.cluster import Cluster
from testkit.servers import HTTP

SHARED_GPUS = "NVIDIA L4:24GiB,NVIDIA L4:24GiB"


@pytest.fixture(scope="package")
def shared_cluster_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    """The processes behind ``shared_cluster``; take ``shared_cluster``, not this."""
    cluster = Cluster(
        tmp_path_factory.mktemp("shared-cluster"),
        3,
        SARDEENZ_SIM_GPUS=SHARED_GPUS,
        SARDEENZ_PRESET_RECONCILE_SECONDS="1",
    )
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


def _check_whole(cluster: Cluster, when: str) -> None:
    dead = [n for n in cluster.names if n not in cluster.alive()]
    for pod in dead:  # for the next module; this one fails below
        cluster.rejoin(pod)
    assert dead == [], f"shared cluster {when}: pods {dead} were not running"
    leader, _ = cluster.wait_one_leader(20.0)
    assert leader == "pod-a", f"shared cluster {when}: {leader} leads, not pod-a"


def _clean_up(cluster: Cluster) -> None:
    """Remove what a module left: its instances, presets and catalog entries."""
    leader = cluster.leader_url()
    for preset in HTTP.get(f"{leader}/api/cluster/presets", timeout=10).json():
        HTTP.delete(f"{leader}/api/cluster/presets/{preset['name']}", timeout=30)
    for entry in HTTP.get(f"{leader}/api/v1/catalog", timeout=10).json():
        HTTP.delete(f"{leader}/api/v1/catalog/{entry['name']}", timeout=30)
    for pod in cluster.names:
        for inst in cluster.instances(pod):
            cluster.unload(pod, inst["id"])


@pytest.fixture(scope="module")
def shared_cluster(shared_cluster_processes: Cluster) -> Iterator[Cluster]:
    """The folder's 3-pod cluster, checked whole and empty before and after the module."""
    cluster = shared_cluster_processes
    _check_whole(cluster, "before the module")
    assert cluster.leftovers() == [], "shared cluster not empty before the module"
    yield cluster
    _check_whole(cluster, "after the module")
    left = cluster.leftovers()
    if left:
        _clean_up(cluster)
        assert cluster.leftovers() == [], "the shared cluster could not be cleaned up"
        raise AssertionError(f"the module left this on the shared cluster: {left}")
