"""The deploy tier runs the Kubernetes tier's real kube-apiserver (one per module: the
manifests' tests register a CRD, cluster-wide), and drives it with a kubectl of the same
version."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testkit.kube import KUBECTL_ENV, KubeApiServer
from tests.deploy.kubectl import Kubectl, admin_kubectl
from tests.deploy.manifests import KustomizeMissing, kustomize_kubectl
from tests.kube.apiserver import running_apiserver


@pytest.fixture(scope="module")
def kube(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeApiServer]:
    """A ready API server for the module; both processes are killed at teardown."""
    with running_apiserver(tmp_path_factory.mktemp("kube")) as server:
        yield server


@pytest.fixture(scope="module")
def kubectl_bin() -> str:
    try:
        return os.environ.get(KUBECTL_ENV) or kustomize_kubectl()
    except KustomizeMissing as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def kubectl(
    kube: KubeApiServer, kubectl_bin: str, tmp_path_factory: pytest.TempPathFactory
) -> Kubectl:
    """``kubectl`` bound to the module's API server as admin."""
    return admin_kubectl(kube, kubectl_bin, tmp_path_factory.mktemp("kubeconfig"))
