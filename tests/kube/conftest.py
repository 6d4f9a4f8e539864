"""Fixtures of the Kubernetes tier: one real kube-apiserver + etcd per test module.

The binaries come from ``make kube-env`` (``make test`` exports ``SARDEENZ_KUBE_APISERVER``
and ``SARDEENZ_ETCD``). Unset, the tier skips with a reason (pytest run by hand); set to a
missing file, it fails, so CI cannot skip it by accident. One API server per module: it
starts in about 5 s, and namespaces keep the module's tests apart.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kube.apiserver import KubeApiServer, KubeBinariesMissing, find_binaries


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    """A ready API server; both processes are killed and the folder removed at teardown."""
    try:
        apiserver, etcd = find_binaries()
    except KubeBinariesMissing as exc:
        pytest.skip(str(exc))
    except FileNotFoundError as exc:
        pytest.fail(str(exc))
    server = KubeApiServer(tmp_path_factory.mktemp("kube"), apiserver, etcd)
    server.start()
    try:
        yield server
    finally:
        server.stop()
