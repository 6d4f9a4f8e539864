"""Fixtures of the Kubernetes tier: one real kube-apiserver + etcd for the whole folder.

The binaries come from ``make kube-env`` (``make test`` exports ``SARDEENZ_KUBE_APISERVER``
and ``SARDEENZ_ETCD``). Unset, the tier skips with a reason (pytest run by hand); set to a
missing file, it fails, so CI cannot skip it by accident.

One API server for the folder: tests/scheduling.py hands this folder to one xdist worker
as one unit, so its modules run one after another on the package-scoped server (a start
costs about 3 s of CPU and 5-16 s), stopped after the last one. Each module works in
namespaces of its own (``create_namespace()``, ``KubePods``); nothing it creates outside
them may stay: ``kube`` compares the cluster-scoped objects (cluster roles and bindings,
CRDs) before and after each module and fails the module that left one, naming it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testkit.kube import KubeApiServer
from tests.kube.apiserver import running_apiserver


@pytest.fixture(scope="package")
def kube_processes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    """The processes behind ``kube``; take ``kube``, not this."""
    with running_apiserver(tmp_path_factory.mktemp("kube")) as server:
        yield server


@pytest.fixture(scope="module")
def kube(kube_processes: KubeApiServer) -> Iterator[KubeApiServer]:
    """The folder's ready API server, with the module's cluster-scoped leftovers checked."""
    before = kube_processes.cluster_scoped()
    yield kube_processes
    left = sorted(kube_processes.cluster_scoped() - before)
    assert left == [], f"the module left cluster-scoped objects on the shared API server: {left}"
